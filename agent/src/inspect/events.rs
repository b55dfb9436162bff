//! `flux events`: the Kubernetes Events of Flux objects, oldest first, only of namespaces the
//! caller may `list events` in; with an object, only its Events and its source's (as
//! `flux events --for`). Read from the API server (Events are not cached); a watch follows
//! new ones.

use std::{collections::BTreeSet, pin::Pin};

use futures::{Stream, StreamExt};
use k8s_openapi::{api::core::v1::Event as KubeEvent, jiff::Timestamp};
use kube::{
    Api,
    api::ListParams,
    runtime::{WatchStreamExt, watcher},
};

use crate::workloads::{
    WorkloadsError,
    access::{Access, AccessError, Need},
    catalog::{self, FluxKind},
};

use super::{Inspector, Result, decide, find_kind};

/// The most Events one answer holds: the newest are kept, the rest counted.
pub const MAX_EVENTS: usize = 1000;

/// One Event of a Flux object.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EventRow {
    pub namespace: String,
    pub kind: String,
    pub name: String,
    pub type_: String,
    pub reason: String,
    pub message: String,
    pub last_seen: Option<Timestamp>,
    pub first_seen: Option<Timestamp>,
    pub count: i32,
}

/// Which Events a call wants.
#[derive(Clone, Debug, Default)]
pub struct EventQuery {
    /// Empty: every namespace.
    pub namespace: String,
    /// (kind, namespace, name) of the object whose Events are wanted.
    pub object: Option<(String, String, String)>,
    pub types: Vec<String>,
}

/// What `events` answers.
#[derive(Clone, Debug, Default)]
pub struct EventList {
    pub events: Vec<EventRow>,
    pub more: u32,
    /// (namespace, reason) of the namespaces left out.
    pub skipped: Vec<(String, String)>,
}

/// What a watch sends.
#[derive(Clone, Debug)]
pub enum EventChange {
    Existing(EventRow),
    Synced,
    New(EventRow),
}

/// The Events of a watch, and what the caller must keep being allowed for it to go on.
pub struct EventWatch {
    pub changes: Pin<Box<dyn Stream<Item = Result<EventChange>> + Send>>,
    pub needs: Vec<Need>,
}

/// The Event as a row, if it is about a Flux object (its kind one of the `known`, of the kind's
/// group when the Event names an apiVersion).
pub fn row(event: &KubeEvent, known: &[&'static FluxKind]) -> Option<EventRow> {
    let involved = &event.involved_object;
    let kind = involved.kind.as_deref()?;
    let flux = known.iter().find(|k| k.kind == kind)?;
    if let Some(api_version) = involved.api_version.as_deref()
        && let Some((group, _)) = api_version.split_once('/')
        && group != flux.group
    {
        return None;
    }
    let micro = |t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime| t.0;
    let time = |t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time| t.0;
    let last_seen = event
        .series
        .as_ref()
        .and_then(|s| s.last_observed_time.as_ref().map(micro))
        .or_else(|| event.last_timestamp.as_ref().map(time))
        .or_else(|| event.event_time.as_ref().map(micro));
    let first_seen = event
        .event_time
        .as_ref()
        .map(micro)
        .or_else(|| event.first_timestamp.as_ref().map(time));
    Some(EventRow {
        namespace: event.metadata.namespace.clone().unwrap_or_default(),
        kind: kind.to_owned(),
        name: involved.name.clone().unwrap_or_default(),
        type_: event.type_.clone().unwrap_or_default(),
        reason: event.reason.clone().unwrap_or_default(),
        message: event.message.clone().unwrap_or_default(),
        last_seen,
        first_seen,
        count: event
            .series
            .as_ref()
            .and_then(|s| s.count)
            .or(event.count)
            .unwrap_or(1),
    })
}

/// The objects whose Events are wanted, and the types.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    objects: Vec<(String, String, String)>,
    types: Vec<String>,
}

impl Filter {
    pub fn new(objects: Vec<(String, String, String)>, types: &[String]) -> Result<Self> {
        for t in types {
            if !t.eq_ignore_ascii_case("Normal") && !t.eq_ignore_ascii_case("Warning") {
                return Err(WorkloadsError::InvalidArgument(format!(
                    "event type {} is not supported: use Normal or Warning",
                    tenantflux_core::text::quote(t)
                )));
            }
        }
        Ok(Self {
            objects,
            types: types.to_vec(),
        })
    }

    pub fn pass(&self, row: &EventRow) -> bool {
        (self.objects.is_empty()
            || self
                .objects
                .iter()
                .any(|(k, ns, n)| *k == row.kind && *ns == row.namespace && *n == row.name))
            && (self.types.is_empty()
                || self
                    .types
                    .iter()
                    .any(|t| t.eq_ignore_ascii_case(&row.type_)))
    }
}

/// Oldest first, at most [`MAX_EVENTS`] (the newest), with how many were left out.
pub fn bounded(mut rows: Vec<EventRow>) -> (Vec<EventRow>, u32) {
    rows.sort_by(|a, b| {
        (a.last_seen, &a.namespace, &a.kind, &a.name).cmp(&(
            b.last_seen,
            &b.namespace,
            &b.kind,
            &b.name,
        ))
    });
    let more = rows.len().saturating_sub(MAX_EVENTS);
    (
        rows.split_off(more),
        u32::try_from(more).unwrap_or(u32::MAX),
    )
}

