//! The fleet dashboard's pages: pure functions from the fleet's rows (as `fleet status` builds
//! them) to HTML, so they are tested without a server.

use std::{collections::BTreeMap, time::Duration};

use k8s_openapi::jiff::Timestamp;
use maud::{Markup, html};

use super::super::view::{ExpectedPolicy, FleetStatus, Reach, StatusRow};
use crate::{
    state::State as _,
    views::status::StatusView,
    web::page::{Tone, badge, bar_chart, encode, facts, layout},
};

/// What the platform itself says the fleet should hold, which `behind` is measured against.
/// Nothing a cluster's agent reports counts: each is run by a tenant, who may make it report any
/// generation.
#[derive(Clone, Debug, PartialEq)]
pub enum Reference {
    /// Neither `--channel` nor `--expect-policy`: generations are shown, not judged.
    None,
    /// `--channel`: each row's `channel`, as `fleet status --channel` marks it.
    Channel(String),
    /// `--expect-policy`: the generation and key the platform pushed.
    Pushed(ExpectedPolicy),
}

/// Where a cluster's policy stands, the first that applies in this order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClusterState {
    /// Its agent could not be asked.
    Unreachable,
    /// The API server is not proven to refuse what the policy refuses.
    NotEnforced,
    /// Its policy is past its signed expiry (still enforced, nothing newer verified).
    Stale,
    /// It holds an older generation than the platform's [`Reference`], or none.
    Behind,
    /// It holds another policy than the platform's [`Reference`]: a newer generation than the
    /// channel's or the one pushed, or one of another key.
    Other,
    NoPolicy,
    /// It holds the policy the platform's [`Reference`] names.
    Current,
    /// It holds a policy, and the platform said nothing to compare it with.
    Holds,
}

impl ClusterState {
    pub const ALL: [Self; 8] = [
        Self::Current,
        Self::Holds,
        Self::Behind,
        Self::Other,
        Self::Stale,
        Self::NotEnforced,
        Self::Unreachable,
        Self::NoPolicy,
    ];

    /// The tile's `data-state` and the filter's value.
    pub fn key(self) -> &'static str {
        match self {
            Self::Current => "current",
            Self::Holds => "holds",
            Self::Behind => "behind",
            Self::Other => "other-policy",
            Self::Stale => "stale",
            Self::NotEnforced => "not-enforced",
            Self::Unreachable => "unreachable",
            Self::NoPolicy => "no-policy",
        }
    }

    /// The words of the summary and the filter.
    pub fn label(self) -> &'static str {
        match self {
            Self::Current => "policy current",
            Self::Holds => "holds a policy",
            Self::Behind => "behind",
            Self::Other => "other policy",
            Self::Stale => "stale",
            Self::NotEnforced => "NOT ENFORCED",
            Self::Unreachable => "unreachable",
            Self::NoPolicy => "no policy",
        }
    }

    /// The words of `row`'s badge: its generation, when that is all there is to say.
    pub fn badge_text(self, row: &StatusRow) -> String {
        match (self, row.policy_generation) {
            (Self::Holds, Some(generation)) => format!("holds generation {generation}"),
            _ => self.label().to_owned(),
        }
    }

    pub fn tone(self) -> Tone {
        match self {
            Self::Current => Tone::Good,
            Self::Behind | Self::Other => Tone::Warn,
            Self::Stale | Self::NotEnforced | Self::Unreachable => Tone::Bad,
            Self::Holds | Self::NoPolicy => Tone::Muted,
        }
    }

    fn from_key(key: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.key() == key)
    }

    /// The state of `row` against what the platform says (`reference`). With a channel, the
    /// row's `channel` (set by [`StatusRow::against`]) says where it stands.
    pub fn of(row: &StatusRow, reference: &Reference) -> Self {
        if row.state != Reach::Ok {
            return Self::Unreachable;
        }
        let marked = row.channel.as_deref().unwrap_or_default();
        let Some(generation) = row.policy_generation else {
            return match reference {
                Reference::Channel(_) if marked.starts_with("behind") => Self::Behind,
                Reference::Pushed(_) => Self::Behind,
                _ => Self::NoPolicy,
            };
        };
        if row.enforced == Some(false) {
            return Self::NotEnforced;
        }
        if row.policy_stale {
            return Self::Stale;
        }
        match reference {
            Reference::None => Self::Holds,
            Reference::Channel(_) if marked == "current" => Self::Current,
            Reference::Channel(_) if marked.starts_with("behind") => Self::Behind,
            Reference::Channel(_) if marked.starts_with("ahead") => Self::Other,
            // Bound elsewhere: the channel's policy is for other clusters, so says nothing of
            // this one's.
            Reference::Channel(_) => Self::Holds,
            Reference::Pushed(pushed) if generation < pushed.generation => Self::Behind,
            Reference::Pushed(pushed)
                if generation == pushed.generation
                    && row.policy_key_id.as_deref() == Some(pushed.key_id.as_str()) =>
            {
                Self::Current
            }
            Reference::Pushed(_) => Self::Other,
        }
    }
}

