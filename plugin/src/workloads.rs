//! `kubectl tenantflux get|suspend|resume|reconcile`: Flux objects at whatever API version the
//! cluster serves, through the agent, with `flux get`'s columns and kubectl's flags.

use std::{
    collections::BTreeMap,
    io::{self, Write as _},
    time::Duration,
};

use anyhow::{Context as _, bail};
use clap::Args;
use serde::Serialize;
use tenantflux_proto::v1::{self as pb, object_event};

use crate::{
    cli::RequestTimeout,
    connect::{Agent, ConnectOptions},
    exit::Exit,
    grammar,
    output::{Cell, OutputFormat, Printer, Style, Tone, table},
};

#[derive(Debug, Args)]
#[command(
    override_usage = "kubectl tenantflux get KIND [NAME] [flags]\n       \
                      kubectl tenantflux get sources git|oci|helm|chart|bucket|external|all [NAME] [flags]\n       \
                      kubectl tenantflux get images repository|policy|update|all [NAME] [flags]\n       \
                      kubectl tenantflux get artifact generators [NAME] [flags]",
    after_help = "KIND, as kubectl names it: all, ks, hr, gitrepo, ocirepo, helmrepo, helmchart, bucket, \
                  externalartifact, imagerepo, imagepolicy, imageupdate, receiver, alert, provider, ag, \
                  instance, fluxreport, rset, rsip (or the kind's name or plural). \
                  The flux CLI's words work too: sources …, images …, artifact generators, \
                  kustomizations, helmreleases, alerts, alert-providers, receivers."
)]
pub struct GetArgs {
    /// KIND [NAME], or flux's words, e.g. `sources git [NAME]`.
    #[arg(required = true, num_args = 1..=3, value_names = ["KIND", "NAME"])]
    pub words: Vec<String>,
    /// List the objects of every namespace.
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    /// Only objects whose labels match (Kubernetes selector syntax, e.g. app=podinfo).
    #[arg(
        short = 'l',
        long,
        visible_alias = "label-selector",
        value_name = "SELECTOR"
    )]
    pub selector: Option<String>,
    /// Only objects with this condition status, e.g. ready=false.
    #[arg(long, value_name = "CONDITION=STATUS", value_parser = parse_status_selector)]
    pub status_selector: Option<(String, String)>,
    /// After the list, print each change until interrupted (Ctrl-C).
    #[arg(short, long)]
    pub watch: bool,
    /// Leave the header line out of tables.
    #[arg(long, visible_alias = "no-headers")]
    pub no_header: bool,
}

#[derive(Debug, Args)]
#[command(
    override_usage = "kubectl tenantflux <suspend|resume|reconcile> KIND NAME [flags]\n       \
                      kubectl tenantflux <suspend|resume|reconcile> source git|oci|helm|chart|bucket NAME [flags]\n       \
                      kubectl tenantflux <suspend|resume|reconcile> image repository|policy|update NAME [flags]",
    after_help = "KIND, as kubectl names it: ks, hr, gitrepo, ocirepo, helmrepo, helmchart, bucket, \
                  imagerepo, imagepolicy, imageupdate, receiver, alert, provider, ag, instance, rset, rsip. \
                  The flux CLI's words work too: kustomization, helmrelease, source git, image policy, …"
)]
pub struct TargetArgs {
    /// KIND NAME, or flux's words, e.g. `source git NAME`.
    #[arg(required = true, num_args = 2..=3, value_names = ["KIND", "NAME"])]
    pub words: Vec<String>,
}

impl TargetArgs {
    /// The one object the words name.
    pub fn target(&self) -> anyhow::Result<(String, String)> {
        let selection = grammar::parse(grammar::Verb::Control, &self.words)?;
        let name = selection.name.expect("a control selection has a name");
        Ok((selection.kind, name))
    }
}

