//! The tenant dashboard's pages, rendered from [`Live`] and the agent's answers: pure
//! functions from data to HTML, so they are tested without a server.

use maud::{Markup, html};
use tenantflux_proto::v1 as pb;

use super::live::{Key, NEXT_UPGRADE, Scope, Upgrades};
use crate::{
    state::{self, State as _},
    views::{object::ObjectView, status::StatusView},
    web::page::{Tone, badge, encode, facts, layout},
};

/// The list's filters, from the page's query (a GET form, so a filtered page is a link).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(from = "FilterQuery")]
pub struct Filter {
    /// Empty: every namespace.
    pub namespace: String,
    /// Empty: every kind.
    pub kind: String,
    pub not_ready: bool,
    /// Only the object of this name (an object's page).
    pub name: String,
}

/// The filter's query as written: every field may be left out, and the checkbox is on for any
/// value but none and `false`.
#[derive(Default, serde::Deserialize)]
#[serde(default)]
struct FilterQuery {
    namespace: String,
    kind: String,
    not_ready: String,
    name: String,
}

impl From<FilterQuery> for Filter {
    fn from(query: FilterQuery) -> Self {
        Self {
            namespace: query.namespace,
            kind: query.kind,
            not_ready: !query.not_ready.is_empty() && query.not_ready != "false",
            name: query.name,
        }
    }
}

impl Filter {
    pub fn passes(&self, object: &ObjectView) -> bool {
        (self.namespace.is_empty() || object.namespace == self.namespace)
            && (self.kind.is_empty() || object.kind == self.kind)
            && (self.name.is_empty() || object.name == self.name)
            && (!self.not_ready || object.ready_status() != pb::ConditionStatus::True)
    }

    /// The query that gives this filter back.
    pub fn query(&self) -> String {
        let mut pairs = Vec::new();
        if !self.namespace.is_empty() {
            pairs.push(format!("namespace={}", encode(&self.namespace)));
        }
        if !self.kind.is_empty() {
            pairs.push(format!("kind={}", encode(&self.kind)));
        }
        if self.not_ready {
            pairs.push("not_ready=1".to_owned());
        }
        if !self.name.is_empty() {
            pairs.push(format!("name={}", encode(&self.name)));
        }
        pairs.join("&")
    }
}

/// The path of an object's page.
pub fn object_path(kind: &str, namespace: &str, name: &str) -> String {
    format!(
        "/object/{}/{}/{}",
        encode(kind),
        encode(namespace),
        encode(name)
    )
}

/// Which actions an object offers; read-only kinds offer none.
pub fn actions(kind: &pb::FluxKind, object: &ObjectView) -> Vec<&'static str> {
    if matches!(kind.kind.as_str(), "ExternalArtifact" | "FluxReport") {
        return Vec::new();
    }
    let mut actions = vec![if object.suspended {
        "resume"
    } else {
        "suspend"
    }];
    actions.push("reconcile");
    actions
}

fn action_links(kind: &pb::FluxKind, object: &ObjectView) -> Markup {
    html! {
        @for action in actions(kind, object) {
            a href={ "/confirm?action=" (action) "&kind=" (encode(&object.kind)) "&namespace=" (encode(&object.namespace)) "&name=" (encode(&object.name)) }
                aria-label={ (action) " " (object.kind) " " (object.namespace) "/" (object.name) } { (capitalized(action)) }
        }
    }
}

