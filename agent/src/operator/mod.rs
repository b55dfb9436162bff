//! The flux-operator install the agent owns, as a loop:
//!
//! wait until the API server answers `/readyz` (no timeout clock runs while the tenant control
//! plane comes up) → read the bundle → check it → apply CRDs, wait until Established → apply
//! the namespace, ServiceAccounts, RBAC, Services → apply the Deployment → remember what was
//! applied → prune what the new bundle dropped → wait until the Deployment has rolled out.
//!
//! Then it watches: the bundle source (a ConfigMap or Secret is watched, a file or OCI artifact
//! is read again every resync interval) and the operator Deployment, which is restored when
//! someone edits or deletes it. Every write is a server-side apply by field manager
//! `tenantflux-agent`, and every applied object carries label
//! `app.kubernetes.io/managed-by: tenantflux-agent`.
//!
//! A bundle that fails a check changes nothing: the previous install keeps running and the
//! phase is FAILED with the reason.

use std::{
    sync::Arc,
    time::{Duration, SystemTime},
};

use futures::{Stream, StreamExt};
use k8s_openapi::{
    api::{
        apps::v1::Deployment,
        core::v1::{ConfigMap, ObjectReference, Secret},
    },
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::{
    Api, Client,
    api::{DeleteParams, DynamicObject, Patch, PatchParams},
    runtime::{
        WatchStreamExt,
        events::{Event as KubeEvent, EventType, Recorder, Reporter},
        wait::{await_condition, conditions},
        watcher::{self, Event},
    },
};
use tenantflux_proto::v1::OperatorPhase;
use tokio::sync::watch;

use tenantflux_core::{
    FIELD_MANAGER, MANAGED_BY_LABEL,
    flux::OPERATOR_DEPLOYMENT,
    operator::AllowedVersions,
    policy::Policy,
    releases::Releases,
    text::{chain, quote},
};
use tokio_util::sync::CancellationToken;

pub mod bundle;
mod rbac;
mod record;
mod rollout;
pub mod source;

use bundle::{Bundle, BundleError, BundleObject, ImageRules, ObjectRef, Stage, kind_of, to_prune};
pub use record::RECORD_CONFIGMAP;
use record::Record;
pub use rollout::rollout;
use source::{BundleSource, Fetcher, SourceError};

use crate::policy::store::Held;

/// How long CRDs may take to become Established once the API server serves.
const CRD_TIMEOUT: Duration = Duration::from_secs(60);
/// Backoff between attempts while the API server does not answer or an attempt failed.
const BACKOFF_MIN: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(60);
/// The longest wait between two `/readyz` tries while the API server does not answer.
const API_WAIT_MAX: Duration = Duration::from_secs(30);
/// How long one `/readyz` request may take.
const READYZ_TIMEOUT: Duration = Duration::from_secs(5);

/// What the agent installs and from where.
#[derive(Clone, Debug)]
pub struct InstallConfig {
    pub source: BundleSource,
    pub allowed: AllowedVersions,
    pub agent_namespace: String,
    pub operator_namespace: String,
    /// How often the source is read again and the whole bundle re-applied (which also undoes
    /// edits of objects other than the Deployment).
    pub resync: Duration,
    /// What the operator Deployment's images must be (`--operator-image-registry`,
    /// `--operator-require-image-digest`).
    pub images: ImageRules,
}

/// Where the install stands; it goes into `Status.operator` and the metrics.
#[derive(Clone, Debug, PartialEq)]
pub struct InstallState {
    pub phase: OperatorPhase,
    pub reason: String,
    /// The configured source (`--operator-bundle`).
    pub source: String,
    /// The flux-operator version of the bundle last applied ("" before the first install).
    pub version: String,
    /// The digest of the bundle last applied.
    pub digest: String,
    /// What the install did that its owner should know: objects taken over from another
    /// field manager. Kept until a bundle of another digest is applied.
    pub notices: Vec<String>,
    pub last_transition: SystemTime,
}

impl InstallState {
    pub fn initial(source: &BundleSource) -> Self {
        Self {
            phase: OperatorPhase::WaitingForApi,
            reason: "the agent has not yet asked the Kubernetes API server".into(),
            source: source.to_string(),
            version: String::new(),
            digest: String::new(),
            notices: Vec::new(),
            last_transition: SystemTime::now(),
        }
    }
}

/// Why the held policy refuses the configured bundle source.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "the bundle source {source_name} is not one of {patterns} allowed by policy generation {generation}"
)]
pub struct SourceNotAllowed {
    source_name: String,
    patterns: String,
    generation: u64,
}

