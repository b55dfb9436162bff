//! The `tenantflux.v1.Adopt` service: a plan of the Flux that runs and its adoption, each call
//! authorized with SubjectAccessReview on the FluxInstance it concerns.

use std::sync::Arc;

use tenantflux_core::{
    flux::{INSTANCE_NAME, INSTANCE_PLURAL, OPERATOR_GROUP},
    text::chain,
};
use tenantflux_proto::v1::{
    AdoptionPlan, AdoptionResult, ApplyAdoptionRequest, Finding, FoundObject, HelmRecord,
    KustomizationHealth, PlanAdoptionRequest, adopt_server,
};
use tonic::{Request, Response};

use super::auth::{AuthError, Authorizer, Permission};
use crate::adopt::{AdoptError, Adopted, Adopter, ApplyOptions, Authorize, Write, plan};

impl From<AdoptError> for tonic::Status {
    fn from(err: AdoptError) -> Self {
        let message = chain(&err);
        match err {
            AdoptError::Refused(_) => tonic::Status::failed_precondition(message),
            AdoptError::Denied(_) => tonic::Status::permission_denied(message),
            AdoptError::Kube { .. } if err.is_forbidden() => {
                tonic::Status::failed_precondition(format!(
                    "{message}; the agent's RBAC lacks it (see deploy/manifests/agent-rbac.yaml)"
                ))
            }
            // The API server refused the write (admission, a conflict, an invalid object):
            // retrying as it is will not pass.
            AdoptError::Kube { ref source, .. } if refused_by_api_server(source) => {
                tonic::Status::failed_precondition(message)
            }
            AdoptError::Kube { .. } => tonic::Status::unavailable(message),
            // The agent answered; what it waited for did not happen in time.
            AdoptError::NotReady(_) => tonic::Status::aborted(message),
        }
    }
}

/// A 4xx answer other than 429 (too many requests): the request itself was refused.
fn refused_by_api_server(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(s) if (400..500).contains(&s.code) && s.code != 429)
}

fn found(f: &plan::Found) -> FoundObject {
    FoundObject {
        kind: f.kind.clone(),
        namespace: f.namespace.clone(),
        name: f.name.clone(),
        version: f.version(),
        helm_release: f.helm_release().unwrap_or_default(),
        managers: f.managers.clone(),
        generation: f.generation,
    }
}

fn to_message(p: plan::AdoptionPlan) -> AdoptionPlan {
    AdoptionPlan {
        case: p.case.name().into(),
        summary: p.summary,
        namespace: p.namespace,
        operators: p.operators.iter().map(found).collect(),
        instances: p.instances.iter().map(found).collect(),
        controllers: p.controllers.iter().map(found).collect(),
        ignored: p.ignored.iter().map(found).collect(),
        helm_records: p
            .helm_records
            .into_iter()
            .map(|r| HelmRecord {
                namespace: r.namespace,
                name: r.name,
                release: r.release,
                status: r.status,
            })
            .collect(),
        helm_records_note: p.helm_records_note,
        changes: p.changes,
        keeps: p.keeps,
        rollout: p.rollout,
        rollout_reason: p.rollout_reason,
        policy: p.policy,
        violations: p
            .violations
            .into_iter()
            .map(|v| Finding {
                code: v.field,
                message: v.message,
            })
            .collect(),
        refusals: p.refusals,
        instance: p
            .instance
            .map(|i| tenantflux_core::yaml::to_string(&i).unwrap_or_default())
            .unwrap_or_default(),
        cleanup: p.cleanup,
        adopted: p.adopted,
    }
}

/// The caller of an ApplyAdoption, authorizing each write adoption makes in their name.
struct Caller<'a> {
    authorizer: &'a Authorizer,
    metadata: tonic::metadata::MetadataMap,
}

impl Authorize for Caller<'_> {
    async fn may(&self, write: &Write) -> Result<bool, String> {
        let (verb, group, resource, namespace, name) = match write {
            Write::CreateInstance { namespace } => (
                "create",
                OPERATOR_GROUP,
                INSTANCE_PLURAL,
                namespace,
                INSTANCE_NAME,
            ),
            Write::AnnotateKustomization { namespace, name } => (
                "patch",
                tenantflux_core::kinds::KUSTOMIZE,
                "kustomizations",
                namespace,
                name.as_str(),
            ),
        };
        let permission = Permission {
            verb: verb.into(),
            group: group.into(),
            resource: resource.into(),
            subresource: None,
            namespace: Some(namespace.clone()),
            name: Some(name.into()),
        };
        match self.authorizer.authorize(&self.metadata, &permission).await {
            Ok(_) => Ok(true),
            Err(AuthError::Denied { .. }) => Ok(false),
            Err(err) => Err(err.to_string()),
        }
    }
}

pub struct AdoptService {
    adopter: Adopter,
    authorizer: Arc<Authorizer>,
}

impl AdoptService {
    pub fn new(adopter: Adopter, authorizer: Arc<Authorizer>) -> Self {
        Self {
            adopter,
            authorizer,
        }
    }

    fn permission(&self, verb: &str) -> Permission {
        Permission {
            verb: verb.into(),
            group: OPERATOR_GROUP.into(),
            resource: INSTANCE_PLURAL.into(),
            subresource: None,
            namespace: Some(self.adopter.operator_namespace().to_owned()),
            name: Some(INSTANCE_NAME.into()),
        }
    }
}

#[tonic::async_trait]
impl adopt_server::Adopt for AdoptService {
    async fn plan_adoption(
        &self,
        request: Request<PlanAdoptionRequest>,
    ) -> Result<Response<AdoptionPlan>, tonic::Status> {
        self.authorizer
            .authorize(request.metadata(), &self.permission("get"))
            .await?;
        let facts = self.adopter.facts().await?;
        Ok(Response::new(to_message(self.adopter.plan(&facts))))
    }

    async fn apply_adoption(
        &self,
        request: Request<ApplyAdoptionRequest>,
    ) -> Result<Response<AdoptionResult>, tonic::Status> {
        self.authorizer
            .authorize(request.metadata(), &self.permission("patch"))
            .await?;
        let caller = Caller {
            authorizer: &self.authorizer,
            metadata: request.metadata().clone(),
        };
        let message = request.into_inner();
        let Adopted {
            plan,
            done,
            kustomizations,
        } = self
            .adopter
            .apply(
                ApplyOptions {
                    allow_rollout: message.allow_rollout,
                    timeout_seconds: message.timeout_seconds,
                },
                &caller,
            )
            .await?;
        Ok(Response::new(AdoptionResult {
            plan: Some(to_message(plan)),
            done,
            kustomizations: kustomizations
                .into_iter()
                .map(|k| KustomizationHealth {
                    namespace: k.namespace,
                    name: k.name,
                    revision: k.revision,
                    ready_again: k.ready_again,
                    message: k.message,
                })
                .collect(),
        }))
    }
}
