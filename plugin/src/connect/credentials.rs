//! The credential every call carries: a bearer token (the flag, the kubeconfig user's own, its
//! tokenFile, or one requested with TokenRequest), or the proof of a caller-identity CSR for
//! client-certificate users; never printed.

use std::{
    fmt,
    str::FromStr,
    sync::{Arc, Mutex},
};

use k8s_openapi::api::{
    authentication::v1::{TokenRequest, TokenRequestSpec},
    certificates::v1::{CertificateSigningRequest, CertificateSigningRequestSpec},
    core::v1::ServiceAccount,
};
use kube::{Api, Client, api::PostParams, config::AuthInfo};
use secrecy::ExposeSecret as _;
use tonic::{
    metadata::{Ascii, MetadataValue},
    service::Interceptor,
};

use super::*;

/// A bearer token. Never printed: Debug redacts it, and it has no Display.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl Token {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into().trim().to_owned())
    }

    fn expose(&self) -> &str {
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

/// Where the bearer token comes from, in order of precedence.
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

pub fn token_source<'a>(flag: Option<&'a Token>, user: &'a AuthInfo) -> TokenSource<'a> {
    if let Some(token) = flag {
        return TokenSource::Flag(token);
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
    name: String,
    key: tenantflux_core::identity::SigningKey,
    audience: String,
    namespace: String,
}

/// Adds `authorization: Bearer <token>`, or a fresh caller-identity proof, to every call.
#[derive(Clone)]
pub enum BearerAuth {
    Token(MetadataValue<Ascii>),
    Proof {
        csr: MetadataValue<Ascii>,
        name: String,
        key: Arc<tenantflux_core::identity::SigningKey>,
        audience: String,
        namespace: String,
    },
}

impl BearerAuth {
    pub fn new(token: &Token) -> Result<Self, ConnectError> {
        let mut value: MetadataValue<Ascii> = format!("Bearer {}", token.expose())
            .parse()
            .map_err(|_| ConnectError::InvalidToken)?;
        value.set_sensitive(true);
        Ok(Self::Token(value))
    }

    pub(super) fn from_credential(credential: Credential) -> Result<Self, ConnectError> {
        match credential {
            Credential::Bearer(token) => Self::new(&token),
            Credential::Identity(csr) => {
                let csr = *csr;
                Ok(Self::Proof {
                    // CSR names are DNS subdomains: ASCII.
                    csr: csr.name.parse().map_err(|_| ConnectError::InvalidToken)?,
                    name: csr.name,
                    key: Arc::new(csr.key),
                    audience: csr.audience,
                    namespace: csr.namespace,
                })
            }
        }
    }
}

impl Interceptor for BearerAuth {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        if crate::timings::enabled() {
            request.metadata_mut().insert(
                crate::timings::REQUEST_METADATA,
                MetadataValue::from_static("1"),
            );
        }
        match self {
            Self::Token(value) => {
                request
                    .metadata_mut()
                    .insert("authorization", value.clone());
            }
            Self::Proof {
                csr,
                name,
                key,
                audience,
                namespace,
            } => {
                use tenantflux_core::identity;
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs() as i64);
                let proof = identity::sign_proof(key, name, audience, namespace, now);
                let mut proof: MetadataValue<Ascii> = proof
                    .parse()
                    .map_err(|_| tonic::Status::internal("the identity proof is not ASCII"))?;
                proof.set_sensitive(true);
                let metadata = request.metadata_mut();
                metadata.insert(identity::CSR_METADATA, csr.clone());
                metadata.insert(identity::PROOF_METADATA, proof);
            }
        }
        Ok(request)
    }
}

/// The identity CSRs this process created, deleted by [`delete_identity_csrs`] when the
/// command ends.
static IDENTITY_CSRS: Mutex<Vec<(Client, String)>> = Mutex::new(Vec::new());

/// Deletes the CSRs this process created to prove its user's identity. One left behind (the
/// process killed) proves nothing without its key, which never left the process; the
/// controller-manager removes pending CSRs after a day.
pub async fn delete_identity_csrs() {
    let created = std::mem::take(&mut *IDENTITY_CSRS.lock().unwrap_or_else(|p| p.into_inner()));
    for (client, name) in created {
        let api: Api<CertificateSigningRequest> = Api::all(client);
        if let Err(err) = api.delete(&name, &Default::default()).await {
            eprintln!(
                "warning: could not delete CertificateSigningRequest {name}, which proved who you are to the agent: {}",
                describe(&err)
            );
        }
    }
}