/// The flux-operator versions one install attempt may apply: the held policy's
/// `spec.operator.versions` when it sets them, else `--operator-version` (`flag`). A policy
/// that sets `spec.operator.bundles` must also allow `source`.
pub fn install_rules<'a>(
    policy: Option<&'a Policy>,
    flag: &'a AllowedVersions,
    source: &str,
) -> Result<&'a AllowedVersions, SourceNotAllowed> {
    let Some(policy) = policy else {
        return Ok(flag);
    };
    if !policy.allows_bundle(source) {
        let patterns = policy
            .document()
            .spec
            .operator
            .iter()
            .flat_map(|o| o.bundles.iter().flatten())
            .map(|p| format!("{p:?}"))
            .collect::<Vec<_>>()
            .join(", ");
        return Err(SourceNotAllowed {
            source_name: source.to_owned(),
            patterns,
            generation: policy.generation(),
        });
    }
    Ok(policy.operator_versions().unwrap_or(flag))
}

/// Why one install attempt failed.
#[derive(Debug, thiserror::Error)]
enum InstallError {
    #[error("reading the bundle from {source_name}: {message}")]
    Source {
        source_name: String,
        message: String,
    },

    #[error("the bundle from {source_name} was refused, nothing was applied: {error}")]
    Rejected {
        source_name: String,
        error: BundleError,
    },

    #[error("{0}; nothing was applied")]
    SourceNotAllowed(#[from] SourceNotAllowed),

    #[error("applying {object} failed: {message}")]
    Apply { object: ObjectRef, message: String },

    #[error("{what} failed: {message}")]
    Kube { what: String, message: String },

    #[error("CustomResourceDefinition {name} is not Established after {}s: {detail}", CRD_TIMEOUT.as_secs())]
    CrdNotEstablished { name: String, detail: String },
}

impl InstallError {
    /// The Event reason (PascalCase) for this failure.
    fn event_reason(&self) -> &'static str {
        match self {
            Self::Source { .. } => "BundleUnavailable",
            Self::Rejected { .. } | Self::SourceNotAllowed(_) => "BundleRejected",
            Self::Apply { .. } | Self::Kube { .. } | Self::CrdNotEstablished { .. } => {
                "InstallFailed"
            }
        }
    }
}

fn kube_message(err: &kube::Error) -> String {
    match err {
        kube::Error::Api(status) => format!("{} ({})", status.message, status.code),
        other => other.to_string(),
    }
}

/// What set a reconcile off.
#[derive(Debug)]
enum Trigger {
    Start,
    Resync,
    SourceChanged,
    PolicyChanged,
    Retry,
    DeploymentDeleted,
    DeploymentEdited { generation: i64 },
}

/// The install loop's state.
struct Installer {
    client: Client,
    fetcher: Fetcher,
    config: InstallConfig,
    /// The policy held now: its operator rules replace `config.allowed`.
    policy: watch::Receiver<Held>,
    tx: watch::Sender<InstallState>,
    recorder: Recorder,
    record_ref: ObjectReference,
    /// The bundle last applied in full, and the Deployment generation that apply produced.
    applied: Option<(Bundle, i64)>,
    /// The latest observed operator Deployment.
    deployment: Option<Deployment>,
    /// Set while the latest attempt failed; the phase stays FAILED until an attempt succeeds.
    failure: Option<String>,
    /// The Flux releases of the artifact the operator was installed from, with its digest.
    releases: watch::Sender<Option<Arc<Releases>>>,
    /// See [`InstallState::notices`].
    notices: Vec<String>,
}

/// At most this many notices are kept (the newest).
const MAX_NOTICES: usize = 10;

/// What a server-side apply refused with 409 says another manager owns, as one line:
/// `field manager "kubectl-edit" (.spec.replicas, .spec.template.spec.containers…)`. The
/// managers' names are whatever their writers chose, so each is quoted and bounded.
fn field_conflicts(status: &kube::core::Status) -> String {
    let mut by_manager: Vec<(String, Vec<&str>)> = Vec::new();
    let causes = status.details.as_ref().map(|d| d.causes.as_slice());
    for cause in causes.unwrap_or_default() {
        let manager = cause
            .message
            .split('"')
            .nth(1)
            .map_or_else(|| "an unnamed manager".to_owned(), quote);
        match by_manager.iter_mut().find(|(m, _)| *m == manager) {
            Some((_, fields)) => fields.push(&cause.field),
            None => by_manager.push((manager, vec![&cause.field])),
        }
    }
    if by_manager.is_empty() {
        return format!("another field manager ({})", quote(&status.message));
    }
    let listed: Vec<String> = by_manager
        .iter()
        .map(|(manager, fields)| {
            let shown: Vec<String> = fields.iter().take(5).map(|f| quote(f)).collect();
            let more = match fields.len().saturating_sub(5) {
                0 => String::new(),
                n => format!(" and {n} more"),
            };
            format!("field manager {manager} ({}{more})", shown.join(", "))
        })
        .collect();
    listed.join(", ")
}

