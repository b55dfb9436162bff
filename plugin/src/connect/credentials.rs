//! The credential every call carries: a bearer token (the flag, the kubeconfig user's own, its
//! tokenFile, or one requested with TokenRequest), or the proof of a caller-identity CSR for
//! client-certificate users; never printed.

use k8s_openapi::api::{
    authentication::v1::{TokenRequest, TokenRequestSpec},
    certificates::v1::{CertificateSigningRequest, CertificateSigningRequestSpec},
    core::v1::ServiceAccount,
};
use kube::{Api, Client, api::PostParams, config::AuthInfo};

use super::*;

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

/// A credential, what it is (for `TENANTFLUX_VERBOSE`), and where it is cached.
type Resolved = (Credential, String, Option<Cached>);

/// The credential calls carry, what it is (for `TENANTFLUX_VERBOSE`), and where it is cached.
pub(super) async fn resolve_token(
    options: &ConnectOptions,
    client: Client,
    user: &AuthInfo,
    cluster: &ClusterIdentity,
) -> Result<Resolved, ConnectError> {
    let source = token_source(options.token.as_ref(), user, options.forward_token);
    let what = source.to_string();
    if let Some(warning) = forward_token_warning(&source) {
        eprintln!("{warning}");
    }
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
        TokenSource::TokenRequest => Minting::start(options, user, cluster).resolve(client).await,
    }
}

/// A credential this command gets for itself (no token was given): the user's own identity
/// proof, or a TokenRequest token of the ServiceAccount the options name (the client
/// account, or the fleet's own), each reused from the credential cache while it may be.
struct Minting<'a> {
    options: &'a ConnectOptions,
    user: &'a AuthInfo,
    cluster: &'a ClusterIdentity,
    cache: Option<CredentialCache>,
    now: i64,
}

impl<'a> Minting<'a> {
    /// Opens the credential cache (a warning when it cannot be used), then reads the clock.
    fn start(
        options: &'a ConnectOptions,
        user: &'a AuthInfo,
        cluster: &'a ClusterIdentity,
    ) -> Self {
        let cache = options
            .credential_cache
            .as_deref()
            .and_then(CredentialCache::open);
        let now = cache::now();
        Self {
            options,
            user,
            cluster,
            cache,
            now,
        }
    }

    /// The user's own identity first (for the client account only), then a cached token,
    /// then a new one.
    async fn resolve(self, client: Client) -> Result<Resolved, ConnectError> {
        // A user without a token proves who they are, so the agent authorizes them and
        // not a borrowed account; the fleet acts as its own account by design.
        if self.options.token_account == CLIENT_SERVICE_ACCOUNT
            && let Some(found) = self.own_identity(&client).await?
        {
            return Ok(found);
        }
        if let Some(found) = self
            .cache
            .as_ref()
            .and_then(|cache| self.cached_token(cache))
        {
            return Ok(found);
        }
        self.new_token(client).await
    }

    /// Where a credential of `kind` is cached: this cluster, user, account and audience.
    fn key(&self, kind: CredentialKind) -> CacheKey {
        let options = self.options;
        CacheKey::new(
            kind,
            self.cluster,
            self.user,
            &options.agent_namespace,
            &options.token_account,
            &options.audience,
        )
    }

    /// Says that the user acts as the ServiceAccount because they may not create CSRs.
    fn fallback_note(&self, forbidden: &str) {
        let (namespace, account) = (&self.options.agent_namespace, &self.options.token_account);
        eprintln!(
            "note: you may not create CertificateSigningRequests ({forbidden}), so the agent cannot \
             tell who you are: acting as ServiceAccount {namespace}/{account}, whose RBAC decides \
             what you may do; ask for `create certificatesigningrequests` (see the README) to act as yourself"
        )
    }

