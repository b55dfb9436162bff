//! Status derived from fixtures of what the watchers hold.

use std::time::Duration;

use super::*;

fn facts() -> AgentFacts {
    AgentFacts {
        version: "0.1.0".into(),
        namespace: "tenantflux-system".into(),
        operator_namespace: "flux-system".into(),
        started_at: SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000),
    }
}

fn fixture<K: serde::de::DeserializeOwned>(yaml: &str) -> K {
    tenantflux_core::yaml::from_str(yaml).expect("fixture parses")
}

fn deployment(yaml: &str) -> Tracked<Deployment> {
    Tracked::present(fixture(yaml))
}

fn dynamic(yaml: &str) -> Tracked<DynamicObject> {
    Tracked::present(fixture(yaml))
}

const OPERATOR_READY: &str = include_str!("../fixtures/operator-ready.yaml");
const OPERATOR_PROGRESSING: &str = include_str!("../fixtures/operator-progressing.yaml");
const OPERATOR_STALLED: &str = include_str!("../fixtures/operator-stalled.yaml");
const INSTANCE_READY: &str = include_str!("../fixtures/instance-ready.yaml");
const INSTANCE_NOT_READY: &str = include_str!("../fixtures/instance-not-ready.yaml");
const REPORT: &str = include_str!("../fixtures/report.yaml");

#[test]
fn a_report_lags_while_the_instance_is_ready_and_a_component_is_not() {
    let lagging = Observed {
        instance: dynamic(INSTANCE_READY),
        report: dynamic(REPORT),
        ..Observed::default()
    };
    assert!(report_lags(&lagging));

    // The instance itself is not Ready: the report may well be right.
    let not_ready = Observed {
        instance: dynamic(INSTANCE_NOT_READY),
        report: dynamic(REPORT),
        ..Observed::default()
    };
    assert!(!report_lags(&not_ready));

    // Every component ready: nothing to refresh.
    let all_ready = REPORT.replace("ready: false", "ready: true");
    let caught_up = Observed {
        instance: dynamic(INSTANCE_READY),
        report: dynamic(&all_ready),
        ..Observed::default()
    };
    assert!(!report_lags(&caught_up));

    // No report yet: the operator writes one on its own.
    let no_report = Observed {
        instance: dynamic(INSTANCE_READY),
        ..Observed::default()
    };
    assert!(!report_lags(&no_report));
}

#[test]
fn nothing_observed_yet_waits_for_the_api() {
    let status = derive(&facts(), &Observed::default());
    let operator = status.operator;
    assert_eq!(operator.phase, OperatorPhase::WaitingForApi);
    assert_eq!(operator.namespace, "flux-system");
    let agent = status.agent;
    assert_eq!(agent.health, Health::Ok);
    assert_eq!(agent.namespace, "tenantflux-system");
    assert_eq!(agent.version, "0.1.0");
    assert_eq!(agent.started_at, facts().started_at);
    assert!(!status.instance.present);
    assert!(status.policy.is_none());
}

#[test]
fn operator_missing_is_not_installed() {
    let observed = Observed {
        operator: Tracked::absent(),
        ..Observed::default()
    };
    let operator = derive(&facts(), &observed).operator;
    assert_eq!(operator.phase, OperatorPhase::NotInstalled);
    assert_eq!(
        operator.reason,
        "no Deployment \"flux-operator\" in namespace \"flux-system\""
    );
    assert_eq!(operator.version, "");
}

#[test]
fn operator_available_is_ready_with_version_from_label() {
    let observed = Observed {
        operator: deployment(OPERATOR_READY),
        ..Observed::default()
    };
    let operator = derive(&facts(), &observed).operator;
    assert_eq!(operator.phase, OperatorPhase::Ready);
    assert_eq!(operator.version, "v0.58.1");
    assert_eq!(operator.reason, "");
    assert_eq!((operator.ready_replicas, operator.desired_replicas), (1, 1));
    assert_eq!(
        operator.last_transition.unwrap(),
        SystemTime::from("2026-11-30T02:00:00Z".parse::<Timestamp>().unwrap())
    );
}

#[test]
fn operator_not_available_waits_with_reason_and_image_tag_version() {
    let observed = Observed {
        operator: deployment(OPERATOR_PROGRESSING),
        ..Observed::default()
    };
    let operator = derive(&facts(), &observed).operator;
    assert_eq!(operator.phase, OperatorPhase::WaitingForOperator);
    assert_eq!(
        operator.version, "v0.57.0",
        "from the image tag, digest ignored"
    );
    assert_eq!(
        operator.reason,
        "Deployment flux-system/flux-operator is not available: MinimumReplicasUnavailable: \
         Deployment does not have minimum availability."
    );
    assert_eq!((operator.ready_replicas, operator.desired_replicas), (0, 1));
}

