//! The watches that more than one capability reads, each run once: a kube-runtime reflector
//! keeps the objects in a [`Store`], and a `tokio::sync::watch` channel tells every reader
//! that the store or the watch's health changed. Readers are level-triggered: they look at
//! the store when told, they get no events. (kube's own fan-out, `Writer::subscribe` behind
//! `unstable-runtime-subscribe`, passes on neither deletions nor watch errors, and both the
//! status and the install loop act on them.)
//!
//! The workloads caches watch FluxInstances too, but every one in the cluster, at the version
//! discovery found, keeping rows rather than objects, per kind alike (`workloads::cache`); the
//! status's watch of the one FluxInstance by name stays its own.

use std::{future::Future, hash::Hash, sync::Arc};

use futures::{Stream, StreamExt};
use kube::{
    Api,
    runtime::{
        WatchStreamExt, reflector,
        reflector::{Lookup, Store},
        watcher::{self, Event},
    },
};
use tokio::sync::watch;

/// Where a shared watch stands.
#[derive(Clone, Debug, Default)]
pub struct Health {
    /// A list has completed: the store holds what the cluster has, so an object missing from
    /// it does not exist.
    pub listed: bool,
    /// The watch's last failure, until the next list or event arrives. The store keeps what
    /// the last list and events left in it.
    pub error: Option<Arc<watcher::Error>>,
}

/// What a reader of a shared watch sees when it looks.
#[derive(Debug)]
pub enum Seen<K> {
    /// No list has completed yet.
    Listing,
    /// The watch failed; see [`Health::error`].
    Failed(Arc<watcher::Error>),
    /// Listed, and the watched object is there (or not).
    Listed(Option<Arc<K>>),
}

/// A reader's handle on one shared watch: clone one per reader, before the watch starts, so
/// that its first change wakes every reader.
pub struct Shared<K>
where
    K: Lookup + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    store: Store<K>,
    health: watch::Receiver<Health>,
}

impl<K> Clone for Shared<K>
where
    K: Lookup + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    fn clone(&self) -> Self {
        Self {
            store: self.store.clone(),
            health: self.health.clone(),
        }
    }
}

impl<K> Shared<K>
where
    K: Lookup + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    /// Waits until the store or the watch's health changed since this handle last looked.
    /// Fails only once the watch has stopped for good (its task ended).
    pub async fn changed(&mut self) -> Result<(), watch::error::RecvError> {
        self.health.changed().await
    }

    /// What [`Shared::look`] shows after each change, as a loop's events; over once the
    /// watch has stopped for good.
    pub fn updates(self) -> impl futures::Stream<Item = Seen<K>> + Send
    where
        K: Send + Sync,
        K::DynamicType: Send + Sync,
    {
        futures::stream::unfold(self, |mut shared| async move {
            shared.changed().await.ok()?;
            let seen = shared.look();
            Some((seen, shared))
        })
    }

    /// The watched object, for watches of one object by name (or the first of the store), and
    /// marks the current state as seen.
    pub fn look(&mut self) -> Seen<K> {
        let health = self.health.borrow_and_update().clone();
        match (health.error, health.listed) {
            (Some(error), _) => Seen::Failed(error),
            (None, false) => Seen::Listing,
            (None, true) => Seen::Listed(self.store.state().into_iter().next()),
        }
    }
}

