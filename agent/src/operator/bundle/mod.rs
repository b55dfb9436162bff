//! A flux-operator install bundle (a release's `install.yaml`), parsed and checked before the
//! agent applies anything from it. Pure: no client. [`super`] applies what this module
//! accepts, in the order it gives.
//!
//! flux-operator is AGPL-3.0: the agent never ships a bundle, it reads the one the platform
//! configures (see [`super::source`]).

use std::{collections::BTreeSet, fmt};

use kube::api::{ApiResource, GroupVersionKind};
use serde::{Deserialize, Serialize};
use serde_json::Value;

mod checks;
mod rbac;
mod release_table;
pub mod releases;
#[cfg(test)]
mod releases_tests;
#[cfg(test)]
mod tests;

// `Crd` for release_table.rs, whose generated text names `super::{Crd, Release}`.
use releases::{Crd, Release};

pub use checks::{ImageRules, POD_FIELDS};
use checks::{check_contents, check_images, check_pod_fields, check_subjects, deployment_version};
use tenantflux_core::{
    FIELD_MANAGER, MANAGED_BY_LABEL,
    flux::{OPERATOR_CRDS, OPERATOR_DEPLOYMENT, OPERATOR_GROUP, image_tag},
    operator::AllowedVersions,
    policy::{ClusterRule, Trust, Vouching, glob, range},
    text::quote,
};

/// Apply order: each stage is applied (and, for CRDs and the operator, waited for) before the
/// next starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Stage {
    /// CustomResourceDefinitions, then wait until Established.
    Crds,
    /// The operator's namespace.
    Namespaces,
    /// ServiceAccounts, RBAC and Services the operator needs before it starts.
    Access,
    /// The flux-operator Deployment, then wait until Available.
    Operator,
}

/// A kind a bundle may hold. The agent's ClusterRole in deploy/manifests grants exactly these
/// (agent/tests/manifests.rs checks it), so a bundle with any other kind is refused before
/// anything is applied instead of failing halfway.
#[derive(Debug, PartialEq, Eq)]
pub struct Kind {
    pub api_version: &'static str,
    pub kind: &'static str,
    pub plural: &'static str,
    pub namespaced: bool,
    pub stage: Stage,
}

impl Kind {
    /// The API group (`""` for the core group).
    pub fn group(&self) -> &'static str {
        self.api_version
            .split_once('/')
            .map_or("", |(group, _)| group)
    }

    pub fn api_resource(&self) -> ApiResource {
        let (group, version) = self
            .api_version
            .split_once('/')
            .unwrap_or(("", self.api_version));
        ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(group, version, self.kind),
            self.plural,
        )
    }
}

/// Every kind a bundle may hold, in no particular order.
pub const KINDS: &[Kind] = &[
    Kind {
        api_version: "apiextensions.k8s.io/v1",
        kind: "CustomResourceDefinition",
        plural: "customresourcedefinitions",
        namespaced: false,
        stage: Stage::Crds,
    },
    Kind {
        api_version: "v1",
        kind: "Namespace",
        plural: "namespaces",
        namespaced: false,
        stage: Stage::Namespaces,
    },
    Kind {
        api_version: "v1",
        kind: "ServiceAccount",
        plural: "serviceaccounts",
        namespaced: true,
        stage: Stage::Access,
    },
    Kind {
        api_version: "rbac.authorization.k8s.io/v1",
        kind: "ClusterRole",
        plural: "clusterroles",
        namespaced: false,
        stage: Stage::Access,
    },
    Kind {
        api_version: "rbac.authorization.k8s.io/v1",
        kind: "ClusterRoleBinding",
        plural: "clusterrolebindings",
        namespaced: false,
        stage: Stage::Access,
    },
    Kind {
        api_version: "v1",
        kind: "Service",
        plural: "services",
        namespaced: true,
        stage: Stage::Access,
    },
    Kind {
        api_version: "apps/v1",
        kind: "Deployment",
        plural: "deployments",
        namespaced: true,
        stage: Stage::Operator,
    },
];

/// The kind of `api_version`/`kind`, if a bundle may hold it.
pub fn kind_of(api_version: &str, kind: &str) -> Option<&'static Kind> {
    KINDS
        .iter()
        .find(|k| k.api_version == api_version && k.kind == kind)
}

