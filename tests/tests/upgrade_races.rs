//! Upgrades racing other writers, against the real control plane: a server-side apply that
//! lands between the migration's list and its write keeps its field ownership, and a
//! FluxInstance write that fails transiently during the version bump is retried, not turned
//! into a failed upgrade.

use std::{process::Stdio, time::Duration};

use kube::{
    Api,
    api::{ApiResource, DynamicObject, Patch, PatchParams},
};
use serde_json::{Value, json};
use tenantflux_agent::upgrade::migrate::migrate_object;
use tenantflux_tests::{
    TestCluster, apply_flux_instance, flux_instances, tenant::AGENT_NAMESPACE, wait_for,
};

const GROUP: &str = "races.tenantflux.io";

/// A CRD that serves `v1alpha1` and stores `v1`, as a Flux CRD does between releases.
fn crd() -> String {
    let version = |name: &str, storage: bool| {
        json!({
            "name": name, "served": true, "storage": storage,
            "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                "spec": {"type": "object", "properties": {
                    "a": {"type": "string"}, "b": {"type": "string"},
                }},
            }}},
        })
    };
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("widgets.{GROUP}")},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [version("v1alpha1", false), version("v1", true)],
        },
    })
    .to_string()
}

fn widgets(version: &str) -> ApiResource {
    ApiResource {
        group: GROUP.into(),
        version: version.into(),
        api_version: format!("{GROUP}/{version}"),
        kind: "Widget".into(),
        plural: "widgets".into(),
    }
}

/// `(manager, apiVersion)` of every managedFields entry.
fn managers(object: &DynamicObject) -> Vec<(String, String)> {
    object
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .map(|e| {
            (
                e.manager.clone().unwrap_or_default(),
                e.api_version.clone().unwrap_or_default(),
            )
        })
        .collect()
}

#[tokio::test]
async fn a_server_side_apply_between_list_and_migration_keeps_its_ownership() {
    let cluster = TestCluster::shared();
    let client = cluster.client().await.unwrap();
    let namespace = format!("races-{}", std::process::id());
    cluster.apply_yaml(&crd()).expect("CRD");
    cluster
        .kubectl_ok(&[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            &format!("crd/widgets.{GROUP}"),
        ])
        .expect("CRD established");
    cluster
        .apply_yaml(&format!(
            "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {namespace}}}\n"
        ))
        .expect("namespace");
    let at = |version: &str| -> Api<DynamicObject> {
        Api::namespaced_with(client.clone(), &namespace, &widgets(version))
    };
    let apply = |version: &str, manager: &str, spec: Value| {
        let api = at(version);
        let body = json!({
            "apiVersion": format!("{GROUP}/{version}"), "kind": "Widget",
            "metadata": {"name": "w"}, "spec": spec,
        });
        let manager = manager.to_owned();
        async move {
            api.patch("w", &PatchParams::apply(&manager), &Patch::Apply(&body))
                .await
                .expect("server-side apply")
        }
    };

    // Written at the old version, so the migration must rewrite its managedFields.
    apply("v1alpha1", "tenant", json!({"a": "1"})).await;
    // What the migration listed.
    let listed = at("v1").get("w").await.unwrap();
    assert_eq!(
        managers(&listed),
        [("tenant".to_owned(), format!("{GROUP}/v1alpha1"))]
    );
    // Another writer, after the list and before the migration's write.
    apply("v1", "other", json!({"b": "2"})).await;

    migrate_object(&client, &widgets("v1"), &listed)
        .await
        .expect("migrated");

    let after = at("v1").get("w").await.unwrap();
    let owners = managers(&after);
    assert!(
        owners.contains(&("other".to_owned(), format!("{GROUP}/v1"))),
        "the concurrent writer lost its ownership: {owners:?}"
    );
    assert!(
        owners.contains(&("tenant".to_owned(), format!("{GROUP}/v1"))),
        "the old-version entry was not migrated: {owners:?}"
    );
    // Ownership is real, not only listed: a conflicting apply of `other`'s field is refused.
    let conflict = at("v1")
        .patch(
            "w",
            &PatchParams::apply("third"),
            &Patch::Apply(&json!({
                "apiVersion": format!("{GROUP}/v1"), "kind": "Widget",
                "metadata": {"name": "w"}, "spec": {"b": "3"},
            })),
        )
        .await;
    assert!(
        matches!(&conflict, Err(kube::Error::Api(s)) if s.code == 409),
        "{conflict:?}"
    );
    cluster
        .kubectl_ok(&["delete", "namespace", &namespace, "--wait=false"])
        .expect("cleanup");
}

