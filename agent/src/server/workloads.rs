//! The `tenantflux.v1.Workloads` service: Flux objects from the caches, and the writes that
//! suspend, resume and reconcile them, each authorized for the caller against the real
//! resource and verb.

use std::{future::Future, pin::Pin, sync::Arc, time::Duration, time::Instant};

use futures::{Stream, StreamExt};
use kube::{
    Api, Client,
    api::{DynamicObject, Patch, PatchParams},
};
use tenantflux_proto::v1::{
    self as pb, FluxObject, GetObjectRequest, ListKindsRequest, ListKindsResponse,
    ListObjectsRequest, ListObjectsResponse, ObjectEvent, ReconcileRequest, ReconcileResponse,
    ResumeRequest, SkippedKind, SuspendRequest, WatchObjectsRequest, object_event,
    workloads_server::Workloads,
};
use tokio_stream::wrappers::{BroadcastStream, errors::BroadcastStreamRecvError};
use tonic::{Code, Request, Response, metadata::MetadataMap};

use tenantflux_core::{FIELD_MANAGER, selector::Selector};
use tokio_util::sync::CancellationToken;

use super::{
    auth::{AuthError, Authorizer, Permission},
    input,
    metrics::code_name,
};
use crate::workloads::{
    cache::{Caches, Change, ChangeType, KindCache},
    catalog::{self, FluxKind},
    patches::{self, Target},
    rows::{Cached, StatusSelector},
};

/// How long a call waits for the first discovery, or for a cache's first list.
const CACHE_WAIT: Duration = Duration::from_secs(10);

