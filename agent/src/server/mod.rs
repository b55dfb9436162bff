//! The gRPC edge: every `tenantflux.v1` service (each call authorized with TokenReview and
//! SubjectAccessReview in `auth`, domain types converted to messages in `convert`, domain errors
//! mapped to gRPC codes once per error type), `grpc.health.v1` and reflection, with a graceful
//! drain on shutdown.

use std::{future::Future, pin::Pin, sync::Arc, time::Instant};

use futures::{Stream, StreamExt};
use tenantflux_proto::v1::{
    GetStatusRequest, WatchStatusRequest,
    agent_server::{Agent, AgentServer},
};
use tokio::{net::TcpListener, sync::watch};
use tokio_stream::wrappers::WatchStream;
use tonic::{Code, Request, Response};

use tenantflux_proto::v1::{
    adopt_server::AdoptServer, inspect_server::InspectServer, instance_server::InstanceServer,
    policy_server::PolicyServer, upgrade_server::UpgradeServer, workloads_server::WorkloadsServer,
};
use tokio_util::sync::CancellationToken;

pub mod adopt;
pub mod auth;
mod convert;
pub mod inspect;
pub mod instance;
pub mod metrics;
pub mod policy;
pub mod upgrade;
pub mod workloads;

pub use self::{
    adopt::AdoptService, inspect::InspectService, instance::InstanceService, policy::PolicyService,
    upgrade::UpgradeService, workloads::WorkloadsService,
};
use crate::status::Status;
use auth::{Authorizer, Permission, UserInfo};
use metrics::{Metrics, MetricsLayer, code_name};

/// The largest request the agent decodes. The largest legitimate one is a policy push, and the
/// accepted policy must fit in a ConfigMap (1 MiB); tonic's own default is 4 MiB. Larger
/// requests end with OUT_OF_RANGE before any handler runs.
pub const MAX_REQUEST_BYTES: usize = 1024 * 1024;

/// Why the gRPC server could not be served.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("building the gRPC reflection service from the tenantflux.v1 descriptors")]
    Reflection(#[from] tonic_reflection::server::Error),

    #[error("serving gRPC on {address}")]
    Transport {
        address: String,
        #[source]
        source: tonic::transport::Error,
    },
}

/// The `tenantflux.v1.Agent` service.
pub struct AgentService {
    namespace: String,
    status: watch::Receiver<Status>,
    authorizer: Arc<Authorizer>,
    shutdown: CancellationToken,
}

impl AgentService {
    /// `namespace` is where callers are authorized (`agents.tenantflux.io`); `status` holds the
    /// latest status; open WatchStatus streams end on `shutdown`.
    pub fn new(
        namespace: impl Into<String>,
        status: watch::Receiver<Status>,
        authorizer: Arc<Authorizer>,
        shutdown: CancellationToken,
    ) -> Self {
        Self {
            namespace: namespace.into(),
            status,
            authorizer,
            shutdown,
        }
    }

    /// Runs one RPC: authorizes the caller for the permission the request needs, runs the
    /// handler, and logs the outcome in one debug line whatever it is ([`MetricsLayer`] records
    /// it as a metric).
    async fn rpc<Req, Resp, Fut>(
        &self,
        method: &'static str,
        request: Request<Req>,
        permission: impl FnOnce(&Req) -> Permission,
        handler: impl FnOnce(UserInfo, Req) -> Fut,
    ) -> Result<Response<Resp>, tonic::Status>
    where
        Fut: Future<Output = Result<Resp, tonic::Status>>,
    {
        let started = Instant::now();
        let (metadata, _, message) = request.into_parts();
        let permission = permission(&message);
        let (user, result) = match self.authorizer.authorize(&metadata, &permission).await {
            Ok(user) => (Some(user.username.clone()), handler(user, message).await),
            Err(err) => (None, Err(tonic::Status::from(err))),
        };
        let elapsed = started.elapsed();
        let code = result
            .as_ref()
            .map_or_else(tonic::Status::code, |_| Code::Ok);
        tracing::debug!(
            method,
            code = code_name(code),
            user = user.as_deref().unwrap_or("-"),
            duration_ms = elapsed.as_secs_f64() * 1000.0,
            error = result.as_ref().err().map(tonic::Status::message),
            "rpc"
        );
        result.map(Response::new)
    }
}

