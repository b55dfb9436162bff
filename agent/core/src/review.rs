//! A flux-operator release reviewed against another before the platform vouches for it: what
//! its install.yaml adds, removes or changes that matters for what runs as cluster-admin and
//! for the tenants' FluxInstances. Pure: the plugin reads both bundles (an OCI manifests
//! artifact or a file) and renders the [`Review`].
//!
//! The review is for a person; the agent does not rely on it. What the agent enforces on a
//! vouched release is the digest, the structural checks every bundle passes, and the cluster
//! RBAC rules the vouching names ([`Review::rules_added`] is what `operator vouch` writes).

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use serde_json::Value;

use crate::policy::ClusterRule;

/// At most this many schema changes are listed per CRD version; the rest are counted.
pub const MAX_SCHEMA_CHANGES: usize = 200;

/// One bundle as read: its stated version, digest, objects and the Flux distributions its
/// artifact ships (`flux/vX.Y.Z`; empty for a bare install.yaml).
#[derive(Clone, Debug, Default)]
pub struct Content {
    pub version: String,
    pub digest: String,
    pub source: String,
    pub objects: Vec<Value>,
    pub distributions: BTreeSet<String>,
}

impl Content {
    /// The version the bundle states: the operator Deployment's image tag (as the agent reads
    /// it), else its `app.kubernetes.io/version` label.
    pub fn stated_version(objects: &[Value]) -> Option<String> {
        let deployment = objects
            .iter()
            .find(|o| kind(o) == "Deployment" && name(o) == crate::flux::OPERATOR_DEPLOYMENT)?;
        let image = deployment
            .pointer("/spec/template/spec/containers/0/image")
            .and_then(Value::as_str);
        image
            .and_then(crate::flux::image_tag)
            .map(str::to_owned)
            .or_else(|| {
                deployment
                    .pointer("/metadata/labels/app.kubernetes.io~1version")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            })
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Review {
    pub version: String,
    pub digest: String,
    pub source: String,
    pub against_version: String,
    pub against_digest: String,
    pub against_source: String,
    pub crds_added: Vec<String>,
    pub crds_removed: Vec<String>,
    pub crds_changed: Vec<CrdChange>,
    /// ClusterRole rules that grant what the same role of the other release does not.
    pub rules_added: Vec<ClusterRule>,
    /// Objects other than CRDs and ClusterRoles, `Kind name`.
    pub objects_added: Vec<String>,
    pub objects_removed: Vec<String>,
    /// The operator Deployment's fields that differ.
    pub deployment: Vec<FieldChange>,
    pub distributions_added: Vec<String>,
    pub distributions_removed: Vec<String>,
}

impl Review {
    /// Whether the two releases differ in nothing the review looks at.
    pub fn is_empty(&self) -> bool {
        self.crds_added.is_empty()
            && self.crds_removed.is_empty()
            && self.crds_changed.is_empty()
            && self.rules_added.is_empty()
            && self.objects_added.is_empty()
            && self.objects_removed.is_empty()
            && self.deployment.is_empty()
            && self.distributions_added.is_empty()
            && self.distributions_removed.is_empty()
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CrdChange {
    pub name: String,
    /// Versions as `v1 (served, storage)`, before and after, when they differ.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub versions: Option<(Vec<String>, Vec<String>)>,
    pub schema: Vec<SchemaChange>,
    /// Schema changes past [`MAX_SCHEMA_CHANGES`], not listed.
    #[serde(skip_serializing_if = "is_zero")]
    pub more: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SchemaChange {
    pub version: String,
    /// The field's path in the object (`spec.distribution.variant`, `spec.components[]`).
    pub path: String,
    /// `added`, `removed`, or `type string -> integer` and the like.
    pub change: String,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FieldChange {
    pub field: String,
    pub before: Value,
    pub after: Value,
}

fn kind(object: &Value) -> &str {
    object.get("kind").and_then(Value::as_str).unwrap_or("")
}

fn name(object: &Value) -> &str {
    object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
}

fn by_kind<'a>(objects: &'a [Value], wanted: &str) -> BTreeMap<&'a str, &'a Value> {
    objects
        .iter()
        .filter(|o| kind(o) == wanted)
        .map(|o| (name(o), o))
        .collect()
}

/// Reviews `new` against `old`.
pub fn review(new: &Content, old: &Content) -> Review {
    let mut review = Review {
        version: new.version.clone(),
        digest: new.digest.clone(),
        source: new.source.clone(),
        against_version: old.version.clone(),
        against_digest: old.digest.clone(),
        against_source: old.source.clone(),
        ..Review::default()
    };
    let (new_crds, old_crds) = (
        by_kind(&new.objects, "CustomResourceDefinition"),
        by_kind(&old.objects, "CustomResourceDefinition"),
    );
    review.crds_added = added(&new_crds, &old_crds);
    review.crds_removed = added(&old_crds, &new_crds);
    for (name, crd) in &new_crds {
        if let Some(before) = old_crds.get(name)
            && let Some(change) = crd_change(name, before, crd)
        {
            review.crds_changed.push(change);
        }
    }
    let (new_roles, old_roles) = (
        by_kind(&new.objects, "ClusterRole"),
        by_kind(&old.objects, "ClusterRole"),
    );
    for (name, role) in &new_roles {
        review
            .rules_added
            .extend(rules_beyond(name, role, old_roles.get(name).copied()));
    }
    let others = |objects: &[Value]| -> BTreeSet<String> {
        objects
            .iter()
            .filter(|o| !matches!(kind(o), "CustomResourceDefinition" | "ClusterRole"))
            .map(|o| format!("{} {}", kind(o), name(o)))
            .collect()
    };
    let (new_others, old_others) = (others(&new.objects), others(&old.objects));
    review.objects_added = new_others.difference(&old_others).cloned().collect();
    review.objects_removed = old_others.difference(&new_others).cloned().collect();
    let deployment = |c: &Content| {
        by_kind(&c.objects, "Deployment")
            .get(crate::flux::OPERATOR_DEPLOYMENT)
            .map(|d| (*d).clone())
            .unwrap_or(Value::Null)
    };
    review.deployment = deployment_changes(&deployment(old), &deployment(new));
    review.distributions_added = new
        .distributions
        .difference(&old.distributions)
        .cloned()
        .collect();
    review.distributions_removed = old
        .distributions
        .difference(&new.distributions)
        .cloned()
        .collect();
    review
}

fn added(a: &BTreeMap<&str, &Value>, b: &BTreeMap<&str, &Value>) -> Vec<String> {
    a.keys()
        .filter(|k| !b.contains_key(*k))
        .map(|k| (*k).to_owned())
        .collect()
}

/// `v1 (served, storage)` for each version of a CRD, in its order.
fn versions(crd: &Value) -> Vec<String> {
    crd.pointer("/spec/versions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|v| {
            let flag = |key: &str| v.get(key).and_then(Value::as_bool).unwrap_or(false);
            let mut marks = Vec::new();
            if flag("served") {
                marks.push("served");
            }
            if flag("storage") {
                marks.push("storage");
            }
            if v.get("deprecated").and_then(Value::as_bool) == Some(true) {
                marks.push("deprecated");
            }
            let name = v.get("name").and_then(Value::as_str).unwrap_or("");
            format!("{name} ({})", marks.join(", "))
        })
        .collect()
}

fn schema_of<'a>(crd: &'a Value, version: &str) -> Option<&'a Value> {
    crd.pointer("/spec/versions")?
        .as_array()?
        .iter()
        .find(|v| v.get("name").and_then(Value::as_str) == Some(version))?
        .pointer("/schema/openAPIV3Schema")
}

fn crd_change(name: &str, old: &Value, new: &Value) -> Option<CrdChange> {
    let (before, after) = (versions(old), versions(new));
    let mut change = CrdChange {
        name: name.to_owned(),
        versions: (before != after).then_some((before, after)),
        ..CrdChange::default()
    };
    let names = |crd: &Value| -> Vec<String> {
        crd.pointer("/spec/versions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|v| v.get("name").and_then(Value::as_str).map(str::to_owned))
            .collect()
    };
    let mut all = Vec::new();
    for version in names(new) {
        if let (Some(a), Some(b)) = (schema_of(old, &version), schema_of(new, &version)) {
            schema_changes(&version, a, b, String::new(), &mut all);
        }
    }
    change.more = all.len().saturating_sub(MAX_SCHEMA_CHANGES);
    all.truncate(MAX_SCHEMA_CHANGES);
    change.schema = all;
    (change.versions.is_some() || !change.schema.is_empty()).then_some(change)
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

fn type_of(schema: &Value) -> String {
    match schema.get("type") {
        Some(Value::String(t)) => t.clone(),
        Some(other) => other.to_string(),
        None if schema.get("x-kubernetes-int-or-string").is_some() => "int-or-string".into(),
        None => "any".into(),
    }
}

/// Fields added, removed and retyped between two OpenAPI schemas, by the object's paths
/// (`properties` by name, `items` as `[]`, `additionalProperties` as `{}`), plus changed enums
/// and required lists where a field stays.
fn schema_changes(
    version: &str,
    old: &Value,
    new: &Value,
    path: String,
    out: &mut Vec<SchemaChange>,
) {
    let mut push = |path: &str, change: String| {
        out.push(SchemaChange {
            version: version.to_owned(),
            path: if path.is_empty() {
                "(root)".into()
            } else {
                path.to_owned()
            },
            change,
        })
    };
    let (old_type, new_type) = (type_of(old), type_of(new));
    if old_type != new_type {
        push(&path, format!("type {old_type} -> {new_type}"));
    }
    for key in [
        "enum",
        "required",
        "pattern",
        "maxLength",
        "maximum",
        "minimum",
        "x-kubernetes-validations",
    ] {
        let (a, b) = (old.get(key), new.get(key));
        if a != b {
            let show = |v: Option<&Value>| v.map_or_else(|| "unset".to_owned(), Value::to_string);
            push(&path, format!("{key} {} -> {}", show(a), show(b)));
        }
    }
    let empty = serde_json::Map::new();
    let properties = |schema: &'_ Value| -> serde_json::Map<String, Value> {
        schema
            .get("properties")
            .and_then(Value::as_object)
            .unwrap_or(&empty)
            .clone()
    };
    let (old_props, new_props) = (properties(old), properties(new));
    for (key, schema) in &new_props {
        let at = join(&path, key);
        match old_props.get(key) {
            Some(before) => schema_changes(version, before, schema, at, out),
            None => out.push(SchemaChange {
                version: version.to_owned(),
                path: at,
                change: format!("added ({})", type_of(schema)),
            }),
        }
    }
    for key in old_props.keys().filter(|k| !new_props.contains_key(*k)) {
        out.push(SchemaChange {
            version: version.to_owned(),
            path: join(&path, key),
            change: "removed".into(),
        });
    }
    for (key, mark) in [("items", "[]"), ("additionalProperties", "{}")] {
        if let (Some(a), Some(b)) = (old.get(key), new.get(key))
            && a.is_object()
            && b.is_object()
        {
            schema_changes(version, a, b, format!("{path}{mark}"), out);
        }
    }
}

fn strings(value: &Value, field: &str) -> Vec<String> {
    value
        .get(field)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect()
}

/// The rules of `role` that grant some (group, resource, verb) the same role of the other
/// release (`old`) does not; every rule of a role the other release lacks.
fn rules_beyond(name: &str, role: &Value, old: Option<&Value>) -> Vec<ClusterRule> {
    let as_rules = |role: &Value| -> Vec<ClusterRule> {
        role.get("rules")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|r| ClusterRule {
                cluster_role: name.to_owned(),
                api_groups: strings(r, "apiGroups"),
                resources: strings(r, "resources"),
                verbs: strings(r, "verbs"),
            })
            .collect()
    };
    let before = old.map(as_rules).unwrap_or_default();
    as_rules(role)
        .into_iter()
        .filter(|rule| {
            rule.api_groups.iter().any(|group| {
                rule.resources.iter().any(|resource| {
                    rule.verbs
                        .iter()
                        .any(|verb| !before.iter().any(|b| b.grants(name, group, resource, verb)))
                })
            })
        })
        .collect()
}

/// The operator Deployment's fields a reviewer weighs: the manager's image, args, command, env,
/// mounts, ports, resources and security context; the pod's volumes, security context, service
/// account and host settings.
fn deployment_changes(old: &Value, new: &Value) -> Vec<FieldChange> {
    let mut changes = Vec::new();
    let container = "/spec/template/spec/containers/0/";
    for field in [
        "image",
        "args",
        "command",
        "env",
        "envFrom",
        "volumeMounts",
        "ports",
        "resources",
        "securityContext",
    ] {
        let pointer = format!("{container}{field}");
        compare(
            &mut changes,
            &format!("containers[0].{field}"),
            old,
            new,
            &pointer,
        );
    }
    for field in [
        "volumes",
        "securityContext",
        "serviceAccountName",
        "hostNetwork",
        "hostPID",
        "hostIPC",
        "tolerations",
        "nodeSelector",
        "affinity",
        "initContainers",
    ] {
        let pointer = format!("/spec/template/spec/{field}");
        compare(&mut changes, &format!("pod.{field}"), old, new, &pointer);
    }
    let count = |d: &Value| {
        d.pointer("/spec/template/spec/containers")
            .and_then(Value::as_array)
            .map_or(0, Vec::len)
    };
    if count(old) != count(new) {
        changes.push(FieldChange {
            field: "containers (count)".into(),
            before: count(old).into(),
            after: count(new).into(),
        });
    }
    changes
}

fn compare(changes: &mut Vec<FieldChange>, field: &str, old: &Value, new: &Value, pointer: &str) {
    let (a, b) = (
        old.pointer(pointer).cloned().unwrap_or(Value::Null),
        new.pointer(pointer).cloned().unwrap_or(Value::Null),
    );
    if a != b {
        changes.push(FieldChange {
            field: field.to_owned(),
            before: a,
            after: b,
        });
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn crd(schema: Value, versions: &[(&str, bool, bool)]) -> Value {
        json!({
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "fluxinstances.fluxcd.controlplane.io"},
            "spec": {"versions": versions.iter().map(|(name, served, storage)| json!({
                "name": name, "served": served, "storage": storage,
                "schema": {"openAPIV3Schema": schema.clone()},
            })).collect::<Vec<_>>()},
        })
    }

    fn deployment(image: &str, args: &[&str]) -> Value {
        json!({
            "kind": "Deployment",
            "metadata": {"name": "flux-operator"},
            "spec": {"template": {"spec": {"containers": [{"name": "manager", "image": image, "args": args}]}}},
        })
    }

    fn role(rules: Value) -> Value {
        json!({"kind": "ClusterRole", "metadata": {"name": "flux-operator-edit"}, "rules": rules})
    }

    fn content(version: &str, objects: Vec<Value>, distributions: &[&str]) -> Content {
        Content {
            version: version.into(),
            digest: format!("sha256:{version}"),
            source: String::new(),
            objects,
            distributions: distributions.iter().map(|d| d.to_string()).collect(),
        }
    }

    #[test]
    fn a_new_release_is_reviewed_field_by_field() {
        let schema = |extra: bool| {
            let mut spec = json!({"type": "object", "properties": {
                "distribution": {"type": "object", "properties": {"version": {"type": "string"}}},
                "components": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}},
            }});
            if extra {
                spec["properties"]["distribution"]["properties"]["channel"] =
                    json!({"type": "string"});
                spec["properties"]["components"]["items"]["enum"] = json!(["a", "b", "c"]);
            }
            json!({"type": "object", "properties": {"spec": spec}})
        };
        let old = content(
            "v0.59.0",
            vec![
                crd(schema(false), &[("v1", true, true)]),
                deployment("ghcr.io/x/flux-operator:v0.59.0", &["--log-level=info"]),
                role(
                    json!([{"apiGroups": ["fluxcd.controlplane.io"], "resources": ["resourcesets"], "verbs": ["create"]}]),
                ),
            ],
            &["v2.9.4"],
        );
        let new = content(
            "v0.60.0",
            vec![
                crd(
                    schema(true),
                    &[("v1", true, true), ("v2alpha1", true, false)],
                ),
                deployment(
                    "ghcr.io/x/flux-operator:v0.60.0",
                    &["--log-level=info", "--new-flag"],
                ),
                role(json!([
                    {"apiGroups": ["fluxcd.controlplane.io"], "resources": ["resourcesets"], "verbs": ["create"]},
                    {"apiGroups": ["fluxcd.controlplane.io"], "resources": ["fluxschedules"], "verbs": ["create"]},
                ])),
                json!({"kind": "Service", "metadata": {"name": "flux-operator-webhook"}}),
            ],
            &["v2.9.4", "v2.10.1"],
        );
        let review = review(&new, &old);
        assert_eq!(review.crds_changed.len(), 1);
        let crd = &review.crds_changed[0];
        assert_eq!(
            crd.versions,
            Some((
                vec!["v1 (served, storage)".to_owned()],
                vec![
                    "v1 (served, storage)".to_owned(),
                    "v2alpha1 (served)".to_owned()
                ]
            ))
        );
        let paths: Vec<(&str, &str)> = crd
            .schema
            .iter()
            .map(|c| (c.path.as_str(), c.change.as_str()))
            .collect();
        assert_eq!(
            paths,
            [
                (
                    "spec.components[]",
                    "enum [\"a\",\"b\"] -> [\"a\",\"b\",\"c\"]"
                ),
                ("spec.distribution.channel", "added (string)"),
            ]
        );
        assert_eq!(review.rules_added.len(), 1);
        assert_eq!(review.rules_added[0].resources, ["fluxschedules"]);
        let fields: Vec<&str> = review.deployment.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(fields, ["containers[0].image", "containers[0].args"]);
        assert_eq!(review.objects_added, ["Service flux-operator-webhook"]);
        assert_eq!(review.distributions_added, ["v2.10.1"]);
        assert!(!review.is_empty());
        assert!(super::review(&old, &old).is_empty());
    }

    #[test]
    fn the_stated_version_is_the_image_tag() {
        let objects = vec![deployment(
            "ghcr.io/x/flux-operator:v0.60.0@sha256:abc",
            &[],
        )];
        assert_eq!(
            Content::stated_version(&objects).as_deref(),
            Some("v0.60.0")
        );
        assert_eq!(Content::stated_version(&[]), None);
    }
}
