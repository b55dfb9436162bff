//! `kubectl tenantflux instance ...`: the tenant's FluxInstance through the agent, which checks
//! every change against the policy it holds.

use std::io::Write as _;

use anyhow::Context as _;
use clap::Subcommand;
use serde_json::Value;
use tenantflux_proto::v1::{ApplyInstanceRequest, GetInstanceRequest};

mod diff;
mod edit;

pub use self::{
    diff::diff,
    edit::{edit_buffer, strip_comments},
};
use crate::{
    connect::{Agent, ConnectOptions},
    context::FileArg,
    exit::Exit,
    output::Printer,
};

#[derive(Debug, Subcommand)]
pub enum InstanceCommand {
    /// Show the FluxInstance (YAML; -o json for JSON).
    #[command(
        after_help = "Examples:\n  kubectl tenantflux instance get\n  kubectl tenantflux instance get -o json"
    )]
    Get,
    /// Check a FluxInstance manifest against the policy and apply it (server-side).
    #[command(
        after_help = "Examples:\n  kubectl tenantflux instance apply -f flux-instance.yaml --dry-run\n  kubectl tenantflux instance apply -f flux-instance.yaml"
    )]
    Apply {
        #[command(flatten)]
        file: FileArg,
        /// Check everything, on the API server too, and change nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Show what applying a FluxInstance manifest would change (a server-side dry run).
    #[command(
        after_help = "Examples:\n  kubectl tenantflux instance diff -f flux-instance.yaml\n  kubectl tenantflux instance diff -f flux-instance.yaml || echo \"differences (1), or an error\""
    )]
    Diff {
        #[command(flatten)]
        file: FileArg,
    },
    /// Edit the FluxInstance in $KUBE_EDITOR or $EDITOR (like kubectl edit): the result is
    /// checked against the policy and applied; a refused edit reopens with the reasons.
    #[command(
        after_help = "Examples:\n  kubectl tenantflux instance edit\n  KUBE_EDITOR=\"code --wait\" kubectl tenantflux instance edit"
    )]
    Edit,
}

/// The live FluxInstance's manifest, or an error saying how to create one.
async fn live_manifest(agent: &Agent) -> anyhow::Result<String> {
    let state = agent
        .call(agent.instance().get_instance(GetInstanceRequest {}))
        .await?;
    anyhow::ensure!(
        state.present,
        "the cluster has no FluxInstance (write one and run `kubectl tenantflux instance apply -f FILE`)"
    );
    Ok(state.manifest)
}

pub async fn run(
    command: InstanceCommand,
    options: &ConnectOptions,
    printer: &Printer,
) -> anyhow::Result<Exit> {
    match command {
        InstanceCommand::Get => {
            let agent = Agent::connect(options).await?;
            let manifest = live_manifest(&agent).await?;
            let object: Value =
                tenantflux_core::yaml::from_str(&manifest).context("the agent's answer")?;
            printer.print(&object, |_, _| manifest.clone())?;
            Ok(Exit::Success)
        }
        InstanceCommand::Apply { file, dry_run } => {
            let manifest = file.read()?;
            let agent = Agent::connect(options).await?;
            let response = agent
                .call(
                    agent
                        .instance()
                        .apply_instance(ApplyInstanceRequest { manifest, dry_run }),
                )
                .await
                .map_err(|err| Exit::Refused.on_refusal(err))
                .with_context(|| format!("{} was not applied", file.path.display()))?;
            for warning in &response.warnings {
                eprintln!("warning: {warning}");
            }
            let verb = match (response.created, response.changed) {
                (true, _) => "created",
                (false, true) => "configured",
                (false, false) => "unchanged",
            };
            let suffix = if dry_run { " (dry run)" } else { "" };
            let object: Value = tenantflux_core::yaml::from_str(&response.manifest)
                .context("the agent's answer")?;
            printer.print(&object, |_, _| {
                format!("fluxinstance/flux {verb}{suffix}\n")
            })?;
            Ok(Exit::Success)
        }
        InstanceCommand::Edit => edit::edit(options).await.map(|()| Exit::Success),
        InstanceCommand::Diff { file } => {
            let manifest = file.read()?;
            let agent = Agent::connect(options).await?;
            let response = agent
                .call(agent.instance().diff_instance(ApplyInstanceRequest {
                    manifest,
                    dry_run: true,
                }))
                .await
                .map_err(|err| Exit::Refused.on_refusal(err))
                .with_context(|| format!("{} cannot be applied", file.path.display()))?;
            let diff = diff(&response.live, &response.applied);
            let mut stdout = std::io::stdout().lock();
            stdout.write_all(diff.as_bytes())?;
            stdout.flush()?;
            // As `kubectl diff` and `flux diff`: a script learns "there are changes" from 1.
            Ok(if diff.is_empty() {
                Exit::Success
            } else {
                Exit::Failure
            })
        }
    }
}
