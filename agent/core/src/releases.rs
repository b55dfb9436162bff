//! What the agent knows about Flux releases without a cluster: which distributions exist, and
//! per minor which API versions each Flux kind serves, which one stores, and the lowest
//! Kubernetes minor it supports.
//!
//! The agent cannot ask flux-operator which distributions it can install, so the releases are
//! listed here: those flux-operator v0.58.1 (the version the agent's tests install, pinned in
//! tests/env/versions.env) ships under `config/data/flux/`. The API versions were read from the
//! CRDs of those same manifests; every patch of a minor serves the same versions.

use crate::policy::{Range, Release};

/// The flux-operator version whose distributions [`KNOWN`] lists.
pub const OPERATOR_VERSION: &str = "v0.58.1";

/// Every Flux distribution flux-operator v0.58.1 ships, lowest first.
pub const KNOWN: &[Release] = &[
    Release::new(2, 2, 3),
    Release::new(2, 3, 0),
    Release::new(2, 4, 0),
    Release::new(2, 5, 0),
    Release::new(2, 5, 1),
    Release::new(2, 6, 0),
    Release::new(2, 6, 1),
    Release::new(2, 6, 2),
    Release::new(2, 6, 3),
    Release::new(2, 6, 4),
    Release::new(2, 7, 0),
    Release::new(2, 7, 1),
    Release::new(2, 7, 2),
    Release::new(2, 7, 3),
    Release::new(2, 7, 4),
    Release::new(2, 7, 5),
    Release::new(2, 8, 0),
    Release::new(2, 8, 1),
    Release::new(2, 8, 2),
    Release::new(2, 8, 3),
    Release::new(2, 8, 5),
    Release::new(2, 8, 6),
    Release::new(2, 8, 7),
    Release::new(2, 8, 8),
    Release::new(2, 9, 0),
    Release::new(2, 9, 1),
    Release::new(2, 9, 2),
    Release::new(2, 9, 3),
    Release::new(2, 9, 4),
];

/// How one minor serves one kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KindVersions {
    pub group: &'static str,
    pub kind: &'static str,
    /// Every served version, the storage version first.
    pub served: &'static [&'static str],
}

impl KindVersions {
    pub fn storage(&self) -> &'static str {
        self.served[0]
    }

    pub fn serves(&self, version: &str) -> bool {
        self.served.contains(&version)
    }
}

/// One Flux minor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Minor {
    pub minor: u64,
    /// The lowest Kubernetes minor (1.x) it supports.
    pub kubernetes_minimum: u64,
    pub kinds: &'static [KindVersions],
}

impl Minor {
    pub fn kind(&self, group: &str, kind: &str) -> Option<&'static KindVersions> {
        self.kinds
            .iter()
            .find(|k| k.group == group && k.kind == kind)
    }
}

const SOURCE: &str = "source.toolkit.fluxcd.io";
const KUSTOMIZE: &str = "kustomize.toolkit.fluxcd.io";
const HELM: &str = "helm.toolkit.fluxcd.io";
const NOTIFICATION: &str = "notification.toolkit.fluxcd.io";
const IMAGE: &str = "image.toolkit.fluxcd.io";

const fn k(
    group: &'static str,
    kind: &'static str,
    served: &'static [&'static str],
) -> KindVersions {
    KindVersions {
        group,
        kind,
        served,
    }
}

const V1_B1_B2: &[&str] = &["v1", "v1beta1", "v1beta2"];
const B2_B1: &[&str] = &["v1beta2", "v1beta1"];
const B3_B1_B2: &[&str] = &["v1beta3", "v1beta1", "v1beta2"];

/// Flux 2.2 to 2.6 differ only in a few storage versions.
macro_rules! two_dot_early {
    ($helm:expr, $helm_source:expr, $bucket:expr, $oci:expr, $iua:expr) => {
        &[
            k(SOURCE, "GitRepository", V1_B1_B2),
            k(SOURCE, "HelmRepository", $helm_source),
            k(SOURCE, "HelmChart", $helm_source),
            k(SOURCE, "Bucket", $bucket),
            k(SOURCE, "OCIRepository", $oci),
            k(KUSTOMIZE, "Kustomization", V1_B1_B2),
            k(HELM, "HelmRelease", $helm),
            k(NOTIFICATION, "Receiver", V1_B1_B2),
            k(NOTIFICATION, "Alert", B3_B1_B2),
            k(NOTIFICATION, "Provider", B3_B1_B2),
            k(IMAGE, "ImageRepository", B2_B1),
            k(IMAGE, "ImagePolicy", B2_B1),
            k(IMAGE, "ImageUpdateAutomation", $iua),
        ]
    };
}

