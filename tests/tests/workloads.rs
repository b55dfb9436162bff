//! Local control of Flux objects on two real Flux minors: the real flux-operator installs Flux
//! 2.9 on the shared cluster and Flux 2.6 (with the image controllers) on a cluster of this
//! test's own, so the two serve different API versions. Objects of each kind are created at the
//! version the cluster serves; the controllers do not run in kwok, so the test writes their
//! status conditions itself through the status subresource. Every command goes the real path:
//! kubectl → plugin → API server port-forward → agent → SubjectAccessReview → API server.

use std::{
    path::{Path, PathBuf},
    process::{Output, Stdio},
    time::Duration,
};

use serde_json::Value;
use tenantflux_tests::{TestCluster, apply_flux_instance, wait_for};

const NS: &str = "wl-a";
const OTHER_NS: &str = "wl-b";

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The API versions a Flux minor serves each kind at (what the agent must find by discovery).
struct Minor {
    instance_version: &'static str,
    versions: &'static [(&'static str, &'static str)],
}

const FLUX_2_9: Minor = Minor {
    instance_version: "2.9.x",
    versions: &[
        ("GitRepository", "source.toolkit.fluxcd.io/v1"),
        ("OCIRepository", "source.toolkit.fluxcd.io/v1"),
        ("HelmRepository", "source.toolkit.fluxcd.io/v1"),
        ("HelmChart", "source.toolkit.fluxcd.io/v1"),
        ("Bucket", "source.toolkit.fluxcd.io/v1"),
        ("Kustomization", "kustomize.toolkit.fluxcd.io/v1"),
        ("HelmRelease", "helm.toolkit.fluxcd.io/v2"),
        ("Receiver", "notification.toolkit.fluxcd.io/v1"),
        ("Alert", "notification.toolkit.fluxcd.io/v1beta3"),
        ("Provider", "notification.toolkit.fluxcd.io/v1beta3"),
    ],
};

const FLUX_2_6: Minor = Minor {
    instance_version: "2.6.x",
    versions: &[
        ("GitRepository", "source.toolkit.fluxcd.io/v1"),
        ("OCIRepository", "source.toolkit.fluxcd.io/v1"),
        ("HelmRepository", "source.toolkit.fluxcd.io/v1"),
        ("HelmChart", "source.toolkit.fluxcd.io/v1"),
        ("Bucket", "source.toolkit.fluxcd.io/v1"),
        ("Kustomization", "kustomize.toolkit.fluxcd.io/v1"),
        ("HelmRelease", "helm.toolkit.fluxcd.io/v2"),
        ("Receiver", "notification.toolkit.fluxcd.io/v1"),
        ("Alert", "notification.toolkit.fluxcd.io/v1beta3"),
        ("Provider", "notification.toolkit.fluxcd.io/v1beta3"),
        // Image automation at v1beta2: v1 came with Flux 2.7.
        ("ImageRepository", "image.toolkit.fluxcd.io/v1beta2"),
        ("ImagePolicy", "image.toolkit.fluxcd.io/v1beta2"),
        ("ImageUpdateAutomation", "image.toolkit.fluxcd.io/v1beta2"),
    ],
};

fn plural(kind: &str) -> String {
    let lower = kind.to_ascii_lowercase();
    match lower.strip_suffix('y') {
        Some(stem) => format!("{stem}ies"),
        None => format!("{lower}s"),
    }
}

/// A minimal valid spec of each kind.
fn spec(kind: &str) -> &'static str {
    match kind {
        "GitRepository" => "{url: https://github.com/stefanprodan/podinfo, interval: 5m}",
        "OCIRepository" => {
            "{url: oci://ghcr.io/stefanprodan/manifests/podinfo, interval: 5m, ref: {tag: latest}}"
        }
        "HelmRepository" => "{url: https://stefanprodan.github.io/podinfo, interval: 5m}",
        "HelmChart" => {
            "{chart: podinfo, interval: 5m, sourceRef: {kind: HelmRepository, name: podinfo}}"
        }
        "Bucket" => "{bucketName: podinfo, endpoint: minio.example.com, interval: 5m}",
        "Kustomization" => {
            "{interval: 10m, path: ./kustomize, prune: true, sourceRef: {kind: GitRepository, name: podinfo}}"
        }
        "HelmRelease" => {
            "{interval: 5m, chart: {spec: {chart: podinfo, sourceRef: {kind: HelmRepository, name: podinfo}}}}"
        }
        "Receiver" => {
            "{type: generic, resources: [{kind: GitRepository, name: podinfo}], secretRef: {name: token}}"
        }
        "Provider" => "{type: generic, address: https://example.com/hook}",
        "Alert" => {
            "{providerRef: {name: podinfo}, eventSources: [{kind: GitRepository, name: '*'}]}"
        }
        "ImageRepository" => "{image: ghcr.io/stefanprodan/podinfo, interval: 5m}",
        "ImagePolicy" => {
            "{imageRepositoryRef: {name: podinfo}, policy: {semver: {range: '>=1.0.0'}}}"
        }
        "ImageUpdateAutomation" => {
            "{interval: 5m, sourceRef: {kind: GitRepository, name: podinfo}, git: {commit: {author: {email: flux@example.com, name: flux}}}, update: {path: ./, strategy: Setters}}"
        }
        other => panic!("no spec for {other}"),
    }
}

