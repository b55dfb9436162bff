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
//!
//! The Flux CLI plugin catalog entry the krew part also writes (`flux-plugin/`) is installed by
//! the real flux CLI v2.9.5 (`tests/env/cluster build-flux-cli`) from a local catalog, served
//! over HTTP with the archive, and run as `flux tenantflux`; a tampered archive is refused.
//!
//! The release tools are trusted by their bytes, not their names: a wheel of zig or
//! cargo-zigbuild that is not the pinned one is refused before anything is built, a requirement
//! without a hash is refused, a cached tool changed after its install is found and installed
//! again before it runs, and a cargo-cyclonedx crate that is not the pinned one is refused.

use std::{
    fs::File,
    io::{BufRead as _, BufReader, Write as _},
    net::{TcpListener, TcpStream},
    os::unix::{fs::PermissionsExt as _, process::CommandExt as _},
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
    sync::{Arc, Mutex},
};

use serde_json::Value;
use sha2::Digest as _;
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
            "flux-plugin/catalog.yaml",
            "flux-plugin/tenantflux.yaml",
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
    // So does the Flux plugin catalog entry (flux_plugin_install_runs_the_released_plugin_and_refuses_a_tampered_archive).
    let entry = std::fs::read_to_string(first.join("flux-plugin/tenantflux.yaml")).unwrap();
    assert!(entry.contains(&format!("sha256:{archive_sum}")), "{entry}");

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

/// The value `script` assigns to `name` (`name=VALUE`, the first word after it): the pins the
/// tests compare with are the script's own.
fn pinned(script: &str, name: &str) -> String {
    let text = std::fs::read_to_string(repo_root().join(script)).unwrap();
    text.lines()
        .flat_map(|line| line.split_whitespace())
        .find_map(|word| word.strip_prefix(&format!("{name}=")))
        .unwrap_or_else(|| panic!("{script} assigns no {name}="))
        .to_owned()
}

fn sha256_hex(bytes: &[u8]) -> String {
    format!("{:x}", sha2::Sha256::digest(bytes))
}