/// Served versions per minor, the storage version first.
pub const MINORS: &[Minor] = &[
    Minor {
        minor: 2,
        kubernetes_minimum: 26,
        kinds: two_dot_early!(
            &["v2beta2", "v2beta1"],
            B2_B1,
            B2_B1,
            &["v1beta2"],
            &["v1beta1"]
        ),
    },
    Minor {
        minor: 3,
        kubernetes_minimum: 28,
        kinds: two_dot_early!(
            &["v2", "v2beta1", "v2beta2"],
            V1_B1_B2,
            B2_B1,
            &["v1beta2"],
            B2_B1
        ),
    },
    Minor {
        minor: 4,
        kubernetes_minimum: 28,
        kinds: two_dot_early!(
            &["v2", "v2beta1", "v2beta2"],
            V1_B1_B2,
            V1_B1_B2,
            &["v1beta2"],
            B2_B1
        ),
    },
    Minor {
        minor: 5,
        kubernetes_minimum: 30,
        kinds: two_dot_early!(
            &["v2", "v2beta1", "v2beta2"],
            V1_B1_B2,
            V1_B1_B2,
            &["v1beta2"],
            B2_B1
        ),
    },
    Minor {
        minor: 6,
        kubernetes_minimum: 31,
        kinds: two_dot_early!(
            &["v2", "v2beta1", "v2beta2"],
            V1_B1_B2,
            V1_B1_B2,
            &["v1", "v1beta2"],
            B2_B1
        ),
    },
    Minor {
        minor: 7,
        kubernetes_minimum: 32,
        kinds: &[
            k(SOURCE, "GitRepository", &["v1", "v1beta2"]),
            k(SOURCE, "HelmRepository", &["v1", "v1beta2"]),
            k(SOURCE, "HelmChart", &["v1", "v1beta2"]),
            k(SOURCE, "Bucket", &["v1", "v1beta2"]),
            k(SOURCE, "OCIRepository", &["v1", "v1beta2"]),
            k(KUSTOMIZE, "Kustomization", &["v1", "v1beta2"]),
            k(HELM, "HelmRelease", &["v2", "v2beta2"]),
            k(NOTIFICATION, "Receiver", &["v1", "v1beta2"]),
            k(NOTIFICATION, "Alert", &["v1beta3", "v1beta2"]),
            k(NOTIFICATION, "Provider", &["v1beta3", "v1beta2"]),
            k(IMAGE, "ImageRepository", &["v1", "v1beta2"]),
            k(IMAGE, "ImagePolicy", &["v1", "v1beta2"]),
            k(IMAGE, "ImageUpdateAutomation", &["v1", "v1beta2"]),
        ],
    },
    Minor {
        minor: 8,
        kubernetes_minimum: 33,
        kinds: &[
            k(SOURCE, "GitRepository", &["v1"]),
            k(SOURCE, "HelmRepository", &["v1"]),
            k(SOURCE, "HelmChart", &["v1"]),
            k(SOURCE, "Bucket", &["v1"]),
            k(SOURCE, "OCIRepository", &["v1"]),
            k(KUSTOMIZE, "Kustomization", &["v1"]),
            k(HELM, "HelmRelease", &["v2"]),
            k(NOTIFICATION, "Receiver", &["v1", "v1beta2"]),
            k(NOTIFICATION, "Alert", &["v1beta3", "v1beta2"]),
            k(NOTIFICATION, "Provider", &["v1beta3", "v1beta2"]),
            k(IMAGE, "ImageRepository", &["v1", "v1beta2"]),
            k(IMAGE, "ImagePolicy", &["v1", "v1beta2"]),
            k(IMAGE, "ImageUpdateAutomation", &["v1", "v1beta2"]),
        ],
    },
    Minor {
        minor: 9,
        kubernetes_minimum: 33,
        kinds: &[
            k(SOURCE, "GitRepository", &["v1"]),
            k(SOURCE, "HelmRepository", &["v1"]),
            k(SOURCE, "HelmChart", &["v1"]),
            k(SOURCE, "Bucket", &["v1"]),
            k(SOURCE, "OCIRepository", &["v1"]),
            k(KUSTOMIZE, "Kustomization", &["v1"]),
            k(HELM, "HelmRelease", &["v2"]),
            k(NOTIFICATION, "Receiver", &["v1"]),
            k(NOTIFICATION, "Alert", &["v1beta3"]),
            k(NOTIFICATION, "Provider", &["v1beta3"]),
            k(IMAGE, "ImageRepository", &["v1"]),
            k(IMAGE, "ImagePolicy", &["v1"]),
            k(IMAGE, "ImageUpdateAutomation", &["v1"]),
        ],
    },
];

