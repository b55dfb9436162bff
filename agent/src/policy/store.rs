//! The policy the agent holds: verified against the installed key, stored in the cluster
//! (ConfigMap `tenantflux-policy` in the agent's namespace) so it survives restarts, re-verified
//! at start, and watched, so that an edit to the stored copy is detected, reported, and undone
//! from the last verified policy held in memory. `server::policy` serves it over gRPC.
//!
//! A second record (ConfigMap `tenantflux-policy-highest`) keeps the highest generation this
//! cluster ever accepted, so that an older validly signed copy put in the store while the
//! agent is down is reported as a rollback at start and the higher one stays in force. A
//! policy whose `spec.clusters` does not name this cluster (the UID of namespace kube-system,
//! or `--cluster-name`) is refused, pushed or stored.

use std::{sync::Arc, time::SystemTime};

use ed25519_dalek::VerifyingKey;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::{
    Api, Client,
    runtime::{WatchStreamExt, watcher},
};
use tenantflux_core::{
    policy::{
        ClusterIdentity, Policy, Refusal,
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
/// The ConfigMap that holds the signed policy of the highest generation ever accepted (same
/// key), written before the store on every accepted push.
pub const HIGHEST_NAME: &str = "tenantflux-policy-highest";
/// How soon the cluster's identity is asked again while the API server does not answer.
const IDENTITY_RETRY: std::time::Duration = std::time::Duration::from_secs(2);

/// The policy in force, and what is wrong with its stored copy.
#[derive(Clone, Debug, Default)]
pub struct Held {
    pub accepted: Option<Accepted>,
    pub problems: Vec<String>,
    /// This cluster, once the agent has read it (before it, no policy is loaded or accepted).
    pub cluster: Option<ClusterIdentity>,
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
    Refused(Refusal),
    #[error(
        "the agent has not read this cluster's identity yet (namespace kube-system); retry when the API server answers it"
    )]
    NoIdentity,
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
    #[error("writing ConfigMap {namespace}/{name}")]
    Write {
        namespace: String,
        name: &'static str,
        #[source]
        source: Box<kube::Error>,
    },
}

/// Holds the policy; shared by the gRPC service and the watcher of the stored copy.
pub struct PolicyStore {
    key: Option<VerifyingKey>,
    client: Client,
    cluster_name: Option<String>,
    configmaps: Api<ConfigMap>,
    namespace: String,
    held: watch::Sender<Held>,
    /// Pushes are decided one at a time, so two generations cannot both pass the check.
    push: Mutex<()>,
}