/// The state of every row, in the rows' order.
pub fn states(fleet: &FleetStatus, reference: &Reference) -> Vec<ClusterState> {
    fleet
        .clusters
        .iter()
        .map(|row| ClusterState::of(row, reference))
        .collect()
}

/// The row of cluster `name` (of `tenant`, when given) and its state.
pub fn find(
    snapshot: &Snapshot,
    name: &str,
    tenant: Option<&str>,
) -> Option<(StatusRow, ClusterState)> {
    snapshot
        .fleet
        .clusters
        .iter()
        .find(|row| row.cluster == name && tenant.is_none_or(|t| t == row.tenant))
        .map(|row| (row.clone(), ClusterState::of(row, &snapshot.reference)))
}

/// The tiles' filters, from the page's query (a GET form, so a filtered page is a link).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(from = "FilterQuery")]
pub struct Filter {
    /// Part of the cluster's (or tenant's) name, any case; empty: every cluster.
    pub search: String,
    /// None: every state.
    pub state: Option<ClusterState>,
}

/// The filter's query as written: either field may be left out, and a state this page does
/// not know is every state.
#[derive(Default, serde::Deserialize)]
#[serde(default)]
struct FilterQuery {
    q: String,
    state: String,
}

impl From<FilterQuery> for Filter {
    fn from(query: FilterQuery) -> Self {
        Self {
            search: query.q.trim().to_owned(),
            state: ClusterState::from_key(&query.state),
        }
    }
}

impl Filter {
    pub fn passes(&self, row: &StatusRow, state: ClusterState) -> bool {
        let search = self.search.to_lowercase();
        (search.is_empty()
            || row.cluster.to_lowercase().contains(&search)
            || row.tenant.to_lowercase().contains(&search))
            && self.state.is_none_or(|s| s == state)
    }

    /// The query that gives this filter back.
    pub fn query(&self) -> String {
        let mut pairs = Vec::new();
        if !self.search.is_empty() {
            pairs.push(format!("q={}", encode(&self.search)));
        }
        if let Some(state) = self.state {
            pairs.push(format!("state={}", state.key()));
        }
        pairs.join("&")
    }
}

/// What a round read and what it cost.
#[derive(Clone, Debug, PartialEq)]
pub struct Round {
    pub clusters: usize,
    pub took: Duration,
    pub concurrency: u16,
    pub interval: Duration,
    pub at: Timestamp,
}

/// The last round: its rows, and why a later one failed (the rows are then older).
#[derive(Clone, Debug, PartialEq)]
pub struct Snapshot {
    pub fleet: FleetStatus,
    pub round: Round,
    pub error: Option<String>,
    /// What `behind` is measured against.
    pub reference: Reference,
}

/// The cost of the page, bounded and shown.
pub fn cost(round: &Round) -> String {
    format!(
        "refreshed every {}; the last round read {} cluster{} in {:.1} s, at most {} at once (at {})",
        crate::age::human(round.interval),
        round.clusters,
        if round.clusters == 1 { "" } else { "s" },
        round.took.as_secs_f64(),
        round.concurrency,
        round.at.strftime("%H:%M:%S UTC"),
    )
}

