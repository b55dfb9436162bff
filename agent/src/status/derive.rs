//! The pure half of status: from the objects the watchers hold to the proto `Status`.

use std::{collections::BTreeMap, time::SystemTime};

use k8s_openapi::{api::apps::v1::Deployment, apimachinery::pkg::apis::meta::v1::Time};
use kube::api::DynamicObject;
use serde_json::Value;
use tenantflux_proto::v1::{
    AgentInfo, Component, Condition, Health, InstanceStatus, OperatorPhase, OperatorStatus,
    PolicyStatus, Status,
};

use tenantflux_core::{
    flux::{OPERATOR_DEPLOYMENT, OPERATOR_RECONCILE_ANNOTATION, image_tag},
    policy::Policy,
};

use crate::{operator::InstallState, policy::store::Held};

/// The policy's upgrade deadline as the API reports it.
pub fn upgrade_deadline(policy: &Policy) -> Option<tenantflux_proto::v1::UpgradeDeadline> {
    policy
        .upgrade_deadline()
        .map(|d| tenantflux_proto::v1::UpgradeDeadline {
            minimum_version: d.minimum_version().to_owned(),
            date: d.date().to_owned(),
            warn_days: d.warn_days(),
        })
}

/// Facts about the agent itself that go into every status.
#[derive(Clone, Debug)]
pub struct AgentFacts {
    pub version: String,
    pub namespace: String,
    pub operator_namespace: String,
    pub started_at: SystemTime,
}

/// One watched object: `synced` once the first list answered, `object` if it exists.
#[derive(Clone, Debug)]
pub struct Tracked<K> {
    pub synced: bool,
    pub object: Option<K>,
}

impl<K> Default for Tracked<K> {
    fn default() -> Self {
        Self {
            synced: false,
            object: None,
        }
    }
}

impl<K> Tracked<K> {
    pub fn present(object: K) -> Self {
        Self {
            synced: true,
            object: Some(object),
        }
    }

    pub fn absent() -> Self {
        Self {
            synced: true,
            object: None,
        }
    }
}

/// What the agent watches, or fails to; a problem is keyed by where it comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Source {
    KubernetesApi,
    Operator,
    Instance,
    Report,
}

/// Everything the agent has observed; the input of [`derive`].
#[derive(Clone, Debug, Default)]
pub struct Observed {
    pub kubernetes_version: Option<String>,
    pub operator: Tracked<Deployment>,
    pub instance: Tracked<DynamicObject>,
    pub report: Tracked<DynamicObject>,
    /// One line per failing source, saying what is wrong with which object.
    pub problems: BTreeMap<Source, String>,
    /// The agent's own install, when it installs flux-operator (`--operator-bundle`).
    pub install: Option<InstallState>,
    /// The policy in force and the problems of its stored copy.
    pub policy: Held,
}

/// The status the agent reports for what it observed. `observed_at` is left empty: it is the
/// time of the last change, which only the publisher knows.
pub fn derive(facts: &AgentFacts, observed: &Observed) -> Status {
    let problems: Vec<String> = observed
        .problems
        .values()
        .chain(&observed.policy.problems)
        .cloned()
        .collect();
    Status {
        agent: Some(AgentInfo {
            version: facts.version.clone(),
            namespace: facts.namespace.clone(),
            health: if problems.is_empty() {
                Health::Ok
            } else {
                Health::Degraded
            } as i32,
            problems,
            kubernetes_version: observed.kubernetes_version.clone().unwrap_or_default(),
            started_at: Some(facts.started_at.into()),
            cluster_uid: observed
                .policy
                .cluster
                .as_ref()
                .map(|c| c.uid.clone())
                .unwrap_or_default(),
            cluster_name: observed
                .policy
                .cluster
                .as_ref()
                .and_then(|c| c.name.clone())
                .unwrap_or_default(),
        }),
        operator: Some(with_install(
            operator_status(&facts.operator_namespace, &observed.operator),
            observed.install.as_ref(),
        )),
        instance: Some(instance_status(
            observed.instance.object.as_ref(),
            observed.report.object.as_ref(),
        )),
        policy: observed.policy.accepted.as_ref().map(|accepted| {
            let mut status = policy_status(&accepted.policy, observed.instance.object.as_ref());
            // Verified against the installed key, so it is that key's id.
            status.key_id.clone_from(&accepted.signed.key_id);
            if let Some(validity) = accepted.validity {
                status.expires_at = Some(crate::server::convert::timestamp(validity.expires_at));
                status.stale = accepted.is_stale_at(tenantflux_core::policy::signing::now());
            }
            status
        }),
        observed_at: None,
    }
}

