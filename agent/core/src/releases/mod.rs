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

use crate::{
    kinds::{HELM, IMAGE, KUSTOMIZE, NOTIFICATION, SOURCE},
    policy::{Range, Release},
};

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

/// Whether [`MINORS`] names Flux 2.`minor`, so that [`kubernetes_minimum`] is Flux's word
/// rather than the newest named minor's.
pub fn kubernetes_minimum_known(minor: u64) -> bool {
    MINORS.iter().any(|m| m.minor == minor)
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
mod tests;
