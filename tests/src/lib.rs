//! The harness shared by tenantflux's integration tests: real control planes started by
//! `tests/env/cluster` (kube-apiserver, etcd, controller-manager, scheduler and kwok built from
//! their Go modules, and the real flux-operator), never a stand-in.
//!
//! A test binary gets one cluster from [`TestCluster::shared`]. With `TENANTFLUX_TEST_CLUSTER`
//! set, that cluster is reused as it is (fast local iteration; `tests/run` sets it for the whole
//! suite). Otherwise a cluster is started for the test process and torn down by a reaper once
//! the process exits, however it exits. [`TestCluster::start`] gives a test a cluster of its own
//! that is stopped when the value is dropped, also when the test panics.
//!
//! Every binary must pass alone and after any other on the shared cluster: a binary restores
//! what it changes there, or takes [`TestCluster::own`] (one cluster for the binary). `tests/run`
//! runs `policy_pull` first, so that the full run shows the others do not depend on the order.

use std::{
    ffi::OsStr,
    future::Future,
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
    sync::OnceLock,
    time::Duration,
};

use kube::config::{KubeConfigOptions, Kubeconfig};
use rustix::process::Signal;

pub mod browser;
pub mod cozystack;
pub mod flux;
pub mod supervise;
pub mod tenant;

/// Names the cluster a whole test run shares instead of starting one per test binary.
pub const SHARED_CLUSTER_ENV: &str = "TENANTFLUX_TEST_CLUSTER";

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("running {command}: {source}")]
    Spawn {
        command: String,
        source: std::io::Error,
    },
    #[error("{command} failed ({status}):\n{stderr}")]
    Failed {
        command: String,
        status: std::process::ExitStatus,
        stderr: String,
    },
    #[error("reading kubeconfig {path}: {source}")]
    Kubeconfig {
        path: PathBuf,
        source: kube::config::KubeconfigError,
    },
    #[error("kubeconfig {path}: {reason}")]
    KubeconfigIncomplete { path: PathBuf, reason: &'static str },
    #[error("connecting to the cluster with {path}: {source}")]
    Client { path: PathBuf, source: kube::Error },
    #[error("timed out after {after:?} waiting for {what}")]
    Timeout { what: String, after: Duration },
    #[error("no agent to stop: {reason}")]
    NothingToStop { reason: String },
    #[error("{doing}: {source}")]
    Kube { doing: String, source: kube::Error },
}

/// The `tests/env/cluster` entry point.
pub fn cluster_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("env/cluster")
}

/// A UTF-8 path as a command-line argument.
pub fn path(p: &Path) -> &str {
    p.to_str().expect("UTF-8 path")
}

/// The repository root (for deploy/ and target/).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// Where cargo put this test's binaries, and so the workspace's: `target/<profile>`.
pub fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    // target/<profile>/deps/<test binary>
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("test binaries live in target/<profile>/deps")
        .to_path_buf();
    static FRESH: std::sync::OnceLock<std::result::Result<(), String>> = std::sync::OnceLock::new();
    if let Err(stale) = FRESH.get_or_init(|| binaries_fresh(&dir, &repo_root())) {
        panic!("{stale}");
    }
    dir
}

/// The binaries a test runs, and the sources each is built from.
const BINARIES: &[(&str, &[&str])] = &[
    ("kubectl-tenantflux", &["plugin", "agent/core", "proto"]),
    ("tenantflux-agent", &["agent", "proto"]),
];

/// Refuses to test binaries older than their sources: `cargo test -p tenantflux-tests` builds
/// the tests, not the plugin and agent they run, so a test run alone after an edit would
/// otherwise test the previous code and pass or fail for the wrong reason.
fn binaries_fresh(bin_dir: &Path, root: &Path) -> std::result::Result<(), String> {
    fn newest(path: &Path, best: &mut Option<(std::time::SystemTime, PathBuf)>) {
        let Ok(meta) = std::fs::metadata(path) else {
            return;
        };
        if meta.is_dir() {
            if path
                .file_name()
                .is_some_and(|n| n == "target" || n == "tests")
            {
                return;
            }
            for entry in std::fs::read_dir(path).into_iter().flatten().flatten() {
                newest(&entry.path(), best);
            }
        } else if path.extension().is_some_and(|e| e == "rs" || e == "proto")
            // Unit tests (`tests.rs`, `tests/`) are not in the binary: cargo does not relink it
            // for them.
            && path.file_name().is_some_and(|n| n != "tests.rs")
            && let Ok(modified) = meta.modified()
            && best.as_ref().is_none_or(|(t, _)| modified > *t)
        {
            *best = Some((modified, path.to_path_buf()));
        }
    }
    for (binary, sources) in BINARIES {
        let built = bin_dir.join(binary);
        let command = "cargo build --workspace --all-targets (tests/run NAME builds first)";
        let Ok(built_at) = std::fs::metadata(&built).and_then(|m| m.modified()) else {
            return Err(format!(
                "{} does not exist: build it first: {command}",
                built.display()
            ));
        };
        let mut source = None;
        for path in *sources {
            newest(&root.join(path), &mut source);
        }
        if let Some((changed, path)) = source
            && changed > built_at
        {
            return Err(format!(
                "{} is older than {}: the test would run the code before that change; \
                 build first: {command}",
                built.display(),
                path.strip_prefix(root).unwrap_or(&path).display()
            ));
        }
    }
    Ok(())
}

