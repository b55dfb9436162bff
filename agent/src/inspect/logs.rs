//! `flux logs` through the agent: the Flux controllers' log lines about Flux objects, read from
//! the controller pods' logs (container `manager`, in the namespace Flux runs in) with the
//! agent's own rights, and shown only for objects the caller may `get`. Tenants usually may
//! not read pods in Flux's namespace; the lines about their own objects reach them here.
//!
//! The controllers log JSON (controller-runtime's zap): `level`, `ts`, `msg`, `error`, and the
//! object a reconciler works on as `controllerKind`/`controllerGroup`, `namespace` and `name`.
//! Lines about no object (start-up, leader election) are nobody's: they are left out.

use std::{
    collections::{BTreeSet, HashSet},
    pin::Pin,
    sync::Arc,
    time::Duration,
};

use futures::{AsyncBufReadExt, Stream, StreamExt, TryStreamExt};
use k8s_openapi::{api::core::v1::Pod, jiff::Timestamp};
use kube::{
    Api,
    api::{ListParams, LogParams},
};
use serde_json::Value;

use crate::workloads::{
    WorkloadsError,
    access::{Access, AccessError, Need},
    cache::KindCache,
    catalog::FluxKind,
};

use super::{Inspector, Result, decide, find_kind};

/// The most lines one answer holds: the newest are kept, the rest counted.
pub const MAX_LINES: usize = 5000;
/// The most lines read of one controller's log per call (the newest).
const TAIL_PER_POD: i64 = 20_000;
/// The container the Flux controllers and flux-operator run in.
const CONTAINER: &str = "manager";

/// One log line of a controller about a Flux object.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogLine {
    pub time: Option<Timestamp>,
    /// As the controller wrote it: `info`, `error`, `debug`, …
    pub level: String,
    /// The controller that wrote it, e.g. `kustomize-controller`.
    pub controller: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
    /// The message, and the error when the line carries one (`message: error`).
    pub message: String,
}

/// Which lines a call wants.
#[derive(Clone, Debug, Default)]
pub struct LogQuery {
    /// Empty: every namespace the caller may read objects in.
    pub namespace: String,
    /// Only the lines about objects of this kind (a kind, plural or short name).
    pub kind: Option<String>,
    /// Only the lines about this object (with `kind` and `namespace`).
    pub name: Option<String>,
    /// Only lines of this level (case-insensitive).
    pub level: Option<String>,
    /// Only lines written in this last while.
    pub since: Option<Duration>,
}

/// What `logs` answers.
#[derive(Clone, Debug, Default)]
pub struct LogList {
    /// Oldest first.
    pub lines: Vec<LogLine>,
    /// How many more matched (the oldest, left out).
    pub more: u32,
    /// Controllers whose log could not be read, each with the reason.
    pub unread: Vec<(String, String)>,
}

/// The followed lines, and what the caller must keep being allowed for the stream to go on.
pub struct LogFollow {
    pub lines: Pin<Box<dyn Stream<Item = Result<LogLine>> + Send>>,
    pub needs: Vec<Need>,
}

/// `ts` as zap writes it: RFC 3339 (ISO 8601 with a `+0000` offset in some encoders), or
/// seconds since the epoch.
fn timestamp(value: &Value) -> Option<Timestamp> {
    if let Some(seconds) = value.as_f64() {
        let nanos = (seconds * 1e9) as i128;
        return Timestamp::from_nanosecond(nanos).ok();
    }
    let text = value.as_str()?;
    if let Ok(t) = text.parse::<Timestamp>() {
        return Some(t);
    }
    // `…+0000` → `…+00:00`
    let (head, offset) = text.split_at(text.len().checked_sub(5)?);
    if offset.starts_with(['+', '-']) && offset[1..].bytes().all(|b| b.is_ascii_digit()) {
        return format!("{head}{}:{}", &offset[..3], &offset[3..])
            .parse()
            .ok();
    }
    None
}