    /// A TokenRequest token cached by an earlier command, while it is still usable.
    fn cached_token(&self, cache: &CredentialCache) -> Option<Resolved> {
        let token_key = self.key(CredentialKind::Token);
        let Some(Entry::Token { token, .. }) =
            cache.load(&token_key).filter(|e| e.usable(self.now))
        else {
            return None;
        };
        let options = self.options;
        let what = format!(
            "a cached TokenRequest token of ServiceAccount {} in namespace {} (audience {})",
            options.token_account, options.agent_namespace, options.audience
        );
        let cached = Cached {
            key: token_key,
            cache: cache.clone(),
        };
        Some((Credential::Bearer(Token::new(token)), what, Some(cached)))
    }

    /// The user's identity: a cached proof, else a token cached because CSRs were refused
    /// (the refusal said again), else a new proof. None, after a note, when the user may
    /// not create CSRs.
    async fn own_identity(&self, client: &Client) -> Result<Option<Resolved>, ConnectError> {
        if let Some(cache) = &self.cache {
            if let Some(found) = cached_identity(
                cache,
                self.key(CredentialKind::Identity),
                self.options,
                self.now,
            ) {
                return Ok(Some(found));
            }
            // A token cached because CSRs were refused: the refusal is said again.
            if let Some(found) = self.cached_token(cache) {
                self.fallback_note("as when the cached token was requested");
                return Ok(Some(found));
            }
        }
        match self.create_csr(client.clone()).await? {
            Ok(csr) => Ok(Some(self.new_identity(csr))),
            Err(forbidden) => {
                self.fallback_note(&forbidden);
                Ok(None)
            }
        }
    }

    /// A new identity CSR, within the request timeout; `Ok(Err(message))` when forbidden.
    async fn create_csr(
        &self,
        client: Client,
    ) -> Result<Result<IdentityCsr, String>, ConnectError> {
        bounded(
            self.options.timeout,
            || "creating the CertificateSigningRequest that proves who you are".to_owned(),
            create_identity_csr(
                client,
                &self.options.audience,
                &self.options.agent_namespace,
            ),
        )
        .await?
    }

    /// A new proof of the user's identity, cached for later commands when there is a cache.
    fn new_identity(&self, csr: IdentityCsr) -> Resolved {
        let mut what = format!(
            "a proof of your identity with CertificateSigningRequest {} (signer {}, never approved; ",
            csr.name,
            tenantflux_core::identity::SIGNER_NAME
        );
        let cached = self.cache.clone().map(|cache| {
            let key = self.key(CredentialKind::Identity);
            cache.store(
                &key,
                &Entry::Identity {
                    csr: csr.name.clone(),
                    key_pem: tenantflux_core::policy::signing::private_pem(&csr.key),
                    issued_at: self.now,
                    expires_at: self.now + tenantflux_core::identity::MAX_CSR_AGE_SECONDS,
                },
            );
            Cached { cache, key }
        });
        what.push_str(if cached.is_some() {
            "cached for later commands while the agent accepts it)"
        } else {
            "used by this command only)"
        });
        (Credential::Identity(Box::new(csr)), what, cached)
    }

