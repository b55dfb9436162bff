//! Which Flux kinds the cluster serves, and an in-memory cache (a reflector) of every object of
//! each, at the version the cluster prefers. Discovery runs again whenever a CRD of a Flux API
//! group changes (and every half minute), so the caches follow a Flux upgrade that adds or
//! removes API versions or kinds: a kind served under a Flux group that the compiled table
//! lacks is cached too, under a generic entry (`catalog::unknown`), once the agent may list
//! and watch it. The cache keeps of each object its row and what filters read ([`Cached`]),
//! not the object.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, RwLock},
    time::Duration,
};

use futures::StreamExt;
use k8s_openapi::{
    api::authorization::v1::{
        ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
    },
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::{
    Api, Client, Discovery, ResourceExt,
    api::{ApiResource, DynamicObject, PartialObjectMeta, PostParams},
    discovery::Scope,
    runtime::{
        WatchStreamExt,
        watcher::{self, Event},
    },
};
use tokio::{
    sync::{broadcast, watch},
    task::JoinHandle,
};

use super::{
    catalog::{self, FluxKind, GroupVersions, Registry, Served, Unknown},
    rows::Cached,
};
use tokio_util::sync::CancellationToken;

use crate::reconcile::{Next, Wake};

/// How often discovery runs without a CRD change (a missed watch event is caught up here).
const REDISCOVER_EVERY: Duration = Duration::from_secs(30);
/// How long after a CRD change discovery runs: an upgrade changes many CRDs at once.
const DEBOUNCE: Duration = Duration::from_secs(1);
/// How soon a failed discovery is retried.
const RETRY: Duration = Duration::from_secs(5);
/// Changes buffered for each open watch; a watch that falls further behind is ended.
const EVENT_BUFFER: usize = 4096;

/// What happened to an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChangeType {
    Added,
    Modified,
    Deleted,
}

/// One change of a cached object, as open watches receive it.
#[derive(Clone, Debug)]
pub struct Change {
    pub kind: &'static FluxKind,
    pub type_: ChangeType,
    pub object: Arc<Cached>,
}

/// An object's key in a cache: (namespace, name).
type Key = (String, String);

/// The cached objects of one kind, by namespace and name; ready once the first list is in.
pub struct Objects {
    map: RwLock<HashMap<Key, Arc<Cached>>>,
    ready: watch::Sender<bool>,
}

impl Default for Objects {
    fn default() -> Self {
        Self {
            map: RwLock::default(),
            ready: watch::channel(false).0,
        }
    }
}

impl Objects {
    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<Cached>> {
        let key = (namespace.to_owned(), name.to_owned());
        self.read().get(&key).cloned()
    }

    pub fn count(&self) -> usize {
        self.read().len()
    }

    /// Every object, in no order.
    pub fn state(&self) -> Vec<Arc<Cached>> {
        self.read().values().cloned().collect()
    }

