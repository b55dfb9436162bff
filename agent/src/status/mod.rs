//! Status from memory: watchers keep the flux-operator Deployment, the FluxInstance and the
//! FluxReport in memory, [`derive`] turns them into a [`Status`] report, and the latest one sits
//! in a `tokio::sync::watch` channel that the RPCs read.

mod derive;
mod readiness;

use std::{
    sync::Arc,
    time::{Duration, SystemTime},
};

use futures::{Stream, StreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use kube::{
    Api, Client,
    api::{DynamicObject, Patch, PatchParams},
    runtime::{
        WatchStreamExt,
        watcher::{self, Event},
    },
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

use crate::{
    flux_instance_resource, flux_report_resource, operator::InstallState, policy::store::Held,
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

/// What other tasks of the agent report into the status.
pub struct Inputs {
    /// The agent's own flux-operator install, when it installs one.
    pub install: Option<watch::Receiver<InstallState>>,
    pub policy: watch::Receiver<Held>,
    /// What puts an adoption's objects at risk from Helm (`adopt::watch_marks`).
    pub marks: watch::Receiver<Option<String>>,
}

/// Watches what the status reports and publishes each changed status on `tx`, until the
/// shutdown. Watch errors are retried with backoff and logged once per change of error.
pub async fn run(
    client: Client,
    facts: AgentFacts,
    tx: watch::Sender<Status>,
    readiness: Arc<Readiness>,
    inputs: Inputs,
    shutdown: CancellationToken,
) {
    let Inputs {
        install,
        mut policy,
        mut marks,
    } = inputs;
    let ns = facts.operator_namespace.clone();
    let by_name = |name: &str| watcher::Config::default().fields(&format!("metadata.name={name}"));
    let operator = watcher(
        Api::<Deployment>::namespaced(client.clone(), &ns),
        by_name(OPERATOR_DEPLOYMENT),
    )
    .map(|e| {
        (
            Source::Operator,
            e.map(|e| map_event(e, |d| Object::Operator(Box::new(d)))),
        )
    });
    let instance = watcher(
        Api::<DynamicObject>::namespaced_with(client.clone(), &ns, &flux_instance_resource()),
        by_name(INSTANCE_NAME),
    )
    .map(|e| {
        (
            Source::Instance,
            e.map(|e| map_event(e, |o| Object::Dynamic(Box::new(o)))),
        )
    });
    let report = watcher(
        Api::<DynamicObject>::namespaced_with(client.clone(), &ns, &flux_report_resource()),
        by_name(INSTANCE_NAME),
    )
    .map(|e| {
        (
            Source::Report,
            e.map(|e| map_event(e, |o| Object::Dynamic(Box::new(o)))),
        )
    });
    let mut updates = std::pin::pin!(futures::stream::select(
        operator,
        futures::stream::select(instance, report)
    ));

    let mut state = Tracker::default();
    let mut install = install;
    if let Some(rx) = &mut install {
        state.observed.install = Some(rx.borrow_and_update().clone());
    }
    state.observed.policy = policy.borrow_and_update().clone();
    let mut next_version_check = tokio::time::Instant::now();
    let mut report_check = tokio::time::interval(REPORT_REFRESH);
    report_check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep_until(next_version_check) => {
                let answer = tokio::time::timeout(VERSION_TIMEOUT, client.apiserver_version()).await;
                let delay = match answer.unwrap_or_else(|_| Err(version_timeout())) {
                    Ok(info) => {
                        readiness.set_kube_api_answered();
                        state.observed.kubernetes_version = Some(info.git_version);
                        state.clear_problem(Source::KubernetesApi);
                        VERSION_REFRESH
                    }
                    Err(err) => {
                        let problem = format!("the Kubernetes API server did not answer: {err}");
                        readiness.set_kube_api_failed(err.to_string());
                        state.set_problem(Source::KubernetesApi, problem);
                        VERSION_RETRY
                    }
                };
                next_version_check = tokio::time::Instant::now() + delay;
            }
            Ok(()) = async {
                match &mut install {
                    Some(rx) => rx.changed().await,
                    None => futures::future::pending().await,
                }
            } => {
                state.observed.install = install.as_mut().map(|rx| rx.borrow_and_update().clone());
            }
            Ok(()) = policy.changed() => {
                state.observed.policy = policy.borrow_and_update().clone();
            }
            Ok(()) = marks.changed() => {
                state.observed.adoption = marks.borrow_and_update().clone();
            }
            _ = report_check.tick() => {
                if report_lags(&state.observed) {
                    request_report_refresh(&client, &ns).await;
                }
                continue;
            }
            Some((source, update)) = updates.next() => match update {
                Ok(event) => state.apply(source, event),
                Err(err) => state.failed(source, &facts.operator_namespace, &err),
            },
        }
        publish(&tx, derive(&facts, &state.observed));
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

/// A watcher on one object of `api`, with the agent's watch backoff between failures.
fn watcher<K>(
    api: Api<K>,
    config: watcher::Config,
) -> impl Stream<Item = Result<Event<K>, watcher::Error>> + Send
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    watcher::watcher(api, config).backoff(crate::watch_backoff())
}

fn map_event<K>(event: Event<K>, f: impl FnOnce(K) -> Object) -> Event<Object> {
    match event {
        Event::Apply(k) => Event::Apply(f(k)),
        Event::Delete(k) => Event::Delete(f(k)),
        Event::Init => Event::Init,
        Event::InitApply(k) => Event::InitApply(f(k)),
        Event::InitDone => Event::InitDone,
    }
}

/// The two kinds of object the watchers deliver.
enum Object {
    Operator(Box<Deployment>),
    Dynamic(Box<DynamicObject>),
}

/// Folds watch events into [`Observed`], buffering each re-list until it completes.
#[derive(Default)]
struct Tracker {
    observed: Observed,
    relisting: Vec<(Source, Option<Object>)>,
}

impl Tracker {
    fn apply(&mut self, source: Source, event: Event<Object>) {
        // `Init` comes before each (re-)list, so it says nothing about whether the list works.
        if !matches!(event, Event::Init) {
            self.clear_problem(source);
        }
        match event {
            Event::Init => {
                self.relisting.retain(|(s, _)| *s != source);
                self.relisting.push((source, None));
            }
            Event::InitApply(object) => {
                if let Some(slot) = self.relisting.iter_mut().find(|(s, _)| *s == source) {
                    slot.1 = Some(object);
                }
            }
            Event::InitDone => {
                let listed = self
                    .relisting
                    .iter()
                    .position(|(s, _)| *s == source)
                    .and_then(|i| self.relisting.swap_remove(i).1);
                self.set(source, listed);
            }
            Event::Apply(object) => self.set(source, Some(object)),
            Event::Delete(_) => self.set(source, None),
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

    #[test]
    fn relist_replaces_the_object_only_when_done() {
        let mut tracker = Tracker::default();
        tracker.apply(Source::Operator, Event::Init);
        tracker.apply(
            Source::Operator,
            Event::InitApply(Object::Operator(Box::new(deployment()))),
        );
        assert!(!tracker.observed.operator.synced, "not before InitDone");
        tracker.apply(Source::Operator, Event::InitDone);
        assert!(tracker.observed.operator.object.is_some());

        tracker.apply(Source::Operator, Event::Init);
        tracker.apply(Source::Operator, Event::InitDone);
        assert!(tracker.observed.operator.synced);
        assert!(
            tracker.observed.operator.object.is_none(),
            "gone from the re-list"
        );

        tracker.apply(
            Source::Operator,
            Event::Apply(Object::Operator(Box::new(deployment()))),
        );
        assert!(tracker.observed.operator.object.is_some());
        tracker.apply(
            Source::Operator,
            Event::Delete(Object::Operator(Box::new(deployment()))),
        );
        assert!(tracker.observed.operator.object.is_none());
    }

    #[test]
    fn missing_crd_means_absent_instance_and_one_problem_until_recovery() {
        let mut tracker = Tracker::default();
        tracker.failed(Source::Instance, "flux-system", &not_found());
        tracker.failed(Source::Instance, "flux-system", &not_found());
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

        tracker.apply(Source::Instance, Event::Init);
        assert_eq!(
            tracker.observed.problems.len(),
            1,
            "Init precedes every list attempt"
        );
        tracker.apply(Source::Instance, Event::InitDone);
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
