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

use super::{
    Accepted, HIGHEST_NAME, KEYRING_KEY, KEYRING_NAME, PolicyStore, STORE_KEY, STORE_NAME,
};

/// How soon the cluster's identity is asked again while the API server does not answer.
const IDENTITY_RETRY: std::time::Duration = std::time::Duration::from_secs(2);

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
            Err(err) => {
                self.tampered(format!(
                    "the keyring stored in ConfigMap {}/{KEYRING_NAME} is refused: {}",
                    self.namespace,
                    chain(&err)
                ))
                .await;
            }
        }
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
