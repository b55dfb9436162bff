//! Adopting the Flux that runs already, against the real control plane, the real flux-operator
//! and the real source-controller and kustomize-controller: the install Cozystack's removed
//! tenant add-on leaves behind, made with the real `helm` binary — release `fluxcd-operator`
//! (a chart the test builds from flux-operator's release manifests, with `hostNetwork`, the
//! not-ready toleration and 100m/350Mi) and release `fluxcd` (FluxInstance `flux` with the
//! add-on's components, cluster settings and kustomize patches), both in `cozy-fluxcd`.
//!
//! The old operator is flux-operator v0.58.1 (FLUX_OPERATOR_PREVIOUS_VERSION, already built for
//! the other tests): the add-on's v0.50.0 is not served by the Go module proxy, and building
//! the oldest one served (v0.53.0) would add minutes of cold CI for no other difference the
//! adoption sees (it never reads the operator's version beyond its image tag). The distribution
//! is `2.9.x`, not the add-on's `2.8.x`: kustomize-controller v1.8.x is not served here either,
//! so 2.8 could not reconcile anything. Components the environment cannot run
//! (helm-controller, notification-controller, the image controllers, source-watcher) stay
//! Deployments without a process, as elsewhere.
//!
//! Each test has a cluster of its own (adoption moves the operator namespace). The Cozystack
//! test: nothing to adopt
//! says so (exit 0); the plan names what runs, Helm's releases and their records; two
//! FluxInstances are refused naming both, with nothing changed, and a flux-operator Deployment
//! outside the operator namespace is a decoy, named as ignored; the policy's verdict for a
//! non-compliant and a compliant policy; the agent started with `--adopt` is killed (SIGKILL)
//! inside the adoption and, restarted, ends as an uninterrupted adoption does; the controllers'
//! Deployments are unchanged and their processes keep their PIDs; the app is Ready at its
//! revision and a new commit is applied. Observe-only, every object of both releases is marked
//! `helm.sh/resource-policy: keep` live and in the records (the NetworkPolicy, which the agent
//! may not annotate, is named with the command); a `helm upgrade` that drops the Service leaves
//! it and its unkept record is reported until `adopt apply`; `helm uninstall` of the operator's
//! release leaves every object; the operator's Deployment deleted is a problem in status, and
//! the agent with a bundle restores it. `adopt apply` again changes nothing; a stray `helm
//! upgrade` of the instance's release is reported until `adopt apply` releases the instance
//! again; `helm uninstall` of it leaves the FluxInstance; and with the agent uninstalled,
//! flux-operator, the FluxInstance and the controllers still run and a new commit is still
//! applied. The `flux install` test is described where it is defined.

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use serde_json::{Value, json};
use tenantflux_tests::{
    TestCluster, agent_user_with_role, cozystack, ensure_packaging_tools,
    flux::{GitRepo, revision},
    json, operator_bundle, path, repo_root, stderr, stdout,
    tenant::{AGENT_NAMESPACE, defaults_record, wait_enforced},
    tool_path, wait_for,
};

const NS: &str = "cozy-fluxcd";
/// A ServiceAccount in namespace `default` that a record of the operator's release names.
const PLANTED: &str = "tenantflux-planted";
const CONTROLLERS: [&str; 7] = [
    "source-controller",
    "source-watcher",
    "kustomize-controller",
    "helm-controller",
    "notification-controller",
    "image-reflector-controller",
    "image-automation-controller",
];
/// The controllers that run as processes here.
const RUNNING: [&str; 2] = ["source-controller", "kustomize-controller"];

/// Once the controllers that run here run as processes: Git repository `name` holding the app
/// at value "one", served, and its GitRepository and Kustomization applied (see [`apply_app`]);
/// the repository and that commit.
async fn serve_app(cluster: &TestCluster, name: &str) -> (GitRepo, String) {
    for controller in RUNNING {
        cluster
            .flux_controller_runs(controller, &format!("{controller}-v1.9.4"))
            .await
            .unwrap_or_else(|err| panic!("{controller}: {err}"));
    }
    let repo = GitRepo::new(name).unwrap();
    let rev = repo
        .commit(&[("app/configmap.yaml", &app_config("one"))], &[], "one")
        .unwrap();
    let url = cluster.git_server(&repo).unwrap();
    apply_app(cluster, &url);
    (repo, rev)
}

/// GitRepository and Kustomization apps/app from `url`, and what a multitenant Flux needs to
/// apply them: the Kustomization applies as the namespace's default ServiceAccount, which the
/// tenant grants `edit` there.
fn apply_app(cluster: &TestCluster, url: &str) {
    cluster
        .apply_yaml(&format!(
            "apiVersion: v1\nkind: Namespace\nmetadata: {{name: apps}}\n---\n\
             apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\n\
             metadata: {{name: flux-apply, namespace: apps}}\n\
             roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: edit}}\n\
             subjects: [{{kind: ServiceAccount, name: default, namespace: apps}}]\n---\n\
             apiVersion: source.toolkit.fluxcd.io/v1\nkind: GitRepository\n\
             metadata: {{name: app, namespace: apps}}\n\
             spec: {{interval: 5s, url: \"{url}\", ref: {{branch: main}}}}\n---\n\
             apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\n\
             metadata: {{name: app, namespace: apps}}\n\
             spec: {{interval: 1m, path: ./app, prune: true, sourceRef: {{kind: GitRepository, name: app}}}}\n"
        ))
        .expect("the app");
}

/// The agent as Cozystack's add-on package configures it (deploy/cozystack: the system
/// package vendored by its Makefile, rendered with the values of the add-on's HelmRelease).
struct Package {
    objects: Vec<Value>,
    env: Vec<(String, String)>,
}

impl Package {
    fn render() -> Self {
        let objects =
            cozystack::Vendored::new().objects(&cozystack::addon_release(&cozystack::enabled()));
        let env = cozystack::agent_env(&objects);
        Self { objects, env }
    }

    /// The value the package gives the agent's environment variable `name`.
    fn env(&self, name: &str) -> String {
        self.env
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| panic!("the package sets {name}: {:?}", self.env))
    }

    /// What else it renders into the tenant cluster whose `kind` or name matches.
    fn rendered(&self, pick: impl Fn(&Value) -> bool) -> String {
        let picked: Vec<String> = self
            .objects
            .iter()
            .filter(|o| pick(o))
            .map(Value::to_string)
            .collect();
        picked.join("\n---\n")
    }
}

/// The app both tests reconcile: ConfigMap apps/app holding `value`.
fn app_config(value: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: app, namespace: apps}}\ndata: {{value: {value}}}\n"
    )
}

