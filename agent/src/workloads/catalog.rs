//! Which Flux kinds the cluster serves and at which version, from discovery data: the kinds of
//! `tenantflux_core::kinds`' table, and the kinds served under a Flux group that the table
//! lacks ([`unknown`]), with whether their CRD's schema lets `spec.suspend` suspend them. The
//! kinds themselves are re-exported here for the workloads modules; reading an object of a
//! kind is in `rows`, changing one in `patches`.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
pub use tenantflux_core::kinds::{
    Category, FORCE_AT, FluxKind, GENERATOR_RECONCILE_ANNOTATION, KINDS, Registry, Revision,
    SourceRef, SuspendBy, find, is_flux_group,
};

/// What discovery says about one API group: its versions in the API server's priority order
/// and the kinds each serves.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupVersions {
    pub group: String,
    pub preferred: Option<String>,
    pub versions: Vec<(String, Vec<String>)>,
    /// The group's namespaced kinds (at any version) and their plurals.
    pub resources: Vec<(String, String)>,
}

/// A kind served under a Flux group that the table lacks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unknown {
    pub kind: String,
    pub group: String,
    pub plural: String,
    pub served: Served,
}

impl Unknown {
    /// The name of its CustomResourceDefinition.
    pub fn crd(&self) -> String {
        format!("{}.{}", self.plural, self.group)
    }
}

/// How the cluster serves one kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Served {
    /// The version the agent uses: the group's preferred version if it serves the kind, else
    /// the first (highest priority) version that does.
    pub version: String,
    /// Every version serving the kind, `version` first.
    pub versions: Vec<String>,
}

/// How the cluster serves `kind`, from the discovery of its group; `None` if it does not.
pub fn served(kind: &FluxKind, groups: &[GroupVersions]) -> Option<Served> {
    let group = groups.iter().find(|g| g.group == kind.group)?;
    served_in(group, kind.kind)
}

fn served_in(group: &GroupVersions, kind: &str) -> Option<Served> {
    let mut versions: Vec<String> = group
        .versions
        .iter()
        .filter(|(_, kinds)| kinds.iter().any(|k| k == kind))
        .map(|(v, _)| v.clone())
        .collect();
    if let Some(at) = group
        .preferred
        .as_ref()
        .and_then(|p| versions.iter().position(|v| v == p))
    {
        let preferred = versions.remove(at);
        versions.insert(0, preferred);
    }
    Some(Served {
        version: versions.first()?.clone(),
        versions,
    })
}

/// The namespaced kinds served under a Flux group that the table lacks, in the order of their
/// group and kind. Cluster-scoped ones are left out: every Flux kind is namespaced, and the
/// calls address objects by namespace and name.
pub fn unknown(groups: &[GroupVersions]) -> Vec<Unknown> {
    let mut found: Vec<Unknown> = groups
        .iter()
        .filter(|g| is_flux_group(&g.group))
        .flat_map(|group| {
            group.resources.iter().filter_map(|(kind, plural)| {
                if tenantflux_core::kinds::compiled(&group.group, kind).is_some() {
                    return None;
                }
                Some(Unknown {
                    kind: kind.clone(),
                    group: group.group.clone(),
                    plural: plural.clone(),
                    served: served_in(group, kind)?,
                })
            })
        })
        .collect();
    found.sort_by(|a, b| (&a.group, &a.kind).cmp(&(&b.group, &b.kind)));
    found
}

/// Whether the CRD's schema at `version` has a boolean `spec.suspend`: only then may suspend
/// and resume set it on a kind the table lacks (a field the schema does not have would be
/// pruned or refused, and nothing says its controller reads it).
pub fn has_spec_suspend(crd: &CustomResourceDefinition, version: &str) -> bool {
    crd.spec
        .versions
        .iter()
        .find(|v| v.name == version)
        .and_then(|v| v.schema.as_ref()?.open_api_v3_schema.as_ref())
        .and_then(|root| root.properties.as_ref()?.get("spec"))
        .and_then(|spec| spec.properties.as_ref()?.get("suspend"))
        .is_some_and(|suspend| suspend.type_.as_deref() == Some("boolean"))
}