/// Runs `command` with its stdin closed, failing unless it exits 0 (the error names it
/// `shown` and holds its stderr); returns its stdout.
fn run_ok(command: &mut Command, shown: String) -> Result<String> {
    let output = command
        .stdin(Stdio::null())
        .output()
        .map_err(|source| Error::Spawn {
            command: shown.clone(),
            source,
        })?;
    if !output.status.success() {
        return Err(Error::Failed {
            command: shown,
            status: output.status,
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Runs `tests/env/cluster ARGS`; progress goes to the test's stderr, stdout is returned.
fn run_cluster_script(args: &[&str]) -> Result<String> {
    run_cluster_script_with(args, &[])
}

/// The same with `envs` added, and always the process supervisor cargo built for these tests
/// (the script must not build it: cargo holds its build lock while tests run).
fn run_cluster_script_with(args: &[&str], envs: &[(&str, &OsStr)]) -> Result<String> {
    let command = format!("tests/env/cluster {}", args.join(" "));
    let output = Command::new(cluster_script())
        .args(args)
        .env(
            "TENANTFLUX_SUPERVISOR_BIN",
            bin_dir().join("tenantflux-test-supervisor"),
        )
        .envs(envs.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|source| Error::Spawn {
            command: command.clone(),
            source,
        })?;
    if !output.status.success() {
        return Err(Error::Failed {
            command,
            status: output.status,
            stderr: "(see the output above)".into(),
        });
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Runs `tests/env/cluster flux-operator|controllers ...`.
fn flux_operator_command(args: &[&str]) -> Result<()> {
    run_cluster_script(args).map(drop)
}

/// Sends `signal` to the process of `pidfile` (`what`, for errors) and waits until it is gone,
/// then removes the file. A test that stops a process which is not running proves nothing: that
/// fails.
fn signal_and_wait(pidfile: &Path, what: &str, signal: Signal) -> Result<()> {
    use supervise::process::{alive, read_pid, send_signal};
    let pid = read_pid(pidfile)
        .filter(|&pid| alive(pid))
        .ok_or_else(|| Error::NothingToStop {
            reason: format!("{what} of {} is not running", pidfile.display()),
        })?;
    send_signal(pid, signal);
    let timeout = Duration::from_secs(10);
    let deadline = std::time::Instant::now() + timeout;
    while alive(pid) {
        if std::time::Instant::now() >= deadline {
            return Err(Error::Timeout {
                what: format!("{what} (pid {pid}) to stop"),
                after: timeout,
            });
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = std::fs::remove_file(pidfile);
    Ok(())
}

/// Paths of the binaries `tests/env/cluster build` cached (`tests/env/cluster paths`).
pub fn tool_path(key: &str) -> PathBuf {
    static PATHS: OnceLock<Vec<(String, PathBuf)>> = OnceLock::new();
    let paths = PATHS.get_or_init(|| {
        run_cluster_script(&["paths"])
            .expect("tests/env/cluster paths")
            .lines()
            .filter_map(|line| line.split_once('='))
            .map(|(k, v)| (k.to_string(), PathBuf::from(v)))
            .collect()
    });
    paths
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| panic!("tests/env/cluster paths has no {key}"))
}

/// Builds (once per process; cached by version) the packaging tools `tests/env/cluster
/// build-tools` makes: helm and krew. Their paths are then in [`tool_path`].
pub fn ensure_packaging_tools() -> Result<()> {
    static BUILT: std::sync::Mutex<bool> = std::sync::Mutex::new(false);
    let mut built = BUILT
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if !*built {
        run_cluster_script(&["build-tools"])?;
        *built = true;
    }
    Ok(())
}

/// Where `program` is on PATH, installing `packages` (space-separated) with apt-get (as root,
/// or through `sudo -n`) when it is missing: the suite runs on a fresh machine. `lean` installs
/// with `--no-install-recommends` and apt-get's stdin closed (the browser's packages recommend
/// desktop services). One install at a time: parallel tests would otherwise run apt-get at
/// once, and all but one wait for its lock. Failing, panics naming what to install.
pub fn installed(program: &str, packages: &str, lean: bool) -> PathBuf {
    let find = || {
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
            .map(|dir| dir.join(program))
            .find(|candidate| candidate.is_file())
    };
    if let Some(found) = find() {
        return found;
    }
    static APT: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = APT.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(found) = find() {
        return found;
    }
    let apt = |args: &[&str]| {
        let mut command = if rustix::process::geteuid().is_root() {
            Command::new("apt-get")
        } else {
            let mut sudo = Command::new("sudo");
            sudo.args(["-n", "apt-get"]);
            sudo
        };
        command.args(["-o", "DPkg::Lock::Timeout=300", "-y", "-q"]);
        if lean {
            command.arg("--no-install-recommends").stdin(Stdio::null());
        }
        command
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    };
    let install: Vec<&str> = std::iter::once("install")
        .chain(packages.split(' '))
        .collect();
    let what = if lean {
        format!("apt-get install --no-install-recommends {packages}")
    } else {
        format!("apt-get install {packages}")
    };
    eprintln!("{program} is missing: {what}");
    let _ = apt(&install) || (apt(&["update"]) && apt(&install));
    find().unwrap_or_else(|| {
        panic!("{program} is not installed and apt-get could not install it: {what}")
    })
}

/// Waits for what `tests/run` builds in the background while the first tests run (the flux CLI
/// and the controllers of `FLUX_CONTROLLERS_LATER` in tests/env/versions.env), building what is
/// missing when a test runs alone; once per process. Every test that runs the flux CLI
/// ([`flux_cli`]) or installs Flux 2.7 calls this first, and `tests/run` runs the modules that
/// name it last in their lane.
pub fn await_later_builds() -> Result<()> {
    static BUILT: std::sync::Mutex<bool> = std::sync::Mutex::new(false);
    let mut built = BUILT
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if !*built {
        // Each binary's build lock makes these wait for the background build of the same one.
        run_cluster_script(&["build-flux-cli"])?;
        run_cluster_script(&["build"])?;
        *built = true;
    }
    Ok(())
}

/// The flux CLI tests/env/cluster builds (FLUX_CLI_VERSION), once it is built.
pub fn flux_cli() -> PathBuf {
    await_later_builds().expect("tests/env/cluster build-flux-cli and build");
    tool_path("FLUX_CLI")
}

#[derive(Debug)]
pub struct TestCluster {
    name: String,
    kubeconfig: PathBuf,
    /// Stopped on drop; a shared cluster is left to its reaper or to whoever started it.
    stop_on_drop: bool,
}

impl TestCluster {
    /// The cluster this test binary shares (see the module docs).
    pub fn shared() -> &'static TestCluster {
        static SHARED: OnceLock<TestCluster> = OnceLock::new();
        SHARED.get_or_init(|| {
            let cluster = match std::env::var(SHARED_CLUSTER_ENV) {
                Ok(name) if !name.is_empty() => Self::up(&name, None),
                _ => {
                    let pid = std::process::id();
                    Self::up(&format!("tf-test-{pid}"), Some(pid))
                }
            };
            cluster.unwrap_or_else(|err| panic!("starting the shared test cluster: {err}"))
        })
    }

    /// A cluster of this process's own, also when a run shares one (`TENANTFLUX_TEST_CLUSTER`):
    /// for tests that leave state behind which would change what other modules see. Named
    /// `PREFIX-<pid>` by the first call and started once per process (`tests/run` starts the
    /// integration binary once per module, so once per module): a second test of the module
    /// that needs a cluster of its own takes [`Self::start`]. A reaper takes it down when the
    /// process exits.
    pub fn own(prefix: &str) -> &'static TestCluster {
        static OWN: OnceLock<TestCluster> = OnceLock::new();
        OWN.get_or_init(|| {
            let pid = std::process::id();
            Self::up(&format!("{prefix}-{pid}"), Some(pid))
                .unwrap_or_else(|err| panic!("starting this test binary's cluster: {err}"))
        })
    }

    /// A cluster of the caller's own, stopped when the value is dropped. The process id is
    /// also handed to a reaper, so an aborted test leaves nothing running either.
    pub fn start(name: &str) -> Result<TestCluster> {
        let mut cluster = Self::up(name, Some(std::process::id()))?;
        cluster.stop_on_drop = true;
        Ok(cluster)
    }

    fn up(name: &str, owner: Option<u32>) -> Result<TestCluster> {
        let owner = owner.map(|pid| pid.to_string());
        let mut args = vec!["up", name];
        args.extend(owner.as_deref());
        let stdout = run_cluster_script(&args)?;
        let kubeconfig = stdout.lines().last().map(PathBuf::from).unwrap_or_default();
        Ok(TestCluster {
            name: name.to_string(),
            kubeconfig,
            stop_on_drop: false,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Stops the cluster now (its API server, agent and operator), as a cluster that goes
    /// away under a running test; dropping the value later is harmless.
    pub fn down(&self) -> Result<()> {
        run_cluster_script(&["down", &self.name]).map(drop)
    }

    /// A self-contained copy of this cluster's kubeconfig (certificates and keys embedded),
    /// as a platform stores it in a Secret. `kubeconfig` defaults to the admin's (client
    /// certificates, as Kamaji's admin kubeconfigs are).
    pub fn flattened_kubeconfig(&self, kubeconfig: Option<&Path>) -> Result<String> {
        let path = kubeconfig.unwrap_or(&self.kubeconfig);
        let args = ["config", "view", "--raw", "--minify", "--flatten"];
        let command = format!("kubectl --kubeconfig {} {}", path.display(), args.join(" "));
        run_ok(
            Command::new(tool_path("KUBECTL"))
                .arg("--kubeconfig")
                .arg(path)
                .args(args),
            command,
        )
    }

    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// Installs flux-operator's CRDs and runs the real operator against this cluster
    /// (idempotent: an operator already running is kept).
    pub fn ensure_flux_operator(&self) -> Result<()> {
        static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _serial = LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        flux_operator_command(&["flux-operator", &self.name])
    }

    /// Runs tenantflux-agent locally against this cluster as its ServiceAccount, with
    /// deploy/manifests applied and port-forwards to its pod reaching the process
    /// (idempotent: an agent already running is kept).
    pub fn ensure_agent(&self) -> Result<()> {
        self.agent_command(false)
    }

    /// Stops the agent process and starts a new one (on new local ports; the pod stays).
    pub fn restart_agent(&self) -> Result<()> {
        self.agent_command(true)
    }

    fn agent_command(&self, restart: bool) -> Result<()> {
        static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _serial = LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut args = vec!["agent", self.name.as_str()];
        if restart {
            args.push("--restart");
        }
        let bin = bin_dir().join("tenantflux-agent");
        run_cluster_script_with(&args, &[("TENANTFLUX_AGENT_BIN", bin.as_os_str())]).map(drop)
    }

    /// Stops the agent process (SIGTERM, as when its pod stops); what it wrote to the cluster
    /// stays. A later `ensure_agent`/`restart_agent*` starts it again.
    pub fn stop_agent(&self) -> Result<()> {
        signal_and_wait(&self.dir().join("agent.pid"), "the agent", Signal::TERM)
    }

    /// Kills the agent process with SIGKILL, as a crash or an OOM kill does: nothing of its
    /// own shutdown runs. A later `restart_agent*` starts it again.
    pub fn kill_agent(&self) -> Result<()> {
        signal_and_wait(&self.dir().join("agent.pid"), "the agent", Signal::KILL)
    }

    /// The length of the agent's log now, for [`Self::wait_agent_log`] to read on from.
    pub fn agent_log_len(&self) -> u64 {
        std::fs::metadata(self.dir().join("agent.log")).map_or(0, |m| m.len())
    }

    /// Waits until the agent logged `needle` after byte `from` of its log: a positive barrier
    /// for "the agent got this far", where a sleep would only hope so.
    pub async fn wait_agent_log(&self, from: u64, needle: &str, timeout: Duration) -> Result<()> {
        let log = self.dir().join("agent.log");
        wait_for(&format!("{needle:?} in {}", log.display()), timeout, || {
            let text = std::fs::read(&log).unwrap_or_default();
            let found = usize::try_from(from)
                .ok()
                .and_then(|from| text.get(from..))
                .is_some_and(|new| String::from_utf8_lossy(new).contains(needle));
            async move { found.then_some(()) }
        })
        .await
    }

    /// (Re)starts the agent with extra environment (its flags' env twins, e.g.
    /// `TENANTFLUX_OPERATOR_BUNDLE`), replacing an agent already running.
    pub fn restart_agent_with(&self, envs: &[(&str, &str)]) -> Result<()> {
        static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _serial = LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let bin = bin_dir().join("tenantflux-agent");
        let mut all: Vec<(&str, &OsStr)> = vec![("TENANTFLUX_AGENT_BIN", bin.as_os_str())];
        all.extend(envs.iter().map(|(k, v)| (*k, OsStr::new(*v))));
        run_cluster_script_with(&["agent", &self.name, "--restart"], &all).map(drop)
    }

    /// Runs the real flux-operator process against this cluster without installing it: for
    /// when the agent installed flux-operator.
    pub fn run_flux_operator_process(&self) -> Result<()> {
        flux_operator_command(&["flux-operator", &self.name, "--process-only"])
    }

    /// Runs flux-operator `version` on the install the agent made, replacing a process of
    /// another version, as a kubelet replaces the pod of an upgraded Deployment.
    pub fn run_flux_operator_version(&self, version: &str) -> Result<()> {
        let version = format!("--version={version}");
        flux_operator_command(&["flux-operator", &self.name, "--process-only", &version])
    }

    /// Runs flux-operator `version` as a local process in `namespace` (its RUNTIME_NAMESPACE,
    /// and where its controllers are supervised) on an install made by someone else, e.g. a
    /// Helm release: only the process the fake pod stands for is started.
    pub fn run_flux_operator_in(&self, namespace: &str, version: &str) -> Result<()> {
        let version = format!("--version={version}");
        let namespace = format!("--namespace={namespace}");
        flux_operator_command(&[
            "flux-operator",
            &self.name,
            "--process-only",
            &version,
            &namespace,
        ])
    }

    /// Runs only the supervisor of the Flux controllers in `namespace`: for Flux installed
    /// without flux-operator (`flux install`), whose Deployments then run as local processes.
    pub fn run_flux_controllers_in(&self, namespace: &str) -> Result<()> {
        let namespace = format!("--namespace={namespace}");
        flux_operator_command(&["controllers", &self.name, &namespace])
    }

    /// Stops the cluster's etcd and kube-apiserver (SIGSTOP) for `seconds`, then lets them go
    /// on; returns once the API server answers again.
    pub fn apiserver_outage(&self, seconds: u64) -> Result<()> {
        run_cluster_script(&["apiserver-outage", &self.name, &seconds.to_string()]).map(drop)
    }

    /// Kills the cluster's kube-apiserver and etcd, starts them again after `seconds` with the
    /// same command lines, and returns once the API server answers again.
    pub fn apiserver_restart(&self, seconds: u64) -> Result<()> {
        let seconds = seconds.to_string();
        run_cluster_script(&["apiserver-outage", &self.name, &seconds, "--restart"]).map(drop)
    }

    /// The pid of the running agent process.
    pub fn agent_pid(&self) -> Option<u32> {
        std::fs::read_to_string(self.dir().join("agent.pid"))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// The local address of the agent's admin listener (`/livez`, `/readyz`, `/metrics`).
    pub fn agent_admin_address(&self) -> String {
        let path = self.dir().join("agent.admin-port");
        let port = std::fs::read_to_string(&path).unwrap_or_else(|err| {
            panic!("reading {}: {err} (is the agent running?)", path.display())
        });
        format!("127.0.0.1:{}", port.trim())
    }

    /// The agent's `/metrics` text, empty when it does not answer.
    pub fn agent_metrics(&self) -> String {
        let out = Command::new("curl")
            .args([
                "-sf",
                &format!("http://{}/metrics", self.agent_admin_address()),
            ])
            .output()
            .expect("curl");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Starts (once) a local OCI registry for this cluster; returns its `127.0.0.1:PORT`.
    pub fn registry(&self) -> Result<String> {
        let stdout = run_cluster_script(&["registry", &self.name])?;
        Ok(stdout.lines().last().unwrap_or_default().trim().to_owned())
    }

    /// Stops this cluster's registry (SIGTERM) and waits until it is gone; a later
    /// [`Self::registry`] starts it again on the same port with the same storage. Fails when
    /// no registry runs.
    pub fn stop_registry(&self) -> Result<()> {
        signal_and_wait(
            &self.dir().join("registry.pid"),
            "the registry",
            Signal::TERM,
        )
    }

    /// The local address the agent's gRPC listener is bound to, for direct connections.
    pub fn agent_grpc_address(&self) -> String {
        let path = self.dir().join("agent.grpc-port");
        let port = std::fs::read_to_string(&path).unwrap_or_else(|err| {
            panic!("reading {}: {err} (is the agent running?)", path.display())
        });
        format!("http://127.0.0.1:{}", port.trim())
    }

    /// The directory tests/env/cluster keeps this cluster's files and logs in.
    pub fn dir(&self) -> &Path {
        self.kubeconfig
            .parent()
            .expect("the kubeconfig is in the cluster's directory")
    }

    /// `kubectl tenantflux ARGS` as a user runs it: the real kubectl (built at the cluster's
    /// version) finds the plugin on PATH. `kubeconfig` defaults to the cluster admin's
    /// (client certificates).
    pub fn kubectl_tenantflux(&self, kubeconfig: Option<&Path>, args: &[&str]) -> Result<Output> {
        let command = format!("kubectl tenantflux {}", args.join(" "));
        self.plugin_command(kubeconfig, args)
            .output()
            .map_err(|source| Error::Spawn { command, source })
    }

    /// The `kubectl tenantflux ARGS` command, for tests that stream its output.
    pub fn plugin_command(&self, kubeconfig: Option<&Path>, args: &[&str]) -> Command {
        let path = std::env::join_paths(std::iter::once(bin_dir()).chain(std::env::split_paths(
            &std::env::var_os("PATH").unwrap_or_default(),
        )))
        .expect("PATH");
        let mut command = Command::new(tool_path("KUBECTL"));
        command
            .arg("tenantflux")
            .args(args)
            .env("PATH", path)
            .env("KUBECONFIG", kubeconfig.unwrap_or(&self.kubeconfig))
            .env_remove("TENANTFLUX_TOKEN")
            .env_remove("TENANTFLUX_AGENT_ADDRESS")
            // Each run requests its own credential, as the tests of RBAC, CSR clean-up and
            // missing accounts expect; tests/tests/agent.rs tests the cache itself.
            .env("TENANTFLUX_NO_CREDENTIAL_CACHE", "1")
            .stdin(Stdio::null());
        command
    }

    /// The API server's address and the path of its CA file, from the admin kubeconfig
    /// (kwokctl writes the CA as a file), read here rather than by two `kubectl config view`
    /// processes.
    fn server_and_ca(&self) -> Result<(String, String)> {
        let kubeconfig = self.admin_kubeconfig()?;
        let context = kubeconfig.current_context.as_deref().and_then(|current| {
            kubeconfig
                .contexts
                .iter()
                .find(|c| c.name == current)
                .and_then(|c| c.context.as_ref())
        });
        let cluster = context.and_then(|context| {
            kubeconfig
                .clusters
                .iter()
                .find(|c| c.name == context.cluster)
                .and_then(|c| c.cluster.as_ref())
        });
        let server = cluster.and_then(|c| c.server.clone());
        let ca = cluster.and_then(|c| c.certificate_authority.clone());
        server.zip(ca).ok_or_else(|| Error::KubeconfigIncomplete {
            path: self.kubeconfig.clone(),
            reason: "its current context names no cluster with a server and a certificate-authority file",
        })
    }

    /// The admin kubeconfig of this cluster, parsed.
    fn admin_kubeconfig(&self) -> Result<Kubeconfig> {
        Kubeconfig::read_from(&self.kubeconfig).map_err(|source| Error::Kubeconfig {
            path: self.kubeconfig.clone(),
            source,
        })
    }

    /// A kube client for this cluster, authenticated as its admin.
    pub async fn client(&self) -> Result<kube::Client> {
        let path = self.kubeconfig.clone();
        let kubeconfig = self.admin_kubeconfig()?;
        let config =
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .map_err(|source| Error::Kubeconfig {
                    path: path.clone(),
                    source,
                })?;
        kube::Client::try_from(config).map_err(|source| Error::Client { path, source })
    }

    /// Runs the kubectl built at the cluster's version with this cluster's kubeconfig.
    pub fn kubectl(&self, args: &[&str]) -> Result<Output> {
        let command = format!("kubectl {}", args.join(" "));
        Command::new(tool_path("KUBECTL"))
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(|source| Error::Spawn { command, source })
    }

    /// kubectl with `args` and `input` on its stdin; its output, whatever its exit.
    pub fn kubectl_with_input(&self, args: &[&str], input: &[u8]) -> Result<Output> {
        use std::io::Write as _;
        let command = format!("kubectl {}", args.join(" "));
        let mut child = Command::new(tool_path("KUBECTL"))
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| Error::Spawn {
                command: command.clone(),
                source,
            })?;
        let written = child.stdin.take().expect("piped stdin").write_all(input);
        let output = child.wait_with_output().map_err(|source| Error::Spawn {
            command: command.clone(),
            source,
        })?;
        written.map_err(|source| Error::Spawn { command, source })?;
        Ok(output)
    }

    /// Server-side applies the YAML documents in `yaml` with the tests' field manager.
    pub fn apply_yaml(&self, yaml: &str) -> Result<String> {
        let args = [
            "apply",
            "--server-side",
            "--field-manager",
            FIELD_MANAGER,
            "-f",
            "-",
        ];
        let output = self.kubectl_with_input(&args, yaml.as_bytes())?;
        if !output.status.success() {
            return Err(Error::Failed {
                command: "kubectl apply --server-side -f -".to_string(),
                status: output.status,
                stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
            });
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    /// Like [`TestCluster::kubectl`], failing unless kubectl exits 0; returns its stdout.
    pub fn kubectl_ok(&self, args: &[&str]) -> Result<String> {
        let output = self.kubectl(args)?;
        if !output.status.success() {
            return Err(Error::Failed {
                command: format!("kubectl {}", args.join(" ")),
                status: output.status,
                stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
            });
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }
}

impl TestCluster {
    /// The management side's account: ServiceAccount `tenantflux-system/platform`, which may
    /// push policies (update policies.tenantflux.io) and reach the agent (Role
    /// tenantflux-user). Client-certificate users act as themselves (an identity CSR).
    pub fn policy_pusher_kubeconfig(&self) -> Result<PathBuf> {
        const NS: &str = "tenantflux-system";
        let platform = self.token_kubeconfig(NS, "platform")?;
        self.apply_yaml(&format!(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\n\
             metadata: {{name: policy-pusher, namespace: {NS}}}\n\
             rules: [{{apiGroups: [tenantflux.io], resources: [policies], verbs: [update]}}]\n---\n\
             apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\n\
             metadata: {{name: policy-pusher, namespace: {NS}}}\n\
             roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: policy-pusher}}\n\
             subjects: [{{kind: ServiceAccount, name: platform, namespace: {NS}}}]\n---\n\
             apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\n\
             metadata: {{name: platform-user, namespace: {NS}}}\n\
             roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: tenantflux-user}}\n\
             subjects: [{{kind: ServiceAccount, name: platform, namespace: {NS}}}]\n"
        ))?;
        Ok(platform)
    }

    /// A kubeconfig whose user is ServiceAccount `namespace/name` (created here, with the
    /// namespace), authenticating with a token of the API server's audience as
    /// `kubectl create token` gives, and bound to ClusterRole tenantflux-caller-identity (as
    /// the README tells users), so that the plugin proves who it is rather than forwarding the
    /// token. What else the account may do is the caller's to bind.
    pub fn token_kubeconfig(&self, namespace: &str, name: &str) -> Result<PathBuf> {
        self.apply_yaml(&format!(
            "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {namespace}}}\n---\n\
             apiVersion: v1\nkind: ServiceAccount\nmetadata: {{name: {name}, namespace: {namespace}}}\n---\n\
             apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\n\
             metadata: {{name: caller-identity-{namespace}-{name}}}\n\
             roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: tenantflux-caller-identity}}\n\
             subjects: [{{kind: ServiceAccount, name: {name}, namespace: {namespace}}}]\n"
        ))?;
        let token =
            self.kubectl_ok(&["-n", namespace, "create", "token", name, "--duration=1h"])?;
        let (server, ca) = self.server_and_ca()?;
        let path = self
            .dir()
            .join(format!("kubeconfig-{namespace}-{name}.yaml"));
        let kubeconfig = format!(
            "apiVersion: v1\nkind: Config\n\
             clusters: [{{name: test, cluster: {{server: \"{server}\", certificate-authority: \"{ca}\"}}}}]\n\
             users: [{{name: {name}, user: {{token: \"{token}\"}}}}]\n\
             contexts: [{{name: test, context: {{cluster: test, user: {name}}}}}]\n\
             current-context: test\n",
            token = token.trim()
        );
        std::fs::write(&path, kubeconfig).map_err(|source| Error::Spawn {
            command: format!("writing {}", path.display()),
            source,
        })?;
        Ok(path)
    }

    /// [`Self::token_kubeconfig`] for ServiceAccount `tenantflux-system/ACCOUNT`, bound to
    /// ClusterRole cluster-admin (ClusterRoleBinding `ACCOUNT-cluster-admin`): a user with
    /// rights on everything who reaches the agent with a token and proves who it is.
    pub fn cluster_admin_token_user(&self, account: &str) -> Result<PathBuf> {
        use tenant::AGENT_NAMESPACE;
        let kubeconfig = self.token_kubeconfig(AGENT_NAMESPACE, account)?;
        self.apply_yaml(&cluster_admin_binding(
            &format!("{account}-cluster-admin"),
            AGENT_NAMESPACE,
            account,
        ))?;
        Ok(kubeconfig)
    }
}

/// RBAC for the token user `namespace/account` of [`TestCluster::token_kubeconfig`]: RoleBinding
/// `user_binding` in tenantflux-system to the agent's Role tenantflux-user, and Role `role` in
/// `namespace` with `rules` (a YAML flow sequence) bound to the account.
pub fn agent_user_with_role(
    namespace: &str,
    account: &str,
    user_binding: &str,
    role: &str,
    rules: &str,
) -> String {
    format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\n\
         metadata: {{name: {user_binding}, namespace: tenantflux-system}}\n\
         roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: tenantflux-user}}\n\
         subjects: [{{kind: ServiceAccount, name: {account}, namespace: {namespace}}}]\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\n\
         metadata: {{name: {role}, namespace: {namespace}}}\n\
         rules: {rules}\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\n\
         metadata: {{name: {role}, namespace: {namespace}}}\n\
         roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: {role}}}\n\
         subjects: [{{kind: ServiceAccount, name: {account}, namespace: {namespace}}}]\n"
    )
}

/// ClusterRoleBinding `binding` of ServiceAccount `namespace/account` to ClusterRole
/// cluster-admin (a token user with rights on everything, see [`TestCluster::token_kubeconfig`]).
fn cluster_admin_binding(binding: &str, namespace: &str, account: &str) -> String {
    format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\n\
         metadata: {{name: {binding}}}\n\
         roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}}\n\
         subjects: [{{kind: ServiceAccount, name: {account}, namespace: {namespace}}}]\n"
    )
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        if self.stop_on_drop
            && let Err(err) = run_cluster_script(&["down", &self.name])
        {
            eprintln!("stopping test cluster {}: {err}", self.name);
        }
    }
}

