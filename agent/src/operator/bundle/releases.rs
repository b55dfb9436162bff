//! flux-operator's releases as the agent knows them, and the check that a bundle equals one,
//! object by object. Pure: [`super`] calls it before anything is applied.
//!
//! A bundle's source is whoever controls the OCI tag or the ConfigMap the platform names, and
//! what it holds runs as cluster-admin. Checking names and images is not enough: a CRD with
//! another schema, or a manager with other args, env or mounts, is another program. So every
//! CRD of a bundle must equal its release's (the digest of its JSON with keys sorted, schema by
//! schema, so layout and key order do not count), and the Deployment, the Service and the
//! ServiceAccount must be the release's except for the images (any tag or digest the image
//! rules allow) and the pod settings the platform names in `--operator-allow-pod-fields`; a
//! Namespace carries nothing but metadata and no Pod Security label. Metadata is not compared
//! otherwise. Cluster RBAC is held to [`super::rbac`]; no release ships a namespaced Role.
//!
//! The table ([`KNOWN`], `releases/table.rs`) is each release's `config/default` (what its
//! `install.yaml` is built from), generated from the flux-operator module of that version by
//! `deploy/operator-releases`; the operator_install tests check it against those sources. A
//! release the table lacks is refused unless the platform vouched for its digest
//! ([`super::Bundle::check_release`]).

use serde_json::{Value, json};

use tenantflux_core::text::quote;

use super::{BundleError, BundleObject, ObjectRef};
use tenantflux_core::digest::sha256;

/// What a release's CRD must be: a digest of its `spec` without the versions' schemas, and one
/// of each version's schema (so a difference is named down to the version).
#[derive(Debug)]
pub struct Crd {
    pub name: &'static str,
    pub spec: &'static str,
    pub schemas: &'static [(&'static str, &'static str)],
}

/// One release of flux-operator: its version and its CRDs.
#[derive(Debug)]
pub struct Release {
    pub version: &'static str,
    pub crds: &'static [Crd],
}

pub use super::release_table::KNOWN;

/// The versions of `known`, for messages.
fn versions(known: &[Release]) -> String {
    let names: Vec<&str> = known.iter().map(|r| r.version).collect();
    names.join(", ")
}

/// The operator Deployment's `spec` in every known release, with the manager's image left
/// out (the image rules judge it).
pub(super) fn deployment_spec() -> Value {
    let probe = |path: &str, initial: u64, period: u64| {
        json!({
            "httpGet": {"path": path, "port": 8081},
            "initialDelaySeconds": initial,
            "periodSeconds": period,
        })
    };
    let port =
        |name: &str, port: u64| json!({"containerPort": port, "name": name, "protocol": "TCP"});
    json!({
        "replicas": 1,
        "selector": {"matchLabels": {"app.kubernetes.io/name": "flux-operator"}},
        "template": {
            "metadata": {
                "annotations": {
                    "prometheus.io/path": "/metrics",
                    "prometheus.io/port": "8080",
                    "prometheus.io/scrape": "true",
                },
                "labels": {"app.kubernetes.io/name": "flux-operator"},
            },
            "spec": {
                "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [
                        {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
                    ]}],
                }}},
                "containers": [{
                    "env": [{
                        "name": "RUNTIME_NAMESPACE",
                        "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}},
                    }],
                    "imagePullPolicy": "IfNotPresent",
                    "livenessProbe": probe("/healthz", 15, 20),
                    "name": "manager",
                    "ports": [port("http-web", 9080), port("http-metrics", 8080), port("http", 8081)],
                    "readinessProbe": probe("/readyz", 5, 10),
                    "resources": {
                        "limits": {"cpu": "2000m", "memory": "1Gi"},
                        "requests": {"cpu": "10m", "memory": "64Mi"},
                    },
                    "securityContext": {
                        "allowPrivilegeEscalation": false,
                        "capabilities": {"drop": ["ALL"]},
                        "readOnlyRootFilesystem": true,
                        "runAsNonRoot": true,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "volumeMounts": [{"mountPath": "/tmp", "name": "temp"}],
                }],
                "serviceAccountName": "flux-operator",
                "terminationGracePeriodSeconds": 10,
                "volumes": [{"emptyDir": {}, "name": "temp"}],
            },
        },
    })
}

