//! tenantflux-agent: serves the `tenantflux.v1` gRPC API of one tenant cluster. It installs
//! flux-operator, guards the FluxInstance with the platform's policy, reports status, runs
//! upgrades, and authorizes every call against the cluster's own RBAC.
//!
//! Modules by capability, dependencies pointing one way (a module uses only those before it;
//! docs/architecture.md's module map is the order, and its `agent-layers` rule is checked):
//! this file (the watch backoff, the record helper, the flux-operator API resources) → `oci` →
//! `policy` → `operator` → `instance` → `workloads` → `inspect` → `status` → `upgrade` →
//! `adopt` → `server` (gRPC: auth, input checks, domain errors to codes, metrics) → `cli` →
//! `runtime` (wiring, admin endpoints, signals), all on `tenantflux_core` (the pure domain).
//! The watches more than one module reads are built once, in `watches`; the loops that
//! reconcile something run through `reconcile`, which waits, retries and stops for them.
#![forbid(unsafe_code)]

pub mod adopt;
pub mod cli;
pub mod inspect;
pub mod instance;
pub mod oci;
pub mod operator;
mod policy;
mod reconcile;
mod runtime;
pub mod server;
mod status;
pub mod upgrade;
mod watches;
pub mod workloads;

use std::{collections::BTreeMap, time::Duration};

use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference};
use kube::{
    Api, Client,
    api::{ApiResource, Patch, PatchParams},
    runtime::{
        events::{Recorder, Reporter},
        utils::ResetTimerBackoff,
        watcher::ExponentialBackoff,
    },
};
use tenantflux_core::{
    FIELD_MANAGER, MANAGED_BY_LABEL,
    flux::{
        INSTANCE_API_VERSION, INSTANCE_KIND, INSTANCE_PLURAL, INSTANCE_VERSION, OPERATOR_GROUP,
        REPORT_KIND, REPORT_PLURAL,
    },
};
use tokio_util::sync::CancellationToken;

pub use cli::Args;
pub use runtime::Error;

/// The FluxInstance API (`fluxinstances.fluxcd.controlplane.io/v1`).
pub fn flux_instance_resource() -> ApiResource {
    flux_operator_resource(INSTANCE_KIND, INSTANCE_PLURAL)
}

/// The FluxReport API (`fluxreports.fluxcd.controlplane.io/v1`).
pub fn flux_report_resource() -> ApiResource {
    flux_operator_resource(REPORT_KIND, REPORT_PLURAL)
}

fn flux_operator_resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: OPERATOR_GROUP.into(),
        version: INSTANCE_VERSION.into(),
        api_version: INSTANCE_API_VERSION.into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// The agent's version, as reported in `Status.agent.version` and `tenantflux_agent_info`.
pub const VERSION: &str = concat!("v", env!("CARGO_PKG_VERSION"));

/// The longest wait between two attempts of a watch.
const WATCH_MAX_DELAY: Duration = Duration::from_secs(5);
/// A watch that has run without an error for this long starts again from the shortest wait.
const WATCH_RESET_AFTER: Duration = Duration::from_secs(120);

/// The environment variable naming the failpoints the agent stops at (comma-separated).
pub const FAILPOINTS_ENV: &str = "TENANTFLUX_FAILPOINTS";

/// Whether `name` is one of the failpoints in `list` (`TENANTFLUX_FAILPOINTS`'s value).
fn failpoint_set(list: &str, name: &str) -> bool {
    list.split(',').any(|n| n.trim() == name)
}

/// A named point where the fault tests stop the agent: when `TENANTFLUX_FAILPOINTS` names it,
/// the task logs `failpoint NAME reached` and waits there forever, so that a `kill -9` lands
/// exactly between two steps however loaded the machine is. Unset (always, outside the tests)
/// it does nothing. Whoever sets the agent's environment holds its power anyway.
pub(crate) async fn failpoint(name: &'static str) {
    static SET: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let list = SET.get_or_init(|| std::env::var(FAILPOINTS_ENV).unwrap_or_default());
    if failpoint_set(list, name) {
        tracing::warn!("failpoint {name} reached: waiting here until the process is killed");
        futures::future::pending::<()>().await;
    }
}

