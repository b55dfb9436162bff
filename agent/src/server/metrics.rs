//! Prometheus metrics of the agent, served on the admin port at `/metrics`, and the one tower
//! layer that records every `tenantflux.v1` call of every service.

use std::{
    future::Future,
    pin::Pin,
    sync::{Arc, Mutex},
    task::{Context, Poll},
    time::{Duration, Instant},
};

use prometheus_client::{
    encoding::{EncodeLabelSet, text::encode},
    metrics::{
        counter::Counter,
        family::Family,
        gauge::Gauge,
        histogram::{Histogram, exponential_buckets},
        info::Info,
    },
    registry::Registry,
};

use crate::operator::OperatorPhase;

/// Labels of the per-RPC series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RpcLabels {
    method: String,
    code: String,
}

/// Labels of the operator phase gauge.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseLabels {
    phase: String,
}

/// Labels of the cached objects gauge.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: String,
}

type HistogramFamily = Family<RpcLabels, Histogram, fn() -> Histogram>;

/// The agent's metrics registry and the series handlers record into.
pub struct Metrics {
    registry: Mutex<Registry>,
    requests: Family<RpcLabels, Counter>,
    durations: HistogramFamily,
    operator_phase: Family<PhaseLabels, Gauge>,
    policy_generation: Gauge,
    policy_expiry: Gauge,
    policy_stale: Gauge,
    policy_enforced: Gauge,
    problems: Gauge,
    cached_objects: Family<KindLabels, Gauge>,
}

impl Metrics {
    pub fn new(version: &str) -> Self {
        let requests = Family::<RpcLabels, Counter>::default();
        let durations: HistogramFamily =
            Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.001, 2.5, 12)));
        let mut registry = Registry::default();
        registry.register(
            "tenantflux_agent",
            "Build information of the agent",
            Info::new(vec![("version".to_owned(), version.to_owned())]),
        );
        let agent = registry.sub_registry_with_prefix("tenantflux_agent");
        agent.register(
            "grpc_requests",
            "gRPC requests handled, by method and status code",
            requests.clone(),
        );
        agent.register(
            "grpc_request_duration_seconds",
            "Time to answer a gRPC request (for streams: until the stream is opened)",
            durations.clone(),
        );
        let operator_phase = Family::<PhaseLabels, Gauge>::default();
        agent.register(
            "operator_phase",
            "1 for the phase the flux-operator install is in, 0 for the others",
            operator_phase.clone(),
        );
        let (policy_generation, policy_expiry, policy_stale) =
            (Gauge::default(), Gauge::default(), Gauge::default());
        agent.register(
            "policy_generation",
            "Generation of the policy in force (0: none)",
            policy_generation.clone(),
        );
        agent.register(
            "policy_expiry_timestamp_seconds",
            "Signed expiry of the policy in force, unix seconds (0: none, or an envelope v1)",
            policy_expiry.clone(),
        );
        agent.register(
            "policy_stale",
            "1 while the policy in force is past its expiry (still enforced: nothing newer was verified)",
            policy_stale.clone(),
        );
        let policy_enforced = Gauge::default();
        agent.register(
            "policy_enforced",
            "1 while the API server is proven to enforce the policy in force, 0 while it is proven not to (NOT ENFORCED), -1 before the first verdict or without a policy",
            policy_enforced.clone(),
        );
        let problems = Gauge::default();
        agent.register(
            "problems",
            "Problems the agent reports in status (a tamper it undid, a policy not enforced, a permission it lacks, a watch failing): 0 while healthy",
            problems.clone(),
        );
        let cached_objects = Family::<KindLabels, Gauge>::default();
        agent.register(
            "cached_objects",
            "Flux objects the agent holds in its cache, by kind (the kinds the cluster serves)",
            cached_objects.clone(),
        );
        Self {
            registry: Mutex::new(registry),
            requests,
            durations,
            operator_phase,
            policy_generation,
            policy_expiry,
            policy_stale,
            policy_enforced,
            problems,
            cached_objects,
        }
    }

    /// Records one finished RPC.
    pub fn record(&self, method: &str, code: tonic::Code, elapsed: Duration) {
        let labels = RpcLabels {
            method: method.to_owned(),
            code: code_name(code).to_owned(),
        };
        self.requests.get_or_create(&labels).inc();
        self.durations
            .get_or_create(&labels)
            .observe(elapsed.as_secs_f64());
    }

    /// Records the phase of the flux-operator install.
    pub fn set_operator_phase(&self, current: OperatorPhase) {
        // Every phase gets a series, so a dashboard sees 0s rather than gaps.
        for phase in OperatorPhase::ALL {
            self.operator_phase
                .get_or_create(&PhaseLabels {
                    phase: phase.name().to_owned(),
                })
                .set(i64::from(phase == current));
        }
    }

    /// Records the policy in force: its generation, signed expiry (unix seconds), whether it
    /// is stale, and whether the API server is proven to enforce it (`None`: no verdict yet).
    pub fn set_policy(
        &self,
        generation: u64,
        expires_at: i64,
        stale: bool,
        enforced: Option<bool>,
    ) {
        self.policy_generation
            .set(i64::try_from(generation).unwrap_or(i64::MAX));
        self.policy_expiry.set(expires_at);
        self.policy_stale.set(i64::from(stale));
        self.policy_enforced.set(enforced.map_or(-1, i64::from));
    }

    /// Records how many problems the status reports.
    pub fn set_problems(&self, count: usize) {
        self.problems.set(i64::try_from(count).unwrap_or(i64::MAX));
    }

    /// Records how many objects of each served kind are cached; a kind no longer served has
    /// no series.
    pub fn set_cached_objects(&self, counts: &[(&str, usize)]) {
        self.cached_objects.clear();
        for (kind, count) in counts {
            self.cached_objects
                .get_or_create(&KindLabels {
                    kind: (*kind).to_owned(),
                })
                .set(i64::try_from(*count).unwrap_or(i64::MAX));
        }
    }

    /// The metrics in the OpenMetrics text format, which Prometheus scrapes.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let registry = self.registry.lock().unwrap_or_else(|p| p.into_inner());
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &registry);
        out
    }
}

