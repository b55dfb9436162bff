//! `kubectl tenantflux status`: what the agent sees of flux-operator, the FluxInstance and policy.

use std::io::{self, Write as _};

use anyhow::Context as _;
use k8s_openapi::jiff::Timestamp;

mod render;
#[cfg(test)]
mod tests;

pub use self::render::render_table;
use crate::{
    connect::{Agent, ConnectOptions, Reconnects, StatusWatch},
    output::Printer,
    views::status::StatusView,
};

pub async fn run(options: &ConnectOptions, printer: &Printer) -> anyhow::Result<()> {
    let agent = Agent::connect(options).await?;
    let status = agent.get_status().await?;
    let started = std::time::Instant::now();
    let printed = printer.print(&StatusView::from(status), render_table);
    crate::timings::record("render", started.elapsed());
    printed
}

/// `status --watch`: the status, then again at every change, across lost connections, until
/// Ctrl-C (which is how a watch is meant to end, so not an error).
pub async fn watch(options: &ConnectOptions, printer: &Printer) -> anyhow::Result<()> {
    tokio::select! {
        watched = watch_forever(options, printer) => watched,
        interrupted = tokio::signal::ctrl_c() => interrupted.context("cannot listen for Ctrl-C"),
    }
}

async fn watch_forever(options: &ConnectOptions, printer: &Printer) -> anyhow::Result<()> {
    // The first connection fails the way `status` does: there is no watch yet to resume.
    let mut watch = Agent::connect(options).await?.watch_status().await?;
    let mut last: Option<StatusView> = None;
    loop {
        let lost = loop {
            match watch.next().await {
                Ok(Some(status)) => {
                    let view = StatusView::from(status);
                    if is_news(last.as_ref(), &view) {
                        let header = watch_header(Timestamp::now());
                        printer.print_next(last.is_none(), &header, &view, render_table)?;
                        last = Some(view);
                    }
                }
                Ok(None) => break format!("{} ended the stream", watch.target()),
                Err(err) if err.is_transient() => break err.to_string(),
                Err(err) => return Err(err.into()),
            }
        };
        // stderr, so that stdout stays a clean series of documents.
        let _ = writeln!(
            io::stderr(),
            "lost the watch on tenantflux-agent ({lost}); reconnecting"
        );
        watch = rewatch(options).await?;
    }
}

/// A watch on a fresh connection (the agent pod found and credentials resolved anew, as an
/// agent restart needs), retried with backoff for as long as the failures are transient.
async fn rewatch(options: &ConnectOptions) -> anyhow::Result<StatusWatch> {
    let mut reconnects = Reconnects::new();
    loop {
        reconnects.wait().await;
        match Agent::connect(options).await {
            Ok(agent) => match agent.watch_status().await {
                Ok(watch) => return Ok(watch),
                Err(err) if err.is_transient() => {}
                Err(err) => return Err(err.into()),
            },
            Err(err) if err.is_transient() => {}
            Err(err) => return Err(err.into()),
        }
    }
}

/// Whether a watched status is worth printing: a new watch starts by re-sending the status
/// the last one may already have printed.
fn is_news(last_printed: Option<&StatusView>, next: &StatusView) -> bool {
    last_printed != Some(next)
}

/// The line above each table of a watch: when the status arrived.
fn watch_header(now: Timestamp) -> String {
    format!("Status at {}", now.strftime("%Y-%m-%d %H:%M:%S UTC"))
}