/// The line as a [`LogLine`] if it is a JSON line about an object of one of the `known`
/// kinds (of the kind's group when the line names one).
pub fn parse(line: &str, controller: &str, known: &[&'static FluxKind]) -> Option<LogLine> {
    let json: Value = serde_json::from_str(line.trim()).ok()?;
    let text = |key: &str| json.get(key).and_then(Value::as_str).unwrap_or_default();
    let kind_name = json
        .get("controllerKind")
        .or_else(|| json.get("reconciler kind"))
        .and_then(Value::as_str)?;
    let kind = known.iter().find(|k| k.kind == kind_name)?;
    let group = text("controllerGroup");
    if !group.is_empty() && group != kind.group {
        return None;
    }
    // controller-runtime names the object twice: under its kind, and as namespace/name.
    let object = json.get(kind_name);
    let field = |key: &str| {
        object
            .and_then(|o| o.get(key))
            .and_then(Value::as_str)
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| text(key))
            .to_owned()
    };
    let (namespace, name) = (field("namespace"), field("name"));
    if name.is_empty() {
        return None;
    }
    let mut message = text("msg").to_owned();
    let error = text("error");
    if !error.is_empty() {
        if !message.is_empty() {
            message.push_str(": ");
        }
        message.push_str(error);
    }
    Some(LogLine {
        time: json.get("ts").and_then(timestamp),
        level: text("level").to_owned(),
        controller: controller.to_owned(),
        kind: kind.kind.to_owned(),
        namespace,
        name,
        message,
    })
}

/// Oldest first, at most [`MAX_LINES`] (the newest), with how many were left out.
pub fn bounded(mut lines: Vec<LogLine>) -> (Vec<LogLine>, u32) {
    // Stable: the lines of one controller without a time keep their order.
    lines.sort_by_key(|l| l.time);
    let more = lines.len().saturating_sub(MAX_LINES);
    (
        lines.split_off(more),
        u32::try_from(more).unwrap_or(u32::MAX),
    )
}

/// The controller a pod runs, from Flux's labels (`app`, or `app.kubernetes.io/name`), else
/// the pod's name.
fn controller_of(pod: &Pod) -> String {
    let labels = pod.metadata.labels.as_ref();
    [
        "app",
        "app.kubernetes.io/name",
        "app.kubernetes.io/component",
    ]
    .iter()
    .find_map(|key| labels.and_then(|l| l.get(*key)).cloned())
    .or_else(|| pod.metadata.name.clone())
    .unwrap_or_default()
}

/// What the caller may see lines about: every object of a kind (cluster-wide), of a kind in a
/// namespace, or single objects (where RBAC grants no more), as SubjectAccessReview decided
/// when the call started.
#[derive(Clone, Debug, Default)]
pub struct Scope {
    kinds: HashSet<String>,
    namespaces: HashSet<(String, String)>,
    objects: HashSet<(String, String, String)>,
    /// Only lines of this level.
    level: Option<String>,
    /// Only this namespace (the caller's `-n`); empty for every one.
    namespace: String,
}

impl Scope {
    fn permits(&self, line: &LogLine) -> bool {
        if !self.namespace.is_empty() && line.namespace != self.namespace {
            return false;
        }
        if self
            .level
            .as_ref()
            .is_some_and(|l| !l.eq_ignore_ascii_case(&line.level))
        {
            return false;
        }
        let kind = line.kind.clone();
        self.kinds.contains(&kind)
            || self
                .namespaces
                .contains(&(kind.clone(), line.namespace.clone()))
            || self
                .objects
                .contains(&(kind, line.namespace.clone(), line.name.clone()))
    }