/// `script` (under `root`) with `args` and `env`, as a release runs it: one platform,
/// unoptimized.
fn run_script(root: &Path, script: &str, args: &[&str], env: &[(&str, &Path)]) -> Output {
    let mut command = Command::new(root.join(script));
    command
        .args(args)
        .env("SOURCE_DATE_EPOCH", EPOCH)
        .env("TENANTFLUX_RELEASE_PLATFORMS", "linux/amd64")
        .env("TENANTFLUX_RELEASE_PROFILE", "dev");
    for (name, value) in env {
        command.env(name, value);
    }
    command.output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The attack on the zig that links every shipped binary: a wheel of the pinned version with
/// other bytes, served by whatever pip is configured with (an index, a mirror, a find-links
/// directory; here the only source). deploy/krew/release refuses it, naming the package and the
/// digest it got, before anything is built, and leaves no installed tool in its cache.
#[test]
fn a_wheel_that_is_not_the_pinned_one_is_refused_before_anything_is_built() {
    let work = tempfile::tempdir().unwrap();
    let planted = work.path().join("planted");
    std::fs::create_dir(&planted).unwrap();
    let zig = pinned("deploy/krew/release", "zig_version");
    let zigbuild = pinned("deploy/krew/release", "zigbuild_version");
    let wheel = format!("ziglang-{zig}-py3-none-any.whl");
    let bytes = b"print('not zig')\n";
    std::fs::write(planted.join(&wheel), bytes).unwrap();
    std::fs::write(
        planted.join(format!("cargo_zigbuild-{zigbuild}-py3-none-any.whl")),
        b"not cargo-zigbuild\n",
    )
    .unwrap();
    let (cache, dist) = (work.path().join("cache"), work.path().join("dist"));
    let output = Command::new(repo_root().join("deploy/krew/release"))
        .args([&format!("v{}", env!("CARGO_PKG_VERSION")), path(&dist)])
        .env("TENANTFLUX_CACHE", &cache)
        .env("TENANTFLUX_RELEASE_PLATFORMS", "linux/amd64")
        .env("TENANTFLUX_RELEASE_PROFILE", "dev")
        .env("PIP_NO_INDEX", "1")
        .env("PIP_FIND_LINKS", &planted)
        .output()
        .unwrap();
    let stderr = text(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains("DO NOT MATCH THE HASHES")
            && stderr.contains(&format!("ziglang=={zig}"))
            && stderr.contains(&sha256_hex(bytes)),
        "the refusal names the package and the digest of the planted wheel: {stderr}"
    );
    assert!(
        !stderr.contains("cargo zigbuild"),
        "a build started: {stderr}"
    );
    assert_eq!(
        std::fs::read_dir(&dist).unwrap().count(),
        0,
        "DIST is empty"
    );
    let installed = std::fs::read_dir(&cache)
        .unwrap()
        .filter_map(Result::ok)
        .any(|entry| entry.path().join("venv/bin/cargo-zigbuild").exists());
    assert!(!installed, "a tool was installed from the planted wheels");
}

/// A requirements file that pins a version without the wheel's sha256 pins no bytes: the release
/// refuses it, naming the package, before pip runs (here from a copy of the scripts whose
/// requirements lost cargo-zigbuild's hashes).
#[test]
fn a_requirement_without_a_hash_is_refused_before_pip_runs() {
    let work = tempfile::tempdir().unwrap();
    let root = work.path().join("root");
    std::fs::create_dir_all(root.join("deploy/krew")).unwrap();
    for file in [
        "Cargo.toml",
        "deploy/krew/release",
        "deploy/krew/tenantflux.yaml",
    ] {
        std::fs::copy(repo_root().join(file), root.join(file)).unwrap();
    }
    let requirements =
        std::fs::read_to_string(repo_root().join("deploy/krew/requirements.txt")).unwrap();
    let zigbuild = pinned("deploy/krew/release", "zigbuild_version");
    let requirement = format!("cargo-zigbuild=={zigbuild}");
    let mut lines = Vec::new();
    let mut inside = false;
    for line in requirements.lines() {
        if line.starts_with(&requirement) {
            lines.push(requirement.clone());
            inside = true;
        } else if !(inside && line.trim_start().starts_with("--hash")) {
            inside = false;
            lines.push(line.to_owned());
        }
    }
    assert!(lines.contains(&requirement), "{requirements}");
    std::fs::write(root.join("deploy/krew/requirements.txt"), lines.join("\n")).unwrap();
    let cache = work.path().join("cache");
    let output = run_script(
        &root,
        "deploy/krew/release",
        &[
            &format!("v{}", env!("CARGO_PKG_VERSION")),
            path(&work.path().join("dist")),
        ],
        &[("TENANTFLUX_CACHE", &cache)],
    );
    let stderr = text(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("{requirement} has no --hash=sha256:")),
        "{stderr}"
    );
    assert!(
        !cache.exists(),
        "the cache was touched before the requirements were read"
    );
}

