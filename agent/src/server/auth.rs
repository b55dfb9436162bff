//! Caller identity: every RPC authenticates its bearer token with TokenReview and authorizes
//! the operation with SubjectAccessReview, so the API server's own RBAC decides who may do what.
//!
//! Handlers call [`Authorizer::authorize`] themselves (tonic interceptors are synchronous, and
//! later RPCs derive the [`Permission`] from the request body).

use std::{
    collections::{BTreeMap, HashMap},
    fmt,
    hash::Hash,
    sync::Mutex,
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
            AuthError::MissingToken { .. } | AuthError::Unauthenticated { .. } => {
                tonic::Status::unauthenticated(message)
            }
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
}

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
        }
    }

    /// Checks that the call's bearer token is valid and its user holds `permission`; returns
    /// the user.
    pub async fn authorize(
        &self,
        metadata: &MetadataMap,
        permission: &Permission,
    ) -> Result<UserInfo, AuthError> {
        let token = bearer_token(metadata)?;
        let user = self.authenticate(&token).await?;
        self.check(&user, permission).await?;
        Ok(user)
    }

    pub async fn authenticate(&self, token: &BearerToken) -> Result<UserInfo, AuthError> {
        let key = token.cache_key();
        if let Some(user) = self.tokens.get(&key) {
            return Ok(user);
        }
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
        self.tokens.insert(key, user.clone());
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
        let created = api
            .create(&PostParams::default(), &review)
            .await
            .map_err(|source| AuthError::TokenReview { source })?;
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
        let created = api
            .create(&PostParams::default(), &review)
            .await
            .map_err(|source| AuthError::AccessReview {
                user: user.username.clone(),
                permission: Box::new(permission.clone()),
                source,
            })?;
        Ok(decision(created.status.unwrap_or_default()))
    }
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
