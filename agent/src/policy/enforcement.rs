//! Proves, at an interval and after every write of the admission objects, that the API server
//! refuses what the held policy refuses (`tenantflux_core::policy::enforcement`: a server-side
//! dry run of a canary FluxInstance), and reports the verdict in `status`, `policy show`, the
//! metric `tenantflux_agent_policy_enforced`, Events `PolicyNotEnforced`/`PolicyEnforced` on
//! ConfigMap `tenantflux-policy`, and so in `fleet status`.
//!
//! It also checks, at start and at an interval, that the agent still has every permission that
//! enforcing and watching the policy takes (SelfSubjectAccessReview), and names each one it
//! lacks: a tenant who narrows ClusterRole `tenantflux-agent` is reported, not only logged.

use std::{sync::Arc, time::Duration};

use k8s_openapi::api::{
    authorization::v1::{ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec},
    core::v1::ObjectReference,
};
use kube::{
    Api, Client,
    api::{DynamicObject, Patch, PatchParams, PostParams},
    runtime::events::{Event as KubeEvent, EventType, Recorder},
};
use tenantflux_core::{
    FIELD_MANAGER,
    policy::enforcement::{Change, Probe, Tracker, canary, judge},
    text::chain,
};
use tokio_util::sync::CancellationToken;

use super::{
    admission::RECORD_NAME,
    store::{HIGHEST_NAME, KEYRING_HIGHEST_NAME, KEYRING_NAME, PolicyStore, STORE_NAME},
};
use crate::{
    flux_instance_resource,
    reconcile::{Next, Wake},
};

/// How soon a failed proof is repeated, so that failures for the settle time decide (or a refusal clears
/// it) well before the next interval.
const RECHECK: Duration = Duration::from_secs(2);
/// The policy store's condition while the agent lacks permissions.
const PERMISSIONS_CONDITION: &str = "permissions";

#[derive(Clone, Debug)]
pub struct EnforcementConfig {
    /// How often enforcement is proven (`--enforcement-check-interval`).
    pub interval: Duration,
    /// How often the agent checks its own permissions (`--permissions-check-interval`).
    pub permissions_interval: Duration,
    /// Where FluxInstance `flux` lives (the canary's namespace).
    pub operator_namespace: String,
}

/// Proves enforcement and checks permissions until the shutdown.
pub async fn run(
    client: Client,
    store: Arc<PolicyStore>,
    config: EnforcementConfig,
    shutdown: CancellationToken,
) {
    let instances = Api::<DynamicObject>::namespaced_with(
        client.clone(),
        &config.operator_namespace,
        &flux_instance_resource(),
    );
    let body = canary(
        &flux_instance_resource().api_version,
        &config.operator_namespace,
    );
    let rechecks = futures::stream::unfold(store.clone(), |store| async move {
        store.recheck_requested().await;
        Some(((), store))
    });
    let prover = Prover {
        held: store.subscribe(),
        recorder: crate::recorder(&client),
        store_ref: crate::configmap_reference(store.namespace(), STORE_NAME),
        needed: needed(store.namespace(), &config.operator_namespace),
        client,
        store,
        config,
        instances,
        body,
        tracker: Tracker::default(),
        announced: None,
        permissions_at: tokio::time::Instant::now(),
    };
    crate::reconcile::run(prover, rechecks, &shutdown).await;
}

/// The enforcement loop: the proof's verdicts so far, and when the permissions are due.
struct Prover {
    client: Client,
    store: Arc<PolicyStore>,
    held: tokio::sync::watch::Receiver<super::store::Held>,
    config: EnforcementConfig,
    instances: Api<DynamicObject>,
    /// The canary FluxInstance.
    body: serde_json::Value,
    recorder: Recorder,
    store_ref: ObjectReference,
    needed: Vec<Needed>,
    tracker: Tracker,
    /// The verdict the last Event announced.
    announced: Option<bool>,
    /// When the permissions are checked next.
    permissions_at: tokio::time::Instant,
}

impl crate::reconcile::Pass for Prover {
    type Event = ();

