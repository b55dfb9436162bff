//! The workloads calls: Flux objects from the caches, and the writes that suspend, resume and
//! reconcile them, each checked against what the caller may do on the real resource and verb
//! ([`Access`], which the server implements with SubjectAccessReview for the call's caller).

use std::{pin::Pin, sync::Arc, time::Duration};

use futures::{Stream, StreamExt};
use kube::{
    Api, Client,
    api::{DynamicObject, Patch, PatchParams},
};
use tokio_stream::wrappers::{BroadcastStream, errors::BroadcastStreamRecvError};
use tokio_util::sync::CancellationToken;

use tenantflux_core::{FIELD_MANAGER, names};

use super::{
    access::{Access, AccessError, Need},
    cache::{Caches, Change, ChangeType, KindCache},
    catalog::{self, FluxKind},
    error::WorkloadsError,
    model::{
        Event, EventType, Filter, KindInfo, Listing, Object, ObjectRef, Query, Reconciled, Skipped,
    },
    patches::{self, Target},
    rows::Cached,
};

/// How long a call waits for the first discovery, or for a cache's first list.
const CACHE_WAIT: Duration = Duration::from_secs(10);

type Result<T, E = WorkloadsError> = std::result::Result<T, E>;

/// The changes of a watch, and what the caller must keep being allowed for it to go on.
pub struct Watch {
    pub events: Pin<Box<dyn Stream<Item = Result<Event>> + Send>>,
    pub needs: Vec<Need>,
}

/// The workloads calls over the caches.
pub struct Workloads {
    caches: Arc<Caches>,
    client: Client,
    shutdown: CancellationToken,
}

enum Kinds {
    One(Arc<KindCache>),
    All(Vec<Arc<KindCache>>),
}

impl Workloads {
    pub fn new(caches: Arc<Caches>, client: Client, shutdown: CancellationToken) -> Self {
        Self {
            caches,
            client,
            shutdown,
        }
    }

    /// Every kind of the catalog, and the served ones discovery found beyond it; any
    /// authenticated caller may learn which Flux APIs exist, as discovery allows.
    pub async fn list_kinds(&self, access: &impl Access) -> Result<Vec<KindInfo>> {
        access.identify().await?;
        self.wait_discovered().await?;
        let served = self.caches.served();
        Ok(self
            .caches
            .known()
            .into_iter()
            .map(|kind| {
                let cache = served.iter().find(|c| std::ptr::eq(c.kind, kind));
                KindInfo {
                    kind,
                    preferred_version: cache.map(|c| c.served.version.clone()),
                    served_versions: cache.map(|c| c.served.versions.clone()).unwrap_or_default(),
                }
            })
            .collect())
    }

    pub async fn list_objects(&self, access: &impl Access, query: &Query) -> Result<Listing> {
        let filter = Filter::new(&Query {
            name: String::new(),
            ..query.clone()
        })?;
        let kinds = self.kinds(&query.kind).await?;
        let (caches, skipped) = self
            .permitted(access, kinds, "list", filter.namespace.as_deref())
            .await?;
        let mut objects = Vec::new();
        for cache in caches {
            self.ready_store(&cache).await?;
            objects.extend(matching(&cache, &filter));
        }
        Ok(Listing { objects, skipped })
    }

    pub async fn get_object(
        &self,
        access: &impl Access,
        reference: Option<&ObjectRef>,
    ) -> Result<Object> {
        let reference = checked(reference, "GetObject")?;
        self.wait_discovered().await?;
        let cache = self.served(find_kind(&self.caches, &reference.kind)?)?;
        access
            .check(&Need::new("get", cache.kind, Some(&reference.namespace)).on(&reference.name))
            .await?;
        let cached = self
            .object(&cache, &reference.namespace, &reference.name)
            .await?;
        Ok(object(&cache, cached))
    }

