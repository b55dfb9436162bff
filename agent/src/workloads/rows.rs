//! What `flux get` shows of an object, read from its JSON as its kind says: revision, Ready,
//! suspended, source; what the cache keeps of an object (its row and what filters read, not
//! the object); and the status selectors (`--status-selector ready=false`).

use std::{
    collections::BTreeMap,
    hash::{BuildHasher, RandomState},
    sync::OnceLock,
};

use kube::api::DynamicObject;
use serde_json::{Value, json};

use super::catalog::{FluxKind, Revision, SourceRef, SuspendBy};

/// The row `flux get` shows for an object, read from its JSON.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Row {
    pub revision: String,
    pub suspended: bool,
    pub ready: Option<Condition>,
    pub observed_generation: i64,
    pub last_handled_reconcile_at: String,
    /// (kind, namespace, name) of the object's source.
    pub source: Option<(String, String, String)>,
    /// status.artifact.size of a source, in bytes (`flux stats`' storage).
    pub artifact_size: Option<u64>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Condition {
    pub type_: String,
    pub status: String,
    pub reason: String,
    pub message: String,
    pub last_transition: String,
}

fn text(object: &Value, pointer: &str) -> Option<String> {
    object
        .pointer(pointer)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

/// The condition `type_` (case-insensitive) of the object's status.
pub fn condition(object: &Value, type_: &str) -> Option<Condition> {
    let found = object
        .pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| {
            c.get("type")
                .and_then(Value::as_str)
                .is_some_and(|t| t.eq_ignore_ascii_case(type_))
        })?;
    let field = |name: &str| {
        found
            .get(name)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    Some(Condition {
        type_: field("type"),
        status: field("status"),
        reason: field("reason"),
        message: field("message"),
        last_transition: field("lastTransitionTime"),
    })
}

/// Whether the object is suspended, the way its kind says it.
pub fn suspended(kind: &FluxKind, object: &Value) -> bool {
    match kind.suspend {
        SuspendBy::Spec => object.pointer("/spec/suspend").and_then(Value::as_bool) == Some(true),
        SuspendBy::Annotation(annotation) => text(
            object,
            &format!("/metadata/annotations/{}", escape(annotation)),
        )
        .is_some_and(|v| v.eq_ignore_ascii_case("disabled")),
        SuspendBy::ReadOnly => false,
    }
}

/// A JSON pointer token for a key holding `/` (RFC 6901).
fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

fn revision(kind: &FluxKind, object: &Value) -> String {
    let first = |pointers: &[&str]| pointers.iter().find_map(|p| text(object, p));
    match kind.revision {
        Revision::None => None,
        Revision::Artifact => first(&["/status/artifact/revision"]),
        Revision::LastApplied => first(&["/status/lastAppliedRevision"]),
        // As flux: the chart version of the latest release (v2), else what was last applied
        // or attempted.
        Revision::HelmRelease => first(&[
            "/status/history/0/chartVersion",
            "/status/lastAppliedRevision",
            "/status/lastAttemptedRevision",
        ]),
        Revision::ScanTime => first(&["/status/lastScanResult/scanTime"]),
        // v1 reports latestRef; v1beta2 latestImage.
        Revision::LatestImage => object
            .pointer("/status/latestRef")
            .and_then(|r| {
                let name = r.get("name")?.as_str()?;
                let tag = r.get("tag").and_then(Value::as_str).unwrap_or_default();
                Some(if tag.is_empty() {
                    name.to_owned()
                } else {
                    format!("{name}:{tag}")
                })
            })
            .or_else(|| first(&["/status/latestImage"])),
        Revision::LastRun => first(&["/status/lastAutomationRunTime"]),
        Revision::LastExported => first(&["/status/lastExportedRevision"]),
        Revision::Distribution => first(&["/spec/distribution/version"]),
        Revision::Generic => first(&["/status/artifact/revision", "/status/lastAppliedRevision"]),
    }
    .unwrap_or_default()
}

fn source(kind: &FluxKind, object: &Value) -> Option<(String, String, String)> {
    let reference = match kind.source {
        SourceRef::None => None,
        SourceRef::Spec => object.pointer("/spec/sourceRef"),
        SourceRef::HelmChart => object
            .pointer("/spec/chartRef")
            .or_else(|| object.pointer("/spec/chart/spec/sourceRef")),
    }?;
    let kind = reference.get("kind")?.as_str()?.to_owned();
    let name = reference.get("name")?.as_str()?.to_owned();
    let namespace = reference
        .get("namespace")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .or_else(|| {
            object
                .pointer("/metadata/namespace")
                .and_then(Value::as_str)
        })
        .unwrap_or_default()
        .to_owned();
    Some((kind, namespace, name))
}

/// The `flux get` row of an object of `kind`.
pub fn row(kind: &FluxKind, object: &Value) -> Row {
    Row {
        revision: revision(kind, object),
        suspended: suspended(kind, object),
        ready: condition(object, "Ready"),
        observed_generation: object
            .pointer("/status/observedGeneration")
            .and_then(Value::as_i64)
            .unwrap_or_default(),
        last_handled_reconcile_at: text(object, "/status/lastHandledReconcileAt")
            .unwrap_or_default(),
        source: source(kind, object),
        artifact_size: object
            .pointer("/status/artifact/size")
            .and_then(Value::as_u64),
    }
}

/// What the cache keeps of one object: its key, its row and what filters read (labels, the
/// type and status of each condition). Not the object: thousands are cached, and their specs,
/// inventories, histories and managedFields are most of their size and nobody's need.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cached {
    pub namespace: String,
    pub name: String,
    pub resource_version: String,
    pub generation: i64,
    pub labels: BTreeMap<String, String>,
    pub row: Row,
    /// (type, status) of each condition, in the object's order.
    pub conditions: Vec<(String, String)>,
    /// The ids of the object's `status.inventory` (what a Kustomization, HelmRelease or
    /// ResourceSet applied), hashed and sorted: `trace` finds an object's applier here instead
    /// of listing every applier from the API server, at 8 bytes per applied object.
    inventory: Box<[u64]>,
}