/// A credential taken from, or put in, the credential cache: dropped when the agent refuses it.
pub(super) struct Cached {
    cache: CredentialCache,
    key: CacheKey,
}

impl Cached {
    /// Forgets the credential, so the next command requests a new one.
    pub(super) fn drop_entry(&self) {
        self.cache.remove(&self.key);
    }
}

/// The credential calls carry, what it is (for `TENANTFLUX_VERBOSE`), and where it is cached.
pub(super) async fn resolve_token(
    options: &ConnectOptions,
    client: Client,
    user: &AuthInfo,
    cluster: &ClusterIdentity,
) -> Result<(Credential, String, Option<Cached>), ConnectError> {
    let source = token_source(options.token.as_ref(), user);
    let what = source.to_string();
    match source {
        TokenSource::Flag(token) => Ok((Credential::Bearer(token.clone()), what, None)),
        TokenSource::Kubeconfig(token) => Ok((Credential::Bearer(token), what, None)),
        TokenSource::KubeconfigFile(path) => tokio::fs::read_to_string(path)
            .await
            .map(|text| (Credential::Bearer(Token::new(text)), what, None))
            .map_err(|err| ConnectError::TokenFile {
                path: path.to_owned(),
                cause: err.to_string(),
            }),
        TokenSource::TokenRequest => {
            let namespace = &options.agent_namespace;
            let account = &options.token_account;
            let audience = &options.audience;
            let cache = options
                .credential_cache
                .as_deref()
                .and_then(CredentialCache::open);
            let key = |kind| CacheKey::new(kind, cluster, user, namespace, account, audience);
            let now = cache::now();
            let fallback_note = |forbidden: &str| {
                eprintln!(
                    "note: you may not create CertificateSigningRequests ({forbidden}), so the agent cannot \
                     tell who you are: acting as ServiceAccount {namespace}/{account}, whose RBAC decides \
                     what you may do; ask for `create certificatesigningrequests` (see the README) to act as yourself"
                )
            };
            // A TokenRequest token cached by an earlier command, while it is still usable.
            let cached_token = |cache: &CredentialCache| {
                let token_key = key(CredentialKind::Token);
                let Some(Entry::Token { token, .. }) =
                    cache.load(&token_key).filter(|e| e.usable(now))
                else {
                    return None;
                };
                let what = format!(
                    "a cached TokenRequest token of ServiceAccount {account} in namespace {namespace} (audience {audience})"
                );
                let cached = Cached {
                    key: token_key,
                    cache: cache.clone(),
                };
                Some((Credential::Bearer(Token::new(token)), what, Some(cached)))
            };
            // A user without a token proves who they are, so the agent authorizes them and
            // not a borrowed account; the fleet acts as its own account by design.
            if account == CLIENT_SERVICE_ACCOUNT {
                if let Some(cache) = &cache {
                    if let Some(found) =
                        cached_identity(cache, key(CredentialKind::Identity), &client, options, now)
                    {
                        return Ok(found);
                    }
                    // A token cached because CSRs were refused: the refusal is said again.
                    if let Some(found) = cached_token(cache) {
                        fallback_note("as when the cached token was requested");
                        return Ok(found);
                    }
                }
                let identity = bounded(
                    options.timeout,
                    || "creating the CertificateSigningRequest that proves who you are".to_owned(),
                    create_identity_csr(client.clone(), audience, namespace, cache.is_none()),
                )
                .await??;
                match identity {
                    Ok(csr) => {
                        let mut what = format!(
                            "a proof of your identity with CertificateSigningRequest {} (signer {}, never approved; ",
                            csr.name,
                            tenantflux_core::identity::SIGNER_NAME
                        );
                        let cached = cache.map(|cache| {
                            let key = key(CredentialKind::Identity);
                            cache.store(
                                &key,
                                &Entry::Identity {
                                    csr: csr.name.clone(),
                                    key_pem: tenantflux_core::policy::signing::private_pem(
                                        &csr.key,
                                    ),
                                    issued_at: now,
                                    expires_at: now
                                        + tenantflux_core::identity::MAX_CSR_AGE_SECONDS,
                                },
                            );
                            Cached { cache, key }
                        });
                        what.push_str(if cached.is_some() {
                            "cached for later commands while the agent accepts it)"
                        } else {
                            "deleted when the command ends)"
                        });
                        return Ok((Credential::Identity(Box::new(csr)), what, cached));
                    }
                    Err(forbidden) => fallback_note(&forbidden),
                }
            }
            if let Some(found) = cache.as_ref().and_then(cached_token) {
                return Ok(found);
            }
            let token_key = key(CredentialKind::Token);
            let what = format!(
                "a TokenRequest token of ServiceAccount {account} in namespace {namespace} \
                 (audience {audience}, valid {TOKEN_LIFETIME_SECONDS} s)"
            );
            let (token, expires_at) = bounded(
                options.timeout,
                || {
                    format!(
                        "requesting a token for ServiceAccount {account} in namespace {namespace}"
                    )
                },
                request_token(client, namespace, account, audience),
            )
            .await??;
            let cached = cache.map(|cache| {
                cache.store(
                    &token_key,
                    &Entry::Token {
                        token: token.expose().to_owned(),
                        issued_at: now,
                        expires_at,
                    },
                );
                Cached {
                    cache,
                    key: token_key,
                }
            });
            Ok((Credential::Bearer(token), what, cached))
        }
    }
}

