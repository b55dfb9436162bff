//! Shell completion. `kubectl tenantflux completion SHELL` prints a clap_complete script for
//! the `kubectl-tenantflux` binary; `kubectl tenantflux <TAB>` goes through kubectl, which runs
//! `kubectl_complete-tenantflux` and expects cobra's protocol: one candidate a line
//! (`value<TAB>description`), then `:<directive>`.
//!
//! Commands, flags and fixed flag values come from the clap definition, so commands added to
//! [`crate::cli`] complete without changes here. Values only the kubeconfig or the cluster
//! knows are a [`Source`], looked up when the word is completed; a command whose arguments
//! name objects the agent knows adds a variant there and its lookup in [`lookup`].

use std::{io, time::Duration};

use clap::{Arg, ArgAction, Command, CommandFactory as _, Parser, ValueHint};
use clap_complete::Shell;
use k8s_openapi::api::core::v1::Namespace;
use kube::{Api, api::ListParams, config::Kubeconfig};

use crate::{
    cli::{Cli, GlobalArgs},
    connect::{ConnectOptions, kube_client, read_kubeconfigs},
    grammar,
};

/// The longest a lookup may keep a shell prompt waiting.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(5);

/// Writes the completion script of `shell` for the `kubectl-tenantflux` binary.
pub fn print_script(shell: Shell, out: &mut dyn io::Write) -> io::Result<()> {
    // clap_complete panics when its writer fails; a closed pipe (`completion bash | head -1`)
    // must end quietly instead, so the script is written from memory.
    let mut script = Vec::new();
    clap_complete::generate(
        shell,
        &mut Cli::command(),
        "kubectl-tenantflux",
        &mut script,
    );
    out.write_all(&script)?;
    out.flush()
}

/// cobra's ShellCompDirective bits (kubectl reads them from the last line).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Directive(u32);

impl Directive {
    /// Completion failed: the shell offers nothing.
    pub const ERROR: Self = Self(1);
    /// The shell completes file names.
    pub const FILES: Self = Self(0);
    /// No file names either when no candidate matches.
    pub const NO_FILE_COMP: Self = Self(4);
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    pub value: String,
    pub help: Option<String>,
}

impl Candidate {
    fn new(value: impl Into<String>, help: Option<String>) -> Self {
        Self {
            value: value.into(),
            help,
        }
    }
}

/// Values that only the kubeconfig or the cluster knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// Context names of the kubeconfig.
    Contexts,
    /// Namespaces the API server lists.
    Namespaces,
}

/// Which flags or arguments take values from a [`Source`], by clap argument id.
fn source_of(arg: &Arg) -> Option<Source> {
    match arg.get_id().as_str() {
        "context" => Some(Source::Contexts),
        "namespace" | "agent_namespace" => Some(Source::Namespaces),
        _ => None,
    }
}

/// What completing a word needs, decided from the words alone.
#[derive(Debug, PartialEq, Eq)]
pub enum Plan {
    Done(Vec<Candidate>, Directive),
    Lookup {
        source: Source,
        /// Put before each value, e.g. `--context=`.
        prefix: String,
        /// What the user typed of the value.
        typed: String,
        /// The flags given before the word, as `--long` and value, for the lookup's connection.
        given: Vec<(String, String)>,
    },
}

