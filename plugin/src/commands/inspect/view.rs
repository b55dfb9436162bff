//! What `events`, `tree`, `trace` and `stats` print: views of the agent's answers (for
//! `-o json|yaml`) and their tables and trees.

use serde::Serialize;
use tenantflux_proto::v1 as pb;

use crate::{
    output::{Cell, Style, Tone, table},
    state::{self, State as _},
};

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EventView {
    pub namespace: String,
    pub last_seen: String,
    pub first_seen: String,
    #[serde(rename = "type")]
    pub type_: String,
    pub reason: String,
    /// `Kind/name`, as flux writes it.
    pub object: String,
    pub message: String,
    pub count: i32,
}

fn rfc3339(t: Option<&prost_types::Timestamp>) -> String {
    t.and_then(|t| k8s_openapi::jiff::Timestamp::new(t.seconds, t.nanos).ok())
        .map(|t| t.to_string())
        .unwrap_or_default()
}

impl From<pb::KubeEvent> for EventView {
    fn from(e: pb::KubeEvent) -> Self {
        Self {
            namespace: e.namespace,
            last_seen: rfc3339(e.last_seen.as_ref()),
            first_seen: rfc3339(e.first_seen.as_ref()),
            type_: e.r#type,
            reason: e.reason,
            object: format!("{}/{}", e.object_kind, e.object_name),
            message: e.message,
            count: e.count,
        }
    }
}

#[derive(Debug, Serialize)]
pub struct EventsView {
    pub events: Vec<EventView>,
    /// Older Events left out.
    pub more: u32,
}

/// How long ago `at` was, as kubectl writes ages: 45s, 12m, 3h4m, 5d.
pub fn age(at: &str, now: k8s_openapi::jiff::Timestamp) -> String {
    match at.parse() {
        Ok(at) => crate::age::since(at, now),
        Err(_) => "<unknown>".into(),
    }
}

/// The LAST SEEN column: the age, and for repeated Events how often over how long.
fn last_seen(event: &EventView, now: k8s_openapi::jiff::Timestamp) -> String {
    let last = age(&event.last_seen, now);
    if event.count > 1 && !event.first_seen.is_empty() {
        format!(
            "{last} (x{} over {})",
            event.count,
            age(&event.first_seen, now)
        )
    } else {
        last
    }
}

/// The rows of an Events table; `namespaces` adds the NAMESPACE column.
pub fn event_rows(
    events: &[EventView],
    namespaces: bool,
    now: k8s_openapi::jiff::Timestamp,
) -> Vec<Vec<Cell>> {
    events
        .iter()
        .map(|e| {
            let tone = if e.type_ == "Warning" {
                Tone::Bad
            } else {
                Tone::Plain
            };
            let mut row = Vec::new();
            if namespaces {
                row.push(Cell::plain(e.namespace.clone()));
            }
            row.extend([
                Cell::plain(last_seen(e, now)),
                Cell::toned(e.type_.clone(), tone),
                Cell::plain(e.reason.clone()),
                Cell::plain(e.object.clone()),
                Cell::plain(e.message.replace('\n', " ")),
            ]);
            row
        })
        .collect()
}

pub fn event_headers(namespaces: bool) -> Vec<&'static str> {
    let mut headers = Vec::new();
    if namespaces {
        headers.push("NAMESPACE");
    }
    headers.extend(["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]);
    headers
}

pub fn render_events(view: &EventsView, namespaces: bool, style: Style) -> String {
    let now = k8s_openapi::jiff::Timestamp::now();
    let mut text = table(
        "",
        &event_headers(namespaces),
        &event_rows(&view.events, namespaces, now),
        style,
    );
    if view.more > 0 {
        text.push_str(&format!("… and {} more (older) Events\n", view.more));
    }
    text
}

#[derive(Debug, Serialize)]
pub struct NodeView {
    pub kind: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub group: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    pub name: String,
    /// The Ready status of a Flux object ("True", "False", "Unknown"); absent for other kinds.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "crate::state::optional_word"
    )]
    pub ready: Option<pb::ConditionStatus>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub message: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<NodeView>,
    #[serde(skip_serializing_if = "is_zero")]
    pub more: u32,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub error: String,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl From<pb::TreeNode> for NodeView {
    fn from(node: pb::TreeNode) -> Self {
        let ready = node.flux.then(|| state::condition(node.ready.as_ref()));
        Self {
            kind: node.kind,
            group: node.group,
            namespace: node.namespace,
            name: node.name,
            ready,
            message: node.ready.map(|c| c.message).unwrap_or_default(),
            children: node.children.into_iter().map(NodeView::from).collect(),
            more: node.more,
            error: node.error,
        }
    }
}

