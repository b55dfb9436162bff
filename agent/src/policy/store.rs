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
use tenantflux_core::policy::keyring::{KeyRefusal, Keyring, KeyringError, Roots};
use tenantflux_core::{
    policy::{
        ClusterIdentity, Policy, Refusal,
        signing::{self, SignedError, SignedPolicy, Validity, Verified, format_timestamp},
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
/// The ConfigMap that holds the keyring in force (signed by the root keys), and its key;
/// written only after the keyring passed every check.
pub const KEYRING_NAME: &str = "tenantflux-policy-keyring";
pub const KEYRING_KEY: &str = "signed-keyring.yaml";
/// How soon the cluster's identity is asked again while the API server does not answer.
const IDENTITY_RETRY: std::time::Duration = std::time::Duration::from_secs(2);

/// The policy in force, and what is wrong with its stored copy.
#[derive(Clone, Debug, Default)]
pub struct Held {
    pub accepted: Option<Accepted>,
    pub problems: Vec<String>,
    /// This cluster, once the agent has read it (before it, no policy is loaded or accepted).
    pub cluster: Option<ClusterIdentity>,
    /// Whether the stored copy has been read at start (a pulled policy waits for it, so the
    /// stored one is weighed first).
    pub loaded: bool,
    /// The channel the agent pulls from (`--policy-source`), and how it last answered.
    pub source: Option<SourceState>,
    /// The keys a policy may be signed with: the keyring the root keys signed last, or the
    /// keyring of one of a single `--policy-public-key`; none: the agent accepts no policy.
    pub keyring: Option<Arc<Keyring>>,
}

/// How the policy channel last answered.
#[derive(Clone, Debug, Default)]
pub struct SourceState {
    /// `oci://REGISTRY/REPOSITORY:TAG`.
    pub channel: String,
    /// The digest the tag pointed at when it last answered.
    pub digest: Option<String>,
    pub checked_at: Option<SystemTime>,
    /// Since when it has not answered (none while it answers).
    pub unanswered_since: Option<SystemTime>,
    /// Why it did not answer, or why its artifact was refused.
    pub error: Option<String>,
}

#[derive(Clone, Debug)]
pub struct Accepted {
    pub signed: SignedPolicy,
    pub policy: Arc<Policy>,
    pub accepted_at: SystemTime,
    /// When the signed claims say it holds (envelope v2); a v1 policy never expires.
    pub validity: Option<Validity>,
}

impl Accepted {
    /// Whether the policy's expiry has passed at `now` (unix seconds): the agent still
    /// enforces it (nothing newer verified), and says it is stale.
    pub fn is_stale_at(&self, now: i64) -> bool {
        self.validity.is_some_and(|v| v.is_expired_at(now))
    }
}

/// Why a pushed policy was not accepted; the held policy stays in force.
#[derive(Debug, thiserror::Error)]
pub enum PushError {
    #[error(
        "this agent was installed without a policy key (--policy-public-key, Helm value policy.publicKey), so it accepts no policy"
    )]
    NoKey,
    #[error(
        "this agent holds no keyring yet: it takes one signed by its root keys from the channel's TAG-keyring tag (kubectl tenantflux policy keyring publish)"
    )]
    NoKeyring,
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
    #[error(transparent)]
    KeyRefused(KeyRefusal),
    #[error(
        "{policy} expired at {expires_at} (its signed expiresAt); sign it again with a later expiry, as a higher generation"
    )]
    Expired { policy: String, expires_at: String },
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

/// Why a keyring was not taken; the one in force stays.
#[derive(Debug, thiserror::Error)]
pub enum KeyringRefused {
    #[error(
        "this agent was installed without root keys (--policy-root-key, Helm value policy.rootKeys), so it takes no keyring"
    )]
    NoRoots,
    #[error(transparent)]
    Invalid(KeyringError),
    #[error(transparent)]
    Store(StoreError),
}