/// Which object: what the agent remembers it applied, and names in messages.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    pub api_version: String,
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
}

impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} {ns}/{}", self.kind, self.name),
            None => write!(f, "{} {}", self.kind, self.name),
        }
    }
}

/// One object of a bundle.
#[derive(Clone, Debug)]
pub struct BundleObject {
    pub kind: &'static Kind,
    pub reference: ObjectRef,
    /// The object as the bundle has it, plus the agent's [`MANAGED_BY_LABEL`].
    pub manifest: Value,
}

/// A bundle that passed every check, its objects in apply order.
#[derive(Clone, Debug)]
pub struct Bundle {
    /// flux-operator's version as the bundle states it, e.g. `v0.58.1`.
    pub version: String,
    /// The same, parsed (without the `v`).
    pub semver: semver::Version,
    /// What identifies the bundle's content: the OCI manifest digest, or the SHA-256 of the
    /// YAML for the other sources (`sha256:…`).
    pub digest: String,
    pub objects: Vec<BundleObject>,
    /// Why the agent may install it: set by [`Bundle::check_release`] (`None` before).
    pub trust: Trust,
}

/// Why a bundle was refused; nothing of it was applied.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    #[error("the bundle holds no objects")]
    Empty,

    #[error("the bundle is not valid YAML")]
    Yaml {
        #[source]
        source: tenantflux_core::yaml::Error,
    },

    #[error("document {document} of the bundle is not a Kubernetes object: {problem}")]
    Malformed { document: usize, problem: String },

    #[error(
        "the bundle holds {object} ({api_version}), a kind the agent does not install (allowed: \
         CRDs, Namespace, ServiceAccount, Service, ClusterRole, ClusterRoleBinding, Deployment)"
    )]
    UnsupportedKind { object: String, api_version: String },

    #[error(
        "{object} is not in the operator namespace {expected:?} (the agent installs flux-operator \
         into --operator-namespace only)"
    )]
    WrongNamespace { object: ObjectRef, expected: String },

    #[error("the bundle holds {object} twice")]
    Duplicate { object: ObjectRef },

    #[error("the bundle lacks CustomResourceDefinition {name}: it is not a flux-operator install")]
    MissingCrd { name: &'static str },

    #[error(
        "the bundle lacks Deployment {namespace}/{OPERATOR_DEPLOYMENT}: it is not a flux-operator \
         install"
    )]
    MissingDeployment { namespace: String },

    #[error(
        "the bundle holds {object}; the only Deployment the agent installs is \
         {OPERATOR_DEPLOYMENT}"
    )]
    ExtraDeployment { object: ObjectRef },

    #[error(
        "Deployment {OPERATOR_DEPLOYMENT} in the bundle states no version (neither label \
         app.kubernetes.io/version nor an image tag)"
    )]
    NoVersion,

    #[error("flux-operator version {version:?} of the bundle is not a semantic version")]
    BadVersion {
        version: String,
        #[source]
        source: semver::Error,
    },

    #[error(
        "CustomResourceDefinition {name} has spec.group {group}; a flux-operator bundle defines \
         resources of {OPERATOR_GROUP} only"
    )]
    ForeignCrd { name: String, group: String },

    #[error(
        "{object}: a bundle creates only the cluster RBAC flux-operator's releases ship ({known})"
    )]
    ForeignClusterRbac { object: ObjectRef, known: String },

    #[error(
        "{object} rules[{index}] grants {grant}, which {} do not grant that role and no \
         vouching names (spec.operator.vouched[].clusterRules of the policy)",
        rbac::RELEASES
    )]
    RuleBeyondRelease {
        object: Box<ObjectRef>,
        index: usize,
        grant: String,
    },

    #[error("{object} {what}")]
    ForeignAggregation {
        object: Box<ObjectRef>,
        what: String,
    },

    #[error(
        "{object} binds {role_ref}; flux-operator's releases bind it to ClusterRole {expected}"
    )]
    ForeignRoleRef {
        object: Box<ObjectRef>,
        role_ref: String,
        expected: String,
    },

    #[error(
        "{object} subjects[{index}] is ServiceAccount {name}, which the bundle does not hold; a \
         bundle binds roles only to its own ServiceAccounts ({held})"
    )]
    UnknownServiceAccount {
        object: Box<ObjectRef>,
        index: usize,
        name: String,
        held: String,
    },

    #[error(
        "Deployment {OPERATOR_DEPLOYMENT} {field} is {image}, not pinned by digest \
         (--operator-require-image-digest: write it as NAME:TAG@sha256:DIGEST)"
    )]
    ImageNotPinned { field: String, image: String },

    #[error(
        "{object} subjects[{index}] is {subject}; a bundle binds roles only to ServiceAccounts in \
         the operator namespace {namespace:?}"
    )]
    ForeignSubject {
        object: Box<ObjectRef>,
        index: usize,
        subject: String,
        namespace: String,
    },

    #[error(
        "Deployment {OPERATOR_DEPLOYMENT} {field} is {image}, from none of the registries allowed \
         ({allowed}; --operator-image-registry)"
    )]
    ImageNotAllowed {
        field: String,
        image: String,
        allowed: String,
    },

    #[error(
        "Deployment {OPERATOR_DEPLOYMENT} says version {label} (label app.kubernetes.io/version) \
         but runs image tag {tag}: the bundle's version must be the one it runs"
    )]
    VersionMismatch { label: String, tag: String },

    #[error(
        "Deployment {OPERATOR_DEPLOYMENT} sets {field}, a pod setting beyond flux-operator's \
         releases; the platform allows {allowed} (--operator-allow-pod-fields {name} allows it)"
    )]
    PodFieldNotAllowed {
        field: String,
        name: &'static str,
        allowed: String,
    },

    #[error("{object} sets {field} ({why}), which no flux-operator release sets; a bundle may not")]
    BeyondRelease {
        object: Box<ObjectRef>,
        field: String,
        why: &'static str,
    },

    #[error(
        "flux-operator {version} (bundle {digest}) is not a release this agent knows ({known}) \
         and no policy vouches for it: review it with `kubectl tenantflux operator review \
         SOURCE`, vouch for it with `kubectl tenantflux operator vouch SOURCE -f POLICY`, then \
         sign and publish that policy (or use a release the agent knows)"
    )]
    UnknownRelease {
        version: String,
        digest: String,
        known: String,
    },

    #[error(
        "flux-operator {version} is vouched for by policy generation {generation} with digest \
         {vouched}, but this bundle's digest is {actual}: its bytes are not the ones the platform \
         reviewed (a tag moved, or someone replaced the artifact); nothing was applied"
    )]
    VouchedDigestMismatch {
        version: String,
        vouched: String,
        actual: String,
        generation: u64,
    },

    #[error(
        "{object} {field} is not what flux-operator {release} ships (the release has {expected}); \
         a bundle may differ from its release only in the images and the pod settings \
         --operator-allow-pod-fields names"
    )]
    DiffersFromRelease {
        object: Box<ObjectRef>,
        field: String,
        release: &'static str,
        expected: String,
    },

    #[error("{object} is not part of flux-operator {release}'s release; a bundle may not add it")]
    NotInRelease {
        object: Box<ObjectRef>,
        release: &'static str,
    },

    #[error("flux-operator {version} is outside {allowed}")]
    VersionNotAllowed {
        version: String,
        allowed: AllowedVersions,
    },
}

