//! Adopting the Flux that runs already: read what runs (`facts`), plan from it (`plan`, pure),
//! and apply: Helm's ownership metadata leaves the FluxInstance (metadata only, so no
//! controller is re-rendered), the adoption is recorded in ConfigMap `tenantflux-adoption`, and
//! every Kustomization Ready before is asked to reconcile once and must be Ready again at its
//! revision (the upgrade's health check).
//!
//! What it reads, with the least the agent's RBAC allows: Deployments and FluxInstances by
//! name (`flux-operator`, Flux's controller names, `flux`) in every namespace, listed with a
//! `metadata.name` field selector so RBAC's `resourceNames` hold; Helm's release records by
//! their metadata only (labels `owner=helm`), in the namespace Flux runs in, and only when the
//! platform granted `list secrets` there (the chart's `adopt: true`). The agent never sets an
//! ownerReference or finalizer on what it adopts, so removing the agent removes none of it.

pub mod plan;

use std::{future::Future, sync::Arc, time::Duration};

use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{ConfigMap, Secret},
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{
    Api, Client, Resource,
    api::{DynamicObject, ListParams, Patch, PatchParams},
};
use serde_json::{Value, json};
use tenantflux_core::{
    FIELD_MANAGER,
    flux::{
        ADOPTED_FROM_HELM_ANNOTATION, INSTANCE_NAME, OPERATOR_DEPLOYMENT, REQUESTED_AT_ANNOTATION,
    },
    policy::Policy,
    text::chain,
};
use tokio::sync::watch;

use crate::{
    instance::flux_instance_resource,
    operator::InstallState,
    policy::store::Held,
    upgrade::health::{self, Healthy},
};
use plan::{AdoptionPlan, Agent, Case, Facts, Found, HelmRecord};

/// The ConfigMap in the agent's namespace that records an adoption.
pub const RECORD_NAME: &str = crate::operator::ADOPTION_RECORD;
/// How long the apply waits for the Kustomizations by default.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

#[derive(Debug, thiserror::Error)]
pub enum AdoptError {
    #[error("{what}")]
    Kube {
        what: String,
        #[source]
        source: Box<kube::Error>,
    },
    #[error("adoption refused, nothing was changed: {0}")]
    Refused(String),
    #[error("{0}")]
    NotReady(String),
    /// The caller may not make a write the adoption needs; nothing was written.
    #[error("adoption refused, nothing was changed: {0}")]
    Denied(String),
}

/// A write adoption makes in the caller's name, for their authorization before anything is
/// written: adoption must not do what the caller could not do themselves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Write {
    /// Create FluxInstance `flux` in the namespace (a `flux install` cluster).
    CreateInstance { namespace: String },
    /// Ask Kustomization `namespace/name` to reconcile (an annotation).
    AnnotateKustomization { namespace: String, name: String },
}

/// The caller's authorization of a [`Write`]: `Ok(true)` allowed, `Ok(false)` denied, `Err`
/// when it could not be decided.
pub trait Authorize: Send + Sync {
    fn may(&self, write: &Write) -> impl Future<Output = Result<bool, String>> + Send;
}

impl AdoptError {
    /// Whether the agent's own RBAC refused it: retrying will not help.
    pub fn is_forbidden(&self) -> bool {
        matches!(self, Self::Kube { source, .. } if matches!(source.as_ref(), kube::Error::Api(s) if s.code == 403))
    }
}

fn kube_err(what: impl Into<String>) -> impl FnOnce(kube::Error) -> AdoptError {
    let what = what.into();
    move |source| AdoptError::Kube {
        what,
        source: Box::new(source),
    }
}

/// What the caller of an apply chose.
#[derive(Clone, Copy, Debug, Default)]
pub struct ApplyOptions {
    pub allow_rollout: bool,
    pub timeout_seconds: u32,
}

/// What an apply did.
#[derive(Clone, Debug)]
pub struct Adopted {
    pub plan: AdoptionPlan,
    pub done: Vec<String>,
    pub kustomizations: Vec<Healthy>,
}

