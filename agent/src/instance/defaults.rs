//! Creates the tenant's FluxInstance from the held policy's `spec.defaults` when the cluster has
//! none, once. What happened is recorded in ConfigMap `tenantflux-defaults` in the agent's
//! namespace; while that record exists the agent never creates or touches the FluxInstance
//! again: not after the tenant edits or deletes it, not for a later policy with other defaults.
//! The record is a ConfigMap of its own (not an annotation on `tenantflux-policy`) because the
//! policy store re-applies that ConfigMap with the same field manager, which would drop it.

use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::{apps::v1::Deployment, core::v1::ConfigMap};
use kube::{
    Api, Client,
    api::{DynamicObject, ListParams, Patch, PatchParams},
};
use serde_json::{Value, json};
use tenantflux_core::{
    flux::{INSTANCE_API_VERSION, INSTANCE_KIND, INSTANCE_NAME, KNOWN_COMPONENTS},
    policy::Policy,
    text::chain,
};
use tokio::sync::watch;
use tokio_stream::wrappers::WatchStream;
use tokio_util::sync::CancellationToken;

use crate::{
    flux_instance_resource,
    policy::store::Held,
    reconcile::{Next, Retry, Wake},
};

/// The ConfigMap that records that the defaults were dealt with.
pub const RECORD_NAME: &str = "tenantflux-defaults";
/// What the agent logs once the defaults are dealt with for good (tests wait for it).
pub const DEALT_WITH: &str = "the policy defaults are dealt with for good";
/// How soon a failed attempt is retried (e.g. flux-operator's CRD is not installed yet).
const RETRY: Duration = Duration::from_secs(15);

/// What the record says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recorded {
    /// No record: the defaults were never dealt with.
    No,
    /// `outcome: creating`: the agent was creating the instance from generation N's defaults
    /// and may have stopped before it recorded the result.
    Creating { generation: u64 },
    /// `created` or `existed`: dealt with for good.
    Done,
}

impl Recorded {
    fn from_config_map(map: Option<&ConfigMap>) -> Self {
        let Some(data) = map.map(|m| m.data.clone().unwrap_or_default()) else {
            return Self::No;
        };
        match data.get("outcome").map(String::as_str) {
            Some(CREATING) => Self::Creating {
                generation: data
                    .get("policyGeneration")
                    .and_then(|g| g.parse().ok())
                    .unwrap_or_default(),
            },
            _ => Self::Done,
        }
    }
}

/// The record's outcome while the create is under way.
const CREATING: &str = "creating";

/// What to do about the defaults now.
#[derive(Debug, PartialEq)]
pub enum Decision<'a> {
    /// Nothing: no defaults held, or they were dealt with already.
    Nothing,
    /// Record `creating`, create FluxInstance `flux` with this spec, then record `created`.
    Create { generation: u64, spec: &'a Value },
    /// A FluxInstance exists already: the tenant owns it; record that defaults are never needed.
    RecordExisting { generation: u64 },
    /// No FluxInstance, but Flux's controllers run (`flux install`): that Flux is the tenant's,
    /// and defaults rendered over it could change what runs; record that they are never
    /// needed (`kubectl tenantflux adopt` creates the instance that matches it).
    RecordFluxRunning { generation: u64 },
    /// A create was under way when the agent stopped, and the instance is there: record it as
    /// created, as an uninterrupted create would have.
    RecordCreated { generation: u64 },
}

/// What runs of Flux, as far as the defaults care.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Present {
    /// FluxInstance `flux` exists.
    Instance,
    /// No FluxInstance, but Flux's controllers run (`flux install`).
    Controllers,
    Nothing,
}