/// Rows counted by key, as bars in the keys' order, each with the label its key came with.
fn counted<K: Ord>(rows: impl Iterator<Item = (K, String)>) -> Vec<(String, usize)> {
    let mut counts: BTreeMap<K, (String, usize)> = BTreeMap::new();
    for (key, label) in rows {
        counts.entry(key).or_insert((label, 0)).1 += 1;
    }
    counts.into_values().collect()
}

/// Bars of the Flux versions installed across the fleet (and of the clusters without one).
pub fn flux_versions(fleet: &FleetStatus) -> Vec<(String, usize)> {
    counted(
        fleet
            .clusters
            .iter()
            .map(|row| match (row.state, row.flux_version.as_deref()) {
                (Reach::Ok, Some(version)) => ((0, version_key(version)), version.to_owned()),
                (Reach::Ok, None) => ((1, Vec::new()), "no FluxInstance".to_owned()),
                _ => ((2, Vec::new()), "unreachable".to_owned()),
            }),
    )
}

/// Orders versions by their numbers (`2.10.0` after `2.9.1`), then by the text.
fn version_key(version: &str) -> Vec<(u64, String)> {
    version
        .trim_start_matches('v')
        .split(['.', '-', '+'])
        .map(|part| (part.parse().unwrap_or(u64::MAX), part.to_owned()))
        .collect()
}

/// Bars of the policy generations held across the fleet.
pub fn generations(fleet: &FleetStatus) -> Vec<(String, usize)> {
    counted(
        fleet
            .clusters
            .iter()
            .map(|row| match (row.state, row.policy_generation) {
                (Reach::Ok, Some(g)) => ((0, g), format!("generation {g}")),
                (Reach::Ok, None) => ((1, 0), "no policy".to_owned()),
                _ => ((2, 0), "unreachable".to_owned()),
            }),
    )
}

fn cluster_path(row: &StatusRow, fleet: &FleetStatus) -> String {
    let shared = fleet
        .clusters
        .iter()
        .filter(|r| r.cluster == row.cluster)
        .count()
        > 1;
    let path = format!("/cluster/{}", encode(&row.cluster));
    if shared {
        format!("{path}?tenant={}", encode(&row.tenant))
    } else {
        path
    }
}

/// What a tile says under its name: why, for every state but current, against what.
fn tile_notes(row: &StatusRow, state: ClusterState, reference: &Reference) -> Markup {
    html! {
        @match state {
            ClusterState::Unreachable => p.message { (row.state.shown()) ": " (row.reason.as_deref().unwrap_or("")) },
            ClusterState::NotEnforced => p.message { (row.not_enforced.as_deref().unwrap_or("the API server does not enforce it")) },
            ClusterState::Stale => p.message { "expired " (row.policy_expires_at.as_deref().unwrap_or("-")) ": still enforced, nothing newer verified" },
            ClusterState::Behind | ClusterState::Other | ClusterState::Holds => {
                @match (reference, row.channel.as_deref(), row.policy_mismatch.as_deref()) {
                    (Reference::Channel(_), Some("bound elsewhere"), _) => p.message { "the channel's policy is bound to other clusters" },
                    (Reference::Channel(_), Some(channel), _) => p.message { "against the channel: " (channel) },
                    (Reference::Pushed(_), _, Some(mismatch)) => p.message { (mismatch) },
                    (Reference::Pushed(pushed), _, None) => p.message { "the platform pushed generation " (pushed.generation) " (key " (pushed.key_id) ")" },
                    _ => {},
                }
            },
            ClusterState::NoPolicy | ClusterState::Current => {},
        }
        @if let Some(mismatch) = &row.identity_mismatch { p.error { (mismatch) } }
    }
}