    /// Waits until the first list is in.
    pub async fn wait_until_ready(&self) {
        let mut ready = self.ready.subscribe();
        let _ = ready.wait_for(|r| *r).await;
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<Key, Arc<Cached>>> {
        self.map.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<Key, Arc<Cached>>> {
        self.map.write().unwrap_or_else(|p| p.into_inner())
    }
}

/// The cache of one served kind.
pub struct KindCache {
    pub kind: &'static FluxKind,
    pub served: Served,
    pub resource: ApiResource,
    pub store: Arc<Objects>,
    /// Shared by the entries of successive discoveries that found the same version.
    _reflector: Arc<Reflector>,
}

/// The task filling a store; stopped once the last cache entry holding it is dropped.
struct Reflector(JoinHandle<()>);

impl Drop for Reflector {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Every served kind's cache, kept current by [`Caches::run`].
pub struct Caches {
    kinds: RwLock<Vec<Arc<KindCache>>>,
    changes: broadcast::Sender<Change>,
    discovered: watch::Sender<bool>,
    /// The entries of the kinds discovery found beyond the compiled table.
    registry: Mutex<Registry>,
}

impl Default for Caches {
    fn default() -> Self {
        Self {
            kinds: RwLock::default(),
            changes: broadcast::channel(EVENT_BUFFER).0,
            discovered: watch::channel(false).0,
            registry: Mutex::default(),
        }
    }
}

/// The discovery loop: what the cluster serves of the Flux APIs, found again on a CRD change
/// (after [`DEBOUNCE`]) and every [`REDISCOVER_EVERY`].
struct Discoverer {
    cache: Arc<Caches>,
    client: Client,
    /// The next discovery.
    next: tokio::time::Instant,
    /// The last failure, logged once until it changes or discovery recovers.
    last_error: Option<String>,
    /// Why each discovered kind is not cached, as last logged (logged again when it changes).
    left_out: HashMap<String, String>,
}

impl crate::reconcile::Pass for Discoverer {
    type Event = ();

    async fn pass(&mut self, wake: Wake<()>) -> Next {
        let now = tokio::time::Instant::now();
        if let Wake::Event(()) = wake {
            // A CRD changed: soon, once a burst of changes is over.
            self.next = self.next.min(now + DEBOUNCE);
            return Next::At(self.next);
        }
        if now < self.next {
            return Next::At(self.next);
        }
        self.next = match discover(&self.client).await {
            Ok(groups) => {
                if self.last_error.take().is_some() {
                    tracing::info!("discovery of the Flux APIs recovered");
                }
                let kinds = self
                    .cache
                    .resolve(&self.client, &groups, &mut self.left_out)
                    .await;
                self.cache.update(&self.client, kinds);
                tokio::time::Instant::now() + REDISCOVER_EVERY
            }
            Err(err) => {
                let text = err.to_string();
                if self.last_error.as_ref() != Some(&text) {
                    tracing::warn!(error = %text, "discovering the Flux APIs failed; retrying");
                    self.last_error = Some(text);
                }
                tokio::time::Instant::now() + RETRY
            }
        };
        Next::At(self.next)
    }
}

impl Caches {
    /// The caches of the served kinds: the table's in its order, then the discovered ones.
    pub fn served(&self) -> Vec<Arc<KindCache>> {
        self.kinds.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Every kind there is: the table's, served or not, then the served ones discovery found
    /// beyond it.
    pub fn known(&self) -> Vec<&'static FluxKind> {
        catalog::KINDS
            .iter()
            .chain(
                self.served()
                    .iter()
                    .map(|c| c.kind)
                    .filter(|k| !k.is_compiled()),
            )
            .collect()
    }

    /// The kind `name` names (its kind, plural or a short name, case-insensitive): one of the
    /// table's, else a served kind discovery found.
    pub fn find(&self, name: &str) -> Option<&'static FluxKind> {
        catalog::find(name).or_else(|| {
            self.served()
                .iter()
                .map(|c| c.kind)
                .find(|k| k.is_named(name))
        })
    }

    /// The cache of `kind`, if the cluster serves it.
    pub fn get(&self, kind: &FluxKind) -> Option<Arc<KindCache>> {
        self.served()
            .into_iter()
            .find(|c| std::ptr::eq(c.kind, kind))
    }

    /// How many objects of each served kind are cached, by kind.
    pub fn counts(&self) -> Vec<(&'static str, usize)> {
        self.served()
            .iter()
            .map(|c| (c.kind.kind, c.store.count()))
            .collect()
    }

    /// Changes from now on, of every kind.
    pub fn subscribe(&self) -> broadcast::Receiver<Change> {
        self.changes.subscribe()
    }

    /// Waits until the first discovery is done (or `timeout`); false if it is not.
    pub async fn discovered(&self, timeout: Duration) -> bool {
        let mut rx = self.discovered.subscribe();
        tokio::time::timeout(timeout, rx.wait_for(|d| *d))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// Discovers, starts and replaces reflectors, and re-discovers on CRD changes, until the
    /// shutdown.
    pub async fn run(self: Arc<Self>, client: Client, shutdown: CancellationToken) {
        // Metadata only: a CRD's name is `<plural>.<group>`, which is all that is needed.
        let crds = watcher::watcher(
            Api::<PartialObjectMeta<CustomResourceDefinition>>::all(client.clone()),
            watcher::Config::default(),
        )
        .backoff(crate::watch_backoff())
        .filter_map(|event| {
            let relevant = match event {
                Ok(Event::Apply(crd) | Event::Delete(crd)) => crd
                    .name_any()
                    .split_once('.')
                    .is_some_and(|(_, group)| catalog::is_flux_group(group)),
                Ok(Event::InitDone) => true,
                Ok(_) => false,
                Err(err) => {
                    tracing::debug!(%err, "watching CustomResourceDefinitions failed; retrying");
                    false
                }
            };
            std::future::ready(relevant.then_some(()))
        });
        let discovery = Discoverer {
            cache: self.clone(),
            client,
            next: tokio::time::Instant::now(),
            last_error: None,
            left_out: HashMap::new(),
        };
        crate::reconcile::run(discovery, crds, &shutdown).await;
        // Stops every reflector.
        self.kinds
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }

    /// The kinds to cache and how each is served: the table's that the cluster serves, then
    /// the ones discovery found beyond it that the agent may list and watch, each with its
    /// entry. Why one of those is left out is logged when it changes.
    async fn resolve(
        &self,
        client: &Client,
        groups: &[GroupVersions],
        left_out: &mut HashMap<String, String>,
    ) -> Vec<(&'static FluxKind, Served)> {
        let mut kinds: Vec<(&'static FluxKind, Served)> = catalog::KINDS
            .iter()
            .filter_map(|kind| Some((kind, catalog::served(kind, groups)?)))
            .collect();
        let unknown = catalog::unknown(groups);
        left_out.retain(|crd, _| unknown.iter().any(|u| u.crd() == *crd));
        for found in unknown {
            match self.discovered_entry(client, &found).await {
                Ok(kind) => {
                    if left_out.remove(&found.crd()).is_some() {
                        tracing::info!(resource = %found.crd(), "a discovered Flux kind is cached again");
                    }
                    kinds.push((kind, found.served));
                }
                Err(reason) => {
                    if left_out.get(&found.crd()) != Some(&reason) {
                        tracing::warn!(resource = %found.crd(), %reason, "a Flux kind the compiled table lacks is not cached");
                        left_out.insert(found.crd(), reason);
                    }
                }
            }
        }
        kinds
    }

    /// The entry of a kind discovery found beyond the table, once its CRD says how it is
    /// suspended and the agent may list and watch it (a reflector it may not run would keep
    /// every `get all` waiting for that kind's first list).
    async fn discovered_entry(
        &self,
        client: &Client,
        found: &Unknown,
    ) -> Result<&'static FluxKind, String> {
        for verb in ["list", "watch"] {
            if !may(client, verb, found).await? {
                return Err(format!(
                    "the agent may not {verb} {} (add it to the agent's ClusterRole)",
                    found.crd()
                ));
            }
        }
        let crd = Api::<CustomResourceDefinition>::all(client.clone())
            .get(&found.crd())
            .await
            .map_err(|err| format!("reading CustomResourceDefinition {}: {err}", found.crd()))?;
        let spec_suspend = catalog::has_spec_suspend(&crd, &found.served.version);
        self.registry
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(&found.kind, &found.group, &found.plural, spec_suspend)
            .map_err(|full| format!("{full}; restart the agent to cache kinds since removed"))
    }

    /// Keeps the reflectors whose version is unchanged, starts the new ones, and drops the
    /// ones whose kind or version is gone.
    fn update(&self, client: &Client, kinds: Vec<(&'static FluxKind, Served)>) {
        let current = self.served();
        let mut next = Vec::new();
        for (kind, served) in kinds {
            let same_version = current
                .iter()
                .find(|c| std::ptr::eq(c.kind, kind) && c.served.version == served.version);
            next.push(match same_version {
                Some(cache) if cache.served == served => cache.clone(),
                Some(cache) => Arc::new(KindCache {
                    kind,
                    served,
                    resource: cache.resource.clone(),
                    store: cache.store.clone(),
                    _reflector: cache._reflector.clone(),
                }),
                None => {
                    tracing::info!(kind = kind.kind, version = %served.version, "caching Flux objects");
                    Arc::new(self.start(client, kind, served))
                }
            });
        }
        for gone in &current {
            if !next
                .iter()
                .any(|n| std::ptr::eq(n.kind, gone.kind) && n.served.version == gone.served.version)
            {
                tracing::info!(kind = gone.kind.kind, version = %gone.served.version, "no longer served at this version; cache dropped");
            }
        }
        *self.kinds.write().unwrap_or_else(|p| p.into_inner()) = next;
        self.discovered.send_replace(true);
    }

    fn start(&self, client: &Client, kind: &'static FluxKind, served: Served) -> KindCache {
        let resource = ApiResource {
            group: kind.group.into(),
            version: served.version.clone(),
            api_version: format!("{}/{}", kind.group, served.version),
            kind: kind.kind.into(),
            plural: kind.plural.into(),
        };
        let store = Arc::new(Objects::default());
        let api = Api::<DynamicObject>::all_with(client.clone(), &resource);
        let reflector = tokio::spawn(reflect(api, store.clone(), kind, self.changes.clone()));
        KindCache {
            kind,
            served,
            resource,
            store,
            _reflector: Arc::new(Reflector(reflector)),
        }
    }
}

/// Whether the agent may `verb` the objects of `found` in every namespace.
async fn may(client: &Client, verb: &str, found: &Unknown) -> Result<bool, String> {
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                group: Some(found.group.clone()),
                resource: Some(found.plural.clone()),
                verb: Some(verb.to_owned()),
                ..ResourceAttributes::default()
            }),
            ..SelfSubjectAccessReviewSpec::default()
        },
        ..SelfSubjectAccessReview::default()
    };
    Api::<SelfSubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .map(|answer| answer.status.is_some_and(|s| s.allowed))
        .map_err(|err| {
            format!(
                "checking the agent's own permissions on {}: {err}",
                found.crd()
            )
        })
}

