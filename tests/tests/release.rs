//! `deploy/release`, the one release command: the same commit gives the same bytes. Built twice
//! into two directories at one SOURCE_DATE_EPOCH, the SHA256SUMS are identical; the chart's
//! package and Helm repository index, and the CycloneDX bills of materials of the plugin and the
//! agent (cargo-cyclonedx, installed on first use), hold what a user checks. helm is the test
//! environment's (`tests/env/cluster build-tools`).
//!
//! The krew archives and the image are released by the same script; their own tests are in
//! packaging.rs (the krew release installed by krew, the image's binary run), and this test
//! leaves them out (`--only chart,sbom`): building them twice would cost minutes for the same
//! bytes cargo already reuses.

use std::{path::Path, process::Command};

use serde_json::Value;
use tenantflux_tests::{ensure_packaging_tools, path, repo_root, tool_path};

const EPOCH: &str = "1767225600";
const STAMP: &str = "2026-01-01T00:00:00Z";

fn release(dist: &Path) -> String {
    let output = Command::new(repo_root().join("deploy/release"))
        .args([
            &format!("v{}", env!("CARGO_PKG_VERSION")),
            path(dist),
            "--only",
            "chart,sbom",
        ])
        .env("SOURCE_DATE_EPOCH", EPOCH)
        .env("HELM", tool_path("HELM"))
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "deploy/release failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let sums = String::from_utf8(output.stdout).unwrap();
    std::fs::read_to_string(sums.trim()).unwrap()
}

#[test]
fn a_release_built_twice_from_one_commit_has_the_same_sha256sums() {
    ensure_packaging_tools().expect("helm");
    let work = tempfile::tempdir().unwrap();
    let (first, second) = (work.path().join("one"), work.path().join("two"));
    let sums = release(&first);
    assert_eq!(release(&second), sums, "the second build differs");

    let version = env!("CARGO_PKG_VERSION");
    let files: Vec<&str> = sums
        .lines()
        .map(|line| line.split_once("  ").unwrap().1)
        .collect();
    assert_eq!(
        files,
        [
            "chart/index.yaml",
            &format!("chart/tenantflux-agent-{version}.tgz"),
            "sbom/kubectl-tenantflux.cdx.json",
            "sbom/tenantflux-agent.cdx.json",
        ]
    );
    let index = std::fs::read_to_string(first.join("chart/index.yaml")).unwrap();
    assert!(index.contains(&format!("version: {version}")), "{index}");
    assert!(
        index.contains(&format!("generated: \"{STAMP}\"")),
        "{index}"
    );

    for (name, dependency) in [
        ("kubectl-tenantflux", "kube-client"),
        ("tenantflux-agent", "tonic"),
    ] {
        let text = std::fs::read_to_string(first.join(format!("sbom/{name}.cdx.json"))).unwrap();
        let sbom: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(sbom["bomFormat"], "CycloneDX");
        assert_eq!(sbom["specVersion"], "1.5");
        assert_eq!(sbom["metadata"]["component"]["name"], name, "{name}");
        let timestamp = sbom["metadata"]["timestamp"].as_str().unwrap_or_default();
        assert!(timestamp.starts_with(&STAMP[..19]), "{name}: {timestamp}");
        assert!(
            sbom.get("serialNumber").is_none(),
            "{name}: a random serial"
        );
        let components = sbom["components"].as_array().unwrap();
        assert!(
            components.len() > 100,
            "{name}: {} components",
            components.len()
        );
        assert!(
            components.iter().any(|c| c["name"] == dependency),
            "{name} lists no {dependency}"
        );
    }
    // Nothing of the SBOM run is left in the source tree.
    let stray = Command::new("git")
        .args(["status", "--porcelain", "--", "*.cdx.json"])
        .current_dir(repo_root())
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&stray.stdout), "");
}
