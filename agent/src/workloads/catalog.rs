//! Which version of each Flux kind the cluster serves, from discovery data. The kinds
//! themselves are `tenantflux_core::kinds`, re-exported here for the workloads modules;
//! reading an object of a kind is in `rows`, changing one in `patches`.

pub use tenantflux_core::kinds::{
    Category, FORCE_AT, FluxKind, GENERATOR_RECONCILE_ANNOTATION, KINDS, Revision, SourceRef,
    SuspendBy, find, groups,
};

/// What discovery says about one API group: its versions in the API server's priority order
/// and the kinds each serves.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupVersions {
    pub group: String,
    pub preferred: Option<String>,
    pub versions: Vec<(String, Vec<String>)>,
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
    let mut versions: Vec<String> = group
        .versions
        .iter()
        .filter(|(_, kinds)| kinds.iter().any(|k| k == kind.kind))
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
}
