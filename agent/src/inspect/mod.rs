//! Finding out why something is not deployed, through the agent: the Events of Flux objects
//! (`events`), the controllers' log lines about them (`logs`), an inventory as a tree
//! (`tree`), the chain that applied an object (`trace`) and counts per kind from the caches
//! (`stats`). Each call asks [`Access`] for the caller's rights on what it reads;
//! `server::inspect` serves them as `tenantflux.v1.Inspect`.

use std::{sync::Arc, time::Duration};

use kube::Client;
use tokio_util::sync::CancellationToken;

use crate::workloads::{
    Caches, WorkloadsError,
    access::{Access, AccessError, Need},
    cache::KindCache,
    catalog::FluxKind,
};

pub mod events;
pub mod inventory;
pub mod logs;
pub mod stats;
pub mod trace;
pub mod tree;

type Result<T, E = WorkloadsError> = std::result::Result<T, E>;

/// How long a call waits for the first discovery, or for a cache's first list.
const CACHE_WAIT: Duration = Duration::from_secs(10);

/// The inspect calls over the caches and the API server.
pub struct Inspector {
    caches: Arc<Caches>,
    client: Client,
    /// Where the Flux controllers run (their logs are read there).
    flux_namespace: String,
    shutdown: CancellationToken,
}

impl Inspector {
    pub fn new(
        caches: Arc<Caches>,
        client: Client,
        flux_namespace: &str,
        shutdown: CancellationToken,
    ) -> Self {
        Self {
            caches,
            client,
            flux_namespace: flux_namespace.to_owned(),
            shutdown,
        }
    }

    async fn served(&self) -> Result<Vec<Arc<KindCache>>> {
        if !self.caches.discovered(CACHE_WAIT).await {
            return Err(WorkloadsError::Loading {
                what: "the Flux APIs the cluster serves".into(),
            });
        }
        Ok(self.caches.served())
    }

    async fn cache_of(&self, kind: &'static FluxKind) -> Result<Arc<KindCache>> {
        let cache = self
            .served()
            .await?
            .into_iter()
            .find(|c| std::ptr::eq(c.kind, kind))
            .ok_or_else(|| WorkloadsError::NotServed {
                kind: kind.kind,
                resource: kind.resource(),
            })?;
        match tokio::time::timeout(CACHE_WAIT, cache.store.wait_until_ready()).await {
            Ok(()) => Ok(cache),
            Err(_) => Err(WorkloadsError::Loading {
                what: format!("the {} objects", cache.kind.kind),
            }),
        }
    }

    /// The cache of the Flux kind `group`/`kind` names, if the cluster serves it.
    fn flux_cache(&self, group: &str, kind: &str) -> Option<Arc<KindCache>> {
        self.caches
            .served()
            .into_iter()
            .find(|c| c.kind.group == group && c.kind.kind == kind)
    }
}

/// The kind `name` names, as `get` accepts it.
fn find_kind(caches: &Caches, name: &str) -> Result<&'static FluxKind> {
    caches
        .find(name)
        .ok_or_else(|| WorkloadsError::UnknownKind {
            name: name.into(),
            known: caches
                .known()
                .iter()
                .map(|k| k.kind.to_ascii_lowercase())
                .collect::<Vec<_>>()
                .join(", "),
        })
}

/// Splits `needs` into the permitted ones and the reasons of the denied ones; a decision that
/// could not be made is an error.
async fn decide<T>(
    access: &impl Access,
    items: Vec<(T, Need)>,
) -> Result<(Vec<T>, Vec<(T, String)>)> {
    let needs: Vec<Need> = items.iter().map(|(_, n)| n.clone()).collect();
    let decisions = access.check_each(&needs).await?;
    let mut permitted = Vec::new();
    let mut denied = Vec::new();
    for ((item, _), decision) in items.into_iter().zip(decisions) {
        match decision {
            Ok(()) => permitted.push(item),
            Err(AccessError::Denied(reason)) => denied.push((item, reason)),
            Err(err) => return Err(err.into()),
        }
    }
    Ok((permitted, denied))
}