/// The attack on the cached tools: whoever can write the cache changes zig's standard library,
/// replaces the cargo-zigbuild binary, adds a header to zig's C library, or swaps a kept wheel.
/// The next run finds each, names it, and installs the tools again from the pinned wheels (the
/// changed wheel downloaded again) before anything uses them. The cache here is the test's own,
/// keyed by the requirements' sha256; the first install in it reuses nothing.
#[test]
fn changed_cached_tools_are_found_and_installed_again_before_use() {
    let work = tempfile::tempdir().unwrap();
    let cache = work.path().join("cache");
    let tools = |expect: &str| -> (String, PathBuf, PathBuf) {
        let output = run_script(
            &repo_root(),
            "deploy/krew/release",
            &["--tools"],
            &[("TENANTFLUX_CACHE", &cache)],
        );
        let stderr = text(&output.stderr);
        assert!(output.status.success(), "{expect}: {stderr}");
        let stdout = text(&output.stdout);
        let find = |name: &str| {
            stdout
                .lines()
                .find_map(|line| line.strip_prefix(&format!("{name} ")))
                .map(PathBuf::from)
                .unwrap_or_else(|| panic!("no {name} in {stdout}"))
        };
        (stderr, find("zig"), find("cargo-zigbuild"))
    };
    let (_, zig, zigbuild) = tools("the first install");
    let venv = zigbuild.parent().and_then(Path::parent).unwrap();
    let dir = venv.parent().unwrap();
    let requirements = std::fs::read(repo_root().join("deploy/krew/requirements.txt")).unwrap();
    assert!(
        dir.to_string_lossy()
            .ends_with(&sha256_hex(&requirements)[..16]),
        "{} is not keyed by the requirements' sha256",
        dir.display()
    );
    let std_zig = zig.parent().unwrap().join("lib/std/std.zig");
    let originals = [
        std::fs::read(&std_zig).unwrap(),
        std::fs::read(&zigbuild).unwrap(),
    ];
    let planted_header = zig
        .parent()
        .unwrap()
        .join("lib/libc/include/generic-musl/planted.h");
    let marker = work.path().join("ran");
    std::fs::write(
        &zigbuild,
        format!("#!/bin/sh\ntouch '{}'\nexec cargo \"$@\"\n", path(&marker)),
    )
    .unwrap();
    let mut changed = originals[0].clone();
    changed.extend_from_slice(b"\ncomptime { @compileLog(\"planted\"); }\n");
    std::fs::write(&std_zig, changed).unwrap();
    std::fs::write(&planted_header, "#define planted 1\n").unwrap();
    let wheel = std::fs::read_dir(dir.join("wheels"))
        .unwrap()
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .find(|file| {
            file.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("cargo_zigbuild-")
        })
        .expect("the kept cargo-zigbuild wheel");
    std::fs::write(&wheel, b"not the wheel\n").unwrap();

    let (stderr, zig_again, zigbuild_again) = tools("the run after the changes");
    assert_eq!((&zig_again, &zigbuild_again), (&zig, &zigbuild));
    for said in [
        "fail their check, so they are installed again".to_owned(),
        format!(
            "{} has sha256 {}, not a pinned wheel of cargo-zigbuild",
            wheel.file_name().unwrap().to_string_lossy(),
            sha256_hex(b"not the wheel\n")
        ),
        "downloading the wheels".to_owned(),
    ] {
        assert!(stderr.contains(&said), "{said:?} in {stderr}");
    }
    assert_eq!(std::fs::read(&std_zig).unwrap(), originals[0], "std.zig");
    assert_eq!(
        std::fs::read(&zigbuild).unwrap(),
        originals[1],
        "cargo-zigbuild"
    );
    assert!(
        !planted_header.exists(),
        "the planted header is still there"
    );
    assert!(!marker.exists(), "the replaced cargo-zigbuild ran");

    // The same changes with the wheels intact: each is named, and nothing is downloaded.
    std::fs::write(&zigbuild, "#!/bin/sh\n").unwrap();
    std::fs::write(&planted_header, "#define planted 1\n").unwrap();
    let (stderr, _, _) = tools("the run after changing the virtualenv");
    for said in [
        "venv/bin/cargo-zigbuild is not the file of cargo_zigbuild-",
        "ziglang/lib/libc/include/generic-musl/planted.h is not in ziglang-",
    ] {
        assert!(stderr.contains(said), "{said:?} in {stderr}");
    }
    assert!(!stderr.contains("downloading"), "{stderr}");
    assert_eq!(std::fs::read(&zigbuild).unwrap(), originals[1]);
    assert!(!planted_header.exists());

    let (stderr, _, _) = tools("a run with nothing changed");
    assert!(!stderr.contains("installed again"), "{stderr}");
}

/// `deploy/release --only sbom` into `dist`, with `env`.
fn sbom_release(dist: &Path, env: &[(&str, &Path)]) -> Output {
    run_script(
        &repo_root(),
        "deploy/release",
        &[
            &format!("v{}", env!("CARGO_PKG_VERSION")),
            path(dist),
            "--only",
            "sbom",
        ],
        env,
    )
}