/// The identity CSR cached for `key`, if it may still be used. One too old is forgotten and
/// its CSR deleted when the command ends.
fn cached_identity(
    cache: &CredentialCache,
    key: CacheKey,
    client: &Client,
    options: &ConnectOptions,
    now: i64,
) -> Option<(Credential, String, Option<Cached>)> {
    let Entry::Identity {
        csr,
        key_pem,
        issued_at,
        expires_at,
    } = cache.load(&key)?
    else {
        return None;
    };
    let signing = tenantflux_core::policy::signing::read_private_key(&key_pem).ok();
    match signing {
        Some(signing) if cache::usable(issued_at, expires_at, now) => {
            let what = format!(
                "a proof of your identity with the cached CertificateSigningRequest {csr} (signer {}, never approved)",
                tenantflux_core::identity::SIGNER_NAME
            );
            let identity = IdentityCsr {
                name: csr,
                key: signing,
                audience: options.audience.clone(),
                namespace: options.agent_namespace.clone(),
            };
            Some((
                Credential::Identity(Box::new(identity)),
                what,
                Some(Cached {
                    cache: cache.clone(),
                    key,
                }),
            ))
        }
        _ => {
            cache.remove(&key);
            IDENTITY_CSRS
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((client.clone(), csr));
            None
        }
    }
}

/// Creates an identity CSR with a fresh key, deleted when the command ends if
/// `delete_when_done` (else it is cached and lives on). `Ok(Err(message))`: the user may not
/// create CSRs (the caller falls back to the ServiceAccount).
async fn create_identity_csr(
    client: Client,
    audience: &str,
    namespace: &str,
    delete_when_done: bool,
) -> Result<Result<IdentityCsr, String>, ConnectError> {
    use tenantflux_core::identity;
    let key =
        tenantflux_core::policy::signing::generate().map_err(|err| ConnectError::IdentityCsr {
            cause: describe(&err),
        })?;
    // The key is random; its first bytes make the name unique.
    let suffix: String = key.verifying_key().as_bytes()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let name = format!("tenantflux-caller-{suffix}");
    let csr = CertificateSigningRequest {
        metadata: kube::api::ObjectMeta {
            name: Some(name.clone()),
            labels: Some(
                [(
                    "app.kubernetes.io/part-of".to_owned(),
                    "tenantflux".to_owned(),
                )]
                .into(),
            ),
            ..Default::default()
        },
        spec: CertificateSigningRequestSpec {
            request: k8s_openapi::ByteString(
                identity::csr_pem(&key, "tenantflux caller identity").into_bytes(),
            ),
            signer_name: identity::SIGNER_NAME.to_owned(),
            usages: Some(vec!["digital signature".to_owned()]),
            expiration_seconds: Some(600),
            ..Default::default()
        },
        status: None,
    };
    let api: Api<CertificateSigningRequest> = Api::all(client.clone());
    match api.create(&PostParams::default(), &csr).await {
        Ok(_) => {
            if delete_when_done {
                IDENTITY_CSRS
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push((client, name.clone()));
            }
            Ok(Ok(IdentityCsr {
                name,
                key,
                audience: audience.to_owned(),
                namespace: namespace.to_owned(),
            }))
        }
        Err(kube::Error::Api(status)) if status.is_forbidden() => Ok(Err(status.message)),
        Err(err) => Err(ConnectError::IdentityCsr {
            cause: describe(&err),
        }),
    }
}

