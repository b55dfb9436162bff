//! `kubectl tenantflux flux`: the flux CLI of the cluster's exact Flux release, on the shared
//! cluster with Flux 2.9 and the real source-controller. The releases come from a mirror served
//! over HTTPS on loopback (a test CA, `tests/env/https-files.py`, which logs every request) or
//! from a directory, in the layout of Flux's GitHub releases, holding archives made here from
//! the flux CLI v2.9.5 that `tests/env/cluster build-flux-cli` builds, with their checksums
//! file. The mirror also holds v2.9.4, whose archive is a script that leaves a mark when run:
//! the plugin must pick v2.9.5, the release the cluster runs, and nothing else.

use std::{
    fs,
    io::{BufRead as _, BufReader, Write as _},
    path::{Path, PathBuf},
    process::{Child, Command, Output, Stdio},
    sync::OnceLock,
    time::Duration,
};

use sha2::{Digest as _, Sha256};
use tenantflux_tests::{
    TestCluster,
    flux::{GIT_REPOSITORIES, GitRepo, ready_now, revision},
    path, repo_root, stderr, stdout, wait_for,
};

const NS: &str = "flux-cli";
/// The release tests/env/versions.env pins (FLUX_CLI_VERSION), which flux-operator installs
/// for a FluxInstance asking for 2.9.x.
const RELEASE: &str = "2.9.5";
/// Another release in the mirror, which must not be taken.
const OTHER: &str = "2.9.4";

fn os_arch() -> (&'static str, &'static str) {
    let os = match std::env::consts::OS {
        "macos" => "darwin",
        os => os,
    };
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        arch => arch,
    };
    (os, arch)
}

fn archive_name(version: &str) -> String {
    let (os, arch) = os_arch();
    format!("flux_{version}_{os}_{arch}.tar.gz")
}

fn tar_gz(binary: &[u8]) -> Vec<u8> {
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let mut tar = tar::Builder::new(gz);
    for (name, data) in [("LICENSE", &b"Apache-2.0\n"[..]), ("flux", binary)] {
        let mut header = tar::Header::new_gnu();
        header.set_size(data.len() as u64);
        header.set_mode(0o755);
        header.set_cksum();
        tar.append_data(&mut header, name, data).expect("tar entry");
    }
    tar.into_inner().expect("tar").finish().expect("gzip")
}

fn sha256(data: &[u8]) -> String {
    Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A flux "binary" that only leaves `mark` behind when it runs.
fn marking_script(mark: &Path) -> Vec<u8> {
    format!("#!/bin/sh\ntouch '{}'\nexit 0\n", mark.display()).into_bytes()
}

/// Writes release `version` into mirror `dir` as Flux publishes it: the archive of `binary`, and
/// a checksums file listing `listed` (the archive's own sha256 unless a test tampers).
fn publish(dir: &Path, version: &str, archive: &[u8], listed: Option<String>) {
    let folder = dir.join(format!("v{version}"));
    fs::create_dir_all(&folder).unwrap();
    fs::write(folder.join(archive_name(version)), archive).unwrap();
    let listed = listed.unwrap_or_else(|| sha256(archive));
    // Other platforms' lines as the real file has them.
    fs::write(
        folder.join(format!("flux_{version}_checksums.txt")),
        format!(
            "{}  flux_{version}_darwin_arm64.tar.gz\n{listed}  {}\n{}  flux_{version}_windows_amd64.zip\n",
            "1".repeat(64),
            archive_name(version),
            "2".repeat(64)
        ),
    )
    .unwrap();
}

/// The flux CLI v2.9.5 built by tests/env/cluster, and its release archive (made once).
fn genuine() -> &'static (PathBuf, Vec<u8>) {
    static GENUINE: OnceLock<(PathBuf, Vec<u8>)> = OnceLock::new();
    GENUINE.get_or_init(|| {
        let binary = tenantflux_tests::flux_cli();
        let bytes = fs::read(&binary).unwrap_or_else(|err| {
            panic!(
                "{}: {err} (tests/env/cluster build-flux-cli builds it)",
                binary.display()
            )
        });
        (binary, tar_gz(&bytes))
    })
}

/// A mirror directory in the release layout: v2.9.5 genuine, v2.9.4 a marking script.
struct Releases {
    dir: tempfile::TempDir,
    /// Left behind by the v2.9.4 "binary" if anything ever runs it.
    other_mark: PathBuf,
}

