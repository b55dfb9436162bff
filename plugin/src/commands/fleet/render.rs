//! The fleet tables: one row per cluster, with kubectl's ages.

use k8s_openapi::jiff::Timestamp;

use super::view::{FleetPush, FleetStatus, PushResult, Reach};
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

pub fn render_status(view: &FleetStatus, style: Style, now: Timestamp) -> String {
    if view.clusters.is_empty() {
        return "No tenant clusters found.\n".to_owned();
    }
    let with_channel = view.clusters.iter().any(|c| c.channel.is_some());
    let rows: Vec<Vec<Cell>> = view
        .clusters
        .iter()
        .map(|row| {
            let ready = match (row.state, row.ready) {
                (Reach::Ok, Some(ready)) => ready.cell(),
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
            let enforced = match row.enforced {
                Some(true) => Cell::toned("yes", Tone::Good),
                Some(false) => Cell::toned("NO", Tone::Bad),
                None => Cell::plain("-"),
            };
            let message = [
                row.not_enforced.as_deref(),
                row.identity_mismatch.as_deref(),
                row.policy_mismatch.as_deref(),
                Some(message.as_str()),
            ]
            .into_iter()
            .flatten()
            .filter(|m| !m.is_empty())
            .collect::<Vec<_>>()
            .join("; ");
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
                Cell::plain(match (&row.operator_version, row.operator_vouched_by) {
                    (Some(version), Some(generation)) => {
                        format!("{version} (vouched, gen {generation})")
                    }
                    (version, _) => dash(version.as_deref()),
                }),
                Cell::plain(dash(row.flux_version.as_deref())),
                ready,
                match (row.policy_generation, row.policy_stale) {
                    (Some(g), true) => Cell::toned(format!("{g} (stale)"), Tone::Bad),
                    (Some(g), false) => Cell::plain(g.to_string()),
                    (None, _) => Cell::plain("-"),
                },
                key,
                enforced,
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
                cells.insert(9, channel);
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
