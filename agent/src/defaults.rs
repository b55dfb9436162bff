//! Creates the tenant's FluxInstance from the held policy's `spec.defaults` when the cluster has
//! none, once. What happened is recorded in ConfigMap `tenantflux-defaults` in the agent's
//! namespace; while that record exists the agent never creates or touches the FluxInstance
//! again: not after the tenant edits or deletes it, not for a later policy with other defaults.
//! The record is a ConfigMap of its own (not an annotation on `tenantflux-policy`) because the
//! policy store re-applies that ConfigMap with the same field manager, which would drop it.

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::{
    Api, Client,
    api::{DynamicObject, Patch, PatchParams},
};
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::{
    policy::Policy,
    policy_service::{Held, chain},
    shutdown::Shutdown,
    status::{INSTANCE_NAME, flux_instance_resource},
};

/// The ConfigMap that records that the defaults were dealt with.
pub const RECORD_NAME: &str = "tenantflux-defaults";
/// How soon a failed attempt is retried (e.g. flux-operator's CRD is not installed yet).
const RETRY: Duration = Duration::from_secs(15);

/// What to do about the defaults now.
#[derive(Debug, PartialEq)]
pub enum Decision<'a> {
    /// Nothing: no defaults held, or they were dealt with already.
    Nothing,
    /// Create FluxInstance `flux` with this spec, then record it.
    Create { generation: u64, spec: &'a Value },
    /// A FluxInstance exists already: the tenant owns it; record that defaults are never needed.
    RecordExisting { generation: u64 },
}

/// Decides, from the held policy, whether FluxInstance `flux` exists, and whether the record
/// exists, what to do about the policy's defaults.
pub fn decide(policy: Option<&Policy>, instance_present: bool, recorded: bool) -> Decision<'_> {
    let Some((policy, spec)) = policy.and_then(|p| p.defaults().map(|d| (p, d))) else {
        return Decision::Nothing;
    };
    if recorded {
        return Decision::Nothing;
    }
    let generation = policy.generation();
    if instance_present {
        Decision::RecordExisting { generation }
    } else {
        Decision::Create { generation, spec }
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
    agent_namespace: String,
    operator_namespace: String,
}

impl Defaults {
    /// One attempt; `Ok(true)` once the defaults are dealt with for good.
    async fn step(&self, policy: &Policy) -> Result<bool, DefaultsError> {
        let recorded = self
            .records
            .get_opt(RECORD_NAME)
            .await
            .map_err(|source| DefaultsError::ReadRecord {
                namespace: self.agent_namespace.clone(),
                source: Box::new(source),
            })?
            .is_some();
        // Only read the instance when it matters (the agent may lack flux-operator's CRD).
        let instance_present = !recorded
            && self
                .instances
                .get_opt(INSTANCE_NAME)
                .await
                .map_err(|source| DefaultsError::ReadInstance {
                    namespace: self.operator_namespace.clone(),
                    source: Box::new(source),
                })?
                .is_some();
        match decide(Some(policy), instance_present, recorded) {
            Decision::Nothing => Ok(recorded),
            Decision::RecordExisting { generation } => {
                tracing::info!(
                    generation,
                    "a FluxInstance exists: the policy's defaults are not needed"
                );
                self.record(generation, "existed").await?;
                Ok(true)
            }
            Decision::Create { generation, spec } => {
                let instance = json!({
                    "apiVersion": "fluxcd.controlplane.io/v1",
                    "kind": "FluxInstance",
                    "metadata": {"name": INSTANCE_NAME, "namespace": self.operator_namespace},
                    "spec": spec,
                });
                // Created first, recorded second: if recording fails, the next attempt finds
                // the instance and records it without touching it.
                self.instances
                    .patch(
                        INSTANCE_NAME,
                        &PatchParams::apply(crate::FIELD_MANAGER),
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
                self.record(generation, "created").await?;
                Ok(true)
            }
        }
    }

    async fn record(&self, generation: u64, outcome: &str) -> Result<(), DefaultsError> {
        let body = json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": RECORD_NAME,
                "labels": {"app.kubernetes.io/managed-by": crate::FIELD_MANAGER},
            },
            "data": {
                "policyGeneration": generation.to_string(),
                "outcome": outcome,
            },
        });
        self.records
            .patch(
                RECORD_NAME,
                &PatchParams::apply(crate::FIELD_MANAGER).force(),
                &Patch::Apply(&body),
            )
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
    mut held: watch::Receiver<Held>,
    shutdown: Shutdown,
) {
    let defaults = Defaults {
        records: Api::namespaced(client.clone(), agent_namespace),
        instances: Api::namespaced_with(client, operator_namespace, &flux_instance_resource()),
        agent_namespace: agent_namespace.to_owned(),
        operator_namespace: operator_namespace.to_owned(),
    };
    loop {
        let policy = held
            .borrow_and_update()
            .accepted
            .as_ref()
            .map(|a| a.policy.clone());
        let mut retry = false;
        if let Some(policy) = policy.filter(|p| p.defaults().is_some()) {
            match defaults.step(&policy).await {
                Ok(true) => return,
                Ok(false) => {}
                Err(err) => {
                    tracing::warn!(error = %chain(&err), "applying the policy's defaults");
                    retry = true;
                }
            }
        }
        tokio::select! {
            () = shutdown.wait() => return,
            () = tokio::time::sleep(RETRY), if retry => {}
            changed = held.changed() => if changed.is_err() { return },
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
            decide(Some(&with), false, false),
            Decision::Create {
                generation: 3,
                spec
            }
        );
        assert_eq!(
            decide(Some(&with), true, false),
            Decision::RecordExisting { generation: 3 }
        );
        // Recorded: never again, whether the tenant deleted the instance or kept it.
        assert_eq!(decide(Some(&with), false, true), Decision::Nothing);
        assert_eq!(decide(Some(&with), true, true), Decision::Nothing);
    }

    #[test]
    fn no_policy_or_no_defaults_does_nothing() {
        let without = policy(3, "");
        for (present, recorded) in [(false, false), (true, false), (false, true)] {
            assert_eq!(decide(None, present, recorded), Decision::Nothing);
            assert_eq!(decide(Some(&without), present, recorded), Decision::Nothing);
        }
    }
}
