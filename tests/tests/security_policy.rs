//! Attacks on the policy's enforcement, tried on the real control plane with the real
//! flux-operator's CRDs (SECURITY.md lists what each test stands for):
//! - a cluster-admin switching off the API server's own check: deleting the
//!   ValidatingAdmissionPolicyBinding, adding a `matchConditions` entry that matches nothing,
//!   narrowing the binding with a `namespaceSelector` (finding 3);
//! - a cluster-admin who first takes the agent's own RBAC on the admission objects away, then
//!   deletes the binding: the agent cannot restore it, and its proof (a dry run of a canary
//!   FluxInstance) reports NOT ENFORCED in `status`, `policy show`, a metric, an Event and
//!   `fleet status`, and enforced again once the RBAC is back.

use std::{path::Path, time::Duration};

use serde_json::Value;
use tenantflux_tests::{
    TestCluster, json, path,
    tenant::{AGENT_NAMESPACE, compliant_instance, example_without_defaults},
    wait_for,
};

const NAME: &str = "tenantflux-policy";

/// Each test starts a cluster of its own; one at a time, since several control planes
/// starting at once on a small machine time out.
static ONE_CLUSTER_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn plugin_ok(cluster: &TestCluster, kubeconfig: Option<&Path>, args: &[&str]) -> Value {
    let output = cluster
        .kubectl_tenantflux(kubeconfig, args)
        .unwrap_or_else(|err| panic!("kubectl tenantflux {args:?}: {err}"));
    assert!(
        output.status.success(),
        "kubectl tenantflux {args:?}: {output:?}"
    );
    json(&output)
}

/// Makes keys, restarts the agent with the public one, and has the platform's account push
/// `policy`, signed with the new key.
fn push_signed(cluster: &TestCluster, dir: &Path, policy: &str) {
    push_signed_with(cluster, dir, policy, &[]);
}

/// [`push_signed`], the agent restarted with `envs` too.
fn push_signed_with(cluster: &TestCluster, dir: &Path, policy: &str, envs: &[(&str, &str)]) {
    let keys = dir.join("keys");
    let run = |args: &[&str]| {
        let output = cluster.kubectl_tenantflux(None, args).expect("plugin");
        assert!(output.status.success(), "{args:?}: {output:?}");
    };
    run(&["policy", "keygen", "--out", path(&keys)]);
    let unsigned = dir.join("policy.yaml");
    std::fs::write(&unsigned, policy).unwrap();
    let signed = dir.join("signed.yaml");
    let key = keys.join("ed25519.key");
    run(&[
        "policy",
        "sign",
        "-f",
        path(&unsigned),
        "--key",
        path(&key),
        "--out",
        path(&signed),
    ]);
    let public = keys.join("ed25519.pub");
    let mut all = vec![("TENANTFLUX_POLICY_PUBLIC_KEY", path(&public))];
    all.extend_from_slice(envs);
    cluster
        .restart_agent_with(&all)
        .expect("agent with the policy key");
    let platform = cluster
        .policy_pusher_kubeconfig()
        .expect("platform account");
    plugin_ok(
        cluster,
        Some(&platform),
        &["policy", "push", "-f", path(&signed), "-o", "json"],
    );
}

fn get(cluster: &TestCluster, kind: &str) -> Option<Value> {
    let text = cluster
        .kubectl_ok(&["get", kind, NAME, "-o", "json", "--ignore-not-found"])
        .expect("kubectl get");
    serde_json::from_str(&text).ok()
}

/// Whether the API server refuses a FluxInstance with an unallowed registry (server-side dry
/// run: nothing is stored).
fn refuses_non_compliant(cluster: &TestCluster) -> bool {
    let mut instance = compliant_instance();
    instance["spec"]["distribution"]["registry"] = "docker.io/evil".into();
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), instance.to_string()).unwrap();
    let output = cluster
        .kubectl(&["apply", "--dry-run=server", "-f", path(file.path())])
        .unwrap();
    !output.status.success()
        && String::from_utf8_lossy(&output.stderr)
            .contains("ValidatingAdmissionPolicy 'tenantflux-policy' with binding 'tenantflux-policy' denied request")
}

/// The notes of the agent's Events about tampered admission objects.
fn tamper_events(cluster: &TestCluster) -> Vec<String> {
    events(cluster, "AdmissionPolicyTampered")
}