    /// What the caller must keep being allowed for a followed stream to go on.
    fn needs(&self, known: &[&'static FluxKind]) -> Vec<Need> {
        let flux = |kind: &str| known.iter().find(|k| k.kind == kind).copied();
        let mut needs = Vec::new();
        for kind in &self.kinds {
            needs.extend(flux(kind).map(|k| Need::new("get", k, None)));
        }
        for (kind, namespace) in &self.namespaces {
            needs.extend(flux(kind).map(|k| Need::new("get", k, Some(namespace))));
        }
        for (kind, namespace, name) in &self.objects {
            needs.extend(flux(kind).map(|k| Need::new("get", k, Some(namespace)).on(name)));
        }
        needs
    }

    fn is_empty(&self) -> bool {
        self.kinds.is_empty() && self.namespaces.is_empty() && self.objects.is_empty()
    }
}

/// A query's namespace is a namespace's name, and its level one the controllers write.
fn check_query(query: &LogQuery) -> Result<()> {
    // The plugin always sends a name with its kind; a raw call without one would otherwise be
    // read as the first served kind's object, or as none when no Flux kind is served.
    if query.name.is_some() && query.kind.is_none() {
        return Err(WorkloadsError::InvalidArgument(
            "a log query that names an object needs its kind too (kind Kustomization, name \
             podinfo)"
                .into(),
        ));
    }
    if !query.namespace.is_empty() {
        tenantflux_core::names::namespace("namespace", &query.namespace)
            .map_err(WorkloadsError::InvalidArgument)?;
    }
    if let Some(level) = &query.level
        && !["debug", "info", "error", "warn", "trace"]
            .iter()
            .any(|l| l.eq_ignore_ascii_case(level))
    {
        return Err(WorkloadsError::InvalidArgument(format!(
            "log level {} is not one the Flux controllers write: use debug, info or error",
            tenantflux_core::text::quote(level)
        )));
    }
    Ok(())
}

/// The lines about one named object, in the query's namespace (which it needs): the caller
/// must be allowed to `get` it.
async fn scope_one_object(
    access: &impl Access,
    query: &LogQuery,
    kind: &'static FluxKind,
    name: &str,
    scope: &mut Scope,
) -> Result<()> {
    if query.namespace.is_empty() {
        return Err(WorkloadsError::MissingName { what: "Logs" });
    }
    tenantflux_core::names::object_name("name", name).map_err(WorkloadsError::InvalidArgument)?;
    access
        .check(&Need::new("get", kind, Some(&query.namespace)).on(name))
        .await?;
    scope.objects.insert((
        kind.kind.to_owned(),
        query.namespace.clone(),
        name.to_owned(),
    ));
    Ok(())
}

/// Cluster-wide, kind by kind: the kinds the caller may `get` everywhere join the scope;
/// returns the others, to be looked at namespace by namespace.
async fn scope_cluster_wide(
    access: &impl Access,
    kinds: Vec<&'static FluxKind>,
    scope: &mut Scope,
) -> Result<Vec<&'static FluxKind>> {
    let items = kinds
        .iter()
        .map(|k| (*k, Need::new("get", k, None)))
        .collect();
    let (permitted, denied) = decide(access, items).await?;
    scope
        .kinds
        .extend(permitted.iter().map(|k| k.kind.to_owned()));
    Ok(denied.into_iter().map(|(k, _)| k).collect())
}

