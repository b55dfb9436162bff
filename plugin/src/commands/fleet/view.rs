//! What the fleet commands print: one row per cluster, for `-o table|json|yaml`. Pure: built
//! from what each agent answered (or why it could not be asked) and the day.

use serde::Serialize;
use tenantflux_core::policy::{ClusterIdentity, Policy, Range, Trust, parse_date};
use tenantflux_proto::v1 as pb;

use super::discover::Member;
use crate::views::status::StatusView;

/// How far the plugin got with a cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Reach {
    /// The agent answered.
    Ok,
    /// The cluster's API server or the agent did not answer (in time).
    Unreachable,
    /// The cluster answered but runs no agent (or not its ServiceAccounts).
    NoAgent,
    /// Anything else: an unreadable kubeconfig, a permission, an agent error.
    Error,
}

impl Reach {
    pub(super) fn shown(self) -> &'static str {
        match self {
            Self::Ok => "Ok",
            Self::Unreachable => "Unreachable",
            Self::NoAgent => "NoAgent",
            Self::Error => "Error",
        }
    }
}

/// Why a cluster could not be asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    pub reach: Reach,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FleetStatus {
    pub clusters: Vec<StatusRow>,
}

impl FleetStatus {
    pub fn failed(&self) -> usize {
        self.clusters
            .iter()
            .filter(|c| c.state != Reach::Ok)
            .count()
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusRow {
    pub tenant: String,
    pub cluster: String,
    pub state: Reach,
    /// Why the cluster could not be asked (state other than ok).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub agent_version: Option<String>,
    pub operator_version: Option<String>,
    /// The policy generation that vouched for the flux-operator release the agent installed,
    /// when the agent's build does not know that release.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operator_vouched_by: Option<u64>,
    /// The Flux version installed (the FluxInstance's distribution).
    pub flux_version: Option<String>,
    /// The FluxInstance's Ready condition: `True`, `False`, `Unknown`; none without one.
    #[serde(serialize_with = "crate::state::optional_word")]
    pub ready: Option<pb::ConditionStatus>,
    pub policy_name: Option<String>,
    pub policy_generation: Option<u64>,
    /// The id of the key that signed the policy the cluster holds.
    pub policy_key_id: Option<String>,
    /// The signed expiry of the policy the cluster holds (envelope v2).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy_expires_at: Option<String>,
    /// Past its expiry: the agent still enforces it; nothing newer reached it (a frozen
    /// cluster, or a platform that stopped publishing).
    pub policy_stale: bool,
    /// Where the cluster stands against the channel `--channel` names: `current`,
    /// `behind (N)`, `ahead (N)` (pushed past it), `stale (expired)` or `bound elsewhere`
    /// (the channel's policy is for other clusters).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    /// The cluster's identity as its agent reports it (the UID of kube-system, its name).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster_uid: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster_name: Option<String>,
    /// How the cluster's identity as its agent reports it differs from what the platform
    /// knows of it (see [`StatusRow::check_identity`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub identity_mismatch: Option<String>,
    /// How the policy the cluster holds differs from the one `--expect-policy` names.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy_mismatch: Option<String>,
    /// Whether the API server of the cluster is proven to enforce the policy it holds: none
    /// without a policy or before the agent's first verdict.
    pub enforced: Option<bool>,
    /// Since when it is not enforced, and why (the agent's verdict).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_enforced: Option<String>,
    /// Whether the cluster complies with the policy it holds; none without a policy.
    pub compliant: Option<bool>,
    pub violations: Vec<String>,
    pub deadline: Option<DeadlineRow>,
    /// When the agent last saw anything change.
    pub last_change: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeadlineRow {
    pub minimum_version: String,
    pub date: String,
    /// Whether the date has come (UTC, by this machine's clock).
    pub passed: bool,
}

impl StatusRow {
    fn empty(member: &Member, state: Reach, reason: Option<String>) -> Self {
        Self {
            tenant: member.tenant.clone(),
            cluster: member.cluster.clone(),
            state,
            reason,
            agent_version: None,
            operator_version: None,
            operator_vouched_by: None,
            flux_version: None,
            ready: None,
            policy_name: None,
            policy_generation: None,
            policy_key_id: None,
            policy_expires_at: None,
            policy_stale: false,
            channel: None,
            cluster_uid: None,
            cluster_name: None,
            identity_mismatch: None,
            policy_mismatch: None,
            enforced: None,
            not_enforced: None,
            compliant: None,
            violations: Vec::new(),
            deadline: None,
            last_change: None,
        }
    }

    pub fn failed(member: &Member, failure: Failure) -> Self {
        Self::empty(member, failure.reach, Some(failure.reason))
    }

    /// The row of an agent's status on `today` (days since 1970-01-01, UTC). Past the
    /// policy's upgrade deadline, a cluster whose installed Flux is below the minimum does
    /// not comply, whatever its FluxInstance asks for: the management view sees what runs.
    pub fn answered(member: &Member, status: StatusView, today: i64) -> Self {
        let non_empty = |s: String| (!s.is_empty()).then_some(s);
        let mut row = Self::empty(member, Reach::Ok, None);
        row.agent_version = non_empty(status.agent.version);
        row.cluster_uid = non_empty(status.agent.cluster_uid);
        row.cluster_name = non_empty(status.agent.cluster_name);
        if let Trust::Vouched { generation } = status.operator.trust() {
            row.operator_vouched_by = Some(generation);
        }
        row.operator_version = non_empty(status.operator.version);
        let instance = status.instance;
        if instance.present {
            row.ready = Some(instance.ready_status());
            row.flux_version = non_empty(instance.distribution_version);
        }
        row.last_change = status.observed_at;
        let Some(policy) = status.policy else {
            return row;
        };
        row.policy_name = Some(policy.name);
        row.policy_generation = Some(policy.generation);
        row.policy_key_id = non_empty(policy.key_id);
        row.policy_expires_at = policy.expires_at;
        row.policy_stale = policy.stale;
        if let Some(verdict) = &policy.enforcement {
            row.enforced = Some(verdict.enforced);
            row.not_enforced = (!verdict.enforced).then(|| verdict.line());
        }
        row.violations = policy.violations;
        let mut compliant = policy.compliant;
        if let Some(deadline) = policy.upgrade_deadline {
            let passed = parse_date(&deadline.date).is_some_and(|day| day <= today);
            let below = |installed: &str| {
                let release = |text: &str| Range::parse(text).ok().map(|r| r.low());
                matches!((release(installed), release(&deadline.minimum_version)),
                    (Some(installed), Some(minimum)) if installed < minimum)
            };
            if let Some(installed) = row.flux_version.as_deref()
                && passed
                && below(installed)
            {
                compliant = false;
                row.violations.push(format!(
                    "Flux {installed} is below {}, required since {}",
                    deadline.minimum_version, deadline.date
                ));
            }
            row.deadline = Some(DeadlineRow {
                minimum_version: deadline.minimum_version,
                date: deadline.date,
                passed,
            });
        }
        row.compliant = Some(compliant);
        row
    }
}

/// What the management side knows of a cluster, independently of its agent.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct KnownIdentity {
    /// The name the platform gives it (the Secret's cluster, the fleet file's name).
    pub name: String,
    /// The kube-system UID the platform recorded for it, if any.
    pub recorded_uid: Option<String>,
    /// The kube-system UID read through the API server the agent was reached through, with
    /// the platform's own kubeconfig.
    pub api_uid: Option<String>,
}

impl StatusRow {
    /// Flags this row when the agent's account of its cluster does not agree with what the
    /// platform knows: the tenant runs the agent and sets its name, so only a UID the
    /// platform itself read or recorded binds.
    pub fn check_identity(&mut self, known: &KnownIdentity) {
        if self.state != Reach::Ok {
            return;
        }
        let reported = self.cluster_uid.as_deref().unwrap_or("");
        let mut problems = Vec::new();
        if let Some(api) = known.api_uid.as_deref()
            && api != reported
        {
            problems.push(format!(
                "the agent reports cluster uid {reported:?}, but kube-system of the API server it was reached through has uid {api:?}"
            ));
        }
        if let Some(recorded) = known.recorded_uid.as_deref() {
            let actual = known.api_uid.as_deref().unwrap_or(reported);
            if recorded != actual {
                problems.push(format!(
                    "the platform recorded uid {recorded:?} for {}, but this cluster has uid {actual:?}: its kubeconfig reaches another cluster",
                    known.name
                ));
            }
        }
        if let Some(name) = self.cluster_name.as_deref()
            && name != known.name
        {
            problems.push(format!(
                "the agent calls its cluster {name:?} (TENANTFLUX_CLUSTER_NAME, the tenant's to set), the platform knows it as {:?}: policies bound by name follow the tenant's choice",
                known.name
            ));
        }
        self.identity_mismatch = (!problems.is_empty()).then(|| problems.join("; "));
    }
}

/// The policy the platform pushed, as `fleet status --expect-policy` compares each cluster's
/// with: a cluster holding another generation or a policy of another key (a rollback, a
/// replay, a key the platform did not sign with) is flagged.
#[derive(Debug, Clone, PartialEq)]
pub struct ExpectedPolicy {
    pub generation: u64,
    pub key_id: String,
}

impl StatusRow {
    /// Flags this row when the cluster answered and holds anything but `expected`.
    pub fn compare(&mut self, expected: &ExpectedPolicy) {
        if self.state != Reach::Ok {
            return;
        }
        let pushed = format!(
            "the platform pushed generation {} (key {})",
            expected.generation, expected.key_id
        );
        self.policy_mismatch = match (self.policy_generation, self.policy_key_id.as_deref()) {
            (Some(g), Some(k)) if g == expected.generation && k == expected.key_id => None,
            (Some(g), k) => Some(format!(
                "holds policy generation {g} (key {}); {pushed}",
                k.unwrap_or("-")
            )),
            (None, _) => Some(format!("holds no policy; {pushed}")),
        };
    }
}

/// What a policy channel holds now (`fleet status --channel`): read once for the whole fleet.
#[derive(Debug, Clone, PartialEq)]
pub struct ChannelPolicy {
    pub channel: String,
    pub digest: String,
    pub policy: Policy,
}

impl StatusRow {
    /// Marks where this cluster stands against the channel's policy (nothing when the
    /// cluster could not be asked).
    pub fn against(&mut self, channel: &ChannelPolicy) {
        if self.state != Reach::Ok {
            return;
        }
        let identity = ClusterIdentity {
            uid: self.cluster_uid.clone().unwrap_or_default(),
            name: self.cluster_name.clone(),
        };
        let latest = channel.policy.generation();
        self.channel = Some(match self.policy_generation {
            _ if channel.policy.is_for(&identity).is_err() => "bound elsewhere".to_owned(),
            Some(_) if self.policy_stale => "stale (expired)".to_owned(),
            Some(held) if held == latest => "current".to_owned(),
            Some(held) if held > latest => format!("ahead ({})", held - latest),
            Some(held) => format!("behind ({})", latest - held),
            None => format!("behind ({latest})"),
        });
    }

    /// Whether `against` found the cluster behind the channel or holding an expired policy.
    pub fn lags(&self) -> bool {
        self.channel
            .as_deref()
            .is_some_and(|c| c.starts_with("behind") || c.starts_with("stale"))
    }
}

/// What became of a policy pushed to one cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PushResult {
    Accepted,
    /// The agent already held this generation with this content: nothing to do.
    Unchanged,
    /// The agent refused it (stale generation, signature, no key), with its reason.
    Rejected,
    Unreachable,
    NoAgent,
    Error,
}

impl PushResult {
    pub fn succeeded(self) -> bool {
        matches!(self, Self::Accepted | Self::Unchanged)
    }

