//! What the agent reports about its cluster, in the agent's own terms. `server::convert` turns
//! it into `tenantflux.v1.Status`; nothing here knows the wire format.

use std::time::SystemTime;
pub use tenantflux_core::policy::enforcement::Enforcement;

pub use crate::operator::OperatorPhase;

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Status {
    pub agent: AgentInfo,
    pub operator: OperatorStatus,
    pub instance: InstanceStatus,
    /// Absent until the agent holds a verified policy.
    pub policy: Option<PolicyStatus>,
    /// When the agent last saw any of the above change; set by the publisher.
    pub observed_at: Option<SystemTime>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Health {
    #[default]
    Ok,
    /// The agent serves but something it needs is not working; see [`AgentInfo::problems`].
    Degraded,
}

#[derive(Clone, Debug, PartialEq)]
pub struct AgentInfo {
    pub version: String,
    pub namespace: String,
    pub health: Health,
    /// One line per problem, each saying what is wrong and with what object.
    pub problems: Vec<String>,
    pub kubernetes_version: String,
    pub started_at: SystemTime,
    /// The UID of namespace kube-system (empty until read) and the name set at install.
    pub cluster_uid: String,
    pub cluster_name: String,
}

impl Default for AgentInfo {
    fn default() -> Self {
        Self {
            version: String::new(),
            namespace: String::new(),
            health: Health::default(),
            problems: Vec::new(),
            kubernetes_version: String::new(),
            started_at: SystemTime::UNIX_EPOCH,
            cluster_uid: String::new(),
            cluster_name: String::new(),
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct OperatorStatus {
    pub phase: OperatorPhase,
    /// Why the operator is in this phase, for phases other than Ready.
    pub reason: String,
    pub version: String,
    pub namespace: String,
    pub ready_replicas: i32,
    pub desired_replicas: i32,
    /// Digest of the bundle the operator was installed from, when the agent installed it.
    pub bundle_digest: String,
    pub last_transition: Option<SystemTime>,
    /// Where the agent installs flux-operator from; empty when it only observes.
    pub source: String,
    /// What the install did that the cluster's owner should know, newest last.
    pub notices: Vec<String>,
    /// Why the agent may install the release it installed.
    pub trust: tenantflux_core::policy::Trust,
}

/// A Kubernetes status condition as Flux reports it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Condition {
    pub type_: String,
    /// "True", "False" or "Unknown".
    pub status: String,
    pub reason: String,
    pub message: String,
    pub last_transition: Option<SystemTime>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Component {
    pub name: String,
    pub image: String,
    pub ready: bool,
    pub status: String,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct InstanceStatus {
    /// Whether the FluxInstance exists; all other fields are empty when it does not.
    pub present: bool,
    pub name: String,
    pub namespace: String,
    /// The Ready condition; absent before the operator first reconciles the instance.
    pub ready: Option<Condition>,
    /// spec.distribution.version as the tenant wrote it.
    pub requested_version: String,
    /// The Flux version actually installed.
    pub distribution_version: String,
    pub registry: String,
    pub last_applied_revision: String,
    pub components: Vec<Component>,
    /// Whether the operator's reconciliation is disabled by annotation.
    pub suspended: bool,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct PolicyStatus {
    pub generation: u64,
    pub name: String,
    /// Whether the live FluxInstance complies with the policy (true when there is none).
    pub compliant: bool,
    /// One line per field of the FluxInstance that breaks the policy.
    pub violations: Vec<String>,
    /// Upgrade deadlines coming up.
    pub warnings: Vec<String>,
    pub upgrade_deadline: Option<UpgradeDeadline>,
    /// The id of the key that signed the policy.
    pub key_id: String,
    /// The signed expiry (envelope v2), and whether it has passed: still enforced, and stale.
    pub expires_at: Option<SystemTime>,
    pub stale: bool,
    /// Whether the API server enforces it, as last proven (none before the first verdict).
    pub enforcement: Option<Enforcement>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UpgradeDeadline {
    /// From `date` on, the FluxInstance must allow nothing below this version.
    pub minimum_version: String,
    /// YYYY-MM-DD, UTC.
    pub date: String,
    /// How many days before `date` the agent starts warning.
    pub warn_days: u32,
}
