//! `instance edit`, as `kubectl edit`: the FluxInstance in the user's editor, checked and
//! applied on save; a refused edit reopens with the reasons as comments.

use std::io::Write as _;

use anyhow::Context as _;
use tenantflux_proto::v1::ApplyInstanceRequest;

use super::live_manifest;
use crate::{
    connect::{Agent, ConnectOptions},
    exit::Exit,
};

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

pub(super) async fn edit(options: &ConnectOptions) -> anyhow::Result<()> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