type StatusStream =
    Pin<Box<dyn Stream<Item = Result<tenantflux_proto::v1::Status, tonic::Status>> + Send>>;

#[tonic::async_trait]
impl Agent for AgentService {
    async fn get_status(
        &self,
        request: Request<GetStatusRequest>,
    ) -> Result<Response<tenantflux_proto::v1::Status>, tonic::Status> {
        self.rpc(
            "GetStatus",
            request,
            |_| Permission::agent_status(&self.namespace),
            |_, _| async { Ok(self.status.borrow().clone().into()) },
        )
        .await
    }

    type WatchStatusStream = StatusStream;

    async fn watch_status(
        &self,
        request: Request<WatchStatusRequest>,
    ) -> Result<Response<Self::WatchStatusStream>, tonic::Status> {
        let metadata = request.metadata().clone();
        self.rpc(
            "WatchStatus",
            request,
            |_| Permission::agent_status(&self.namespace),
            |_, _| async {
                Ok(self.authorizer.guard(
                    &metadata,
                    vec![Permission::agent_status(&self.namespace)],
                    status_stream(self.status.clone(), self.shutdown.clone()),
                ))
            },
        )
        .await
    }
}

/// The current status, then each published change (the publisher publishes only real
/// changes), until the shutdown or until the publisher is gone.
fn status_stream(status: watch::Receiver<Status>, shutdown: CancellationToken) -> StatusStream {
    let stream = WatchStream::new(status)
        .map(|status| Ok(status.into()))
        .take_until(async move { shutdown.cancelled().await });
    Box::pin(stream)
}

/// Every `tenantflux.v1` service the agent serves.
pub struct Services {
    pub agent: AgentService,
    pub workloads: WorkloadsService,
    pub policy: PolicyService,
    pub instance: InstanceService,
    pub upgrade: UpgradeService,
    pub adopt: AdoptService,
    pub inspect: InspectService,
}

