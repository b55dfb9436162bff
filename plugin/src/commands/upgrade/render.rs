//! The tables of `upgrade plan` and `upgrade status`.

use std::fmt::Write as _;

use super::{
    SHOWN_USES, or_dash,
    view::{PlanView, RemovedUseView, StateView},
};
use crate::{
    output::{Cell, Style, Tone, table},
    state::State as _,
};

fn line(out: &mut String, key: &str, value: &str) {
    let key = format!("{key}:");
    let _ = writeln!(out, "{key:<14}{value}");
}

pub fn render_plan(view: &PlanView, style: Style) -> String {
    let mut out = render_plan_body(view, style);
    out.push_str(&render_verdict(view, style));
    out
}

/// The plan without its verdict line.
pub(super) fn render_plan_body(view: &PlanView, style: Style) -> String {
    let mut out = String::new();
    if view.target.is_empty() {
        let _ = writeln!(out, "Upgrade to {:?}: nothing resolves", view.requested);
    } else {
        let _ = writeln!(
            out,
            "Upgrade Flux {} → {} (requested {:?}; spec.distribution.version {:?} → {:?})",
            or_dash(&view.current_version),
            view.target,
            view.requested,
            view.current_range,
            view.written_version
        );
    }
    if !view.kubernetes_minimum.is_empty() {
        line(
            &mut out,
            "Kubernetes",
            &format!(
                "{} (Flux {} needs {} or later)",
                or_dash(&view.kubernetes_version),
                view.target,
                view.kubernetes_minimum
            ),
        );
    }
    let policy = if view.policy.is_empty() {
        "none held".to_owned()
    } else if view.policy_range.is_empty() {
        view.policy.clone()
    } else {
        format!("{}, versions {:?}", view.policy, view.policy_range)
    };
    line(&mut out, "Policy", &policy);
    if let Some(d) = &view.deadline {
        line(
            &mut out,
            "Deadline",
            &format!(
                "Flux {} or later by {} (warnings from {} days before)",
                d.minimum_version, d.date, d.warn_days
            ),
        );
    }
    line(
        &mut out,
        "Releases",
        &format!("as known from {}", view.known_releases),
    );
    if !view.flux_cli.is_empty() {
        line(&mut out, "flux CLI", &view.flux_cli);
    }
    if !view.migrations.is_empty() {
        let _ = writeln!(out, "\nStored versions to migrate:");
        let rows: Vec<Vec<Cell>> = view
            .migrations
            .iter()
            .map(|m| {
                vec![
                    Cell::plain(&m.crd),
                    Cell::plain(m.stored_versions.join(",")),
                    Cell::toned(m.unserved.join(","), Tone::Bad),
                    Cell::plain(&m.storage_version),
                    Cell::plain(m.objects.to_string()),
                ]
            })
            .collect();
        out.push_str(&table(
            "  ",
            &["CRD", "STORED", "REMOVED", "REWRITE AT", "OBJECTS"],
            &rows,
            style,
        ));
    }
    if !view.removed_api_uses.is_empty() {
        let _ = writeln!(
            out,
            "\nObjects using API versions Flux {} removes:",
            view.target
        );
        // Every blocking use; the others up to a screenful (-o json lists them all).
        let shown: Vec<&RemovedUseView> = view
            .removed_api_uses
            .iter()
            .filter(|u| u.blocking)
            .chain(
                view.removed_api_uses
                    .iter()
                    .filter(|u| !u.blocking)
                    .take(SHOWN_USES),
            )
            .collect();
        let rows: Vec<Vec<Cell>> = shown
            .iter()
            .map(|u| {
                let by = if u.kustomization.is_empty() {
                    format!("written by {}", u.manager)
                } else {
                    format!(
                        "Kustomization {} ({} {})",
                        u.kustomization, u.source, u.path
                    )
                };
                vec![
                    Cell::plain(format!("{} {}/{}", u.kind, u.namespace, u.name)),
                    Cell::toned(
                        &u.api_version,
                        if u.blocking { Tone::Bad } else { Tone::Plain },
                    ),
                    Cell::plain(&u.replacement),
                    Cell::plain(by),
                ]
            })
            .collect();
        out.push_str(&table(
            "  ",
            &["OBJECT", "API VERSION", "USE", "FROM"],
            &rows,
            style,
        ));
        let hidden = view.removed_api_uses.len() - shown.len();
        if hidden > 0 {
            let _ = writeln!(
                out,
                "  … and {hidden} more written outside Git (-o json lists them all)"
            );
        }
    }
    if view.hidden_removed_api_uses > 0 {
        let _ = writeln!(
            out,
            "\n{} more objects using API versions Flux {} removes are in namespaces you may not list",
            view.hidden_removed_api_uses, view.target
        );
    }
    for (title, list, tone) in [
        ("Blockers", &view.blockers, Tone::Bad),
        ("Warnings", &view.warnings, Tone::Plain),
    ] {
        if !list.is_empty() {
            let _ = writeln!(out, "\n{title}:");
            for f in list {
                let _ = writeln!(
                    out,
                    "  {} [{}] {}",
                    style.paint("•", tone),
                    f.code,
                    f.message
                );
            }
        }
    }
    out
}