/// The fault tests' panic point: when `TENANTFLUX_FAILPOINTS` names `panic:NAME`, the task
/// `NAME` of the runtime's supervisor panics as it starts. Unset (always, outside the tests) it
/// does nothing.
pub(crate) fn panicpoint(task: &str) {
    let list = std::env::var(FAILPOINTS_ENV).unwrap_or_default();
    if failpoint_set(&list, &format!("panic:{task}")) {
        panic!("failpoint panic:{task} reached");
    }
}

/// The agent's Event recorder (reporting controller `tenantflux-agent`, instance: its pod).
pub(crate) fn recorder(client: &Client) -> Recorder {
    Recorder::new(
        client.clone(),
        Reporter {
            controller: FIELD_MANAGER.into(),
            instance: std::env::var("POD_NAME").ok(),
        },
    )
}

/// A ConfigMap of the agent as the object an Event is about.
pub(crate) fn configmap_reference(namespace: &str, name: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("ConfigMap".into()),
        name: Some(name.into()),
        namespace: Some(namespace.into()),
        ..ObjectReference::default()
    }
}

/// An in-memory writer that refuses to hold more than `limit` bytes: what a registry's blob
/// is downloaded into (flux-operator bundles, policy artifacts), so that one that sends more
/// than its manifest declared is cut off at the limit.
pub(crate) struct Limited {
    pub(crate) bytes: Vec<u8>,
    limit: u64,
    /// Set once a write went past the limit.
    pub(crate) exceeded: bool,
}

impl Limited {
    pub(crate) fn new(limit: u64) -> Self {
        Self {
            bytes: Vec::new(),
            limit,
            exceeded: false,
        }
    }
}

impl tokio::io::AsyncWrite for Limited {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let total = self.bytes.len() as u64 + buf.len() as u64;
        if total > self.limit {
            self.exceeded = true;
            return std::task::Poll::Ready(Err(std::io::Error::other(format!(
                "more than {} bytes",
                self.limit
            ))));
        }
        self.bytes.extend_from_slice(buf);
        std::task::Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}

/// The waits between attempts of a step that failed, for the agent's own retry loops (install
/// attempts, the wait for the API server, upgrade steps): `min`, doubling, at most `max`, for
/// as long as the loop goes on. Loops that succeed start a new sequence.
pub(crate) fn retry_delays(min: Duration, max: Duration) -> impl Iterator<Item = Duration> {
    use backon::BackoffBuilder as _;
    backon::ExponentialBuilder::default()
        .with_min_delay(min)
        .with_max_delay(max)
        .with_factor(2.0)
        .without_max_times()
        .build()
}

/// How a wait ended ([`until_woken`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Woken {
    /// The wait passed.
    Elapsed,
    /// What the loop watches changed.
    Changed,
}

/// A wait inside a piece of work (the loops themselves wait in [`reconcile::run`]): until
/// `wait` passes (`None`: no timer), `wake` completes (what is waited for happened; `false`
/// when its source closed), or the shutdown. `None` when the work is to return: the shutdown
/// came (it wins when more than one is ready) or the source closed.
pub(crate) async fn until_woken(
    shutdown: &CancellationToken,
    wait: Option<Duration>,
    wake: impl std::future::Future<Output = bool>,
) -> Option<Woken> {
    let elapsed = async {
        match wait {
            Some(wait) => tokio::time::sleep(wait).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        biased;
        () = shutdown.cancelled() => None,
        open = wake => open.then_some(Woken::Changed),
        () = elapsed => Some(Woken::Elapsed),
    }
}

/// Waits `wait` (a retry's delay, a poll's interval inside a piece of work): `false` when the
/// shutdown came first, and the work is to return.
pub(crate) async fn sleep(shutdown: &CancellationToken, wait: Duration) -> bool {
    until_woken(shutdown, Some(wait), std::future::pending())
        .await
        .is_some()
}

/// `work`'s output, or `None` when the shutdown came first (and `work` is dropped).
pub(crate) async fn unless_shutdown<T>(
    shutdown: &CancellationToken,
    work: impl std::future::Future<Output = T>,
) -> Option<T> {
    tokio::select! {
        biased;
        () = shutdown.cancelled() => None,
        output = work => Some(output),
    }
}

/// The backoff for every watch the agent runs (`WatchStreamExt::backoff`).
///
/// kube-rs's default doubles the wait up to 30 s, so after a 30 s outage of the API server the
/// agent noticed its return only 20–50 s later (measured in the fault tests). The agent watches
/// a handful of resources in one cluster: retrying at most every 5 s costs the API server little
/// and brings the agent back within seconds.
pub(crate) fn watch_backoff() -> ResetTimerBackoff<ExponentialBackoff> {
    let builder = backon::ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(500))
        .with_max_delay(WATCH_MAX_DELAY)
        .with_factor(2.0)
        .with_jitter()
        .without_max_times();
    ResetTimerBackoff::new(ExponentialBackoff::from(builder), WATCH_RESET_AFTER)
}