#[derive(Debug, Args)]
pub struct ReconcileArgs {
    #[command(flatten)]
    pub target: TargetArgs,
    /// Reconcile the object's source first (Kustomization, HelmRelease).
    #[arg(long)]
    pub with_source: bool,
    /// HelmRelease: force a one-off install or upgrade.
    #[arg(long)]
    pub force: bool,
    /// Wait until the object's Ready condition settles for this request, showing progress.
    #[arg(long)]
    pub wait: bool,
    /// How long --wait waits (0 waits forever).
    #[arg(long, default_value = "5m", value_name = "DURATION")]
    pub timeout: RequestTimeout,
}

fn parse_status_selector(value: &str) -> Result<(String, String), String> {
    match value.split_once('=') {
        Some((condition, status)) if !condition.trim().is_empty() => {
            Ok((condition.trim().to_owned(), status.trim().to_owned()))
        }
        _ => Err("expected CONDITION=STATUS, e.g. ready=false".to_owned()),
    }
}

/// The stable `-o json|yaml` shape of a Flux object.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectView {
    pub kind: String,
    pub api_version: String,
    pub namespace: String,
    pub name: String,
    pub revision: String,
    pub suspended: bool,
    pub ready: Option<ConditionView>,
    pub labels: BTreeMap<String, String>,
    pub generation: i64,
    pub observed_generation: i64,
    pub last_handled_reconcile_at: String,
    pub source: Option<RefView>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConditionView {
    pub status: String,
    pub reason: String,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RefView {
    pub kind: String,
    pub namespace: String,
    pub name: String,
}

impl From<pb::FluxObject> for ObjectView {
    fn from(o: pb::FluxObject) -> Self {
        Self {
            kind: o.kind,
            api_version: o.api_version,
            namespace: o.namespace,
            name: o.name,
            revision: o.revision,
            suspended: o.suspended,
            ready: o.ready.map(|c| ConditionView {
                status: c.status,
                reason: c.reason,
                message: c.message,
            }),
            labels: o.labels.into_iter().collect(),
            generation: o.generation,
            observed_generation: o.observed_generation,
            last_handled_reconcile_at: o.last_handled_reconcile_at,
            source: o.source.map(|s| RefView {
                kind: s.kind,
                namespace: s.namespace,
                name: s.name,
            }),
        }
    }
}

impl ObjectView {
    fn ready_status(&self) -> &str {
        self.ready.as_ref().map_or("Unknown", |c| c.status.as_str())
    }

    fn message(&self) -> &str {
        self.ready.as_ref().map_or("", |c| c.message.as_str())
    }

    fn title(&self) -> String {
        format!("{} {}/{}", self.kind, self.namespace, self.name)
    }
}

#[derive(Debug, Serialize)]
struct ListView {
    items: Vec<ObjectView>,
}

/// How a table shows one kind: its revision heading (empty: no such column).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TableOptions {
    /// Kind → heading of its revision column.
    pub revision_columns: BTreeMap<String, String>,
    pub all_namespaces: bool,
    /// `get all`: one table per kind, names as `kind/name`.
    pub grouped: bool,
    pub no_header: bool,
}

impl TableOptions {
    fn headers(&self, kind: &str) -> Vec<&str> {
        let mut headers = Vec::new();
        if self.all_namespaces {
            headers.push("NAMESPACE");
        }
        headers.push("NAME");
        match self.revision_columns.get(kind).map(String::as_str) {
            Some("") => {}
            Some(heading) => headers.push(heading),
            None => headers.push("REVISION"),
        }
        headers.extend(["SUSPENDED", "READY", "MESSAGE"]);
        headers
    }

    fn row(&self, object: &ObjectView, deleted: bool) -> Vec<Cell> {
        let mut row = Vec::new();
        if self.all_namespaces {
            row.push(Cell::plain(&object.namespace));
        }
        row.push(Cell::plain(if self.grouped {
            format!("{}/{}", object.kind.to_ascii_lowercase(), object.name)
        } else {
            object.name.clone()
        }));
        if self
            .revision_columns
            .get(&object.kind)
            .is_none_or(|h| !h.is_empty())
        {
            row.push(Cell::plain(&object.revision));
        }
        row.push(Cell::plain(if object.suspended { "True" } else { "False" }));
        let ready = object.ready_status();
        let tone = match ready {
            "True" => Tone::Good,
            "False" => Tone::Bad,
            _ => Tone::Plain,
        };
        row.push(Cell::toned(ready, tone));
        row.push(Cell::plain(if deleted {
            "(deleted)"
        } else {
            object.message()
        }));
        row
    }
}

