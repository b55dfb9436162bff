//! Keeps the API server's own check of FluxInstances in step with the held policy: the
//! ValidatingAdmissionPolicy and binding rendered by `tenantflux_core::policy::admission`,
//! written when a policy is accepted or loaded at start, and re-rendered hourly so that an
//! upgrade deadline takes effect on its date. Once written, they refuse a non-compliant
//! FluxInstance whether or not the agent runs.
//!
//! The tenant is usually cluster-admin, so both objects are watched: one deleted, or whose spec
//! differs in any field from what the agent wrote (a field another writer added included, such
//! as a `matchConditions` entry that matches nothing or a `namespaceSelector` on the binding),
//! is put back whole, and the tamper is reported as a policy problem (`status`, `policy
//! show`) and as an Event on the policy's ConfigMap.
//!
//! What the agent last wrote of both is kept in ConfigMap `tenantflux-admission`, so that a
//! change made while the agent was not running is reported at its next start too (it is
//! undone either way: the agent rewrites both objects whole when it starts). A cluster-admin
//! who edits that record to match their change can still hide it: the record is the agent's
//! memory, not a proof.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use futures::StreamExt;
use k8s_openapi::api::{
    admissionregistration::v1::{ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding},
    core::v1::{ConfigMap, ObjectReference},
};
use kube::{
    Api, Client, Resource,
    api::{ApiResource, DynamicObject, Patch, PatchParams},
    runtime::{
        WatchStreamExt,
        events::{Event as KubeEvent, EventType, Recorder},
        watcher::{self, Event},
    },
};
use serde_json::{Value, json};
use tenantflux_core::{
    FIELD_MANAGER, MANAGED_BY_LABEL,
    policy::{
        admission::{NAME, Rendered, drift, merge_patch, render},
        today,
    },
    text::chain,
};
use tokio_stream::wrappers::WatchStream;
use tokio_util::sync::CancellationToken;

use super::store::{Held, PolicyStore, STORE_NAME};
use crate::reconcile::{Next, Retry, Wake};

/// How often the policy is re-rendered for the calendar (upgrade deadlines).
const RERENDER: Duration = Duration::from_secs(3600);
/// How soon a failed write is retried.
const RETRY: Duration = Duration::from_secs(15);
/// The ConfigMap (in the agent's namespace) of what the agent last wrote of both objects.
pub const RECORD_NAME: &str = "tenantflux-admission";

#[derive(Debug, thiserror::Error)]
#[error("writing {kind} {NAME} (policy generation {generation})")]
pub struct WriteError {
    kind: &'static str,
    generation: u64,
    #[source]
    source: Box<kube::Error>,
}

/// One of the two objects: what the watch shows of it, and what the agent last wrote.
struct Target {
    kind: &'static str,
    /// Its keys in the record: `KEY.rendered`, `KEY.spec`.
    key: &'static str,
    /// `written` came from the record of an earlier run, not from a write of this one.
    from_record: bool,
    api: Api<DynamicObject>,
    /// The live object, once the watch has listed it (`None` inside: there is none).
    live: Option<Option<DynamicObject>>,
    /// The object being re-listed, until the list is done.
    relisting: Option<DynamicObject>,
    /// The render last written, and the spec the API server stored for it (with its
    /// defaults), which the live spec must equal.
    written: Option<(Value, Value)>,
    /// The resourceVersion of the latest change seen, a deletion included: what an Event
    /// about a tamper points at, so that each tamper gets an Event of its own.
    seen: Option<String>,
}

impl Target {
    fn new<K: Resource<DynamicType = ()> + k8s_openapi::Resource>(
        client: &Client,
        key: &'static str,
    ) -> Self {
        let resource = ApiResource::erase::<K>(&());
        Self {
            kind: K::KIND,
            key,
            from_record: false,
            api: Api::all_with(client.clone(), &resource),
            live: None,
            relisting: None,
            written: None,
            seen: None,
        }
    }

    fn observe(&mut self, event: Event<DynamicObject>) {
        if let Event::InitApply(o) | Event::Apply(o) | Event::Delete(o) = &event {
            self.seen.clone_from(&o.metadata.resource_version);
        }
        match event {
            Event::Init => self.relisting = None,
            Event::InitApply(object) => self.relisting = Some(object),
            Event::InitDone => self.live = Some(self.relisting.take()),
            Event::Apply(object) => self.live = Some(Some(object)),
            Event::Delete(_) => self.live = Some(None),
        }
    }