/// The install.yaml of flux-operator `version`, made by `tests/env/cluster operator-bundle`
/// from that module version's source (never stored in the repository).
pub fn operator_bundle(version: &str) -> Result<PathBuf> {
    let stdout = run_cluster_script(&["operator-bundle", version])?;
    Ok(PathBuf::from(
        stdout.lines().last().unwrap_or_default().trim(),
    ))
}

/// Pushes `install_yaml` as a flux-operator manifests artifact to `reference`
/// (`127.0.0.1:PORT/REPOSITORY:TAG`) with oras; returns the manifest digest.
pub fn push_bundle(reference: &str, install_yaml: &Path) -> Result<String> {
    push_artifact(reference, install_yaml, None)
}

/// Pushes `install_yaml`, and with `flux_data` (flux-operator's `config/data/flux`) the
/// distributions as `flux/`, as the real manifests artifact holds them; returns the digest.
pub fn push_artifact(
    reference: &str,
    install_yaml: &Path,
    flux_data: Option<&Path>,
) -> Result<String> {
    let path = install_yaml.to_string_lossy();
    let data = flux_data.map(|d| d.to_string_lossy().into_owned());
    let mut args = vec!["push-bundle", reference, &path];
    args.extend(data.as_deref());
    let stdout = run_cluster_script(&args)?;
    Ok(stdout.lines().last().unwrap_or_default().trim().to_owned())
}

