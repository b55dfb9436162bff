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
//!
//! What is taken and what refused is `tenantflux_core::policy::decide`; this module does the
//! reading and writing around it: pushes here, the start and the watch of the stored copy in
//! `restore`, the report of an expiry in `expiry`.

mod expiry;
mod restore;

use std::{collections::BTreeMap, sync::Arc, time::SystemTime};

use ed25519_dalek::VerifyingKey;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{Api, Client};
use tenantflux_core::policy::keyring::{KeyRefusal, Keyring, KeyringError, Roots};
use tenantflux_core::{
    policy::{
        ClusterIdentity, Policy, Refusal,
        decide::{self, Candidate, Expiry, Holding, Push, Refused},
        enforcement::Enforcement,
        signing::{self, SignedError, SignedPolicy, Validity, Verified, format_timestamp},
    },
    text::chain,
};
use tokio::sync::{Mutex, Notify, watch};

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
/// The ConfigMap that records the keyring of the highest version ever taken (same key),
/// written before the keyring's own ConfigMap, so that an older one put back while the agent
/// is down is reported as a rollback at start and the higher one stays in force.
pub const KEYRING_HIGHEST_NAME: &str = "tenantflux-policy-keyring-highest";
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
    /// Whether the API server enforces the policy, as the canary last proved it (none before
    /// the first verdict; `policy::enforcement`).
    pub enforcement: Option<Enforcement>,
    /// What keeps the policy from being enforced or watched right now (a watch or a write of
    /// the admission objects failing, a permission the agent lacks), by where it comes from;
    /// each is dropped when it is over, not at the next push.
    pub conditions: BTreeMap<&'static str, String>,
}

impl Held {
    /// Every problem: of the stored copy and its tampers, then the current conditions.
    pub fn all_problems(&self) -> Vec<String> {
        self.problems
            .iter()
            .chain(self.conditions.values())
            .cloned()
            .collect()
    }
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
        matches!(decide::expiry(self.validity, now), Expiry::Stale { .. })
    }
}

/// What a push did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PushOutcome {
    pub name: String,
    pub generation: u64,
    /// The agent already held this generation with this content.
    pub unchanged: bool,
    /// The generation held before, 0 if none.
    pub previous_generation: u64,
}

/// The policy the agent holds, its problems, its channel and its keyring, as `policy show`
/// reads them.
#[derive(Clone, Debug)]
pub struct PolicyView {
    pub accepted: Option<AcceptedView>,
    pub problems: Vec<String>,
    pub enforcement: Option<Enforcement>,
    pub source: Option<SourceState>,
    pub keyring: Option<KeyringView>,
}

#[derive(Clone, Debug)]
pub struct AcceptedView {
    pub name: String,
    pub generation: u64,
    /// Verified with the key it names, so that is the key's id.
    pub key_id: String,
    /// The policy document as signed.
    pub policy: String,
    pub accepted_at: SystemTime,
    pub validity: Option<Validity>,
    /// Past its expiry: still enforced, reported as stale.
    pub stale: bool,
}

#[derive(Clone, Debug)]
pub struct KeyringView {
    /// 0 for the keyring of one of a single `--policy-public-key`.
    pub version: u64,
    pub key_ids: Vec<String>,
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

impl PushError {
    /// The refusal `decide::push` gave `policy`, in the words a pusher reads.
    fn refused(refused: Refused, policy: &Policy) -> Self {
        match refused {
            Refused::NoIdentity => Self::NoIdentity,
            Refused::OtherCluster(refusal) => Self::Refused(refusal),
            Refused::Stale { new, old, held } => Self::Stale { new, old, held },
            Refused::Expired { expires_at } => Self::Expired {
                policy: policy.to_string(),
                expires_at: format_timestamp(expires_at),
            },
        }
    }
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
    /// Asks the enforcement check to prove again now (after a write of the admission objects).
    recheck: Notify,
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
            recheck: Notify::new(),
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
        let key = *decide::signing_key(&keyring, &signed.key_id).map_err(PushError::KeyRefused)?;
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
        decide::trusts(self.held.borrow().keyring.as_deref(), &signed.key_id)
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
        if decide::same_keyring(held.as_deref(), &keyring) {
            return Ok(false);
        }
        // The record first, as for policies: a failed store then errs toward the higher version.
        self.write(KEYRING_HIGHEST_NAME, KEYRING_KEY, text.to_owned())
            .await
            .map_err(KeyringRefused::Store)?;
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

