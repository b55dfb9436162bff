//! The management side against real control planes: a management cluster holding
//! Cozystack-style kubeconfig Secrets (`kubernetes-<x>-admin-kubeconfig` in `tenant-<x>`) of
//! three tenant clusters, each with its agent, and of one cluster without an agent. Policy is
//! pushed to all of them (one agent already holds a newer generation), a tenant cluster is
//! stopped mid-run, and the fleet status is read as a table and as JSON, with a cluster past
//! its policy's upgrade deadline.
//!
//! Four control planes at once (the most a 2-core machine runs comfortably): the test's own,
//! taken down at its end however it ends.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::Output,
    time::Duration,
};

use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, ObjectMeta, PostParams};
use serde_json::Value;
use tenantflux_tests::{
    TestCluster, apply_flux_instance, condition_status, flux_instances, json, path, stderr, stdout,
    wait_for,
};

/// `kubectl tenantflux ARGS` with the management cluster's kubeconfig.
fn fleet(management: &TestCluster, args: &[&str]) -> Output {
    management
        .kubectl_tenantflux(None, args)
        .unwrap_or_else(|err| panic!("kubectl tenantflux {args:?}: {err}"))
}

/// The rows of a fleet JSON answer, by cluster name.
fn by_cluster(answer: &Value) -> BTreeMap<String, Value> {
    answer["clusters"]
        .as_array()
        .expect("clusters")
        .iter()
        .map(|row| (row["cluster"].as_str().unwrap().to_owned(), row.clone()))
        .collect()
}

/// Stores `kubeconfig` as Kamaji does: Secret `kubernetes-<x>-admin-kubeconfig` in namespace
/// `tenant-<x>`, under both the external and the in-cluster key.
async fn store_kubeconfig(
    management: &kube::Client,
    namespace: &str,
    name: &str,
    kubeconfig: &str,
) {
    let namespaces: Api<Namespace> = Api::all(management.clone());
    let _ = namespaces
        .create(
            &PostParams::default(),
            &Namespace {
                metadata: ObjectMeta {
                    name: Some(namespace.to_owned()),
                    ..ObjectMeta::default()
                },
                ..Namespace::default()
            },
        )
        .await;
    let secrets: Api<Secret> = Api::namespaced(management.clone(), namespace);
    let data = ["admin.conf", "super-admin.svc"]
        .map(|key| (key.to_owned(), kubeconfig.to_owned()))
        .into();
    secrets
        .create(
            &PostParams::default(),
            &Secret {
                metadata: ObjectMeta {
                    name: Some(name.to_owned()),
                    labels: Some([("tier".to_owned(), "gold".to_owned())].into()),
                    ..ObjectMeta::default()
                },
                string_data: Some(data),
                ..Secret::default()
            },
        )
        .await
        .unwrap_or_else(|err| panic!("creating Secret {namespace}/{name}: {err}"));
}

struct Keys {
    dir: tempfile::TempDir,
    key: PathBuf,
    public: PathBuf,
}

impl Keys {
    fn new(management: &TestCluster) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let keys = dir.path().join("keys");
        let out = fleet(management, &["policy", "keygen", "--out", path(&keys)]);
        assert!(out.status.success(), "{}", stderr(&out));
        Self {
            key: keys.join("ed25519.key"),
            public: keys.join("ed25519.pub"),
            dir,
        }
    }

    /// Signs the fleet's policy at `generation` (Flux 2.9.0 at least, since 2026-01-01).
    fn sign(&self, management: &TestCluster, generation: u64) -> PathBuf {
        let unsigned = self.dir.path().join(format!("policy-{generation}.yaml"));
        std::fs::write(
            &unsigned,
            format!(
                "apiVersion: tenantflux.io/v1alpha1\nkind: Policy\nmetadata: {{name: fleet}}\n\
                 spec:\n  generation: {generation}\n  distribution:\n    upgradeDeadline:\n      \
                 minimumVersion: \"2.9.0\"\n      date: \"2026-01-01\"\n"
            ),
        )
        .unwrap();
        let signed = self.dir.path().join(format!("signed-{generation}.yaml"));
        let out = fleet(
            management,
            &[
                "policy",
                "sign",
                "-f",
                path(&unsigned),
                "--key",
                path(&self.key),
                "--out",
                path(&signed),
            ],
        );
        assert!(out.status.success(), "{}", stderr(&out));
        signed
    }
}

