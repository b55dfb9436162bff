//! The `tenantflux.v1.Adopt` service: a plan of the Flux that runs and its adoption, each call
//! authorized with SubjectAccessReview on the FluxInstance it concerns.

use std::{collections::BTreeMap, sync::Arc};

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
        marks: p.marks.clone(),
        hidden: p.hidden.clone(),
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

/// What the caller may read, asked once per permission (SubjectAccessReview); an answer that
/// could not be had counts as no.
struct Reader<'a> {
    authorizer: &'a Authorizer,
    metadata: &'a tonic::metadata::MetadataMap,
    asked: BTreeMap<(String, String, String, String), bool>,
}

impl<'a> Reader<'a> {
    fn new(authorizer: &'a Authorizer, metadata: &'a tonic::metadata::MetadataMap) -> Self {
        Self {
            authorizer,
            metadata,
            asked: BTreeMap::new(),
        }
    }

    async fn may(&mut self, verb: &str, group: &str, resource: &str, namespace: &str) -> bool {
        let key = (
            verb.to_owned(),
            group.to_owned(),
            resource.to_owned(),
            namespace.to_owned(),
        );
        if let Some(answer) = self.asked.get(&key) {
            return *answer;
        }
        let permission = Permission {
            verb: verb.into(),
            group: group.into(),
            resource: resource.into(),
            subresource: None,
            namespace: (!namespace.is_empty()).then(|| namespace.to_owned()),
            name: None,
        };
        let answer = self
            .authorizer
            .authorize(self.metadata, &permission)
            .await
            .is_ok();
        self.asked.insert(key, answer);
        answer
    }

    /// Keeps what `visible` allows of `items`, counting the rest per namespace in `hidden`.
    async fn keep<T>(
        &mut self,
        items: Vec<T>,
        what: &str,
        (group, resource): (&str, &str),
        namespace_of: impl Fn(&T) -> String,
        hidden: &mut Vec<String>,
    ) -> Vec<T> {
        let mut kept = Vec::new();
        let mut counted: BTreeMap<String, usize> = BTreeMap::new();
        for item in items {
            let namespace = namespace_of(&item);
            if self.may("get", group, resource, &namespace).await {
                kept.push(item);
            } else {
                *counted.entry(namespace).or_default() += 1;
            }
        }
        for (namespace, n) in counted {
            hidden.push(format!(
                "{n} {what}(s) in {namespace}: you may not get {resource} there"
            ));
        }
        kept
    }
}

/// The facts a plan for this caller is made from: the Kustomizations that apply Flux's
/// controllers only if the caller may read Kustomizations there, and the objects of Helm's
/// releases only if they may read the records (list Secrets).
async fn visible_facts(
    reader: &mut Reader<'_>,
    mut facts: plan::Facts,
    hidden: &mut Vec<String>,
) -> plan::Facts {
    let appliers = std::mem::take(&mut facts.appliers);
    facts.appliers = reader
        .keep(
            appliers,
            "Kustomization",
            (tenantflux_core::kinds::KUSTOMIZE, "kustomizations"),
            |k: &String| {
                k.split_once('/')
                    .map(|(ns, _)| ns.to_owned())
                    .unwrap_or_default()
            },
            hidden,
        )
        .await;
    let records_namespace = facts
        .instances
        .first()
        .or(facts.operators.first())
        .map(|f| f.namespace.clone());
    if let Some(namespace) = records_namespace
        && !reader.may("list", "", "secrets", &namespace).await
    {
        let marks = std::mem::take(&mut facts.marks);
        if !marks.objects.is_empty() {
            hidden.push(format!(
                "the {} object(s) of Helm's releases and their records in {namespace}: you may not list secrets there",
                marks.objects.len()
            ));
        }
        if let Ok(records) = &mut facts.helm_records
            && !records.is_empty()
        {
            hidden.push(format!(
                "{} Helm release record(s) in {namespace}: you may not list secrets there",
                records.len()
            ));
            records.clear();
        }
    }
    facts
}

/// The plan with only what the caller may read of what runs (each object by `get` on its
/// kind in its namespace), the rest counted in `hidden`.
async fn visible_plan(
    reader: &mut Reader<'_>,
    mut plan: plan::AdoptionPlan,
    mut hidden: Vec<String>,
) -> plan::AdoptionPlan {
    let namespace = |f: &plan::Found| f.namespace.clone();
    let apps = ("apps", "deployments");
    plan.operators = reader
        .keep(
            std::mem::take(&mut plan.operators),
            "Deployment",
            apps,
            namespace,
            &mut hidden,
        )
        .await;
    plan.controllers = reader
        .keep(
            std::mem::take(&mut plan.controllers),
            "Deployment",
            apps,
            namespace,
            &mut hidden,
        )
        .await;
    plan.ignored = reader
        .keep(
            std::mem::take(&mut plan.ignored),
            "Deployment",
            apps,
            namespace,
            &mut hidden,
        )
        .await;
    plan.instances = reader
        .keep(
            std::mem::take(&mut plan.instances),
            "FluxInstance",
            (OPERATOR_GROUP, INSTANCE_PLURAL),
            namespace,
            &mut hidden,
        )
        .await;
    plan.hidden = hidden;
    plan
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
        let mut reader = Reader::new(&self.authorizer, request.metadata());
        let mut hidden = Vec::new();
        let facts = visible_facts(&mut reader, facts, &mut hidden).await;
        let plan = visible_plan(&mut reader, self.adopter.plan(&facts), hidden).await;
        Ok(Response::new(to_message(plan)))
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
        crate::adopt::apply_timeout(message.timeout_seconds)
            .map_err(tonic::Status::invalid_argument)?;
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