/// Serves gRPC on `listener` until the shutdown, then drains: open WatchStatus streams end and
/// unary calls in flight finish. Every call is recorded in `metrics`.
pub async fn serve(
    listener: TcpListener,
    services: Services,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) -> Result<(), ServeError> {
    let Services {
        agent: service,
        workloads,
        policy,
        instance,
        upgrade,
        adopt,
        inspect,
    } = services;
    let address = listener
        .local_addr()
        .map_or_else(|_| "?".to_owned(), |a| a.to_string());
    let (health, health_service) = tonic_health::server::health_reporter();
    health.set_serving::<AgentServer<AgentService>>().await;
    health
        .set_serving::<WorkloadsServer<WorkloadsService>>()
        .await;
    health.set_serving::<PolicyServer<PolicyService>>().await;
    health
        .set_serving::<InstanceServer<InstanceService>>()
        .await;
    health.set_serving::<UpgradeServer<UpgradeService>>().await;
    health.set_serving::<AdoptServer<AdoptService>>().await;
    health.set_serving::<InspectServer<InspectService>>().await;
    let reflection = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(tenantflux_proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
    };
    let reflection_v1 = reflection().build_v1()?;
    let reflection_v1alpha = reflection().build_v1alpha()?;

    tonic::transport::Server::builder()
        .layer(MetricsLayer(metrics))
        // Proofs of identity are checked against the call they came with (with room for the
        // gRPC frame around the largest message).
        .layer(auth::CallLayer::new(MAX_REQUEST_BYTES))
        .add_service(health_service)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(AgentServer::new(service).max_decoding_message_size(MAX_REQUEST_BYTES))
        .add_service(WorkloadsServer::new(workloads).max_decoding_message_size(MAX_REQUEST_BYTES))
        .add_service(PolicyServer::new(policy).max_decoding_message_size(MAX_REQUEST_BYTES))
        .add_service(InstanceServer::new(instance).max_decoding_message_size(MAX_REQUEST_BYTES))
        .add_service(UpgradeServer::new(upgrade).max_decoding_message_size(MAX_REQUEST_BYTES))
        .add_service(AdoptServer::new(adopt).max_decoding_message_size(MAX_REQUEST_BYTES))
        .add_service(InspectServer::new(inspect).max_decoding_message_size(MAX_REQUEST_BYTES))
        // Without TCP_NODELAY each answer's second write waited for the peer's delayed ACK
        // (40 ms on Linux, twice per call through a port-forward); tonic sets it only on
        // listeners it binds itself.
        .serve_with_incoming_shutdown(
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
            async move {
                shutdown.cancelled().await;
                health.set_not_serving::<AgentServer<AgentService>>().await;
                health
                    .set_not_serving::<WorkloadsServer<WorkloadsService>>()
                    .await;
                health
                    .set_not_serving::<PolicyServer<PolicyService>>()
                    .await;
                health
                    .set_not_serving::<InstanceServer<InstanceService>>()
                    .await;
                health
                    .set_not_serving::<UpgradeServer<UpgradeService>>()
                    .await;
                health.set_not_serving::<AdoptServer<AdoptService>>().await;
                health
                    .set_not_serving::<InspectServer<InspectService>>()
                    .await;
            },
        )
        .await
        .map_err(|source| ServeError::Transport { address, source })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tenantflux_proto::v1::agent_client::AgentClient;
    use tonic_health::pb::{
        HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
    };

    use super::*;
    use crate::status::{AgentFacts, initial};

    /// A kube client whose API server never answers: enough for the paths that fail before
    /// asking it, and for checking that an unreachable API server is UNAVAILABLE.
    fn offline_client() -> kube::Client {
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        kube::Client::try_from(config).unwrap()
    }

    #[tokio::test]
    async fn status_stream_sends_current_then_changes_and_ends_on_shutdown() {
        let version = |v: &str| Status {
            agent: crate::status::model::AgentInfo {
                version: v.into(),
                ..Default::default()
            },
            ..Default::default()
        };
        let (tx, rx) = watch::channel(version("1"));
        let shutdown = CancellationToken::new();
        let mut stream = status_stream(rx, shutdown.clone());
        let next = |s: Option<Result<tenantflux_proto::v1::Status, tonic::Status>>| {
            s.unwrap().unwrap().agent.unwrap().version
        };
        assert_eq!(next(stream.next().await), "1");
        tx.send_replace(version("2"));
        assert_eq!(next(stream.next().await), "2");
        shutdown.cancel();
        let end = tokio::time::timeout(Duration::from_secs(1), stream.next()).await;
        assert!(matches!(end, Ok(None)), "stream ends on shutdown");
    }

    #[tokio::test]
    async fn serves_health_and_refuses_calls_without_token_then_drains() {
        let facts = AgentFacts {
            version: "0.1.0".into(),
            namespace: "tenantflux-system".into(),
            operator_namespace: "flux-system".into(),
            started_at: std::time::SystemTime::now(),
        };
        let (_tx, rx) = watch::channel(initial(&facts));
        let metrics = Arc::new(Metrics::new("0.1.0"));
        let shutdown = CancellationToken::new();
        let authorizer = Arc::new(Authorizer::new(offline_client(), "tenantflux-agent"));
        let service = AgentService::new(
            "tenantflux-system",
            rx,
            authorizer.clone(),
            shutdown.clone(),
        );
        let workloads = WorkloadsService::new(
            Arc::default(),
            offline_client(),
            authorizer.clone(),
            shutdown.clone(),
        );
        let store = crate::policy::store::PolicyStore::new(
            offline_client(),
            "tenantflux-system",
            None,
            None,
        );
        let instance = InstanceService::new(
            crate::instance::Instances::new(offline_client(), "flux-system", store.subscribe()),
            authorizer.clone(),
        );
        let upgrade = UpgradeService::new(
            crate::upgrade::Upgrader::new(
                offline_client(),
                crate::upgrade::UpgradeConfig {
                    agent_namespace: "tenantflux-system".into(),
                    operator_namespace: "flux-system".into(),
                    concurrency: 8,
                },
                store.subscribe(),
                tokio::sync::watch::channel(None).1,
                shutdown.clone(),
            ),
            authorizer.clone(),
        );
        let adopt = AdoptService::new(
            crate::adopt::Adopter::new(
                offline_client(),
                "tenantflux-system",
                "flux-system",
                store.subscribe(),
                None,
            ),
            authorizer.clone(),
        );
        let inspect = InspectService::new(
            Arc::default(),
            offline_client(),
            "flux-system",
            authorizer.clone(),
            shutdown.clone(),
        );
        let policy = PolicyService::new(store, authorizer);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let services = Services {
            agent: service,
            workloads,
            policy,
            instance,
            upgrade,
            adopt,
            inspect,
        };
        let server = tokio::spawn(serve(listener, services, metrics.clone(), shutdown.clone()));

        let channel = tonic::transport::Endpoint::from_shared(url)
            .unwrap()
            .connect()
            .await
            .unwrap();
        let health = HealthClient::new(channel.clone())
            .check(HealthCheckRequest {
                service: "tenantflux.v1.Agent".into(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(health.status(), ServingStatus::Serving);

        let mut agent = AgentClient::new(channel.clone());
        let err = agent.get_status(GetStatusRequest {}).await.unwrap_err();
        assert_eq!(err.code(), Code::Unauthenticated, "{err:?}");
        assert!(err.message().starts_with("missing bearer token"), "{err:?}");
        let err = agent.watch_status(WatchStatusRequest {}).await.unwrap_err();
        assert_eq!(err.code(), Code::Unauthenticated, "{err:?}");

        let mut with_token = Request::new(GetStatusRequest {});
        with_token
            .metadata_mut()
            .insert("authorization", "Bearer some-secret-token".parse().unwrap());
        let err = agent.get_status(with_token).await.unwrap_err();
        assert_eq!(err.code(), Code::Unavailable, "{err:?}");
        assert!(!err.message().contains("some-secret-token"), "{err:?}");

        // The Inspect service: refused without a token, counted by the metrics layer, and
        // listed by reflection with every method (what grpcurl's `list` and `describe` read).
        let mut inspect = tenantflux_proto::v1::inspect_client::InspectClient::new(channel.clone());
        let err = inspect
            .stats(tenantflux_proto::v1::StatsRequest::default())
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::Unauthenticated, "{err:?}");
        let err = inspect
            .watch_events(tenantflux_proto::v1::ListEventsRequest::default())
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::Unauthenticated, "{err:?}");
        {
            use tonic_reflection::pb::v1::{
                ServerReflectionRequest, server_reflection_client::ServerReflectionClient,
                server_reflection_request::MessageRequest,
                server_reflection_response::MessageResponse,
            };
            let ask = |request| ServerReflectionRequest {
                host: String::new(),
                message_request: Some(request),
            };
            let mut reflection = ServerReflectionClient::new(channel.clone());
            let requests = futures::stream::iter([
                ask(MessageRequest::ListServices(String::new())),
                ask(MessageRequest::FileContainingSymbol(
                    "tenantflux.v1.Inspect".into(),
                )),
            ]);
            let mut answers = reflection
                .server_reflection_info(requests)
                .await
                .unwrap()
                .into_inner();
            let Some(MessageResponse::ListServicesResponse(listed)) =
                answers.message().await.unwrap().unwrap().message_response
            else {
                panic!("a list of services");
            };
            assert!(
                listed
                    .service
                    .iter()
                    .any(|s| s.name == "tenantflux.v1.Inspect"),
                "{listed:?}"
            );
            let Some(MessageResponse::FileDescriptorResponse(files)) =
                answers.message().await.unwrap().unwrap().message_response
            else {
                panic!("the file of tenantflux.v1.Inspect");
            };
            let bytes = files.file_descriptor_proto.concat();
            let text = String::from_utf8_lossy(&bytes);
            for method in [
                "ListEvents",
                "WatchEvents",
                "Tree",
                "Trace",
                "Stats",
                "ListLogs",
                "FollowLogs",
            ] {
                assert!(text.contains(method), "{method} in the descriptor");
            }
        }

        let text = metrics.render();
        assert!(
            text.contains(
                "tenantflux_agent_grpc_requests_total{method=\"GetStatus\",code=\"Unauthenticated\"} 1"
            ),
            "{text}"
        );
        for method in ["Stats", "WatchEvents"] {
            assert!(
                text.contains(&format!(
                    "tenantflux_agent_grpc_requests_total{{method=\"{method}\",code=\"Unauthenticated\"}} 1"
                )),
                "{text}"
            );
        }
        assert!(
            text.contains("{method=\"WatchStatus\",code=\"Unauthenticated\"} 1"),
            "{text}"
        );

        shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(5), server)
            .await
            .expect("server drained")
            .unwrap()
            .unwrap();
    }
}
