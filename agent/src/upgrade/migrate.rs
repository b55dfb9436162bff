//! Storage-version migration of one object, as flux-operator migrates: an empty merge patch
//! makes the API server store the object again at the storage version; managedFields naming
//! another version are rewritten to it, since the API server cannot convert managed fields of
//! a version it no longer serves.

use kube::{
    Api, Client,
    api::{ApiResource, DynamicObject, Patch, PatchParams},
};
use serde_json::json;

use super::StepError;

/// How often one object is read again after a concurrent write changed it.
const MAX_CONFLICTS: u32 = 5;

/// Migrates `object` (as listed: it may be stale). The patch carries the object's
/// resourceVersion, so a write that happened since the list (a server-side apply by another
/// manager adds its managedFields entry) is not overwritten with the old entries: the API server
/// answers Conflict, and the object is read again and migrated from what it is now.
pub async fn migrate_object(
    client: &Client,
    resource: &ApiResource,
    object: &DynamicObject,
) -> Result<(), StepError> {
    let name = object.metadata.name.clone().unwrap_or_default();
    let namespace = object.metadata.namespace.clone();
    let api: Api<DynamicObject> = match &namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, resource),
        None => Api::all_with(client.clone(), resource),
    };
    let failed = |err: kube::Error| StepError::Kube {
        what: format!(
            "migrating {} {}/{name}",
            resource.kind,
            namespace.as_deref().unwrap_or_default()
        ),
        source: Box::new(err),
    };
    let mut current = object.clone();
    let mut conflicts = 0;
    loop {
        match api
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(&patch(resource, &current)),
            )
            .await
        {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => return Ok(()),
            Err(kube::Error::Api(status)) if status.code == 409 && conflicts < MAX_CONFLICTS => {
                conflicts += 1;
                match api.get_opt(&name).await.map_err(failed)? {
                    Some(fresh) => current = fresh,
                    None => return Ok(()),
                }
            }
            Err(err) => return Err(failed(err)),
        }
    }
}

/// The merge patch that migrates `object`: its resourceVersion as the precondition, and its
/// managedFields at the storage version when any names another.
fn patch(resource: &ApiResource, object: &DynamicObject) -> serde_json::Value {
    let entries = object.metadata.managed_fields.clone().unwrap_or_default();
    let mut metadata = json!({"resourceVersion": object.metadata.resource_version});
    if entries
        .iter()
        .any(|e| e.api_version.as_deref() != Some(resource.api_version.as_str()))
    {
        let entries: Vec<_> = entries
            .into_iter()
            .map(|mut e| {
                e.api_version = Some(resource.api_version.clone());
                e
            })
            .collect();
        metadata["managedFields"] = json!(entries);
    }
    json!({ "metadata": metadata })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resource() -> ApiResource {
        ApiResource {
            group: "source.toolkit.fluxcd.io".into(),
            version: "v1".into(),
            api_version: "source.toolkit.fluxcd.io/v1".into(),
            kind: "GitRepository".into(),
            plural: "gitrepositories".into(),
        }
    }

    fn object(versions: &[&str]) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "source.toolkit.fluxcd.io/v1",
            "kind": "GitRepository",
            "metadata": {
                "name": "podinfo", "namespace": "apps", "resourceVersion": "42",
                "managedFields": versions.iter().map(|v| json!({
                    "manager": "kubectl", "operation": "Apply",
                    "apiVersion": format!("source.toolkit.fluxcd.io/{v}"),
                })).collect::<Vec<_>>(),
            },
        }))
        .unwrap()
    }

    #[test]
    fn every_patch_is_conditional_on_the_version_it_was_computed_from() {
        assert_eq!(
            patch(&resource(), &object(&["v1"])),
            json!({"metadata": {"resourceVersion": "42"}})
        );
        let patch = patch(&resource(), &object(&["v1beta2", "v1"]));
        assert_eq!(patch["metadata"]["resourceVersion"], "42");
        let versions: Vec<_> = patch["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["apiVersion"].as_str().unwrap())
            .collect();
        assert_eq!(versions, ["source.toolkit.fluxcd.io/v1"; 2]);
    }
}
