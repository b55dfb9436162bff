//! The harness shared by tenantflux's integration tests: real control planes started by
//! `tests/env/cluster` (kube-apiserver, etcd, controller-manager, scheduler and kwok built from
//! their Go modules, and the real flux-operator), never a stand-in.
//!
//! A test binary gets one cluster from [`TestCluster::shared`]. With `TENANTFLUX_TEST_CLUSTER`
//! set, that cluster is reused as it is (fast local iteration; `tests/run` sets it for the whole
//! suite). Otherwise a cluster is started for the test process and torn down by a reaper once
//! the process exits, however it exits. [`TestCluster::start`] gives a test a cluster of its own
//! that is stopped when the value is dropped, also when the test panics.

use std::{
    future::Future,
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
    sync::OnceLock,
    time::Duration,
};

use kube::config::{KubeConfigOptions, Kubeconfig};

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
    #[error("connecting to the cluster with {path}: {source}")]
    Client { path: PathBuf, source: kube::Error },
    #[error("timed out after {after:?} waiting for {what}")]
    Timeout { what: String, after: Duration },
}

/// The `tests/env/cluster` entry point.
pub fn cluster_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("env/cluster")
}

/// The repository root (for deploy/ and target/).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// Runs `tests/env/cluster ARGS`; progress goes to the test's stderr, stdout is returned.
fn run_cluster_script(args: &[&str]) -> Result<String> {
    let command = format!("tests/env/cluster {}", args.join(" "));
    let output = Command::new(cluster_script())
        .args(args)
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

    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// Installs flux-operator's CRDs and runs the real operator against this cluster
    /// (idempotent: an operator already running is kept).
    pub fn ensure_flux_operator(&self) -> Result<()> {
        static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _serial = LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        run_cluster_script(&["flux-operator", &self.name]).map(drop)
    }

    /// A kube client for this cluster, authenticated as its admin.
    pub async fn client(&self) -> Result<kube::Client> {
        let path = self.kubeconfig.clone();
        let kubeconfig = Kubeconfig::read_from(&path).map_err(|source| Error::Kubeconfig {
            path: path.clone(),
            source,
        })?;
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

impl Drop for TestCluster {
    fn drop(&mut self) {
        if self.stop_on_drop {
            if let Err(err) = run_cluster_script(&["down", &self.name]) {
                eprintln!("stopping test cluster {}: {err}", self.name);
            }
        }
    }
}

/// Polls `check` every 250 ms until it returns `Some`, or fails after `timeout` naming `what`.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return Ok(value);
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(Error::Timeout {
                what: what.to_string(),
                after: timeout,
            });
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
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

    #[test]
    fn cluster_script_is_in_the_repository() {
        assert!(cluster_script().is_file(), "{}", cluster_script().display());
        assert!(repo_root().join("Cargo.toml").is_file());
    }
}
