//! Wiring: logging, the Kubernetes client, the listeners, the signal handlers, and what runs
//! until the shutdown: the shared watches and every task (`start`), under one supervisor
//! (`supervisor`), and the admin endpoints (`admin`).

pub mod admin;
mod start;
mod supervisor;

use std::{io::IsTerminal, sync::Arc, time::SystemTime};

use tokio::sync::watch;
use tracing_subscriber::{EnvFilter, fmt, prelude::*};

use futures::StreamExt as _;
use tenantflux_core::policy::signing;
use tokio_stream::wrappers::WatchStream;
use tokio_util::sync::CancellationToken;

use crate::{
    VERSION,
    cli::{Args, LogFormat},
    server::{self, metrics::Metrics},
    status::{self, Readiness, Status},
};
use supervisor::Supervisor;

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
    status: watch::Receiver<Status>,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) {
    let changes = WatchStream::from_changes(status.clone()).map(drop);
    let gauges = Gauges { status, metrics };
    crate::reconcile::run(gauges, changes, &shutdown).await;
}

/// The loop of [`record_status_metrics`].
struct Gauges {
    status: watch::Receiver<Status>,
    metrics: Arc<Metrics>,
}

impl crate::reconcile::Pass for Gauges {
    type Event = ();

    async fn pass(&mut self, _: crate::reconcile::Wake<()>) -> crate::reconcile::Next {
        let (phase, policy, problems) = {
            let status = self.status.borrow_and_update();
            let policy = status.policy.as_ref().map(|p| {
                let expiry = p.expires_at.map_or(0, unix_seconds);
                let enforced = p.enforcement.as_ref().map(|e| e.enforced);
                (p.generation, expiry, p.stale, enforced)
            });
            (status.operator.phase, policy, status.agent.problems.len())
        };
        let metrics = &self.metrics;
        metrics.set_operator_phase(phase);
        metrics.set_problems(problems);
        let (generation, expiry, stale, enforced) = policy.unwrap_or_default();
        metrics.set_policy(generation, expiry, stale, enforced);
        crate::reconcile::Next::Idle
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
    let listeners = start::Listeners::bind(&args, &readiness).await?;
    let policy = start::policy_store(&args, &client)?;
    let install = start::install_config(&args, &client)?;
    let mut agent = start::Wiring {
        args,
        client,
        policy,
        tasks: Supervisor::new(shutdown.clone(), readiness.clone()),
        shutdown: shutdown.clone(),
    };

    let watched = agent.shared_watches();
    // The Flux releases of the artifact the agent installs flux-operator from, once read.
    let (releases_tx, releases_rx) = watch::channel(None);
    let install = agent.operator_install(install, watched.operator.clone(), releases_tx);
    agent.policy_tasks();
    let (adopter, marks) = agent.adoption(install.clone());
    let inputs = status::Inputs {
        watched,
        install,
        policy: agent.policy.subscribe(),
        marks,
    };
    let status = agent.status(readiness.clone(), metrics.clone(), inputs);
    let caches = agent.caches();
    agent.admin(listeners.admin, readiness, metrics.clone(), caches.clone());
    agent.identity_csr_sweep();
    let services = agent.services(status, caches, adopter, releases_rx);

    let serving = async {
        let grpc = server::serve(listeners.grpc, services, metrics, shutdown.clone()).await;
        // However gRPC ended, stop the rest too.
        shutdown.cancel();
        grpc
    };
    let (grpc, died) = tokio::join!(serving, agent.tasks.wait());
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