    /// Checks the permissions when due, and proves enforcement of the policy held (at once,
    /// at the interval, or again soon while a verdict is pending).
    async fn pass(&mut self, _: Wake<()>) -> Next {
        let store = &self.store;
        if tokio::time::Instant::now() >= self.permissions_at {
            let lacking = lacking(&self.client, &self.needed).await;
            store.set_condition(PERMISSIONS_CONDITION, lacking);
            self.permissions_at = tokio::time::Instant::now() + self.config.permissions_interval;
        }
        let generation = self
            .held
            .borrow()
            .accepted
            .as_ref()
            .map(|a| a.policy.generation());
        let wait = match generation {
            None => {
                self.tracker.reset();
                self.announced = None;
                store.set_enforcement(None);
                self.config.interval
            }
            Some(generation) => {
                let probe = prove(&self.instances, &self.body).await;
                let now = tenantflux_core::policy::signing::now();
                let change = self.tracker.observe(probe, now);
                if let Some(announcement) = announcement(
                    change,
                    &mut self.announced,
                    generation,
                    &self.config.operator_namespace,
                ) {
                    announce(&self.recorder, &self.store_ref, generation, announcement).await;
                }
                store.set_enforcement(self.tracker.verdict().cloned());
                if self.tracker.pending() {
                    RECHECK
                } else {
                    self.config.interval
                }
            }
        };
        Next::At(self.permissions_at.min(tokio::time::Instant::now() + wait))
    }
}