    /// What was done to the object since the agent wrote `want`, if anything: `None` while it
    /// is as written, or before the agent wrote it.
    fn tamper(&self, want: &Value) -> Option<String> {
        let (rendered, spec) = self.written.as_ref()?;
        if rendered != want {
            return None;
        }
        Some(match self.live.as_ref()? {
            None => "was deleted".to_owned(),
            Some(live) => {
                let fields = drift(spec, live.data.get("spec").unwrap_or(&Value::Null));
                if fields.is_empty() {
                    return None;
                }
                format!("was changed ({})", fields.join(", "))
            }
        })
    }

    /// Takes what an earlier run wrote from the record, unless this run wrote already.
    fn remember(&mut self, record: &BTreeMap<String, String>) {
        if self.written.is_some() {
            return;
        }
        let field = |name: &str| {
            record
                .get(&format!("{}.{name}", self.key))
                .and_then(|text| serde_json::from_str::<Value>(text).ok())
        };
        if let (Some(rendered), Some(spec)) = (field("rendered"), field("spec")) {
            self.written = Some((rendered, spec));
            self.from_record = true;
        }
    }

    /// Whether the watch shows the object, carrying the agent's label.
    fn ours(&self) -> bool {
        self.live
            .as_ref()
            .and_then(Option::as_ref)
            .is_some_and(managed_by_agent)
    }

    /// Its entries of the record, once written.
    fn record_entries(&self) -> Vec<(String, String)> {
        let Some((rendered, spec)) = &self.written else {
            return Vec::new();
        };
        vec![
            (format!("{}.rendered", self.key), rendered.to_string()),
            (format!("{}.spec", self.key), spec.to_string()),
        ]
    }

    /// The object as an Event's related object, at the change last seen.
    fn reference(&self) -> ObjectReference {
        ObjectReference {
            api_version: Some("admissionregistration.k8s.io/v1".into()),
            kind: Some(self.kind.into()),
            name: Some(NAME.into()),
            resource_version: self.seen.clone(),
            ..ObjectReference::default()
        }
    }

    /// Whether the object must be written: a new render, or it differs from the last write.
    /// At start (`written` from the record) it is rewritten whole in any case, as before
    /// there was a record.
    fn needs_write(&self, want: &Value) -> bool {
        self.live.is_some()
            && (self.from_record
                || self.written.as_ref().is_none_or(|(r, _)| r != want)
                || self.tamper(want).is_some())
    }

    /// Writes `want` whole: created by server-side apply when there is none (apply names the
    /// object, so the agent's RBAC limits even the create to it), otherwise put back by a merge
    /// patch at the live resourceVersion that also removes every field another writer added.
    /// `Ok(false)`: the object changed meanwhile; its next watch event decides again.
    async fn write(&mut self, want: &Value, generation: u64) -> Result<bool, WriteError> {
        let live = self.live.clone().flatten();
        let written = match &live {
            None => {
                let params = PatchParams::apply(FIELD_MANAGER).force();
                self.api.patch(NAME, &params, &Patch::Apply(want)).await
            }
            Some(live) => {
                let spec = live.data.get("spec").unwrap_or(&Value::Null);
                let patch = json!({
                    "metadata": {
                        "resourceVersion": live.metadata.resource_version,
                        "labels": want["metadata"]["labels"],
                        "annotations": want["metadata"]["annotations"],
                    },
                    "spec": merge_patch(spec, &want["spec"]),
                });
                let params = PatchParams {
                    field_manager: Some(FIELD_MANAGER.to_owned()),
                    ..PatchParams::default()
                };
                self.api.patch(NAME, &params, &Patch::Merge(&patch)).await
            }
        };
        match written {
            Ok(object) => {
                let spec = object.data.get("spec").cloned().unwrap_or(Value::Null);
                self.written = Some((want.clone(), spec));
                self.from_record = false;
                self.live = Some(Some(object));
                Ok(true)
            }
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
            Err(source) => Err(WriteError {
                kind: self.kind,
                generation,
                source: Box::new(source),
            }),
        }
    }
}

