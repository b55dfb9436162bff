//! What the fleet commands print: one row per cluster, for `-o table|json|yaml`. Pure: built
//! from what each agent answered (or why it could not be asked) and the day.

use k8s_openapi::jiff::Timestamp;
use serde::Serialize;
use tenantflux_core::policy::{ClusterIdentity, Policy, Range, parse_date};

use super::discover::Member;
use crate::{
    output::{Cell, Style, Tone, table},
    status::StatusView,
};

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
    fn shown(self) -> &'static str {
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
    /// The Flux version installed (the FluxInstance's distribution).
    pub flux_version: Option<String>,
    /// The FluxInstance's Ready condition: `True`, `False`, `Unknown`; none without one.
    pub ready: Option<String>,
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
    /// How the policy the cluster holds differs from the one `--expect-policy` names.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy_mismatch: Option<String>,
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
            policy_mismatch: None,
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
        row.operator_version = non_empty(status.operator.version);
        let instance = status.instance;
        if instance.present {
            row.flux_version = non_empty(instance.distribution_version);
            row.ready = Some(
                instance
                    .ready
                    .map_or_else(|| "Unknown".to_owned(), |c| c.status),
            );
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

/// kubectl's AGE: the largest unit or two (`45s`, `12m`, `3h4m`, `5d`).
pub fn age(since: &str, now: Timestamp) -> String {
    let Ok(since) = since.parse::<Timestamp>() else {
        return "-".to_owned();
    };
    let seconds = (now.as_second() - since.as_second()).max(0);
    match seconds {
        s if s < 120 => format!("{s}s"),
        s if s < 600 => format!("{}m{}s", s / 60, s % 60),
        s if s < 3 * 3600 => format!("{}m", s / 60),
        s if s < 8 * 3600 => format!("{}h{}m", s / 3600, (s % 3600) / 60),
        s if s < 2 * 86_400 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

fn dash(value: Option<&str>) -> String {
    value.unwrap_or("-").to_owned()
}

pub fn render_status(view: &FleetStatus, style: Style, now: Timestamp) -> String {
    if view.clusters.is_empty() {
        return "No tenant clusters found.\n".to_owned();
    }
    let with_channel = view.clusters.iter().any(|c| c.channel.is_some());
    let rows: Vec<Vec<Cell>> = view
        .clusters
        .iter()
        .map(|row| {
            let ready = match (row.state, row.ready.as_deref()) {
                (Reach::Ok, Some("True")) => Cell::toned("True", Tone::Good),
                (Reach::Ok, Some(other)) => Cell::toned(other, Tone::Bad),
                (Reach::Ok, None) => Cell::plain("-"),
                (state, _) => Cell::toned(state.shown(), Tone::Bad),
            };
            let compliant = match row.compliant {
                Some(true) => Cell::toned("yes", Tone::Good),
                Some(false) => Cell::toned("no", Tone::Bad),
                None => Cell::plain("-"),
            };
            let deadline = match &row.deadline {
                Some(d) if d.passed => format!("{} since {}", d.minimum_version, d.date),
                Some(d) => format!("{} from {}", d.minimum_version, d.date),
                None => "-".to_owned(),
            };
            let message = match (&row.reason, row.violations.as_slice()) {
                (Some(reason), _) => reason.clone(),
                (None, []) => String::new(),
                (None, violations) => violations.join("; "),
            };
            let message = match &row.policy_mismatch {
                Some(mismatch) if message.is_empty() => mismatch.clone(),
                Some(mismatch) => format!("{mismatch}; {message}"),
                None => message,
            };
            let message = match (row.policy_stale, &row.policy_expires_at) {
                (true, at) => {
                    let stale = format!(
                        "stale (expired {}): still enforced, nothing newer verified",
                        at.as_deref().unwrap_or("-")
                    );
                    if message.is_empty() {
                        stale
                    } else {
                        format!("{stale}; {message}")
                    }
                }
                (false, _) => message,
            };
            let key = dash(row.policy_key_id.as_deref());
            let key = match row.policy_mismatch {
                Some(_) => Cell::toned(key, Tone::Bad),
                None => Cell::plain(key),
            };
            let channel = match row.channel.as_deref() {
                Some("current") => Cell::toned("current", Tone::Good),
                Some(c) if row.lags() => Cell::toned(c, Tone::Bad),
                Some(c) => Cell::plain(c),
                None => Cell::plain("-"),
            };
            let mut cells = vec![
                Cell::plain(&row.tenant),
                Cell::plain(&row.cluster),
                Cell::plain(dash(row.agent_version.as_deref())),
                Cell::plain(dash(row.operator_version.as_deref())),
                Cell::plain(dash(row.flux_version.as_deref())),
                ready,
                match (row.policy_generation, row.policy_stale) {
                    (Some(g), true) => Cell::toned(format!("{g} (stale)"), Tone::Bad),
                    (Some(g), false) => Cell::plain(g.to_string()),
                    (None, _) => Cell::plain("-"),
                },
                key,
                compliant,
                Cell::plain(deadline),
                Cell::plain(
                    row.last_change
                        .as_deref()
                        .map_or_else(|| "-".to_owned(), |t| age(t, now)),
                ),
                Cell::plain(message),
            ];
            if with_channel {
                cells.insert(8, channel);
            }
            cells
        })
        .collect();
    let mut headers = vec![
        "TENANT",
        "CLUSTER",
        "AGENT",
        "OPERATOR",
        "FLUX",
        "READY",
        "POLICY",
        "KEY",
        "COMPLIANT",
        "DEADLINE",
        "LAST CHANGE",
        "MESSAGE",
    ];
    if with_channel {
        headers.insert(8, "CHANNEL");
    }
    table("", &headers, &rows, style)
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

    fn shown(self) -> &'static str {
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

pub fn render_push(view: &FleetPush, style: Style) -> String {
    let mut out = format!(
        "policy {:?} generation {} to {} cluster(s)\n",
        view.policy,
        view.generation,
        view.clusters.len()
    );
    if view.clusters.is_empty() {
        return out;
    }
    let rows: Vec<Vec<Cell>> = view
        .clusters
        .iter()
        .map(|row| {
            let tone = if row.result.succeeded() {
                Tone::Good
            } else {
                Tone::Bad
            };
            let message = match (row.result, &row.reason, row.previous_generation) {
                (_, Some(reason), _) => reason.clone(),
                (PushResult::Accepted, None, Some(0)) => "held no policy before".to_owned(),
                (PushResult::Accepted, None, Some(previous)) => {
                    format!("held generation {previous} before")
                }
                (PushResult::Unchanged, None, _) => "already held".to_owned(),
                _ => String::new(),
            };
            vec![
                Cell::plain(&row.tenant),
                Cell::plain(&row.cluster),
                Cell::toned(row.result.shown(), tone),
                Cell::plain(message),
            ]
        })
        .collect();
    out.push_str(&table(
        "",
        &["TENANT", "CLUSTER", "RESULT", "MESSAGE"],
        &rows,
        style,
    ));
    out
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::{
        fleet::discover::Source,
        status::{AgentView, ConditionView, DeadlineView, InstanceView, OperatorView, PolicyView},
    };

    fn member(tenant: &str, cluster: &str) -> Member {
        Member {
            tenant: tenant.to_owned(),
            cluster: cluster.to_owned(),
            labels: Default::default(),
            source: Source::File {
                kubeconfig: PathBuf::from("k.yaml"),
                context: None,
            },
            agent_namespace: None,
        }
    }

    fn status(flux: &str, policy: Option<PolicyView>) -> StatusView {
        StatusView {
            agent: AgentView {
                version: "0.1.0".into(),
                namespace: "tenantflux-system".into(),
                health: "ok",
                problems: vec![],
                kubernetes_version: "v1.36.3".into(),
                started_at: None,
                cluster_uid: String::new(),
                cluster_name: String::new(),
            },
            operator: OperatorView {
                phase: "ready",
                reason: String::new(),
                version: "v0.58.1".into(),
                namespace: "flux-system".into(),
                ready_replicas: 1,
                desired_replicas: 1,
                bundle_digest: String::new(),
                source: String::new(),
                notices: Vec::new(),
                last_transition: None,
            },
            instance: InstanceView {
                present: true,
                name: "flux".into(),
                namespace: "flux-system".into(),
                ready: Some(ConditionView {
                    status: "True".into(),
                    reason: "ReconciliationSucceeded".into(),
                    message: String::new(),
                    last_transition: None,
                }),
                requested_version: "2.x".into(),
                distribution_version: flux.into(),
                registry: "ghcr.io/fluxcd".into(),
                last_applied_revision: String::new(),
                suspended: false,
                components: vec![],
            },
            policy,
            observed_at: Some("2026-11-30T05:00:00Z".into()),
        }
    }

    fn policy(deadline: Option<(&str, &str)>) -> PolicyView {
        PolicyView {
            generation: 7,
            name: "platform".into(),
            compliant: true,
            violations: vec![],
            warnings: vec![],
            upgrade_deadline: deadline.map(|(minimum, date)| DeadlineView {
                minimum_version: minimum.into(),
                date: date.into(),
            }),
            key_id: String::new(),
            expires_at: None,
            stale: false,
        }
    }

    #[test]
    fn each_cluster_is_marked_against_the_channel() {
        let channel_policy = |clusters: &str| {
            ChannelPolicy {
            channel: "oci://r.example/policy:stable".into(),
            digest: "sha256:00".into(),
            policy: Policy::parse(&format!(
                "apiVersion: tenantflux.io/v1alpha1\nkind: Policy\nmetadata: {{name: p}}\nspec:\n  generation: 7\n{clusters}"
            ))
            .unwrap(),
        }
        };
        let everywhere = channel_policy("");
        let mark = |policy: Option<PolicyView>, channel: &ChannelPolicy| {
            let mut status = status("v2.8.0", policy);
            status.agent.cluster_name = "blue".into();
            let mut row = StatusRow::answered(&member("t", "c"), status, 0);
            row.against(channel);
            (row.channel.clone(), row.lags())
        };
        let at = |generation| PolicyView {
            generation,
            ..policy(None)
        };
        assert_eq!(
            mark(Some(at(7)), &everywhere),
            (Some("current".into()), false)
        );
        assert_eq!(
            mark(Some(at(4)), &everywhere),
            (Some("behind (3)".into()), true)
        );
        assert_eq!(mark(None, &everywhere), (Some("behind (7)".into()), true));
        assert_eq!(
            mark(Some(at(9)), &everywhere),
            (Some("ahead (2)".into()), false)
        );
        let stale = PolicyView {
            stale: true,
            ..at(7)
        };
        assert_eq!(
            mark(Some(stale), &everywhere),
            (Some("stale (expired)".into()), true)
        );
        let green = channel_policy("  clusters: [{name: green}]\n");
        assert_eq!(
            mark(Some(at(4)), &green),
            (Some("bound elsewhere".into()), false)
        );
        let blue = channel_policy("  clusters: [{name: blu*}]\n");
        assert_eq!(mark(Some(at(7)), &blue), (Some("current".into()), false));
        let mut unreachable = StatusRow::failed(
            &member("t", "c"),
            Failure {
                reach: Reach::Unreachable,
                reason: "down".into(),
            },
        );
        unreachable.against(&everywhere);
        assert_eq!(unreachable.channel, None);
        let rendered = render_status(
            &FleetStatus {
                clusters: vec![{
                    let mut row =
                        StatusRow::answered(&member("t", "c"), status("v2.8.0", Some(at(4))), 0);
                    row.against(&everywhere);
                    row
                }],
            },
            Style::PLAIN,
            Timestamp::now(),
        );
        assert!(
            rendered.contains("CHANNEL") && rendered.contains("behind (3)"),
            "{rendered}"
        );
    }

    #[test]
    fn a_cluster_holding_another_generation_or_key_is_flagged() {
        let expected = ExpectedPolicy {
            generation: 7,
            key_id: "k1".into(),
        };
        let row = |policy: Option<PolicyView>| {
            let mut row = StatusRow::answered(&member("t", "c"), status("v2.8.0", policy), 0);
            row.compare(&expected);
            row.policy_mismatch
        };
        let keyed = |generation, key: &str| PolicyView {
            generation,
            key_id: key.into(),
            ..policy(None)
        };
        assert_eq!(row(Some(keyed(7, "k1"))), None);
        assert_eq!(
            row(Some(keyed(6, "k1"))).as_deref(),
            Some("holds policy generation 6 (key k1); the platform pushed generation 7 (key k1)")
        );
        assert_eq!(
            row(Some(keyed(7, "k2"))).as_deref(),
            Some("holds policy generation 7 (key k2); the platform pushed generation 7 (key k1)")
        );
        assert_eq!(
            row(None).as_deref(),
            Some("holds no policy; the platform pushed generation 7 (key k1)")
        );
        let mut unreachable = StatusRow::failed(
            &member("t", "c"),
            Failure {
                reach: Reach::Unreachable,
                reason: "down".into(),
            },
        );
        unreachable.compare(&expected);
        assert_eq!(unreachable.policy_mismatch, None, "no answer, no verdict");
    }

    fn day(date: &str) -> i64 {
        parse_date(date).unwrap()
    }

    #[test]
    fn a_cluster_past_its_deadline_below_the_minimum_is_non_compliant() {
        let acme = member("tenant-acme", "kubernetes-acme");
        let deadline = Some(("2.8.0", "2026-09-01"));
        let before = StatusRow::answered(
            &acme,
            status("v2.7.3", Some(policy(deadline))),
            day("2026-08-31"),
        );
        assert_eq!(before.compliant, Some(true));
        assert!(!before.deadline.as_ref().unwrap().passed);
        let on = StatusRow::answered(
            &acme,
            status("v2.7.3", Some(policy(deadline))),
            day("2026-09-01"),
        );
        assert_eq!(on.compliant, Some(false));
        assert!(on.deadline.as_ref().unwrap().passed);
        assert_eq!(
            on.violations,
            ["Flux v2.7.3 is below 2.8.0, required since 2026-09-01"]
        );
        let upgraded = StatusRow::answered(
            &acme,
            status("v2.8.0", Some(policy(deadline))),
            day("2026-12-01"),
        );
        assert_eq!(upgraded.compliant, Some(true));
        assert!(upgraded.violations.is_empty());
    }

    #[test]
    fn the_agents_own_verdict_stands_and_no_policy_is_no_verdict() {
        let acme = member("tenant-acme", "kubernetes-acme");
        let mut broken = policy(None);
        broken.compliant = false;
        broken.violations = vec!["spec.cluster.size \"large\" is not one of \"small\"".into()];
        let row = StatusRow::answered(&acme, status("v2.9.4", Some(broken)), day("2026-01-01"));
        assert_eq!(row.compliant, Some(false));
        assert_eq!(row.policy_generation, Some(7));
        let none = StatusRow::answered(&acme, status("v2.9.4", None), day("2026-01-01"));
        assert_eq!(none.compliant, None);
        assert_eq!(none.policy_generation, None);
    }

    #[test]
    fn the_table_shows_answers_failures_and_deadlines() {
        let now: Timestamp = "2026-11-30T05:12:00Z".parse().unwrap();
        let view = FleetStatus {
            clusters: vec![
                StatusRow::answered(
                    &member("tenant-a", "kubernetes-a"),
                    status("v2.7.3", Some(policy(Some(("2.8.0", "2026-09-01"))))),
                    day("2026-11-30"),
                ),
                StatusRow::failed(
                    &member("tenant-b", "kubernetes-b"),
                    Failure {
                        reach: Reach::Unreachable,
                        reason: "connection refused".into(),
                    },
                ),
            ],
        };
        assert_eq!(view.failed(), 1);
        let text = render_status(&view, Style::PLAIN, now);
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[0].starts_with("TENANT     CLUSTER        AGENT   OPERATOR"),
            "{text}"
        );
        assert!(lines[1].contains("v2.7.3   True"), "{text}");
        assert!(lines[1].contains("2.8.0 since 2026-09-01   12m"), "{text}");
        assert!(lines[1].contains("   no   "), "{text}");
        assert!(lines[2].contains("Unreachable"), "{text}");
        assert!(lines[2].ends_with("connection refused"), "{text}");
        let json = serde_json::to_value(&view).unwrap();
        assert_eq!(json["clusters"][0]["deadline"]["passed"], true);
        assert_eq!(json["clusters"][0]["compliant"], false);
        assert_eq!(json["clusters"][1]["state"], "unreachable");
        assert_eq!(json["clusters"][1]["reason"], "connection refused");
    }

    #[test]
    fn ages_read_like_kubectl() {
        let now: Timestamp = "2026-11-30T12:00:00Z".parse().unwrap();
        let at = |s: &str| age(s, now);
        assert_eq!(at("2026-11-30T11:59:15Z"), "45s");
        assert_eq!(at("2026-11-30T11:55:30Z"), "4m30s");
        assert_eq!(at("2026-11-30T11:00:00Z"), "60m");
        assert_eq!(at("2026-11-30T07:30:00Z"), "4h30m");
        assert_eq!(at("2026-11-29T12:00:00Z"), "24h");
        assert_eq!(at("2026-11-20T12:00:00Z"), "10d");
        assert_eq!(at("not a time"), "-");
    }

    #[test]
    fn push_results_say_what_happened_per_cluster() {
        let mut accepted = PushRow::new(&member("t", "a"), PushResult::Accepted, None);
        accepted.previous_generation = Some(6);
        let view = FleetPush {
            policy: "platform".into(),
            generation: 7,
            clusters: vec![
                accepted,
                PushRow::new(&member("t", "b"), PushResult::Unchanged, None),
                PushRow::new(
                    &member("t", "c"),
                    PushResult::Rejected,
                    Some("stale generation 7 ≤ 8".into()),
                ),
                PushRow::failed(
                    &member("t", "d"),
                    Failure {
                        reach: Reach::NoAgent,
                        reason: "no agent pod".into(),
                    },
                ),
            ],
        };
        assert_eq!(view.failed(), 2);
        let text = render_push(&view, Style::PLAIN);
        assert!(text.starts_with("policy \"platform\" generation 7 to 4 cluster(s)\n"));
        assert!(
            text.contains("accepted    held generation 6 before"),
            "{text}"
        );
        assert!(text.contains("unchanged   already held"), "{text}");
        assert!(
            text.contains("rejected    stale generation 7 ≤ 8"),
            "{text}"
        );
        assert!(text.contains("no agent    no agent pod"), "{text}");
    }
}
