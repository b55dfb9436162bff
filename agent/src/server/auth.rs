//! Caller identity: every RPC authenticates its bearer token with TokenReview and authorizes
//! the operation with SubjectAccessReview, so the API server's own RBAC decides who may do what.
//!
//! Handlers call [`Authorizer::authorize`] themselves (tonic interceptors are synchronous, and
//! later RPCs derive the [`Permission`] from the request body).

use std::{
    collections::{BTreeMap, HashMap},
    fmt,
    hash::Hash,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use k8s_openapi::api::{
    authentication::v1::{TokenReview, TokenReviewSpec, TokenReviewStatus},
    authorization::v1::{
        ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec, SubjectAccessReviewStatus,
    },
};
use kube::{Api, Client, api::PostParams};
use sha2::{Digest, Sha256};
use tonic::metadata::MetadataMap;

/// How long a successful TokenReview is trusted without asking the API server again.
const TOKEN_TTL: Duration = Duration::from_secs(30);
/// How long a granted permission is reused; short, so a revoked Role applies quickly.
const DECISION_TTL: Duration = Duration::from_secs(10);
/// Upper bound of each cache, so a flood of distinct tokens cannot grow memory without bound.
const CACHE_CAPACITY: usize = 1024;

/// What a denied caller is told to do about an agent permission.
const AGENT_PERMISSION_HINT: &str = "bind Role tenantflux-user, see deploy/manifests";

/// A bearer token. It never leaves this type in text: `Debug` and `Display` redact it.
#[derive(Clone, PartialEq, Eq)]
pub struct BearerToken(String);

impl BearerToken {
    pub fn new(token: impl Into<String>) -> Self {
        Self(token.into())
    }

    /// The token itself, for the one place that must send it (the TokenReview body).
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The key the token is cached under: its SHA-256, so the cache holds no tokens.
    pub fn cache_key(&self) -> TokenKey {
        TokenKey(Sha256::digest(self.0.as_bytes()).into())
    }
}

impl fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("BearerToken(<redacted>)")
    }
}

impl fmt::Display for BearerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// SHA-256 of a bearer token.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct TokenKey([u8; 32]);

impl fmt::Debug for TokenKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TokenKey(")?;
        for byte in self.0 {
            write!(f, "{byte:02x}")?;
        }
        f.write_str(")")
    }
}

/// Reads the bearer token from the `authorization` metadata of a call.
pub fn bearer_token(metadata: &MetadataMap) -> Result<BearerToken, AuthError> {
    let value = metadata
        .get("authorization")
        .ok_or(AuthError::MissingToken {
            reason: "the call has no \"authorization\" metadata; send \"authorization: Bearer <token>\"",
        })?;
    let value = value.to_str().map_err(|_| AuthError::MissingToken {
        reason: "the \"authorization\" metadata is not printable ASCII",
    })?;
    let (scheme, token) = value.split_once(' ').ok_or(AuthError::MissingToken {
        reason: "the \"authorization\" metadata is not of the form \"Bearer <token>\"",
    })?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(AuthError::MissingToken {
            reason: "the \"authorization\" metadata does not use the Bearer scheme",
        });
    }
    let token = token.trim();
    if token.is_empty() {
        return Err(AuthError::MissingToken {
            reason: "the \"authorization\" metadata has an empty Bearer token",
        });
    }
    Ok(BearerToken::new(token))
}

/// A caller-identity proof: the CSR a call names and the proof it carries (see
/// `tenantflux_core::identity`).
#[derive(Clone)]
pub struct CallerProof {
    csr: String,
    proof: String,
}

/// What a stream was opened with, for its rechecks.
enum Credential {
    Token(BearerToken),
    Proof(CallerProof),
}

