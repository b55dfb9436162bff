//! What a bundle may hold: only flux-operator's own kinds and names, subjects that are the
//! operator's, and images that follow the platform's rules.

use serde_json::Value;

use super::*;

/// What only flux-operator's own install holds: CRDs of its group, cluster RBAC under its
/// names, bindings to ServiceAccounts of the operator namespace.
pub(super) fn check_contents(
    value: &Value,
    kind: &Kind,
    reference: &ObjectRef,
    operator_namespace: &str,
) -> Result<(), BundleError> {
    if let Some((field, why)) = beyond_release(value, kind.kind) {
        return Err(BundleError::BeyondRelease {
            object: Box::new(reference.clone()),
            field,
            why,
        });
    }
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
        // Held to the releases' roles (and a vouching's rules) in `Bundle::check_release`,
        // once the bundle's version says which vouching applies.
        "ClusterRole" => {}
        "ClusterRoleBinding" => rbac::check_cluster_role_binding(value, reference)?,
        _ => {}
    }
    if kind.kind == "ClusterRoleBinding" {
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
pub(super) fn check_subjects(objects: &[BundleObject]) -> Result<(), BundleError> {
    let held: Vec<&str> = objects
        .iter()
        .filter(|o| o.kind.kind == "ServiceAccount")
        .map(|o| o.reference.name.as_str())
        .collect();
    for object in objects
        .iter()
        .filter(|o| o.kind.kind == "ClusterRoleBinding")
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

/// What the operator Deployment's images and pod settings must be.
#[derive(Clone, Debug, Default)]
pub struct ImageRules {
    /// Globs over the image reference (`--operator-image-registry`).
    pub registries: Vec<String>,
    /// Every image pinned by digest (`--operator-require-image-digest`).
    pub require_digest: bool,
    /// The pod settings of [`POD_FIELDS`] the platform lets a bundle set
    /// (`--operator-allow-pod-fields`).
    pub pod_fields: Vec<String>,
}

/// Pod settings a platform may give flux-operator beyond what its releases ship, each refused
/// unless `--operator-allow-pod-fields` names it: Cozystack runs the operator with
/// `hostNetwork: true` and a not-ready toleration (it starts before the CNI) and its own
/// resources.
pub const POD_FIELDS: &[&str] = &["hostNetwork", "tolerations", "resources", "nodeSelector"];

/// The `manager` container's resources in flux-operator's releases (v0.58.0 to v0.59.0).
fn release_resources() -> Value {
    serde_json::json!({
        "limits": {"cpu": "2000m", "memory": "1Gi"},
        "requests": {"cpu": "10m", "memory": "64Mi"},
    })
}

/// Every pod setting of [`POD_FIELDS`] the Deployment sets beyond the releases' is one the
/// platform allows: `hostNetwork` true, any toleration or node selector, the manager's
/// resources other than the releases'.
pub(super) fn check_pod_fields(deployment: &Value, rules: &ImageRules) -> Result<(), BundleError> {
    let pod = deployment.pointer("/spec/template/spec");
    let get = |name: &str| pod.and_then(|p| p.get(name));
    let non_empty = |v: Option<&Value>| match v {
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::Object(o)) => !o.is_empty(),
        Some(Value::Null) | None => false,
        Some(_) => true,
    };
    let containers = get("containers").and_then(Value::as_array);
    let manager = containers.and_then(|c| {
        c.iter()
            .position(|c| c.get("name").and_then(Value::as_str) == Some("manager"))
            .or((!c.is_empty()).then_some(0))
    });
    let resources = manager
        .and_then(|i| containers.and_then(|c| c[i].get("resources")))
        .filter(|r| non_empty(Some(r)) && **r != release_resources());
    let set = [
        (
            "hostNetwork",
            get("hostNetwork").is_some_and(|v| v == &Value::Bool(true)),
            "spec.template.spec.hostNetwork".to_owned(),
        ),
        (
            "tolerations",
            non_empty(get("tolerations")),
            "spec.template.spec.tolerations".to_owned(),
        ),
        (
            "nodeSelector",
            non_empty(get("nodeSelector")),
            "spec.template.spec.nodeSelector".to_owned(),
        ),
        (
            "resources",
            resources.is_some(),
            format!(
                "spec.template.spec.containers[{}].resources",
                manager.unwrap_or_default()
            ),
        ),
    ];
    for (name, present, field) in set {
        if present && !rules.pod_fields.iter().any(|f| f == name) {
            return Err(BundleError::PodFieldNotAllowed {
                field,
                name,
                allowed: if rules.pod_fields.is_empty() {
                    "none".to_owned()
                } else {
                    rules.pod_fields.join(", ")
                },
            });
        }
    }
    Ok(())
}

/// Whether `image` ends in `@sha256:` and 64 lowercase hex digits.
pub(super) fn pinned_by_digest(image: &str) -> bool {
    image.rsplit_once("@sha256:").is_some_and(|(_, hex)| {
        hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
}

/// Every image of the Deployment's pod (init containers too) from an allowed registry, and
/// pinned by digest when that is required.
pub(super) fn check_images(deployment: &Value, rules: &ImageRules) -> Result<(), BundleError> {
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
pub(super) fn deployment_version(deployment: &Value) -> Result<Option<String>, BundleError> {
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

/// What no flux-operator release sets and would change what runs as cluster-admin, or where
/// the cluster's FluxInstances go: a CRD conversion (a webhook sees and rewrites every object
/// after admission judged it), host namespaces and paths, image volumes, privileged or
/// escalating containers, containers beyond the release's one `manager`, and a Service that
/// leaves the cluster. `None` when the object sets none of them; otherwise the field and why.
pub(super) fn beyond_release(value: &Value, kind: &str) -> Option<(String, &'static str)> {
    match kind {
        "CustomResourceDefinition" => crd_beyond_release(value),
        "Deployment" => deployment_beyond_release(value),
        "Service" => service_beyond_release(value),
        _ => None,
    }
}

fn truthy(v: Option<&Value>) -> bool {
    v.is_some_and(|v| v == &Value::Bool(true))
}

fn non_empty(v: Option<&Value>) -> bool {
    match v {
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::Object(o)) => !o.is_empty(),
        Some(Value::String(s)) => !s.is_empty(),
        _ => false,
    }
}

/// A conversion webhook.
fn crd_beyond_release(value: &Value) -> Option<(String, &'static str)> {
    let conversion = value.pointer("/spec/conversion");
    let strategy = conversion
        .and_then(|c| c.get("strategy"))
        .and_then(Value::as_str);
    let webhook = conversion.and_then(|c| c.get("webhook"));
    (strategy.is_some_and(|s| s != "None") || webhook.is_some()).then(|| {
        (
            "spec.conversion".to_owned(),
            "a conversion webhook receives and rewrites every object of the kind after admission",
        )
    })
}

/// Host namespaces and paths, image volumes, containers beyond `manager`, privileges.
fn deployment_beyond_release(value: &Value) -> Option<(String, &'static str)> {
    let pod = value.pointer("/spec/template/spec")?;
    for (field, why) in [
        ("hostPID", "the host's process namespace"),
        ("hostIPC", "the host's IPC namespace"),
        (
            "shareProcessNamespace",
            "a process namespace shared between containers",
        ),
    ] {
        if truthy(pod.get(field)) {
            return Some((format!("spec.template.spec.{field}"), why));
        }
    }
    let volumes = pod.get("volumes").and_then(Value::as_array);
    for (index, volume) in volumes.into_iter().flatten().enumerate() {
        for (source, why) in [
            ("hostPath", "a path of the node's file system"),
            (
                "image",
                "an image volume, content outside the allowed images",
            ),
        ] {
            if volume.get(source).is_some() {
                return Some((format!("spec.template.spec.volumes[{index}].{source}"), why));
            }
        }
    }
    for list in ["initContainers", "ephemeralContainers"] {
        if non_empty(pod.get(list)) {
            return Some((
                format!("spec.template.spec.{list}"),
                "containers beyond the release's manager",
            ));
        }
    }
    let containers = pod.get("containers").and_then(Value::as_array);
    if containers.is_some_and(|c| c.len() > 1) {
        return Some((
            "spec.template.spec.containers[1]".to_owned(),
            "containers beyond the release's manager",
        ));
    }
    for (index, container) in containers.into_iter().flatten().enumerate() {
        let security = container.get("securityContext");
        let at =
            |field: &str| format!("spec.template.spec.containers[{index}].securityContext.{field}");
        if truthy(security.and_then(|s| s.get("privileged"))) {
            return Some((at("privileged"), "a privileged container"));
        }
        if truthy(security.and_then(|s| s.get("allowPrivilegeEscalation"))) {
            return Some((
                at("allowPrivilegeEscalation"),
                "a container that may gain privileges",
            ));
        }
        if non_empty(security.and_then(|s| s.pointer("/capabilities/add"))) {
            return Some((
                at("capabilities.add"),
                "Linux capabilities beyond the release's none",
            ));
        }
    }
    None
}

/// Addresses or a type that reach outside the cluster.
fn service_beyond_release(value: &Value) -> Option<(String, &'static str)> {
    if non_empty(value.pointer("/spec/externalIPs")) {
        return Some((
            "spec.externalIPs".to_owned(),
            "addresses outside the cluster",
        ));
    }
    let kind = value.pointer("/spec/type").and_then(Value::as_str);
    kind.filter(|t| *t != "ClusterIP").map(|_| {
        (
            "spec.type".to_owned(),
            "a Service reachable from outside the cluster (the releases' is ClusterIP)",
        )
    })
}