/// Plans the completion of the last of `args` (the words after `kubectl tenantflux`).
pub fn plan(root: &Command, args: &[String]) -> Plan {
    let mut cmd = root.clone();
    // Propagates global flags to the subcommands and adds --help/--version.
    cmd.build();
    let (current, words) = match args.split_last() {
        Some((current, words)) => (current.as_str(), words),
        None => ("", &[][..]),
    };
    let mut pending: Option<Arg> = None;
    let mut positionals = 0;
    let mut only_positionals = false;
    let mut used: Vec<String> = Vec::new();
    let mut given: Vec<(String, String)> = Vec::new();
    let mut positional_words: Vec<String> = Vec::new();
    for word in words {
        if let Some(arg) = pending.take() {
            remember(&arg, word, &mut given);
            continue;
        }
        if only_positionals || word == "-" || !word.starts_with('-') {
            if !only_positionals
                && positionals == 0
                && let Some(sub) = cmd.find_subcommand(word)
            {
                cmd = sub.clone();
                continue;
            }
            positionals += 1;
            positional_words.push(word.clone());
            continue;
        }
        if word == "--" {
            only_positionals = true;
        } else if let Some(long) = word.strip_prefix("--") {
            let (name, value) = match long.split_once('=') {
                Some((name, value)) => (name, Some(value)),
                None => (long, None),
            };
            if let Some(arg) = cmd.get_arguments().find(|a| a.get_long() == Some(name)) {
                used.push(arg.get_id().to_string());
                match value {
                    Some(value) => remember(arg, value, &mut given),
                    None if arg.get_action().takes_values() => pending = Some(arg.clone()),
                    None => {}
                }
            }
        } else {
            // A cluster of short flags; the first one that takes a value takes the rest of
            // the word, or the next word.
            let shorts = &word[1..];
            for (i, c) in shorts.char_indices() {
                let Some(arg) = cmd.get_arguments().find(|a| a.get_short() == Some(c)) else {
                    break;
                };
                used.push(arg.get_id().to_string());
                if arg.get_action().takes_values() {
                    let rest = &shorts[i + c.len_utf8()..];
                    if rest.is_empty() {
                        pending = Some(arg.clone());
                    } else {
                        remember(arg, rest.trim_start_matches('='), &mut given);
                    }
                    break;
                }
            }
        }
    }

    if let Some(arg) = pending {
        return values(&arg, "", current, given);
    }
    if !only_positionals {
        if let Some((name, typed)) = current
            .strip_prefix("--")
            .and_then(|long| long.split_once('='))
        {
            return match cmd.get_arguments().find(|a| a.get_long() == Some(name)) {
                Some(arg) => values(arg, &format!("--{name}="), typed, given),
                None => Plan::Done(Vec::new(), Directive::NO_FILE_COMP),
            };
        }
        if current.starts_with('-') {
            return Plan::Done(flags(&cmd, current, &used), Directive::NO_FILE_COMP);
        }
    }
    if positionals == 0 && cmd.has_subcommands() {
        let candidates = cmd
            .get_subcommands()
            .filter(|sub| !sub.is_hide_set() && sub.get_name().starts_with(current))
            .map(|sub| Candidate::new(sub.get_name(), sub.get_about().map(|a| a.to_string())))
            .collect();
        return Plan::Done(candidates, Directive::NO_FILE_COMP);
    }
    if let Some(verb) = grammar::verb_of(cmd.get_name()) {
        // Both habits: kubectl's kinds and flux's words (`sources` then `git`, …).
        let offered = match positional_words.as_slice() {
            [] => Some(grammar::first_words(verb).to_vec()),
            previous => grammar::next_words(verb, previous),
        };
        let candidates = offered
            .unwrap_or_default()
            .into_iter()
            .filter(|w| w.starts_with(current))
            .map(|w| Candidate::new(w, None))
            .collect();
        return Plan::Done(candidates, Directive::NO_FILE_COMP);
    }
    let positional = cmd.get_positionals().nth(positionals).or_else(|| {
        cmd.get_positionals()
            .last()
            .filter(|a| matches!(a.get_action(), ArgAction::Append))
    });
    match positional {
        Some(arg) => values(arg, "", current, given),
        None => Plan::Done(Vec::new(), Directive::NO_FILE_COMP),
    }
}

fn remember(arg: &Arg, value: &str, given: &mut Vec<(String, String)>) {
    if let Some(long) = arg.get_long() {
        given.push((format!("--{long}"), value.to_owned()));
    }
}

/// The flags of `cmd` starting with `typed`, without those already given once.
fn flags(cmd: &Command, typed: &str, used: &[String]) -> Vec<Candidate> {
    let mut candidates = Vec::new();
    for arg in cmd.get_arguments() {
        let repeatable = matches!(arg.get_action(), ArgAction::Append | ArgAction::Count);
        if arg.is_hide_set()
            || arg.is_positional()
            || (!repeatable && used.iter().any(|u| u == arg.get_id().as_str()))
        {
            continue;
        }
        let help = arg.get_help().map(|h| h.to_string());
        let long = arg.get_long().map(|l| format!("--{l}"));
        // Short forms only while the user has typed no more than one dash.
        let short = arg
            .get_short()
            .filter(|_| !typed.starts_with("--"))
            .map(|s| format!("-{s}"));
        for flag in long.into_iter().chain(short) {
            if flag.starts_with(typed) {
                candidates.push(Candidate::new(flag, help.clone()));
            }
        }
    }
    candidates
}

