//! `tenantflux.v1.Policy`: pushes and reads of the policy the agent holds.

use std::sync::Arc;

use tenantflux_core::text::chain;
use tenantflux_proto::v1::{
    GetPolicyRequest, PolicySource, PolicyState, PushPolicyRequest, PushPolicyResponse,
    policy_server,
};
use tonic::{Request, Response};

use super::auth::{Authorizer, Permission};
use super::convert::timestamp;
use crate::policy::store::{PolicyStore, PolicyView, PushError, PushOutcome, SourceState};

/// The `tenantflux.v1.Policy` service.
pub struct PolicyService {
    store: Arc<PolicyStore>,
    authorizer: Arc<Authorizer>,
}

impl PolicyService {
    pub fn new(store: Arc<PolicyStore>, authorizer: Arc<Authorizer>) -> Self {
        Self { store, authorizer }
    }

    fn permission(&self, verb: &str) -> Permission {
        Permission {
            verb: verb.into(),
            group: "tenantflux.io".into(),
            resource: "policies".into(),
            subresource: None,
            namespace: Some(self.store.namespace().to_owned()),
            name: None,
        }
    }
}

#[tonic::async_trait]
impl policy_server::Policy for PolicyService {
    async fn push_policy(
        &self,
        request: Request<PushPolicyRequest>,
    ) -> Result<Response<PushPolicyResponse>, tonic::Status> {
        let (metadata, _, message) = request.into_parts();
        self.authorizer
            .authorize(&metadata, &self.permission("update"))
            .await?;
        let outcome = self.store.push(&message.signed_policy).await?;
        Ok(Response::new(outcome.into()))
    }

    async fn get_policy(
        &self,
        request: Request<GetPolicyRequest>,
    ) -> Result<Response<PolicyState>, tonic::Status> {
        let (metadata, _, _) = request.into_parts();
        self.authorizer
            .authorize(&metadata, &self.permission("get"))
            .await?;
        Ok(Response::new(self.store.state().into()))
    }
}

/// The codes policy.proto documents; a store the API server cannot reach now, or an identity
/// not read yet, is UNAVAILABLE so that a pusher (or the puller) retries.
impl From<PushError> for tonic::Status {
    fn from(err: PushError) -> Self {
        let message = chain(&err);
        match err {
            PushError::NoKey
            | PushError::NoKeyring
            | PushError::Stale { .. }
            | PushError::Refused(_)
            | PushError::Expired { .. } => Self::failed_precondition(message),
            PushError::NoIdentity | PushError::Store(_) => Self::unavailable(message),
            PushError::Invalid(_) => Self::invalid_argument(message),
            PushError::Untrusted(_) | PushError::KeyRefused(_) => Self::permission_denied(message),
        }
    }
}

impl From<PushOutcome> for PushPolicyResponse {
    fn from(outcome: PushOutcome) -> Self {
        Self {
            name: outcome.name,
            generation: outcome.generation,
            unchanged: outcome.unchanged,
            previous_generation: outcome.previous_generation,
        }
    }
}

impl From<PolicyView> for PolicyState {
    fn from(view: PolicyView) -> Self {
        let mut state = Self {
            problems: view.problems,
            enforcement: view.enforcement.map(super::convert::enforcement),
            source: view.source.map(Into::into),
            ..Self::default()
        };
        if let Some(keyring) = view.keyring {
            state.keyring_version = keyring.version;
            state.keyring_key_ids = keyring.key_ids;
        }
        if let Some(accepted) = view.accepted {
            state.present = true;
            state.name = accepted.name;
            state.generation = accepted.generation;
            state.key_id = accepted.key_id;
            state.policy = accepted.policy;
            state.accepted_at = Some(accepted.accepted_at.into());
            if let Some(validity) = accepted.validity {
                state.issued_at = Some(timestamp(validity.issued_at));
                state.expires_at = Some(timestamp(validity.expires_at));
                state.stale = accepted.stale;
            }
        }
        state
    }
}

impl From<SourceState> for PolicySource {
    fn from(source: SourceState) -> Self {
        Self {
            channel: source.channel,
            digest: source.digest.unwrap_or_default(),
            checked_at: source.checked_at.map(Into::into),
            unanswered_since: source.unanswered_since.map(Into::into),
            error: source.error.unwrap_or_default(),
        }
    }
}