/// Waits until `status` and `policy show` both report a problem containing every one of
/// `needles`, and an Event says the same.
async fn wait_reported(cluster: &TestCluster, needles: &[&str]) {
    let says = |text: &str| needles.iter().all(|n| text.contains(n));
    wait_for(
        &format!("{needles:?} in status, policy show and an Event"),
        Duration::from_secs(60),
        || {
            let status = plugin_ok(cluster, None, &["status", "-o", "json"]);
            let shown = plugin_ok(cluster, None, &["policy", "show", "-o", "json"]);
            let has = |problems: &Value| {
                problems
                    .as_array()
                    .is_some_and(|p| p.iter().any(|p| p.as_str().is_some_and(says)))
            };
            let reported = has(&status["agent"]["problems"])
                && has(&shown["problems"])
                && tamper_events(cluster).iter().any(|n| says(n));
            async move { reported.then_some(()) }
        },
    )
    .await
    .unwrap_or_else(|err| {
        panic!(
            "{err}; status: {}; events: {:?}",
            plugin_ok(cluster, None, &["status", "-o", "json"]),
            tamper_events(cluster)
        )
    });
}

/// Adds a `matchConditions` entry that matches nothing: the policy then checks no request.
fn switch_off_with_a_match_condition(cluster: &TestCluster) {
    cluster
        .kubectl_ok(&[
            "patch",
            "validatingadmissionpolicy",
            NAME,
            "--type=json",
            "-p",
            r#"[{"op": "add", "path": "/spec/matchConditions/-", "value": {"name": "off", "expression": "false"}}]"#,
        ])
        .expect("patch in a matchCondition");
}