/// The policy and how the live FluxInstance fares against it (compliant when there is none:
/// the policy's defaults create one that complies).
fn policy_status(policy: &Policy, instance: Option<&DynamicObject>) -> PolicyStatus {
    let evaluation = instance
        .map(|i| policy.evaluate(i.data.get("spec").unwrap_or(&Value::Null)))
        .unwrap_or_default();
    PolicyStatus {
        generation: policy.generation(),
        name: policy.name().to_owned(),
        compliant: evaluation.compliant(),
        violations: evaluation
            .violations
            .into_iter()
            .map(|v| v.message)
            .collect(),
        warnings: evaluation.warnings,
        upgrade_deadline: upgrade_deadline(policy),
        key_id: String::new(),
        expires_at: None,
        stale: false,
    }
}

fn operator_status(namespace: &str, tracked: &Tracked<Deployment>) -> OperatorStatus {
    let mut status = OperatorStatus {
        namespace: namespace.to_owned(),
        ..OperatorStatus::default()
    };
    let Some(deployment) = &tracked.object else {
        if tracked.synced {
            status.set_phase(OperatorPhase::NotInstalled);
            status.reason =
                format!("no Deployment {OPERATOR_DEPLOYMENT:?} in namespace {namespace:?}");
        } else {
            status.set_phase(OperatorPhase::WaitingForApi);
            status.reason = format!(
                "the agent has not yet listed Deployment {namespace}/{OPERATOR_DEPLOYMENT}"
            );
        }
        return status;
    };

    status.version = operator_version(deployment);
    status.desired_replicas = deployment
        .spec
        .as_ref()
        .and_then(|s| s.replicas)
        .unwrap_or(1);
    let deploy_status = deployment.status.as_ref();
    status.ready_replicas = deploy_status.and_then(|s| s.ready_replicas).unwrap_or(0);
    let conditions = deploy_status
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default();
    let condition = |kind: &str| conditions.iter().find(|c| c.type_ == kind);
    let available = condition("Available");
    status.last_transition = available
        .and_then(|c| c.last_transition_time.as_ref())
        .map(timestamp);

    if available.is_some_and(|c| c.status == "True") {
        status.set_phase(OperatorPhase::Ready);
        return status;
    }
    status.set_phase(OperatorPhase::WaitingForOperator);
    let name = format!("Deployment {namespace}/{OPERATOR_DEPLOYMENT}");
    // A stalled rollout (ProgressDeadlineExceeded) explains more than "not available".
    let stalled = condition("Progressing").filter(|c| c.status == "False");
    status.reason = match stalled.or(available) {
        Some(c) => format!(
            "{name} is not available: {}: {}",
            c.reason.as_deref().unwrap_or("Unknown"),
            c.message.as_deref().unwrap_or("no message")
        ),
        None => format!(
            "{name} is not available yet: {}/{} replicas ready",
            status.ready_replicas, status.desired_replicas
        ),
    };
    status
}

/// When the agent installs flux-operator, its install loop knows the phase (it also watches the
/// Deployment): it overrides what observing the Deployment alone says. Replicas and the running
/// version still come from the Deployment.
fn with_install(mut status: OperatorStatus, install: Option<&InstallState>) -> OperatorStatus {
    let Some(install) = install else {
        return status;
    };
    status.set_phase(install.phase);
    status.reason = install.reason.clone();
    if status.version.is_empty() {
        status.version = install.version.clone();
    }
    status.bundle_digest = install.digest.clone();
    status.source = install.source.clone();
    status.notices.clone_from(&install.notices);
    status.last_transition = Some(install.last_transition.into());
    status
}

