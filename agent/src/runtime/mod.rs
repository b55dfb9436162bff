//! Wiring: logging, the Kubernetes client, the listeners, the admin endpoints, the signal
//! handlers, and the tasks that run until the shutdown.

pub mod admin;
mod supervisor;

use std::{io::IsTerminal, sync::Arc, time::SystemTime};

use tokio::{net::TcpListener, sync::watch};
use tracing_subscriber::{EnvFilter, fmt, prelude::*};

use tenantflux_core::policy::signing;
use tokio_util::sync::CancellationToken;

use crate::{
    VERSION,
    cli::{Args, LogFormat},
    instance::{self, Instances},
    operator::{self, InstallConfig, InstallState, bundle::ImageRules, source::Fetcher},
    policy::{admission, store::PolicyStore},
    server::{
        self, AgentService, InstanceService, PolicyService, UpgradeService, WorkloadsService,
        auth::Authorizer, metrics::Metrics,
    },
    status::{self, AgentFacts, Readiness, Status},
    upgrade::{UpgradeConfig, Upgrader},
    workloads::Caches,
};

/// Why the agent stopped with an error. Messages leave the cause out: `main` prints the
/// whole chain with `{err:#}`.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid log filter {filter:?} (--log-level / RUST_LOG)")]
    LogFilter {
        filter: String,
        #[source]
        source: tracing_subscriber::filter::ParseError,
    },

    #[error("no Kubernetes client configuration (in-cluster service account or KUBECONFIG)")]
    KubeConfig(#[source] kube::Error),

    #[error("binding the {what} listener on {address}")]
    Bind {
        what: &'static str,
        address: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },

    #[error("installing the SIGTERM/SIGINT handlers")]
    Signals(#[source] std::io::Error),

    #[error(transparent)]
    Grpc(#[from] server::ServeError),

    #[error("{0}")]
    TaskDied(supervisor::TaskDied),

    #[error(
        "--operator-bundle needs --operator-version (the flux-operator versions it may install)"
    )]
    OperatorVersionMissing,

    #[error("reading the policy public key {path} (--policy-public-key)")]
    PolicyKeyFile {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("the policy public key {path} (--policy-public-key)")]
    PolicyKey {
        path: std::path::PathBuf,
        #[source]
        source: signing::KeyError,
    },

    #[error("the root keys (--policy-root-key, --policy-root-threshold): {0}")]
    PolicyRoots(String),
}

impl Args {
    /// Runs the agent until SIGTERM or SIGINT.
    pub async fn run(self) -> Result<(), Error> {
        init_logging(self.log_format, &self.log_level)?;
        run(self).await
    }
}

fn unix_seconds(time: SystemTime) -> i64 {
    time.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// Keeps the operator phase gauge and the policy gauges at what the status reports.
async fn record_status_metrics(
    mut status: watch::Receiver<Status>,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) {
    loop {
        let (phase, policy, problems) = {
            let status = status.borrow_and_update();
            let policy = status.policy.as_ref().map(|p| {
                let expiry = p.expires_at.map_or(0, unix_seconds);
                let enforced = p.enforcement.as_ref().map(|e| e.enforced);
                (p.generation, expiry, p.stale, enforced)
            });
            (status.operator.phase, policy, status.agent.problems.len())
        };
        metrics.set_operator_phase(phase);
        metrics.set_problems(problems);
        let (generation, expiry, stale, enforced) = policy.unwrap_or_default();
        metrics.set_policy(generation, expiry, stale, enforced);
        tokio::select! {
            () = shutdown.cancelled() => return,
            changed = status.changed() => if changed.is_err() { return },
        }
    }
}

/// Cancels `shutdown` on the first SIGTERM or SIGINT.
async fn cancel_on_signal(shutdown: CancellationToken) -> std::io::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let name = tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
        () = shutdown.cancelled() => return Ok(()),
    };
    tracing::info!(signal = name, "shutting down: draining gRPC calls");
    shutdown.cancel();
    Ok(())
}

fn init_logging(format: LogFormat, filter: &str) -> Result<(), Error> {
    let filter = EnvFilter::builder()
        .parse(filter)
        .map_err(|source| Error::LogFilter {
            filter: filter.to_owned(),
            source,
        })?;
    let registry = tracing_subscriber::registry().with(filter);
    // `try_init` fails only if a subscriber is already set (tests); keep that one.
    let _ = match format {
        LogFormat::Json => registry
            .with(fmt::layer().json().with_writer(std::io::stderr))
            .try_init(),
        LogFormat::Text => registry
            .with(
                fmt::layer()
                    .with_ansi(std::io::stderr().is_terminal())
                    .with_writer(std::io::stderr),
            )
            .try_init(),
    };
    Ok(())
}