#[tokio::test]
async fn a_switched_off_admission_policy_is_restored_and_reported() {
    let _serial = ONE_CLUSTER_AT_A_TIME.lock().await;
    let cluster = TestCluster::start(&format!("secpol-vap-{}", std::process::id()))
        .expect("starting the cluster");
    cluster.ensure_flux_operator().expect("flux-operator");
    let dir = tempfile::tempdir().unwrap();
    push_signed(&cluster, dir.path(), &example_without_defaults());
    wait_for(
        "the API server to enforce the policy",
        Duration::from_secs(60),
        || {
            let refused = refuses_non_compliant(&cluster);
            async move { refused.then_some(()) }
        },
    )
    .await
    .expect("policy enforced");
    let restored_by =
        "by someone other than the agent; the agent restored it from policy generation 7";

    // 1. The binding deleted: it comes back (a new object), and enforcement with it.
    let uid = |kind| get(&cluster, kind).map(|o| o["metadata"]["uid"].clone());
    let before = uid("validatingadmissionpolicybinding").expect("binding");
    cluster
        .kubectl_ok(&["delete", "validatingadmissionpolicybinding", NAME])
        .expect("delete the binding");
    wait_for("the binding re-created", Duration::from_secs(60), || {
        let replaced = uid("validatingadmissionpolicybinding").is_some_and(|u| u != before);
        async move { replaced.then_some(()) }
    })
    .await
    .expect("binding restored");
    wait_reported(
        &cluster,
        &[&format!(
            "ValidatingAdmissionPolicyBinding {NAME} was deleted {restored_by}"
        )],
    )
    .await;

    // 2. A matchConditions entry that matches nothing switches the policy off: removed.
    let generation = |kind| {
        get(&cluster, kind)
            .and_then(|o| o["metadata"]["generation"].as_i64())
            .expect("generation")
    };
    let tampered = generation("validatingadmissionpolicy") + 1;
    switch_off_with_a_match_condition(&cluster);
    wait_for(
        "the matchCondition removed",
        Duration::from_secs(60),
        || {
            let policy = get(&cluster, "validatingadmissionpolicy").expect("policy");
            let restored = policy["metadata"]["generation"].as_i64() > Some(tampered)
                && policy["spec"]["matchConditions"]
                    .as_array()
                    .is_some_and(|c| c.iter().all(|c| c["name"] != "off"));
            async move { restored.then_some(()) }
        },
    )
    .await
    .expect("matchConditions restored");
    wait_reported(
        &cluster,
        &[&format!(
            "ValidatingAdmissionPolicy {NAME} was changed (spec.matchConditions) {restored_by}"
        )],
    )
    .await;

    // 3. A namespaceSelector on the binding (the FluxInstance's namespace lacks the label).
    let tampered = generation("validatingadmissionpolicybinding") + 1;
    cluster
        .kubectl_ok(&[
            "patch",
            "validatingadmissionpolicybinding",
            NAME,
            "--type=merge",
            "-p",
            r#"{"spec": {"matchResources": {"namespaceSelector": {"matchLabels": {"example.com/never": "x"}}}}}"#,
        ])
        .expect("patch in a namespaceSelector");
    wait_for(
        "the namespaceSelector removed",
        Duration::from_secs(60),
        || {
            let binding = get(&cluster, "validatingadmissionpolicybinding").expect("binding");
            let restored = binding["metadata"]["generation"].as_i64() > Some(tampered)
                && binding
                    .pointer("/spec/matchResources/namespaceSelector/matchLabels")
                    .is_none();
            async move { restored.then_some(()) }
        },
    )
    .await
    .expect("namespaceSelector restored");
    // The API server defaults the rest of matchResources, so the report names those too.
    wait_reported(
        &cluster,
        &[
            &format!("ValidatingAdmissionPolicyBinding {NAME} was changed ("),
            "spec.matchResources.namespaceSelector",
            &format!(") {restored_by}"),
        ],
    )
    .await;

    // Enforcement holds (once the API server has the restored binding), the policy held is
    // the one pushed, and nothing else was written.
    wait_for("the policy enforced again", Duration::from_secs(30), || {
        let on = refuses_non_compliant(&cluster);
        async move { on.then_some(()) }
    })
    .await
    .expect("the policy is enforced again");
    let shown = plugin_ok(&cluster, None, &["policy", "show", "-o", "json"]);
    assert_eq!(shown["generation"], 7, "{shown:#}");
    assert_eq!(
        shown["problems"].as_array().map(Vec::len),
        Some(3),
        "{shown:#}"
    );
    let instance = cluster
        .kubectl(&["-n", "flux-system", "get", "fluxinstance", "flux"])
        .unwrap();
    assert!(!instance.status.success(), "no FluxInstance was stored");

    // 4. Tampers made while the agent was not running: reported at its next start (against
    // its record of what it last wrote, ConfigMap tenantflux-admission) and undone.
    let record = stored_key(&cluster, "tenantflux-admission", "binding\\.spec");
    assert!(
        record.contains("\"policyName\""),
        "the record holds the binding: {record}"
    );
    let public_key = dir.path().join("keys").join("ed25519.pub");
    let with_key = [("TENANTFLUX_POLICY_PUBLIC_KEY", path(&public_key))];
    cluster.stop_agent().expect("stop the agent");
    let before = uid("validatingadmissionpolicybinding").expect("binding");
    cluster
        .kubectl_ok(&["delete", "validatingadmissionpolicybinding", NAME])
        .expect("delete the binding");
    switch_off_with_a_match_condition(&cluster);
    // The API server's admission plugin sees the change through its own informer.
    wait_for(
        "the tamper to switch enforcement off while the agent is stopped",
        Duration::from_secs(30),
        || {
            let off = !refuses_non_compliant(&cluster);
            async move { off.then_some(()) }
        },
    )
    .await
    .expect("enforcement off");
    cluster
        .restart_agent_with(&with_key)
        .expect("start the agent");
    let while_stopped = "by someone other than the agent while it was not running; the agent \
                         restored it from policy generation 7";
    wait_reported(
        &cluster,
        &[&format!(
            "ValidatingAdmissionPolicyBinding {NAME} was deleted {while_stopped}"
        )],
    )
    .await;
    wait_reported(
        &cluster,
        &[&format!(
            "ValidatingAdmissionPolicy {NAME} was changed (spec.matchConditions) {while_stopped}"
        )],
    )
    .await;
    assert!(
        uid("validatingadmissionpolicybinding").is_some_and(|u| u != before),
        "the binding is back"
    );
    assert!(
        refuses_non_compliant(&cluster),
        "the policy is enforced again after the start"
    );
    // An agent restarted over an untouched policy rewrites both objects and reports nothing.
    let log = cluster.dir().join("agent.log");
    let offset = std::fs::metadata(&log).map_or(0, |m| m.len() as usize);
    cluster
        .restart_agent_with(&with_key)
        .expect("restart the agent");
    wait_for(
        "the restarted agent to rewrite the binding",
        Duration::from_secs(60),
        || {
            let text = std::fs::read(&log).unwrap_or_default();
            let rewritten = String::from_utf8_lossy(&text[offset.min(text.len())..])
                .contains(&format!("ValidatingAdmissionPolicyBinding {NAME} applied"));
            async move { rewritten.then_some(()) }
        },
    )
    .await
    .expect("the binding rewritten at start");
    let shown = plugin_ok(&cluster, None, &["policy", "show", "-o", "json"]);
    assert_eq!(shown["generation"], 7, "{shown:#}");
    assert_eq!(shown["problems"], serde_json::json!([]), "{shown:#}");

    // The agent's record deleted with the tamper, while it is stopped: the missing record is
    // itself reported, and both objects are rewritten.
    cluster.stop_agent().expect("stop the agent");
    cluster
        .kubectl_ok(&[
            "-n",
            AGENT_NAMESPACE,
            "delete",
            "configmap",
            "tenantflux-admission",
        ])
        .expect("delete the record");
    switch_off_with_a_match_condition(&cluster);
    cluster
        .restart_agent_with(&with_key)
        .expect("start the agent");
    wait_reported(
        &cluster,
        &[&format!(
            "ConfigMap {AGENT_NAMESPACE}/tenantflux-admission (what the agent last wrote of the admission objects) was deleted by someone other than the agent while it was not running"
        )],
    )
    .await;
    wait_for("enforced again", Duration::from_secs(30), || {
        let on = refuses_non_compliant(&cluster);
        async move { on.then_some(()) }
    })
    .await
    .expect("the policy is enforced again");
}