/// An Event to announce a verdict with: (type, reason, note).
type Announcement = (EventType, &'static str, String);

/// What a change of the verdict is announced as, given the verdict the last Event announced
/// (`announced`, updated): enforced once, again only after it was not; not enforced each time.
/// FluxInstances no longer served are only logged.
fn announcement(
    change: Option<Change>,
    announced: &mut Option<bool>,
    generation: u64,
    namespace: &str,
) -> Option<Announcement> {
    match change {
        // Proven again after a blip without a verdict (an API server restarting serves no
        // CRDs for a moment): nothing new to say.
        Some(Change::Enforced) if *announced == Some(true) => None,
        Some(Change::Enforced) => {
            *announced = Some(true);
            Some((
                EventType::Normal,
                "PolicyEnforced",
                format!(
                    "the API server enforces policy generation {generation}: a FluxInstance that it refuses was refused in a dry run"
                ),
            ))
        }
        Some(Change::NotEnforced(why)) => {
            *announced = Some(false);
            Some((
                EventType::Warning,
                "PolicyNotEnforced",
                format!("policy generation {generation} is NOT ENFORCED by the API server: {why}"),
            ))
        }
        Some(Change::NotServed) => {
            tracing::info!(
                generation,
                namespace = %namespace,
                "the API server serves no FluxInstances there: enforcement is proven again once it does"
            );
            None
        }
        None => None,
    }
}

/// Logs the announcement and records it as an Event on the policy's ConfigMap.
async fn announce(
    recorder: &Recorder,
    store_ref: &ObjectReference,
    generation: u64,
    (type_, reason, note): Announcement,
) {
    match type_ {
        EventType::Warning => tracing::warn!(generation, "{note}"),
        EventType::Normal => tracing::info!(generation, "{note}"),
    }
    let event = KubeEvent {
        type_,
        reason: reason.into(),
        note: Some(note),
        action: "Prove".into(),
        secondary: None,
    };
    if let Err(err) = recorder.publish(&event, store_ref).await {
        tracing::warn!(error = %err, "recording an Event on ConfigMap {STORE_NAME} failed");
    }
}

/// One dry run of the canary: server-side apply with `dryRun=All` (forced, so that no field
/// another manager owns turns it into a conflict before admission judges it). Nothing is
/// stored either way.
async fn prove(instances: &Api<DynamicObject>, body: &serde_json::Value) -> Probe {
    let params = PatchParams::apply(FIELD_MANAGER).force().dry_run();
    match instances.patch("flux", &params, &Patch::Apply(body)).await {
        Ok(_) => judge(None),
        Err(kube::Error::Api(status)) => judge(Some((status.code, &status.message))),
        // No answer at all: the API server admits nothing meanwhile either.
        Err(err) => {
            tracing::debug!(error = %chain(&err), "the enforcement proof got no answer");
            Probe::Unanswered
        }
    }
}

/// One permission the agent's policy work takes.
struct Needed {
    group: &'static str,
    resource: &'static str,
    verb: &'static str,
    namespace: Option<String>,
    name: Option<&'static str>,
    /// What the agent cannot do without it.
    for_what: &'static str,
}

/// Every permission that enforcing and watching the policy takes, as the chart grants them.
fn needed(agent: &str, operator: &str) -> Vec<Needed> {
    let admission = "admissionregistration.k8s.io";
    let mut needed = Vec::new();
    for resource in [
        "validatingadmissionpolicies",
        "validatingadmissionpolicybindings",
    ] {
        for verb in ["get", "list", "watch", "create", "patch"] {
            needed.push(Needed {
                group: admission,
                resource,
                verb,
                namespace: None,
                name: Some(tenantflux_core::policy::admission::NAME),
                for_what: "keep the policy in the API server",
            });
        }
    }
    for verb in ["get", "list", "watch", "patch"] {
        needed.push(Needed {
            group: "fluxcd.controlplane.io",
            resource: "fluxinstances",
            verb,
            namespace: Some(operator.to_owned()),
            name: Some("flux"),
            for_what: "judge the FluxInstance and prove enforcement",
        });
    }
    for verb in ["get", "list", "watch"] {
        needed.push(Needed {
            group: "",
            resource: "configmaps",
            verb,
            namespace: Some(agent.to_owned()),
            name: None,
            for_what: "read the stored policy",
        });
    }
    for name in [
        STORE_NAME,
        HIGHEST_NAME,
        KEYRING_NAME,
        KEYRING_HIGHEST_NAME,
        RECORD_NAME,
    ] {
        needed.push(Needed {
            group: "",
            resource: "configmaps",
            verb: "patch",
            namespace: Some(agent.to_owned()),
            name: Some(name),
            for_what: "restore the stored policy and its records",
        });
    }
    needed.push(Needed {
        group: "events.k8s.io",
        resource: "events",
        verb: "create",
        namespace: Some(agent.to_owned()),
        name: None,
        for_what: "report tampers and enforcement as Events",
    });
    needed
}

/// The permissions the agent lacks, as one problem naming each; `None` when it has them all.
/// A review that fails is itself the problem (the agent cannot tell).
async fn lacking(client: &Client, needed: &[Needed]) -> Option<String> {
    let reviews = Api::<SelfSubjectAccessReview>::all(client.clone());
    let mut missing = Vec::new();
    for need in needed {
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    group: Some(need.group.to_owned()),
                    resource: Some(need.resource.to_owned()),
                    verb: Some(need.verb.to_owned()),
                    namespace: need.namespace.clone(),
                    name: need.name.map(str::to_owned),
                    ..ResourceAttributes::default()
                }),
                ..SelfSubjectAccessReviewSpec::default()
            },
            ..SelfSubjectAccessReview::default()
        };
        match reviews.create(&PostParams::default(), &review).await {
            Ok(answer) if answer.status.as_ref().is_some_and(|s| s.allowed) => {}
            Ok(_) => missing.push(need),
            Err(err) => {
                return Some(format!(
                    "the agent cannot check its own permissions (SelfSubjectAccessReview): {}",
                    chain(&err)
                ));
            }
        }
    }
    if missing.is_empty() {
        return None;
    }
    let names: Vec<String> = missing
        .iter()
        .map(|n| {
            let resource = match n.group {
                "" => n.resource.to_owned(),
                group => format!("{}.{group}", n.resource),
            };
            let name = n.name.map(|n| format!(" {n}")).unwrap_or_default();
            let place = n
                .namespace
                .as_deref()
                .map(|ns| format!(" in namespace {ns}"))
                .unwrap_or_default();
            format!("{} {resource}{name}{place} (to {})", n.verb, n.for_what)
        })
        .collect();
    Some(format!(
        "the agent lacks permissions its policy work needs (ClusterRole and Role tenantflux-agent): {}",
        names.join("; ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enforcement_is_announced_once_and_its_loss_each_time() {
        let mut announced = None;
        let mut announce = |change| announcement(change, &mut announced, 7, "flux-system");
        let enforced = announce(Some(Change::Enforced)).unwrap();
        assert_eq!(enforced.0, EventType::Normal);
        assert_eq!(enforced.1, "PolicyEnforced");
        assert_eq!(
            enforced.2,
            "the API server enforces policy generation 7: a FluxInstance that it refuses was refused in a dry run"
        );
        assert_eq!(announce(Some(Change::Enforced)), None);
        assert_eq!(announce(Some(Change::NotServed)), None);
        assert_eq!(announce(None), None);
        assert_eq!(
            announce(Some(Change::NotEnforced("no binding".into()))),
            Some((
                EventType::Warning,
                "PolicyNotEnforced",
                "policy generation 7 is NOT ENFORCED by the API server: no binding".into()
            ))
        );
        assert_eq!(
            announce(Some(Change::Enforced)).map(|a| a.1),
            Some("PolicyEnforced")
        );
    }
}
