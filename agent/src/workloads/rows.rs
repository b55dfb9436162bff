//! What `flux get` shows of an object, read from its JSON as its kind says: revision, Ready,
//! suspended, source; and the status selectors (`--status-selector ready=false`).

use serde_json::Value;

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
    }
}

/// Every field of an object's spec and status that [`row`] and [`StatusSelector`] read, as
/// JSON pointers below the object's top level (metadata is kept whole, annotations included,
/// for the kinds suspended by one).
const ROW_FIELDS: &[&str] = &[
    "/spec/suspend",
    "/spec/sourceRef",
    "/spec/chartRef",
    "/spec/chart/spec/sourceRef",
    "/spec/distribution/version",
    "/status/conditions",
    "/status/observedGeneration",
    "/status/lastHandledReconcileAt",
    "/status/artifact/revision",
    "/status/lastAppliedRevision",
    "/status/lastAttemptedRevision",
    "/status/history/0/chartVersion",
    "/status/lastScanResult/scanTime",
    "/status/latestRef",
    "/status/latestImage",
    "/status/lastAutomationRunTime",
    "/status/lastExportedRevision",
];

/// Keeps of an object's body (`spec`, `status`, …, without `metadata`) only what rows,
/// filters and watches read: the cache holds thousands of objects, and their specs,
/// inventories and histories are most of their size.
pub fn compact(body: &mut Value) {
    let mut kept = Value::Object(serde_json::Map::new());
    for pointer in ROW_FIELDS {
        if let Some(value) = body.pointer_mut(pointer) {
            place(&mut kept, pointer, value.take());
        }
    }
    *body = kept;
}

/// Sets `pointer` in `root`, creating the objects (or, for the token `0`, the one-element
/// array) on the way.
fn place(root: &mut Value, pointer: &str, value: Value) {
    let tokens: Vec<&str> = pointer.split('/').skip(1).collect();
    let mut at = root;
    for (i, token) in tokens.iter().enumerate() {
        let last = i + 1 == tokens.len();
        let next = if last {
            value.clone()
        } else if tokens[i + 1] == "0" {
            Value::Array(Vec::new())
        } else {
            Value::Object(serde_json::Map::new())
        };
        at = match at {
            Value::Array(items) => {
                if items.is_empty() {
                    items.push(next);
                }
                &mut items[0]
            }
            Value::Object(map) => map.entry(token.to_string()).or_insert(next),
            _ => return,
        };
    }
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

    /// Whether the object has the condition with that status; an object without the
    /// condition matches `unknown` only.
    pub fn matches(&self, object: &Value) -> bool {
        match condition(object, &self.type_) {
            Some(c) => c.status == self.status,
            None => self.status == "Unknown",
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn a_compacted_object_gives_the_same_row_and_selections() {
        let kustomization = json!({
            "metadata": {"name": "app", "namespace": "apps"},
            "spec": {"interval": "10m", "path": "./", "prune": true, "suspend": true,
                     "sourceRef": {"kind": "GitRepository", "name": "repo"}},
            "status": {"observedGeneration": 3, "lastAppliedRevision": "main@sha1:abc",
                       "lastHandledReconcileAt": "2026-12-01T10:00:00Z",
                       "inventory": {"entries": [{"id": "apps_x__ConfigMap", "v": "v1"}]},
                       "conditions": [{"type": "Ready", "status": "False", "reason": "Failed",
                                       "message": "boom", "lastTransitionTime": "2026-12-01T10:00:00Z"}]}
        });
        let release = json!({
            "spec": {"chart": {"spec": {"chart": "podinfo", "sourceRef": {"kind": "HelmRepository", "name": "r"}}},
                     "values": {"big": "x".repeat(4096)}},
            "status": {"history": [{"chartVersion": "6.5.0", "manifest": "y".repeat(4096)},
                                   {"chartVersion": "6.4.0"}],
                       "lastAttemptedRevision": "6.5.0"}
        });
        let instance = json!({
            "metadata": {"annotations": {OPERATOR_RECONCILE_ANNOTATION: "disabled"}},
            "spec": {"distribution": {"version": "2.9.x", "registry": "ghcr.io/fluxcd"},
                     "components": ["source-controller"]}
        });
        for (kind, object) in [
            (kind("Kustomization"), kustomization),
            (kind("HelmRelease"), release),
            (kind("FluxInstance"), instance),
        ] {
            let mut compacted = object.clone();
            let metadata = compacted.as_object_mut().unwrap().remove("metadata");
            compact(&mut compacted);
            if let Some(metadata) = metadata {
                compacted["metadata"] = metadata;
            }
            assert_eq!(row(kind, &compacted), row(kind, &object), "{}", kind.kind);
            for selector in ["ready=false", "ready=true", "reconciling=unknown"] {
                let (type_, status) = selector.split_once('=').unwrap();
                let selector = StatusSelector::new(type_, status).unwrap();
                assert_eq!(selector.matches(&compacted), selector.matches(&object));
            }
            let size = |v: &Value| v.to_string().len();
            assert!(size(&compacted) <= size(&object), "{}", kind.kind);
        }
        let mut release = json!({"status": {"history": [{"chartVersion": "1", "manifest": "m"}]}});
        compact(&mut release);
        assert_eq!(
            release,
            json!({"status": {"history": [{"chartVersion": "1"}]}})
        );
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
    fn status_selectors_match_conditions() {
        let object = json!({"status": {"conditions": [ready("False", "boom")]}});
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
                .matches(&json!({}))
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
