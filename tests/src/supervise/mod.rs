//! The Flux controllers as a kubelet would run them (`tests/env/cluster flux-operator` starts
//! this, as the `tenantflux-test-supervisor` binary): for every controller Deployment
//! flux-operator rolled out in the operator namespace, the local build of the component at the
//! Deployment's image tag runs with the Deployment's args, plus loopback addresses for what it
//! serves. A changed Deployment (an upgrade's new tag) replaces the process; an exited one is
//! started again; a deleted or scaled-down one is stopped. Components without a local build
//! stay pods without a process (noted once in the log).
//!
//! kwok serves a fake pod's log from a file in the CRI log format that a `Logs` object of the
//! pod's name points at: the supervisor copies each process's log, line by line as it grows,
//! into `<deployment>.cri.log` (`TIME stdout F LINE`), and each pod of a Deployment that runs as
//! a process gets a `Logs` object naming that copy, so that `kubectl logs` and the agent's
//! `logs` read what the controller writes.
//!
//! Everything about a process is kept in files in the cluster's `controllers/` directory
//! (`<deployment>.pid`, `.spec`, `.log`, `.storage-port`), so the tests can find a process
//! (`TestCluster::flux_controller_binary`), `tests/env/cluster down` can stop what a killed
//! supervisor left, and a supervisor started again adopts the processes still running.

pub mod process;
pub mod spec;

use std::{
    collections::{HashMap, HashSet},
    fs,
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use futures::StreamExt as _;
use k8s_openapi::api::{apps::v1::Deployment, core::v1::Pod};
use kube::{
    Api, ResourceExt,
    api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams},
    config::{KubeConfigOptions, Kubeconfig},
    runtime::{WatchStreamExt as _, reflector, watcher},
};
use tokio::signal::unix::{SignalKind, signal};

