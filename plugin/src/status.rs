//! `kubectl tenantflux status`: what the agent sees of flux-operator, the FluxInstance and policy.

use std::{
    fmt::Write as _,
    io::{self, Write as _},
    time::Duration,
};

use anyhow::Context as _;
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;
use tenantflux_proto::v1 as pb;

use crate::{
    connect::{Agent, ConnectOptions, StatusWatch},
    output::{Cell, Printer, Style, Tone, table},
};

/// The first wait before reconnecting a lost watch, doubled after each failed attempt up to
/// the last.
const FIRST_BACKOFF: Duration = Duration::from_millis(250);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

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
    let mut attempt = 0;
    loop {
        tokio::time::sleep(backoff(attempt)).await;
        attempt += 1;
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

/// The wait before reconnect attempt `attempt` (from 0).
fn backoff(attempt: u32) -> Duration {
    FIRST_BACKOFF
        .saturating_mul(2_u32.saturating_pow(attempt))
        .min(MAX_BACKOFF)
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

/// The stable `-o json|yaml` shape of a status, independent of the wire format.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusView {
    pub agent: AgentView,
    pub operator: OperatorView,
    pub instance: InstanceView,
    pub policy: Option<PolicyView>,
    pub observed_at: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentView {
    pub version: String,
    pub namespace: String,
    /// `ok`, `degraded` or `unknown`.
    pub health: &'static str,
    pub problems: Vec<String>,
    pub kubernetes_version: String,
    pub started_at: Option<String>,
    /// The UID of namespace kube-system: who this cluster is to a policy's `spec.clusters`.
    pub cluster_uid: String,
    /// The name set at the agent's install (`--cluster-name`), if any.
    pub cluster_name: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OperatorView {
    /// `not-installed`, `waiting-for-api`, `applying-crds`, `waiting-for-operator`, `ready`,
    /// `failed` or `unknown`.
    pub phase: &'static str,
    pub reason: String,
    pub version: String,
    pub namespace: String,
    pub ready_replicas: i32,
    pub desired_replicas: i32,
    pub bundle_digest: String,
    /// Where the agent installs flux-operator from; empty when it only observes.
    pub source: String,
    /// What the install did that the cluster's owner should know (objects taken over from
    /// another field manager).
    pub notices: Vec<String>,
    pub last_transition: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceView {
    pub present: bool,
    pub name: String,
    pub namespace: String,
    pub ready: Option<ConditionView>,
    pub requested_version: String,
    pub distribution_version: String,
    pub registry: String,
    pub last_applied_revision: String,
    pub suspended: bool,
    pub components: Vec<ComponentView>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConditionView {
    /// `True`, `False` or `Unknown`, as Kubernetes writes it.
    pub status: String,
    pub reason: String,
    pub message: String,
    pub last_transition: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ComponentView {
    pub name: String,
    pub ready: bool,
    pub image: String,
    pub status: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyView {
    pub generation: u64,
    pub name: String,
    /// Whether the live FluxInstance complies.
    pub compliant: bool,
    pub violations: Vec<String>,
    /// Upgrade deadlines coming up.
    pub warnings: Vec<String>,
    pub upgrade_deadline: Option<DeadlineView>,
    /// The id of the key that signed it.
    pub key_id: String,
    /// Its signed expiry (envelope v2).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// Past its expiry: still enforced, but stale.
    pub stale: bool,
}

/// The policy's upgrade deadline: from `date` (UTC) on, Flux must be at least
/// `minimum_version`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeadlineView {
    pub minimum_version: String,
    pub date: String,
}

fn timestamp(ts: Option<prost_types::Timestamp>) -> Option<String> {
    let ts = ts?;
    Timestamp::new(ts.seconds, ts.nanos)
        .ok()
        .map(|t| t.to_string())
}

fn health(value: i32) -> &'static str {
    match pb::Health::try_from(value) {
        Ok(pb::Health::Ok) => "ok",
        Ok(pb::Health::Degraded) => "degraded",
        _ => "unknown",
    }
}

fn phase(value: i32) -> &'static str {
    match pb::OperatorPhase::try_from(value) {
        Ok(pb::OperatorPhase::NotInstalled) => "not-installed",
        Ok(pb::OperatorPhase::WaitingForApi) => "waiting-for-api",
        Ok(pb::OperatorPhase::ApplyingCrds) => "applying-crds",
        Ok(pb::OperatorPhase::WaitingForOperator) => "waiting-for-operator",
        Ok(pb::OperatorPhase::Ready) => "ready",
        Ok(pb::OperatorPhase::Failed) => "failed",
        Ok(pb::OperatorPhase::Unspecified) | Err(_) => "unknown",
    }
}

fn or_dash(value: &str) -> &str {
    if value.is_empty() { "-" } else { value }
}

impl From<pb::Status> for StatusView {
    fn from(status: pb::Status) -> Self {
        let agent = status.agent.unwrap_or_default();
        let operator = status.operator.unwrap_or_default();
        let instance = status.instance.unwrap_or_default();
        Self {
            agent: AgentView {
                version: agent.version,
                namespace: agent.namespace,
                health: health(agent.health),
                problems: agent.problems,
                kubernetes_version: agent.kubernetes_version,
                started_at: timestamp(agent.started_at),
                cluster_uid: agent.cluster_uid,
                cluster_name: agent.cluster_name,
            },
            operator: OperatorView {
                phase: phase(operator.phase),
                reason: operator.reason,
                version: operator.version,
                namespace: operator.namespace,
                ready_replicas: operator.ready_replicas,
                desired_replicas: operator.desired_replicas,
                bundle_digest: operator.bundle_digest,
                source: operator.source,
                notices: operator.notices,
                last_transition: timestamp(operator.last_transition),
            },
            instance: InstanceView {
                present: instance.present,
                name: instance.name,
                namespace: instance.namespace,
                ready: instance.ready.map(|c| ConditionView {
                    status: c.status,
                    reason: c.reason,
                    message: c.message,
                    last_transition: timestamp(c.last_transition),
                }),
                requested_version: instance.requested_version,
                distribution_version: instance.distribution_version,
                registry: instance.registry,
                last_applied_revision: instance.last_applied_revision,
                suspended: instance.suspended,
                components: instance
                    .components
                    .into_iter()
                    .map(|c| ComponentView {
                        name: c.name,
                        ready: c.ready,
                        image: c.image,
                        status: c.status,
                    })
                    .collect(),
            },
            policy: status.policy.map(|p| PolicyView {
                generation: p.generation,
                name: p.name,
                compliant: p.compliant,
                violations: p.violations,
                warnings: p.warnings,
                upgrade_deadline: p.upgrade_deadline.map(|d| DeadlineView {
                    minimum_version: d.minimum_version,
                    date: d.date,
                }),
                key_id: p.key_id,
                expires_at: timestamp(p.expires_at),
                stale: p.stale,
            }),
            observed_at: timestamp(status.observed_at),
        }
    }
}

/// One `Key:   value` line of a section.
fn field(out: &mut String, key: &str, value: &str) {
    let key = format!("{key}:");
    let _ = if value.is_empty() {
        writeln!(out, "  {key}")
    } else {
        writeln!(out, "  {key:<13}{value}")
    };
}

fn condition_tone(status: &str) -> Tone {
    match status {
        "True" => Tone::Good,
        "False" => Tone::Bad,
        _ => Tone::Plain,
    }
}

pub fn render_table(view: &StatusView, style: Style) -> String {
    let mut out = String::new();

    let agent = &view.agent;
    out.push_str("Agent\n");
    field(&mut out, "Version", or_dash(&agent.version));
    field(&mut out, "Namespace", or_dash(&agent.namespace));
    let health_tone = match agent.health {
        "ok" => Tone::Good,
        "degraded" => Tone::Bad,
        _ => Tone::Plain,
    };
    field(&mut out, "Health", &style.paint(agent.health, health_tone));
    field(&mut out, "Kubernetes", or_dash(&agent.kubernetes_version));
    if !agent.cluster_uid.is_empty() {
        let name = match agent.cluster_name.as_str() {
            "" => String::new(),
            name => format!(" ({name})"),
        };
        field(&mut out, "Cluster", &format!("{}{name}", agent.cluster_uid));
    }
    match agent.problems.as_slice() {
        [] => field(&mut out, "Problems", "none"),
        problems => {
            field(&mut out, "Problems", "");
            for problem in problems {
                let _ = writeln!(out, "    - {}", style.paint(problem, Tone::Bad));
            }
        }
    }

    let operator = &view.operator;
    out.push_str("\nflux-operator\n");
    let phase_tone = match operator.phase {
        "ready" => Tone::Good,
        "failed" => Tone::Bad,
        _ => Tone::Plain,
    };
    field(&mut out, "Phase", &style.paint(operator.phase, phase_tone));
    field(&mut out, "Version", or_dash(&operator.version));
    let replicas = format!("{}/{}", operator.ready_replicas, operator.desired_replicas);
    let replicas = if operator.namespace.is_empty() {
        replicas
    } else {
        format!("{replicas} in namespace {}", operator.namespace)
    };
    field(&mut out, "Replicas", &replicas);
    if !operator.reason.is_empty() {
        field(&mut out, "Reason", &operator.reason);
    }
    // Only when the agent installs flux-operator itself.
    if !operator.source.is_empty() {
        field(&mut out, "Source", &operator.source);
        field(&mut out, "Bundle", or_dash(&operator.bundle_digest));
        if let Some(since) = &operator.last_transition {
            field(&mut out, "Since", since);
        }
        if !operator.notices.is_empty() {
            field(&mut out, "Notices", "");
            for notice in &operator.notices {
                let _ = writeln!(out, "    - {}", style.paint(notice, Tone::Bad));
            }
        }
    }

    let instance = &view.instance;
    out.push_str("\nFluxInstance\n");
    if instance.present {
        field(
            &mut out,
            "Name",
            &format!("{}/{}", instance.namespace, instance.name),
        );
        let ready = match &instance.ready {
            Some(c) => {
                let mut text = style.paint(&c.status, condition_tone(&c.status));
                for detail in [&c.reason, &c.message] {
                    if !detail.is_empty() {
                        text.push_str(" - ");
                        text.push_str(detail);
                    }
                }
                text
            }
            None => "not reconciled yet".to_owned(),
        };
        field(&mut out, "Ready", &ready);
        field(&mut out, "Requested", or_dash(&instance.requested_version));
        field(
            &mut out,
            "Installed",
            or_dash(&instance.distribution_version),
        );
        field(&mut out, "Registry", or_dash(&instance.registry));
        field(
            &mut out,
            "Suspended",
            if instance.suspended { "true" } else { "false" },
        );

        out.push_str("\nComponents\n");
        if instance.components.is_empty() {
            out.push_str("  none reported\n");
        } else {
            let rows: Vec<Vec<Cell>> = instance
                .components
                .iter()
                .map(|c| {
                    let (ready, tone) = if c.ready {
                        ("True", Tone::Good)
                    } else {
                        ("False", Tone::Bad)
                    };
                    vec![
                        Cell::plain(&c.name),
                        Cell::toned(ready, tone),
                        Cell::plain(or_dash(&c.image)),
                    ]
                })
                .collect();
            out.push_str(&table("  ", &["NAME", "READY", "IMAGE"], &rows, style));
        }
    } else {
        field(&mut out, "Present", "no (create a FluxInstance named flux)");
    }

    out.push_str("\nPolicy\n");
    match &view.policy {
        Some(policy) => {
            field(&mut out, "Name", &policy.name);
            field(&mut out, "Generation", &policy.generation.to_string());
            if !policy.key_id.is_empty() {
                field(&mut out, "Key", &policy.key_id);
            }
            if let Some(at) = &policy.expires_at {
                let text = if policy.stale {
                    style.paint(&format!("{at} (stale: expired, still enforced)"), Tone::Bad)
                } else {
                    at.clone()
                };
                field(&mut out, "Expires", &text);
            }
            let compliant = if policy.compliant {
                style.paint("yes", Tone::Good)
            } else {
                style.paint("no", Tone::Bad)
            };
            field(&mut out, "Compliant", &compliant);
            if let Some(deadline) = &policy.upgrade_deadline {
                let text = format!("Flux {} from {}", deadline.minimum_version, deadline.date);
                field(&mut out, "Deadline", &text);
            }
            for violation in &policy.violations {
                field(&mut out, "Violation", violation);
            }
            for warning in &policy.warnings {
                field(&mut out, "Warning", warning);
            }
        }
        None => field(&mut out, "Generation", "none"),
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::{OutputFormat, render};

    /// A cluster with a healthy operator, a Ready FluxInstance with one component down, and
    /// a policy at generation 3.
    pub(crate) fn fixture() -> pb::Status {
        pb::Status {
            agent: Some(pb::AgentInfo {
                version: "v0.1.0".to_owned(),
                namespace: "tenantflux-system".to_owned(),
                health: pb::Health::Degraded as i32,
                problems: vec![
                    "FluxInstance flux-system/flux: helm-controller not ready".to_owned(),
                ],
                kubernetes_version: "v1.33.1".to_owned(),
                started_at: Some(prost_types::Timestamp {
                    seconds: 1_767_225_600,
                    nanos: 0,
                }),
                ..pb::AgentInfo::default()
            }),
            operator: Some(pb::OperatorStatus {
                phase: pb::OperatorPhase::Ready as i32,
                version: "v0.58.1".to_owned(),
                namespace: "flux-system".to_owned(),
                ready_replicas: 1,
                desired_replicas: 1,
                ..pb::OperatorStatus::default()
            }),
            instance: Some(pb::InstanceStatus {
                present: true,
                name: "flux".to_owned(),
                namespace: "flux-system".to_owned(),
                ready: Some(pb::Condition {
                    r#type: "Ready".to_owned(),
                    status: "True".to_owned(),
                    reason: "ReconciliationSucceeded".to_owned(),
                    message: "Reconciliation finished".to_owned(),
                    last_transition: None,
                }),
                requested_version: "2.x".to_owned(),
                distribution_version: "v2.9.4".to_owned(),
                registry: "ghcr.io/fluxcd".to_owned(),
                last_applied_revision: "v2.9.4@sha256:abc".to_owned(),
                components: vec![
                    pb::Component {
                        name: "source-controller".to_owned(),
                        image: "ghcr.io/fluxcd/source-controller:v1.9.0".to_owned(),
                        ready: true,
                        status: "Current".to_owned(),
                    },
                    pb::Component {
                        name: "helm-controller".to_owned(),
                        image: "ghcr.io/fluxcd/helm-controller:v1.6.0".to_owned(),
                        ready: false,
                        status: "InProgress".to_owned(),
                    },
                ],
                suspended: false,
            }),
            policy: Some(pb::PolicyStatus {
                generation: 3,
                name: "platform".to_owned(),
                compliant: false,
                violations: vec![
                    r#"spec.distribution.version "2.x" is outside ">=2.7.0 <2.10.0" allowed by policy generation 3"#.to_owned(),
                ],
                warnings: Vec::new(),
                upgrade_deadline: Some(pb::UpgradeDeadline {
                    minimum_version: "2.8.0".to_owned(),
                    date: "2026-09-01".to_owned(),
                    warn_days: 30,
                }),
                ..pb::PolicyStatus::default()
            }),
            observed_at: Some(prost_types::Timestamp {
                seconds: 1_767_225_660,
                nanos: 0,
            }),
        }
    }

    #[test]
    fn table_summarises_every_section() {
        let text = render_table(&StatusView::from(fixture()), Style::PLAIN);
        assert_eq!(
            text,
            "\
Agent
  Version:     v0.1.0
  Namespace:   tenantflux-system
  Health:      degraded
  Kubernetes:  v1.33.1
  Problems:
    - FluxInstance flux-system/flux: helm-controller not ready

flux-operator
  Phase:       ready
  Version:     v0.58.1
  Replicas:    1/1 in namespace flux-system

FluxInstance
  Name:        flux-system/flux
  Ready:       True - ReconciliationSucceeded - Reconciliation finished
  Requested:   2.x
  Installed:   v2.9.4
  Registry:    ghcr.io/fluxcd
  Suspended:   false

Components
  NAME                READY   IMAGE
  source-controller   True    ghcr.io/fluxcd/source-controller:v1.9.0
  helm-controller     False   ghcr.io/fluxcd/helm-controller:v1.6.0

Policy
  Name:        platform
  Generation:  3
  Compliant:   no
  Deadline:    Flux 2.8.0 from 2026-09-01
  Violation:   spec.distribution.version \"2.x\" is outside \">=2.7.0 <2.10.0\" allowed by policy generation 3
"
        );
    }

    #[test]
    fn table_colors_ready_green_and_not_ready_red() {
        let text = render_table(&StatusView::from(fixture()), Style { color: true });
        assert!(text.contains("\x1b[32mTrue\x1b[0m - ReconciliationSucceeded"));
        assert!(text.contains("\x1b[31mFalse\x1b[0m"));
        assert!(text.contains("\x1b[32mready\x1b[0m"));
        assert!(!render_table(&StatusView::from(fixture()), Style::PLAIN).contains('\x1b'));
    }

    #[test]
    fn table_shows_where_the_agent_installs_from_and_why_it_failed() {
        let mut status = fixture();
        status.operator = Some(pb::OperatorStatus {
            phase: pb::OperatorPhase::Failed as i32,
            reason: "the bundle from configmap:b was refused, nothing was applied: the bundle \
                     lacks CustomResourceDefinition fluxinstances.fluxcd.controlplane.io"
                .to_owned(),
            version: "v0.58.1".to_owned(),
            namespace: "flux-system".to_owned(),
            bundle_digest: "sha256:abc".to_owned(),
            source: "configmap:b".to_owned(),
            notices: vec![
                "ClusterRole flux-web-user was taken over from field manager \"kubectl-create\" \
                 (\".rules\"): the bundle's values apply now"
                    .to_owned(),
            ],
            ..pb::OperatorStatus::default()
        });
        let text = render_table(&StatusView::from(status.clone()), Style::PLAIN);
        assert!(text.contains("  Phase:       failed\n"), "{text}");
        assert!(text.contains("  Reason:      the bundle from configmap:b was refused"));
        assert!(text.contains("  Source:      configmap:b\n"), "{text}");
        assert!(text.contains("  Bundle:      sha256:abc\n"), "{text}");
        assert!(
            text.contains("  Notices:\n    - ClusterRole flux-web-user was taken over from"),
            "{text}"
        );
        let json: serde_json::Value = serde_json::to_value(StatusView::from(status)).unwrap();
        assert_eq!(json["operator"]["source"], "configmap:b");
        assert_eq!(json["operator"]["bundleDigest"], "sha256:abc");
        assert!(
            json["operator"]["notices"][0]
                .as_str()
                .unwrap()
                .contains("kubectl-create")
        );
    }

    #[test]
    fn table_for_a_cluster_without_flux() {
        let status = pb::Status {
            agent: Some(pb::AgentInfo {
                version: "v0.1.0".to_owned(),
                health: pb::Health::Ok as i32,
                ..pb::AgentInfo::default()
            }),
            operator: Some(pb::OperatorStatus {
                phase: pb::OperatorPhase::NotInstalled as i32,
                reason: "no flux-operator Deployment found".to_owned(),
                ..pb::OperatorStatus::default()
            }),
            instance: Some(pb::InstanceStatus::default()),
            policy: None,
            observed_at: None,
        };
        let text = render_table(&StatusView::from(status), Style::PLAIN);
        assert!(text.contains("  Health:      ok\n"));
        assert!(text.contains("  Problems:    none\n"));
        assert!(text.contains("  Phase:       not-installed\n"));
        assert!(text.contains("  Reason:      no flux-operator Deployment found\n"));
        assert!(text.contains("  Present:     no (create a FluxInstance named flux)\n"));
        assert!(!text.contains("Components"));
        assert!(text.ends_with("Policy\n  Generation:  none\n"));
    }

    #[test]
    fn json_view_is_camel_case_with_lowercase_enums() {
        let json = render(
            OutputFormat::Json,
            Style::PLAIN,
            &StatusView::from(fixture()),
            render_table,
        )
        .unwrap();
        let value: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(value["agent"]["health"], "degraded");
        assert_eq!(value["agent"]["kubernetesVersion"], "v1.33.1");
        assert_eq!(value["agent"]["startedAt"], "2026-01-01T00:00:00Z");
        assert_eq!(value["operator"]["phase"], "ready");
        assert_eq!(value["operator"]["readyReplicas"], 1);
        assert_eq!(value["instance"]["present"], true);
        assert_eq!(value["instance"]["distributionVersion"], "v2.9.4");
        assert_eq!(value["instance"]["ready"]["status"], "True");
        assert_eq!(
            value["instance"]["components"][1]["name"],
            "helm-controller"
        );
        assert_eq!(value["instance"]["components"][1]["ready"], false);
        assert_eq!(value["policy"]["generation"], 3);
        assert_eq!(value["observedAt"], "2026-01-01T00:01:00Z");
        // Nothing of the wire format leaks through.
        assert!(!json.contains("OPERATOR_PHASE"));
        assert!(!json.contains("distribution_version"));
    }

    #[test]
    fn yaml_view_matches_json_view() {
        let view = StatusView::from(fixture());
        let yaml = render(OutputFormat::Yaml, Style::PLAIN, &view, render_table).unwrap();
        let from_yaml: serde_json::Value = tenantflux_core::yaml::from_str(&yaml).unwrap();
        assert_eq!(from_yaml, serde_json::to_value(&view).unwrap());
        assert!(yaml.contains("phase: ready\n"));
        assert!(yaml.contains("policy:\n  generation: 3\n"));
    }

    #[test]
    fn absent_policy_is_null_and_unknown_enums_say_unknown() {
        let mut status = fixture();
        status.policy = None;
        status.operator.as_mut().unwrap().phase = 42;
        status.agent.as_mut().unwrap().health = 0;
        let value = serde_json::to_value(StatusView::from(status)).unwrap();
        assert_eq!(value["policy"], serde_json::Value::Null);
        assert_eq!(value["operator"]["phase"], "unknown");
        assert_eq!(value["agent"]["health"], "unknown");
    }

    #[test]
    fn a_watch_prints_only_statuses_it_has_not_just_printed() {
        let first = StatusView::from(fixture());
        assert!(is_news(None, &first));
        assert!(!is_news(Some(&first), &first.clone()));

        let mut changed = fixture();
        changed.policy = Some(pb::PolicyStatus {
            generation: 4,
            ..Default::default()
        });
        assert!(is_news(Some(&first), &StatusView::from(changed)));

        // A restarted agent re-sends the same cluster state, but it is a new agent.
        let mut restarted = fixture();
        restarted.agent.as_mut().unwrap().started_at = Some(prost_types::Timestamp {
            seconds: 1_767_229_200,
            nanos: 0,
        });
        assert!(is_news(Some(&first), &StatusView::from(restarted)));
    }

    #[test]
    fn reconnects_back_off_from_a_quarter_second_to_five_seconds() {
        let waits: Vec<_> = (0..7).map(backoff).collect();
        assert_eq!(
            waits,
            [250, 500, 1000, 2000, 4000, 5000, 5000].map(Duration::from_millis)
        );
        assert_eq!(backoff(u32::MAX), MAX_BACKOFF);
    }

    #[test]
    fn watch_header_says_when_in_utc() {
        let at = Timestamp::from_second(1_767_225_661).unwrap();
        assert_eq!(watch_header(at), "Status at 2026-01-01 00:01:01 UTC");
    }

    #[test]
    fn every_operator_phase_has_a_kebab_case_name() {
        let names: Vec<_> = (1..=6).map(phase).collect();
        assert_eq!(
            names,
            [
                "not-installed",
                "waiting-for-api",
                "applying-crds",
                "waiting-for-operator",
                "ready",
                "failed"
            ]
        );
    }
}