fn tile(
    row: &StatusRow,
    state: ClusterState,
    fleet: &FleetStatus,
    reference: &Reference,
) -> Markup {
    let tone = state.tone();
    html! {
        div class={ "card " (tone.class()) } data-cluster=(row.cluster) data-tenant=(row.tenant) data-state=(state.key()) {
            h3 { a href=(cluster_path(row, fleet)) { (row.cluster) } " " (badge(&state.badge_text(row), tone)) }
            (facts(&[
                ("tenant", html! { (row.tenant) }),
                ("Flux", html! { (row.flux_version.as_deref().unwrap_or("-")) }),
                ("policy", html! {
                    @match (&row.policy_name, row.policy_generation) {
                        (Some(name), Some(g)) => { (name) " generation " (g) },
                        _ => span.muted { "none" },
                    }
                }),
                ("agent", html! { (row.agent_version.as_deref().unwrap_or("-")) }),
            ]))
            (tile_notes(row, state, reference))
        }
    }
}

/// The part the live stream replaces after each round: the round's cost, the charts and the
/// tiles the filter passes.
pub fn fleet_part(snapshot: Option<&Snapshot>, filter: &Filter) -> Markup {
    let Some(snapshot) = snapshot else {
        return html! {
            section #fleet aria-label="Clusters" { p.muted #cost { "Reading the fleet…" } }
        };
    };
    let fleet = &snapshot.fleet;
    let reference = &snapshot.reference;
    let states = states(fleet, reference);
    let shown: Vec<(&StatusRow, ClusterState)> = fleet
        .clusters
        .iter()
        .zip(states.iter().copied())
        .filter(|(row, state)| filter.passes(row, *state))
        .collect();
    let count = |state: ClusterState| states.iter().filter(|s| **s == state).count();
    html! {
        section #fleet aria-label="Clusters" {
            p.muted #cost { (cost(&snapshot.round)) }
            @if let Some(error) = &snapshot.error {
                p.error role="alert" { "The last round failed, so this is the one before: " (error) }
            }
            p #summary {
                @for state in ClusterState::ALL {
                    @if count(state) > 0 {
                        (badge(state.label(), state.tone())) " " (count(state)) " "
                    }
                }
                span.muted #reference {
                    @match reference {
                        Reference::Channel(channel) => { "behind: against " (channel) },
                        Reference::Pushed(pushed) => { "behind: against generation " (pushed.generation) " (key " (pushed.key_id) ") of --expect-policy" },
                        Reference::None => { "no --channel or --expect-policy: generations are shown, not judged" },
                    }
                }
            }
            div.charts {
                (bar_chart("Flux versions", &flux_versions(fleet)))
                (bar_chart("Policy generations", &generations(fleet)))
            }
            p.muted #count { (shown.len()) " of " (fleet.clusters.len()) " clusters" }
            @if fleet.clusters.is_empty() && snapshot.error.is_none() {
                p.muted { "No tenant clusters found." }
            }
            div.cards {
                @for (row, state) in &shown { (tile(row, *state, fleet, reference)) }
            }
        }
    }
}

/// The fleet page.
pub fn index(title: &str, snapshot: Option<&Snapshot>, filter: &Filter) -> Markup {
    let live = format!("/live?{}", filter.query());
    html! {
        (layout(title, Some(&live), html! {
            main {
                h1 { (title) }
                form.filters method="get" action="/" {
                    label { "Cluster"
                        input type="search" name="q" value=(filter.search) placeholder="name or tenant";
                    }
                    label { "State"
                        select name="state" {
                            option value="" selected[filter.state.is_none()] { "all" }
                            @for state in ClusterState::ALL {
                                option value=(state.key()) selected[filter.state == Some(state)] { (state.label()) }
                            }
                        }
                    }
                    button type="submit" { "Filter" }
                    @if *filter != Filter::default() { a.button href="/" { "Clear" } }
                }
                (fleet_part(snapshot, filter))
            }
        }))
    }
}