/// Plans and applies adoptions.
#[derive(Clone)]
pub struct Adopter {
    client: Client,
    agent_namespace: String,
    operator_namespace: String,
    policy: watch::Receiver<Held>,
    install: Option<watch::Receiver<InstallState>>,
    /// One apply at a time.
    lock: Arc<tokio::sync::Mutex<()>>,
}

fn found(kind: &str, meta: &ObjectMeta) -> Found {
    Found {
        kind: kind.into(),
        namespace: meta.namespace.clone().unwrap_or_default(),
        name: meta.name.clone().unwrap_or_default(),
        labels: meta.labels.clone().unwrap_or_default(),
        annotations: meta.annotations.clone().unwrap_or_default(),
        managers: {
            let mut managers: Vec<String> = meta
                .managed_fields
                .iter()
                .flatten()
                .filter_map(|m| m.manager.clone())
                .collect();
            managers.dedup();
            managers
        },
        generation: meta.generation.unwrap_or_default(),
        ..Found::default()
    }
}

fn from_deployment(deployment: &Deployment) -> Found {
    let container = deployment
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|p| p.containers.first());
    Found {
        image: container.and_then(|c| c.image.clone()).unwrap_or_default(),
        args: container.and_then(|c| c.args.clone()).unwrap_or_default(),
        ..found("Deployment", deployment.meta())
    }
}

impl Adopter {
    pub fn new(
        client: Client,
        agent_namespace: &str,
        operator_namespace: &str,
        policy: watch::Receiver<Held>,
        install: Option<watch::Receiver<InstallState>>,
    ) -> Self {
        Self {
            client,
            agent_namespace: agent_namespace.into(),
            operator_namespace: operator_namespace.into(),
            policy,
            install,
            lock: Arc::default(),
        }
    }

    pub fn operator_namespace(&self) -> &str {
        &self.operator_namespace
    }

    async fn deployments(&self, name: &str) -> Result<Vec<Found>, AdoptError> {
        let api: Api<Deployment> = Api::all(self.client.clone());
        let list = api
            .list(&ListParams::default().fields(&format!("metadata.name={name}")))
            .await
            .map_err(kube_err(format!("listing Deployments {name}")))?;
        Ok(list.items.iter().map(from_deployment).collect())
    }

    /// What runs now.
    pub async fn facts(&self) -> Result<Facts, AdoptError> {
        // Only the operator namespace counts: a Deployment named like Flux's elsewhere may be
        // a namespace admin's decoy, which must neither block adoption nor pass for a Flux.
        let mut facts = Facts::default();
        let (operators, ignored): (Vec<Found>, Vec<Found>) = self
            .deployments(OPERATOR_DEPLOYMENT)
            .await?
            .into_iter()
            .partition(|f| f.namespace == self.operator_namespace);
        facts.operators = operators;
        facts.ignored = ignored;
        for name in plan::controller_names() {
            let (ours, elsewhere): (Vec<Found>, Vec<Found>) = self
                .deployments(name)
                .await?
                .into_iter()
                .partition(|f| f.namespace == self.operator_namespace);
            facts.controllers.extend(ours);
            facts.ignored.extend(elsewhere);
        }
        let instances: Api<DynamicObject> =
            Api::all_with(self.client.clone(), &flux_instance_resource());
        facts.instances = match instances
            .list(&ListParams::default().fields(&format!("metadata.name={INSTANCE_NAME}")))
            .await
        {
            Ok(list) => list
                .items
                .iter()
                .map(|o| Found {
                    spec: o.data.get("spec").cloned().unwrap_or(Value::Null),
                    ..found("FluxInstance", &o.metadata)
                })
                .collect(),
            // No CRD: no FluxInstance.
            Err(kube::Error::Api(status)) if status.code == 404 => Vec::new(),
            Err(err) => return Err(kube_err("listing FluxInstances")(err)),
        };
        let namespace = facts
            .instances
            .first()
            .or(facts.operators.first())
            .or(facts.controllers.first())
            .map_or_else(|| self.operator_namespace.clone(), |f| f.namespace.clone());
        facts.helm_records = self.helm_records(&namespace).await;
        // Best effort: the plan is still right without them, only less helpful.
        let kustomizations = health::list(&self.client).await.unwrap_or_else(|err| {
            tracing::warn!(error = %chain(&err), "adopt plan: listing Kustomizations");
            Vec::new()
        });
        facts.appliers = kustomizations
            .iter()
            .filter(|k| {
                plan::applied_controllers(k)
                    .iter()
                    .any(|d| d.starts_with(&format!("{namespace}/")))
            })
            .map(|k| {
                format!(
                    "{}/{}",
                    k["metadata"]["namespace"].as_str().unwrap_or_default(),
                    k["metadata"]["name"].as_str().unwrap_or_default()
                )
            })
            .collect();
        let records: Api<ConfigMap> = Api::namespaced(self.client.clone(), &self.agent_namespace);
        facts.adopted = records
            .get_opt(RECORD_NAME)
            .await
            .map_err(kube_err(format!("reading ConfigMap {RECORD_NAME}")))?
            .and_then(|m| m.data?.get("outcome").cloned())
            .is_some_and(|o| o == "adopted");
        Ok(facts)
    }

