//! A Flux kind the compiled table lacks, as a newer Flux release would add one: CRDs this test
//! creates in a Flux group (`Probe`, with `spec.suspend` in its schema, and `Gauge`, without),
//! found by the agent's discovery and served by `get all`, `get KIND`, `stats`, `suspend` and
//! `resume` like the table's kinds. On a cluster of its own: the shared cluster's other
//! binaries count the kinds and objects `get all -A` lists, and these CRDs would change that
//! while they exist. Every command goes the real path: plugin → port-forward → agent →
//! SubjectAccessReview → API server, with the agent running as its ServiceAccount.

use std::{path::Path, time::Duration};

use serde_json::Value;
use tenantflux_tests::{TestCluster, plugin, plugin_ok, stderr, wait_for};

const NS: &str = "dk";
const GROUP: &str = "probe.toolkit.fluxcd.io";
const PROBES: &str = "probes.probe.toolkit.fluxcd.io";
const GAUGES: &str = "gauges.probe.toolkit.fluxcd.io";
/// How long the agent may take to see a CRD change (a watch, debounced by a second).
const DISCOVERED: Duration = Duration::from_secs(60);

/// A CRD of `kind` in GROUP at v1, with a status subresource; `suspend` puts `spec.suspend`
/// in its schema.
fn crd(kind: &str, plural: &str, suspend: bool) -> String {
    let suspend = if suspend {
        "\n                suspend: {type: boolean}"
    } else {
        ""
    };
    format!(
        r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {{name: {plural}.{GROUP}}}
spec:
  group: {GROUP}
  names: {{kind: {kind}, plural: {plural}, singular: {singular}, listKind: {kind}List}}
  scope: Namespaced
  versions:
    - name: v1
      served: true
      storage: true
      subresources: {{status: {{}}}}
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              properties:
                interval: {{type: string}}{suspend}
            status:
              type: object
              x-kubernetes-preserve-unknown-fields: true
"#,
        singular = kind.to_ascii_lowercase()
    )
}

/// `kubectl tenantflux ARGS -o json`, if it succeeds.
fn plugin_json(cluster: &TestCluster, kubeconfig: &Path, args: &[&str]) -> Option<Value> {
    let mut args = args.to_vec();
    args.extend(["-o", "json"]);
    let output = plugin(cluster, kubeconfig, &args);
    output
        .status
        .success()
        .then(|| serde_json::from_slice(&output.stdout).ok())
        .flatten()
}