impl NodeView {
    /// `Kind/namespace/name`, or `Kind/name`, as `flux tree` writes it.
    pub fn title(&self) -> String {
        if self.namespace.is_empty() {
            format!("{}/{}", self.kind, self.name)
        } else {
            format!("{}/{}/{}", self.kind, self.namespace, self.name)
        }
    }

    fn line(&self, style: Style) -> String {
        let mut line = self.title();
        if let Some(ready) = self.ready {
            line.push_str(&format!(
                " {}",
                style.paint(&format!("Ready={}", ready.word()), ready.terminal())
            ));
        }
        if !self.error.is_empty() {
            line.push_str(&format!(" ({})", self.error));
        }
        line
    }
}

/// The tree, drawn as `flux tree` draws it, Ready after each Flux object.
pub fn render_tree(root: &NodeView, style: Style) -> String {
    fn children(node: &NodeView, prefix: &str, style: Style, out: &mut String) {
        let count = node.children.len() + usize::from(node.more > 0);
        for (i, child) in node.children.iter().enumerate() {
            let last = i + 1 == count;
            out.push_str(&format!(
                "{prefix}{}{}\n",
                if last { "└── " } else { "├── " },
                child.line(style)
            ));
            let deeper = format!("{prefix}{}", if last { "    " } else { "│   " });
            children(child, &deeper, style, out);
        }
        if node.more > 0 {
            out.push_str(&format!("{prefix}└── … and {} more\n", node.more));
        }
    }
    let mut out = format!("{}\n", root.line(style));
    children(root, "", style, &mut out);
    out
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StepView {
    pub role: String,
    pub kind: String,
    pub api_version: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    pub name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub revision: String,
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "crate::state::optional_word"
    )]
    pub ready: Option<pb::ConditionStatus>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub message: String,
    pub suspended: bool,
}

#[derive(Debug, Serialize)]
pub struct TraceView {
    pub steps: Vec<StepView>,
    pub unmanaged: bool,
}

impl From<pb::TraceResponse> for TraceView {
    fn from(trace: pb::TraceResponse) -> Self {
        Self {
            unmanaged: trace.unmanaged,
            steps: trace
                .steps
                .into_iter()
                .map(|s| StepView {
                    role: s.role,
                    kind: s.kind,
                    api_version: s.api_version,
                    namespace: s.namespace,
                    name: s.name,
                    revision: s.revision,
                    ready: s.ready.as_ref().map(pb::Condition::status),
                    message: s.ready.map(|c| c.message).unwrap_or_default(),
                    suspended: s.suspended,
                })
                .collect(),
        }
    }
}