/// The policy store's condition while a write of either object fails.
const WRITE_CONDITION: &str = "admission-write";

/// Takes one event of an object's watch; a failing watch is a condition of the policy (the
/// agent cannot see a tamper), over once the watch answers again.
fn watched(
    store: &PolicyStore,
    target: &mut Target,
    event: Result<Event<DynamicObject>, watcher::Error>,
) {
    let condition = target.kind;
    match event {
        Ok(event) => {
            target.observe(event);
            store.set_condition(condition, None);
        }
        Err(err) => store.set_condition(
            condition,
            Some(format!(
                "the agent cannot watch {} {NAME}, so it would not see it deleted or changed: {}",
                target.kind,
                chain(&err)
            )),
        ),
    }
}

/// What the loop reports through and keeps its record in.
struct Keeper<'a> {
    store: &'a PolicyStore,
    /// ConfigMap [`RECORD_NAME`]'s API, in the agent's namespace.
    records: Api<ConfigMap>,
    recorder: Recorder,
    /// The policy's ConfigMap, which tamper Events are about.
    store_ref: ObjectReference,
}

/// What one round of writes did.
struct Writes {
    /// At least one object was written.
    wrote: bool,
    /// A write failed, which stopped the round.
    failed: bool,
}

/// Writes the rendered policy for every policy the store holds and keeps it as written, until
/// the shutdown.
pub async fn run(client: Client, store: Arc<PolicyStore>, shutdown: CancellationToken) {
    let held = store.subscribe();
    let policy = Target::new::<ValidatingAdmissionPolicy>(&client, "policy");
    let binding = Target::new::<ValidatingAdmissionPolicyBinding>(&client, "binding");
    let by_name = || watcher::Config::default().fields(&format!("metadata.name={NAME}"));
    let policies = watcher::watcher(policy.api.clone(), by_name()).backoff(crate::watch_backoff());
    let bindings = watcher::watcher(binding.api.clone(), by_name()).backoff(crate::watch_backoff());
    let changes = futures::stream::select_all([
        WatchStream::from_changes(held.clone())
            .map(|_| Change::Held)
            // The store is gone: so is what to write.
            .chain(futures::stream::once(async { Change::StoreGone }))
            .boxed(),
        policies.map(Change::Policy).boxed(),
        bindings.map(Change::Binding).boxed(),
    ]);
    let keeper = Keeper {
        store: &store,
        records: Api::<ConfigMap>::namespaced(client.clone(), store.namespace()),
        recorder: crate::recorder(&client),
        store_ref: crate::configmap_reference(store.namespace(), STORE_NAME),
    };
    let admission = Admission {
        keeper,
        held,
        policy,
        binding,
        record_read: false,
        rendered: None,
        next_render: tokio::time::Instant::now() + RERENDER,
    };
    crate::reconcile::run(admission, changes, &shutdown).await;
}

/// What wakes the admission keeper.
enum Change {
    /// The policy the store holds.
    Held,
    /// The policy store stopped.
    StoreGone,
    /// The ValidatingAdmissionPolicy, as its watch shows it.
    Policy(Result<Event<DynamicObject>, watcher::Error>),
    /// The ValidatingAdmissionPolicyBinding, as its watch shows it.
    Binding(Result<Event<DynamicObject>, watcher::Error>),
}

/// The admission keeper: both objects as watched and as last written, and the render they
/// must equal.
struct Admission<'a> {
    keeper: Keeper<'a>,
    held: tokio::sync::watch::Receiver<Held>,
    policy: Target,
    binding: Target,
    /// What the last run wrote has been read from the record.
    record_read: bool,
    /// The render of the held policy and its generation; rendered again when the policy
    /// changes and every [`RERENDER`] (a deadline in the policy may have passed).
    rendered: Option<(Rendered, u64)>,
    next_render: tokio::time::Instant,
}