/// The field manager the tests' own writes use.
pub const FIELD_MANAGER: &str = "tenantflux-tests";

/// FluxInstance objects (`fluxcd.controlplane.io/v1`) in flux-system.
pub fn flux_instances(client: &kube::Client) -> kube::Api<kube::api::DynamicObject> {
    let gvk = kube::api::GroupVersionKind::gvk("fluxcd.controlplane.io", "v1", "FluxInstance");
    kube::Api::namespaced_with(
        client.clone(),
        "flux-system",
        &kube::api::ApiResource::from_gvk(&gvk),
    )
}

/// Applies the FluxInstance `flux-system/flux` with the default four components at `version`.
pub async fn apply_flux_instance(client: &kube::Client, version: &str) -> Result<(), kube::Error> {
    let instance = serde_json::json!({
        "apiVersion": "fluxcd.controlplane.io/v1",
        "kind": "FluxInstance",
        "metadata": {"name": "flux", "namespace": "flux-system"},
        "spec": {
            "distribution": {"version": version, "registry": "ghcr.io/fluxcd"},
            "components": ["source-controller", "kustomize-controller", "helm-controller", "notification-controller"],
            "cluster": {"type": "kubernetes", "networkPolicy": true}
        }
    });
    let params = kube::api::PatchParams::apply(FIELD_MANAGER);
    flux_instances(client)
        .patch("flux", &params, &kube::api::Patch::Apply(&instance))
        .await
        .map(drop)
}

