//! Safe Flux upgrades: [`plan`] says what a target release would break, from facts read here
//! (CRDs, objects, Kustomization inventories, the FluxInstance, the Kubernetes version, the
//! held policy); [`Upgrader`] runs an upgrade as steps recorded in the cluster ([`state`]):
//! migrate stored versions (rewrite every object at the storage version with bounded
//! concurrency, then trim `status.storedVersions`), bump the FluxInstance's distribution
//! version through the same policy check and server-side apply as `instance apply`, and wait
//! until flux-operator reports it Ready. A restarted agent resumes an unfinished upgrade.
//! `server::upgrade` serves it as `tenantflux.v1.Upgrade`.

pub mod health;
pub mod migrate;
pub mod plan;
pub mod state;

use std::{
    collections::BTreeSet,
    sync::{
        Arc,
        atomic::{AtomicI64, Ordering},
    },
    time::{Duration, Instant},
};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::{
    api::core::v1::ConfigMap,
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    jiff::Timestamp,
};
use kube::{
    Api, Client,
    api::{ApiResource, DynamicObject, ListParams, Patch, PatchParams},
};
use serde_json::{Value, json};
use tenantflux_proto::v1::{ApplyUpgradeRequest, UpgradePlan};
use tokio::sync::{Mutex, watch};

use self::{
    plan::{CrdFacts, Facts, InventoryEntry, ManagedEntry, ObjectRef},
    state::{CrdRecord, Phase, RECORD_KEY, RECORD_NAME, Record, Rollout},
};
use tenantflux_core::{
    flux::{INSTANCE_API_VERSION, INSTANCE_KIND, INSTANCE_NAME},
    policy::today,
    text::chain,
};
use tokio_util::sync::CancellationToken;

use crate::{
    instance::{InstanceError, Instances},
    policy::store::Held,
    workloads::catalog,
};

/// The API groups whose stored versions Flux releases remove.
const TOOLKIT_GROUPS: &[&str] = &[
    "source.toolkit.fluxcd.io",
    "kustomize.toolkit.fluxcd.io",
    "helm.toolkit.fluxcd.io",
    "notification.toolkit.fluxcd.io",
    "image.toolkit.fluxcd.io",
];
/// How many objects one list request returns.
const PAGE: u32 = 500;
/// How often migration progress is written to the record.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);
/// How often the FluxInstance is read while waiting for it.
const POLL: Duration = Duration::from_secs(2);
/// How long to wait for Ready when the request sets no timeout.
const DEFAULT_TIMEOUT: u32 = 600;
/// How many times in a row a step may fail on the API server before the upgrade fails.
const MAX_FAILURES: u32 = 10;
/// How soon a step that failed on the API server is tried again.
const RETRY: Duration = Duration::from_secs(2);

/// Why a step could not be done (retried until the upgrade's deadline).
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    #[error("{what}")]
    Kube {
        what: String,
        #[source]
        source: Box<kube::Error>,
    },
    /// The FluxInstance could not be read or written; retried when transient.
    #[error(transparent)]
    Instance(InstanceError),
    #[error("{0}")]
    Refused(String),
}

impl StepError {
    /// Whether the agent's own RBAC refused it: retrying will not help.
    pub fn is_forbidden(&self) -> bool {
        let source = match self {
            Self::Kube { source, .. } => source.as_ref(),
            Self::Instance(InstanceError::Kube { source, .. }) => source.as_ref(),
            _ => return false,
        };
        matches!(source, kube::Error::Api(status) if status.code == 403)
    }
}

/// Why an upgrade did not start; nothing was changed.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(
        "an upgrade to {target} is already {phase} (started {started_at} by {requested_by}); follow it with `kubectl tenantflux upgrade status --wait`"
    )]
    Busy {
        target: String,
        phase: &'static str,
        started_at: String,
        requested_by: String,
    },
    #[error("the upgrade to {} is blocked; nothing was changed:\n{}", tenantflux_core::text::quote(to), blockers.join("\n"))]
    Blocked { to: String, blockers: Vec<String> },
    #[error(transparent)]
    Step(StepError),
}