/// Reads a caller-identity proof from the call's metadata; None when the call carries none.
pub fn caller_proof(metadata: &MetadataMap) -> Result<Option<CallerProof>, AuthError> {
    use tenantflux_core::identity::{CSR_METADATA, PROOF_METADATA};
    let Some(csr) = metadata.get(CSR_METADATA) else {
        return Ok(None);
    };
    let text = |value: &tonic::metadata::MetadataValue<tonic::metadata::Ascii>| {
        value.to_str().map(str::to_owned).ok()
    };
    let csr = text(csr)
        .filter(|c| !c.is_empty())
        .ok_or(AuthError::MissingToken {
            reason: "the \"x-tenantflux-csr\" metadata is empty or not printable ASCII",
        })?;
    let proof = metadata
        .get(PROOF_METADATA)
        .and_then(text)
        .ok_or(AuthError::MissingToken {
            reason: "the call names a CertificateSigningRequest (\"x-tenantflux-csr\") but carries no \"x-tenantflux-proof\"",
        })?;
    Ok(Some(CallerProof { csr, proof }))
}

/// One permission on a Kubernetes resource, as SubjectAccessReview checks it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Permission {
    pub verb: String,
    /// API group; empty for the core group.
    pub group: String,
    pub resource: String,
    pub subresource: Option<String>,
    /// Namespace; `None` for a cluster-wide permission.
    pub namespace: Option<String>,
}

impl Permission {
    /// `get agents.tenantflux.io/status` in the agent's namespace: what both status RPCs need.
    pub fn agent_status(namespace: impl Into<String>) -> Self {
        Self {
            verb: "get".into(),
            group: "tenantflux.io".into(),
            resource: "agents".into(),
            subresource: Some("status".into()),
            namespace: Some(namespace.into()),
        }
    }

    /// What a caller denied this permission should do about it.
    fn hint(&self) -> &'static str {
        if self.group == "tenantflux.io" {
            AGENT_PERMISSION_HINT
        } else {
            "ask a cluster administrator for a Role that grants it"
        }
    }

    fn resource_attributes(&self) -> ResourceAttributes {
        ResourceAttributes {
            verb: Some(self.verb.clone()),
            group: Some(self.group.clone()),
            resource: Some(self.resource.clone()),
            subresource: self.subresource.clone(),
            namespace: self.namespace.clone(),
            ..ResourceAttributes::default()
        }
    }
}

/// Reads like kubectl's `auth can-i`: `get agents.tenantflux.io/status in namespace "x"`.
impl fmt::Display for Permission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.verb, self.resource)?;
        if !self.group.is_empty() {
            write!(f, ".{}", self.group)?;
        }
        if let Some(subresource) = &self.subresource {
            write!(f, "/{subresource}")?;
        }
        match &self.namespace {
            Some(namespace) => write!(f, " in namespace {namespace:?}"),
            None => f.write_str(" cluster-wide"),
        }
    }
}

/// Who the API server says the caller is.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct UserInfo {
    pub username: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

/// Why a call was not allowed, or could not be checked.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("missing bearer token: {reason}")]
    MissingToken { reason: &'static str },

    #[error("bearer token not accepted by the Kubernetes API server (TokenReview): {reason}")]
    Unauthenticated { reason: String },

    #[error("user {user:?} may not {permission}{detail} ({hint})", hint = permission.hint())]
    Denied {
        user: String,
        permission: Box<Permission>,
        /// `": <reason>"` from the SubjectAccessReview, or empty.
        detail: String,
    },

    #[error(
        "the caller-identity proof with CertificateSigningRequest {} does not hold: {reason}",
        tenantflux_core::text::quote(csr)
    )]
    Identity { csr: String, reason: String },

    #[error(
        "could not read CertificateSigningRequest {} to check the caller's identity: {source}",
        tenantflux_core::text::quote(csr)
    )]
    CsrRead {
        csr: String,
        #[source]
        source: kube::Error,
    },

    #[error("could not check the bearer token: TokenReview failed: {source}")]
    TokenReview {
        #[source]
        source: kube::Error,
    },

    #[error(
        "could not check whether user {user:?} may {permission}: SubjectAccessReview failed: {source}"
    )]
    AccessReview {
        user: String,
        permission: Box<Permission>,
        #[source]
        source: kube::Error,
    },
}