/// The operator Service's `spec` in every known release.
pub(super) fn service_spec() -> Value {
    let port = |name: &str, port: u64| json!({"name": name, "port": port, "protocol": "TCP", "targetPort": port});
    json!({
        "ports": [port("http-web", 9080), port("http", 8080)],
        "selector": {"app.kubernetes.io/name": "flux-operator"},
    })
}

/// The fingerprint of a CRD's `spec`: the digest of the spec without the versions' schemas,
/// and the digest of each version's schema, by version name.
pub fn crd_fingerprint(spec: &Value) -> (String, Vec<(String, String)>) {
    let mut rest = spec.clone();
    let mut schemas = Vec::new();
    let versions = rest.get_mut("versions").and_then(Value::as_array_mut);
    for version in versions.into_iter().flatten() {
        let name = version
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        let schema = version
            .as_object_mut()
            .and_then(|v| v.remove("schema"))
            .unwrap_or(Value::Null);
        schemas.push((name, digest_of_value(&schema)));
    }
    (digest_of_value(&rest), schemas)
}

/// `sha256:…` of the value's JSON with every object's keys sorted (serde_json's map is
/// ordered by key), so the YAML's layout and key order do not count.
fn digest_of_value(value: &Value) -> String {
    sha256(value.to_string().as_bytes())
}

/// The objects of a release a bundle may hold besides CRDs and cluster RBAC: kind, name (the
/// Namespace's is the operator namespace, whatever it is called) and what must equal the
/// release outside `metadata`.
fn release_body(kind: &str, name: &str) -> Option<Value> {
    match (kind, name) {
        ("Deployment", "flux-operator") => Some(json!({"spec": deployment_spec()})),
        ("Service", "flux-operator") => Some(json!({"spec": service_spec()})),
        ("ServiceAccount", "flux-operator") | ("Namespace", _) => Some(json!({})),
        _ => None,
    }
}

/// Label prefixes that change what may run in a namespace: a bundle's Namespace carries none.
const NAMESPACE_POWER_LABELS: &[&str] = &["pod-security.kubernetes.io/"];

/// Refuses a bundle that is not release `version` of `known` object by object, but for the
/// images and the pod settings named in `pod_fields` (of [`super::POD_FIELDS`]).
pub fn check(
    objects: &[BundleObject],
    version: &str,
    digest: &str,
    known: &[Release],
    pod_fields: &[String],
) -> Result<(), BundleError> {
    let release =
        known
            .iter()
            .find(|r| r.version == version)
            .ok_or_else(|| BundleError::UnknownRelease {
                version: version.to_owned(),
                digest: digest.to_owned(),
                known: versions(known),
            })?;
    for object in objects {
        let differs = |field: String, expected: String| BundleError::DiffersFromRelease {
            object: Box::new(object.reference.clone()),
            field,
            release: release.version,
            expected,
        };
        match object.kind.kind {
            "CustomResourceDefinition" => {
                let crd = release
                    .crds
                    .iter()
                    .find(|c| c.name == object.reference.name)
                    .ok_or_else(|| not_in_release(&object.reference, release))?;
                let spec = object.manifest.get("spec").unwrap_or(&Value::Null);
                let (rest, schemas) = crd_fingerprint(spec);
                if rest != crd.spec {
                    return Err(differs(
                        "spec".to_owned(),
                        format!("its versions, names and scope, digest {}", crd.spec),
                    ));
                }
                for (index, (name, digest)) in schemas.iter().enumerate() {
                    let expected = crd.schemas.iter().find(|(n, _)| n == name);
                    if expected.is_none_or(|(_, d)| d != digest) {
                        return Err(differs(
                            format!("spec.versions[{index}].schema"),
                            expected.map_or_else(
                                || "no version of that name".to_owned(),
                                |(_, d)| format!("schema digest {d}"),
                            ),
                        ));
                    }
                }
            }
            "ClusterRole" | "ClusterRoleBinding" => {}
            kind => {
                let name = &object.reference.name;
                let expected = release_body(kind, name)
                    .ok_or_else(|| not_in_release(&object.reference, release))?;
                if kind == "Namespace" {
                    check_namespace_labels(object, release)?;
                }
                let mut body = object.manifest.clone();
                if let Some(map) = body.as_object_mut() {
                    for key in ["apiVersion", "kind", "metadata", "status"] {
                        map.remove(key);
                    }
                }
                let mut expected = expected;
                if kind == "Deployment" {
                    without_platform_fields(&mut body, pod_fields, true);
                    without_platform_fields(&mut expected, pod_fields, false);
                }
                if let Some((field, value)) = first_difference(&body, &expected, String::new()) {
                    return Err(differs(field, describe(value)));
                }
            }
        }
    }
    Ok(())
}

