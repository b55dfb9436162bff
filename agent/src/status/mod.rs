//! Status from memory: the runtime's shared watches keep the flux-operator Deployment, the
//! FluxInstance and the FluxReport in memory, [`derive`] turns them into a [`Status`] report,
//! and the latest one sits in a `tokio::sync::watch` channel that the RPCs read.

mod derive;
mod readiness;

use std::{
    sync::Arc,
    time::{Duration, SystemTime},
};

use k8s_openapi::api::apps::v1::Deployment;
use kube::{
    Api, Client,
    api::{DynamicObject, Patch, PatchParams},
    runtime::watcher,
};
use tokio::sync::watch;

pub use derive::{
    AgentFacts, Observed, Source, Tracked, derive, model, report_lags, upgrade_deadline,
};
pub use model::Status;
pub use readiness::Readiness;
use tenantflux_core::flux::{
    INSTANCE_NAME, OPERATOR_DEPLOYMENT, OPERATOR_GROUP, REPORT_KIND, REQUESTED_AT_ANNOTATION,
};
use tokio_util::sync::CancellationToken;

use futures::StreamExt as _;
use tokio_stream::wrappers::WatchStream;

use crate::{
    flux_report_resource,
    operator::InstallState,
    policy::store::Held,
    reconcile::{Next, Wake},
    watches::{Seen, Shared},
};
/// How often the Kubernetes version is asked again once known (it changes on upgrades only).
const VERSION_REFRESH: Duration = Duration::from_secs(60);
/// How often a lagging FluxReport is asked to catch up (see [`report_lags`]).
const REPORT_REFRESH: Duration = Duration::from_secs(10);
/// How soon the Kubernetes version is asked again while the API has not answered.
const VERSION_RETRY: Duration = Duration::from_secs(2);

/// How long one version request may take; the watchers wait while it runs.
const VERSION_TIMEOUT: Duration = Duration::from_secs(10);

/// The initial status, before anything was observed.
pub fn initial(facts: &AgentFacts) -> Status {
    stamp(derive(facts, &Observed::default()))
}

/// The shared watches the status reports from: each of one object in the operator namespace.
pub struct Watched {
    /// Deployment `flux-operator`.
    pub operator: Shared<Deployment>,
    /// FluxInstance `flux`.
    pub instance: Shared<DynamicObject>,
    /// FluxReport `flux`.
    pub report: Shared<DynamicObject>,
}

/// What other tasks of the agent report into the status.
pub struct Inputs {
    pub watched: Watched,
    /// The agent's own flux-operator install, when it installs one.
    pub install: Option<watch::Receiver<InstallState>>,
    pub policy: watch::Receiver<Held>,
    /// What puts an adoption's objects at risk from Helm (`adopt::watch_marks`).
    pub marks: watch::Receiver<Option<String>>,
}

/// Follows what the status reports and publishes each changed status on `tx`, until the
/// shutdown. Watch errors (the shared watches retry with backoff) are logged once per change
/// of error.
pub async fn run(
    client: Client,
    facts: AgentFacts,
    tx: watch::Sender<Status>,
    readiness: Arc<Readiness>,
    inputs: Inputs,
    shutdown: CancellationToken,
) {
    let Inputs {
        watched: Watched {
            operator,
            instance,
            report,
        },
        install,
        mut policy,
        marks,
    } = inputs;
    let mut state = Tracker::default();
    let mut install = install;
    if let Some(rx) = &mut install {
        state.observed.install = Some(rx.borrow_and_update().clone());
    }
    state.observed.policy = policy.borrow_and_update().clone();
    let install = match install {
        Some(rx) => WatchStream::from_changes(rx)
            .map(|state| Input::Install(Box::new(state)))
            .boxed(),
        None => futures::stream::empty().boxed(),
    };
    let inputs = futures::stream::select_all([
        install,
        WatchStream::from_changes(policy)
            .map(|held| Input::Policy(Box::new(held)))
            .boxed(),
        WatchStream::from_changes(marks).map(Input::Marks).boxed(),
        operator.updates().map(Input::Operator).boxed(),
        instance.updates().map(Input::Instance).boxed(),
        report.updates().map(Input::Report).boxed(),
    ]);
    let now = tokio::time::Instant::now();
    let reporter = Reporter {
        client,
        facts,
        tx,
        readiness,
        state,
        next_version_check: now,
        next_report_check: now,
    };
    // Nothing here fails: each check sets its own next time.
    crate::reconcile::run(reporter, inputs, &shutdown).await;
}