/// `flux get`'s tables: one per kind (in the order given), apart by a blank line.
pub fn render_tables(objects: &[ObjectView], options: &TableOptions, style: Style) -> String {
    let mut kinds: Vec<&str> = Vec::new();
    for object in objects {
        if !kinds.contains(&object.kind.as_str()) {
            kinds.push(&object.kind);
        }
    }
    let mut out = Vec::new();
    for kind in kinds {
        let rows: Vec<Vec<Cell>> = objects
            .iter()
            .filter(|o| o.kind == kind)
            .map(|o| options.row(o, false))
            .collect();
        let text = table("", &options.headers(kind), &rows, style);
        out.push(if options.no_header {
            text.split_once('\n')
                .map(|(_, rest)| rest.to_owned())
                .unwrap_or_default()
        } else {
            text
        });
    }
    out.join("\n")
}

async fn table_options(
    agent: &Agent,
    all_namespaces: bool,
    grouped: bool,
    no_header: bool,
) -> anyhow::Result<TableOptions> {
    let kinds = agent
        .call(agent.workloads().list_kinds(pb::ListKindsRequest {}))
        .await?
        .kinds;
    Ok(TableOptions {
        revision_columns: kinds
            .into_iter()
            .map(|k| (k.kind, k.revision_column))
            .collect(),
        all_namespaces,
        grouped,
        no_header,
    })
}

