//! Safe Flux upgrades: [`plan`] says what a target release would break, from facts read from
//! the cluster (`facts`: CRDs, objects, Kustomization inventories, the FluxInstance, the
//! Kubernetes version; and the held policy); [`Upgrader`] runs an upgrade (`run`) as steps
//! recorded in the cluster ([`state`]):
//! migrate stored versions (rewrite every object at the storage version with bounded
//! concurrency, then trim `status.storedVersions`), bump the FluxInstance's distribution
//! version through the same policy check and server-side apply as `instance apply`, and wait
//! until flux-operator reports it Ready. A restarted agent resumes an unfinished upgrade.
//! `server::upgrade` serves it as `tenantflux.v1.Upgrade`.

mod facts;
pub mod health;
pub mod migrate;
pub mod plan;
mod run;
pub mod state;

use std::{sync::Arc, time::Duration};

use k8s_openapi::{
    api::core::v1::ConfigMap,
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    jiff::Timestamp,
};
use kube::{
    Api, Client,
    api::{ApiResource, DynamicObject, ListParams},
};
use tokio::sync::{Mutex, watch};

use self::plan::UpgradePlan;
use self::state::{CrdRecord, Phase, RECORD_KEY, RECORD_NAME, Record};
use tenantflux_core::{releases::Releases, text::chain};
use tokio_util::sync::CancellationToken;

use crate::{
    instance::{InstanceError, Instances},
    policy::store::Held,
};

/// The API groups whose stored versions Flux releases remove.
const TOOLKIT_GROUPS: &[&str] = &[
    tenantflux_core::kinds::SOURCE,
    tenantflux_core::kinds::KUSTOMIZE,
    tenantflux_core::kinds::HELM,
    tenantflux_core::kinds::NOTIFICATION,
    tenantflux_core::kinds::IMAGE,
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
/// The first and the longest wait before a step that failed on the API server is tried
/// again (doubling in between).
const RETRY_MIN: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(8);

fn retry_delays() -> impl Iterator<Item = Duration> {
    crate::retry_delays(RETRY_MIN, RETRY_MAX)
}

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

/// What the caller of an upgrade chose.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ApplyOptions {
    /// A version or a range.
    pub to: String,
    /// How many objects are migrated at once; 0: the agent's `--upgrade-concurrency`.
    pub concurrency: u32,
    /// How long to wait for Ready after the bump; 0: ten minutes.
    pub timeout_seconds: u32,
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

fn kube_err(what: impl Into<String>) -> impl FnOnce(kube::Error) -> StepError {
    let what = what.into();
    move |source| StepError::Kube {
        what,
        source: Box::new(source),
    }
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
    /// The releases of the manifests artifact the operator was installed from, once read;
    /// until then (and for bundles without one) the embedded table.
    releases: watch::Receiver<Option<Arc<Releases>>>,
    shutdown: CancellationToken,
}

impl Upgrader {
    pub fn new(
        client: Client,
        config: UpgradeConfig,
        policy: watch::Receiver<Held>,
        releases: watch::Receiver<Option<Arc<Releases>>>,
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
            releases,
            shutdown,
        })
    }

    /// Loads the record and resumes an unfinished upgrade; retries until the API answers.
    pub async fn resume(self: Arc<Self>) {
        let mut delays = retry_delays();
        let record = loop {
            match self.records.get_opt(RECORD_NAME).await {
                Ok(cm) => break cm.and_then(|cm| cm.data?.remove(RECORD_KEY)),
                Err(err) => {
                    tracing::warn!(error = %chain(&err), "reading the upgrade record");
                    let wait = delays.next().unwrap_or(RETRY_MAX);
                    if !crate::sleep(&self.shutdown, wait).await {
                        return;
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
        let loaded = async { loaded.wait_for(|l| *l).await.is_ok() };
        crate::unless_shutdown(&self.shutdown, loaded).await;
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
        let mut delays = retry_delays();
        loop {
            match self.store(record).await {
                Ok(()) => return true,
                Err(err) => tracing::warn!(error = %chain(&err), "storing the upgrade record"),
            }
            let wait = delays.next().unwrap_or(RETRY_MAX);
            if !crate::sleep(&self.shutdown, wait).await {
                return false;
            }
        }
    }

    /// The live FluxInstance, when there is one.
    async fn live_instance(&self) -> Result<Option<DynamicObject>, StepError> {
        self.instance.live().await.map_err(StepError::Instance)
    }

    /// Plans from `facts` (read with [`Self::facts`]); `sees` says which objects the reader
    /// may see named.
    pub fn plan(&self, to: &str, facts: &plan::Facts, sees: &plan::Sees<'_>) -> UpgradePlan {
        let held = self.policy.borrow().accepted.clone();
        let known = self
            .releases
            .borrow()
            .clone()
            .unwrap_or_else(|| Arc::new(Releases::embedded()));
        plan::plan(to, held.as_ref().map(|a| &*a.policy), facts, &known, sees)
    }

    /// Plans, and starts the upgrade unless blocked or one is running.
    pub async fn start(
        self: &Arc<Self>,
        request: ApplyOptions,
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
