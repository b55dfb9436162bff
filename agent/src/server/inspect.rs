//! The `tenantflux.v1.Inspect` service: `inspect::Inspector` at the edge. It converts the
//! messages and lets the caller's credentials answer the calls' [`Access`] questions; errors
//! map to codes as the workloads calls' do.

use std::{pin::Pin, sync::Arc};

use futures::{Stream, StreamExt};
use kube::Client;
use tenantflux_proto::v1::{
    self as pb, EventChange, ListEventsRequest, ListEventsResponse, SkippedKind, SkippedNamespace,
    StatsRequest, StatsResponse, TraceRequest, TraceResponse, TreeRequest, TreeResponse,
    event_change, inspect_server,
};
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response};

use super::{
    auth::Authorizer,
    workloads::{Caller, condition, need_permission},
};
use crate::{
    inspect::{
        Inspector,
        events::{self, EventQuery, EventRow},
        logs::{self, LogQuery},
        stats::Stats,
        trace::Trace,
        tree::Node,
    },
    workloads::{Caches, WorkloadsError, model::ObjectRef},
};

/// The `tenantflux.v1.Inspect` service.
pub struct InspectService {
    inspector: Inspector,
    authorizer: Arc<Authorizer>,
}

impl InspectService {
    pub fn new(
        caches: Arc<Caches>,
        client: Client,
        flux_namespace: &str,
        authorizer: Arc<Authorizer>,
        shutdown: CancellationToken,
    ) -> Self {
        Self {
            inspector: Inspector::new(caches, client, flux_namespace, shutdown),
            authorizer,
        }
    }
}

fn timestamp(t: Option<k8s_openapi::jiff::Timestamp>) -> Option<prost_types::Timestamp> {
    t.map(|t| prost_types::Timestamp {
        seconds: t.as_second(),
        nanos: t.subsec_nanosecond(),
    })
}

fn kube_event(row: EventRow) -> pb::KubeEvent {
    pb::KubeEvent {
        namespace: row.namespace,
        object_kind: row.kind,
        object_name: row.name,
        r#type: row.type_,
        reason: row.reason,
        message: row.message,
        last_seen: timestamp(row.last_seen),
        first_seen: timestamp(row.first_seen),
        count: row.count,
    }
}

fn event_query(request: ListEventsRequest) -> EventQuery {
    EventQuery {
        namespace: request.namespace,
        object: request.object.map(|o| (o.kind, o.namespace, o.name)),
        types: request.types,
    }
}

fn object_ref(reference: Option<pb::ObjectRef>) -> Option<ObjectRef> {
    reference.map(|r| ObjectRef {
        kind: r.kind,
        namespace: r.namespace,
        name: r.name,
    })
}

fn tree_node(node: Node) -> pb::TreeNode {
    pb::TreeNode {
        kind: node.entry.kind,
        group: node.entry.group,
        namespace: node.entry.namespace,
        name: node.entry.name,
        ready: node.ready.as_ref().map(condition),
        flux: node.flux,
        children: node.children.into_iter().map(tree_node).collect(),
        more: node.more,
        error: node.error,
    }
}

fn trace_response(trace: Trace) -> TraceResponse {
    TraceResponse {
        steps: trace
            .steps
            .into_iter()
            .map(|step| pb::TraceStep {
                role: step.role.name().into(),
                kind: step.kind,
                api_version: step.api_version,
                namespace: step.namespace,
                name: step.name,
                revision: step
                    .flux
                    .as_ref()
                    .map(|o| o.row.revision.clone())
                    .unwrap_or_default(),
                ready: step
                    .flux
                    .as_ref()
                    .and_then(|o| o.row.ready.as_ref().map(condition)),
                suspended: step.flux.as_ref().is_some_and(|o| o.row.suspended),
            })
            .collect(),
        unmanaged: trace.unmanaged,
    }
}

fn stats_response(stats: Stats) -> StatsResponse {
    StatsResponse {
        kinds: stats
            .kinds
            .into_iter()
            .map(|k| pb::KindStats {
                kind: k.kind.kind.into(),
                running: k.running,
                failing: k.failing,
                suspended: k.suspended,
                storage_bytes: k.storage_bytes,
                has_storage: k.has_storage,
            })
            .collect(),
        skipped: stats
            .skipped
            .into_iter()
            .map(|s| SkippedKind {
                kind: s.kind.into(),
                reason: s.reason,
            })
            .collect(),
    }
}

type ChangeStream = Pin<Box<dyn Stream<Item = Result<EventChange, tonic::Status>> + Send>>;
type LogStream = Pin<Box<dyn Stream<Item = Result<pb::LogLine, tonic::Status>> + Send>>;

fn log_query(request: pb::LogsRequest) -> LogQuery {
    let text = |s: String| (!s.is_empty()).then_some(s);
    LogQuery {
        namespace: request.namespace,
        kind: text(request.kind),
        name: text(request.name),
        level: text(request.level),
        since: (request.since_seconds > 0)
            .then(|| std::time::Duration::from_secs(request.since_seconds)),
    }
}

