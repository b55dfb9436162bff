//! What the planner needs, read from the cluster: the FluxInstance, the Kubernetes version,
//! the CRDs of the Flux kinds with their stored and storage versions, every object of those
//! kinds (the managers that still write old versions) and the Kustomizations' inventories.

use std::collections::BTreeSet;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, ListParams};
use serde_json::Value;
use tenantflux_core::policy::today;

use super::{
    StepError, TOOLKIT_GROUPS, Upgrader, kube_err, list_all,
    plan::{self, CrdFacts, Facts, InventoryEntry, ManagedEntry, ObjectRef},
    resource, storage_version,
};
use crate::workloads::catalog;

impl Upgrader {
    /// Reads what the planner needs from the cluster.
    pub async fn facts(&self) -> Result<Facts, StepError> {
        let instance = self
            .live_instance()
            .await?
            .map(|o| serde_json::to_value(o).unwrap_or_default());
        let version = self
            .client
            .apiserver_version()
            .await
            .map_err(kube_err("reading the Kubernetes version"))?;
        let mut facts = Facts {
            instance_spec: instance.as_ref().and_then(|i| i.get("spec").cloned()),
            installed: instance
                .as_ref()
                .and_then(|i| i.pointer("/status/lastAppliedRevision"))
                .and_then(Value::as_str)
                .and_then(plan::installed_release),
            kubernetes: plan::kubernetes_version(&version.major, &version.minor),
            day: today(),
            ..Facts::default()
        };
        let crds: Api<CustomResourceDefinition> = Api::all(self.client.clone());
        let crds = crds
            .list(&ListParams::default())
            .await
            .map_err(kube_err("listing CustomResourceDefinitions"))?;
        // The kinds the catalog knows are those Flux removes versions of, and those the
        // agent's RBAC lets it list and patch.
        for crd in crds.items.iter().filter(|c| {
            catalog::KINDS
                .iter()
                .any(|k| k.group == c.spec.group && k.kind == c.spec.names.kind)
                && TOOLKIT_GROUPS.contains(&c.spec.group.as_str())
        }) {
            let Some(storage) = storage_version(crd) else {
                continue;
            };
            let (group, kind) = (&crd.spec.group, &crd.spec.names.kind);
            let name = crd.metadata.name.clone().unwrap_or_default();
            let api = Api::all_with(
                self.client.clone(),
                &resource(group, kind, &crd.spec.names.plural, &storage),
            );
            let objects = list_all(&api)
                .await
                .map_err(kube_err(format!("listing {name}")))?;
            for object in &objects {
                let managed = object.metadata.managed_fields.iter().flatten();
                let mut seen = BTreeSet::new();
                for entry in managed {
                    let Some(version) = entry
                        .api_version
                        .as_deref()
                        .and_then(|v| v.strip_prefix(&format!("{group}/")))
                    else {
                        continue;
                    };
                    let manager = entry.manager.clone().unwrap_or_default();
                    if version != storage && seen.insert((manager.clone(), version.to_owned())) {
                        facts.managed.push(ManagedEntry {
                            manager,
                            object: ObjectRef {
                                group: group.clone(),
                                kind: kind.clone(),
                                namespace: object.metadata.namespace.clone().unwrap_or_default(),
                                name: object.metadata.name.clone().unwrap_or_default(),
                                version: version.to_owned(),
                            },
                        });
                    }
                }
            }
            if kind == "Kustomization" {
                facts
                    .inventory
                    .extend(objects.iter().flat_map(inventory_entries));
            }
            facts.crds.push(CrdFacts {
                name,
                group: group.clone(),
                kind: kind.clone(),
                stored_versions: crd
                    .status
                    .as_ref()
                    .and_then(|s| s.stored_versions.clone())
                    .unwrap_or_default(),
                storage_version: storage,
                objects: i64::try_from(objects.len()).unwrap_or(i64::MAX),
            });
        }
        Ok(facts)
    }
}

/// `apps_podinfo_source.toolkit.fluxcd.io_OCIRepository` (a Kustomization inventory id).
fn parse_inventory_id(id: &str) -> Option<(String, String, String, String)> {
    let mut parts = id.splitn(4, '_');
    let namespace = parts.next()?.to_owned();
    let name = parts.next()?.to_owned();
    let group = parts.next()?.to_owned();
    let kind = parts.next()?.to_owned();
    Some((namespace, name, group, kind))
}

/// The objects a Kustomization's `status.inventory` says it applied, with its source and path.
fn inventory_entries(kustomization: &DynamicObject) -> Vec<InventoryEntry> {
    let value = serde_json::to_value(kustomization).unwrap_or_default();
    let namespace = kustomization.metadata.namespace.clone().unwrap_or_default();
    let text = |pointer: &str| {
        value
            .pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let source_namespace = Some(text("/spec/sourceRef/namespace"))
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| namespace.clone());
    let source = format!(
        "{}/{source_namespace}/{}",
        text("/spec/sourceRef/kind"),
        text("/spec/sourceRef/name")
    );
    let path = text("/spec/path");
    let name = format!(
        "{namespace}/{}",
        kustomization.metadata.name.as_deref().unwrap_or_default()
    );
    value
        .pointer("/status/inventory/entries")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|entry| {
            let id = entry.get("id")?.as_str()?;
            let version = entry.get("v")?.as_str()?;
            let (namespace, object, group, kind) = parse_inventory_id(id)?;
            TOOLKIT_GROUPS
                .contains(&group.as_str())
                .then(|| InventoryEntry {
                    kustomization: name.clone(),
                    source: source.clone(),
                    path: path.clone(),
                    object: ObjectRef {
                        group,
                        kind,
                        namespace,
                        name: object,
                        version: version.to_owned(),
                    },
                })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn inventories_name_the_flux_objects_with_their_version_source_and_path() {
        let kustomization: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
            "kind": "Kustomization",
            "metadata": {"name": "apps", "namespace": "flux-system"},
            "spec": {"path": "./apps", "sourceRef": {"kind": "GitRepository", "name": "fleet"}},
            "status": {"inventory": {"entries": [
                {"id": "apps_podinfo_source.toolkit.fluxcd.io_OCIRepository", "v": "v1beta2"},
                {"id": "apps_podinfo_apps_Deployment", "v": "v1"},
                {"id": "_apps__Namespace", "v": "v1"},
            ]}},
        }))
        .unwrap();
        let entries = inventory_entries(&kustomization);
        assert_eq!(entries.len(), 1, "{entries:?}");
        let e = &entries[0];
        assert_eq!(e.kustomization, "flux-system/apps");
        assert_eq!(e.source, "GitRepository/flux-system/fleet");
        assert_eq!(e.path, "./apps");
        assert_eq!(
            (
                e.object.kind.as_str(),
                e.object.namespace.as_str(),
                e.object.name.as_str(),
                e.object.version.as_str()
            ),
            ("OCIRepository", "apps", "podinfo", "v1beta2")
        );
    }
}
