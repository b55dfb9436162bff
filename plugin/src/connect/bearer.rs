//! The bearer token and what every call carries: the token, or a fresh proof of a
//! caller-identity CSR for client-certificate users; never printed.

use std::{fmt, str::FromStr};

use kube::config::AuthInfo;
use secrecy::ExposeSecret as _;
use tonic::transport::Channel;

use super::*;

/// A bearer token. Never printed: Debug redacts it, and it has no Display.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl Token {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into().trim().to_owned())
    }

    pub(super) fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

impl FromStr for Token {
    type Err = String;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        let token = Self::new(value);
        if token.0.is_empty() {
            Err("the token is empty".to_owned())
        } else {
            Ok(token)
        }
    }
}

/// Where the bearer token comes from, in order of precedence. The kubeconfig user's own token
/// is sent only when the user asks for it (`--forward-token`): the agent's pod is a process the
/// tenant controls, and a token the API server accepts works wherever it is accepted.
#[derive(Debug, PartialEq, Eq)]
pub enum TokenSource<'a> {
    /// `--token` / TENANTFLUX_TOKEN.
    Flag(&'a Token),
    /// The kubeconfig user's `token`.
    Kubeconfig(Token),
    /// The kubeconfig user's `tokenFile` (also how in-cluster credentials arrive).
    KubeconfigFile(&'a str),
    /// Client certificates, exec plugins and the like have no token to forward.
    TokenRequest,
}

/// What is sent, as `TENANTFLUX_VERBOSE` says it (never the token). A token forwarded from
/// the flag or the kubeconfig is one the API server accepts: whoever holds it can act as the
/// user until it expires, so it goes only to a checked pod.
impl fmt::Display for TokenSource<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Flag(_) => f.write_str("the bearer token of --token (TENANTFLUX_TOKEN)"),
            Self::Kubeconfig(_) => f.write_str("the kubeconfig user's own bearer token"),
            Self::KubeconfigFile(path) => {
                write!(
                    f,
                    "the bearer token in the kubeconfig user's tokenFile {path}"
                )
            }
            Self::TokenRequest => f.write_str("a TokenRequest token"),
        }
    }
}

pub fn token_source<'a>(
    flag: Option<&'a Token>,
    user: &'a AuthInfo,
    forward: bool,
) -> TokenSource<'a> {
    if let Some(token) = flag {
        return TokenSource::Flag(token);
    }
    if !forward {
        return TokenSource::TokenRequest;
    }
    if let Some(token) = user.token.as_ref().map(|t| t.expose_secret())
        && !token.trim().is_empty()
    {
        return TokenSource::Kubeconfig(Token::new(token));
    }
    match user.token_file.as_deref() {
        Some(path) if !path.is_empty() => TokenSource::KubeconfigFile(path),
        _ => TokenSource::TokenRequest,
    }
}

/// What calls carry: a bearer token, or a proof of the caller's identity.
pub enum Credential {
    Bearer(Token),
    Identity(Box<IdentityCsr>),
}

/// A CertificateSigningRequest this process created to prove its user's identity, and the
/// key in it (see `tenantflux_core::identity`).
pub struct IdentityCsr {
    pub(super) name: String,
    pub(super) key: tenantflux_core::identity::SigningKey,
    pub(super) audience: String,
    pub(super) namespace: String,
}

/// Adds `authorization: Bearer <token>`, or a fresh caller-identity proof, to every call.
#[derive(Clone)]
pub enum BearerAuth {
    Token(http::HeaderValue),
    Proof {
        csr: http::HeaderValue,
        name: String,
        key: Arc<tenantflux_core::identity::SigningKey>,
        audience: String,
        namespace: String,
    },
}

impl BearerAuth {
    pub fn new(token: &Token) -> Result<Self, ConnectError> {
        let mut value = http::HeaderValue::from_str(&format!("Bearer {}", token.expose()))
            .map_err(|_| ConnectError::InvalidToken)?;
        value.set_sensitive(true);
        Ok(Self::Token(value))
    }

    /// Adds a proof of the caller's identity for the call `parts` with `body`, made at `now`
    /// (unix seconds). Nothing for a bearer token, which the channel sends as it is.
    fn prove(
        &self,
        parts: &mut http::request::Parts,
        body: &[u8],
        now: i64,
    ) -> Result<(), tonic::codegen::StdError> {
        use tenantflux_core::identity;
        let Self::Proof {
            csr,
            name,
            key,
            audience,
            namespace,
        } = self
        else {
            return Ok(());
        };
        let digest = identity::body_digest(body);
        let subject = identity::ProofSubject {
            csr: name,
            audience,
            namespace,
            method: parts.uri.path(),
            body_sha256: &digest,
        };
        let nonce =
            identity::nonce().map_err(|err| format!("making the identity proof's nonce: {err}"))?;
        let proof = identity::sign_proof(key, &subject, &nonce, now);
        let mut proof =
            http::HeaderValue::from_str(&proof).map_err(|_| "the identity proof is not ASCII")?;
        proof.set_sensitive(true);
        parts.headers.insert(identity::CSR_METADATA, csr.clone());
        parts.headers.insert(identity::PROOF_METADATA, proof);
        Ok(())
    }

