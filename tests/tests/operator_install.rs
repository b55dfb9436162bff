//! The agent installs flux-operator itself (`--operator-bundle`), against the real control
//! plane: bundles made at test time from flux-operator's module source (`kubectl kustomize
//! config/default` of two module versions), put in a ConfigMap or pushed with oras to a real
//! registry built from its Go module. Each test runs on a cluster of its own, since it changes
//! what the agent does and, in one case, stops the API server.

use std::{
    net::TcpListener,
    process::{Child, Command, Stdio},
    time::Duration,
};

use serde_json::{Value, json};
use tenantflux_tests::{TestCluster, bin_dir, operator_bundle, tool_path, wait_for};

const AGENT_NAMESPACE: &str = "tenantflux-system";
const BUNDLE_CONFIGMAP: &str = "flux-operator-bundle";
const RECORD: &str = "tenantflux-operator-install";
const TIMEOUT: Duration = Duration::from_secs(180);

/// One cluster at a time: the machine is small and each test starts its own.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn cluster(purpose: &str) -> TestCluster {
    TestCluster::start(&format!("op-{purpose}-{}", std::process::id()))
        .unwrap_or_else(|err| panic!("starting cluster for {purpose}: {err}"))
}

fn current_version() -> String {
    tool_path("FLUX_OPERATOR_VERSION").display().to_string()
}

fn previous_version() -> String {
    tool_path("FLUX_OPERATOR_PREVIOUS_VERSION")
        .display()
        .to_string()
}

fn bundle_text(version: &str) -> String {
    let path = operator_bundle(version).expect("operator-bundle");
    std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("{}: {err}", path.display()))
}

fn status(cluster: &TestCluster) -> Option<Value> {
    let output = cluster
        .kubectl_tenantflux(None, &["status", "-o", "json"])
        .ok()?;
    if !output.status.success() {
        return None;
    }
    serde_json::from_slice(&output.stdout).ok()
}

/// Waits until the agent's status reports the operator in `phase` and `check` holds for it.
async fn wait_operator(
    cluster: &TestCluster,
    what: &str,
    phase: &str,
    check: impl Fn(&Value) -> bool,
) -> Value {
    let mut last = Value::Null;
    let result = wait_for(what, TIMEOUT, || {
        let status = status(cluster);
        if let Some(s) = &status {
            last = s["operator"].clone();
        }
        let found = status
            .map(|s| s["operator"].clone())
            .filter(|o| o["phase"] == phase && check(o));
        async move { found }
    })
    .await;
    result.unwrap_or_else(|err| panic!("{err}; last operator status: {last:#}"))
}

fn put_bundle(cluster: &TestCluster, yaml: &str) {
    let map = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": BUNDLE_CONFIGMAP, "namespace": AGENT_NAMESPACE},
        "data": {"install.yaml": yaml},
    });
    cluster
        .apply_yaml(&map.to_string())
        .expect("apply the bundle ConfigMap");
}

fn get_json(cluster: &TestCluster, args: &[&str]) -> Value {
    let mut all = vec!["get"];
    all.extend_from_slice(args);
    all.extend(["-o", "json"]);
    let out = cluster.kubectl_ok(&all).expect("kubectl get");
    serde_json::from_str(&out).expect("kubectl get -o json")
}

fn operator_deployment(cluster: &TestCluster) -> Option<Value> {
    let output = cluster
        .kubectl(&[
            "-n",
            "flux-system",
            "get",
            "deployment",
            "flux-operator",
            "--show-managed-fields",
            "-o",
            "json",
        ])
        .ok()?;
    output
        .status
        .success()
        .then(|| serde_json::from_slice(&output.stdout).ok())
        .flatten()
}