fn log_line(line: logs::LogLine) -> pb::LogLine {
    pb::LogLine {
        time: timestamp(line.time),
        level: line.level,
        controller: line.controller,
        kind: line.kind,
        namespace: line.namespace,
        name: line.name,
        message: line.message,
    }
}

fn done<T>(result: Result<T, WorkloadsError>) -> Result<Response<T>, tonic::Status> {
    result.map(Response::new).map_err(tonic::Status::from)
}

#[tonic::async_trait]
impl inspect_server::Inspect for InspectService {
    async fn list_events(
        &self,
        request: Request<ListEventsRequest>,
    ) -> Result<Response<ListEventsResponse>, tonic::Status> {
        let (metadata, _, request) = request.into_parts();
        let caller = Caller::new(&self.authorizer, &metadata);
        let listed = self
            .inspector
            .list_events(&caller, &event_query(request))
            .await;
        done(listed.map(|list| {
            ListEventsResponse {
                events: list.events.into_iter().map(kube_event).collect(),
                more: list.more,
                skipped: list
                    .skipped
                    .into_iter()
                    .map(|(namespace, reason)| SkippedNamespace { namespace, reason })
                    .collect(),
            }
        }))
    }

    type WatchEventsStream = ChangeStream;

    async fn watch_events(
        &self,
        request: Request<ListEventsRequest>,
    ) -> Result<Response<Self::WatchEventsStream>, tonic::Status> {
        let (metadata, _, request) = request.into_parts();
        let caller = Caller::new(&self.authorizer, &metadata);
        let watch = self
            .inspector
            .watch_events(&caller, &event_query(request))
            .await
            .map_err(tonic::Status::from)?;
        let changes = watch.changes.map(|change| {
            change
                .map(|change| {
                    let (type_, event) = match change {
                        events::EventChange::Existing(row) => {
                            (event_change::Type::Existing, Some(kube_event(row)))
                        }
                        events::EventChange::Synced => (event_change::Type::Synced, None),
                        events::EventChange::New(row) => {
                            (event_change::Type::New, Some(kube_event(row)))
                        }
                    };
                    EventChange {
                        r#type: type_.into(),
                        event,
                    }
                })
                .map_err(tonic::Status::from)
        });
        let permissions = watch.needs.iter().map(need_permission).collect();
        Ok(Response::new(self.authorizer.guard(
            &metadata,
            permissions,
            Box::pin(changes) as ChangeStream,
        )))
    }

    async fn list_logs(
        &self,
        request: Request<pb::LogsRequest>,
    ) -> Result<Response<pb::ListLogsResponse>, tonic::Status> {
        let (metadata, _, request) = request.into_parts();
        let caller = Caller::new(&self.authorizer, &metadata);
        let listed = self.inspector.list_logs(&caller, &log_query(request)).await;
        done(listed.map(|list| {
            pb::ListLogsResponse {
                lines: list.lines.into_iter().map(log_line).collect(),
                more: list.more,
                unread: list
                    .unread
                    .into_iter()
                    .map(|(controller, reason)| pb::UnreadLog { controller, reason })
                    .collect(),
            }
        }))
    }

    type FollowLogsStream = LogStream;

    async fn follow_logs(
        &self,
        request: Request<pb::LogsRequest>,
    ) -> Result<Response<Self::FollowLogsStream>, tonic::Status> {
        let (metadata, _, request) = request.into_parts();
        let caller = Caller::new(&self.authorizer, &metadata);
        let follow = self
            .inspector
            .follow_logs(&caller, &log_query(request))
            .await
            .map_err(tonic::Status::from)?;
        let lines = follow
            .lines
            .map(|line| line.map(log_line).map_err(tonic::Status::from));
        let permissions = follow.needs.iter().map(need_permission).collect();
        Ok(Response::new(self.authorizer.guard(
            &metadata,
            permissions,
            Box::pin(lines) as LogStream,
        )))
    }

    async fn tree(
        &self,
        request: Request<TreeRequest>,
    ) -> Result<Response<TreeResponse>, tonic::Status> {
        let (metadata, _, request) = request.into_parts();
        let caller = Caller::new(&self.authorizer, &metadata);
        let reference = object_ref(request.object);
        let tree = self.inspector.tree(&caller, reference.as_ref()).await;
        done(tree.map(|root| TreeResponse {
            root: Some(tree_node(root)),
        }))
    }

    async fn trace(
        &self,
        request: Request<TraceRequest>,
    ) -> Result<Response<TraceResponse>, tonic::Status> {
        let (metadata, _, request) = request.into_parts();
        let caller = Caller::new(&self.authorizer, &metadata);
        let reference = object_ref(request.object);
        done(
            self.inspector
                .trace(&caller, reference.as_ref())
                .await
                .map(trace_response),
        )
    }

    async fn stats(
        &self,
        request: Request<StatsRequest>,
    ) -> Result<Response<StatsResponse>, tonic::Status> {
        let (metadata, _, request) = request.into_parts();
        let caller = Caller::new(&self.authorizer, &metadata);
        let namespace = (!request.namespace.is_empty()).then_some(request.namespace.as_str());
        done(
            self.inspector
                .stats(&caller, namespace)
                .await
                .map(stats_response),
        )
    }
}
