//! `kubectl tenantflux instance ...`: the tenant's FluxInstance through the agent, which checks
//! every change against the policy it holds.

use anyhow::Context as _;
use clap::Subcommand;
use serde_json::Value;
use tenantflux_proto::v1::{ApplyInstanceRequest, GetInstanceRequest};

use crate::{
    connect::{Agent, ConnectOptions},
    output::Printer,
    policy::FileArg,
};

#[derive(Debug, Subcommand)]
pub enum InstanceCommand {
    /// Show the FluxInstance (YAML; -o json for JSON).
    Get,
    /// Check a FluxInstance manifest against the policy and apply it (server-side).
    Apply {
        #[command(flatten)]
        file: FileArg,
        /// Check everything, on the API server too, and change nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Show what applying a FluxInstance manifest would change (a server-side dry run).
    Diff {
        #[command(flatten)]
        file: FileArg,
    },
}

pub async fn run(
    command: InstanceCommand,
    options: &ConnectOptions,
    printer: &Printer,
) -> anyhow::Result<()> {
    match command {
        InstanceCommand::Get => {
            let agent = Agent::connect(options).await?;
            let state = agent
                .instance()
                .get_instance(GetInstanceRequest {})
                .await
                .map_err(|status| agent.error(&status))?
                .into_inner();
            if !state.present {
                anyhow::bail!(
                    "the cluster has no FluxInstance (write one and run `kubectl tenantflux instance apply -f FILE`)"
                );
            }
            let object: Value =
                serde_yaml_ng::from_str(&state.manifest).context("the agent's answer")?;
            printer.print(&object, |_, _| state.manifest.clone())
        }
        InstanceCommand::Apply { file, dry_run } => {
            let manifest = file.read()?;
            let agent = Agent::connect(options).await?;
            let response = agent
                .instance()
                .apply_instance(ApplyInstanceRequest { manifest, dry_run })
                .await
                .map_err(|status| agent.error(&status))
                .with_context(|| format!("{} was not applied", file.path.display()))?
                .into_inner();
            for warning in &response.warnings {
                eprintln!("warning: {warning}");
            }
            let verb = match (response.created, response.changed) {
                (true, _) => "created",
                (false, true) => "configured",
                (false, false) => "unchanged",
            };
            let suffix = if dry_run { " (dry run)" } else { "" };
            let object: Value =
                serde_yaml_ng::from_str(&response.manifest).context("the agent's answer")?;
            printer.print(&object, |_, _| {
                format!("fluxinstance/flux {verb}{suffix}\n")
            })
        }
        InstanceCommand::Diff { file } => {
            let manifest = file.read()?;
            let agent = Agent::connect(options).await?;
            let response = agent
                .instance()
                .diff_instance(ApplyInstanceRequest {
                    manifest,
                    dry_run: true,
                })
                .await
                .map_err(|status| agent.error(&status))
                .with_context(|| format!("{} cannot be applied", file.path.display()))?
                .into_inner();
            print!("{}", diff(&response.live, &response.applied));
            Ok(())
        }
    }
}

/// Lines that take no part in a comparison: they change on every write.
fn volatile(line: &str) -> bool {
    let key = line.trim_start();
    ["resourceVersion:", "generation:"]
        .iter()
        .any(|k| key.starts_with(k))
}

/// A line diff of two YAML texts (`-` live, `+` applied, two-space context for the rest);
/// empty when they are the same.
pub fn diff(live: &str, applied: &str) -> String {
    let a: Vec<&str> = live.lines().filter(|l| !volatile(l)).collect();
    let b: Vec<&str> = applied.lines().filter(|l| !volatile(l)).collect();
    // Longest common subsequence table; FluxInstance manifests are short.
    let mut lcs = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut i, mut j) = (0, 0);
    let mut out = String::new();
    let mut changed = false;
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            out.push_str(&format!("  {}\n", a[i]));
            i += 1;
            j += 1;
        } else if i < a.len() && (j == b.len() || lcs[i + 1][j] >= lcs[i][j + 1]) {
            // Removals before additions, as diff(1) shows a changed line.
            out.push_str(&format!("- {}\n", a[i]));
            changed = true;
            i += 1;
        } else {
            out.push_str(&format!("+ {}\n", b[j]));
            changed = true;
            j += 1;
        }
    }
    if changed { out } else { String::new() }
}

#[cfg(test)]
mod tests {
    use super::diff;

    #[test]
    fn diff_marks_removed_and_added_lines() {
        let live = "spec:\n  version: 2.8.x\n  registry: ghcr.io/fluxcd\nresourceVersion: \"1\"\n";
        let applied =
            "spec:\n  version: 2.9.x\n  registry: ghcr.io/fluxcd\nresourceVersion: \"2\"\n";
        assert_eq!(
            diff(live, applied),
            "  spec:\n-   version: 2.8.x\n+   version: 2.9.x\n    registry: ghcr.io/fluxcd\n"
        );
        assert_eq!(diff(live, live), "");
        assert_eq!(diff("", "a: 1\n"), "+ a: 1\n");
    }
}