/// The label `app.kubernetes.io/version` if set, else the tag of the first container's image.
fn operator_version(deployment: &Deployment) -> String {
    if let Some(version) = deployment
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("app.kubernetes.io/version"))
        .filter(|v| !v.is_empty())
    {
        return version.clone();
    }
    deployment
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|s| s.containers.first())
        .and_then(|c| c.image.as_deref())
        .and_then(image_tag)
        .unwrap_or_default()
        .to_owned()
}

fn instance_status(
    instance: Option<&DynamicObject>,
    report: Option<&DynamicObject>,
) -> InstanceStatus {
    let Some(instance) = instance else {
        return InstanceStatus::default();
    };
    let data = &instance.data;
    let last_applied_revision = str_at(data, "/status/lastAppliedRevision");
    let report_version = report
        .map(|r| str_at(&r.data, "/spec/distribution/version"))
        .unwrap_or_default();
    let distribution_version = match last_applied_revision.split_once('@') {
        Some((version, _)) => version.to_owned(),
        None if !last_applied_revision.is_empty() => last_applied_revision.clone(),
        None => report_version,
    };
    let suspended = instance
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(OPERATOR_RECONCILE_ANNOTATION))
        .is_some_and(|v| v == "disabled");
    InstanceStatus {
        present: true,
        name: instance.metadata.name.clone().unwrap_or_default(),
        namespace: instance.metadata.namespace.clone().unwrap_or_default(),
        ready: ready_condition(data),
        requested_version: str_at(data, "/spec/distribution/version"),
        distribution_version,
        registry: str_at(data, "/spec/distribution/registry"),
        last_applied_revision,
        components: components(data, report.map(|r| &r.data)),
        suspended,
    }
}

fn ready_condition(data: &Value) -> Option<Condition> {
    let conditions = data.pointer("/status/conditions")?.as_array()?;
    let ready = conditions
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some("Ready"))?;
    Some(Condition {
        r#type: str_at(ready, "/type"),
        status: str_at(ready, "/status"),
        reason: str_at(ready, "/reason"),
        message: str_at(ready, "/message"),
        last_transition: ready
            .get("lastTransitionTime")
            .and_then(Value::as_str)
            .and_then(|t| t.parse().ok()),
    })
}

/// Whether the FluxReport lags its instance: the instance is Ready, yet the report still has a
/// component that is not. flux-operator writes the report when the instance reconciles, which
/// can be before the controllers' rollouts are seen as done, and then only every few minutes
/// unless asked (annotation `reconcile.fluxcd.io/requestedAt`).
pub fn report_lags(observed: &Observed) -> bool {
    let instance_ready = observed
        .instance
        .object
        .as_ref()
        .and_then(|i| ready_condition(&i.data))
        .is_some_and(|c| c.status == "True");
    let component_not_ready = observed
        .report
        .object
        .as_ref()
        .and_then(|r| r.data.pointer("/spec/components"))
        .and_then(Value::as_array)
        .is_some_and(|c| {
            c.iter()
                .any(|c| c.get("ready").and_then(Value::as_bool) != Some(true))
        });
    instance_ready && component_not_ready
}

/// Components with their readiness from the FluxReport when there is one; otherwise the images
/// the instance last applied, whose readiness the agent does not know.
fn components(instance: &Value, report: Option<&Value>) -> Vec<Component> {
    if let Some(reported) = report
        .and_then(|r| r.pointer("/spec/components"))
        .and_then(Value::as_array)
        .filter(|c| !c.is_empty())
    {
        return reported
            .iter()
            .map(|c| Component {
                name: str_at(c, "/name"),
                image: str_at(c, "/image"),
                ready: c.get("ready").and_then(Value::as_bool).unwrap_or(false),
                status: str_at(c, "/status"),
            })
            .collect();
    }
    instance
        .pointer("/status/components")
        .and_then(Value::as_array)
        .map(|applied| {
            applied
                .iter()
                .map(|c| {
                    let mut image = format!("{}:{}", str_at(c, "/repository"), str_at(c, "/tag"));
                    let digest = str_at(c, "/digest");
                    if !digest.is_empty() {
                        image = format!("{image}@{digest}");
                    }
                    Component {
                        name: str_at(c, "/name"),
                        image,
                        ready: false,
                        status: "readiness unknown: no FluxReport".into(),
                    }
                })
                .collect()
        })
        .unwrap_or_default()
}

