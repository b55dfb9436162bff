//! The fleet dashboard's pages: pure functions from the fleet's rows (as `fleet status` builds
//! them) to HTML, so they are tested without a server.

use std::{collections::BTreeMap, time::Duration};

use k8s_openapi::jiff::Timestamp;
use maud::{Markup, html};

use super::super::view::{FleetStatus, Reach, StatusRow};
use crate::{
    commands::status::StatusView,
    web::page::{Tone, badge, bar_chart, encode, facts, layout},
};

/// Where a cluster's policy stands, the first that applies in this order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ClusterState {
    /// Its agent could not be asked.
    Unreachable,
    /// The API server is not proven to refuse what the policy refuses.
    NotEnforced,
    /// Its policy is past its signed expiry (still enforced, nothing newer verified).
    Stale,
    /// It holds an older generation than the channel, or without one than the newest in the
    /// fleet.
    Behind,
    NoPolicy,
    Current,
}

impl ClusterState {
    pub const ALL: [Self; 6] = [
        Self::Current,
        Self::Behind,
        Self::Stale,
        Self::NotEnforced,
        Self::Unreachable,
        Self::NoPolicy,
    ];

    /// The tile's `data-state` and the filter's value.
    pub fn key(self) -> &'static str {
        match self {
            Self::Current => "current",
            Self::Behind => "behind",
            Self::Stale => "stale",
            Self::NotEnforced => "not-enforced",
            Self::Unreachable => "unreachable",
            Self::NoPolicy => "no-policy",
        }
    }

    /// The badge's words.
    pub fn label(self) -> &'static str {
        match self {
            Self::Current => "policy current",
            Self::Behind => "behind",
            Self::Stale => "stale",
            Self::NotEnforced => "NOT ENFORCED",
            Self::Unreachable => "unreachable",
            Self::NoPolicy => "no policy",
        }
    }

    pub fn tone(self) -> Tone {
        match self {
            Self::Current => Tone::Good,
            Self::Behind => Tone::Warn,
            Self::Stale | Self::NotEnforced | Self::Unreachable => Tone::Bad,
            Self::NoPolicy => Tone::Muted,
        }
    }

    fn from_key(key: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.key() == key)
    }

    /// The state of `row` in a fleet whose newest generation is `newest`. With a channel
    /// (`row.channel`, set by [`StatusRow::against`]), behind is what the channel says.
    pub fn of(row: &StatusRow, newest: Option<u64>) -> Self {
        if row.state != Reach::Ok {
            return Self::Unreachable;
        }
        let Some(generation) = row.policy_generation else {
            return match row.channel.as_deref() {
                Some(c) if c.starts_with("behind") => Self::Behind,
                _ => Self::NoPolicy,
            };
        };
        if row.enforced == Some(false) {
            Self::NotEnforced
        } else if row.policy_stale {
            Self::Stale
        } else if match row.channel.as_deref() {
            Some(channel) => channel.starts_with("behind"),
            None => newest.is_some_and(|newest| generation < newest),
        } {
            Self::Behind
        } else {
            Self::Current
        }
    }
}

/// The state of every row, in the rows' order.
pub fn states(fleet: &FleetStatus) -> Vec<ClusterState> {
    let newest = fleet
        .clusters
        .iter()
        .filter(|r| r.state == Reach::Ok)
        .filter_map(|r| r.policy_generation)
        .max();
    fleet
        .clusters
        .iter()
        .map(|row| ClusterState::of(row, newest))
        .collect()
}

/// The row of cluster `name` (of `tenant`, when given) and its state.
pub fn find(
    fleet: &FleetStatus,
    name: &str,
    tenant: Option<&str>,
) -> Option<(StatusRow, ClusterState)> {
    let states = states(fleet);
    fleet
        .clusters
        .iter()
        .zip(states)
        .find(|(row, _)| row.cluster == name && tenant.is_none_or(|t| t == row.tenant))
        .map(|(row, state)| (row.clone(), state))
}

/// The tiles' filters, from the page's query (a GET form, so a filtered page is a link).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Filter {
    /// Part of the cluster's (or tenant's) name, any case; empty: every cluster.
    pub search: String,
    /// None: every state.
    pub state: Option<ClusterState>,
}

impl Filter {
    pub fn from_query(query: &str) -> Self {
        let mut filter = Self::default();
        for (key, value) in crate::web::form_fields(query.as_bytes()) {
            match key.as_str() {
                "q" => filter.search = value.trim().to_owned(),
                "state" => filter.state = ClusterState::from_key(&value),
                _ => {}
            }
        }
        filter
    }

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
    /// The channel `behind` is measured against (none: the newest in the fleet).
    pub channel: Option<String>,
}