/// A shared watch of `api` with `config` (and the agent's watch backoff), and the task that
/// runs it: the task ends only if the watch stream does, which it never does by itself.
pub fn shared<K>(
    api: Api<K>,
    config: watcher::Config,
    dyntype: K::DynamicType,
) -> (Shared<K>, impl Future<Output = WatchEnded> + Send + 'static)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync,
    K: 'static,
    <K as kube::Resource>::DynamicType: Eq + Hash + Clone + Send + Sync,
{
    let events = watcher::watcher(api, config).backoff(crate::watch_backoff());
    reflect(events, dyntype)
}

/// The watch stream of a shared watch ended (it retries with backoff, so it should not).
#[derive(Debug)]
pub struct WatchEnded;

/// Reflects `events` into a store and publishes the watch's health; see [`shared`].
fn reflect<K, S>(
    events: S,
    dyntype: K::DynamicType,
) -> (Shared<K>, impl Future<Output = WatchEnded> + Send + 'static)
where
    K: Lookup + Clone + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Send + Sync,
    S: Stream<Item = watcher::Result<Event<K>>> + Send + 'static,
{
    let writer = reflector::store::Writer::new(dyntype);
    let store = writer.as_reader();
    let (tx, health) = watch::channel(Health::default());
    let task = async move {
        let mut events = std::pin::pin!(reflector(writer, events));
        while let Some(event) = events.next().await {
            fold(&tx, event);
        }
        WatchEnded
    };
    (Shared { store, health }, task)
}

/// Folds one event of the reflected stream into the watch's health, telling the readers when
/// what they see changed.
fn fold<K>(tx: &watch::Sender<Health>, event: watcher::Result<Event<K>>) {
    match event {
        // `Init` comes before each (re-)list, so it says nothing about whether the list works,
        // and the store changes only once the list is done.
        Ok(Event::Init) => {}
        Ok(Event::InitApply(_)) => {
            tx.send_if_modified(|health| health.error.take().is_some());
        }
        Ok(Event::InitDone | Event::Apply(_) | Event::Delete(_)) => tx.send_modify(|health| {
            health.listed = true;
            health.error = None;
        }),
        Err(error) => tx.send_modify(|health| health.error = Some(Arc::new(error))),
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::apps::v1::Deployment;

    use super::*;

    fn deployment(generation: i64) -> Deployment {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "flux-operator", "namespace": "flux-system", "generation": generation},
        }))
        .unwrap()
    }

    fn listed(seen: Seen<Deployment>) -> Option<i64> {
        match seen {
            Seen::Listed(object) => object.and_then(|d| d.metadata.generation),
            other => panic!("not listed: {other:?}"),
        }
    }

    /// Runs `events` through a shared watch and returns a reader that has seen them all.
    async fn through(events: Vec<watcher::Result<Event<Deployment>>>) -> Shared<Deployment> {
        let (shared, task) = reflect(futures::stream::iter(events), ());
        task.await;
        shared
    }

    #[tokio::test]
    async fn a_relist_replaces_the_object_only_when_done() {
        let mut shared = through(vec![Ok(Event::Init), Ok(Event::InitApply(deployment(1)))]).await;
        assert!(
            matches!(shared.look(), Seen::Listing),
            "not before InitDone"
        );

        let mut shared = through(vec![
            Ok(Event::Init),
            Ok(Event::InitApply(deployment(1))),
            Ok(Event::InitDone),
        ])
        .await;
        assert_eq!(listed(shared.look()), Some(1));

        let mut shared = through(vec![
            Ok(Event::Init),
            Ok(Event::InitApply(deployment(1))),
            Ok(Event::InitDone),
            Ok(Event::Init),
            Ok(Event::InitDone),
        ])
        .await;
        assert_eq!(listed(shared.look()), None, "gone from the re-list");

        let mut shared = through(vec![
            Ok(Event::Init),
            Ok(Event::InitDone),
            Ok(Event::Apply(deployment(2))),
        ])
        .await;
        assert_eq!(listed(shared.look()), Some(2));
        let mut shared = through(vec![
            Ok(Event::Init),
            Ok(Event::InitDone),
            Ok(Event::Apply(deployment(2))),
            Ok(Event::Delete(deployment(2))),
        ])
        .await;
        assert_eq!(listed(shared.look()), None);
    }

    #[tokio::test]
    async fn an_error_lasts_until_a_list_or_event_arrives_and_init_is_no_answer() {
        let failed = || Err(watcher::Error::NoResourceVersion);
        let mut shared = through(vec![failed(), Ok(Event::Init)]).await;
        assert!(
            matches!(shared.look(), Seen::Failed(_)),
            "Init precedes every list attempt"
        );
        let mut shared = through(vec![failed(), Ok(Event::Init), Ok(Event::InitDone)]).await;
        assert_eq!(listed(shared.look()), None, "cleared once a list succeeded");
    }

    #[tokio::test]
    async fn every_reader_is_woken_and_looking_marks_the_change_seen() {
        let events = futures::stream::iter(vec![Ok(Event::Init), Ok(Event::InitDone)]);
        let (shared, task) = reflect::<Deployment, _>(events.chain(futures::stream::pending()), ());
        let (mut one, mut two) = (shared.clone(), shared);
        let task = tokio::spawn(task);
        for reader in [&mut one, &mut two] {
            tokio::time::timeout(std::time::Duration::from_secs(5), reader.changed())
                .await
                .expect("woken")
                .expect("the watch runs");
            assert_eq!(listed(reader.look()), None);
            assert!(!reader.health.has_changed().unwrap(), "seen");
        }
        task.abort();
    }
}
