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
use sha2::{Digest, Sha256};

use super::rbac;
use tenantflux_core::{
    FIELD_MANAGER, MANAGED_BY_LABEL,
    flux::{OPERATOR_CRDS, OPERATOR_DEPLOYMENT, OPERATOR_GROUP, image_tag},
    operator::AllowedVersions,
    policy::{glob, range},
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
        api_version: "rbac.authorization.k8s.io/v1",
        kind: "Role",
        plural: "roles",
        namespaced: true,
        stage: Stage::Access,
    },
    Kind {
        api_version: "rbac.authorization.k8s.io/v1",
        kind: "RoleBinding",
        plural: "rolebindings",
        namespaced: true,
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
         CRDs, Namespace, ServiceAccount, Service, RBAC, Deployment)"
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
        "{object} rules[{index}] grants {grant}, which {} do not grant that role",
        super::rbac::RELEASES
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

    #[error("flux-operator {version} is outside {allowed}")]
    VersionNotAllowed {
        version: String,
        allowed: AllowedVersions,
    },
}

/// `sha256:<hex>` of `bytes`.
pub fn digest_of(bytes: &[u8]) -> String {
    let hash = Sha256::digest(bytes);
    let mut out = String::with_capacity(7 + 64);
    out.push_str("sha256:");
    for byte in hash {
        out.push_str(&format!("{byte:02x}"));
    }
    out
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
        let documents = tenantflux_core::yaml::documents::<Value>(yaml)
            .map_err(|source| BundleError::Yaml { source })?;
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

/// What only flux-operator's own install holds: CRDs of its group, cluster RBAC under its
/// names, bindings to ServiceAccounts of the operator namespace.
fn check_contents(
    value: &Value,
    kind: &Kind,
    reference: &ObjectRef,
    operator_namespace: &str,
) -> Result<(), BundleError> {
    match kind.kind {
        "CustomResourceDefinition" => {
            let group = value.pointer("/spec/group").and_then(Value::as_str);
            let suffix = format!(".{OPERATOR_GROUP}");
            if group != Some(OPERATOR_GROUP) || !reference.name.ends_with(&suffix) {
                return Err(BundleError::ForeignCrd {
                    name: quote(&reference.name),
                    group: group.map_or_else(|| "unset".to_owned(), quote),
                });
            }
        }
        "ClusterRole" => rbac::check_cluster_role(value, reference)?,
        "ClusterRoleBinding" => rbac::check_cluster_role_binding(value, reference)?,
        _ => {}
    }
    if matches!(kind.kind, "ClusterRoleBinding" | "RoleBinding") {
        let subjects = value.get("subjects").and_then(Value::as_array);
        for (index, subject) in subjects.into_iter().flatten().enumerate() {
            let field = |name: &str| subject.get(name).and_then(Value::as_str).unwrap_or("");
            let ours =
                field("kind") == "ServiceAccount" && field("namespace") == operator_namespace;
            if !ours {
                let namespace = match field("namespace") {
                    "" => String::new(),
                    ns => format!(" in namespace {}", quote(ns)),
                };
                return Err(BundleError::ForeignSubject {
                    object: Box::new(reference.clone()),
                    index,
                    subject: format!(
                        "{} {}{namespace}",
                        quote(field("kind")),
                        quote(field("name"))
                    ),
                    namespace: operator_namespace.to_owned(),
                });
            }
        }
    }
    Ok(())
}

/// Every ServiceAccount a binding of the bundle names is one the bundle holds (the namespace
/// was checked per object).
fn check_subjects(objects: &[BundleObject]) -> Result<(), BundleError> {
    let held: Vec<&str> = objects
        .iter()
        .filter(|o| o.kind.kind == "ServiceAccount")
        .map(|o| o.reference.name.as_str())
        .collect();
    for object in objects
        .iter()
        .filter(|o| matches!(o.kind.kind, "ClusterRoleBinding" | "RoleBinding"))
    {
        let subjects = object.manifest.get("subjects").and_then(Value::as_array);
        for (index, subject) in subjects.into_iter().flatten().enumerate() {
            let name = subject.get("name").and_then(Value::as_str).unwrap_or("");
            if !held.contains(&name) {
                return Err(BundleError::UnknownServiceAccount {
                    object: Box::new(object.reference.clone()),
                    index,
                    name: quote(name),
                    held: if held.is_empty() {
                        "none".to_owned()
                    } else {
                        held.join(", ")
                    },
                });
            }
        }
    }
    Ok(())
}

/// What the operator Deployment's images must be.
#[derive(Clone, Debug)]
pub struct ImageRules {
    /// Globs over the image reference (`--operator-image-registry`).
    pub registries: Vec<String>,
    /// Every image pinned by digest (`--operator-require-image-digest`).
    pub require_digest: bool,
}

/// Whether `image` ends in `@sha256:` and 64 lowercase hex digits.
fn pinned_by_digest(image: &str) -> bool {
    image.rsplit_once("@sha256:").is_some_and(|(_, hex)| {
        hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
}

/// Every image of the Deployment's pod (init containers too) from an allowed registry, and
/// pinned by digest when that is required.
fn check_images(deployment: &Value, rules: &ImageRules) -> Result<(), BundleError> {
    let registries = &rules.registries;
    for list in ["initContainers", "containers"] {
        let containers = deployment
            .pointer(&format!("/spec/template/spec/{list}"))
            .and_then(Value::as_array);
        for (index, container) in containers.into_iter().flatten().enumerate() {
            let image = container.get("image").and_then(Value::as_str).unwrap_or("");
            if !registries.iter().any(|r| glob::matches(r, image)) {
                return Err(BundleError::ImageNotAllowed {
                    field: format!("spec.template.spec.{list}[{index}].image"),
                    image: quote(image),
                    allowed: registries.join(", "),
                });
            }
            if rules.require_digest && !pinned_by_digest(image) {
                return Err(BundleError::ImageNotPinned {
                    field: format!("spec.template.spec.{list}[{index}].image"),
                    image: quote(image),
                });
            }
        }
    }
    Ok(())
}

/// The tag of the `manager` container's image (the first container's when none is called
/// so), which must agree with the label `app.kubernetes.io/version` when there is one; the
/// label alone when the image has no tag.
fn deployment_version(deployment: &Value) -> Result<Option<String>, BundleError> {
    let label = deployment
        .pointer("/metadata/labels/app.kubernetes.io~1version")
        .and_then(Value::as_str)
        .filter(|v| !v.is_empty());
    let tag = deployment
        .pointer("/spec/template/spec/containers")
        .and_then(Value::as_array)
        .and_then(|containers| {
            containers
                .iter()
                .find(|c| c.get("name").and_then(Value::as_str) == Some("manager"))
                .or_else(|| containers.first())
        })
        .and_then(|c| c.get("image")?.as_str())
        .and_then(image_tag);
    match (label, tag) {
        (Some(label), Some(tag)) if range::strip_v(label) != range::strip_v(tag) => {
            Err(BundleError::VersionMismatch {
                label: quote(label),
                tag: quote(tag),
            })
        }
        (_, Some(tag)) => Ok(Some(tag.to_owned())),
        (label, None) => Ok(label.map(str::to_owned)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NS: &str = "flux-system";

    fn crd(name: &str) -> String {
        let (plural, group) = name.split_once('.').unwrap();
        format!(
            "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\n\
             metadata:\n  name: {name}\nspec:\n  group: {group}\n  names:\n    plural: {plural}\n"
        )
    }

    fn deployment(image: &str) -> String {
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: flux-operator\n  \
             namespace: flux-system\n  labels:\n    app.kubernetes.io/name: flux-operator\n\
             spec:\n  template:\n    spec:\n      containers:\n      - name: manager\n        \
             image: {image}\n"
        )
    }

    /// A small install in the shape of flux-operator's (deliberately out of apply order).
    fn install(image: &str) -> String {
        let mut docs = vec![
            deployment(image),
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: flux-system\n".to_owned(),
            "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: flux-operator\n  namespace: flux-system\n".to_owned(),
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: flux-operator-cluster-admin\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: ClusterRole\n  name: cluster-admin\nsubjects:\n- kind: ServiceAccount\n  name: flux-operator\n  namespace: flux-system\n".to_owned(),
        ];
        docs.extend(OPERATOR_CRDS.iter().map(|n| crd(n)));
        format!("---\n{}---\n", docs.join("---\n"))
    }

    fn parse(yaml: &str) -> Result<Bundle, BundleError> {
        parse_with(yaml, false)
    }

    fn parse_with(yaml: &str, require_digest: bool) -> Result<Bundle, BundleError> {
        let images = ImageRules {
            registries: vec![
                "ghcr.io/controlplaneio-fluxcd/*".to_owned(),
                "registry.local:5000/*".to_owned(),
            ],
            require_digest,
        };
        Bundle::parse(yaml, digest_of(yaml.as_bytes()), NS, &images)
    }

    #[test]
    fn a_flux_operator_install_parses_in_apply_order_with_its_version() {
        let yaml = install("ghcr.io/controlplaneio-fluxcd/flux-operator:v0.58.1");
        let bundle = parse(&yaml).unwrap();
        assert_eq!(bundle.version, "v0.58.1");
        assert_eq!(bundle.semver, semver::Version::new(0, 58, 1));
        assert_eq!(bundle.digest, digest_of(yaml.as_bytes()));
        let order: Vec<_> = bundle
            .objects
            .iter()
            .map(|o| o.reference.to_string())
            .collect();
        assert_eq!(
            order,
            [
                "CustomResourceDefinition fluxinstances.fluxcd.controlplane.io",
                "CustomResourceDefinition fluxreports.fluxcd.controlplane.io",
                "CustomResourceDefinition resourcesets.fluxcd.controlplane.io",
                "CustomResourceDefinition resourcesetinputproviders.fluxcd.controlplane.io",
                "Namespace flux-system",
                "ServiceAccount flux-system/flux-operator",
                "ClusterRoleBinding flux-operator-cluster-admin",
                "Deployment flux-system/flux-operator",
            ]
        );
        for object in &bundle.objects {
            assert_eq!(
                object.manifest["metadata"]["labels"][MANAGED_BY_LABEL], FIELD_MANAGER,
                "{}",
                object.reference
            );
        }
        assert_eq!(
            bundle.deployment().manifest["metadata"]["labels"]["app.kubernetes.io/name"],
            "flux-operator",
            "the bundle's own labels stay"
        );
        assert_eq!(bundle.stage(Stage::Crds).count(), 4);
    }

    #[test]
    fn the_version_is_the_image_tag_which_the_label_must_agree_with() {
        let labelled = |image: &str, label: &str| {
            install(image).replace(
                "app.kubernetes.io/name: flux-operator\n",
                &format!(
                    "app.kubernetes.io/name: flux-operator\n    app.kubernetes.io/version: {label}\n"
                ),
            )
        };
        let yaml = labelled(
            "registry.local:5000/flux-operator:v0.58.0@sha256:abc",
            "0.58.0",
        );
        assert_eq!(parse(&yaml).unwrap().version, "v0.58.0");
        let yaml = install("registry.local:5000/flux-operator:v0.58.0@sha256:abc");
        assert_eq!(parse(&yaml).unwrap().version, "v0.58.0");
        let yaml = labelled("registry.local:5000/flux-operator@sha256:abc", "v0.58.2");
        assert_eq!(
            parse(&yaml).unwrap().version,
            "v0.58.2",
            "no tag: the label"
        );
        let yaml = labelled("registry.local:5000/flux-operator:v0.58.0", "v0.58.2");
        assert_eq!(
            parse(&yaml).unwrap_err().to_string(),
            "Deployment flux-operator says version \"v0.58.2\" (label app.kubernetes.io/version) \
             but runs image tag \"v0.58.0\": the bundle's version must be the one it runs"
        );
    }

    #[test]
    fn a_bundle_may_hold_only_what_flux_operators_install_holds() {
        let good = install("ghcr.io/controlplaneio-fluxcd/flux-operator:v0.58.1");
        let refusal = |yaml: &str| parse(yaml).unwrap_err().to_string();
        let foreign_crd = format!("{good}---\n{}", crd("widgets.example.com"));
        assert_eq!(
            refusal(&foreign_crd),
            "CustomResourceDefinition \"widgets.example.com\" has spec.group \"example.com\"; a \
             flux-operator bundle defines resources of fluxcd.controlplane.io only"
        );
        let disguised = format!(
            "{good}---\n{}",
            crd("widgets.fluxcd.controlplane.io")
                .replace("group: fluxcd.controlplane.io", "group: example.com")
        );
        assert!(refusal(&disguised).contains("has spec.group \"example.com\""));
        let role = format!(
            "{good}---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {{name: admin}}\nrules: []\n"
        );
        assert!(
            refusal(&role).starts_with("ClusterRole admin: a bundle creates only the cluster RBAC"),
            "{}",
            refusal(&role)
        );
        let widened = format!(
            "{good}---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: \
             {{name: flux-web-user}}\nrules:\n- apiGroups: ['']\n  resources: [secrets]\n  \
             verbs: [get, delete]\n"
        );
        assert!(
            refusal(&widened).contains("flux-web-user rules[0] grants \"delete\" on \"secrets\""),
            "{}",
            refusal(&widened)
        );
        let binding = |subject: &str| {
            good.replace(
                "subjects:\n- kind: ServiceAccount\n  name: flux-operator\n  namespace: flux-system\n",
                &format!("subjects:\n- kind: ServiceAccount\n  name: flux-operator\n  namespace: flux-system\n{subject}"),
            )
        };
        assert_eq!(
            refusal(&binding(
                "- kind: ServiceAccount\n  name: default\n  namespace: kube-system\n"
            )),
            "ClusterRoleBinding flux-operator-cluster-admin subjects[1] is \"ServiceAccount\" \
             \"default\" in namespace \"kube-system\"; a bundle binds roles only to ServiceAccounts \
             in the operator namespace \"flux-system\""
        );
        assert!(
            refusal(&binding(
                "- kind: User\n  name: mallory\n  apiGroup: rbac.authorization.k8s.io\n"
            ))
            .contains("subjects[1] is \"User\" \"mallory\";")
        );
        assert_eq!(
            refusal(&binding(
                "- kind: ServiceAccount\n  name: default\n  namespace: flux-system\n"
            )),
            "ClusterRoleBinding flux-operator-cluster-admin subjects[1] is ServiceAccount \
             \"default\", which the bundle does not hold; a bundle binds roles only to its own \
             ServiceAccounts (flux-operator)"
        );
        assert_eq!(
            refusal(&install("docker.io/evil/flux-operator:v0.58.1")),
            "Deployment flux-operator spec.template.spec.containers[0].image is \
             \"docker.io/evil/flux-operator:v0.58.1\", from none of the registries allowed \
             (ghcr.io/controlplaneio-fluxcd/*, registry.local:5000/*; --operator-image-registry)"
        );
        let sidecar = good.replace(
            "      containers:\n",
            "      initContainers:\n      - name: x\n        image: docker.io/evil/x:1\n      containers:\n",
        );
        assert!(refusal(&sidecar).contains("spec.template.spec.initContainers[0].image"));
    }

    #[test]
    fn a_required_digest_pins_every_image() {
        let digest = "a".repeat(64);
        let pinned = install(&format!(
            "ghcr.io/controlplaneio-fluxcd/flux-operator:v0.58.1@sha256:{digest}"
        ));
        assert_eq!(parse_with(&pinned, true).unwrap().version, "v0.58.1");
        let tagged = install("ghcr.io/controlplaneio-fluxcd/flux-operator:v0.58.1");
        parse_with(&tagged, false).unwrap();
        assert_eq!(
            parse_with(&tagged, true).unwrap_err().to_string(),
            "Deployment flux-operator spec.template.spec.containers[0].image is \
             \"ghcr.io/controlplaneio-fluxcd/flux-operator:v0.58.1\", not pinned by digest \
             (--operator-require-image-digest: write it as NAME:TAG@sha256:DIGEST)"
        );
        let upper = format!("@sha256:{}", "A".repeat(64));
        for bad in ["@sha256:abc", upper.as_str(), "@sha512:aaaa"] {
            let yaml = install(&format!(
                "ghcr.io/controlplaneio-fluxcd/flux-operator:v0.58.1{bad}"
            ));
            assert!(
                parse_with(&yaml, true)
                    .unwrap_err()
                    .to_string()
                    .contains("not pinned"),
                "{bad}: {:?}",
                parse_with(&yaml, true).map(|b| b.version)
            );
        }
        let sidecar = pinned.replace(
            "      containers:\n",
            "      initContainers:\n      - name: x\n        image: ghcr.io/controlplaneio-fluxcd/x:1\n      containers:\n",
        );
        assert!(
            parse_with(&sidecar, true)
                .unwrap_err()
                .to_string()
                .contains("initContainers[0].image")
        );
    }

    #[test]
    fn every_refusal_names_what_is_wrong() {
        let good = install("ghcr.io/controlplaneio-fluxcd/flux-operator:v0.58.1");
        let refusal = |yaml: &str| parse(yaml).unwrap_err().to_string();

        assert_eq!(refusal("---\n---\n"), "the bundle holds no objects");
        assert!(refusal("kind: [unclosed").starts_with("the bundle is not valid YAML"));
        assert_eq!(
            refusal(&format!(
                "{good}---\nkind: ConfigMap\nmetadata: {{name: x}}\n"
            )),
            "document 9 of the bundle is not a Kubernetes object: no apiVersion"
        );
        let without_crd = good.replace(&crd("fluxinstances.fluxcd.controlplane.io"), "");
        assert_eq!(
            refusal(&without_crd),
            "the bundle lacks CustomResourceDefinition fluxinstances.fluxcd.controlplane.io: it \
             is not a flux-operator install"
        );
        let without_deployment = good.replace(
            &deployment("ghcr.io/controlplaneio-fluxcd/flux-operator:v0.58.1"),
            "",
        );
        assert!(
            refusal(&without_deployment)
                .starts_with("the bundle lacks Deployment flux-system/flux-operator"),
        );
        let secret = format!(
            "{good}---\napiVersion: v1\nkind: Secret\nmetadata: {{name: s, namespace: flux-system}}\n"
        );
        assert!(refusal(&secret).starts_with("the bundle holds Secret s (v1), a kind the agent"));
        let elsewhere = format!(
            "{good}---\napiVersion: v1\nkind: ServiceAccount\nmetadata: {{name: sa, namespace: kube-system}}\n"
        );
        assert!(
            refusal(&elsewhere).starts_with(
                "ServiceAccount kube-system/sa is not in the operator namespace \"flux-system\""
            ),
            "{}",
            refusal(&elsewhere)
        );
        let other_namespace =
            format!("{good}---\napiVersion: v1\nkind: Namespace\nmetadata: {{name: other}}\n");
        assert!(refusal(&other_namespace).starts_with("Namespace other is not in the operator"));
        let twice = format!("{good}---\n{}", crd("fluxreports.fluxcd.controlplane.io"));
        assert_eq!(
            refusal(&twice),
            "the bundle holds CustomResourceDefinition fluxreports.fluxcd.controlplane.io twice"
        );
        let extra = format!(
            "{good}---\n{}",
            deployment("x:v1").replace(
                "name: flux-operator\n  namespace",
                "name: other\n  namespace"
            )
        );
        assert!(refusal(&extra).starts_with("the bundle holds Deployment flux-system/other;"));
        assert!(
            refusal(&install("ghcr.io/controlplaneio-fluxcd/flux-operator"))
                .contains("states no version")
        );
        assert!(
            refusal(&install(
                "ghcr.io/controlplaneio-fluxcd/flux-operator:latest"
            ))
            .starts_with("flux-operator version \"latest\" of the bundle is not a semantic")
        );
    }

    #[test]
    fn allowed_versions_take_exact_versions_and_flux_style_ranges() {
        let v = |s: &str| semver::Version::parse(s).unwrap();
        let exact = AllowedVersions::parse("v0.58.1", "--operator-version").unwrap();
        assert!(exact.allows(&v("0.58.1")));
        assert!(
            !exact.allows(&v("0.58.2")),
            "an exact version is not a caret range"
        );
        let range = AllowedVersions::parse(">=v0.58.0 <0.59.0", "--operator-version").unwrap();
        assert!(range.allows(&v("0.58.0")) && range.allows(&v("0.58.9")));
        assert!(!range.allows(&v("0.59.0")) && !range.allows(&v("0.57.3")));
        let spaced = AllowedVersions::parse(">= 0.58.0, < 0.59.0", "x").unwrap();
        assert!(spaced.allows(&v("0.58.4")) && !spaced.allows(&v("0.59.0")));
        let wildcard = AllowedVersions::parse("0.58.x", "x").unwrap();
        assert!(wildcard.allows(&v("0.58.3")) && !wildcard.allows(&v("0.59.0")));
        let err = AllowedVersions::parse("latest", "x")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("\"latest\" is neither a version"), "{err}");

        let bundle = parse(&install(
            "ghcr.io/controlplaneio-fluxcd/flux-operator:v0.58.1",
        ))
        .unwrap();
        bundle.check_version(&range).unwrap();
        let old = AllowedVersions::parse("v0.57.0", "--operator-version").unwrap();
        assert_eq!(
            bundle.check_version(&old).unwrap_err().to_string(),
            "flux-operator v0.58.1 is outside \"v0.57.0\" allowed by --operator-version"
        );
    }

    #[test]
    fn pruning_keeps_crds_and_what_the_new_bundle_still_has() {
        let r = |api_version: &str, kind: &str, namespace: Option<&str>, name: &str| ObjectRef {
            api_version: api_version.into(),
            kind: kind.into(),
            namespace: namespace.map(Into::into),
            name: name.into(),
        };
        let crd = r(
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition",
            None,
            "old.fluxcd.controlplane.io",
        );
        let role = r(
            "rbac.authorization.k8s.io/v1",
            "ClusterRole",
            None,
            "flux-web-user",
        );
        let sa = r("v1", "ServiceAccount", Some(NS), "flux-operator");
        let service = r("v1", "Service", Some(NS), "flux-operator");
        let unknown = r("v1", "Secret", Some(NS), "not-ours-to-touch");
        let namespace = r("v1", "Namespace", None, "flux-system");
        let previous = [
            crd,
            role.clone(),
            sa.clone(),
            service.clone(),
            unknown,
            namespace,
        ];
        assert_eq!(to_prune(&previous, &[sa]), [role, service]);
    }

    #[test]
    fn digests_are_sha256_of_the_bytes() {
        assert_eq!(
            digest_of(b""),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn kinds_map_to_their_api_resources() {
        let deployment = kind_of("apps/v1", "Deployment").unwrap();
        assert_eq!(deployment.group(), "apps");
        let resource = deployment.api_resource();
        assert_eq!(
            (
                resource.group.as_str(),
                resource.version.as_str(),
                resource.plural.as_str()
            ),
            ("apps", "v1", "deployments")
        );
        let namespace = kind_of("v1", "Namespace").unwrap();
        assert_eq!(namespace.group(), "");
        assert_eq!(namespace.api_resource().api_version, "v1");
        assert!(kind_of("apps/v1beta1", "Deployment").is_none());
    }
}
