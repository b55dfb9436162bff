//! The `tenantflux.v1.Workloads` service: `workloads::Workloads` at the edge. It converts the
//! messages, lets the caller's credentials answer the service's [`Access`] questions, and maps
//! [`WorkloadsError`] to gRPC codes.

use std::{future::Future, pin::Pin, sync::Arc, time::Instant};

use futures::{Stream, StreamExt};
use kube::Client;
use tenantflux_proto::v1::{
    self as pb, FluxObject, GetObjectRequest, ListKindsRequest, ListKindsResponse,
    ListObjectsRequest, ListObjectsResponse, ObjectEvent, ReconcileRequest, ReconcileResponse,
    ResumeRequest, SkippedKind, SuspendRequest, WatchObjectsRequest, object_event,
    workloads_server,
};
use tokio_util::sync::CancellationToken;
use tonic::{Code, Request, Response, metadata::MetadataMap};

use super::{
    auth::{Authorizer, Permission, access_code},
    metrics::code_name,
};
use crate::workloads::{
    Caches,
    access::{Access, AccessError, Need, Resource},
    catalog::FluxKind,
    error::WorkloadsError,
    model::{Event, EventType, KindInfo, Object, ObjectRef, Query, Reconciled},
    rows::Condition,
    service::Workloads,
};

impl From<WorkloadsError> for tonic::Status {
    fn from(err: WorkloadsError) -> Self {
        let code = match &err {
            WorkloadsError::Access(access) => {
                return tonic::Status::new(access_code(access), err.to_string());
            }
            WorkloadsError::UnknownKind { .. }
            | WorkloadsError::MissingName { .. }
            | WorkloadsError::InvalidArgument(_) => Code::InvalidArgument,
            WorkloadsError::NotServed { .. }
            | WorkloadsError::NoSource { .. }
            | WorkloadsError::ReadOnly { .. }
            | WorkloadsError::NoSpecSuspend { .. } => Code::FailedPrecondition,
            WorkloadsError::NotFound { .. } => Code::NotFound,
            WorkloadsError::Loading { .. } => Code::Unavailable,
            WorkloadsError::Lagged(_) => Code::Aborted,
            WorkloadsError::Api { source, .. } | WorkloadsError::Read { source, .. } => {
                match &**source {
                    kube::Error::Api(s) if s.code == 404 => Code::NotFound,
                    kube::Error::Api(s) if s.code == 403 => Code::PermissionDenied,
                    kube::Error::Api(s) if s.code == 409 => Code::Aborted,
                    kube::Error::Api(s) if s.code == 422 || s.code == 400 => Code::InvalidArgument,
                    _ => Code::Unavailable,
                }
            }
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

/// `verb` on the kind's resource, in `namespace` or cluster-wide.
pub fn permission(verb: &str, kind: &FluxKind, namespace: Option<&str>) -> Permission {
    Permission {
        verb: verb.into(),
        group: kind.group.into(),
        resource: kind.plural.into(),
        subresource: None,
        namespace: namespace.map(str::to_owned),
        name: None,
    }
}

pub(super) fn need_permission(need: &Need) -> Permission {
    let (group, resource) = match &need.resource {
        Resource::Flux(kind) => (kind.group.to_owned(), kind.plural.to_owned()),
        Resource::Other { group, plural } => (group.clone(), plural.clone()),
    };
    Permission {
        verb: need.verb.into(),
        group,
        resource,
        subresource: None,
        namespace: need.namespace.clone(),
        name: need.name.clone(),
    }
}

/// What the caller of one call may do, as the API server says for its credentials.
pub(super) struct Caller<'a> {
    authorizer: &'a Authorizer,
    metadata: &'a MetadataMap,
}

impl<'a> Caller<'a> {
    pub(super) fn new(authorizer: &'a Authorizer, metadata: &'a MetadataMap) -> Self {
        Self {
            authorizer,
            metadata,
        }
    }
}

impl Access for Caller<'_> {
    async fn identify(&self) -> Result<(), AccessError> {
        self.authorizer
            .identify(self.metadata)
            .await
            .map(drop)
            .map_err(AccessError::from)
    }

    async fn check(&self, need: &Need) -> Result<(), AccessError> {
        self.authorizer
            .authorize(self.metadata, &need_permission(need))
            .await
            .map(drop)
            .map_err(AccessError::from)
    }

    async fn check_each(
        &self,
        needs: &[Need],
    ) -> Result<Vec<Result<(), AccessError>>, AccessError> {
        let permissions: Vec<_> = needs.iter().map(need_permission).collect();
        let decisions = self
            .authorizer
            .authorize_each(self.metadata, &permissions)
            .await
            .map_err(AccessError::from)?;
        Ok(decisions
            .into_iter()
            .map(|d| d.map_err(AccessError::from))
            .collect())
    }
}

/// The `tenantflux.v1.Workloads` service.
pub struct WorkloadsService {
    workloads: Workloads,
    authorizer: Arc<Authorizer>,
}

impl WorkloadsService {
    pub fn new(
        caches: Arc<Caches>,
        client: Client,
        authorizer: Arc<Authorizer>,
        shutdown: CancellationToken,
    ) -> Self {
        Self {
            workloads: Workloads::new(caches, client, shutdown),
            authorizer,
        }
    }