    /// Helm's release records in `namespace`, from their metadata only (never their payload).
    async fn helm_records(&self, namespace: &str) -> Result<Vec<HelmRecord>, String> {
        let api: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
        match api
            .list_metadata(&ListParams::default().labels("owner=helm"))
            .await
        {
            Ok(list) => Ok(list
                .items
                .iter()
                .filter_map(|s| {
                    let name = s.metadata.name.clone()?;
                    let labels = s.metadata.labels.clone().unwrap_or_default();
                    Some(HelmRecord {
                        namespace: namespace.to_owned(),
                        release: labels.get("name").cloned().unwrap_or_default(),
                        status: labels.get("status").cloned().unwrap_or_default(),
                        name,
                    })
                })
                .filter(|r| r.name.starts_with("sh.helm.release.v1."))
                .collect()),
            Err(kube::Error::Api(status)) if status.code == 403 => Err(format!(
                "the agent may not list Secrets in {namespace} (the chart grants it with adopt: true), so Helm's release records there are not named"
            )),
            Err(err) => Err(format!(
                "listing Helm's release records in {namespace} failed: {}",
                chain(&err)
            )),
        }
    }

    fn policy(&self) -> Option<Arc<Policy>> {
        self.policy
            .borrow()
            .accepted
            .as_ref()
            .map(|a| a.policy.clone())
    }

    /// The version of the agent's bundle: the one applied, else the one read and held back.
    fn bundle_version(&self) -> Option<String> {
        self.install.as_ref().map(|rx| {
            let state = rx.borrow();
            if state.version.is_empty() {
                state.offered.clone()
            } else {
                state.version.clone()
            }
        })
    }

    /// The plan of `facts`.
    pub fn plan(&self, facts: &Facts) -> AdoptionPlan {
        let policy = self.policy();
        let bundle = self.bundle_version().filter(|v| !v.is_empty());
        plan::plan(
            facts,
            &Agent {
                operator_namespace: &self.operator_namespace,
                bundle_version: bundle.as_deref(),
                policy: policy.as_deref(),
            },
        )
    }