async fn request_token(
    client: Client,
    namespace: &str,
    account: &str,
    audience: &str,
) -> Result<(Token, i64), ConnectError> {
    // The API server gives a token requested without an audience its own: one that works
    // against the API server, not only against the agent.
    if audience.trim().is_empty() {
        return Err(ConnectError::NoAudience);
    }
    let accounts: Api<ServiceAccount> = Api::namespaced(client, namespace);
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: vec![audience.to_owned()],
            expiration_seconds: Some(TOKEN_LIFETIME_SECONDS),
            bound_object_ref: None,
        },
        ..TokenRequest::default()
    };
    let response: TokenRequest = accounts
        .create_subresource("token", account, &PostParams::default(), &request)
        .await
        .map_err(|err| match err {
            kube::Error::Api(status) if status.is_forbidden() => {
                ConnectError::TokenRequestForbidden {
                    account: account.to_owned(),
                    namespace: namespace.to_owned(),
                    message: status.message.clone(),
                }
            }
            kube::Error::Api(status) if status.is_not_found() => {
                ConnectError::ClientAccountMissing {
                    account: account.to_owned(),
                    namespace: namespace.to_owned(),
                }
            }
            err => ConnectError::TokenRequest {
                account: account.to_owned(),
                namespace: namespace.to_owned(),
                cause: describe(&err),
            },
        })?;
    response
        .status
        .map(|status| {
            (
                Token::new(status.token),
                status.expiration_timestamp.0.as_second(),
            )
        })
        .filter(|(token, _)| !token.expose().is_empty())
        .ok_or_else(|| ConnectError::TokenRequest {
            account: account.to_owned(),
            namespace: namespace.to_owned(),
            cause: "the API server returned no token".to_owned(),
        })
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
            token_source(Some(&flag), &with_token),
            TokenSource::Flag(&flag)
        );
        assert_eq!(
            token_source(Some(&flag), &with_cert),
            TokenSource::Flag(&flag)
        );
        assert_eq!(
            token_source(None, &with_token),
            TokenSource::Kubeconfig(Token::new("from-kubeconfig"))
        );
        assert_eq!(
            token_source(None, &with_file),
            TokenSource::KubeconfigFile("/var/run/token")
        );
        assert_eq!(token_source(None, &with_cert), TokenSource::TokenRequest);
        assert_eq!(
            token_source(None, &AuthInfo::default()),
            TokenSource::TokenRequest
        );
        let blank = AuthInfo {
            token: Some(SecretString::from("  ".to_owned())),
            ..AuthInfo::default()
        };
        assert_eq!(token_source(None, &blank), TokenSource::TokenRequest);
    }

    #[test]
    fn each_call_carries_a_fresh_proof_the_agent_can_check() {
        use tenantflux_core::identity;
        let key = tenantflux_core::policy::signing::generate().unwrap();
        let public = *key.verifying_key().as_bytes();
        let mut auth = BearerAuth::from_credential(Credential::Identity(Box::new(IdentityCsr {
            name: "tenantflux-caller-0011".into(),
            key,
            audience: "tenantflux-agent".into(),
            namespace: "tenantflux-system".into(),
        })))
        .unwrap();
        let request = auth.call(tonic::Request::new(())).unwrap();
        let metadata = request.metadata();
        assert!(metadata.get("authorization").is_none(), "no token is sent");
        assert_eq!(
            metadata.get(identity::CSR_METADATA).unwrap(),
            "tenantflux-caller-0011"
        );
        let proof = metadata.get(identity::PROOF_METADATA).unwrap();
        assert!(proof.is_sensitive());
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        identity::verify_proof(
            &public,
            proof.to_str().unwrap(),
            "tenantflux-caller-0011",
            "tenantflux-agent",
            "tenantflux-system",
            Some(now),
        )
        .unwrap();
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
            kubeconfig: None,
            inline_kubeconfig: None,
            context: None,
            namespace: None,
            agent_namespace: "tenantflux-system".to_owned(),
            agent_address: None,
            audience: "tenantflux-agent".to_owned(),
            token: Some(token),
            token_account: CLIENT_SERVICE_ACCOUNT.to_owned(),
            timeout: None,
            verbose: false,
            credential_cache: None,
        };
        assert!(!format!("{options:?}").contains("s3cr3t"));
        assert!("   ".parse::<Token>().is_err());
    }

    #[test]
    fn interceptor_sets_the_bearer_header() {
        let mut auth = BearerAuth::new(&Token::new("abc")).unwrap();
        let request = auth.call(tonic::Request::new(())).unwrap();
        assert_eq!(
            request
                .metadata()
                .get("authorization")
                .unwrap()
                .to_str()
                .unwrap(),
            "Bearer abc"
        );
        assert!(matches!(
            BearerAuth::new(&Token::new("bad\ntoken")),
            Err(ConnectError::InvalidToken)
        ));
    }
}
