//! `kubectl tenantflux events|tree|trace|stats`: finding out why something is not deployed,
//! through the agent, as `flux events`, `flux tree`, `flux trace` and `flux stats` do.

use std::io::{self, Write as _};

use anyhow::{Context as _, bail};
use tenantflux_proto::v1::{self as pb, event_change};

mod args;
mod view;

pub use self::args::{EventsArgs, StatsArgs, TraceArgs, TreeArgs};
use self::view::{
    EventView, EventsView, KindStatsView, NodeView, StatsView, TraceView, event_headers,
    event_rows, render_events, render_stats, render_trace, render_tree,
};
use crate::{
    connect::{Agent, ConnectOptions},
    exit::Exit,
    grammar,
    output::{OutputFormat, Printer, table},
};

fn warn(line: &str) {
    let _ = writeln!(io::stderr(), "warning: {line}");
}

fn write_flushed(text: &str) -> anyhow::Result<()> {
    let mut stdout = io::stdout().lock();
    stdout.write_all(text.as_bytes())?;
    stdout.flush()?;
    Ok(())
}

pub async fn events(
    options: &ConnectOptions,
    printer: &Printer,
    args: EventsArgs,
) -> anyhow::Result<()> {
    let object = if args.words.is_empty() {
        None
    } else {
        let selection = grammar::parse(grammar::Verb::Control, &args.words)?;
        Some((
            selection.kind,
            selection.name.expect("a control selection has a name"),
        ))
    };
    if object.is_some() && args.all_namespaces {
        return Err(Exit::Usage.mark(anyhow::anyhow!(
            "KIND NAME needs one namespace: drop -A/--all-namespaces, or the object"
        )));
    }
    let agent = Agent::connect(options).await?;
    let namespace = if args.all_namespaces {
        String::new()
    } else {
        agent.namespace().to_owned()
    };
    let request = pb::ListEventsRequest {
        namespace: namespace.clone(),
        object: object.map(|(kind, name)| pb::ObjectRef {
            kind,
            namespace: namespace.clone(),
            name,
        }),
        types: args.types.clone(),
    };
    let namespaces = args.all_namespaces;
    if args.watch {
        return watch_events(&agent, printer, request, namespaces).await;
    }
    let response = agent.call(agent.inspect().list_events(request)).await?;
    for skipped in &response.skipped {
        warn(&format!(
            "namespace {} left out: {}",
            skipped.namespace, skipped.reason
        ));
    }
    let view = EventsView {
        events: response.events.into_iter().map(EventView::from).collect(),
        more: response.more,
    };
    if view.events.is_empty() && printer.format() == OutputFormat::Table {
        let place = if namespace.is_empty() {
            "any namespace".to_owned()
        } else {
            format!("namespace {namespace}")
        };
        let _ = writeln!(io::stderr(), "no Events of Flux objects found in {place}");
        return Ok(());
    }
    printer.print(&view, |v, style| render_events(v, namespaces, style))
}

async fn watch_events(
    agent: &Agent,
    printer: &Printer,
    request: pb::ListEventsRequest,
    namespaces: bool,
) -> anyhow::Result<()> {
    let mut stream = agent.call(agent.inspect().watch_events(request)).await?;
    let mut first = true;
    let mut header = true;
    let forever = async {
        loop {
            let Some(change) = agent.next(&mut stream).await? else {
                bail!("{} ended the watch of Events", agent.target());
            };
            if change.r#type() == event_change::Type::Synced {
                continue;
            }
            let Some(event) = change.event.map(EventView::from) else {
                continue;
            };
            if printer.format() == OutputFormat::Table {
                let now = k8s_openapi::jiff::Timestamp::now();
                let rows = event_rows(std::slice::from_ref(&event), namespaces, now);
                let text = table("", &event_headers(namespaces), &rows, printer.style());
                // The header once, above the first line.
                let text = if header {
                    header = false;
                    text
                } else {
                    text.split_once('\n')
                        .map_or(String::new(), |(_, rest)| rest.to_owned())
                };
                write_flushed(&text)?;
            } else {
                printer.print_next(first, "", &event, |_, _| String::new())?;
                first = false;
            }
        }
    };
    tokio::select! {
        watched = forever => watched,
        interrupted = tokio::signal::ctrl_c() => interrupted.context("cannot listen for Ctrl-C"),
    }
}

pub async fn tree(
    options: &ConnectOptions,
    printer: &Printer,
    args: TreeArgs,
) -> anyhow::Result<()> {
    let selection = grammar::parse(grammar::Verb::Control, &args.words)?;
    let name = selection.name.expect("a control selection has a name");
    let agent = Agent::connect(options).await?;
    let response = agent
        .call(agent.inspect().tree(pb::TreeRequest {
            object: Some(pb::ObjectRef {
                kind: selection.kind,
                namespace: agent.namespace().to_owned(),
                name,
            }),
        }))
        .await?;
    let root = NodeView::from(response.root.unwrap_or_default());
    printer.print(&root, render_tree)
}

pub async fn trace(
    options: &ConnectOptions,
    printer: &Printer,
    args: TraceArgs,
) -> anyhow::Result<()> {
    let (kind, name) = args.target()?;
    let agent = Agent::connect(options).await?;
    let response = agent
        .call(agent.inspect().trace(pb::TraceRequest {
            object: Some(pb::ObjectRef {
                kind,
                namespace: agent.namespace().to_owned(),
                name,
            }),
        }))
        .await?;
    let view = TraceView::from(response);
    printer.print(&view, render_trace)
}

pub async fn stats(
    options: &ConnectOptions,
    printer: &Printer,
    args: StatsArgs,
) -> anyhow::Result<()> {
    let agent = Agent::connect(options).await?;
    let namespace = if args.all_namespaces {
        String::new()
    } else {
        agent.namespace().to_owned()
    };
    let response = agent
        .call(agent.inspect().stats(pb::StatsRequest { namespace }))
        .await?;
    for skipped in &response.skipped {
        warn(&format!("{} left out: {}", skipped.kind, skipped.reason));
    }
    let view = StatsView {
        kinds: response
            .kinds
            .into_iter()
            .map(|k| KindStatsView {
                kind: k.kind,
                running: k.running,
                failing: k.failing,
                suspended: k.suspended,
                storage_bytes: k.storage_bytes,
            })
            .collect(),
    };
    printer.print(&view, render_stats)
}