/// `30s`, `2m`, `1m30s`, `1h`.
pub fn duration_text(duration: Duration) -> String {
    let s = duration.as_secs();
    match (s / 3600, (s % 3600) / 60, s % 60) {
        (0, 0, s) => format!("{s}s"),
        (0, m, 0) => format!("{m}m"),
        (0, m, s) => format!("{m}m{s}s"),
        (h, 0, 0) => format!("{h}h"),
        (h, m, _) => format!("{h}h{m}m"),
    }
}

/// The cost of the page, bounded and shown.
pub fn cost(round: &Round) -> String {
    format!(
        "refreshed every {}; the last round read {} cluster{} in {:.1} s, at most {} at once (at {})",
        duration_text(round.interval),
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

/// What a tile says under its name: why, for every state but current.
fn tile_notes(row: &StatusRow, state: ClusterState, newest: Option<u64>) -> Markup {
    html! {
        @match state {
            ClusterState::Unreachable => p.message { (row.state.shown()) ": " (row.reason.as_deref().unwrap_or("")) },
            ClusterState::NotEnforced => p.message { (row.not_enforced.as_deref().unwrap_or("the API server does not enforce it")) },
            ClusterState::Stale => p.message { "expired " (row.policy_expires_at.as_deref().unwrap_or("-")) ": still enforced, nothing newer verified" },
            ClusterState::Behind => p.message {
                @match (row.channel.as_deref(), newest) {
                    (Some(channel), _) => { "against the channel: " (channel) },
                    (None, Some(newest)) => { "the newest in the fleet is generation " (newest) },
                    (None, None) => {},
                }
            },
            ClusterState::NoPolicy | ClusterState::Current => {},
        }
        @if let Some(mismatch) = &row.identity_mismatch { p.error { (mismatch) } }
    }
}

fn tile(row: &StatusRow, state: ClusterState, fleet: &FleetStatus, newest: Option<u64>) -> Markup {
    let tone = state.tone();
    html! {
        div class={ "card " (tone.class()) } data-cluster=(row.cluster) data-tenant=(row.tenant) data-state=(state.key()) {
            h3 { a href=(cluster_path(row, fleet)) { (row.cluster) } " " (badge(state.label(), tone)) }
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
            (tile_notes(row, state, newest))
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
    let states = states(fleet);
    let newest = match &snapshot.channel {
        Some(_) => None,
        None => fleet
            .clusters
            .iter()
            .filter(|r| r.state == Reach::Ok)
            .filter_map(|r| r.policy_generation)
            .max(),
    };
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
                @if let Some(channel) = &snapshot.channel {
                    span.muted { "behind: against " (channel) }
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
                @for (row, state) in &shown { (tile(row, *state, fleet, newest)) }
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
                h1 { (row.cluster) " " (badge(state.label(), state.tone())) }
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
    let agent_tone = match status.agent.health {
        "ok" => Tone::Good,
        "degraded" => Tone::Bad,
        _ => Tone::Muted,
    };
    let operator_tone = match status.operator.phase {
        "ready" => Tone::Good,
        "failed" => Tone::Bad,
        "not-installed" => Tone::Muted,
        _ => Tone::Warn,
    };
    let instance = &status.instance;
    let ready = instance
        .ready
        .as_ref()
        .map_or("Unknown", |c| c.status.as_str());
    let instance_tone = if instance.present {
        Tone::of_condition(ready)
    } else {
        Tone::Muted
    };
    html! {
        div.cards {
            div class={ "card " (agent_tone.class()) } #agent {
                h3 { "Agent " (badge(status.agent.health, agent_tone)) }
                (facts(&[
                    ("version", html! { (status.agent.version) }),
                    ("namespace", html! { (status.agent.namespace) }),
                    ("Kubernetes", html! { (status.agent.kubernetes_version) }),
                    ("cluster uid", html! { (status.agent.cluster_uid) }),
                ]))
                @for problem in &status.agent.problems { p.error { (problem) } }
            }
            div class={ "card " (operator_tone.class()) } #operator {
                h3 { "flux-operator " (badge(status.operator.phase, operator_tone)) }
                (facts(&[
                    ("version", html! { (status.operator.version) }),
                    ("release", html! { (status.operator.trust()) }),
                    ("namespace", html! { (status.operator.namespace) }),
                    ("replicas", html! { (status.operator.ready_replicas) "/" (status.operator.desired_replicas) " ready" }),
                ]))
                @if !status.operator.reason.is_empty() { p.muted { (status.operator.reason) } }
            }
            div class={ "card " (instance_tone.class()) } #instance {
                h3 { "FluxInstance " @if instance.present { (badge(ready, instance_tone)) } @else { (badge("none", Tone::Muted)) } }
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