fn kube_err(what: impl Into<String>) -> impl FnOnce(kube::Error) -> StepError {
    let what = what.into();
    move |source| StepError::Kube {
        what,
        source: Box::new(source),
    }
}

/// The resource of a CRD's kind at `version`.
fn resource(group: &str, kind: &str, plural: &str, version: &str) -> ApiResource {
    ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: format!("{group}/{version}"),
        kind: kind.into(),
        plural: plural.into(),
    }
}

fn storage_version(crd: &CustomResourceDefinition) -> Option<String> {
    crd.spec
        .versions
        .iter()
        .find(|v| v.storage)
        .map(|v| v.name.clone())
}

/// Every object of a kind, page by page.
async fn list_all(api: &Api<DynamicObject>) -> Result<Vec<DynamicObject>, kube::Error> {
    let mut objects = Vec::new();
    let mut params = ListParams::default().limit(PAGE);
    loop {
        let page = api.list(&params).await?;
        objects.extend(page.items);
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(objects),
        }
    }
}

/// `apps_podinfo_source.toolkit.fluxcd.io_OCIRepository` (a Kustomization inventory id).
fn parse_inventory_id(id: &str) -> Option<(String, String, String, String)> {
    let mut parts = id.splitn(4, '_');
    let namespace = parts.next()?.to_owned();
    let name = parts.next()?.to_owned();
    let group = parts.next()?.to_owned();
    let kind = parts.next()?.to_owned();
    Some((namespace, name, group, kind))
}

/// The objects a Kustomization's `status.inventory` says it applied, with its source and path.
fn inventory_entries(kustomization: &DynamicObject) -> Vec<InventoryEntry> {
    let value = serde_json::to_value(kustomization).unwrap_or_default();
    let namespace = kustomization.metadata.namespace.clone().unwrap_or_default();
    let text = |pointer: &str| {
        value
            .pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let source_namespace = Some(text("/spec/sourceRef/namespace"))
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| namespace.clone());
    let source = format!(
        "{}/{source_namespace}/{}",
        text("/spec/sourceRef/kind"),
        text("/spec/sourceRef/name")
    );
    let path = text("/spec/path");
    let name = format!(
        "{namespace}/{}",
        kustomization.metadata.name.as_deref().unwrap_or_default()
    );
    value
        .pointer("/status/inventory/entries")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|entry| {
            let id = entry.get("id")?.as_str()?;
            let version = entry.get("v")?.as_str()?;
            let (namespace, object, group, kind) = parse_inventory_id(id)?;
            TOOLKIT_GROUPS
                .contains(&group.as_str())
                .then(|| InventoryEntry {
                    kustomization: name.clone(),
                    source: source.clone(),
                    path: path.clone(),
                    object: ObjectRef {
                        group,
                        kind,
                        namespace,
                        name: object,
                        version: version.to_owned(),
                    },
                })
        })
        .collect()
}

/// The agent's settings for upgrades.
#[derive(Clone, Debug)]
pub struct UpgradeConfig {
    pub agent_namespace: String,
    pub operator_namespace: String,
    /// Objects migrated at once when a request sets none.
    pub concurrency: u32,
}

/// Runs upgrades, one at a time, from their record in the cluster.
pub struct Upgrader {
    client: Client,
    config: UpgradeConfig,
    policy: watch::Receiver<Held>,
    instance: Instances,
    records: Api<ConfigMap>,
    state: watch::Sender<Option<Record>>,
    /// Whether the stored record was read: until then "no upgrade" is not known.
    loaded: watch::Sender<bool>,
    /// Held while a run executes; ApplyUpgrade takes it to decide.
    running: Arc<Mutex<()>>,
    shutdown: CancellationToken,
}

impl Upgrader {
    pub fn new(
        client: Client,
        config: UpgradeConfig,
        policy: watch::Receiver<Held>,
        shutdown: CancellationToken,
    ) -> Arc<Self> {
        Arc::new(Self {
            instance: Instances::new(client.clone(), &config.operator_namespace, policy.clone()),
            records: Api::namespaced(client.clone(), &config.agent_namespace),
            client,
            config,
            policy,
            state: watch::Sender::new(None),
            loaded: watch::Sender::new(false),
            running: Arc::new(Mutex::new(())),
            shutdown,
        })
    }

