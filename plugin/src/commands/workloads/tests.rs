use std::collections::BTreeMap;

use super::{args::parse_status_selector, view::*, *};
use crate::{
    output::Style,
    views::object::{ConditionView, ObjectView},
};

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
            status: crate::state::parse_condition(status),
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
        status: pb::ConditionStatus::False,
        reason: String::new(),
        message: "x".into(),
    });
    assert_eq!(settled(&o, "t1"), Some(false));
    o.ready = Some(ConditionView {
        status: pb::ConditionStatus::Unknown,
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

#[test]
fn suspend_and_resume_take_one_object_or_all_of_one_kind() {
    let args = |words: &[&str], all: bool| ControlArgs {
        words: words.iter().map(|w| w.to_string()).collect(),
        all,
        all_namespaces: false,
    };
    assert_eq!(
        args(&["ks", "apps"], false).control().unwrap(),
        Control::One {
            kind: "ks".into(),
            name: "apps".into()
        }
    );
    assert_eq!(
        args(&["ks"], true).control().unwrap(),
        Control::All {
            kind: "ks".into(),
            all_namespaces: false
        }
    );
    for (words, all, says) in [
        (&["ks"][..], false, "or --all"),
        (&["source", "git"][..], false, "or --all"),
        (&["all"][..], true, "one kind at a time"),
        (&["sources", "all"][..], true, "one kind at a time"),
        (&["ks", "apps"][..], true, "drop the name"),
    ] {
        let err = args(words, all).control().unwrap_err();
        assert_eq!(Exit::of(&err), Exit::Usage, "{words:?}: {err:#}");
        assert!(format!("{err:#}").contains(says), "{words:?}: {err:#}");
    }
    // A kind that does not take a name at all is the grammar's own error, not a usage one.
    let err = args(&["source", "svn", "x"], false).control().unwrap_err();
    assert_eq!(Exit::of(&err), Exit::Failure, "{err:#}");
}
