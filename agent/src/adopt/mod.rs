//! Adopting the Flux that runs already: read what runs (`facts`), plan from it (`plan`, pure),
//! and apply: Helm's ownership metadata leaves the FluxInstance (metadata only, so no
//! controller is re-rendered), the adoption is recorded in ConfigMap `tenantflux-adoption`, and
//! every Kustomization Ready before is asked to reconcile once and must be Ready again at its
//! revision (the upgrade's health check).
//!
//! What it reads, with the least the agent's RBAC allows: Deployments and FluxInstances by
//! name (`flux-operator`, Flux's controller names, `flux`) in every namespace, listed with a
//! `metadata.name` field selector so RBAC's `resourceNames` hold; Helm's release records
//! (labels `owner=helm`) in the namespace Flux runs in, and only when the platform granted
//! Secrets there (the chart's `adopt: true`): their names, and the manifests of the releases
//! that own Flux, whose objects adoption marks `helm.sh/resource-policy: keep` live and in the
//! records ([`keep`]) so that `helm uninstall` or `helm upgrade` of the old release leaves
//! Flux. The agent never sets an ownerReference or finalizer on what it adopts, so removing
//! the agent removes none of it.

pub mod keep;
pub mod plan;

use std::{collections::BTreeSet, future::Future, sync::Arc, time::Duration};

use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{ConfigMap, Secret},
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{
    Api, Client, Resource,
    api::{ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams},
    discovery::Scope,
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
    flux_instance_resource,
    operator::InstallState,
    policy::store::Held,
    upgrade::health::{self, Healthy},
};
use keep::{Live, ManifestObject, Marks, Owned};
use plan::{AdoptionPlan, Agent, Case, Facts, Found, HelmRecord};

