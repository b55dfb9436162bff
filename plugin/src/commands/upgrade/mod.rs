//! `kubectl tenantflux upgrade plan|apply|status`: safe Flux upgrades through the agent, which
//! plans them against the cluster and runs them from a record stored in the cluster.

use std::{
    fmt::Write as _,
    io::{self, IsTerminal as _, Write as _},
    time::Duration,
};

use clap::{Args, Subcommand};
use tenantflux_proto::v1 as pb;

mod render;
#[cfg(test)]
mod tests;
mod view;

use self::{render::render_plan_body, view::FindingView};
pub use self::{
    render::{render_plan, render_state},
    view::{PlanView, StateView},
};
use crate::{
    connect::{Agent, ConnectOptions, Reconnects},
    context::RequestTimeout,
    exit::Exit,
    flux_cli::{self, FluxCli, Skew},
    output::{Printer, Style},
    state::State as _,
};

/// How many uses outside Git the plan's table shows.
const SHOWN_USES: usize = 10;

/// How long `apply` and `status --wait` keep trying to reach a restarted agent.
const RECONNECT_FOR: Duration = Duration::from_secs(180);

#[derive(Debug, Subcommand)]
pub enum UpgradeCommand {
    /// Show what upgrading to a Flux version or range would do, and what blocks it (exit 5
    /// when blocked).
    #[command(
        after_help = "Examples:\n  kubectl tenantflux upgrade plan --to 2.9.x\n  kubectl tenantflux upgrade plan --to \">=2.8.0 <2.10.0\" -o json"
    )]
    Plan(TargetArg),
    /// Plan, then migrate stored API versions, bump the FluxInstance's version, and follow
    /// it until Ready (exit 5 when blocked, 1 when failed).
    #[command(
        after_help = "Examples:\n  kubectl tenantflux upgrade apply --to 2.9.x\n  kubectl tenantflux upgrade apply --to 2.9.3 --yes --timeout 15m"
    )]
    Apply(ApplyArgs),
    /// Show the current or last upgrade; --wait follows it until it is finished.
    #[command(
        after_help = "Examples:\n  kubectl tenantflux upgrade status\n  kubectl tenantflux upgrade status --wait"
    )]
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
        view.phase != pb::UpgradePhase::Failed,
        "the upgrade to Flux {} failed: {}",
        view.target,
        view.message
    );
    Ok(())
}

/// The agent's plan, with the flux CLI on PATH checked against the target.
async fn plan(agent: &Agent, to: &str, options: &ConnectOptions) -> anyhow::Result<PlanView> {
    let timeout = options.timeout.unwrap_or(flux_cli::FLUX_CLI_TIMEOUT);
    let mut client = agent.upgrade();
    let (plan, cli) = tokio::join!(
        agent.call(client.plan_upgrade(pb::PlanUpgradeRequest { to: to.to_owned() })),
        flux_cli::detect(timeout)
    );
    let plan = plan?;
    let mut view = PlanView::from(plan);
    view.flux_cli = match (&cli, view.target.is_empty()) {
        (FluxCli::Found(cli), false) => match flux_cli::skew(cli, &view.target) {
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
    let mut reconnects = Reconnects::new();
    loop {
        let watched = async {
            let agent = Agent::connect(options).await?;
            let mut stream = agent
                .call(agent.upgrade().watch_upgrade(pb::GetUpgradeRequest {}))
                .await?;
            lost_since = None;
            reconnects = Reconnects::new();
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
        reconnects.wait().await;
    }
}

fn progress_line(view: &StateView) -> String {
    let mut line = format!("[{}] {}", view.phase.word(), view.message);
    if view.phase == pb::UpgradePhase::Migrating
        && let Some(crd) = view.crds.iter().find(|c| !c.done)
    {
        let _ = write!(line, " ({}/{} objects)", crd.migrated, crd.total);
    }
    line
}

fn or_dash(text: &str) -> &str {
    if text.is_empty() { "-" } else { text }
}
