//! `tenantflux.v1.Instance`: the tenant's FluxInstance, read and applied through
//! [`crate::instance::Instances`] after the caller's RBAC allows it.

use std::sync::Arc;

use serde_json::Value;
use tenantflux_core::{
    flux::{INSTANCE_PLURAL, OPERATOR_GROUP},
    text::chain,
};
use tenantflux_proto::v1::{
    ApplyInstanceRequest, ApplyInstanceResponse, DiffInstanceResponse, GetInstanceRequest,
    InstanceState, instance_server,
};
use tonic::{Request, Response};

use super::auth::{Authorizer, Permission};
use crate::instance::{Applied, InstanceError, Instances, clean};

impl From<InstanceError> for tonic::Status {
    fn from(err: InstanceError) -> Self {
        let message = chain(&err);
        match err {
            InstanceError::Manifest(_) | InstanceError::Refused { .. } => {
                tonic::Status::invalid_argument(message)
            }
            InstanceError::Policy { .. } => tonic::Status::failed_precondition(message),
            InstanceError::Kube { .. } => tonic::Status::unavailable(message),
        }
    }
}

fn yaml(value: &Value) -> String {
    tenantflux_core::yaml::to_string(value).unwrap_or_default()
}

/// The `tenantflux.v1.Instance` service.
pub struct InstanceService {
    instances: Instances,
    authorizer: Arc<Authorizer>,
}

impl InstanceService {
    pub fn new(instances: Instances, authorizer: Arc<Authorizer>) -> Self {
        Self {
            instances,
            authorizer,
        }
    }

    fn permission(&self, verb: &str) -> Permission {
        Permission {
            verb: verb.into(),
            group: OPERATOR_GROUP.into(),
            resource: INSTANCE_PLURAL.into(),
            subresource: None,
            namespace: Some(self.instances.namespace().to_owned()),
            name: None,
        }
    }
}

#[tonic::async_trait]
impl instance_server::Instance for InstanceService {
    async fn get_instance(
        &self,
        request: Request<GetInstanceRequest>,
    ) -> Result<Response<InstanceState>, tonic::Status> {
        self.authorizer
            .authorize(request.metadata(), &self.permission("get"))
            .await?;
        let live = self.instances.live().await?;
        Ok(Response::new(InstanceState {
            present: live.is_some(),
            manifest: live.map(|o| yaml(&clean(&o))).unwrap_or_default(),
        }))
    }

    async fn apply_instance(
        &self,
        request: Request<ApplyInstanceRequest>,
    ) -> Result<Response<ApplyInstanceResponse>, tonic::Status> {
        self.authorizer
            .authorize(request.metadata(), &self.permission("patch"))
            .await?;
        // Applying where there is no instance yet creates one: the caller must be allowed that
        // too, as `kubectl apply` would need.
        if !request.get_ref().dry_run && self.instances.live().await?.is_none() {
            self.authorizer
                .authorize(request.metadata(), &self.permission("create"))
                .await?;
        }
        let message = request.into_inner();
        let Applied {
            live,
            applied,
            warnings,
        } = self
            .instances
            .apply(&message.manifest, message.dry_run)
            .await?;
        let after = clean(&applied);
        Ok(Response::new(ApplyInstanceResponse {
            created: live.is_none(),
            changed: live
                .as_ref()
                .is_none_or(|l| clean(l)["spec"] != after["spec"]),
            manifest: yaml(&after),
            warnings,
        }))
    }

    async fn diff_instance(
        &self,
        request: Request<ApplyInstanceRequest>,
    ) -> Result<Response<DiffInstanceResponse>, tonic::Status> {
        self.authorizer
            .authorize(request.metadata(), &self.permission("patch"))
            .await?;
        let message = request.into_inner();
        let Applied { live, applied, .. } = self.instances.apply(&message.manifest, true).await?;
        Ok(Response::new(DiffInstanceResponse {
            live: live.map(|o| yaml(&clean(&o))).unwrap_or_default(),
            applied: yaml(&clean(&applied)),
        }))
    }
}