/// flux-operator's releases install into `flux-system`; a platform that runs Flux elsewhere
/// (Cozystack's `cozy-fluxcd`) sets the operator namespace. A bundle whose Namespace and
/// namespaced objects all name one namespace other than `operator_namespace` is moved there:
/// those names, and the binding subjects in it. A bundle naming several namespaces is left as
/// it is, and its objects outside the operator namespace are refused one by one as before. The
/// digest stays the one of the bytes read: the move is the agent's, not the bundle's.
pub fn relocate(documents: &mut [Value], operator_namespace: &str) {
    let mut named = BTreeSet::new();
    for document in documents.iter() {
        if document["kind"] == "Namespace" {
            named.insert(document["metadata"]["name"].as_str().unwrap_or_default());
        } else if let Some(namespace) = document["metadata"]["namespace"].as_str() {
            named.insert(namespace);
        }
    }
    let from = match named.into_iter().collect::<Vec<_>>().as_slice() {
        [only] if *only != operator_namespace && !only.is_empty() => (*only).to_owned(),
        _ => return,
    };
    let to = Value::from(operator_namespace);
    for document in documents.iter_mut() {
        if document["kind"] == "Namespace" {
            document["metadata"]["name"] = to.clone();
        } else if document["metadata"]["namespace"] == from.as_str() {
            document["metadata"]["namespace"] = to.clone();
        }
        let subjects = document.get_mut("subjects").and_then(Value::as_array_mut);
        for subject in subjects.into_iter().flatten() {
            if subject["namespace"] == from.as_str() {
                subject["namespace"] = to.clone();
            }
        }
    }
}