pub async fn get(options: &ConnectOptions, printer: &Printer, args: GetArgs) -> anyhow::Result<()> {
    let selection = grammar::parse(grammar::Verb::Get, &args.words)?;
    if selection.name.is_some() && args.all_namespaces {
        return Err(Exit::Usage.mark(anyhow::anyhow!(
            "a name needs one namespace: drop -A/--all-namespaces, or the name"
        )));
    }
    let agent = Agent::connect(options).await?;
    let all = selection.several;
    let namespace = if args.all_namespaces {
        String::new()
    } else {
        agent.namespace().to_owned()
    };
    let status_selector = args
        .status_selector
        .clone()
        .map(|(r#type, status)| pb::StatusSelector { r#type, status });
    if args.watch {
        return watch(
            &agent,
            printer,
            &args,
            &selection,
            namespace,
            status_selector,
        )
        .await;
    }
    let mut client = agent.workloads();
    if let Some(name) = &selection.name {
        let object = agent
            .call(client.get_object(pb::GetObjectRequest {
                object: Some(pb::ObjectRef {
                    kind: selection.kind.clone(),
                    namespace,
                    name: name.clone(),
                }),
            }))
            .await?;
        let view = ObjectView::from(object);
        let options = table_options(&agent, false, false, args.no_header).await?;
        return printer.print(&view, |v, style| {
            render_tables(std::slice::from_ref(v), &options, style)
        });
    }
    let response = agent
        .call(client.list_objects(pb::ListObjectsRequest {
            kind: selection.kind.clone(),
            namespace: namespace.clone(),
            label_selector: args.selector.clone().unwrap_or_default(),
            status_selector,
        }))
        .await?;
    for skipped in &response.skipped {
        let _ = writeln!(
            io::stderr(),
            "warning: {} left out: {}",
            skipped.kind,
            skipped.reason
        );
    }
    let view = ListView {
        items: response.objects.into_iter().map(ObjectView::from).collect(),
    };
    if view.items.is_empty() && printer.format() == OutputFormat::Table {
        let place = if namespace.is_empty() {
            "any namespace".to_owned()
        } else {
            format!("namespace {namespace}")
        };
        let _ = writeln!(io::stderr(), "no Flux objects found in {place}");
        return Ok(());
    }
    let options = table_options(&agent, args.all_namespaces, all, args.no_header).await?;
    printer.print(&view, |v, style| render_tables(&v.items, &options, style))
}

#[derive(Debug, Serialize)]
struct EventView {
    #[serde(rename = "type")]
    type_: &'static str,
    object: ObjectView,
}

async fn watch(
    agent: &Agent,
    printer: &Printer,
    args: &GetArgs,
    selection: &grammar::Selection,
    namespace: String,
    status_selector: Option<pb::StatusSelector>,
) -> anyhow::Result<()> {
    let options = table_options(
        agent,
        args.all_namespaces,
        selection.several,
        args.no_header,
    )
    .await?;
    let mut stream = agent
        .call(agent.workloads().watch_objects(pb::WatchObjectsRequest {
            kind: selection.kind.clone(),
            namespace,
            label_selector: args.selector.clone().unwrap_or_default(),
            status_selector,
            name: selection.name.clone().unwrap_or_default(),
        }))
        .await?;
    let mut initial = Vec::new();
    let mut synced = false;
    let mut first = true;
    let forever = async {
        loop {
            let Some(event) = agent.next(&mut stream).await? else {
                bail!("{} ended the watch", agent.target());
            };
            let type_ = event.r#type();
            let Some(object) = event.object.map(ObjectView::from) else {
                if type_ == object_event::Type::Synced && !synced {
                    synced = true;
                    if printer.format() == OutputFormat::Table {
                        let text = render_tables(&initial, &options, printer.style());
                        write_flushed(&text)?;
                    } else {
                        for object in initial.drain(..) {
                            let view = EventView {
                                type_: "ADDED",
                                object,
                            };
                            printer.print_next(first, "", &view, |_, _| String::new())?;
                            first = false;
                        }
                    }
                }
                continue;
            };
            if !synced {
                initial.push(object);
                continue;
            }
            let name = match type_ {
                object_event::Type::Added => "ADDED",
                object_event::Type::Deleted => "DELETED",
                _ => "MODIFIED",
            };
            if printer.format() == OutputFormat::Table {
                let row = options.row(&object, name == "DELETED");
                let text = table("", &options.headers(&object.kind), &[row], printer.style());
                // The header only says what the columns are; a watch shows it once, above.
                let line = text.split_once('\n').map_or("", |(_, rest)| rest);
                write_flushed(line)?;
            } else {
                let view = EventView {
                    type_: name,
                    object,
                };
                printer.print_next(first, "", &view, |_, _| String::new())?;
                first = false;
            }
        }
    };
    tokio::select! {
        watched = forever => watched,
        interrupted = tokio::signal::ctrl_c() => interrupted.context("cannot listen for Ctrl-C"),
    }
}

fn write_flushed(text: &str) -> anyhow::Result<()> {
    let mut stdout = io::stdout().lock();
    stdout.write_all(text.as_bytes())?;
    stdout.flush()?;
    Ok(())
}

fn progress(line: &str) {
    let _ = writeln!(io::stderr(), "{line}");
}

fn reference(agent: &Agent, (kind, name): &(String, String)) -> pb::ObjectRef {
    pb::ObjectRef {
        kind: kind.clone(),
        namespace: agent.namespace().to_owned(),
        name: name.clone(),
    }
}

pub async fn suspend(
    options: &ConnectOptions,
    printer: &Printer,
    target: TargetArgs,
) -> anyhow::Result<()> {
    let target = target.target()?;
    let agent = Agent::connect(options).await?;
    let object = agent
        .call(agent.workloads().suspend(pb::SuspendRequest {
            object: Some(reference(&agent, &target)),
        }))
        .await?;
    let view = ObjectView::from(object);
    printer.print(&view, |v, _| format!("✔ {} suspended\n", v.title()))
}

pub async fn resume(
    options: &ConnectOptions,
    printer: &Printer,
    target: TargetArgs,
) -> anyhow::Result<()> {
    let target = target.target()?;
    let agent = Agent::connect(options).await?;
    let response = agent
        .call(agent.workloads().resume(pb::ResumeRequest {
            object: Some(reference(&agent, &target)),
        }))
        .await?;
    let view = ObjectView::from(response.object.unwrap_or_default());
    let at = response.requested_at;
    printer.print(&view, |v, _| {
        format!(
            "✔ {} resumed (reconciliation requested at {at})\n",
            v.title()
        )
    })
}

/// Whether the object has handled the request of `requested_at` and its Ready condition says
/// how that ended.
pub fn settled(object: &ObjectView, requested_at: &str) -> Option<bool> {
    if object.last_handled_reconcile_at != requested_at {
        return None;
    }
    match object.ready_status() {
        "True" => Some(true),
        "False" => Some(false),
        _ => None,
    }
}

pub async fn reconcile(
    options: &ConnectOptions,
    printer: &Printer,
    args: ReconcileArgs,
) -> anyhow::Result<()> {
    let target = args.target.target()?;
    let agent = Agent::connect(options).await?;
    let request = reference(&agent, &target);
    let response = agent
        .call(agent.workloads().reconcile(pb::ReconcileRequest {
            object: Some(request),
            with_source: args.with_source,
            force: args.force,
        }))
        .await?;
    let requested_at = response.requested_at;
    let object = ObjectView::from(response.object.unwrap_or_default());
    let source = response.source.map(ObjectView::from);
    if let Some(source) = &source {
        progress(&format!(
            "► {} annotated (requestedAt {requested_at})",
            source.title()
        ));
    }
    progress(&format!(
        "► {} annotated (requestedAt {requested_at})",
        object.title()
    ));
    if object.suspended {
        let warning = format!(
            "{} is suspended: Flux will not reconcile it until it is resumed",
            object.title()
        );
        if args.wait {
            bail!(warning);
        }
        progress(&format!("warning: {warning}"));
    }
    if !args.wait {
        return printer.print(&object, |v, _| {
            format!(
                "✔ reconciliation of {} requested at {requested_at}\n",
                v.title()
            )
        });
    }
    let wait = async {
        let mut requested_at = requested_at.clone();
        if let Some(source) = &source {
            wait_settled(&agent, source, &requested_at).await?;
            // The object was asked at the same moment as its source, so its controller may
            // have handled that before the source had anything new: ask again, now that the
            // source settled, and wait for that request.
            requested_at = agent
                .call(agent.workloads().reconcile(pb::ReconcileRequest {
                    object: Some(reference(&agent, &target)),
                    with_source: false,
                    force: args.force,
                }))
                .await?
                .requested_at;
            progress(&format!(
                "► {} annotated again (requestedAt {requested_at})",
                object.title()
            ));
        }
        wait_settled(&agent, &object, &requested_at).await
    };
    let last = match args.timeout.get() {
        Some(timeout) => tokio::time::timeout(timeout, wait).await.map_err(|_| {
            anyhow::anyhow!(
                "timed out after {} waiting for {} to reconcile (raise --timeout)",
                humantime(timeout),
                object.title()
            )
        })??,
        None => wait.await?,
    };
    if last.ready_status() != "True" {
        bail!("{} reconciliation failed: {}", last.title(), last.message());
    }
    printer.print(&last, |v, _| {
        format!("✔ {} reconciled: {}\n", v.title(), v.message())
    })
}

/// Follows one object until it has settled for `requested_at`; progress goes to stderr.
async fn wait_settled(
    agent: &Agent,
    target: &ObjectView,
    requested_at: &str,
) -> anyhow::Result<ObjectView> {
    progress(&format!("◎ waiting for {} to reconcile", target.title()));
    let mut stream = agent
        .call(agent.workloads().watch_objects(pb::WatchObjectsRequest {
            kind: target.kind.clone(),
            namespace: target.namespace.clone(),
            name: target.name.clone(),
            ..Default::default()
        }))
        .await?;
    let mut last_message = String::new();
    loop {
        let Some(event) = agent.next(&mut stream).await? else {
            bail!("{} ended the watch of {}", agent.target(), target.title());
        };
        if event.r#type() == object_event::Type::Deleted {
            bail!(
                "{} was deleted while waiting for it to reconcile",
                target.title()
            );
        }
        let Some(object) = event.object.map(ObjectView::from) else {
            continue;
        };
        if let Some(ready) = settled(&object, requested_at) {
            let mark = if ready { "✔" } else { "✗" };
            progress(&format!(
                "{mark} {}: Ready={} {}",
                object.title(),
                object.ready_status(),
                object.message()
            ));
            return Ok(object);
        }
        let message = format!("{} {}", object.ready_status(), object.message());
        if message != last_message {
            progress(&format!("  {}: Ready={message}", object.title()));
            last_message = message;
        }
    }
}

fn humantime(duration: Duration) -> String {
    let seconds = duration.as_secs();
    match (seconds / 60, seconds % 60) {
        (0, s) => format!("{s}s"),
        (m, 0) => format!("{m}m"),
        (m, s) => format!("{m}m{s}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(kind: &str, namespace: &str, name: &str, ready: Option<(&str, &str)>) -> ObjectView {
        ObjectView {
            kind: kind.into(),
            api_version: "v".into(),
            namespace: namespace.into(),
            name: name.into(),
            revision: if kind == "Receiver" {
                String::new()
            } else {
                "main@sha1:1".into()
            },
            suspended: name == "paused",
            ready: ready.map(|(status, message)| ConditionView {
                status: status.into(),
                reason: String::new(),
                message: message.into(),
            }),
            labels: BTreeMap::new(),
            generation: 1,
            observed_generation: 1,
            last_handled_reconcile_at: String::new(),
            source: None,
        }
    }

    fn options(all_namespaces: bool, grouped: bool) -> TableOptions {
        TableOptions {
            revision_columns: [
                ("Kustomization", "REVISION"),
                ("Receiver", ""),
                ("GitRepository", "REVISION"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
            all_namespaces,
            grouped,
            no_header: false,
        }
    }

    #[test]
    fn one_kind_table_has_flux_get_columns() {
        let objects = [
            object(
                "Kustomization",
                "apps",
                "podinfo",
                Some(("True", "Applied revision: main@sha1:1")),
            ),
            object("Kustomization", "apps", "paused", None),
        ];
        assert_eq!(
            render_tables(&objects, &options(false, false), Style::PLAIN),
            "NAME      REVISION      SUSPENDED   READY     MESSAGE\n\
             podinfo   main@sha1:1   False       True      Applied revision: main@sha1:1\n\
             paused    main@sha1:1   True        Unknown\n"
        );
        let mut no_header = options(true, false);
        no_header.no_header = true;
        assert_eq!(
            render_tables(&objects[..1], &no_header, Style::PLAIN),
            "apps        podinfo   main@sha1:1   False       True    Applied revision: main@sha1:1\n"
        );
    }

    #[test]
    fn all_groups_by_kind_with_namespace_first_and_kind_prefixed_names() {
        let objects = [
            object("GitRepository", "a", "repo", Some(("True", "stored"))),
            object("Receiver", "b", "hook", Some(("False", "no secret"))),
        ];
        assert_eq!(
            render_tables(&objects, &options(true, true), Style::PLAIN),
            "NAMESPACE   NAME                 REVISION      SUSPENDED   READY   MESSAGE\n\
             a           gitrepository/repo   main@sha1:1   False       True    stored\n\
             \n\
             NAMESPACE   NAME            SUSPENDED   READY   MESSAGE\n\
             b           receiver/hook   False       False   no secret\n"
        );
    }

    #[test]
    fn settled_only_for_this_request_and_a_decided_ready() {
        let mut o = object("Kustomization", "a", "b", Some(("True", "ok")));
        assert_eq!(settled(&o, "t1"), None, "an older request");
        o.last_handled_reconcile_at = "t1".into();
        assert_eq!(settled(&o, "t1"), Some(true));
        o.ready = Some(ConditionView {
            status: "False".into(),
            reason: String::new(),
            message: "x".into(),
        });
        assert_eq!(settled(&o, "t1"), Some(false));
        o.ready = Some(ConditionView {
            status: "Unknown".into(),
            reason: String::new(),
            message: "x".into(),
        });
        assert_eq!(settled(&o, "t1"), None, "still reconciling");
    }

    #[test]
    fn status_selector_flag_parses() {
        assert_eq!(
            parse_status_selector("ready=false"),
            Ok(("ready".into(), "false".into()))
        );
        assert!(parse_status_selector("ready").is_err());
        assert!(parse_status_selector("=true").is_err());
    }
}