fn image(deployment: &Value) -> String {
    deployment
        .pointer("/spec/template/spec/containers/0/image")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

fn available(deployment: &Value) -> bool {
    tenantflux_tests::condition_status(deployment, "Available") == Some("True")
        && deployment.pointer("/status/observedGeneration")
            == deployment.pointer("/metadata/generation")
}

/// The reasons of the Events recorded on the agent's install record.
fn event_reasons(cluster: &TestCluster) -> Vec<String> {
    let events = get_json(
        cluster,
        &[
            "-n",
            AGENT_NAMESPACE,
            "events",
            "--field-selector",
            &format!("involvedObject.name={RECORD}"),
        ],
    );
    events["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["reason"].as_str().map(str::to_owned))
        .collect()
}

async fn wait_event(cluster: &TestCluster, reason: &str) {
    wait_for(
        &format!("an Event {reason} on ConfigMap {RECORD}"),
        Duration::from_secs(60),
        || {
            let found = event_reasons(cluster).iter().any(|r| r == reason);
            async move { found.then_some(()) }
        },
    )
    .await
    .unwrap_or_else(|err| panic!("{err}; events: {:?}", event_reasons(cluster)));
}

fn record(cluster: &TestCluster) -> Value {
    get_json(cluster, &["-n", AGENT_NAMESPACE, "configmap", RECORD])
}

/// The bundle's YAML documents, split as kubectl writes them.
fn documents(yaml: &str) -> Vec<String> {
    yaml.split("\n---\n").map(str::to_owned).collect()
}

/// Every release the agent knows is accepted as its own `config/default`, read from the
/// flux-operator module of that version; for one that is not, the entries to put into the
/// table are printed.
#[test]
fn every_release_the_agent_knows_is_accepted_as_flux_operator_ships_it() {
    use tenantflux_agent::operator::bundle::{
        Bundle, ImageRules,
        releases::{KNOWN, crd_fingerprint},
    };
    use tenantflux_core::digest::sha256;
    let rules = ImageRules {
        registries: vec!["ghcr.io/controlplaneio-fluxcd/*".to_owned()],
        ..ImageRules::default()
    };
    let versions: Vec<&str> = KNOWN.iter().map(|r| r.version).collect();
    assert!(
        versions.contains(&current_version().as_str()),
        "the pinned release is known"
    );
    assert!(
        versions.contains(&previous_version().as_str()),
        "the previous release is known"
    );
    for release in KNOWN {
        let text = bundle_text(release.version);
        let checked = match Bundle::parse(&text, sha256(text.as_bytes()), "flux-system", &rules) {
            Ok(mut bundle) => bundle.check_release(KNOWN, &[], 0, &[]),
            Err(err) => Err(err),
        };
        if let Err(err) = checked {
            let mut prints = String::new();
            for doc in tenantflux_core::yaml::documents::<Value>(&text).unwrap() {
                if doc["kind"] == "CustomResourceDefinition" {
                    let (spec, schemas) = crd_fingerprint(&doc["spec"]);
                    prints.push_str(&format!(
                        "{}: spec {spec}, schemas {schemas:?}\n",
                        doc["metadata"]["name"]
                    ));
                }
            }
            panic!(
                "flux-operator {}: {err}\nits CRDs:\n{prints}",
                release.version
            );
        }
    }
}

#[tokio::test]
async fn configmap_bundle_installs_upgrades_restores_and_refuses_bad_bundles() {
    let _serial = SERIAL.lock().await;
    let cluster = cluster("cm");
    let previous = previous_version();
    let current = current_version();
    let envs = [
        (
            "TENANTFLUX_OPERATOR_BUNDLE",
            "configmap:flux-operator-bundle",
        ),
        ("TENANTFLUX_OPERATOR_VERSION", ">=0.58.0 <0.60.0"),
        ("TENANTFLUX_OPERATOR_RESYNC_INTERVAL", "1h"),
    ];
    cluster.restart_agent_with(&envs).expect("agent");

    // No ConfigMap yet: a clear reason, nothing installed.
    let failed = wait_operator(
        &cluster,
        "FAILED for the missing ConfigMap",
        "failed",
        |o| {
            o["reason"].as_str().is_some_and(|r| {
                r.contains("ConfigMap tenantflux-system/flux-operator-bundle does not exist")
            })
        },
    )
    .await;
    assert_eq!(failed["source"], "configmap:flux-operator-bundle");
    assert!(operator_deployment(&cluster).is_none());

    // The previous version. Pruning what a bundle no longer holds has no real case among the
    // releases the agent knows (they hold the same objects), so it is a unit test
    // (`pruning_keeps_crds_and_what_the_new_bundle_still_has`).
    let old_bundle = bundle_text(&previous);
    // A ClusterRole of the bundle's that someone else wrote first (another field manager, other
    // rules): the install takes it over and says so (issue 16, finding 2).
    cluster
        .apply_yaml(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: \
             flux-web-user\nrules:\n- apiGroups: ['']\n  resources: [configmaps]\n  verbs: [get]\n",
        )
        .expect("a ClusterRole flux-web-user of another manager");
    put_bundle(&cluster, &old_bundle);
    let ready = wait_operator(&cluster, "READY at the previous version", "ready", |o| {
        o["version"] == previous.as_str()
    })
    .await;
    let took_over = "ClusterRole flux-web-user was taken over from field manager \
                     \"tenantflux-tests\" (\".rules\"): the bundle's values apply now";
    assert_eq!(ready["notices"], json!([took_over]), "{ready:#}");
    wait_event(&cluster, "TookOver").await;
    let role = get_json(&cluster, &["clusterrole", "flux-web-user"]);
    assert_eq!(
        role["rules"],
        json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["get", "list", "watch"]}]),
        "the release's rules: {role:#}"
    );
    assert!(
        ready["bundleDigest"]
            .as_str()
            .is_some_and(|d| d.starts_with("sha256:"))
    );
    let deployment = operator_deployment(&cluster).expect("Deployment flux-operator");
    assert!(available(&deployment), "{deployment:#}");
    assert!(image(&deployment).ends_with(&format!(":{previous}")));
    assert_eq!(
        deployment["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "tenantflux-agent"
    );
    let managers: Vec<_> = deployment["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["operation"] == "Apply")
        .map(|f| f["manager"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(managers, ["tenantflux-agent"]);
    for crd in [
        "fluxinstances.fluxcd.controlplane.io",
        "fluxreports.fluxcd.controlplane.io",
        "resourcesets.fluxcd.controlplane.io",
    ] {
        let crd = get_json(&cluster, &["crd", crd]);
        assert_eq!(
            tenantflux_tests::condition_status(&crd, "Established"),
            Some("True")
        );
    }
    assert_eq!(record(&cluster)["data"]["version"], previous.as_str());
    wait_event(&cluster, "Installed").await;

    // The real operator runs against what the agent installed.
    cluster
        .run_flux_operator_process()
        .expect("flux-operator process on the agent's install");

    // Upgrade: a new bundle in the ConfigMap applies at once (the source is watched).
    put_bundle(&cluster, &bundle_text(&current));
    let upgraded = wait_operator(&cluster, "READY at the current version", "ready", |o| {
        o["version"] == current.as_str()
    })
    .await;
    assert_ne!(upgraded["bundleDigest"], ready["bundleDigest"]);
    assert_eq!(
        upgraded["notices"],
        json!([]),
        "a new bundle starts without notices"
    );
    let deployment = operator_deployment(&cluster).unwrap();
    assert!(image(&deployment).ends_with(&format!(":{current}")));
    wait_event(&cluster, "Upgraded").await;
    assert_eq!(record(&cluster)["data"]["version"], current.as_str());
    let digest = upgraded["bundleDigest"].clone();

    // Drift: an edited Deployment is restored, a deleted one recreated.
    cluster
        .kubectl_ok(&[
            "-n",
            "flux-system",
            "set",
            "image",
            "deployment/flux-operator",
            "manager=registry.invalid/evil:v6.6.6",
        ])
        .expect("edit the Deployment");
    wait_for(
        "the edited Deployment to be restored",
        Duration::from_secs(60),
        || {
            let restored = operator_deployment(&cluster)
                .is_some_and(|d| image(&d).ends_with(&format!("flux-operator:{current}")));
            async move { restored.then_some(()) }
        },
    )
    .await
    .unwrap();
    wait_event(&cluster, "DeploymentRestored").await;
    wait_operator(
        &cluster,
        "the takeover of the edit in the notices",
        "ready",
        |o| {
            o["notices"][0].as_str().is_some_and(|n| {
                n.starts_with(
                    "Deployment flux-system/flux-operator was taken over from field manager \
                 \"kubectl-set\" (\".spec.template.spec.containers[name=\\\"manager\\\"].image\"",
                )
            })
        },
    )
    .await;
    cluster
        .kubectl_ok(&["-n", "flux-system", "delete", "deployment", "flux-operator"])
        .expect("delete the Deployment");
    wait_for(
        "the deleted Deployment to be recreated and Available",
        Duration::from_secs(120),
        || {
            let back = operator_deployment(&cluster)
                .is_some_and(|d| available(&d) && d["metadata"]["deletionTimestamp"].is_null());
            async move { back.then_some(()) }
        },
    )
    .await
    .unwrap();
    wait_operator(&cluster, "READY after the restore", "ready", |_| true).await;

    // Bad bundles change nothing: the phase says why, the install keeps running.
    let assert_untouched = |cluster: &TestCluster| {
        let deployment = operator_deployment(cluster).expect("the Deployment is still there");
        assert!(image(&deployment).ends_with(&format!(":{current}")));
        assert!(available(&deployment));
        assert_eq!(record(cluster)["data"]["digest"], digest);
        let sa = get_json(
            cluster,
            &["-n", "flux-system", "serviceaccount", "flux-operator"],
        );
        assert!(
            sa["metadata"]["labels"]["tenantflux.test/marker"].is_null(),
            "nothing of a refused bundle was applied: {sa:#}"
        );
    };
    put_bundle(&cluster, "apiVersion: v1\nkind: [this is not\n");
    let failed = wait_operator(&cluster, "FAILED for a corrupt bundle", "failed", |o| {
        o["reason"]
            .as_str()
            .is_some_and(|r| r.contains("is not valid YAML"))
    })
    .await;
    assert!(
        failed["reason"]
            .as_str()
            .unwrap()
            .contains("nothing was applied"),
        "{failed:#}"
    );
    assert_eq!(failed["version"], current.as_str());
    assert_untouched(&cluster);
    wait_event(&cluster, "BundleRejected").await;

    // A bundle without the FluxInstance CRD, whose other objects would show if applied.
    let marked = bundle_text(&current).replacen(
        "kind: ServiceAccount\nmetadata:\n  labels:\n",
        "kind: ServiceAccount\nmetadata:\n  labels:\n    tenantflux.test/marker: half-applied\n",
        1,
    );
    assert!(marked.contains("tenantflux.test/marker"), "marker placed");
    let without_crd: Vec<_> = documents(&marked)
        .into_iter()
        .filter(|d| !d.contains("name: fluxinstances.fluxcd.controlplane.io"))
        .collect();
    put_bundle(&cluster, &without_crd.join("\n---\n"));
    wait_operator(&cluster, "FAILED for a missing CRD", "failed", |o| {
        o["reason"].as_str().is_some_and(|r| {
            r.contains("lacks CustomResourceDefinition fluxinstances.fluxcd.controlplane.io")
        })
    })
    .await;
    assert_untouched(&cluster);

    // A version outside what the agent may install.
    let too_new = marked.replace(&format!("flux-operator:{current}"), "flux-operator:v0.99.0");
    put_bundle(&cluster, &too_new);
    wait_operator(&cluster, "FAILED for a version not allowed", "failed", |o| {
        o["reason"].as_str().is_some_and(|r| {
            r.contains("flux-operator v0.99.0 is outside \">=0.58.0 <0.60.0\" allowed by --operator-version")
        })
    })
    .await;
    assert_untouched(&cluster);

    // What flux-operator's install never holds (issue 16, finding 2): each refused naming the
    // object and field, nothing of the bundle applied.
    let foreign_crd = "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: widgets.tenantflux.test\nspec:\n  group: tenantflux.test\n  names: {kind: Widget, plural: widgets}\n  scope: Namespaced\n  versions: []";
    let subject =
        "subjects:\n- kind: ServiceAccount\n  name: flux-operator\n  namespace: flux-system\n";
    assert!(marked.contains(subject), "the bundle binds flux-operator");
    let deployment_labels =
        "kind: Deployment\nmetadata:\n  labels:\n    app.kubernetes.io/name: flux-operator\n";
    assert!(
        marked.contains(deployment_labels),
        "the Deployment's labels"
    );
    let attacks = [
        (
            format!("{}\n---\n{foreign_crd}\n", marked.trim_end()),
            "CustomResourceDefinition \"widgets.tenantflux.test\" has spec.group \"tenantflux.test\"; a flux-operator bundle defines resources of fluxcd.controlplane.io only".to_owned(),
        ),
        (
            marked.replace(
                subject,
                &format!("{subject}- kind: ServiceAccount\n  name: default\n  namespace: kube-system\n"),
            ),
            "ClusterRoleBinding flux-operator-cluster-admin subjects[1] is \"ServiceAccount\" \"default\" in namespace \"kube-system\"; a bundle binds roles only to ServiceAccounts in the operator namespace \"flux-system\"".to_owned(),
        ),
        (
            marked.replace(
                subject,
                &format!("{subject}- kind: ServiceAccount\n  name: default\n  namespace: flux-system\n"),
            ),
            "ClusterRoleBinding flux-operator-cluster-admin subjects[1] is ServiceAccount \"default\", which the bundle does not hold; a bundle binds roles only to its own ServiceAccounts (flux-operator)".to_owned(),
        ),
        (
            replaced(&marked, "  name: flux-web-user\nrules:\n", "  name: flux-web-user\nrules:\n- apiGroups: ['']\n  resources: [secrets]\n  verbs: [get, delete]\n"),
            "ClusterRole flux-web-user rules[0] grants \"delete\" on \"secrets\" in group \"\", which flux-operator v0.58.0 to v0.59.0 do not grant that role".to_owned(),
        ),
        (
            replaced(&marked, "    app.kubernetes.io/part-of: flux-operator\n  name: flux-web-admin\n", "    app.kubernetes.io/part-of: flux-operator\n    rbac.authorization.k8s.io/aggregate-to-view: \"true\"\n  name: flux-web-admin\n"),
            "ClusterRole flux-web-admin has label \"rbac.authorization.k8s.io/aggregate-to-view\" (its rules would join ClusterRole \"view\")".to_owned(),
        ),
        (
            marked.replace(
                "ghcr.io/controlplaneio-fluxcd/flux-operator:",
                "docker.io/evil/flux-operator:",
            ),
            format!("Deployment flux-operator spec.template.spec.containers[0].image is \"docker.io/evil/flux-operator:{current}\", from none of the registries allowed (ghcr.io/controlplaneio-fluxcd/*; --operator-image-registry)"),
        ),
        (
            marked.replace(
                deployment_labels,
                &format!("{deployment_labels}    app.kubernetes.io/version: v0.58.0\n"),
            ),
            format!("Deployment flux-operator says version \"v0.58.0\" (label app.kubernetes.io/version) but runs image tag \"{current}\""),
        ),
        // A bundle equals its release but for images and allowed pod settings: another schema
        // (here one that stops validating FluxInstance specs) or other manager flags is
        // another program.
        (
            edited(&marked, |docs| {
                let crd = object_named(docs, "CustomResourceDefinition", "fluxinstances.fluxcd.controlplane.io");
                crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"] =
                    json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
            }),
            format!("CustomResourceDefinition fluxinstances.fluxcd.controlplane.io spec.versions[0].schema is not what flux-operator {current} ships"),
        ),
        (
            format!(
                "{}\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  name: flux-viewer\n  namespace: flux-system\nrules:\n- apiGroups: ['']\n  resources: [secrets]\n  verbs: [get, list]\n",
                marked.trim_end()
            ),
            "the bundle holds Role flux-viewer (rbac.authorization.k8s.io/v1), a kind the agent does not install".to_owned(),
        ),
        (
            edited(&marked, |docs| {
                let deployment = object_named(docs, "Deployment", "flux-operator");
                deployment["spec"]["template"]["spec"]["containers"][0]["args"] =
                    json!(["--watch-configs-label-selector=tenantflux.test/none"]);
            }),
            format!("Deployment flux-system/flux-operator spec.template.spec.containers[0].args is not what flux-operator {current} ships (the release has nothing there)"),
        ),
    ];
    for (bundle, reason) in &attacks {
        put_bundle(&cluster, bundle);
        wait_operator(&cluster, reason, "failed", |o| {
            o["reason"]
                .as_str()
                .is_some_and(|r| r.contains(reason.as_str()))
        })
        .await;
        assert_untouched(&cluster);
    }
    let crd = cluster
        .kubectl(&["get", "crd", "widgets.tenantflux.test"])
        .expect("kubectl");
    assert!(!crd.status.success(), "the foreign CRD was not created");

    // A good bundle again: back to READY.
    put_bundle(&cluster, &bundle_text(&current));
    let recovered = wait_operator(&cluster, "READY again", "ready", |_| true).await;
    assert_eq!(recovered["bundleDigest"], digest);
    wait_event(&cluster, "Recovered").await;
    let text = cluster
        .kubectl_tenantflux(None, &["status"])
        .expect("status");
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("  Source:      configmap:flux-operator-bundle\n"),
        "{text}"
    );
    assert!(
        text.contains("  Notices:\n    - Deployment flux-system/flux-operator was taken over"),
        "{text}"
    );

    // An agent that requires the operator's image by digest refuses the release's tag-only
    // image, changing nothing, and installs the same release pinned.
    let mut pinned_envs = envs.to_vec();
    pinned_envs.push(("TENANTFLUX_OPERATOR_REQUIRE_IMAGE_DIGEST", "true"));
    cluster.restart_agent_with(&pinned_envs).expect("agent");
    wait_operator(&cluster, "FAILED for an image by tag", "failed", |o| {
        o["reason"]
            .as_str()
            .is_some_and(|r| r.contains("not pinned by digest"))
    })
    .await;
    assert_untouched(&cluster);
    let pinned_image = format!(
        "ghcr.io/controlplaneio-fluxcd/flux-operator:{current}@sha256:{}",
        "0".repeat(64)
    );
    put_bundle(
        &cluster,
        &bundle_text(&current).replace(
            &format!("ghcr.io/controlplaneio-fluxcd/flux-operator:{current}"),
            &pinned_image,
        ),
    );
    wait_operator(&cluster, "READY with the image by digest", "ready", |o| {
        o["version"] == current.as_str()
    })
    .await;
    let deployment = operator_deployment(&cluster).unwrap();
    assert_eq!(image(&deployment), pinned_image);
}

/// The bundle `text` with `change` made to its objects, as JSON documents (YAML too).
fn edited(text: &str, change: impl FnOnce(&mut Vec<Value>)) -> String {
    let mut docs = tenantflux_core::yaml::documents::<Value>(text).expect("the bundle parses");
    change(&mut docs);
    let docs: Vec<String> = docs.iter().map(Value::to_string).collect();
    docs.join("\n---\n")
}

fn object_named<'a>(docs: &'a mut [Value], kind: &str, name: &str) -> &'a mut Value {
    docs.iter_mut()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("the bundle holds {kind} {name}"))
}