impl Bundle {
    /// Parses and checks a multi-document `install.yaml`: every object of an allowed kind,
    /// namespaced ones in `operator_namespace`, no duplicates, flux-operator's CRDs and its
    /// Deployment present, and a version stated. Objects come back in apply order.
    pub fn parse(
        yaml: &str,
        digest: String,
        operator_namespace: &str,
        images: &ImageRules,
    ) -> Result<Self, BundleError> {
        let mut objects = Vec::new();
        let mut seen = BTreeSet::new();
        let mut documents = tenantflux_core::yaml::documents::<Value>(yaml)
            .map_err(|source| BundleError::Yaml { source })?;
        relocate(&mut documents, operator_namespace);
        for (index, value) in documents.into_iter().enumerate() {
            let document_number = index + 1;
            let object = bundle_object(value, document_number, operator_namespace)?;
            if !seen.insert(object.reference.clone()) {
                return Err(BundleError::Duplicate {
                    object: object.reference,
                });
            }
            objects.push(object);
        }
        if objects.is_empty() {
            return Err(BundleError::Empty);
        }
        for name in OPERATOR_CRDS {
            if !objects
                .iter()
                .any(|o| o.kind.stage == Stage::Crds && o.reference.name == name)
            {
                return Err(BundleError::MissingCrd { name });
            }
        }
        let mut deployments = objects.iter().filter(|o| o.kind.stage == Stage::Operator);
        let deployment = deployments
            .clone()
            .find(|o| o.reference.name == OPERATOR_DEPLOYMENT)
            .ok_or_else(|| BundleError::MissingDeployment {
                namespace: operator_namespace.to_owned(),
            })?;
        if let Some(extra) = deployments.find(|o| o.reference.name != OPERATOR_DEPLOYMENT) {
            return Err(BundleError::ExtraDeployment {
                object: extra.reference.clone(),
            });
        }
        check_subjects(&objects)?;
        check_images(&deployment.manifest, images)?;
        check_pod_fields(&deployment.manifest, images)?;
        let version = deployment_version(&deployment.manifest)?.ok_or(BundleError::NoVersion)?;
        let semver = semver::Version::parse(range::strip_v(&version)).map_err(|source| {
            BundleError::BadVersion {
                version: version.clone(),
                source,
            }
        })?;
        // Stable: within a stage, the bundle's own order.
        objects.sort_by_key(|o| o.kind.stage);
        Ok(Self {
            version,
            semver,
            digest,
            objects,
            trust: Trust::None,
        })
    }

    /// Refuses the bundle unless `allowed` allows its version.
    pub fn check_version(&self, allowed: &AllowedVersions) -> Result<(), BundleError> {
        if allowed.allows(&self.semver) {
            Ok(())
        } else {
            Err(BundleError::VersionNotAllowed {
                version: self.version.clone(),
                allowed: allowed.clone(),
            })
        }
    }

    /// Decides why the bundle may be installed, or refuses it. A release the platform vouches
    /// for (`vouched`, from the held policy of generation `generation`) must have the vouched
    /// digest, and its cluster RBAC may add only the rules the vouching names; any other bundle
    /// must be a release of `known` object by object, but for the images and the pod settings
    /// `pod_fields` allows ([`releases`]). The structural checks of [`Bundle::parse`] hold for
    /// both.
    pub fn check_release(
        &mut self,
        known: &[Release],
        vouched: &[Vouching],
        generation: u64,
        pod_fields: &[String],
    ) -> Result<(), BundleError> {
        if let Some(vouching) = vouched.iter().find(|v| v.version == self.version) {
            if vouching.digest != self.digest {
                return Err(BundleError::VouchedDigestMismatch {
                    version: self.version.clone(),
                    vouched: vouching.digest.clone(),
                    actual: self.digest.clone(),
                    generation,
                });
            }
            self.check_cluster_rbac(&vouching.cluster_rules)?;
            self.trust = Trust::Vouched { generation };
            return Ok(());
        }
        // Which release it is first: for one the build lacks, that is the news.
        releases::check(
            &self.objects,
            &self.version,
            &self.digest,
            known,
            pod_fields,
        )?;
        self.check_cluster_rbac(&[])?;
        self.trust = Trust::Known;
        Ok(())
    }