impl PolicyStore {
    pub fn new(
        client: Client,
        namespace: &str,
        key: Option<VerifyingKey>,
        cluster_name: Option<String>,
    ) -> Arc<Self> {
        Arc::new(Self {
            key,
            configmaps: Api::namespaced(client.clone(), namespace),
            client,
            cluster_name,
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
            (None, text) => self.load_at_start(text).await,
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

    fn where_recorded(&self) -> String {
        format!("ConfigMap {}/{HIGHEST_NAME}", self.namespace)
    }

    /// At start: the stored copy, unless it fails verification, is not for this cluster, or
    /// is lower than the highest generation recorded; then the recorded one, which the store
    /// gets back. Whatever is refused is reported.
    async fn load_at_start(&self, text: Option<String>) {
        let Some(cluster) = self.held.borrow().cluster.clone() else {
            return;
        };
        let recorded = match self.configmaps.get_opt(HIGHEST_NAME).await {
            Ok(map) => map.and_then(|map| map.data?.remove(STORE_KEY)),
            Err(err) => {
                self.problem(format!(
                    "reading {} (the highest policy generation this cluster held) failed, so a rollback of the stored policy cannot be told: {}",
                    self.where_recorded(),
                    chain(&err)
                ));
                None
            }
        };
        let recorded = recorded.and_then(|text| {
            let checked = self.verify_stored(&text).and_then(|(signed, policy)| {
                policy.is_for(&cluster).map_err(|r| r.to_string())?;
                Ok((signed, policy))
            });
            checked
                .map_err(|reason| {
                    self.problem(format!(
                        "the policy recorded in {} is ignored: {reason}",
                        self.where_recorded()
                    ))
                })
                .ok()
        });
        let highest = recorded.as_ref().map(|(_, p)| p.generation());
        let was_stored = text.is_some();
        let stored = text.and_then(|text| {
            let checked = self.verify_stored(&text).and_then(|(signed, policy)| {
                policy
                    .is_for(&cluster)
                    .and_then(|()| policy.is_not_rollback(highest))
                    .map_err(|r| r.to_string())?;
                Ok((signed, policy))
            });
            checked
                .map_err(|reason| {
                    self.problem(format!(
                        "the policy stored in {} is refused: {reason}",
                        self.where_stored()
                    ))
                })
                .ok()
        });
        let (signed, policy) = match (stored, recorded) {
            (Some(stored), recorded) => {
                let lower = recorded.as_ref().map(|(_, p)| p.generation());
                if let Some(lower) = lower.filter(|g| *g < stored.1.generation()) {
                    self.problem(format!(
                        "{} recorded generation {lower}, lower than the stored generation {}: it was rolled back; the agent recorded generation {} again",
                        self.where_recorded(),
                        stored.1.generation(),
                        stored.1.generation()
                    ));
                }
                if lower.is_none_or(|g| g < stored.1.generation())
                    && let Err(err) = self.record(&stored.0).await
                {
                    tracing::warn!(error = %chain(&err), "recording the highest policy generation");
                }
                stored
            }
            (None, Some(recorded)) => {
                let how = if was_stored { "refused" } else { "deleted" };
                self.problem(format!(
                    "the stored policy was {how}: the agent holds generation {} from {} and restored {} from it",
                    recorded.1.generation(),
                    self.where_recorded(),
                    self.where_stored()
                ));
                if let Err(err) = self.store(&recorded.0).await {
                    tracing::warn!(error = %chain(&err), "restoring the stored policy");
                }
                recorded
            }
            (None, None) => return,
        };
        tracing::info!(
            name = policy.name(),
            generation = policy.generation(),
            "loaded the stored policy"
        );
        self.held.send_modify(|held| {
            held.accepted = Some(Accepted {
                signed,
                policy: Arc::new(policy),
                accepted_at: SystemTime::now(),
            });
        });
    }

    /// Reads the cluster's identity (the UID of namespace kube-system), retrying until the
    /// API server answers it or the shutdown.
    async fn identify(&self, shutdown: &CancellationToken) -> Option<ClusterIdentity> {
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        loop {
            match namespaces.get("kube-system").await {
                Ok(namespace) => {
                    let identity = ClusterIdentity {
                        uid: namespace.metadata.uid.unwrap_or_default(),
                        name: self.cluster_name.clone(),
                    };
                    tracing::info!(cluster = %identity, "cluster identity");
                    return Some(identity);
                }
                Err(err) => {
                    tracing::warn!(error = %err, "reading namespace kube-system (the cluster's identity); retrying")
                }
            }
            tokio::select! {
                () = shutdown.cancelled() => return None,
                () = tokio::time::sleep(IDENTITY_RETRY) => {}
            }
        }
    }

    async fn record(&self, signed: &SignedPolicy) -> Result<(), StoreError> {
        let data = [(STORE_KEY.to_owned(), signed.to_yaml())].into();
        crate::apply_record(&self.configmaps, HIGHEST_NAME, data)
            .await
            .map(drop)
            .map_err(|source| StoreError::Write {
                namespace: self.namespace.clone(),
                name: HIGHEST_NAME,
                source: Box::new(source),
            })
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
                name: STORE_NAME,
                source: Box::new(source),
            })
    }

    /// Reads the stored copy once (so the policy is in force before gRPC answers), then
    /// watches it until the shutdown.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let Some(identity) = self.identify(&shutdown).await else {
            return;
        };
        self.held.send_modify(|held| held.cluster = Some(identity));
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
        let cluster = self.held.borrow().cluster.clone();
        policy
            .is_for(&cluster.ok_or(PushError::NoIdentity)?)
            .map_err(PushError::Refused)?;
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
        // The record first: if the store then fails, the next start errs toward the higher
        // generation (reported as a rollback of the store) rather than away from it.
        self.record(&signed).await.map_err(PushError::Store)?;
        self.store(&signed).await.map_err(PushError::Store)?;
        tracing::info!(
            name = policy.name(),
            generation = policy.generation(),
            previous_generation,
            "accepted a new policy"
        );
        crate::failpoint("policy-accepted").await;
        let response = PushPolicyResponse {
            name: policy.name().to_owned(),
            generation: policy.generation(),
            unchanged: false,
            previous_generation,
        };
        self.held.send_modify(|held| {
            held.accepted = Some(Accepted {
                signed,
                policy: Arc::new(policy),
                accepted_at: SystemTime::now(),
            });
            held.problems.clear();
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
