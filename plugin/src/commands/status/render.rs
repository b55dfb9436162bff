//! The `status` table: one section each for the agent, flux-operator, the FluxInstance and
//! the policy.

use std::fmt::Write as _;

use tenantflux_core::policy::Trust;

use crate::{
    output::{Cell, Style, Tone, table},
    state::{self, State as _},
    views::status::{StatusView, or_dash},
};

/// One `Key:   value` line of a section.
fn field(out: &mut String, key: &str, value: &str) {
    let key = format!("{key}:");
    let _ = if value.is_empty() {
        writeln!(out, "  {key}")
    } else {
        writeln!(out, "  {key:<13}{value}")
    };
}

/// The status, one section after another: the agent, flux-operator, the FluxInstance (and
/// its components), the policy.
pub fn render_table(view: &StatusView, style: Style) -> String {
    let mut out = String::new();
    render_agent(&mut out, view, style);
    render_operator(&mut out, view, style);
    render_instance(&mut out, view, style);
    render_policy(&mut out, view, style);
    out
}

/// A list under its key, one `- item` a line, each painted red.
fn bad_list(out: &mut String, items: &[String], style: Style) {
    for item in items {
        let _ = writeln!(out, "    - {}", style.paint(item, Tone::Bad));
    }
}

/// The agent: its version, health, the cluster it runs in, its problems.
fn render_agent(out: &mut String, view: &StatusView, style: Style) {
    let agent = &view.agent;
    out.push_str("Agent\n");
    field(out, "Version", or_dash(&agent.version));
    field(out, "Namespace", or_dash(&agent.namespace));
    field(out, "Health", &agent.health.paint(style));
    field(out, "Kubernetes", or_dash(&agent.kubernetes_version));
    if !agent.cluster_uid.is_empty() {
        let name = match agent.cluster_name.as_str() {
            "" => String::new(),
            name => format!(" ({name})"),
        };
        field(out, "Cluster", &format!("{}{name}", agent.cluster_uid));
    }
    match agent.problems.as_slice() {
        [] => field(out, "Problems", "none"),
        problems => {
            field(out, "Problems", "");
            bad_list(out, problems, style);
        }
    }
}

/// flux-operator: its phase and replicas, and where the agent installs it from when it does.
fn render_operator(out: &mut String, view: &StatusView, style: Style) {
    let operator = &view.operator;
    out.push_str("\nflux-operator\n");
    field(out, "Phase", &operator.phase.paint(style));
    field(out, "Version", or_dash(&operator.version));
    let replicas = format!("{}/{}", operator.ready_replicas, operator.desired_replicas);
    let replicas = if operator.namespace.is_empty() {
        replicas
    } else {
        format!("{replicas} in namespace {}", operator.namespace)
    };
    field(out, "Replicas", &replicas);
    if !operator.reason.is_empty() {
        field(out, "Reason", &operator.reason);
    }
    // Only when the agent installs flux-operator itself.
    if !operator.source.is_empty() {
        field(out, "Source", &operator.source);
        field(out, "Bundle", or_dash(&operator.bundle_digest));
        let trust = operator.trust();
        if trust != Trust::None {
            field(out, "Release", &trust.to_string());
        }
        if let Some(since) = &operator.last_transition {
            field(out, "Since", since);
        }
        if !operator.notices.is_empty() {
            field(out, "Notices", "");
            bad_list(out, &operator.notices, style);
        }
    }
}

/// The FluxInstance and its components, or that there is none.
fn render_instance(out: &mut String, view: &StatusView, style: Style) {
    let instance = &view.instance;
    out.push_str("\nFluxInstance\n");
    if !instance.present {
        field(out, "Present", "no (create a FluxInstance named flux)");
        return;
    }
    field(
        out,
        "Name",
        &format!("{}/{}", instance.namespace, instance.name),
    );
    let ready = match &instance.ready {
        Some(c) => {
            let mut text = c.status.paint(style);
            for detail in [&c.reason, &c.message] {
                if !detail.is_empty() {
                    text.push_str(" - ");
                    text.push_str(detail);
                }
            }
            text
        }
        None => "not reconciled yet".to_owned(),
    };
    field(out, "Ready", &ready);
    field(out, "Requested", or_dash(&instance.requested_version));
    field(out, "Installed", or_dash(&instance.distribution_version));
    field(out, "Registry", or_dash(&instance.registry));
    field(
        out,
        "Suspended",
        if instance.suspended { "true" } else { "false" },
    );
    render_components(out, view, style);
}

/// The Flux controllers the FluxInstance reports, one row each.
fn render_components(out: &mut String, view: &StatusView, style: Style) {
    out.push_str("\nComponents\n");
    if view.instance.components.is_empty() {
        out.push_str("  none reported\n");
        return;
    }
    let rows: Vec<Vec<Cell>> = view
        .instance
        .components
        .iter()
        .map(|c| {
            vec![
                Cell::plain(&c.name),
                state::ready(c.ready).cell(),
                Cell::plain(or_dash(&c.image)),
            ]
        })
        .collect();
    out.push_str(&table("  ", &["NAME", "READY", "IMAGE"], &rows, style));
}

/// The policy held: its generation, key and expiry, the verdicts, the deadline, and each
/// violation and warning.
fn render_policy(out: &mut String, view: &StatusView, style: Style) {
    out.push_str("\nPolicy\n");
    let Some(policy) = &view.policy else {
        field(out, "Generation", "none");
        return;
    };
    field(out, "Name", &policy.name);
    field(out, "Generation", &policy.generation.to_string());
    if !policy.key_id.is_empty() {
        field(out, "Key", &policy.key_id);
    }
    if let Some(at) = &policy.expires_at {
        let text = if policy.stale {
            style.paint(&format!("{at} (stale: expired, still enforced)"), Tone::Bad)
        } else {
            at.clone()
        };
        field(out, "Expires", &text);
    }
    let compliant = if policy.compliant {
        style.paint("yes", Tone::Good)
    } else {
        style.paint("no", Tone::Bad)
    };
    field(out, "Compliant", &compliant);
    let enforced = match &policy.enforcement {
        Some(v) => style.paint(&v.line(), if v.enforced { Tone::Good } else { Tone::Bad }),
        None => "not proven yet".to_owned(),
    };
    field(out, "Enforced", &enforced);
    if let Some(deadline) = &policy.upgrade_deadline {
        let text = format!("Flux {} from {}", deadline.minimum_version, deadline.date);
        field(out, "Deadline", &text);
    }
    for violation in &policy.violations {
        field(out, "Violation", violation);
    }
    for warning in &policy.warnings {
        field(out, "Warning", warning);
    }
}