impl Releases {
    fn new() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("tenantflux-flux-mirror-")
            .tempdir()
            .unwrap();
        let other_mark = dir.path().join("v2.9.4-ran");
        publish(dir.path(), RELEASE, &genuine().1, None);
        publish(
            dir.path(),
            OTHER,
            &tar_gz(&marking_script(&other_mark)),
            None,
        );
        Self { dir, other_mark }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

/// A test CA and a certificate for 127.0.0.1 it signed, made with openssl.
struct TestCa {
    dir: tempfile::TempDir,
}

impl TestCa {
    fn new() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("tenantflux-mirror-ca-")
            .tempdir()
            .unwrap();
        let at = |name: &str| dir.path().join(name);
        let run = |args: &[&str]| {
            let output = Command::new("openssl")
                .args(args)
                .stdin(Stdio::null())
                .output()
                .expect("openssl");
            assert!(output.status.success(), "openssl {args:?}: {output:?}");
        };
        run(&[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            path(&at("ca.key")),
            "-out",
            path(&at("ca.crt")),
            "-days",
            "1",
            "-subj",
            "/CN=tenantflux test mirror CA",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ]);
        run(&[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            path(&at("server.key")),
            "-out",
            path(&at("server.csr")),
            "-subj",
            "/CN=127.0.0.1",
        ]);
        fs::write(
            at("server.ext"),
            "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n\
             keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n",
        )
        .unwrap();
        run(&[
            "x509",
            "-req",
            "-in",
            path(&at("server.csr")),
            "-CA",
            path(&at("ca.crt")),
            "-CAkey",
            path(&at("ca.key")),
            "-CAcreateserial",
            "-days",
            "1",
            "-extfile",
            path(&at("server.ext")),
            "-out",
            path(&at("server.crt")),
        ]);
        Self { dir }
    }

    fn ca(&self) -> PathBuf {
        self.dir.path().join("ca.crt")
    }
}

/// `tests/env/https-files.py` serving a mirror directory; stopped on drop.
struct HttpsMirror {
    child: Child,
    url: String,
    log: PathBuf,
    _ca: TestCa,
}