pub fn capitalized(word: &str) -> String {
    let mut chars = word.chars();
    chars
        .next()
        .map(|c| c.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}

/// One row of a kind's table.
pub fn row(key: &Key, kind: &pb::FluxKind, object: &ObjectView) -> Markup {
    html! {
        tr data-key=(key.dom()) {
            td.name { a href=(object_path(&object.kind, &object.namespace, &object.name)) { (object.name) } }
            td.namespace { (object.namespace) }
            @if !kind.revision_column.is_empty() {
                td.revision { (object.revision) }
            }
            td.suspended { @if object.suspended { (badge("Suspended", Tone::Warn)) } @else { "False" } }
            td.ready { (object.ready_status().badge()) }
            td.message { (object.ready.as_ref().map_or("", |c| c.message.as_str())) }
            td.actions { (action_links(kind, object)) }
        }
    }
}

fn kind_table(kind: &pb::FluxKind, rows: &[&(Key, ObjectView)]) -> Markup {
    html! {
        section id={ "kind-" (kind.kind) } hidden[rows.is_empty()] {
            h2 { (kind.kind) }
            table {
                thead {
                    tr {
                        th scope="col" { "NAME" }
                        th scope="col" { "NAMESPACE" }
                        @if !kind.revision_column.is_empty() { th scope="col" { (kind.revision_column) } }
                        th scope="col" { "SUSPENDED" }
                        th scope="col" { "READY" }
                        th scope="col" { "MESSAGE" }
                        th scope="col" { span.muted { "ACTIONS" } }
                    }
                }
                tbody data-kind=(kind.kind) {
                    @for (key, object) in rows { (row(key, kind, object)) }
                }
            }
        }
    }
}

/// The cluster's state: agent, flux-operator, FluxInstance, policy with compliance and
/// enforcement, and the upgrade in progress or last done.
pub fn cluster(
    status: &Result<Option<StatusView>, String>,
    upgrades: &Upgrades,
    watch_error: Option<&str>,
) -> Markup {
    html! {
        section #cluster aria-label="Cluster" {
            @if let Some(error) = watch_error {
                p.error role="alert" { "The watch of Flux objects is down: " (error) }
            }
            @match status {
                Err(error) => p.error role="alert" { "Cannot read the agent's status: " (error) },
                Ok(None) => p.muted { "Reading the agent's status…" },
                Ok(Some(status)) => (status_cards(status, upgrades)),
            }
        }
    }
}

fn status_cards(status: &StatusView, upgrades: &Upgrades) -> Markup {
    let agent_tone = status.agent.health.tone();
    let operator_tone = status.operator.phase.tone();
    let instance = &status.instance;
    let instance_status = instance.ready_status();
    let instance_tone = if instance.present {
        instance_status.tone()
    } else {
        Tone::Muted
    };
    html! {
        div.cards {
            div class={ "card " (agent_tone.class()) } {
                h3 { "Agent " (status.agent.health.badge()) }
                (facts(&[
                    ("version", html! { (status.agent.version) }),
                    ("cluster", html! { (if status.agent.cluster_name.is_empty() { &status.agent.cluster_uid } else { &status.agent.cluster_name }) }),
                    ("Kubernetes", html! { (status.agent.kubernetes_version) }),
                ]))
                @for problem in &status.agent.problems { p.error { (problem) } }
            }
            div class={ "card " (operator_tone.class()) } {
                h3 { "flux-operator " (status.operator.phase.badge()) }
                (facts(&[
                    ("version", html! { (status.operator.version) }),
                    ("release", html! { (status.operator.trust()) }),
                    ("namespace", html! { (status.operator.namespace) }),
                    ("replicas", html! { (status.operator.ready_replicas) "/" (status.operator.desired_replicas) " ready" }),
                ]))
                @if !status.operator.reason.is_empty() { p.muted { (status.operator.reason) } }
            }
            div class={ "card " (instance_tone.class()) } {
                h3 { "FluxInstance " @if instance.present { (instance_status.badge()) } @else { (badge("none", Tone::Muted)) } }
                @if instance.present {
                    (facts(&[
                        ("name", html! { (instance.namespace) "/" (instance.name) }),
                        ("version", html! { (instance.distribution_version) " (asks " (instance.requested_version) ")" }),
                        ("revision", html! { (instance.last_applied_revision) }),
                        ("suspended", html! { (if instance.suspended { "yes" } else { "no" }) }),
                    ]))
                    @if let Some(ready) = &instance.ready { p.message { (ready.message) } }
                }
            }
            (policy_card(status))
            @if let Some(next) = &upgrades.next { (next_upgrade_card(next)) }
            @if let Some(upgrade) = &upgrades.running {
                div class={ "card " (upgrade.phase().tone().class()) } {
                    h3 { "Upgrade " (upgrade.phase().badge()) }
                    (facts(&[
                        ("to", html! { (upgrade.target) " (asked " (upgrade.requested) ")" }),
                        ("from", html! { (upgrade.from_version) }),
                    ]))
                    @if !upgrade.message.is_empty() { p.message { (upgrade.message) } }
                }
            }
        }
    }
}

