//! Real Flux sources for the tests: a git repository in a temporary directory, served over smart
//! HTTP by `tests/env/cluster git-server`, that the real source-controller clones and the real
//! kustomize-controller applies (both run by `tests/env/cluster flux-operator` as flux-operator
//! rolls them out at the versions built here).

use std::{path::PathBuf, process::Command, time::Duration};

use serde_json::Value;

use crate::{Error, Result, TestCluster, run_cluster_script, run_ok, wait_for};

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
        let stdout = run_ok(
            Command::new("git")
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
                .args(args),
            command,
        )?;
        Ok(stdout.trim().to_owned())
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

    /// Deletes every Kustomization and GitRepository in `namespace` and waits until they are
    /// gone, so that a reused cluster starts over; a failure (no such namespace yet) is ignored.
    pub fn delete_kustomizations_and_git_repositories(&self, namespace: &str) {
        let _ = self.kubectl(&[
            "-n",
            namespace,
            "delete",
            &format!("{KUSTOMIZATIONS},{GIT_REPOSITORIES}"),
            "--all",
            "--ignore-not-found",
            "--wait",
        ]);
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
        self.object_until(
            &format!("Kustomization {namespace}/{name} Ready with {revision} applied"),
            KUSTOMIZATIONS,
            namespace,
            name,
            timeout,
            |ks| ready_now(ks) == Some("True") && ks["status"]["lastAppliedRevision"] == revision,
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
        self.object_until(
            &format!("{resource} {namespace}/{name} to settle (Ready True or False)"),
            resource,
            namespace,
            name,
            timeout,
            |object| matches!(ready_now(object), Some("True" | "False")),
        )
        .await
    }

    /// Polls `resource` `namespace/name` (as [`wait_for`], which names `what` on timeout) until
    /// it exists and `done` holds for it; returns the object.
    async fn object_until(
        &self,
        what: &str,
        resource: &str,
        namespace: &str,
        name: &str,
        timeout: Duration,
        done: impl Fn(&Value) -> bool,
    ) -> Result<Value> {
        wait_for(what, timeout, || async {
            let object = self.object(resource, namespace, name)?;
            done(&object).then_some(object)
        })
        .await
    }
}

/// The resource names of the kinds the real controllers serve (any served version).
pub const GIT_REPOSITORIES: &str = "gitrepositories.source.toolkit.fluxcd.io";
pub const KUSTOMIZATIONS: &str = "kustomizations.kustomize.toolkit.fluxcd.io";

/// GitRepository `flux-system/fleet` (the branch main of the git server at `url`) and
/// Kustomization `flux-system/apps` applying its `./apps` (pruning), both every hour.
pub fn fleet_apps(url: &str) -> String {
    format!(
        "apiVersion: source.toolkit.fluxcd.io/v1\nkind: GitRepository\n\
         metadata: {{name: fleet, namespace: flux-system}}\n\
         spec: {{interval: 1h, url: \"{url}\", ref: {{branch: main}}}}\n---\n\
         apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\n\
         metadata: {{name: apps, namespace: flux-system}}\n\
         spec: {{interval: 1h, path: ./apps, prune: true, sourceRef: {{kind: GitRepository, name: fleet}}}}\n"
    )
}

/// A minimal valid spec of each Flux kind the tests create (inline YAML, one object named
/// podinfo; a test may add `suspend: true` after its opening brace). Panics on another kind.
pub fn minimal_spec(kind: &str) -> &'static str {
    match kind {
        "GitRepository" => "{url: https://github.com/stefanprodan/podinfo, interval: 5m}",
        "OCIRepository" => {
            "{url: oci://ghcr.io/stefanprodan/manifests/podinfo, interval: 5m, ref: {tag: latest}}"
        }
        "HelmRepository" => "{url: https://stefanprodan.github.io/podinfo, interval: 5m}",
        "HelmChart" => {
            "{chart: podinfo, interval: 5m, sourceRef: {kind: HelmRepository, name: podinfo}}"
        }
        "Bucket" => "{bucketName: podinfo, endpoint: minio.example.com, interval: 5m}",
        "ExternalArtifact" => {
            "{sourceRef: {apiVersion: example.com/v1, kind: Generator, name: podinfo}}"
        }
        "Kustomization" => {
            "{interval: 10m, path: ./kustomize, prune: true, sourceRef: {kind: GitRepository, name: podinfo}}"
        }
        "HelmRelease" => {
            "{interval: 5m, chart: {spec: {chart: podinfo, sourceRef: {kind: HelmRepository, name: podinfo}}}}"
        }
        "Receiver" => {
            "{type: generic, resources: [{kind: GitRepository, name: podinfo}], secretRef: {name: token}}"
        }
        "Provider" => "{type: generic, address: https://example.com/hook}",
        "Alert" => {
            "{providerRef: {name: podinfo}, eventSources: [{kind: GitRepository, name: '*'}]}"
        }
        "ImageRepository" => "{image: ghcr.io/stefanprodan/podinfo, interval: 5m}",
        "ImagePolicy" => {
            "{imageRepositoryRef: {name: podinfo}, policy: {semver: {range: '>=1.0.0'}}}"
        }
        "ImageUpdateAutomation" => {
            "{interval: 5m, sourceRef: {kind: GitRepository, name: podinfo}, git: {commit: {author: {email: flux@example.com, name: flux}}}, update: {path: ./, strategy: Setters}}"
        }
        other => panic!("no spec for {other}"),
    }
}

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