    pub(super) fn from_credential(credential: Credential) -> Result<Self, ConnectError> {
        match credential {
            Credential::Bearer(token) => Self::new(&token),
            Credential::Identity(csr) => {
                let csr = *csr;
                Ok(Self::Proof {
                    // CSR names are DNS subdomains: ASCII.
                    csr: http::HeaderValue::from_str(&csr.name)
                        .map_err(|_| ConnectError::InvalidToken)?,
                    name: csr.name,
                    key: Arc::new(csr.key),
                    audience: csr.audience,
                    namespace: csr.namespace,
                })
            }
        }
    }
}

/// The channel every client of the agent sends through: each call carries the credential. A
/// bearer token is a header; a caller-identity proof is signed for the call itself — its
/// method and the SHA-256 of its request body (read whole: every request is one message),
/// with a fresh nonce — so a proof captured on the way is worth that call, once, for at most
/// `tenantflux_core::identity::MAX_SKEW_SECONDS`.
#[derive(Clone)]
pub struct AuthChannel {
    channel: Channel,
    auth: BearerAuth,
}

impl AuthChannel {
    pub(super) fn new(channel: Channel, auth: BearerAuth) -> Self {
        Self { channel, auth }
    }
}

type Body = tonic::body::Body;

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}
type CallFuture = std::pin::Pin<
    Box<dyn Future<Output = Result<http::Response<Body>, tonic::codegen::StdError>> + Send>,
>;

impl tower::Service<http::Request<Body>> for AuthChannel {
    type Response = http::Response<Body>;
    type Error = tonic::codegen::StdError;
    type Future = CallFuture;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        tower::Service::poll_ready(&mut self.channel, cx).map_err(Into::into)
    }

    fn call(&mut self, mut request: http::Request<Body>) -> Self::Future {
        if crate::timings::enabled() {
            request.headers_mut().insert(
                crate::timings::REQUEST_METADATA,
                http::HeaderValue::from_static("1"),
            );
        }
        // The ready channel serves this call; a clone takes its place (tower's usual way).
        let clone = self.channel.clone();
        let mut channel = std::mem::replace(&mut self.channel, clone);
        let auth = self.auth.clone();
        Box::pin(async move {
            let request = match &auth {
                BearerAuth::Token(value) => {
                    let mut request = request;
                    request
                        .headers_mut()
                        .insert(http::header::AUTHORIZATION, value.clone());
                    request
                }
                BearerAuth::Proof { .. } => {
                    use http_body_util::BodyExt as _;
                    let (mut parts, body) = request.into_parts();
                    let bytes = body.collect().await?.to_bytes();
                    auth.prove(&mut parts, &bytes, unix_now())?;
                    http::Request::from_parts(parts, Body::new(http_body_util::Full::new(bytes)))
                }
            };
            tower::Service::call(&mut channel, request)
                .await
                .map_err(Into::into)
        })
    }
}

#[cfg(test)]
mod tests {

    use secrecy::SecretString;

    use super::*;

    #[test]
    fn what_is_sent_is_said_without_the_token() {
        let flag = Token::new("s3cr3t-flag");
        assert_eq!(
            TokenSource::Flag(&flag).to_string(),
            "the bearer token of --token (TENANTFLUX_TOKEN)"
        );
        let own = TokenSource::Kubeconfig(Token::new("s3cr3t-own")).to_string();
        assert_eq!(own, "the kubeconfig user's own bearer token");
        assert_eq!(
            TokenSource::KubeconfigFile("/run/token").to_string(),
            "the bearer token in the kubeconfig user's tokenFile /run/token"
        );
    }