fn helm(cluster: &TestCluster, args: &[&str]) -> String {
    let output = Command::new(tool_path("HELM"))
        .args(args)
        .arg("--kubeconfig")
        .arg(cluster.kubeconfig())
        .output()
        .expect("helm");
    assert!(output.status.success(), "helm {args:?}: {output:?}");
    stdout(&output)
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// A chart made of `documents` (as JSON, which is YAML Helm does not template), all in
/// `templates/`: flux-operator's chart renders its CRDs as templates (`installCRDs`), so its
/// release holds them.
fn chart(dir: &Path, name: &str, version: &str, documents: &[Value]) -> PathBuf {
    let root = dir.join(name);
    write(
        &root.join("Chart.yaml"),
        &format!(
            "apiVersion: v2\nname: {name}\nversion: {}\nappVersion: {version}\n",
            version.trim_start_matches('v')
        ),
    );
    for (index, document) in documents.iter().enumerate() {
        let text = document.to_string();
        assert!(!text.contains("{{"), "a document Helm would template");
        write(&root.join(format!("templates/{index:02}.yaml")), &text);
    }
    root
}

/// flux-operator's release manifests as Cozystack's chart installs them: in `cozy-fluxcd`
/// (the release creates no namespace of its own), `hostNetwork`, the not-ready toleration,
/// 100m/350Mi; and with the metadata flux-operator's chart (0.49/0.50) gives them: its labels
/// on every object, and `helm.sh/resource-policy: keep` on the CRDs, which its templates hold.
fn operator_chart_documents(version: &str) -> Vec<Value> {
    let mut documents = Vec::new();
    for mut document in operator_release_documents(version) {
        if document["kind"] == "Namespace" {
            continue;
        }
        if document["metadata"]["namespace"].is_string() {
            document["metadata"]["namespace"] = json!(NS);
        }
        let subjects = document.get_mut("subjects").and_then(Value::as_array_mut);
        for subject in subjects.into_iter().flatten() {
            subject["namespace"] = json!(NS);
        }
        documents.push(document);
    }
    documents
}

/// flux-operator's release manifests of `version` as they are (in `flux-system`, as the
/// release's OCI artifact holds them) with Cozystack's pod settings and the chart's metadata
/// (see [`operator_chart_documents`]): what the agent gets as a bundle, and moves into the
/// operator namespace itself.
fn operator_release_documents(version: &str) -> Vec<Value> {
    let install = std::fs::read_to_string(operator_bundle(version).unwrap()).unwrap();
    let mut documents = Vec::new();
    for mut document in tenantflux_core::yaml::documents::<Value>(&install).unwrap() {
        let labels = document["metadata"]
            .as_object_mut()
            .unwrap()
            .entry("labels")
            .or_insert_with(|| json!({}));
        for (key, value) in [
            ("app.kubernetes.io/name", "flux-operator"),
            ("app.kubernetes.io/instance", "fluxcd-operator"),
            ("app.kubernetes.io/version", version),
            ("helm.sh/chart", "flux-operator-0.50.0"),
        ] {
            labels[key] = json!(value);
        }
        if document["kind"] == "CustomResourceDefinition" {
            document["metadata"]["annotations"]["helm.sh/resource-policy"] = json!("keep");
        }
        if document["kind"] == "Deployment" {
            let pod = &mut document["spec"]["template"]["spec"];
            pod["hostNetwork"] = json!(true);
            pod["tolerations"] = json!([{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoSchedule"}]);
            pod["containers"][0]["resources"] = json!({
                "requests": {"cpu": "100m", "memory": "350Mi"},
                "limits": {"cpu": "100m", "memory": "350Mi"},
            });
        }
        documents.push(document);
    }
    documents
}

/// The NetworkPolicy flux-operator's chart renders by default (`web.networkPolicy.create`), a
/// kind the agent may neither read nor annotate.
fn web_network_policy() -> Value {
    json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "flux-operator-web", "namespace": NS},
        "spec": {
            "policyTypes": ["Ingress"],
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": "flux-operator"}},
            "ingress": [{"from": [{"namespaceSelector": {}}], "ports": [{"protocol": "TCP", "port": 9080}]}],
        },
    })
}

fn add_args(target: &str, args: &[&str]) -> Value {
    let patch: String = args
        .iter()
        .map(|a| {
            format!("- op: add\n  path: /spec/template/spec/containers/0/args/-\n  value: {a}\n")
        })
        .collect();
    json!({"target": {"kind": "Deployment", "name": target}, "patch": patch})
}

/// FluxInstance `flux` as the add-on's `fluxcd` release holds it (2.9.x here, see the module
/// docs).
fn cozystack_instance() -> Value {
    json!({
        "apiVersion": "fluxcd.controlplane.io/v1",
        "kind": "FluxInstance",
        "metadata": {"name": "flux", "namespace": NS},
        "spec": {
            "distribution": {"version": "2.9.x", "registry": "ghcr.io/fluxcd"},
            "components": CONTROLLERS,
            "cluster": {"networkPolicy": true, "domain": "cozy.local"},
            "kustomize": {"patches": [
                add_args("(kustomize-controller|helm-controller)", &["--concurrent=20", "--requeue-dependency=5s"]),
                {
                    "target": {"kind": "Deployment", "name": "(kustomize-controller|helm-controller|source-controller|source-watcher)"},
                    "patch": "- op: add\n  path: /spec/template/spec/containers/0/resources/limits\n  value: {cpu: 2000m, memory: 2Gi}\n",
                },
                add_args("source-controller", &["--storage-adv-addr=source-controller.cozy-fluxcd.svc"]),
                add_args("source-watcher", &["--storage-adv-addr=source-watcher.cozy-fluxcd.svc"]),
                add_args(
                    "(kustomize-controller|helm-controller|source-controller|source-watcher|image-reflector-controller|image-automation-controller)",
                    &["--events-addr=http://notification-controller.cozy-fluxcd.svc/"],
                ),
            ]},
        },
    })
}

/// Each controller Deployment's generation and pod template, and each running process's pid.
fn controllers_now(cluster: &TestCluster) -> Value {
    let mut out = serde_json::Map::new();
    for name in CONTROLLERS {
        let deployment = cluster
            .object("deployments", NS, name)
            .unwrap_or_else(|| panic!("Deployment {NS}/{name}"));
        out.insert(
            name.into(),
            json!({
                "generation": deployment["metadata"]["generation"],
                "template": deployment["spec"]["template"],
            }),
        );
    }
    for name in RUNNING {
        let pid = std::fs::read_to_string(cluster.dir().join(format!("controllers/{name}.pid")))
            .unwrap_or_else(|err| panic!("{name}'s pidfile: {err}"));
        out.insert(format!("{name} pid"), json!(pid.trim()));
    }
    let operator = std::fs::read_to_string(cluster.dir().join("flux-operator.pid")).unwrap();
    out.insert("flux-operator pid".into(), json!(operator.trim()));
    Value::Object(out)
}

fn instance(cluster: &TestCluster) -> Value {
    cluster
        .object("fluxinstances.fluxcd.controlplane.io", NS, "flux")
        .expect("FluxInstance cozy-fluxcd/flux")
}

fn helm_owned(instance: &Value) -> bool {
    instance["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
        || instance["metadata"]["annotations"]["meta.helm.sh/release-name"].is_string()
        || instance["metadata"]["annotations"]["meta.helm.sh/release-namespace"].is_string()
}

fn plan(cluster: &TestCluster) -> (Value, std::process::Output) {
    let output = cluster
        .kubectl_tenantflux(None, &["adopt", "plan", "-o", "json"])
        .expect("adopt plan");
    (json(&output), output)
}

/// Nothing of the agent's may garbage-collect or hold what it adopted.
/// Both the plan and `adopt apply` refuse (exit 5), the plan's first refusal containing
/// `in_plan` and apply's error `in_apply`, and the FluxInstance is still Helm's.
fn assert_refused(cluster: &TestCluster, in_plan: &str, in_apply: &str) {
    let (refused, output) = plan(cluster);
    assert_eq!(output.status.code(), Some(5), "{output:?}");
    assert!(
        refused["refusals"][0].as_str().unwrap().contains(in_plan),
        "{refused:#}"
    );
    let output = cluster
        .kubectl_tenantflux(None, &["adopt", "apply"])
        .unwrap();
    assert_eq!(output.status.code(), Some(5), "{output:?}");
    assert!(stderr(&output).contains(in_apply), "{}", stderr(&output));
    assert!(
        helm_owned(&instance(cluster)),
        "a refused adoption changes nothing"
    );
}

fn assert_no_agent_hold(cluster: &TestCluster) {
    let mut objects = vec![
        cluster.object("deployments", NS, "flux-operator").unwrap(),
        instance(cluster),
    ];
    objects.extend(
        CONTROLLERS
            .iter()
            .map(|c| cluster.object("deployments", NS, c).unwrap()),
    );
    for object in objects {
        let name = &object["metadata"]["name"];
        let owners = object["metadata"]["ownerReferences"].to_string();
        assert!(!owners.contains("tenantflux"), "{name}: {owners}");
        let finalizers = object["metadata"]["finalizers"].to_string();
        assert!(!finalizers.contains("tenantflux"), "{name}: {finalizers}");
    }
}

fn sign_and_push(
    cluster: &TestCluster,
    dir: &Path,
    key: &Path,
    platform: &Path,
    text: &str,
    name: &str,
) {
    let unsigned = dir.join(format!("{name}.yaml"));
    std::fs::write(&unsigned, text).unwrap();
    let signed = dir.join(format!("{name}.signed.yaml"));
    let output = cluster
        .kubectl_tenantflux(
            None,
            &[
                "policy",
                "sign",
                "-f",
                path(&unsigned),
                "--key",
                path(key),
                "--out",
                path(&signed),
            ],
        )
        .unwrap();
    assert!(output.status.success(), "policy sign: {output:?}");
    let output = cluster
        .kubectl_tenantflux(Some(platform), &["policy", "push", "-f", path(&signed)])
        .unwrap();
    assert!(output.status.success(), "policy push: {output:?}");
}

#[tokio::test]
async fn a_cozystack_shaped_helm_install_is_adopted_without_restarting_flux() {
    let cluster = TestCluster::own("tf-adopt");
    ensure_packaging_tools().expect("helm");
    let previous = tool_path("FLUX_OPERATOR_PREVIOUS_VERSION")
        .to_string_lossy()
        .into_owned();
    let work = tempfile::tempdir().unwrap();
    let keys = work.path().join("keys");
    let output = cluster
        .kubectl_tenantflux(None, &["policy", "keygen", "--out", path(&keys)])
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let public_key = keys.join("ed25519.pub");
    let agent_env = [
        ("TENANTFLUX_OPERATOR_NAMESPACE", NS),
        ("TENANTFLUX_POLICY_PUBLIC_KEY", path(&public_key)),
    ];

    // Nothing runs yet: nothing to adopt, exit 0.
    cluster.restart_agent_with(&agent_env).expect("agent");
    let output = cluster
        .kubectl_tenantflux(None, &["adopt", "plan"])
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    assert!(
        stdout(&output).starts_with("nothing to adopt"),
        "{}",
        stdout(&output)
    );

    // The add-on's two Helm releases, and the real operator and controllers running them.
    let mut operator_documents = operator_chart_documents(&previous);
    operator_documents.push(web_network_policy());
    // A record naming an object in another namespace (whoever may write Secrets in the
    // operator namespace can plant one; here the chart renders it): the agent, which may patch
    // ServiceAccounts anywhere, must not mark it.
    operator_documents.push(json!({
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": PLANTED, "namespace": "default"},
    }));
    let operator = chart(work.path(), "flux-operator", &previous, &operator_documents);
    helm(
        cluster,
        &[
            "install",
            "fluxcd-operator",
            path(&operator),
            "-n",
            NS,
            "--create-namespace",
        ],
    );
    cluster
        .run_flux_operator_in(NS, &previous)
        .expect("flux-operator process");
    let flux = chart(
        work.path(),
        "flux-instance",
        "v0.1.0",
        &[cozystack_instance()],
    );
    helm(cluster, &["install", "fluxcd", path(&flux), "-n", NS]);
    let (repo, rev1) = serve_app(cluster, "cozy-app").await;
    let timeout = Duration::from_secs(180);
    cluster
        .kustomization_applied("apps", "app", &revision(&rev1), timeout)
        .await
        .expect("Flux applies the app before adoption");
    let before = controllers_now(cluster);
    assert!(helm_owned(&instance(cluster)));

    // The agent as Cozystack's add-on package configures it (deploy/cozystack: the system
    // package vendored by its Makefile, rendered with the values of the add-on's HelmRelease):
    // its environment, and the Role `adopt: true` grants in cozy-fluxcd, which the platform
    // applies here.
    let package = Package::render();
    let packaged = |name: &str| package.env(name);
    assert_eq!(packaged("TENANTFLUX_OPERATOR_NAMESPACE"), NS);
    assert_eq!(packaged("TENANTFLUX_ADOPT"), "true");
    assert_eq!(packaged("TENANTFLUX_OPERATOR_BUNDLE"), cozystack::BUNDLE);
    let adopt_rbac = package.rendered(|o| o["metadata"]["name"] == "tenantflux-agent-adopt");
    assert_eq!(
        adopt_rbac.matches("\"apiVersion\"").count(),
        2,
        "the adopt Role and RoleBinding"
    );
    cluster.apply_yaml(&adopt_rbac).unwrap();

    let (plan_json, output) = plan(cluster);
    assert!(output.status.success(), "{output:?}");
    assert_eq!(plan_json["case"], "operator", "{plan_json:#}");
    assert_eq!(plan_json["namespace"], NS);
    assert_eq!(plan_json["rollout"], false);
    assert_eq!(
        plan_json["operators"][0]["helmRelease"],
        "cozy-fluxcd/fluxcd-operator"
    );
    assert_eq!(plan_json["operators"][0]["version"], previous.as_str());
    assert_eq!(
        plan_json["instances"][0]["helmRelease"],
        "cozy-fluxcd/fluxcd"
    );
    assert_eq!(plan_json["instances"][0]["version"], "2.9.x");
    assert_eq!(plan_json["controllers"].as_array().unwrap().len(), 7);
    let cleanup: Vec<&str> = plan_json["cleanup"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert!(
        cleanup.contains(
            &"kubectl delete secret -n cozy-fluxcd sh.helm.release.v1.fluxcd-operator.v1"
        ) && cleanup.contains(&"kubectl delete secret -n cozy-fluxcd sh.helm.release.v1.fluxcd.v1"),
        "{cleanup:?}"
    );
    let changes = plan_json["changes"].to_string();
    assert!(changes.contains("Helm's ownership"), "{changes}");
    assert!(changes.contains("spec.kustomize"), "{changes}");
    let table = cluster
        .kubectl_tenantflux(None, &["adopt", "plan"])
        .unwrap();
    let table = stdout(&table);
    eprintln!("adopt plan:\n{table}");
    assert!(table.contains("Rollout: no"), "{table}");
    assert!(table.contains("Policy: none held"), "{table}");

    // The policy's verdict: the add-on's instance is outside the example policy (image
    // controllers, patches, multitenant), inside one that only bounds the version. The
    // example's create-once defaults never touch the instance that exists: it is recorded as
    // existing, its spec and generation stay.
    let platform = cluster.policy_pusher_kubeconfig().unwrap();
    let key = keys.join("ed25519.key");
    let helm_instance = instance(cluster);
    let example = std::fs::read_to_string(repo_root().join("deploy/policy/example.yaml")).unwrap();
    assert!(example.contains("  defaults:\n"));
    sign_and_push(cluster, work.path(), &key, &platform, &example, "strict");
    wait_for("the defaults recorded as not needed", timeout, || async {
        (defaults_record(cluster) == "existed/7").then_some(())
    })
    .await
    .unwrap();
    let kept = instance(cluster);
    assert_eq!(kept["spec"], helm_instance["spec"]);
    assert_eq!(
        kept["metadata"]["generation"],
        helm_instance["metadata"]["generation"]
    );
    let (strict, _) = plan(cluster);
    let fields: Vec<&str> = strict["violations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["field"].as_str().unwrap())
        .collect();
    assert!(fields.contains(&"spec.components"), "{strict:#}");
    assert!(
        strict["keeps"]
            .to_string()
            .contains("keeps running as it is"),
        "{strict:#}"
    );
    let lenient = "apiVersion: tenantflux.io/v1alpha1\nkind: Policy\nmetadata: {name: platform}\n\
                   spec:\n  generation: 8\n  distribution:\n    versions: \">=2.7.0 <2.10.0\"\n    registries: [ghcr.io/fluxcd]\n";
    sign_and_push(cluster, work.path(), &key, &platform, lenient, "lenient");
    let (lenient, _) = plan(cluster);
    assert_eq!(lenient["violations"], json!([]), "{lenient:#}");
    assert!(lenient["policy"].as_str().unwrap().contains("generation 8"));
    // (wait_enforced probes with a FluxInstance in flux-system)
    cluster
        .apply_yaml("apiVersion: v1\nkind: Namespace\nmetadata: {name: flux-system}\n")
        .unwrap();
    wait_enforced(cluster, 8)
        .await
        .expect("the API server enforces generation 8");

    // Two FluxInstances: refused naming both, nothing changed.
    cluster
        .apply_yaml(
            "apiVersion: fluxcd.controlplane.io/v1\nkind: FluxInstance\n\
             metadata: {name: flux, namespace: flux-system}\n\
             spec: {distribution: {version: 2.9.x, registry: ghcr.io/fluxcd}}\n",
        )
        .unwrap();
    assert_refused(
        cluster,
        "FluxInstance cozy-fluxcd/flux and FluxInstance flux-system/flux",
        "flux-system/flux",
    );
    cluster
        .kubectl_ok(&["-n", "flux-system", "delete", "fluxinstance", "flux"])
        .unwrap();

    // A flux-operator Deployment outside the operator namespace (in flux-system, a pod without a
    // process here): anyone who administers that namespace can create one, so it is a decoy to
    // the agent: named as ignored, and the adoption plan is not refused for it.
    cluster
        .apply_yaml(
            "apiVersion: apps/v1\nkind: Deployment\n\
             metadata: {name: flux-operator, namespace: flux-system, labels: {app.kubernetes.io/name: flux-operator}}\n\
             spec:\n  selector: {matchLabels: {app.kubernetes.io/name: flux-operator}}\n\
             \x20 template:\n    metadata: {labels: {app.kubernetes.io/name: flux-operator}}\n\
             \x20   spec: {containers: [{name: manager, image: 'ghcr.io/controlplaneio-fluxcd/flux-operator:v0.59.0'}]}\n",
        )
        .unwrap();
    let (planned, output) = plan(cluster);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert_eq!(planned["refusals"], serde_json::json!([]), "{planned:#}");
    assert!(
        planned["ignored"].as_array().is_some_and(|i| i
            .iter()
            .any(|o| o["namespace"] == "flux-system" && o["name"] == "flux-operator")),
        "{planned:#}"
    );
    assert!(helm_owned(&instance(cluster)), "a plan changes nothing");
    cluster
        .kubectl_ok(&["-n", "flux-system", "delete", "deployment", "flux-operator"])
        .unwrap();

    // `adopt: true`, killed (SIGKILL) after recording that it adopts and before it did.
    let adopt = packaged("TENANTFLUX_ADOPT");
    let mut env = agent_env.to_vec();
    env.push(("TENANTFLUX_ADOPT", adopt.as_str()));
    let mut with_failpoint = env.clone();
    with_failpoint.push(("TENANTFLUX_FAILPOINTS", "adopt-recorded-adopting"));
    let from = cluster.agent_log_len();
    cluster.restart_agent_with(&with_failpoint).unwrap();
    cluster
        .wait_agent_log(from, "failpoint adopt-recorded-adopting reached", timeout)
        .await
        .unwrap();
    cluster.kill_agent().unwrap();
    let record = cluster
        .object("configmaps", AGENT_NAMESPACE, "tenantflux-adoption")
        .expect("the adoption's record");
    assert_eq!(record["data"]["outcome"], "adopting");
    assert!(helm_owned(&instance(cluster)));
    let from = cluster.agent_log_len();
    cluster.restart_agent_with(&env).unwrap();
    cluster
        .wait_agent_log(from, "adoption at start:", timeout)
        .await
        .unwrap();

    // The same state as an uninterrupted adoption: Helm's ownership gone, recorded, nothing of
    // Flux restarted or re-rendered, the app Ready at its revision.
    let adopted = instance(cluster);
    assert!(!helm_owned(&adopted), "{:#}", adopted["metadata"]);
    let record = cluster
        .object("configmaps", AGENT_NAMESPACE, "tenantflux-adoption")
        .unwrap();
    assert_eq!(record["data"]["outcome"], "adopted");
    assert_eq!(controllers_now(cluster), before);
    cluster
        .kustomization_applied("apps", "app", &revision(&rev1), timeout)
        .await
        .unwrap();
    let (after, _) = plan(cluster);
    assert_eq!(after["adopted"], true);
    assert!(
        !after["changes"].to_string().contains("Helm's ownership"),
        "{after:#}"
    );
    assert_no_agent_hold(cluster);

    // Flux works under its new owner.
    let rev2 = repo
        .commit(&[("app/configmap.yaml", &app_config("two"))], &[], "two")
        .unwrap();
    cluster
        .kustomization_applied("apps", "app", &revision(&rev2), timeout)
        .await
        .expect("a new commit is applied after adoption");

    // Helm keeps its hands off what was adopted (observe-only): every object of the owning
    // releases is marked `helm.sh/resource-policy: keep` live (what an upgrade that drops it
    // reads) and in the releases' records (what `helm uninstall` reads); the NetworkPolicy, a
    // kind the agent may not annotate, is named with the command that marks it.
    let (marked, _) = plan(cluster);
    let marks: Vec<&str> = marked["marks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap())
        .collect();
    eprintln!("marks: {marks:#?}");
    for object in [
        "Deployment cozy-fluxcd/flux-operator (release cozy-fluxcd/fluxcd-operator): marked",
        "Service cozy-fluxcd/flux-operator (release cozy-fluxcd/fluxcd-operator): marked",
        "CustomResourceDefinition fluxinstances.fluxcd.controlplane.io (release cozy-fluxcd/fluxcd-operator): marked",
        "FluxInstance cozy-fluxcd/flux (release cozy-fluxcd/fluxcd): marked",
    ] {
        assert!(marks.contains(&object), "{object}: {marks:#?}");
    }
    assert!(
        marks.iter().any(|m| m.starts_with("NetworkPolicy cozy-fluxcd/flux-operator-web")
            && m.contains("kubectl annotate networkpolicy.networking.k8s.io -n cozy-fluxcd flux-operator-web helm.sh/resource-policy=keep")),
        "{marks:#?}"
    );
    let keep = |resource: &str, namespace: &str, name: &str| {
        cluster
            .object(resource, namespace, name)
            .unwrap_or_else(|| panic!("{resource} {namespace}/{name} is gone"))["metadata"]["annotations"]
            ["helm.sh/resource-policy"]
            == "keep"
    };
    assert!(keep("deployments", NS, "flux-operator"));
    assert!(
        !keep("serviceaccounts", "default", PLANTED),
        "the agent marked an object outside the operator namespace"
    );
    assert!(!marks.iter().any(|m| m.contains(PLANTED)), "{marks:#?}");
    assert!(keep("serviceaccounts", NS, "flux-operator"));
    assert!(keep("clusterroles", "", "flux-operator-edit"));
    let manifest = helm(cluster, &["get", "manifest", "fluxcd-operator", "-n", NS]);
    let recorded: Vec<Value> = tenantflux_core::yaml::documents(&manifest).unwrap();
    assert_eq!(recorded.len(), operator_documents.len(), "{manifest}");
    assert!(
        recorded
            .iter()
            .all(|d| d["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"),
        "every object of the release's record is kept: {manifest}"
    );
    let status = |cluster: &TestCluster| {
        json(
            &cluster
                .kubectl_tenantflux(None, &["status", "-o", "json"])
                .unwrap(),
        )
        .to_string()
    };
    let at_risk = "objects adopted from Helm are at risk";
    assert!(!status(cluster).contains(at_risk));
    // `helm upgrade` of the old release with a chart that no longer holds the Service: Helm
    // leaves the marked Service; its new record does not keep the rest, which status reports
    // until `adopt apply` marks it too.
    let without_service: Vec<Value> = operator_documents
        .iter()
        .filter(|d| d["kind"] != "Service")
        .cloned()
        .collect();
    let smaller = chart(
        &work.path().join("smaller"),
        "flux-operator",
        &previous,
        &without_service,
    );
    helm(
        cluster,
        &["upgrade", "fluxcd-operator", path(&smaller), "-n", NS],
    );
    assert!(
        keep("services", NS, "flux-operator"),
        "Helm left the Service"
    );
    let problem = wait_for("status to name the unkept record", timeout, || async {
        let status = status(cluster);
        status.contains(at_risk).then_some(status)
    })
    .await
    .unwrap();
    assert!(
        problem.contains("sh.helm.release.v1.fluxcd-operator.v2"),
        "{problem}"
    );
    let output = cluster
        .kubectl_tenantflux(None, &["adopt", "apply"])
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    assert!(
        stdout(&output).contains("rewrote 1 Helm release record"),
        "{}",
        stdout(&output)
    );
    wait_for("the risk to clear", timeout, || async {
        (!status(cluster).contains(at_risk)).then_some(())
    })
    .await
    .unwrap();
    // What Cozystack's release note tells tenants: uninstall the operator's release. Helm
    // keeps every object it held; flux-operator and Flux go on.
    let uninstalled = helm(cluster, &["uninstall", "fluxcd-operator", "-n", NS]);
    eprintln!("helm uninstall fluxcd-operator: {uninstalled}");
    for (resource, namespace, name) in [
        ("deployments", NS, "flux-operator"),
        ("services", NS, "flux-operator"),
        ("serviceaccounts", NS, "flux-operator"),
        ("networkpolicies", NS, "flux-operator-web"),
        ("clusterroles", "", "flux-operator-edit"),
        (
            "customresourcedefinitions",
            "",
            "fluxinstances.fluxcd.controlplane.io",
        ),
    ] {
        let object = cluster
            .object(resource, namespace, name)
            .unwrap_or_else(|| panic!("helm uninstall deleted {resource} {name}"));
        assert!(
            object["metadata"]["deletionTimestamp"].is_null(),
            "{resource} {name} is being deleted"
        );
    }
    assert_eq!(controllers_now(cluster), before);
    assert!(!status(cluster).contains(at_risk));

    // A bundle of another version (the environment's pinned release) would re-render the
    // controllers: with --adopt the agent holds it back, the plan says why, and `adopt apply`
    // refuses without --allow-rollout; nothing of Flux changes.
    // The bundles name flux-system, as flux-operator's releases do; the agent moves them.
    let write_bundle = |version: &str| {
        let documents = operator_release_documents(version);
        assert!(
            documents
                .iter()
                .any(|d| d["metadata"]["namespace"] == "flux-system")
        );
        let bundle = work.path().join(format!("install-{version}.yaml"));
        let text: Vec<String> = documents.iter().map(Value::to_string).collect();
        std::fs::write(&bundle, text.join("\n---\n")).unwrap();
        format!("file:{}", bundle.display())
    };
    // The add-on package's bundle is flux-operator's OCI artifact of the environment's pinned
    // release (ghcr.io is out of reach here: the same release's manifests from a file).
    let pinned = tool_path("FLUX_OPERATOR_VERSION")
        .to_string_lossy()
        .into_owned();
    assert_eq!(packaged("TENANTFLUX_OPERATOR_VERSION"), pinned);
    assert!(cozystack::BUNDLE.ends_with(&format!(":{pinned}")));
    let newer = write_bundle(&pinned);
    let pod_fields = packaged("TENANTFLUX_OPERATOR_ALLOW_POD_FIELDS");
    let mut with_newer = env.clone();
    with_newer.extend([
        ("TENANTFLUX_OPERATOR_BUNDLE", newer.as_str()),
        ("TENANTFLUX_OPERATOR_VERSION", pinned.as_str()),
        ("TENANTFLUX_OPERATOR_ALLOW_POD_FIELDS", pod_fields.as_str()),
    ]);
    cluster.restart_agent_with(&with_newer).unwrap();
    let held = wait_for("the plan to see the bundle held back", timeout, || async {
        let (held, _) = plan(cluster);
        (held["rollout"] == true).then_some(held)
    })
    .await
    .unwrap();
    assert!(
        held["rolloutReason"].as_str().unwrap().contains(&pinned),
        "{held:#}"
    );
    let output = cluster
        .kubectl_tenantflux(None, &["adopt", "apply"])
        .unwrap();
    assert_eq!(output.status.code(), Some(5), "{output:?}");
    assert!(
        stderr(&output).contains("--allow-rollout"),
        "{}",
        stderr(&output)
    );
    let held_status = status(cluster);
    assert!(
        held_status.contains("adopt apply --allow-rollout"),
        "the install says why it holds back: {held_status}"
    );
    let operator = cluster.object("deployments", NS, "flux-operator").unwrap();
    assert_ne!(
        operator["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "tenantflux-agent"
    );
    assert_eq!(controllers_now(cluster), before);

    // Observe-only, the operator's Deployment deleted (by hand, or by a Helm that did not
    // keep it): a problem in status that says how to bring it back; with a bundle the agent
    // restores it (below).
    cluster.restart_agent_with(&env).unwrap();
    cluster
        .kubectl_ok(&["-n", NS, "delete", "deployment", "flux-operator"])
        .unwrap();
    let gone = wait_for("status to report the operator gone", timeout, || async {
        let status = status(cluster);
        status
            .contains("Deployment cozy-fluxcd/flux-operator is gone while FluxInstance cozy-fluxcd/flux exists")
            .then_some(status)
    })
    .await
    .unwrap();
    assert!(gone.contains("spec.operator.bundle"), "{gone}");

    // The agent takes the operator's install over with its own bundle at the same version,
    // Cozystack's pod settings kept because the platform allows them
    // (--operator-allow-pod-fields); no controller is re-rendered.
    let source = write_bundle(&previous);
    let mut with_bundle = env.clone();
    with_bundle.extend([
        ("TENANTFLUX_OPERATOR_BUNDLE", source.as_str()),
        ("TENANTFLUX_OPERATOR_VERSION", previous.as_str()),
        ("TENANTFLUX_OPERATOR_ALLOW_POD_FIELDS", pod_fields.as_str()),
    ]);
    cluster.restart_agent_with(&with_bundle).unwrap();
    let operator = wait_for(
        "the agent to restore the operator from its bundle",
        timeout,
        || async {
            cluster
                .object("deployments", NS, "flux-operator")
                .filter(|d| {
                    d["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "tenantflux-agent"
                })
                .filter(|_| {
                    cluster
                        .object("configmaps", AGENT_NAMESPACE, "tenantflux-operator-install")
                        .is_some()
                })
        },
    )
    .await
    .unwrap();
    let pod = &operator["spec"]["template"]["spec"];
    assert_eq!(pod["hostNetwork"], true, "{pod:#}");
    assert_eq!(pod["tolerations"][0]["key"], "node.kubernetes.io/not-ready");
    assert_eq!(
        pod["containers"][0]["resources"]["requests"]["memory"],
        "350Mi"
    );
    assert_eq!(controllers_now(cluster), before);
    // The agent's install state follows its record at once; the plan reads it.
    let taken = wait_for("the plan to see the agent's bundle", timeout, || async {
        let (taken, _) = plan(cluster);
        taken["changes"][0]
            .as_str()
            .is_some_and(|c| c.contains("becomes the agent's install"))
            .then_some(taken)
    })
    .await
    .unwrap();
    assert!(
        taken["operators"][0]["managers"]
            .to_string()
            .contains("tenantflux-agent"),
        "{taken:#}"
    );
    assert_eq!(taken["rollout"], false);

    // A wait longer than the adoption lock may be held is refused before anything is done.
    let output = cluster
        .kubectl_tenantflux(None, &["adopt", "apply", "--timeout", "2h"])
        .unwrap();
    assert!(!output.status.success(), "{output:?}");
    assert!(
        stderr(&output).contains("at most 30m"),
        "{}",
        stderr(&output)
    );

    // Applying again changes nothing of Flux; the Kustomization is Ready again at its revision.
    let output = cluster
        .kubectl_tenantflux(None, &["adopt", "apply", "-o", "json"])
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let result = json(&output);
    assert_eq!(
        result["kustomizations"][0]["readyAgain"], true,
        "{result:#}"
    );
    assert_eq!(result["kustomizations"][0]["revision"], revision(&rev2));
    assert_eq!(controllers_now(cluster), before);

    // A stray `helm upgrade` of the old release while its records exist: Helm updates what its
    // last release holds without checking ownership, so it writes the FluxInstance and its
    // ownership again. The agent reports that as a problem until `adopt apply` removes Helm's
    // ownership again; with the records deleted (the plan's commands), Helm has no release left
    // to upgrade.
    let upgrade = |cluster: &TestCluster| {
        Command::new(tool_path("HELM"))
            .args(["upgrade", "fluxcd"])
            .arg(&flux)
            .args(["-n", NS, "--kubeconfig"])
            .arg(cluster.kubeconfig())
            .output()
            .unwrap()
    };
    let output = upgrade(cluster);
    assert!(output.status.success(), "helm upgrade: {output:?}");
    assert!(helm_owned(&instance(cluster)));
    let problem = "adopted from Helm release cozy-fluxcd/fluxcd, carries Helm's ownership again";
    wait_for("the agent to report Helm's write", timeout, || async {
        status(cluster).contains(problem).then_some(())
    })
    .await
    .unwrap();
    let output = cluster
        .kubectl_tenantflux(None, &["adopt", "apply"])
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    assert!(!helm_owned(&instance(cluster)));
    wait_for("the problems to clear", timeout, || async {
        let status = status(cluster);
        (!status.contains(problem) && !status.contains(at_risk)).then_some(())
    })
    .await
    .unwrap();
    // Owning mode: `helm uninstall` of the instance's release leaves the FluxInstance.
    let (cleaned, _) = plan(cluster);
    assert!(
        cleaned["marks"]
            .to_string()
            .contains("FluxInstance cozy-fluxcd/flux (release cozy-fluxcd/fluxcd): marked"),
        "{cleaned:#}"
    );
    helm(cluster, &["uninstall", "fluxcd", "-n", NS]);
    let kept = instance(cluster);
    assert!(kept["metadata"]["deletionTimestamp"].is_null(), "{kept:#}");
    assert_eq!(controllers_now(cluster), before);

    // The agent uninstalled: Flux keeps running and applying.
    cluster.stop_agent().unwrap();
    cluster
        .kubectl_ok(&[
            "-n",
            NS,
            "delete",
            "role,rolebinding",
            "tenantflux-agent-adopt",
        ])
        .unwrap();
    let manifests = repo_root().join("deploy/manifests");
    cluster
        .kubectl_ok(&[
            "delete",
            "-k",
            path(&manifests),
            "--wait=true",
            "--timeout=120s",
        ])
        .unwrap();
    wait_for("namespace tenantflux-system to go", timeout, || async {
        cluster
            .kubectl_ok(&[
                "get",
                "namespace",
                AGENT_NAMESPACE,
                "--ignore-not-found",
                "-o",
                "name",
            ])
            .is_ok_and(|out| out.trim().is_empty())
            .then_some(())
    })
    .await
    .unwrap();
    assert_no_agent_hold(cluster);
    assert_eq!(controllers_now(cluster), before);
    let rev3 = repo
        .commit(
            &[("app/configmap.yaml", &app_config("three"))],
            &[],
            "three",
        )
        .unwrap();
    cluster
        .kustomization_applied("apps", "app", &revision(&rev3), timeout)
        .await
        .expect("a new commit is applied with the agent gone");
}

/// Each controller Deployment's pod template in `namespace`, and each running process's pid.
fn templates_and_pids(cluster: &TestCluster, namespace: &str, names: &[&str]) -> Value {
    let mut out = serde_json::Map::new();
    for name in names {
        let deployment = cluster
            .object("deployments", namespace, name)
            .unwrap_or_else(|| panic!("Deployment {namespace}/{name}"));
        out.insert((*name).into(), deployment["spec"]["template"].clone());
    }
    for name in RUNNING {
        let pid = std::fs::read_to_string(cluster.dir().join(format!("controllers/{name}.pid")))
            .unwrap_or_else(|err| panic!("{name}'s pidfile: {err}"));
        out.insert(format!("{name} pid"), json!(pid.trim()));
    }
    Value::Object(out)
}

/// Flux installed with the real flux CLI (v2.9.5, `flux install`, its four default components),
/// the real source-/kustomize-controller applying an app from Git, and an agent with the pinned
/// flux-operator bundle: the agent installs flux-operator beside the controllers; the policy's
/// create-once defaults are not rendered over them; the plan is a FluxInstance that matches
/// what runs and a rollout it names beforehand (flux-operator pins images by digest); a policy
/// the match is outside of is refused by field; `adopt apply` without `--allow-rollout` changes
/// nothing; with it the FluxInstance is created, flux-operator takes the controllers over at the
/// same version, the app is Ready at its revision and a new commit is applied.
#[tokio::test]
async fn a_flux_install_cluster_is_adopted_with_a_flux_instance_that_matches_it() {
    const FLUX_NS: &str = "flux-system";
    const DEFAULT_COMPONENTS: [&str; 4] = [
        "source-controller",
        "kustomize-controller",
        "helm-controller",
        "notification-controller",
    ];
    // Not `own`: that is one cluster per test binary, which the Cozystack test holds.
    let cluster = &TestCluster::start(&format!("tf-adopt-fi-{}", std::process::id()))
        .expect("a cluster of this test's own");
    let work = tempfile::tempdir().unwrap();
    let keys = work.path().join("keys");
    let output = cluster
        .kubectl_tenantflux(None, &["policy", "keygen", "--out", path(&keys)])
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let timeout = Duration::from_secs(180);

    // `flux install` (the CLI embeds Flux v2.9.5's release manifests) and the controllers'
    // processes, as a kubelet would run them.
    let output = Command::new(tenantflux_tests::flux_cli())
        .args(["install", "--kubeconfig"])
        .arg(cluster.kubeconfig())
        .args(["--namespace", FLUX_NS, "--timeout", "3m"])
        .output()
        .unwrap();
    assert!(output.status.success(), "flux install: {output:?}");
    cluster
        .run_flux_controllers_in(FLUX_NS)
        .expect("the controllers' processes");
    for name in RUNNING {
        cluster
            .flux_controller_runs(name, &format!("{name}-v1.9.4"))
            .await
            .unwrap_or_else(|err| panic!("{name}: {err}"));
    }
    let source = cluster
        .object("deployments", FLUX_NS, "source-controller")
        .unwrap();
    assert_eq!(
        source["metadata"]["labels"]["app.kubernetes.io/version"],
        "v2.9.5"
    );
    // As `flux bootstrap` leaves it: the same install in Git (gotk-components.yaml), applied by
    // Kustomization flux-system/flux-system.
    let export = Command::new(tenantflux_tests::flux_cli())
        .args(["install", "--export", "--namespace", FLUX_NS])
        .output()
        .unwrap();
    assert!(export.status.success(), "flux install --export: {export:?}");
    let components = String::from_utf8(export.stdout).unwrap();
    let repo = GitRepo::new("flux-install-app").unwrap();
    let rev1 = repo
        .commit(
            &[
                ("app/configmap.yaml", &app_config("one")),
                ("flux-system/gotk-components.yaml", &components),
            ],
            &[],
            "one",
        )
        .unwrap();
    let url = cluster.git_server(&repo).unwrap();
    cluster
        .apply_yaml(&format!(
            "apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\n\
             metadata: {{name: flux-system, namespace: {FLUX_NS}}}\n\
             spec: {{interval: 1m, path: ./flux-system, prune: true, sourceRef: {{kind: GitRepository, name: app, namespace: apps}}}}\n---\n\
             apiVersion: v1\nkind: Namespace\nmetadata: {{name: apps}}\n---\n\
             apiVersion: source.toolkit.fluxcd.io/v1\nkind: GitRepository\n\
             metadata: {{name: app, namespace: apps}}\n\
             spec: {{interval: 5s, url: \"{url}\", ref: {{branch: main}}}}\n---\n\
             apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\n\
             metadata: {{name: app, namespace: apps}}\n\
             spec: {{interval: 1m, path: ./app, prune: true, sourceRef: {{kind: GitRepository, name: app}}}}\n"
        ))
        .expect("the app");
    cluster
        .kustomization_applied("apps", "app", &revision(&rev1), timeout)
        .await
        .expect("flux install's controllers apply the app");
    cluster
        .kustomization_applied(FLUX_NS, "flux-system", &revision(&rev1), timeout)
        .await
        .expect("the controllers apply their own install from Git");

    // The agent with the pinned bundle installs flux-operator beside them (it runs, with no
    // FluxInstance to reconcile, and touches nothing of Flux).
    let pinned = tool_path("FLUX_OPERATOR_VERSION")
        .to_string_lossy()
        .into_owned();
    let bundle = format!("file:{}", operator_bundle(&pinned).unwrap().display());
    let public_key = keys.join("ed25519.pub");
    let env = [
        ("TENANTFLUX_POLICY_PUBLIC_KEY", path(&public_key)),
        ("TENANTFLUX_OPERATOR_BUNDLE", bundle.as_str()),
        ("TENANTFLUX_OPERATOR_VERSION", pinned.as_str()),
    ];
    cluster.restart_agent_with(&env).expect("agent");
    wait_for("the agent to install flux-operator", timeout, || async {
        cluster
            .object("configmaps", AGENT_NAMESPACE, "tenantflux-operator-install")
            .map(drop)
    })
    .await
    .unwrap();
    cluster.run_flux_operator_process().expect("flux-operator");
    let before = templates_and_pids(cluster, FLUX_NS, &DEFAULT_COMPONENTS);

    // A policy whose versions leave 2.9 out: the matching FluxInstance would be refused by the
    // API server, so the adoption is refused by field, before anything is written.
    let platform = cluster.policy_pusher_kubeconfig().unwrap();
    let key = keys.join("ed25519.key");
    let strict = "apiVersion: tenantflux.io/v1alpha1\nkind: Policy\nmetadata: {name: platform}\n\
                  spec:\n  generation: 1\n  distribution:\n    versions: \">=2.10.0 <3.0.0\"\n    registries: [ghcr.io/fluxcd]\n";
    sign_and_push(cluster, work.path(), &key, &platform, strict, "strict");
    let refused = wait_for("the plan to hold generation 1", timeout, || async {
        let (refused, _) = plan(cluster);
        refused["policy"]
            .as_str()
            .is_some_and(|p| p.contains("generation 1"))
            .then_some(refused)
    })
    .await
    .unwrap();
    assert_eq!(refused["case"], "refused", "{refused:#}");
    assert!(
        refused["refusals"][0]
            .as_str()
            .unwrap()
            .contains("(spec.distribution.version), so the API server would refuse it"),
        "{refused:#}"
    );

    // A policy that allows it, with create-once defaults: they are not rendered over the Flux
    // that runs (recorded as such), and no FluxInstance appears.
    let lenient = "apiVersion: tenantflux.io/v1alpha1\nkind: Policy\nmetadata: {name: platform}\n\
                   spec:\n  generation: 2\n  distribution:\n    versions: \">=2.7.0 <2.10.0\"\n    registries: [ghcr.io/fluxcd]\n\
                   \x20 defaults:\n    distribution: {version: 2.9.x, registry: ghcr.io/fluxcd}\n    components: [source-controller, kustomize-controller]\n";
    sign_and_push(cluster, work.path(), &key, &platform, lenient, "lenient");
    wait_for("the defaults recorded as not needed", timeout, || async {
        (defaults_record(cluster) == "flux-without-instance/2").then_some(())
    })
    .await
    .unwrap();
    assert!(
        cluster
            .object("fluxinstances.fluxcd.controlplane.io", FLUX_NS, "flux")
            .is_none(),
        "the defaults created a FluxInstance over flux install's controllers"
    );
    // The FluxInstance is admitted by the API server's policy, not only the agent's.
    wait_enforced(cluster, 2)
        .await
        .expect("the API server enforces generation 2");

    // The plan: a FluxInstance that matches what runs, and the rollout it costs, named.
    let (planned, output) = plan(cluster);
    assert!(output.status.success(), "{output:?}");
    assert_eq!(planned["case"], "flux-install", "{planned:#}");
    assert_eq!(planned["namespace"], FLUX_NS);
    assert_eq!(planned["violations"], json!([]), "{planned:#}");
    assert_eq!(planned["rollout"], true);
    assert!(
        planned["rolloutReason"]
            .as_str()
            .unwrap()
            .contains("pins their images by digest"),
        "{planned:#}"
    );
    let expected = json!({
        "distribution": {"version": "2.9.5", "registry": "ghcr.io/fluxcd"},
        "components": DEFAULT_COMPONENTS,
        "cluster": {"domain": "cluster.local"},
    });
    let planned_instance: Value =
        tenantflux_core::yaml::from_str(planned["instance"].as_str().unwrap())
            .unwrap_or_else(|err| panic!("the planned instance: {err}: {planned:#}"));
    assert_eq!(planned_instance["spec"], expected, "{planned:#}");
    assert!(
        planned["changes"][0].as_str().unwrap().contains(&format!(
            "flux-operator {pinned} (running in flux-system, the agent's install)"
        )),
        "{planned:#}"
    );
    assert!(
        planned["changes"]
            .to_string()
            .contains("Kustomization flux-system/flux-system applies Flux's controllers"),
        "{planned:#}"
    );
    let table = cluster
        .kubectl_tenantflux(None, &["adopt", "plan"])
        .unwrap();
    let table = stdout(&table);
    eprintln!("adopt plan:\n{table}");
    assert!(table.contains("Rollout: yes"), "{table}");

    // Without --allow-rollout: refused, nothing changed.
    let output = cluster
        .kubectl_tenantflux(None, &["adopt", "apply"])
        .unwrap();
    assert_eq!(output.status.code(), Some(5), "{output:?}");
    assert!(
        stderr(&output).contains("--allow-rollout"),
        "{}",
        stderr(&output)
    );
    assert!(
        cluster
            .object("fluxinstances.fluxcd.controlplane.io", FLUX_NS, "flux")
            .is_none()
    );
    assert_eq!(
        templates_and_pids(cluster, FLUX_NS, &DEFAULT_COMPONENTS),
        before
    );

    // The attack: a caller who may patch FluxInstance flux (what apply asks of everyone) but
    // not create one may not have adoption create it in their name. Refused before any write.
    let patcher = cluster
        .token_kubeconfig(FLUX_NS, "adopt-patcher")
        .expect("kubeconfig");
    cluster
        .apply_yaml(&agent_user_with_role(
            FLUX_NS,
            "adopt-patcher",
            "adopt-patcher",
            "adopt-patcher",
            "[{apiGroups: [fluxcd.controlplane.io], resources: [fluxinstances], verbs: [get, patch]}]",
        ))
        .expect("the patcher's RBAC");
    // Their plan shows only what they may read: no controller Deployment (they may not get
    // Deployments), no Kustomization that applies them; both counted.
    let output = cluster
        .kubectl_tenantflux(Some(&patcher), &["adopt", "plan", "-o", "json"])
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let narrow = json(&output);
    assert_eq!(narrow["controllers"], json!([]), "{narrow:#}");
    assert_eq!(narrow["operators"], json!([]), "{narrow:#}");
    let hidden = narrow["hidden"].to_string();
    assert!(
        hidden.contains("Deployment(s) in flux-system: you may not get deployments there")
            && hidden.contains("1 Kustomization(s) in flux-system"),
        "{narrow:#}"
    );
    assert!(
        !narrow["changes"]
            .to_string()
            .contains("Kustomization flux-system/flux-system"),
        "{narrow:#}"
    );
    let output = cluster
        .kubectl_tenantflux(Some(&patcher), &["adopt", "apply", "--allow-rollout"])
        .unwrap();
    assert_eq!(output.status.code(), Some(6), "{output:?}");
    assert!(
        stderr(&output).contains("you may not create FluxInstances"),
        "{}",
        stderr(&output)
    );
    assert!(
        cluster
            .object("fluxinstances.fluxcd.controlplane.io", FLUX_NS, "flux")
            .is_none(),
        "nothing created"
    );
    assert_eq!(
        templates_and_pids(cluster, FLUX_NS, &DEFAULT_COMPONENTS),
        before
    );

    // With it: the FluxInstance is created as planned, flux-operator renders the controllers
    // at the same version (images now pinned by digest, each process replaced once), and the
    // app is Ready again at its revision.
    let output = cluster
        .kubectl_tenantflux(
            None,
            &[
                "adopt",
                "apply",
                "--allow-rollout",
                "--timeout",
                "3m",
                "-o",
                "json",
            ],
        )
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let result = json(&output);
    assert!(
        result["done"].to_string().contains("created FluxInstance"),
        "{result:#}"
    );
    let kustomizations = result["kustomizations"].as_array().unwrap();
    assert_eq!(kustomizations.len(), 2, "{result:#}");
    for k in kustomizations {
        assert_eq!(k["readyAgain"], true, "{result:#}");
        assert_eq!(k["revision"], revision(&rev1));
    }
    let created = cluster
        .object("fluxinstances.fluxcd.controlplane.io", FLUX_NS, "flux")
        .expect("FluxInstance flux-system/flux");
    assert_eq!(created["spec"]["distribution"], expected["distribution"]);
    assert_eq!(created["spec"]["components"], expected["components"]);
    assert_eq!(
        created["metadata"]["ownerReferences"],
        Value::Null,
        "nothing of the agent's may garbage-collect it"
    );
    let after = templates_and_pids(cluster, FLUX_NS, &DEFAULT_COMPONENTS);
    for name in DEFAULT_COMPONENTS {
        let image = after[name]["spec"]["containers"][0]["image"]
            .as_str()
            .unwrap();
        let was = before[name]["spec"]["containers"][0]["image"]
            .as_str()
            .unwrap();
        assert!(
            image.starts_with(&format!("{was}@sha256:")),
            "{name}: {was} became {image}"
        );
    }
    let source = cluster
        .object("deployments", FLUX_NS, "source-controller")
        .unwrap();
    assert_eq!(
        source["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "flux-operator"
    );
    for name in RUNNING {
        cluster
            .flux_controller_runs(name, &format!("{name}-v1.9.4"))
            .await
            .unwrap_or_else(|err| panic!("{name} after the rollout: {err}"));
    }
    let rev2 = repo
        .commit(&[("app/configmap.yaml", &app_config("two"))], &[], "two")
        .unwrap();
    cluster
        .kustomization_applied("apps", "app", &revision(&rev2), timeout)
        .await
        .expect("a new commit is applied under flux-operator");
    // The bootstrap Kustomization applied rev2 too, and put none of gotk-components.yaml back
    // over what flux-operator rendered (`kustomize.toolkit.fluxcd.io/ssa: Ignore`).
    cluster
        .kustomization_applied(FLUX_NS, "flux-system", &revision(&rev2), timeout)
        .await
        .expect("the bootstrap Kustomization is Ready at the new commit");
    assert_eq!(
        templates_and_pids(cluster, FLUX_NS, &DEFAULT_COMPONENTS),
        after,
        "the bootstrap Kustomization changed what flux-operator rendered"
    );
    let (adopted, _) = plan(cluster);
    assert_eq!(adopted["adopted"], true, "{adopted:#}");
    assert_eq!(adopted["case"], "operator", "{adopted:#}");
}

/// A new tenant cluster with Cozystack's add-on ticked (deploy/cozystack, as the package's
/// HelmRelease configures the agent): nothing of Flux runs; the agent installs flux-operator
/// from the release's manifests (which name flux-system) into `cozy-fluxcd`, the platform's
/// policy creates the FluxInstance there, the real controllers apply an app, and status is
/// clean. A cluster of its own: the operator namespace is the package's, not the suite's.
#[tokio::test]
async fn a_new_tenant_cluster_gets_its_flux_from_the_cozystack_addon() {
    // (`own` is one cluster per process, the Cozystack adoption's: this needs another.)
    let cluster = &TestCluster::start(&format!("tf-cozy-new-{}", std::process::id()))
        .expect("this test's cluster");
    ensure_packaging_tools().expect("helm");
    let package = Package::render();
    let packaged = |name: &str| package.env(name);
    // What the package renders into the tenant cluster besides the agent: the operator
    // namespace (the cluster lacks it) and the adopt Role and RoleBinding in it.
    let extra = package.rendered(|o| {
        o["kind"] == "Namespace" || o["metadata"]["name"] == "tenantflux-agent-adopt"
    });
    assert_eq!(extra.matches("\"apiVersion\"").count(), 3, "{extra}");
    cluster.apply_yaml(&extra).unwrap();

    let work = tempfile::tempdir().unwrap();
    let keys = work.path().join("keys");
    let output = cluster
        .kubectl_tenantflux(None, &["policy", "keygen", "--out", path(&keys)])
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    // The package's bundle is flux-operator's OCI artifact of this version; ghcr.io is out of
    // reach here, so the same release's manifests come from a file.
    let version = packaged("TENANTFLUX_OPERATOR_VERSION");
    let bundle = format!("file:{}", operator_bundle(&version).unwrap().display());
    let namespace = packaged("TENANTFLUX_OPERATOR_NAMESPACE");
    let (adopt, pod_fields) = (
        packaged("TENANTFLUX_ADOPT"),
        packaged("TENANTFLUX_OPERATOR_ALLOW_POD_FIELDS"),
    );
    let public_key = keys.join("ed25519.pub");
    cluster
        .restart_agent_with(&[
            ("TENANTFLUX_OPERATOR_NAMESPACE", namespace.as_str()),
            ("TENANTFLUX_ADOPT", adopt.as_str()),
            ("TENANTFLUX_OPERATOR_BUNDLE", bundle.as_str()),
            ("TENANTFLUX_OPERATOR_VERSION", version.as_str()),
            ("TENANTFLUX_OPERATOR_ALLOW_POD_FIELDS", pod_fields.as_str()),
            ("TENANTFLUX_POLICY_PUBLIC_KEY", path(&public_key)),
        ])
        .expect("agent");
    let timeout = Duration::from_secs(180);
    wait_for("the agent to install flux-operator", timeout, || async {
        cluster
            .object("deployments", NS, "flux-operator")
            .filter(|d| {
                d["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "tenantflux-agent"
            })
    })
    .await
    .unwrap_or_else(|err| {
        let log = std::fs::read_to_string(cluster.dir().join("agent.log")).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(40).collect();
        panic!(
            "{err}; the agent's log ends:\n{}",
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        )
    });
    assert!(
        cluster.object("namespaces", "", "flux-system").is_none(),
        "the release's namespace was moved, not created"
    );
    cluster
        .run_flux_operator_in(NS, &version)
        .expect("flux-operator process");

    // The platform's policy for every tenant: flux-operator's releases from their artifact
    // (and this test's file of one), Flux 2.9 or 2.10, and defaults that create the
    // FluxInstance once.
    let platform = cluster.policy_pusher_kubeconfig().unwrap();
    let policy = format!(
        "apiVersion: tenantflux.io/v1alpha1\nkind: Policy\nmetadata: {{name: cozystack}}\nspec:\n\
         \x20 generation: 1\n\
         \x20 operator:\n    versions: \"={}\"\n\
         \x20   bundles: [\"oci://ghcr.io/controlplaneio-fluxcd/flux-operator-manifests*\", \"file:*\"]\n\
         \x20 distribution:\n    versions: \">=2.9.0 <2.11.0\"\n    registries: [ghcr.io/fluxcd]\n\
         \x20 defaults:\n    distribution: {{version: \"2.9.x\", registry: ghcr.io/fluxcd}}\n\
         \x20   components: [source-controller, kustomize-controller]\n\
         \x20   cluster: {{type: kubernetes, multitenant: true, networkPolicy: true, size: small}}\n",
        version.trim_start_matches('v')
    );
    sign_and_push(
        cluster,
        work.path(),
        &keys.join("ed25519.key"),
        &platform,
        &policy,
        "cozystack",
    );
    wait_for(
        "the defaults to create the FluxInstance",
        timeout,
        || async { (defaults_record(cluster) == "created/1").then_some(()) },
    )
    .await
    .unwrap();
    let (_repo, rev) = serve_app(cluster, "cozy-new-app").await;
    cluster
        .kustomization_applied("apps", "app", &revision(&rev), timeout)
        .await
        .expect("the new tenant's Flux applies an app");
    let status = wait_for("a clean status", timeout, || async {
        let status = json(
            &cluster
                .kubectl_tenantflux(None, &["status", "-o", "json"])
                .unwrap(),
        );
        (status["agent"]["problems"] == json!([]) && status["operator"]["phase"] == "ready")
            .then_some(status)
    })
    .await
    .unwrap();
    assert_eq!(status["operator"]["namespace"], NS, "{status:#}");
}
