//! `kubectl tenantflux upgrade plan|apply|status`: safe Flux upgrades through the agent, which
//! plans them against the cluster and runs them from a record stored in the cluster.

use std::{
    fmt::Write as _,
    io::{self, IsTerminal as _, Write as _},
    time::Duration,
};

use clap::{Args, Subcommand};
use serde::Serialize;
use tenantflux_proto::v1 as pb;

use crate::{
    cli::RequestTimeout,
    connect::{Agent, ConnectOptions},
    exit::Exit,
    output::{Cell, Printer, Style, Tone, table},
    version::{self, FluxCli, Skew},
};

/// How many uses outside Git the plan's table shows.
const SHOWN_USES: usize = 10;

/// How long `apply` and `status --wait` keep trying to reach a restarted agent.
const RECONNECT_FOR: Duration = Duration::from_secs(180);

#[derive(Debug, Subcommand)]
pub enum UpgradeCommand {
    /// Show what upgrading to a Flux version or range would do, and what blocks it (exit 5
    /// when blocked).
    Plan(TargetArg),
    /// Plan, then migrate stored API versions, bump the FluxInstance's version, and follow
    /// it until Ready (exit 5 when blocked, 1 when failed).
    Apply(ApplyArgs),
    /// Show the current or last upgrade; --wait follows it until it is finished.
    Status {
        #[arg(long)]
        wait: bool,
    },
}

#[derive(Debug, Args)]
pub struct TargetArg {
    /// A Flux version (2.8.3) or range (2.8.x, ">=2.8.0 <2.10.0").
    #[arg(long, value_name = "VERSION|RANGE")]
    pub to: String,
}

#[derive(Debug, Args)]
pub struct ApplyArgs {
    #[command(flatten)]
    pub target: TargetArg,
    /// Do not ask for confirmation.
    #[arg(short, long)]
    pub yes: bool,
    /// How long flux-operator may take to report the new version Ready (e.g. 10m).
    #[arg(long, default_value = "10m", value_name = "DURATION")]
    pub timeout: RequestTimeout,
    /// How many objects the agent rewrites at once while migrating stored versions
    /// (default: the agent's --upgrade-concurrency, 8).
    #[arg(long, env = "TENANTFLUX_UPGRADE_CONCURRENCY", value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=256))]
    pub concurrency: Option<u32>,
}

pub async fn run(
    command: UpgradeCommand,
    options: &ConnectOptions,
    printer: &Printer,
) -> anyhow::Result<()> {
    match command {
        UpgradeCommand::Plan(target) => {
            let agent = Agent::connect(options).await?;
            let view = plan(&agent, &target.to, options).await?;
            printer.print(&view, render_plan)?;
            ensure_not_blocked(&view)
        }
        UpgradeCommand::Apply(args) => apply(args, options, printer).await,
        UpgradeCommand::Status { wait: false } => {
            let agent = Agent::connect(options).await?;
            let state = agent
                .call(agent.upgrade().get_upgrade(pb::GetUpgradeRequest {}))
                .await?;
            let view = StateView::from(state);
            printer.print(&view, render_state)?;
            ensure_not_failed(&view)
        }
        UpgradeCommand::Status { wait: true } => {
            let view = follow(options).await?;
            printer.print(&view, render_state)?;
            ensure_not_failed(&view)
        }
    }
}

fn ensure_not_blocked(view: &PlanView) -> anyhow::Result<()> {
    if view.blocked {
        return Err(Exit::UpgradeBlocked.mark(anyhow::anyhow!(
            "the upgrade to {:?} is blocked by {} problem(s); fix them and plan again",
            view.requested,
            view.blockers.len()
        )));
    }
    Ok(())
}

fn ensure_not_failed(view: &StateView) -> anyhow::Result<()> {
    anyhow::ensure!(
        view.phase != "failed",
        "the upgrade to Flux {} failed: {}",
        view.target,
        view.message
    );
    Ok(())
}

/// The agent's plan, with the flux CLI on PATH checked against the target.
async fn plan(agent: &Agent, to: &str, options: &ConnectOptions) -> anyhow::Result<PlanView> {
    let timeout = options.timeout.unwrap_or(version::FLUX_CLI_TIMEOUT);
    let mut client = agent.upgrade();
    let (plan, cli) = tokio::join!(
        agent.call(client.plan_upgrade(pb::PlanUpgradeRequest { to: to.to_owned() })),
        version::detect_flux_cli(timeout)
    );
    let plan = plan?;
    let mut view = PlanView::from(plan);
    view.flux_cli = match (&cli, view.target.is_empty()) {
        (FluxCli::Found(cli), false) => match version::skew(cli, &view.target) {
            Skew::Skewed { advice } => {
                view.warnings.push(FindingView {
                    code: "flux-cli".into(),
                    message: format!("the flux CLI on PATH is {cli}: {advice}"),
                });
                format!("{cli} (skewed)")
            }
            Skew::Compatible => format!("{cli} (compatible)"),
            Skew::Unknown { reason } => format!("{cli} ({reason})"),
        },
        (FluxCli::Found(cli), true) => cli.clone(),
        (FluxCli::NotFound, _) => "not found on PATH".into(),
        (FluxCli::Unusable(reason), _) => reason.clone(),
    };
    Ok(view)
}

