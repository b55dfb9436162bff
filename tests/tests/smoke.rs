//! Smoke tests that prove the real control plane: controller-manager, scheduler and kwok make a
//! Deployment Available, the real flux-operator makes a FluxInstance Ready, and the Flux
//! controllers built here run as local processes at the versions it rolled out.

use std::time::Duration;

use k8s_openapi::api::{apps::v1::Deployment, core::v1::Pod};
use kube::{
    Api, ResourceExt,
    api::{ListParams, Patch, PatchParams},
};
use serde_json::json;
use tenantflux_tests::{
    FIELD_MANAGER, TestCluster, apply_flux_instance, condition_status, flux_instances, wait_for,
};

async fn apply_namespace(client: &kube::Client, name: &str) {
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
    namespaces
        .patch(name, &PatchParams::apply(FIELD_MANAGER), &Patch::Apply(&ns))
        .await
        .expect("apply namespace");
}

#[tokio::test]
async fn deployment_becomes_available_through_scheduler_and_kwok() {
    let cluster = TestCluster::shared();
    let client = cluster.client().await.expect("client");
    apply_namespace(&client, "smoke-deploy").await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "smoke-deploy");
    let deployment = json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "smoke-deploy"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "registry.example/web:1"}]}
            }
        }
    });
    deployments
        .patch(
            "web",
            &PatchParams::apply(FIELD_MANAGER),
            &Patch::Apply(&deployment),
        )
        .await
        .expect("apply deployment");

    let available = wait_for(
        "Deployment smoke-deploy/web to be Available",
        Duration::from_secs(120),
        || {
            let deployments = deployments.clone();
            async move {
                let d = deployments.get("web").await.ok()?;
                let value = serde_json::to_value(&d).ok()?;
                (condition_status(&value, "Available") == Some("True")
                    && d.status.as_ref()?.ready_replicas == Some(2))
                .then_some(d)
            }
        },
    )
    .await
    .expect("deployment available");
    assert_eq!(available.status.unwrap().available_replicas, Some(2));

    // The pods were placed by the scheduler on the kwok node and made Running by kwok.
    let pods: Api<Pod> = Api::namespaced(client, "smoke-deploy");
    let list = pods
        .list(&ListParams::default().labels("app=web"))
        .await
        .expect("list pods");
    assert_eq!(
        list.items.len(),
        2,
        "pods: {:?}",
        list.items.iter().map(|p| p.name_any()).collect::<Vec<_>>()
    );
    for pod in &list.items {
        let spec = pod.spec.as_ref().unwrap();
        assert!(
            spec.node_name.is_some(),
            "pod {} was not scheduled",
            pod.name_any()
        );
        assert_eq!(
            pod.status.as_ref().unwrap().phase.as_deref(),
            Some("Running")
        );
    }
}

#[tokio::test]
async fn flux_instance_becomes_ready_through_the_real_operator() {
    let cluster = TestCluster::shared();
    cluster.ensure_flux_operator().expect("flux-operator");
    let client = cluster.client().await.expect("client");
    let instances = flux_instances(&client);
    apply_flux_instance(&client, "2.9.x")
        .await
        .expect("apply FluxInstance");

    let ready = wait_for(
        "FluxInstance flux-system/flux to be Ready",
        Duration::from_secs(300),
        || {
            let instances = instances.clone();
            async move {
                let object = serde_json::to_value(instances.get("flux").await.ok()?).ok()?;
                (condition_status(&object, "Ready") == Some("True")).then_some(object)
            }
        },
    )
    .await
    .expect("FluxInstance ready");
    let revision = ready
        .pointer("/status/lastAppliedRevision")
        .and_then(|v| v.as_str())
        .unwrap_or_default();
    assert!(
        revision.starts_with("v2.9."),
        "lastAppliedRevision {revision:?} is not a 2.9 release"
    );

    // The operator installed the controllers, and they became Available.
    let deployments: Api<Deployment> = Api::namespaced(client, "flux-system");
    for name in [
        "source-controller",
        "kustomize-controller",
        "helm-controller",
        "notification-controller",
    ] {
        let d = deployments
            .get(name)
            .await
            .unwrap_or_else(|e| panic!("Deployment flux-system/{name}: {e}"));
        let value = serde_json::to_value(&d).unwrap();
        assert_eq!(
            condition_status(&value, "Available"),
            Some("True"),
            "Deployment flux-system/{name}"
        );
    }
    for name in ["source-controller", "kustomize-controller"] {
        cluster
            .flux_controller_runs(name, &format!("{name}-v1.9.4"))
            .await
            .expect("the controller's process");
    }
    // Not buildable here (the module proxy serves no helm-controller or
    // notification-controller): their pods run no process.
    for name in ["helm-controller", "notification-controller"] {
        assert_eq!(cluster.flux_controller_binary(name), None, "{name}");
    }
}
