//! The `tenantflux.v1.Upgrade` service: every call authorized with SubjectAccessReview against
//! what it reads or changes.

use std::{collections::BTreeSet, pin::Pin, sync::Arc};

use futures::{Stream, StreamExt};
use tenantflux_core::{
    flux::{INSTANCE_PLURAL, OPERATOR_GROUP},
    kinds::{KINDS, KUSTOMIZE},
    text::chain,
};
use tenantflux_proto::v1::{
    ApplyUpgradeRequest, GetUpgradeRequest, PlanUpgradeRequest, UpgradePlan, UpgradeState,
    upgrade_server,
};

use crate::upgrade::ApplyOptions;
use tokio_stream::wrappers::WatchStream;
use tonic::{Request, Response, metadata::MetadataMap};

use super::auth::{AuthError, Authorizer, Permission};
use crate::upgrade::{StartError, StepError, Upgrader, plan};

/// A failed read or write of the agent's: the agent's own RBAC refusing it will not pass by
/// retrying, anything else may.
impl From<StepError> for tonic::Status {
    fn from(err: StepError) -> Self {
        if err.is_forbidden() {
            tonic::Status::failed_precondition(format!(
                "{}; the agent's RBAC lacks it (see deploy/manifests/agent-rbac.yaml)",
                chain(&err)
            ))
        } else {
            tonic::Status::unavailable(chain(&err))
        }
    }
}

impl From<StartError> for tonic::Status {
    fn from(err: StartError) -> Self {
        match err {
            StartError::Busy { .. } | StartError::Blocked { .. } => {
                tonic::Status::failed_precondition(err.to_string())
            }
            StartError::Step(err) => err.into(),
        }
    }
}

fn apply_options(request: ApplyUpgradeRequest) -> ApplyOptions {
    ApplyOptions {
        to: request.to,
        concurrency: request.concurrency,
        timeout_seconds: request.timeout_seconds,
    }
}

pub struct UpgradeService {
    upgrader: Arc<Upgrader>,
    authorizer: Arc<Authorizer>,
}

impl UpgradeService {
    pub fn new(upgrader: Arc<Upgrader>, authorizer: Arc<Authorizer>) -> Self {
        Self {
            upgrader,
            authorizer,
        }
    }

    /// The plan as the caller may read it: objects in namespaces where the caller may not list
    /// their kind are counted, not named (the agent reads the whole cluster for it).
    async fn plan(
        &self,
        metadata: &MetadataMap,
        to: &str,
    ) -> Result<plan::UpgradePlan, tonic::Status> {
        let to = target(to)?;
        let facts = self.upgrader.facts().await?;
        let mut seen: BTreeSet<(String, String, String)> = BTreeSet::new();
        for entry in &facts.inventory {
            let o = &entry.object;
            seen.insert((o.group.clone(), o.kind.clone(), o.namespace.clone()));
            let namespace = entry.kustomization.split('/').next().unwrap_or_default();
            seen.insert((KUSTOMIZE.into(), "Kustomization".into(), namespace.into()));
        }
        for entry in &facts.managed {
            let o = &entry.object;
            seen.insert((o.group.clone(), o.kind.clone(), o.namespace.clone()));
        }
        // A kind outside the table has no resource to ask about: it stays hidden.
        let asked: Vec<(&(String, String, String), Permission)> = seen
            .iter()
            .filter_map(|key @ (group, kind, namespace)| {
                let flux = KINDS.iter().find(|k| k.group == group && k.kind == kind)?;
                Some((
                    key,
                    super::workloads::permission("list", flux, Some(namespace)),
                ))
            })
            .collect();
        let permissions: Vec<Permission> = asked.iter().map(|(_, p)| p.clone()).collect();
        let decisions = self
            .authorizer
            .authorize_each(metadata, &permissions)
            .await?;
        let mut visible = BTreeSet::new();
        for ((key, _), decision) in asked.into_iter().zip(decisions) {
            match decision {
                Ok(()) => {
                    visible.insert(key.clone());
                }
                Err(AuthError::Denied { .. }) => {}
                Err(err) => return Err(err.into()),
            }
        }
        let sees = |group: &str, kind: &str, namespace: &str| {
            visible.contains(&(group.to_owned(), kind.to_owned(), namespace.to_owned()))
        };
        Ok(self.upgrader.plan(to, &facts, &sees))
    }

