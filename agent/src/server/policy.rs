//! `tenantflux.v1.Policy`: pushes and reads of the policy the agent holds.

use std::sync::Arc;

use tenantflux_core::text::chain;
use tenantflux_proto::v1::{
    GetPolicyRequest, PolicyState, PushPolicyRequest, PushPolicyResponse, policy_server,
};
use tonic::{Request, Response};

use super::auth::{Authorizer, Permission};
use crate::policy::store::{PolicyStore, PushError};

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
        self.store
            .push(&message.signed_policy)
            .await
            .map(Response::new)
            .map_err(|err| push_status(&err))
    }

    async fn get_policy(
        &self,
        request: Request<GetPolicyRequest>,
    ) -> Result<Response<PolicyState>, tonic::Status> {
        let (metadata, _, _) = request.into_parts();
        self.authorizer
            .authorize(&metadata, &self.permission("get"))
            .await?;
        Ok(Response::new(self.store.state()))
    }
}

fn push_status(err: &PushError) -> tonic::Status {
    let message = chain(err);
    match err {
        PushError::NoKey
        | PushError::NoKeyring
        | PushError::Stale { .. }
        | PushError::Refused(_)
        | PushError::Expired { .. } => tonic::Status::failed_precondition(message),
        PushError::NoIdentity => tonic::Status::unavailable(message),
        PushError::Invalid(_) => tonic::Status::invalid_argument(message),
        PushError::Untrusted(_) | PushError::KeyRefused(_) => {
            tonic::Status::permission_denied(message)
        }
        PushError::Store(_) => tonic::Status::unavailable(message),
    }
}