/// Where the Events are read from: one namespace, or every namespace the caller may read.
enum Scope {
    /// Cluster-wide, the caller may list events everywhere.
    All,
    Namespaces(BTreeSet<String>),
}

impl Inspector {
    /// The namespaces to read and the filter, after checking the caller's rights with `verb`.
    async fn event_scope(
        &self,
        access: &impl Access,
        query: &EventQuery,
        verb: &'static str,
    ) -> Result<(Scope, Filter, Vec<(String, String)>)> {
        access.identify().await?;
        if !query.namespace.is_empty() {
            tenantflux_core::names::namespace("namespace", &query.namespace)
                .map_err(WorkloadsError::InvalidArgument)?;
        }
        let events = |ns: Option<&str>| Need::other(verb, "", "events", ns);
        if let Some((kind, namespace, name)) = &query.object {
            tenantflux_core::names::namespace("namespace", namespace)
                .map_err(WorkloadsError::InvalidArgument)?;
            tenantflux_core::names::object_name("name", name)
                .map_err(WorkloadsError::InvalidArgument)?;
            let kind = find_kind(&self.caches, kind)?;
            let cache = self.cache_of(kind).await?;
            let mut objects = vec![(kind.kind.to_owned(), namespace.clone(), name.clone())];
            if let Some(source) = cache
                .store
                .get(namespace, name)
                .and_then(|o| o.row.source.clone())
            {
                let source_kind =
                    catalog::find(&source.0).map_or(source.0.clone(), |k| k.kind.into());
                objects.push((source_kind, source.1, source.2));
            }
            let namespaces: BTreeSet<String> =
                objects.iter().map(|(_, ns, _)| ns.clone()).collect();
            for namespace in &namespaces {
                access.check(&events(Some(namespace))).await?;
            }
            return Ok((
                Scope::Namespaces(namespaces),
                Filter::new(objects, &query.types)?,
                Vec::new(),
            ));
        }
        let filter = Filter::new(Vec::new(), &query.types)?;
        if !query.namespace.is_empty() {
            access.check(&events(Some(&query.namespace))).await?;
            return Ok((
                Scope::Namespaces(BTreeSet::from([query.namespace.clone()])),
                filter,
                Vec::new(),
            ));
        }
        match access.check(&events(None)).await {
            Ok(()) => return Ok((Scope::All, filter, Vec::new())),
            Err(AccessError::Denied(_)) => {}
            Err(err) => return Err(err.into()),
        }
        // Not everywhere: each namespace that holds Flux objects, as far as the caller may.
        let namespaces: BTreeSet<String> = self
            .served()
            .await?
            .iter()
            .flat_map(|c| c.store.state().into_iter().map(|o| o.namespace.clone()))
            .collect();
        let items = namespaces
            .into_iter()
            .map(|ns| {
                let need = events(Some(&ns));
                (ns, need)
            })
            .collect();
        let (permitted, denied) = decide(access, items).await?;
        if permitted.is_empty()
            && let Some((_, reason)) = denied.first()
        {
            return Err(AccessError::Denied(reason.clone()).into());
        }
        Ok((
            Scope::Namespaces(permitted.into_iter().collect()),
            filter,
            denied,
        ))
    }

    pub async fn list_events(&self, access: &impl Access, query: &EventQuery) -> Result<EventList> {
        let (scope, filter, skipped) = self.event_scope(access, query, "list").await?;
        let apis: Vec<Api<KubeEvent>> = match &scope {
            Scope::All => vec![Api::all(self.client.clone())],
            Scope::Namespaces(namespaces) => namespaces
                .iter()
                .map(|ns| Api::namespaced(self.client.clone(), ns))
                .collect(),
        };
        let known = self.caches.known();
        let mut rows = Vec::new();
        for api in apis {
            let mut params = ListParams::default().limit(500);
            loop {
                let page = api
                    .list(&params)
                    .await
                    .map_err(|source| WorkloadsError::Read {
                        what: "Events".into(),
                        source: Box::new(source),
                    })?;
                rows.extend(
                    page.items
                        .iter()
                        .filter_map(|e| row(e, &known))
                        .filter(|r| filter.pass(r)),
                );
                match page.metadata.continue_ {
                    Some(token) if !token.is_empty() => params = params.continue_token(&token),
                    _ => break,
                }
            }
        }
        let (events, more) = bounded(rows);
        Ok(EventList {
            events,
            more,
            skipped,
        })
    }