    /// Loads the record and resumes an unfinished upgrade; retries until the API answers.
    pub async fn resume(self: Arc<Self>) {
        let record = loop {
            match self.records.get_opt(RECORD_NAME).await {
                Ok(cm) => break cm.and_then(|cm| cm.data?.remove(RECORD_KEY)),
                Err(err) => {
                    tracing::warn!(error = %chain(&err), "reading the upgrade record");
                    tokio::select! {
                        () = self.shutdown.cancelled() => return,
                        () = tokio::time::sleep(RETRY) => {}
                    }
                }
            }
        };
        let Some(text) = record else {
            self.loaded.send_replace(true);
            return;
        };
        match Record::parse(&text) {
            Ok(record) if !record.phase.finished() => {
                tracing::info!(
                    id = record.id,
                    phase = record.phase.name(),
                    target = record.target,
                    "resuming the upgrade"
                );
                self.state.send_replace(Some(record.clone()));
                let guard = self.running.clone().lock_owned().await;
                self.loaded.send_replace(true);
                self.clone().execute(record, guard).await;
            }
            Ok(record) => {
                self.state.send_replace(Some(record));
                self.loaded.send_replace(true);
            }
            Err(err) => {
                self.loaded.send_replace(true);
                tracing::warn!(error = %err, "the upgrade record {RECORD_NAME} is unreadable; ignored");
            }
        }
    }

    /// Returns once the stored record was read at start (or the agent stops).
    pub async fn wait_loaded(&self) {
        let mut loaded = self.loaded.subscribe();
        tokio::select! {
            () = self.shutdown.cancelled() => {}
            _ = loaded.wait_for(|l| *l) => {}
        }
    }

    async fn store(&self, record: &mut Record) -> Result<(), StepError> {
        record.updated_at = Timestamp::now().to_string();
        let data = [(RECORD_KEY.to_owned(), record.to_json())].into();
        crate::apply_record(&self.records, RECORD_NAME, data)
            .await
            .map_err(kube_err(format!(
                "writing ConfigMap {}/{RECORD_NAME}",
                self.config.agent_namespace
            )))?;
        self.state.send_replace(Some(record.clone()));
        Ok(())
    }

    /// Stores the record, retrying until it is stored or the agent stops (`false`).
    async fn store_retrying(&self, record: &mut Record) -> bool {
        loop {
            match self.store(record).await {
                Ok(()) => return true,
                Err(err) => tracing::warn!(error = %chain(&err), "storing the upgrade record"),
            }
            tokio::select! {
                () = self.shutdown.cancelled() => return false,
                () = tokio::time::sleep(RETRY) => {}
            }
        }
    }

    /// The live FluxInstance, when there is one.
    async fn live_instance(&self) -> Result<Option<DynamicObject>, StepError> {
        self.instance.live().await.map_err(StepError::Instance)
    }

