//! Completion on the plugin's real command tree.

use std::io;

use clap::CommandFactory as _;
use clap_complete::Shell;

use super::{lookup::connect_options, *};
// The tests complete the plugin's real command tree, which only the dispatcher holds.
use crate::cli::Cli;

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
        ["oci", "bucket", "git", "helm", "chart", "external", "all"]
    );
    assert_eq!(
        values_of(&["reconcile", "source", ""]).0,
        ["oci", "bucket", "git", "helm", "chart"]
    );
    assert_eq!(
        values_of(&["suspend", "im"]).0,
        ["image", "imagerepo", "imagepolicy", "imageupdate"]
    );
    assert!(values_of(&["reconcile", "ks", ""]).0.is_empty());
    // events and tree name one object as suspend does.
    assert_eq!(
        values_of(&["events", "source", ""]).0,
        ["oci", "bucket", "git", "helm", "chart"]
    );
    assert!(values_of(&["tree", "k"]).0.iter().any(|w| w == "ks"));
}

#[test]
fn the_first_word_completes_to_the_commands() {
    let (names, directive) = values_of(&[""]);
    for command in [
        "status",
        "version",
        "completion",
        "help",
        "events",
        "tree",
        "trace",
        "stats",
    ] {
        assert!(names.iter().any(|n| n == command), "{command} in {names:?}");
    }
    assert_eq!(directive, Directive::NO_FILE_COMP);
    assert_eq!(values_of(&["st"]).0, ["status", "stats"]);
    assert_eq!(values_of(&["tr"]).0, ["tree", "trace"]);
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
        print_script(Cli::command(), shell, &mut script).unwrap();
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
    let err = print_script(Cli::command(), Shell::Bash, &mut ClosedPipe).unwrap_err();
    assert!(crate::output::is_broken_pipe(&anyhow::Error::from(err)));
}
