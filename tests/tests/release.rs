//! `deploy/release`, the one release command, end to end: krew archives and manifest, the agent
//! image index as an oci-archive, the chart packaged with a Helm repository index and pushed to
//! an OCI registry (the shared cluster's, `--push-chart`), and the CycloneDX bills of materials of
//! the plugin and the agent (cargo-cyclonedx, installed on first use). Built twice into two
//! directories at one SOURCE_DATE_EPOCH, the SHA256SUMS are identical. helm is the test
//! environment's (`tests/env/cluster build-tools`).
//!
//! What the two builds prove: every step after the compiler (archives, image layout, chart,
//! index, SBOMs) gives the same bytes from the same inputs; the second build reuses the first's
//! binaries (cargo), so it does not prove the compiler itself reproducible. The krew part is
//! built for linux/amd64 only and unoptimized (`TENANTFLUX_RELEASE_PLATFORMS`,
//! `TENANTFLUX_RELEASE_PROFILE=dev`), as packaging.rs builds it, so the suite compiles it once;
//! packaging.rs checks every other platform's archive and image.rs the image.

use std::{path::Path, process::Command};

use serde_json::Value;
use tenantflux_tests::{TestCluster, ensure_packaging_tools, path, repo_root, tool_path};

const EPOCH: &str = "1767225600";
const STAMP: &str = "2026-01-01T00:00:00Z";

/// `deploy/release` into `dist` with `extra` arguments; the SHA256SUMS it wrote.
fn release(dist: &Path, extra: &[&str]) -> String {
    let output = Command::new(repo_root().join("deploy/release"))
        .args([&format!("v{}", env!("CARGO_PKG_VERSION")), path(dist)])
        .args(extra)
        .env("SOURCE_DATE_EPOCH", EPOCH)
        .env("HELM", tool_path("HELM"))
        .env("TENANTFLUX_RELEASE_PLATFORMS", "linux/amd64")
        .env("TENANTFLUX_RELEASE_PROFILE", "dev")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "deploy/release failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert_eq!(
        stdout.lines().count(),
        1,
        "stdout is the path of SHA256SUMS alone: {stdout}"
    );
    std::fs::read_to_string(stdout.trim()).unwrap()
}

/// helm with a configuration, cache and data of the test's own under `home`.
fn helm(home: &Path, args: &[&str]) -> Vec<u8> {
    let output = Command::new(tool_path("HELM"))
        .args(args)
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_DATA_HOME", home.join("data"))
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "helm {args:?} failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    output.stdout
}

#[test]
fn a_release_built_twice_from_one_commit_has_the_same_sha256sums() {
    ensure_packaging_tools().expect("helm");
    let registry = TestCluster::shared()
        .registry()
        .expect("the shared cluster's registry");
    let charts = format!("oci://{registry}/charts");
    let work = tempfile::tempdir().unwrap();
    let (first, second) = (work.path().join("one"), work.path().join("two"));
    let sums = release(&first, &["--push-chart", &charts, "--plain-http"]);
    assert_eq!(release(&second, &[]), sums, "the second build differs");

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
            &format!("image/tenantflux-agent-v{version}.oci.tar"),
            &format!("krew/kubectl-tenantflux_v{version}_linux_amd64.tar.gz"),
            "krew/tenantflux.yaml",
            "sbom/kubectl-tenantflux.cdx.json",
            "sbom/tenantflux-agent.cdx.json",
        ]
    );
    // Every line is a sum `sha256sum -c` checks.
    let check = Command::new("sha256sum")
        .args(["-c", "--quiet", "SHA256SUMS"])
        .current_dir(&first)
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stdout)
    );

    // The pushed chart is the released package, byte for byte.
    let reference = format!("{charts}/tenantflux-agent");
    let pulled = work.path().join("pulled");
    std::fs::create_dir(&pulled).unwrap();
    helm(
        work.path(),
        &[
            "pull",
            &reference,
            "--version",
            version,
            "--plain-http",
            "-d",
            path(&pulled),
        ],
    );
    let package = format!("tenantflux-agent-{version}.tgz");
    assert!(
        std::fs::read(pulled.join(&package)).unwrap()
            == std::fs::read(first.join("chart").join(&package)).unwrap(),
        "helm pull {reference} gives the released package"
    );

    // The image archive is one OCI image index of both architectures.
    let image = first.join(format!("image/tenantflux-agent-v{version}.oci.tar"));
    let listing = Command::new("tar")
        .args(["-xOf", path(&image), "index.json"])
        .output()
        .unwrap();
    assert!(
        listing.status.success(),
        "index.json in {}",
        image.display()
    );
    let index: Value = serde_json::from_slice(&listing.stdout).unwrap();
    let digest = index["manifests"][0]["digest"]
        .as_str()
        .and_then(|d| d.strip_prefix("sha256:"))
        .unwrap_or_else(|| panic!("{index:#}"));
    let inner = Command::new("tar")
        .args(["-xOf", path(&image), &format!("blobs/sha256/{digest}")])
        .output()
        .unwrap();
    let inner: Value = serde_json::from_slice(&inner.stdout).unwrap();
    let mut platforms: Vec<String> = inner["manifests"]
        .as_array()
        .unwrap_or_else(|| panic!("an image index: {inner:#}"))
        .iter()
        .map(|m| {
            format!(
                "{}/{}",
                m["platform"]["os"].as_str().unwrap_or_default(),
                m["platform"]["architecture"].as_str().unwrap_or_default()
            )
        })
        .collect();
    platforms.sort();
    assert_eq!(platforms, ["linux/amd64", "linux/arm64"], "{inner:#}");

    // The krew manifest names the archive by its sum.
    let manifest = std::fs::read_to_string(first.join("krew/tenantflux.yaml")).unwrap();
    let archive_sum = sums
        .lines()
        .find(|line| line.ends_with("linux_amd64.tar.gz"))
        .and_then(|line| line.split_once("  "))
        .map(|(sum, _)| sum)
        .unwrap();
    assert!(manifest.contains(archive_sum), "{manifest}");

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

/// The attack on SHA256SUMS: a file planted in DIST (or a previous release's leftovers) would be
/// listed beside the release's own. deploy/release refuses a DIST that is not empty, naming what
/// is there, before it builds anything.
#[test]
fn a_file_planted_in_dist_is_refused_and_nothing_is_summed() {
    let work = tempfile::tempdir().unwrap();
    let dist = work.path().join("dist");
    std::fs::create_dir_all(&dist).unwrap();
    std::fs::write(dist.join("planted-kubectl-tenantflux"), "#!/bin/sh\n").unwrap();
    let output = Command::new(repo_root().join("deploy/release"))
        .args([&format!("v{}", env!("CARGO_PKG_VERSION")), path(&dist)])
        .env("SOURCE_DATE_EPOCH", EPOCH)
        .output()
        .unwrap();
    assert!(!output.status.success(), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("is not empty") && stderr.contains("planted-kubectl-tenantflux"),
        "{stderr}"
    );
    assert!(!dist.join("SHA256SUMS").exists());
}