    /// The objects that pass the query now, `Synced`, then every change, until the shutdown;
    /// a watch that falls behind ends after saying so.
    pub async fn watch_objects(&self, access: &impl Access, query: &Query) -> Result<Watch> {
        let filter = Filter::new(query)?;
        let kinds = self.kinds(&query.kind).await?;
        let (caches, _) = self
            .permitted(access, kinds, "watch", filter.namespace.as_deref())
            .await?;
        let needs = caches
            .iter()
            .map(|c| Need::new("watch", c.kind, filter.namespace.as_deref()))
            .collect();
        // Subscribed before the snapshot, so no change falls between the two.
        let changes = BroadcastStream::new(self.caches.subscribe());
        let mut snapshot = Vec::new();
        for cache in &caches {
            self.ready_store(cache).await?;
            snapshot.extend(matching(cache, &filter).into_iter().map(|o| Event {
                type_: EventType::Added,
                object: Some(o),
            }));
        }
        snapshot.push(Event {
            type_: EventType::Synced,
            object: None,
        });
        let kinds: Vec<(&'static FluxKind, String)> = caches
            .iter()
            .map(|c| (c.kind, c.resource.api_version.clone()))
            .collect();
        let changes = changes.filter_map(move |change| {
            std::future::ready(match change {
                Ok(Change {
                    kind,
                    type_,
                    object,
                }) => kinds.iter().find(|(k, _)| std::ptr::eq(*k, kind)).and_then(
                    |(kind, api_version)| {
                        filter.pass(&object).then_some(())?;
                        let type_ = match type_ {
                            ChangeType::Added => EventType::Added,
                            ChangeType::Modified => EventType::Modified,
                            ChangeType::Deleted => EventType::Deleted,
                        };
                        Some(Ok(Event {
                            type_,
                            object: Some(Object {
                                kind,
                                api_version: api_version.clone(),
                                cached: object,
                            }),
                        }))
                    },
                ),
                Err(BroadcastStreamRecvError::Lagged(n)) => Some(Err(WorkloadsError::Lagged(n))),
            })
        });
        let shutdown = self.shutdown.clone();
        let mut ended = false;
        let events = futures::stream::iter(snapshot.into_iter().map(Ok))
            .chain(changes)
            .take_while(move |item| {
                let go = !ended;
                ended = item.is_err();
                std::future::ready(go)
            })
            .take_until(async move { shutdown.cancelled().await });
        Ok(Watch {
            events: Box::pin(events),
            needs,
        })
    }

    pub async fn suspend(
        &self,
        access: &impl Access,
        reference: Option<&ObjectRef>,
    ) -> Result<Object> {
        let (cache, namespace, name) = self.writable(access, reference, "Suspend").await?;
        let patch = patches::suspend_patch(target(&cache, &namespace, &name), true, None);
        self.apply(&cache, &namespace, &name, "suspending", &patch)
            .await
    }

    pub async fn resume(
        &self,
        access: &impl Access,
        reference: Option<&ObjectRef>,
    ) -> Result<Reconciled> {
        let (cache, namespace, name) = self.writable(access, reference, "Resume").await?;
        let requested_at = now();
        let patch = patches::suspend_patch(
            target(&cache, &namespace, &name),
            false,
            Some(&requested_at),
        );
        let object = self
            .apply(&cache, &namespace, &name, "resuming", &patch)
            .await?;
        Ok(Reconciled {
            object,
            requested_at,
            source: None,
        })
    }

    /// Asks the controller to reconcile the object now (and its source first, `with_source`);
    /// `force` makes a HelmRelease upgrade even without changes.
    pub async fn reconcile(
        &self,
        access: &impl Access,
        reference: Option<&ObjectRef>,
        with_source: bool,
        force: bool,
    ) -> Result<Reconciled> {
        let (cache, namespace, name) = self.writable(access, reference, "Reconcile").await?;
        if force && cache.kind.kind != "HelmRelease" {
            return Err(WorkloadsError::InvalidArgument(format!(
                "force applies to HelmReleases only, not to {} {namespace}/{name}",
                cache.kind.kind
            )));
        }
        let requested_at = now();
        let source = if with_source {
            let cached = self.object(&cache, &namespace, &name).await?;
            let (kind, source_namespace, source_name) =
                cached
                    .row
                    .source
                    .clone()
                    .ok_or_else(|| WorkloadsError::NoSource {
                        kind: cache.kind.kind,
                        namespace: namespace.clone(),
                        name: name.clone(),
                    })?;
            let reference = ObjectRef {
                kind,
                namespace: source_namespace,
                name: source_name,
            };
            let (source_cache, source_namespace, source_name) =
                self.writable(access, Some(&reference), "Reconcile").await?;
            Some(
                self.reconcile_one(
                    &source_cache,
                    &source_namespace,
                    &source_name,
                    &requested_at,
                    false,
                )
                .await?,
            )
        } else {
            None
        };
        let object = self
            .reconcile_one(&cache, &namespace, &name, &requested_at, force)
            .await?;
        Ok(Reconciled {
            object,
            requested_at,
            source,
        })
    }

    async fn wait_discovered(&self) -> Result<()> {
        if self.caches.discovered(CACHE_WAIT).await {
            Ok(())
        } else {
            Err(WorkloadsError::Loading {
                what: "the Flux APIs the cluster serves".into(),
            })
        }
    }

    /// The kinds `name` stands for: one kind; every served kind for "all" or nothing; every
    /// served kind of a category for flux's `sources` and `images`.
    async fn kinds(&self, name: &str) -> Result<Kinds> {
        self.wait_discovered().await?;
        if name.is_empty() || name.eq_ignore_ascii_case("all") {
            return Ok(Kinds::All(self.caches.served()));
        }
        if let Some(category) = catalog::Category::named(name) {
            let served = self.caches.served();
            return Ok(Kinds::All(
                served
                    .into_iter()
                    .filter(|c| c.kind.category == category)
                    .collect(),
            ));
        }
        let kind = find_kind(&self.caches, name)?;
        Ok(Kinds::One(self.served(kind)?))
    }

    fn served(&self, kind: &'static FluxKind) -> Result<Arc<KindCache>> {
        self.caches
            .get(kind)
            .ok_or_else(|| WorkloadsError::NotServed {
                kind: kind.kind,
                resource: kind.resource(),
            })
    }

    /// The caches the caller may use `verb` on, with the kinds an "all" request skips because
    /// the caller may not; a single kind the caller may not use is an error.
    async fn permitted(
        &self,
        access: &impl Access,
        kinds: Kinds,
        verb: &'static str,
        namespace: Option<&str>,
    ) -> Result<(Vec<Arc<KindCache>>, Vec<Skipped>)> {
        match kinds {
            Kinds::One(cache) => {
                access
                    .check(&Need::new(verb, cache.kind, namespace))
                    .await?;
                Ok((vec![cache], Vec::new()))
            }
            Kinds::All(caches) => {
                let needs: Vec<_> = caches
                    .iter()
                    .map(|cache| Need::new(verb, cache.kind, namespace))
                    .collect();
                let decisions = access.check_each(&needs).await?;
                let mut permitted = Vec::new();
                let mut skipped = Vec::new();
                let mut first_denial = None;
                for (cache, decision) in caches.into_iter().zip(decisions) {
                    match decision {
                        Ok(()) => permitted.push(cache),
                        Err(AccessError::Denied(reason)) => {
                            skipped.push(Skipped {
                                kind: cache.kind.kind,
                                reason: reason.clone(),
                            });
                            first_denial.get_or_insert(AccessError::Denied(reason));
                        }
                        Err(err) => return Err(err.into()),
                    }
                }
                match first_denial {
                    // Nothing at all is permitted: say so rather than show an empty list.
                    Some(denied) if permitted.is_empty() => Err(denied.into()),
                    _ => Ok((permitted, skipped)),
                }
            }
        }
    }

    async fn ready_store(&self, cache: &KindCache) -> Result<()> {
        match tokio::time::timeout(CACHE_WAIT, cache.store.wait_until_ready()).await {
            Ok(()) => Ok(()),
            _ => Err(WorkloadsError::Loading {
                what: format!("the {} objects", cache.kind.kind),
            }),
        }
    }

    /// The object from the cache, else from the API server (the cache may trail a create by
    /// a moment); NotFound if neither has it.
    async fn object(&self, cache: &KindCache, namespace: &str, name: &str) -> Result<Arc<Cached>> {
        if let Some(object) = cache.store.get(namespace, name) {
            return Ok(object);
        }
        let api =
            Api::<DynamicObject>::namespaced_with(self.client.clone(), namespace, &cache.resource);
        match api.get_opt(name).await {
            Ok(Some(object)) => Ok(Arc::new(Cached::new(cache.kind, object))),
            Ok(None) => Err(WorkloadsError::NotFound {
                kind: cache.kind.kind,
                namespace: namespace.into(),
                name: name.into(),
            }),
            Err(source) => Err(WorkloadsError::Api {
                action: "reading",
                kind: cache.kind.kind,
                namespace: namespace.into(),
                name: name.into(),
                source: Box::new(source),
            }),
        }
    }

    /// Checks the caller may patch the object and that it exists; returns its cache.
    async fn writable(
        &self,
        access: &impl Access,
        reference: Option<&ObjectRef>,
        what: &'static str,
    ) -> Result<(Arc<KindCache>, String, String)> {
        let reference = checked(reference, what)?;
        self.wait_discovered().await?;
        let kind = find_kind(&self.caches, &reference.kind)?;
        if !kind.controllable() {
            return Err(if kind.is_compiled() {
                WorkloadsError::ReadOnly { kind: kind.kind }
            } else {
                WorkloadsError::NoSpecSuspend {
                    kind: kind.kind,
                    resource: kind.resource(),
                }
            });
        }
        let cache = self.served(kind)?;
        access
            .check(&Need::new("patch", cache.kind, Some(&reference.namespace)).on(&reference.name))
            .await?;
        self.object(&cache, &reference.namespace, &reference.name)
            .await?;
        Ok((cache, reference.namespace.clone(), reference.name.clone()))
    }

    /// Merges `patch` (the few fields one command sets) into the object, with the agent's
    /// field manager. Not a server-side apply: every apply by one manager states all the
    /// fields it owns, so a `reconcile` applied after a `suspend` would drop `spec.suspend`
    /// (and a `suspend instance` the spec an `instance apply` set). A merge changes only the
    /// fields it names, on the latest object, so concurrent commands lose nothing, and it
    /// never creates an object deleted in the meantime.
    async fn apply(
        &self,
        cache: &KindCache,
        namespace: &str,
        name: &str,
        action: &'static str,
        patch: &serde_json::Value,
    ) -> Result<Object> {
        let api =
            Api::<DynamicObject>::namespaced_with(self.client.clone(), namespace, &cache.resource);
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PatchParams::default()
        };
        let patched = api
            .patch(name, &params, &Patch::Merge(patch))
            .await
            .map_err(|source| WorkloadsError::Api {
                action,
                kind: cache.kind.kind,
                namespace: namespace.into(),
                name: name.into(),
                source: Box::new(source),
            })?;
        tracing::info!(kind = cache.kind.kind, %namespace, %name, action, "applied");
        Ok(object(cache, Arc::new(Cached::new(cache.kind, patched))))
    }