/// Polls `check` every 250 ms until it returns `Some`, or fails after `timeout` naming `what`.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    let mut delay = POLL_FIRST;
    loop {
        if let Some(value) = check().await {
            return Ok(value);
        }
        let now = tokio::time::Instant::now();
        if now >= deadline {
            return Err(Error::Timeout {
                what: what.to_string(),
                after: timeout,
            });
        }
        // The last check comes at the deadline, not a delay after it.
        tokio::time::sleep(delay.min(deadline - now)).await;
        delay = (delay * 2).min(POLL_MAX);
    }
}

/// [`wait_for`]'s first delay between checks, doubled after each until [`POLL_MAX`]. Most
/// checks run kubectl or the plugin (a process of about 0.1 CPU-seconds, and work for the API
/// server and the agent): checked every 250 ms, a wait of half a minute took some 12
/// CPU-seconds from the other lane's builds and clusters; now about 3, and a state is seen at
/// most a second late.
const POLL_FIRST: Duration = Duration::from_millis(250);
const POLL_MAX: Duration = Duration::from_secs(1);

/// A finished command's standard output, as text.
pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A finished command's standard error, as text.
pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// A finished command's standard output as JSON; panics with both streams when it is not.
pub fn json(output: &Output) -> serde_json::Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|err| {
        panic!(
            "not JSON ({err}): {}\nstderr: {}",
            stdout(output),
            stderr(output)
        )
    })
}