    pub(super) fn shown(self) -> &'static str {
        match self {
            Self::Accepted => "accepted",
            Self::Unchanged => "unchanged",
            Self::Rejected => "rejected",
            Self::Unreachable => "unreachable",
            Self::NoAgent => "no agent",
            Self::Error => "error",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FleetPush {
    pub policy: String,
    pub generation: u64,
    pub clusters: Vec<PushRow>,
}

impl FleetPush {
    pub fn failed(&self) -> usize {
        self.clusters
            .iter()
            .filter(|c| !c.result.succeeded())
            .count()
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PushRow {
    pub tenant: String,
    pub cluster: String,
    pub result: PushResult,
    /// The generation held before the push (0: none), when the agent accepted it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub previous_generation: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl PushRow {
    pub fn new(member: &Member, result: PushResult, reason: Option<String>) -> Self {
        Self {
            tenant: member.tenant.clone(),
            cluster: member.cluster.clone(),
            result,
            previous_generation: None,
            reason,
        }
    }

    pub fn failed(member: &Member, failure: Failure) -> Self {
        let result = match failure.reach {
            Reach::Ok | Reach::Error => PushResult::Error,
            Reach::Unreachable => PushResult::Unreachable,
            Reach::NoAgent => PushResult::NoAgent,
        };
        Self::new(member, result, Some(failure.reason))
    }
}
