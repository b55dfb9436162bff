//! Real Flux sources for the tests: a git repository in a temporary directory, served over smart
//! HTTP by `tests/env/cluster git-server`, that the real source-controller clones and the real
//! kustomize-controller applies (both run by `tests/env/cluster flux-operator` as flux-operator
//! rolls them out at the versions built here).

use std::{
    path::PathBuf,
    process::{Command, Stdio},
    time::Duration,
};

use serde_json::Value;

use crate::{Error, Result, TestCluster, run_cluster_script, wait_for};

/// A git repository on disk, with a `main` branch the tests commit to.
#[derive(Debug)]
pub struct GitRepo {
    parent: tempfile::TempDir,
    name: String,
}

impl GitRepo {
    /// An empty repository (no commit yet) in a new temporary directory, as `<tmp>/NAME`
    /// (the last part of the URL it is served at).
    pub fn new(name: &str) -> Result<GitRepo> {
        let parent = tempfile::Builder::new()
            .prefix("tenantflux-git-")
            .tempdir()
            .map_err(|source| Error::Spawn {
                command: "creating a temporary directory".into(),
                source,
            })?;
        let repo = GitRepo {
            parent,
            name: name.to_owned(),
        };
        std::fs::create_dir(repo.path()).map_err(|source| Error::Spawn {
            command: format!("creating {}", repo.path().display()),
            source,
        })?;
        repo.git(&["init", "--quiet", "--initial-branch=main"])?;
        Ok(repo)
    }

    /// The working tree (the directory the git server serves).
    pub fn path(&self) -> PathBuf {
        self.parent.path().join(&self.name)
    }

    fn git(&self, args: &[&str]) -> Result<String> {
        let command = format!("git {}", args.join(" "));
        let output = Command::new("git")
            .arg("-C")
            .arg(self.path())
            .args([
                "-c",
                "user.name=tenantflux tests",
                "-c",
                "user.email=tests@tenantflux.invalid",
                "-c",
                "commit.gpgsign=false",
            ])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(|source| Error::Spawn {
                command: command.clone(),
                source,
            })?;
        if !output.status.success() {
            return Err(Error::Failed {
                command,
                status: output.status,
                stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
            });
        }
        Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
    }

    /// Writes `files` (path relative to the repository, content), removes `removed`, commits
    /// everything as `message`, and returns the new commit's full SHA-1.
    pub fn commit(
        &self,
        files: &[(&str, &str)],
        removed: &[&str],
        message: &str,
    ) -> Result<String> {
        for (file, content) in files {
            let path = self.path().join(file);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).map_err(|source| Error::Spawn {
                    command: format!("creating {}", parent.display()),
                    source,
                })?;
            }
            std::fs::write(&path, content).map_err(|source| Error::Spawn {
                command: format!("writing {}", path.display()),
                source,
            })?;
        }
        for file in removed {
            self.git(&["rm", "--quiet", "-r", file])?;
        }
        self.git(&["add", "--all"])?;
        self.git(&["commit", "--quiet", "--allow-empty", "-m", message])?;
        self.git(&["rev-parse", "HEAD"])
    }
}

/// The revision Flux reports for commit `sha` of branch `main`: `main@sha1:<sha>`.
pub fn revision(sha: &str) -> String {
    format!("main@sha1:{sha}")
}

impl TestCluster {
    /// flux-operator, the FluxInstance at `version` (e.g. `2.9.x`) with the controllers it
    /// rolls out running as local processes, and the Kustomization and GitRepository CRDs
    /// established; then the agent.
    pub async fn ensure_flux_and_agent(&self, version: &str) -> Result<()> {
        self.ensure_flux_operator()?;
        let client = self.client().await?;
        crate::apply_flux_instance(&client, version)
            .await
            .map_err(|source| Error::Kube {
                doing: "applying the FluxInstance".into(),
                source,
            })?;
        for crd in [
            "crd/kustomizations.kustomize.toolkit.fluxcd.io",
            "crd/gitrepositories.source.toolkit.fluxcd.io",
        ] {
            wait_for(
                &format!("{crd}, installed by flux-operator"),
                Duration::from_secs(180),
                || async {
                    self.kubectl_ok(&["wait", "--for=condition=Established", crd, "--timeout=1s"])
                        .ok()
                },
            )
            .await?;
        }
        self.ensure_agent()
    }

