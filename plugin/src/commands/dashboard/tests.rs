use tenantflux_proto::v1 as pb;

use super::{
    ActionForm,
    live::{Key, Scope, Upgrades},
    pages::{self, Filter},
    requested,
};
use crate::views::{
    object::{ConditionView, ObjectView},
    status::StatusView,
};

/// A filter from its query, read as the page reads it.
fn from_query(query: &str) -> Filter {
    crate::web::read_query(query).expect("a filter's query reads")
}

fn kind(name: &str, revision_column: &str) -> pb::FluxKind {
    pb::FluxKind {
        kind: name.to_owned(),
        served: true,
        revision_column: revision_column.to_owned(),
        ..Default::default()
    }
}

fn object(kind: &str, namespace: &str, name: &str, ready: &str, message: &str) -> ObjectView {
    ObjectView {
        kind: kind.to_owned(),
        api_version: "kustomize.toolkit.fluxcd.io/v1".to_owned(),
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        revision: "main@sha1:0123abcd".to_owned(),
        suspended: false,
        ready: Some(ConditionView {
            status: crate::state::parse_condition(ready),
            reason: String::new(),
            message: message.to_owned(),
        }),
        labels: Default::default(),
        generation: 1,
        observed_generation: 1,
        last_handled_reconcile_at: String::new(),
        source: None,
    }
}

fn key(o: &ObjectView) -> Key {
    Key {
        order: 0,
        kind: o.kind.clone(),
        namespace: o.namespace.clone(),
        name: o.name.clone(),
    }
}

#[test]
fn a_filter_survives_its_query_and_selects_what_it_says() {
    let filter = from_query("namespace=apps&kind=Kustomization&not_ready=1");
    assert_eq!(from_query(&filter.query()), filter);
    assert!(filter.passes(&object("Kustomization", "apps", "a", "False", "")));
    assert!(filter.passes(&object("Kustomization", "apps", "a", "Unknown", "")));
    assert!(!filter.passes(&object("Kustomization", "apps", "a", "True", "")));
    assert!(!filter.passes(&object("Kustomization", "other", "a", "False", "")));
    assert!(!filter.passes(&object("HelmRelease", "apps", "a", "False", "")));
    assert!(Filter::default().passes(&object("HelmRelease", "x", "y", "True", "")));
    assert_eq!(from_query("not_ready=false"), Filter::default());
    // What the page does not write is ignored, as before: an unknown field, an empty one, any
    // value of the checkbox but `false`.
    assert_eq!(
        from_query("since=abc&kind=&bogus=1&not_ready=maybe"),
        Filter {
            not_ready: true,
            ..Filter::default()
        }
    );
}