/// What changed of what the status reports.
enum Input {
    Install(Box<InstallState>),
    Policy(Box<Held>),
    Marks(Option<String>),
    Operator(Seen<Deployment>),
    Instance(Seen<DynamicObject>),
    Report(Seen<DynamicObject>),
}

/// The status loop: what it observed, and when it asks the API server's version and looks
/// whether the FluxReport lags.
struct Reporter {
    client: Client,
    facts: AgentFacts,
    tx: watch::Sender<Status>,
    readiness: Arc<Readiness>,
    state: Tracker,
    next_version_check: tokio::time::Instant,
    next_report_check: tokio::time::Instant,
}

impl crate::reconcile::Pass for Reporter {
    type Event = Input;

    /// Takes in a change and publishes the status, or asks what is due.
    async fn pass(&mut self, wake: Wake<Input>) -> Next {
        let ns = &self.facts.operator_namespace;
        let observed = &mut self.state.observed;
        let changed = match wake {
            Wake::Event(Input::Install(install)) => {
                observed.install = Some(*install);
                true
            }
            Wake::Event(Input::Policy(held)) => {
                observed.policy = *held;
                true
            }
            Wake::Event(Input::Marks(marks)) => {
                observed.adoption = marks;
                true
            }
            Wake::Event(Input::Operator(seen)) => {
                let object = |d| Object::Operator(Box::new(d));
                self.state.observe(Source::Operator, ns, seen, object);
                true
            }
            Wake::Event(Input::Instance(seen)) => {
                let object = |o| Object::Dynamic(Box::new(o));
                self.state.observe(Source::Instance, ns, seen, object);
                true
            }
            Wake::Event(Input::Report(seen)) => {
                let object = |o| Object::Dynamic(Box::new(o));
                self.state.observe(Source::Report, ns, seen, object);
                true
            }
            Wake::Start | Wake::Deadline => {
                let now = tokio::time::Instant::now();
                if now >= self.next_report_check {
                    if report_lags(&self.state.observed) {
                        request_report_refresh(&self.client, ns).await;
                    }
                    self.next_report_check = tokio::time::Instant::now() + REPORT_REFRESH;
                }
                now >= self.next_version_check && {
                    self.check_version().await;
                    true
                }
            }
        };
        if changed {
            publish(&self.tx, derive(&self.facts, &self.state.observed));
        }
        Next::At(self.next_version_check.min(self.next_report_check))
    }
}

impl Reporter {
    /// Asks the API server's version (which also tells whether it answers).
    async fn check_version(&mut self) {
        let answer = tokio::time::timeout(VERSION_TIMEOUT, self.client.apiserver_version()).await;
        let delay = match answer.unwrap_or_else(|_| Err(version_timeout())) {
            Ok(info) => {
                self.readiness.set_kube_api_answered();
                self.state.observed.kubernetes_version = Some(info.git_version);
                self.state.clear_problem(Source::KubernetesApi);
                VERSION_REFRESH
            }
            Err(err) => {
                let problem = format!("the Kubernetes API server did not answer: {err}");
                self.readiness.set_kube_api_failed(err.to_string());
                self.state.set_problem(Source::KubernetesApi, problem);
                VERSION_RETRY
            }
        };
        self.next_version_check = tokio::time::Instant::now() + delay;
    }
}

/// Asks flux-operator to write its FluxReport again (what it does itself after reconciling the
/// instance), so component readiness does not lag for minutes. Best effort: a failure only
/// leaves the report as it was, and the next check asks again.
async fn request_report_refresh(client: &Client, namespace: &str) {
    let reports =
        Api::<DynamicObject>::namespaced_with(client.clone(), namespace, &flux_report_resource());
    let requested_at = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default();
    let patch = serde_json::json!({
        "apiVersion": format!("{OPERATOR_GROUP}/v1"),
        "kind": REPORT_KIND,
        "metadata": {
            "name": INSTANCE_NAME,
            "annotations": {REQUESTED_AT_ANNOTATION: requested_at.to_string()},
        },
    });
    let params = PatchParams::apply(tenantflux_core::FIELD_MANAGER).force();
    match reports
        .patch(INSTANCE_NAME, &params, &Patch::Apply(&patch))
        .await
    {
        Ok(_) => tracing::debug!(namespace, "asked flux-operator to refresh FluxReport flux"),
        Err(err) => {
            tracing::debug!(namespace, error = %err, "could not ask for a FluxReport refresh")
        }
    }
}