/// Decides, from the held policy, what of Flux runs, and what the record says, what to do
/// about the policy's defaults.
pub fn decide(policy: Option<&Policy>, present: Present, recorded: Recorded) -> Decision<'_> {
    let Some((policy, spec)) = policy.and_then(|p| p.defaults().map(|d| (p, d))) else {
        return Decision::Nothing;
    };
    let generation = policy.generation();
    match (recorded, present) {
        (Recorded::Done, _) => Decision::Nothing,
        (Recorded::Creating { generation }, Present::Instance) => {
            Decision::RecordCreated { generation }
        }
        (Recorded::No, Present::Instance) => Decision::RecordExisting { generation },
        (Recorded::No, Present::Controllers) => Decision::RecordFluxRunning { generation },
        // Our own create was cut short: the controllers may be the ones it rendered.
        (Recorded::Creating { .. }, Present::Controllers | Present::Nothing)
        | (Recorded::No, Present::Nothing) => Decision::Create { generation, spec },
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DefaultsError {
    #[error("reading ConfigMap {namespace}/{RECORD_NAME}")]
    ReadRecord {
        namespace: String,
        #[source]
        source: Box<kube::Error>,
    },
    #[error("writing ConfigMap {namespace}/{RECORD_NAME}")]
    WriteRecord {
        namespace: String,
        #[source]
        source: Box<kube::Error>,
    },
    #[error("reading FluxInstance {namespace}/{INSTANCE_NAME}")]
    ReadInstance {
        namespace: String,
        #[source]
        source: Box<kube::Error>,
    },
    #[error("looking for Flux's controller Deployments")]
    ReadControllers {
        #[source]
        source: Box<kube::Error>,
    },
    #[error(
        "creating FluxInstance {namespace}/{INSTANCE_NAME} from the defaults of policy generation {generation} (is flux-operator installed?)"
    )]
    Create {
        namespace: String,
        generation: u64,
        #[source]
        source: Box<kube::Error>,
    },
}

struct Defaults {
    records: Api<ConfigMap>,
    instances: Api<DynamicObject>,
    /// Deployments in every namespace, read by name (Flux's controllers).
    deployments: Api<Deployment>,
    agent_namespace: String,
    operator_namespace: String,
}

impl Defaults {
    /// One attempt; `Ok(true)` once the defaults are dealt with for good.
    async fn step(&self, policy: &Policy) -> Result<bool, DefaultsError> {
        let recorded = Recorded::from_config_map(
            self.records
                .get_opt(RECORD_NAME)
                .await
                .map_err(|source| DefaultsError::ReadRecord {
                    namespace: self.agent_namespace.clone(),
                    source: Box::new(source),
                })?
                .as_ref(),
        );
        // Only read the instance when it matters (the agent may lack flux-operator's CRD).
        let instance_present = recorded != Recorded::Done
            && self
                .instances
                .get_opt(INSTANCE_NAME)
                .await
                .map_err(|source| DefaultsError::ReadInstance {
                    namespace: self.operator_namespace.clone(),
                    source: Box::new(source),
                })?
                .is_some();
        let present = if instance_present {
            Present::Instance
        } else if recorded == Recorded::No && self.controllers_run().await? {
            Present::Controllers
        } else {
            Present::Nothing
        };
        match decide(Some(policy), present, recorded) {
            Decision::Nothing => Ok(recorded == Recorded::Done),
            Decision::RecordCreated { generation } => {
                tracing::info!(
                    generation,
                    "FluxInstance {INSTANCE_NAME} was created from the policy's defaults before the agent stopped: recording it"
                );
                self.record(generation, "created").await?;
                Ok(true)
            }
            Decision::RecordExisting { generation } => {
                tracing::info!(
                    generation,
                    "a FluxInstance exists: the policy's defaults are not needed"
                );
                self.record(generation, "existed").await?;
                Ok(true)
            }
            Decision::RecordFluxRunning { generation } => {
                tracing::info!(
                    generation,
                    "Flux's controllers run without a FluxInstance: the policy's defaults are not applied over them; `kubectl tenantflux adopt plan` shows the FluxInstance that matches them"
                );
                self.record(generation, "flux-without-instance").await?;
                Ok(true)
            }
            Decision::Create { generation, spec } => {
                let instance = json!({
                    "apiVersion": INSTANCE_API_VERSION,
                    "kind": INSTANCE_KIND,
                    "metadata": {"name": INSTANCE_NAME, "namespace": self.operator_namespace},
                    "spec": spec,
                });
                // Recorded as under way first, so that an agent stopped right after the
                // create (kill -9, a node lost) records `created` when it starts again, as if
                // it had not stopped; then created, then recorded as done.
                self.record(generation, CREATING).await?;
                crate::failpoint("defaults-recorded-creating").await;
                tracing::debug!(
                    generation,
                    "creating FluxInstance {INSTANCE_NAME} from the policy's defaults"
                );
                self.instances
                    .patch(
                        INSTANCE_NAME,
                        &PatchParams::apply(tenantflux_core::FIELD_MANAGER),
                        &Patch::Apply(&instance),
                    )
                    .await
                    .map_err(|source| DefaultsError::Create {
                        namespace: self.operator_namespace.clone(),
                        generation,
                        source: Box::new(source),
                    })?;
                tracing::info!(
                    generation,
                    namespace = self.operator_namespace,
                    "created FluxInstance {INSTANCE_NAME} from the policy's defaults"
                );
                crate::failpoint("defaults-created").await;
                self.record(generation, "created").await?;
                Ok(true)
            }
        }
    }