impl From<AuthError> for tonic::Status {
    fn from(err: AuthError) -> Self {
        let message = err.to_string();
        match err {
            AuthError::MissingToken { .. }
            | AuthError::Unauthenticated { .. }
            | AuthError::Identity { .. } => tonic::Status::unauthenticated(message),
            AuthError::CsrRead {
                source: kube::Error::Api(ref status),
                ..
            } if status.code == 403 => tonic::Status::unavailable(format!(
                "{message} (the agent's own ClusterRole lacks get on certificatesigningrequests: apply deploy/manifests)"
            )),
            AuthError::CsrRead { .. } => tonic::Status::unavailable(message),
            AuthError::Denied { .. } => tonic::Status::permission_denied(message),
            AuthError::TokenReview { .. } | AuthError::AccessReview { .. } => {
                tonic::Status::unavailable(message)
            }
        }
    }
}

/// Authenticates and authorizes callers against the API server, with short-lived caches.
pub struct Authorizer {
    client: Client,
    audience: String,
    tokens: TtlCache<TokenKey, UserInfo>,
    decisions: TtlCache<(UserInfo, Permission), Decision>,
    stream_recheck: Duration,
    /// The agent's namespace, which a caller-identity proof names.
    namespace: String,
}

/// A stream of gRPC answers, as a server-streaming RPC returns it.
pub type GuardedStream<T> =
    std::pin::Pin<Box<dyn futures::Stream<Item = Result<T, tonic::Status>> + Send>>;

/// How soon a recheck that could not reach the API server is tried again.
const RECHECK_RETRY: Duration = Duration::from_secs(10);

#[derive(Clone, Debug)]
struct Decision {
    allowed: bool,
    detail: String,
}

impl Authorizer {
    pub fn new(client: Client, audience: impl Into<String>) -> Self {
        Self {
            client,
            audience: audience.into(),
            tokens: TtlCache::new(TOKEN_TTL, CACHE_CAPACITY),
            decisions: TtlCache::new(DECISION_TTL, CACHE_CAPACITY),
            stream_recheck: Duration::from_secs(60),
            namespace: "tenantflux-system".into(),
        }
    }