/// The kind `name` names, for tests; panics if there is none.
#[cfg(test)]
pub(crate) fn kind(name: &str) -> &'static FluxKind {
    find(name).unwrap_or_else(|| panic!("no kind {name}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tenantflux_core::kinds::{IMAGE, NOTIFICATION, SOURCE};

    fn group(name: &str, preferred: &str, versions: &[(&str, &[&str])]) -> GroupVersions {
        GroupVersions {
            group: name.into(),
            preferred: Some(preferred.into()),
            versions: versions
                .iter()
                .map(|(v, kinds)| (v.to_string(), kinds.iter().map(|k| k.to_string()).collect()))
                .collect(),
            resources: Vec::new(),
        }
    }
    #[test]
    fn served_versions_follow_each_flux_minor() {
        // Flux 2.6: image kinds at v1beta2 only, notification Alert at v1beta3 (+v1beta2).
        let flux_2_6 = [
            group(
                IMAGE,
                "v1beta2",
                &[
                    (
                        "v1beta2",
                        &["ImageRepository", "ImagePolicy", "ImageUpdateAutomation"],
                    ),
                    (
                        "v1beta1",
                        &["ImageRepository", "ImagePolicy", "ImageUpdateAutomation"],
                    ),
                ],
            ),
            group(
                NOTIFICATION,
                "v1",
                &[
                    ("v1", &["Receiver"]),
                    ("v1beta3", &["Alert", "Provider"]),
                    ("v1beta2", &["Alert", "Provider", "Receiver"]),
                ],
            ),
        ];
        assert_eq!(
            served(kind("imagepolicy"), &flux_2_6),
            Some(Served {
                version: "v1beta2".into(),
                versions: vec!["v1beta2".into(), "v1beta1".into()]
            })
        );
        // Not in the preferred version: the first version that serves it.
        assert_eq!(served(kind("alert"), &flux_2_6).unwrap().version, "v1beta3");
        assert_eq!(
            served(kind("receiver"), &flux_2_6).unwrap().versions,
            ["v1", "v1beta2"]
        );
        // Flux 2.9: v1 for image kinds.
        let flux_2_9 = [group(
            IMAGE,
            "v1",
            &[(
                "v1",
                &["ImageRepository", "ImagePolicy", "ImageUpdateAutomation"],
            )],
        )];
        assert_eq!(
            served(kind("imagepolicy"), &flux_2_9).unwrap().versions,
            ["v1"]
        );
        // A group not served, or a kind its group does not serve.
        assert_eq!(served(kind("ks"), &flux_2_9), None);
        assert_eq!(
            served(
                kind("alert"),
                &[group(NOTIFICATION, "v1", &[("v1", &["Receiver"])])]
            ),
            None
        );
        // The preferred version first even when the server lists it later.
        let reordered = [group(
            SOURCE,
            "v1",
            &[("v1beta2", &["GitRepository"]), ("v1", &["GitRepository"])],
        )];
        assert_eq!(
            served(kind("gitrepo"), &reordered).unwrap().versions,
            ["v1", "v1beta2"]
        );
    }

    #[test]
    fn kinds_the_table_lacks_come_from_discovery() {
        let probe_group = "probe.toolkit.fluxcd.io";
        let groups = [
            GroupVersions {
                resources: vec![
                    ("GitRepository".into(), "gitrepositories".into()),
                    ("SourceProbe".into(), "sourceprobes".into()),
                ],
                ..group(
                    SOURCE,
                    "v1",
                    &[("v1", &["GitRepository"]), ("v1alpha1", &["SourceProbe"])],
                )
            },
            GroupVersions {
                resources: vec![("Probe".into(), "probes".into())],
                ..group(
                    probe_group,
                    "v1",
                    &[("v1beta1", &["Probe"]), ("v1", &["Probe"])],
                )
            },
            // Not a Flux group: never a Flux kind.
            GroupVersions {
                resources: vec![("Widget".into(), "widgets".into())],
                ..group("example.com", "v1", &[("v1", &["Widget"])])
            },
        ];
        assert_eq!(
            unknown(&groups),
            [
                Unknown {
                    kind: "Probe".into(),
                    group: probe_group.into(),
                    plural: "probes".into(),
                    served: Served {
                        version: "v1".into(),
                        versions: vec!["v1".into(), "v1beta1".into()],
                    },
                },
                Unknown {
                    kind: "SourceProbe".into(),
                    group: SOURCE.into(),
                    plural: "sourceprobes".into(),
                    served: Served {
                        version: "v1alpha1".into(),
                        versions: vec!["v1alpha1".into()],
                    },
                },
            ]
        );
        assert_eq!(unknown(&groups)[0].crd(), "probes.probe.toolkit.fluxcd.io");
    }

    fn crd(spec_properties: serde_json::Value) -> CustomResourceDefinition {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "probes.probe.toolkit.fluxcd.io"},
            "spec": {
                "group": "probe.toolkit.fluxcd.io",
                "names": {"kind": "Probe", "plural": "probes"},
                "scope": "Namespaced",
                "versions": [
                    {"name": "v1", "served": true, "storage": true, "schema": {
                        "openAPIV3Schema": {"type": "object", "properties": {
                            "spec": {"type": "object", "properties": spec_properties}}}}},
                    {"name": "v1beta1", "served": true, "storage": false, "schema": {
                        "openAPIV3Schema": {"type": "object", "properties": {
                            "spec": {"type": "object",
                                     "properties": {"suspend": {"type": "boolean"}}}}}}},
                    {"name": "v1alpha1", "served": true, "storage": false}
                ]
            }
        }))
        .expect("a CRD")
    }

    #[test]
    fn spec_suspend_is_read_from_the_served_versions_schema() {
        let with = crd(
            serde_json::json!({"suspend": {"type": "boolean"}, "interval": {"type": "string"}}),
        );
        assert!(has_spec_suspend(&with, "v1"));
        let without = crd(serde_json::json!({"interval": {"type": "string"}}));
        assert!(!has_spec_suspend(&without, "v1"));
        // Another version's schema does not count; neither does a version without one.
        assert!(has_spec_suspend(&without, "v1beta1"));
        assert!(!has_spec_suspend(&with, "v1alpha1"));
        assert!(!has_spec_suspend(&with, "v2"));
        // Not a boolean: not Flux's suspend.
        let string = crd(serde_json::json!({"suspend": {"type": "string"}}));
        assert!(!has_spec_suspend(&string, "v1"));
    }
}