fn plugin(cluster: &TestCluster, kubeconfig: &Path, args: &[&str]) -> Output {
    cluster
        .kubectl_tenantflux(Some(kubeconfig), args)
        .expect("run kubectl tenantflux")
}

fn plugin_ok(cluster: &TestCluster, kubeconfig: &Path, args: &[&str]) -> String {
    let output = plugin(cluster, kubeconfig, args);
    assert!(
        output.status.success(),
        "kubectl tenantflux {} failed: {}",
        args.join(" "),
        stderr(&output)
    );
    stdout(&output)
}

fn plugin_json(cluster: &TestCluster, kubeconfig: &Path, args: &[&str]) -> Value {
    let mut args = args.to_vec();
    args.extend(["-o", "json"]);
    let text = plugin_ok(cluster, kubeconfig, &args);
    serde_json::from_str(&text).unwrap_or_else(|err| panic!("not JSON ({err}): {text}"))
}

fn get_json(cluster: &TestCluster, resource: &str, namespace: &str, name: &str) -> Value {
    let text = cluster
        .kubectl_ok(&[
            "-n",
            namespace,
            "get",
            resource,
            name,
            "-o",
            "json",
            "--show-managed-fields",
        ])
        .expect("kubectl get");
    serde_json::from_str(&text).expect("JSON")
}

fn annotation(object: &Value, key: &str) -> Option<String> {
    object["metadata"]["annotations"][key]
        .as_str()
        .map(str::to_owned)
}

/// Writes the status a controller would: Ready with `status` and `message`, handling
/// `requested_at`, with `extra` status fields merged in.
fn set_status(
    cluster: &TestCluster,
    resource: &str,
    name: &str,
    ready: &str,
    message: &str,
    requested_at: Option<&str>,
    extra: Value,
) {
    let mut status = serde_json::json!({
        "conditions": [{
            "type": "Ready", "status": ready, "reason": if ready == "True" { "Succeeded" } else { "Failed" },
            "message": message, "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1,
        }],
        "observedGeneration": 1,
    });
    if let Some(at) = requested_at {
        status["lastHandledReconcileAt"] = at.into();
    }
    if let (Some(status), Some(extra)) = (status.as_object_mut(), extra.as_object()) {
        status.extend(extra.clone());
    }
    let patch = serde_json::json!({ "status": status }).to_string();
    cluster
        .kubectl_ok(&[
            "-n",
            NS,
            "patch",
            resource,
            name,
            "--subresource=status",
            "--type=merge",
            "-p",
            &patch,
        ])
        .expect("patch status");
}

