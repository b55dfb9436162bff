//! The stable `-o json|yaml` shape of a status, made from the agent's answer.

use k8s_openapi::jiff::Timestamp;
use serde::Serialize;
use tenantflux_core::policy::Trust;
use tenantflux_proto::v1 as pb;

/// The stable `-o json|yaml` shape of a status, independent of the wire format.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusView {
    pub agent: AgentView,
    pub operator: OperatorView,
    pub instance: InstanceView,
    pub policy: Option<PolicyView>,
    pub observed_at: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentView {
    pub version: String,
    pub namespace: String,
    /// `ok`, `degraded` or `unknown`.
    #[serde(serialize_with = "crate::state::word")]
    pub health: pb::Health,
    pub problems: Vec<String>,
    pub kubernetes_version: String,
    pub started_at: Option<String>,
    /// The UID of namespace kube-system: who this cluster is to a policy's `spec.clusters`.
    pub cluster_uid: String,
    /// The name set at the agent's install (`--cluster-name`), if any.
    pub cluster_name: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OperatorView {
    /// `not-installed`, `waiting-for-api`, `applying-crds`, `waiting-for-operator`, `ready`,
    /// `failed` or `unknown`.
    #[serde(serialize_with = "crate::state::word")]
    pub phase: pb::OperatorPhase,
    pub reason: String,
    pub version: String,
    pub namespace: String,
    pub ready_replicas: i32,
    pub desired_replicas: i32,
    pub bundle_digest: String,
    /// Where the agent installs flux-operator from; empty when it only observes.
    pub source: String,
    /// What the install did that the cluster's owner should know (objects taken over from
    /// another field manager).
    pub notices: Vec<String>,
    pub last_transition: Option<String>,
    /// Why the agent may install this release: `known` (its build knows it), `vouched` (the
    /// platform vouched for its digest in policy generation `vouchedGeneration`), or empty
    /// when the agent installed nothing.
    pub trust: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vouched_generation: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceView {
    pub present: bool,
    pub name: String,
    pub namespace: String,
    pub ready: Option<ConditionView>,
    pub requested_version: String,
    pub distribution_version: String,
    pub registry: String,
    pub last_applied_revision: String,
    pub suspended: bool,
    pub components: Vec<ComponentView>,
}

impl InstanceView {
    /// Its Ready condition's status; Unknown before the operator first reconciles it.
    pub fn ready_status(&self) -> pb::ConditionStatus {
        self.ready
            .as_ref()
            .map_or(pb::ConditionStatus::Unknown, |c| c.status)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConditionView {
    /// `True`, `False` or `Unknown`, as Kubernetes writes it.
    #[serde(serialize_with = "crate::state::word")]
    pub status: pb::ConditionStatus,
    pub reason: String,
    pub message: String,
    pub last_transition: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ComponentView {
    pub name: String,
    pub ready: bool,
    pub image: String,
    pub status: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyView {
    pub generation: u64,
    pub name: String,
    /// Whether the live FluxInstance complies.
    pub compliant: bool,
    pub violations: Vec<String>,
    /// Upgrade deadlines coming up.
    pub warnings: Vec<String>,
    pub upgrade_deadline: Option<DeadlineView>,
    /// The id of the key that signed it.
    pub key_id: String,
    /// Its signed expiry (envelope v2).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// Past its expiry: still enforced, but stale.
    pub stale: bool,
    /// Whether the API server is proven to enforce it (absent before the first verdict).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enforcement: Option<EnforcementView>,
}

/// The agent's verdict on whether the API server enforces the policy.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EnforcementView {
    pub enforced: bool,
    /// Since when the verdict holds (RFC 3339).
    pub since: Option<String>,
    /// When the agent last proved it.
    pub checked_at: Option<String>,
    /// Why not, when not enforced.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

impl EnforcementView {
    pub fn from_wire(verdict: Option<pb::Enforcement>) -> Option<Self> {
        verdict.map(|v| Self {
            enforced: v.enforced,
            since: timestamp(v.since),
            checked_at: timestamp(v.checked_at),
            reason: v.reason,
        })
    }

    /// `yes (proven since T, last at T)` or `NOT ENFORCED since T: why`.
    pub fn line(&self) -> String {
        let since = self.since.as_deref().unwrap_or("-");
        if self.enforced {
            match &self.checked_at {
                Some(at) if at != since => format!("yes (proven since {since}, last at {at})"),
                _ => format!("yes (proven at {since})"),
            }
        } else {
            format!("NOT ENFORCED since {since}: {}", self.reason)
        }
    }
}

/// The policy's upgrade deadline: from `date` (UTC) on, Flux must be at least
/// `minimum_version`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeadlineView {
    pub minimum_version: String,
    pub date: String,
}

fn timestamp(ts: Option<prost_types::Timestamp>) -> Option<String> {
    let ts = ts?;
    Timestamp::new(ts.seconds, ts.nanos)
        .ok()
        .map(|t| t.to_string())
}

fn trust_word(value: pb::ReleaseTrust) -> &'static str {
    match value {
        pb::ReleaseTrust::Known => "known",
        pb::ReleaseTrust::Vouched => "vouched",
        pb::ReleaseTrust::Unspecified => "",
    }
}

impl OperatorView {
    /// Why the agent may install the release, as the one domain type (its words are shared by
    /// every view: status, fleet, the dashboards).
    pub fn trust(&self) -> Trust {
        match (self.trust, self.vouched_generation) {
            ("known", _) => Trust::Known,
            ("vouched", Some(generation)) => Trust::Vouched { generation },
            _ => Trust::None,
        }
    }
}

pub fn or_dash(value: &str) -> &str {
    if value.is_empty() { "-" } else { value }
}

impl From<pb::Status> for StatusView {
    fn from(status: pb::Status) -> Self {
        let agent = status.agent.unwrap_or_default();
        let operator = status.operator.unwrap_or_default();
        let trust = operator.trust();
        let (health, phase) = (agent.health(), operator.phase());
        let instance = status.instance.unwrap_or_default();
        Self {
            agent: AgentView {
                version: agent.version,
                namespace: agent.namespace,
                health,
                problems: agent.problems,
                kubernetes_version: agent.kubernetes_version,
                started_at: timestamp(agent.started_at),
                cluster_uid: agent.cluster_uid,
                cluster_name: agent.cluster_name,
            },
            operator: OperatorView {
                phase,
                reason: operator.reason,
                version: operator.version,
                namespace: operator.namespace,
                ready_replicas: operator.ready_replicas,
                desired_replicas: operator.desired_replicas,
                bundle_digest: operator.bundle_digest,
                source: operator.source,
                last_transition: timestamp(operator.last_transition),
                trust: trust_word(trust),
                vouched_generation: (trust == pb::ReleaseTrust::Vouched)
                    .then_some(operator.vouched_generation),
                notices: operator.notices,
            },
            instance: InstanceView {
                present: instance.present,
                name: instance.name,
                namespace: instance.namespace,
                ready: instance.ready.map(|c| ConditionView {
                    status: c.status(),
                    reason: c.reason,
                    message: c.message,
                    last_transition: timestamp(c.last_transition),
                }),
                requested_version: instance.requested_version,
                distribution_version: instance.distribution_version,
                registry: instance.registry,
                last_applied_revision: instance.last_applied_revision,
                suspended: instance.suspended,
                components: instance
                    .components
                    .into_iter()
                    .map(|c| ComponentView {
                        name: c.name,
                        ready: c.ready,
                        image: c.image,
                        status: c.status,
                    })
                    .collect(),
            },
            policy: status.policy.map(|p| PolicyView {
                generation: p.generation,
                name: p.name,
                compliant: p.compliant,
                violations: p.violations,
                warnings: p.warnings,
                upgrade_deadline: p.upgrade_deadline.map(|d| DeadlineView {
                    minimum_version: d.minimum_version,
                    date: d.date,
                }),
                key_id: p.key_id,
                expires_at: timestamp(p.expires_at),
                stale: p.stale,
                enforcement: EnforcementView::from_wire(p.enforcement),
            }),
            observed_at: timestamp(status.observed_at),
        }
    }
}