#[test]
fn stalled_rollout_reports_the_progress_deadline() {
    let observed = Observed {
        operator: deployment(OPERATOR_STALLED),
        ..Observed::default()
    };
    let operator = derive(&facts(), &observed).operator;
    assert_eq!(operator.phase, OperatorPhase::WaitingForOperator);
    assert!(
        operator.reason.contains("ProgressDeadlineExceeded"),
        "{}",
        operator.reason
    );
}

#[test]
fn instance_absent_has_empty_fields() {
    let observed = Observed {
        instance: Tracked::absent(),
        report: dynamic(REPORT),
        ..Observed::default()
    };
    let instance = derive(&facts(), &observed).instance;
    assert_eq!(instance, InstanceStatus::default());
}

#[test]
fn instance_ready_takes_version_from_last_applied_revision() {
    let observed = Observed {
        instance: dynamic(INSTANCE_READY),
        ..Observed::default()
    };
    let instance = derive(&facts(), &observed).instance;
    assert!(instance.present);
    assert_eq!(instance.name, "flux");
    assert_eq!(instance.namespace, "flux-system");
    assert_eq!(instance.requested_version, "2.9.x");
    assert_eq!(instance.registry, "ghcr.io/fluxcd");
    assert_eq!(instance.distribution_version, "v2.9.4");
    assert!(instance.last_applied_revision.starts_with("v2.9.4@sha256:"));
    assert!(!instance.suspended);
    let ready = instance.ready.unwrap();
    assert_eq!(
        (
            ready.type_.as_str(),
            ready.status.as_str(),
            ready.reason.as_str()
        ),
        ("Ready", "True", "ReconciliationSucceeded")
    );
    assert_eq!(
        ready.last_transition.unwrap(),
        SystemTime::from("2026-11-30T02:10:00Z".parse::<Timestamp>().unwrap())
    );
    // Without a FluxReport the components come from status.components, readiness unknown.
    let names: Vec<_> = instance
        .components
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(names, ["source-controller", "kustomize-controller"]);
    assert_eq!(
        instance.components[0].image,
        "ghcr.io/fluxcd/source-controller:v1.8.0@sha256:1111"
    );
    assert!(!instance.components[0].ready);
}

#[test]
fn report_supplies_component_readiness() {
    let observed = Observed {
        instance: dynamic(INSTANCE_READY),
        report: dynamic(REPORT),
        ..Observed::default()
    };
    let instance = derive(&facts(), &observed).instance;
    assert_eq!(instance.components.len(), 2);
    let kustomize = &instance.components[1];
    assert_eq!(kustomize.name, "kustomize-controller");
    assert!(!kustomize.ready);
    assert_eq!(kustomize.status, "Deployment not ready: 0/1 replicas");
    assert!(instance.components[0].ready);
    assert_eq!(
        instance.components[0].image,
        "ghcr.io/fluxcd/source-controller:v1.8.0@sha256:1111"
    );
}

#[test]
fn instance_not_ready_takes_version_from_report_and_shows_suspension() {
    let observed = Observed {
        instance: dynamic(INSTANCE_NOT_READY),
        report: dynamic(REPORT),
        ..Observed::default()
    };
    let instance = derive(&facts(), &observed).instance;
    assert!(instance.present);
    assert_eq!(instance.last_applied_revision, "");
    assert_eq!(instance.distribution_version, "v2.9.4");
    assert!(instance.suspended);
    let ready = instance.ready.unwrap();
    assert_eq!(ready.status, "False");
    assert_eq!(ready.reason, "ArtifactFailed");
    assert!(
        ready.message.contains("failed to pull"),
        "{}",
        ready.message
    );
}

#[test]
fn instance_without_conditions_has_no_ready_condition() {
    let observed = Observed {
        instance: Tracked::present(fixture(
            "apiVersion: fluxcd.controlplane.io/v1\nkind: FluxInstance\n\
             metadata: {name: flux, namespace: flux-system}\n\
             spec: {distribution: {version: 2.x, registry: ghcr.io/fluxcd}}\n",
        )),
        ..Observed::default()
    };
    let instance = derive(&facts(), &observed).instance;
    assert!(instance.present);
    assert!(instance.ready.is_none());
    assert_eq!(instance.distribution_version, "");
    assert!(instance.components.is_empty());
}

#[test]
fn problems_make_the_agent_degraded() {
    let mut observed = Observed::default();
    observed
        .problems
        .insert(Source::Instance, "FluxInstance API is not served".into());
    observed
        .problems
        .insert(Source::KubernetesApi, "API server did not answer".into());
    let agent = derive(&facts(), &observed).agent;
    assert_eq!(agent.health, Health::Degraded);
    assert_eq!(
        agent.problems,
        [
            "API server did not answer",
            "FluxInstance API is not served"
        ]
    );
}