#[tokio::test]
async fn the_fleet_is_discovered_pushed_to_and_read_across_a_stopped_cluster() {
    let pid = std::process::id();
    let management = TestCluster::start(&format!("tff-mgmt-{pid}")).expect("management cluster");
    let tenants: Vec<TestCluster> = ["a", "b", "c"]
        .iter()
        .map(|x| TestCluster::start(&format!("tff-{x}-{pid}")).expect("tenant cluster"))
        .collect();
    let [a, b, c] = &tenants[..] else {
        unreachable!()
    };
    let keys = Keys::new(&management);
    for tenant in &tenants {
        tenant
            .restart_agent_with(&[("TENANTFLUX_POLICY_PUBLIC_KEY", path(&keys.public))])
            .expect("agent");
    }

    // Tenant a runs Flux 2.8 (below the deadline's 2.9.0): the real flux-operator reconciles
    // its FluxInstance before any policy exists.
    a.ensure_flux_operator().expect("flux-operator on a");
    let a_client = a.client().await.expect("client of a");
    apply_flux_instance(&a_client, "2.8.x")
        .await
        .expect("FluxInstance on a");
    let instances = flux_instances(&a_client);
    wait_for("FluxInstance Ready on a", Duration::from_secs(300), || {
        let instances = instances.clone();
        async move {
            let instance = instances.get("flux").await.ok()?;
            let value = serde_json::to_value(instance).ok()?;
            (condition_status(&value, "Ready") == Some("True")).then_some(())
        }
    })
    .await
    .expect("FluxInstance Ready");

    // Kamaji's admin kubeconfigs are client certificates (a and c); b's is a token of an
    // account that may push. d is the management cluster itself: no agent there. Decoys:
    // CAPI's copy and a Secret outside the tenant namespaces.
    let mgmt = management.client().await.expect("management client");
    let b_account = b.policy_pusher_kubeconfig().expect("account on b");
    for (x, cluster, kubeconfig) in [
        ("a", a, None),
        ("b", b, Some(b_account.as_path())),
        ("c", c, None),
        ("d", &management, None),
    ] {
        let text = cluster
            .flattened_kubeconfig(kubeconfig)
            .expect("kubeconfig");
        store_kubeconfig(
            &mgmt,
            &format!("tenant-{x}"),
            &format!("kubernetes-{x}-admin-kubeconfig"),
            &text,
        )
        .await;
    }
    let a_text = a.flattened_kubeconfig(None).unwrap();
    store_kubeconfig(&mgmt, "tenant-a", "kubernetes-a-kubeconfig", &a_text).await;
    store_kubeconfig(
        &mgmt,
        "cozy-system",
        "kubernetes-z-admin-kubeconfig",
        &a_text,
    )
    .await;

    // Discovery: the four tenant clusters, nothing else.
    let listed = fleet(&management, &["fleet", "list", "-o", "json"]);
    assert!(listed.status.success(), "{}", stderr(&listed));
    let listed = by_cluster(&json(&listed));
    assert_eq!(
        listed.keys().collect::<Vec<_>>(),
        [
            "kubernetes-a",
            "kubernetes-b",
            "kubernetes-c",
            "kubernetes-d"
        ]
    );
    assert_eq!(listed["kubernetes-a"]["tenant"], "tenant-a");
    assert_eq!(listed["kubernetes-a"]["source"]["key"], "admin.conf");
    let table = stdout(&fleet(&management, &["fleet", "list"]));
    assert!(table.starts_with("TENANT     CLUSTER"), "{table}");
    assert!(
        table.contains("Secret tenant-b/kubernetes-b-admin-kubeconfig key admin.conf"),
        "{table}"
    );

    // c already holds a newer generation than the fleet's push.
    let gen5 = keys.sign(&management, 5);
    let gen6 = keys.sign(&management, 6);
    let c_account = c.policy_pusher_kubeconfig().expect("account on c");
    let out = c
        .kubectl_tenantflux(Some(&c_account), &["policy", "push", "-f", path(&gen6)])
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));

    // Push to all: accepted by a and b (a as tenantflux-platform, through TokenRequest),
    // rejected by c with the agent's reason, d has no agent; exit 1 says not all took it.
    let push = |file: &Path, select: &[&str]| {
        let mut args = vec!["fleet", "policy", "push", "-f", path(file), "-o", "json"];
        args.extend(select);
        fleet(&management, &args)
    };
    let out = push(&gen5, &["--all"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("2 of 4 tenant clusters did not take the policy"),
        "{}",
        stderr(&out)
    );
    let answer = json(&out);
    assert_eq!(answer["generation"], 5);
    let rows = by_cluster(&answer);
    assert_eq!(rows["kubernetes-a"]["result"], "accepted", "{answer:#}");
    assert_eq!(rows["kubernetes-a"]["previousGeneration"], 0);
    assert_eq!(rows["kubernetes-b"]["result"], "accepted", "{answer:#}");
    assert_eq!(rows["kubernetes-c"]["result"], "rejected", "{answer:#}");
    let reason = rows["kubernetes-c"]["reason"].as_str().unwrap();
    assert!(reason.contains("stale generation 5 ≤ 6"), "{reason}");
    assert_eq!(rows["kubernetes-d"]["result"], "no-agent", "{answer:#}");

    // Again: the same generation is a no-op where it was taken.
    let rows = by_cluster(&json(&push(&gen5, &["--all"])));
    assert_eq!(rows["kubernetes-a"]["result"], "unchanged");
    assert_eq!(rows["kubernetes-b"]["result"], "unchanged");
    assert_eq!(rows["kubernetes-c"]["result"], "rejected");

    // A selector picks clusters; pushing needs one or --all.
    let out = push(
        &gen5,
        &["-l", "tenantflux.io/tenant in (tenant-a,tenant-b)"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        by_cluster(&json(&out)).keys().collect::<Vec<_>>(),
        ["kubernetes-a", "kubernetes-b"]
    );
    let out = push(&gen5, &["-l", "tenantflux.io/tenant=tenant-nobody"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("no tenant cluster matched"),
        "{}",
        stderr(&out)
    );
    let out = push(&gen5, &[]);
    assert_eq!(out.status.code(), Some(2), "clap refuses: {}", stderr(&out));
    assert!(stderr(&out).contains("--all"), "{}", stderr(&out));

    // Status: one row per cluster; a is past the deadline on Flux 2.8, hence non-compliant.
    let out = fleet(&management, &["fleet", "status", "-o", "json"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "d has no agent: {}",
        stderr(&out)
    );
    let rows = by_cluster(&json(&out));
    let row_a = &rows["kubernetes-a"];
    assert_eq!(row_a["state"], "ok", "{row_a:#}");
    assert_eq!(row_a["tenant"], "tenant-a");
    assert_eq!(row_a["ready"], "True");
    assert_eq!(
        row_a["operatorVersion"],
        tenantflux_tests::tool_path("FLUX_OPERATOR_VERSION")
            .to_string_lossy()
            .as_ref()
    );
    let flux = row_a["fluxVersion"].as_str().expect("Flux version of a");
    assert!(flux.starts_with("v2.8."), "{flux}");
    assert!(
        row_a["agentVersion"]
            .as_str()
            .is_some_and(|v| !v.is_empty())
    );
    assert_eq!(row_a["policyGeneration"], 5);
    assert_eq!(row_a["compliant"], false);
    assert_eq!(row_a["deadline"]["minimumVersion"], "2.9.0");
    assert_eq!(row_a["deadline"]["date"], "2026-01-01");
    assert_eq!(row_a["deadline"]["passed"], true);
    let violations = row_a["violations"].to_string();
    assert!(
        violations.contains(&format!(
            "Flux {flux} is below 2.9.0, required since 2026-01-01"
        )),
        "{violations}"
    );
    assert!(row_a["lastChange"].as_str().is_some());
    assert_eq!(rows["kubernetes-b"]["state"], "ok");
    assert_eq!(
        rows["kubernetes-b"]["ready"],
        Value::Null,
        "no FluxInstance on b"
    );
    assert_eq!(rows["kubernetes-b"]["compliant"], true);
    assert_eq!(rows["kubernetes-c"]["policyGeneration"], 6);
    assert_eq!(rows["kubernetes-d"]["state"], "no-agent");
    let reason = rows["kubernetes-d"]["reason"].as_str().unwrap();
    assert!(
        reason.contains("no Running and Ready tenantflux-agent pod"),
        "{reason}"
    );

    let out = fleet(
        &management,
        &["fleet", "status", "-l", "tier=gold,!missing"],
    );
    let table = stdout(&out);
    let lines: Vec<&str> = table.lines().collect();
    assert!(
        lines[0].starts_with("TENANT     CLUSTER        AGENT"),
        "{table}"
    );
    assert!(
        lines[0].contains("DEADLINE") && lines[0].contains("LAST CHANGE"),
        "{table}"
    );
    assert_eq!(lines.len(), 5, "{table}");
    assert!(lines[1].contains("tenant-a   kubernetes-a"), "{table}");
    assert!(lines[1].contains("2.9.0 since 2026-01-01"), "{table}");
    assert!(lines[4].contains("NoAgent"), "{table}");

    // A Secret without the key asked for fails its row, saying which keys it has.
    let out = fleet(
        &management,
        &[
            "fleet",
            "status",
            "-l",
            "tenantflux.io/tenant=tenant-a",
            "--secret-key",
            "value",
            "-o",
            "json",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    let row = &by_cluster(&json(&out))["kubernetes-a"];
    assert_eq!(row["state"], "error");
    assert_eq!(
        row["reason"],
        "Secret tenant-a/kubernetes-a-admin-kubeconfig has no key value (it has admin.conf, \
         super-admin.svc); choose the key with --secret-key"
    );

    // The same fleet from a file (a and c by their kubeconfig files, as a non-Cozystack
    // platform keeps them).
    let fleet_file = keys.dir.path().join("fleet.yaml");
    std::fs::write(
        &fleet_file,
        format!(
            "- {{name: a, tenant: acme, kubeconfig: {}}}\n- {{name: c, kubeconfig: {}}}\n",
            a.kubeconfig().display(),
            c.kubeconfig().display()
        ),
    )
    .unwrap();
    let out = fleet(
        &management,
        &[
            "fleet",
            "status",
            "--fleet-file",
            path(&fleet_file),
            "-o",
            "yaml",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let answer: Value = tenantflux_core::yaml::from_slice(&out.stdout).expect("YAML");
    let rows = by_cluster(&answer);
    assert_eq!(rows["a"]["tenant"], "acme");
    assert_eq!(rows["a"]["policyGeneration"], 5);
    assert_eq!(rows["c"]["policyGeneration"], 6);

    // b stops mid-run, under a watching `fleet status -w`: the watch prints the fleet again
    // with b unreachable; a push afterwards reports it unreachable, the rest go on.
    let mut watch = management
        .plugin_command(
            None,
            &["fleet", "status", "-w", "--interval", "1s", "-o", "json"],
        )
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("fleet status -w");
    let (documents, received) = std::sync::mpsc::channel::<Value>();
    let reader = watch.stdout.take().expect("piped stdout");
    std::thread::spawn(move || {
        for document in serde_json::Deserializer::from_reader(reader).into_iter::<Value>() {
            if documents.send(document.expect("a JSON document")).is_err() {
                break;
            }
        }
    });
    let next = || {
        received
            .recv_timeout(Duration::from_secs(90))
            .expect("the watch prints the fleet")
    };
    let first = by_cluster(&next());
    assert_eq!(first["kubernetes-b"]["state"], "ok");
    b.down().expect("stopping b");
    // Only changes are printed; another agent's may come first.
    let changed = loop {
        let rows = by_cluster(&next());
        if rows["kubernetes-b"]["state"] != "ok" {
            break rows;
        }
    };
    assert_eq!(
        changed["kubernetes-b"]["state"], "unreachable",
        "{changed:#?}"
    );
    assert_eq!(changed["kubernetes-a"]["state"], "ok");
    watch.kill().expect("stopping the watch");
    let _ = watch.wait();
    let gen7 = keys.sign(&management, 7);
    let out = fleet(
        &management,
        &[
            "fleet",
            "policy",
            "push",
            "-f",
            path(&gen7),
            "-l",
            "tenantflux.io/tenant!=tenant-d",
            "--cluster-timeout",
            "20s",
            "-o",
            "json",
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let rows = by_cluster(&json(&out));
    assert_eq!(rows["kubernetes-a"]["result"], "accepted");
    assert_eq!(rows["kubernetes-a"]["previousGeneration"], 5);
    assert_eq!(rows["kubernetes-c"]["result"], "accepted");
    assert_eq!(rows["kubernetes-c"]["previousGeneration"], 6);
    assert_eq!(rows["kubernetes-b"]["result"], "unreachable");
    assert!(
        rows["kubernetes-b"]["reason"]
            .as_str()
            .is_some_and(|r| !r.is_empty())
    );

    let out = fleet(
        &management,
        &["fleet", "status", "-o", "json", "--concurrency", "1"],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("2 of 4 tenant clusters could not be asked"),
        "{}",
        stderr(&out)
    );
    let rows = by_cluster(&json(&out));
    assert_eq!(rows["kubernetes-b"]["state"], "unreachable");
    assert_eq!(rows["kubernetes-a"]["policyGeneration"], 7);
    assert_eq!(rows["kubernetes-c"]["policyGeneration"], 7);
}
