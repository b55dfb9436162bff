//! The start of the store and the watch of its stored copy: the cluster's identity is read
//! first (no policy is weighed without it), then the keyring and the two copies, and from
//! then on every edit of the stored copy is reported and undone from the policy in memory.

use std::{sync::Arc, time::SystemTime};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::{
    Api,
    runtime::{WatchStreamExt, watcher},
};
use tenantflux_core::{
    policy::{
        ClusterIdentity,
        decide::{self, Hold, StartProblem},
        signing::Verified,
    },
    text::chain,
};
use tokio_util::sync::CancellationToken;

use crate::reconcile::{Next, Wake};

use tenantflux_core::policy::keyring::{Keyring, SignedKeyring};

use super::{
    Accepted, HIGHEST_NAME, KEYRING_HIGHEST_NAME, KEYRING_KEY, KEYRING_NAME, PolicyStore,
    STORE_KEY, STORE_NAME,
};

/// The policy store's condition while a watch of its ConfigMaps fails.
const WATCH_CONDITION: &str = "stored-policy-watch";

/// How soon the cluster's identity is asked again while the API server does not answer.
const IDENTITY_RETRY: std::time::Duration = std::time::Duration::from_secs(2);

/// An event of the watch of one of the stored ConfigMaps.
enum Stored {
    /// The stored policy ([`STORE_NAME`]).
    Policy(Result<watcher::Event<ConfigMap>, watcher::Error>),
    /// The stored keyring ([`KEYRING_NAME`]).
    Keyring(Result<watcher::Event<ConfigMap>, watcher::Error>),
}

/// The watch of the stored copies: each event is taken into the store, a list once it is done.
struct Restore {
    store: Arc<PolicyStore>,
    /// The stored policy being re-listed, until the list is done.
    relist: Option<Option<ConfigMap>>,
    /// The stored keyring being re-listed, until the list is done.
    relist_keyring: Option<Option<ConfigMap>>,
}

impl crate::reconcile::Pass for Restore {
    type Event = Stored;

    async fn pass(&mut self, wake: Wake<Stored>) -> Next {
        let store = &self.store;
        match wake {
            Wake::Start | Wake::Deadline => {}
            Wake::Event(Stored::Policy(Err(err))) => store.watch_failed(STORE_NAME, &err),
            Wake::Event(Stored::Policy(Ok(event))) => {
                store.set_condition(WATCH_CONDITION, None);
                match event {
                    watcher::Event::Init => self.relist = Some(None),
                    watcher::Event::InitApply(cm) => self.relist = Some(Some(cm)),
                    watcher::Event::InitDone => {
                        store
                            .observe_stored(self.relist.take().flatten().as_ref())
                            .await;
                        if !store.held.borrow().loaded {
                            store.held.send_modify(|held| held.loaded = true);
                        }
                    }
                    watcher::Event::Apply(cm) => store.observe_stored(Some(&cm)).await,
                    watcher::Event::Delete(_) => store.observe_stored(None).await,
                }
            }
            Wake::Event(Stored::Keyring(Err(err))) => store.watch_failed(KEYRING_NAME, &err),
            Wake::Event(Stored::Keyring(Ok(event))) => match event {
                watcher::Event::Init => self.relist_keyring = Some(None),
                watcher::Event::InitApply(cm) => self.relist_keyring = Some(Some(cm)),
                watcher::Event::InitDone => {
                    let listed = self.relist_keyring.take().flatten();
                    store.observe_keyring(listed.as_ref()).await;
                }
                watcher::Event::Apply(cm) => store.observe_keyring(Some(&cm)).await,
                watcher::Event::Delete(_) => store.observe_keyring(None).await,
            },
        }
        Next::Idle
    }
}