/// The stored policy envelope (ConfigMap `name`, key signed-policy.yaml), or "" without one.
fn stored(cluster: &TestCluster, name: &str) -> String {
    stored_key(cluster, name, "signed-policy\\.yaml")
}

/// Key `key` (dots escaped for jsonpath) of ConfigMap `name` in the agent's namespace, or "".
fn stored_key(cluster: &TestCluster, name: &str, key: &str) -> String {
    cluster
        .kubectl_ok(&[
            "-n",
            AGENT_NAMESPACE,
            "get",
            "configmap",
            name,
            "-o",
            &format!("jsonpath={{.data.{key}}}"),
            "--ignore-not-found",
        ])
        .expect("kubectl get configmap")
}

/// Writes `envelope` into the policy store as a tenant admin would, with the agent stopped.
fn plant(cluster: &TestCluster, envelope: &str) {
    let map = serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": NAME, "namespace": AGENT_NAMESPACE},
        "data": {"signed-policy.yaml": envelope},
    });
    cluster
        .kubectl_ok(&[
            "-n",
            AGENT_NAMESPACE,
            "patch",
            "configmap",
            NAME,
            "--type=merge",
            "-p",
            &map.to_string(),
        ])
        .expect("replace the stored policy");
}

/// Waits until `policy show` reports a problem containing every one of `needles`.
async fn wait_problem(cluster: &TestCluster, needles: &[&str]) -> Value {
    wait_for(
        &format!("{needles:?} in policy show"),
        Duration::from_secs(60),
        || {
            let shown = plugin_ok(cluster, None, &["policy", "show", "-o", "json"]);
            let found = shown["problems"].as_array().is_some_and(|p| {
                p.iter().any(|p| {
                    p.as_str()
                        .is_some_and(|p| needles.iter().all(|n| p.contains(n)))
                })
            });
            async move { found.then_some(shown) }
        },
    )
    .await
    .unwrap_or_else(|err| {
        panic!(
            "{err}; policy show: {}",
            plugin_ok(cluster, None, &["policy", "show", "-o", "json"])
        )
    })
}