    async fn reconcile_one(
        &self,
        cache: &KindCache,
        namespace: &str,
        name: &str,
        requested_at: &str,
        force: bool,
    ) -> Result<Object> {
        let patch = patches::reconcile_patch(target(cache, namespace, name), requested_at, force);
        self.apply(
            cache,
            namespace,
            name,
            "requesting a reconciliation of",
            &patch,
        )
        .await
    }
}

fn target<'a>(cache: &'a KindCache, namespace: &'a str, name: &'a str) -> Target<'a> {
    Target {
        kind: cache.kind,
        api_version: &cache.resource.api_version,
        namespace,
        name,
    }
}

fn object(cache: &KindCache, cached: Arc<Cached>) -> Object {
    Object {
        kind: cache.kind,
        api_version: cache.resource.api_version.clone(),
        cached,
    }
}

fn find_kind(caches: &Caches, name: &str) -> Result<&'static FluxKind> {
    caches
        .find(name)
        .ok_or_else(|| WorkloadsError::UnknownKind {
            name: name.into(),
            known: caches
                .known()
                .iter()
                .map(|k| match k.short_names.first() {
                    Some(short) => format!("{} ({short})", k.kind.to_ascii_lowercase()),
                    None => k.kind.to_ascii_lowercase(),
                })
                .chain(["sources", "images", "all"].map(str::to_owned))
                .collect::<Vec<_>>()
                .join(", "),
        })
}