impl PolicyStore {
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
        let by_name =
            |name: &str| watcher::Config::default().fields(&format!("metadata.name={name}"));
        let stored = watcher::watcher(self.configmaps.clone(), by_name(STORE_NAME))
            .backoff(crate::watch_backoff());
        // The keyring is watched only where keyrings are taken (root keys installed).
        let keyrings = if self.roots.is_some() {
            watcher::watcher(self.configmaps.clone(), by_name(KEYRING_NAME))
                .backoff(crate::watch_backoff())
                .map(Stored::Keyring)
                .boxed()
        } else {
            futures::stream::pending().boxed()
        };
        let copies = futures::stream::select(stored.map(Stored::Policy).boxed(), keyrings);
        let restore = Restore {
            store: self,
            relist: None,
            relist_keyring: None,
        };
        // Nothing here is retried: the watches retry themselves.
        crate::reconcile::run(restore, copies, &shutdown).await;
    }

    /// A failing watch is a condition of the policy (an edit would go unseen), over once the
    /// watch answers again.
    fn watch_failed(&self, name: &str, err: &watcher::Error) {
        self.set_condition(
            WATCH_CONDITION,
            Some(format!(
                "the agent cannot watch ConfigMap {}/{name}, so it would not see it changed: {}",
                self.namespace,
                chain(err)
            )),
        );
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
            if !crate::sleep(shutdown, IDENTITY_RETRY).await {
                return None;
            }
        }
    }

    /// At start: the stored keyring and the record of the highest version taken, each verified
    /// with the root keys; the higher one is held, and the copy that lost is written again from
    /// it. An older or refused stored keyring beside a valid record is a rollback, reported.
    async fn load_keyring(&self) {
        let Some(roots) = &self.roots else {
            return;
        };
        let read = |name: &'static str| async move {
            match self.configmaps.get_opt(name).await {
                Ok(map) => Some(map.and_then(|m| m.data?.remove(KEYRING_KEY))),
                Err(err) => {
                    self.problem(format!(
                        "reading ConfigMap {}/{name} (the keyring) failed: {}",
                        self.namespace,
                        chain(&err)
                    ));
                    None
                }
            }
        };
        let (Some(stored), Some(recorded)) =
            (read(KEYRING_NAME).await, read(KEYRING_HIGHEST_NAME).await)
        else {
            return;
        };
        let record_absent = recorded.is_none();
        let stored = stored.map(|text| roots.verify(&text, None));
        let recorded = match recorded.map(|text| roots.verify(&text, None)) {
            Some(Err(err)) => {
                self.tampered(format!(
                    "the keyring recorded in ConfigMap {}/{KEYRING_HIGHEST_NAME} is refused ({}), so a rollback of the stored keyring cannot be told",
                    self.namespace,
                    chain(&err)
                ))
                .await;
                None
            }
            recorded => recorded.and_then(Result::ok),
        };
        let where_stored = format!("ConfigMap {}/{KEYRING_NAME}", self.namespace);
        let keyring = match (stored, recorded) {
            (None, None) => return,
            (Some(Ok(stored)), None) => {
                // The agent records a keyring before it stores it, so a stored keyring
                // without a record means the record was deleted.
                if record_absent {
                    self.tampered(format!(
                        "ConfigMap {}/{KEYRING_HIGHEST_NAME}, the record of the highest keyring version, is missing beside the stored version {}: the record was deleted and a rollback cannot be ruled out; the agent recorded version {}",
                        self.namespace, stored.version, stored.version
                    ))
                    .await;
                }
                self.write_keyring(KEYRING_HIGHEST_NAME, &stored).await;
                stored
            }
            (Some(Ok(stored)), Some(recorded)) if stored.version >= recorded.version => {
                if stored.signed != recorded.signed {
                    self.write_keyring(KEYRING_HIGHEST_NAME, &stored).await;
                }
                stored
            }
            (stored, Some(recorded)) => {
                let what = match stored {
                    None => "was deleted".to_owned(),
                    Some(Ok(stored)) => format!(
                        "is version {}, lower than version {} this cluster held: a rollback",
                        stored.version, recorded.version
                    ),
                    Some(Err(err)) => format!("is refused: {}", chain(&err)),
                };
                self.tampered(format!(
                    "the keyring stored in {where_stored} {what}; the agent holds version {} from ConfigMap {}/{KEYRING_HIGHEST_NAME} and restored it",
                    recorded.version, self.namespace
                ))
                .await;
                self.write_keyring(KEYRING_NAME, &recorded).await;
                recorded
            }
            (Some(Err(err)), None) => {
                self.tampered(format!(
                    "the keyring stored in {where_stored} is refused: {}",
                    chain(&err)
                ))
                .await;
                return;
            }
        };
        tracing::info!(version = keyring.version, keys = ?keyring.key_ids(), "loaded the stored keyring");
        self.held
            .send_modify(|h| h.keyring = Some(Arc::new(keyring)));
    }

    /// Writes `keyring`'s signed text to ConfigMap `name`; a failure is logged (the next start
    /// weighs the two again).
    async fn write_keyring(&self, name: &'static str, keyring: &Keyring) {
        let Some(signed) = &keyring.signed else {
            return;
        };
        if let Err(err) = self.write(name, KEYRING_KEY, signed.to_yaml()).await {
            tracing::warn!(error = %chain(&err), "writing ConfigMap {name}");
        }
    }

    /// The stored keyring against the one held, while the agent runs: one changed or deleted
    /// by someone else is reported and written again from the held one.
    async fn observe_keyring(&self, stored: Option<&ConfigMap>) {
        // Not while a keyring is between its write and being held (its own write).
        let _one_at_a_time = self.push.lock().await;
        let Some(held) = self.held.borrow().keyring.clone() else {
            return;
        };
        let Some(signed) = &held.signed else {
            return;
        };
        let text = stored
            .and_then(|cm| cm.data.as_ref())
            .and_then(|d| d.get(KEYRING_KEY));
        let same = text
            .and_then(|t| tenantflux_core::yaml::from_str::<SignedKeyring>(t).ok())
            .is_some_and(|s| &s == signed);
        if same {
            return;
        }
        let what = if text.is_some() {
            "was changed"
        } else {
            "was deleted"
        };
        self.tampered(format!(
            "the keyring stored in ConfigMap {}/{KEYRING_NAME} {what} by someone other than the agent; the agent keeps version {} and restored it",
            self.namespace, held.version
        ))
        .await;
        self.write_keyring(KEYRING_NAME, &held).await;
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
        let Some(accepted) = held else {
            return self.load_at_start(text).await;
        };
        let tampering = decide::tampering(&accepted.signed, text.as_deref(), |text| {
            self.verify_stored(text)
                .map(|(_, verified)| verified.policy.generation())
        });
        let Some(what) = tampering else {
            return;
        };
        self.tampered(format!(
            "the policy stored in {} {what}; the agent keeps generation {} and restored it",
            self.where_stored(),
            accepted.policy.generation()
        ))
        .await;
        if let Err(err) = self.store(&accepted.signed).await {
            tracing::warn!(error = %chain(&err), "restoring the stored policy");
        }
    }

    fn where_recorded(&self) -> String {
        format!("ConfigMap {}/{HIGHEST_NAME}", self.namespace)
    }

    /// At start: the stored copy and the record of the highest generation, weighed by
    /// `decide::at_start`; whatever is refused is reported, and the copy that lost is
    /// written again from the one held.
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
        let start = decide::at_start(
            text.map(|text| self.verify_stored(&text)),
            recorded.map(|text| self.verify_stored(&text)),
            &cluster,
            |(_, verified)| &verified.policy,
        );
        for problem in start.problems {
            self.tampered(match problem {
                StartProblem::RecordIgnored { reason } => format!(
                    "the policy recorded in {} is ignored: {reason}",
                    self.where_recorded()
                ),
                StartProblem::StoredRefused { reason } => format!(
                    "the policy stored in {} is refused: {reason}",
                    self.where_stored()
                ),
                StartProblem::RecordRolledBack { recorded, stored } => format!(
                    "{} recorded generation {recorded}, lower than the stored generation {stored}: it was rolled back; the agent recorded generation {stored} again",
                    self.where_recorded(),
                ),
                StartProblem::RecordMissing { stored } => format!(
                    "{}, the record of the highest generation, is missing beside the stored generation {stored}: the agent records a push before it stores it, so the record was deleted and a rollback cannot be ruled out; the agent recorded generation {stored}",
                    self.where_recorded(),
                ),
                StartProblem::StoredReplaced {
                    deleted,
                    generation,
                } => format!(
                    "the stored policy was {}: the agent holds generation {generation} from {} and restored {} from it",
                    if deleted { "deleted" } else { "refused" },
                    self.where_recorded(),
                    self.where_stored()
                ),
            })
            .await;
        }
        let (signed, verified) = match start.hold {
            None => return,
            Some(Hold::Stored { copy, record }) => {
                if record && let Err(err) = self.record(&copy.0).await {
                    tracing::warn!(error = %chain(&err), "recording the highest policy generation");
                }
                copy
            }
            Some(Hold::Recorded(copy)) => {
                if let Err(err) = self.store(&copy.0).await {
                    tracing::warn!(error = %chain(&err), "restoring the stored policy");
                }
                copy
            }
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
}

/// Ends a spawned task when its owner returns.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
