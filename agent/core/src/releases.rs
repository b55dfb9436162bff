//! What the agent knows about Flux releases: which distributions exist, and per minor which
//! API versions each Flux kind serves, which one stores, and the lowest Kubernetes minor it
//! supports.
//!
//! flux-operator's manifests artifact (`ghcr.io/controlplaneio-fluxcd/flux-operator-manifests`,
//! the one the agent pulls for an `oci://` bundle) holds `flux/vX.Y.Z/` with every distribution
//! the operator can install, CRDs included: [`Releases::from_distributions`] derives the
//! releases and API versions from those files, so they follow the operator without a code
//! change. ConfigMap, Secret and file bundles hold only `install.yaml`; for them (and until an
//! artifact was read) [`Releases::embedded`] answers from the table below: what flux-operator
//! v0.59.0 (pinned in tests/env/versions.env) ships under `config/data/flux/`, checked against
//! those files by tests/tests/releases.rs. Every patch of a minor serves the same versions.
//! The Kubernetes minimum per minor is Flux's support policy, not in the CRDs: it always
//! comes from [`MINORS`].

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::policy::{Range, Release};

/// The flux-operator version whose distributions [`KNOWN`] lists.
pub const OPERATOR_VERSION: &str = "v0.59.0";

/// Every Flux distribution flux-operator v0.59.0 ships, lowest first.
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
    Release::new(2, 9, 5),
];

/// How one minor serves one kind, in the embedded table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TableKind {
    pub group: &'static str,
    pub kind: &'static str,
    /// Every served version, the storage version first.
    pub served: &'static [&'static str],
}

/// One Flux minor, in the embedded table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TableMinor {
    pub minor: u64,
    /// The lowest Kubernetes minor (1.x) it supports.
    pub kubernetes_minimum: u64,
    pub kinds: &'static [TableKind],
}

const SOURCE: &str = "source.toolkit.fluxcd.io";
const KUSTOMIZE: &str = "kustomize.toolkit.fluxcd.io";
const HELM: &str = "helm.toolkit.fluxcd.io";
const NOTIFICATION: &str = "notification.toolkit.fluxcd.io";
const IMAGE: &str = "image.toolkit.fluxcd.io";

