//! Caller identity: every RPC authenticates its bearer token with TokenReview and authorizes
//! the operation with SubjectAccessReview, so the API server's own RBAC decides who may do what.
//!
//! Handlers call [`Authorizer::authorize`] themselves (tonic interceptors are synchronous, and
//! later RPCs derive the [`Permission`] from the request body).

mod cache;
mod call;
mod credential;
mod error;
mod guard;
mod permission;
mod proof;
mod review;
mod sweep;
pub mod timing;

use std::{collections::BTreeMap, time::Duration};

use kube::Client;
use tonic::metadata::MetadataMap;

use self::cache::Caches;
pub use self::{
    call::CallLayer,
    credential::{BearerToken, CallerProof, TokenKey, bearer_token, caller_proof},
    error::{AuthError, access_code},
    guard::GuardedStream,
    permission::Permission,
    sweep::deny_expired_identity_csrs,
};

/// Who the API server says the caller is.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct UserInfo {
    pub username: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

/// Authenticates and authorizes callers against the API server, with short-lived caches.
pub struct Authorizer {
    client: Client,
    audience: String,
    caches: Caches,
    stream_recheck: Duration,
    /// The agent's namespace, which a caller-identity proof names.
    namespace: String,
}

impl Authorizer {
    pub fn new(client: Client, audience: impl Into<String>) -> Self {
        Self {
            client,
            audience: audience.into(),
            caches: Caches::default(),
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

    /// The user a caller-identity proof stands for: checked on every call (a proof is made
    /// for one call), its CSR read from a short cache.
    async fn prove(&self, proof: &CallerProof) -> Result<UserInfo, AuthError> {
        Ok(self.proven_user(proof, true).await?.0)
    }

    pub async fn authenticate(&self, token: &BearerToken) -> Result<UserInfo, AuthError> {
        let key = token.cache_key();
        if let Some(user) = self.caches.users.get(&key) {
            return Ok(user);
        }
        let user = self.review_user(token).await?;
        self.caches.users.insert(key, user.clone());
        Ok(user)
    }

    async fn check(&self, user: &UserInfo, permission: &Permission) -> Result<(), AuthError> {
        let key = (user.clone(), permission.clone());
        if self.caches.grants.get(&key).is_some() {
            return Ok(());
        }
        self.access_review(user, permission)
            .await?
            .into_result(user, permission)?;
        self.caches.grants.insert(key, ());
        Ok(())
    }
}
