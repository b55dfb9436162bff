use tenantflux_proto::v1 as pb;

use super::{render::*, *};
use crate::output::{OutputFormat, render};
use crate::{output::Style, state::State as _, views::status::*};

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
                    status: pb::ConditionStatus::True.into(),
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
                enforcement: Some(pb::Enforcement {
                    enforced: false,
                    since: Some(prost_types::Timestamp {
                        seconds: 1_767_225_600,
                        nanos: 0,
                    }),
                    checked_at: Some(prost_types::Timestamp {
                        seconds: 1_767_225_660,
                        nanos: 0,
                    }),
                    reason: "a FluxInstance that the policy refuses was admitted in a dry run"
                        .to_owned(),
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
  Enforced:    NOT ENFORCED since 2026-01-01T00:00:00Z: a FluxInstance that the policy refuses was admitted in a dry run
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
fn watch_header_says_when_in_utc() {
    let at = Timestamp::from_second(1_767_225_661).unwrap();
    assert_eq!(watch_header(at), "Status at 2026-01-01 00:01:01 UTC");
}

#[test]
fn every_operator_phase_has_a_kebab_case_name() {
    let names: Vec<_> = (1..=6)
        .map(|n| pb::OperatorPhase::try_from(n).unwrap().word())
        .collect();
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

/// Every field the table may show, coloured: the cluster's identity, an operator the agent
/// installs (vouched release, notices), a stale policy with a key and warnings.
#[test]
fn table_shows_every_field_in_its_colour() {
    let mut status = fixture();
    let agent = status.agent.as_mut().unwrap();
    agent.cluster_uid = "0b9c-uid".to_owned();
    agent.cluster_name = "blue".to_owned();
    status.operator = Some(pb::OperatorStatus {
        phase: pb::OperatorPhase::Failed as i32,
        reason: "the bundle was refused".to_owned(),
        version: "v0.58.1".to_owned(),
        namespace: String::new(),
        ready_replicas: 0,
        desired_replicas: 1,
        bundle_digest: String::new(),
        last_transition: Some(prost_types::Timestamp {
            seconds: 1_767_225_600,
            nanos: 0,
        }),
        source: "oci://r.example/bundle:v1".to_owned(),
        notices: vec!["taken over from kubectl".to_owned(), "second".to_owned()],
        trust: pb::ReleaseTrust::Vouched as i32,
        vouched_generation: 4,
    });
    let policy = status.policy.as_mut().unwrap();
    policy.key_id = "k1".to_owned();
    policy.expires_at = Some(prost_types::Timestamp {
        seconds: 1_767_225_600,
        nanos: 0,
    });
    policy.stale = true;
    policy.warnings = vec!["Flux 2.8.0 is due by 2026-09-01".to_owned()];
    let text = render_table(&StatusView::from(status), Style { color: true });
    assert_eq!(Style::shown(&text), "\
Agent
  Version:     v0.1.0
  Namespace:   tenantflux-system
  Health:      <red>degraded</>
  Kubernetes:  v1.33.1
  Cluster:     0b9c-uid (blue)
  Problems:
    - <red>FluxInstance flux-system/flux: helm-controller not ready</>

flux-operator
  Phase:       <red>failed</>
  Version:     v0.58.1
  Replicas:    0/1
  Reason:      the bundle was refused
  Source:      oci://r.example/bundle:v1
  Bundle:      -
  Release:     vouched for by policy generation 4
  Since:       2026-01-01T00:00:00Z
  Notices:
    - <red>taken over from kubectl</>
    - <red>second</>

FluxInstance
  Name:        flux-system/flux
  Ready:       <green>True</> - ReconciliationSucceeded - Reconciliation finished
  Requested:   2.x
  Installed:   v2.9.4
  Registry:    ghcr.io/fluxcd
  Suspended:   false

Components
  NAME                READY   IMAGE
  source-controller   <green>True</>    ghcr.io/fluxcd/source-controller:v1.9.0
  helm-controller     <red>False</>   ghcr.io/fluxcd/helm-controller:v1.6.0

Policy
  Name:        platform
  Generation:  3
  Key:         k1
  Expires:     <red>2026-01-01T00:00:00Z (stale: expired, still enforced)</>
  Compliant:   <red>no</>
  Enforced:    <red>NOT ENFORCED since 2026-01-01T00:00:00Z: a FluxInstance that the policy refuses was admitted in a dry run</>
  Deadline:    Flux 2.8.0 from 2026-09-01
  Violation:   spec.distribution.version \"2.x\" is outside \">=2.7.0 <2.10.0\" allowed by policy generation 3
  Warning:     Flux 2.8.0 is due by 2026-09-01
");
}

/// A compliant, enforced policy that does not expire yet, and an instance without
/// components: the other side of each choice.
#[test]
fn table_shows_a_compliant_policy_and_no_components() {
    let mut status = fixture();
    let instance = status.instance.as_mut().unwrap();
    instance.components.clear();
    instance.ready = None;
    instance.suspended = true;
    let policy = status.policy.as_mut().unwrap();
    policy.compliant = true;
    policy.violations.clear();
    policy.upgrade_deadline = None;
    policy.expires_at = Some(prost_types::Timestamp {
        seconds: 1_767_225_600,
        nanos: 0,
    });
    policy.enforcement.as_mut().unwrap().enforced = true;
    let text = render_table(&StatusView::from(status.clone()), Style { color: true });
    assert_eq!(
        Style::shown(&text),
        "\
Agent
  Version:     v0.1.0
  Namespace:   tenantflux-system
  Health:      <red>degraded</>
  Kubernetes:  v1.33.1
  Problems:
    - <red>FluxInstance flux-system/flux: helm-controller not ready</>

flux-operator
  Phase:       <green>ready</>
  Version:     v0.58.1
  Replicas:    1/1 in namespace flux-system

FluxInstance
  Name:        flux-system/flux
  Ready:       not reconciled yet
  Requested:   2.x
  Installed:   v2.9.4
  Registry:    ghcr.io/fluxcd
  Suspended:   true

Components
  none reported

Policy
  Name:        platform
  Generation:  3
  Expires:     2026-01-01T00:00:00Z
  Compliant:   <green>yes</>
  Enforced:    <green>yes (proven since 2026-01-01T00:00:00Z, last at 2026-01-01T00:01:00Z)</>
"
    );
    status.policy.as_mut().unwrap().enforcement = None;
    let text = render_table(&StatusView::from(status), Style::PLAIN);
    assert!(text.ends_with("  Enforced:    not proven yet\n"), "{text}");
}