const fn k(group: &'static str, kind: &'static str, served: &'static [&'static str]) -> TableKind {
    TableKind {
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
pub const MINORS: &[TableMinor] = &[
    TableMinor {
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
    TableMinor {
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
    TableMinor {
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
    TableMinor {
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
    TableMinor {
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
    TableMinor {
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
    TableMinor {
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
    TableMinor {
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

/// How one minor serves one kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KindVersions {
    pub group: String,
    pub kind: String,
    /// Every served version, the storage version first.
    pub served: Vec<String>,
}

impl KindVersions {
    pub fn storage(&self) -> &str {
        &self.served[0]
    }

    pub fn serves(&self, version: &str) -> bool {
        self.served.iter().any(|v| v == version)
    }
}

/// One Flux minor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Minor {
    pub minor: u64,
    /// The lowest Kubernetes minor (1.x) it supports.
    pub kubernetes_minimum: u64,
    pub kinds: Vec<KindVersions>,
}

impl Minor {
    pub fn kind(&self, group: &str, kind: &str) -> Option<&KindVersions> {
        self.kinds
            .iter()
            .find(|k| k.group == group && k.kind == kind)
    }
}

/// The lowest Kubernetes minor Flux 2.`minor` supports: Flux's policy for the minors it
/// names; a newer minor needs at least what the newest named one does.
pub fn kubernetes_minimum(minor: u64) -> u64 {
    MINORS
        .iter()
        .rev()
        .find(|m| m.minor <= minor)
        .or(MINORS.first())
        .map_or(0, |m| m.kubernetes_minimum)
}

/// The Flux releases one source knows, with the API versions of each minor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Releases {
    /// Where the list comes from, as the upgrade plan shows it.
    pub source: String,
    /// Every known release, lowest first.
    pub releases: Vec<Release>,
    /// Every minor of `releases`, lowest first.
    pub minors: Vec<Minor>,
}

/// Why an artifact's `flux/` files give no release list.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum DistributionError {
    #[error("it holds no flux/vX.Y.Z/ distribution (is it a flux-operator manifests artifact?)")]
    Empty,
    #[error("{path}: a document is not YAML: {message}")]
    Yaml { path: String, message: String },
    #[error("{path}: CRD {name} has no storage version")]
    NoStorage { path: String, name: String },
    #[error("Flux {release} ships no CRD")]
    NoCrds { release: Release },
}

#[derive(Deserialize)]
struct CrdDocument {
    kind: Option<String>,
    metadata: Option<CrdMetadata>,
    /// Read as a CRD's only once `kind` says it is one: every other kind has a spec too.
    spec: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct CrdMetadata {
    name: Option<String>,
}

#[derive(Deserialize)]
struct CrdSpec {
    group: String,
    names: CrdNames,
    versions: Vec<CrdVersion>,
}

#[derive(Deserialize)]
struct CrdNames {
    kind: String,
}

#[derive(Deserialize)]
struct CrdVersion {
    name: String,
    served: bool,
    storage: bool,
}

/// `flux/v2.9.4/source-controller.yaml` → 2.9.4 (a leading `./` allowed).
fn release_of(path: &str) -> Option<Release> {
    let mut parts = path.trim_start_matches("./").split('/');
    if parts.next()? != "flux" {
        return None;
    }
    let version = parts.next()?.strip_prefix('v')?;
    parts.next().filter(|file| !file.is_empty())?;
    let mut numbers = version.split('.').map(|n| n.parse::<u64>().ok());
    let release = Release::new(numbers.next()??, numbers.next()??, numbers.next()??);
    numbers.next().is_none().then_some(release)
}

/// The Flux kinds the CRDs in `text` define.
fn crds_in(path: &str, text: &str) -> Result<Vec<KindVersions>, DistributionError> {
    let mut kinds = Vec::new();
    let documents =
        crate::yaml::documents::<CrdDocument>(text).map_err(|err| DistributionError::Yaml {
            path: path.to_owned(),
            message: err.to_string(),
        })?;
    for crd in documents {
        let (Some("CustomResourceDefinition"), Some(spec)) = (crd.kind.as_deref(), crd.spec) else {
            continue;
        };
        let spec: CrdSpec =
            serde_json::from_value(spec).map_err(|err| DistributionError::Yaml {
                path: path.to_owned(),
                message: format!("a CustomResourceDefinition: {err}"),
            })?;
        let storage = spec.versions.iter().find(|v| v.storage).ok_or_else(|| {
            DistributionError::NoStorage {
                path: path.to_owned(),
                name: crd
                    .metadata
                    .and_then(|m| m.name)
                    .unwrap_or_else(|| spec.names.kind.clone()),
            }
        })?;
        let mut served = vec![storage.name.clone()];
        served.extend(
            spec.versions
                .iter()
                .filter(|v| v.served && !v.storage)
                .map(|v| v.name.clone()),
        );
        kinds.push(KindVersions {
            group: spec.group,
            kind: spec.names.kind,
            served,
        });
    }
    Ok(kinds)
}

impl Releases {
    /// The table built into the agent.
    pub fn embedded() -> Self {
        Self {
            source: format!("the table built into the agent (flux-operator {OPERATOR_VERSION})"),
            releases: KNOWN.to_vec(),
            minors: MINORS
                .iter()
                .map(|m| Minor {
                    minor: m.minor,
                    kubernetes_minimum: m.kubernetes_minimum,
                    kinds: m
                        .kinds
                        .iter()
                        .map(|k| KindVersions {
                            group: k.group.to_owned(),
                            kind: k.kind.to_owned(),
                            served: k.served.iter().map(|v| (*v).to_owned()).collect(),
                        })
                        .collect(),
                })
                .collect(),
        }
    }

    /// The releases of a manifests artifact, from its files (path inside the artifact,
    /// content): every `flux/vX.Y.Z/` is a release; each minor's API versions are those of
    /// the CRDs of its highest patch. Other files are ignored.
    pub fn from_distributions<'a>(
        source: impl Into<String>,
        files: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Self, DistributionError> {
        let mut by_release: BTreeMap<Release, Vec<(&'a str, &'a str)>> = BTreeMap::new();
        for (path, text) in files {
            if let Some(release) = release_of(path) {
                by_release.entry(release).or_default().push((path, text));
            }
        }
        if by_release.is_empty() {
            return Err(DistributionError::Empty);
        }
        let mut newest: BTreeMap<(u64, u64), Release> = BTreeMap::new();
        for release in by_release.keys() {
            newest.insert((release.major, release.minor), *release);
        }
        let mut minors = Vec::new();
        for ((major, minor), release) in newest {
            // Only Flux 2 has minors the planner reasons about.
            if major != 2 {
                continue;
            }
            let mut kinds = Vec::new();
            for (path, text) in &by_release[&release] {
                kinds.extend(crds_in(path, text)?);
            }
            if kinds.is_empty() {
                return Err(DistributionError::NoCrds { release });
            }
            kinds.sort_by(|a, b| (&a.group, &a.kind).cmp(&(&b.group, &b.kind)));
            minors.push(Minor {
                minor,
                kubernetes_minimum: kubernetes_minimum(minor),
                kinds,
            });
        }
        Ok(Self {
            source: source.into(),
            releases: by_release.into_keys().filter(|r| r.major == 2).collect(),
            minors,
        })
    }

    /// The API versions of Flux 2.`minor` of `release`, if known.
    pub fn minor(&self, release: Release) -> Option<&Minor> {
        if release.major != 2 {
            return None;
        }
        self.minors.iter().find(|m| m.minor == release.minor)
    }

    /// The highest known release inside `requested` and, when set, inside `allowed` too.
    pub fn resolve(&self, requested: &Range, allowed: Option<&Range>) -> Option<Release> {
        self.releases
            .iter()
            .rev()
            .copied()
            .find(|r| requested.contains(*r) && allowed.is_none_or(|a| a.contains(*r)))
    }

    /// `2.2.3 … 2.9.5`.
    pub fn span(&self) -> String {
        match (self.releases.first(), self.releases.last()) {
            (Some(first), Some(last)) => format!("{first} … {last}"),
            _ => "none".to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(text: &str) -> Range {
        Range::parse(text).unwrap()
    }

    #[test]
    fn every_known_release_has_a_table_and_the_list_is_sorted() {
        let embedded = Releases::embedded();
        for release in KNOWN {
            assert!(embedded.minor(*release).is_some(), "{release}");
        }
        assert!(KNOWN.windows(2).all(|w| w[0] < w[1]));
        for m in MINORS {
            assert_eq!(m.kinds.len(), 13, "2.{}", m.minor);
        }
        assert_eq!(embedded.span(), "2.2.3 … 2.9.5");
        assert!(embedded.source.contains(OPERATOR_VERSION));
    }

    #[test]
    fn removals_are_where_flux_made_them() {
        let embedded = Releases::embedded();
        let at = |minor: u64, group: &str, kind: &str| {
            embedded
                .minor(Release::new(2, minor, 0))
                .unwrap()
                .kind(group, kind)
                .unwrap()
                .clone()
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
        let embedded = Releases::embedded();
        let min = |m: u64| {
            embedded
                .minor(Release::new(2, m, 0))
                .unwrap()
                .kubernetes_minimum
        };
        assert_eq!(
            (2..=9).map(min).collect::<Vec<_>>(),
            [26, 28, 28, 30, 31, 32, 33, 33]
        );
        assert!(embedded.minor(Release::new(2, 10, 0)).is_none());
        assert!(embedded.minor(Release::new(3, 8, 0)).is_none());
        // A minor newer than the policy names needs at least the newest minimum.
        assert_eq!(kubernetes_minimum(10), 33);
        assert_eq!(kubernetes_minimum(1), 26);
    }

    #[test]
    fn ranges_resolve_to_the_highest_known_patch_inside_the_policy() {
        let embedded = Releases::embedded();
        let resolve = |requested: &str, allowed: Option<&str>| {
            embedded.resolve(&range(requested), allowed.map(range).as_ref())
        };
        let r = Release::new;
        assert_eq!(resolve("2.8.x", None), Some(r(2, 8, 8)));
        assert_eq!(resolve("2.8.4", None), None, "2.8.4 was never shipped");
        assert_eq!(resolve("2.x", None), Some(r(2, 9, 5)));
        assert_eq!(resolve("2.x", Some(">=2.7.0 <2.9.0")), Some(r(2, 8, 8)));
        assert_eq!(resolve("2.9.x", Some("<2.9.0")), None);
        assert_eq!(resolve("2.10.x", None), None);
    }

    fn crd(group: &str, kind: &str, versions: &[(&str, bool, bool)]) -> String {
        let mut text = format!(
            "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: {}s.{group}\nspec:\n  group: {group}\n  names:\n    kind: {kind}\n  versions:\n",
            kind.to_ascii_lowercase()
        );
        for (name, served, storage) in versions {
            text.push_str(&format!(
                "  - name: {name}\n    served: {served}\n    storage: {storage}\n    schema: {{openAPIV3Schema: {{type: object}}}}\n"
            ));
        }
        text
    }

    /// A small artifact: two 2.8 patches, one 2.9, one 2.10 the table has never heard of,
    /// and files that are no distribution.
    fn fixture() -> Vec<(String, String)> {
        let deployment =
            "---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: source-controller\n";
        let source_2_8 = crd(
            SOURCE,
            "GitRepository",
            &[("v1", true, true), ("v1beta2", false, false)],
        );
        let notification_2_8 = crd(
            NOTIFICATION,
            "Alert",
            &[("v1beta2", true, false), ("v1beta3", true, true)],
        );
        let notification_2_9 = crd(NOTIFICATION, "Alert", &[("v1beta3", true, true)]);
        let notification_2_10 = crd(
            NOTIFICATION,
            "Alert",
            &[("v1", true, true), ("v1beta3", true, false)],
        );
        [
            ("flux-operator/install.yaml", "kind: Namespace\n".to_owned()),
            (
                "flux/v2.8.0/source-controller.yaml",
                format!("{source_2_8}{deployment}"),
            ),
            (
                "flux/v2.8.0/notification-controller.yaml",
                notification_2_8.clone(),
            ),
            (
                "./flux/v2.8.8/source-controller.yaml",
                format!("{source_2_8}{deployment}"),
            ),
            (
                "./flux/v2.8.8/notification-controller.yaml",
                notification_2_8,
            ),
            ("flux/v2.9.0/notification-controller.yaml", notification_2_9),
            (
                "flux/v2.10.0/notification-controller.yaml",
                notification_2_10,
            ),
            ("flux-images/v2.9.0.yaml", "images: []\n".to_owned()),
            ("flux/latest/x.yaml", "a: b\n".to_owned()),
        ]
        .into_iter()
        .map(|(p, t)| (p.to_owned(), t))
        .collect()
    }

    fn derive(files: &[(String, String)]) -> Result<Releases, DistributionError> {
        Releases::from_distributions(
            "artifact",
            files.iter().map(|(p, t)| (p.as_str(), t.as_str())),
        )
    }

    #[test]
    fn an_artifacts_distributions_give_the_releases_and_their_api_versions() {
        let releases = derive(&fixture()).unwrap();
        let r = Release::new;
        assert_eq!(releases.source, "artifact");
        assert_eq!(
            releases.releases,
            [r(2, 8, 0), r(2, 8, 8), r(2, 9, 0), r(2, 10, 0)]
        );
        assert_eq!(releases.span(), "2.8.0 … 2.10.0");
        let alert = |minor: u64| {
            releases
                .minor(r(2, minor, 0))
                .unwrap()
                .kind(NOTIFICATION, "Alert")
                .unwrap()
                .clone()
        };
        // Storage first, then the other served versions; unserved versions left out.
        assert_eq!(alert(8).served, ["v1beta3", "v1beta2"]);
        assert_eq!(alert(9).served, ["v1beta3"]);
        assert_eq!(alert(10).storage(), "v1");
        assert!(alert(10).serves("v1beta3"));
        let git = releases
            .minor(r(2, 8, 3))
            .unwrap()
            .kind(SOURCE, "GitRepository")
            .unwrap();
        assert_eq!(git.served, ["v1"]);
        // A minor the artifact has no CRD of for a kind: the planner sees no such kind.
        assert!(
            releases
                .minor(r(2, 9, 0))
                .unwrap()
                .kind(SOURCE, "GitRepository")
                .is_none()
        );
        // Kubernetes minimums come from Flux's policy, newer minors at least the newest.
        assert_eq!(releases.minor(r(2, 8, 0)).unwrap().kubernetes_minimum, 33);
        assert_eq!(releases.minor(r(2, 10, 0)).unwrap().kubernetes_minimum, 33);
        // The release list resolves ranges, 2.10 included, without a code change.
        assert_eq!(releases.resolve(&range("2.x"), None), Some(r(2, 10, 0)));
        assert_eq!(releases.resolve(&range("2.8.x"), None), Some(r(2, 8, 8)));
    }

    #[test]
    fn artifacts_without_distributions_or_with_broken_crds_are_refused() {
        let err = derive(&[(
            "flux-operator/install.yaml".into(),
            "kind: Namespace\n".into(),
        )])
        .unwrap_err();
        assert_eq!(err, DistributionError::Empty);
        assert!(err.to_string().contains("flux/vX.Y.Z/"), "{err}");
        let broken =
            derive(&[("flux/v2.9.0/a.yaml".into(), "kind: [unclosed\n".into())]).unwrap_err();
        assert!(
            broken.to_string().starts_with("flux/v2.9.0/a.yaml: "),
            "{broken}"
        );
        let no_storage = crd(SOURCE, "Bucket", &[("v1", true, false)]);
        let err = derive(&[("flux/v2.9.0/a.yaml".into(), no_storage)]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "flux/v2.9.0/a.yaml: CRD buckets.source.toolkit.fluxcd.io has no storage version"
        );
        let err = derive(&[("flux/v2.9.0/a.yaml".into(), "kind: Namespace\n".into())]).unwrap_err();
        assert_eq!(err.to_string(), "Flux 2.9.0 ships no CRD");
    }

    #[test]
    fn only_flux_version_directories_are_releases() {
        assert_eq!(
            release_of("flux/v2.9.4/a.yaml"),
            Some(Release::new(2, 9, 4))
        );
        assert_eq!(
            release_of("./flux/v2.10.0/a.yaml"),
            Some(Release::new(2, 10, 0))
        );
        assert_eq!(release_of("flux/v2.9.4/"), None);
        assert_eq!(release_of("flux/2.9.4/a.yaml"), None);
        assert_eq!(release_of("flux/v2.9/a.yaml"), None);
        assert_eq!(release_of("flux/v2.9.4.1/a.yaml"), None);
        assert_eq!(release_of("flux-images/v2.9.4/a.yaml"), None);
    }
}