/// Why a Workloads call failed. Each says what failed, on which object, and what to do.
#[derive(Debug, thiserror::Error)]
pub enum WorkloadsError {
    #[error(
        "unknown kind {}; known kinds: {known}",
        tenantflux_core::text::quote(name)
    )]
    UnknownKind { name: String, known: String },

    #[error(
        "the cluster does not serve {kind} ({resource}): is Flux (with the controller for it) installed?"
    )]
    NotServed {
        kind: &'static str,
        resource: String,
    },

    #[error(
        "{kind} is read-only: no controller suspends or reconciles it on request (what produces it does; get it with `get`)"
    )]
    ReadOnly { kind: &'static str },

    #[error("{kind} {namespace}/{name} not found")]
    NotFound {
        kind: &'static str,
        namespace: String,
        name: String,
    },

    #[error("{what} needs a namespace and a name")]
    MissingName { what: &'static str },

    #[error("{0}")]
    InvalidArgument(String),

    #[error("{kind} {namespace}/{name} names no source to reconcile")]
    NoSource {
        kind: &'static str,
        namespace: String,
        name: String,
    },

    #[error("the agent is still loading {what}; retry in a few seconds")]
    Loading { what: String },

    #[error("the watch fell more than {0} changes behind; watch again")]
    Lagged(u64),

    #[error(transparent)]
    Auth(#[from] AuthError),

    #[error("{action} {kind} {namespace}/{name} failed: {source}")]
    Api {
        action: &'static str,
        kind: &'static str,
        namespace: String,
        name: String,
        #[source]
        source: Box<kube::Error>,
    },
}

impl From<WorkloadsError> for tonic::Status {
    fn from(err: WorkloadsError) -> Self {
        let code = match &err {
            WorkloadsError::Auth(_) => {
                return tonic::Status::from(match err {
                    WorkloadsError::Auth(auth) => auth,
                    _ => unreachable!(),
                });
            }
            WorkloadsError::UnknownKind { .. }
            | WorkloadsError::MissingName { .. }
            | WorkloadsError::InvalidArgument(_) => Code::InvalidArgument,
            WorkloadsError::NotServed { .. }
            | WorkloadsError::NoSource { .. }
            | WorkloadsError::ReadOnly { .. } => Code::FailedPrecondition,
            WorkloadsError::NotFound { .. } => Code::NotFound,
            WorkloadsError::Loading { .. } => Code::Unavailable,
            WorkloadsError::Lagged(_) => Code::Aborted,
            WorkloadsError::Api { source, .. } => match &**source {
                kube::Error::Api(s) if s.code == 404 => Code::NotFound,
                kube::Error::Api(s) if s.code == 403 => Code::PermissionDenied,
                kube::Error::Api(s) if s.code == 409 => Code::Aborted,
                kube::Error::Api(s) if s.code == 422 || s.code == 400 => Code::InvalidArgument,
                _ => Code::Unavailable,
            },
        };
        // Only the agent's own writes and reads reach the API server; a 403 there is its RBAC.
        let message = if code == Code::PermissionDenied {
            format!("{err} (the agent's own ClusterRole lacks it: apply deploy/manifests)")
        } else {
            err.to_string()
        };
        tonic::Status::new(code, message)
    }
}

type Result<T, E = WorkloadsError> = std::result::Result<T, E>;

/// The `tenantflux.v1.Workloads` service.
pub struct WorkloadsService {
    caches: Arc<Caches>,
    client: Client,
    authorizer: Arc<Authorizer>,
    shutdown: CancellationToken,
}

impl WorkloadsService {
    pub fn new(
        caches: Arc<Caches>,
        client: Client,
        authorizer: Arc<Authorizer>,
        shutdown: CancellationToken,
    ) -> Self {
        Self {
            caches,
            client,
            authorizer,
            shutdown,
        }
    }

    /// Runs one RPC and logs its outcome in one debug line (the server's `MetricsLayer` records
    /// it as a metric).
    async fn rpc<T>(
        &self,
        method: &'static str,
        call: impl Future<Output = Result<T>>,
    ) -> Result<Response<T>, tonic::Status> {
        let started = Instant::now();
        let result = call.await.map_err(tonic::Status::from);
        let elapsed = started.elapsed();
        let code = result
            .as_ref()
            .map_or_else(tonic::Status::code, |_| Code::Ok);
        tracing::debug!(
            method,
            code = code_name(code),
            duration_ms = elapsed.as_secs_f64() * 1000.0,
            error = result.as_ref().err().map(tonic::Status::message),
            "rpc"
        );
        result.map(Response::new)
    }

    async fn wait_discovered(&self) -> Result<()> {
        if self.caches.discovered(CACHE_WAIT).await {
            Ok(())
        } else {
            Err(WorkloadsError::Loading {
                what: "the Flux APIs the cluster serves".into(),
            })
        }
    }

    /// The kinds `name` stands for: one kind; every served kind for "all" or nothing (an
    /// unset field is protobuf's default); every served kind of a category for flux's
    /// `sources` and `images`.
    async fn kinds(&self, name: &str) -> Result<Kinds> {
        self.wait_discovered().await?;
        if name.is_empty() || name.eq_ignore_ascii_case("all") {
            return Ok(Kinds::All(self.caches.served()));
        }
        if let Some(category) = catalog::Category::named(name) {
            let served = self.caches.served();
            return Ok(Kinds::All(
                served
                    .into_iter()
                    .filter(|c| c.kind.category == category)
                    .collect(),
            ));
        }
        let kind = find_kind(name)?;
        Ok(Kinds::One(self.served(kind)?))
    }

    fn served(&self, kind: &'static FluxKind) -> Result<Arc<KindCache>> {
        self.caches
            .get(kind)
            .ok_or_else(|| WorkloadsError::NotServed {
                kind: kind.kind,
                resource: kind.resource(),
            })
    }

    /// The caches the caller may use `verb` on, with the kinds an "all" request skips because
    /// the caller may not; a single kind the caller may not use is an error.
    async fn permitted(
        &self,
        metadata: &MetadataMap,
        kinds: Kinds,
        verb: &str,
        namespace: Option<&str>,
    ) -> Result<(Vec<Arc<KindCache>>, Vec<SkippedKind>)> {
        match kinds {
            Kinds::One(cache) => {
                let permission = permission(verb, cache.kind, namespace);
                self.authorizer.authorize(metadata, &permission).await?;
                Ok((vec![cache], Vec::new()))
            }
            Kinds::All(caches) => {
                let mut permitted = Vec::new();
                let mut skipped = Vec::new();
                let mut first_denial = None;
                let permissions: Vec<_> = caches
                    .iter()
                    .map(|cache| permission(verb, cache.kind, namespace))
                    .collect();
                let decisions = self
                    .authorizer
                    .authorize_each(metadata, &permissions)
                    .await?;
                for (cache, decision) in caches.into_iter().zip(decisions) {
                    match decision {
                        Ok(()) => permitted.push(cache),
                        Err(denied @ AuthError::Denied { .. }) => {
                            skipped.push(SkippedKind {
                                kind: cache.kind.kind.into(),
                                reason: denied.to_string(),
                            });
                            first_denial.get_or_insert(denied);
                        }
                        Err(err) => return Err(err.into()),
                    }
                }
                match first_denial {
                    // Nothing at all is permitted: say so rather than show an empty list.
                    Some(denied) if permitted.is_empty() => Err(denied.into()),
                    _ => Ok((permitted, skipped)),
                }
            }
        }
    }

    async fn ready_store(&self, cache: &KindCache) -> Result<()> {
        match tokio::time::timeout(CACHE_WAIT, cache.store.wait_until_ready()).await {
            Ok(()) => Ok(()),
            _ => Err(WorkloadsError::Loading {
                what: format!("the {} objects", cache.kind.kind),
            }),
        }
    }

    /// The object from the cache, else from the API server (the cache may trail a create by
    /// a moment); NotFound if neither has it.
    async fn object(&self, cache: &KindCache, namespace: &str, name: &str) -> Result<Arc<Cached>> {
        if let Some(object) = cache.store.get(namespace, name) {
            return Ok(object);
        }
        let api =
            Api::<DynamicObject>::namespaced_with(self.client.clone(), namespace, &cache.resource);
        match api.get_opt(name).await {
            Ok(Some(object)) => Ok(Arc::new(Cached::new(cache.kind, object))),
            Ok(None) => Err(not_found(cache.kind, namespace, name)),
            Err(source) => Err(WorkloadsError::Api {
                action: "reading",
                kind: cache.kind.kind,
                namespace: namespace.into(),
                name: name.into(),
                source: Box::new(source),
            }),
        }
    }

    /// Checks the caller may patch the object and that it exists; returns its cache.
    async fn writable(
        &self,
        metadata: &MetadataMap,
        reference: Option<&pb::ObjectRef>,
        what: &'static str,
    ) -> Result<(Arc<KindCache>, String, String)> {
        let reference = checked(reference, what)?;
        self.wait_discovered().await?;
        let kind = find_kind(&reference.kind)?;
        if !kind.controllable() {
            return Err(WorkloadsError::ReadOnly { kind: kind.kind });
        }
        let cache = self.served(kind)?;
        let permission = permission("patch", cache.kind, Some(&reference.namespace));
        self.authorizer.authorize(metadata, &permission).await?;
        self.object(&cache, &reference.namespace, &reference.name)
            .await?;
        Ok((cache, reference.namespace.clone(), reference.name.clone()))
    }

    /// Merges `patch` (the few fields one command sets) into the object, with the agent's
    /// field manager. Not a server-side apply: every apply by one manager states all the
    /// fields it owns, so a `reconcile` applied after a `suspend` would drop `spec.suspend`
    /// (and a `suspend instance` the spec an `instance apply` set). A merge changes only the
    /// fields it names, on the latest object, so concurrent commands lose nothing, and it
    /// never creates an object deleted in the meantime.
    async fn apply(
        &self,
        cache: &KindCache,
        namespace: &str,
        name: &str,
        action: &'static str,
        patch: &serde_json::Value,
    ) -> Result<FluxObject> {
        let api =
            Api::<DynamicObject>::namespaced_with(self.client.clone(), namespace, &cache.resource);
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PatchParams::default()
        };
        let object = api
            .patch(name, &params, &Patch::Merge(patch))
            .await
            .map_err(|source| WorkloadsError::Api {
                action,
                kind: cache.kind.kind,
                namespace: namespace.into(),
                name: name.into(),
                source: Box::new(source),
            })?;
        tracing::info!(kind = cache.kind.kind, %namespace, %name, action, "applied");
        Ok(flux_object(
            cache.kind,
            &cache.resource.api_version,
            &Cached::new(cache.kind, object),
        ))
    }

    async fn reconcile_one(
        &self,
        cache: &KindCache,
        namespace: &str,
        name: &str,
        requested_at: &str,
        force: bool,
    ) -> Result<FluxObject> {
        let target = Target {
            kind: cache.kind,
            api_version: &cache.resource.api_version,
            namespace,
            name,
        };
        let patch = patches::reconcile_patch(target, requested_at, force);
        self.apply(
            cache,
            namespace,
            name,
            "requesting a reconciliation of",
            &patch,
        )
        .await
    }
}

enum Kinds {
    One(Arc<KindCache>),
    All(Vec<Arc<KindCache>>),
}

fn find_kind(name: &str) -> Result<&'static FluxKind> {
    catalog::find(name).ok_or_else(|| WorkloadsError::UnknownKind {
        name: name.into(),
        known: catalog::KINDS
            .iter()
            .map(|k| match k.short_names.first() {
                Some(short) => format!("{} ({short})", k.kind.to_ascii_lowercase()),
                None => k.kind.to_ascii_lowercase(),
            })
            .chain(["sources", "images", "all"].map(str::to_owned))
            .collect::<Vec<_>>()
            .join(", "),
    })
}