    /// The agent's namespace (`--namespace`), which caller-identity proofs must name.
    pub fn with_namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        self
    }

    /// How often an open stream checks its caller again (`--stream-recheck-interval`).
    pub fn with_stream_recheck(mut self, interval: Duration) -> Self {
        self.stream_recheck = interval;
        self
    }

    /// `stream`, ended when its caller no longer holds: every recheck interval, and at the
    /// token's expiry when it carries one, the token is reviewed again and each of
    /// `permissions` asked again, past the caches. A token no longer valid ends the stream
    /// with UNAUTHENTICATED, a permission gone with PERMISSION_DENIED naming it. When the API
    /// server cannot be asked, the stream goes on and the check is tried again shortly: an
    /// outage must not cut every watch.
    pub fn guard<T: Send + 'static>(
        self: &Arc<Self>,
        metadata: &MetadataMap,
        permissions: Vec<Permission>,
        stream: GuardedStream<T>,
    ) -> GuardedStream<T> {
        // The stream was opened with one of the two, so it is there.
        let credential = match caller_proof(metadata) {
            Ok(Some(proof)) => Credential::Proof(proof),
            _ => match bearer_token(metadata) {
                Ok(token) => Credential::Token(token),
                Err(_) => return stream,
            },
        };
        let this = self.clone();
        let watchdog = async move {
            let mut expiry = match &credential {
                Credential::Token(token) => token_expiry(token),
                Credential::Proof(_) => None,
            };
            let mut wait = this.stream_recheck;
            loop {
                let now = std::time::SystemTime::now();
                let until_expiry = expiry.map(|e| e.duration_since(now).unwrap_or_default());
                let sleep = match until_expiry {
                    // A moment past it, so the API server agrees it expired; once only, so
                    // a clock ahead of the API server's does not turn it into a busy loop.
                    Some(left) if left < wait => {
                        expiry = None;
                        left + Duration::from_secs(1)
                    }
                    _ => wait,
                };
                tokio::time::sleep(sleep).await;
                match this.recheck(&credential, &permissions).await {
                    Ok(()) => wait = this.stream_recheck,
                    Err(
                        err @ (AuthError::Unauthenticated { .. }
                        | AuthError::Identity { .. }
                        | AuthError::Denied { .. }),
                    ) => {
                        let status = tonic::Status::from(err);
                        return tonic::Status::new(
                            status.code(),
                            format!("the stream ended: {}", status.message()),
                        );
                    }
                    Err(err) => {
                        tracing::warn!(error = %err, "rechecking a stream's caller; trying again");
                        wait = this.stream_recheck.min(RECHECK_RETRY);
                    }
                }
            }
        };
        end_when(stream, watchdog)
    }

    /// The token and each permission asked again of the API server, bypassing the caches.
    async fn recheck(
        &self,
        credential: &Credential,
        permissions: &[Permission],
    ) -> Result<(), AuthError> {
        let user = match credential {
            Credential::Token(token) => self.review_user(token).await?,
            // The proof was fresh when the stream opened; now the CSR must still be there.
            Credential::Proof(proof) => self.proven_user(proof, false).await?,
        };
        for permission in permissions {
            let decision = self.access_review(&user, permission).await?;
            if !decision.allowed {
                return Err(AuthError::Denied {
                    user: user.username.clone(),
                    permission: Box::new(permission.clone()),
                    detail: decision.detail,
                });
            }
        }
        Ok(())
    }

    /// Checks that the call's bearer token is valid and its user holds `permission`; returns
    /// the user.
    pub async fn authorize(
        &self,
        metadata: &MetadataMap,
        permission: &Permission,
    ) -> Result<UserInfo, AuthError> {
        let user = self.identify(metadata).await?;
        self.check(&user, permission).await?;
        Ok(user)
    }

    /// Authorizes each of `permissions` for the call's caller, identified once; the
    /// SubjectAccessReviews not cached run at once (`get all` asks one per Flux kind, and
    /// one after the other they were most of its time). Err: the caller is not identified.
    pub async fn authorize_each(
        &self,
        metadata: &MetadataMap,
        permissions: &[Permission],
    ) -> Result<Vec<Result<(), AuthError>>, AuthError> {
        let user = self.identify(metadata).await?;
        Ok(futures::future::join_all(permissions.iter().map(|p| self.check(&user, p))).await)
    }

    /// Who the call's credential (a caller-identity proof, else a bearer token) says the
    /// caller is.
    pub async fn identify(&self, metadata: &MetadataMap) -> Result<UserInfo, AuthError> {
        match caller_proof(metadata)? {
            Some(proof) => self.prove(&proof).await,
            None => self.authenticate(&bearer_token(metadata)?).await,
        }
    }

    /// The user a caller-identity proof stands for, cached like a token.
    async fn prove(&self, proof: &CallerProof) -> Result<UserInfo, AuthError> {
        let key = BearerToken::new(format!("{}\n{}", proof.csr, proof.proof)).cache_key();
        if let Some(user) = self.tokens.get(&key) {
            return Ok(user);
        }
        let user = self.proven_user(proof, true).await?;
        self.tokens.insert(key, user.clone());
        Ok(user)
    }

    /// Reads the proof's CertificateSigningRequest and checks it (signer, age when `fresh`)
    /// and the proof (signed by the CSR's key, for this agent, made now when `fresh`); the
    /// user is the one the API server recorded as the CSR's creator.
    async fn proven_user(&self, proof: &CallerProof, fresh: bool) -> Result<UserInfo, AuthError> {
        use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
        use tenantflux_core::identity;
        let refused = |reason: String| AuthError::Identity {
            csr: proof.csr.clone(),
            reason,
        };
        let api: Api<CertificateSigningRequest> = Api::all(self.client.clone());
        let started = Instant::now();
        let csr = api.get_opt(&proof.csr).await;
        super::timing::record("csr-read", started.elapsed());
        let csr = csr
            .map_err(|source| AuthError::CsrRead {
                csr: proof.csr.clone(),
                source,
            })?
            .ok_or_else(|| {
                refused(
                    "it does not exist (deleted when its command ended, or by someone else): run the command again"
                        .into(),
                )
            })?;
        if csr.spec.signer_name != identity::SIGNER_NAME {
            return Err(refused(format!(
                "its signerName is {}, not {}",
                tenantflux_core::text::quote(&csr.spec.signer_name),
                identity::SIGNER_NAME
            )));
        }
        let now = k8s_openapi::jiff::Timestamp::now().as_second();
        if fresh {
            let created = csr
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0.as_second())
                .unwrap_or(0);
            if now - created > identity::MAX_CSR_AGE_SECONDS {
                return Err(refused(format!(
                    "it was created {} s ago; a proof may use one at most {} s old: run the command again",
                    now - created,
                    identity::MAX_CSR_AGE_SECONDS
                )));
            }
        }
        let public_key = identity::csr_public_key(&csr.spec.request.0)
            .map_err(|err| refused(err.to_string()))?;
        identity::verify_proof(
            &public_key,
            &proof.proof,
            &proof.csr,
            &self.audience,
            &self.namespace,
            fresh.then_some(now),
        )
        .map_err(|err| refused(err.to_string()))?;
        let username = csr.spec.username.unwrap_or_default();
        if username.is_empty() {
            return Err(refused(
                "the API server recorded no creator (spec.username)".into(),
            ));
        }
        Ok(UserInfo {
            username,
            uid: csr.spec.uid.unwrap_or_default(),
            groups: csr.spec.groups.unwrap_or_default(),
            extra: csr.spec.extra.unwrap_or_default(),
        })
    }

    pub async fn authenticate(&self, token: &BearerToken) -> Result<UserInfo, AuthError> {
        let key = token.cache_key();
        if let Some(user) = self.tokens.get(&key) {
            return Ok(user);
        }
        let user = self.review_user(token).await?;
        self.tokens.insert(key, user.clone());
        Ok(user)
    }

    /// The token's user, from the API server (TokenReview), without the cache.
    async fn review_user(&self, token: &BearerToken) -> Result<UserInfo, AuthError> {
        let bound = self.review(token, Some(self.audience.clone())).await?;
        let status = if authenticated(&bound) {
            bound
        } else {
            // Tokens a kubeconfig user holds are bound to the API server's own audience; the
            // API server accepts them, so the agent does too.
            let unbound = self.review(token, None).await?;
            if !authenticated(&unbound) {
                let reason = bound
                    .error
                    .filter(|e| !e.is_empty())
                    .or(unbound.error.filter(|e| !e.is_empty()))
                    .unwrap_or_else(|| "the token is not valid".into());
                return Err(AuthError::Unauthenticated {
                    reason: reason.replace(token.expose(), "<redacted>"),
                });
            }
            unbound
        };
        let user = status
            .user
            .map(|u| UserInfo {
                username: u.username.unwrap_or_default(),
                uid: u.uid.unwrap_or_default(),
                groups: u.groups.unwrap_or_default(),
                extra: u.extra.unwrap_or_default(),
            })
            .unwrap_or_default();
        Ok(user)
    }

    async fn review(
        &self,
        token: &BearerToken,
        audience: Option<String>,
    ) -> Result<TokenReviewStatus, AuthError> {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.expose().to_owned()),
                audiences: audience.map(|a| vec![a]),
            },
            ..TokenReview::default()
        };
        let api: Api<TokenReview> = Api::all(self.client.clone());
        let started = Instant::now();
        let created = api.create(&PostParams::default(), &review).await;
        super::timing::record("tokenreview", started.elapsed());
        let created = created.map_err(|source| AuthError::TokenReview { source })?;
        Ok(created.status.unwrap_or_default())
    }

    async fn check(&self, user: &UserInfo, permission: &Permission) -> Result<(), AuthError> {
        let key = (user.clone(), permission.clone());
        let decision = match self.decisions.get(&key) {
            Some(decision) => decision,
            None => {
                let decision = self.access_review(user, permission).await?;
                // Only grants are reused: a caller who was just given a Role must not be
                // turned away for the rest of the TTL.
                if decision.allowed {
                    self.decisions.insert(key, decision.clone());
                }
                decision
            }
        };
        if decision.allowed {
            Ok(())
        } else {
            Err(AuthError::Denied {
                user: user.username.clone(),
                permission: Box::new(permission.clone()),
                detail: decision.detail,
            })
        }
    }

    async fn access_review(
        &self,
        user: &UserInfo,
        permission: &Permission,
    ) -> Result<Decision, AuthError> {
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.username.clone()),
                uid: Some(user.uid.clone()).filter(|u| !u.is_empty()),
                groups: Some(user.groups.clone()),
                extra: Some(user.extra.clone()).filter(|e| !e.is_empty()),
                resource_attributes: Some(permission.resource_attributes()),
                ..SubjectAccessReviewSpec::default()
            },
            ..SubjectAccessReview::default()
        };
        let api: Api<SubjectAccessReview> = Api::all(self.client.clone());
        let started = Instant::now();
        let created = api.create(&PostParams::default(), &review).await;
        super::timing::record("subjectaccessreview", started.elapsed());
        let created = created.map_err(|source| AuthError::AccessReview {
            user: user.username.clone(),
            permission: Box::new(permission.clone()),
            source,
        })?;
        Ok(decision(created.status.unwrap_or_default()))
    }
}