use process::{alive, read_pid};
use spec::{Action, Builds, Layout, Ports, Process, Recorded, Wanted};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "FLUX_CONTROLLERS entry {entry:?} is not COMPONENT@VERSION (see tests/env/versions.env)"
    )]
    BadControllers { entry: String },
    #[error(
        "FLUX_CONTROLLER_SUBSTITUTES entry {entry:?} is not COMPONENT@TAG=VERSION (see tests/env/versions.env)"
    )]
    BadSubstitutes { entry: String },
    #[error("reading kubeconfig {path}: {source}")]
    Kubeconfig {
        path: PathBuf,
        source: kube::config::KubeconfigError,
    },
    #[error("connecting to the cluster with {path}: {source}")]
    Client { path: PathBuf, source: kube::Error },
    #[error("{doing} {path}: {source}")]
    File {
        doing: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("starting {binary} for Deployment {deployment}: {source}")]
    Spawn {
        deployment: String,
        binary: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Process(#[from] process::Error),
    #[error("installing the {signal} handler: {source}")]
    Signal {
        signal: &'static str,
        source: std::io::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How often exited processes are noticed (and whether the cluster is still there).
const TICK: Duration = Duration::from_secs(2);
/// How often the controllers' logs are copied for kwok (a followed line arrives this late).
const COPY_TICK: Duration = Duration::from_millis(300);

#[derive(Debug, Clone)]
pub struct Config {
    /// The cluster's directory (tests/env/cluster's, with kubeconfig.yaml in it).
    pub cluster_dir: PathBuf,
    pub cache: PathBuf,
    pub namespace: String,
    pub builds: Builds,
}

fn log(message: impl std::fmt::Display) {
    println!(
        "{} {message}",
        jiff::Timestamp::now()
            .round(jiff::Unit::Second)
            .unwrap_or_default()
    );
}

/// Runs until SIGTERM/SIGINT or until the cluster is gone (its kubeconfig removed), then stops
/// every process it supervises.
pub async fn run(config: Config) -> Result<()> {
    let layout = Layout {
        cache: config.cache.clone(),
        controllers: config.cluster_dir.join("controllers"),
        kubeconfig: config.cluster_dir.join("kubeconfig.yaml"),
        namespace: config.namespace.clone(),
    };
    fs::create_dir_all(&layout.controllers).map_err(|source| Error::File {
        doing: "creating",
        path: layout.controllers.clone(),
        source,
    })?;
    let own_pidfile = config.cluster_dir.join("flux-controllers.pid");
    let me = std::process::id();
    if let Some(other) = read_pid(&own_pidfile).filter(|&pid| pid != me && alive(pid)) {
        log(format_args!(
            "another supervisor (pid {other}) runs for this cluster"
        ));
        return Ok(());
    }
    write(&own_pidfile, &format!("{me}\n"))?;

    let mut terminate = signal(SignalKind::terminate()).map_err(|source| Error::Signal {
        signal: "SIGTERM",
        source,
    })?;
    let mut interrupt = signal(SignalKind::interrupt()).map_err(|source| Error::Signal {
        signal: "SIGINT",
        source,
    })?;
    let client = client(&layout.kubeconfig).await?;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &config.namespace);
    let (store, writer) = reflector::store();
    let mut events = reflector(
        writer,
        watcher(deployments, watcher::Config::default()).default_backoff(),
    )
    .boxed();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &config.namespace);
    let (pod_store, pod_writer) = reflector::store();
    let mut pod_events = reflector(
        pod_writer,
        watcher(pods, watcher::Config::default()).default_backoff(),
    )
    .boxed();
    let logs_resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kwok.x-k8s.io", "v1alpha1", "Logs"),
        "logs",
    );
    let logs: Api<DynamicObject> = Api::namespaced_with(client, &config.namespace, &logs_resource);
    let mut published: HashSet<String> = HashSet::new();
    let mut copied: HashMap<PathBuf, u64> = HashMap::new();
    let mut copy_tick = tokio::time::interval(COPY_TICK);

    let mut supervisor = Supervisor {
        layout,
        builds: config.builds,
        noted: HashSet::new(),
    };
    log(format_args!(
        "watching Deployments in {} of cluster {}",
        config.namespace,
        config.cluster_dir.display()
    ));
    let mut listed = false;
    let mut failing = false;
    let mut tick = tokio::time::interval(TICK);
    loop {
        tokio::select! {
            _ = terminate.recv() => break,
            _ = interrupt.recv() => break,
            _ = tick.tick() => {
                if !supervisor.layout.kubeconfig.exists() {
                    log("the cluster is gone");
                    break;
                }
            }
            // A new pod of a running Deployment: its Logs object (below).
            _ = pod_events.next() => {}
            _ = copy_tick.tick() => {
                copy_logs(&supervisor.layout.controllers, &mut copied);
                continue;
            }
            event = events.next() => match event {
                Some(Ok(event)) => {
                    failing = false;
                    listed |= matches!(event, watcher::Event::InitDone);
                }
                // A stopped or restarting API server (the fault tests): the processes keep
                // running, the watcher retries with a backoff.
                Some(Err(err)) => {
                    if !failing {
                        log(format_args!("watching Deployments failed (retrying): {err}"));
                    }
                    failing = true;
                }
                None => break,
            },
        }
        // Until the first complete listing, a Deployment not seen yet is not a gone one.
        if listed {
            let current: Vec<_> = store.state();
            supervisor
                .reconcile(current.iter().map(|d| d.as_ref()))
                .await;
            supervisor
                .publish_logs(&logs, &pod_store.state(), &current, &mut published)
                .await;
        }
    }
    supervisor.stop_all().await;
    let _ = fs::remove_file(&own_pidfile);
    Ok(())
}