impl crate::reconcile::Pass for Admission<'_> {
    type Event = Change;

    /// Takes in what changed, then writes what differs from the render.
    async fn pass(&mut self, wake: Wake<Change>) -> Next {
        match wake {
            Wake::Start => {}
            Wake::Deadline => {
                let now = tokio::time::Instant::now();
                if now >= self.next_render {
                    self.rendered = None;
                    self.next_render = now + RERENDER;
                }
            }
            Wake::Event(Change::Held) => self.rendered = None,
            Wake::Event(Change::StoreGone) => return Next::Stop,
            Wake::Event(Change::Policy(event)) => {
                watched(self.keeper.store, &mut self.policy, event)
            }
            Wake::Event(Change::Binding(event)) => {
                watched(self.keeper.store, &mut self.binding, event)
            }
        }
        if self.write().await {
            Next::At(self.next_render)
        } else {
            Next::Retry(Retry::every(RETRY))
        }
    }
}

impl Admission<'_> {
    /// Writes what differs from the render of the policy held: `false` when a read or a write
    /// failed, to be tried again.
    async fn write(&mut self) -> bool {
        if self.rendered.is_none() {
            let accepted = self.held.borrow_and_update().accepted.clone();
            self.rendered = accepted.map(|a| (render(&a.policy, today()), a.policy.generation()));
        }
        let Some((want, generation)) = &self.rendered else {
            return true;
        };
        let (keeper, policy, binding) = (&self.keeper, &mut self.policy, &mut self.binding);
        // Before the first write of this run: what the last run wrote.
        if !self.record_read && (policy.live.is_some() || binding.live.is_some()) {
            if !keeper.read_record(policy, binding, *generation).await {
                return false;
            }
            self.record_read = true;
        }
        let writes = keeper.write(policy, binding, want, *generation).await;
        keeper.after_writes(policy, binding, &writes).await;
        !writes.failed
    }
}

impl Keeper<'_> {
    /// Takes what the last run wrote from the record into both targets. A record missing while
    /// objects of the agent's exist is reported as a tamper, and the intent is written first.
    /// `false`: reading the record or writing the intent failed (logged); try again later.
    async fn read_record(
        &self,
        policy: &mut Target,
        binding: &mut Target,
        generation: u64,
    ) -> bool {
        let map = match self.records.get_opt(RECORD_NAME).await {
            Ok(map) => map,
            Err(err) => {
                tracing::warn!(error = %err, "reading ConfigMap {RECORD_NAME}; retrying");
                return false;
            }
        };
        // The record is written before the objects, so objects of the agent's without a
        // record mean the record was deleted, which hides what was done to them meanwhile.
        if map.is_none() && (policy.ours() || binding.ours()) {
            let problem = format!(
                "ConfigMap {}/{RECORD_NAME} (what the agent last wrote of the admission objects) was deleted by someone other than the agent while it was not running, so a change to them meanwhile cannot be told; the agent rewrote both from policy generation {generation}",
                self.store.namespace()
            );
            let record = crate::configmap_reference(self.store.namespace(), RECORD_NAME);
            self.report_tamper(problem, record).await;
        }
        if map.is_none() {
            // The intent first: a kill between it and the objects is no tamper.
            let intent = [("generation".to_owned(), generation.to_string())].into();
            if let Err(err) = crate::apply_record(&self.records, RECORD_NAME, intent).await {
                tracing::warn!(error = %err, "writing ConfigMap {RECORD_NAME}; retrying");
                return false;
            }
        }
        let data = map.and_then(|m| m.data).unwrap_or_default();
        policy.remember(&data);
        binding.remember(&data);
        true
    }

    /// Writes each object that needs it, the policy first: a binding to a policy the server
    /// does not have yet enforces nothing. A tamper undone is reported; a write that fails
    /// stops the round and becomes the store's write condition.
    async fn write(
        &self,
        policy: &mut Target,
        binding: &mut Target,
        want: &Rendered,
        generation: u64,
    ) -> Writes {
        let mut writes = Writes {
            wrote: false,
            failed: false,
        };
        for (target, want) in [(policy, &want.policy), (binding, &want.binding)] {
            if !target.needs_write(want) {
                continue;
            }
            let tamper = target.tamper(want);
            // A tamper seen against the record happened while the agent was not running.
            let while_stopped = target.from_record;
            match target.write(want, generation).await {
                Ok(false) => {}
                Ok(true) => {
                    writes.wrote = true;
                    self.written(target, tamper, while_stopped, generation)
                        .await;
                }
                Err(err) => {
                    self.store.set_condition(
                        WRITE_CONDITION,
                        Some(format!(
                            "the agent cannot put the policy into the API server ({}); it retries every {}s",
                            chain(&err),
                            RETRY.as_secs()
                        )),
                    );
                    writes.failed = true;
                    break;
                }
            }
        }
        writes
    }

    /// After a write of `target`: logged as enforced, or the tamper it undid reported.
    async fn written(
        &self,
        target: &Target,
        tamper: Option<String>,
        while_stopped: bool,
        generation: u64,
    ) {
        match tamper {
            None => {
                tracing::info!(
                    generation,
                    "{} {NAME} applied: the API server enforces the policy",
                    target.kind
                );
                crate::failpoint("admission-applied").await;
            }
            Some(what) => {
                let problem = tamper_problem(target.kind, &what, while_stopped, generation);
                self.report_tamper(problem, target.reference()).await;
            }
        }
    }

    /// The write condition cleared unless a write failed; after a write, enforcement proven
    /// again (written is not yet enforced: the canary proves it) and the record updated.
    async fn after_writes(&self, policy: &Target, binding: &Target, writes: &Writes) {
        if !writes.failed {
            self.store.set_condition(WRITE_CONDITION, None);
        }
        if writes.wrote {
            self.store.recheck_enforcement();
            let data = policy
                .record_entries()
                .into_iter()
                .chain(binding.record_entries())
                .collect();
            if let Err(err) = crate::apply_record(&self.records, RECORD_NAME, data).await {
                tracing::warn!(error = %err, "writing ConfigMap {RECORD_NAME}: a change made while the agent is stopped will be undone but not reported");
            }
        }
    }

    /// A tamper the agent undid: a policy problem until the next push, and a Warning Event
    /// `AdmissionPolicyTampered` on the policy's ConfigMap, related to what was tampered with.
    async fn report_tamper(&self, problem: String, tampered: ObjectReference) {
        self.store.report(problem.clone());
        let event = KubeEvent {
            type_: EventType::Warning,
            reason: "AdmissionPolicyTampered".into(),
            note: Some(problem),
            action: "Restore".into(),
            secondary: Some(tampered),
        };
        if let Err(err) = self.recorder.publish(&event, &self.store_ref).await {
            tracing::warn!(error = %err, "recording an Event on ConfigMap {STORE_NAME} failed");
        }
    }
}

