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

/// The plan without its verdict line: the upgrade, the facts it rests on, the stored
/// versions to migrate, the objects using removed API versions, the blockers and warnings.
pub(super) fn render_plan_body(view: &PlanView, style: Style) -> String {
    let mut out = String::new();
    render_heading(&mut out, view);
    render_facts(&mut out, view);
    render_migrations(&mut out, view, style);
    render_removed_uses(&mut out, view, style);
    if view.hidden_removed_api_uses > 0 {
        let _ = writeln!(
            out,
            "\n{} more objects using API versions Flux {} removes are in namespaces you may not list",
            view.hidden_removed_api_uses, view.target
        );
    }
    render_findings(&mut out, view, style);
    out
}

/// From which version to which, and what spec.distribution.version becomes.
fn render_heading(out: &mut String, view: &PlanView) {
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
}

/// What the plan was judged against: Kubernetes, the policy and its deadline, the known
/// releases, the flux CLI.
fn render_facts(out: &mut String, view: &PlanView) {
    if !view.kubernetes_minimum.is_empty() {
        line(
            out,
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
    line(out, "Policy", &policy);
    if let Some(d) = &view.deadline {
        line(
            out,
            "Deadline",
            &format!(
                "Flux {} or later by {} (warnings from {} days before)",
                d.minimum_version, d.date, d.warn_days
            ),
        );
    }
    line(
        out,
        "Releases",
        &format!("as known from {}", view.known_releases),
    );
    if !view.flux_cli.is_empty() {
        line(out, "flux CLI", &view.flux_cli);
    }
}

/// The CRDs whose stored versions Flux's next release no longer serves.
fn render_migrations(out: &mut String, view: &PlanView, style: Style) {
    if view.migrations.is_empty() {
        return;
    }
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

/// The objects written with an API version the target removes, and who writes them.
fn render_removed_uses(out: &mut String, view: &PlanView, style: Style) {
    if view.removed_api_uses.is_empty() {
        return;
    }
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
    let rows: Vec<Vec<Cell>> = shown.iter().map(|u| removed_use_cells(u)).collect();
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

/// One use of a removed API version: the object, the version (red when it blocks), what to
/// use instead, and the Kustomization or field manager that writes it.
fn removed_use_cells(u: &RemovedUseView) -> Vec<Cell> {
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
}

/// The blockers (red bullets), then the warnings.
fn render_findings(out: &mut String, view: &PlanView, style: Style) {
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

/// An upgrade's state: its progress lines, the storage migration, and the Kustomizations
/// that must be Ready again.
pub fn render_state(view: &StateView, style: Style) -> String {
    let mut out = String::new();
    if !view.present {
        out.push_str("No upgrade has run in this cluster.\n");
        return out;
    }
    render_progress(&mut out, view, style);
    render_crds(&mut out, view, style);
    render_kustomizations(&mut out, view, style);
    out
}

/// Which upgrade, its phase and message, the version bump, when it started and finished.
fn render_progress(out: &mut String, view: &StateView, style: Style) {
    line(
        out,
        "Upgrade",
        &format!(
            "Flux {} → {} ({})",
            or_dash(&view.from_version),
            view.target,
            view.phase.paint(style)
        ),
    );
    line(out, "Message", &view.message);
    line(
        out,
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
        out,
        "Started",
        &format!("{} by {}", view.started_at, or_dash(&view.requested_by)),
    );
    if !view.finished_at.is_empty() {
        line(out, "Finished", &view.finished_at);
    }
    if view.runs > 1 {
        line(
            out,
            "Resumed",
            &format!("{} time(s) after an agent restart", view.runs - 1),
        );
    }
}

/// The storage migration, one row per CRD with its rate.
fn render_crds(out: &mut String, view: &StateView, style: Style) {
    if view.crds.is_empty() {
        return;
    }
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

/// The Kustomizations Ready before the bump, and whether each is Ready again.
fn render_kustomizations(out: &mut String, view: &StateView, style: Style) {
    if view.kustomizations.is_empty() {
        return;
    }
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