/// The versions and kinds of every Flux API group the cluster serves (one aggregated
/// discovery request; which groups are Flux's is a rule on their names, not a list, so every
/// group is fetched and the others dropped here, as kube's own filter would do).
async fn discover(client: &Client) -> Result<Vec<GroupVersions>, kube::Error> {
    let discovery = Discovery::new(client.clone())
        .exclude(&[""])
        .run_aggregated()
        .await?;
    Ok(discovery
        .groups()
        .filter(|group| catalog::is_flux_group(group.name()))
        .map(|group| {
            let mut resources: Vec<(String, String)> = Vec::new();
            let versions = group
                .versions()
                .map(|version| {
                    let served = group.versioned_resources(version);
                    for (resource, capabilities) in &served {
                        if capabilities.scope == Scope::Namespaced
                            && !resources.iter().any(|(kind, _)| *kind == resource.kind)
                        {
                            resources.push((resource.kind.clone(), resource.plural.clone()));
                        }
                    }
                    let kinds = served
                        .into_iter()
                        .map(|(resource, _)| resource.kind)
                        .collect();
                    (version.to_owned(), kinds)
                })
                .collect();
            GroupVersions {
                group: group.name().to_owned(),
                preferred: group.preferred_version().map(str::to_owned),
                versions,
                resources,
            }
        })
        .collect())
}