/// Appends the complete lines each `<deployment>.log` in `dir` gained since the last call
/// (`copied`: the offset reached in each) to `<deployment>.cri.log` in the CRI log format
/// kwok reads, stamped with the time they were copied. A log not seen before by this
/// supervisor is copied from its start, over what an earlier one wrote.
fn copy_logs(dir: &Path, copied: &mut HashMap<PathBuf, u64>) {
    use std::io::{Read as _, Seek as _, Write as _};
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for path in entries.filter_map(|e| Some(e.ok()?.path())) {
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let Some(deployment) = name.strip_suffix(".log").filter(|d| !d.ends_with(".cri")) else {
            continue;
        };
        let target = dir.join(format!("{deployment}.cri.log"));
        let first = !copied.contains_key(&path);
        let offset = copied.entry(path.clone()).or_insert(0);
        let Ok(mut source) = fs::File::open(&path) else {
            continue;
        };
        let mut text = Vec::new();
        if source.seek(std::io::SeekFrom::Start(*offset)).is_err()
            || source.read_to_end(&mut text).is_err()
        {
            continue;
        }
        // Only complete lines; the rest waits for its newline.
        let Some(end) = text.iter().rposition(|b| *b == b'\n') else {
            if first {
                let _ = fs::write(&target, "");
            }
            continue;
        };
        let now = cri_now();
        let mut out = String::new();
        for line in String::from_utf8_lossy(&text[..end]).lines() {
            out.push_str(&format!("{now} stdout F {line}\n"));
        }
        let file = if first {
            fs::File::create(&target)
        } else {
            fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&target)
        };
        if let Ok(mut file) = file
            && file.write_all(out.as_bytes()).is_ok()
        {
            *offset += end as u64 + 1;
        }
    }
}

/// Now in RFC 3339 with nanoseconds, as the CRI log format stamps a line.
fn cri_now() -> String {
    k8s_openapi::jiff::Timestamp::now().to_string()
}

async fn client(path: &Path) -> Result<kube::Client> {
    let kubeconfig = Kubeconfig::read_from(path).map_err(|source| Error::Kubeconfig {
        path: path.to_owned(),
        source,
    })?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|source| Error::Kubeconfig {
            path: path.to_owned(),
            source,
        })?;
    kube::Client::try_from(config).map_err(|source| Error::Client {
        path: path.to_owned(),
        source,
    })
}

struct Supervisor {
    layout: Layout,
    builds: Builds,
    /// Images already logged as having no local build.
    noted: HashSet<String>,
}