    /// Reads what the planner needs from the cluster.
    pub async fn facts(&self) -> Result<Facts, StepError> {
        let instance = self
            .live_instance()
            .await?
            .map(|o| serde_json::to_value(o).unwrap_or_default());
        let version = self
            .client
            .apiserver_version()
            .await
            .map_err(kube_err("reading the Kubernetes version"))?;
        let mut facts = Facts {
            instance_spec: instance.as_ref().and_then(|i| i.get("spec").cloned()),
            installed: instance
                .as_ref()
                .and_then(|i| i.pointer("/status/lastAppliedRevision"))
                .and_then(Value::as_str)
                .and_then(plan::installed_release),
            kubernetes: plan::kubernetes_version(&version.major, &version.minor),
            day: today(),
            ..Facts::default()
        };
        let crds: Api<CustomResourceDefinition> = Api::all(self.client.clone());
        let crds = crds
            .list(&ListParams::default())
            .await
            .map_err(kube_err("listing CustomResourceDefinitions"))?;
        // The kinds the catalog knows are those Flux removes versions of, and those the
        // agent's RBAC lets it list and patch.
        for crd in crds.items.iter().filter(|c| {
            catalog::KINDS
                .iter()
                .any(|k| k.group == c.spec.group && k.kind == c.spec.names.kind)
                && TOOLKIT_GROUPS.contains(&c.spec.group.as_str())
        }) {
            let Some(storage) = storage_version(crd) else {
                continue;
            };
            let (group, kind) = (&crd.spec.group, &crd.spec.names.kind);
            let name = crd.metadata.name.clone().unwrap_or_default();
            let api = Api::all_with(
                self.client.clone(),
                &resource(group, kind, &crd.spec.names.plural, &storage),
            );
            let objects = list_all(&api)
                .await
                .map_err(kube_err(format!("listing {name}")))?;
            for object in &objects {
                let managed = object.metadata.managed_fields.iter().flatten();
                let mut seen = BTreeSet::new();
                for entry in managed {
                    let Some(version) = entry
                        .api_version
                        .as_deref()
                        .and_then(|v| v.strip_prefix(&format!("{group}/")))
                    else {
                        continue;
                    };
                    let manager = entry.manager.clone().unwrap_or_default();
                    if version != storage && seen.insert((manager.clone(), version.to_owned())) {
                        facts.managed.push(ManagedEntry {
                            manager,
                            object: ObjectRef {
                                group: group.clone(),
                                kind: kind.clone(),
                                namespace: object.metadata.namespace.clone().unwrap_or_default(),
                                name: object.metadata.name.clone().unwrap_or_default(),
                                version: version.to_owned(),
                            },
                        });
                    }
                }
            }
            if kind == "Kustomization" {
                facts
                    .inventory
                    .extend(objects.iter().flat_map(inventory_entries));
            }
            facts.crds.push(CrdFacts {
                name,
                group: group.clone(),
                kind: kind.clone(),
                stored_versions: crd
                    .status
                    .as_ref()
                    .and_then(|s| s.stored_versions.clone())
                    .unwrap_or_default(),
                storage_version: storage,
                objects: i64::try_from(objects.len()).unwrap_or(i64::MAX),
            });
        }
        Ok(facts)
    }

    pub async fn plan(&self, to: &str) -> Result<UpgradePlan, StepError> {
        let facts = self.facts().await?;
        let held = self.policy.borrow().accepted.clone();
        Ok(plan::plan(to, held.as_ref().map(|a| &*a.policy), &facts))
    }

    /// Plans, and starts the upgrade unless blocked or one is running.
    pub async fn start(
        self: &Arc<Self>,
        request: ApplyUpgradeRequest,
        plan: UpgradePlan,
        user: &str,
    ) -> Result<Record, StartError> {
        self.wait_loaded().await;
        let Ok(guard) = self.running.clone().try_lock_owned() else {
            return Err(self.busy());
        };
        if self
            .state
            .borrow()
            .as_ref()
            .is_some_and(|r| !r.phase.finished())
        {
            return Err(self.busy());
        }
        if plan.blocked {
            return Err(StartError::Blocked {
                to: request.to.clone(),
                blockers: plan.blockers.iter().map(|b| b.message.clone()).collect(),
            });
        }
        let now = Timestamp::now();
        let crds = self
            .migration_targets(&plan)
            .await
            .map_err(StartError::Step)?;
        let mut record = Record {
            id: format!("{}-{}", plan.target, now.as_second()),
            requested: request.to.clone(),
            target: plan.target.clone(),
            written_version: plan.written_version.clone(),
            from_version: plan.current_version.clone(),
            from_range: plan.current_range.clone(),
            phase: Phase::Migrating,
            crds,
            concurrency: if request.concurrency == 0 {
                self.config.concurrency
            } else {
                request.concurrency
            },
            timeout_seconds: if request.timeout_seconds == 0 {
                DEFAULT_TIMEOUT
            } else {
                request.timeout_seconds
            },
            started_at: now.to_string(),
            requested_by: user.to_owned(),
            ..Record::default()
        };
        self.store(&mut record).await.map_err(StartError::Step)?;
        tracing::info!(
            id = record.id,
            target = record.target,
            user,
            "upgrade started"
        );
        let this = self.clone();
        let first = record.clone();
        tokio::spawn(async move { this.execute(record, guard).await });
        Ok(first)
    }