#[tokio::test]
async fn an_older_or_another_clusters_policy_is_refused() {
    let _serial = ONE_CLUSTER_AT_A_TIME.lock().await;
    let cluster = TestCluster::start(&format!("secpol-replay-{}", std::process::id()))
        .expect("starting the cluster");
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys");
    let run = |kubeconfig: Option<&Path>, args: &[&str]| {
        cluster
            .kubectl_tenantflux(kubeconfig, args)
            .unwrap_or_else(|err| panic!("kubectl tenantflux {args:?}: {err}"))
    };
    let out = run(
        None,
        &["policy", "keygen", "--out", path(&keys), "-o", "json"],
    );
    assert!(out.status.success(), "{out:?}");
    let key_id = json(&out)["keyId"].as_str().expect("keyId").to_owned();
    let public = keys.join("ed25519.pub");
    let restart = || {
        cluster
            .restart_agent_with(&[
                ("TENANTFLUX_POLICY_PUBLIC_KEY", path(&public)),
                ("TENANTFLUX_CLUSTER_NAME", "secpol-blue"),
            ])
            .expect("agent with the policy key and a cluster name");
    };
    restart();
    let platform = cluster
        .policy_pusher_kubeconfig()
        .expect("platform account");
    let sign_noting = |generation: u64, clusters: &str| {
        let unsigned = dir.path().join(format!("policy-{generation}.yaml"));
        std::fs::write(
            &unsigned,
            format!(
                "apiVersion: tenantflux.io/v1alpha1\nkind: Policy\nmetadata: {{name: fleet}}\nspec:\n  generation: {generation}\n{clusters}"
            ),
        )
        .unwrap();
        let signed = dir.path().join(format!("signed-{generation}.yaml"));
        let key = keys.join("ed25519.key");
        let out = run(
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
        );
        assert!(out.status.success(), "{out:?}");
        (signed, String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let sign = |generation: u64, clusters: &str| sign_noting(generation, clusters).0;
    let push = |signed: &Path| run(Some(&platform), &["policy", "push", "-f", path(signed)]);
    let uid = cluster
        .kubectl_ok(&[
            "get",
            "namespace",
            "kube-system",
            "-o",
            "jsonpath={.metadata.uid}",
        ])
        .expect("kube-system uid");

    // The agent reports who the cluster is; the policy in force shows its key.
    let signed_1 = sign(1, "");
    assert!(push(&signed_1).status.success(), "generation 1");
    let first = stored(&cluster, NAME);
    let signed_2 = sign(2, "");
    let out = push(&signed_2);
    assert!(out.status.success(), "generation 2: {out:?}");
    let second = stored(&cluster, NAME);
    assert_ne!(first, second);
    let status = plugin_ok(&cluster, None, &["status", "-o", "json"]);
    assert_eq!(status["agent"]["clusterUid"], uid.as_str(), "{status:#}");
    assert_eq!(status["agent"]["clusterName"], "secpol-blue", "{status:#}");
    assert_eq!(status["policy"]["keyId"], key_id.as_str(), "{status:#}");
    assert_eq!(stored(&cluster, "tenantflux-policy-highest"), second);

    // 1. Rollback: the older, validly signed copy put back while the agent is down.
    cluster.stop_agent().expect("stopping the agent");
    plant(&cluster, &first);
    restart();
    let shown = wait_problem(
        &cluster,
        &[
            "the policy stored in ConfigMap tenantflux-system/tenantflux-policy is refused: policy fleet generation 1 is a rollback: this cluster has held generation 2",
        ],
    )
    .await;
    assert_eq!(
        shown["generation"], 2,
        "the higher generation stays in force: {shown:#}"
    );
    assert!(
        events(&cluster, "PolicyTampered")
            .iter()
            .any(|n| n.contains("is a rollback: this cluster has held generation 2")),
        "the rollback found at start is an Event too"
    );
    wait_for("the stored copy restored", Duration::from_secs(30), || {
        let restored = stored(&cluster, NAME) == second;
        async move { restored.then_some(()) }
    })
    .await
    .expect("store restored from the record");

    // The platform's view: the cluster holds what was pushed last, and is flagged against
    // an expectation it does not meet.
    let fleet_file = dir.path().join("fleet.yaml");
    std::fs::write(
        &fleet_file,
        format!(
            "- {{name: secpol-blue, uid: \"{uid}\", kubeconfig: {}}}\n",
            cluster.kubeconfig().display()
        ),
    )
    .unwrap();
    let fleet_status = |expected: &Path| {
        let out = run(
            None,
            &[
                "fleet",
                "status",
                "--fleet-file",
                path(&fleet_file),
                "--expect-policy",
                path(expected),
                "-o",
                "json",
            ],
        );
        let row = json(&out)["clusters"][0].clone();
        (out.status.code(), row)
    };
    let (code, row) = fleet_status(&signed_2);
    assert_eq!(code, Some(0), "{row:#}");
    assert_eq!(row["policyGeneration"], 2, "{row:#}");
    assert_eq!(row["policyKeyId"], key_id.as_str(), "{row:#}");
    assert!(row.get("policyMismatch").is_none(), "{row:#}");
    assert!(row.get("identityMismatch").is_none(), "{row:#}");
    let (code, row) = fleet_status(&signed_1);
    assert_eq!(code, Some(1), "{row:#}");
    assert_eq!(
        row["policyMismatch"],
        format!(
            "holds policy generation 2 (key {key_id}); the platform pushed generation 1 (key {key_id})"
        )
        .as_str(),
        "{row:#}"
    );

    // The platform knows the cluster by another name, or recorded another uid for it: the
    // agent's account (its name is the tenant's to set) is flagged, exit 1.
    for (entry, expected) in [
        (
            format!("{{name: blue, uid: \"{uid}\""),
            "the agent calls its cluster \"secpol-blue\" (TENANTFLUX_CLUSTER_NAME, the tenant's to set), the platform knows it as \"blue\"".to_owned(),
        ),
        (
            "{name: secpol-blue, uid: not-this-uid".to_owned(),
            format!("the platform recorded uid \"not-this-uid\" for secpol-blue, but this cluster has uid \"{uid}\""),
        ),
    ] {
        let file = dir.path().join("fleet-elsewhere.yaml");
        std::fs::write(
            &file,
            format!("- {entry}, kubeconfig: {}}}\n", cluster.kubeconfig().display()),
        )
        .unwrap();
        let out = run(
            None,
            &["fleet", "status", "--fleet-file", path(&file), "-o", "json"],
        );
        assert_eq!(out.status.code(), Some(1), "{out:?}");
        let row = json(&out)["clusters"][0].clone();
        let mismatch = row["identityMismatch"].as_str().unwrap_or_default();
        assert!(mismatch.starts_with(&expected), "{row:#}");
    }

    // 2. A policy for another cluster is refused and changes nothing; signing it said that a
    // name binds nothing.
    let (green, noted) = sign_noting(3, "  clusters: [{name: secpol-green}]\n");
    assert!(
        noted.contains("warning: spec.clusters selects [name \"secpol-green\"] by name only"),
        "{noted}"
    );
    let out = push(&green);
    // 4: refused by the agent's policy rules.
    assert_eq!(out.status.code(), Some(4), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "policy fleet generation 3 is for the clusters [name \"secpol-green\"], not for this cluster (uid \"{uid}\", name \"secpol-blue\")"
        )),
        "{err}"
    );
    let shown = plugin_ok(&cluster, None, &["policy", "show", "-o", "json"]);
    assert_eq!(shown["generation"], 2, "{shown:#}");
    assert_eq!(stored(&cluster, NAME), second);
    assert_eq!(stored(&cluster, "tenantflux-policy-highest"), second);

    // One that names this cluster, by its uid, is accepted.
    let out = push(&sign(
        3,
        &format!("  clusters: [{{name: secpol-green}}, {{uid: \"{uid}\"}}]\n"),
    ));
    assert!(out.status.success(), "{out:?}");
    let third = stored(&cluster, NAME);

    // The stored copy replaced with an older, validly signed one while the agent runs: put
    // back, and reported in status, policy show, an Event and the problems metric until the
    // next push.
    plant(&cluster, &second);
    let restored = "the agent keeps generation 3 and restored it";
    wait_problem(&cluster, &[restored]).await;
    wait_for("the stored copy restored", Duration::from_secs(30), || {
        let restored = stored(&cluster, NAME) == third;
        async move { restored.then_some(()) }
    })
    .await
    .expect("store restored");
    let status = plugin_ok(&cluster, None, &["status", "-o", "json"]);
    assert!(
        status["agent"]["problems"].to_string().contains(restored),
        "{status:#}"
    );
    assert!(
        events(&cluster, "PolicyTampered")
            .iter()
            .any(|n| n.contains(restored)),
        "{:?}",
        events(&cluster, "PolicyTampered")
    );
    let metrics = cluster.agent_metrics();
    assert!(
        !metrics.contains("tenantflux_agent_problems 0"),
        "{metrics}"
    );

    // 3. Replay: a copy signed for another cluster put in the store while the agent is down.
    let other =
        std::fs::read_to_string(sign(4, "  clusters: [{uid: not-this-cluster}]\n")).unwrap();
    cluster.stop_agent().expect("stopping the agent");
    plant(&cluster, &other);
    restart();
    let shown = wait_problem(
        &cluster,
        &[
            "is refused: policy fleet generation 4 is for the clusters [uid \"not-this-cluster\"], not for this cluster",
        ],
    )
    .await;
    assert_eq!(shown["generation"], 3, "{shown:#}");
    wait_for("the stored copy restored", Duration::from_secs(30), || {
        let restored = stored(&cluster, NAME) == third;
        async move { restored.then_some(()) }
    })
    .await
    .expect("store restored from the record");

    // 4. The record deleted and an older copy put in the store while the agent is down: the
    // agent cannot tell the generation it held, but it can tell that its record is gone (it
    // writes the record before the store), and says so.
    cluster.stop_agent().expect("stopping the agent");
    cluster
        .kubectl_ok(&[
            "-n",
            AGENT_NAMESPACE,
            "delete",
            "configmap",
            "tenantflux-policy-highest",
        ])
        .expect("delete the record");
    plant(&cluster, &second);
    restart();
    let missing = "ConfigMap tenantflux-system/tenantflux-policy-highest, the record of the highest generation, is missing beside the stored generation 2";
    let shown = wait_problem(&cluster, &[missing, "a rollback cannot be ruled out"]).await;
    assert_eq!(shown["generation"], 2, "{shown:#}");
    assert!(
        events(&cluster, "PolicyTampered")
            .iter()
            .any(|n| n.contains(missing)),
        "{:?}",
        events(&cluster, "PolicyTampered")
    );
}