/// The object a call names, once its namespace and name are ones Kubernetes accepts.
fn checked<'a>(
    reference: Option<&'a pb::ObjectRef>,
    what: &'static str,
) -> Result<&'a pb::ObjectRef> {
    let reference = reference
        .filter(|r| !r.namespace.is_empty() && !r.name.is_empty())
        .ok_or(WorkloadsError::MissingName { what })?;
    input::namespace("namespace", &reference.namespace).map_err(WorkloadsError::InvalidArgument)?;
    input::object_name("name", &reference.name).map_err(WorkloadsError::InvalidArgument)?;
    Ok(reference)
}

fn not_found(kind: &FluxKind, namespace: &str, name: &str) -> WorkloadsError {
    WorkloadsError::NotFound {
        kind: kind.kind,
        namespace: namespace.into(),
        name: name.into(),
    }
}

/// `verb` on the kind's resource, in `namespace` or cluster-wide.
pub fn permission(verb: &str, kind: &FluxKind, namespace: Option<&str>) -> Permission {
    Permission {
        verb: verb.into(),
        group: kind.group.into(),
        resource: kind.plural.into(),
        subresource: None,
        namespace: namespace.map(str::to_owned),
    }
}

fn non_empty(value: &str) -> Option<&str> {
    (!value.is_empty()).then_some(value)
}