impl HttpsMirror {
    fn serve(dir: &Path) -> (Self, PathBuf) {
        let ca = TestCa::new();
        let state = ca.dir.path();
        let port_file = state.join("port");
        let log = state.join("requests.log");
        fs::write(&log, "").unwrap();
        let child = Command::new(repo_root().join("tests/env/https-files.py"))
            .arg(dir)
            .arg(state.join("server.crt"))
            .arg(state.join("server.key"))
            .arg(&port_file)
            .arg(&log)
            .stdin(Stdio::null())
            .spawn()
            .expect("start tests/env/https-files.py");
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        let port = loop {
            if let Ok(port) = fs::read_to_string(&port_file) {
                break port.trim().to_owned();
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the HTTPS mirror wrote no port"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        let ca_file = ca.ca();
        let mirror = Self {
            child,
            url: format!("https://127.0.0.1:{port}"),
            log,
            _ca: ca,
        };
        (mirror, ca_file)
    }

    /// Every request so far, as "GET PATH STATUS".
    fn requests(&self) -> Vec<String> {
        fs::read_to_string(&self.log)
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

impl Drop for HttpsMirror {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A cache of the test's own (XDG_CACHE_HOME), never the user's.
struct Cache(tempfile::TempDir);

impl Cache {
    fn new() -> Self {
        Self(
            tempfile::Builder::new()
                .prefix("tenantflux-flux-cache-")
                .tempdir()
                .unwrap(),
        )
    }

    fn xdg(&self) -> &Path {
        self.0.path()
    }

    fn flux_cli(&self) -> PathBuf {
        self.0.path().join("tenantflux/flux-cli")
    }

    /// The names in the flux CLI cache (none when it does not exist).
    fn entries(&self) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(self.flux_cli())
            .map(|dir| {
                dir.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }
}

/// `kubectl tenantflux ARGS` with the test's cache and a mirror (`--flux-cli-mirror`'s env twin).
fn plugin_command(
    cluster: &TestCluster,
    cache: &Cache,
    mirror: &str,
    ca: Option<&Path>,
    args: &[&str],
) -> Command {
    let mut command = cluster.plugin_command(None, args);
    command
        .env("XDG_CACHE_HOME", cache.xdg())
        .env("TENANTFLUX_FLUX_CLI_MIRROR", mirror)
        .env_remove("TENANTFLUX_FLUX_CLI_MIRROR_CA")
        .env_remove("TENANTFLUX_FLUX_CLI");
    if let Some(ca) = ca {
        command.env("TENANTFLUX_FLUX_CLI_MIRROR_CA", ca);
    }
    command
}

fn output(mut command: Command) -> Output {
    command.output().expect("run kubectl tenantflux")
}

fn ok(output: &Output, what: &str) -> String {
    assert!(
        output.status.success(),
        "{what} failed ({}): {}\n{}",
        output.status,
        stderr(output),
        stdout(output)
    );
    stdout(output)
}

/// Flux 2.9 with the real controllers and the agent; waits until the agent reports the Flux
/// release the mirror's genuine archive holds.
async fn prepare(cluster: &TestCluster) {
    cluster
        .ensure_flux_and_agent("2.9.x")
        .await
        .expect("Flux 2.9 and the agent");
    let reported = wait_for(
        "the agent to report a Flux 2.9 release",
        Duration::from_secs(180),
        || async {
            let shown = cluster
                .kubectl_tenantflux(None, &["version", "-o", "json"])
                .ok()?;
            let json: serde_json::Value = serde_json::from_slice(&shown.stdout).ok()?;
            let flux = json["cluster"]["flux"].as_str()?.to_owned();
            flux.starts_with("v2.9.").then_some(flux)
        },
    )
    .await
    .expect("Flux 2.9 installed");
    assert_eq!(
        reported,
        format!("v{RELEASE}"),
        "the cluster runs Flux {reported}; tests/env/versions.env pins the flux CLI v{RELEASE}"
    );
}

#[tokio::test]
async fn the_matching_flux_cli_is_downloaded_once_verified_and_shows_what_the_controllers_reconcile()
 {
    let cluster = TestCluster::shared();
    prepare(cluster).await;
    let repo = GitRepo::new("flux-cli").expect("git repository");
    let sha = repo
        .commit(
            &[("README.md", "served to source-controller\n")],
            &[],
            "one",
        )
        .expect("commit");
    let url = cluster.git_server(&repo).expect("git server");
    cluster
        .apply_yaml(&format!(
            "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {NS}}}\n---\n\
             apiVersion: source.toolkit.fluxcd.io/v1\nkind: GitRepository\n\
             metadata: {{name: podinfo, namespace: {NS}}}\n\
             spec: {{interval: 1h, url: \"{url}\", ref: {{branch: main}}}}\n"
        ))
        .expect("GitRepository");
    let ready = wait_for(
        "source-controller to fetch the repository",
        Duration::from_secs(120),
        || async {
            let object = cluster.object(GIT_REPOSITORIES, NS, "podinfo")?;
            (ready_now(&object) == Some("True")).then_some(object)
        },
    )
    .await
    .expect("GitRepository Ready");
    assert_eq!(ready["status"]["artifact"]["revision"], revision(&sha));

    let releases = Releases::new();
    let (mirror, ca) = HttpsMirror::serve(releases.path());
    let cache = Cache::new();
    let first = output(plugin_command(
        cluster,
        &cache,
        &mirror.url,
        Some(&ca),
        &["flux", "get", "sources", "git", "-A"],
    ));
    let table = ok(&first, "kubectl tenantflux flux get sources git -A");
    let row = table
        .lines()
        .find(|l| l.split_whitespace().take(2).eq([NS, "podinfo"]))
        .unwrap_or_else(|| panic!("no row for {NS}/podinfo:\n{table}"));
    // flux shortens the commit to 8 characters.
    let shown_revision = revision(&sha[..8]);
    assert!(row.contains(&shown_revision), "{row}");
    assert!(row.split_whitespace().any(|c| c == "True"), "Ready: {row}");
    let archive_url = format!("{}/v{RELEASE}/{}", mirror.url, archive_name(RELEASE));
    assert!(
        stderr(&first).contains(&format!("downloading the flux CLI from {archive_url}")),
        "{}",
        stderr(&first)
    );
    // Exactly the release the cluster runs, each file once: not v2.9.4 beside it.
    assert_eq!(
        mirror.requests(),
        [
            format!("GET /v{RELEASE}/flux_{RELEASE}_checksums.txt 200"),
            format!("GET /v{RELEASE}/{} 200", archive_name(RELEASE)),
        ]
    );
    assert_eq!(cache.entries(), [format!("v{RELEASE}")]);
    let cached = cache.flux_cli().join(format!("v{RELEASE}/flux"));
    assert_eq!(
        fs::read(&cached).unwrap(),
        fs::read(&genuine().0).unwrap(),
        "the cache holds the genuine binary"
    );
    assert!(!releases.other_mark.exists(), "v{OTHER} never ran");

    // From the cache, with the plugin's own --kubeconfig and -n handed to flux (no KUBECONFIG:
    // flux finds the cluster only through the flag).
    let mut second = plugin_command(
        cluster,
        &cache,
        &mirror.url,
        Some(&ca),
        &[
            "--kubeconfig",
            path(cluster.kubeconfig()),
            "-n",
            NS,
            "flux",
            "get",
            "sources",
            "git",
        ],
    );
    second.env_remove("KUBECONFIG");
    let second = output(second);
    let table = ok(&second, "kubectl tenantflux -n NS flux get sources git");
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("podinfo") && l.contains(&shown_revision)),
        "{table}"
    );
    assert_eq!(
        mirror.requests().len(),
        2,
        "no second download: {:?}",
        mirror.requests()
    );
    assert!(
        !stderr(&second).contains("downloading"),
        "{}",
        stderr(&second)
    );

    let version = ok(
        &output(plugin_command(
            cluster,
            &cache,
            &mirror.url,
            None,
            &["version", "-o", "json"],
        )),
        "version",
    );
    let version: serde_json::Value = serde_json::from_str(&version).unwrap();
    assert_eq!(version["fluxCliCache"]["version"], format!("v{RELEASE}"));
    assert_eq!(version["fluxCliCache"]["cached"], true);
    assert_eq!(version["fluxCliCache"]["path"], path(&cached));
}

#[tokio::test]
async fn a_tampered_flux_cli_archive_is_refused_and_nothing_is_cached_or_run() {
    let cluster = TestCluster::shared();
    prepare(cluster).await;
    let releases = tempfile::tempdir().unwrap();
    let mark = releases.path().join("tampered-ran");
    // The checksums file lists the genuine archive; the archive is another.
    publish(
        releases.path(),
        RELEASE,
        &tar_gz(&marking_script(&mark)),
        Some(sha256(&genuine().1)),
    );
    let (mirror, ca) = HttpsMirror::serve(releases.path());
    let cache = Cache::new();
    let run = output(plugin_command(
        cluster,
        &cache,
        &mirror.url,
        Some(&ca),
        &["flux", "version", "--client"],
    ));
    let err = stderr(&run);
    assert_eq!(run.status.code(), Some(1), "{err}");
    let archive_url = format!("{}/v{RELEASE}/{}", mirror.url, archive_name(RELEASE));
    assert!(
        err.contains(&format!("the sha256 of {archive_url} is ")),
        "names the archive: {err}"
    );
    assert!(
        err.contains(&format!("lists {}", sha256(&genuine().1))),
        "{err}"
    );
    assert!(err.contains("nothing was cached or run"), "{err}");
    assert_eq!(
        mirror.requests(),
        [
            format!("GET /v{RELEASE}/flux_{RELEASE}_checksums.txt 200"),
            format!("GET /v{RELEASE}/{} 200", archive_name(RELEASE)),
        ],
        "the archive was downloaded and checked"
    );
    assert_eq!(
        cache.entries(),
        Vec::<String>::new(),
        "nothing in the cache"
    );
    assert!(!mark.exists(), "the tampered binary never ran");
}

/// A cache holding the genuine release, filled from a directory mirror (the air-gapped way).
fn warm_cache(cluster: &TestCluster, releases: &Releases) -> (Cache, PathBuf) {
    let cache = Cache::new();
    let mirror = format!("file://{}", releases.path().display());
    let printed = ok(
        &output(plugin_command(
            cluster,
            &cache,
            &mirror,
            None,
            &["flux", "--print-path"],
        )),
        "kubectl tenantflux flux --print-path",
    );
    let binary = PathBuf::from(printed.trim());
    (cache, binary)
}

#[tokio::test]
async fn print_path_gives_the_cached_binary_for_an_alias_from_an_air_gapped_directory() {
    let cluster = TestCluster::shared();
    prepare(cluster).await;
    let releases = Releases::new();
    let (cache, binary) = warm_cache(cluster, &releases);
    assert_eq!(binary, cache.flux_cli().join(format!("v{RELEASE}/flux")));
    let version = Command::new(&binary)
        .args(["version", "--client", "-o", "json"])
        .output()
        .expect("run the printed path");
    assert!(
        stdout(&version).contains(&format!("\"v{RELEASE}\"")),
        "{}",
        stdout(&version)
    );
    // Printed again from the cache: a mirror that is gone is not asked.
    let again = ok(
        &output(plugin_command(
            cluster,
            &cache,
            "file:///nonexistent/mirror",
            None,
            &["flux", "--print-path"],
        )),
        "--print-path, cached",
    );
    assert_eq!(again.trim(), path(&binary));
    assert!(!releases.other_mark.exists(), "v{OTHER} never ran");
}

#[tokio::test]
async fn flux_create_source_git_export_prints_the_api_version_the_cluster_serves() {
    let cluster = TestCluster::shared();
    prepare(cluster).await;
    let releases = Releases::new();
    let (cache, _) = warm_cache(cluster, &releases);
    let exported = ok(
        &output(plugin_command(
            cluster,
            &cache,
            "file:///nonexistent/mirror",
            None,
            &[
                "flux",
                "create",
                "source",
                "git",
                "podinfo",
                "--url=https://github.com/stefanprodan/podinfo",
                "--branch=master",
                "--export",
            ],
        )),
        "flux create source git --export",
    );
    let storage = cluster
        .kubectl_ok(&[
            "get",
            "crd",
            GIT_REPOSITORIES,
            "-o",
            "jsonpath={.spec.versions[?(@.storage==true)].name}",
        ])
        .expect("the CRD's storage version");
    let api_version = format!("apiVersion: source.toolkit.fluxcd.io/{}", storage.trim());
    assert!(
        exported.lines().any(|l| l == api_version),
        "{api_version} in:\n{exported}"
    );
    assert!(exported.contains("kind: GitRepository"), "{exported}");
}

#[tokio::test]
async fn a_failing_flux_command_exits_with_fluxs_code_and_words() {
    let cluster = TestCluster::shared();
    prepare(cluster).await;
    let releases = Releases::new();
    let (cache, _) = warm_cache(cluster, &releases);
    let failed = output(plugin_command(
        cluster,
        &cache,
        "file:///nonexistent/mirror",
        None,
        &[
            "flux",
            "get",
            "kustomizations",
            "no-such-kustomization",
            "-n",
            "flux-system",
        ],
    ));
    let err = stderr(&failed);
    assert_eq!(failed.status.code(), Some(1), "{err}");
    // flux's own message, not one of the plugin's (`error: …`).
    assert!(err.contains('✗') && err.contains("not found"), "{err}");
    assert!(!err.contains("error: "), "{err}");
    // A usage error of flux's own.
    let unknown = output(plugin_command(
        cluster,
        &cache,
        "file:///nonexistent/mirror",
        None,
        &["flux", "no-such-command"],
    ));
    assert_eq!(unknown.status.code(), Some(1), "{}", stderr(&unknown));
    assert!(
        stderr(&unknown).contains("unknown command"),
        "{}",
        stderr(&unknown)
    );
}

#[cfg(target_os = "linux")]
#[tokio::test]
async fn flux_replaces_the_plugin_process_so_stdin_and_signals_reach_it() {
    use std::os::unix::process::ExitStatusExt as _;
    let cluster = TestCluster::shared();
    prepare(cluster).await;
    let releases = Releases::new();
    let (cache, binary) = warm_cache(cluster, &releases);
    // `flux envsubst` answers each line of stdin, and waits for the next.
    let mut envsubst = plugin_command(
        cluster,
        &cache,
        "file:///nonexistent/mirror",
        None,
        &["flux", "envsubst"],
    );
    let mut child = envsubst
        .env("CLUSTER_REGION", "eu-central-1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start flux envsubst");
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "region: ${{CLUSTER_REGION}}").expect("write to its stdin");
    let mut answer = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut answer)
        .expect("read its stdout");
    assert_eq!(answer, "region: eu-central-1\n");
    // kubectl runs the plugin in its own place, and the plugin flux in its own: the process
    // started as kubectl is flux now.
    let exe = fs::read_link(format!("/proc/{}/exe", child.id())).expect("the process's binary");
    assert_eq!(exe, binary);
    let kill = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(kill.success());
    let status = child.wait().expect("flux ends");
    assert_eq!(
        status.signal(),
        Some(15),
        "ended by SIGTERM itself: {status:?}"
    );
    drop(stdin);
}

#[tokio::test]
async fn a_flux_cli_of_another_version_is_refused_and_the_right_one_is_run_as_given() {
    let cluster = TestCluster::shared();
    prepare(cluster).await;
    let cache = Cache::new();
    let dir = tempfile::tempdir().unwrap();
    // A flux CLI the user has, of another release (what `flux version --client -o json` says).
    let old = dir.path().join("flux-2.6.4");
    fs::write(
        &old,
        "#!/bin/sh\n[ \"$*\" = 'version --client -o json' ] && echo '{\"flux\": \"v2.6.4\"}' && exit 0\n\
         touch \"$0.ran\"\nexit 0\n",
    )
    .unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        fs::set_permissions(&old, fs::Permissions::from_mode(0o755)).unwrap();
    }
    let refused = output(plugin_command(
        cluster,
        &cache,
        "file:///nonexistent/mirror",
        None,
        &["flux", "--flux-cli", path(&old), "get", "ks", "-A"],
    ));
    let err = stderr(&refused);
    assert_eq!(refused.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "--flux-cli {}: it is flux v2.6.4; the cluster runs Flux v{RELEASE}",
            old.display()
        )),
        "{err}"
    );
    assert!(
        !dir.path().join("flux-2.6.4.ran").exists(),
        "only asked for its version"
    );
    assert_eq!(cache.entries(), Vec::<String>::new());

    let given = ok(
        &output(plugin_command(
            cluster,
            &cache,
            "file:///nonexistent/mirror",
            None,
            &[
                "flux",
                "--flux-cli",
                path(&genuine().0),
                "version",
                "--client",
                "-o",
                "json",
            ],
        )),
        "--flux-cli with the cluster's release",
    );
    assert!(given.contains(&format!("\"v{RELEASE}\"")), "{given}");
    assert_eq!(cache.entries(), Vec::<String>::new(), "nothing downloaded");
}