impl Cached {
    /// What the cache keeps of `object`, an object of `kind`.
    pub fn new(kind: &FluxKind, object: DynamicObject) -> Self {
        let DynamicObject { metadata, data, .. } = object;
        // The row reads the namespace (a source's default) and the annotations (the kinds
        // suspended by one) of the metadata, and the rest of the body.
        let mut json = data;
        if let Value::Object(body) = &mut json {
            body.insert(
                "metadata".into(),
                json!({"namespace": metadata.namespace, "annotations": metadata.annotations}),
            );
        }
        let mut inventory: Vec<u64> = json
            .pointer("/status/inventory/entries")
            .and_then(Value::as_array)
            .map(|entries| {
                entries
                    .iter()
                    .filter_map(|e| e.get("id")?.as_str().map(inventory_hash))
                    .collect()
            })
            .unwrap_or_default();
        inventory.sort_unstable();
        inventory.dedup();
        Self {
            row: row(kind, &json),
            conditions: conditions(&json),
            inventory: inventory.into(),
            namespace: metadata.namespace.unwrap_or_default(),
            name: metadata.name.unwrap_or_default(),
            resource_version: metadata.resource_version.unwrap_or_default(),
            generation: metadata.generation.unwrap_or_default(),
            labels: metadata.labels.unwrap_or_default(),
        }
    }
}

impl Cached {
    /// Whether the object's inventory holds the object whose inventory id is `id`
    /// (`<namespace>_<name>_<group>_<kind>`, as cli-utils writes it).
    pub fn holds(&self, id: &str) -> bool {
        self.inventory.binary_search(&inventory_hash(id)).is_ok()
    }
}

/// An inventory id's hash, keyed per process so that nobody who writes an inventory can aim
/// a collision at another object's id.
fn inventory_hash(id: &str) -> u64 {
    static KEY: OnceLock<RandomState> = OnceLock::new();
    KEY.get_or_init(RandomState::new).hash_one(id)
}

/// (type, status) of each condition of the object's status.
pub fn conditions(object: &Value) -> Vec<(String, String)> {
    let Some(all) = object
        .pointer("/status/conditions")
        .and_then(Value::as_array)
    else {
        return Vec::new();
    };
    all.iter()
        .filter_map(|c| {
            let field = |name| c.get(name).and_then(Value::as_str).map(str::to_owned);
            Some((field("type")?, field("status").unwrap_or_default()))
        })
        .collect()
}