#[test]
fn policy_status_carries_the_upgrade_deadline_for_the_fleet_view() {
    let policy = Policy::parse(
        "apiVersion: tenantflux.io/v1alpha1\nkind: Policy\nmetadata: {name: p}\n\
         spec:\n  generation: 3\n  distribution:\n    upgradeDeadline:\n      \
         minimumVersion: v2.8.0\n      date: \"2000-01-01\"\n",
    )
    .unwrap();
    let instance: DynamicObject = fixture(INSTANCE_READY);
    let status = policy_status(&policy, Some(&instance));
    assert_eq!(
        status.upgrade_deadline,
        Some(UpgradeDeadline {
            minimum_version: "2.8.0".into(),
            date: "2000-01-01".into(),
            warn_days: 30,
        })
    );
    let without = Policy::parse(include_str!(
        "../../../core/src/policy/fixtures/policy-minimal.yaml"
    ))
    .unwrap();
    assert_eq!(policy_status(&without, None).upgrade_deadline, None);
}

#[test]
fn helm_writing_an_adopted_instance_again_is_a_problem() {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    let meta = |labels: &[(&str, &str)], annotations: &[(&str, &str)]| ObjectMeta {
        name: Some("flux".into()),
        namespace: Some("cozy-fluxcd".into()),
        labels: Some(
            labels
                .iter()
                .map(|(k, v)| ((*k).into(), (*v).into()))
                .collect(),
        ),
        annotations: Some(
            annotations
                .iter()
                .map(|(k, v)| ((*k).into(), (*v).into()))
                .collect(),
        ),
        ..ObjectMeta::default()
    };
    let adopted = (
        "tenantflux.io/adopted-from-helm-release",
        "cozy-fluxcd/fluxcd",
    );
    // Adopted and released from Helm: nothing to report; Helm's, never adopted: not ours to say.
    assert_eq!(super::helm_wrote_adopted(&meta(&[], &[adopted])), None);
    assert_eq!(
        super::helm_wrote_adopted(&meta(
            &[("app.kubernetes.io/managed-by", "Helm")],
            &[("meta.helm.sh/release-name", "fluxcd")]
        )),
        None
    );
    // Adopted, then written by Helm again (`helm upgrade --take-ownership`).
    let problem = super::helm_wrote_adopted(&meta(
        &[("app.kubernetes.io/managed-by", "Helm")],
        &[
            adopted,
            ("meta.helm.sh/release-name", "fluxcd"),
            ("meta.helm.sh/release-namespace", "cozy-fluxcd"),
        ],
    ))
    .unwrap();
    assert!(
        problem.starts_with("FluxInstance cozy-fluxcd/flux, adopted from Helm release cozy-fluxcd/fluxcd, carries Helm's ownership again (release cozy-fluxcd/fluxcd)"),
        "{problem}"
    );
    assert!(
        problem.contains("kubectl tenantflux adopt apply"),
        "{problem}"
    );
}

#[test]
fn an_operator_gone_under_an_instance_is_a_problem_only_when_the_agent_only_observes() {
    let stranded = Observed {
        operator: Tracked::absent(),
        instance: dynamic(INSTANCE_READY),
        ..Observed::default()
    };
    let status = derive(&facts(), &stranded);
    assert_eq!(status.agent.health, Health::Degraded);
    let problem = status
        .agent
        .problems
        .iter()
        .find(|p| p.starts_with("Deployment flux-system/flux-operator is gone"))
        .expect("the stranded FluxInstance is named");
    assert!(problem.contains("spec.operator.bundle"), "{problem}");
    // Nothing installed yet (no FluxInstance) is not stranding anything.
    let empty = Observed {
        operator: Tracked::absent(),
        instance: Tracked::absent(),
        ..Observed::default()
    };
    assert!(derive(&facts(), &empty).agent.problems.is_empty());
    // With a bundle the install loop restores it and reports its own phase.
    let installing = Observed {
        install: Some(crate::operator::InstallState::initial(
            &crate::operator::source::BundleSource::ConfigMap("bundle".into()),
        )),
        ..stranded
    };
    assert!(
        !derive(&facts(), &installing)
            .agent
            .problems
            .iter()
            .any(|p| p.contains("is gone")),
    );
}

#[test]
fn the_adoption_marks_problem_is_reported() {
    let observed = Observed {
        adoption: Some("objects adopted from Helm are at risk: gone: Service x/y".into()),
        ..Observed::default()
    };
    let status = derive(&facts(), &observed);
    assert_eq!(status.agent.health, Health::Degraded);
    assert!(status.agent.problems[0].contains("at risk"));
}