    fn busy(&self) -> StartError {
        let current = self.state.borrow().clone().unwrap_or_default();
        StartError::Busy {
            target: current.target,
            phase: current.phase.name(),
            started_at: current.started_at,
            requested_by: current.requested_by,
        }
    }

    /// The CRDs the plan migrates, with what migrating them needs.
    async fn migration_targets(&self, plan: &UpgradePlan) -> Result<Vec<CrdRecord>, StepError> {
        let crds: Api<CustomResourceDefinition> = Api::all(self.client.clone());
        let mut out = Vec::new();
        for migration in &plan.migrations {
            let crd = crds
                .get(&migration.crd)
                .await
                .map_err(kube_err(format!("reading CRD {}", migration.crd)))?;
            out.push(CrdRecord {
                crd: migration.crd.clone(),
                group: crd.spec.group.clone(),
                kind: crd.spec.names.kind.clone(),
                plural: crd.spec.names.plural.clone(),
                storage_version: migration.storage_version.clone(),
                total: migration.objects,
                ..CrdRecord::default()
            });
        }
        Ok(out)
    }

    /// Runs `record` from its phase to the end (or until the agent stops).
    async fn execute(
        self: Arc<Self>,
        mut record: Record,
        _running: tokio::sync::OwnedMutexGuard<()>,
    ) {
        record.runs += 1;
        if !self.store_retrying(&mut record).await {
            return;
        }
        let mut failures = 0;
        while !record.phase.finished() {
            let step = match record.phase {
                Phase::Migrating => self.migrate(&mut record).await,
                Phase::Bumping => self.bump(&mut record).await,
                Phase::Waiting => self.wait_ready(&mut record).await,
                Phase::Succeeded | Phase::Failed => unreachable!("the loop ends at these"),
            };
            match step {
                Ok(()) => failures = 0,
                Err(StepError::Refused(reason)) => self.fail(&mut record, reason),
                Err(err) => {
                    let reason = chain(&err);
                    failures += 1;
                    if failures >= MAX_FAILURES
                        || (record.ready_by > 0 && Timestamp::now().as_second() > record.ready_by)
                    {
                        self.fail(&mut record, reason);
                    } else {
                        tracing::warn!(
                            error = reason,
                            phase = record.phase.name(),
                            "upgrade step failed; retrying"
                        );
                        record.message = format!("retrying: {reason}");
                        tokio::select! {
                            () = self.shutdown.cancelled() => return,
                            () = tokio::time::sleep(RETRY) => {}
                        }
                    }
                }
            }
            if self.shutdown.is_cancelled() {
                return;
            }
            if !self.store_retrying(&mut record).await {
                return;
            }
        }
        tracing::info!(
            id = record.id,
            phase = record.phase.name(),
            message = record.message,
            "upgrade finished"
        );
    }

    fn fail(&self, record: &mut Record, reason: String) {
        tracing::warn!(id = record.id, reason, "upgrade failed");
        record.phase = Phase::Failed;
        record.message = reason;
        record.finished_at = Timestamp::now().to_string();
    }

    /// Migrates every unfinished CRD, one after the other; finished ones are skipped.
    async fn migrate(&self, record: &mut Record) -> Result<(), StepError> {
        while let Some(index) = record.next_crd() {
            record.crds[index].attempts += 1;
            record.crds[index].migrated = 0;
            record.message = format!("migrating {}", record.crds[index].crd);
            self.store(record).await?;
            let started = Instant::now();
            self.migrate_crd(record, index).await?;
            if self.shutdown.is_cancelled() {
                return Ok(());
            }
            let crd = &mut record.crds[index];
            crd.done = true;
            crd.seconds += started.elapsed().as_secs_f64();
            tracing::info!(
                crd = crd.crd,
                objects = crd.migrated,
                seconds = crd.seconds,
                "CRD migrated"
            );
            self.store(record).await?;
        }
        record.phase = Phase::Bumping;
        record.message = format!(
            "setting the FluxInstance's version to {}",
            record.written_version
        );
        Ok(())
    }