/// What a re-list changed: objects new or of another resourceVersion than before, and
/// objects gone.
fn relist_changes<V>(
    before: &HashMap<Key, V>,
    after: &HashMap<Key, V>,
    version: impl Fn(&V) -> &str,
) -> Vec<(ChangeType, Key)> {
    let mut changes: Vec<(ChangeType, Key)> = after
        .iter()
        .filter_map(|(key, new)| match before.get(key) {
            None => Some((ChangeType::Added, key.clone())),
            Some(old) if version(old) != version(new) => Some((ChangeType::Modified, key.clone())),
            Some(_) => None,
        })
        .chain(
            before
                .keys()
                .filter(|key| !after.contains_key(*key))
                .map(|key| (ChangeType::Deleted, key.clone())),
        )
        .collect();
    changes.sort_by(|a, b| a.1.cmp(&b.1));
    changes
}

/// Fills `store` from a watch of every object of `api`, and publishes each change.
async fn reflect(
    api: Api<DynamicObject>,
    store: Arc<Objects>,
    kind: &'static FluxKind,
    changes: broadcast::Sender<Change>,
) {
    let url = api.resource_url().to_owned();
    let stream = watcher::watcher(api, watcher::Config::default()).backoff(crate::watch_backoff());
    let mut stream = std::pin::pin!(stream);
    // The objects of a (re-)list in progress; they replace the store's once it is done.
    let mut listing: HashMap<Key, Arc<Cached>> = HashMap::new();
    let mut failing: Option<String> = None;
    let send = |type_, object| {
        // No receiver is not an error: nobody watches right now.
        let _ = changes.send(Change {
            kind,
            type_,
            object,
        });
    };
    let cached = |object: DynamicObject| {
        let cached = Arc::new(Cached::new(kind, object));
        ((cached.namespace.clone(), cached.name.clone()), cached)
    };
    while let Some(event) = stream.next().await {
        let event = match event {
            Ok(event) => {
                if failing.take().is_some() {
                    tracing::info!(kind = kind.kind, "watch recovered");
                }
                event
            }
            Err(err) => {
                let text = err.to_string();
                if failing.as_ref() != Some(&text) {
                    tracing::warn!(kind = kind.kind, %url, error = %text, "watching Flux objects failed; retrying with backoff");
                    failing = Some(text);
                }
                continue;
            }
        };
        match event {
            Event::Init => listing.clear(),
            Event::InitApply(object) => {
                let (key, object) = cached(object);
                listing.insert(key, object);
            }
            Event::InitDone => {
                let mut map = store.write();
                let before = std::mem::replace(&mut *map, std::mem::take(&mut listing));
                let relisted: Vec<(ChangeType, Arc<Cached>)> =
                    relist_changes(&before, &map, |o| o.resource_version.as_str())
                        .into_iter()
                        .filter_map(|(type_, key)| {
                            let from = if type_ == ChangeType::Deleted {
                                &before
                            } else {
                                &*map
                            };
                            Some((type_, from.get(&key)?.clone()))
                        })
                        .collect();
                drop(map);
                store.ready.send_replace(true);
                for (type_, object) in relisted {
                    send(type_, object);
                }
            }
            Event::Apply(object) => {
                let (key, object) = cached(object);
                let existed = store.write().insert(key, object.clone()).is_some();
                let type_ = if existed {
                    ChangeType::Modified
                } else {
                    ChangeType::Added
                };
                send(type_, object);
            }
            Event::Delete(object) => {
                let (key, object) = cached(object);
                store.write().remove(&key);
                send(ChangeType::Deleted, object);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn versions(entries: &[(&str, &str)]) -> HashMap<Key, String> {
        entries
            .iter()
            .map(|(name, rv)| (("ns".to_owned(), name.to_string()), rv.to_string()))
            .collect()
    }

    #[test]
    fn relist_reports_added_modified_and_deleted_only() {
        let before = versions(&[("a", "1"), ("b", "1"), ("c", "1")]);
        let after = versions(&[("a", "1"), ("b", "2"), ("d", "1")]);
        let changes: Vec<_> = relist_changes(&before, &after, String::as_str)
            .into_iter()
            .map(|(t, (_, name))| (t, name))
            .collect();
        assert_eq!(
            changes,
            [
                (ChangeType::Modified, "b".to_owned()),
                (ChangeType::Deleted, "c".to_owned()),
                (ChangeType::Added, "d".to_owned()),
            ]
        );
        assert!(relist_changes(&after, &after, String::as_str).is_empty());
    }
}
