//! Safe Flux upgrades against the real control plane, the real flux-operator and the real
//! source-controller and kustomize-controller: a cluster that ran Flux 2.5 (OCIRepository
//! stored at v1beta2), then 2.6 and 2.7 without migration, with stored versions from older
//! installs, and a Kustomization that kustomize-controller v1.7.3 applies from a local git
//! repository holding a `source.toolkit.fluxcd.io/v1beta2` HelmRepository. `upgrade plan --to
//! 2.9.x` is blocked (outside the policy, and by Git, from the Kustomization's real inventory);
//! Git is fixed and re-applied, and the upgrade applied with the agent killed (SIGKILL) during
//! the migration and again after the version bump: the restarted agent resumes from the record
//! in the cluster, does not redo finished CRDs, and bumps the FluxInstance exactly once. The
//! controllers then run at v1.9.4 (Flux 2.9.5 rolls out v1.9.5, run here as the v1.9.4 build:
//! FLUX_CONTROLLER_SUBSTITUTES), and the report shows the Kustomization Ready again at its
//! revision. 2.8 is skipped: its kustomize-controller (v1.8.x) is not served by the module proxy
//! here, and neither flux-operator nor the planner needs a minor at a time. HelmReleases have no
//! controller here (helm-controller is not served either): they are only migrated.

use std::{
    process::{Output, Stdio},
    time::Duration,
};

use k8s_openapi::{
    api::core::v1::ConfigMap,
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    jiff::{SignedDuration, Timestamp},
};
use kube::Api;
use serde_json::{Value, json};
use tenantflux_tests::{
    TestCluster,
    flux::{GitRepo, fleet_apps, revision},
    flux_instances, path,
    tenant::AGENT_NAMESPACE,
    wait_for,
};
/// Objects of each migrated kind; enough for the migration to be caught half-way.
const OBJECTS: usize = 300;
/// The CRDs migrated, in the order the agent migrates them: helmrepositories for the
/// managedFields kustomize-controller wrote at v1beta2 (nothing is stored at v1beta2; without
/// the rewrite, its server-side applies fail once 2.9 stops serving v1beta2).
const MIGRATED: [&str; 4] = [
    "gitrepositories.source.toolkit.fluxcd.io",
    "helmreleases.helm.toolkit.fluxcd.io",
    "helmrepositories.source.toolkit.fluxcd.io",
    "ocirepositories.source.toolkit.fluxcd.io",
];

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Applies the FluxInstance as the tenant would (its own field manager), at `version`.
fn apply_instance(cluster: &TestCluster, version: &str) {
    cluster
        .apply_yaml(&format!(
            "apiVersion: fluxcd.controlplane.io/v1\nkind: FluxInstance\n\
             metadata: {{name: flux, namespace: flux-system}}\n\
             spec:\n  distribution: {{version: \"{version}\", registry: ghcr.io/fluxcd}}\n  \
             migrateResources: false\n  \
             components: [source-controller, kustomize-controller, helm-controller, notification-controller]\n  \
             cluster: {{type: kubernetes, networkPolicy: true}}\n"
        ))
        .expect("FluxInstance");
}

async fn instance(client: &kube::Client) -> Value {
    let object = flux_instances(client)
        .get("flux")
        .await
        .expect("FluxInstance");
    serde_json::to_value(object).unwrap()
}

/// Waits until the FluxInstance is Ready at `version` (e.g. `v2.6.4`).
async fn wait_ready_at(client: &kube::Client, version: &str) {
    wait_for(
        &format!("FluxInstance flux Ready at {version}"),
        Duration::from_secs(300),
        || async {
            let i = instance(client).await;
            let applied = i["status"]["lastAppliedRevision"]
                .as_str()
                .unwrap_or_default();
            let ready = tenantflux_tests::condition_status(&i, "Ready") == Some("True");
            let current = i["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| {
                    c["type"] == "Ready" && c["observedGeneration"] == i["metadata"]["generation"]
                });
            (ready && current && applied.starts_with(&format!("{version}@"))).then_some(())
        },
    )
    .await
    .unwrap();
}