/// The values `arg` takes that start with `typed`, each after `prefix`.
fn values(arg: &Arg, prefix: &str, typed: &str, given: Vec<(String, String)>) -> Plan {
    let possible = arg.get_possible_values();
    if !possible.is_empty() {
        let candidates = possible
            .iter()
            .filter(|v| !v.is_hide_set() && v.get_name().starts_with(typed))
            .map(|v| {
                Candidate::new(
                    format!("{prefix}{}", v.get_name()),
                    v.get_help().map(|h| h.to_string()),
                )
            })
            .collect();
        return Plan::Done(candidates, Directive::NO_FILE_COMP);
    }
    if let Some(source) = source_of(arg) {
        return Plan::Lookup {
            source,
            prefix: prefix.to_owned(),
            typed: typed.to_owned(),
            given,
        };
    }
    match arg.get_value_hint() {
        ValueHint::AnyPath | ValueHint::FilePath | ValueHint::DirPath => {
            Plan::Done(Vec::new(), Directive::FILES)
        }
        _ => Plan::Done(Vec::new(), Directive::NO_FILE_COMP),
    }
}

/// The global flags as the commands would see them, env twins included.
#[derive(Parser)]
struct Globals {
    #[command(flatten)]
    global: GlobalArgs,
}

/// Connection options from the flags given on the command line (those that do not parse, as
/// a half-typed line may have, are left out).
fn connect_options(given: &[(String, String)]) -> ConnectOptions {
    let parse = |flags: &[&(String, String)]| {
        Globals::try_parse_from(
            std::iter::once("kubectl-tenantflux".to_owned())
                .chain(flags.iter().flat_map(|(k, v)| [k.clone(), v.clone()])),
        )
    };
    let all: Vec<_> = given.iter().collect();
    let globals = parse(&all).or_else(|_| {
        let valid: Vec<_> = given.iter().filter(|f| parse(&[f]).is_ok()).collect();
        parse(&valid)
    });
    let globals = globals.unwrap_or_else(|_| Globals::parse_from(["kubectl-tenantflux"]));
    ConnectOptions::from(&globals.global)
}

