//! `deploy/operator-releases VERSION...` (an example, so that it may use the agent as the tests
//! do):: regenerates the agent's table of flux-operator
//! releases and the plugin's list of them from each version's module source.

use std::process::ExitCode;

use tenantflux_tests::{operator_bundle, repo_root};

#[path = "../src/release_table.rs"]
mod release_table;

fn main() -> ExitCode {
    match run(std::env::args().skip(1).collect()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("release-table: {err}");
            ExitCode::FAILURE
        }
    }
}

fn run(versions: Vec<String>) -> Result<(), String> {
    if versions.is_empty() {
        return Err(
            "name the flux-operator versions to know, oldest first (v0.58.1 v0.59.0 ...)".into(),
        );
    }
    let mut releases = Vec::new();
    for version in &versions {
        let path = operator_bundle(version).map_err(|err| format!("{version}: {err}"))?;
        let yaml =
            std::fs::read_to_string(&path).map_err(|err| format!("{}: {err}", path.display()))?;
        releases.push((version.clone(), yaml));
    }
    let table = release_table::render(&releases)?;
    let root = repo_root();
    let table_path = root.join("agent/src/operator/bundle/release_table.rs");
    std::fs::write(&table_path, table).map_err(|err| format!("{}: {err}", table_path.display()))?;
    let core = root.join("agent/core/src/operator.rs");
    let text =
        std::fs::read_to_string(&core).map_err(|err| format!("{}: {err}", core.display()))?;
    let line = text
        .lines()
        .find(|l| l.starts_with("pub const KNOWN_RELEASES"))
        .ok_or_else(|| format!("{} has no KNOWN_RELEASES line", core.display()))?;
    let text = text.replace(line, &release_table::known_releases_line(&versions));
    std::fs::write(&core, text).map_err(|err| format!("{}: {err}", core.display()))?;
    eprintln!(
        "wrote {} and the KNOWN_RELEASES of {}",
        table_path.display(),
        core.display()
    );
    Ok(())
}
