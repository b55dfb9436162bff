//! `kubectl tenantflux instance ...`: the tenant's FluxInstance through the agent, which checks
//! every change against the policy it holds.

use std::io::Write as _;

use anyhow::Context as _;
use clap::Subcommand;
use serde_json::Value;
use tenantflux_proto::v1::{ApplyInstanceRequest, GetInstanceRequest};

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

/// What kubectl edit says above the object, adapted.
const EDIT_HEADER: &str = "\
# Please edit the FluxInstance below. Lines beginning with a '#' will be ignored, and an empty
# file will abort the edit. It is checked against the platform's policy and applied through
# tenantflux-agent.
#
";

/// The text to put in the editor: the header, the reasons the last attempt was refused (if
/// any), then the manifest.
pub fn edit_buffer(manifest: &str, refusal: Option<&str>) -> String {
    let mut text = EDIT_HEADER.to_owned();
    if let Some(refusal) = refusal {
        text.push_str("# fluxinstance/flux was not applied:\n");
        for line in refusal.lines() {
            text.push_str("# * ");
            text.push_str(line);
            text.push('\n');
        }
        text.push_str("#\n");
    }
    text.push_str(manifest);
    text
}

/// The manifest in an edited buffer: every line that starts with '#' dropped.
pub fn strip_comments(text: &str) -> String {
    text.lines()
        .filter(|line| !line.trim_start().starts_with('#'))
        .map(|line| format!("{line}\n"))
        .collect()
}

/// The command that edits a file: $KUBE_EDITOR, then $EDITOR, then vi (as kubectl).
fn editor() -> String {
    ["KUBE_EDITOR", "EDITOR"]
        .iter()
        .find_map(|var| std::env::var(var).ok().filter(|v| !v.trim().is_empty()))
        .unwrap_or_else(|| "vi".to_owned())
}

/// Runs the editor on `path` through the shell, so an editor setting with arguments
/// (`code --wait`) works as it does for kubectl.
fn run_editor(path: &std::path::Path) -> anyhow::Result<()> {
    let editor = editor();
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("{editor} \"$1\""))
        .arg("sh")
        .arg(path)
        .status()
        .with_context(|| format!("cannot start the editor {editor:?}"))?;
    anyhow::ensure!(
        status.success(),
        "the editor {editor:?} exited with {status}; nothing was applied"
    );
    Ok(())
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

async fn edit(options: &ConnectOptions) -> anyhow::Result<()> {
    let agent = Agent::connect(options).await?;
    let manifest = live_manifest(&agent).await?;
    let file = tempfile::Builder::new()
        .prefix("flux-system-flux-")
        .suffix(".yaml")
        .tempfile()
        .context("cannot create a file to edit")?;
    let mut last = strip_comments(&manifest);
    let mut refusal: Option<(String, Exit)> = None;
    loop {
        let reason = refusal.as_ref().map(|(reason, _)| reason.as_str());
        std::fs::write(file.path(), edit_buffer(&last, reason))
            .with_context(|| format!("cannot write {}", file.path().display()))?;
        run_editor(file.path())?;
        let edited = std::fs::read_to_string(file.path())
            .with_context(|| format!("cannot read {}", file.path().display()))?;
        let manifest = strip_comments(&edited);
        if manifest.trim().is_empty() {
            eprintln!("Edit cancelled, no changes made.");
            return Ok(());
        }
        if manifest == last {
            return match refusal {
                // Saved again without a change after a refusal: keep the user's work.
                Some((reason, exit)) => {
                    let (_, kept) = file.keep().context("cannot keep the edited file")?;
                    Err(exit.mark(anyhow::anyhow!(
                        "fluxinstance/flux was not applied: {reason}\nyour edit is in {}",
                        kept.display()
                    )))
                }
                None => {
                    eprintln!("Edit cancelled, no changes made.");
                    Ok(())
                }
            };
        }
        let answer = agent
            .call(agent.instance().apply_instance(ApplyInstanceRequest {
                manifest: manifest.clone(),
                dry_run: false,
            }))
            .await;
        match answer {
            Ok(response) => {
                for warning in &response.warnings {
                    eprintln!("warning: {warning}");
                }
                writeln!(std::io::stdout().lock(), "fluxinstance/flux edited")?;
                return Ok(());
            }
            Err(err) => {
                refusal = Some((err.to_string(), Exit::Refused.of_refusal(&err)));
                last = manifest;
            }
        }
    }
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
        InstanceCommand::Edit => edit(options).await.map(|()| Exit::Success),
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
    use super::{diff, edit_buffer, strip_comments};

    #[test]
    fn the_edit_buffer_carries_the_refusal_as_comments_that_are_stripped_again() {
        let manifest = "apiVersion: fluxcd.controlplane.io/v1\nkind: FluxInstance\n";
        let plain = edit_buffer(manifest, None);
        assert!(plain.starts_with("# Please edit the FluxInstance below."));
        assert!(!plain.contains("was not applied"));
        assert_eq!(strip_comments(&plain), manifest);

        let refused = edit_buffer(
            manifest,
            Some("spec.cluster.size \"large\" is not allowed\nspec.sync.url is not allowed"),
        );
        assert!(refused.contains("# fluxinstance/flux was not applied:\n"));
        assert!(refused.contains("# * spec.cluster.size \"large\" is not allowed\n"));
        assert!(refused.contains("# * spec.sync.url is not allowed\n"));
        assert_eq!(strip_comments(&refused), manifest);
        assert_eq!(strip_comments("# only comments\n  # indented\n"), "");
    }

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