async fn record(client: &kube::Client) -> Option<Value> {
    let cm = Api::<ConfigMap>::namespaced(client.clone(), AGENT_NAMESPACE)
        .get_opt("tenantflux-upgrade")
        .await
        .ok()??;
    serde_json::from_str(cm.data?.get("state.json")?).ok()
}

async fn stored_versions(client: &kube::Client, crd: &str) -> Vec<String> {
    Api::<CustomResourceDefinition>::all(client.clone())
        .get(crd)
        .await
        .expect("CRD")
        .status
        .and_then(|s| s.stored_versions)
        .unwrap_or_default()
}

/// How many objects of a migrated CRD exist: OBJECTS each, and the GitRepository of Git; the
/// one HelmRepository Git holds.
fn objects_of(crd: &str) -> i64 {
    match crd {
        c if c == MIGRATED[0] => OBJECTS as i64 + 1,
        c if c == MIGRATED[2] => 1,
        _ => OBJECTS as i64,
    }
}

fn codes(plan: &Value, list: &str) -> Vec<String> {
    plan[list]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["code"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn upgrade_is_planned_blocked_fixed_and_applied_across_agent_kills() {
    // It installs Flux 2.7, whose controllers tests/run builds in the background.
    tenantflux_tests::await_later_builds().expect("the Flux 2.7 controllers");
    let cluster = TestCluster::start(&format!("tfu-up-{}", std::process::id()))
        .expect("starting the cluster");
    cluster.ensure_flux_operator().expect("flux-operator");
    let client = cluster.client().await.unwrap();
    let dir = tempfile::tempdir().unwrap();

    // The platform's key; the agent runs with it (every restart below keeps it).
    let keys = dir.path().join("keys");
    let out = cluster
        .kubectl_tenantflux(None, &["policy", "keygen", "--out", path(&keys)])
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let public = keys.join("ed25519.pub");
    let agent_env = [("TENANTFLUX_POLICY_PUBLIC_KEY", path(&public))];
    cluster.restart_agent_with(&agent_env).expect("agent");
    let platform = cluster
        .policy_pusher_kubeconfig()
        .expect("platform account");
    let push = |generation: u32, versions: &str| {
        let deadline = Timestamp::now()
            .checked_add(SignedDuration::from_hours(24 * 10))
            .unwrap()
            .strftime("%Y-%m-%d")
            .to_string();
        let unsigned = dir.path().join(format!("policy-{generation}.yaml"));
        std::fs::write(
            &unsigned,
            format!(
                "apiVersion: tenantflux.io/v1alpha1\nkind: Policy\nmetadata: {{name: acme}}\n\
                 spec:\n  generation: {generation}\n  distribution:\n    versions: \"{versions}\"\n    \
                 upgradeDeadline: {{minimumVersion: 2.8.0, date: \"{deadline}\", warnDays: 30}}\n"
            ),
        )
        .unwrap();
        let signed = dir.path().join(format!("signed-{generation}.yaml"));
        let key = keys.join("ed25519.key");
        let out = cluster
            .kubectl_tenantflux(
                None,
                &[
                    "policy",
                    "sign",
                    "-f",
                    path(&unsigned),
                    "--key",
                    path(&key),
                    "--out",
                    path(&signed),
                ],
            )
            .unwrap();
        assert!(out.status.success(), "{}", text(&out));
        let out = cluster
            .kubectl_tenantflux(Some(&platform), &["policy", "push", "-f", path(&signed)])
            .unwrap();
        assert!(out.status.success(), "{}", text(&out));
        deadline
    };

    // The tenant: cluster-admin of its own cluster, reaching the agent with a token.
    let tenant = cluster.cluster_admin_token_user("tenant").expect("tenant");
    let as_tenant = |args: &[&str]| cluster.kubectl_tenantflux(Some(&tenant), args).unwrap();
    let plan = |to: &str| {
        let out = as_tenant(&["upgrade", "plan", "--to", to, "-o", "json"]);
        let plan: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|err| panic!("plan JSON: {err}: {}", text(&out)));
        (out.status.code(), plan)
    };

    // History: Flux 2.5 stores OCIRepository at v1beta2; objects are created; then 2.6 (v1
    // storage) and 2.7 without migration, so v1beta2 stays in storedVersions. The objects are
    // suspended: nothing reaches the network for them.
    apply_instance(&cluster, "2.5.x");
    wait_ready_at(&client, "v2.5.1").await;
    let mut objects = String::from("apiVersion: v1\nkind: Namespace\nmetadata: {name: apps}\n");
    for i in 0..OBJECTS {
        objects.push_str(&format!(
            "---\napiVersion: source.toolkit.fluxcd.io/v1beta2\nkind: OCIRepository\n\
             metadata: {{name: oci-{i}, namespace: apps}}\n\
             spec: {{suspend: true, interval: 10m, url: oci://ghcr.io/stefanprodan/manifests/podinfo, ref: {{tag: latest}}}}\n\
             ---\napiVersion: source.toolkit.fluxcd.io/v1\nkind: GitRepository\n\
             metadata: {{name: git-{i}, namespace: apps}}\n\
             spec: {{suspend: true, interval: 10m, url: https://github.com/stefanprodan/podinfo}}\n\
             ---\napiVersion: helm.toolkit.fluxcd.io/v2\nkind: HelmRelease\n\
             metadata: {{name: hr-{i}, namespace: apps}}\n\
             spec: {{suspend: true, interval: 10m, chart: {{spec: {{chart: podinfo, sourceRef: {{kind: HelmRepository, name: podinfo}}}}}}}}\n"
        ));
    }
    cluster.apply_yaml(&objects).expect("Flux objects");
    apply_instance(&cluster, "2.6.x");
    wait_ready_at(&client, "v2.6.4").await;
    apply_instance(&cluster, "2.7.x");
    wait_ready_at(&client, "v2.7.5").await;
    assert_eq!(
        stored_versions(&client, MIGRATED[3]).await,
        ["v1beta2", "v1"]
    );
    // Stored versions an older install leaves, which 2.7 still serves and 2.9 does not (a
    // fixture through the CRD status subresource, as the API server records them).
    for (crd, old, new) in [
        (MIGRATED[0], "v1beta2", "v1"),
        (MIGRATED[1], "v2beta2", "v2"),
    ] {
        cluster
            .kubectl_ok(&[
                "patch",
                "crd",
                crd,
                "--subresource=status",
                "--type=merge",
                "-p",
                &json!({"status": {"storedVersions": [old, new]}}).to_string(),
            ])
            .unwrap();
    }
    // Git holds a HelmRepository at v1beta2, which the real kustomize-controller v1.7.3 applies.
    let repo = GitRepo::new("fleet").expect("git repository");
    let helm_repository = |version: &str| {
        format!(
            "apiVersion: source.toolkit.fluxcd.io/{version}\nkind: HelmRepository\n\
             metadata: {{name: podinfo, namespace: apps}}\n\
             spec: {{suspend: true, interval: 10m, url: https://stefanprodan.github.io/podinfo}}\n"
        )
    };
    let config = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings, namespace: apps}\ndata: {a: b}\n";
    let rev1 = repo
        .commit(
            &[
                ("apps/helmrepository.yaml", &helm_repository("v1beta2")),
                ("apps/configmap.yaml", config),
            ],
            &[],
            "apps at v1beta2",
        )
        .unwrap();
    let url = cluster.git_server(&repo).expect("git server");
    cluster.apply_yaml(&fleet_apps(&url)).unwrap();
    let applied = cluster
        .kustomization_applied(
            "flux-system",
            "apps",
            &revision(&rev1),
            Duration::from_secs(180),
        )
        .await
        .expect("kustomize-controller v1.7.3 applies Git");
    assert!(
        applied["status"]["inventory"]["entries"]
            .as_array()
            .unwrap()
            .iter()
            .any(
                |e| e["id"] == "apps_podinfo_source.toolkit.fluxcd.io_HelmRepository"
                    && e["v"] == "v1beta2"
            ),
        "{applied:#}"
    );
    // Flux 2.7.5 rolls out source-controller v1.7.4, run as v1.7.3 (v1.7.4 is not served).
    for (deployment, binary) in [
        ("kustomize-controller", "kustomize-controller-v1.7.3"),
        ("source-controller", "source-controller-v1.7.3"),
    ] {
        cluster
            .flux_controller_runs(deployment, binary)
            .await
            .unwrap();
    }

    // A policy that does not allow 2.9 yet: blocked twice over.
    let deadline = push(1, ">=2.5.0 <2.9.0");
    let (code, blocked) = plan("2.9.x");
    // 5: the upgrade is blocked.
    assert_eq!(code, Some(5), "{blocked:#}");
    assert!(blocked["blocked"].as_bool().unwrap());
    assert_eq!(blocked["target"], "2.9.5");
    assert_eq!(blocked["currentVersion"], "2.7.5");
    assert_eq!(
        codes(&blocked, "blockers"),
        ["policy", "removed-api-in-git"]
    );
    let messages = blocked.to_string();
    assert!(
        messages.contains(r#"inside \">=2.5.0 <2.9.0\" allowed by policy \"acme\" generation 1"#),
        "{messages}"
    );
    assert!(
        messages.contains("Kustomization flux-system/apps (source GitRepository/flux-system/fleet, path \\\"./apps\\\")"),
        "{messages}"
    );
    assert!(
        messages.contains("HelmRepository apps/podinfo as source.toolkit.fluxcd.io/v1beta2"),
        "{messages}"
    );
    assert_eq!(blocked["deadline"]["date"], deadline.as_str());
    assert_eq!(blocked["deadline"]["minimumVersion"], "2.8.0");
    // The instance's current range is below the deadline's minimum: a warning, with the date.
    let (_, current) = plan("2.7.x");
    assert!(
        codes(&current, "warnings").contains(&"deadline".to_owned()),
        "{current:#}"
    );
    let migrations: Vec<(String, i64)> = blocked["migrations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["crd"].as_str().unwrap().to_owned(),
                m["objects"].as_i64().unwrap(),
            )
        })
        .collect();
    let expected: Vec<(String, i64)> = MIGRATED
        .iter()
        .map(|c| (c.to_string(), objects_of(c)))
        .collect();
    assert_eq!(migrations, expected);
    let generation = instance(&client).await["metadata"]["generation"]
        .as_i64()
        .unwrap();
    let refused = as_tenant(&["upgrade", "apply", "--to", "2.9.x", "--yes"]);
    assert_eq!(refused.status.code(), Some(5), "{}", text(&refused));
    assert!(text(&refused).contains("is blocked"), "{}", text(&refused));
    assert_eq!(
        instance(&client).await["metadata"]["generation"],
        generation
    );
    assert!(record(&client).await.is_none(), "nothing started");

    // A user who may read the FluxInstance but list nothing: the plan runs with the agent's
    // rights, so the objects are counted for them, never named, and the upgrade is still blocked.
    let viewer = cluster
        .token_kubeconfig(AGENT_NAMESPACE, "viewer")
        .expect("viewer");
    cluster
        .apply_yaml(&format!(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\n\
             metadata: {{name: instance-viewer, namespace: flux-system}}\n\
             rules: [{{apiGroups: [fluxcd.controlplane.io], resources: [fluxinstances], verbs: [get]}}]\n---\n\
             apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\n\
             metadata: {{name: instance-viewer, namespace: flux-system}}\n\
             roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: instance-viewer}}\n\
             subjects: [{{kind: ServiceAccount, name: viewer, namespace: {AGENT_NAMESPACE}}}]\n---\n\
             apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\n\
             metadata: {{name: viewer-user, namespace: {AGENT_NAMESPACE}}}\n\
             roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: tenantflux-user}}\n\
             subjects: [{{kind: ServiceAccount, name: viewer, namespace: {AGENT_NAMESPACE}}}]\n"
        ))
        .unwrap();
    let as_viewer = |args: &[&str]| cluster.kubectl_tenantflux(Some(&viewer), args).unwrap();
    let counted = as_viewer(&["upgrade", "plan", "--to", "2.9.x", "-o", "json"]);
    assert_eq!(counted.status.code(), Some(5), "{}", text(&counted));
    let counted: Value = serde_json::from_slice(&counted.stdout).expect("plan JSON");
    assert!(counted["blocked"].as_bool().unwrap());
    assert_eq!(
        counted["removedApiUses"],
        serde_json::json!([]),
        "{counted:#}"
    );
    assert!(
        counted["hiddenRemovedApiUses"].as_u64().unwrap() >= 1,
        "{counted:#}"
    );
    let said = counted.to_string();
    for named in ["podinfo", "flux-system/apps", "./apps", "oci-0"] {
        assert!(!said.contains(named), "{named} named to the viewer: {said}");
    }
    assert!(
        said.contains("in namespaces you may not list is applied from Git")
            || said.contains("in namespaces you may not list are applied from Git"),
        "{said}"
    );

    // The platform allows 2.9; Git still applies v1beta2.
    push(2, ">=2.5.0 <2.10.0");
    let (code, plan2) = plan("2.9.x");
    assert_eq!(code, Some(5));
    assert_eq!(codes(&plan2, "blockers"), ["removed-api-in-git"]);
    // Fixed in Git, and re-applied by kustomize-controller once asked to.
    let rev2 = repo
        .commit(
            &[("apps/helmrepository.yaml", &helm_repository("v1"))],
            &[],
            "apps at v1",
        )
        .unwrap();
    let reconciled = as_tenant(&[
        "reconcile",
        "ks",
        "apps",
        "-n",
        "flux-system",
        "--with-source",
        "--wait",
    ]);
    assert!(reconciled.status.success(), "{}", text(&reconciled));
    assert!(
        text(&reconciled).contains(&format!("Applied revision: {}", revision(&rev2))),
        "{}",
        text(&reconciled)
    );
    let (code, ready) = plan("2.9.x");
    assert_eq!(code, Some(0), "{ready:#}");
    assert!(!ready["blocked"].as_bool().unwrap());

    // A user who may read the FluxInstance may plan, but not upgrade.
    let planned = as_viewer(&["upgrade", "plan", "--to", "2.9.x"]);
    assert!(planned.status.success(), "{}", text(&planned));
    let denied = as_viewer(&["upgrade", "apply", "--to", "2.9.x", "--yes"]);
    // 6: a permission is missing.
    assert_eq!(denied.status.code(), Some(6), "{}", text(&denied));
    assert!(
        text(&denied).contains("may not patch fluxinstances.fluxcd.controlplane.io"),
        "{}",
        text(&denied)
    );
    assert!(record(&client).await.is_none(), "nothing started");
    // Without a terminal to confirm on, --yes is required.
    let unconfirmed = as_tenant(&["upgrade", "apply", "--to", "2.9.x"]);
    assert_eq!(unconfirmed.status.code(), Some(1), "{}", text(&unconfirmed));
    assert!(
        text(&unconfirmed).contains("refusing to upgrade without confirmation"),
        "{}",
        text(&unconfirmed)
    );
    assert!(record(&client).await.is_none(), "nothing started");

    // Apply, one object at a time so the migration can be caught half-way.
    let child = cluster
        .plugin_command(
            Some(&tenant),
            &[
                "upgrade",
                "apply",
                "--to",
                "2.9.x",
                "--yes",
                "--concurrency",
                "1",
                "-o",
                "json",
            ],
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("upgrade apply");
    let apply = tokio::task::spawn_blocking(move || child.wait_with_output());

    // Kill 1: some CRDs done, some not.
    wait_for(
        "the migration half-way",
        Duration::from_secs(120),
        || async {
            let r = record(&client).await?;
            let crds = r["crds"].as_array()?.clone();
            (r["phase"] == "migrating"
                && crds.first()?["done"] == true
                && crds.last()?["done"] == false)
                .then_some(crds)
        },
    )
    .await
    .unwrap();
    cluster.kill_agent().expect("kill -9 during migration");
    // What the killed agent recorded last: it may have started another CRD between the read
    // above and the kill.
    let at_kill = record(&client).await.expect("the record")["crds"]
        .as_array()
        .expect("CRDs in the record")
        .clone();
    cluster
        .restart_agent_with(&agent_env)
        .expect("agent restart");

    // Kill 2: after the version bump, while flux-operator rolls it out.
    wait_for("the bump", Duration::from_secs(120), || async {
        let r = record(&client).await?;
        (r["phase"] == "waiting").then_some(())
    })
    .await
    .unwrap();
    cluster.kill_agent().expect("kill -9 after the bump");
    // As if the agent had died between writing the FluxInstance and recording it: the record
    // says the bump is still to do. The resumed agent must find it done and not write again.
    let mut r = record(&client).await.unwrap();
    r["phase"] = json!("bumping");
    r["bumped"] = json!(false);
    cluster
        .kubectl_ok(&[
            "-n",
            AGENT_NAMESPACE,
            "patch",
            "configmap",
            "tenantflux-upgrade",
            "--type=merge",
            "-p",
            &json!({"data": {"state.json": r.to_string()}}).to_string(),
        ])
        .unwrap();
    cluster
        .restart_agent_with(&agent_env)
        .expect("agent restart");

    // The plugin followed the upgrade across both restarts.
    let output = tokio::time::timeout(Duration::from_secs(300), apply)
        .await
        .expect("upgrade apply to finish")
        .unwrap()
        .unwrap();
    assert!(output.status.success(), "{}", text(&output));
    let report: Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|err| panic!("report JSON: {err}: {}", text(&output)));
    assert!(
        text(&output).contains("lost tenantflux-agent"),
        "the plugin saw the agent go: {}",
        text(&output)
    );
    assert_eq!(report["phase"], "succeeded", "{report:#}");
    assert_eq!(report["target"], "2.9.5");
    assert_eq!(report["runs"], 3, "started once, resumed twice: {report:#}");
    assert!(report["bumped"].as_bool().unwrap());
    for (crd, before) in report["crds"].as_array().unwrap().iter().zip(&at_kill) {
        assert_eq!(crd["done"], true);
        assert_eq!(crd["migrated"], crd["total"]);
        assert_eq!(crd["total"], objects_of(crd["crd"].as_str().unwrap()));
        // Finished before the kill: not redone; cut short: started once more; not started
        // yet: started once.
        let expected = if before["done"] == false && before["attempts"] == 1 {
            2
        } else {
            1
        };
        assert_eq!(
            crd["attempts"], expected,
            "{crd:#} (at the kill: {before:#})"
        );
    }
    assert!(
        at_kill.iter().any(|c| c["done"] == true),
        "at least one CRD was finished at the kill: {at_kill:?}"
    );

    // The post-upgrade health check: the Kustomization Ready before is Ready again at its
    // revision, reconciled by kustomize-controller v1.9.4 (standing in for v1.9.5), which runs now.
    assert_eq!(
        report["kustomizations"],
        json!([{"namespace": "flux-system", "name": "apps", "revision": revision(&rev2),
                "readyAgain": true, "message": ""}]),
        "{report:#}"
    );
    for controller in ["source-controller", "kustomize-controller"] {
        cluster
            .flux_controller_runs(controller, &format!("{controller}-v1.9.4"))
            .await
            .unwrap();
    }

    // Exactly one bump: one new generation, written by the agent, and Ready at 2.9.5.
    let live = instance(&client).await;
    assert_eq!(
        live["metadata"]["generation"].as_i64().unwrap(),
        generation + 1,
        "{live:#}"
    );
    assert_eq!(report["instanceGeneration"], generation + 1);
    assert_eq!(live["spec"]["distribution"]["version"], "2.9.x");
    assert!(
        live["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["manager"] == "tenantflux-agent"),
        "{live:#}"
    );
    wait_ready_at(&client, "v2.9.5").await;
    for crd in MIGRATED {
        let storage = if crd.starts_with("helmreleases") {
            "v2"
        } else {
            "v1"
        };
        assert_eq!(stored_versions(&client, crd).await, [storage], "{crd}");
    }

    // The record stays for `upgrade status`; a downgrade across minors is refused with why.
    let status = as_tenant(&["upgrade", "status", "-o", "json"]);
    assert!(status.status.success(), "{}", text(&status));
    let status: Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(status["phase"], "succeeded");
    let (code, down) = plan("2.8.x");
    assert_eq!(code, Some(5));
    assert_eq!(codes(&down, "blockers"), ["downgrade"]);
    assert!(
        down.to_string().contains("flux-operator refuses"),
        "{down:#}"
    );
}