/// The object a call names, once its namespace and name are ones Kubernetes accepts.
fn checked<'a>(reference: Option<&'a ObjectRef>, what: &'static str) -> Result<&'a ObjectRef> {
    let reference = reference
        .filter(|r| !r.namespace.is_empty() && !r.name.is_empty())
        .ok_or(WorkloadsError::MissingName { what })?;
    names::namespace("namespace", &reference.namespace).map_err(WorkloadsError::InvalidArgument)?;
    names::object_name("name", &reference.name).map_err(WorkloadsError::InvalidArgument)?;
    Ok(reference)
}

/// The objects of `cache` that pass `filter`, ordered by namespace and name.
fn matching(cache: &KindCache, filter: &Filter) -> Vec<Object> {
    let mut found: Vec<Object> = cache
        .store
        .state()
        .into_iter()
        .filter(|o| filter.pass(o))
        .map(|o| object(cache, o))
        .collect();
    found.sort_by(|a, b| {
        (&a.cached.namespace, &a.cached.name).cmp(&(&b.cached.namespace, &b.cached.name))
    });
    found
}

/// The value of a reconcile request: now, as Flux's CLI writes it (RFC 3339, nanoseconds).
fn now() -> String {
    k8s_openapi::jiff::Timestamp::now().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_kinds_list_the_known_ones() {
        let message = find_kind(&Caches::default(), "deployment")
            .unwrap_err()
            .to_string();
        assert!(
            message.starts_with("unknown kind \"deployment\""),
            "{message}"
        );
        assert!(
            message.contains("kustomization (ks)") && message.contains("helmrelease (hr)"),
            "{message}"
        );
    }

    #[test]
    fn a_reference_must_be_a_kubernetes_name() {
        let reference = |namespace: &str, name: &str| ObjectRef {
            kind: "ks".into(),
            namespace: namespace.into(),
            name: name.into(),
        };
        assert!(checked(Some(&reference("apps", "podinfo")), "Suspend").is_ok());
        assert!(matches!(
            checked(Some(&reference("apps", "")), "Suspend"),
            Err(WorkloadsError::MissingName { what: "Suspend" })
        ));
        assert!(matches!(
            checked(Some(&reference("apps", "podinfo/status")), "Suspend"),
            Err(WorkloadsError::InvalidArgument(_))
        ));
        assert!(checked(None, "Suspend").is_err());
    }
}
