//! `kubectl tenantflux adopt plan|apply`: take over the Flux that runs already (an orphaned
//! Helm install of flux-operator, or controllers from `flux install`). The agent reads the
//! cluster and plans; the plugin shows the plan and asks for the apply.

use std::fmt::Write as _;

use clap::{Args, Subcommand};
use serde::Serialize;
use tenantflux_proto::v1 as pb;

use crate::{
    connect::{Agent, ConnectOptions},
    context::RequestTimeout,
    exit::Exit,
    output::{Cell, Printer, Style, Tone, table},
};

#[cfg(test)]
mod tests;

#[derive(Debug, Subcommand)]
pub enum AdoptCommand {
    /// Show what runs and what adopting it would take over, change and keep; writes nothing
    /// (exit 5 when adoption is refused).
    #[command(
        after_help = "Examples:\n  kubectl tenantflux adopt plan\n  kubectl tenantflux adopt plan -o yaml"
    )]
    Plan,
    /// Plan, then adopt: Helm's ownership leaves the FluxInstance, and every Kustomization Ready
    /// before must be Ready again at its revision (exit 5 when refused).
    #[command(
        after_help = "Examples:\n  kubectl tenantflux adopt apply\n  kubectl tenantflux adopt apply --allow-rollout --timeout 5m"
    )]
    Apply(ApplyArgs),
}

