//! The policy the agent holds: verified against the installed key, stored in the cluster
//! (ConfigMap `tenantflux-policy` in the agent's namespace) so it survives restarts, re-verified
//! at start, and watched, so that an edit to the stored copy is detected, reported, and undone
//! from the last verified policy held in memory. `server::policy` serves it over gRPC.

use std::{sync::Arc, time::SystemTime};

use ed25519_dalek::VerifyingKey;
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{
    Api, Client,
    runtime::{WatchStreamExt, watcher},
};
use tenantflux_core::{
    policy::{
        Policy,
        signing::{SignedError, SignedPolicy, key_id},
    },
    text::chain,
};
use tenantflux_proto::v1::{PolicyState, PushPolicyResponse};
use tokio::sync::{Mutex, watch};
use tokio_util::sync::CancellationToken;

/// The ConfigMap that holds the accepted signed policy.
pub const STORE_NAME: &str = "tenantflux-policy";
/// Its key: the SignedPolicy envelope, exactly as pushed.
pub const STORE_KEY: &str = "signed-policy.yaml";

/// The policy in force, and what is wrong with its stored copy.
#[derive(Clone, Debug, Default)]
pub struct Held {
    pub accepted: Option<Accepted>,
    pub problems: Vec<String>,
}

#[derive(Clone, Debug)]
pub struct Accepted {
    pub signed: SignedPolicy,
    pub policy: Arc<Policy>,
    pub accepted_at: SystemTime,
}

/// Why a pushed policy was not accepted; the held policy stays in force.
#[derive(Debug, thiserror::Error)]
pub enum PushError {
    #[error(
        "this agent was installed without a policy key (--policy-public-key, Helm value policy.publicKey), so it accepts no policy"
    )]
    NoKey,
    #[error(transparent)]
    Invalid(SignedError),
    #[error(transparent)]
    Untrusted(SignedError),
    #[error(
        "stale generation {new} ≤ {old}: the agent holds {held}; sign the change as generation {} or higher",
        old + 1
    )]
    Stale { new: u64, old: u64, held: String },
    #[error(transparent)]
    Store(StoreError),
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("reading ConfigMap {namespace}/{STORE_NAME}")]
    Read {
        namespace: String,
        #[source]
        source: Box<kube::Error>,
    },
    #[error("writing ConfigMap {namespace}/{STORE_NAME}")]
    Write {
        namespace: String,
        #[source]
        source: Box<kube::Error>,
    },
}

/// Holds the policy; shared by the gRPC service and the watcher of the stored copy.
pub struct PolicyStore {
    key: Option<VerifyingKey>,
    configmaps: Api<ConfigMap>,
    namespace: String,
    held: watch::Sender<Held>,
    /// Pushes are decided one at a time, so two generations cannot both pass the check.
    push: Mutex<()>,
}

impl PolicyStore {
    pub fn new(client: Client, namespace: &str, key: Option<VerifyingKey>) -> Arc<Self> {
        Arc::new(Self {
            key,
            configmaps: Api::namespaced(client, namespace),
            namespace: namespace.to_owned(),
            held: watch::Sender::new(Held::default()),
            push: Mutex::new(()),
        })
    }