/// `stream` until it ends, or until `revoked` resolves: then its status is the last item.
fn end_when<T: Send + 'static>(
    stream: GuardedStream<T>,
    revoked: impl std::future::Future<Output = tonic::Status> + Send + 'static,
) -> GuardedStream<T> {
    use futures::StreamExt as _;

    enum Item<T> {
        Next(Result<T, tonic::Status>),
        End,
        Revoked(tonic::Status),
    }
    let inner = stream
        .map(Item::Next)
        .chain(futures::stream::once(std::future::ready(Item::End)));
    let revoked = futures::stream::once(revoked).map(Item::Revoked);
    let mut ended = false;
    let merged = futures::stream::select(inner, revoked)
        .take_while(move |item| {
            let go = !ended && !matches!(item, Item::End);
            ended |= matches!(item, Item::Revoked(_));
            std::future::ready(go)
        })
        .map(|item| match item {
            Item::Next(result) => result,
            Item::Revoked(status) => Err(status),
            Item::End => unreachable!("take_while stops at the end"),
        });
    Box::pin(merged)
}

/// When a JWT bearer token expires (its `exp` claim), read without verifying it: the time
/// only schedules a check by the API server, which decides. None for other tokens.
fn token_expiry(token: &BearerToken) -> Option<std::time::SystemTime> {
    use base64::Engine as _;
    let payload = token.expose().split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    let claims: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    let exp = claims.get("exp")?.as_u64()?;
    std::time::UNIX_EPOCH.checked_add(Duration::from_secs(exp))
}