/// The agent's Events (events.k8s.io) with `reason`.
fn event_items(cluster: &TestCluster, reason: &str) -> Vec<Value> {
    let text = cluster
        .kubectl_ok(&[
            "-n",
            AGENT_NAMESPACE,
            "get",
            "events.events.k8s.io",
            "--field-selector",
            &format!("reason={reason}"),
            "-o",
            "json",
        ])
        .expect("kubectl get events");
    let events: Value = serde_json::from_str(&text).expect("JSON");
    events["items"].as_array().cloned().unwrap_or_default()
}

/// The notes of the agent's Events with `reason`.
fn events(cluster: &TestCluster, reason: &str) -> Vec<String> {
    event_items(cluster, reason)
        .iter()
        .filter_map(|e| e["note"].as_str().map(str::to_owned))
        .collect()
}

/// How many times the agent recorded an Event with `reason` (a repeated one is a series).
fn event_count(cluster: &TestCluster, reason: &str) -> u64 {
    event_items(cluster, reason)
        .iter()
        .map(|e| e["series"]["count"].as_u64().unwrap_or(1))
        .sum()
}

/// The agent's verdict in `status -o json`: `policy.enforcement`.
fn verdict(cluster: &TestCluster) -> (Value, Value) {
    let status = plugin_ok(cluster, None, &["status", "-o", "json"]);
    (status["policy"]["enforcement"].clone(), status)
}