/// Holds the policy; shared by the gRPC service and the watcher of the stored copy.
pub struct PolicyStore {
    roots: Option<Roots>,
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
        Self::with_roots(client, namespace, key, None, cluster_name)
    }

    /// A store that also takes keyrings signed by `roots`; `key` (if any) is the keyring of
    /// one in force until the first keyring arrives.
    pub fn with_roots(
        client: Client,
        namespace: &str,
        key: Option<VerifyingKey>,
        roots: Option<Roots>,
        cluster_name: Option<String>,
    ) -> Arc<Self> {
        let held = Held {
            keyring: key.map(|k| Arc::new(Keyring::of_one(k))),
            ..Held::default()
        };
        Arc::new(Self {
            roots,
            configmaps: Api::namespaced(client.clone(), namespace),
            client,
            cluster_name,
            namespace: namespace.to_owned(),
            held: watch::Sender::new(held),
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
    fn verify_stored(&self, text: &str) -> Result<(SignedPolicy, Verified), String> {
        let signed = SignedPolicy::parse(text).map_err(|err| chain(&err))?;
        let verified = self.verify(&signed).map_err(|err| chain(&err))?;
        Ok((signed, verified))
    }

    /// Verifies `signed` with the key the keyring in force names for it.
    fn verify(&self, signed: &SignedPolicy) -> Result<Verified, PushError> {
        let keyring = self.held.borrow().keyring.clone().ok_or(self.no_key())?;
        // A keyring of one keeps the single-key install's own messages (which key it trusts).
        let key = match keyring.version {
            0 => *keyring
                .key(&keyring.key_ids()[0])
                .map_err(PushError::KeyRefused)?,
            _ => *keyring.key(&signed.key_id).map_err(PushError::KeyRefused)?,
        };
        signed.verify_claims(&key).map_err(|err| match err {
            SignedError::UnknownKey { .. } | SignedError::BadSignature { .. } => {
                PushError::Untrusted(err)
            }
            _ => PushError::Invalid(err),
        })
    }

    fn no_key(&self) -> PushError {
        match self.roots {
            Some(_) => PushError::NoKeyring,
            None => PushError::NoKey,
        }
    }

    /// Whether the keyring in force still trusts the key that signed `signed`.
    fn trusts(&self, signed: &SignedPolicy) -> bool {
        self.held
            .borrow()
            .keyring
            .as_ref()
            .is_some_and(|k| match k.version {
                0 => k.key_ids().contains(&signed.key_id),
                _ => k.key(&signed.key_id).is_ok(),
            })
    }

    /// Takes `text` (a SignedKeyring) if enough installed root keys signed it and its version
    /// is higher than the keyring in force (an equal one must be the same bytes: unchanged,
    /// `Ok(false)`). It is stored only after every check passed. A held policy whose key the
    /// new keyring no longer trusts stays in force, reported, until a policy by a trusted key
    /// comes, which is then taken whatever its generation (the generations of a revoked key
    /// bind nobody).
    pub async fn accept_keyring(&self, text: &str) -> Result<bool, KeyringRefused> {
        let _one_at_a_time = self.push.lock().await;
        let roots = self.roots.as_ref().ok_or(KeyringRefused::NoRoots)?;
        let held = self.held.borrow().keyring.clone();
        let keyring = roots
            .verify(text, held.as_deref())
            .map_err(KeyringRefused::Invalid)?;
        if held
            .as_ref()
            .is_some_and(|h| h.signed.is_some() && h.signed == keyring.signed)
        {
            return Ok(false);
        }
        self.write(KEYRING_NAME, KEYRING_KEY, text.to_owned())
            .await
            .map_err(KeyringRefused::Store)?;
        tracing::info!(
            version = keyring.version,
            keys = ?keyring.key_ids(),
            previous = held.as_ref().map(|k| k.version),
            "accepted a new keyring"
        );
        let version = keyring.version;
        self.held
            .send_modify(|h| h.keyring = Some(Arc::new(keyring)));
        let accepted = self.held.borrow().accepted.clone();
        if let Some(accepted) = accepted
            && !self.trusts(&accepted.signed)
        {
            self.problem(format!(
                "{} is signed by key {}, which keyring version {version} no longer trusts; the agent keeps enforcing it until a policy signed by a key of the keyring arrives (taken whatever its generation)",
                accepted.policy, accepted.signed.key_id
            ));
        }
        Ok(true)
    }

    /// At start: the stored keyring, if the root keys still verify it.
    async fn load_keyring(&self) {
        let Some(roots) = &self.roots else {
            return;
        };
        let text = match self.configmaps.get_opt(KEYRING_NAME).await {
            Ok(map) => map.and_then(|m| m.data?.remove(KEYRING_KEY)),
            Err(err) => {
                self.problem(format!(
                    "reading ConfigMap {}/{KEYRING_NAME} (the keyring) failed: {}",
                    self.namespace,
                    chain(&err)
                ));
                return;
            }
        };
        let Some(text) = text else {
            return;
        };
        match roots.verify(&text, None) {
            Ok(keyring) => {
                tracing::info!(version = keyring.version, keys = ?keyring.key_ids(), "loaded the stored keyring");
                self.held
                    .send_modify(|h| h.keyring = Some(Arc::new(keyring)));
            }
            Err(err) => self.problem(format!(
                "the keyring stored in ConfigMap {}/{KEYRING_NAME} is refused: {}",
                self.namespace,
                chain(&err)
            )),
        }
    }

    /// Whether the agent takes keyrings (it was installed with root keys).
    pub fn has_roots(&self) -> bool {
        self.roots.is_some()
    }

    /// What the stored copy says against what is held: accept it at start, otherwise report
    /// and undo an edit.
    async fn observe_stored(&self, stored: Option<&ConfigMap>) {
        // Not while a push (or pull) is between writing the store and holding what it wrote:
        // its own write would look like an edit and be undone.
        let _one_at_a_time = self.push.lock().await;
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
                        Ok((_, verified)) => format!(
                            "was replaced with generation {} without a push",
                            verified.policy.generation()
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
            let checked = self.verify_stored(&text).and_then(|(signed, verified)| {
                verified
                    .policy
                    .is_for(&cluster)
                    .map_err(|r| r.to_string())?;
                Ok((signed, verified))
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
        let highest = recorded.as_ref().map(|(_, v)| v.policy.generation());
        let was_stored = text.is_some();
        let stored = text.and_then(|text| {
            let checked = self.verify_stored(&text).and_then(|(signed, verified)| {
                verified
                    .policy
                    .is_for(&cluster)
                    .and_then(|()| verified.policy.is_not_rollback(highest))
                    .map_err(|r| r.to_string())?;
                Ok((signed, verified))
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
        let (signed, verified) = match (stored, recorded) {
            (Some(stored), recorded) => {
                let lower = recorded.as_ref().map(|(_, v)| v.policy.generation());
                let generation = stored.1.policy.generation();
                if let Some(lower) = lower.filter(|g| *g < generation) {
                    self.problem(format!(
                        "{} recorded generation {lower}, lower than the stored generation {generation}: it was rolled back; the agent recorded generation {generation} again",
                        self.where_recorded(),
                    ));
                }
                if lower.is_none_or(|g| g < generation)
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
                    recorded.1.policy.generation(),
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
        let Verified { policy, validity } = verified;
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
                validity,
            });
        });
    }

    /// Reports the held policy as stale once its expiry passes, and again for each policy
    /// accepted later; it stays in force (fail-static) until a newer one is verified.
    async fn watch_expiry(&self, shutdown: CancellationToken) {
        let mut held = self.subscribe();
        loop {
            let expiry = held
                .borrow()
                .accepted
                .as_ref()
                .and_then(|a| a.validity.map(|v| (v.expires_at, a.policy.to_string())));
            let wait = match expiry {
                Some((expires_at, policy)) if expires_at <= signing::now() => {
                    let problem = stale_problem(&policy, expires_at);
                    if !held.borrow().problems.contains(&problem) {
                        self.problem(problem);
                    }
                    None
                }
                // To the instant of the expiry, so that the report comes when `stale` turns.
                Some((expires_at, _)) => Some(
                    (SystemTime::UNIX_EPOCH
                        + std::time::Duration::from_secs(u64::try_from(expires_at).unwrap_or(0)))
                    .duration_since(SystemTime::now())
                    .unwrap_or_default(),
                ),
                None => None,
            };
            // What this loop wrote itself is no reason to look again.
            held.borrow_and_update();
            let expired = async {
                match wait {
                    Some(wait) => tokio::time::sleep(wait).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = shutdown.cancelled() => return,
                changed = held.changed() => if changed.is_err() { return },
                () = expired => {}
            }
        }
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

    /// Writes the highest-generation record.
    async fn record(&self, signed: &SignedPolicy) -> Result<(), StoreError> {
        self.write(HIGHEST_NAME, STORE_KEY, signed.to_yaml()).await
    }

    /// Writes `text` as key `key` of ConfigMap `name` in the agent's namespace.
    async fn write(&self, name: &'static str, key: &str, text: String) -> Result<(), StoreError> {
        let data = [(key.to_owned(), text)].into();
        crate::apply_record(&self.configmaps, name, data)
            .await
            .map(drop)
            .map_err(|source| StoreError::Write {
                namespace: self.namespace.clone(),
                name,
                source: Box::new(source),
            })
    }

    /// Reports a problem with the policy's enforcement (`status`, `policy show`) until the
    /// next accepted push.
    pub fn report(&self, problem: String) {
        self.problem(problem);
    }

    /// Drops the problems `stale` says are over (e.g. the policy source answers again).
    pub fn clear_problems(&self, stale: impl Fn(&str) -> bool) {
        if self.held.borrow().problems.iter().any(|p| stale(p)) {
            self.held
                .send_modify(|held| held.problems.retain(|p| !stale(p)));
        }
    }

    /// Records how the policy channel answered; watchers hear of it only when more than the
    /// time of the check changed (an unchanged tag every interval is no news).
    pub fn set_source(&self, update: impl FnOnce(&mut SourceState)) {
        self.held.send_if_modified(|held| {
            let Some(source) = held.source.as_mut() else {
                return false;
            };
            let before = (
                source.digest.clone(),
                source.unanswered_since,
                source.error.clone(),
            );
            update(source);
            before
                != (
                    source.digest.clone(),
                    source.unanswered_since,
                    source.error.clone(),
                )
        });
    }

    /// Names the channel the agent pulls from.
    pub fn pull_from(&self, channel: String) {
        self.held.send_modify(|held| {
            held.source = Some(SourceState {
                channel,
                ..SourceState::default()
            });
        });
    }

    fn problem(&self, problem: String) {
        tracing::warn!(problem, "policy store");
        self.held.send_modify(|held| {
            if !held.problems.contains(&problem) {
                held.problems.push(problem);
            }
        });
    }

    /// Writes the stored copy.
    async fn store(&self, signed: &SignedPolicy) -> Result<(), StoreError> {
        self.write(STORE_NAME, STORE_KEY, signed.to_yaml()).await
    }

    /// Reads the stored copy once (so the policy is in force before gRPC answers), then
    /// watches it until the shutdown.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let Some(identity) = self.identify(&shutdown).await else {
            return;
        };
        self.held.send_modify(|held| held.cluster = Some(identity));
        self.load_keyring().await;
        let expiry = tokio::spawn({
            let (store, shutdown) = (self.clone(), shutdown.clone());
            async move { store.watch_expiry(shutdown).await }
        });
        let _stop_expiry = AbortOnDrop(expiry);
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
                    if !self.held.borrow().loaded {
                        self.held.send_modify(|held| held.loaded = true);
                    }
                }
                Some(Ok(watcher::Event::Apply(cm))) => self.observe_stored(Some(&cm)).await,
                Some(Ok(watcher::Event::Delete(_))) => self.observe_stored(None).await,
            }
        }
    }

    /// Accepts `text` (a SignedPolicy) if signed by the installed key with a higher generation.
    pub async fn push(&self, text: &str) -> Result<PushPolicyResponse, PushError> {
        let _one_at_a_time = self.push.lock().await;
        if self.held.borrow().keyring.is_none() {
            return Err(self.no_key());
        }
        let signed = SignedPolicy::parse(text).map_err(PushError::Invalid)?;
        let Verified { policy, validity } = self.verify(&signed)?;
        let cluster = self.held.borrow().cluster.clone();
        policy
            .is_for(&cluster.ok_or(PushError::NoIdentity)?)
            .map_err(PushError::Refused)?;
        let held = self.held.borrow().accepted.clone();
        let previous_generation = held.as_ref().map_or(0, |a| a.policy.generation());
        if let Some(held) = &held {
            let (new, old) = (policy.generation(), held.policy.generation());
            if new == old
                && held.signed.policy == signed.policy
                && held.signed.claims == signed.claims
            {
                return Ok(PushPolicyResponse {
                    name: policy.name().to_owned(),
                    generation: new,
                    unchanged: true,
                    previous_generation,
                });
            }
            if new <= old && self.trusts(&held.signed) {
                return Err(PushError::Stale {
                    new,
                    old,
                    held: held.policy.to_string(),
                });
            }
        }
        // Only now, with every other check passed: an expired policy is never taken (the one
        // held stays in force), but an equal one above was answered as unchanged.
        if let Some(validity) = validity.filter(|v| v.is_expired_at(signing::now())) {
            return Err(PushError::Expired {
                policy: policy.to_string(),
                expires_at: format_timestamp(validity.expires_at),
            });
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
                validity,
            });
            held.problems.clear();
        });
        Ok(response)
    }

    pub fn state(&self) -> PolicyState {
        let held = self.held.borrow();
        let mut state = PolicyState {
            problems: held.problems.clone(),
            source: held
                .source
                .as_ref()
                .map(|s| tenantflux_proto::v1::PolicySource {
                    channel: s.channel.clone(),
                    digest: s.digest.clone().unwrap_or_default(),
                    checked_at: s.checked_at.map(Into::into),
                    unanswered_since: s.unanswered_since.map(Into::into),
                    error: s.error.clone().unwrap_or_default(),
                }),
            ..PolicyState::default()
        };
        if let Some(keyring) = &held.keyring {
            state.keyring_version = keyring.version;
            state.keyring_key_ids = keyring.key_ids();
        }
        if let Some(accepted) = &held.accepted {
            state.present = true;
            accepted.policy.name().clone_into(&mut state.name);
            state.generation = accepted.policy.generation();
            // Verified with the key it names, so that is the key's id.
            state.key_id.clone_from(&accepted.signed.key_id);
            state.policy = accepted.signed.policy.clone();
            state.accepted_at = Some(accepted.accepted_at.into());
            if let Some(validity) = accepted.validity {
                state.issued_at = Some(timestamp(validity.issued_at));
                state.expires_at = Some(timestamp(validity.expires_at));
                state.stale = accepted.is_stale_at(signing::now());
            }
        }
        state
    }
}

pub fn timestamp(unix: i64) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: unix,
        nanos: 0,
    }
}

fn stale_problem(policy: &str, expires_at: i64) -> String {
    format!(
        "{policy} is stale: it expired at {} and no newer policy has been verified; the agent keeps enforcing it",
        format_timestamp(expires_at)
    )
}

/// Ends a spawned task when its owner returns.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