/// Records every `tenantflux.v1` call, whichever service serves it: the method, the gRPC code
/// and the time until the response head (for streams: until the stream is opened). One layer
/// on the server, so no handler can forget it; health checks and reflection are not recorded.
#[derive(Clone)]
pub struct MetricsLayer(pub Arc<Metrics>);

impl<S> tower::Layer<S> for MetricsLayer {
    type Service = Recorded<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Recorded {
            inner,
            metrics: self.0.clone(),
        }
    }
}

/// A service whose calls [`MetricsLayer`] records.
#[derive(Clone)]
pub struct Recorded<S> {
    inner: S,
    metrics: Arc<Metrics>,
}

impl<S, B, R> tower::Service<http::Request<B>> for Recorded<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<R>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let method = rpc_method(request.uri().path()).map(str::to_owned);
        let timed = request
            .headers()
            .contains_key(super::auth::timing::REQUEST_METADATA);
        let started = Instant::now();
        let answer = self.inner.call(request);
        let metrics = self.metrics.clone();
        Box::pin(async move {
            let result = if timed {
                let (mut result, phases) = super::auth::timing::collect(answer).await;
                if let Ok(response) = &mut result
                    && let Ok(value) = http::HeaderValue::from_str(
                        &super::auth::timing::header_value(&phases, started.elapsed()),
                    )
                {
                    response
                        .headers_mut()
                        .insert(super::auth::timing::RESPONSE_HEADER, value);
                }
                result
            } else {
                answer.await
            };
            if let Some(method) = method {
                let code = result
                    .as_ref()
                    .map_or(tonic::Code::Internal, |r| response_code(r.headers()));
                metrics.record(&method, code, started.elapsed());
            }
            result
        })
    }
}

/// The method of a `tenantflux.*` gRPC path (`/tenantflux.v1.Agent/GetStatus` → `GetStatus`).
fn rpc_method(path: &str) -> Option<&str> {
    let (service, method) = path.strip_prefix('/')?.split_once('/')?;
    service.starts_with("tenantflux.").then_some(method)
}

/// The code of a response head: a failed call is a trailers-only response whose headers carry
/// `grpc-status`; a successful one carries it in the trailers, after the head.
fn response_code(headers: &http::HeaderMap) -> tonic::Code {
    headers
        .get("grpc-status")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<i32>().ok())
        .map_or(tonic::Code::Ok, tonic::Code::from_i32)
}