#[tokio::test]
async fn a_mirror_without_the_release_or_out_of_reach_names_the_url() {
    let cluster = TestCluster::shared();
    prepare(cluster).await;
    let empty = tempfile::tempdir().unwrap();
    let (mirror, ca) = HttpsMirror::serve(empty.path());
    let cache = Cache::new();
    let missing = output(plugin_command(
        cluster,
        &cache,
        &mirror.url,
        Some(&ca),
        &["flux", "get", "ks"],
    ));
    let err = stderr(&missing);
    assert_eq!(missing.status.code(), Some(1), "{err}");
    let checksums_url = format!("{}/v{RELEASE}/flux_{RELEASE}_checksums.txt", mirror.url);
    assert!(
        err.contains(&format!(
            "cannot download {checksums_url}: the server answered 404"
        )),
        "{err}"
    );
    // A port nobody listens on stands for a machine without a network.
    let offline = output(plugin_command(
        cluster,
        &cache,
        "https://127.0.0.1:1/flux",
        Some(&ca),
        &["flux", "get", "ks"],
    ));
    let err = stderr(&offline);
    assert_eq!(offline.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "cannot download https://127.0.0.1:1/flux/v{RELEASE}/flux_{RELEASE}_checksums.txt: "
        )),
        "{err}"
    );
    // Without the test CA, the mirror's certificate is not trusted.
    let untrusted = output(plugin_command(
        cluster,
        &cache,
        &mirror.url,
        None,
        &["flux", "get", "ks"],
    ));
    let err = stderr(&untrusted);
    assert_eq!(untrusted.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("cannot download {checksums_url}")),
        "{err}"
    );
    assert_eq!(cache.entries(), Vec::<String>::new());
}