    async fn record(
        &self,
        outcome: &str,
        plan: &AdoptionPlan,
        allow_rollout: bool,
    ) -> Result<(), AdoptError> {
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), &self.agent_namespace);
        let map = json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": RECORD_NAME,
                "labels": {tenantflux_core::MANAGED_BY_LABEL: FIELD_MANAGER},
            },
            "data": {
                "outcome": outcome,
                "case": plan.case.name(),
                "namespace": plan.namespace,
                "summary": plan.summary,
                // Read by the install loop (`--adopt`): it may replace the operator now.
                "allowRollout": allow_rollout.to_string(),
            },
        });
        api.patch(
            RECORD_NAME,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&map),
        )
        .await
        .map_err(kube_err(format!("writing ConfigMap {RECORD_NAME}")))?;
        Ok(())
    }

    /// Plans again and adopts, unless the plan refuses or would roll the controllers out
    /// without `allow_rollout`. Running it again after an interruption ends in the same state.
    pub async fn apply(
        &self,
        options: ApplyOptions,
        caller: &impl Authorize,
    ) -> Result<Adopted, AdoptError> {
        let _one = self.lock.lock().await;
        let facts = self.facts().await?;
        let plan = self.plan(&facts);
        match plan.case {
            Case::Refused => return Err(AdoptError::Refused(plan.refusals.join("; "))),
            Case::None => {
                return Ok(Adopted {
                    plan,
                    done: Vec::new(),
                    kustomizations: Vec::new(),
                });
            }
            Case::FluxInstall | Case::Operator => {}
        }
        if plan.rollout && !options.allow_rollout {
            return Err(AdoptError::Refused(format!(
                "{}; run again with --allow-rollout to accept it",
                plan.rollout_reason
            )));
        }
        let kustomizations = health::list(&self.client)
            .await
            .map_err(|e| AdoptError::NotReady(chain(&e)))?;
        let undecided = |err: String| AdoptError::NotReady(format!("authorizing adoption: {err}"));
        // Every write is authorized before the first one is made.
        if plan.case == Case::FluxInstall && plan.instance.is_some() {
            let write = Write::CreateInstance {
                namespace: plan.namespace.clone(),
            };
            if !caller.may(&write).await.map_err(undecided)? {
                return Err(AdoptError::Denied(format!(
                    "adopting this Flux creates FluxInstance {}/{INSTANCE_NAME}, and you may not create FluxInstances there",
                    plan.namespace
                )));
            }
        }
        // Only what the caller may patch is asked to reconcile (and reported back).
        let mut healthy = Vec::new();
        let mut skipped = 0;
        for k in health::snapshot(&kustomizations) {
            let write = Write::AnnotateKustomization {
                namespace: k.namespace.clone(),
                name: k.name.clone(),
            };
            if caller.may(&write).await.map_err(undecided)? {
                healthy.push(k);
            } else {
                skipped += 1;
            }
        }
        let timeout = match options.timeout_seconds {
            0 => DEFAULT_TIMEOUT,
            s => Duration::from_secs(u64::from(s)),
        };
        let deadline = tokio::time::Instant::now() + timeout;
        self.record("adopting", &plan, options.allow_rollout)
            .await?;
        crate::failpoint("adopt-recorded-adopting").await;
        let mut done = Vec::new();
        if let Some(instance) = facts.instances.first().filter(|i| i.helm_owned()) {
            self.release_from_helm(instance).await?;
            done.push(format!(
                "removed Helm's ownership label and annotations from FluxInstance {}/{INSTANCE_NAME}",
                instance.namespace
            ));
        }
        if let Some(instance) = plan
            .instance
            .as_ref()
            .filter(|_| plan.case == Case::FluxInstall)
        {
            self.create_instance(&plan.namespace, instance, deadline)
                .await?;
            done.push(format!(
                "created FluxInstance {}/{INSTANCE_NAME} to match what runs; flux-operator reconciled it (Ready) and rendered Flux's controllers",
                plan.namespace
            ));
        }
        self.request_reconciles(&healthy, &kustomizations).await?;
        loop {
            let live = health::list(&self.client)
                .await
                .map_err(|e| AdoptError::NotReady(chain(&e)))?;
            if health::check(&mut healthy, &live) {
                break;
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(AdoptError::NotReady(format!(
                    "adopted, but not every Kustomization Ready before is Ready again after {}s: {}",
                    timeout.as_secs(),
                    health::not_ready(&healthy).join("; ")
                )));
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        if !healthy.is_empty() {
            done.push(format!(
                "{} Kustomization(s) Ready before are Ready again at their revisions",
                healthy.len()
            ));
        }
        if skipped > 0 {
            done.push(format!(
                "{skipped} Ready Kustomization(s) you may not patch were not asked to reconcile or checked"
            ));
        }
        self.record("adopted", &plan, options.allow_rollout).await?;
        done.push(format!(
            "recorded the adoption in ConfigMap {}/{RECORD_NAME}",
            self.agent_namespace
        ));
        tracing::info!(summary = %plan.summary, "adopted the Flux that runs");
        Ok(Adopted {
            plan: AdoptionPlan {
                adopted: true,
                ..plan
            },
            done,
            kustomizations: healthy,
        })
    }

    /// Removes Helm's ownership from the FluxInstance: a merge patch of its metadata only, so
    /// its generation and flux-operator's rendering stay as they are.
    async fn release_from_helm(&self, instance: &Found) -> Result<(), AdoptError> {
        let api: Api<DynamicObject> = Api::namespaced_with(
            self.client.clone(),
            &instance.namespace,
            &flux_instance_resource(),
        );
        let mut labels = serde_json::Map::new();
        if instance.labels.get(plan::MANAGED_BY).map(String::as_str) == Some(plan::HELM_MANAGED_BY)
        {
            labels.insert(plan::MANAGED_BY.into(), Value::Null);
        }
        let patch = json!({"metadata": {
            "labels": labels,
            "annotations": {
                plan::HELM_RELEASE_NAME: null,
                plan::HELM_RELEASE_NAMESPACE: null,
                ADOPTED_FROM_HELM_ANNOTATION: instance.helm_release().unwrap_or_default(),
            },
        }});
        api.patch(
            INSTANCE_NAME,
            &PatchParams {
                field_manager: Some(FIELD_MANAGER.into()),
                ..PatchParams::default()
            },
            &Patch::Merge(&patch),
        )
        .await
        .map_err(kube_err(format!(
            "removing Helm's ownership from FluxInstance {}/{INSTANCE_NAME}",
            instance.namespace
        )))?;
        Ok(())
    }

    /// `flux install`: waits for a flux-operator in `namespace` (the agent's install loop
    /// installs it from its bundle), creates the planned FluxInstance and waits until the
    /// operator reports it Ready, i.e. it rendered and applied Flux's controllers.
    async fn create_instance(
        &self,
        namespace: &str,
        instance: &Value,
        deadline: tokio::time::Instant,
    ) -> Result<(), AdoptError> {
        let operators: Api<Deployment> = Api::namespaced(self.client.clone(), namespace);
        loop {
            let available = operators
                .get_opt(OPERATOR_DEPLOYMENT)
                .await
                .map_err(kube_err(format!(
                    "reading Deployment {namespace}/{OPERATOR_DEPLOYMENT}"
                )))?
                .and_then(|d| d.status?.available_replicas)
                .is_some_and(|n| n > 0);
            if available {
                break;
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(AdoptError::NotReady(format!(
                    "no flux-operator is available in {namespace}: the agent installs it from its --operator-bundle (`kubectl tenantflux status` shows that install); nothing of Flux was changed"
                )));
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), namespace, &flux_instance_resource());
        // Server-side apply without force, as the policy defaults do (the agent's RBAC names
        // FluxInstance `flux`, which a create cannot be limited to): one that appeared since
        // the plan is refused here, and one written meanwhile with other values is a conflict.
        if api
            .get_opt(INSTANCE_NAME)
            .await
            .map_err(kube_err(format!(
                "reading FluxInstance {namespace}/{INSTANCE_NAME}"
            )))?
            .is_some()
        {
            return Err(AdoptError::Refused(format!(
                "FluxInstance {namespace}/{INSTANCE_NAME} appeared since the plan: run `kubectl tenantflux adopt plan` again"
            )));
        }
        api.patch(
            INSTANCE_NAME,
            &PatchParams::apply(FIELD_MANAGER),
            &Patch::Apply(instance),
        )
        .await
        .map_err(kube_err(format!(
            "creating FluxInstance {namespace}/{INSTANCE_NAME}"
        )))?;
        crate::failpoint("adopt-instance-created").await;
        loop {
            let live = api.get(INSTANCE_NAME).await.map_err(kube_err(format!(
                "reading FluxInstance {namespace}/{INSTANCE_NAME}"
            )))?;
            let (ready, message) = ready_condition(live.metadata.generation, &live.data);
            if ready {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(AdoptError::NotReady(format!(
                    "created FluxInstance {namespace}/{INSTANCE_NAME}, but flux-operator did not report it Ready in time{}; `kubectl tenantflux status` shows it",
                    message.map(|m| format!(": {m}")).unwrap_or_default()
                )));
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    /// Asks each Kustomization Ready before to reconcile once, so the health check proves Flux
    /// works under its new owner.
    async fn request_reconciles(
        &self,
        healthy: &[Healthy],
        live: &[Value],
    ) -> Result<(), AdoptError> {
        // The version the cluster serves them at, as they were listed.
        let Some(api_version) = live
            .first()
            .and_then(|k| k["apiVersion"].as_str())
            .and_then(|v| v.split_once('/'))
        else {
            return Ok(());
        };
        let resource = kube::api::ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk(api_version.0, api_version.1, "Kustomization"),
            "kustomizations",
        );
        let at = k8s_openapi::jiff::Timestamp::now().to_string();
        for k in healthy {
            let api: Api<DynamicObject> =
                Api::namespaced_with(self.client.clone(), &k.namespace, &resource);
            let patch = json!({"metadata": {"annotations": {REQUESTED_AT_ANNOTATION: at}}});
            api.patch(
                &k.name,
                &PatchParams {
                    field_manager: Some(FIELD_MANAGER.into()),
                    ..PatchParams::default()
                },
                &Patch::Merge(&patch),
            )
            .await
            .map_err(kube_err(format!(
                "asking Kustomization {}/{} to reconcile",
                k.namespace, k.name
            )))?;
        }
        Ok(())
    }
}

/// Whether an object's Ready condition (in `data`, its fields beside metadata) is True for its
/// `generation`, and the condition's message.
fn ready_condition(generation: Option<i64>, data: &Value) -> (bool, Option<String>) {
    let Some(ready) = data
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
    else {
        return (false, None);
    };
    let current = generation.is_none()
        || ready["observedGeneration"].as_i64().is_none()
        || ready["observedGeneration"].as_i64() == generation;
    (
        ready["status"] == "True" && current,
        ready["message"].as_str().map(str::to_owned),
    )
}

/// The agent adopting on its own at start (`--adopt`, the platform's choice when it installed
/// the agent): no caller to hold the writes to.
struct AtStart;

impl Authorize for AtStart {
    async fn may(&self, _: &Write) -> Result<bool, String> {
        Ok(true)
    }
}

/// `--adopt`: adopts once at start (as `adopt apply` without `--allow-rollout`), retrying what
/// may pass (the API server, flux-operator's CRDs not there yet) and giving up, with a warning,
/// on a refusal. An adoption recorded already is not repeated; one an earlier agent left
/// unfinished (`adopting`) is applied again, which ends in the same state.
pub async fn run_at_start(adopter: Adopter, shutdown: tokio_util::sync::CancellationToken) {
    let mut delays = crate::retry_delays(Duration::from_secs(2), Duration::from_secs(60));
    loop {
        let attempt = async {
            if adopter.facts().await?.adopted {
                return Ok(None);
            }
            adopter
                .apply(ApplyOptions::default(), &AtStart)
                .await
                .map(Some)
        };
        let result = tokio::select! {
            () = shutdown.cancelled() => return,
            result = attempt => result,
        };
        match result {
            Ok(None) => {
                tracing::info!("the Flux that runs was adopted already (ConfigMap {RECORD_NAME})");
                return;
            }
            Ok(Some(adopted)) => {
                tracing::info!(done = ?adopted.done, "adoption at start: {}", adopted.plan.summary);
                return;
            }
            Err(AdoptError::Refused(reason)) => {
                tracing::warn!(%reason, "--adopt: adoption refused; nothing was changed");
                return;
            }
            Err(err) => {
                let wait = delays.next().unwrap_or(Duration::from_secs(60));
                tracing::warn!(error = %chain(&err), ?wait, "--adopt: adoption failed; retrying");
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = tokio::time::sleep(wait) => {}
                }
            }
        }
    }
}