    /// The matching Events that exist, `Synced`, then each new or updated one, until the
    /// shutdown.
    pub async fn watch_events(
        &self,
        access: &impl Access,
        query: &EventQuery,
    ) -> Result<EventWatch> {
        let (scope, filter, _) = self.event_scope(access, query, "watch").await?;
        let (api, namespaces, needs): (Api<KubeEvent>, Option<BTreeSet<String>>, Vec<Need>) =
            match scope {
                Scope::All => (
                    Api::all(self.client.clone()),
                    None,
                    vec![Need::other("watch", "", "events", None)],
                ),
                Scope::Namespaces(namespaces) if namespaces.len() == 1 => {
                    let ns = namespaces.iter().next().cloned().unwrap_or_default();
                    let needs = vec![Need::other("watch", "", "events", Some(&ns))];
                    (Api::namespaced(self.client.clone(), &ns), None, needs)
                }
                Scope::Namespaces(namespaces) => {
                    let needs = namespaces
                        .iter()
                        .map(|ns| Need::other("watch", "", "events", Some(ns)))
                        .collect();
                    (Api::all(self.client.clone()), Some(namespaces), needs)
                }
            };
        // The kinds known when the watch starts; a kind discovered later is in the next one.
        let known = self.caches.known();
        let mut synced = false;
        let changes = watcher::watcher(api, watcher::Config::default())
            .backoff(crate::watch_backoff())
            .filter_map(move |event| {
                let change = match event {
                    Ok(watcher::Event::InitApply(e)) if !synced => row(&e, &known)
                        .filter(|r| filter.pass(r))
                        .map(EventChange::Existing),
                    Ok(watcher::Event::InitDone) if !synced => {
                        synced = true;
                        Some(EventChange::Synced)
                    }
                    Ok(watcher::Event::Apply(e) | watcher::Event::InitApply(e)) => row(&e, &known)
                        .filter(|r| filter.pass(r))
                        .map(EventChange::New),
                    Ok(_) => None,
                    Err(err) => {
                        tracing::debug!(%err, "watching Events failed; retrying");
                        None
                    }
                };
                let change = change.filter(|c| match (c, &namespaces) {
                    (EventChange::Existing(r) | EventChange::New(r), Some(allowed)) => {
                        allowed.contains(&r.namespace)
                    }
                    _ => true,
                });
                std::future::ready(change.map(Ok))
            });
        let shutdown = self.shutdown.clone();
        let changes = changes.take_until(async move { shutdown.cancelled().await });
        Ok(EventWatch {
            changes: Box::pin(changes),
            needs,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(kind: &str, api_version: &str, type_: &str, at: &str) -> KubeEvent {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "e", "namespace": "apps"},
            "involvedObject": {"kind": kind, "apiVersion": api_version, "name": "podinfo", "namespace": "apps"},
            "type": type_, "reason": "BuildFailed", "message": "kustomization path not found",
            "lastTimestamp": at, "firstTimestamp": at, "count": 3
        }))
        .unwrap()
    }

    fn row(event: &KubeEvent) -> Option<EventRow> {
        let known: Vec<&'static FluxKind> = catalog::KINDS.iter().collect();
        super::row(event, &known)
    }

    #[test]
    fn only_events_of_flux_kinds_become_rows() {
        let ks = row(&event(
            "Kustomization",
            "kustomize.toolkit.fluxcd.io/v1",
            "Warning",
            "2026-01-02T03:04:05Z",
        ))
        .unwrap();
        assert_eq!(
            (
                ks.kind.as_str(),
                ks.name.as_str(),
                ks.type_.as_str(),
                ks.count
            ),
            ("Kustomization", "podinfo", "Warning", 3)
        );
        assert!(ks.last_seen.is_some());
        assert!(
            row(&event(
                "Deployment",
                "apps/v1",
                "Normal",
                "2026-01-02T03:04:05Z"
            ))
            .is_none()
        );
        // Another group's kind of the same name is not Flux's.
        assert!(
            row(&event(
                "Kustomization",
                "example.com/v1",
                "Normal",
                "2026-01-02T03:04:05Z"
            ))
            .is_none()
        );
    }

    #[test]
    fn filter_types_and_objects_and_bound_keeps_the_newest() {
        assert!(Filter::new(Vec::new(), &["Error".into()]).is_err());
        let warning = Filter::new(Vec::new(), &["warning".into()]).unwrap();
        let rows: Vec<EventRow> = (0..MAX_EVENTS + 5)
            .map(|i| EventRow {
                namespace: "apps".into(),
                kind: "Kustomization".into(),
                name: format!("ks{i}"),
                type_: if i % 2 == 0 { "Warning" } else { "Normal" }.into(),
                last_seen: Some(Timestamp::from_second(1_000_000 + i as i64).unwrap()),
                ..EventRow::default()
            })
            .collect();
        assert!(warning.pass(&rows[0]) && !warning.pass(&rows[1]));
        let one = Filter::new(
            vec![("Kustomization".into(), "apps".into(), "ks1".into())],
            &[],
        )
        .unwrap();
        assert!(one.pass(&rows[1]) && !one.pass(&rows[0]));
        let mut shuffled = rows.clone();
        shuffled.reverse();
        let (kept, more) = bounded(shuffled);
        assert_eq!(more, 5);
        assert_eq!(kept.len(), MAX_EVENTS);
        assert_eq!(kept[0].name, "ks5");
        assert_eq!(kept.last().unwrap().name, format!("ks{}", MAX_EVENTS + 4));
    }
}