/// The ConfigMap in the agent's namespace that records an adoption.
pub const RECORD_NAME: &str = crate::operator::ADOPTION_RECORD;
/// How long the apply waits for the Kustomizations by default.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);
/// The longest wait a caller may ask for: the apply holds the adoption lock while it waits.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// The wait an apply was asked for (0: the default), or why it is refused.
pub fn apply_timeout(seconds: u32) -> Result<Duration, String> {
    match u64::from(seconds) {
        0 => Ok(DEFAULT_TIMEOUT),
        s if s > MAX_TIMEOUT.as_secs() => Err(format!(
            "--timeout {s}s is longer than the {}m an adoption may hold its lock; ask for at most {}m",
            MAX_TIMEOUT.as_secs() / 60,
            MAX_TIMEOUT.as_secs() / 60
        )),
        s => Ok(Duration::from_secs(s)),
    }
}

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
    /// The kinds of Helm's objects discovery found (see [`Adopter::resource`]).
    kinds: Arc<std::sync::Mutex<std::collections::HashMap<String, (ApiResource, bool)>>>,
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
            kinds: Arc::default(),
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
        let stored = self.stored().await?;
        facts.adopted = stored.outcome == "adopted";
        let mut releases = facts.owning_releases();
        releases.extend(stored.releases);
        facts.marks = self.marks(&namespace, &releases, &stored.kept).await;
        Ok(facts)
    }

    /// The adoption's record: its outcome, the releases it adopted from and the objects it
    /// marked.
    async fn stored(&self) -> Result<Stored, AdoptError> {
        let records: Api<ConfigMap> = Api::namespaced(self.client.clone(), &self.agent_namespace);
        let data = records
            .get_opt(RECORD_NAME)
            .await
            .map_err(kube_err(format!("reading ConfigMap {RECORD_NAME}")))?
            .and_then(|m| m.data)
            .unwrap_or_default();
        let field = |key: &str| data.get(key).cloned().unwrap_or_default();
        Ok(Stored {
            outcome: field("outcome"),
            allow_rollout: field("allowRollout") == "true",
            releases: field("releases")
                .split(',')
                .filter(|r| !r.is_empty())
                .map(str::to_owned)
                .collect(),
            kept: field("kept")
                .lines()
                .filter_map(ManifestObject::from_key)
                .collect(),
        })
    }

    /// The objects the `releases` hold (from their records in `namespace`, whose `list
    /// secrets` the chart's `adopt: true` grants) and `stored` (marked before, whose records
    /// may be gone since), each with where it stands; and the records that do not keep them.
    async fn marks(
        &self,
        namespace: &str,
        releases: &BTreeSet<String>,
        stored: &[ManifestObject],
    ) -> Marks {
        let mut marks = Marks::default();
        if releases.is_empty() && stored.is_empty() {
            return marks;
        }
        let mut objects: Vec<(ManifestObject, String)> = Vec::new();
        match self.release_payloads(namespace, releases).await {
            Ok(payloads) => {
                // Per release, the objects of its newest record; every record is kept.
                let mut newest: std::collections::BTreeMap<&str, (i64, &Vec<ManifestObject>)> =
                    std::collections::BTreeMap::new();
                for payload in &payloads {
                    if payload.unkept {
                        marks
                            .records
                            .push(format!("{namespace}/{}", payload.secret));
                    }
                    let entry = newest
                        .entry(payload.release.as_str())
                        .or_insert((payload.version, &payload.objects));
                    if payload.version > entry.0 {
                        *entry = (payload.version, &payload.objects);
                    }
                }
                for (release, (_, held)) in newest {
                    objects.extend(held.iter().map(|o| (o.clone(), release.to_owned())));
                }
            }
            Err(note) => marks.note = note,
        }
        for object in stored {
            if !objects.iter().any(|(o, _)| o.key() == object.key()) {
                objects.push((object.clone(), String::new()));
            }
        }
        for (mut object, release) in objects {
            let live = match self.resource(&object).await {
                Err(_) => Live::Gone,
                Ok((resource, namespaced)) => {
                    if namespaced && object.namespace.is_empty() {
                        object.namespace = namespace.to_owned();
                    }
                    // Flux's releases install into their own namespace: a record (which
                    // whoever may write Secrets there can plant) naming another namespace's
                    // object does not get the agent to touch it.
                    if namespaced && object.namespace != namespace {
                        continue;
                    }
                    if !namespaced {
                        object.namespace.clear();
                    }
                    self.live_mark(&resource, &object).await
                }
            };
            marks.objects.push(Owned {
                object,
                release,
                live,
            });
        }
        marks
    }

    /// The served resource of `object`'s kind and whether it is namespaced, from discovery;
    /// kept once found, since the marks are checked again every [`MARKS_CHECK`] (a kind that is
    /// no longer served then reads as its objects gone).
    async fn resource(&self, object: &ManifestObject) -> Result<(ApiResource, bool), kube::Error> {
        let key = format!("{}/{}", object.api_version, object.kind);
        if let Some(found) = self.kinds.lock().expect("kinds lock").get(&key) {
            return Ok(found.clone());
        }
        let (group, version) = object
            .api_version
            .split_once('/')
            .unwrap_or(("", object.api_version.as_str()));
        let gvk = GroupVersionKind::gvk(group, version, &object.kind);
        let (resource, capabilities) = kube::discovery::pinned_kind(&self.client, &gvk).await?;
        let found = (resource, capabilities.scope == Scope::Namespaced);
        self.kinds
            .lock()
            .expect("kinds lock")
            .insert(key, found.clone());
        Ok(found)
    }

    async fn live_mark(&self, resource: &ApiResource, object: &ManifestObject) -> Live {
        let api = self.dynamic(resource, object);
        match api.get_opt(&object.name).await {
            Ok(None) => Live::Gone,
            Ok(Some(live)) if live.metadata.deletion_timestamp.is_some() => Live::Deleting,
            Ok(Some(live)) => {
                let marked = live
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(keep::RESOURCE_POLICY))
                    .is_some_and(|v| v == keep::KEEP);
                if marked { Live::Marked } else { Live::Unmarked }
            }
            Err(kube::Error::Api(status)) if status.code == 403 => Live::Denied,
            Err(err) => {
                tracing::warn!(error = %chain(&err), object = %object.describe(), "adoption: reading an adopted object");
                Live::Denied
            }
        }
    }

    fn dynamic(&self, resource: &ApiResource, object: &ManifestObject) -> Api<DynamicObject> {
        if object.namespace.is_empty() {
            Api::all_with(self.client.clone(), resource)
        } else {
            Api::namespaced_with(self.client.clone(), &object.namespace, resource)
        }
    }

    /// The records of `releases` in `namespace`, decoded.
    async fn release_payloads(
        &self,
        namespace: &str,
        releases: &BTreeSet<String>,
    ) -> Result<Vec<Payload>, String> {
        // Only the records of those releases come with their payloads (Helm labels each
        // record `name=RELEASE`), not every release's in the namespace.
        let names: Vec<&str> = releases
            .iter()
            .filter_map(|r| r.strip_prefix(&format!("{namespace}/")))
            // A label value (Helm's release names are): nothing else reaches the selector.
            .filter(|name| {
                !name.is_empty()
                    && name.len() <= 63
                    && name
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            })
            .collect();
        if names.is_empty() {
            return Ok(Vec::new());
        }
        let api: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
        let selector = format!("owner=helm,name in ({})", names.join(","));
        let list = api
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(|err| match err {
                kube::Error::Api(status) if status.code == 403 => format!(
                    "the agent may not list Secrets in {namespace} (the chart grants it with adopt: true), so the objects of Helm's releases there are not marked"
                ),
                err => format!("reading Helm's release records in {namespace}: {}", chain(&err)),
            })?;
        let mut payloads = Vec::new();
        for secret in list.items {
            let labels = secret.metadata.labels.clone().unwrap_or_default();
            let release = labels.get("name").cloned().unwrap_or_default();
            let name = secret.metadata.name.clone().unwrap_or_default();
            if !name.starts_with("sh.helm.release.v1.")
                || !releases.contains(&format!("{namespace}/{release}"))
            {
                continue;
            }
            let what = format!("Helm release record {namespace}/{name}");
            let data = secret
                .data
                .as_ref()
                .and_then(|d| d.get("release"))
                .ok_or_else(|| format!("{what} has no key release"))?;
            let payload = keep::decode_record(&data.0).map_err(|e| format!("{what}: {e}"))?;
            let manifest = payload["manifest"].as_str().unwrap_or_default();
            let objects = keep::manifest_objects(manifest).map_err(|e| format!("{what}: {e}"))?;
            payloads.push(Payload {
                version: labels
                    .get("version")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or_default(),
                unkept: objects.iter().any(|o| !o.kept),
                release: format!("{namespace}/{release}"),
                secret: name,
                objects,
            });
        }
        Ok(payloads)
    }

    /// Marks what `marks` found unmarked: each live object (an annotation, nothing else of it
    /// changes) and each record's manifest. Returns what it did, one line each.
    async fn apply_marks(&self, marks: &Marks) -> Result<Vec<String>, AdoptError> {
        let mut done = Vec::new();
        let patch = json!({"metadata": {"annotations": {keep::RESOURCE_POLICY: keep::KEEP}}});
        let params = PatchParams {
            field_manager: Some(keep::FIELD_MANAGER.into()),
            ..PatchParams::default()
        };
        let mut marked = 0;
        for held in marks.objects.iter().filter(|h| h.live == Live::Unmarked) {
            let object = &held.object;
            let (resource, _) = self.resource(object).await.map_err(kube_err(format!(
                "finding the kind of {}",
                object.describe()
            )))?;
            self.dynamic(&resource, object)
                .patch(&object.name, &params, &Patch::Merge(&patch))
                .await
                .map_err(kube_err(format!(
                    "marking {} {}: keep",
                    object.describe(),
                    keep::RESOURCE_POLICY
                )))?;
            marked += 1;
        }
        if marked > 0 {
            done.push(format!(
                "marked {marked} object(s) of Helm's releases {}: keep",
                keep::RESOURCE_POLICY
            ));
        }
        for record in &marks.records {
            let (namespace, name) = record.split_once('/').unwrap_or_default();
            self.keep_record(namespace, name).await?;
        }
        if !marks.records.is_empty() {
            done.push(format!(
                "rewrote {} Helm release record(s) so that their manifests keep every object: {}",
                marks.records.len(),
                marks.records.join(", ")
            ));
        }
        Ok(done)
    }

    /// Rewrites one record's manifest with every object kept, guarded by its resourceVersion
    /// (a record Helm wrote meanwhile is a conflict: the next apply reads it again).
    async fn keep_record(&self, namespace: &str, name: &str) -> Result<(), AdoptError> {
        let what = format!("Helm release record {namespace}/{name}");
        let api: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
        let secret = api
            .get(name)
            .await
            .map_err(kube_err(format!("reading {what}")))?;
        let data = secret
            .data
            .as_ref()
            .and_then(|d| d.get("release"))
            .ok_or_else(|| AdoptError::NotReady(format!("{what} has no key release")))?;
        let mut payload = keep::decode_record(&data.0)
            .map_err(|e| AdoptError::NotReady(format!("{what}: {e}")))?;
        let manifest = payload["manifest"].as_str().unwrap_or_default();
        let Some(kept) = keep::keep_manifest(manifest)
            .map_err(|e| AdoptError::NotReady(format!("{what}: {e}")))?
        else {
            return Ok(());
        };
        payload["manifest"] = json!(kept);
        let encoded = keep::encode_record(&payload);
        use base64::Engine;
        let patch = json!({
            "metadata": {"resourceVersion": secret.metadata.resource_version},
            "data": {"release": base64::engine::general_purpose::STANDARD.encode(encoded)},
        });
        api.patch(
            name,
            &PatchParams {
                field_manager: Some(keep::FIELD_MANAGER.into()),
                ..PatchParams::default()
            },
            &Patch::Merge(&patch),
        )
        .await
        .map_err(kube_err(format!("rewriting {what}")))?;
        Ok(())
    }

    /// After an adoption: marks what is not marked (what `adopt apply` does first), and
    /// records the objects marked. Returns what it did.
    pub async fn keep_marked(&self) -> Result<Vec<String>, AdoptError> {
        let _one = self.lock.lock().await;
        let facts = self.facts().await?;
        if !facts.adopted || !facts.marks.pending() {
            return Ok(Vec::new());
        }
        let done = self.apply_marks(&facts.marks).await?;
        let allow_rollout = self.stored().await?.allow_rollout;
        self.record("adopted", &self.plan(&facts), allow_rollout, &facts)
            .await?;
        Ok(done)
    }

    /// After an adoption: what puts the objects it marked at risk from Helm (see
    /// [`Marks::problem`]), or `None`.
    pub async fn marks_problem(&self) -> Result<Option<String>, AdoptError> {
        let stored = self.stored().await?;
        if stored.outcome != "adopted" || (stored.kept.is_empty() && stored.releases.is_empty()) {
            return Ok(None);
        }
        let releases: BTreeSet<String> = stored.releases.iter().cloned().collect();
        let namespace = releases
            .iter()
            .next()
            .and_then(|r| r.split_once('/'))
            .map_or(self.operator_namespace.clone(), |(ns, _)| ns.to_owned());
        let marks = self.marks(&namespace, &releases, &stored.kept).await;
        // The agent cannot tell a kept object it may not read from one that is fine.
        Ok(marks.problem())
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
        facts: &Facts,
    ) -> Result<(), AdoptError> {
        let kept: Vec<String> = facts
            .marks
            .objects
            .iter()
            .filter(|h| h.live != Live::Gone)
            .map(|h| h.object.key())
            .collect();
        let releases: BTreeSet<String> = facts
            .marks
            .objects
            .iter()
            .map(|h| h.release.clone())
            .filter(|r| !r.is_empty())
            .chain(facts.owning_releases())
            .collect();
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
                // The releases adopted from and the objects marked, checked after adoption.
                "releases": releases.into_iter().collect::<Vec<_>>().join(","),
                "kept": kept.join("\n"),
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
        if !goes_ahead(&plan, options.allow_rollout)? {
            return Ok(Adopted {
                plan,
                done: Vec::new(),
                kustomizations: Vec::new(),
            });
        }
        let kustomizations = health::list(&self.client)
            .await
            .map_err(|e| AdoptError::NotReady(chain(&e)))?;
        let (mut healthy, skipped) = authorize_writes(&plan, &kustomizations, caller).await?;
        let timeout = apply_timeout(options.timeout_seconds).map_err(AdoptError::Refused)?;
        let deadline = tokio::time::Instant::now() + timeout;
        self.record("adopting", &plan, options.allow_rollout, &facts)
            .await?;
        crate::failpoint("adopt-recorded-adopting").await;
        let mut done = self.take_over(&plan, &facts, deadline).await?;
        self.request_reconciles(&healthy, &kustomizations).await?;
        self.wait_ready_again(&mut healthy, deadline, timeout)
            .await?;
        done.extend(health_done(healthy.len(), skipped));
        self.record("adopted", &plan, options.allow_rollout, &facts)
            .await?;
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

    /// The adoption's writes, in the order that keeps Flux in place: first the marks (from
    /// here on, Helm removing its releases leaves Flux in place), then Helm's ownership off the
    /// FluxInstance, then the FluxInstance a `flux install` lacks. Returns what was done.
    async fn take_over(
        &self,
        plan: &AdoptionPlan,
        facts: &Facts,
        deadline: tokio::time::Instant,
    ) -> Result<Vec<String>, AdoptError> {
        let mut done = self.apply_marks(&facts.marks).await?;
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
        Ok(done)
    }

    /// Waits, polling every second until `deadline`, for every Kustomization in `healthy` to
    /// be Ready again at its revision.
    async fn wait_ready_again(
        &self,
        healthy: &mut [Healthy],
        deadline: tokio::time::Instant,
        timeout: Duration,
    ) -> Result<(), AdoptError> {
        loop {
            let live = health::list(&self.client)
                .await
                .map_err(|e| AdoptError::NotReady(chain(&e)))?;
            if health::check(healthy, &live) {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(AdoptError::NotReady(format!(
                    "adopted, but not every Kustomization Ready before is Ready again after {}s: {}",
                    timeout.as_secs(),
                    health::not_ready(healthy).join("; ")
                )));
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
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

/// How often an adoption's marks are checked (see [`Adopter::marks_problem`]).
const MARKS_CHECK: Duration = Duration::from_secs(15);

/// Publishes what puts adopted objects at risk from Helm (a problem `status` reports), checked
/// every [`MARKS_CHECK`], until the shutdown. A check that fails keeps the last answer.
pub async fn watch_marks(
    adopter: Adopter,
    tx: watch::Sender<Option<String>>,
    shutdown: tokio_util::sync::CancellationToken,
) {
    let marks = MarksWatch { adopter, tx };
    crate::reconcile::run(marks, futures::stream::pending(), &shutdown).await;
}

/// The loop of [`watch_marks`].
struct MarksWatch {
    adopter: Adopter,
    tx: watch::Sender<Option<String>>,
}

impl crate::reconcile::Pass for MarksWatch {
    type Event = ();

    async fn pass(&mut self, _: crate::reconcile::Wake<()>) -> crate::reconcile::Next {
        match self.adopter.marks_problem().await {
            Ok(problem) => {
                self.tx.send_if_modified(|old| {
                    let changed = *old != problem;
                    *old = problem;
                    changed
                });
            }
            Err(err) => tracing::debug!(error = %chain(&err), "checking the adoption's marks"),
        }
        crate::reconcile::Next::after(MARKS_CHECK)
    }
}

/// The adoption's record, as read back.
struct Stored {
    outcome: String,
    allow_rollout: bool,
    releases: Vec<String>,
    kept: Vec<ManifestObject>,
}

/// One Helm release record, decoded.
struct Payload {
    release: String,
    secret: String,
    version: i64,
    objects: Vec<ManifestObject>,
    /// Whether some object of its manifest lacks the keep mark.
    unkept: bool,
}

/// Whether an apply goes on to adopt: not when nothing runs (`Ok(false)`), and never when the
/// plan refuses or would roll the controllers out without `allow_rollout`.
fn goes_ahead(plan: &AdoptionPlan, allow_rollout: bool) -> Result<bool, AdoptError> {
    match plan.case {
        Case::Refused => return Err(AdoptError::Refused(plan.refusals.join("; "))),
        Case::None => return Ok(false),
        Case::FluxInstall | Case::Operator => {}
    }
    if plan.rollout && !allow_rollout {
        return Err(AdoptError::Refused(format!(
            "{}; run again with --allow-rollout to accept it",
            plan.rollout_reason
        )));
    }
    Ok(true)
}

/// Every write is authorized before the first one is made: the FluxInstance a `flux install`
/// adoption creates, then the reconcile asked of each Kustomization Ready now. Only what the
/// caller may patch is asked to reconcile (and reported back): returns those, and how many
/// were left out.
async fn authorize_writes(
    plan: &AdoptionPlan,
    kustomizations: &[Value],
    caller: &impl Authorize,
) -> Result<(Vec<Healthy>, usize), AdoptError> {
    let undecided = |err: String| AdoptError::NotReady(format!("authorizing adoption: {err}"));
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
    let mut healthy = Vec::new();
    let mut skipped = 0;
    for k in health::snapshot(kustomizations) {
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
    Ok((healthy, skipped))
}

/// What the health check did, as the apply reports it: how many Kustomizations are Ready
/// again, and how many the caller may not patch were left out.
fn health_done(healthy: usize, skipped: usize) -> Vec<String> {
    let mut done = Vec::new();
    if healthy > 0 {
        done.push(format!(
            "{healthy} Kustomization(s) Ready before are Ready again at their revisions"
        ));
    }
    if skipped > 0 {
        done.push(format!(
            "{skipped} Ready Kustomization(s) you may not patch were not asked to reconcile or checked"
        ));
    }
    done
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
                // Adopted by an agent that did not mark Helm's objects yet, or marks lost.
                let done = adopter.keep_marked().await?;
                if !done.is_empty() {
                    tracing::info!(?done, "adoption at start: kept Helm's objects in place");
                }
                return Ok(None);
            }
            adopter
                .apply(ApplyOptions::default(), &AtStart)
                .await
                .map(Some)
        };
        let Some(result) = crate::unless_shutdown(&shutdown, attempt).await else {
            return;
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
                if !crate::sleep(&shutdown, wait).await {
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_apply_waits_at_most_thirty_minutes() {
        assert_eq!(apply_timeout(0), Ok(DEFAULT_TIMEOUT));
        assert_eq!(apply_timeout(1800), Ok(Duration::from_secs(1800)));
        let refused = apply_timeout(1801).unwrap_err();
        assert!(refused.contains("at most 30m"), "{refused}");
        assert!(apply_timeout(u32::MAX).is_err());
    }

    /// A plan of `case`, with a rollout or not.
    fn plan_of(case: Case, rollout: bool) -> AdoptionPlan {
        AdoptionPlan {
            case,
            rollout,
            rollout_reason: "the controllers restart".into(),
            refusals: vec!["one".into(), "two".into()],
            ..plan::plan(&Facts::default(), &Agent::default())
        }
    }

    #[test]
    fn an_apply_goes_ahead_only_on_a_plan_that_adopts_and_a_rollout_allowed() {
        assert!(!goes_ahead(&plan_of(Case::None, true), false).unwrap());
        assert!(goes_ahead(&plan_of(Case::Operator, false), false).unwrap());
        assert!(goes_ahead(&plan_of(Case::FluxInstall, true), true).unwrap());
        let refused = goes_ahead(&plan_of(Case::Refused, false), true).unwrap_err();
        assert_eq!(
            refused.to_string(),
            "adoption refused, nothing was changed: one; two"
        );
        let rollout = goes_ahead(&plan_of(Case::Operator, true), false).unwrap_err();
        assert_eq!(
            rollout.to_string(),
            "adoption refused, nothing was changed: the controllers restart; run again with --allow-rollout to accept it"
        );
    }

    #[test]
    fn the_health_check_reports_what_it_checked_and_what_it_left_out() {
        assert!(health_done(0, 0).is_empty());
        assert_eq!(
            health_done(2, 1),
            [
                "2 Kustomization(s) Ready before are Ready again at their revisions",
                "1 Ready Kustomization(s) you may not patch were not asked to reconcile or checked"
            ]
        );
    }
}