    /// Whether any of Flux's controller Deployments exists, in any namespace (listed by name:
    /// the agent's RBAC names them).
    async fn controllers_run(&self) -> Result<bool, DefaultsError> {
        for name in KNOWN_COMPONENTS {
            let list = self
                .deployments
                .list_metadata(
                    &ListParams::default()
                        .fields(&format!("metadata.name={name}"))
                        .limit(1),
                )
                .await
                .map_err(|source| DefaultsError::ReadControllers {
                    source: Box::new(source),
                })?;
            if !list.items.is_empty() {
                return Ok(true);
            }
        }
        Ok(false)
    }

    async fn record(&self, generation: u64, outcome: &str) -> Result<(), DefaultsError> {
        let data = [
            ("policyGeneration".to_owned(), generation.to_string()),
            ("outcome".to_owned(), outcome.to_owned()),
        ]
        .into();
        crate::apply_record(&self.records, RECORD_NAME, data)
            .await
            .map(drop)
            .map_err(|source| DefaultsError::WriteRecord {
                namespace: self.agent_namespace.clone(),
                source: Box::new(source),
            })
    }
}

/// Deals with the defaults of every policy the store holds until they are dealt with once (or
/// the shutdown).
pub async fn run(
    client: Client,
    agent_namespace: &str,
    operator_namespace: &str,
    held: watch::Receiver<Held>,
    shutdown: CancellationToken,
) {
    let defaults = Defaults {
        records: Api::namespaced(client.clone(), agent_namespace),
        // The operator namespace only: a Deployment named like a Flux controller elsewhere may
        // be a namespace admin's decoy, which must not stop the defaults for good.
        deployments: Api::namespaced(client.clone(), operator_namespace),
        instances: Api::namespaced_with(client, operator_namespace, &flux_instance_resource()),
        agent_namespace: agent_namespace.to_owned(),
        operator_namespace: operator_namespace.to_owned(),
    };
    let changes = WatchStream::from_changes(held.clone()).map(drop);
    let keeper = Keeper { defaults, held };
    crate::reconcile::run(keeper, changes, &shutdown).await;
}

/// The defaults loop: the policy held, dealt with at each change until it is dealt with once.
struct Keeper {
    defaults: Defaults,
    held: watch::Receiver<Held>,
}

impl crate::reconcile::Pass for Keeper {
    type Event = ();