/// The plan of the next upgrade ([`NEXT_UPGRADE`]): up to date, available (with what it
/// migrates and what in the cluster uses an API version it removes), or blocked and why.
fn next_upgrade_card(next: &Result<pb::UpgradePlan, String>) -> Markup {
    let plan = match next {
        Err(error) => {
            return html! {
                div.card.muted { h3 { "Next upgrade " (badge("unknown", Tone::Muted)) } p.muted { "Cannot plan: " (error) } }
            };
        }
        Ok(plan) => plan,
    };
    let up_to_date = plan.warnings.iter().any(|w| w.code == "same-version");
    let (label, tone) = if up_to_date {
        ("up to date", Tone::Good)
    } else if plan.blocked {
        ("blocked", Tone::Bad)
    } else {
        ("available", Tone::Warn)
    };
    let removed = plan.removed_api_uses.len() + plan.hidden_removed_api_uses as usize;
    let mut rows = vec![
        (
            "to",
            html! { @if plan.target.is_empty() { span.muted { "no release" } } @else { "Flux " (plan.target) } },
        ),
        (
            "from",
            html! { @if plan.current_version.is_empty() { span.muted { "not applied yet" } } @else { (plan.current_version) } },
        ),
        (
            "within",
            html! { @if plan.policy.is_empty() { span.muted { "no policy" } } @else { (plan.policy_range) } },
        ),
    ];
    // What the upgrade has to do, only when there is something.
    if !plan.migrations.is_empty() {
        rows.push(("migrates", html! { (plan.migrations.len()) " CRD(s)" }));
    }
    if removed > 0 {
        rows.push(("removed APIs", html! { (removed) " object(s) use one" }));
    }
    html! {
        div #next-upgrade class={ "card " (tone.class()) } {
            h3 { "Next upgrade " (badge(label, tone)) }
            (facts(&rows))
            @for blocker in &plan.blockers { p.error { (blocker.message) } }
            @for warning in plan.warnings.iter().filter(|w| w.code != "same-version") { p.notice { (warning.message) } }
            p.muted {
                code { "upgrade plan --to " (NEXT_UPGRADE) }
                @if !up_to_date && !plan.blocked && !plan.written_version.is_empty() {
                    ", then " code { "upgrade apply --to " (plan.written_version) }
                }
            }
        }
    }
}

fn policy_card(status: &StatusView) -> Markup {
    let Some(policy) = &status.policy else {
        return html! {
            div.card.muted { h3 { "Policy " (badge("none", Tone::Muted)) } p.muted { "No policy was pushed: the tenant's FluxInstance is not bound by one." } }
        };
    };
    let enforced = policy.enforcement.as_ref().map(|e| e.enforced);
    let tone = if !policy.compliant || enforced == Some(false) {
        Tone::Bad
    } else if policy.stale || !policy.warnings.is_empty() {
        Tone::Warn
    } else {
        Tone::Good
    };
    html! {
        div class={ "card " (tone.class()) } {
            h3 { "Policy " (badge(if policy.compliant { "compliant" } else { "violated" }, if policy.compliant { Tone::Good } else { Tone::Bad })) }
            (facts(&[
                ("name", html! { (policy.name) " (generation " (policy.generation) ")" }),
                ("enforced", html! {
                    @match &policy.enforcement {
                        Some(e) if e.enforced => { (badge("yes", Tone::Good)) " " span.muted { (e.line()) } },
                        Some(e) => { (badge("NOT ENFORCED", Tone::Bad)) " " (e.reason) },
                        None => span.muted { "not proven yet" },
                    }
                }),
                ("signed by", html! { (policy.key_id) }),
                ("expires", html! { (policy.expires_at.as_deref().unwrap_or("-")) @if policy.stale { " " (badge("stale", Tone::Warn)) } }),
                ("upgrade by", html! {
                    @match &policy.upgrade_deadline {
                        Some(d) => { (d.minimum_version) " by " (d.date) },
                        None => span.muted { "no deadline" },
                    }
                }),
            ]))
            @for violation in &policy.violations { p.error { (violation) } }
            @for warning in &policy.warnings { p.notice { (warning) } }
        }
    }
}

/// The tables of the objects a filter shows, one per served kind (empty ones hidden, so a row
/// of a new object has a table to go to), with a count when `count`.
pub fn objects_part(
    kinds: &[pb::FluxKind],
    objects: &[(Key, ObjectView)],
    filter: &Filter,
    count: bool,
) -> Markup {
    let shown: Vec<&(Key, ObjectView)> = objects.iter().filter(|(_, o)| filter.passes(o)).collect();
    html! {
        div #objects {
            @if count { p.muted #count { (shown.len()) " of " (objects.len()) " objects" } }
            @for kind in kinds.iter().filter(|k| k.served) {
                @if filter.kind.is_empty() || filter.kind == kind.kind {
                    (kind_table(kind, &shown.iter().copied().filter(|(k, _)| k.kind == kind.kind).collect::<Vec<_>>()))
                }
            }
        }
    }
}