/// One cluster: its row of the last round and its status read now.
pub fn cluster_page(
    row: &StatusRow,
    state: ClusterState,
    status: &Result<StatusView, String>,
) -> Markup {
    let title = format!("{}/{}", row.tenant, row.cluster);
    html! {
        (layout(&title, None, html! {
            main {
                h1 { (row.cluster) " " (badge(&state.badge_text(row), state.tone())) }
                (facts(&[
                    ("tenant", html! { (row.tenant) }),
                    ("in the last round", html! {
                        @match row.policy_generation {
                            Some(g) => { "policy generation " (g) },
                            None => span.muted { "no policy" },
                        }
                        @if let Some(reason) = &row.reason { " · " (reason) }
                    }),
                ]))
                @if let Some(mismatch) = &row.identity_mismatch { p.error { (mismatch) } }
                h2 { "Status now" }
                @match status {
                    Err(error) => p.error role="alert" { "Cannot read the agent's status: " (error) },
                    Ok(status) => (status_cards(status)),
                }
                p { a href="/" { "← the fleet" } }
            }
        }))
    }
}

fn status_cards(status: &StatusView) -> Markup {
    let agent_tone = status.agent.health.tone();
    let operator_tone = status.operator.phase.tone();
    let instance = &status.instance;
    let ready = instance.ready_status();
    let instance_tone = if instance.present {
        ready.tone()
    } else {
        Tone::Muted
    };
    html! {
        div.cards {
            div class={ "card " (agent_tone.class()) } #agent {
                h3 { "Agent " (status.agent.health.badge()) }
                (facts(&[
                    ("version", html! { (status.agent.version) }),
                    ("namespace", html! { (status.agent.namespace) }),
                    ("Kubernetes", html! { (status.agent.kubernetes_version) }),
                    ("cluster uid", html! { (status.agent.cluster_uid) }),
                ]))
                @for problem in &status.agent.problems { p.error { (problem) } }
            }
            div class={ "card " (operator_tone.class()) } #operator {
                h3 { "flux-operator " (status.operator.phase.badge()) }
                (facts(&[
                    ("version", html! { (status.operator.version) }),
                    ("release", html! { (status.operator.trust()) }),
                    ("namespace", html! { (status.operator.namespace) }),
                    ("replicas", html! { (status.operator.ready_replicas) "/" (status.operator.desired_replicas) " ready" }),
                ]))
                @if !status.operator.reason.is_empty() { p.muted { (status.operator.reason) } }
            }
            div class={ "card " (instance_tone.class()) } #instance {
                h3 { "FluxInstance " @if instance.present { (ready.badge()) } @else { (badge("none", Tone::Muted)) } }
                @if instance.present {
                    (facts(&[
                        ("name", html! { (instance.namespace) "/" (instance.name) }),
                        ("version", html! { (instance.distribution_version) " (asks " (instance.requested_version) ")" }),
                        ("revision", html! { (instance.last_applied_revision) }),
                    ]))
                    @if let Some(ready) = &instance.ready { p.message { (ready.message) } }
                }
            }
            (policy_card(status))
        }
    }
}

fn policy_card(status: &StatusView) -> Markup {
    let Some(policy) = &status.policy else {
        return html! { div.card.muted #policy { h3 { "Policy " (badge("none", Tone::Muted)) } } };
    };
    let enforced = policy.enforcement.as_ref().map(|e| e.enforced);
    let tone = if !policy.compliant || enforced == Some(false) {
        Tone::Bad
    } else if policy.stale {
        Tone::Warn
    } else {
        Tone::Good
    };
    html! {
        div class={ "card " (tone.class()) } #policy {
            h3 { "Policy " (badge(if policy.compliant { "compliant" } else { "violated" }, if policy.compliant { Tone::Good } else { Tone::Bad })) }
            (facts(&[
                ("name", html! { (policy.name) " (generation " (policy.generation) ")" }),
                ("enforced", html! {
                    @match &policy.enforcement {
                        Some(e) if e.enforced => { (badge("yes", Tone::Good)) " " span.muted { (e.line()) } },
                        Some(e) => { (badge("NOT ENFORCED", Tone::Bad)) " " (e.reason) },
                        None => span.muted { "not proven yet" },
                    }
                }),
                ("signed by", html! { (policy.key_id) }),
                ("expires", html! { (policy.expires_at.as_deref().unwrap_or("-")) @if policy.stale { " " (badge("stale", Tone::Warn)) } }),
            ]))
            @for violation in &policy.violations { p.error { (violation) } }
            @for warning in &policy.warnings { p.notice { (warning) } }
        }
    }
}