/// (kind, name, suspended, ready status, revision) of each listed item.
fn items(list: &Value) -> Vec<(String, String, bool, String, String)> {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    list["items"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .map(|i| {
                    (
                        text(&i["kind"]),
                        text(&i["name"]),
                        i["suspended"].as_bool().unwrap_or_default(),
                        text(&i["ready"]["status"]),
                        text(&i["revision"]),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn spec_suspend(cluster: &TestCluster, name: &str) -> Option<bool> {
    let text = cluster
        .kubectl_ok(&["-n", NS, "get", PROBES, name, "-o", "json"])
        .expect("kubectl get probe");
    let object: Value = serde_json::from_str(&text).expect("JSON");
    object["spec"]["suspend"].as_bool()
}

#[tokio::test]
async fn a_kind_the_table_lacks_is_listed_counted_and_suspended() {
    let cluster = TestCluster::own("tf-kinds");
    cluster.ensure_agent().expect("agent");
    // An operator with rights on everything (a token user, as in the workloads tests).
    let admin = cluster
        .token_kubeconfig("tenantflux-system", "dk-operator")
        .expect("kubeconfig");
    cluster
        .apply_yaml(&format!(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\n\
             metadata: {{name: dk-operator}}\n\
             roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}}\n\
             subjects: [{{kind: ServiceAccount, name: dk-operator, namespace: tenantflux-system}}]\n\
             ---\napiVersion: v1\nkind: Namespace\nmetadata: {{name: {NS}}}\n"
        ))
        .expect("the operator's binding and the namespace");

    // Step 1: the CRDs appear while the agent's ClusterRole does not cover them: the agent says
    // so and leaves the kinds out, and `get all` goes on answering without them.
    let from = cluster.agent_log_len();
    cluster
        .apply_yaml(&format!(
            "{}---\n{}",
            crd("Probe", "probes", true),
            crd("Gauge", "gauges", false)
        ))
        .expect("step 1: the CRDs");
    for crd in [PROBES, GAUGES] {
        cluster
            .kubectl_ok(&[
                "wait",
                "--for=condition=Established",
                &format!("crd/{crd}"),
                "--timeout=60s",
            ])
            .expect("step 1: CRD established");
    }
    cluster
        .wait_agent_log(
            from,
            "the agent may not list probes.probe.toolkit.fluxcd.io",
            DISCOVERED,
        )
        .await
        .expect("step 1: the agent reports the kind it may not watch");
    let output = plugin(cluster, &admin, &["get", "all", "-A"]);
    assert!(
        output.status.success(),
        "step 1: get all without the kinds: {}",
        stderr(&output)
    );
    let output = plugin(cluster, &admin, &["get", "probes", "-n", NS]);
    assert_eq!(output.status.code(), Some(1), "step 1: get probes");
    assert!(
        stderr(&output).contains("unknown kind"),
        "step 1: {}",
        stderr(&output)
    );

    // Step 2: the platform grants the agent the kinds (as it must for any kind a new Flux
    // release adds); objects of both, with the status a controller would write.
    cluster
        .apply_yaml(&format!(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\n\
             metadata: {{name: dk-agent-probes}}\n\
             rules: [{{apiGroups: [{GROUP}], resources: [probes, gauges], verbs: [get, list, watch, patch]}}]\n\
             ---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\n\
             metadata: {{name: dk-agent-probes}}\n\
             roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: dk-agent-probes}}\n\
             subjects: [{{kind: ServiceAccount, name: tenantflux-agent, namespace: tenantflux-system}}]\n\
             ---\napiVersion: {GROUP}/v1\nkind: Probe\nmetadata: {{name: p1, namespace: {NS}}}\nspec: {{interval: 1m}}\n\
             ---\napiVersion: {GROUP}/v1\nkind: Probe\nmetadata: {{name: p2, namespace: {NS}}}\nspec: {{interval: 1m}}\n\
             ---\napiVersion: {GROUP}/v1\nkind: Gauge\nmetadata: {{name: g1, namespace: {NS}}}\nspec: {{interval: 1m}}\n"
        ))
        .expect("step 2: RBAC and objects");
    for (resource, name, status) in [
        (
            PROBES,
            "p1",
            r#"{"artifact": {"revision": "v1@sha256:abc"}, "lastAppliedRevision": "older"}"#,
        ),
        (PROBES, "p2", r#"{"lastAppliedRevision": "main@sha1:def"}"#),
        (GAUGES, "g1", r#"{}"#),
    ] {
        let mut status: Value = serde_json::from_str(status).unwrap();
        status["conditions"] = serde_json::json!([{
            "type": "Ready", "status": "True", "reason": "Succeeded",
            "message": "probed", "lastTransitionTime": "2026-01-01T00:00:00Z"
        }]);
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
            .expect("step 2: a Ready status");
    }

    // Step 3: get all -A lists them, with the revision read generically; get KIND by its name
    // and its plural.
    let expected = vec![
        (
            "Probe".to_owned(),
            "p1".to_owned(),
            false,
            "True".to_owned(),
            "v1@sha256:abc".to_owned(),
        ),
        (
            "Probe".to_owned(),
            "p2".to_owned(),
            false,
            "True".to_owned(),
            "main@sha1:def".to_owned(),
        ),
        (
            "Gauge".to_owned(),
            "g1".to_owned(),
            false,
            "True".to_owned(),
            String::new(),
        ),
    ];
    let mut sorted = expected.clone();
    sorted.sort();
    wait_for("step 3: get all -A to list the probes", DISCOVERED, || {
        let listed = plugin_json(cluster, &admin, &["get", "all", "-A"]);
        let sorted = sorted.clone();
        async move {
            let mut found = items(&listed?);
            found.sort();
            (found == sorted).then_some(())
        }
    })
    .await
    .expect("step 3: the discovered kinds listed");
    let probes = plugin_json(cluster, &admin, &["get", "probes", "-n", NS]).expect("get probes");
    assert_eq!(items(&probes), expected[..2], "step 3: get probes");
    assert_eq!(
        probes["items"][0]["apiVersion"],
        format!("{GROUP}/v1"),
        "step 3"
    );
    let one = plugin_ok(cluster, &admin, &["get", "probe", "p2", "-n", NS]);
    assert!(
        one.contains("main@sha1:def") && one.contains("REVISION"),
        "step 3: get probe p2: {one}"
    );

    // Step 4: stats counts the Probes (suspendable, so a reconciler), not the read-only Gauge.
    let stats = plugin_json(cluster, &admin, &["stats", "-A"]).expect("step 4: stats");
    let kinds = stats["kinds"].as_array().expect("kinds");
    let probe = kinds
        .iter()
        .find(|k| k["kind"] == "Probe")
        .unwrap_or_else(|| panic!("step 4: Probe in {stats:#}"));
    assert_eq!(
        (
            probe["running"].as_u64(),
            probe["failing"].as_u64(),
            probe["suspended"].as_u64()
        ),
        (Some(2), Some(0), Some(0)),
        "step 4: {stats:#}"
    );
    assert!(
        !kinds.iter().any(|k| k["kind"] == "Gauge"),
        "step 4: {stats:#}"
    );

    // Step 5: suspend and resume flip spec.suspend, which the Probe's schema has.
    plugin_ok(cluster, &admin, &["suspend", "probe", "p1", "-n", NS]);
    assert_eq!(spec_suspend(cluster, "p1"), Some(true), "step 5: suspended");
    wait_for(
        "step 5: get probe p1 to show it suspended",
        DISCOVERED,
        || {
            let shown = plugin_json(cluster, &admin, &["get", "probes", "-n", NS]);
            async move { items(&shown?).first().filter(|i| i.2).map(drop) }
        },
    )
    .await
    .expect("step 5: suspended in the cache");
    plugin_ok(cluster, &admin, &["resume", "probes", "p1", "-n", NS]);
    assert_eq!(spec_suspend(cluster, "p1"), Some(false), "step 5: resumed");

    // Step 6: the Gauge's schema has no spec.suspend: refused, saying why, and unchanged.
    let output = plugin(cluster, &admin, &["suspend", "gauge", "g1", "-n", NS]);
    assert_eq!(output.status.code(), Some(1), "step 6: suspend gauge");
    assert!(
        stderr(&output).contains("has no spec.suspend"),
        "step 6: {}",
        stderr(&output)
    );
    let gauge = cluster
        .kubectl_ok(&["-n", NS, "get", GAUGES, "g1", "-o", "jsonpath={.spec}"])
        .expect("step 6: the gauge");
    assert_eq!(gauge.trim(), r#"{"interval":"1m"}"#, "step 6");

    // Step 7: the CRDs go; so do the kinds.
    cluster
        .kubectl_ok(&["delete", "crd", PROBES, GAUGES, "--wait"])
        .expect("step 7: CRDs removed");
    wait_for(
        "step 7: get probes to know no such kind",
        DISCOVERED,
        || {
            let output = plugin(cluster, &admin, &["get", "probes", "-n", NS]);
            async move { stderr(&output).contains("unknown kind").then_some(()) }
        },
    )
    .await
    .expect("step 7: the kind gone");
    cluster
        .kubectl_ok(&[
            "delete",
            "clusterrolebinding,clusterrole",
            "dk-agent-probes",
            "--ignore-not-found",
        ])
        .expect("step 7: RBAC removed");
}