/// The address of a page's live stream: its filter, and the state version it was rendered at
/// (a stream that starts later sends what changed in between).
pub fn live_url(filter: &Filter, version: u64) -> String {
    let query = filter.query();
    if query.is_empty() {
        format!("/live?since={version}")
    } else {
        format!("/live?{query}&since={version}")
    }
}

/// The list page.
pub fn index(
    title: &str,
    scope: &Scope,
    kinds: &[pb::FluxKind],
    objects: &[(Key, ObjectView)],
    filter: &Filter,
    version: u64,
    cluster_part: Markup,
) -> Markup {
    let mut namespaces: Vec<&str> = objects.iter().map(|(_, o)| o.namespace.as_str()).collect();
    namespaces.sort_unstable();
    namespaces.dedup();
    if !filter.namespace.is_empty() && !namespaces.contains(&filter.namespace.as_str()) {
        namespaces.push(&filter.namespace);
    }
    let served: Vec<&pb::FluxKind> = kinds.iter().filter(|k| k.served).collect();
    let live = live_url(filter, version);
    html! {
        (layout(title, Some(&live), html! {
            main {
                h1 { (title) }
                (cluster_part)
                @if let Some(notice) = &scope.notice { p.notice role="note" { (notice) } }
                h2 { "Flux objects" }
                form.filters method="get" action="/" {
                    label { "Namespace"
                        select name="namespace" {
                            option value="" selected[filter.namespace.is_empty()] { "all" }
                            @for ns in &namespaces { option value=(ns) selected[filter.namespace == *ns] { (ns) } }
                        }
                    }
                    label { "Kind"
                        select name="kind" {
                            option value="" selected[filter.kind.is_empty()] { "all" }
                            @for kind in &served { option value=(kind.kind) selected[filter.kind == kind.kind] { (kind.kind) } }
                        }
                    }
                    label.check { input type="checkbox" name="not_ready" value="1" checked[filter.not_ready]; "not ready only" }
                    button type="submit" { "Filter" }
                    @if *filter != Filter::default() { a.button href="/" { "Clear" } }
                }
                (objects_part(kinds, objects, filter, true))
            }
        }))
    }
}

/// What the object page shows besides the object: its inventory, its Events and the
/// controllers' log lines about it, each or its error.
pub struct Detail {
    pub tree: Option<Result<pb::TreeNode, String>>,
    pub events: Result<Vec<pb::KubeEvent>, String>,
    pub logs: Result<Vec<pb::LogLine>, String>,
}

/// The filter of an object's page: that object alone.
pub fn object_filter(object: &ObjectView) -> Filter {
    Filter {
        namespace: object.namespace.clone(),
        kind: object.kind.clone(),
        not_ready: false,
        name: object.name.clone(),
    }
}