impl Supervisor {
    async fn reconcile<'a>(&mut self, deployments: impl Iterator<Item = &'a Deployment>) {
        let mut wanted = HashSet::new();
        for deployment in deployments {
            match spec::wanted(deployment, &self.builds, &self.layout, is_executable) {
                Wanted::Nothing => {}
                Wanted::NotBuilt { image } => {
                    if self.noted.insert(image.clone()) {
                        let name = deployment.metadata.name.as_deref().unwrap_or_default();
                        log(format_args!(
                            "Deployment {name} runs {image}: no local build of it \
                             (FLUX_CONTROLLERS in versions.env), so it stays a pod without a \
                             process until one is built (then it starts)"
                        ));
                    }
                }
                Wanted::Run(process) => {
                    wanted.insert(process.deployment.clone());
                    if let Err(err) = self.supervise(&process).await {
                        log(format_args!("error: {err}"));
                    }
                }
            }
        }
        for deployment in self.recorded() {
            if !wanted.contains(&deployment) {
                log(format_args!(
                    "Deployment {deployment} is gone or scaled to 0: stopping its process"
                ));
                stop(&self.layout.file(&deployment, ".pid")).await;
                let _ = fs::remove_file(self.layout.file(&deployment, ".spec"));
            }
        }
    }

    async fn supervise(&self, process: &Process) -> Result<()> {
        let pidfile = self.layout.file(&process.deployment, ".pid");
        let specfile = self.layout.file(&process.deployment, ".spec");
        let fingerprint = fs::read_to_string(&specfile).ok();
        let recorded = read_pid(&pidfile).map(|pid| Recorded {
            pid,
            alive: alive(pid),
            fingerprint: fingerprint.as_deref().map(str::trim_end),
        });
        let component = &process.component;
        match spec::decide(recorded, &process.fingerprint) {
            Action::Keep => return Ok(()),
            Action::Start => {}
            Action::Replace { pid } => {
                log(format_args!(
                    "Deployment {} changed to {}: replacing {component} (pid {pid})",
                    process.deployment, process.image
                ));
                stop(&pidfile).await;
            }
            Action::Restart { pid } => {
                log(format_args!(
                    "{component} (pid {pid}) exited: starting it again (its log: {})",
                    self.layout.file(&process.deployment, ".log").display()
                ));
                stop(&pidfile).await;
            }
        }
        if process.version != process.tag {
            log(format_args!(
                "{component} {} is not built here (refused by the module proxy, or not in \
                 FLUX_CONTROLLERS): running the {} build instead, the substitute \
                 FLUX_CONTROLLER_SUBSTITUTES in versions.env names for it",
                process.tag, process.version
            ));
        }
        self.start(process, &pidfile, &specfile)
    }

    fn start(&self, process: &Process, pidfile: &Path, specfile: &Path) -> Result<()> {
        let layout = &self.layout;
        let storage = if spec::serves_artifacts(&process.component) {
            // The artifact server keeps its port across restarts and upgrades: the URLs in the
            // sources' status stay valid for kustomize-controller.
            let portfile = layout.file(&process.deployment, ".storage-port");
            let recorded = fs::read_to_string(&portfile).ok();
            let port = match recorded.and_then(|p| p.trim().parse().ok()) {
                Some(port) => port,
                None => process::free_port()?,
            };
            write(&portfile, &format!("{port}\n"))?;
            create_dir(&layout.file(&process.deployment, "-storage"))?;
            Some(port)
        } else {
            None
        };
        let ports = Ports {
            metrics: process::free_port()?,
            health: process::free_port()?,
            storage,
        };
        let args = process.command_line(layout, ports);
        create_dir(&layout.file(&process.deployment, "-home"))?;
        let logfile = layout.file(&process.deployment, ".log");
        let open = || {
            fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&logfile)
                .map_err(|source| Error::File {
                    doing: "opening",
                    path: logfile.clone(),
                    source,
                })
        };
        let spawn_error = |source| Error::Spawn {
            deployment: process.deployment.clone(),
            binary: process.binary.clone(),
            source,
        };
        let mut child = tokio::process::Command::new(&process.binary)
            .args(&args)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env_remove("KUBERNETES_SERVICE_PORT")
            .envs(process.env(layout))
            .stdin(Stdio::null())
            .stdout(open()?)
            .stderr(open()?)
            // Its own process group: a signal to the supervisor's group is not one to it.
            .process_group(0)
            .spawn()
            .map_err(spawn_error)?;
        let pid = child.id().unwrap_or_default();
        write(pidfile, &format!("{pid}\n"))?;
        write(specfile, &format!("{}\n", process.fingerprint))?;
        log(format_args!(
            "started {} {} for Deployment {} ({}), pid {pid}: {}",
            process.component,
            process.version,
            process.deployment,
            process.image,
            args.join(" ")
        ));
        let what = format!("{} (pid {pid})", process.component);
        tokio::spawn(async move {
            match child.wait().await {
                Ok(status) => log(format_args!("{what} exited: {status}")),
                Err(err) => log(format_args!("waiting for {what}: {err}")),
            }
        });
        Ok(())
    }

    /// A kwok `Logs` object for each pod of a Deployment with a process (`published` holds the
    /// pods done), pointing at the process's log; owned by the pod, so it goes with it.
    async fn publish_logs(
        &mut self,
        api: &Api<DynamicObject>,
        pods: &[std::sync::Arc<Pod>],
        deployments: &[std::sync::Arc<Deployment>],
        published: &mut HashSet<String>,
    ) {
        let running = self.recorded();
        for pod in pods {
            let (Some(uid), name) = (pod.uid(), pod.name_any()) else {
                continue;
            };
            if published.contains(&uid) {
                continue;
            }
            let labels = pod.labels();
            let Some(deployment) = deployments.iter().find(|d| {
                let selects = d
                    .spec
                    .as_ref()
                    .and_then(|s| s.selector.match_labels.as_ref())
                    .is_some_and(|m| m.iter().all(|(k, v)| labels.get(k) == Some(v)));
                selects && running.contains(&d.name_any())
            }) else {
                continue;
            };
            let logfile = self.layout.file(&deployment.name_any(), ".cri.log");
            let containers: Vec<String> = pod
                .spec
                .as_ref()
                .map(|s| s.containers.iter().map(|c| c.name.clone()).collect())
                .unwrap_or_default();
            let object = serde_json::json!({
                "apiVersion": "kwok.x-k8s.io/v1alpha1",
                "kind": "Logs",
                "metadata": {
                    "name": name,
                    "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": name, "uid": uid}],
                },
                "spec": {"logs": [{
                    "containers": containers,
                    "logsFile": logfile,
                    "follow": true,
                }]},
            });
            let params = PatchParams::apply("tenantflux-test-supervisor").force();
            match api.patch(&name, &params, &Patch::Apply(&object)).await {
                Ok(_) => {
                    published.insert(uid);
                }
                Err(err) => {
                    if self.noted.insert(format!("logs of {uid}")) {
                        log(format_args!(
                            "publishing the log of pod {name} (kwok Logs; retrying): {err}"
                        ));
                    }
                }
            }
        }
    }

    /// The Deployments with a pidfile.
    fn recorded(&self) -> Vec<String> {
        let Ok(entries) = fs::read_dir(&self.layout.controllers) else {
            return Vec::new();
        };
        entries
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter_map(|name| name.strip_suffix(".pid").map(str::to_owned))
            .collect()
    }

    /// SIGTERM to every process at once, SIGKILL to what is left after the grace period.
    async fn stop_all(&self) {
        let pidfiles: Vec<_> = self
            .recorded()
            .iter()
            .map(|d| self.layout.file(d, ".pid"))
            .collect();
        futures::future::join_all(pidfiles.iter().map(|p| stop(p))).await;
    }
}

