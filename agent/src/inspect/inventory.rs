//! The inventories Flux controllers record of what they applied (`status.inventory.entries`
//! of Kustomizations, HelmReleases and ResourceSets), read from an object's JSON: pure.

use serde_json::Value;

/// The kinds whose inventory lists what they applied: (group, kind).
pub const APPLIERS: &[(&str, &str)] = &[
    ("kustomize.toolkit.fluxcd.io", "Kustomization"),
    ("helm.toolkit.fluxcd.io", "HelmRelease"),
    ("fluxcd.controlplane.io", "ResourceSet"),
];

/// One object of an inventory.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Entry {
    /// Empty for cluster-scoped objects.
    pub namespace: String,
    pub name: String,
    /// Empty for the core group.
    pub group: String,
    pub kind: String,
    /// The API version it was applied at (`v`), when recorded.
    pub version: String,
}

impl Entry {
    /// Whether the entry is an object whose own inventory can be followed.
    pub fn is_applier(&self) -> bool {
        APPLIERS
            .iter()
            .any(|(group, kind)| self.group == *group && self.kind == *kind)
    }

    /// `Kind/namespace/name`, or `Kind/name` when cluster-scoped, as `flux tree` writes it.
    pub fn title(&self) -> String {
        if self.namespace.is_empty() {
            format!("{}/{}", self.kind, self.name)
        } else {
            format!("{}/{}/{}", self.kind, self.namespace, self.name)
        }
    }
}

/// The inventory id of an object, as cli-utils writes it (see [`parse_id`]); `namespace` and
/// `group` empty for cluster-scoped objects and the core group.
pub fn id(namespace: &str, name: &str, group: &str, kind: &str) -> String {
    format!("{namespace}_{}_{group}_{kind}", name.replace(':', "__"))
}

/// An inventory id as cli-utils writes it: `<namespace>_<name>_<group>_<kind>`, the name's
/// colons written as `__` (RBAC names such as `system:controller:x`).
pub fn parse_id(id: &str) -> Option<Entry> {
    let (namespace, rest) = id.split_once('_')?;
    let (rest, kind) = rest.rsplit_once('_')?;
    let (name, group) = rest.rsplit_once('_')?;
    if name.is_empty() || kind.is_empty() {
        return None;
    }
    Some(Entry {
        namespace: namespace.to_owned(),
        name: name.replace("__", ":"),
        group: group.to_owned(),
        kind: kind.to_owned(),
        version: String::new(),
    })
}

/// The entries of the object's `status.inventory`, in the order recorded; ids that do not
/// parse are left out.
pub fn entries(object: &Value) -> Vec<Entry> {
    object
        .pointer("/status/inventory/entries")
        .and_then(Value::as_array)
        .map(|entries| {
            entries
                .iter()
                .filter_map(|e| {
                    let mut entry = parse_id(e.get("id")?.as_str()?)?;
                    entry.version = e
                        .get("v")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned();
                    Some(entry)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Whether the applier deploys to another cluster (`spec.kubeConfig`): its inventory names
/// objects that are not in this one.
pub fn targets_remote_cluster(object: &Value) -> bool {
    object
        .pointer("/spec/kubeConfig")
        .is_some_and(|v| !v.is_null())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_parse_as_cli_utils_writes_them() {
        let deployment = parse_id("apps_podinfo_apps_Deployment").unwrap();
        assert_eq!(
            (
                deployment.namespace.as_str(),
                deployment.name.as_str(),
                deployment.group.as_str(),
                deployment.kind.as_str()
            ),
            ("apps", "podinfo", "apps", "Deployment")
        );
        assert_eq!(deployment.title(), "Deployment/apps/podinfo");
        let namespace = parse_id("_apps__Namespace").unwrap();
        assert_eq!(
            (namespace.namespace.as_str(), namespace.group.as_str()),
            ("", "")
        );
        assert_eq!(namespace.title(), "Namespace/apps");
        let role =
            parse_id("_system__controller__x_rbac.authorization.k8s.io_ClusterRole").unwrap();
        assert_eq!(role.name, "system:controller:x");
        assert!(parse_id("nonsense").is_none());
        assert!(parse_id("ns__group_").is_none());
    }

    #[test]
    fn ids_are_written_as_they_are_read() {
        for (namespace, name, group, kind) in [
            ("apps", "cfg", "", "ConfigMap"),
            (
                "",
                "system:controller:x",
                "rbac.authorization.k8s.io",
                "ClusterRole",
            ),
            (
                "flux-system",
                "apps",
                "kustomize.toolkit.fluxcd.io",
                "Kustomization",
            ),
        ] {
            let entry = parse_id(&id(namespace, name, group, kind)).unwrap();
            assert_eq!(
                (entry.namespace.as_str(), entry.name.as_str()),
                (namespace, name)
            );
            assert_eq!((entry.group.as_str(), entry.kind.as_str()), (group, kind));
        }
        assert_eq!(
            id("", "system:x", "rbac.authorization.k8s.io", "ClusterRole"),
            "_system__x_rbac.authorization.k8s.io_ClusterRole"
        );
    }

    #[test]
    fn entries_keep_their_order_and_version_and_appliers_are_known() {
        let object = serde_json::json!({"status": {"inventory": {"entries": [
            {"id": "apps_cfg__ConfigMap", "v": "v1"},
            {"id": "bad"},
            {"id": "apps_child_kustomize.toolkit.fluxcd.io_Kustomization", "v": "v1"},
        ]}}});
        let entries = entries(&object);
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0].version, "v1");
        assert!(!entries[0].is_applier());
        assert!(entries[1].is_applier());
        assert!(super::entries(&serde_json::json!({})).is_empty());
        assert!(targets_remote_cluster(
            &serde_json::json!({"spec": {"kubeConfig": {"secretRef": {"name": "x"}}}})
        ));
        assert!(!targets_remote_cluster(&serde_json::json!({"spec": {}})));
    }
}
