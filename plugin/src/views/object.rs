//! The stable `-o json|yaml` shape of a Flux object, made from the agent's answer: what `get`
//! prints and `dashboard` shows.

use std::collections::BTreeMap;

use serde::Serialize;
use tenantflux_proto::v1 as pb;

/// The stable `-o json|yaml` shape of a Flux object.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectView {
    pub kind: String,
    pub api_version: String,
    pub namespace: String,
    pub name: String,
    pub revision: String,
    pub suspended: bool,
    pub ready: Option<ConditionView>,
    pub labels: BTreeMap<String, String>,
    pub generation: i64,
    pub observed_generation: i64,
    pub last_handled_reconcile_at: String,
    pub source: Option<RefView>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConditionView {
    /// `True`, `False` or `Unknown`, as Kubernetes writes it.
    #[serde(serialize_with = "crate::state::word")]
    pub status: pb::ConditionStatus,
    pub reason: String,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RefView {
    pub kind: String,
    pub namespace: String,
    pub name: String,
}

impl From<pb::FluxObject> for ObjectView {
    fn from(o: pb::FluxObject) -> Self {
        Self {
            kind: o.kind,
            api_version: o.api_version,
            namespace: o.namespace,
            name: o.name,
            revision: o.revision,
            suspended: o.suspended,
            ready: o.ready.map(|c| ConditionView {
                status: c.status(),
                reason: c.reason,
                message: c.message,
            }),
            labels: o.labels.into_iter().collect(),
            generation: o.generation,
            observed_generation: o.observed_generation,
            last_handled_reconcile_at: o.last_handled_reconcile_at,
            source: o.source.map(|s| RefView {
                kind: s.kind,
                namespace: s.namespace,
                name: s.name,
            }),
        }
    }
}

impl ObjectView {
    /// Its Ready condition's status; Unknown before the controller first reports it.
    pub fn ready_status(&self) -> pb::ConditionStatus {
        self.ready
            .as_ref()
            .map_or(pb::ConditionStatus::Unknown, |c| c.status)
    }

    pub fn message(&self) -> &str {
        self.ready.as_ref().map_or("", |c| c.message.as_str())
    }

    pub fn title(&self) -> String {
        format!("{} {}/{}", self.kind, self.namespace, self.name)
    }
}