/// The table of Flux 2.`minor`, if known.
pub fn minor(release: Release) -> Option<&'static Minor> {
    if release.major != 2 {
        return None;
    }
    MINORS.iter().find(|m| m.minor == release.minor)
}

/// The highest known release inside `requested` and, when set, inside `allowed` too.
pub fn resolve(requested: &Range, allowed: Option<&Range>) -> Option<Release> {
    KNOWN
        .iter()
        .rev()
        .copied()
        .find(|r| requested.contains(*r) && allowed.is_none_or(|a| a.contains(*r)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(text: &str) -> Range {
        Range::parse(text).unwrap()
    }

    #[test]
    fn every_known_release_has_a_table_and_the_list_is_sorted() {
        for release in KNOWN {
            assert!(minor(*release).is_some(), "{release}");
        }
        assert!(KNOWN.windows(2).all(|w| w[0] < w[1]));
        for m in MINORS {
            assert_eq!(m.kinds.len(), 13, "2.{}", m.minor);
        }
    }

    #[test]
    fn removals_are_where_flux_made_them() {
        let at = |minor: u64, group: &str, kind: &str| {
            MINORS
                .iter()
                .find(|m| m.minor == minor)
                .unwrap()
                .kind(group, kind)
                .unwrap()
        };
        // 2.7 removed every v1beta1/v2beta1.
        assert!(at(6, SOURCE, "GitRepository").serves("v1beta1"));
        assert!(!at(7, SOURCE, "GitRepository").serves("v1beta1"));
        assert!(!at(7, HELM, "HelmRelease").serves("v2beta1"));
        // 2.8 removed source and kustomize v1beta2 and helm v2beta2.
        assert!(at(7, SOURCE, "OCIRepository").serves("v1beta2"));
        assert!(!at(8, SOURCE, "OCIRepository").serves("v1beta2"));
        assert!(!at(8, KUSTOMIZE, "Kustomization").serves("v1beta2"));
        assert!(!at(8, HELM, "HelmRelease").serves("v2beta2"));
        assert!(at(8, NOTIFICATION, "Alert").serves("v1beta2"));
        // 2.9 removed notification and image v1beta2.
        assert!(!at(9, NOTIFICATION, "Alert").serves("v1beta2"));
        assert!(!at(9, IMAGE, "ImagePolicy").serves("v1beta2"));
        // Storage versions moved: OCIRepository to v1 in 2.6, image kinds to v1 in 2.7.
        assert_eq!(at(5, SOURCE, "OCIRepository").storage(), "v1beta2");
        assert_eq!(at(6, SOURCE, "OCIRepository").storage(), "v1");
        assert_eq!(at(6, IMAGE, "ImageUpdateAutomation").storage(), "v1beta2");
        assert_eq!(at(7, IMAGE, "ImageUpdateAutomation").storage(), "v1");
        assert_eq!(at(2, HELM, "HelmRelease").storage(), "v2beta2");
        assert_eq!(at(3, HELM, "HelmRelease").storage(), "v2");
    }

    #[test]
    fn kubernetes_minimums() {
        let min = |m: u64| minor(Release::new(2, m, 0)).unwrap().kubernetes_minimum;
        assert_eq!(
            (2..=9).map(min).collect::<Vec<_>>(),
            [26, 28, 28, 30, 31, 32, 33, 33]
        );
        assert!(minor(Release::new(2, 10, 0)).is_none());
        assert!(minor(Release::new(3, 8, 0)).is_none());
    }

    #[test]
    fn ranges_resolve_to_the_highest_known_patch_inside_the_policy() {
        let r = Release::new;
        assert_eq!(resolve(&range("2.8.x"), None), Some(r(2, 8, 8)));
        assert_eq!(
            resolve(&range("2.8.4"), None),
            None,
            "2.8.4 was never shipped"
        );
        assert_eq!(resolve(&range("2.x"), None), Some(r(2, 9, 4)));
        assert_eq!(
            resolve(&range("2.x"), Some(&range(">=2.7.0 <2.9.0"))),
            Some(r(2, 8, 8))
        );
        assert_eq!(resolve(&range("2.9.x"), Some(&range("<2.9.0"))), None);
        assert_eq!(resolve(&range("2.10.x"), None), None);
    }
}
