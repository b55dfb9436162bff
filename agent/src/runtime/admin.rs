//! The admin HTTP server: `/livez`, `/readyz` and `/metrics`, on a port of its own so probes and
//! scrapes never compete with (or need the credentials of) the gRPC API.

use std::sync::Arc;

use axum::{
    Router,
    extract::State,
    http::{StatusCode, header},
    response::IntoResponse,
    routing::get,
};
use tokio::net::TcpListener;

use tokio_util::sync::CancellationToken;

use crate::{server::metrics::Metrics, status::Readiness, workloads::Caches};

#[derive(Clone)]
struct AdminState {
    readiness: Arc<Readiness>,
    metrics: Arc<Metrics>,
    caches: Arc<Caches>,
}

/// The admin routes.
pub fn router(readiness: Arc<Readiness>, metrics: Arc<Metrics>, caches: Arc<Caches>) -> Router {
    Router::new()
        .route("/livez", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .with_state(AdminState {
            readiness,
            metrics,
            caches,
        })
}

async fn readyz(State(state): State<AdminState>) -> impl IntoResponse {
    match state.readiness.check() {
        Ok(()) => (StatusCode::OK, "ok\n".to_owned()),
        Err(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {reason}\n"),
        ),
    }
}

async fn metrics_text(State(state): State<AdminState>) -> impl IntoResponse {
    state.metrics.set_cached_objects(&state.caches.counts());
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.render(),
    )
}

/// Serves the admin routes on `listener` until the shutdown.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    axum::serve(listener, router)
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn endpoints_answer_over_http() {
        let readiness = Arc::new(Readiness::new());
        let metrics = Arc::new(Metrics::new("0.1.0"));
        metrics.record(
            "GetStatus",
            tonic::Code::Unauthenticated,
            Default::default(),
        );
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shutdown = CancellationToken::new();
        let server = tokio::spawn(serve(
            listener,
            router(readiness.clone(), metrics, Arc::new(Caches::default())),
            shutdown.clone(),
        ));

        let (code, body) = http_get(addr, "/livez").await;
        assert_eq!((code, body.as_str()), (200, "ok\n"));
        let (code, body) = http_get(addr, "/readyz").await;
        assert_eq!(code, 503);
        assert!(body.starts_with("not ready: "), "{body}");
        readiness.set_grpc_bound();
        readiness.set_kube_api_answered();
        assert_eq!(http_get(addr, "/readyz").await.0, 200);
        let (code, body) = http_get(addr, "/metrics").await;
        assert_eq!(code, 200);
        assert!(
            body.contains("method=\"GetStatus\",code=\"Unauthenticated\"} 1"),
            "{body}"
        );

        shutdown.cancel();
        server.await.unwrap().unwrap();
    }

    /// A minimal HTTP/1.0 GET, so the test needs no HTTP client crate.
    async fn http_get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream
            .write_all(format!("GET {path} HTTP/1.0\r\nHost: test\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).await.unwrap();
        let code = response[9..12].parse().unwrap();
        let body = response
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_owned())
            .unwrap_or_default();
        (code, body)
    }
}
