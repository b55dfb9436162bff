//! What a caller-identity proof is checked against: the call the agent received. One layer on
//! the gRPC server reads each call that carries a proof whole (the request body of every
//! `tenantflux.v1` method is one message, bounded by the request limit), puts its method and
//! the SHA-256 of its body into [`identity::CALL_METADATA`] (replacing whatever the caller
//! sent there), and refuses a proof whose nonce it has seen before: a proof is good for the
//! one call it was signed for, once.

use std::{
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
    time::Duration,
};

use http_body_util::BodyExt as _;
use moka::sync::Cache;
use tenantflux_core::identity;

/// How many nonces are remembered at most. Each is kept for twice the proof window; one
/// evicted early could be replayed within that window, so the bound is far above what the
/// callers of one agent send in a minute (and a caller must be able to reach the agent at all).
const NONCE_CAPACITY: u64 = 200_000;

/// The nonces of the proofs seen, by CSR, for twice the proof window.
#[derive(Clone)]
pub struct Nonces(Arc<Cache<(String, String), ()>>);

impl Default for Nonces {
    fn default() -> Self {
        let window = u64::try_from(2 * identity::MAX_SKEW_SECONDS).unwrap_or(60);
        Self(Arc::new(
            Cache::builder()
                .time_to_live(Duration::from_secs(window))
                .max_capacity(NONCE_CAPACITY)
                .build(),
        ))
    }
}

impl Nonces {
    /// Records `nonce` for `csr`; false when it was recorded before (a replay).
    fn first_use(&self, csr: &str, nonce: &str) -> bool {
        self.0
            .entry((csr.to_owned(), nonce.to_owned()))
            .or_insert(())
            .is_fresh()
    }
}

/// The layer that binds proofs to calls (see the module's text).
#[derive(Clone)]
pub struct CallLayer {
    nonces: Nonces,
    /// The largest request message the services take (their decoding limit).
    max_message: usize,
}

/// Room beyond a message for the gRPC framing of a request body.
const FRAMING_BYTES: usize = 64 * 1024;

impl CallLayer {
    /// Bodies over `max_message` bytes and some room for the gRPC framing are refused (the
    /// services' own decoding limit is `max_message`).
    pub fn new(max_message: usize) -> Self {
        Self {
            nonces: Nonces::default(),
            max_message,
        }
    }
}

impl<S> tower::Layer<S> for CallLayer {
    type Service = Bound<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Bound {
            inner,
            layer: self.clone(),
        }
    }
}

/// A service whose calls [`CallLayer`] binds.
#[derive(Clone)]
pub struct Bound<S> {
    inner: S,
    layer: CallLayer,
}

type Body = tonic::body::Body;

impl<S> tower::Service<http::Request<Body>> for Bound<S>
where
    S: tower::Service<http::Request<Body>, Response = http::Response<Body>>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<Body>) -> Self::Future {
        // Only this layer says what the call was.
        request.headers_mut().remove(identity::CALL_METADATA);
        let proven = request
            .headers()
            .get(identity::PROOF_METADATA)
            .and_then(|v| v.to_str().ok())
            .and_then(identity::proof_nonce)
            .zip(
                request
                    .headers()
                    .get(identity::CSR_METADATA)
                    .and_then(|v| v.to_str().ok()),
            )
            .map(|(nonce, csr)| (csr.to_owned(), nonce.to_owned()));
        // A call with no proof, or one the authorizer will refuse as malformed, goes on as
        // it came.
        let Some((csr, nonce)) = proven else {
            return Box::pin(self.inner.call(request));
        };
        // The ready service serves this call; a clone takes its place (tower's usual way).
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let layer = self.layer.clone();
        Box::pin(async move {
            if !layer.nonces.first_use(&csr, &nonce) {
                return Ok(tonic::Status::unauthenticated(format!(
                    "the caller-identity proof with CertificateSigningRequest {} was used before: \
                     a proof is good for one call (a replay, or a client that resends one)",
                    tenantflux_core::text::quote(&csr)
                ))
                .into_http());
            }
            let (mut parts, body) = request.into_parts();
            let limit = layer.max_message + FRAMING_BYTES;
            let bytes = match http_body_util::Limited::new(body, limit).collect().await {
                Ok(collected) => collected.to_bytes(),
                Err(err) => {
                    return Ok(tonic::Status::resource_exhausted(format!(
                        "the request is larger than the agent takes: a message may be at most {} bytes ({err})",
                        layer.max_message
                    ))
                    .into_http());
                }
            };
            let call = identity::call_value(parts.uri.path(), &identity::body_digest(&bytes));
            if let Ok(value) = http::HeaderValue::from_str(&call) {
                parts.headers.insert(identity::CALL_METADATA, value);
            }
            let request =
                http::Request::from_parts(parts, Body::new(http_body_util::Full::new(bytes)));
            inner.call(request).await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nonce_is_used_once_per_csr() {
        let nonces = Nonces::default();
        assert!(nonces.first_use("csr-a", "n1"));
        assert!(!nonces.first_use("csr-a", "n1"));
        assert!(nonces.first_use("csr-b", "n1"));
        assert!(nonces.first_use("csr-a", "n2"));
    }
}