    /// Rewrites every object of one CRD at its storage version, then leaves only that version
    /// in `status.storedVersions`. Idempotent: a rewrite of an object already stored at the
    /// storage version changes nothing.
    async fn migrate_crd(&self, record: &mut Record, index: usize) -> Result<(), StepError> {
        let crd = record.crds[index].clone();
        let resource = resource(&crd.group, &crd.kind, &crd.plural, &crd.storage_version);
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &resource);
        let objects = list_all(&api)
            .await
            .map_err(kube_err(format!("listing {}", crd.crd)))?;
        record.crds[index].total = i64::try_from(objects.len()).unwrap_or(i64::MAX);
        let done = Arc::new(AtomicI64::new(0));
        let concurrency = usize::try_from(record.concurrency.max(1)).unwrap_or(1);
        let work = futures::stream::iter(objects)
            .map({
                let (client, resource, done) =
                    (self.client.clone(), resource.clone(), done.clone());
                move |object| {
                    let (client, resource, done) = (client.clone(), resource.clone(), done.clone());
                    async move {
                        migrate::migrate_object(&client, &resource, &object).await?;
                        done.fetch_add(1, Ordering::Relaxed);
                        Ok::<_, StepError>(())
                    }
                }
            })
            .buffer_unordered(concurrency)
            .try_collect::<()>();
        let mut work = std::pin::pin!(work);
        let mut tick = tokio::time::interval(PROGRESS_EVERY);
        tick.tick().await;
        loop {
            tokio::select! {
                () = self.shutdown.cancelled() => return Ok(()),
                result = &mut work => { result?; break; }
                _ = tick.tick() => {
                    record.crds[index].migrated = done.load(Ordering::Relaxed);
                    // Progress is informative: a failed write is retried at the next tick.
                    if let Err(err) = self.store(record).await {
                        tracing::warn!(error = %chain(&err), "storing migration progress");
                    }
                }
            }
        }
        record.crds[index].migrated = done.load(Ordering::Relaxed);
        let crds: Api<CustomResourceDefinition> = Api::all(self.client.clone());
        let patch = json!({"status": {"storedVersions": [crd.storage_version]}});
        crds.patch_status(&crd.crd, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(kube_err(format!(
                "setting status.storedVersions of CRD {}",
                crd.crd
            )))?;
        Ok(())
    }

    /// Writes the new version once: a resumed bump first looks whether it is already there.
    async fn bump(&self, record: &mut Record) -> Result<(), StepError> {
        if record.ready_before.is_none() {
            record.ready_before = Some(health::snapshot(&health::list(&self.client).await?));
            self.store(record).await?;
        }
        let ns = &self.config.operator_namespace;
        let live = self.live_instance().await?.ok_or_else(|| {
            StepError::Refused(format!(
                "FluxInstance {ns}/{INSTANCE_NAME} was deleted during the upgrade"
            ))
        })?;
        let value = serde_json::to_value(&live).unwrap_or_default();
        let current = value
            .pointer("/spec/distribution/version")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let generation = if current == record.written_version {
            tracing::info!(
                version = current,
                "the FluxInstance already has the target version; not written again"
            );
            live.metadata.generation.unwrap_or_default()
        } else {
            let spec = plan::with_version(value.get("spec"), &record.written_version).ok_or_else(|| {
                StepError::Refused(format!(
                    "FluxInstance {ns}/{INSTANCE_NAME} has a spec.distribution that is not an object; fix it with `kubectl tenantflux instance apply`"
                ))
            })?;
            let manifest = json!({
                "apiVersion": INSTANCE_API_VERSION,
                "kind": INSTANCE_KIND,
                "metadata": {"name": INSTANCE_NAME, "namespace": ns},
                "spec": spec,
            });
            // A transient failure (the API server unavailable, a webhook not answering) is
            // retried like every other step; only the manifest, the policy or the schema
            // refusing the new version fails the upgrade.
            let applied = self
                .instance
                .apply(&manifest.to_string(), false)
                .await
                .map_err(|err| {
                    if err.is_transient() {
                        StepError::Instance(err)
                    } else {
                        StepError::Refused(chain(&err))
                    }
                })?
                .applied;
            tracing::info!(
                version = record.written_version,
                generation = applied.metadata.generation,
                "FluxInstance version bumped"
            );
            applied.metadata.generation.unwrap_or_default()
        };
        record.bumped = true;
        record.instance_generation = generation;
        record.ready_by = Timestamp::now().as_second() + i64::from(record.timeout_seconds);
        record.phase = Phase::Waiting;
        record.message = format!("waiting for flux-operator to apply Flux {}", record.target);
        Ok(())
    }