#[tokio::test]
async fn enforcement_switched_off_with_the_agents_own_rbac_is_reported_not_enforced() {
    let _serial = ONE_CLUSTER_AT_A_TIME.lock().await;
    let cluster = TestCluster::start(&format!("secpol-enforce-{}", std::process::id()))
        .expect("starting the cluster");
    cluster.ensure_flux_operator().expect("flux-operator");
    let dir = tempfile::tempdir().unwrap();
    // Short intervals, so that the test waits seconds, not the defaults' 15 s and 5 min.
    push_signed_with(
        &cluster,
        dir.path(),
        &example_without_defaults(),
        &[
            ("TENANTFLUX_ENFORCEMENT_CHECK_INTERVAL", "2s"),
            ("TENANTFLUX_PERMISSIONS_CHECK_INTERVAL", "2s"),
        ],
    );
    wait_for("enforcement proven", Duration::from_secs(60), || {
        let (verdict, _) = verdict(&cluster);
        async move { (verdict["enforced"] == true).then_some(()) }
    })
    .await
    .unwrap_or_else(|err| panic!("{err}; status: {}", verdict(&cluster).1));
    assert!(refuses_non_compliant(&cluster));
    assert!(
        cluster
            .agent_metrics()
            .contains("tenantflux_agent_policy_enforced 1"),
        "{}",
        cluster.agent_metrics()
    );
    assert!(
        !events(&cluster, "PolicyEnforced").is_empty(),
        "an Event says it is enforced"
    );
    let fleet_file = dir.path().join("fleet.yaml");
    std::fs::write(
        &fleet_file,
        format!(
            "- {{name: tenant, kubeconfig: {}}}\n",
            cluster.kubeconfig().display()
        ),
    )
    .unwrap();
    let fleet_status = || {
        let output = cluster
            .kubectl_tenantflux(
                None,
                &[
                    "fleet",
                    "status",
                    "--fleet-file",
                    path(&fleet_file),
                    "-o",
                    "json",
                ],
            )
            .expect("fleet status");
        (output.status.code(), json(&output)["clusters"][0].clone())
    };
    let (code, row) = fleet_status();
    assert_eq!(
        (code, &row["enforced"]),
        (Some(0), &Value::Bool(true)),
        "{row}"
    );

    // The attack: the agent's own rules on the admission objects taken away, then the binding
    // deleted. The agent can neither see nor restore it.
    let role: Value = serde_json::from_str(
        &cluster
            .kubectl_ok(&["get", "clusterrole", "tenantflux-agent", "-o", "json"])
            .expect("ClusterRole"),
    )
    .unwrap();
    let rules = role["rules"].as_array().expect("rules").clone();
    let narrowed: Vec<&Value> = rules
        .iter()
        .filter(|r| r["apiGroups"][0] != "admissionregistration.k8s.io")
        .collect();
    assert!(narrowed.len() < rules.len());
    cluster
        .kubectl_ok(&[
            "patch",
            "clusterrole",
            "tenantflux-agent",
            "--type=merge",
            "-p",
            &serde_json::json!({ "rules": narrowed }).to_string(),
        ])
        .expect("narrow the agent's ClusterRole");
    cluster
        .kubectl_ok(&["delete", "validatingadmissionpolicybinding", NAME])
        .expect("delete the binding");

    wait_for("NOT ENFORCED reported", Duration::from_secs(60), || {
        let (verdict, _) = verdict(&cluster);
        async move { (verdict["enforced"] == false).then_some(()) }
    })
    .await
    .unwrap_or_else(|err| panic!("{err}; status: {}", verdict(&cluster).1));
    // It is true: the API server admits what the policy refuses.
    assert!(!refuses_non_compliant(&cluster));
    let (verdict_now, status) = verdict(&cluster);
    assert!(
        verdict_now["reason"]
            .as_str()
            .is_some_and(|r| r.contains("was admitted in a dry run")),
        "{verdict_now}"
    );
    let problems = status["agent"]["problems"].to_string();
    for needle in [
        "policy generation 7 is NOT ENFORCED by the API server since",
        "the agent lacks permissions its policy work needs",
        "create validatingadmissionpolicybindings.admissionregistration.k8s.io tenantflux-policy",
    ] {
        assert!(problems.contains(needle), "{needle:?} in {problems}");
    }
    assert_eq!(status["agent"]["health"], "degraded");
    // The failed restore is a problem too (the watch may still be open, and sees the delete).
    wait_for(
        "the failed restore reported",
        Duration::from_secs(60),
        || {
            let problems =
                plugin_ok(&cluster, None, &["status", "-o", "json"])["agent"]["problems"]
                    .to_string();
            let found = problems.contains("the agent cannot put the policy into the API server")
                || problems.contains("the agent cannot watch ValidatingAdmissionPolicyBinding");
            async move { found.then_some(()) }
        },
    )
    .await
    .unwrap_or_else(|err| panic!("{err}; status: {}", verdict(&cluster).1));
    let shown = plugin_ok(&cluster, None, &["policy", "show", "-o", "json"]);
    assert_eq!(shown["enforcement"]["enforced"], false, "{shown}");
    let shown_text = cluster
        .kubectl_tenantflux(None, &["policy", "show"])
        .expect("policy show");
    assert!(
        String::from_utf8_lossy(&shown_text.stdout).contains("enforced: NOT ENFORCED since"),
        "{shown_text:?}"
    );
    assert!(
        cluster
            .agent_metrics()
            .contains("tenantflux_agent_policy_enforced 0")
    );
    let warnings = events(&cluster, "PolicyNotEnforced");
    assert!(
        warnings
            .iter()
            .any(|n| n.contains("policy generation 7 is NOT ENFORCED by the API server")),
        "{warnings:?}"
    );
    let (code, row) = fleet_status();
    assert_eq!(
        (code, &row["enforced"]),
        (Some(1), &Value::Bool(false)),
        "{row}"
    );
    assert!(
        row["notEnforced"]
            .as_str()
            .is_some_and(|m| m.starts_with("NOT ENFORCED since")),
        "{row}"
    );

    // The RBAC back: the agent restores the binding at its next retry and proves it again.
    cluster
        .kubectl_ok(&[
            "patch",
            "clusterrole",
            "tenantflux-agent",
            "--type=merge",
            "-p",
            &serde_json::json!({ "rules": rules }).to_string(),
        ])
        .expect("restore the agent's ClusterRole");
    wait_for("enforced again", Duration::from_secs(90), || {
        let (verdict, status) = verdict(&cluster);
        let problems = status["agent"]["problems"].to_string();
        let over = verdict["enforced"] == true
            && !problems.contains("NOT ENFORCED")
            && !problems.contains("lacks permissions")
            && !problems.contains("cannot put the policy")
            && !problems.contains("cannot watch");
        async move { over.then_some(()) }
    })
    .await
    .unwrap_or_else(|err| panic!("{err}; status: {}", verdict(&cluster).1));
    assert!(refuses_non_compliant(&cluster));
    assert!(
        cluster
            .agent_metrics()
            .contains("tenantflux_agent_policy_enforced 1")
    );
    assert!(event_count(&cluster, "PolicyEnforced") >= 2);
    let (code, row) = fleet_status();
    assert_eq!(
        (code, &row["enforced"]),
        (Some(0), &Value::Bool(true)),
        "{row}"
    );
}