fn version_timeout() -> kube::Error {
    kube::Error::Service(
        format!(
            "no answer to GET /version within {}s",
            VERSION_TIMEOUT.as_secs()
        )
        .into(),
    )
}

/// The two kinds of object the shared watches hold.
enum Object {
    Operator(Box<Deployment>),
    Dynamic(Box<DynamicObject>),
}

/// Folds what the shared watches show into [`Observed`].
#[derive(Default)]
struct Tracker {
    observed: Observed,
}

impl Tracker {
    /// Takes in what the shared watch of `source` shows now.
    fn observe<K: Clone>(
        &mut self,
        source: Source,
        namespace: &str,
        seen: Seen<K>,
        object: impl FnOnce(K) -> Object,
    ) {
        match seen {
            Seen::Failed(err) => self.failed(source, namespace, &err),
            // Listing again after a failure: the failure is over, the object stays as it was
            // until the list is done.
            Seen::Listing => self.clear_problem(source),
            Seen::Listed(found) => {
                self.clear_problem(source);
                self.set(source, found.map(|k| object(Arc::unwrap_or_clone(k))));
            }
        }
    }

    fn set(&mut self, source: Source, object: Option<Object>) {
        let observed = &mut self.observed;
        match (source, object) {
            (Source::Operator, Some(Object::Operator(d))) => {
                observed.operator = Tracked::present(*d)
            }
            (Source::Operator, _) => observed.operator = Tracked::absent(),
            (Source::Instance, Some(Object::Dynamic(o))) => {
                observed.instance = Tracked::present(*o)
            }
            (Source::Instance, _) => observed.instance = Tracked::absent(),
            (Source::Report, Some(Object::Dynamic(o))) => observed.report = Tracked::present(*o),
            (Source::Report, _) => observed.report = Tracked::absent(),
            (Source::KubernetesApi, _) => {}
        }
    }

    fn failed(&mut self, source: Source, namespace: &str, err: &watcher::Error) {
        let api_status = match err {
            watcher::Error::InitialListFailed(kube::Error::Api(s))
            | watcher::Error::WatchStartFailed(kube::Error::Api(s))
            | watcher::Error::WatchFailed(kube::Error::Api(s)) => Some(&**s),
            watcher::Error::WatchError(s) => Some(&**s),
            _ => None,
        };
        let (what, resource) = match source {
            Source::Operator => (
                format!("Deployment {namespace}/{OPERATOR_DEPLOYMENT}"),
                "deployments.apps".to_owned(),
            ),
            Source::Instance => (
                format!("FluxInstance {namespace}/{INSTANCE_NAME}"),
                format!("fluxinstances.{OPERATOR_GROUP}"),
            ),
            Source::Report => (
                format!("FluxReport {namespace}/{INSTANCE_NAME}"),
                format!("fluxreports.{OPERATOR_GROUP}"),
            ),
            Source::KubernetesApi => return,
        };
        let problem = match api_status {
            // By code: for an API group that is not served at all the API server answers a
            // plain-text "404 page not found", which has no Status reason.
            Some(s) if s.code == 404 => {
                // The CRD is not installed (or was removed): nothing of that kind exists.
                self.set(source, None);
                format!(
                    "the API server does not serve {resource}/v1: flux-operator's CRDs are not \
                     installed, so {what} cannot exist yet"
                )
            }
            Some(s) if s.code == 403 => format!(
                "the agent may not watch {resource} in namespace {namespace:?}: {} (apply the \
                 agent's ClusterRole from deploy/manifests)",
                s.message
            ),
            Some(s) => format!("watching {what} failed: {} ({})", s.message, s.code),
            None => format!("watching {what} failed: {err}"),
        };
        self.set_problem(source, problem);
    }

    fn set_problem(&mut self, source: Source, problem: String) {
        if self.observed.problems.get(&source) != Some(&problem) {
            tracing::warn!(?source, %problem, "status source failing; retrying with backoff");
            self.observed.problems.insert(source, problem);
        }
    }