    /// The agent's namespace, where the policy is stored.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    pub fn subscribe(&self) -> watch::Receiver<Held> {
        self.held.subscribe()
    }

    fn where_stored(&self) -> String {
        format!("ConfigMap {}/{STORE_NAME}", self.namespace)
    }

    /// Verifies a stored copy; `Err` says why it is not trusted.
    fn verify_stored(&self, text: &str) -> Result<(SignedPolicy, Policy), String> {
        let key = self
            .key
            .as_ref()
            .ok_or("the agent has no policy key (--policy-public-key)")?;
        let signed = SignedPolicy::parse(text).map_err(|err| chain(&err))?;
        let policy = signed.verify(key).map_err(|err| chain(&err))?;
        Ok((signed, policy))
    }

    /// What the stored copy says against what is held: accept it at start, otherwise report
    /// and undo an edit.
    async fn observe_stored(&self, stored: Option<&ConfigMap>) {
        let text = stored
            .and_then(|cm| cm.data.as_ref())
            .and_then(|d| d.get(STORE_KEY))
            .cloned();
        let held = self.held.borrow().accepted.clone();
        match (held, text) {
            (None, None) => {}
            (None, Some(text)) => match self.verify_stored(&text) {
                Ok((signed, policy)) => {
                    tracing::info!(
                        name = policy.name(),
                        generation = policy.generation(),
                        "loaded the stored policy"
                    );
                    self.held.send_replace(Held {
                        accepted: Some(Accepted {
                            signed,
                            policy: Arc::new(policy),
                            accepted_at: SystemTime::now(),
                        }),
                        problems: Vec::new(),
                    });
                }
                Err(reason) => self.problem(format!(
                    "the policy stored in {} fails verification and is ignored: {reason}",
                    self.where_stored()
                )),
            },
            (Some(accepted), text) => {
                if text.as_deref() == Some(accepted.signed.to_yaml().as_str()) {
                    return;
                }
                let what = match &text {
                    None => "was deleted".to_owned(),
                    Some(text) => match self.verify_stored(text) {
                        Ok((_, policy)) => format!(
                            "was replaced with generation {} without a push",
                            policy.generation()
                        ),
                        Err(reason) => format!("was edited ({reason})"),
                    },
                };
                self.problem(format!(
                    "the policy stored in {} {what}; the agent keeps generation {} and restored it",
                    self.where_stored(),
                    accepted.policy.generation()
                ));
                if let Err(err) = self.store(&accepted.signed).await {
                    tracing::warn!(error = %chain(&err), "restoring the stored policy");
                }
            }
        }
    }

    /// Reports a problem with the policy's enforcement (`status`, `policy show`) until the
    /// next accepted push.
    pub fn report(&self, problem: String) {
        self.problem(problem);
    }

    fn problem(&self, problem: String) {
        tracing::warn!(problem, "policy store");
        self.held.send_modify(|held| {
            if !held.problems.contains(&problem) {
                held.problems.push(problem);
            }
        });
    }

    async fn store(&self, signed: &SignedPolicy) -> Result<(), StoreError> {
        let data = [(STORE_KEY.to_owned(), signed.to_yaml())].into();
        crate::apply_record(&self.configmaps, STORE_NAME, data)
            .await
            .map(drop)
            .map_err(|source| StoreError::Write {
                namespace: self.namespace.clone(),
                source: Box::new(source),
            })
    }

    /// Reads the stored copy once (so the policy is in force before gRPC answers), then
    /// watches it until the shutdown.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let watcher = watcher::watcher(
            self.configmaps.clone(),
            watcher::Config::default().fields(&format!("metadata.name={STORE_NAME}")),
        )
        .backoff(crate::watch_backoff());
        let mut watcher = std::pin::pin!(watcher);
        let mut relist: Option<Option<ConfigMap>> = None;
        loop {
            let event = tokio::select! {
                () = shutdown.cancelled() => return,
                event = watcher.next() => event,
            };
            match event {
                None => return,
                Some(Err(err)) => tracing::warn!(error = %err, "watching {}", self.where_stored()),
                Some(Ok(watcher::Event::Init)) => relist = Some(None),
                Some(Ok(watcher::Event::InitApply(cm))) => relist = Some(Some(cm)),
                Some(Ok(watcher::Event::InitDone)) => {
                    self.observe_stored(relist.take().flatten().as_ref()).await;
                }
                Some(Ok(watcher::Event::Apply(cm))) => self.observe_stored(Some(&cm)).await,
                Some(Ok(watcher::Event::Delete(_))) => self.observe_stored(None).await,
            }
        }
    }

    /// Accepts `text` (a SignedPolicy) if signed by the installed key with a higher generation.
    pub async fn push(&self, text: &str) -> Result<PushPolicyResponse, PushError> {
        let _one_at_a_time = self.push.lock().await;
        let key = self.key.as_ref().ok_or(PushError::NoKey)?;
        let signed = SignedPolicy::parse(text).map_err(PushError::Invalid)?;
        let policy = signed.verify(key).map_err(|err| match err {
            SignedError::UnknownKey { .. } | SignedError::BadSignature { .. } => {
                PushError::Untrusted(err)
            }
            _ => PushError::Invalid(err),
        })?;
        let held = self.held.borrow().accepted.clone();
        let previous_generation = held.as_ref().map_or(0, |a| a.policy.generation());
        if let Some(held) = &held {
            let (new, old) = (policy.generation(), held.policy.generation());
            if new == old && held.signed.policy == signed.policy {
                return Ok(PushPolicyResponse {
                    name: policy.name().to_owned(),
                    generation: new,
                    unchanged: true,
                    previous_generation,
                });
            }
            if new <= old {
                return Err(PushError::Stale {
                    new,
                    old,
                    held: held.policy.to_string(),
                });
            }
        }
        self.store(&signed).await.map_err(PushError::Store)?;
        tracing::info!(
            name = policy.name(),
            generation = policy.generation(),
            previous_generation,
            "accepted a new policy"
        );
        let response = PushPolicyResponse {
            name: policy.name().to_owned(),
            generation: policy.generation(),
            unchanged: false,
            previous_generation,
        };
        self.held.send_replace(Held {
            accepted: Some(Accepted {
                signed,
                policy: Arc::new(policy),
                accepted_at: SystemTime::now(),
            }),
            problems: Vec::new(),
        });
        Ok(response)
    }

    pub fn state(&self) -> PolicyState {
        let held = self.held.borrow();
        let mut state = PolicyState {
            problems: held.problems.clone(),
            ..PolicyState::default()
        };
        if let Some(accepted) = &held.accepted {
            state.present = true;
            accepted.policy.name().clone_into(&mut state.name);
            state.generation = accepted.policy.generation();
            state.key_id = self.key.as_ref().map(key_id).unwrap_or_default();
            state.policy = accepted.signed.policy.clone();
            state.accepted_at = Some(accepted.accepted_at.into());
        }
        state
    }
}