    /// A new TokenRequest token, cached; a kubeconfig that may not request one proves its
    /// user's identity instead.
    async fn new_token(self, client: Client) -> Result<Resolved, ConnectError> {
        let (namespace, account, audience) = (
            &self.options.agent_namespace,
            &self.options.token_account,
            &self.options.audience,
        );
        let token_key = self.key(CredentialKind::Token);
        let what = format!(
            "a TokenRequest token of ServiceAccount {account} in namespace {namespace} \
             (audience {audience}, valid {TOKEN_LIFETIME_SECONDS} s)"
        );
        let requested = bounded(
            self.options.timeout,
            || format!("requesting a token for ServiceAccount {account} in namespace {namespace}"),
            request_token(client.clone(), namespace, account, audience),
        )
        .await?;
        let (token, expires_at) = match requested {
            Ok(found) => found,
            // `fleet` with a kubeconfig that may not mint its account's tokens: the user
            // proves who they are instead (their token stays with the API server).
            Err(refused @ ConnectError::TokenRequestForbidden { .. }) => {
                let Ok(csr) = self.create_csr(client).await? else {
                    return Err(refused);
                };
                let what = format!(
                    "a proof of the kubeconfig user's identity with CertificateSigningRequest {} \
                     (it may not request a token for ServiceAccount {namespace}/{account}; used by this command only)",
                    csr.name
                );
                return Ok((Credential::Identity(Box::new(csr)), what, None));
            }
            Err(err) => return Err(err),
        };
        let cached = self.cache.map(|cache| {
            cache.store(
                &token_key,
                &Entry::Token {
                    token: token.expose().to_owned(),
                    issued_at: self.now,
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

/// What is said before the kubeconfig user's own token leaves for the agent (`--forward-token`).
fn forward_token_warning(source: &TokenSource) -> Option<&'static str> {
    matches!(
        source,
        TokenSource::Kubeconfig(_) | TokenSource::KubeconfigFile(_)
    )
    .then_some(
        "warning: --forward-token sends your kubeconfig user's own bearer token to the agent's \
         pod, a process this cluster's admins control: whoever runs it can use the token against \
         this API server, and any other that accepts it, until it expires",
    )
}

/// The identity CSR cached for `key`, if it may still be used. One too old is forgotten.
fn cached_identity(
    cache: &CredentialCache,
    key: CacheKey,
    options: &ConnectOptions,
    now: i64,
) -> Option<Resolved> {
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
        // Too old: the agent denies it, and kube-controller-manager deletes it an hour later.
        _ => {
            cache.remove(&key);
            None
        }
    }
}

/// Creates an identity CSR with a fresh key. Callers may only create CSRs: the agent denies
/// it once it is too old to prove anything, and kube-controller-manager deletes it an hour
/// later; without its key, which never leaves this process (or the user's credential cache),
/// it proves nothing. `Ok(Err(message))`: the user may not create CSRs (the caller falls back
/// to the ServiceAccount).
async fn create_identity_csr(
    client: Client,
    audience: &str,
    namespace: &str,
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
        Ok(_) => Ok(Ok(IdentityCsr {
            name,
            key,
            audience: audience.to_owned(),
            namespace: namespace.to_owned(),
        })),
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
    use super::*;

    #[test]
    fn forwarding_the_kubeconfig_token_warns_in_one_plain_sentence() {
        let token = Token::new("t");
        assert_eq!(
            forward_token_warning(&TokenSource::Kubeconfig(Token::new("t"))),
            Some(
                "warning: --forward-token sends your kubeconfig user's own bearer token to the \
                 agent's pod, a process this cluster's admins control: whoever runs it can use the \
                 token against this API server, and any other that accepts it, until it expires"
            )
        );
        let warning = forward_token_warning(&TokenSource::KubeconfigFile("/t")).unwrap();
        assert!(!warning.contains("  "), "{warning:?}");
        assert_eq!(forward_token_warning(&TokenSource::Flag(&token)), None);
        assert_eq!(forward_token_warning(&TokenSource::TokenRequest), None);
    }

    /// Options asking for `account`'s credential, cached in `cache`.
    fn options(account: &str, cache: &std::path::Path) -> ConnectOptions {
        ConnectOptions {
            token_account: account.to_owned(),
            credential_cache: Some(cache.to_owned()),
            ..ConnectOptions::for_tests()
        }
    }

    /// A client for a server that never answers: the cached paths must not need one.
    fn unreachable_client() -> Client {
        Client::try_from(kube::Config::new("http://127.0.0.1:1".parse().unwrap())).unwrap()
    }

    #[tokio::test]
    async fn cached_credentials_say_what_they_are() {
        let root = tempfile::tempdir().unwrap();
        // Created 0700 by the cache itself.
        let dir = root.path().join("cache");
        let cluster = ClusterIdentity::new("https://a:6443", None);
        let user = AuthInfo::default();
        let now = cache::now();
        let store = |account: &str, kind, entry: &Entry| {
            let options = options(account, &dir);
            let cache = CredentialCache::open(&dir).unwrap();
            let key = CacheKey::new(
                kind,
                &cluster,
                &user,
                &options.agent_namespace,
                &options.token_account,
                &options.audience,
            );
            cache.store(&key, entry);
        };
        let token = Entry::Token {
            token: "minted".to_owned(),
            issued_at: now,
            expires_at: now + 600,
        };
        store("tenantflux-platform", CredentialKind::Token, &token);
        let platform = options("tenantflux-platform", &dir);
        let (credential, what, cached) =
            resolve_token(&platform, unreachable_client(), &user, &cluster)
                .await
                .unwrap();
        assert!(matches!(credential, Credential::Bearer(t) if t.expose() == "minted"));
        assert_eq!(
            what,
            "a cached TokenRequest token of ServiceAccount tenantflux-platform in namespace \
             tenantflux-system (audience tenantflux-agent)"
        );
        assert!(cached.is_some());

        // The client account: the user's own identity first, a token cached when CSRs were
        // refused next.
        store(CLIENT_SERVICE_ACCOUNT, CredentialKind::Token, &token);
        let client = options(CLIENT_SERVICE_ACCOUNT, &dir);
        let (credential, what, _) = resolve_token(&client, unreachable_client(), &user, &cluster)
            .await
            .unwrap();
        assert!(matches!(credential, Credential::Bearer(_)));
        assert!(
            what.starts_with("a cached TokenRequest token of ServiceAccount tenantflux-client")
        );
        let key = tenantflux_core::policy::signing::generate().unwrap();
        let identity = Entry::Identity {
            csr: "tenantflux-caller-00".to_owned(),
            key_pem: tenantflux_core::policy::signing::private_pem(&key),
            issued_at: now,
            expires_at: now + 600,
        };
        store(CLIENT_SERVICE_ACCOUNT, CredentialKind::Identity, &identity);
        let (credential, what, cached) =
            resolve_token(&client, unreachable_client(), &user, &cluster)
                .await
                .unwrap();
        assert!(
            matches!(credential, Credential::Identity(csr) if csr.name == "tenantflux-caller-00")
        );
        assert_eq!(
            what,
            format!(
                "a proof of your identity with the cached CertificateSigningRequest \
                 tenantflux-caller-00 (signer {}, never approved)",
                tenantflux_core::identity::SIGNER_NAME
            )
        );
        assert!(cached.is_some());
    }

    #[tokio::test]
    async fn a_token_from_the_flag_or_a_missing_token_file() {
        let dir = tempfile::tempdir().unwrap();
        let cluster = ClusterIdentity::new("https://a:6443", None);
        let flag = ConnectOptions {
            token: Some(Token::new("given")),
            ..options(CLIENT_SERVICE_ACCOUNT, dir.path())
        };
        let (credential, what, cached) =
            resolve_token(&flag, unreachable_client(), &AuthInfo::default(), &cluster)
                .await
                .unwrap();
        assert!(matches!(credential, Credential::Bearer(t) if t.expose() == "given"));
        assert_eq!(what, "the bearer token of --token (TENANTFLUX_TOKEN)");
        assert!(cached.is_none());
        let forwarded = ConnectOptions {
            forward_token: true,
            ..options(CLIENT_SERVICE_ACCOUNT, dir.path())
        };
        let user = AuthInfo {
            token_file: Some("/nonexistent/token".to_owned()),
            ..AuthInfo::default()
        };
        let err = resolve_token(&forwarded, unreachable_client(), &user, &cluster)
            .await
            .err()
            .unwrap();
        assert!(
            matches!(&err, ConnectError::TokenFile { path, .. } if path == "/nonexistent/token"),
            "{err}"
        );
    }
}