/// `text` with `from` replaced by `to`, which must be there.
fn replaced(text: &str, from: &str, to: &str) -> String {
    assert!(text.contains(from), "the bundle holds {from:?}");
    text.replacen(from, to, 1)
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// An agent process started by the test itself (the cluster script needs a serving API).
struct AgentProcess(Child);

impl Drop for AgentProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn metrics(admin: u16) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", admin))
        .await
        .ok()?;
    stream
        .write_all(b"GET /metrics HTTP/1.0\r\nHost: agent\r\n\r\n")
        .await
        .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await.ok()?;
    Some(response)
}

async fn wait_phase_metric(admin: u16, phase: &str, timeout: Duration) {
    let line = format!("tenantflux_agent_operator_phase{{phase=\"{phase}\"}} 1");
    let deadline = tokio::time::Instant::now() + timeout;
    let mut last = String::new();
    while tokio::time::Instant::now() < deadline {
        if let Some(text) = metrics(admin).await {
            if text.contains(&line) {
                return;
            }
            last = text;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let phases: Vec<_> = last
        .lines()
        .filter(|l| l.starts_with("tenantflux_agent_operator_phase{"))
        .collect();
    panic!("no {line} within {timeout:?}; phase series: {phases:?}");
}

/// The API server's address in a kubeconfig written by tests/env/cluster (`server: "https://…"`).
fn server_address(kubeconfig: &str) -> String {
    let start = kubeconfig.find("https://").expect("a server URL") + "https://".len();
    let end = start + kubeconfig[start..].find('"').expect("a quoted server URL");
    kubeconfig[start..end].to_owned()
}

/// Forwards TCP connections on `listener` to `target` (TLS passes through untouched), until
/// the task is aborted.
async fn forward(listener: tokio::net::TcpListener, target: String) {
    loop {
        let Ok((mut inbound, _)) = listener.accept().await else {
            return;
        };
        let target = target.clone();
        tokio::spawn(async move {
            if let Ok(mut outbound) = tokio::net::TcpStream::connect(&target).await {
                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
            }
        });
    }
}

#[tokio::test]
async fn agent_started_before_the_api_server_waits_then_installs() {
    let _serial = SERIAL.lock().await;
    let cluster = cluster("api");
    let current = current_version();
    // deploy/manifests, the agent's ServiceAccount kubeconfig and the bundle, while the API
    // serves; the agent the script starts only observes and is replaced below.
    cluster.ensure_agent().expect("agent setup");
    put_bundle(&cluster, &bundle_text(&current));
    let kubeconfig = cluster.dir().join("agent-kubeconfig.yaml");
    assert!(kubeconfig.is_file());

    // The agent reaches the API server through a port nothing listens on yet: to the agent,
    // the control plane is not serving. Stopping the real API server would also restart kwok,
    // whose restart leaves pods Pending (its server port is still taken).
    let real = std::fs::read_to_string(&kubeconfig).expect("agent kubeconfig");
    let server = server_address(&real);
    let proxy_port = free_port();
    let kubeconfig = cluster.dir().join("agent-kubeconfig-late.yaml");
    std::fs::write(
        &kubeconfig,
        real.replace(&server, &format!("127.0.0.1:{proxy_port}")),
    )
    .expect("write kubeconfig");
    let admin = free_port();
    let agent = AgentProcess(
        Command::new(bin_dir().join("tenantflux-agent"))
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env_remove("KUBERNETES_SERVICE_PORT")
            .env("KUBECONFIG", &kubeconfig)
            .env(
                "TENANTFLUX_GRPC_ADDRESS",
                format!("127.0.0.1:{}", free_port()),
            )
            .env("TENANTFLUX_ADMIN_ADDRESS", format!("127.0.0.1:{admin}"))
            .env("TENANTFLUX_NAMESPACE", AGENT_NAMESPACE)
            .env("TENANTFLUX_LOG_FORMAT", "text")
            .env(
                "TENANTFLUX_OPERATOR_BUNDLE",
                "configmap:flux-operator-bundle",
            )
            .env("TENANTFLUX_OPERATOR_VERSION", current.as_str())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(
                std::fs::File::create(cluster.dir().join("agent-before-api.log"))
                    .expect("log file"),
            )
            .spawn()
            .expect("start the agent"),
    );
    wait_phase_metric(admin, "waiting_for_api", Duration::from_secs(30)).await;
    // It keeps waiting, with no deadline, for as long as the API server is down: the port now
    // accepts and drops every connection, and only after the agent has come back to it three
    // times (proof that it retries instead of giving up) does it forward to the API server.
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", proxy_port))
        .await
        .expect("bind the API server's late port");
    for attempt in 1..=3 {
        let accepted = tokio::time::timeout(Duration::from_secs(60), listener.accept()).await;
        let (stream, _) = accepted
            .unwrap_or_else(|_| {
                panic!("the agent gave up: no connection attempt {attempt} within 60 s")
            })
            .expect("accept");
        drop(stream);
    }
    wait_phase_metric(admin, "waiting_for_api", Duration::from_secs(5)).await;

    let proxy = tokio::spawn(forward(listener, server));
    wait_phase_metric(admin, "ready", TIMEOUT).await;
    proxy.abort();
    let deployment = operator_deployment(&cluster).expect("Deployment flux-operator");
    assert!(available(&deployment));
    assert!(image(&deployment).ends_with(&format!(":{current}")));
    assert_eq!(record(&cluster)["data"]["version"], current.as_str());
    drop(agent);
    let log = std::fs::read_to_string(cluster.dir().join("agent-before-api.log")).unwrap();
    assert!(
        log.contains("waiting for the Kubernetes API server to answer /readyz"),
        "{log}"
    );
}

#[tokio::test]
async fn oci_bundle_installs_and_wrong_digest_or_registry_fail_without_touching_it() {
    let _serial = SERIAL.lock().await;
    let cluster = cluster("oci");
    let current = current_version();
    let registry = cluster.registry().expect("registry");
    let bundle = operator_bundle(&current).expect("bundle");
    let reference = format!("{registry}/controlplaneio-fluxcd/flux-operator-manifests:{current}");
    // With the distributions, as the real artifact: the agent learns the releases from it.
    let flux_data = tool_path("FLUX_OPERATOR_SRC").join("config/data/flux");
    let digest =
        tenantflux_tests::push_artifact(&reference, &bundle, Some(&flux_data)).expect("oras push");
    assert!(digest.starts_with("sha256:"), "{digest}");

    let pinned = format!("oci://{reference}@{digest}");
    let envs = |source: &str| {
        [
            ("TENANTFLUX_OPERATOR_BUNDLE", source.to_owned()),
            ("TENANTFLUX_OPERATOR_VERSION", current.clone()),
            ("TENANTFLUX_OPERATOR_BUNDLE_PLAIN_HTTP", "true".to_owned()),
        ]
    };
    let start = |source: &str| {
        let envs = envs(source);
        let envs: Vec<(&str, &str)> = envs.iter().map(|(k, v)| (*k, v.as_str())).collect();
        cluster.restart_agent_with(&envs).expect("agent");
    };
    start(&pinned);
    let ready = wait_operator(&cluster, "READY from the OCI artifact", "ready", |o| {
        o["version"] == current.as_str()
    })
    .await;
    assert_eq!(ready["bundleDigest"], digest.as_str());
    assert_eq!(ready["source"], pinned.as_str());
    assert!(available(&operator_deployment(&cluster).unwrap()));
    assert_eq!(record(&cluster)["data"]["digest"], digest.as_str());
    // The upgrade plan's releases come from that artifact (derived after the install), not
    // from the table built into the agent. Planning needs `get` on the FluxInstance.
    let admin = cluster
        .cluster_admin_token_user("op-planner")
        .expect("kubeconfig");
    let known = wait_for(
        "the plan's releases from the artifact",
        Duration::from_secs(60),
        || async {
            let output = cluster
                .kubectl_tenantflux(
                    Some(&admin),
                    &["upgrade", "plan", "--to", "2.9.x", "-o", "json"],
                )
                .ok()?;
            let plan: Value = serde_json::from_slice(&output.stdout).ok()?;
            let known = plan["knownReleases"].as_str()?.to_owned();
            known
                .contains("manifests artifact")
                .then_some((known, plan))
        },
    )
    .await
    .expect("releases from the artifact");
    assert_eq!(
        known.0,
        format!("flux-operator {current} manifests artifact {pinned} ({digest})")
    );
    assert!(
        known.1["target"]
            .as_str()
            .is_some_and(|t| t.starts_with("2.9.")),
        "{}",
        known.1
    );

    let still_running = |cluster: &TestCluster| {
        let deployment = operator_deployment(cluster).expect("the Deployment is still there");
        assert!(available(&deployment));
        assert_eq!(record(cluster)["data"]["digest"], digest.as_str());
    };
    let wrong = format!("sha256:{}", "0".repeat(64));
    start(&format!("oci://{reference}@{wrong}"));
    let failed = wait_operator(&cluster, "FAILED for a wrong digest", "failed", |o| {
        o["reason"].as_str().is_some_and(|r| {
            r.contains(&format!(
                "points at {digest}, not at the pinned digest {wrong}"
            ))
        })
    })
    .await;
    // The version running, from the Deployment: the refused bundle changed nothing.
    assert_eq!(failed["version"], current.as_str());
    still_running(&cluster);

    let unreachable = format!(
        "oci://127.0.0.1:{}/controlplaneio-fluxcd/flux-operator-manifests:{current}",
        free_port()
    );
    start(&unreachable);
    wait_operator(
        &cluster,
        "FAILED for an unreachable registry",
        "failed",
        |o| {
            o["reason"].as_str().is_some_and(|r| {
                r.starts_with(&format!(
                    "reading the bundle from {unreachable}: resolving the tag of"
                ))
            })
        },
    )
    .await;
    still_running(&cluster);
}

/// Signs `text` (a Policy) with `keys/ed25519.key` and pushes it as a ServiceAccount allowed to
/// update policies, as the platform does.
fn push_policy(cluster: &TestCluster, dir: &std::path::Path, name: &str, text: &str) {
    let plugin = |kubeconfig: Option<&std::path::Path>, args: &[&str]| {
        let output = cluster
            .kubectl_tenantflux(kubeconfig, args)
            .expect("kubectl tenantflux");
        assert!(output.status.success(), "{args:?}: {output:?}");
    };
    let unsigned = dir.join(format!("{name}.yaml"));
    let signed = dir.join(format!("{name}-signed.yaml"));
    std::fs::write(&unsigned, text).unwrap();
    let key = dir.join("keys/ed25519.key");
    plugin(
        None,
        &[
            "policy",
            "sign",
            "-f",
            unsigned.to_str().unwrap(),
            "--key",
            key.to_str().unwrap(),
            "--out",
            signed.to_str().unwrap(),
        ],
    );
    let platform = cluster
        .policy_pusher_kubeconfig()
        .expect("platform account");
    plugin(
        Some(&platform),
        &["policy", "push", "-f", signed.to_str().unwrap()],
    );
}

fn operator_policy(generation: u64, operator: &str) -> String {
    format!(
        "apiVersion: tenantflux.io/v1alpha1\nkind: Policy\nmetadata: {{name: platform}}\n\
         spec:\n  generation: {generation}\n  operator: {operator}\n"
    )
}

#[tokio::test]
async fn the_held_policy_decides_which_operator_versions_and_sources_install() {
    let _serial = SERIAL.lock().await;
    let cluster = cluster("policy");
    let current = current_version();
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys");
    let output = cluster
        .kubectl_tenantflux(None, &["policy", "keygen", "--out", keys.to_str().unwrap()])
        .expect("keygen");
    assert!(output.status.success(), "{output:?}");
    let public = keys.join("ed25519.pub");
    let envs = [
        (
            "TENANTFLUX_OPERATOR_BUNDLE",
            "configmap:flux-operator-bundle",
        ),
        ("TENANTFLUX_OPERATOR_VERSION", ">=0.58.0 <0.60.0"),
        ("TENANTFLUX_OPERATOR_RESYNC_INTERVAL", "1h"),
        ("TENANTFLUX_POLICY_PUBLIC_KEY", public.to_str().unwrap()),
    ];
    cluster.restart_agent_with(&envs).expect("agent");
    put_bundle(&cluster, &bundle_text(&current));
    wait_operator(&cluster, "READY under --operator-version", "ready", |o| {
        o["version"] == current.as_str()
    })
    .await;

    // A policy whose range leaves the installed version out replaces --operator-version.
    push_policy(
        &cluster,
        dir.path(),
        "policy-1",
        &operator_policy(1, "{versions: \">=0.99.0\"}"),
    );
    let outside =
        format!("flux-operator {current} is outside \">=0.99.0\" allowed by policy generation 1");
    wait_operator(&cluster, "FAILED for the policy's range", "failed", |o| {
        o["reason"].as_str().is_some_and(|r| r.contains(&outside))
    })
    .await;
    assert_eq!(
        image(&operator_deployment(&cluster).expect("still installed")),
        format!("ghcr.io/controlplaneio-fluxcd/flux-operator:{current}")
    );

    // A source the policy's patterns leave out is refused before it is read.
    push_policy(
        &cluster,
        dir.path(),
        "policy-2",
        &operator_policy(
            2,
            "{versions: \">=0.58.0\", bundles: [\"oci://registry.example.com/*\"]}",
        ),
    );
    wait_operator(&cluster, "FAILED for the policy's sources", "failed", |o| {
        o["reason"].as_str().is_some_and(|r| {
            r.contains("the bundle source configmap:flux-operator-bundle is not one of \"oci://registry.example.com/*\" allowed by policy generation 2; nothing was applied")
        })
    })
    .await;
    wait_event(&cluster, "BundleRejected").await;

    // A policy allowing both: installed and READY again.
    push_policy(
        &cluster,
        dir.path(),
        "policy-3",
        &operator_policy(3, "{versions: \">=0.58.0\", bundles: [\"configmap:*\"]}"),
    );
    wait_operator(&cluster, "READY under the policy", "ready", |o| {
        o["version"] == current.as_str()
    })
    .await;
}

const INSTANCES: &str = "fluxinstances.fluxcd.controlplane.io";
const REPORTS: &str = "fluxreports.fluxcd.controlplane.io";

/// The flux-operator version the FluxReport says wrote it, without a leading `v`.
fn reporting_operator(cluster: &TestCluster) -> Option<String> {
    let report = cluster.object(REPORTS, "flux-system", "flux")?;
    report["spec"]["operator"]["version"]
        .as_str()
        .map(|v| v.trim_start_matches('v').to_owned())
}

/// The agent upgrades flux-operator from the previous release to the pinned one under a
/// running Flux 2.9 (the real source- and kustomize-controller): the previous operator
/// rolled Flux out, the new one takes over (its FluxReport says so), and the FluxInstance
/// stays Ready at the same distribution, handling a reconcile request of the new operator.
#[tokio::test]
async fn operator_upgrade_keeps_the_flux_instance_ready() {
    let _serial = SERIAL.lock().await;
    let cluster = cluster("upgrade");
    let (previous, current) = (previous_version(), current_version());
    cluster
        .restart_agent_with(&[
            (
                "TENANTFLUX_OPERATOR_BUNDLE",
                "configmap:flux-operator-bundle",
            ),
            ("TENANTFLUX_OPERATOR_VERSION", ">=0.58.0 <0.60.0"),
            ("TENANTFLUX_OPERATOR_RESYNC_INTERVAL", "1h"),
        ])
        .expect("agent");
    put_bundle(&cluster, &bundle_text(&previous));
    wait_operator(&cluster, "READY at the previous version", "ready", |o| {
        o["version"] == previous.as_str()
    })
    .await;
    cluster
        .run_flux_operator_version(&previous)
        .expect("the previous flux-operator on the agent's install");
    let client = cluster.client().await.expect("client");
    tenantflux_tests::apply_flux_instance(&client, "2.9.x")
        .await
        .expect("FluxInstance");
    let ready = wait_for(
        "the FluxInstance Ready under the previous operator",
        Duration::from_secs(300),
        || async {
            let instance = cluster.object(INSTANCES, "flux-system", "flux")?;
            // flux-operator may report Ready a status write before lastAppliedRevision.
            let applied = instance["status"]["lastAppliedRevision"].is_string();
            (tenantflux_tests::flux::ready_now(&instance) == Some("True") && applied)
                .then_some(instance)
        },
    )
    .await
    .expect("Ready FluxInstance");
    let applied = ready["status"]["lastAppliedRevision"].clone();
    assert!(
        applied.as_str().is_some_and(|r| r.starts_with("v2.9.")),
        "{ready:#}"
    );
    wait_for(
        "the previous operator's FluxReport",
        Duration::from_secs(120),
        || async {
            (reporting_operator(&cluster)? == previous.trim_start_matches('v')).then_some(())
        },
    )
    .await
    .expect("FluxReport of the previous operator");

    // The upgrade: the agent rolls out the new Deployment; its process replaces the old one.
    put_bundle(&cluster, &bundle_text(&current));
    wait_operator(&cluster, "READY at the current version", "ready", |o| {
        o["version"] == current.as_str()
    })
    .await;
    let deployment = operator_deployment(&cluster).expect("Deployment flux-operator");
    assert!(image(&deployment).ends_with(&format!(":{current}")));
    cluster
        .run_flux_operator_version(&current)
        .expect("the new flux-operator");
    wait_for(
        "the new operator's FluxReport",
        Duration::from_secs(120),
        || async {
            (reporting_operator(&cluster)? == current.trim_start_matches('v')).then_some(())
        },
    )
    .await
    .expect("FluxReport of the new operator");
    // A request the new operator must handle: the FluxInstance is reconciled by it, Ready, at
    // the distribution it had.
    let requested = format!("upgrade-{}", std::process::id());
    cluster
        .kubectl_ok(&[
            "-n",
            "flux-system",
            "annotate",
            "--overwrite",
            "fluxinstance/flux",
            &format!("reconcile.fluxcd.io/requestedAt={requested}"),
        ])
        .expect("annotate");
    let after = wait_for(
        "the FluxInstance reconciled by the new operator",
        Duration::from_secs(300),
        || async {
            let instance = cluster.object(INSTANCES, "flux-system", "flux")?;
            (instance["status"]["lastHandledReconcileAt"] == requested.as_str()
                && tenantflux_tests::flux::ready_now(&instance) == Some("True"))
            .then_some(instance)
        },
    )
    .await
    .expect("Ready after the operator upgrade");
    // "2.9.x" is a range: each operator installs the newest 2.9 patch it ships, so the new
    // one moves the instance to its own (what the embedded table, checked against its data by
    // tests/tests/releases.rs, says), within the minor and without a stop.
    let newest = tenantflux_core::releases::Releases::embedded()
        .resolve(
            &tenantflux_core::policy::Range::parse("2.9.x").unwrap(),
            None,
        )
        .unwrap();
    assert!(
        after["status"]["lastAppliedRevision"]
            .as_str()
            .is_some_and(|r| r.starts_with(&format!("v{newest}@"))),
        "before the upgrade {applied}, after: {after:#}"
    );
    cluster.down().expect("down");
}

/// The platform's vouching, end to end on a real registry: a flux-operator release the agent's
/// build does not know (made from the pinned release's `config/default` with a new CRD field, a
/// new manager flag and a version the table lacks) is refused until a signed policy names its
/// digest, then installed and reported as vouched; other bytes under the same tag, a rule or a
/// host path the vouching does not cover, and a replayed older policy are refused.
#[tokio::test]
async fn a_release_the_build_lacks_installs_once_the_platform_vouches_for_it() {
    let _serial = SERIAL.lock().await;
    let cluster = cluster("vouch");
    let current = current_version();
    let unknown = "v0.61.0";
    let registry = cluster.registry().expect("registry");
    let repository = format!("{registry}/controlplaneio-fluxcd/flux-operator-manifests");
    let flux_data = tool_path("FLUX_OPERATOR_SRC").join("config/data/flux");
    let work = tempfile::tempdir().unwrap();
    let push = |tag: &str, text: &str| {
        let file = work.path().join(format!("install-{tag}.yaml"));
        std::fs::write(&file, text).unwrap();
        tenantflux_tests::push_artifact(&format!("{repository}:{tag}"), &file, Some(&flux_data))
            .expect("oras push")
    };
    // The release the review compares with, where the review looks for it by default.
    push(&current, &bundle_text(&current));
    let release = edited(&bundle_text(&current).replace(&current, unknown), |docs| {
        let crd = object_named(docs, "CustomResourceDefinition", INSTANCES);
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
            ["channel"] = json!({"type": "string"});
        let deployment = object_named(docs, "Deployment", "flux-operator");
        let args = &mut deployment["spec"]["template"]["spec"]["containers"][0]["args"];
        if !args.is_array() {
            *args = json!([]);
        }
        args.as_array_mut()
            .unwrap()
            .push(json!("--schedules-enabled=true"));
    });
    let digest = push(unknown, &release);

    let keys = work.path().join("keys");
    let plugin = |args: &[&str]| {
        cluster
            .kubectl_tenantflux(None, args)
            .expect("kubectl tenantflux")
    };
    assert!(
        plugin(&["policy", "keygen", "--out", keys.to_str().unwrap()])
            .status
            .success()
    );
    let public = keys.join("ed25519.pub");
    let source = format!("oci://{repository}:{unknown}");
    let start = |source: &str| {
        cluster
            .restart_agent_with(&[
                ("TENANTFLUX_OPERATOR_BUNDLE", source),
                ("TENANTFLUX_OPERATOR_VERSION", ">=0.58.0"),
                ("TENANTFLUX_OPERATOR_BUNDLE_PLAIN_HTTP", "true"),
                ("TENANTFLUX_POLICY_PUBLIC_KEY", public.to_str().unwrap()),
            ])
            .expect("agent")
    };

    // Step 1: unvouched, refused naming the command that vouches for it; nothing applied.
    start(&source);
    wait_operator(&cluster, "FAILED for an unknown release", "failed", |o| {
        o["reason"].as_str().is_some_and(|r| {
            r.contains(&format!(
                "flux-operator {unknown} (bundle {digest}) is not a release"
            )) && r.contains("kubectl tenantflux operator vouch")
        })
    })
    .await;
    assert!(
        operator_deployment(&cluster).is_none(),
        "nothing was applied"
    );

    // Step 2: the review shows the new field and flag against the nearest known release.
    let output = plugin(&["operator", "review", &source, "--plain-http", "-o", "json"]);
    assert!(output.status.success(), "{output:?}");
    let review: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(review["digest"], digest.as_str());
    assert_eq!(review["againstVersion"], current.as_str());
    let changes = review["crdsChanged"].to_string();
    assert!(
        changes.contains("spec.channel") && changes.contains("added (string)"),
        "{changes}"
    );
    let deployment = review["deployment"].to_string();
    assert!(
        deployment.contains("--schedules-enabled=true"),
        "{deployment}"
    );
    let table = plugin(&["operator", "review", &source, "--plain-http"]);
    assert!(String::from_utf8_lossy(&table.stdout).contains("spec.channel: added (string)"));

    // Step 3: vouch (generation 1 -> 2), sign, push: installed and READY, reported as vouched.
    let policy = work.path().join("policy.yaml");
    std::fs::write(&policy, operator_policy(1, "{versions: \">=0.58.0\"}")).unwrap();
    let policy_path = policy.to_str().unwrap();
    let output = plugin(&[
        "operator",
        "vouch",
        &source,
        "--plain-http",
        "-f",
        policy_path,
        "--out",
        policy_path,
    ]);
    assert!(output.status.success(), "{output:?}");
    assert!(String::from_utf8_lossy(&output.stderr).contains("spec.generation raised to 2"));
    let vouched = std::fs::read_to_string(&policy).unwrap();
    assert!(vouched.contains(&digest), "{vouched}");
    push_policy(&cluster, work.path(), "vouched-2", &vouched);
    let ready = wait_operator(&cluster, "READY as vouched", "ready", |o| {
        o["version"] == unknown
    })
    .await;
    assert_eq!(ready["trust"], "vouched");
    assert_eq!(ready["vouchedGeneration"], 2);
    assert_eq!(ready["bundleDigest"], digest.as_str());
    let table = plugin(&["status"]);
    assert!(
        String::from_utf8_lossy(&table.stdout).contains("vouched for by policy generation 2"),
        "{table:?}"
    );

    // Step 4: other bytes under the same tag: refused naming both digests, the install stays.
    let other = push(
        unknown,
        &release.replace("--schedules-enabled=true", "--schedules-enabled=false"),
    );
    start(&source);
    wait_operator(&cluster, "FAILED for other bytes", "failed", |o| {
        o["reason"]
            .as_str()
            .is_some_and(|r| r.contains(&digest) && r.contains(&other))
    })
    .await;
    assert!(available(
        &operator_deployment(&cluster).expect("still installed")
    ));

    // Step 5: a vouched release whose ClusterRole grants a rule the vouching does not name.
    let wider = edited(&release.replace(unknown, "v0.61.1"), |docs| {
        let role = object_named(docs, "ClusterRole", "flux-operator-edit");
        role["rules"]
            .as_array_mut()
            .unwrap()
            .push(json!({"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}));
    });
    let wider_digest = push("v0.61.1", &wider);
    // Step 6: a vouched release with a host path.
    let host = edited(&release.replace(unknown, "v0.61.2"), |docs| {
        let deployment = object_named(docs, "Deployment", "flux-operator");
        deployment["spec"]["template"]["spec"]["volumes"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "host", "hostPath": {"path": "/"}}));
    });
    let host_digest = push("v0.61.2", &host);
    let by_hand = |generation: u64| {
        format!(
            "apiVersion: tenantflux.io/v1alpha1\nkind: Policy\nmetadata: {{name: platform}}\n\
             spec:\n  generation: {generation}\n  operator:\n    versions: \">=0.58.0\"\n    vouched:\n\
             \x20     - {{version: v0.61.1, digest: \"{wider_digest}\"}}\n\
             \x20     - {{version: v0.61.2, digest: \"{host_digest}\"}}\n"
        )
    };
    push_policy(&cluster, work.path(), "by-hand-3", &by_hand(3));
    start(&format!("oci://{repository}:v0.61.1"));
    wait_operator(
        &cluster,
        "FAILED for a rule not vouched for",
        "failed",
        |o| {
            o["reason"].as_str().is_some_and(|r| {
                r.contains("ClusterRole flux-operator-edit rules[")
                    && r.contains("\"get\" on \"secrets\" in group \"\"")
            })
        },
    )
    .await;
    start(&format!("oci://{repository}:v0.61.2"));
    wait_operator(&cluster, "FAILED for a host path", "failed", |o| {
        o["reason"].as_str().is_some_and(|r| r.contains("hostPath"))
    })
    .await;
    assert_eq!(
        image(&operator_deployment(&cluster).expect("still installed")),
        format!("ghcr.io/controlplaneio-fluxcd/flux-operator:{unknown}")
    );

    // Step 7: generation 3 withdrew v0.61.0; the signed generation 2 that vouched for it,
    // replayed, is refused.
    let platform = cluster
        .policy_pusher_kubeconfig()
        .expect("platform account");
    let replay = cluster
        .kubectl_tenantflux(
            Some(&platform),
            &[
                "policy",
                "push",
                "-f",
                work.path().join("vouched-2-signed.yaml").to_str().unwrap(),
            ],
        )
        .expect("kubectl tenantflux");
    assert!(!replay.status.success(), "{replay:?}");
    assert!(
        String::from_utf8_lossy(&replay.stderr).contains("generation"),
        "{replay:?}"
    );
    start(&source);
    wait_operator(
        &cluster,
        "FAILED once the vouching is withdrawn",
        "failed",
        |o| {
            o["reason"]
                .as_str()
                .is_some_and(|r| r.contains("kubectl tenantflux operator vouch"))
        },
    )
    .await;

    // Step 8: one signed statement rolls a new release out: `vouch --rollout` names the source
    // pinned by digest, and the agent (still configured with another source) installs it.
    let next = push("v0.61.3", &release.replace(unknown, "v0.61.3"));
    let next_source = format!("oci://{repository}:v0.61.3");
    let rollout = work.path().join("rollout.yaml");
    std::fs::write(&rollout, by_hand(3)).unwrap();
    let rollout_path = rollout.to_str().unwrap();
    let output = plugin(&[
        "operator",
        "vouch",
        &next_source,
        "--plain-http",
        "--rollout",
        "-f",
        rollout_path,
        "--out",
        rollout_path,
    ]);
    assert!(output.status.success(), "{output:?}");
    push_policy(
        &cluster,
        work.path(),
        "rollout-4",
        &std::fs::read_to_string(&rollout).unwrap(),
    );
    let pinned = format!("{next_source}@{next}");
    let ready = wait_operator(&cluster, "READY from the policy's bundle", "ready", |o| {
        o["version"] == "v0.61.3"
    })
    .await;
    assert_eq!(ready["source"], pinned.as_str());
    assert_eq!(ready["trust"], "vouched");
    assert_eq!(ready["vouchedGeneration"], 4);
}

#[path = "../src/release_table.rs"]
mod release_table;

/// The agent's table is what `deploy/operator-releases` writes for the releases it lists, so a
/// maintainer regenerates it rather than editing digests by hand.
#[test]
fn the_release_table_is_what_the_generator_writes() {
    use tenantflux_agent::operator::bundle::releases::KNOWN;
    let releases: Vec<(String, String)> = KNOWN
        .iter()
        .map(|r| (r.version.to_owned(), bundle_text(r.version)))
        .collect();
    let generated = release_table::render(&releases).expect("the generator");
    let path = tenantflux_tests::repo_root().join("agent/src/operator/bundle/release_table.rs");
    let written = std::fs::read_to_string(&path).expect("table.rs");
    // rustfmt may wrap lines and add trailing commas; the tokens must be the same.
    let tokens = |text: &str| -> String {
        let joined: String = text.split_whitespace().collect();
        joined
            .replace(",]", "]")
            .replace(",}", "}")
            .replace(",)", ")")
    };
    assert_eq!(
        tokens(&generated),
        tokens(&written),
        "{} is not what deploy/operator-releases writes: run it",
        path.display()
    );
    let versions: Vec<String> = KNOWN.iter().map(|r| r.version.to_owned()).collect();
    let core =
        std::fs::read_to_string(tenantflux_tests::repo_root().join("agent/core/src/operator.rs"))
            .unwrap();
    assert!(core.contains(&release_table::known_releases_line(&versions)));
}