async fn apply(args: ApplyArgs, options: &ConnectOptions, printer: &Printer) -> anyhow::Result<()> {
    let agent = Agent::connect(options).await?;
    let view = plan(&agent, &args.target.to, options).await?;
    // The plan goes to stderr, so stdout carries only the final report; it is being applied, so
    // without the plan's "Ready: kubectl tenantflux upgrade apply …" line.
    eprint!("{}", render_plan_body(&view, Style { color: false }));
    ensure_not_blocked(&view)?;
    if !args.yes {
        anyhow::ensure!(
            io::stdin().is_terminal(),
            "refusing to upgrade without confirmation: run on a terminal or pass --yes"
        );
        eprint!(
            "Upgrade Flux {} to {}? [y/N] ",
            or_dash(&view.current_version),
            view.target
        );
        io::stderr().flush()?;
        let mut answer = String::new();
        io::stdin().read_line(&mut answer)?;
        if !matches!(answer.trim(), "y" | "Y" | "yes") {
            anyhow::bail!("upgrade cancelled; nothing was changed");
        }
    }
    let timeout_seconds = args
        .timeout
        .get()
        .map_or(0, |d| u32::try_from(d.as_secs()).unwrap_or(u32::MAX).max(1));
    agent
        .call(agent.upgrade().apply_upgrade(pb::ApplyUpgradeRequest {
            to: args.target.to.clone(),
            concurrency: args.concurrency.unwrap_or(0),
            timeout_seconds,
        }))
        .await
        // The agent plans again before it starts: a blocker found since, or an upgrade
        // already running, is a failed precondition.
        .map_err(|err| Exit::UpgradeBlocked.on_refusal(err))?;
    let view = follow(options).await?;
    printer.print(&view, render_state)?;
    ensure_not_failed(&view)
}