#[derive(Debug, Args)]
pub struct ApplyArgs {
    /// Adopt also when flux-operator would re-render Flux's controllers (they roll out).
    #[arg(long)]
    pub allow_rollout: bool,
    /// How long the Kustomizations may take to be Ready again (e.g. 2m).
    #[arg(long, default_value = "2m", value_name = "DURATION")]
    pub timeout: RequestTimeout,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectView {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub version: String,
    pub helm_release: String,
    pub managers: Vec<String>,
    pub generation: i64,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordView {
    pub namespace: String,
    pub name: String,
    pub release: String,
    pub status: String,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ViolationView {
    pub field: String,
    pub message: String,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanView {
    pub case: String,
    pub summary: String,
    pub namespace: String,
    pub operators: Vec<ObjectView>,
    pub instances: Vec<ObjectView>,
    pub controllers: Vec<ObjectView>,
    pub helm_records: Vec<RecordView>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub helm_records_note: String,
    pub changes: Vec<String>,
    pub keeps: Vec<String>,
    pub rollout: bool,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub rollout_reason: String,
    pub policy: String,
    pub violations: Vec<ViolationView>,
    pub refusals: Vec<String>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub instance: String,
    pub cleanup: Vec<String>,
    pub adopted: bool,
    /// Deployments named like Flux's outside the operator namespace, not taken as a Flux.
    pub ignored: Vec<ObjectView>,
    /// The objects of Helm's releases marked `helm.sh/resource-policy: keep`.
    pub marks: Vec<String>,
    /// What the plan leaves out because you may not read it, counted.
    pub hidden: Vec<String>,
}

fn object(o: pb::FoundObject) -> ObjectView {
    ObjectView {
        kind: o.kind,
        namespace: o.namespace,
        name: o.name,
        version: o.version,
        helm_release: o.helm_release,
        managers: o.managers,
        generation: o.generation,
    }
}

impl From<pb::AdoptionPlan> for PlanView {
    fn from(p: pb::AdoptionPlan) -> Self {
        Self {
            case: p.case,
            summary: p.summary,
            namespace: p.namespace,
            operators: p.operators.into_iter().map(object).collect(),
            instances: p.instances.into_iter().map(object).collect(),
            controllers: p.controllers.into_iter().map(object).collect(),
            ignored: p.ignored.into_iter().map(object).collect(),
            marks: p.marks,
            hidden: p.hidden,
            helm_records: p
                .helm_records
                .into_iter()
                .map(|r| RecordView {
                    namespace: r.namespace,
                    name: r.name,
                    release: r.release,
                    status: r.status,
                })
                .collect(),
            helm_records_note: p.helm_records_note,
            changes: p.changes,
            keeps: p.keeps,
            rollout: p.rollout,
            rollout_reason: p.rollout_reason,
            policy: p.policy,
            violations: p
                .violations
                .into_iter()
                .map(|v| ViolationView {
                    field: v.code,
                    message: v.message,
                })
                .collect(),
            refusals: p.refusals,
            instance: p.instance,
            cleanup: p.cleanup,
            adopted: p.adopted,
        }
    }
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KustomizationView {
    pub namespace: String,
    pub name: String,
    pub revision: String,
    pub ready_again: bool,
    pub message: String,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ResultView {
    pub plan: PlanView,
    pub done: Vec<String>,
    pub kustomizations: Vec<KustomizationView>,
}

fn dash(text: &str) -> &str {
    if text.is_empty() { "-" } else { text }
}

/// A titled list of lines, when there is any.
fn section(out: &mut String, title: &str, lines: &[String]) {
    if !lines.is_empty() {
        let _ = writeln!(out, "\n{title}:");
        for line in lines {
            let _ = writeln!(out, "  {line}");
        }
    }
}

/// The plan, section by section: what runs, what stops it, what changes and what stays,
/// the verdicts, Helm's leftovers and how to clean them up, the FluxInstance to create.
pub fn render_plan(view: &PlanView, style: Style) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}", view.summary);
    render_objects(&mut out, view, style);
    section(&mut out, "Refused", &view.refusals);
    section(&mut out, "Not shown (you may not read them)", &view.hidden);
    section(
        &mut out,
        "Ignored (named like Flux's, outside the operator namespace; anyone who administers their namespace can create one)",
        &ignored(view),
    );
    section(&mut out, "Changes", &view.changes);
    section(&mut out, "Keeps", &view.keeps);
    section(
        &mut out,
        "Kept from Helm (helm.sh/resource-policy: keep, so helm uninstall or upgrade of the old release leaves them)",
        &view.marks,
    );
    if view.case != "none" {
        render_rollout_and_policy(&mut out, view, style);
    }
    render_helm_records(&mut out, view);
    section(&mut out, "Remove them with", &view.cleanup);
    render_uninstall_advice(&mut out, view, style);
    render_instance(&mut out, view);
    out
}

/// The table of what runs: operators, FluxInstances, then controllers.
fn render_objects(out: &mut String, view: &PlanView, style: Style) {
    let objects: Vec<&ObjectView> = view
        .operators
        .iter()
        .chain(&view.instances)
        .chain(&view.controllers)
        .collect();
    if objects.is_empty() {
        return;
    }
    out.push('\n');
    let rows: Vec<Vec<Cell>> = objects
        .iter()
        .map(|o| {
            vec![
                Cell::plain(&o.kind),
                Cell::plain(format!("{}/{}", o.namespace, o.name)),
                Cell::plain(dash(&o.version)),
                Cell::plain(dash(&o.helm_release)),
                Cell::plain(dash(&o.managers.join(","))),
            ]
        })
        .collect();
    out.push_str(&table(
        "",
        &[
            "KIND",
            "OBJECT",
            "VERSION",
            "HELM RELEASE",
            "FIELD MANAGERS",
        ],
        &rows,
        style,
    ));
}

/// The Deployments named like Flux's that are not taken as a Flux, one line each.
fn ignored(view: &PlanView) -> Vec<String> {
    view.ignored
        .iter()
        .map(|o| format!("{} {}/{}", o.kind, o.namespace, o.name))
        .collect()
}

/// Whether the controllers roll out, and how the FluxInstance stands against the policy.
fn render_rollout_and_policy(out: &mut String, view: &PlanView, style: Style) {
    let rollout = if view.rollout {
        style.paint(&format!("yes: {}", view.rollout_reason), Tone::Bad)
    } else {
        "no: no Flux controller Deployment is re-rendered".to_owned()
    };
    let _ = writeln!(out, "\nRollout: {rollout}");
    let policy = if view.policy.is_empty() {
        "none held".to_owned()
    } else if view.violations.is_empty() {
        format!("{}: the FluxInstance complies", view.policy)
    } else {
        format!(
            "{}: {} field(s) outside it, left running as they are",
            view.policy,
            view.violations.len()
        )
    };
    let _ = writeln!(out, "Policy: {policy}");
    for v in &view.violations {
        let _ = writeln!(out, "  {}", style.paint(&v.message, Tone::Bad));
    }
}

/// Helm's release records, left in place, and what could not be listed of them.
fn render_helm_records(out: &mut String, view: &PlanView) {
    if !view.helm_records.is_empty() {
        let _ = writeln!(
            out,
            "\nHelm release records (left in place; nothing reads them once adopted):"
        );
        for r in &view.helm_records {
            let _ = writeln!(
                out,
                "  {}/{} ({}, {})",
                r.namespace,
                r.name,
                r.release,
                dash(&r.status)
            );
        }
    }
    if !view.helm_records_note.is_empty() {
        let _ = writeln!(out, "\nHelm release records: {}", view.helm_records_note);
    }
}

/// Whether `helm uninstall` is safe yet: only once every object of the releases is marked.
fn render_uninstall_advice(out: &mut String, view: &PlanView, style: Style) {
    if view.marks.is_empty() {
        return;
    }
    let pending = view.marks.iter().any(|m| m.ends_with(": to mark"));
    let _ = writeln!(
        out,
        "\n{}",
        if pending {
            style.paint(
                "Do not `helm uninstall` these releases before `kubectl tenantflux adopt apply` marked their objects: Helm deletes what its release holds, flux-operator included.",
                Tone::Bad,
            )
        } else {
            "Safe cleanups: delete the records (above), or `helm uninstall` the releases: Helm keeps every object marked above.".to_owned()
        }
    );
}

/// The FluxInstance adopting creates, indented.
fn render_instance(out: &mut String, view: &PlanView) {
    if !view.instance.is_empty() {
        let _ = writeln!(out, "\nFluxInstance to create:");
        for line in view.instance.lines() {
            let _ = writeln!(out, "  {line}");
        }
    }
}

fn render_result(view: &ResultView, style: Style) -> String {
    let mut out = render_plan(&view.plan, style);
    if !view.done.is_empty() {
        let _ = writeln!(out, "\nDone:");
        for line in &view.done {
            let _ = writeln!(out, "  {line}");
        }
    }
    out
}

pub async fn run(
    command: AdoptCommand,
    options: &ConnectOptions,
    printer: &Printer,
) -> anyhow::Result<()> {
    let agent = Agent::connect(options).await?;
    match command {
        AdoptCommand::Plan => {
            let plan = agent
                .call(agent.adopt().plan_adoption(pb::PlanAdoptionRequest {}))
                .await?;
            let view = PlanView::from(plan);
            printer.print(&view, render_plan)?;
            if view.case == "refused" {
                return Err(Exit::UpgradeBlocked.mark(anyhow::anyhow!(
                    "adoption is refused: {}",
                    view.refusals.join("; ")
                )));
            }
            Ok(())
        }
        AdoptCommand::Apply(args) => {
            let timeout_seconds = args
                .timeout
                .get()
                .map_or(0, |t| u32::try_from(t.as_secs()).unwrap_or(u32::MAX));
            let result = agent
                .call(agent.adopt().apply_adoption(pb::ApplyAdoptionRequest {
                    allow_rollout: args.allow_rollout,
                    timeout_seconds,
                }))
                .await
                .map_err(|err| Exit::UpgradeBlocked.on_refusal(err))?;
            let view = ResultView {
                plan: result
                    .plan
                    .map(PlanView::from)
                    .unwrap_or_else(|| PlanView::from(pb::AdoptionPlan::default())),
                done: result.done,
                kustomizations: result
                    .kustomizations
                    .into_iter()
                    .map(|k| KustomizationView {
                        namespace: k.namespace,
                        name: k.name,
                        revision: k.revision,
                        ready_again: k.ready_again,
                        message: k.message,
                    })
                    .collect(),
            };
            printer.print(&view, render_result)
        }
    }
}
