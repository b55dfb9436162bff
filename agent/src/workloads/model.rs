//! What the workloads calls take and answer, in the agent's own terms; `server::workloads`
//! converts them from and to `tenantflux.v1` messages.

use std::sync::Arc;

use tenantflux_core::{names, selector::Selector};

use super::{
    WorkloadsError,
    catalog::FluxKind,
    rows::{Cached, StatusSelector},
};

/// An object a call names.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObjectRef {
    pub kind: String,
    pub namespace: String,
    pub name: String,
}

/// A cached object of `kind`, as served at `api_version`.
#[derive(Clone, Debug)]
pub struct Object {
    pub kind: &'static FluxKind,
    pub api_version: String,
    pub cached: Arc<Cached>,
}

/// A kind of the catalog and whether and how the cluster serves it.
#[derive(Clone, Debug)]
pub struct KindInfo {
    pub kind: &'static FluxKind,
    pub preferred_version: Option<String>,
    pub served_versions: Vec<String>,
}

/// A kind an "all" request left out because the caller may not use it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skipped {
    pub kind: &'static str,
    pub reason: String,
}

#[derive(Clone, Debug)]
pub struct Listing {
    pub objects: Vec<Object>,
    pub skipped: Vec<Skipped>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
    /// Every object that existed when the watch started was sent.
    Synced,
}

#[derive(Clone, Debug)]
pub struct Event {
    pub type_: EventType,
    pub object: Option<Object>,
}

/// What a reconcile (or resume) requested, on the object and, when asked, on its source.
#[derive(Clone, Debug)]
pub struct Reconciled {
    pub object: Object,
    pub requested_at: String,
    pub source: Option<Object>,
}

/// What a list or watch asks for; empty strings mean "any".
#[derive(Clone, Debug, Default)]
pub struct Query {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub label_selector: String,
    /// A condition type and status, e.g. ("ready", "false").
    pub status: Option<(String, String)>,
}

/// The filters of a list or watch, checked once.
pub(super) struct Filter {
    pub namespace: Option<String>,
    name: Option<String>,
    labels: Selector,
    status: Option<StatusSelector>,
}

fn non_empty(value: &str) -> Option<&str> {
    (!value.is_empty()).then_some(value)
}

impl Filter {
    pub fn new(query: &Query) -> Result<Self, WorkloadsError> {
        if let Some(namespace) = non_empty(&query.namespace) {
            names::namespace("namespace", namespace).map_err(WorkloadsError::InvalidArgument)?;
        }
        if let Some(name) = non_empty(&query.name) {
            names::object_name("name", name).map_err(WorkloadsError::InvalidArgument)?;
        }
        Ok(Self {
            namespace: non_empty(&query.namespace).map(str::to_owned),
            name: non_empty(&query.name).map(str::to_owned),
            labels: Selector::parse(&query.label_selector)
                .map_err(|e| WorkloadsError::InvalidArgument(e.to_string()))?,
            status: query
                .status
                .as_ref()
                .map(|(type_, status)| StatusSelector::new(type_, status))
                .transpose()
                .map_err(|e| WorkloadsError::InvalidArgument(e.to_string()))?,
        })
    }

    pub fn pass(&self, object: &Cached) -> bool {
        self.namespace
            .as_deref()
            .is_none_or(|ns| object.namespace == ns)
            && self.name.as_deref().is_none_or(|n| object.name == n)
            && self.labels.matches(&object.labels)
            && self
                .status
                .as_ref()
                .is_none_or(|s| s.matches(&object.conditions))
    }
}

#[cfg(test)]
mod tests {
    use kube::api::DynamicObject;

    use super::*;
    use crate::workloads::catalog;

    #[test]
    fn filters_apply_namespace_name_labels_and_status() {
        let object: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "v", "kind": "K",
            "metadata": {"name": "a", "namespace": "ns", "labels": {"x": "1"}},
            "status": {"conditions": [{"type": "Ready", "status": "False"}]}
        }))
        .unwrap();
        let object = Cached::new(catalog::find("ks").unwrap(), object);
        let query = |ns: &str, name: &str, labels: &str, status: Option<(&str, &str)>| Query {
            kind: String::new(),
            namespace: ns.into(),
            name: name.into(),
            label_selector: labels.into(),
            status: status.map(|(t, s)| (t.into(), s.into())),
        };
        let pass = |ns: &str, name: &str, labels: &str, status: Option<(&str, &str)>| {
            Filter::new(&query(ns, name, labels, status))
                .unwrap()
                .pass(&object)
        };
        assert!(pass("", "", "", None));
        assert!(pass("ns", "a", "x=1", Some(("ready", "false"))));
        assert!(!pass("other", "", "", None));
        assert!(!pass("", "b", "", None));
        assert!(!pass("", "", "x=2", None));
        assert!(!pass("", "", "", Some(("ready", "true"))));
        assert!(Filter::new(&query("", "", "", Some(("ready", "perhaps")))).is_err());
        assert!(Filter::new(&query("Bad/ns", "", "", None)).is_err());
    }
}