    async fn wait_ready(&self, record: &mut Record) -> Result<(), StepError> {
        loop {
            let ns = &self.config.operator_namespace;
            let live = self
                .live_instance()
                .await?
                .map(|o| serde_json::to_value(o).unwrap_or_default())
                .unwrap_or_default();
            match state::rollout(&live, &record.target, record.instance_generation) {
                Rollout::Done => {
                    let live = health::list(&self.client).await?;
                    let recorded = record.ready_before.get_or_insert_default();
                    if health::check(recorded, &live) {
                        record.phase = Phase::Succeeded;
                        record.message = format!(
                            "Flux {} is Ready, and so is every Kustomization that was Ready before ({})",
                            record.target,
                            recorded.len()
                        );
                        record.finished_at = Timestamp::now().to_string();
                        return Ok(());
                    }
                    let not_ready = health::not_ready(recorded).join("; ");
                    if Timestamp::now().as_second() > record.ready_by {
                        return Err(StepError::Refused(format!(
                            "Flux {} is Ready, but Kustomizations Ready before the upgrade are not Ready again at their revision within {}s: {not_ready}",
                            record.target, record.timeout_seconds
                        )));
                    }
                    let waiting = format!(
                        "Flux {} is Ready; waiting for the Kustomizations Ready before to be Ready again: {not_ready}",
                        record.target
                    );
                    if record.message != waiting {
                        record.message = waiting;
                        self.store(record).await?;
                    }
                }
                Rollout::Stalled(message) => {
                    return Err(StepError::Refused(format!(
                        "flux-operator stalled applying Flux {}: {message}",
                        record.target
                    )));
                }
                Rollout::Pending(message) => {
                    if Timestamp::now().as_second() > record.ready_by {
                        return Err(StepError::Refused(format!(
                            "FluxInstance {ns}/{INSTANCE_NAME} was not Ready at {} within {}s: {message}",
                            record.target, record.timeout_seconds
                        )));
                    }
                    let waiting = format!(
                        "waiting for flux-operator to apply Flux {}: {message}",
                        record.target
                    );
                    if record.message != waiting {
                        record.message = waiting;
                        self.store(record).await?;
                    }
                }
            }
            tokio::select! {
                () = self.shutdown.cancelled() => return Ok(()),
                () = tokio::time::sleep(POLL) => {}
            }
        }
    }

    pub fn subscribe(&self) -> watch::Receiver<Option<Record>> {
        self.state.subscribe()
    }

    /// The operator namespace, where the FluxInstance lives.
    pub fn operator_namespace(&self) -> &str {
        &self.config.operator_namespace
    }

    /// Ends when the agent shuts down.
    pub fn shutdown(&self) -> &CancellationToken {
        &self.shutdown
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inventories_name_the_flux_objects_with_their_version_source_and_path() {
        let kustomization: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
            "kind": "Kustomization",
            "metadata": {"name": "apps", "namespace": "flux-system"},
            "spec": {"path": "./apps", "sourceRef": {"kind": "GitRepository", "name": "fleet"}},
            "status": {"inventory": {"entries": [
                {"id": "apps_podinfo_source.toolkit.fluxcd.io_OCIRepository", "v": "v1beta2"},
                {"id": "apps_podinfo_apps_Deployment", "v": "v1"},
                {"id": "_apps__Namespace", "v": "v1"},
            ]}},
        }))
        .unwrap();
        let entries = inventory_entries(&kustomization);
        assert_eq!(entries.len(), 1, "{entries:?}");
        let e = &entries[0];
        assert_eq!(e.kustomization, "flux-system/apps");
        assert_eq!(e.source, "GitRepository/flux-system/fleet");
        assert_eq!(e.path, "./apps");
        assert_eq!(
            (
                e.object.kind.as_str(),
                e.object.namespace.as_str(),
                e.object.name.as_str(),
                e.object.version.as_str()
            ),
            ("OCIRepository", "apps", "podinfo", "v1beta2")
        );
    }
}