/// The problem a tamper undone is reported as: what was done to which object, when the agent
/// was not running if it was seen against the record, and the generation it was restored from.
fn tamper_problem(kind: &str, what: &str, while_stopped: bool, generation: u64) -> String {
    let while_stopped = if while_stopped {
        " while it was not running"
    } else {
        ""
    };
    format!(
        "{kind} {NAME} {what} by someone other than the agent{while_stopped}; the agent restored it from policy generation {generation}"
    )
}

/// Whether `object` carries the agent's managed-by label.
fn managed_by_agent(object: &DynamicObject) -> bool {
    object
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(MANAGED_BY_LABEL))
        .is_some_and(|v| v == FIELD_MANAGER)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tamper_says_what_was_done_and_when() {
        assert_eq!(
            tamper_problem("ValidatingAdmissionPolicy", "was deleted", false, 3),
            format!(
                "ValidatingAdmissionPolicy {NAME} was deleted by someone other than the agent; the agent restored it from policy generation 3"
            )
        );
        assert_eq!(
            tamper_problem(
                "ValidatingAdmissionPolicyBinding",
                "was changed (spec.x)",
                true,
                4
            ),
            format!(
                "ValidatingAdmissionPolicyBinding {NAME} was changed (spec.x) by someone other than the agent while it was not running; the agent restored it from policy generation 4"
            )
        );
    }

    #[test]
    fn the_agents_objects_carry_its_label() {
        let mut object =
            DynamicObject::new(NAME, &ApiResource::erase::<ValidatingAdmissionPolicy>(&()));
        assert!(!managed_by_agent(&object));
        object.metadata.labels = Some([(MANAGED_BY_LABEL.to_owned(), "someone".to_owned())].into());
        assert!(!managed_by_agent(&object));
        object.metadata.labels =
            Some([(MANAGED_BY_LABEL.to_owned(), FIELD_MANAGER.to_owned())].into());
        assert!(managed_by_agent(&object));
    }
}