fn authenticated(status: &TokenReviewStatus) -> bool {
    status.authenticated == Some(true)
}

fn decision(status: SubjectAccessReviewStatus) -> Decision {
    let reason = [status.reason, status.evaluation_error]
        .into_iter()
        .flatten()
        .filter(|r| !r.is_empty())
        .collect::<Vec<_>>()
        .join("; ");
    Decision {
        allowed: status.allowed && status.denied != Some(true),
        detail: if reason.is_empty() {
            String::new()
        } else {
            format!(": {reason}")
        },
    }
}

/// A small map whose entries expire after `ttl`, holding at most `capacity` entries.
struct TtlCache<K, V> {
    ttl: Duration,
    capacity: usize,
    entries: Mutex<HashMap<K, (Instant, V)>>,
}

impl<K: Eq + Hash + Clone, V: Clone> TtlCache<K, V> {
    fn new(ttl: Duration, capacity: usize) -> Self {
        Self {
            ttl,
            capacity,
            entries: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<K, (Instant, V)>> {
        // A panic while holding the lock leaves a map that is still valid; keep using it.
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn get(&self, key: &K) -> Option<V> {
        let mut entries = self.lock();
        match entries.get(key) {
            Some((at, value)) if at.elapsed() < self.ttl => Some(value.clone()),
            Some(_) => {
                entries.remove(key);
                None
            }
            None => None,
        }
    }

    fn insert(&self, key: K, value: V) {
        let mut entries = self.lock();
        if entries.len() >= self.capacity && !entries.contains_key(&key) {
            entries.retain(|_, (at, _)| at.elapsed() < self.ttl);
            if entries.len() >= self.capacity {
                let oldest = entries
                    .iter()
                    .min_by_key(|(_, (at, _))| *at)
                    .map(|(k, _)| k.clone());
                if let Some(oldest) = oldest {
                    entries.remove(&oldest);
                }
            }
        }
        entries.insert(key, (Instant::now(), value));
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use tonic::metadata::MetadataValue;

    use super::*;

    const TOKEN: &str = "eyJhbGciOiJSUzI1NiJ9.secret-part.signature";

    fn metadata(value: &str) -> MetadataMap {
        let mut map = MetadataMap::new();
        map.insert("authorization", MetadataValue::try_from(value).unwrap());
        map
    }

    #[test]
    fn bearer_token_is_read_from_authorization_metadata() {
        let token = bearer_token(&metadata(&format!("Bearer {TOKEN}"))).unwrap();
        assert_eq!(token.expose(), TOKEN);
        let token = bearer_token(&metadata(&format!("bearer  {TOKEN} "))).unwrap();
        assert_eq!(token.expose(), TOKEN);
    }

    #[test]
    fn missing_or_malformed_bearer_token_is_unauthenticated() {
        for map in [
            MetadataMap::new(),
            metadata(&format!("Basic {TOKEN}")),
            metadata("Bearer "),
            metadata("Bearer"),
            metadata(TOKEN),
        ] {
            let err = bearer_token(&map).unwrap_err();
            assert!(matches!(err, AuthError::MissingToken { .. }), "{err:?}");
            let status = tonic::Status::from(err);
            assert_eq!(status.code(), tonic::Code::Unauthenticated);
            assert!(status.message().starts_with("missing bearer token: "));
            assert!(
                !status.message().contains("secret-part"),
                "{}",
                status.message()
            );
        }
        let status = tonic::Status::from(bearer_token(&MetadataMap::new()).unwrap_err());
        assert_eq!(
            status.message(),
            "missing bearer token: the call has no \"authorization\" metadata; \
             send \"authorization: Bearer <token>\""
        );
    }

    #[test]
    fn token_is_redacted_in_debug_and_display() {
        let token = BearerToken::new(TOKEN);
        assert_eq!(format!("{token}"), "<redacted>");
        assert_eq!(format!("{token:?}"), "BearerToken(<redacted>)");
        assert!(!format!("{:?}", Some(&token)).contains("secret-part"));
    }

    #[test]
    fn cache_key_is_a_digest_not_the_token() {
        let token = BearerToken::new(TOKEN);
        let key = token.cache_key();
        assert_eq!(key, BearerToken::new(TOKEN).cache_key());
        assert_ne!(key, BearerToken::new("another").cache_key());
        assert_ne!(&key.0[..], &TOKEN.as_bytes()[..32]);
        let shown = format!("{key:?}");
        assert!(
            !shown.contains(TOKEN) && !shown.contains("secret-part"),
            "{shown}"
        );
        // Known SHA-256 test vector: a change of hash function would break cache semantics.
        assert_eq!(
            format!("{:?}", BearerToken::new("abc").cache_key()),
            "TokenKey(ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad)"
        );
    }

    #[test]
    fn denied_message_names_user_and_missing_permission() {
        let err = AuthError::Denied {
            user: "system:serviceaccount:default:bob".into(),
            permission: Box::new(Permission::agent_status("tenantflux-system")),
            detail: String::new(),
        };
        let status = tonic::Status::from(err);
        assert_eq!(status.code(), tonic::Code::PermissionDenied);
        assert_eq!(
            status.message(),
            "user \"system:serviceaccount:default:bob\" may not get agents.tenantflux.io/status \
             in namespace \"tenantflux-system\" (bind Role tenantflux-user, see deploy/manifests)"
        );
    }

    #[test]
    fn permission_reads_like_kubectl_auth_can_i() {
        let patch = Permission {
            verb: "patch".into(),
            group: "kustomize.toolkit.fluxcd.io".into(),
            resource: "kustomizations".into(),
            subresource: None,
            namespace: Some("apps".into()),
        };
        assert_eq!(
            patch.to_string(),
            "patch kustomizations.kustomize.toolkit.fluxcd.io in namespace \"apps\""
        );
        let core = Permission {
            verb: "list".into(),
            group: String::new(),
            resource: "nodes".into(),
            subresource: None,
            namespace: None,
        };
        assert_eq!(core.to_string(), "list nodes cluster-wide");
        let attrs = Permission::agent_status("ns").resource_attributes();
        assert_eq!(attrs.verb.as_deref(), Some("get"));
        assert_eq!(attrs.group.as_deref(), Some("tenantflux.io"));
        assert_eq!(attrs.resource.as_deref(), Some("agents"));
        assert_eq!(attrs.subresource.as_deref(), Some("status"));
        assert_eq!(attrs.namespace.as_deref(), Some("ns"));
    }

    #[test]
    fn access_review_reason_becomes_detail_and_explicit_deny_wins() {
        let denied = decision(SubjectAccessReviewStatus {
            allowed: false,
            reason: Some("no RBAC policy matched".into()),
            ..SubjectAccessReviewStatus::default()
        });
        assert!(!denied.allowed);
        assert_eq!(denied.detail, ": no RBAC policy matched");
        let contradictory = decision(SubjectAccessReviewStatus {
            allowed: true,
            denied: Some(true),
            ..SubjectAccessReviewStatus::default()
        });
        assert!(!contradictory.allowed);
        assert!(
            decision(SubjectAccessReviewStatus {
                allowed: true,
                ..SubjectAccessReviewStatus::default()
            })
            .allowed
        );
    }

    #[tokio::test]
    async fn a_guarded_stream_ends_with_the_revocation_or_with_itself() {
        use futures::StreamExt as _;
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<u32>();
        let (revoke, revoked) = tokio::sync::oneshot::channel::<tonic::Status>();
        let items: GuardedStream<u32> =
            Box::pin(tokio_stream::wrappers::UnboundedReceiverStream::new(rx).map(Ok));
        let mut stream = end_when(items, async move { revoked.await.unwrap() });
        tx.send(1).unwrap();
        assert_eq!(stream.next().await.unwrap().unwrap(), 1);
        revoke
            .send(tonic::Status::permission_denied("the stream ended: gone"))
            .unwrap();
        let err = stream.next().await.unwrap().unwrap_err();
        assert_eq!(err.code(), tonic::Code::PermissionDenied);
        tx.send(2).unwrap();
        assert!(
            stream.next().await.is_none(),
            "nothing after the revocation"
        );

        // A stream that ends on its own ends at once, its watchdog still waiting.
        let items: GuardedStream<u32> = Box::pin(futures::stream::iter([Ok(7)]));
        let mut stream = end_when(items, std::future::pending());
        assert_eq!(stream.next().await.unwrap().unwrap(), 7);
        assert!(stream.next().await.is_none());
    }

    #[test]
    fn a_jwt_tells_when_it_expires_and_other_tokens_do_not() {
        use base64::Engine as _;
        let claims = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(br#"{"aud":["tenantflux-agent"],"exp":1900000000}"#);
        let jwt = BearerToken::new(format!("eyJhbGciOiJSUzI1NiJ9.{claims}.c2lnbmF0dXJl"));
        assert_eq!(
            token_expiry(&jwt),
            Some(std::time::UNIX_EPOCH + Duration::from_secs(1_900_000_000))
        );
        for opaque in ["abcdef", "a.b.c", "x.e30.y"] {
            assert_eq!(token_expiry(&BearerToken::new(opaque)), None, "{opaque}");
        }
    }

    #[test]
    fn cache_expires_entries_and_stays_bounded() {
        let cache = TtlCache::new(Duration::from_millis(50), 2);
        cache.insert(1, "a");
        assert_eq!(cache.get(&1), Some("a"));
        std::thread::sleep(Duration::from_millis(2));
        cache.insert(2, "b");
        std::thread::sleep(Duration::from_millis(2));
        cache.insert(3, "c");
        assert_eq!(cache.len(), 2);
        assert_eq!(cache.get(&1), None, "the oldest entry is evicted first");
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(cache.get(&3), None, "expired");
    }
}