/// Runs the install loop until the shutdown.
pub async fn run(
    client: Client,
    fetcher: Fetcher,
    config: InstallConfig,
    policy: watch::Receiver<Held>,
    tx: watch::Sender<InstallState>,
    releases: watch::Sender<Option<Arc<Releases>>>,
    shutdown: CancellationToken,
) {
    let mut policy_changes = policy.clone();
    let record_ref = ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("ConfigMap".into()),
        name: Some(RECORD_CONFIGMAP.into()),
        namespace: Some(config.agent_namespace.clone()),
        ..ObjectReference::default()
    };
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: FIELD_MANAGER.into(),
            instance: std::env::var("POD_NAME").ok(),
        },
    );
    let mut installer = Installer {
        client: client.clone(),
        fetcher,
        config,
        policy,
        tx,
        recorder,
        record_ref,
        applied: None,
        deployment: None,
        failure: None,
        releases,
        notices: Vec::new(),
    };
    let deployments = watcher::watcher(
        Api::<Deployment>::namespaced(client.clone(), &installer.config.operator_namespace),
        watcher::Config::default().fields(&format!("metadata.name={OPERATOR_DEPLOYMENT}")),
    )
    .backoff(crate::watch_backoff());
    let sources = source_changes(&client, &installer.config);
    let mut deployments = std::pin::pin!(deployments);
    let mut sources = std::pin::pin!(sources);

    let mut trigger = Trigger::Start;
    let mut backoff = crate::retry_delays(BACKOFF_MIN, BACKOFF_MAX);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = installer.wait_for_api() => {}
        }
        let attempt = match trigger {
            Trigger::DeploymentDeleted | Trigger::DeploymentEdited { .. } => {
                installer.restore(&trigger).await
            }
            Trigger::Start
            | Trigger::Resync
            | Trigger::SourceChanged
            | Trigger::PolicyChanged
            | Trigger::Retry => installer.reconcile().await,
        };
        let next_try = match attempt {
            Ok(()) => {
                backoff = crate::retry_delays(BACKOFF_MIN, BACKOFF_MAX);
                installer.config.resync
            }
            Err(err) => {
                installer.fail(&err).await;
                backoff.next().unwrap_or(BACKOFF_MAX)
            }
        };
        let retry_at = tokio::time::Instant::now() + next_try;
        trigger = loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep_until(retry_at) => {
                    break if installer.failure.is_some() { Trigger::Retry } else { Trigger::Resync };
                }
                Some(changed) = sources.next() => if changed {
                    break Trigger::SourceChanged;
                },
                // Any new policy: its operator rules may now allow or refuse the bundle.
                Ok(()) = policy_changes.changed() => break Trigger::PolicyChanged,
                Some(event) = deployments.next() => match event {
                    Ok(event) => if let Some(trigger) = installer.observe(event) {
                        break trigger;
                    },
                    Err(err) => tracing::debug!(error = %err, "watching the operator Deployment failed; retrying"),
                },
            }
        };
        tracing::info!(?trigger, "reconciling the flux-operator install");
    }
}