    /// Holds every ClusterRole to what the known releases grant that role, plus `extra`.
    pub fn check_cluster_rbac(&self, extra: &[ClusterRule]) -> Result<(), BundleError> {
        for object in self.objects.iter().filter(|o| o.kind.kind == "ClusterRole") {
            rbac::check_cluster_role(&object.manifest, &object.reference, extra)?;
        }
        Ok(())
    }

    /// The objects of one stage, in the bundle's order.
    pub fn stage(&self, stage: Stage) -> impl Iterator<Item = &BundleObject> {
        self.objects.iter().filter(move |o| o.kind.stage == stage)
    }

    /// The flux-operator Deployment (present in every bundle that parsed).
    pub fn deployment(&self) -> &BundleObject {
        self.stage(Stage::Operator)
            .next()
            .expect("Bundle::parse refuses a bundle without the Deployment")
    }

    /// Every object of the bundle, as the agent remembers what it applied.
    pub fn references(&self) -> Vec<ObjectRef> {
        self.objects.iter().map(|o| o.reference.clone()).collect()
    }
}

/// What an upgrade from `previous` to `next` removes: the objects the agent applied before
/// that the new bundle no longer has, except CRDs and Namespaces (deleting either deletes Flux's
/// custom resources, the tenant's included). Whether each is still the agent's own is checked
/// on the live object before deleting.
pub fn to_prune(previous: &[ObjectRef], next: &[ObjectRef]) -> Vec<ObjectRef> {
    previous
        .iter()
        .filter(|r| !next.contains(r))
        .filter(|r| {
            kind_of(&r.api_version, &r.kind)
                .is_some_and(|k| !matches!(k.stage, Stage::Crds | Stage::Namespaces))
        })
        .cloned()
        .collect()
}

fn bundle_object(
    mut value: Value,
    document: usize,
    operator_namespace: &str,
) -> Result<BundleObject, BundleError> {
    let malformed = |problem: &str| BundleError::Malformed {
        document,
        problem: problem.to_owned(),
    };
    if !value.is_object() {
        return Err(malformed("it is not a mapping"));
    }
    let text = |v: &Value, pointer: &str| {
        v.pointer(pointer)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    };
    let api_version = text(&value, "/apiVersion").ok_or_else(|| malformed("no apiVersion"))?;
    let kind_name = text(&value, "/kind").ok_or_else(|| malformed("no kind"))?;
    let name = text(&value, "/metadata/name").ok_or_else(|| malformed("no metadata.name"))?;
    let namespace = text(&value, "/metadata/namespace");
    let kind = kind_of(&api_version, &kind_name).ok_or_else(|| BundleError::UnsupportedKind {
        object: format!("{kind_name} {name}"),
        api_version: api_version.clone(),
    })?;
    let reference = ObjectRef {
        api_version,
        kind: kind_name,
        namespace: kind.namespaced.then(|| namespace.clone()).flatten(),
        name,
    };
    let wrong_namespace = if kind.namespaced {
        namespace.as_deref() != Some(operator_namespace)
    } else {
        kind.stage == Stage::Namespaces && reference.name != operator_namespace
    };
    if wrong_namespace {
        return Err(BundleError::WrongNamespace {
            object: reference,
            expected: operator_namespace.to_owned(),
        });
    }
    check_contents(&value, kind, &reference, operator_namespace)?;
    let metadata = value
        .get_mut("metadata")
        .and_then(Value::as_object_mut)
        .ok_or_else(|| malformed("metadata is not a mapping"))?;
    let labels = metadata
        .entry("labels")
        .or_insert_with(|| Value::Object(Default::default()));
    if labels.is_null() {
        *labels = Value::Object(Default::default());
    }
    labels
        .as_object_mut()
        .ok_or_else(|| malformed("metadata.labels is not a mapping"))?
        .insert(MANAGED_BY_LABEL.into(), FIELD_MANAGER.into());
    Ok(BundleObject {
        kind,
        reference,
        manifest: value,
    })
}