fn not_in_release(object: &ObjectRef, release: &Release) -> BundleError {
    BundleError::NotInRelease {
        object: Box::new(object.clone()),
        release: release.version,
    }
}

fn check_namespace_labels(object: &BundleObject, release: &Release) -> Result<(), BundleError> {
    let labels = object
        .manifest
        .pointer("/metadata/labels")
        .and_then(Value::as_object);
    for key in labels.into_iter().flatten().map(|(k, _)| k) {
        if NAMESPACE_POWER_LABELS.iter().any(|p| key.starts_with(p)) {
            return Err(BundleError::DiffersFromRelease {
                object: Box::new(object.reference.clone()),
                field: format!("metadata.labels[{}]", quote(key)),
                release: release.version,
                expected: "no Pod Security label".to_owned(),
            });
        }
    }
    Ok(())
}

/// Removes what the release's Deployment body may differ in: every container's image, and the
/// pod settings the platform allows (`resources` is the manager's).
fn without_platform_fields(body: &mut Value, pod_fields: &[String], images: bool) {
    let Some(pod) = body
        .pointer_mut("/spec/template/spec")
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    for field in ["hostNetwork", "tolerations", "nodeSelector"] {
        if pod_fields.iter().any(|f| f == field) {
            pod.remove(field);
        }
    }
    let resources = pod_fields.iter().any(|f| f == "resources");
    let containers = pod.get_mut("containers").and_then(Value::as_array_mut);
    for container in containers.into_iter().flatten() {
        let Some(container) = container.as_object_mut() else {
            continue;
        };
        if images {
            container.remove("image");
        }
        if resources && container.get("name").and_then(Value::as_str) == Some("manager") {
            container.remove("resources");
        }
    }
}

/// Whether `value` says nothing: absent, null, false, or an empty list, map or string (what
/// Kubernetes treats as unset for the fields of these objects).
fn is_unset(value: Option<&Value>) -> bool {
    match value {
        None | Some(Value::Null) | Some(Value::Bool(false)) => true,
        Some(Value::Array(a)) => a.is_empty(),
        Some(Value::Object(o)) => o.is_empty(),
        Some(Value::String(s)) => s.is_empty(),
        Some(_) => false,
    }
}

/// The first field (`a.b[2].c`, a key with a dot or slash as `a["k.io/x"]`) where `actual`
/// and `expected` differ, unset values being equal, with what `expected` has there; `None`
/// when they are equal.
pub(super) fn first_difference<'e>(
    actual: &Value,
    expected: &'e Value,
    path: String,
) -> Option<(String, Option<&'e Value>)> {
    let join = |key: &str| {
        if key.contains(['.', '/']) {
            format!("{path}[{}]", quote(key))
        } else if path.is_empty() {
            key.to_owned()
        } else {
            format!("{path}.{key}")
        }
    };
    match (actual, expected) {
        (Value::Object(a), Value::Object(e)) => {
            let mut keys: Vec<&String> = a.keys().chain(e.keys()).collect();
            keys.sort();
            keys.dedup();
            keys.into_iter()
                .find_map(|key| match (a.get(key), e.get(key)) {
                    (Some(a), Some(e)) => first_difference(a, e, join(key)),
                    (a, e) if is_unset(a) && is_unset(e) => None,
                    (_, e) => Some((join(key), e)),
                })
        }
        (Value::Array(a), Value::Array(e)) => (0..a.len().max(e.len())).find_map(|index| {
            let at = format!("{path}[{index}]");
            match (a.get(index), e.get(index)) {
                (Some(a), Some(e)) => first_difference(a, e, at),
                (_, e) => Some((at, e)),
            }
        }),
        (a, e) if a == e || (is_unset(Some(a)) && is_unset(Some(e))) => None,
        (_, e) => Some((path, Some(e))),
    }
}

/// What the release has at a field, for a message: its JSON, shortened.
pub(super) fn describe(value: Option<&Value>) -> String {
    match value {
        None => "nothing there".to_owned(),
        Some(value) => {
            let text = value.to_string();
            if text.chars().count() > 120 {
                let short: String = text.chars().take(117).collect();
                format!("{short}...")
            } else {
                text
            }
        }
    }
}