/// `true` each time the source object (ConfigMap or Secret) changes; nothing for sources that
/// are only read again on the resync interval.
fn source_changes(
    client: &Client,
    config: &InstallConfig,
) -> std::pin::Pin<Box<dyn Stream<Item = bool> + Send>> {
    fn changes<K>(api: Api<K>, name: &str) -> std::pin::Pin<Box<dyn Stream<Item = bool> + Send>>
    where
        K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    {
        let mut last_version: Option<Option<String>> = None;
        Box::pin(
            watcher::watcher(
                api,
                watcher::Config::default().fields(&format!("metadata.name={name}")),
            )
            .backoff(crate::watch_backoff())
            .filter_map(move |event| {
                let version = match event {
                    Ok(Event::Apply(o) | Event::InitApply(o)) => {
                        Some(o.meta().resource_version.clone())
                    }
                    Ok(Event::Delete(_)) => Some(None),
                    _ => None,
                };
                // The first version seen is the one the first reconcile read.
                let changed = match (&last_version, version) {
                    (_, None) => false,
                    (None, Some(v)) => {
                        last_version = Some(v);
                        false
                    }
                    (Some(previous), Some(v)) => {
                        let changed = *previous != v;
                        last_version = Some(v);
                        changed
                    }
                };
                futures::future::ready(Some(changed))
            }),
        )
    }
    let ns = &config.agent_namespace;
    match &config.source {
        BundleSource::ConfigMap(name) => {
            changes(Api::<ConfigMap>::namespaced(client.clone(), ns), name)
        }
        BundleSource::Secret(name) => changes(Api::<Secret>::namespaced(client.clone(), ns), name),
        BundleSource::File(_) | BundleSource::Oci(_) => Box::pin(futures::stream::pending()),
    }
}

impl Installer {
    fn set(&self, phase: OperatorPhase, reason: impl Into<String>) {
        let reason = reason.into();
        let (version, digest) = self
            .applied
            .as_ref()
            .map(|(b, _)| (b.version.clone(), b.digest.clone()))
            .unwrap_or_default();
        self.tx.send_if_modified(|state| {
            let changed_phase = state.phase != phase;
            let changed = changed_phase
                || state.reason != reason
                || state.version != version
                || state.digest != digest
                || state.notices != self.notices;
            if changed_phase {
                tracing::info!(phase = ?phase, %reason, "flux-operator install phase");
                state.last_transition = SystemTime::now();
            }
            state.phase = phase;
            state.reason = reason.clone();
            state.version = version.clone();
            state.digest = digest.clone();
            state.notices.clone_from(&self.notices);
            changed
        });
    }

    async fn event(&self, type_: EventType, reason: &str, note: String) {
        let event = KubeEvent {
            type_,
            reason: reason.into(),
            note: Some(note),
            action: "Install".into(),
            secondary: None,
        };
        if let Err(err) = self.recorder.publish(&event, &self.record_ref).await {
            tracing::warn!(reason, error = %err, "recording an Event on ConfigMap {RECORD_CONFIGMAP} failed");
        }
    }

    /// Returns once the API server answers `/readyz`, reporting WAITING_FOR_API with the
    /// reason while it does not. Retries back off; there is no deadline.
    async fn wait_for_api(&mut self) {
        let mut delays = crate::retry_delays(BACKOFF_MIN, API_WAIT_MAX);
        let mut first = true;
        loop {
            let request = http::Request::get("/readyz").body(Vec::new());
            let answer = match request {
                Ok(request) => {
                    match tokio::time::timeout(READYZ_TIMEOUT, self.client.request_text(request))
                        .await
                    {
                        Ok(Ok(_)) => return,
                        Ok(Err(err)) => kube_message(&err),
                        Err(_) => format!("no answer within {}s", READYZ_TIMEOUT.as_secs()),
                    }
                }
                Err(err) => err.to_string(),
            };
            let wait = delays.next().unwrap_or(API_WAIT_MAX);
            let reason = format!(
                "waiting for the Kubernetes API server to answer /readyz: {answer} (next try in {}s)",
                wait.as_secs()
            );
            // Once per wait, so a long outage is visible in the log without a line per retry.
            if std::mem::take(&mut first) {
                tracing::info!(%reason, "flux-operator install waits for the API server");
            }
            self.set(OperatorPhase::WaitingForApi, reason);
            tokio::time::sleep(wait).await;
        }
    }

    /// Derives the Flux releases from the artifact's distributions, once per artifact digest:
    /// flux-operator installs only what it ships, so the upgrade planner follows it. An
    /// artifact whose `flux/` cannot be read leaves the previous list (or the embedded table)
    /// in force, with a warning.
    async fn learn_releases(
        &self,
        bundle: &Bundle,
        source_name: &str,
        distributions: Vec<(String, String)>,
    ) {
        if distributions.is_empty() {
            return;
        }
        let name = format!(
            "flux-operator {} manifests artifact {source_name} ({})",
            bundle.version, bundle.digest
        );
        if self
            .releases
            .borrow()
            .as_ref()
            .is_some_and(|r| r.source == name)
        {
            return;
        }
        let derive_name = name.clone();
        let derived = tokio::task::spawn_blocking(move || {
            Releases::from_distributions(
                derive_name,
                distributions
                    .iter()
                    .map(|(path, text)| (path.as_str(), text.as_str())),
            )
        })
        .await;
        match derived {
            Ok(Ok(releases)) => {
                tracing::info!(source = %name, releases = %releases.span(), "Flux releases known from the artifact");
                self.releases.send_replace(Some(Arc::new(releases)));
            }
            Ok(Err(err)) => {
                tracing::warn!(source = %name, error = %err, "the artifact's Flux distributions cannot be read; the upgrade planner keeps its previous release list");
            }
            Err(err) => {
                tracing::warn!(source = %name, error = %err, "deriving the Flux releases failed");
            }
        }
    }