    /// Whether the agent takes keyrings (it was installed with root keys).
    pub fn has_roots(&self) -> bool {
        self.roots.is_some()
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

    /// Sets or clears (`None`) the condition from `source`; watchers hear only of a change.
    pub fn set_condition(&self, source: &'static str, problem: Option<String>) {
        self.held.send_if_modified(|held| match problem {
            Some(problem) => {
                if held.conditions.get(source) == Some(&problem) {
                    return false;
                }
                tracing::warn!(problem, "policy enforcement");
                held.conditions.insert(source, problem);
                true
            }
            None => held.conditions.remove(source).is_some(),
        });
    }

    /// Records the enforcement verdict; watchers hear only of a change of more than its time.
    pub fn set_enforcement(&self, verdict: Option<Enforcement>) {
        self.held.send_if_modified(|held| {
            let same = match (&held.enforcement, &verdict) {
                (Some(a), Some(b)) => {
                    (a.enforced, a.since, &a.reason) == (b.enforced, b.since, &b.reason)
                }
                (None, None) => true,
                _ => false,
            };
            held.enforcement = verdict;
            !same
        });
    }

    /// Asks the enforcement check to prove again at once.
    pub fn recheck_enforcement(&self) {
        self.recheck.notify_one();
    }

    /// Resolves when someone asked for a proof now.
    pub async fn recheck_requested(&self) {
        self.recheck.notified().await;
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

    /// A tamper the agent undid (the stored copy, its record or the keyring changed by
    /// someone else): a problem until the next accepted push, and a Warning Event
    /// `PolicyTampered` on ConfigMap `tenantflux-policy`.
    async fn tampered(&self, problem: String) {
        self.problem(problem.clone());
        let event = kube::runtime::events::Event {
            type_: kube::runtime::events::EventType::Warning,
            reason: "PolicyTampered".into(),
            note: Some(problem),
            action: "Restore".into(),
            secondary: None,
        };
        let store = crate::configmap_reference(&self.namespace, STORE_NAME);
        // A recorder of its own: one kept would fold every later tamper into the first
        // one's Event (it keys Events by reason and object, not by their note).
        if let Err(err) = crate::recorder(&self.client).publish(&event, &store).await {
            tracing::warn!(error = %err, "recording an Event on ConfigMap {STORE_NAME} failed");
        }
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

    /// Accepts `text` (a SignedPolicy) if signed by the installed key with a higher generation.
    pub async fn push(&self, text: &str) -> Result<PushOutcome, PushError> {
        let _one_at_a_time = self.push.lock().await;
        if self.held.borrow().keyring.is_none() {
            return Err(self.no_key());
        }
        let signed = SignedPolicy::parse(text).map_err(PushError::Invalid)?;
        let Verified { policy, validity } = self.verify(&signed)?;
        let (held, cluster) = {
            let held = self.held.borrow();
            (held.accepted.clone(), held.cluster.clone())
        };
        let holding = held.as_ref().map(|held| Holding {
            signed: &held.signed,
            policy: &held.policy,
            trusted: self.trusts(&held.signed),
        });
        let offered = Candidate {
            signed: &signed,
            policy: &policy,
        };
        let outcome = |unchanged, previous_generation| PushOutcome {
            name: policy.name().to_owned(),
            generation: policy.generation(),
            unchanged,
            previous_generation,
        };
        let previous_generation =
            match decide::push(offered, validity, holding, cluster.as_ref(), signing::now()) {
                Push::Accept {
                    previous_generation,
                } => previous_generation,
                Push::Unchanged {
                    previous_generation,
                } => return Ok(outcome(true, previous_generation)),
                Push::Refuse(refused) => return Err(PushError::refused(refused, &policy)),
            };
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
        let outcome = outcome(false, previous_generation);
        self.held.send_modify(|held| {
            held.accepted = Some(Accepted {
                signed,
                policy: Arc::new(policy),
                accepted_at: SystemTime::now(),
                validity,
            });
            held.problems.clear();
        });
        Ok(outcome)
    }

    /// What `policy show` reports, its staleness as of now.
    pub fn state(&self) -> PolicyView {
        let held = self.held.borrow();
        PolicyView {
            accepted: held.accepted.as_ref().map(|accepted| AcceptedView {
                name: accepted.policy.name().to_owned(),
                generation: accepted.policy.generation(),
                key_id: accepted.signed.key_id.clone(),
                policy: accepted.signed.policy.clone(),
                accepted_at: accepted.accepted_at,
                validity: accepted.validity,
                stale: accepted.is_stale_at(signing::now()),
            }),
            problems: held.all_problems(),
            enforcement: held.enforcement.clone(),
            source: held.source.clone(),
            keyring: held.keyring.as_ref().map(|keyring| KeyringView {
                version: keyring.version,
                key_ids: keyring.key_ids(),
            }),
        }
    }
}
