//! Prometheus metrics of the agent, served on the admin port at `/metrics`.

use std::{sync::Mutex, time::Duration};

use prometheus_client::{
    encoding::{EncodeLabelSet, text::encode},
    metrics::{
        counter::Counter,
        family::Family,
        histogram::{Histogram, exponential_buckets},
        info::Info,
    },
    registry::Registry,
};

/// Labels of the per-RPC series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RpcLabels {
    method: String,
    code: String,
}

type HistogramFamily = Family<RpcLabels, Histogram, fn() -> Histogram>;

/// The agent's metrics registry and the series handlers record into.
pub struct Metrics {
    registry: Mutex<Registry>,
    requests: Family<RpcLabels, Counter>,
    durations: HistogramFamily,
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
        Self {
            registry: Mutex::new(registry),
            requests,
            durations,
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

    /// The metrics in the OpenMetrics text format, which Prometheus scrapes.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let registry = self.registry.lock().unwrap_or_else(|p| p.into_inner());
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &registry);
        out
    }
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

    #[test]
    fn info_series_carries_the_version() {
        let text = Metrics::new("9.8.7").render();
        assert!(
            text.contains("tenantflux_agent_info{version=\"9.8.7\"} 1"),
            "{text}"
        );
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
