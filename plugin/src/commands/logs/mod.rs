//! `kubectl tenantflux logs`: the Flux controllers' log lines about Flux objects, through the
//! agent (which reads the controller pods' logs and shows the caller only the lines about
//! objects the caller may get), as `flux logs` prints them.

use std::io::{self, Write as _};

use anyhow::Context as _;
use clap::Args;
use serde::Serialize;
use tenantflux_proto::v1 as pb;

use crate::{
    connect::{Agent, ConnectOptions},
    exit::Exit,
    grammar,
    output::{OutputFormat, Printer, Style, Tone},
};

#[derive(Debug, Args)]
#[command(
    override_usage = "kubectl tenantflux logs [KIND [NAME]] [-n NAMESPACE | -A] [-f] [--level error] [--since 1h]",
    after_help = "The lines the Flux controllers logged about Flux objects you may get, oldest first, \
                  read by the agent from the controller pods (you need no access to them). KIND as \
                  `get` names it (ks, hr, source git, …); with NAME only that object's lines.\n\n\
                  Examples:\n  \
                  kubectl tenantflux logs -n apps\n  \
                  kubectl tenantflux logs ks podinfo -n apps --level error\n  \
                  kubectl tenantflux logs -A --since 1h -f"
)]
pub struct LogsArgs {
    /// KIND, or KIND NAME, or flux's words, e.g. `source git NAME`.
    #[arg(num_args = 0..=3, value_names = ["KIND", "NAME"])]
    pub words: Vec<String>,
    /// The lines about objects of every namespace you may read.
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    /// After the lines there are, print each new one until interrupted (Ctrl-C).
    #[arg(short, long)]
    pub follow: bool,
    /// Only lines of this level: debug, info or error.
    #[arg(long, value_name = "LEVEL")]
    pub level: Option<String>,
    /// Only lines of this last while, e.g. 30s, 10m, 1h.
    #[arg(long, value_name = "DURATION")]
    pub since: Option<String>,
}

/// One line, as `-o json|yaml` writes it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LogLineView {
    pub time: String,
    pub level: String,
    pub controller: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub message: String,
}

impl From<pb::LogLine> for LogLineView {
    fn from(line: pb::LogLine) -> Self {
        Self {
            time: line
                .time
                .and_then(|t| k8s_openapi::jiff::Timestamp::new(t.seconds, t.nanos).ok())
                .map(|t| t.to_string())
                .unwrap_or_default(),
            level: line.level,
            controller: line.controller,
            kind: line.kind,
            namespace: line.namespace,
            name: line.name,
            message: line.message,
        }
    }
}

#[derive(Debug, Serialize)]
pub struct LogsView {
    pub lines: Vec<LogLineView>,
    /// Older lines left out.
    pub more: u32,
}

/// A line as `flux logs` prints it: `TIME LEVEL Kind/name.namespace - message`, errors red.
pub fn render_line(line: &LogLineView, style: Style) -> String {
    let level = if line.level.eq_ignore_ascii_case("error") {
        style.paint(&line.level, Tone::Bad)
    } else {
        line.level.clone()
    };
    format!(
        "{} {level} {}/{}.{} - {}\n",
        line.time, line.kind, line.name, line.namespace, line.message
    )
}

fn render(view: &LogsView, style: Style) -> String {
    let mut text = String::new();
    if view.more > 0 {
        text.push_str(&format!("({} older lines left out)\n", view.more));
    }
    for line in &view.lines {
        text.push_str(&render_line(line, style));
    }
    text
}

/// The request `args` ask for, in `namespace` (empty: every namespace).
fn request(args: &LogsArgs, namespace: &str) -> anyhow::Result<pb::LogsRequest> {
    let (kind, name) = if args.words.is_empty() {
        (String::new(), String::new())
    } else {
        let selection =
            grammar::parse(grammar::Verb::Get, &args.words).map_err(|e| Exit::Usage.mark(e))?;
        if selection.several {
            return Err(Exit::Usage.mark(anyhow::anyhow!(
                "logs takes one kind, not {}: e.g. `logs ks`, `logs source git`",
                selection.kind
            )));
        }
        (selection.kind, selection.name.unwrap_or_default())
    };
    if !name.is_empty() && args.all_namespaces {
        return Err(Exit::Usage.mark(anyhow::anyhow!(
            "KIND NAME needs one namespace: drop -A/--all-namespaces, or the name"
        )));
    }
    let since_seconds = match &args.since {
        None => 0,
        Some(text) => tenantflux_core::duration::parse(text)
            .map_err(|err| Exit::Usage.mark(anyhow::anyhow!("--since {text}: {err}")))?
            .as_secs()
            .max(1),
    };
    Ok(pb::LogsRequest {
        namespace: namespace.to_owned(),
        kind,
        name,
        level: args.level.clone().unwrap_or_default(),
        since_seconds,
    })
}

