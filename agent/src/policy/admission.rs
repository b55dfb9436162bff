//! Keeps the API server's own check of FluxInstances in step with the held policy: the
//! ValidatingAdmissionPolicy and binding rendered by `tenantflux_core::policy::admission`, server-side applied
//! when a policy is accepted or loaded at start, and re-rendered hourly so that an upgrade
//! deadline takes effect on its date. Once applied, they refuse a non-compliant FluxInstance
//! whether or not the agent runs.

use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use kube::{
    Api, Client,
    api::{Patch, PatchParams},
};
use serde_json::Value;
use tenantflux_core::{
    policy::{
        admission::{NAME, Rendered, render},
        today,
    },
    text::chain,
};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::store::Held;

/// How often the policy is re-rendered for the calendar (upgrade deadlines).
const RERENDER: Duration = Duration::from_secs(3600);
/// How soon a failed apply is retried.
const RETRY: Duration = Duration::from_secs(15);

#[derive(Debug, thiserror::Error)]
#[error("applying {kind} {NAME} (policy generation {generation})")]
pub struct ApplyError {
    kind: &'static str,
    generation: u64,
    #[source]
    source: Box<kube::Error>,
}

/// Applies the rendered policy for every policy the store holds, until the shutdown.
pub async fn run(client: Client, mut held: watch::Receiver<Held>, shutdown: CancellationToken) {
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(client);
    let mut applied: Option<Rendered> = None;
    loop {
        let accepted = held.borrow_and_update().accepted.clone();
        let mut wait = RERENDER;
        if let Some(accepted) = accepted {
            let rendered = render(&accepted.policy, today());
            if applied.as_ref() != Some(&rendered) {
                let generation = accepted.policy.generation();
                match apply(&policies, &bindings, &rendered, generation).await {
                    Ok(()) => {
                        tracing::info!(
                            generation,
                            "ValidatingAdmissionPolicy {NAME} applied: the API server enforces the policy"
                        );
                        applied = Some(rendered);
                    }
                    Err(err) => {
                        tracing::warn!(error = %chain(&err), "enforcing the policy in the API server");
                        wait = RETRY;
                    }
                }
            }
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(wait) => {}
            changed = held.changed() => if changed.is_err() { return },
        }
    }
}

async fn apply(
    policies: &Api<ValidatingAdmissionPolicy>,
    bindings: &Api<ValidatingAdmissionPolicyBinding>,
    rendered: &Rendered,
    generation: u64,
) -> Result<(), ApplyError> {
    let params = PatchParams::apply(tenantflux_core::FIELD_MANAGER).force();
    let error = |kind| {
        move |source| ApplyError {
            kind,
            generation,
            source: Box::new(source),
        }
    };
    // The policy first: a binding to a policy the server does not have yet enforces nothing.
    policies
        .patch(NAME, &params, &Patch::Apply::<&Value>(&rendered.policy))
        .await
        .map_err(error("ValidatingAdmissionPolicy"))?;
    bindings
        .patch(NAME, &params, &Patch::Apply::<&Value>(&rendered.binding))
        .await
        .map_err(error("ValidatingAdmissionPolicyBinding"))?;
    Ok(())
}