#[test]
fn messages_from_the_cluster_are_escaped_not_run() {
    let hostile = object(
        "Kustomization",
        "apps",
        "web",
        "False",
        "<img src=x onerror=alert(1)><script>alert(2)</script>",
    );
    let html =
        pages::row(&key(&hostile), &kind("Kustomization", "REVISION"), &hostile).into_string();
    assert!(!html.contains("<img"), "{html}");
    assert!(!html.contains("<script"), "{html}");
    assert!(
        html.contains("&lt;img src=x onerror=alert(1)&gt;"),
        "{html}"
    );
    assert!(
        html.contains(r#"data-key="Kustomization/apps/web""#),
        "{html}"
    );
    assert!(html.contains("main@sha1:0123abcd"), "{html}");
}

#[test]
fn the_index_groups_by_kind_and_hides_empty_kinds() {
    let objects: Vec<(Key, ObjectView)> = [
        object("Kustomization", "apps", "web", "True", ""),
        object("Kustomization", "apps", "db", "False", "broken"),
    ]
    .into_iter()
    .map(|o| (key(&o), o))
    .collect();
    let kinds = [
        kind("GitRepository", "REVISION"),
        kind("Kustomization", "REVISION"),
    ];
    let scope = Scope {
        namespace: String::new(),
        notice: None,
    };
    let html = pages::index(
        "Flux",
        &scope,
        &kinds,
        &objects,
        &from_query("not_ready=1"),
        7,
        maud::html! {},
    )
    .into_string();
    assert!(
        html.contains(r#"<section id="kind-GitRepository" hidden>"#),
        "{html}"
    );
    assert!(
        html.contains(r#"<section id="kind-Kustomization">"#),
        "{html}"
    );
    assert!(html.contains("Kustomization/apps/db"));
    assert!(
        !html.contains("Kustomization/apps/web"),
        "ready ones are filtered out"
    );
    assert!(html.contains("1 of 2 objects"));
    assert!(
        html.contains(r#"data-live="/live?not_ready=1&amp;since=7""#),
        "the stream keeps the filter and knows what the page holds: {html}"
    );
    assert!(!html.contains("<script>"), "no inline script");
}

#[test]
fn read_only_kinds_offer_no_actions_and_suspended_ones_offer_resume() {
    let report = object("FluxReport", "flux-system", "flux", "True", "");
    assert!(pages::actions(&kind("FluxReport", ""), &report).is_empty());
    let mut ks = object("Kustomization", "apps", "web", "True", "");
    assert_eq!(
        pages::actions(&kind("Kustomization", "R"), &ks),
        ["suspend", "reconcile"]
    );
    ks.suspended = true;
    assert_eq!(
        pages::actions(&kind("Kustomization", "R"), &ks),
        ["resume", "reconcile"]
    );
}

#[test]
fn the_confirmation_posts_the_action_with_the_sessions_token_and_takes_no_focus() {
    let object = pb::ObjectRef {
        kind: "Kustomization".to_owned(),
        namespace: "apps".to_owned(),
        name: "web".to_owned(),
    };
    let html = pages::confirm("suspend", &object, "c5rf").into_string();
    assert!(
        html.contains(r#"<form method="post" action="/action">"#),
        "{html}"
    );
    assert!(html.contains(r#"name="csrf" value="c5rf""#), "{html}");
    assert!(html.contains("Suspend Kustomization apps/web"), "{html}");
    // A page that opened this one cannot have it submitted by a key the user presses there.
    assert!(!html.contains("autofocus"), "{html}");
}

#[test]
fn only_the_three_actions_on_a_named_object_are_accepted() {
    let form = |query: &str| -> ActionForm { crate::web::read_query(query).expect("a form") };
    let ok = requested(form("action=resume&kind=ks&name=a&csrf=ignored"));
    assert_eq!(
        ok.map(|(a, o)| (a, o.name)),
        Ok(("resume".to_owned(), "a".to_owned()))
    );
    let delete = requested(form("action=delete&kind=ks&name=a"));
    assert!(delete.unwrap_err().contains("unknown action \"delete\""));
    // What the form says is echoed quoted: escaped, and cut short when long.
    let long = format!("action=x%0A{}&kind=ks&name=a", "y".repeat(4096));
    let echoed = requested(form(&long)).unwrap_err();
    assert!(echoed.starts_with("unknown action \"x\\nyyy"), "{echoed}");
    assert!(echoed.len() < 1024, "{} bytes echoed", echoed.len());
    assert_eq!(
        requested(form("action=suspend")).unwrap_err(),
        "the form names no object (kind and name)"
    );
    assert_eq!(
        requested(form("")).unwrap_err(),
        "unknown action \"\": suspend, resume or reconcile"
    );
}

#[test]
fn a_policy_the_api_server_does_not_enforce_is_shown_as_not_enforced() {
    let status = StatusView::from(pb::Status {
        policy: Some(pb::PolicyStatus {
            generation: 3,
            name: "tenants".to_owned(),
            compliant: true,
            enforcement: Some(pb::Enforcement {
                enforced: false,
                reason: "the ValidatingAdmissionPolicyBinding was deleted".to_owned(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    });
    let html = pages::cluster(&Ok(Some(status)), &Upgrades::default(), None).into_string();
    assert!(html.contains("NOT ENFORCED"), "{html}");
    assert!(
        html.contains("the ValidatingAdmissionPolicyBinding was deleted"),
        "{html}"
    );
    assert!(html.contains(r#"class="card bad""#), "{html}");
}

#[test]
fn the_next_upgrade_is_shown_up_to_date_available_or_blocked_with_why() {
    let status = || Ok(Some(StatusView::from(pb::Status::default())));
    let plan = |warnings: Vec<pb::Finding>, blockers: Vec<pb::Finding>| Upgrades {
        running: None,
        next: Some(Ok(pb::UpgradePlan {
            target: "2.9.5".to_owned(),
            written_version: "2.9.x".to_owned(),
            current_version: "2.8.8".to_owned(),
            blocked: !blockers.is_empty(),
            blockers,
            warnings,
            removed_api_uses: vec![pb::RemovedApiUse::default(); 2],
            hidden_removed_api_uses: 1,
            ..Default::default()
        })),
    };
    let finding = |code: &str, message: &str| pb::Finding {
        code: code.to_owned(),
        message: message.to_owned(),
    };

    let html = pages::cluster(&status(), &plan(vec![], vec![]), None).into_string();
    assert!(html.contains(">available<"), "{html}");
    assert!(html.contains("Flux 2.9.5"), "{html}");
    assert!(html.contains("3 object(s) use one"), "{html}");
    assert!(html.contains("upgrade apply --to 2.9.x"), "{html}");
    assert!(
        !html.contains("migrates"),
        "nothing to migrate, not shown: {html}"
    );

    let same = finding("same-version", "Flux 2.9.5 is already installed");
    let html = pages::cluster(&status(), &plan(vec![same], vec![]), None).into_string();
    assert!(html.contains(">up to date<"), "{html}");
    assert!(!html.contains("already installed"), "{html}");
    assert!(!html.contains("upgrade apply"), "{html}");

    let blocker = finding("kubernetes", "Flux 2.9 needs Kubernetes 1.33 or later");
    let html = pages::cluster(&status(), &plan(vec![], vec![blocker]), None).into_string();
    assert!(html.contains(">blocked<"), "{html}");
    assert!(html.contains("needs Kubernetes 1.33"), "{html}");
    assert!(!html.contains("upgrade apply"), "{html}");

    let refused = Upgrades {
        running: None,
        next: Some(Err("may not get fluxinstances".to_owned())),
    };
    let html = pages::cluster(&status(), &refused, None).into_string();
    assert!(
        html.contains("Cannot plan: may not get fluxinstances"),
        "{html}"
    );
}