    fn clear_problem(&mut self, source: Source) {
        if self.observed.problems.remove(&source).is_some() {
            tracing::info!(?source, "status source recovered");
        }
    }
}

/// Publishes `status` if it differs from the current one, stamped with the time of the change.
fn publish(tx: &watch::Sender<Status>, status: Status) {
    tx.send_if_modified(|current| {
        let unchanged = Status {
            observed_at: None,
            ..current.clone()
        } == status;
        if !unchanged {
            tracing::debug!(
                operator = ?status.operator.phase,
                instance_present = status.instance.present,
                "status changed"
            );
            *current = stamp(status.clone());
        }
        !unchanged
    });
}

fn stamp(mut status: Status) -> Status {
    status.observed_at = Some(SystemTime::now());
    status
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts() -> AgentFacts {
        AgentFacts {
            version: "0.1.0".into(),
            namespace: "tenantflux-system".into(),
            operator_namespace: "flux-system".into(),
            started_at: SystemTime::UNIX_EPOCH,
        }
    }

    fn deployment() -> Deployment {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "flux-operator", "namespace": "flux-system"},
        }))
        .unwrap()
    }

    /// What kube-rs makes of the API server's plain-text answer for a group it does not serve.
    fn not_found() -> watcher::Error {
        watcher::Error::InitialListFailed(kube::Error::Api(
            kube::core::Status::failure("404 page not found", "Failed to parse error data")
                .with_code(404)
                .boxed(),
        ))
    }

    fn operator(tracker: &mut Tracker, seen: Seen<Deployment>) {
        tracker.observe(Source::Operator, "flux-system", seen, |d| {
            Object::Operator(Box::new(d))
        });
    }

    fn instance(tracker: &mut Tracker, seen: Seen<DynamicObject>) {
        tracker.observe(Source::Instance, "flux-system", seen, |o| {
            Object::Dynamic(Box::new(o))
        });
    }

    #[test]
    fn the_object_is_tracked_once_listed() {
        let mut tracker = Tracker::default();
        operator(&mut tracker, Seen::Listing);
        assert!(!tracker.observed.operator.synced, "not before the list");
        operator(&mut tracker, Seen::Listed(Some(Arc::new(deployment()))));
        assert!(tracker.observed.operator.object.is_some());
        operator(&mut tracker, Seen::Listed(None));
        assert!(tracker.observed.operator.synced);
        assert!(
            tracker.observed.operator.object.is_none(),
            "gone from the store"
        );
    }

    #[test]
    fn missing_crd_means_absent_instance_and_one_problem_until_recovery() {
        let mut tracker = Tracker::default();
        instance(&mut tracker, Seen::Failed(Arc::new(not_found())));
        instance(&mut tracker, Seen::Failed(Arc::new(not_found())));
        assert!(tracker.observed.instance.synced);
        assert!(tracker.observed.instance.object.is_none());
        assert_eq!(tracker.observed.problems.len(), 1);
        let problem = &tracker.observed.problems[&Source::Instance];
        assert!(
            problem.contains("fluxinstances.fluxcd.controlplane.io/v1")
                && problem.contains("FluxInstance flux-system/flux"),
            "{problem}"
        );
        let status = derive(&facts(), &tracker.observed);
        assert!(!status.instance.present);
        assert_eq!(status.agent.problems, [problem.as_str()]);

        // The shared watch stays failed through `Init` (see `watches`): only a list clears it.
        instance(&mut tracker, Seen::Listed(None));
        assert!(
            tracker.observed.problems.is_empty(),
            "cleared once a list succeeded"
        );
    }

    #[test]
    fn publish_sends_only_changes_and_stamps_them() {
        let (tx, mut rx) = watch::channel(initial(&facts()));
        rx.borrow_and_update();
        let same = derive(&facts(), &Observed::default());
        publish(&tx, same);
        assert!(
            !rx.has_changed().unwrap(),
            "unchanged status is not sent again"
        );

        let observed = Observed {
            operator: Tracked::absent(),
            ..Observed::default()
        };
        publish(&tx, derive(&facts(), &observed));
        assert!(rx.has_changed().unwrap());
        let sent = rx.borrow_and_update().clone();
        assert!(sent.observed_at.is_some());
        assert_eq!(
            sent.operator.phase,
            crate::operator::OperatorPhase::NotInstalled
        );
    }
}