    #[test]
    fn token_precedence_flag_then_kubeconfig_token_then_file_then_token_request() {
        let flag = Token::new("from-flag");
        let with_token = AuthInfo {
            token: Some(SecretString::from("from-kubeconfig".to_owned())),
            token_file: Some("/var/run/token".to_owned()),
            ..AuthInfo::default()
        };
        let with_file = AuthInfo {
            token_file: Some("/var/run/token".to_owned()),
            ..AuthInfo::default()
        };
        let with_cert = AuthInfo {
            client_certificate_data: Some("cert".to_owned()),
            ..AuthInfo::default()
        };
        assert_eq!(
            token_source(Some(&flag), &with_token, false),
            TokenSource::Flag(&flag)
        );
        assert_eq!(
            token_source(Some(&flag), &with_cert, false),
            TokenSource::Flag(&flag)
        );
        assert_eq!(
            token_source(None, &with_token, true),
            TokenSource::Kubeconfig(Token::new("from-kubeconfig"))
        );
        assert_eq!(
            token_source(None, &with_file, true),
            TokenSource::KubeconfigFile("/var/run/token")
        );
        // Without --forward-token the kubeconfig's token stays with the API server: the
        // plugin proves who the user is instead (or requests a token for the agent).
        assert_eq!(
            token_source(None, &with_token, false),
            TokenSource::TokenRequest
        );
        assert_eq!(
            token_source(None, &with_file, false),
            TokenSource::TokenRequest
        );
        assert_eq!(
            token_source(None, &with_cert, true),
            TokenSource::TokenRequest
        );
        assert_eq!(
            token_source(None, &AuthInfo::default(), true),
            TokenSource::TokenRequest
        );
        let blank = AuthInfo {
            token: Some(SecretString::from("  ".to_owned())),
            ..AuthInfo::default()
        };
        assert_eq!(token_source(None, &blank, true), TokenSource::TokenRequest);
    }

    #[test]
    fn each_call_carries_a_fresh_proof_the_agent_can_check() {
        use tenantflux_core::identity;
        let key = tenantflux_core::policy::signing::generate().unwrap();
        let public = *key.verifying_key().as_bytes();
        let auth = BearerAuth::from_credential(Credential::Identity(Box::new(IdentityCsr {
            name: "tenantflux-caller-0011".into(),
            key,
            audience: "tenantflux-agent".into(),
            namespace: "tenantflux-system".into(),
        })))
        .unwrap();
        let (mut parts, ()) = http::Request::builder()
            .uri("http://agent/tenantflux.v1.Workloads/Resume")
            .body(())
            .unwrap()
            .into_parts();
        let body = b"\0\0\0\0\x04body";
        let now = unix_now();
        auth.prove(&mut parts, body, now).unwrap();
        let headers = &parts.headers;
        assert!(headers.get("authorization").is_none(), "no token is sent");
        assert_eq!(
            headers.get(identity::CSR_METADATA).unwrap(),
            "tenantflux-caller-0011"
        );
        let proof = headers.get(identity::PROOF_METADATA).unwrap();
        assert!(proof.is_sensitive());
        let digest = identity::body_digest(body);
        let subject = identity::ProofSubject {
            csr: "tenantflux-caller-0011",
            audience: "tenantflux-agent",
            namespace: "tenantflux-system",
            method: "/tenantflux.v1.Workloads/Resume",
            body_sha256: &digest,
        };
        let verified =
            identity::verify_proof(&public, proof.to_str().unwrap(), &subject, Some(now)).unwrap();
        // Each call its own nonce; and the proof holds for this call's body only.
        let first = proof.to_str().unwrap().to_owned();
        auth.prove(&mut parts, body, now).unwrap();
        let second = parts.headers.get(identity::PROOF_METADATA).unwrap();
        assert_ne!(
            identity::proof_nonce(second.to_str().unwrap()),
            Some(verified.nonce.as_str())
        );
        let other = identity::body_digest(b"another body");
        assert_eq!(
            identity::verify_proof(
                &public,
                &first,
                &identity::ProofSubject {
                    body_sha256: &other,
                    ..subject
                },
                Some(now)
            ),
            Err(identity::ProofError::Signature)
        );
    }

    #[test]
    fn tokens_never_show_in_debug_output() {
        let token = Token::new("s3cr3t-value");
        assert!(!format!("{token:?}").contains("s3cr3t"));
        let BearerAuth::Token(value) = BearerAuth::new(&token).unwrap() else {
            panic!("a token is sent as a bearer token");
        };
        assert!(!format!("{value:?}").contains("s3cr3t"));
        let options = ConnectOptions {
            token: Some(token),
            timeout: None,
            ..ConnectOptions::for_tests()
        };
        assert!(!format!("{options:?}").contains("s3cr3t"));
        assert!("   ".parse::<Token>().is_err());
    }

    #[test]
    fn a_token_is_the_bearer_header() {
        let BearerAuth::Token(value) = BearerAuth::new(&Token::new("abc")).unwrap() else {
            panic!("a token is sent as a bearer token");
        };
        assert_eq!(value.to_str().unwrap(), "Bearer abc");
        assert!(value.is_sensitive());
        assert!(matches!(
            BearerAuth::new(&Token::new("bad\ntoken")),
            Err(ConnectError::InvalidToken)
        ));
    }
}