    async fn pass(&mut self, _: Wake<()>) -> Next {
        let policy = self
            .held
            .borrow_and_update()
            .accepted
            .as_ref()
            .map(|a| a.policy.clone());
        let Some(policy) = policy.filter(|p| p.defaults().is_some()) else {
            return Next::Idle;
        };
        match self.defaults.step(&policy).await {
            Ok(true) => {
                tracing::info!(
                    generation = policy.generation(),
                    "{DEALT_WITH}: the agent creates no FluxInstance from any policy again"
                );
                Next::Stop
            }
            Ok(false) => Next::Idle,
            Err(err) => {
                tracing::warn!(error = %chain(&err), "applying the policy's defaults");
                Next::Retry(Retry::every(RETRY))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(generation: u64, defaults: &str) -> Policy {
        Policy::parse(&format!(
            "apiVersion: tenantflux.io/v1alpha1\nkind: Policy\nmetadata: {{name: p}}\n\
             spec:\n  generation: {generation}\n{defaults}"
        ))
        .unwrap()
    }

    #[test]
    fn defaults_create_an_instance_only_when_none_exists_and_nothing_is_recorded() {
        let with = policy(3, "  defaults: {distribution: {version: 2.9.x}}\n");
        let spec = with.defaults().unwrap();
        assert_eq!(
            decide(Some(&with), Present::Nothing, Recorded::No),
            Decision::Create {
                generation: 3,
                spec
            }
        );
        assert_eq!(
            decide(Some(&with), Present::Instance, Recorded::No),
            Decision::RecordExisting { generation: 3 }
        );
        // Recorded: never again, whether the tenant deleted the instance or kept it.
        assert_eq!(
            decide(Some(&with), Present::Nothing, Recorded::Done),
            Decision::Nothing
        );
        assert_eq!(
            decide(Some(&with), Present::Instance, Recorded::Done),
            Decision::Nothing
        );
    }

    #[test]
    fn defaults_are_never_rendered_over_controllers_that_run_without_an_instance() {
        let with = policy(5, "  defaults: {distribution: {version: 2.9.x}}\n");
        assert_eq!(
            decide(Some(&with), Present::Controllers, Recorded::No),
            Decision::RecordFluxRunning { generation: 5 }
        );
        // The agent's own create cut short may have left the controllers it rendered.
        assert!(matches!(
            decide(
                Some(&with),
                Present::Controllers,
                Recorded::Creating { generation: 4 }
            ),
            Decision::Create { generation: 5, .. }
        ));
    }

    #[test]
    fn a_create_cut_short_is_finished_as_if_uninterrupted() {
        let with = policy(4, "  defaults: {distribution: {version: 2.9.x}}\n");
        let creating = Recorded::Creating { generation: 3 };
        // The instance was created before the agent stopped: it is recorded as created, from
        // the generation whose defaults made it.
        assert_eq!(
            decide(Some(&with), Present::Instance, creating),
            Decision::RecordCreated { generation: 3 }
        );
        // It was not: create it now.
        assert_eq!(
            decide(Some(&with), Present::Nothing, creating),
            Decision::Create {
                generation: 4,
                spec: with.defaults().unwrap()
            }
        );
    }

    #[test]
    fn the_record_reads_as_under_way_only_while_creating() {
        let map = |outcome: &str| {
            serde_json::from_value::<ConfigMap>(json!({
                "metadata": {"name": RECORD_NAME},
                "data": {"outcome": outcome, "policyGeneration": "7"},
            }))
            .unwrap()
        };
        assert_eq!(Recorded::from_config_map(None), Recorded::No);
        assert_eq!(
            Recorded::from_config_map(Some(&map("creating"))),
            Recorded::Creating { generation: 7 }
        );
        assert_eq!(
            Recorded::from_config_map(Some(&map("created"))),
            Recorded::Done
        );
        assert_eq!(
            Recorded::from_config_map(Some(&map("existed"))),
            Recorded::Done
        );
    }

    #[test]
    fn no_policy_or_no_defaults_does_nothing() {
        let without = policy(3, "");
        for (present, recorded) in [
            (Present::Nothing, Recorded::No),
            (Present::Instance, Recorded::No),
            (Present::Controllers, Recorded::No),
            (Present::Nothing, Recorded::Done),
            (Present::Instance, Recorded::Creating { generation: 3 }),
        ] {
            assert_eq!(decide(None, present, recorded), Decision::Nothing);
            assert_eq!(decide(Some(&without), present, recorded), Decision::Nothing);
        }
    }
}