/// `kubectl tenantflux ARGS` as the user of `kubeconfig`; its output, whatever its exit.
#[track_caller]
pub fn plugin(cluster: &TestCluster, kubeconfig: &Path, args: &[&str]) -> Output {
    cluster
        .kubectl_tenantflux(Some(kubeconfig), args)
        .expect("run kubectl tenantflux")
}

/// Like [`plugin`], failing the test unless it exits 0; returns its stdout.
#[track_caller]
pub fn plugin_ok(cluster: &TestCluster, kubeconfig: &Path, args: &[&str]) -> String {
    let output = plugin(cluster, kubeconfig, args);
    assert!(
        output.status.success(),
        "kubectl tenantflux {} failed: {}",
        args.join(" "),
        stderr(&output)
    );
    stdout(&output)
}

/// `kubectl tenantflux ARGS -o json` (see [`plugin_ok`]), parsed.
#[track_caller]
pub fn plugin_json(cluster: &TestCluster, kubeconfig: &Path, args: &[&str]) -> serde_json::Value {
    let mut args = args.to_vec();
    args.extend(["-o", "json"]);
    let text = plugin_ok(cluster, kubeconfig, &args);
    serde_json::from_str(&text).unwrap_or_else(|err| panic!("not JSON ({err}): {text}"))
}

