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

pub fn render_table(view: &StatusView, style: Style) -> String {
    let mut out = String::new();

    let agent = &view.agent;
    out.push_str("Agent\n");
    field(&mut out, "Version", or_dash(&agent.version));
    field(&mut out, "Namespace", or_dash(&agent.namespace));
    field(&mut out, "Health", &agent.health.paint(style));
    field(&mut out, "Kubernetes", or_dash(&agent.kubernetes_version));
    if !agent.cluster_uid.is_empty() {
        let name = match agent.cluster_name.as_str() {
            "" => String::new(),
            name => format!(" ({name})"),
        };
        field(&mut out, "Cluster", &format!("{}{name}", agent.cluster_uid));
    }
    match agent.problems.as_slice() {
        [] => field(&mut out, "Problems", "none"),
        problems => {
            field(&mut out, "Problems", "");
            for problem in problems {
                let _ = writeln!(out, "    - {}", style.paint(problem, Tone::Bad));
            }
        }
    }

    let operator = &view.operator;
    out.push_str("\nflux-operator\n");
    field(&mut out, "Phase", &operator.phase.paint(style));
    field(&mut out, "Version", or_dash(&operator.version));
    let replicas = format!("{}/{}", operator.ready_replicas, operator.desired_replicas);
    let replicas = if operator.namespace.is_empty() {
        replicas
    } else {
        format!("{replicas} in namespace {}", operator.namespace)
    };
    field(&mut out, "Replicas", &replicas);
    if !operator.reason.is_empty() {
        field(&mut out, "Reason", &operator.reason);
    }
    // Only when the agent installs flux-operator itself.
    if !operator.source.is_empty() {
        field(&mut out, "Source", &operator.source);
        field(&mut out, "Bundle", or_dash(&operator.bundle_digest));
        let trust = operator.trust();
        if trust != Trust::None {
            field(&mut out, "Release", &trust.to_string());
        }
        if let Some(since) = &operator.last_transition {
            field(&mut out, "Since", since);
        }
        if !operator.notices.is_empty() {
            field(&mut out, "Notices", "");
            for notice in &operator.notices {
                let _ = writeln!(out, "    - {}", style.paint(notice, Tone::Bad));
            }
        }
    }

    let instance = &view.instance;
    out.push_str("\nFluxInstance\n");
    if instance.present {
        field(
            &mut out,
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
        field(&mut out, "Ready", &ready);
        field(&mut out, "Requested", or_dash(&instance.requested_version));
        field(
            &mut out,
            "Installed",
            or_dash(&instance.distribution_version),
        );
        field(&mut out, "Registry", or_dash(&instance.registry));
        field(
            &mut out,
            "Suspended",
            if instance.suspended { "true" } else { "false" },
        );

        out.push_str("\nComponents\n");
        if instance.components.is_empty() {
            out.push_str("  none reported\n");
        } else {
            let rows: Vec<Vec<Cell>> = instance
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
    } else {
        field(&mut out, "Present", "no (create a FluxInstance named flux)");
    }

    out.push_str("\nPolicy\n");
    match &view.policy {
        Some(policy) => {
            field(&mut out, "Name", &policy.name);
            field(&mut out, "Generation", &policy.generation.to_string());
            if !policy.key_id.is_empty() {
                field(&mut out, "Key", &policy.key_id);
            }
            if let Some(at) = &policy.expires_at {
                let text = if policy.stale {
                    style.paint(&format!("{at} (stale: expired, still enforced)"), Tone::Bad)
                } else {
                    at.clone()
                };
                field(&mut out, "Expires", &text);
            }
            let compliant = if policy.compliant {
                style.paint("yes", Tone::Good)
            } else {
                style.paint("no", Tone::Bad)
            };
            field(&mut out, "Compliant", &compliant);
            let enforced = match &policy.enforcement {
                Some(v) => style.paint(&v.line(), if v.enforced { Tone::Good } else { Tone::Bad }),
                None => "not proven yet".to_owned(),
            };
            field(&mut out, "Enforced", &enforced);
            if let Some(deadline) = &policy.upgrade_deadline {
                let text = format!("Flux {} from {}", deadline.minimum_version, deadline.date);
                field(&mut out, "Deadline", &text);
            }
            for violation in &policy.violations {
                field(&mut out, "Violation", violation);
            }
            for warning in &policy.warnings {
                field(&mut out, "Warning", warning);
            }
        }
        None => field(&mut out, "Generation", "none"),
    }
    out
}