/// One block per step, as `flux trace` prints them, separated by `---`.
pub fn render_trace(view: &TraceView, style: Style) -> String {
    let mut blocks = Vec::new();
    for (i, step) in view.steps.iter().enumerate() {
        let mut block = String::new();
        let label = |name: &str| format!("{:<15}", format!("{name}:"));
        block.push_str(&format!("{}{}\n", label(&step.kind), step.name));
        if !step.namespace.is_empty() {
            block.push_str(&format!("{}{}\n", label("Namespace"), step.namespace));
        }
        if i == 0 {
            let status = if view.unmanaged {
                style.paint(
                    "Not managed by Flux: no Kustomization, HelmRelease or ResourceSet applied it",
                    Tone::Bad,
                )
            } else {
                "Managed by Flux".to_owned()
            };
            block.push_str(&format!("{}{status}\n", label("Status")));
        } else {
            block.push_str(&format!("{}{}\n", label("Role"), step.role));
        }
        if !step.revision.is_empty() {
            block.push_str(&format!("{}{}\n", label("Revision"), step.revision));
        }
        if step.suspended {
            block.push_str(&format!("{}true\n", label("Suspended")));
        }
        if let Some(ready) = step.ready {
            block.push_str(&format!("{}{}\n", label("Ready"), ready.paint(style)));
        }
        if !step.message.is_empty() {
            block.push_str(&format!("{}{}\n", label("Message"), step.message));
        }
        blocks.push(block);
    }
    blocks.join("---\n")
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KindStatsView {
    pub kind: String,
    pub running: u32,
    pub failing: u32,
    pub suspended: u32,
    pub storage_bytes: u64,
}

#[derive(Debug, Serialize)]
pub struct StatsView {
    pub kinds: Vec<KindStatsView>,
}

/// A size as `flux stats` writes it: `-` for none, bytes, then KiB, MiB, … with one decimal.
pub fn size(bytes: u64) -> String {
    if bytes == 0 {
        return "-".into();
    }
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut div = 1024u64;
    let mut exp = 0;
    let mut n = bytes / 1024;
    while n >= 1024 {
        div *= 1024;
        exp += 1;
        n /= 1024;
    }
    format!(
        "{:.1} {}iB",
        bytes as f64 / div as f64,
        ['K', 'M', 'G', 'T', 'P', 'E'][exp]
    )
}

pub fn render_stats(view: &StatsView, style: Style) -> String {
    let rows: Vec<Vec<Cell>> = view
        .kinds
        .iter()
        .map(|k| {
            vec![
                Cell::plain(k.kind.clone()),
                Cell::plain(k.running.to_string()),
                if k.failing > 0 {
                    Cell::toned(k.failing.to_string(), Tone::Bad)
                } else {
                    Cell::plain("0")
                },
                Cell::plain(k.suspended.to_string()),
                Cell::plain(size(k.storage_bytes)),
            ]
        })
        .collect();
    table(
        "",
        &["RECONCILERS", "RUNNING", "FAILING", "SUSPENDED", "STORAGE"],
        &rows,
        style,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_as_flux_writes_them() {
        assert_eq!(size(0), "-");
        assert_eq!(size(1000), "1000 B");
        assert_eq!(size(1536), "1.5 KiB");
        assert_eq!(size(5 * 1024 * 1024), "5.0 MiB");
    }

    #[test]
    fn ages_as_kubectl_writes_them() {
        let now: k8s_openapi::jiff::Timestamp = "2026-01-02T03:04:05Z".parse().unwrap();
        assert_eq!(age("2026-01-02T03:03:05Z", now), "60s");
        assert_eq!(age("2026-01-02T02:04:05Z", now), "60m");
        assert_eq!(age("2025-12-30T03:04:05Z", now), "3d");
        assert_eq!(age("", now), "<unknown>");
    }

    fn node(kind: &str, name: &str, ready: Option<&str>, children: Vec<NodeView>) -> NodeView {
        NodeView {
            kind: kind.into(),
            group: String::new(),
            namespace: "apps".into(),
            name: name.into(),
            ready: ready.map(state::parse_condition),
            message: String::new(),
            children,
            more: 0,
            error: String::new(),
        }
    }

    #[test]
    fn trees_draw_as_flux_draws_them_with_ready() {
        let mut root = node(
            "Kustomization",
            "root",
            Some("True"),
            vec![
                node("ConfigMap", "cfg", None, vec![]),
                node(
                    "Kustomization",
                    "child",
                    Some("False"),
                    vec![node("Deployment", "web", None, vec![])],
                ),
            ],
        );
        root.children[0].namespace.clear();
        assert_eq!(
            render_tree(&root, Style::PLAIN),
            "Kustomization/apps/root Ready=True\n\
             ├── ConfigMap/cfg\n\
             └── Kustomization/apps/child Ready=False\n    \
             └── Deployment/apps/web\n"
        );
        root.more = 2;
        assert!(render_tree(&root, Style::PLAIN).ends_with("└── … and 2 more\n"));
    }

    #[test]
    fn unmanaged_objects_say_so() {
        let view = TraceView {
            unmanaged: true,
            steps: vec![StepView {
                role: "object".into(),
                kind: "ConfigMap".into(),
                api_version: "v1".into(),
                namespace: "apps".into(),
                name: "loose".into(),
                revision: String::new(),
                ready: None,
                message: String::new(),
                suspended: false,
            }],
        };
        let text = render_trace(&view, Style::PLAIN);
        assert!(text.starts_with("ConfigMap:     loose\n"), "{text}");
        assert!(text.contains("Not managed by Flux"), "{text}");
    }
}