async fn run(args: Args) -> Result<(), Error> {
    let shutdown = CancellationToken::new();
    let signals = tokio::spawn(cancel_on_signal(shutdown.clone()));

    let client = kube::Client::try_default()
        .await
        .map_err(Error::KubeConfig)?;
    let readiness = Arc::new(Readiness::new());
    let metrics = Arc::new(Metrics::new(VERSION));

    let bind = |what, address| async move {
        TcpListener::bind(address)
            .await
            .map_err(|source| Error::Bind {
                what,
                address,
                source,
            })
    };
    let admin_listener = bind("admin", args.admin_address).await?;
    let grpc_listener = bind("gRPC", args.grpc_address).await?;
    readiness.set_grpc_bound();
    tracing::info!(
        version = VERSION,
        grpc = %grpc_listener.local_addr().map_err(|source| Error::Bind { what: "gRPC", address: args.grpc_address, source })?,
        admin = %admin_listener.local_addr().map_err(|source| Error::Bind { what: "admin", address: args.admin_address, source })?,
        namespace = %args.namespace,
        operator_namespace = %args.operator_namespace,
        "tenantflux-agent listening"
    );

    let facts = AgentFacts {
        version: VERSION.to_owned(),
        namespace: args.namespace.clone(),
        operator_namespace: args.operator_namespace.clone(),
        started_at: SystemTime::now(),
    };
    let policy_key = match &args.policy_public_key {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|source| Error::PolicyKeyFile {
                path: path.clone(),
                source,
            })?;
            let key = signing::read_public_key(&text).map_err(|source| Error::PolicyKey {
                path: path.clone(),
                source,
            })?;
            tracing::info!(key_id = signing::key_id(&key), "policy key loaded");
            Some(key)
        }
        None => None,
    };
    let roots = if args.policy_root_keys.is_empty() {
        None
    } else {
        let keys = args
            .policy_root_keys
            .iter()
            .map(|path| {
                let text = std::fs::read_to_string(path).map_err(|err| {
                    Error::PolicyRoots(format!("reading {}: {err}", path.display()))
                })?;
                signing::read_public_key(&text)
                    .map_err(|err| Error::PolicyRoots(format!("{}: {err}", path.display())))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let ids: Vec<String> = keys.iter().map(signing::key_id).collect();
        let threshold = usize::try_from(args.policy_root_threshold).unwrap_or(usize::MAX);
        let roots = tenantflux_core::policy::keyring::Roots::new(keys, threshold)
            .map_err(Error::PolicyRoots)?;
        tracing::info!(root_keys = ?ids, threshold, "policy root keys loaded");
        Some(roots)
    };
    let policy_store = PolicyStore::with_roots(
        client.clone(),
        &args.namespace,
        policy_key,
        roots,
        args.cluster_name.clone(),
    );
    // The Flux releases of the artifact the agent installs flux-operator from, once read.
    let (releases_tx, releases_rx) = watch::channel(None);
    let mut tasks = supervisor::Supervisor::new(shutdown.clone(), readiness.clone());
    let install_rx = match args.operator_bundle.clone() {
        Some(source) => {
            let (tx, rx) = watch::channel(InstallState::initial(&source));
            let config = InstallConfig {
                allowed: args
                    .operator_version
                    .clone()
                    .ok_or(Error::OperatorVersionMissing)?,
                source,
                agent_namespace: args.namespace.clone(),
                operator_namespace: args.operator_namespace.clone(),
                resync: args.operator_resync_interval,
                images: ImageRules {
                    registries: args.operator_image_registries.clone(),
                    require_digest: args.operator_require_image_digest,
                    pod_fields: args.operator_allow_pod_fields.clone(),
                },
                adopt: args.adopt,
            };
            let fetcher = Fetcher::new(
                client.clone(),
                args.namespace.clone(),
                args.operator_bundle_pull_secret.clone(),
                args.operator_bundle_plain_http,
            );
            tasks.spawn(
                "operator install",
                operator::run(
                    client.clone(),
                    fetcher,
                    config,
                    policy_store.subscribe(),
                    tx,
                    releases_tx,
                    shutdown.clone(),
                ),
            );
            Some(rx)
        }
        None => None,
    };
    tasks.spawn("policy store", policy_store.clone().run(shutdown.clone()));
    if let Some(channel) = args.policy_source.clone() {
        tracing::info!(%channel, interval = ?args.policy_source_interval, "pulling policy");
        tasks.spawn(
            "policy pull",
            crate::policy::pull::run(
                client.clone(),
                policy_store.clone(),
                crate::policy::pull::PullConfig {
                    channel,
                    interval: args.policy_source_interval,
                    plain_http: args.policy_source_plain_http,
                    pull_secret: args.policy_source_pull_secret.clone(),
                    namespace: args.namespace.clone(),
                },
                shutdown.clone(),
            ),
        );
    }
    // Ends once the defaults were dealt with (created, or found not needed).
    tasks.spawn_once("defaults", {
        let (client, held, shutdown) = (client.clone(), policy_store.subscribe(), shutdown.clone());
        let (agent, operator) = (args.namespace.clone(), args.operator_namespace.clone());
        async move { instance::defaults::run(client, &agent, &operator, held, shutdown).await }
    });
    tasks.spawn(
        "admission",
        admission::run(client.clone(), policy_store.clone(), shutdown.clone()),
    );
    tasks.spawn(
        "enforcement",
        crate::policy::enforcement::run(
            client.clone(),
            policy_store.clone(),
            crate::policy::enforcement::EnforcementConfig {
                interval: args.enforcement_check_interval,
                permissions_interval: args.permissions_check_interval,
                operator_namespace: args.operator_namespace.clone(),
            },
            shutdown.clone(),
        ),
    );

    let adopt_install_rx = install_rx.clone();
    let (marks_tx, marks_rx) = watch::channel(None);
    let (status_tx, status_rx) = watch::channel(status::initial(&facts));
    tasks.spawn(
        "status",
        status::run(
            client.clone(),
            facts,
            status_tx,
            readiness.clone(),
            status::Inputs {
                install: install_rx.clone(),
                policy: policy_store.subscribe(),
                marks: marks_rx,
            },
            shutdown.clone(),
        ),
    );
    tasks.spawn(
        "status metrics",
        record_status_metrics(status_rx.clone(), metrics.clone(), shutdown.clone()),
    );

    let caches = Arc::new(Caches::default());
    tasks.spawn(
        "object caches",
        caches.clone().run(client.clone(), shutdown.clone()),
    );

    tasks.spawn(
        "admin server",
        admin::serve(
            admin_listener,
            admin::router(readiness, metrics.clone(), caches.clone()),
            shutdown.clone(),
        ),
    );
    tasks.spawn(
        "identity CSR sweep",
        crate::server::auth::deny_expired_identity_csrs(
            client.clone(),
            args.identity_csr_max_age,
            args.identity_csr_sweep_interval,
            shutdown.clone(),
        ),
    );
    let authorizer = Arc::new(
        Authorizer::new(client.clone(), args.token_audience)
            .with_stream_recheck(args.stream_recheck_interval)
            .with_namespace(args.namespace.clone()),
    );
    let agent_namespace = args.namespace.clone();
    let agent_namespace_for_adopt = args.namespace.clone();
    let service = AgentService::new(
        args.namespace,
        status_rx,
        authorizer.clone(),
        shutdown.clone(),
    );
    let instance = InstanceService::new(
        Instances::new(
            client.clone(),
            &args.operator_namespace,
            policy_store.subscribe(),
        ),
        authorizer.clone(),
    );
    let upgrader = Upgrader::new(
        client.clone(),
        UpgradeConfig {
            agent_namespace,
            operator_namespace: args.operator_namespace.clone(),
            concurrency: args.upgrade_concurrency,
        },
        policy_store.subscribe(),
        releases_rx,
        shutdown.clone(),
    );
    // An upgrade an earlier agent left unfinished goes on from its record.
    tasks.spawn_once("upgrade resume", upgrader.clone().resume());
    let upgrade = UpgradeService::new(upgrader, authorizer.clone());
    let adopter = crate::adopt::Adopter::new(
        client.clone(),
        &agent_namespace_for_adopt,
        &args.operator_namespace,
        policy_store.subscribe(),
        adopt_install_rx,
    );
    if args.adopt {
        tasks.spawn_once(
            "adoption at start",
            crate::adopt::run_at_start(adopter.clone(), shutdown.clone()),
        );
    }
    tasks.spawn(
        "adoption marks",
        crate::adopt::watch_marks(adopter.clone(), marks_tx, shutdown.clone()),
    );
    let adopt = crate::server::AdoptService::new(adopter, authorizer.clone());
    let policy = PolicyService::new(policy_store, authorizer.clone());
    let inspect = server::InspectService::new(
        caches.clone(),
        client.clone(),
        &args.operator_namespace,
        authorizer.clone(),
        shutdown.clone(),
    );
    let workloads = WorkloadsService::new(caches, client, authorizer, shutdown.clone());
    let services = server::Services {
        agent: service,
        workloads,
        policy,
        instance,
        upgrade,
        adopt,
        inspect,
    };
    let serving = async {
        let grpc = server::serve(grpc_listener, services, metrics, shutdown.clone()).await;
        // However gRPC ended, stop the rest too.
        shutdown.cancel();
        grpc
    };
    let (grpc, died) = tokio::join!(serving, tasks.wait());
    if let Ok(Err(err)) = signals.await {
        return Err(Error::Signals(err));
    }
    grpc?;
    if let Some(died) = died {
        return Err(Error::TaskDied(died));
    }
    tracing::info!("tenantflux-agent stopped");
    Ok(())
}