fn str_at(value: &Value, pointer: &str) -> String {
    value
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

fn timestamp(time: &Time) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: time.0.as_second(),
        nanos: time.0.subsec_nanosecond(),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tenantflux_proto::v1::UpgradeDeadline;

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

    const OPERATOR_READY: &str = include_str!("fixtures/operator-ready.yaml");
    const OPERATOR_PROGRESSING: &str = include_str!("fixtures/operator-progressing.yaml");
    const OPERATOR_STALLED: &str = include_str!("fixtures/operator-stalled.yaml");
    const INSTANCE_READY: &str = include_str!("fixtures/instance-ready.yaml");
    const INSTANCE_NOT_READY: &str = include_str!("fixtures/instance-not-ready.yaml");
    const REPORT: &str = include_str!("fixtures/report.yaml");

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
        let operator = status.operator.unwrap();
        assert_eq!(operator.phase(), OperatorPhase::WaitingForApi);
        assert_eq!(operator.namespace, "flux-system");
        let agent = status.agent.unwrap();
        assert_eq!(agent.health(), Health::Ok);
        assert_eq!(agent.namespace, "tenantflux-system");
        assert_eq!(agent.version, "0.1.0");
        assert_eq!(agent.started_at.unwrap().seconds, 1_700_000_000);
        assert!(!status.instance.unwrap().present);
        assert!(status.policy.is_none());
    }

    #[test]
    fn operator_missing_is_not_installed() {
        let observed = Observed {
            operator: Tracked::absent(),
            ..Observed::default()
        };
        let operator = derive(&facts(), &observed).operator.unwrap();
        assert_eq!(operator.phase(), OperatorPhase::NotInstalled);
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
        let operator = derive(&facts(), &observed).operator.unwrap();
        assert_eq!(operator.phase(), OperatorPhase::Ready);
        assert_eq!(operator.version, "v0.58.1");
        assert_eq!(operator.reason, "");
        assert_eq!((operator.ready_replicas, operator.desired_replicas), (1, 1));
        assert_eq!(
            operator.last_transition.unwrap(),
            "2026-11-30T02:00:00Z".parse().unwrap()
        );
    }

    #[test]
    fn operator_not_available_waits_with_reason_and_image_tag_version() {
        let observed = Observed {
            operator: deployment(OPERATOR_PROGRESSING),
            ..Observed::default()
        };
        let operator = derive(&facts(), &observed).operator.unwrap();
        assert_eq!(operator.phase(), OperatorPhase::WaitingForOperator);
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
        let operator = derive(&facts(), &observed).operator.unwrap();
        assert_eq!(operator.phase(), OperatorPhase::WaitingForOperator);
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
        let instance = derive(&facts(), &observed).instance.unwrap();
        assert_eq!(instance, InstanceStatus::default());
    }

    #[test]
    fn instance_ready_takes_version_from_last_applied_revision() {
        let observed = Observed {
            instance: dynamic(INSTANCE_READY),
            ..Observed::default()
        };
        let instance = derive(&facts(), &observed).instance.unwrap();
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
                ready.r#type.as_str(),
                ready.status.as_str(),
                ready.reason.as_str()
            ),
            ("Ready", "True", "ReconciliationSucceeded")
        );
        assert_eq!(
            ready.last_transition.unwrap(),
            "2026-11-30T02:10:00Z".parse().unwrap()
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
        let instance = derive(&facts(), &observed).instance.unwrap();
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
        let instance = derive(&facts(), &observed).instance.unwrap();
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
        let instance = derive(&facts(), &observed).instance.unwrap();
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
        let agent = derive(&facts(), &observed).agent.unwrap();
        assert_eq!(agent.health(), Health::Degraded);
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
            "../../core/src/policy/fixtures/policy-minimal.yaml"
        ))
        .unwrap();
        assert_eq!(policy_status(&without, None).upgrade_deadline, None);
    }
}