/// gRPC status code names as every gRPC implementation spells them in metrics.
pub fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code;
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "Canceled",
        Code::Unknown => "Unknown",
        Code::InvalidArgument => "InvalidArgument",
        Code::DeadlineExceeded => "DeadlineExceeded",
        Code::NotFound => "NotFound",
        Code::AlreadyExists => "AlreadyExists",
        Code::PermissionDenied => "PermissionDenied",
        Code::ResourceExhausted => "ResourceExhausted",
        Code::FailedPrecondition => "FailedPrecondition",
        Code::Aborted => "Aborted",
        Code::OutOfRange => "OutOfRange",
        Code::Unimplemented => "Unimplemented",
        Code::Internal => "Internal",
        Code::Unavailable => "Unavailable",
        Code::DataLoss => "DataLoss",
        Code::Unauthenticated => "Unauthenticated",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::{Layer as _, Service as _};

    /// Answers every request with the given `grpc-status` header (none: a successful head).
    #[derive(Clone)]
    struct Answer(Option<&'static str>);

    impl tower::Service<http::Request<()>> for Answer {
        type Response = http::Response<()>;
        type Error = std::convert::Infallible;
        type Future = std::future::Ready<Result<Self::Response, Self::Error>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _: http::Request<()>) -> Self::Future {
            let mut response = http::Response::new(());
            if let Some(code) = self.0 {
                response
                    .headers_mut()
                    .insert("grpc-status", code.parse().unwrap());
            }
            std::future::ready(Ok(response))
        }
    }

    #[tokio::test]
    async fn the_layer_records_every_tenantflux_call_with_its_code_and_nothing_else() {
        let metrics = Arc::new(Metrics::new("0.1.0"));
        let layer = MetricsLayer(metrics.clone());
        let call = |answer: Answer, path: &str| {
            let mut service = layer.layer(answer);
            let request = http::Request::builder().uri(path).body(()).unwrap();
            async move { service.call(request).await.unwrap() }
        };
        call(Answer(None), "/tenantflux.v1.Policy/GetPolicy").await;
        call(Answer(Some("7")), "/tenantflux.v1.Instance/ApplyInstance").await;
        call(Answer(Some("0")), "/tenantflux.v1.Upgrade/Plan").await;
        call(Answer(None), "/grpc.health.v1.Health/Check").await;
        call(
            Answer(None),
            "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
        )
        .await;
        let text = metrics.render();
        for series in [
            "tenantflux_agent_grpc_requests_total{method=\"GetPolicy\",code=\"OK\"} 1",
            "tenantflux_agent_grpc_requests_total{method=\"ApplyInstance\",code=\"PermissionDenied\"} 1",
            "tenantflux_agent_grpc_requests_total{method=\"Plan\",code=\"OK\"} 1",
        ] {
            assert!(text.contains(series), "{series} in\n{text}");
        }
        assert_eq!(
            text.matches("tenantflux_agent_grpc_requests_total{")
                .count(),
            3,
            "{text}"
        );
    }

    #[test]
    fn info_series_carries_the_version() {
        let text = Metrics::new("9.8.7").render();
        assert!(
            text.contains("tenantflux_agent_info{version=\"9.8.7\"} 1"),
            "{text}"
        );
    }

    #[test]
    fn policy_gauges_show_generation_expiry_and_staleness() {
        let metrics = Metrics::new("0.1.0");
        metrics.set_policy(7, 1_796_083_200, true, Some(false));
        let text = metrics.render();
        for line in [
            "tenantflux_agent_policy_generation 7",
            "tenantflux_agent_policy_expiry_timestamp_seconds 1796083200",
            "tenantflux_agent_policy_stale 1",
            "tenantflux_agent_policy_enforced 0",
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
        metrics.set_policy(0, 0, false, None);
        metrics.set_problems(2);
        let text = metrics.render();
        assert!(
            text.contains("tenantflux_agent_policy_enforced -1"),
            "{text}"
        );
        assert!(text.contains("tenantflux_agent_problems 2"), "{text}");
    }

    #[test]
    fn cached_objects_gauge_has_a_series_per_served_kind_only() {
        let metrics = Metrics::new("0.1.0");
        metrics.set_cached_objects(&[("GitRepository", 10_000), ("Kustomization", 3)]);
        let text = metrics.render();
        assert!(
            text.contains("tenantflux_agent_cached_objects{kind=\"GitRepository\"} 10000"),
            "{text}"
        );
        assert!(text.contains("tenantflux_agent_cached_objects{kind=\"Kustomization\"} 3"));
        metrics.set_cached_objects(&[("Kustomization", 4)]);
        let text = metrics.render();
        assert!(!text.contains("kind=\"GitRepository\""), "{text}");
        assert!(text.contains("tenantflux_agent_cached_objects{kind=\"Kustomization\"} 4"));
    }

    #[test]
    fn operator_phase_gauge_marks_the_current_phase_only() {
        let metrics = Metrics::new("0.1.0");
        metrics.set_operator_phase(OperatorPhase::WaitingForApi);
        metrics.set_operator_phase(OperatorPhase::Ready);
        let text = metrics.render();
        assert!(
            text.contains("tenantflux_agent_operator_phase{phase=\"ready\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("tenantflux_agent_operator_phase{phase=\"waiting_for_api\"} 0"),
            "{text}"
        );
        assert_eq!(text.matches("tenantflux_agent_operator_phase{").count(), 6);
    }

    #[test]
    fn recorded_call_shows_in_counter_and_histogram() {
        let metrics = Metrics::new("0.1.0");
        let before = metrics.render();
        assert!(!before.contains("method=\"GetStatus\""), "{before}");

        metrics.record("GetStatus", tonic::Code::Ok, Duration::from_millis(3));
        metrics.record("GetStatus", tonic::Code::Ok, Duration::from_millis(4));
        metrics.record(
            "WatchStatus",
            tonic::Code::PermissionDenied,
            Duration::from_millis(1),
        );
        let text = metrics.render();
        assert!(
            text.contains(
                "tenantflux_agent_grpc_requests_total{method=\"GetStatus\",code=\"OK\"} 2"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "tenantflux_agent_grpc_requests_total{method=\"WatchStatus\",code=\"PermissionDenied\"} 1"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "tenantflux_agent_grpc_request_duration_seconds_count{method=\"GetStatus\",code=\"OK\"} 2"
            ),
            "{text}"
        );
        assert!(
            text.contains("# TYPE tenantflux_agent_grpc_request_duration_seconds histogram"),
            "{text}"
        );
    }
}