    /// One install attempt: read, check, apply in order, remember, prune.
    async fn reconcile(&mut self) -> Result<(), InstallError> {
        let source_name = self.config.source.to_string();
        let policy = self
            .policy
            .borrow()
            .accepted
            .as_ref()
            .map(|a| a.policy.clone());
        let allowed = install_rules(policy.as_deref(), &self.config.allowed, &source_name)?.clone();
        let mut fetched =
            self.fetcher
                .fetch(&self.config.source)
                .await
                .map_err(|err: SourceError| InstallError::Source {
                    source_name: source_name.clone(),
                    message: chain(&err),
                })?;
        let distributions = std::mem::take(&mut fetched.distributions);
        let bundle = Bundle::parse(
            &fetched.yaml,
            fetched.digest,
            &self.config.operator_namespace,
            &self.config.images,
        )
        .and_then(|b| b.check_version(&allowed).map(|()| b))
        .map_err(|error| InstallError::Rejected {
            source_name: source_name.clone(),
            error,
        })?;
        let previous = self.read_record().await?;
        if previous.as_ref().is_none_or(|p| p.digest != bundle.digest) {
            self.notices.clear();
        }

        self.set(
            OperatorPhase::ApplyingCrds,
            format!("applying the CRDs of flux-operator {}", bundle.version),
        );
        for object in bundle.stage(Stage::Crds) {
            self.apply(object).await?;
        }
        for object in bundle.stage(Stage::Crds) {
            self.wait_established(&object.reference.name).await?;
        }
        for object in bundle
            .stage(Stage::Namespaces)
            .chain(bundle.stage(Stage::Access))
        {
            self.apply(object).await?;
        }
        let deployment = self.apply(bundle.deployment()).await?;
        let generation = deployment.metadata.generation.unwrap_or_default();

        let record = Record {
            version: bundle.version.clone(),
            digest: bundle.digest.clone(),
            source: source_name.clone(),
            objects: bundle.references(),
        };
        self.write_record(&record).await?;
        self.learn_releases(&bundle, &source_name, distributions)
            .await;
        let pruned = self.prune(previous.as_ref(), &record.objects).await;

        let changed = previous.as_ref().is_none_or(|p| p.digest != record.digest);
        let recovered = self.failure.take().is_some();
        match (previous, changed) {
            (None, _) => {
                self.event(
                    EventType::Normal,
                    "Installed",
                    format!(
                        "applied flux-operator {} from {source_name} ({})",
                        bundle.version, bundle.digest
                    ),
                )
                .await
            }
            (Some(p), true) => {
                self.event(
                    EventType::Normal,
                    if p.version == bundle.version {
                        "Updated"
                    } else {
                        "Upgraded"
                    },
                    format!(
                        "applied flux-operator {} ({}) from {source_name}, replacing {} ({}){}",
                        bundle.version,
                        bundle.digest,
                        p.version,
                        p.digest,
                        if pruned.is_empty() {
                            String::new()
                        } else {
                            format!("; removed {}", pruned.join(", "))
                        }
                    ),
                )
                .await
            }
            (Some(_), false) if recovered => {
                self.event(
                    EventType::Normal,
                    "Recovered",
                    format!(
                        "flux-operator {} from {source_name} applies again",
                        bundle.version
                    ),
                )
                .await
            }
            (Some(_), false) => {}
        }
        self.applied = Some((bundle, generation));
        self.deployment = as_deployment(deployment);
        self.update_rollout_phase();
        Ok(())
    }