/// Server-side applies the ConfigMap `name` of `api`'s namespace holding `data`: the records
/// the agent keeps its state in (install, policy, defaults, upgrade), each labelled as the
/// agent's own.
pub(crate) async fn apply_record(
    api: &Api<ConfigMap>,
    name: &str,
    data: BTreeMap<String, String>,
) -> Result<ConfigMap, kube::Error> {
    let body = serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "labels": {MANAGED_BY_LABEL: FIELD_MANAGER, "app.kubernetes.io/part-of": "tenantflux"},
        },
        "data": data,
    });
    api.patch(
        name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&body),
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watch_waits_grow_but_never_past_the_cap() {
        let waits: Vec<Duration> = watch_backoff().take(20).collect();
        assert!(waits[0] < Duration::from_secs(2), "{waits:?}");
        // With jitter a wait may exceed its base by up to the base again, never by more.
        assert!(waits.iter().all(|w| *w <= 2 * WATCH_MAX_DELAY), "{waits:?}");
        assert!(
            waits[10..].iter().all(|w| *w >= WATCH_MAX_DELAY),
            "{waits:?}"
        );
    }

    #[tokio::test]
    async fn a_pause_ends_at_the_shutdown_first_then_a_change_then_the_wait() {
        let shutdown = CancellationToken::new();
        let long = Some(Duration::from_secs(3600));
        let short = Some(Duration::from_millis(1));
        let pending = || std::future::pending::<bool>();
        assert_eq!(
            until_woken(&shutdown, short, pending()).await,
            Some(Woken::Elapsed)
        );
        assert_eq!(
            until_woken(&shutdown, long, async { true }).await,
            Some(Woken::Changed)
        );
        // A closed source ends the loop, as the shutdown does.
        assert_eq!(until_woken(&shutdown, long, async { false }).await, None);
        assert!(sleep(&shutdown, Duration::from_millis(1)).await);
        assert_eq!(unless_shutdown(&shutdown, async { 7 }).await, Some(7));
        shutdown.cancel();
        // Everything ready at once: the shutdown wins.
        assert_eq!(
            until_woken(&shutdown, Some(Duration::ZERO), async { true }).await,
            None
        );
        assert_eq!(until_woken(&shutdown, None, pending()).await, None);
        assert!(!sleep(&shutdown, Duration::ZERO).await);
        assert_eq!(unless_shutdown(&shutdown, async { 7 }).await, None);
    }

    #[test]
    fn retry_delays_double_up_to_the_cap_and_never_run_out() {
        let waits: Vec<u64> = retry_delays(Duration::from_secs(1), Duration::from_secs(30))
            .take(100)
            .map(|w| w.as_secs())
            .collect();
        assert_eq!(waits[..7], [1, 2, 4, 8, 16, 30, 30]);
        assert_eq!(waits.len(), 100);
        assert!(waits[5..].iter().all(|w| *w == 30));
    }

    #[test]
    fn failpoints_are_named_exactly() {
        assert!(failpoint_set("a, policy-accepted", "policy-accepted"));
        assert!(!failpoint_set("policy-accepted-late", "policy-accepted"));
        assert!(!failpoint_set("", "policy-accepted"));
    }

    #[tokio::test]
    async fn the_layer_writer_holds_no_more_than_its_limit() {
        use tokio::io::AsyncWriteExt as _;
        let mut writer = Limited::new(10);
        writer.write_all(b"0123456789").await.unwrap();
        assert!(!writer.exceeded);
        let err = writer.write_all(b"x").await.unwrap_err();
        assert_eq!(err.to_string(), "more than 10 bytes");
        assert!(writer.exceeded);
        assert_eq!(writer.bytes, b"0123456789");
    }
}