/// Follows the upgrade until it is finished, with progress on stderr (one rewritten line on
/// a terminal), reconnecting while the agent restarts (it resumes the upgrade).
async fn follow(options: &ConnectOptions) -> anyhow::Result<StateView> {
    let terminal = io::stderr().is_terminal();
    let mut last_line = String::new();
    let mut lost_since: Option<std::time::Instant> = None;
    loop {
        let watched = async {
            let agent = Agent::connect(options).await?;
            let mut stream = agent
                .call(agent.upgrade().watch_upgrade(pb::GetUpgradeRequest {}))
                .await?;
            lost_since = None;
            loop {
                match agent.next(&mut stream).await {
                    Ok(Some(state)) => {
                        let view = StateView::from(state);
                        let line = progress_line(&view);
                        if line != last_line {
                            if terminal {
                                eprint!("\r\x1b[K{line}");
                            } else {
                                eprintln!("{line}");
                            }
                            last_line = line;
                        }
                        if !view.present || view.finished() {
                            if terminal {
                                eprintln!();
                            }
                            return anyhow::Ok(Some(view));
                        }
                    }
                    Ok(None) => return Ok(None),
                    Err(err) => return Err(err.into()),
                }
            }
        };
        match watched.await {
            Ok(Some(view)) => return Ok(view),
            Ok(None) => {}
            Err(err) => {
                let since = *lost_since.get_or_insert_with(std::time::Instant::now);
                if since.elapsed() > RECONNECT_FOR {
                    return Err(err.context(format!(
                        "lost tenantflux-agent for {}s while following the upgrade; it goes on in the cluster: `kubectl tenantflux upgrade status --wait`",
                        RECONNECT_FOR.as_secs()
                    )));
                }
                if terminal {
                    eprintln!();
                }
                eprintln!("lost tenantflux-agent ({err:#}); reconnecting");
                last_line.clear();
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

fn progress_line(view: &StateView) -> String {
    let mut line = format!("[{}] {}", view.phase, view.message);
    if view.phase == "migrating"
        && let Some(crd) = view.crds.iter().find(|c| !c.done)
    {
        let _ = write!(line, " ({}/{} objects)", crd.migrated, crd.total);
    }
    line
}

fn or_dash(text: &str) -> &str {
    if text.is_empty() { "-" } else { text }
}

/// The stable `-o json|yaml` shape of `upgrade plan`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanView {
    pub requested: String,
    pub target: String,
    pub written_version: String,
    pub current_version: String,
    pub current_range: String,
    pub kubernetes_version: String,
    pub kubernetes_minimum: String,
    pub policy: String,
    pub policy_range: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deadline: Option<DeadlineView>,
    pub known_releases: String,
    pub flux_cli: String,
    pub blocked: bool,
    pub blockers: Vec<FindingView>,
    pub warnings: Vec<FindingView>,
    pub migrations: Vec<MigrationView>,
    pub removed_api_uses: Vec<RemovedUseView>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeadlineView {
    pub minimum_version: String,
    pub date: String,
    pub warn_days: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FindingView {
    pub code: String,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MigrationView {
    pub crd: String,
    pub kind: String,
    pub stored_versions: Vec<String>,
    pub storage_version: String,
    pub unserved: Vec<String>,
    pub objects: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RemovedUseView {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub api_version: String,
    pub replacement: String,
    pub kustomization: String,
    pub source: String,
    pub path: String,
    pub manager: String,
    pub blocking: bool,
}

fn findings(list: Vec<pb::Finding>) -> Vec<FindingView> {
    list.into_iter()
        .map(|f| FindingView {
            code: f.code,
            message: f.message,
        })
        .collect()
}

impl From<pb::UpgradePlan> for PlanView {
    fn from(p: pb::UpgradePlan) -> Self {
        Self {
            requested: p.requested,
            target: p.target,
            written_version: p.written_version,
            current_version: p.current_version,
            current_range: p.current_range,
            kubernetes_version: p.kubernetes_version,
            kubernetes_minimum: p.kubernetes_minimum,
            policy: p.policy,
            policy_range: p.policy_range,
            deadline: p.deadline.map(|d| DeadlineView {
                minimum_version: d.minimum_version,
                date: d.date,
                warn_days: d.warn_days,
            }),
            known_releases: p.known_releases,
            flux_cli: String::new(),
            blocked: p.blocked,
            blockers: findings(p.blockers),
            warnings: findings(p.warnings),
            migrations: p
                .migrations
                .into_iter()
                .map(|m| MigrationView {
                    crd: m.crd,
                    kind: m.kind,
                    stored_versions: m.stored_versions,
                    storage_version: m.storage_version,
                    unserved: m.unserved,
                    objects: m.objects,
                })
                .collect(),
            removed_api_uses: p
                .removed_api_uses
                .into_iter()
                .map(|u| RemovedUseView {
                    kind: u.kind,
                    namespace: u.namespace,
                    name: u.name,
                    api_version: u.api_version,
                    replacement: u.replacement,
                    kustomization: u.kustomization,
                    source: u.source,
                    path: u.path,
                    manager: u.manager,
                    blocking: u.blocking,
                })
                .collect(),
        }
    }
}

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
fn render_plan_body(view: &PlanView, style: Style) -> String {
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

/// The stable `-o json|yaml` shape of an upgrade's state (`apply`'s final report).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StateView {
    pub present: bool,
    pub id: String,
    pub requested: String,
    pub target: String,
    pub written_version: String,
    pub from_version: String,
    pub phase: String,
    pub message: String,
    pub crds: Vec<CrdView>,
    pub bumped: bool,
    pub instance_generation: i64,
    pub concurrency: u32,
    pub started_at: String,
    pub finished_at: String,
    pub requested_by: String,
    pub runs: u32,
    /// The post-upgrade health check: the Kustomizations Ready when the version was bumped.
    pub kustomizations: Vec<KustomizationHealthView>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KustomizationHealthView {
    pub namespace: String,
    pub name: String,
    pub revision: String,
    pub ready_again: bool,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CrdView {
    pub crd: String,
    pub storage_version: String,
    pub total: i64,
    pub migrated: i64,
    pub done: bool,
    pub attempts: u32,
    pub seconds: f64,
}

impl StateView {
    fn finished(&self) -> bool {
        matches!(self.phase.as_str(), "succeeded" | "failed")
    }
}

impl From<pb::UpgradeState> for StateView {
    fn from(s: pb::UpgradeState) -> Self {
        Self {
            present: s.present,
            id: s.id,
            requested: s.requested,
            target: s.target,
            written_version: s.written_version,
            from_version: s.from_version,
            phase: s.phase,
            message: s.message,
            crds: s
                .crds
                .into_iter()
                .map(|c| CrdView {
                    crd: c.crd,
                    storage_version: c.storage_version,
                    total: c.total,
                    migrated: c.migrated,
                    done: c.done,
                    attempts: c.attempts,
                    seconds: c.seconds,
                })
                .collect(),
            bumped: s.bumped,
            instance_generation: s.instance_generation,
            concurrency: s.concurrency,
            started_at: s.started_at,
            finished_at: s.finished_at,
            requested_by: s.requested_by,
            runs: s.runs,
            kustomizations: s
                .kustomizations
                .into_iter()
                .map(|k| KustomizationHealthView {
                    namespace: k.namespace,
                    name: k.name,
                    revision: k.revision,
                    ready_again: k.ready_again,
                    message: k.message,
                })
                .collect(),
        }
    }
}

pub fn render_state(view: &StateView, style: Style) -> String {
    let mut out = String::new();
    if !view.present {
        out.push_str("No upgrade has run in this cluster.\n");
        return out;
    }
    let tone = match view.phase.as_str() {
        "succeeded" => Tone::Good,
        "failed" => Tone::Bad,
        _ => Tone::Plain,
    };
    line(
        &mut out,
        "Upgrade",
        &format!(
            "Flux {} → {} ({})",
            or_dash(&view.from_version),
            view.target,
            style.paint(&view.phase, tone)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> pb::UpgradePlan {
        pb::UpgradePlan {
            requested: "2.8.x".into(),
            target: "2.8.8".into(),
            written_version: "2.8.x".into(),
            current_version: "2.6.4".into(),
            current_range: "2.6.x".into(),
            kubernetes_version: "1.36".into(),
            kubernetes_minimum: "1.33".into(),
            known_releases: "flux-operator v0.58.1".into(),
            migrations: vec![pb::CrdMigration {
                crd: "ocirepositories.source.toolkit.fluxcd.io".into(),
                kind: "OCIRepository".into(),
                stored_versions: vec!["v1beta2".into(), "v1".into()],
                storage_version: "v1".into(),
                unserved: vec!["v1beta2".into()],
                objects: 40,
            }],
            removed_api_uses: vec![pb::RemovedApiUse {
                kind: "OCIRepository".into(),
                namespace: "apps".into(),
                name: "podinfo".into(),
                api_version: "source.toolkit.fluxcd.io/v1beta2".into(),
                replacement: "source.toolkit.fluxcd.io/v1".into(),
                kustomization: "flux-system/apps".into(),
                source: "GitRepository/flux-system/fleet".into(),
                path: "./apps".into(),
                blocking: true,
                ..Default::default()
            }],
            blockers: vec![pb::Finding {
                code: "removed-api-in-git".into(),
                message: "Kustomization flux-system/apps applies …".into(),
            }],
            blocked: true,
            ..Default::default()
        }
    }

    #[test]
    fn the_plan_table_shows_migrations_uses_and_blockers() {
        let text = render_plan(&PlanView::from(plan()), Style::PLAIN);
        for part in [
            "Upgrade Flux 2.6.4 → 2.8.8 (requested \"2.8.x\"",
            "1.36 (Flux 2.8.8 needs 1.33 or later)",
            "ocirepositories.source.toolkit.fluxcd.io   v1beta2,v1   v1beta2   v1           40",
            "OCIRepository apps/podinfo   source.toolkit.fluxcd.io/v1beta2",
            "Kustomization flux-system/apps (GitRepository/flux-system/fleet ./apps)",
            "[removed-api-in-git]",
            "Blocked: fix the blockers above",
        ] {
            assert!(text.contains(part), "{part}:\n{text}");
        }
        assert!(ensure_not_blocked(&PlanView::from(plan())).is_err());
    }

    #[test]
    fn the_state_table_and_progress_line() {
        let view = StateView::from(pb::UpgradeState {
            present: true,
            target: "2.8.8".into(),
            from_version: "2.6.4".into(),
            phase: "migrating".into(),
            message: "migrating ocirepositories.source.toolkit.fluxcd.io".into(),
            crds: vec![pb::CrdProgress {
                crd: "ocirepositories.source.toolkit.fluxcd.io".into(),
                storage_version: "v1".into(),
                total: 40,
                migrated: 10,
                ..Default::default()
            }],
            concurrency: 8,
            runs: 2,
            kustomizations: vec![pb::KustomizationHealth {
                namespace: "apps".into(),
                name: "web".into(),
                revision: "main@sha1:1".into(),
                ready_again: false,
                message: "Ready=False: kustomize build failed".into(),
            }],
            ..Default::default()
        });
        assert_eq!(
            progress_line(&view),
            "[migrating] migrating ocirepositories.source.toolkit.fluxcd.io (10/40 objects)"
        );
        let text = render_state(&view, Style::PLAIN);
        assert!(text.contains("Flux 2.6.4 → 2.8.8 (migrating)"), "{text}");
        assert!(text.contains("1 time(s) after an agent restart"), "{text}");
        assert!(text.contains("10/40"), "{text}");
        assert!(
            text.contains(
                "apps/web        main@sha1:1   no            Ready=False: kustomize build failed"
            ),
            "{text}"
        );
        let none = StateView::from(pb::UpgradeState::default());
        assert!(render_state(&none, Style::PLAIN).contains("No upgrade has run"));
    }
}