    /// Puts the operator Deployment back as the last applied bundle has it, without reading
    /// the source again (a source that is down must not keep a deleted operator away).
    async fn restore(&mut self, trigger: &Trigger) -> Result<(), InstallError> {
        let Some((bundle, _)) = self.applied.take() else {
            return self.reconcile().await;
        };
        let result = self.apply(bundle.deployment()).await;
        let what = match trigger {
            Trigger::DeploymentEdited { generation } => {
                format!("was edited (generation {generation}); the agent restored")
            }
            _ => "was deleted; the agent recreated".to_owned(),
        };
        let deployment = match result {
            Ok(deployment) => deployment,
            Err(err) => {
                self.applied = Some((bundle, 0));
                return Err(err);
            }
        };
        self.event(
            EventType::Warning,
            "DeploymentRestored",
            format!(
                "Deployment {}/{OPERATOR_DEPLOYMENT} {what} it from flux-operator {} ({})",
                self.config.operator_namespace, bundle.version, bundle.digest
            ),
        )
        .await;
        let generation = deployment.metadata.generation.unwrap_or_default();
        self.applied = Some((bundle, generation));
        self.deployment = as_deployment(deployment);
        self.update_rollout_phase();
        Ok(())
    }

    async fn fail(&mut self, err: &InstallError) {
        let reason = err.to_string();
        tracing::warn!(%reason, "flux-operator install attempt failed; retrying with backoff");
        if self.failure.as_deref() != Some(reason.as_str()) {
            self.event(EventType::Warning, err.event_reason(), reason.clone())
                .await;
        }
        self.set(OperatorPhase::Failed, reason.clone());
        self.failure = Some(reason);
    }

    /// Folds a Deployment watch event in; returns a trigger when the Deployment drifted from
    /// what the agent applied.
    fn observe(&mut self, event: Event<Deployment>) -> Option<Trigger> {
        let applied_generation = self.applied.as_ref().map(|(_, g)| *g);
        match event {
            Event::Apply(d) | Event::InitApply(d) => {
                let generation = d.metadata.generation.unwrap_or_default();
                self.deployment = Some(d);
                if applied_generation.is_some_and(|applied| generation > applied) {
                    return Some(Trigger::DeploymentEdited { generation });
                }
            }
            Event::Delete(_) => {
                self.deployment = None;
                if applied_generation.is_some() {
                    return Some(Trigger::DeploymentDeleted);
                }
            }
            Event::Init | Event::InitDone => {}
        }
        self.update_rollout_phase();
        None
    }

    fn update_rollout_phase(&self) {
        if self.failure.is_some() || self.applied.is_none() {
            return;
        }
        let name = format!(
            "Deployment {}/{OPERATOR_DEPLOYMENT}",
            self.config.operator_namespace
        );
        match self.deployment.as_ref().map(rollout) {
            Some(Ok(())) => self.set(OperatorPhase::Ready, ""),
            Some(Err(why)) => self.set(OperatorPhase::WaitingForOperator, format!("{name}: {why}")),
            None => self.set(
                OperatorPhase::WaitingForOperator,
                format!("{name} is not there yet"),
            ),
        }
    }