/// The attacks on cargo-cyclonedx. A .crate of the pinned version with other bytes in cargo's
/// cache (a registry or mirror served it, or the file was changed) is refused, naming both
/// digests, before anything is built. An installed binary changed afterwards (here in the shared
/// cache, under the lock every release takes for it) is found before it runs and installed
/// again, and the bills of materials come from the reinstalled tool.
#[test]
fn cargo_cyclonedx_is_held_to_its_pins_before_it_runs() {
    let version = pinned("deploy/release", "tool_version");
    let crate_sha256 = pinned("deploy/release", "tool_crate_sha256");
    let work = tempfile::tempdir().unwrap();

    let cargo_home = work.path().join("cargo");
    let registry = cargo_home.join("registry/cache/index.example-0000000000000000");
    std::fs::create_dir_all(&registry).unwrap();
    let planted = b"not cargo-cyclonedx\n";
    std::fs::write(
        registry.join(format!("cargo-cyclonedx-{version}.crate")),
        planted,
    )
    .unwrap();
    let own_cache = work.path().join("cache");
    let output = sbom_release(
        &work.path().join("planted"),
        &[
            ("CARGO_HOME", &cargo_home),
            ("TENANTFLUX_CACHE", &own_cache),
        ],
    );
    let stderr = text(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains(&sha256_hex(planted)) && stderr.contains(&crate_sha256),
        "the refusal names both digests: {stderr}"
    );
    assert!(
        !own_cache
            .join(format!("cargo-cyclonedx-{version}/bin"))
            .exists(),
        "something was installed: {stderr}"
    );

    let first = sbom_release(&work.path().join("one"), &[]);
    assert!(first.status.success(), "{}", text(&first.stderr));
    let cache = std::env::var_os("TENANTFLUX_CACHE").map_or_else(
        || PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache/tenantflux"),
        PathBuf::from,
    );
    let tool = cache.join(format!("cargo-cyclonedx-{version}/bin/cargo-cyclonedx"));
    let marker = work.path().join("ran");
    {
        let lock = File::create(cache.join(format!("cargo-cyclonedx-{version}.lock"))).unwrap();
        lock.lock().unwrap();
        std::fs::remove_file(&tool).unwrap();
        std::fs::write(
            &tool,
            format!(
                "#!/bin/sh\ntouch '{}'\necho cargo-cyclonedx-cyclonedx {version}\n",
                path(&marker)
            ),
        )
        .unwrap();
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let second = sbom_release(&work.path().join("two"), &[]);
    let stderr = text(&second.stderr);
    assert!(second.status.success(), "{stderr}");
    assert!(
        stderr.contains("is installed again") && stderr.contains("recorded when it was installed"),
        "{stderr}"
    );
    assert!(!marker.exists(), "the changed cargo-cyclonedx ran");
    assert_eq!(&std::fs::read(&tool).unwrap()[..4], b"\x7fELF");
    for name in ["kubectl-tenantflux", "tenantflux-agent"] {
        let sbom = work.path().join(format!("two/sbom/{name}.cdx.json"));
        let sbom: Value = serde_json::from_slice(&std::fs::read(&sbom).unwrap()).unwrap();
        assert_eq!(sbom["bomFormat"], "CycloneDX", "{name}");
    }
}

/// The platform this test runs on, as krew and flux name it (`linux/amd64`).
fn host_platform() -> String {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => panic!("no release platform for the CPU {other}"),
    };
    format!("{}/{arch}", std::env::consts::OS)
}

/// A plain HTTP server on 127.0.0.1 for the files under its root (GET, one request per
/// connection), standing in for GitHub's release downloads and the catalog's release; it records
/// every path asked for. It lives as long as the test process.
struct FileServer {
    base: String,
    asked: Arc<Mutex<Vec<String>>>,
}

impl FileServer {
    fn start(root: PathBuf) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a local port");
        let base = format!("http://{}/", listener.local_addr().unwrap());
        let asked = Arc::new(Mutex::new(Vec::new()));
        let record = Arc::clone(&asked);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                // A client that hangs up early is its own business.
                let _ = Self::answer(stream, &root, &record);
            }
        });
        Self { base, asked }
    }

    fn answer(
        mut stream: TcpStream,
        root: &Path,
        asked: &Mutex<Vec<String>>,
    ) -> std::io::Result<()> {
        let mut reader = BufReader::new(stream.try_clone()?);
        let mut request = String::new();
        reader.read_line(&mut request)?;
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header)? == 0 || header == "\r\n" {
                break;
            }
        }
        let target = request.split_whitespace().nth(1).unwrap_or("/").to_owned();
        asked.lock().unwrap().push(target.clone());
        let body = target
            .strip_prefix('/')
            .filter(|p| !p.split('/').any(|part| part == ".." || part.is_empty()))
            .and_then(|p| std::fs::read(root.join(p)).ok());
        match body {
            Some(body) => {
                write!(
                    stream,
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                )?;
                stream.write_all(&body)
            }
            None => stream.write_all(
                b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            ),
        }
    }

    fn asked(&self) -> Vec<String> {
        self.asked.lock().unwrap().clone()
    }
}