/// What to do next: fix the blockers, or the command that applies the plan.
fn render_verdict(view: &PlanView, style: Style) -> String {
    let verdict = if view.blocked {
        style.paint(
            "\nBlocked: fix the blockers above, then plan again.",
            Tone::Bad,
        )
    } else {
        style.paint(
            &format!(
                "\nReady: kubectl tenantflux upgrade apply --to {:?}",
                view.requested
            ),
            Tone::Good,
        )
    };
    format!("{verdict}\n")
}

pub fn render_state(view: &StateView, style: Style) -> String {
    let mut out = String::new();
    if !view.present {
        out.push_str("No upgrade has run in this cluster.\n");
        return out;
    }
    line(
        &mut out,
        "Upgrade",
        &format!(
            "Flux {} → {} ({})",
            or_dash(&view.from_version),
            view.target,
            view.phase.paint(style)
        ),
    );
    line(&mut out, "Message", &view.message);
    line(
        &mut out,
        "Version bump",
        &if view.bumped {
            format!(
                "spec.distribution.version {:?} (generation {})",
                view.written_version, view.instance_generation
            )
        } else {
            "not yet".to_owned()
        },
    );
    line(
        &mut out,
        "Started",
        &format!("{} by {}", view.started_at, or_dash(&view.requested_by)),
    );
    if !view.finished_at.is_empty() {
        line(&mut out, "Finished", &view.finished_at);
    }
    if view.runs > 1 {
        line(
            &mut out,
            "Resumed",
            &format!("{} time(s) after an agent restart", view.runs - 1),
        );
    }
    if !view.crds.is_empty() {
        let _ = writeln!(
            out,
            "\nStorage migration (up to {} objects at once):",
            view.concurrency
        );
        let rows: Vec<Vec<Cell>> = view
            .crds
            .iter()
            .map(|c| {
                let rate = if c.seconds > 0.0 && c.migrated > 0 {
                    format!("{:.0}/s", c.migrated as f64 / c.seconds)
                } else {
                    "-".into()
                };
                vec![
                    Cell::plain(&c.crd),
                    Cell::plain(&c.storage_version),
                    Cell::plain(format!("{}/{}", c.migrated, c.total)),
                    Cell::toned(
                        if c.done { "done" } else { "pending" },
                        if c.done { Tone::Good } else { Tone::Plain },
                    ),
                    Cell::plain(rate),
                ]
            })
            .collect();
        out.push_str(&table(
            "  ",
            &["CRD", "AT", "OBJECTS", "STATE", "RATE"],
            &rows,
            style,
        ));
    }
    if !view.kustomizations.is_empty() {
        out.push_str("\nKustomizations Ready before the version bump:\n");
        let rows: Vec<Vec<Cell>> = view
            .kustomizations
            .iter()
            .map(|k| {
                vec![
                    Cell::plain(format!("{}/{}", k.namespace, k.name)),
                    Cell::plain(&k.revision),
                    if k.ready_again {
                        Cell::toned("yes", Tone::Good)
                    } else {
                        Cell::toned("no", Tone::Bad)
                    },
                    Cell::plain(or_dash(&k.message)),
                ]
            })
            .collect();
        out.push_str(&table(
            "  ",
            &["KUSTOMIZATION", "REVISION", "READY AGAIN", "MESSAGE"],
            &rows,
            style,
        ));
    }
    out
}