    /// Server-side applies one object. Without force first: when another field manager owns
    /// some of its fields (someone created or edited it), the apply is repeated with force,
    /// which takes them over, and that is said in a Warning Event `TookOver` and the install's
    /// notices, naming the object, the managers and their fields.
    async fn apply(&mut self, object: &BundleObject) -> Result<DynamicObject, InstallError> {
        let resource = object.kind.api_resource();
        let api: Api<DynamicObject> = match &object.reference.namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &resource),
            None => Api::all_with(self.client.clone(), &resource),
        };
        let name = &object.reference.name;
        let failed = |err: kube::Error| InstallError::Apply {
            object: object.reference.clone(),
            message: kube_message(&err),
        };
        let params = PatchParams::apply(FIELD_MANAGER);
        let conflicts = match api
            .patch(name, &params, &Patch::Apply(&object.manifest))
            .await
        {
            Ok(applied) => {
                tracing::debug!(object = %object.reference, "applied");
                return Ok(applied);
            }
            Err(kube::Error::Api(status)) if status.code == 409 => field_conflicts(&status),
            Err(err) => return Err(failed(err)),
        };
        let applied = api
            .patch(name, &params.force(), &Patch::Apply(&object.manifest))
            .await
            .map_err(failed)?;
        tracing::debug!(object = %object.reference, "applied");
        let note = format!(
            "{} was taken over from {conflicts}: the bundle's values apply now",
            object.reference
        );
        tracing::warn!(%note, "took over fields of another manager");
        self.event(EventType::Warning, "TookOver", note.clone())
            .await;
        if self.notices.len() == MAX_NOTICES {
            self.notices.remove(0);
        }
        self.notices.push(note);
        Ok(applied)
    }

    /// Waits (kube-runtime's `await_condition`, a watch on the one CRD) until `name` is
    /// Established; past [`CRD_TIMEOUT`] the error says what the CRD last showed.
    async fn wait_established(&self, name: &str) -> Result<(), InstallError> {
        let api = Api::<CustomResourceDefinition>::all(self.client.clone());
        let established = await_condition(api.clone(), name, conditions::is_crd_established());
        let detail = match tokio::time::timeout(CRD_TIMEOUT, established).await {
            Ok(Ok(_)) => return Ok(()),
            Ok(Err(err)) => format!("watching it failed: {err}"),
            Err(_) => match api.get_opt(name).await {
                Ok(Some(crd)) => crd
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .and_then(|c| c.iter().find(|c| c.type_ == "Established"))
                    .map_or("no Established condition yet".into(), |c| {
                        format!(
                            "Established={} {}",
                            c.status,
                            c.message.as_deref().unwrap_or_default()
                        )
                    }),
                Ok(None) => "it does not exist".into(),
                Err(err) => kube_message(&err),
            },
        };
        Err(InstallError::CrdNotEstablished {
            name: name.to_owned(),
            detail,
        })
    }

    async fn read_record(&self) -> Result<Option<Record>, InstallError> {
        let api = Api::<ConfigMap>::namespaced(self.client.clone(), &self.config.agent_namespace);
        let map = api
            .get_opt(RECORD_CONFIGMAP)
            .await
            .map_err(|err| InstallError::Kube {
                what: format!(
                    "reading ConfigMap {}/{RECORD_CONFIGMAP}",
                    self.config.agent_namespace
                ),
                message: kube_message(&err),
            })?;
        Ok(map.as_ref().and_then(Record::from_config_map))
    }

    async fn write_record(&self, record: &Record) -> Result<(), InstallError> {
        let api = Api::<ConfigMap>::namespaced(self.client.clone(), &self.config.agent_namespace);
        crate::apply_record(&api, RECORD_CONFIGMAP, record.to_data())
            .await
            .map(|_| tracing::debug!(version = %record.version, "install recorded"))
            .map_err(|err| InstallError::Kube {
                what: format!(
                    "writing ConfigMap {}/{RECORD_CONFIGMAP}",
                    self.config.agent_namespace
                ),
                message: kube_message(&err),
            })
    }

    /// Deletes what `previous` applied and `next` no longer has, when the live object still
    /// carries the agent's label; never CRDs. Failures are logged: a leftover object does not
    /// make the new install fail. Returns what was removed.
    async fn prune(&self, previous: Option<&Record>, next: &[ObjectRef]) -> Vec<String> {
        let Some(previous) = previous else {
            return Vec::new();
        };
        let mut removed = Vec::new();
        for reference in to_prune(&previous.objects, next) {
            let Some(kind) = kind_of(&reference.api_version, &reference.kind) else {
                continue;
            };
            let resource = kind.api_resource();
            let api: Api<DynamicObject> = match &reference.namespace {
                Some(ns) => Api::namespaced_with(self.client.clone(), ns, &resource),
                None => Api::all_with(self.client.clone(), &resource),
            };
            let live = match api.get_opt(&reference.name).await {
                Ok(Some(live)) => live,
                Ok(None) => continue,
                Err(err) => {
                    tracing::warn!(object = %reference, error = %kube_message(&err), "reading an object to prune failed");
                    continue;
                }
            };
            let ours = live
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(MANAGED_BY_LABEL))
                .is_some_and(|v| v == FIELD_MANAGER);
            if !ours {
                tracing::info!(object = %reference, "not pruning: it no longer carries the agent's label");
                continue;
            }
            match api.delete(&reference.name, &DeleteParams::default()).await {
                Ok(_) => {
                    tracing::info!(object = %reference, "pruned: no longer in the bundle");
                    removed.push(reference.to_string());
                }
                Err(err) => {
                    tracing::warn!(object = %reference, error = %kube_message(&err), "pruning failed")
                }
            }
        }
        removed
    }
}

/// The applied Deployment as the typed object (what the API server answered an apply with).
fn as_deployment(object: DynamicObject) -> Option<Deployment> {
    serde_json::to_value(object)
        .and_then(serde_json::from_value)
        .ok()
}