    fn instance(&self, verb: &str) -> Permission {
        Permission {
            verb: verb.into(),
            group: OPERATOR_GROUP.into(),
            resource: INSTANCE_PLURAL.into(),
            subresource: None,
            namespace: Some(self.upgrader.operator_namespace().to_owned()),
            name: None,
        }
    }
}

type StateStream = Pin<Box<dyn Stream<Item = Result<UpgradeState, tonic::Status>> + Send>>;

fn current(upgrader: &Upgrader) -> UpgradeState {
    upgrader
        .subscribe()
        .borrow()
        .as_ref()
        .map(UpgradeState::from)
        .unwrap_or_default()
}

/// The longest `to` a plan takes: `>=2.10.0 <2.11.0` is 17 characters. The plan echoes it
/// (`requested`), so a megabyte of it would come back in the answer.
const MAX_TARGET: usize = 64;

fn target(to: &str) -> Result<&str, tonic::Status> {
    if to.len() > MAX_TARGET {
        return Err(tonic::Status::invalid_argument(format!(
            "to {} is longer than {MAX_TARGET} bytes: give a Flux version or range, e.g. 2.9.x",
            tenantflux_core::text::quote(to)
        )));
    }
    Ok(to)
}

#[tonic::async_trait]
impl upgrade_server::Upgrade for UpgradeService {
    async fn plan_upgrade(
        &self,
        request: Request<PlanUpgradeRequest>,
    ) -> Result<Response<UpgradePlan>, tonic::Status> {
        self.authorizer
            .authorize(request.metadata(), &self.instance("get"))
            .await?;
        let plan = self.plan(request.metadata(), &request.get_ref().to).await?;
        Ok(Response::new(plan.into()))
    }

    async fn apply_upgrade(
        &self,
        request: Request<ApplyUpgradeRequest>,
    ) -> Result<Response<UpgradeState>, tonic::Status> {
        let user = self
            .authorizer
            .authorize(request.metadata(), &self.instance("patch"))
            .await?;
        // The migration writes objects and CRD status for the caller: they must be allowed to.
        let plan = self.plan(request.metadata(), &request.get_ref().to).await?;
        for migration in &plan.migrations {
            let (plural, group) = migration
                .crd
                .split_once('.')
                .unwrap_or((migration.crd.as_str(), ""));
            let permission = Permission {
                verb: "patch".into(),
                group: group.into(),
                resource: plural.into(),
                subresource: None,
                namespace: None,
                name: None,
            };
            self.authorizer
                .authorize(request.metadata(), &permission)
                .await?;
        }
        if !plan.migrations.is_empty() {
            let permission = Permission {
                verb: "patch".into(),
                group: "apiextensions.k8s.io".into(),
                resource: "customresourcedefinitions".into(),
                subresource: Some("status".into()),
                namespace: None,
                name: None,
            };
            self.authorizer
                .authorize(request.metadata(), &permission)
                .await?;
        }
        let record = self
            .upgrader
            .start(apply_options(request.into_inner()), plan, &user.username)
            .await?;
        Ok(Response::new(UpgradeState::from(&record)))
    }

    async fn get_upgrade(
        &self,
        request: Request<GetUpgradeRequest>,
    ) -> Result<Response<UpgradeState>, tonic::Status> {
        self.authorizer
            .authorize(request.metadata(), &self.instance("get"))
            .await?;
        self.upgrader.wait_loaded().await;
        Ok(Response::new(current(&self.upgrader)))
    }

    type WatchUpgradeStream = StateStream;

    async fn watch_upgrade(
        &self,
        request: Request<GetUpgradeRequest>,
    ) -> Result<Response<Self::WatchUpgradeStream>, tonic::Status> {
        self.authorizer
            .authorize(request.metadata(), &self.instance("get"))
            .await?;
        self.upgrader.wait_loaded().await;
        let shutdown = self.upgrader.shutdown().clone();
        // Up to and including the first finished state; the agent's shutdown ends it too.
        let stream = WatchStream::new(self.upgrader.subscribe())
            .map(|r| {
                let finished = r.as_ref().is_none_or(|r| r.phase.finished());
                (
                    r.as_ref().map(UpgradeState::from).unwrap_or_default(),
                    finished,
                )
            })
            .scan(false, |ended, (state, finished)| {
                let out = (!*ended).then_some(state);
                *ended = finished;
                futures::future::ready(out)
            })
            .map(Ok)
            .take_until(async move { shutdown.cancelled().await });
        Ok(Response::new(self.authorizer.guard(
            request.metadata(),
            vec![self.instance("get")],
            Box::pin(stream),
        )))
    }
}