pub async fn run(
    options: &ConnectOptions,
    printer: &Printer,
    args: LogsArgs,
) -> anyhow::Result<()> {
    // Checked before connecting: a typo costs no port-forward.
    request(&args, "")?;
    let agent = Agent::connect(options).await?;
    let namespace = if args.all_namespaces {
        String::new()
    } else {
        agent.namespace().to_owned()
    };
    let request = request(&args, &namespace)?;
    if args.follow {
        return follow(&agent, printer, request).await;
    }
    let response = agent.call(agent.inspect().list_logs(request)).await?;
    for unread in &response.unread {
        let _ = writeln!(
            io::stderr(),
            "warning: the log of {} was not read: {}",
            unread.controller,
            unread.reason
        );
    }
    let view = LogsView {
        lines: response.lines.into_iter().map(LogLineView::from).collect(),
        more: response.more,
    };
    if view.lines.is_empty() && printer.format() == OutputFormat::Table {
        let place = if namespace.is_empty() {
            "any namespace".to_owned()
        } else {
            format!("namespace {namespace}")
        };
        let _ = writeln!(
            io::stderr(),
            "no log lines of the Flux controllers about objects in {place}"
        );
        return Ok(());
    }
    printer.print(&view, render)
}

async fn follow(agent: &Agent, printer: &Printer, request: pb::LogsRequest) -> anyhow::Result<()> {
    let mut stream = agent.call(agent.inspect().follow_logs(request)).await?;
    let mut first = true;
    let forever = async {
        loop {
            let Some(line) = agent.next(&mut stream).await? else {
                anyhow::bail!("{} ended following the logs", agent.target());
            };
            let line = LogLineView::from(line);
            printer.print_next(first, "", &line, render_line)?;
            first = false;
        }
    };
    tokio::select! {
        followed = forever => followed,
        interrupted = tokio::signal::ctrl_c() => interrupted.context("cannot listen for Ctrl-C"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(words: &[&str], all: bool, since: Option<&str>) -> LogsArgs {
        LogsArgs {
            words: words.iter().map(|w| (*w).to_owned()).collect(),
            all_namespaces: all,
            follow: false,
            level: Some("error".into()),
            since: since.map(str::to_owned),
        }
    }

    #[test]
    fn words_flags_and_durations_become_the_request() {
        let r = request(&args(&["ks", "apps"], false, Some("1h")), "team-a").unwrap();
        assert_eq!(
            (r.kind.as_str(), r.name.as_str(), r.namespace.as_str()),
            ("ks", "apps", "team-a")
        );
        assert_eq!((r.level.as_str(), r.since_seconds), ("error", 3600));
        let r = request(&args(&["source", "git"], true, None), "").unwrap();
        assert_eq!((r.kind.as_str(), r.name.as_str()), ("GitRepository", ""));
        let r = request(&args(&[], true, None), "").unwrap();
        assert_eq!((r.kind.as_str(), r.since_seconds), ("", 0));
    }

    #[test]
    fn bad_words_and_durations_are_usage_errors() {
        for bad in [
            args(&["ks", "apps"], true, None),
            args(&["ks"], false, Some("soon")),
            args(&["sources"], false, None),
            args(&["sources", "all"], false, None),
        ] {
            let err = request(&bad, "").unwrap_err();
            assert_eq!(Exit::of(&err), Exit::Usage, "{err:#}");
        }
    }

    #[test]
    fn a_line_reads_as_flux_logs_prints_it() {
        let line = LogLineView {
            time: "2026-12-07T01:02:03.456Z".into(),
            level: "error".into(),
            controller: "kustomize-controller".into(),
            kind: "Kustomization".into(),
            namespace: "apps".into(),
            name: "podinfo".into(),
            message: "Reconciliation failed: path not found".into(),
        };
        assert_eq!(
            render_line(&line, Style::PLAIN),
            "2026-12-07T01:02:03.456Z error Kustomization/podinfo.apps - Reconciliation failed: path not found\n"
        );
    }
}