    /// Serves `repo` over smart HTTP on loopback while this cluster runs (once per repository);
    /// returns its URL.
    pub fn git_server(&self, repo: &GitRepo) -> Result<String> {
        let dir = repo.path();
        let stdout = run_cluster_script(&["git-server", self.name(), crate::path(&dir)])?;
        Ok(stdout.lines().last().unwrap_or_default().trim().to_owned())
    }

    /// The binary the local process of Flux controller Deployment `deployment` runs, if one
    /// runs (tests/env/cluster's supervisor keeps its pid in the cluster's directory).
    pub fn flux_controller_binary(&self, deployment: &str) -> Option<PathBuf> {
        let pidfile = self.dir().join(format!("controllers/{deployment}.pid"));
        let pid = std::fs::read_to_string(pidfile).ok()?;
        std::fs::read_link(format!("/proc/{}/exe", pid.trim())).ok()
    }

    /// Waits until the process of Deployment `deployment` runs `binary`, a build's cache
    /// directory name such as `kustomize-controller-v1.9.4`.
    pub async fn flux_controller_runs(&self, deployment: &str, binary: &str) -> Result<()> {
        wait_for(
            &format!("Deployment flux-system/{deployment}'s process to run {binary}"),
            Duration::from_secs(60),
            || async {
                self.flux_controller_binary(deployment)
                    .is_some_and(|exe| exe.to_string_lossy().contains(&format!("/{binary}/")))
                    .then_some(())
            },
        )
        .await
    }

    /// The object as JSON (`kubectl get RESOURCE NAME -n NAMESPACE -o json`), if it exists.
    pub fn object(&self, resource: &str, namespace: &str, name: &str) -> Option<Value> {
        let text = self
            .kubectl_ok(&["-n", namespace, "get", resource, name, "-o", "json"])
            .ok()?;
        serde_json::from_str(&text).ok()
    }

    /// Waits until Kustomization `namespace/name` is Ready for its current generation with
    /// `revision` applied, as kustomize-controller reports it; returns the object.
    pub async fn kustomization_applied(
        &self,
        namespace: &str,
        name: &str,
        revision: &str,
        timeout: Duration,
    ) -> Result<Value> {
        wait_for(
            &format!("Kustomization {namespace}/{name} Ready with {revision} applied"),
            timeout,
            || async {
                let ks = self.object(KUSTOMIZATIONS, namespace, name)?;
                (ready_now(&ks) == Some("True") && ks["status"]["lastAppliedRevision"] == revision)
                    .then_some(ks)
            },
        )
        .await
    }

    /// Waits until `resource` `namespace/name` has a Ready condition for its current generation
    /// other than Unknown (the controller finished with it); returns the object.
    pub async fn settled(
        &self,
        resource: &str,
        namespace: &str,
        name: &str,
        timeout: Duration,
    ) -> Result<Value> {
        wait_for(
            &format!("{resource} {namespace}/{name} to settle (Ready True or False)"),
            timeout,
            || async {
                let object = self.object(resource, namespace, name)?;
                matches!(ready_now(&object), Some("True" | "False")).then_some(object)
            },
        )
        .await
    }
}

/// The resource names of the kinds the real controllers serve (any served version).
pub const GIT_REPOSITORIES: &str = "gitrepositories.source.toolkit.fluxcd.io";
pub const KUSTOMIZATIONS: &str = "kustomizations.kustomize.toolkit.fluxcd.io";

/// The Ready condition's status, if the controller set it for the object's current generation.
pub fn ready_now(object: &Value) -> Option<&str> {
    let condition = ready_condition(object)?;
    (condition["observedGeneration"] == object["metadata"]["generation"])
        .then(|| condition["status"].as_str())
        .flatten()
}

/// The Ready condition's message (empty without one).
pub fn ready_message(object: &Value) -> &str {
    ready_condition(object)
        .and_then(|c| c["message"].as_str())
        .unwrap_or_default()
}

fn ready_condition(object: &Value) -> Option<&Value> {
    object["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")
}