    fn caller<'a>(&'a self, metadata: &'a MetadataMap) -> Caller<'a> {
        Caller::new(&self.authorizer, metadata)
    }

    /// Runs one RPC and logs its outcome in one debug line (the server's `MetricsLayer` records
    /// it as a metric).
    async fn rpc<T>(
        &self,
        method: &'static str,
        call: impl Future<Output = Result<T, WorkloadsError>>,
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
}

fn object_ref(reference: Option<pb::ObjectRef>) -> Option<ObjectRef> {
    reference.map(|r| ObjectRef {
        kind: r.kind,
        namespace: r.namespace,
        name: r.name,
    })
}

fn query(
    kind: String,
    namespace: String,
    name: String,
    label_selector: String,
    status: Option<pb::StatusSelector>,
) -> Query {
    Query {
        kind,
        namespace,
        name,
        label_selector,
        status: status.map(|s| (s.r#type, s.status)),
    }
}

/// The wire form of a condition.
pub(super) fn condition(c: &Condition) -> pb::Condition {
    pb::Condition {
        r#type: c.type_.clone(),
        status: super::convert::condition_status(&c.status).into(),
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
    }
}

/// The wire form of an object.
pub(super) fn flux_object(object: &Object) -> FluxObject {
    let cached = &object.cached;
    let row = &cached.row;
    FluxObject {
        kind: object.kind.kind.into(),
        api_version: object.api_version.clone(),
        namespace: cached.namespace.clone(),
        name: cached.name.clone(),
        revision: row.revision.clone(),
        suspended: row.suspended,
        ready: row.ready.as_ref().map(condition),
        labels: cached
            .labels
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        generation: cached.generation,
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

fn kind_info(info: KindInfo) -> pb::FluxKind {
    pb::FluxKind {
        kind: info.kind.kind.into(),
        group: info.kind.group.into(),
        plural: info.kind.plural.into(),
        short_names: info
            .kind
            .short_names
            .iter()
            .map(|s| s.to_string())
            .collect(),
        served: info.preferred_version.is_some(),
        preferred_version: info.preferred_version.unwrap_or_default(),
        served_versions: info.served_versions,
        namespaced: true,
        revision_column: info.kind.revision_column().into(),
    }
}

fn object_event(event: Event) -> ObjectEvent {
    let type_ = match event.type_ {
        EventType::Added => object_event::Type::Added,
        EventType::Modified => object_event::Type::Modified,
        EventType::Deleted => object_event::Type::Deleted,
        EventType::Synced => object_event::Type::Synced,
    };
    ObjectEvent {
        r#type: type_.into(),
        object: event.object.as_ref().map(flux_object),
    }
}

fn reconcile_response(reconciled: Reconciled) -> ReconcileResponse {
    ReconcileResponse {
        object: Some(flux_object(&reconciled.object)),
        requested_at: reconciled.requested_at,
        source: reconciled.source.as_ref().map(flux_object),
    }
}

type EventStream = Pin<Box<dyn Stream<Item = Result<ObjectEvent, tonic::Status>> + Send>>;

#[tonic::async_trait]
impl workloads_server::Workloads for WorkloadsService {
    async fn list_kinds(
        &self,
        request: Request<ListKindsRequest>,
    ) -> Result<Response<ListKindsResponse>, tonic::Status> {
        let metadata = request.metadata().clone();
        self.rpc("ListKinds", async {
            let kinds = self.workloads.list_kinds(&self.caller(&metadata)).await?;
            Ok(ListKindsResponse {
                kinds: kinds.into_iter().map(kind_info).collect(),
            })
        })
        .await
    }

    async fn list_objects(
        &self,
        request: Request<ListObjectsRequest>,
    ) -> Result<Response<ListObjectsResponse>, tonic::Status> {
        let (metadata, _, request) = request.into_parts();
        self.rpc("ListObjects", async {
            let query = query(
                request.kind,
                request.namespace,
                String::new(),
                request.label_selector,
                request.status_selector,
            );
            let listing = self
                .workloads
                .list_objects(&self.caller(&metadata), &query)
                .await?;
            Ok(ListObjectsResponse {
                objects: listing.objects.iter().map(flux_object).collect(),
                skipped: listing
                    .skipped
                    .into_iter()
                    .map(|s| SkippedKind {
                        kind: s.kind.into(),
                        reason: s.reason,
                    })
                    .collect(),
            })
        })
        .await
    }

    async fn get_object(
        &self,
        request: Request<GetObjectRequest>,
    ) -> Result<Response<FluxObject>, tonic::Status> {
        let (metadata, _, request) = request.into_parts();
        self.rpc("GetObject", async {
            let reference = object_ref(request.object);
            let object = self
                .workloads
                .get_object(&self.caller(&metadata), reference.as_ref())
                .await?;
            Ok(flux_object(&object))
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
            let query = query(
                request.kind,
                request.namespace,
                request.name,
                request.label_selector,
                request.status_selector,
            );
            let watch = self
                .workloads
                .watch_objects(&self.caller(&metadata), &query)
                .await?;
            let events = watch
                .events
                .map(|event| event.map(object_event).map_err(tonic::Status::from));
            let permissions = watch.needs.iter().map(need_permission).collect();
            Ok(self
                .authorizer
                .guard(&metadata, permissions, Box::pin(events) as EventStream))
        })
        .await
    }

    async fn suspend(
        &self,
        request: Request<SuspendRequest>,
    ) -> Result<Response<FluxObject>, tonic::Status> {
        let (metadata, _, request) = request.into_parts();
        self.rpc("Suspend", async {
            let reference = object_ref(request.object);
            let object = self
                .workloads
                .suspend(&self.caller(&metadata), reference.as_ref())
                .await?;
            Ok(flux_object(&object))
        })
        .await
    }

    async fn resume(
        &self,
        request: Request<ResumeRequest>,
    ) -> Result<Response<ReconcileResponse>, tonic::Status> {
        let (metadata, _, request) = request.into_parts();
        self.rpc("Resume", async {
            let reference = object_ref(request.object);
            let reconciled = self
                .workloads
                .resume(&self.caller(&metadata), reference.as_ref())
                .await?;
            Ok(reconcile_response(reconciled))
        })
        .await
    }

    async fn reconcile(
        &self,
        request: Request<ReconcileRequest>,
    ) -> Result<Response<ReconcileResponse>, tonic::Status> {
        let (metadata, _, request) = request.into_parts();
        self.rpc("Reconcile", async {
            let reference = object_ref(request.object);
            let reconciled = self
                .workloads
                .reconcile(
                    &self.caller(&metadata),
                    reference.as_ref(),
                    request.with_source,
                    request.force,
                )
                .await?;
            Ok(reconcile_response(reconciled))
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use kube::api::DynamicObject;

    use super::*;
    use crate::workloads::{catalog, rows::Cached};

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
        // A call on one object asks about that object, so RBAC's resourceNames decide.
        let one = need_permission(&Need::new("patch", ks, Some("apps")).on("podinfo"));
        assert_eq!(one.name.as_deref(), Some("podinfo"));
        assert_eq!(
            need_permission(&Need::new("list", ks, Some("apps"))).name,
            None
        );
    }

    #[test]
    fn an_unknown_kind_is_an_invalid_argument() {
        let err = WorkloadsError::UnknownKind {
            name: "deployment".into(),
            known: "kustomization (ks)".into(),
        };
        assert_eq!(tonic::Status::from(err).code(), Code::InvalidArgument);
        let denied = WorkloadsError::Access(AccessError::Denied("user \"u\" may not".into()));
        let status = tonic::Status::from(denied);
        assert_eq!(status.code(), Code::PermissionDenied);
        assert_eq!(status.message(), "user \"u\" may not");
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
        let row = flux_object(&Object {
            kind: ks,
            api_version: "kustomize.toolkit.fluxcd.io/v1".into(),
            cached: Arc::new(Cached::new(ks, object)),
        });
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
            (ready.status(), ready.message.as_str()),
            (pb::ConditionStatus::False, "boom")
        );
        assert_eq!(ready.last_transition.unwrap().seconds, 1_767_323_045);
        assert_eq!((row.generation, row.observed_generation), (4, 3));
        assert_eq!(row.labels["team"], "a");
        assert_eq!(row.source.unwrap().name, "repo");
    }
}
