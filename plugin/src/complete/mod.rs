//! Shell completion. `kubectl tenantflux completion SHELL` prints a clap_complete script for
//! the `kubectl-tenantflux` binary; `kubectl tenantflux <TAB>` goes through kubectl, which runs
//! `kubectl_complete-tenantflux` and expects cobra's protocol: one candidate a line
//! (`value<TAB>description`), then `:<directive>`.
//!
//! Commands, flags and fixed flag values come from the clap definition, so commands added to
//! the command tree complete without changes here. Values only the kubeconfig or the cluster
//! knows are a [`Source`], looked up when the word is completed; a command whose arguments
//! name objects the agent knows adds a variant there and its lookup in [`lookup`].

mod lookup;
#[cfg(test)]
mod tests;

use std::io;

use clap::{Arg, ArgAction, Command, ValueHint};
use clap_complete::Shell;

pub use self::lookup::{LookupError, lookup};
use self::lookup::{connect_options, run_lookup};
use crate::grammar;

/// Writes the completion script of `shell` for the `kubectl-tenantflux` binary whose command
/// tree is `root`.
pub fn print_script(mut root: Command, shell: Shell, out: &mut dyn io::Write) -> io::Result<()> {
    // clap_complete panics when its writer fails; a closed pipe (`completion bash | head -1`)
    // must end quietly instead, so the script is written from memory.
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut root, "kubectl-tenantflux", &mut script);
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
    let Words {
        cmd,
        pending,
        positionals,
        only_positionals,
        used,
        given,
        positional_words,
    } = read_words(cmd, words);
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
            [] => Some(grammar::first_words(verb)),
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

/// What the words before the one being completed said: the (sub)command they reached, a flag
/// still waiting for its value, the flags used and the values given.
struct Words {
    cmd: Command,
    pending: Option<Arg>,
    positionals: usize,
    only_positionals: bool,
    used: Vec<String>,
    given: Vec<(String, String)>,
    positional_words: Vec<String>,
}

/// Reads `words` as clap would, from `cmd`.
fn read_words(mut cmd: Command, words: &[String]) -> Words {
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
    Words {
        cmd,
        pending,
        positionals,
        only_positionals,
        used,
        given,
        positional_words,
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

/// Completes the last of `args` on the command tree `root` and answers in cobra's protocol.
pub fn cobra(root: &Command, args: &[String]) -> String {
    let (candidates, directive) = match plan(root, args) {
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