pub fn object_page(
    kinds: &[pb::FluxKind],
    objects: &[(Key, ObjectView)],
    object: &ObjectView,
    version: u64,
    detail: &Detail,
) -> Markup {
    let title = format!("{} {}/{}", object.kind, object.namespace, object.name);
    let filter = object_filter(object);
    let live = live_url(&filter, version);
    html! {
        (layout(&title, Some(&live), html! {
            main {
                h1 { (title) }
                (objects_part(kinds, objects, &filter, false))
                (facts(&[
                    ("API version", html! { (object.api_version) }),
                    ("source", html! {
                        @match &object.source {
                            Some(s) => a href=(object_path(&s.kind, &s.namespace, &s.name)) { (s.kind) " " (s.namespace) "/" (s.name) },
                            None => span.muted { "-" },
                        }
                    }),
                    ("generation", html! { (object.observed_generation) " of " (object.generation) " observed" }),
                    ("last reconcile asked", html! { (if object.last_handled_reconcile_at.is_empty() { "-" } else { &object.last_handled_reconcile_at }) }),
                ]))
                @if let Some(tree) = &detail.tree {
                    h2 { "Inventory" }
                    @match tree {
                        Ok(root) => ul.tree aria-label="Inventory" { (tree_node(root)) },
                        Err(error) => p.error { (error) },
                    }
                }
                h2 { "Events" }
                @match &detail.events {
                    Err(error) => p.error { (error) },
                    Ok(events) if events.is_empty() => p.muted { "No Events." },
                    Ok(events) => table.events {
                        thead { tr { th scope="col" { "LAST SEEN" } th scope="col" { "TYPE" } th scope="col" { "REASON" } th scope="col" { "OBJECT" } th scope="col" { "MESSAGE" } } }
                        tbody {
                            @for event in events {
                                tr {
                                    td { (event.last_seen.as_ref().map(timestamp).unwrap_or_default()) }
                                    td { @if event.r#type == "Warning" { (badge("Warning", Tone::Bad)) } @else { (event.r#type) } }
                                    td { (event.reason) }
                                    td { (event.object_kind) "/" (event.object_name) }
                                    td.message { (event.message) }
                                }
                            }
                        }
                    },
                }
                h2 { "Controller logs" }
                @match &detail.logs {
                    Err(error) => p.error { (error) },
                    Ok(lines) if lines.is_empty() => p.muted { "No log lines about it." },
                    Ok(lines) => table.logs aria-label="Controller logs" {
                        thead { tr { th scope="col" { "TIME" } th scope="col" { "LEVEL" } th scope="col" { "CONTROLLER" } th scope="col" { "MESSAGE" } } }
                        tbody {
                            @for line in lines {
                                tr {
                                    td { (line.time.as_ref().map(timestamp).unwrap_or_default()) }
                                    td { @if line.level.eq_ignore_ascii_case("error") { (badge("error", Tone::Bad)) } @else { (line.level) } }
                                    td { (line.controller) }
                                    td.message { (line.message) }
                                }
                            }
                        }
                    },
                }
                p { a href="/" { "← all objects" } }
            }
        }))
    }
}

fn timestamp(ts: &prost_types::Timestamp) -> String {
    k8s_openapi::jiff::Timestamp::new(ts.seconds, ts.nanos)
        .map(|t| t.strftime("%Y-%m-%d %H:%M:%S").to_string())
        .unwrap_or_default()
}

fn tree_node(node: &pb::TreeNode) -> Markup {
    let place = if node.namespace.is_empty() {
        node.name.clone()
    } else {
        format!("{}/{}", node.namespace, node.name)
    };
    html! {
        li {
            @if node.flux {
                a href=(object_path(&node.kind, &node.namespace, &node.name)) { (node.kind) " " (place) }
                " "
                (state::condition(node.ready.as_ref()).badge())
            } @else {
                (node.kind) " " (place)
            }
            @if !node.error.is_empty() { " " span.error { (node.error) } }
            @if !node.children.is_empty() || node.more > 0 {
                ul {
                    @for child in &node.children { (tree_node(child)) }
                    @if node.more > 0 { li.muted { "… " (node.more) " more" } }
                }
            }
        }
    }
}

/// Asks before acting: the action is a POST of this form, with the session's CSRF token. No
/// control has the focus, so a key pressed on the page (which another page may have opened)
/// does not submit it.
pub fn confirm(action: &str, object: &pb::ObjectRef, csrf: &str) -> Markup {
    let what = format!("{} {}/{}", object.kind, object.namespace, object.name);
    let title = format!("{} {what}?", capitalized(action));
    html! {
        (layout(&title, None, html! {
            main {
                h1 { (title) }
                p { (explain(action)) }
                form method="post" action="/action" {
                    input type="hidden" name="csrf" value=(csrf);
                    input type="hidden" name="action" value=(action);
                    input type="hidden" name="kind" value=(object.kind);
                    input type="hidden" name="namespace" value=(object.namespace);
                    input type="hidden" name="name" value=(object.name);
                    button.primary type="submit" { (capitalized(action)) " " (what) }
                    " "
                    a.button href=(object_path(&object.kind, &object.namespace, &object.name)) { "Cancel" }
                }
            }
        }))
    }
}

fn explain(action: &str) -> &'static str {
    match action {
        "suspend" => "Flux stops reconciling the object until it is resumed.",
        "resume" => "Flux reconciles the object again, and is asked to do so now.",
        _ => "Flux is asked to reconcile the object now.",
    }
}

/// What an action did, or the agent's refusal.
pub fn outcome(action: &str, object: &pb::ObjectRef, result: &Result<String, String>) -> Markup {
    let what = format!("{} {}/{}", object.kind, object.namespace, object.name);
    html! {
        (layout(&format!("{} {what}", capitalized(action)), None, html! {
            main {
                h1 { (capitalized(action)) " " (what) }
                @match result {
                    Ok(done) => p.ok #outcome role="status" { "✔ " (done) },
                    Err(refused) => p.error #outcome role="alert" { "✗ The agent refused: " (refused) },
                }
                p {
                    a href=(object_path(&object.kind, &object.namespace, &object.name)) { "← " (what) }
                    " · "
                    a href="/" { "all objects" }
                }
            }
        }))
    }
}