/// The filters of a list or watch.
/// The objects of `cache` that pass `filter`, ordered by namespace and name.
fn matching(cache: &KindCache, filter: &Filter) -> Vec<FluxObject> {
    let mut found: Vec<FluxObject> = cache
        .store
        .state()
        .iter()
        .filter(|o| filter.pass(o))
        .map(|o| flux_object(cache.kind, &cache.resource.api_version, o))
        .collect();
    found.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    found
}

struct Filter {
    namespace: Option<String>,
    name: Option<String>,
    labels: Selector,
    status: Option<StatusSelector>,
}

impl Filter {
    fn new(
        namespace: &str,
        name: &str,
        labels: &str,
        status: Option<&pb::StatusSelector>,
    ) -> Result<Self> {
        if let Some(namespace) = non_empty(namespace) {
            input::namespace("namespace", namespace).map_err(WorkloadsError::InvalidArgument)?;
        }
        if let Some(name) = non_empty(name) {
            input::object_name("name", name).map_err(WorkloadsError::InvalidArgument)?;
        }
        Ok(Self {
            namespace: non_empty(namespace).map(str::to_owned),
            name: non_empty(name).map(str::to_owned),
            labels: Selector::parse(labels)
                .map_err(|e| WorkloadsError::InvalidArgument(e.to_string()))?,
            status: status
                .map(|s| StatusSelector::new(&s.r#type, &s.status))
                .transpose()
                .map_err(|e| WorkloadsError::InvalidArgument(e.to_string()))?,
        })
    }

    fn pass(&self, object: &Cached) -> bool {
        self.namespace
            .as_deref()
            .is_none_or(|ns| object.namespace == ns)
            && self.name.as_deref().is_none_or(|n| object.name == n)
            && self.labels.matches(&object.labels)
            && self
                .status
                .as_ref()
                .is_none_or(|s| s.matches(&object.conditions))
    }
}

/// The wire form of a cached object of `kind`, served at `api_version`.
fn flux_object(kind: &FluxKind, api_version: &str, object: &Cached) -> FluxObject {
    let row = &object.row;
    FluxObject {
        kind: kind.kind.into(),
        api_version: api_version.into(),
        namespace: object.namespace.clone(),
        name: object.name.clone(),
        revision: row.revision.clone(),
        suspended: row.suspended,
        ready: row.ready.as_ref().map(|c| pb::Condition {
            r#type: c.type_.clone(),
            status: c.status.clone(),
            reason: c.reason.clone(),
            message: c.message.clone(),
            last_transition: c
                .last_transition
                .parse::<k8s_openapi::jiff::Timestamp>()
                .ok()
                .map(|t| prost_types::Timestamp {
                    seconds: t.as_second(),
                    nanos: t.subsec_nanosecond(),
                }),
        }),
        labels: object
            .labels
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        generation: object.generation,
        observed_generation: row.observed_generation,
        last_handled_reconcile_at: row.last_handled_reconcile_at.clone(),
        source: row
            .source
            .clone()
            .map(|(kind, namespace, name)| pb::ObjectRef {
                kind,
                namespace,
                name,
            }),
    }
}

/// The value of a reconcile request: now, as Flux's CLI writes it (RFC 3339, nanoseconds).
fn now() -> String {
    k8s_openapi::jiff::Timestamp::now().to_string()
}

type EventStream = Pin<Box<dyn Stream<Item = Result<ObjectEvent, tonic::Status>> + Send>>;

#[tonic::async_trait]
impl Workloads for WorkloadsService {
    async fn list_kinds(
        &self,
        request: Request<ListKindsRequest>,
    ) -> Result<Response<ListKindsResponse>, tonic::Status> {
        let metadata = request.metadata().clone();
        self.rpc("ListKinds", async {
            // Any authenticated caller may learn which Flux APIs exist, as discovery allows.
            self.authorizer.identify(&metadata).await?;
            self.wait_discovered().await?;
            let served = self.caches.served();
            let kinds = catalog::KINDS
                .iter()
                .map(|kind| {
                    let cache = served.iter().find(|c| std::ptr::eq(c.kind, kind));
                    pb::FluxKind {
                        kind: kind.kind.into(),
                        group: kind.group.into(),
                        plural: kind.plural.into(),
                        short_names: kind.short_names.iter().map(|s| s.to_string()).collect(),
                        served: cache.is_some(),
                        preferred_version: cache
                            .map(|c| c.served.version.clone())
                            .unwrap_or_default(),
                        served_versions: cache
                            .map(|c| c.served.versions.clone())
                            .unwrap_or_default(),
                        namespaced: true,
                        revision_column: kind.revision_column().into(),
                    }
                })
                .collect();
            Ok(ListKindsResponse { kinds })
        })
        .await
    }

    async fn list_objects(
        &self,
        request: Request<ListObjectsRequest>,
    ) -> Result<Response<ListObjectsResponse>, tonic::Status> {
        let (metadata, _, request) = request.into_parts();
        self.rpc("ListObjects", async {
            let filter = Filter::new(
                &request.namespace,
                "",
                &request.label_selector,
                request.status_selector.as_ref(),
            )?;
            let kinds = self.kinds(&request.kind).await?;
            let (caches, skipped) = self
                .permitted(&metadata, kinds, "list", filter.namespace.as_deref())
                .await?;
            let mut objects = Vec::new();
            for cache in caches {
                self.ready_store(&cache).await?;
                objects.extend(matching(&cache, &filter));
            }
            Ok(ListObjectsResponse { objects, skipped })
        })
        .await
    }

    async fn get_object(
        &self,
        request: Request<GetObjectRequest>,
    ) -> Result<Response<FluxObject>, tonic::Status> {
        let (metadata, _, request) = request.into_parts();
        self.rpc("GetObject", async {
            let reference = checked(request.object.as_ref(), "GetObject")?;
            self.wait_discovered().await?;
            let cache = self.served(find_kind(&reference.kind)?)?;
            let permission = permission("get", cache.kind, Some(&reference.namespace));
            self.authorizer.authorize(&metadata, &permission).await?;
            let object = self
                .object(&cache, &reference.namespace, &reference.name)
                .await?;
            Ok(flux_object(
                cache.kind,
                &cache.resource.api_version,
                &object,
            ))
        })
        .await
    }

    type WatchObjectsStream = EventStream;

    async fn watch_objects(
        &self,
        request: Request<WatchObjectsRequest>,
    ) -> Result<Response<Self::WatchObjectsStream>, tonic::Status> {
        let (metadata, _, request) = request.into_parts();
        self.rpc("WatchObjects", async {
            let filter = Filter::new(
                &request.namespace,
                &request.name,
                &request.label_selector,
                request.status_selector.as_ref(),
            )?;
            let kinds = self.kinds(&request.kind).await?;
            let (caches, _) = self
                .permitted(&metadata, kinds, "watch", filter.namespace.as_deref())
                .await?;
            let filter_namespace = filter.namespace.clone();
            // Subscribed before the snapshot, so no change falls between the two.
            let changes = BroadcastStream::new(self.caches.subscribe());
            let mut snapshot = Vec::new();
            for cache in &caches {
                self.ready_store(cache).await?;
                snapshot.extend(
                    matching(cache, &filter)
                        .into_iter()
                        .map(|o| event(object_event::Type::Added, Some(o))),
                );
            }
            snapshot.push(event(object_event::Type::Synced, None));
            let kinds: Vec<(&'static FluxKind, String)> = caches
                .iter()
                .map(|c| (c.kind, c.resource.api_version.clone()))
                .collect();
            let changes = changes.filter_map(move |change| {
                std::future::ready(match change {
                    Ok(Change {
                        kind,
                        type_,
                        object,
                    }) => kinds.iter().find(|(k, _)| std::ptr::eq(*k, kind)).and_then(
                        |(kind, api_version)| {
                            filter.pass(&object).then_some(())?;
                            let type_ = match type_ {
                                ChangeType::Added => object_event::Type::Added,
                                ChangeType::Modified => object_event::Type::Modified,
                                ChangeType::Deleted => object_event::Type::Deleted,
                            };
                            Some(Ok(event(
                                type_,
                                Some(flux_object(kind, api_version, &object)),
                            )))
                        },
                    ),
                    Err(BroadcastStreamRecvError::Lagged(n)) => {
                        Some(Err(tonic::Status::from(WorkloadsError::Lagged(n))))
                    }
                })
            });
            let shutdown = self.shutdown.clone();
            // A lagged watch ends after saying so.
            let mut ended = false;
            let stream = futures::stream::iter(snapshot.into_iter().map(Ok))
                .chain(changes)
                .take_while(move |item| {
                    let go = !ended;
                    ended = item.is_err();
                    std::future::ready(go)
                })
                .take_until(async move { shutdown.cancelled().await });
            let permissions = caches
                .iter()
                .map(|c| permission("watch", c.kind, filter_namespace.as_deref()))
                .collect();
            Ok(self
                .authorizer
                .guard(&metadata, permissions, Box::pin(stream) as EventStream))
        })
        .await
    }

    async fn suspend(
        &self,
        request: Request<SuspendRequest>,
    ) -> Result<Response<FluxObject>, tonic::Status> {
        let (metadata, _, request) = request.into_parts();
        self.rpc("Suspend", async {
            let (cache, namespace, name) = self
                .writable(&metadata, request.object.as_ref(), "Suspend")
                .await?;
            let target = Target {
                kind: cache.kind,
                api_version: &cache.resource.api_version,
                namespace: &namespace,
                name: &name,
            };
            let patch = patches::suspend_patch(target, true, None);
            self.apply(&cache, &namespace, &name, "suspending", &patch)
                .await
        })
        .await
    }

    async fn resume(
        &self,
        request: Request<ResumeRequest>,
    ) -> Result<Response<ReconcileResponse>, tonic::Status> {
        let (metadata, _, request) = request.into_parts();
        self.rpc("Resume", async {
            let (cache, namespace, name) = self
                .writable(&metadata, request.object.as_ref(), "Resume")
                .await?;
            let requested_at = now();
            let target = Target {
                kind: cache.kind,
                api_version: &cache.resource.api_version,
                namespace: &namespace,
                name: &name,
            };
            let patch = patches::suspend_patch(target, false, Some(&requested_at));
            let object = self
                .apply(&cache, &namespace, &name, "resuming", &patch)
                .await?;
            Ok(ReconcileResponse {
                object: Some(object),
                requested_at,
                source: None,
            })
        })
        .await
    }

    async fn reconcile(
        &self,
        request: Request<ReconcileRequest>,
    ) -> Result<Response<ReconcileResponse>, tonic::Status> {
        let (metadata, _, request) = request.into_parts();
        self.rpc("Reconcile", async {
            let (cache, namespace, name) = self
                .writable(&metadata, request.object.as_ref(), "Reconcile")
                .await?;
            if request.force && cache.kind.kind != "HelmRelease" {
                return Err(WorkloadsError::InvalidArgument(format!(
                    "force applies to HelmReleases only, not to {} {namespace}/{name}",
                    cache.kind.kind
                )));
            }
            let requested_at = now();
            let source = if request.with_source {
                let object = self.object(&cache, &namespace, &name).await?;
                let (kind, source_namespace, source_name) =
                    object
                        .row
                        .source
                        .clone()
                        .ok_or_else(|| WorkloadsError::NoSource {
                            kind: cache.kind.kind,
                            namespace: namespace.clone(),
                            name: name.clone(),
                        })?;
                let reference = pb::ObjectRef {
                    kind,
                    namespace: source_namespace,
                    name: source_name,
                };
                let (source_cache, source_namespace, source_name) = self
                    .writable(&metadata, Some(&reference), "Reconcile")
                    .await?;
                Some(
                    self.reconcile_one(
                        &source_cache,
                        &source_namespace,
                        &source_name,
                        &requested_at,
                        false,
                    )
                    .await?,
                )
            } else {
                None
            };
            let object = self
                .reconcile_one(&cache, &namespace, &name, &requested_at, request.force)
                .await?;
            Ok(ReconcileResponse {
                object: Some(object),
                requested_at,
                source,
            })
        })
        .await
    }
}

fn event(type_: object_event::Type, object: Option<FluxObject>) -> ObjectEvent {
    ObjectEvent {
        r#type: type_.into(),
        object,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permissions_name_the_real_resource_and_namespace() {
        let ks = catalog::find("ks").unwrap();
        let permission = permission("patch", ks, Some("apps"));
        assert_eq!(
            permission.to_string(),
            "patch kustomizations.kustomize.toolkit.fluxcd.io in namespace \"apps\""
        );
        assert_eq!(
            super::permission("list", ks, None).to_string(),
            "list kustomizations.kustomize.toolkit.fluxcd.io cluster-wide"
        );
    }

    #[test]
    fn unknown_kinds_list_the_known_ones() {
        let err = find_kind("deployment").unwrap_err();
        let message = err.to_string();
        assert!(
            message.starts_with("unknown kind \"deployment\""),
            "{message}"
        );
        assert!(
            message.contains("kustomization (ks)") && message.contains("helmrelease (hr)"),
            "{message}"
        );
        assert_eq!(tonic::Status::from(err).code(), Code::InvalidArgument);
    }

    #[test]
    fn objects_become_rows_at_the_served_version() {
        let object: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
            "kind": "Kustomization",
            "metadata": {"name": "apps", "namespace": "tenant", "labels": {"team": "a"}, "generation": 4},
            "spec": {"suspend": true, "sourceRef": {"kind": "GitRepository", "name": "repo"}},
            "status": {"lastAppliedRevision": "main@sha1:1", "observedGeneration": 3,
                "conditions": [{"type": "Ready", "status": "False", "reason": "Failed", "message": "boom", "lastTransitionTime": "2026-01-02T03:04:05Z"}]}
        }))
        .unwrap();
        let ks = catalog::find("ks").unwrap();
        let row = flux_object(
            ks,
            "kustomize.toolkit.fluxcd.io/v1",
            &Cached::new(ks, object),
        );
        assert_eq!(row.kind, "Kustomization");
        assert_eq!(row.api_version, "kustomize.toolkit.fluxcd.io/v1");
        assert_eq!(
            (row.namespace.as_str(), row.name.as_str()),
            ("tenant", "apps")
        );
        assert_eq!(row.revision, "main@sha1:1");
        assert!(row.suspended);
        let ready = row.ready.unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.message.as_str()),
            ("False", "boom")
        );
        assert_eq!(ready.last_transition.unwrap().seconds, 1_767_323_045);
        assert_eq!((row.generation, row.observed_generation), (4, 3));
        assert_eq!(row.labels["team"], "a");
        assert_eq!(row.source.unwrap().name, "repo");
    }

    #[test]
    fn filters_apply_namespace_name_labels_and_status() {
        let object: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "v", "kind": "K",
            "metadata": {"name": "a", "namespace": "ns", "labels": {"x": "1"}},
            "status": {"conditions": [{"type": "Ready", "status": "False"}]}
        }))
        .unwrap();
        let ready_false = pb::StatusSelector {
            r#type: "ready".into(),
            status: "false".into(),
        };
        let object = Cached::new(catalog::find("ks").unwrap(), object);
        let pass = |ns: &str, name: &str, labels: &str, status: Option<&pb::StatusSelector>| {
            Filter::new(ns, name, labels, status).unwrap().pass(&object)
        };
        assert!(pass("", "", "", None));
        assert!(pass("ns", "a", "x=1", Some(&ready_false)));
        assert!(!pass("other", "", "", None));
        assert!(!pass("", "b", "", None));
        assert!(!pass("", "", "x=2", None));
        let ready_true = pb::StatusSelector {
            r#type: "ready".into(),
            status: "true".into(),
        };
        assert!(!pass("", "", "", Some(&ready_true)));
        let bad = pb::StatusSelector {
            r#type: "ready".into(),
            status: "perhaps".into(),
        };
        assert!(Filter::new("", "", "", Some(&bad)).is_err());
    }
}