/// Stops the process of `pidfile` if it runs and removes the pidfile ([`process::stop`], off
/// the runtime's thread: it may wait out the grace period).
async fn stop(pidfile: &Path) {
    let pidfiles = vec![pidfile.to_owned()];
    let _ = tokio::task::spawn_blocking(move || process::stop(&pidfiles)).await;
}

fn write(path: &Path, content: &str) -> Result<()> {
    fs::write(path, content).map_err(|source| Error::File {
        doing: "writing",
        path: path.to_owned(),
        source,
    })
}

fn create_dir(path: &Path) -> Result<()> {
    fs::create_dir_all(path).map_err(|source| Error::File {
        doing: "creating",
        path: path.to_owned(),
        source,
    })
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logs_are_copied_line_by_line_in_the_cri_format() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("source-controller.log");
        let cri = dir.path().join("source-controller.cri.log");
        fs::write(&log, "{\"msg\":\"one\"}\n{\"msg\":\"two\"}\n{\"msg\":\"th").unwrap();
        let mut copied = HashMap::new();
        copy_logs(dir.path(), &mut copied);
        let lines = |path: &Path| -> Vec<String> {
            fs::read_to_string(path)
                .unwrap()
                .lines()
                .map(|l| l.splitn(4, ' ').skip(1).collect::<Vec<_>>().join(" "))
                .collect()
        };
        assert_eq!(
            lines(&cri),
            ["stdout F {\"msg\":\"one\"}", "stdout F {\"msg\":\"two\"}"]
        );
        let stamp = fs::read_to_string(&cri).unwrap();
        let stamp = stamp.split(' ').next().unwrap();
        assert!(
            stamp.parse::<k8s_openapi::jiff::Timestamp>().is_ok(),
            "{stamp}"
        );
        fs::OpenOptions::new()
            .append(true)
            .open(&log)
            .and_then(|mut f| std::io::Write::write_all(&mut f, b"ree\"}\n"))
            .unwrap();
        copy_logs(dir.path(), &mut copied);
        assert_eq!(lines(&cri).last().unwrap(), "stdout F {\"msg\":\"three\"}");
        assert_eq!(lines(&cri).len(), 3);
        // The copy is not copied again.
        assert!(!dir.path().join("source-controller.cri.cri.log").exists());
    }
}