/// The upgrade record the agent keeps, as JSON.
async fn record(client: &kube::Client) -> Option<Value> {
    let cm =
        Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), AGENT_NAMESPACE)
            .get_opt("tenantflux-upgrade")
            .await
            .ok()??;
    serde_json::from_str(cm.data?.get("state.json")?).ok()
}

/// A webhook no one answers, for FluxInstance writes: every write fails with an internal error
/// of the API server, as while a webhook's backend restarts, and reads still work.
const UNANSWERED_WEBHOOK: &str = "\
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: tenantflux-races-unanswered}
webhooks:
  - name: unanswered.races.tenantflux.io
    clientConfig: {url: \"https://127.0.0.1:1/validate\"}
    rules:
      - apiGroups: [fluxcd.controlplane.io]
        apiVersions: [\"*\"]
        operations: [UPDATE]
        resources: [fluxinstances]
    failurePolicy: Fail
    sideEffects: None
    admissionReviewVersions: [v1]
    timeoutSeconds: 2
";

#[tokio::test]
async fn a_transient_failure_of_the_version_bump_is_retried_not_a_failed_upgrade() {
    // It installs Flux 2.7, whose controllers tests/run builds in the background.
    tenantflux_tests::await_later_builds().expect("the Flux 2.7 controllers");
    let cluster = TestCluster::start(&format!("tfu-race-{}", std::process::id()))
        .expect("starting the cluster");
    cluster.ensure_flux_operator().expect("flux-operator");
    cluster.ensure_agent().expect("agent");
    let client = cluster.client().await.unwrap();
    apply_flux_instance(&client, "2.7.x").await.unwrap();
    wait_for(
        "FluxInstance flux applied",
        Duration::from_secs(180),
        || {
            let instances = flux_instances(&client);
            async move {
                let i = serde_json::to_value(instances.get("flux").await.ok()?).ok()?;
                (tenantflux_tests::condition_status(&i, "Ready") == Some("True")).then_some(())
            }
        },
    )
    .await
    .unwrap();

    // The tenant: cluster-admin of its own cluster, reaching the agent with a token.
    let tenant = cluster.cluster_admin_token_user("tenant").expect("tenant");

    cluster.apply_yaml(UNANSWERED_WEBHOOK).expect("webhook");
    // `upgrade apply` follows the upgrade until it ends, so it runs beside the test.
    let apply = cluster
        .plugin_command(
            Some(&tenant),
            &["upgrade", "apply", "--to", "2.8.x", "--yes"],
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl-tenantflux");
    // The bump fails on the webhook and the upgrade says it retries, still bumping.
    let retrying = wait_for(
        "the upgrade retrying the bump",
        Duration::from_secs(60),
        || async {
            let r = record(&client).await?;
            (r["message"].as_str()?.contains("failed calling webhook")).then_some(r)
        },
    )
    .await;
    let retrying = match retrying {
        Ok(r) => r,
        Err(err) => {
            let mut apply = apply;
            let _ = apply.kill();
            let out = apply.wait_with_output().unwrap();
            panic!(
                "{err}; the record: {:?}; upgrade apply said: {}{}",
                record(&client).await,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    };
    assert_eq!(retrying["phase"], "bumping", "{retrying}");
    assert!(
        retrying["message"]
            .as_str()
            .unwrap()
            .starts_with("retrying: "),
        "{retrying}"
    );

    // Once writes work again, the same upgrade bumps the version and finishes.
    cluster
        .kubectl_ok(&[
            "delete",
            "validatingwebhookconfiguration",
            "tenantflux-races-unanswered",
        ])
        .expect("webhook removed");
    let done = wait_for(
        "the upgrade to finish",
        Duration::from_secs(240),
        || async {
            let r = record(&client).await?;
            matches!(r["phase"].as_str()?, "succeeded" | "failed").then_some(r)
        },
    )
    .await
    .unwrap();
    assert_eq!(done["phase"], "succeeded", "{done}");
    let out = tokio::task::spawn_blocking(move || apply.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(done["bumped"], true, "{done}");
    let instance =
        serde_json::to_value(flux_instances(&client).get("flux").await.unwrap()).unwrap();
    assert_eq!(instance["spec"]["distribution"]["version"], "2.8.x");
}