#[cfg(test)]
mod policy_rules {
    use super::*;

    const EXAMPLE: &str = include_str!("../../../deploy/policy/example.yaml");

    fn policy(text: &str) -> Policy {
        Policy::parse(text).unwrap()
    }

    #[test]
    fn the_held_policy_decides_versions_and_sources_else_the_flag() {
        let flag = AllowedVersions::parse("v0.57.0", "--operator-version").unwrap();
        let example = policy(EXAMPLE);
        let oci = "oci://ghcr.io/controlplaneio-fluxcd/flux-operator-manifests:v0.58.1";

        assert_eq!(install_rules(None, &flag, oci).unwrap(), &flag);
        let allowed = install_rules(Some(&example), &flag, oci).unwrap();
        assert_eq!(
            allowed.to_string(),
            "\">=0.58.0 <0.59.0\" allowed by policy generation 7"
        );
        assert_eq!(
            install_rules(Some(&example), &flag, "configmap:flux-operator")
                .unwrap()
                .to_string(),
            allowed.to_string()
        );

        let err = install_rules(Some(&example), &flag, "oci://docker.io/evil/operator:v1")
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "the bundle source oci://docker.io/evil/operator:v1 is not one of \
             \"oci://ghcr.io/controlplaneio-fluxcd/flux-operator-manifests*\", \"configmap:*\" \
             allowed by policy generation 7"
        );

        // A policy without operator rules leaves the flag in force and any source allowed.
        let (head, _) = EXAMPLE.split_once("  operator:\n").unwrap();
        let (_, tail) = EXAMPLE.split_once("  distribution:\n").unwrap();
        let without = policy(&format!("{head}  distribution:\n{tail}"));
        assert_eq!(
            install_rules(Some(&without), &flag, "oci://docker.io/any:v1").unwrap(),
            &flag
        );
    }

    #[test]
    fn a_bundle_outside_the_policy_range_names_the_policy_generation() {
        let example = policy(EXAMPLE);
        let flag = AllowedVersions::parse("v0.99.0", "--operator-version").unwrap();
        let allowed = install_rules(Some(&example), &flag, "configmap:x").unwrap();
        // What `Bundle::check_version` returns for a bundle outside the range.
        let refused = BundleError::VersionNotAllowed {
            version: "v0.99.0".into(),
            allowed: allowed.clone(),
        };
        assert_eq!(
            refused.to_string(),
            "flux-operator v0.99.0 is outside \">=0.58.0 <0.59.0\" allowed by policy generation 7"
        );
    }
}

#[cfg(test)]
mod takeover {
    use kube::core::Status;

    use super::field_conflicts;

    fn conflict(causes: &[(&str, &str)]) -> Status {
        let causes: Vec<_> = causes
            .iter()
            .map(|(message, field)| {
                serde_json::json!({"reason": "FieldManagerConflict", "message": message, "field": field})
            })
            .collect();
        serde_json::from_value(serde_json::json!({
            "code": 409,
            "message": "Apply failed with conflicts",
            "details": {"causes": causes},
        }))
        .unwrap()
    }

    #[test]
    fn a_conflict_names_each_manager_once_with_its_fields() {
        let status = conflict(&[
            (
                r#"conflict with "kubectl-set" using apps/v1"#,
                ".spec.template.spec.containers[name=\"manager\"].image",
            ),
            (r#"conflict with "helm" using apps/v1"#, ".spec.replicas"),
            (
                r#"conflict with "kubectl-set" using apps/v1"#,
                ".metadata.labels.a",
            ),
        ]);
        assert_eq!(
            field_conflicts(&status),
            "field manager \"kubectl-set\" (\".spec.template.spec.containers[name=\\\"manager\\\"].image\", \
             \".metadata.labels.a\"), field manager \"helm\" (\".spec.replicas\")"
        );
    }

    #[test]
    fn many_fields_and_long_names_stay_bounded() {
        let long = format!("conflict with \"{}\" using v1", "m".repeat(500));
        let fields: Vec<String> = (0..40).map(|i| format!(".data.k{i}")).collect();
        let causes: Vec<(&str, &str)> =
            fields.iter().map(|f| (long.as_str(), f.as_str())).collect();
        let text = field_conflicts(&conflict(&causes));
        assert!(text.len() < 300, "{text}");
        assert!(text.ends_with(" and 35 more)"), "{text}");
        assert!(
            field_conflicts(&conflict(&[])).starts_with("another field manager (\"Apply failed")
        );
    }
}