#[derive(Debug, thiserror::Error)]
pub enum LookupError {
    #[error("reading the kubeconfig: {0}")]
    Kubeconfig(String),
    #[error("connecting to the cluster: {0}")]
    Connect(#[from] crate::connect::ConnectError),
    #[error("listing namespaces: {0}")]
    List(#[from] kube::Error),
    #[error("no answer within {LOOKUP_TIMEOUT:?}")]
    TimedOut,
    #[error("starting the async runtime: {0}")]
    Runtime(io::Error),
}

/// The names `source` offers (unfiltered).
pub async fn lookup(source: Source, options: &ConnectOptions) -> Result<Vec<String>, LookupError> {
    let options = ConnectOptions {
        timeout: Some(
            options
                .timeout
                .unwrap_or(LOOKUP_TIMEOUT)
                .min(LOOKUP_TIMEOUT),
        ),
        ..options.clone()
    };
    let names = async {
        match source {
            Source::Contexts => {
                let kubeconfig = match options.kubeconfig.as_ref().filter(|p| !p.is_empty()) {
                    Some(paths) => read_kubeconfigs(paths)?,
                    None => Kubeconfig::read()
                        .map_err(|err| LookupError::Kubeconfig(err.to_string()))?,
                };
                Ok(kubeconfig.contexts.into_iter().map(|c| c.name).collect())
            }
            Source::Namespaces => {
                let (client, ..) = kube_client(&options).await?;
                let list = Api::<Namespace>::all(client)
                    .list_metadata(&ListParams::default())
                    .await?;
                Ok(list
                    .items
                    .into_iter()
                    .filter_map(|ns| ns.metadata.name)
                    .collect())
            }
        }
    };
    tokio::time::timeout(LOOKUP_TIMEOUT, names)
        .await
        .map_err(|_| LookupError::TimedOut)?
}

/// Completes the last of `args` and answers in cobra's protocol.
pub fn cobra(args: &[String]) -> String {
    let (candidates, directive) = match plan(&Cli::command(), args) {
        Plan::Done(candidates, directive) => (candidates, directive),
        Plan::Lookup {
            source,
            prefix,
            typed,
            given,
        } => match run_lookup(source, &connect_options(&given)) {
            Ok(names) => (
                names
                    .into_iter()
                    .filter(|n| n.starts_with(&typed))
                    .map(|n| Candidate::new(format!("{prefix}{n}"), None))
                    .collect(),
                Directive::NO_FILE_COMP,
            ),
            Err(_) => (Vec::new(), Directive::ERROR),
        },
    };
    render(&candidates, directive)
}

fn run_lookup(source: Source, options: &ConnectOptions) -> Result<Vec<String>, LookupError> {
    // Several crates enable rustls; naming the provider avoids an ambiguous process default.
    let _ = rustls::crypto::ring::default_provider().install_default();
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(LookupError::Runtime)?
        .block_on(lookup(source, options))
}

/// cobra's output: `value<TAB>first line of help` per candidate, then `:<directive>`.
pub fn render(candidates: &[Candidate], directive: Directive) -> String {
    let mut out = String::new();
    for candidate in candidates {
        out.push_str(&candidate.value);
        if let Some(help) = candidate
            .help
            .as_deref()
            .and_then(|h| h.lines().next())
            .filter(|h| !h.is_empty())
        {
            out.push('\t');
            out.push_str(help);
        }
        out.push('\n');
    }
    out.push_str(&format!(":{}\n", directive.0));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan_of(args: &[&str]) -> Plan {
        let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        plan(&Cli::command(), &args)
    }

    fn values_of(args: &[&str]) -> (Vec<String>, Directive) {
        match plan_of(args) {
            Plan::Done(candidates, directive) => {
                (candidates.into_iter().map(|c| c.value).collect(), directive)
            }
            lookup => panic!("{args:?} needs a lookup: {lookup:?}"),
        }
    }

    #[test]
    fn kinds_complete_in_kubectls_and_fluxs_words() {
        let (first, directive) = values_of(&["get", ""]);
        for word in ["all", "sources", "images", "ks", "rset", "kustomizations"] {
            assert!(first.iter().any(|w| w == word), "{word} in {first:?}");
        }
        assert_eq!(directive, Directive::NO_FILE_COMP);
        assert_eq!(values_of(&["get", "so"]).0, ["sources"]);
        assert_eq!(
            values_of(&["get", "-n", "a", "sources", ""]).0,
            ["git", "oci", "helm", "chart", "bucket", "external", "all"]
        );
        assert_eq!(
            values_of(&["reconcile", "source", ""]).0,
            ["git", "oci", "helm", "chart", "bucket"]
        );
        assert_eq!(
            values_of(&["suspend", "im"]).0,
            ["image", "imagerepo", "imagepolicy", "imageupdate"]
        );
        assert!(values_of(&["reconcile", "ks", ""]).0.is_empty());
    }

    #[test]
    fn the_first_word_completes_to_the_commands() {
        let (names, directive) = values_of(&[""]);
        for command in ["status", "version", "completion", "help"] {
            assert!(names.iter().any(|n| n == command), "{command} in {names:?}");
        }
        assert_eq!(directive, Directive::NO_FILE_COMP);
        assert_eq!(values_of(&["st"]).0, ["status"]);
        // Global flags before the command do not hide the commands.
        assert_eq!(
            values_of(&["-o", "json", "--context", "a", "ver"]).0,
            ["version"]
        );
    }

    #[test]
    fn a_dash_completes_to_the_commands_flags_and_the_global_ones() {
        let (flags, _) = values_of(&["status", "-"]);
        for flag in [
            "--watch",
            "-w",
            "--output",
            "-o",
            "--kubeconfig",
            "--context",
            "--help",
        ] {
            assert!(flags.iter().any(|f| f == flag), "{flag} in {flags:?}");
        }
        let (long, _) = values_of(&["status", "--w"]);
        assert_eq!(long, ["--watch"]);
        let (version_flags, _) = values_of(&["version", "--c"]);
        assert_eq!(version_flags, ["--client", "--context", "--color"]);
    }

    #[test]
    fn flags_given_once_are_not_offered_again() {
        let (flags, _) = values_of(&["status", "--watch", "-o", "json", "--"]);
        assert!(
            !flags.iter().any(|f| f == "--watch" || f == "--output"),
            "{flags:?}"
        );
        let (flags, _) = values_of(&["status", "-wojson", "-"]);
        assert!(!flags.iter().any(|f| f == "-w" || f == "-o"), "{flags:?}");
    }

    #[test]
    fn fixed_flag_values_complete_in_every_spelling() {
        assert_eq!(
            values_of(&["status", "-o", ""]).0,
            ["table", "json", "yaml"]
        );
        assert_eq!(values_of(&["-o", "y"]).0, ["yaml"]);
        assert_eq!(values_of(&["status", "--output", "j"]).0, ["json"]);
        assert_eq!(values_of(&["status", "--output=t"]).0, ["--output=table"]);
        assert_eq!(
            values_of(&["version", "--color", ""]).0,
            ["auto", "always", "never"]
        );
        let (shells, directive) = values_of(&["completion", ""]);
        assert_eq!(shells, ["bash", "elvish", "fish", "powershell", "zsh"]);
        assert_eq!(directive, Directive::NO_FILE_COMP);
    }

    #[test]
    fn paths_complete_as_files_and_free_text_as_nothing() {
        assert_eq!(
            values_of(&["status", "--kubeconfig", ""]),
            (vec![], Directive::FILES)
        );
        assert_eq!(
            values_of(&["--token", ""]),
            (vec![], Directive::NO_FILE_COMP)
        );
        // status takes no arguments, and a finished command line offers nothing more.
        assert_eq!(
            values_of(&["status", ""]),
            (vec![], Directive::NO_FILE_COMP)
        );
        assert_eq!(
            values_of(&["completion", "bash", ""]),
            (vec![], Directive::NO_FILE_COMP)
        );
    }

    #[test]
    fn contexts_and_namespaces_are_looked_up_with_the_flags_given() {
        assert_eq!(
            plan_of(&["--kubeconfig", "/tmp/k.yaml", "status", "--context", "te"]),
            Plan::Lookup {
                source: Source::Contexts,
                prefix: String::new(),
                typed: "te".into(),
                given: vec![("--kubeconfig".into(), "/tmp/k.yaml".into())],
            }
        );
        assert_eq!(
            plan_of(&["--context=tenant-a", "status", "--agent-namespace="]),
            Plan::Lookup {
                source: Source::Namespaces,
                prefix: "--agent-namespace=".into(),
                typed: String::new(),
                given: vec![("--context".into(), "tenant-a".into())],
            }
        );
        assert!(matches!(
            plan_of(&["status", "-n", ""]),
            Plan::Lookup {
                source: Source::Namespaces,
                ..
            }
        ));
    }

    #[test]
    fn lookups_connect_with_the_given_flags_and_skip_the_broken_ones() {
        let options = connect_options(&[
            ("--kubeconfig".into(), "/tmp/k.yaml".into()),
            ("--context".into(), "tenant-a".into()),
            ("--request-timeout".into(), "soon".into()),
        ]);
        assert_eq!(options.kubeconfig.as_deref(), Some("/tmp/k.yaml".as_ref()));
        assert_eq!(options.context.as_deref(), Some("tenant-a"));
    }

    #[test]
    fn renders_cobras_protocol() {
        let out = render(
            &[
                Candidate::new("status", Some("Show it.\nMore text.".into())),
                Candidate::new("json", None),
            ],
            Directive::NO_FILE_COMP,
        );
        assert_eq!(out, "status\tShow it.\njson\n:4\n");
        assert_eq!(render(&[], Directive::ERROR), ":1\n");
    }

    #[test]
    fn scripts_are_for_the_plugin_binary() {
        for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
            let mut script = Vec::new();
            print_script(shell, &mut script).unwrap();
            let script = String::from_utf8(script).expect("utf-8 script");
            assert!(script.contains("kubectl-tenantflux"), "{shell}");
            assert!(script.contains("status"), "{shell}");
        }
    }

    /// What `kubectl-tenantflux completion bash | head -1` gives the plugin once `head` exits.
    struct ClosedPipe;

    impl io::Write for ClosedPipe {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::ErrorKind::BrokenPipe.into())
        }

        fn flush(&mut self) -> io::Result<()> {
            Err(io::ErrorKind::BrokenPipe.into())
        }
    }

    #[test]
    fn a_closed_pipe_is_an_error_main_ends_quietly_on_not_a_panic() {
        let err = print_script(Shell::Bash, &mut ClosedPipe).unwrap_err();
        assert!(crate::output::is_broken_pipe(&anyhow::Error::from(err)));
    }
}
