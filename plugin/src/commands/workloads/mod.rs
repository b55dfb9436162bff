//! `kubectl tenantflux get|suspend|resume|reconcile`: Flux objects at whatever API version the
//! cluster serves, through the agent, with `flux get`'s columns and kubectl's flags.

use std::io::{self, Write as _};

use anyhow::{Context as _, bail};
use serde::Serialize;
use tenantflux_proto::v1::{self as pb, object_event};

mod args;
mod bulk;
#[cfg(test)]
mod tests;
mod view;

use self::{args::Control, bulk::Action, view::ListView};
pub use self::{
    args::{ControlArgs, GetArgs, ReconcileArgs, TargetArgs, control_help},
    view::{TableOptions, render_tables},
};
use crate::{
    connect::{Agent, ConnectOptions},
    exit::Exit,
    grammar,
    output::{OutputFormat, Printer, table},
    state::State as _,
    views::object::ObjectView,
};

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
    args: ControlArgs,
) -> anyhow::Result<()> {
    let Some((agent, target)) = one_object(options, printer, Action::Suspend, &args).await? else {
        return Ok(());
    };
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
    args: ControlArgs,
) -> anyhow::Result<()> {
    let Some((agent, target)) = one_object(options, printer, Action::Resume, &args).await? else {
        return Ok(());
    };
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

/// The connected agent and the one object `args` names; with `--all`, runs the bulk action
/// and answers `None` once it is done.
async fn one_object(
    options: &ConnectOptions,
    printer: &Printer,
    action: Action,
    args: &ControlArgs,
) -> anyhow::Result<Option<(Agent, (String, String))>> {
    let control = args.control()?;
    let agent = Agent::connect(options).await?;
    match control {
        Control::One { kind, name } => Ok(Some((agent, (kind, name)))),
        Control::All {
            kind,
            all_namespaces,
        } => {
            bulk::run(&agent, printer, action, &kind, all_namespaces).await?;
            Ok(None)
        }
    }
}

/// Whether the object has handled the request of `requested_at` and its Ready condition says
/// how that ended.
pub fn settled(object: &ObjectView, requested_at: &str) -> Option<bool> {
    if object.last_handled_reconcile_at != requested_at {
        return None;
    }
    match object.ready_status() {
        pb::ConditionStatus::True => Some(true),
        pb::ConditionStatus::False => Some(false),
        pb::ConditionStatus::Unknown | pb::ConditionStatus::Unspecified => None,
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
                crate::age::human(timeout),
                object.title()
            )
        })??,
        None => wait.await?,
    };
    if last.ready_status() != pb::ConditionStatus::True {
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
                object.ready_status().word(),
                object.message()
            ));
            return Ok(object);
        }
        let message = format!("{} {}", object.ready_status().word(), object.message());
        if message != last_message {
            progress(&format!("  {}: Ready={message}", object.title()));
            last_message = message;
        }
    }
}