/// In each namespace that holds objects of the kind (or the one asked for): the pairs the
/// caller may `get` in join the scope; returns the others with the reasons they were denied.
async fn scope_by_namespace(
    access: &impl Access,
    query: &LogQuery,
    served: &[Arc<KindCache>],
    kinds: Vec<&'static FluxKind>,
    scope: &mut Scope,
) -> Result<Vec<((&'static FluxKind, String), String)>> {
    let mut pairs: Vec<(&'static FluxKind, String)> = Vec::new();
    for kind in kinds {
        let namespaces: BTreeSet<String> = if query.namespace.is_empty() {
            served
                .iter()
                .filter(|c| std::ptr::eq(c.kind, kind))
                .flat_map(|c| c.store.state().into_iter().map(|o| o.namespace.clone()))
                .collect()
        } else {
            BTreeSet::from([query.namespace.clone()])
        };
        pairs.extend(namespaces.into_iter().map(|ns| (kind, ns)));
    }
    let items = pairs
        .into_iter()
        .map(|(kind, ns)| {
            let need = Need::new("get", kind, Some(&ns));
            ((kind, ns), need)
        })
        .collect();
    let (permitted, denied) = decide(access, items).await?;
    scope
        .namespaces
        .extend(permitted.into_iter().map(|(k, ns)| (k.kind.to_owned(), ns)));
    Ok(denied)
}

/// Object by object where RBAC names objects (resourceNames): in each denied namespace, the
/// objects the caches hold that the caller may `get` join the scope.
async fn scope_by_object(
    access: &impl Access,
    served: &[Arc<KindCache>],
    denied: &[((&'static FluxKind, String), String)],
    scope: &mut Scope,
) -> Result<()> {
    let mut objects = Vec::new();
    for ((kind, namespace), _) in denied {
        for cache in served.iter().filter(|c| std::ptr::eq(c.kind, *kind)) {
            for object in cache.store.state() {
                if object.namespace == *namespace {
                    let need = Need::new("get", kind, Some(namespace)).on(&object.name);
                    let key = (kind.kind.to_owned(), namespace.clone(), object.name.clone());
                    objects.push((key, need));
                }
            }
        }
    }
    let (permitted, _) = decide(access, objects).await?;
    scope.objects.extend(permitted);
    Ok(())
}

impl Inspector {
    /// What the caller may see lines about, for `query`: `get` on each kind cluster-wide, else
    /// in each namespace, else on each object the caches hold.
    async fn log_scope(&self, access: &impl Access, query: &LogQuery) -> Result<Scope> {
        access.identify().await?;
        check_query(query)?;
        let mut scope = Scope {
            level: query.level.clone(),
            namespace: query.namespace.clone(),
            ..Scope::default()
        };
        let served = self.served().await?;
        let kinds: Vec<&'static FluxKind> = match &query.kind {
            Some(kind) => vec![find_kind(&self.caches, kind)?],
            None => served.iter().map(|c| c.kind).collect(),
        };
        if let (Some(name), Some(&kind)) = (&query.name, kinds.first()) {
            scope_one_object(access, query, kind, name, &mut scope).await?;
            return Ok(scope);
        }
        let narrower = if query.namespace.is_empty() {
            scope_cluster_wide(access, kinds, &mut scope).await?
        } else {
            kinds
        };
        let denied = scope_by_namespace(access, query, &served, narrower, &mut scope).await?;
        scope_by_object(access, &served, &denied, &mut scope).await?;
        if scope.is_empty()
            && let Some((_, reason)) = denied.first()
        {
            return Err(AccessError::Denied(reason.clone()).into());
        }
        Ok(scope)
    }

    /// The controller pods in Flux's namespace that run a `manager` container.
    async fn controller_pods(&self) -> Result<Vec<(String, String)>> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.flux_namespace);
        let list =
            pods.list(&ListParams::default())
                .await
                .map_err(|source| WorkloadsError::Read {
                    what: format!("the pods in namespace {}", self.flux_namespace),
                    source: Box::new(source),
                })?;
        let mut found: Vec<(String, String)> = list
            .items
            .iter()
            .filter(|pod| {
                pod.spec
                    .as_ref()
                    .is_some_and(|s| s.containers.iter().any(|c| c.name == CONTAINER))
            })
            .filter_map(|pod| Some((pod.metadata.name.clone()?, controller_of(pod))))
            .collect();
        found.sort();
        Ok(found)
    }

    fn log_params(query: &LogQuery, follow: bool) -> LogParams {
        LogParams {
            container: Some(CONTAINER.to_owned()),
            follow,
            since_seconds: query
                .since
                .map(|s| i64::try_from(s.as_secs().max(1)).unwrap_or(i64::MAX)),
            tail_lines: Some(TAIL_PER_POD),
            ..LogParams::default()
        }
    }

    /// The matching lines the controllers' logs hold now, oldest first.
    pub async fn list_logs(&self, access: &impl Access, query: &LogQuery) -> Result<LogList> {
        let scope = self.log_scope(access, query).await?;
        let known = self.caches.known();
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.flux_namespace);
        let params = Self::log_params(query, false);
        let mut lines = Vec::new();
        let mut unread = Vec::new();
        for (pod, controller) in self.controller_pods().await? {
            match pods.logs(&pod, &params).await {
                Ok(text) => lines.extend(
                    text.lines()
                        .filter_map(|l| parse(l, &controller, &known))
                        .filter(|l| scope.permits(l)),
                ),
                Err(err) => {
                    tracing::debug!(%pod, %err, "reading a controller's log failed");
                    unread.push((controller, format!("reading the log of pod {pod}: {err}")));
                }
            }
        }
        let (lines, more) = bounded(lines);
        Ok(LogList {
            lines,
            more,
            unread,
        })
    }

    /// The matching lines as the controllers write them (those of `query.since` first), until
    /// the shutdown; the scope is decided when the call starts. Pods whose log cannot be read
    /// are left out.
    pub async fn follow_logs(&self, access: &impl Access, query: &LogQuery) -> Result<LogFollow> {
        let scope = self.log_scope(access, query).await?;
        let known = self.caches.known();
        let needs = scope.needs(&known);
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.flux_namespace);
        let mut params = Self::log_params(query, true);
        if query.since.is_none() {
            // Following starts at the end of what is there, as `flux logs -f` without --since.
            params.tail_lines = Some(0);
        }
        type Lines = Pin<Box<dyn Stream<Item = Result<LogLine>> + Send>>;
        let mut streams: Vec<Lines> = Vec::new();
        for (pod, controller) in self.controller_pods().await? {
            let (pods, params, known, scope) =
                (pods.clone(), params.clone(), known.clone(), scope.clone());
            // Opened inside the stream: a followed log answers only once it has a line, and
            // the call must answer at once. A pod whose log cannot be read (not started,
            // gone) does not stop the others.
            let opened = async move {
                let reader = match pods.log_stream(&pod, &params).await {
                    Ok(reader) => reader,
                    Err(err) => {
                        tracing::debug!(%pod, %err, "following a controller's log failed");
                        return Box::pin(futures::stream::empty()) as Lines;
                    }
                };
                let lines = reader
                    .lines()
                    .map_err(move |err| {
                        tracing::debug!(%pod, %err, "following a controller's log ended");
                        err
                    })
                    .take_while(|line| std::future::ready(line.is_ok()))
                    .filter_map(move |line| {
                        let line = line
                            .ok()
                            .and_then(|l| parse(&l, &controller, &known))
                            .filter(|l| scope.permits(l));
                        std::future::ready(line.map(Ok))
                    });
                Box::pin(lines) as Lines
            };
            streams.push(Box::pin(futures::stream::once(opened).flatten()));
        }
        let shutdown = self.shutdown.clone();
        let lines = futures::stream::select_all(streams)
            .take_until(async move { shutdown.cancelled().await });
        Ok(LogFollow {
            lines: Box::pin(lines),
            needs,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workloads::catalog;

    fn known() -> Vec<&'static FluxKind> {
        catalog::KINDS.iter().collect()
    }

    const FAILED: &str = r#"{"level":"error","ts":"2026-12-07T01:02:03.456Z","msg":"Reconciliation failed after 12ms, next try in 5m0s","controller":"kustomization","controllerGroup":"kustomize.toolkit.fluxcd.io","controllerKind":"Kustomization","Kustomization":{"name":"apps","namespace":"team-a"},"namespace":"team-a","name":"apps","reconcileID":"5f0c","revision":"main@sha1:abc","error":"kustomization path not found: stat /tmp/kustomization-1/nope: no such file or directory"}"#;

    #[test]
    fn a_controller_line_names_its_object_level_time_and_error() {
        let line = parse(FAILED, "kustomize-controller", &known()).unwrap();
        assert_eq!(line.level, "error");
        assert_eq!(line.controller, "kustomize-controller");
        assert_eq!(
            (
                line.kind.as_str(),
                line.namespace.as_str(),
                line.name.as_str()
            ),
            ("Kustomization", "team-a", "apps")
        );
        assert_eq!(
            line.message,
            "Reconciliation failed after 12ms, next try in 5m0s: kustomization path not found: \
             stat /tmp/kustomization-1/nope: no such file or directory"
        );
        assert_eq!(line.time.unwrap().to_string(), "2026-12-07T01:02:03.456Z");
    }

    #[test]
    fn lines_about_no_object_or_no_flux_kind_are_left_out() {
        for text in [
            r#"{"level":"info","ts":"2026-12-07T01:02:03.456Z","msg":"starting manager"}"#,
            r#"{"level":"info","msg":"x","controllerKind":"Deployment","name":"a","namespace":"b"}"#,
            // A group that is not the kind's: somebody else's Kustomization.
            r#"{"level":"info","msg":"x","controllerKind":"Kustomization","controllerGroup":"kustomize.config.k8s.io","name":"a","namespace":"b"}"#,
            r#"{"level":"info","msg":"x","controllerKind":"Kustomization","namespace":"b"}"#,
            "not json at all",
            "",
        ] {
            assert_eq!(parse(text, "c", &known()), None, "{text}");
        }
    }

    #[test]
    fn times_in_every_form_zap_writes() {
        for (value, expected) in [
            (
                serde_json::json!("2026-12-07T01:02:03.456+0000"),
                "2026-12-07T01:02:03.456Z",
            ),
            (
                serde_json::json!("2026-12-07T02:02:03+01:00"),
                "2026-12-07T01:02:03Z",
            ),
            (serde_json::json!(1796605323.5), "2026-12-07T01:02:03.5Z"),
        ] {
            assert_eq!(
                timestamp(&value).map(|t| t.to_string()).as_deref(),
                Some(expected),
                "{value}"
            );
        }
        assert_eq!(timestamp(&serde_json::json!("yesterday")), None);
    }

    #[test]
    fn the_scope_admits_only_what_it_was_granted() {
        let line = |kind: &str, namespace: &str, name: &str, level: &str| LogLine {
            kind: kind.into(),
            namespace: namespace.into(),
            name: name.into(),
            level: level.into(),
            ..LogLine::default()
        };
        let scope = Scope {
            kinds: HashSet::from(["GitRepository".to_owned()]),
            namespaces: HashSet::from([("Kustomization".to_owned(), "team-a".to_owned())]),
            objects: HashSet::from([(
                "HelmRelease".to_owned(),
                "team-b".to_owned(),
                "db".to_owned(),
            )]),
            level: None,
            namespace: String::new(),
        };
        assert!(scope.permits(&line("GitRepository", "anywhere", "x", "info")));
        assert!(scope.permits(&line("Kustomization", "team-a", "x", "info")));
        assert!(!scope.permits(&line("Kustomization", "team-b", "x", "info")));
        assert!(scope.permits(&line("HelmRelease", "team-b", "db", "info")));
        assert!(!scope.permits(&line("HelmRelease", "team-b", "web", "info")));
        assert!(!scope.permits(&line("OCIRepository", "team-a", "x", "info")));
        let errors_in_a = Scope {
            level: Some("ERROR".into()),
            namespace: "team-a".into(),
            ..scope
        };
        assert!(errors_in_a.permits(&line("Kustomization", "team-a", "x", "error")));
        assert!(!errors_in_a.permits(&line("Kustomization", "team-a", "x", "info")));
        assert!(!errors_in_a.permits(&line("GitRepository", "elsewhere", "x", "error")));
    }

    #[test]
    fn a_query_names_a_namespace_and_a_level_the_controllers_write() {
        let query = |namespace: &str, level: Option<&str>| LogQuery {
            namespace: namespace.into(),
            level: level.map(str::to_owned),
            ..LogQuery::default()
        };
        assert!(check_query(&query("", None)).is_ok());
        assert!(check_query(&query("team-a", Some("ERROR"))).is_ok());
        assert!(matches!(
            check_query(&query("Team_A", None)),
            Err(WorkloadsError::InvalidArgument(_))
        ));
        match check_query(&query("", Some("loud"))) {
            Err(WorkloadsError::InvalidArgument(message)) => assert_eq!(
                message,
                "log level \"loud\" is not one the Flux controllers write: use debug, info or error"
            ),
            other => panic!("{other:?}"),
        }
        let nameless_kind = LogQuery {
            namespace: "team-a".into(),
            name: Some("podinfo".into()),
            ..LogQuery::default()
        };
        match check_query(&nameless_kind) {
            Err(WorkloadsError::InvalidArgument(message)) => {
                assert!(message.contains("needs its kind"), "{message}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_newest_lines_are_kept_oldest_first() {
        let at = |s: i64| LogLine {
            time: Some(Timestamp::from_second(s).unwrap()),
            message: s.to_string(),
            ..LogLine::default()
        };
        let lines: Vec<LogLine> = (0..MAX_LINES as i64 + 3).rev().map(at).collect();
        let (kept, more) = bounded(lines);
        assert_eq!(more, 3);
        assert_eq!(kept.len(), MAX_LINES);
        assert_eq!(kept[0].message, "3");
        assert_eq!(kept.last().unwrap().message, (MAX_LINES + 2).to_string());
    }
}