/// Installs Flux `minor` with the operator, the agent, and one object of each kind in NS
/// (plus a Kustomization in OTHER_NS); returns a kubeconfig with rights on everything.
async fn prepare(cluster: &TestCluster, minor: &Minor, image_components: bool) -> PathBuf {
    cluster.ensure_flux_operator().expect("flux-operator");
    let client = cluster.client().await.expect("client");
    if image_components {
        cluster
            .apply_yaml(&format!(
                "apiVersion: fluxcd.controlplane.io/v1\nkind: FluxInstance\n\
                 metadata: {{name: flux, namespace: flux-system}}\n\
                 spec:\n  distribution: {{version: \"{}\", registry: ghcr.io/fluxcd}}\n\
                 \x20 components: [source-controller, kustomize-controller, helm-controller, notification-controller, image-reflector-controller, image-automation-controller]\n\
                 \x20 cluster: {{type: kubernetes, networkPolicy: true}}\n",
                minor.instance_version
            ))
            .expect("FluxInstance");
    } else {
        apply_flux_instance(&client, minor.instance_version)
            .await
            .expect("FluxInstance");
    }
    // The operator applies that release's CRDs.
    for (kind, api_version) in minor.versions {
        let crd = format!(
            "crd/{}.{}",
            plural(kind),
            api_version.split('/').next().unwrap()
        );
        wait_for(&crd, Duration::from_secs(180), || async {
            cluster
                .kubectl_ok(&["wait", "--for=condition=Established", &crd, "--timeout=1s"])
                .ok()
        })
        .await
        .expect("Flux CRDs installed by the operator");
    }
    cluster.ensure_agent().expect("agent");

    let mut objects = String::new();
    for namespace in [NS, OTHER_NS] {
        objects.push_str(&format!(
            "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {namespace}}}\n---\n"
        ));
    }
    for (kind, api_version) in minor.versions {
        let labels = if *kind == "Kustomization" {
            "{team: a}"
        } else {
            "{}"
        };
        objects.push_str(&format!(
            "apiVersion: {api_version}\nkind: {kind}\nmetadata: {{name: podinfo, namespace: {NS}, labels: {labels}}}\nspec: {}\n---\n",
            spec(kind)
        ));
    }
    objects.push_str(&format!(
        "apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata: {{name: other, namespace: {OTHER_NS}}}\nspec: {}\n",
        spec("Kustomization")
    ));
    // A reused cluster starts over: objects left by an earlier run are gone first.
    let resources = minor
        .versions
        .iter()
        .map(|(kind, api_version)| {
            format!(
                "{}.{}",
                plural(kind),
                api_version.split('/').next().unwrap()
            )
        })
        .collect::<Vec<_>>()
        .join(",");
    for namespace in [NS, OTHER_NS] {
        // A namespace that does not exist yet has nothing to delete.
        let _ = cluster.kubectl(&[
            "-n",
            namespace,
            "delete",
            &resources,
            "--all",
            "--ignore-not-found",
            "--wait",
        ]);
    }
    cluster.apply_yaml(&objects).expect("Flux objects");

    // An operator with rights on everything (a token user: a client-certificate user would
    // reach the agent as ServiceAccount tenantflux-client).
    let kubeconfig = cluster
        .token_kubeconfig("tenantflux-system", "wl-operator")
        .expect("kubeconfig");
    cluster
        .apply_yaml(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\n\
             metadata: {name: wl-operator}\n\
             roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}\n\
             subjects: [{kind: ServiceAccount, name: wl-operator, namespace: tenantflux-system}]\n",
        )
        .expect("binding");
    kubeconfig
}