/// The real flux CLI with `home` as its user's home (its plugins in `home/.fluxcd/plugins`) and
/// `catalog` as the plugin catalog's base URL (`FLUXCD_PLUGIN_CATALOG`).
fn flux(home: &Path, catalog: &str, args: &[&str]) -> Output {
    Command::new(tenantflux_tests::flux_cli())
        .args(args)
        .env("HOME", home)
        .env_remove("FLUXCD_PLUGINS")
        .env("FLUXCD_PLUGIN_CATALOG", catalog)
        .env("KUBECONFIG", home.join("no-kubeconfig"))
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// The release for this machine's platform alone (the krew part, which writes the Flux catalog
/// entry too) is installed by the real flux CLI v2.9.5: `flux plugin install tenantflux` from a
/// local catalog (`FLUXCD_PLUGIN_CATALOG`, plain HTTP on 127.0.0.1, the entry's URLs pointed at
/// the same server) downloads the krew archive, checks its sha256 and installs its
/// kubectl-tenantflux as `~/.fluxcd/plugins/flux-tenantflux`; `flux tenantflux ARGS` then is
/// `kubectl tenantflux ARGS`: the same output and exit status. An archive with other bytes at the
/// same URL (a working plugin of the attacker's) is refused by its sum and nothing is installed.
#[test]
fn flux_plugin_install_runs_the_released_plugin_and_refuses_a_tampered_archive() {
    let flux_cli = tenantflux_tests::flux_cli();
    assert!(
        flux_cli.exists(),
        "no flux CLI at {}: tests/env/cluster build-flux-cli builds it",
        flux_cli.display()
    );
    let version = env!("CARGO_PKG_VERSION");
    let platform = host_platform();
    let (os, arch) = platform.split_once('/').unwrap();
    let work = tempfile::tempdir().unwrap();
    let dist = work.path().join("dist");
    let output = Command::new(repo_root().join("deploy/release"))
        .args([&format!("v{version}"), path(&dist), "--only", "krew"])
        .env("SOURCE_DATE_EPOCH", EPOCH)
        .env("TENANTFLUX_RELEASE_PLATFORMS", &platform)
        .env("TENANTFLUX_RELEASE_PROFILE", "dev")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "deploy/release: {}",
        text(&output.stderr)
    );
    let archive_name = format!("kubectl-tenantflux_v{version}_{os}_{arch}.tar.gz");
    let sums = std::fs::read_to_string(dist.join("SHA256SUMS")).unwrap();
    let files: Vec<&str> = sums
        .lines()
        .map(|line| line.split_once("  ").unwrap().1)
        .collect();
    assert_eq!(
        files,
        [
            "flux-plugin/catalog.yaml",
            "flux-plugin/tenantflux.yaml",
            &format!("krew/{archive_name}"),
            "krew/tenantflux.yaml",
        ]
    );
    let archive = std::fs::read(dist.join("krew").join(&archive_name)).unwrap();
    let sum = sha256_hex(&archive);

    // The entry names the krew manifest's archive, by the krew manifest's sum.
    let entry_text = std::fs::read_to_string(dist.join("flux-plugin/tenantflux.yaml")).unwrap();
    let entry: Value = tenantflux_core::yaml::from_str(&entry_text).unwrap();
    let krew: Value = tenantflux_core::yaml::from_str(
        &std::fs::read_to_string(dist.join("krew/tenantflux.yaml")).unwrap(),
    )
    .unwrap();
    let krew_platform = &krew["spec"]["platforms"][0];
    assert_eq!(krew_platform["sha256"], sum.as_str(), "{krew:#}");
    assert_eq!(entry["apiVersion"], "cli.fluxcd.io/v1beta1", "{entry_text}");
    assert_eq!(entry["kind"], "Plugin", "{entry_text}");
    assert_eq!(entry["name"], "tenantflux", "{entry_text}");
    assert_eq!(entry["bin"], "flux-tenantflux", "{entry_text}");
    assert_eq!(
        entry["versions"].as_array().map(Vec::len),
        Some(1),
        "{entry_text}"
    );
    assert_eq!(entry["versions"][0]["version"], version, "{entry_text}");
    let platforms = entry["versions"][0]["platforms"].as_array().unwrap();
    assert_eq!(platforms.len(), 1, "{entry_text}");
    let released = &platforms[0];
    assert_eq!(
        (released["os"].as_str(), released["arch"].as_str()),
        (Some(os), Some(arch))
    );
    assert_eq!(released["url"], krew_platform["uri"], "{entry_text}");
    assert_eq!(released["checksum"], format!("sha256:{sum}").as_str());
    assert_eq!(released["extractPath"], "kubectl-tenantflux");
    let catalog: Value = tenantflux_core::yaml::from_str(
        &std::fs::read_to_string(dist.join("flux-plugin/catalog.yaml")).unwrap(),
    )
    .unwrap();
    assert_eq!(catalog["kind"], "PluginCatalog", "{catalog:#}");
    assert_eq!(catalog["plugins"][0]["name"], "tenantflux", "{catalog:#}");
    assert_eq!(
        catalog["plugins"][0]["license"], "Apache-2.0",
        "{catalog:#}"
    );

    // The catalog and the download host, one local server: the released entry with its URL's
    // host part pointed at it (GitHub's release path is the only thing changed).
    let site = work.path().join("site");
    std::fs::create_dir_all(site.join("catalog")).unwrap();
    std::fs::create_dir_all(site.join("download")).unwrap();
    let server = FileServer::start(site.clone());
    let released_url = released["url"].as_str().unwrap();
    let served_url = format!("{}download/{archive_name}", server.base);
    assert_eq!(
        released_url,
        format!(
            "https://github.com/tenantflux/tenantflux/releases/download/v{version}/{archive_name}"
        )
    );
    std::fs::write(
        site.join("catalog/tenantflux.yaml"),
        entry_text.replace(released_url, &served_url),
    )
    .unwrap();
    std::fs::copy(
        dist.join("flux-plugin/catalog.yaml"),
        site.join("catalog/catalog.yaml"),
    )
    .unwrap();
    std::fs::write(site.join("download").join(&archive_name), &archive).unwrap();
    let catalog_url = format!("{}catalog/", server.base);

    let home = work.path().join("home");
    std::fs::create_dir(&home).unwrap();
    let search = flux(&home, &catalog_url, &["plugin", "search", "tenantflux"]);
    assert!(
        search.status.success(),
        "flux plugin search: {}",
        text(&search.stderr)
    );
    assert!(
        text(&search.stdout).contains("tenantflux"),
        "{}",
        text(&search.stdout)
    );

    let install = flux(&home, &catalog_url, &["plugin", "install", "tenantflux"]);
    let said = format!("{}{}", text(&install.stdout), text(&install.stderr));
    assert!(
        install.status.success(),
        "flux plugin install tenantflux: {said}"
    );
    assert!(
        said.contains(&format!("installed tenantflux v{version}")),
        "{said}"
    );
    assert!(
        server
            .asked()
            .contains(&format!("/download/{archive_name}")),
        "flux downloaded the archive from the catalog's URL: {:?}",
        server.asked()
    );
    let plugins = home.join(".fluxcd/plugins");
    let installed = plugins.join("flux-tenantflux");
    let mut entries: Vec<String> = std::fs::read_dir(&plugins)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    entries.sort();
    assert_eq!(entries, ["flux-tenantflux", "flux-tenantflux.yaml"]);
    // What was installed is the archive's kubectl-tenantflux, byte for byte.
    let mut in_archive = Vec::new();
    let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(archive.as_slice()));
    for member in tar.entries().unwrap() {
        let mut member = member.unwrap();
        if member.path().unwrap() == Path::new("kubectl-tenantflux") {
            std::io::Read::read_to_end(&mut member, &mut in_archive).unwrap();
        }
    }
    assert!(
        !in_archive.is_empty(),
        "no kubectl-tenantflux in {archive_name}"
    );
    assert!(
        std::fs::read(&installed).unwrap() == in_archive,
        "{} is not the archive's kubectl-tenantflux",
        installed.display()
    );
    let receipt: Value = tenantflux_core::yaml::from_str(
        &std::fs::read_to_string(plugins.join("flux-tenantflux.yaml")).unwrap(),
    )
    .unwrap();
    assert_eq!(receipt["version"], version, "{receipt:#}");
    assert_eq!(
        receipt["platform"]["checksum"],
        format!("sha256:{sum}").as_str()
    );

    let list = flux(&home, &catalog_url, &["plugin", "list"]);
    let listed = text(&list.stdout);
    assert!(
        list.status.success()
            && listed
                .lines()
                .any(|l| l.contains("tenantflux") && l.contains(version)),
        "flux plugin list: {listed}{}",
        text(&list.stderr)
    );

    // `flux tenantflux ARGS` runs the plugin with ARGS (flux execs it as flux-tenantflux).
    let ran = flux(&home, &catalog_url, &["tenantflux", "version", "--client"]);
    let shown = text(&ran.stdout);
    assert!(
        ran.status.success(),
        "flux tenantflux version --client: {shown}{}",
        text(&ran.stderr)
    );
    let client = shown
        .lines()
        .find(|line| line.starts_with("kubectl-tenantflux"))
        .unwrap_or_else(|| panic!("no plugin version in {shown}"));
    assert!(client.contains(version), "{shown}");
    // Called flux-tenantflux or kubectl-tenantflux, the binary does the same: its help, and a
    // usage error's exit status and message, through flux and run as kubectl does.
    let as_kubectl = |args: &[&str]| {
        Command::new(&installed)
            .arg0("kubectl-tenantflux")
            .args(args)
            .env("HOME", &home)
            .env("KUBECONFIG", home.join("no-kubeconfig"))
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    for args in [&["status", "--help"][..], &["no-such-command"][..]] {
        let through_flux = flux(&home, &catalog_url, &[&["tenantflux"][..], args].concat());
        let direct = as_kubectl(args);
        assert_eq!(
            (
                through_flux.status.code(),
                text(&through_flux.stdout),
                text(&through_flux.stderr)
            ),
            (
                direct.status.code(),
                text(&direct.stdout),
                text(&direct.stderr)
            ),
            "{args:?}"
        );
    }

    // The attack: other bytes at the archive's URL, a valid archive whose kubectl-tenantflux is
    // the attacker's. flux refuses it by the entry's sum, naming both, and installs nothing.
    let planted_dir = work.path().join("planted");
    std::fs::create_dir(&planted_dir).unwrap();
    let marker = work.path().join("planted-ran");
    let planted_bin = planted_dir.join("kubectl-tenantflux");
    std::fs::write(
        &planted_bin,
        format!(
            "#!/bin/sh\ntouch '{}'\necho kubectl-tenantflux {version}\n",
            path(&marker)
        ),
    )
    .unwrap();
    std::fs::set_permissions(&planted_bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let planted = work.path().join(&archive_name);
    let tarred = Command::new("tar")
        .args([
            "-czf",
            path(&planted),
            "-C",
            path(&planted_dir),
            "kubectl-tenantflux",
        ])
        .output()
        .unwrap();
    assert!(tarred.status.success(), "{}", text(&tarred.stderr));
    let planted_bytes = std::fs::read(&planted).unwrap();
    std::fs::write(site.join("download").join(&archive_name), &planted_bytes).unwrap();
    let other_home = work.path().join("other-home");
    std::fs::create_dir(&other_home).unwrap();
    let refused = flux(
        &other_home,
        &catalog_url,
        &["plugin", "install", "tenantflux"],
    );
    let said = format!("{}{}", text(&refused.stdout), text(&refused.stderr));
    assert!(
        !refused.status.success(),
        "the tampered archive was installed: {said}"
    );
    assert!(
        said.contains("checksum verification failed")
            && said.contains(&format!("sha256:{sum}"))
            && said.contains(&format!("sha256:{}", sha256_hex(&planted_bytes))),
        "the refusal names both sums: {said}"
    );
    let left: Vec<_> = std::fs::read_dir(other_home.join(".fluxcd/plugins"))
        .map(|dir| dir.map(|e| e.unwrap().file_name()).collect())
        .unwrap_or_default();
    assert!(
        left.is_empty(),
        "installed from the tampered archive: {left:?}"
    );
    let after = flux(
        &other_home,
        &catalog_url,
        &["tenantflux", "version", "--client"],
    );
    assert!(
        !after.status.success(),
        "flux tenantflux ran: {}",
        text(&after.stdout)
    );
    assert!(!marker.exists(), "the planted plugin ran");
}