/// A line of a table the plugin printed, cut into its columns at `starts` (where the header's
/// columns start, in order), each trimmed; a column the line is too short for is empty.
pub fn columns(line: &str, starts: &[usize]) -> Vec<String> {
    starts
        .iter()
        .enumerate()
        .map(|(n, &start)| {
            let end = starts
                .get(n + 1)
                .copied()
                .unwrap_or(line.len())
                .min(line.len());
            line.get(start.min(end)..end)
                .unwrap_or_default()
                .trim()
                .to_owned()
        })
        .collect()
}

/// The status of condition `type_` in a JSON object's `status.conditions`, if present.
pub fn condition_status<'a>(object: &'a serde_json::Value, type_: &str) -> Option<&'a str> {
    object
        .pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c.get("type").and_then(|t| t.as_str()) == Some(type_))?
        .get("status")?
        .as_str()
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_binary_older_than_its_sources_is_refused_naming_the_source() {
        let root = tempfile::tempdir().unwrap();
        let bin = root.path().join("target/debug");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::create_dir_all(root.path().join("plugin/src")).unwrap();
        std::fs::create_dir_all(root.path().join("agent/src")).unwrap();
        std::fs::write(root.path().join("plugin/src/main.rs"), "fn main() {}").unwrap();
        std::fs::write(root.path().join("agent/src/main.rs"), "fn main() {}").unwrap();
        let missing = super::binaries_fresh(&bin, root.path()).unwrap_err();
        assert!(missing.contains("does not exist"), "{missing}");
        std::thread::sleep(std::time::Duration::from_millis(20));
        for name in ["kubectl-tenantflux", "tenantflux-agent"] {
            std::fs::write(bin.join(name), "").unwrap();
        }
        super::binaries_fresh(&bin, root.path()).expect("built after the sources");
        // An edit after the build: refused, naming the file and the command.
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(root.path().join("agent/src/main.rs"), "fn main() { }").unwrap();
        let stale = super::binaries_fresh(&bin, root.path()).unwrap_err();
        assert!(
            stale.contains("tenantflux-agent is older than agent/src/main.rs"),
            "{stale}"
        );
        assert!(stale.contains("cargo build --workspace"), "{stale}");
    }
    use super::*;

    #[test]
    fn condition_status_finds_the_named_condition() {
        let object = serde_json::json!({"status": {"conditions": [
            {"type": "Reconciling", "status": "False"},
            {"type": "Ready", "status": "True"},
        ]}});
        assert_eq!(condition_status(&object, "Ready"), Some("True"));
        assert_eq!(condition_status(&object, "Reconciling"), Some("False"));
        assert_eq!(condition_status(&object, "Stalled"), None);
        assert_eq!(condition_status(&serde_json::json!({}), "Ready"), None);
    }

    /// Every package a test installs with [`installed`] and every one deploy/image/build installs
    /// is in tests/env/prefetch's lists, so a fresh machine installs it beside the builds rather
    /// than in the middle of the integration tests.
    #[test]
    fn tests_env_prefetch_lists_every_package_the_tests_install() {
        let prefetch = std::fs::read_to_string(repo_root().join("tests/env/prefetch")).unwrap();
        let listed: Vec<&str> = prefetch
            .lines()
            .filter(|line| line.contains("packages=") || line.contains("packages+="))
            .flat_map(|line| line.split('"').nth(1).unwrap_or("").split_whitespace())
            .collect();
        let mut wanted: Vec<(String, String)> = Vec::new();
        for dir in ["tests/src", "tests/tests"] {
            for entry in std::fs::read_dir(repo_root().join(dir)).unwrap() {
                let path = entry.unwrap().path();
                if path.extension().is_none_or(|ext| ext != "rs") {
                    continue;
                }
                let source = std::fs::read_to_string(&path).unwrap();
                // The call's second argument: a string literal, or a const of the same file.
                for call in source.split("installed(\"").skip(1) {
                    let Some(argument) = call.split(", ").nth(1) else {
                        continue;
                    };
                    let packages = match argument.strip_prefix('"') {
                        Some(literal) => literal.split('"').next().unwrap().to_string(),
                        None => source
                            .split(&format!("const {argument}: &str = \""))
                            .nth(1)
                            .and_then(|rest| rest.split('"').next())
                            .unwrap_or_else(|| panic!("{}: no const {argument}", path.display()))
                            .to_string(),
                    };
                    wanted.extend(
                        packages
                            .split_whitespace()
                            .map(|package| (package.to_string(), path.display().to_string())),
                    );
                }
            }
        }
        let image = std::fs::read_to_string(repo_root().join("deploy/image/build")).unwrap();
        let tools = image
            .lines()
            .find_map(|line| line.trim().strip_prefix("for tool in "))
            .and_then(|rest| rest.split(';').next())
            .expect("deploy/image/build: `for tool in ...; do`");
        wanted.extend(
            tools
                .split_whitespace()
                .map(|package| (package.to_string(), "deploy/image/build".to_string())),
        );
        assert!(wanted.len() > 8, "found too few calls: {wanted:?}");
        for (package, from) in wanted {
            assert!(
                listed.contains(&package.as_str()),
                "{from} installs {package}, which tests/env/prefetch does not list ({listed:?})"
            );
        }
    }

    /// Every Rust target deploy/krew/release and deploy/image/build-agent build for is in
    /// tests/env/prefetch's list (a missing one is added later by the build itself, in the middle
    /// of the integration tests).
    #[test]
    fn tests_env_prefetch_lists_every_rust_target_the_builds_use() {
        let read = |path: &str| std::fs::read_to_string(repo_root().join(path)).unwrap();
        let prefetch = read("tests/env/prefetch");
        let listed = prefetch
            .split("rust_targets=\"")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .expect("tests/env/prefetch: rust_targets=\"...\"");
        let listed: Vec<&str> = listed.split_whitespace().collect();
        let release = read("deploy/krew/release");
        let mut wanted: Vec<String> = release
            .lines()
            .filter_map(|line| line.trim().split_once(") echo ")?.1.strip_suffix(" ;;"))
            .map(str::to_owned)
            .collect();
        let agent = read("deploy/image/build-agent");
        wanted.extend(
            agent
                .lines()
                .filter_map(|line| line.trim().split_once(") cpu=")?.1.strip_suffix(" ;;"))
                .filter(|cpu| !cpu.starts_with('$'))
                .map(|cpu| format!("{cpu}-unknown-linux-gnu")),
        );
        assert!(wanted.len() >= 8, "found too few targets: {wanted:?}");
        for target in wanted {
            assert!(
                listed.contains(&target.as_str()),
                "{target} is built but tests/env/prefetch does not add it ({listed:?})"
            );
        }
    }

    #[test]
    fn cluster_script_is_in_the_repository() {
        assert!(cluster_script().is_file(), "{}", cluster_script().display());
        assert!(repo_root().join("Cargo.toml").is_file());
    }
}