/// Everything a user does, on one cluster.
async fn exercise(cluster: &TestCluster, minor: &Minor, image_components: bool) {
    let admin = prepare(cluster, minor, image_components).await;

    // Lists come from the agent's caches at the served versions, once they hold everything.
    let listed = wait_for(
        "get all -n wl-a to list one object of every kind",
        Duration::from_secs(60),
        || async {
            let list = plugin_json(cluster, &admin, &["get", "all", "-n", NS]);
            (list["items"].as_array().map_or(0, Vec::len) == minor.versions.len()).then_some(list)
        },
    )
    .await
    .expect("every kind listed");
    for (kind, api_version) in minor.versions {
        let item = listed["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["kind"] == *kind)
            .unwrap_or_else(|| panic!("{kind} missing: {listed}"));
        assert_eq!(item["apiVersion"], *api_version, "{kind}");
        assert_eq!(item["namespace"], NS);
        assert_eq!(item["suspended"], false);
    }
    if !image_components {
        let output = plugin(cluster, &admin, &["get", "imagepolicy", "-n", NS]);
        assert_eq!(output.status.code(), Some(1));
        assert!(
            stderr(&output).contains(
                "the cluster does not serve ImagePolicy (imagepolicies.image.toolkit.fluxcd.io)"
            ),
            "{}",
            stderr(&output)
        );
    }

    // A status written as source-controller would shows in flux get's columns.
    set_status(
        cluster,
        "gitrepositories.source.toolkit.fluxcd.io",
        "podinfo",
        "True",
        "stored artifact for revision 'master@sha1:0123abcd'",
        None,
        serde_json::json!({"artifact": {"revision": "master@sha1:0123abcd", "path": "p", "url": "http://x/p", "lastUpdateTime": "2026-01-01T00:00:00Z", "digest": "sha256:0123456789012345678901234567890123456789012345678901234567890123"}}),
    );
    let table = wait_for(
        "the GitRepository's status in get",
        Duration::from_secs(30),
        || async {
            let table = plugin_ok(cluster, &admin, &["get", "gitrepo", "-n", NS]);
            table.contains("master@sha1:0123abcd").then_some(table)
        },
    )
    .await
    .expect("status shown");
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        ["NAME", "REVISION", "SUSPENDED", "READY", "MESSAGE"]
    );
    assert_eq!(
        lines[1].split_whitespace().take(4).collect::<Vec<_>>(),
        ["podinfo", "master@sha1:0123abcd", "False", "True"]
    );
    assert!(lines[1].ends_with("stored artifact for revision 'master@sha1:0123abcd'"));

    // -A puts NAMESPACE first; get all groups by kind; --no-header drops the headers.
    let all = plugin_ok(cluster, &admin, &["get", "all", "-A"]);
    assert!(all.starts_with("NAMESPACE   NAME"), "{all}");
    assert!(all.contains("\nwl-a        gitrepository/podinfo"), "{all}");
    assert!(all.contains("wl-b        kustomization/other"), "{all}");
    let no_header = plugin_ok(cluster, &admin, &["get", "ks", "-A", "--no-header"]);
    assert_eq!(no_header.lines().count(), 2, "{no_header}");
    assert!(!no_header.contains("NAME"), "{no_header}");

    // Selectors.
    let ready = plugin_json(
        cluster,
        &admin,
        &["get", "all", "-n", NS, "--status-selector", "ready=true"],
    );
    let kinds: Vec<&str> = ready["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["GitRepository"]);
    let labelled = plugin_json(cluster, &admin, &["get", "all", "-A", "-l", "team=a"]);
    let names: Vec<(&str, &str)> = labelled["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["kind"].as_str().unwrap(),
                i["namespace"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(names, [("Kustomization", NS)]);
    let yaml = plugin_ok(
        cluster,
        &admin,
        &["get", "hr", "podinfo", "-n", NS, "-o", "yaml"],
    );
    assert!(
        yaml.contains("kind: HelmRelease")
            && yaml.contains("apiVersion: helm.toolkit.fluxcd.io/v2"),
        "{yaml}"
    );
    assert!(yaml.contains("kind: HelmRepository"), "the source: {yaml}");

    // suspend / resume write spec.suspend (and resume asks for a reconciliation).
    plugin_ok(cluster, &admin, &["suspend", "ks", "podinfo", "-n", NS]);
    let ks = get_json(
        cluster,
        "kustomizations.kustomize.toolkit.fluxcd.io",
        NS,
        "podinfo",
    );
    assert_eq!(ks["spec"]["suspend"], true);
    let managers: Vec<&str> = ks["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["manager"].as_str())
        .collect();
    assert!(managers.contains(&"tenantflux-agent"), "{managers:?}");
    wait_for("SUSPENDED True in get", Duration::from_secs(30), || async {
        let table = plugin_ok(cluster, &admin, &["get", "ks", "podinfo", "-n", NS]);
        table
            .lines()
            .nth(1)
            .is_some_and(|l| l.split_whitespace().nth(1) == Some("True"))
            .then_some(())
    })
    .await
    .expect("suspended shown");
    let resumed = plugin_ok(cluster, &admin, &["resume", "ks", "podinfo", "-n", NS]);
    assert!(
        resumed.contains("Kustomization wl-a/podinfo resumed"),
        "{resumed}"
    );
    let ks = get_json(
        cluster,
        "kustomizations.kustomize.toolkit.fluxcd.io",
        NS,
        "podinfo",
    );
    assert_eq!(ks["spec"]["suspend"], false);
    assert!(annotation(&ks, "reconcile.fluxcd.io/requestedAt").is_some());

    // reconcile: requestedAt; --force adds forceAt with the same value (HelmRelease only);
    // --with-source annotates the source with the same value too.
    plugin_ok(
        cluster,
        &admin,
        &["reconcile", "hr", "podinfo", "-n", NS, "--force"],
    );
    let hr = get_json(
        cluster,
        "helmreleases.helm.toolkit.fluxcd.io",
        NS,
        "podinfo",
    );
    let requested = annotation(&hr, "reconcile.fluxcd.io/requestedAt").expect("requestedAt");
    assert_eq!(
        annotation(&hr, "reconcile.fluxcd.io/forceAt").as_ref(),
        Some(&requested)
    );
    let output = plugin(
        cluster,
        &admin,
        &["reconcile", "ks", "podinfo", "-n", NS, "--force"],
    );
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains("force applies to HelmReleases only"),
        "{}",
        stderr(&output)
    );
    plugin_ok(
        cluster,
        &admin,
        &["reconcile", "ks", "podinfo", "-n", NS, "--with-source"],
    );
    let ks = get_json(
        cluster,
        "kustomizations.kustomize.toolkit.fluxcd.io",
        NS,
        "podinfo",
    );
    let git = get_json(
        cluster,
        "gitrepositories.source.toolkit.fluxcd.io",
        NS,
        "podinfo",
    );
    let at = annotation(&ks, "reconcile.fluxcd.io/requestedAt");
    assert!(at.is_some());
    assert_eq!(annotation(&git, "reconcile.fluxcd.io/requestedAt"), at);

    // --wait follows the object until Ready settles for this request: success...
    for (ready, message, success) in [
        ("True", "Applied revision: master@sha1:0123abcd", true),
        ("False", "kustomize build failed: no such path", false),
    ] {
        let previous = annotation(
            &get_json(
                cluster,
                "kustomizations.kustomize.toolkit.fluxcd.io",
                NS,
                "podinfo",
            ),
            "reconcile.fluxcd.io/requestedAt",
        );
        let child = cluster
            .plugin_command(
                Some(&admin),
                &[
                    "reconcile",
                    "ks",
                    "podinfo",
                    "-n",
                    NS,
                    "--wait",
                    "--timeout",
                    "60s",
                ],
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn reconcile --wait");
        let requested = wait_for("the new requestedAt", Duration::from_secs(30), || async {
            let ks = get_json(
                cluster,
                "kustomizations.kustomize.toolkit.fluxcd.io",
                NS,
                "podinfo",
            );
            annotation(&ks, "reconcile.fluxcd.io/requestedAt")
                .filter(|a| Some(a) != previous.as_ref())
        })
        .await
        .expect("reconcile requested");
        // Still reconciling first: --wait must not stop at a Ready of an older request.
        set_status(
            cluster,
            "kustomizations.kustomize.toolkit.fluxcd.io",
            "podinfo",
            "Unknown",
            "reconciling",
            Some(&requested),
            serde_json::json!({}),
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
        set_status(
            cluster,
            "kustomizations.kustomize.toolkit.fluxcd.io",
            "podinfo",
            ready,
            message,
            Some(&requested),
            serde_json::json!({"lastAppliedRevision": "master@sha1:0123abcd"}),
        );
        let output = tokio::task::spawn_blocking(move || child.wait_with_output())
            .await
            .unwrap()
            .expect("reconcile --wait output");
        assert_eq!(
            output.status.success(),
            success,
            "{}{}",
            stdout(&output),
            stderr(&output)
        );
        let said = format!("{}{}", stdout(&output), stderr(&output));
        assert!(said.contains(message), "{said}");
        assert!(
            stderr(&output).contains("◎ waiting for Kustomization wl-a/podinfo"),
            "{}",
            stderr(&output)
        );
    }
    let output = plugin(
        cluster,
        &admin,
        &[
            "reconcile",
            "ks",
            "podinfo",
            "-n",
            NS,
            "--wait",
            "--timeout",
            "2s",
        ],
    );
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains("timed out after 2s"),
        "{}",
        stderr(&output)
    );

    // The FluxInstance: suspend/resume by flux-operator's annotation.
    plugin_ok(
        cluster,
        &admin,
        &["suspend", "instance", "flux", "-n", "flux-system"],
    );
    let instance = get_json(
        cluster,
        "fluxinstances.fluxcd.controlplane.io",
        "flux-system",
        "flux",
    );
    assert_eq!(
        annotation(&instance, "fluxcd.controlplane.io/reconcile").as_deref(),
        Some("disabled")
    );
    plugin_ok(
        cluster,
        &admin,
        &["resume", "instance", "flux", "-n", "flux-system"],
    );
    let instance = get_json(
        cluster,
        "fluxinstances.fluxcd.controlplane.io",
        "flux-system",
        "flux",
    );
    assert_eq!(
        annotation(&instance, "fluxcd.controlplane.io/reconcile").as_deref(),
        Some("enabled")
    );
    assert!(annotation(&instance, "reconcile.fluxcd.io/requestedAt").is_some());

    // Clear errors, exit 1.
    let output = plugin(cluster, &admin, &["get", "deployments"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output)
            .contains("unknown kind \"deployments\"; known kinds: gitrepository (gitrepo)"),
        "{}",
        stderr(&output)
    );
    let output = plugin(cluster, &admin, &["suspend", "ks", "missing", "-n", NS]);
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(
        stderr(&output).trim(),
        "error: Kustomization wl-a/missing not found"
    );

    tenant_acts_in_its_namespace_only(cluster).await;
}

/// A tenant allowed list/get/watch/patch on Kustomizations in NS only.
async fn tenant_acts_in_its_namespace_only(cluster: &TestCluster) {
    let tenant = cluster
        .token_kubeconfig(NS, "tenant")
        .expect("tenant kubeconfig");
    cluster
        .apply_yaml(&format!(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\n\
             metadata: {{name: wl-tenant, namespace: tenantflux-system}}\n\
             roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: tenantflux-user}}\n\
             subjects: [{{kind: ServiceAccount, name: tenant, namespace: {NS}}}]\n---\n\
             apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\n\
             metadata: {{name: flux-kustomizations, namespace: {NS}}}\n\
             rules: [{{apiGroups: [kustomize.toolkit.fluxcd.io], resources: [kustomizations], verbs: [get, list, watch, patch]}}]\n---\n\
             apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\n\
             metadata: {{name: flux-kustomizations, namespace: {NS}}}\n\
             roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: flux-kustomizations}}\n\
             subjects: [{{kind: ServiceAccount, name: tenant, namespace: {NS}}}]\n"
        ))
        .expect("tenant RBAC");

    let ks = plugin_ok(cluster, &tenant, &["get", "ks", "-n", NS]);
    assert!(ks.contains("podinfo"), "{ks}");
    plugin_ok(cluster, &tenant, &["suspend", "ks", "podinfo", "-n", NS]);
    let object = get_json(
        cluster,
        "kustomizations.kustomize.toolkit.fluxcd.io",
        NS,
        "podinfo",
    );
    assert_eq!(object["spec"]["suspend"], true);
    plugin_ok(cluster, &tenant, &["resume", "ks", "podinfo", "-n", NS]);

    // get all shows what the tenant may see, and says what it left out.
    let all = plugin(cluster, &tenant, &["get", "all", "-n", NS]);
    assert!(all.status.success(), "{}", stderr(&all));
    assert!(
        stdout(&all).contains("kustomization/podinfo") && !stdout(&all).contains("gitrepository/"),
        "{}",
        stdout(&all)
    );
    assert!(stderr(&all).contains("warning: GitRepository left out: user \"system:serviceaccount:wl-a:tenant\" may not list gitrepositories.source.toolkit.fluxcd.io in namespace \"wl-a\""), "{}", stderr(&all));

    // Elsewhere: refused, naming the permission.
    for (args, permission) in [
        (
            vec!["suspend", "ks", "other", "-n", OTHER_NS],
            "may not patch kustomizations.kustomize.toolkit.fluxcd.io in namespace \"wl-b\"",
        ),
        (
            vec!["get", "ks", "-n", OTHER_NS],
            "may not list kustomizations.kustomize.toolkit.fluxcd.io in namespace \"wl-b\"",
        ),
        (
            vec!["get", "ks", "-A"],
            "may not list kustomizations.kustomize.toolkit.fluxcd.io cluster-wide",
        ),
        (
            vec!["reconcile", "gitrepo", "podinfo", "-n", NS],
            "may not patch gitrepositories.source.toolkit.fluxcd.io in namespace \"wl-a\"",
        ),
        (
            vec!["reconcile", "ks", "podinfo", "-n", NS, "--with-source"],
            "may not patch gitrepositories.source.toolkit.fluxcd.io in namespace \"wl-a\"",
        ),
    ] {
        let output = plugin(cluster, &tenant, &args);
        assert_eq!(output.status.code(), Some(1), "{args:?}");
        assert!(
            stderr(&output).contains(permission),
            "{args:?}: {}",
            stderr(&output)
        );
    }
    let other = get_json(
        cluster,
        "kustomizations.kustomize.toolkit.fluxcd.io",
        OTHER_NS,
        "other",
    );
    assert!(other["spec"]["suspend"].is_null(), "untouched: {other}");
}

#[tokio::test]
async fn flux_2_9_on_the_shared_cluster() {
    exercise(TestCluster::shared(), &FLUX_2_9, false).await;
}

#[tokio::test]
async fn flux_2_6_with_image_automation_on_a_cluster_of_its_own() {
    let cluster =
        TestCluster::start(&format!("wl-flux26-{}", std::process::id())).expect("second cluster");
    exercise(&cluster, &FLUX_2_6, true).await;
}
