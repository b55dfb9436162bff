//! The fleet tables: one row per cluster, with kubectl's ages.

use k8s_openapi::jiff::Timestamp;

use super::view::{FleetPush, FleetStatus, PushResult, Reach, StatusRow};
use crate::{
    output::{Cell, Style, Tone, table},
    state::State as _,
};

/// kubectl's AGE of `since`, or `-` when it is not a time.
pub fn age(since: &str, now: Timestamp) -> String {
    match since.parse() {
        Ok(since) => crate::age::since(since, now),
        Err(_) => "-".to_owned(),
    }
}

fn dash(value: Option<&str>) -> String {
    value.unwrap_or("-").to_owned()
}

/// The fleet's table: one row per cluster, with a CHANNEL column when `--channel` marked any.
pub fn render_status(view: &FleetStatus, style: Style, now: Timestamp) -> String {
    if view.clusters.is_empty() {
        return "No tenant clusters found.\n".to_owned();
    }
    let with_channel = view.clusters.iter().any(|c| c.channel.is_some());
    let rows: Vec<Vec<Cell>> = view
        .clusters
        .iter()
        .map(|row| status_cells(row, with_channel, now))
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
        "ENFORCED",
        "COMPLIANT",
        "DEADLINE",
        "LAST CHANGE",
        "MESSAGE",
    ];
    if with_channel {
        headers.insert(9, "CHANNEL");
    }
    table("", &headers, &rows, style)
}

/// One cluster's row, in the order of the headers.
fn status_cells(row: &StatusRow, with_channel: bool, now: Timestamp) -> Vec<Cell> {
    let mut cells = vec![
        Cell::plain(&row.tenant),
        Cell::plain(&row.cluster),
        Cell::plain(dash(row.agent_version.as_deref())),
        Cell::plain(operator(row)),
        Cell::plain(dash(row.flux_version.as_deref())),
        ready(row),
        policy(row),
        key(row),
        yes_no(row.enforced, "NO"),
        yes_no(row.compliant, "no"),
        Cell::plain(deadline(row)),
        Cell::plain(
            row.last_change
                .as_deref()
                .map_or_else(|| "-".to_owned(), |t| age(t, now)),
        ),
        Cell::plain(message(row)),
    ];
    if with_channel {
        cells.insert(9, channel(row));
    }
    cells
}

/// The flux-operator version, and the policy generation that vouched for it.
fn operator(row: &StatusRow) -> String {
    match (&row.operator_version, row.operator_vouched_by) {
        (Some(version), Some(generation)) => {
            format!("{version} (vouched, gen {generation})")
        }
        (version, _) => dash(version.as_deref()),
    }
}

/// The FluxInstance's Ready condition, or why the cluster could not be asked (red).
fn ready(row: &StatusRow) -> Cell {
    match (row.state, row.ready) {
        (Reach::Ok, Some(ready)) => ready.cell(),
        (Reach::Ok, None) => Cell::plain("-"),
        (state, _) => Cell::toned(state.shown(), Tone::Bad),
    }
}

/// The generation held, red when it is stale.
fn policy(row: &StatusRow) -> Cell {
    match (row.policy_generation, row.policy_stale) {
        (Some(g), true) => Cell::toned(format!("{g} (stale)"), Tone::Bad),
        (Some(g), false) => Cell::plain(g.to_string()),
        (None, _) => Cell::plain("-"),
    }
}

/// The signing key's id, red when the policy is not the one expected.
fn key(row: &StatusRow) -> Cell {
    let key = dash(row.policy_key_id.as_deref());
    match row.policy_mismatch {
        Some(_) => Cell::toned(key, Tone::Bad),
        None => Cell::plain(key),
    }
}

/// `yes` (green), `no` (red, spelled `no`), or `-` when there is no verdict.
fn yes_no(verdict: Option<bool>, no: &str) -> Cell {
    match verdict {
        Some(true) => Cell::toned("yes", Tone::Good),
        Some(false) => Cell::toned(no, Tone::Bad),
        None => Cell::plain("-"),
    }
}

/// The policy's upgrade deadline: the minimum version since (passed) or from its date.
fn deadline(row: &StatusRow) -> String {
    match &row.deadline {
        Some(d) if d.passed => format!("{} since {}", d.minimum_version, d.date),
        Some(d) => format!("{} from {}", d.minimum_version, d.date),
        None => "-".to_owned(),
    }
}

/// Where the cluster stands against the channel: green when current, red when it lags.
fn channel(row: &StatusRow) -> Cell {
    match row.channel.as_deref() {
        Some("current") => Cell::toned("current", Tone::Good),
        Some(c) if row.lags() => Cell::toned(c, Tone::Bad),
        Some(c) => Cell::plain(c),
        None => Cell::plain("-"),
    }
}

/// Everything said about the cluster, most pressing first: a stale policy, then not
/// enforced, another identity, another policy, and the reason or violations.
fn message(row: &StatusRow) -> String {
    let said = match (&row.reason, row.violations.as_slice()) {
        (Some(reason), _) => reason.clone(),
        (None, []) => String::new(),
        (None, violations) => violations.join("; "),
    };
    let message = [
        row.not_enforced.as_deref(),
        row.identity_mismatch.as_deref(),
        row.policy_mismatch.as_deref(),
        Some(said.as_str()),
    ]
    .into_iter()
    .flatten()
    .filter(|m| !m.is_empty())
    .collect::<Vec<_>>()
    .join("; ");
    match (row.policy_stale, &row.policy_expires_at) {
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