/// Why a status selector was refused.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid status selector {}: {reason} (expected CONDITION=STATUS, e.g. ready=false)",
    tenantflux_core::text::quote(selector)
)]
pub struct StatusSelectorError {
    pub selector: String,
    pub reason: &'static str,
}

/// A condition type and the status it must have.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatusSelector {
    pub type_: String,
    pub status: String,
}

impl StatusSelector {
    pub fn new(type_: &str, status: &str) -> Result<Self, StatusSelectorError> {
        let invalid = |reason| StatusSelectorError {
            selector: format!("{type_}={status}"),
            reason,
        };
        if type_.trim().is_empty() {
            return Err(invalid("the condition type is empty"));
        }
        let status = match status.trim().to_ascii_lowercase().as_str() {
            "true" => "True",
            "false" => "False",
            "unknown" => "Unknown",
            _ => return Err(invalid("the status must be true, false or unknown")),
        };
        Ok(Self {
            type_: type_.trim().to_owned(),
            status: status.to_owned(),
        })
    }

    /// Whether the object of these `conditions` (see [`conditions`]) has the condition with
    /// that status; an object without the condition matches `unknown` only.
    pub fn matches(&self, conditions: &[(String, String)]) -> bool {
        match conditions
            .iter()
            .find(|(t, _)| t.eq_ignore_ascii_case(&self.type_))
        {
            Some((_, status)) => *status == self.status,
            None => self.status == "Unknown",
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn the_cached_form_keeps_the_row_and_the_selections_not_the_object() {
        let kustomization = json!({
            "metadata": {"name": "app", "namespace": "apps", "labels": {"team": "a"},
                         "generation": 4, "resourceVersion": "17",
                         "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}]},
            "spec": {"interval": "10m", "path": "./", "prune": true, "suspend": true,
                     "sourceRef": {"kind": "GitRepository", "name": "repo"}},
            "status": {"observedGeneration": 3, "lastAppliedRevision": "main@sha1:abc",
                       "lastHandledReconcileAt": "2026-12-01T10:00:00Z",
                       "inventory": {"entries": [{"id": "apps_x__ConfigMap", "v": "v1"}]},
                       "conditions": [{"type": "Ready", "status": "False", "reason": "Failed",
                                       "message": "boom", "lastTransitionTime": "2026-12-01T10:00:00Z"},
                                      {"type": "Reconciling", "status": "True"}]}
        });
        let release = json!({
            "metadata": {"name": "podinfo", "namespace": "apps"},
            "spec": {"chart": {"spec": {"chart": "podinfo", "sourceRef": {"kind": "HelmRepository", "name": "r"}}},
                     "values": {"big": "x".repeat(4096)}},
            "status": {"history": [{"chartVersion": "6.5.0", "manifest": "y".repeat(4096)},
                                   {"chartVersion": "6.4.0"}],
                       "lastAttemptedRevision": "6.5.0"}
        });
        let instance = json!({
            "metadata": {"name": "flux", "namespace": "flux-system",
                         "annotations": {OPERATOR_RECONCILE_ANNOTATION: "disabled"}},
            "spec": {"distribution": {"version": "2.9.x", "registry": "ghcr.io/fluxcd"},
                     "components": ["source-controller"]}
        });
        for (kind, object) in [
            (kind("Kustomization"), kustomization.clone()),
            (kind("HelmRelease"), release),
            (kind("FluxInstance"), instance),
        ] {
            let mut typed = object.clone();
            typed["apiVersion"] = "x.toolkit.fluxcd.io/v1".into();
            typed["kind"] = kind.kind.into();
            let cached = Cached::new(kind, serde_json::from_value(typed).unwrap());
            assert_eq!(cached.row, row(kind, &object), "{}", kind.kind);
            assert_eq!(cached.conditions, conditions(&object), "{}", kind.kind);
            let kept = format!("{cached:?}");
            for dropped in [
                "xxxx",
                "yyyy",
                "apps_x__ConfigMap",
                "managedFields",
                "fieldsV1",
            ] {
                assert!(!kept.contains(dropped), "{}: {kept}", kind.kind);
            }
        }
        let cached = Cached::new(
            kind("ks"),
            serde_json::from_value(json!({"apiVersion": "v", "kind": "Kustomization",
                "metadata": kustomization["metadata"], "status": kustomization["status"]}))
            .unwrap(),
        );
        assert_eq!(
            (cached.namespace.as_str(), cached.name.as_str()),
            ("apps", "app")
        );
        assert_eq!(
            (cached.resource_version.as_str(), cached.generation),
            ("17", 4)
        );
        assert_eq!(cached.labels["team"], "a");
        // The inventory is kept as hashes of its ids, enough to answer who applied an object.
        assert!(cached.holds("apps_x__ConfigMap"));
        assert!(!cached.holds("apps_y__ConfigMap"));
        assert!(!cached.holds("other_x__ConfigMap"));
        for (selector, matches) in [
            ("ready=false", true),
            ("ready=true", false),
            ("reconciling=true", true),
            ("stalled=unknown", true),
        ] {
            let (type_, status) = selector.split_once('=').unwrap();
            let selector = StatusSelector::new(type_, status).unwrap();
            assert_eq!(
                selector.matches(&cached.conditions),
                matches,
                "{selector:?}"
            );
        }
    }

    use tenantflux_core::flux::OPERATOR_RECONCILE_ANNOTATION;

    use crate::workloads::catalog::{GENERATOR_RECONCILE_ANNOTATION, kind};

    use super::*;

    fn ready(status: &str, message: &str) -> Value {
        json!({"type": "Ready", "status": status, "reason": "Reason", "message": message, "lastTransitionTime": "2026-01-01T00:00:00Z"})
    }
    #[test]
    fn rows_read_revision_ready_and_suspend_as_flux_get_does() {
        let git = json!({
            "metadata": {"name": "podinfo", "namespace": "apps"},
            "spec": {"suspend": true},
            "status": {"artifact": {"revision": "main@sha1:abc"}, "conditions": [ready("True", "stored artifact")], "observedGeneration": 3, "lastHandledReconcileAt": "t1"},
        });
        let row = row(kind("gitrepo"), &git);
        assert_eq!(row.revision, "main@sha1:abc");
        assert!(row.suspended);
        assert_eq!(row.ready.as_ref().unwrap().status, "True");
        assert_eq!(row.ready.as_ref().unwrap().message, "stored artifact");
        assert_eq!(row.observed_generation, 3);
        assert_eq!(row.last_handled_reconcile_at, "t1");
        assert_eq!(row.source, None);

        let ks = json!({
            "metadata": {"name": "apps", "namespace": "apps"},
            "spec": {"sourceRef": {"kind": "GitRepository", "name": "podinfo"}},
            "status": {"lastAppliedRevision": "main@sha1:def"},
        });
        let ks_row = super::row(kind("ks"), &ks);
        assert_eq!(ks_row.revision, "main@sha1:def");
        assert!(!ks_row.suspended);
        assert_eq!(ks_row.ready, None);
        assert_eq!(
            ks_row.source,
            Some(("GitRepository".into(), "apps".into(), "podinfo".into()))
        );

        let hr = |status: Value, spec: Value| {
            super::row(
                kind("hr"),
                &json!({"metadata": {"namespace": "apps"}, "spec": spec, "status": status}),
            )
        };
        let chart_spec = json!({"chart": {"spec": {"sourceRef": {"kind": "HelmRepository", "name": "bitnami", "namespace": "flux-system"}}}});
        assert_eq!(
            hr(
                json!({"history": [{"chartVersion": "6.0.0"}], "lastAttemptedRevision": "5.0.0"}),
                chart_spec.clone()
            )
            .revision,
            "6.0.0"
        );
        let attempted = hr(json!({"lastAttemptedRevision": "5.0.0"}), chart_spec);
        assert_eq!(attempted.revision, "5.0.0");
        assert_eq!(
            attempted.source,
            Some((
                "HelmRepository".into(),
                "flux-system".into(),
                "bitnami".into()
            ))
        );
        assert_eq!(
            hr(
                json!({}),
                json!({"chartRef": {"kind": "OCIRepository", "name": "podinfo"}})
            )
            .source,
            Some(("OCIRepository".into(), "apps".into(), "podinfo".into()))
        );

        let policy_v1 = json!({"status": {"latestRef": {"name": "ghcr.io/x/app", "tag": "1.2.3"}}});
        assert_eq!(
            super::row(kind("imagepolicy"), &policy_v1).revision,
            "ghcr.io/x/app:1.2.3"
        );
        let policy_v1beta2 = json!({"status": {"latestImage": "ghcr.io/x/app:1.2.2"}});
        assert_eq!(
            super::row(kind("imagepolicy"), &policy_v1beta2).revision,
            "ghcr.io/x/app:1.2.2"
        );
        assert_eq!(
            super::row(
                kind("imagerepo"),
                &json!({"status": {"lastScanResult": {"scanTime": "2026-01-01T00:00:00Z"}}})
            )
            .revision,
            "2026-01-01T00:00:00Z"
        );
        assert_eq!(
            super::row(
                kind("receiver"),
                &json!({"status": {"webhookPath": "/hook"}})
            )
            .revision,
            ""
        );
        assert_eq!(kind("receiver").revision_column(), "");
        assert_eq!(kind("ks").revision_column(), "REVISION");

        let instance = |value: &str| json!({"metadata": {"annotations": {OPERATOR_RECONCILE_ANNOTATION: value}}, "spec": {"suspend": true}});
        assert!(suspended(kind("instance"), &instance("disabled")));
        assert!(!suspended(kind("instance"), &instance("enabled")));
        assert!(!suspended(kind("instance"), &json!({})));

        let generator = |value: &str| json!({"metadata": {"annotations": {GENERATOR_RECONCILE_ANNOTATION: value}}});
        assert!(suspended(kind("ag"), &generator("Disabled")));
        assert!(!suspended(kind("ag"), &generator("enabled")));
        assert!(!suspended(kind("rset"), &generator("disabled")));
        assert_eq!(
            super::row(
                kind("rsip"),
                &json!({"status": {"lastExportedRevision": "sha256:1"}})
            )
            .revision,
            "sha256:1"
        );
        let report = json!({"spec": {"distribution": {"version": "v2.9.4"}}, "status": {"conditions": [ready("True", "Reporting finished")]}});
        assert_eq!(super::row(kind("fluxreport"), &report).revision, "v2.9.4");
        assert!(!kind("fluxreport").controllable());
        assert!(!kind("externalartifact").controllable());
        assert!(kind("rset").controllable());
        assert_eq!(kind("fluxreport").revision_column(), "VERSION");
    }
    #[test]
    fn discovered_kinds_read_a_generic_revision_and_spec_suspend() {
        let mut registry = tenantflux_core::kinds::Registry::default();
        let probe = registry
            .entry("Probe", "probe.toolkit.fluxcd.io", "probes", true)
            .unwrap();
        let revision = |status: Value| super::row(probe, &json!({"status": status})).revision;
        assert_eq!(
            revision(json!({"artifact": {"revision": "v1@sha256:a"}, "lastAppliedRevision": "x"})),
            "v1@sha256:a"
        );
        assert_eq!(
            revision(json!({"lastAppliedRevision": "main@sha1:b"})),
            "main@sha1:b"
        );
        assert_eq!(revision(json!({"lastAttemptedRevision": "c"})), "");
        let object =
            json!({"spec": {"suspend": true}, "status": {"conditions": [ready("True", "ok")]}});
        let row = super::row(probe, &object);
        assert!(row.suspended);
        assert_eq!(row.ready.unwrap().message, "ok");
        let read_only = registry
            .entry("Probe", "probe.toolkit.fluxcd.io", "probes", false)
            .unwrap();
        assert!(!suspended(read_only, &object));
    }
    #[test]
    fn status_selectors_match_conditions() {
        let object = conditions(&json!({"status": {"conditions": [ready("False", "boom")]}}));
        assert!(
            StatusSelector::new("ready", "false")
                .unwrap()
                .matches(&object)
        );
        assert!(
            StatusSelector::new("Ready", "FALSE")
                .unwrap()
                .matches(&object)
        );
        assert!(
            !StatusSelector::new("ready", "true")
                .unwrap()
                .matches(&object)
        );
        assert!(
            StatusSelector::new("ready", "unknown")
                .unwrap()
                .matches(&conditions(&json!({})))
        );
        assert!(
            !StatusSelector::new("stalled", "true")
                .unwrap()
                .matches(&object)
        );
        let err = StatusSelector::new("ready", "maybe").unwrap_err();
        assert!(err.to_string().contains("ready=maybe"), "{err}");
        assert!(StatusSelector::new("", "true").is_err());
    }
}
