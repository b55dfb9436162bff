//! The pure half of status: from the objects the watchers hold to the [`Status`] report.

use std::{collections::BTreeMap, time::SystemTime};

use k8s_openapi::{api::apps::v1::Deployment, jiff::Timestamp};
use kube::api::DynamicObject;
use serde_json::Value;

pub mod model;

use self::model::{
    AgentInfo, Component, Condition, Health, InstanceStatus, OperatorPhase, OperatorStatus,
    PolicyStatus, Status, UpgradeDeadline,
};

use tenantflux_core::{
    MANAGED_BY_LABEL,
    flux::{
        ADOPTED_FROM_HELM_ANNOTATION, INSTANCE_NAME, OPERATOR_DEPLOYMENT,
        OPERATOR_RECONCILE_ANNOTATION, image_tag,
    },
    policy::Policy,
};

use crate::{operator::InstallState, policy::store::Held};

/// The policy's upgrade deadline as the API reports it.
pub fn upgrade_deadline(policy: &Policy) -> Option<UpgradeDeadline> {
    policy.upgrade_deadline().map(|d| UpgradeDeadline {
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
    /// What puts the objects an adoption took from Helm at risk (`adopt::watch_marks`).
    pub adoption: Option<String>,
}

/// The status the agent reports for what it observed. `observed_at` is left empty: it is the
/// time of the last change, which only the publisher knows.
pub fn derive(facts: &AgentFacts, observed: &Observed) -> Status {
    let mut problems: Vec<String> = observed
        .problems
        .values()
        .cloned()
        .chain(observed.policy.all_problems())
        .collect();
    if let (Some(accepted), Some(verdict)) =
        (&observed.policy.accepted, &observed.policy.enforcement)
        && !verdict.enforced
    {
        problems.push(format!(
            "policy generation {} is NOT ENFORCED by the API server since {}: {}",
            accepted.policy.generation(),
            tenantflux_core::policy::signing::format_timestamp(verdict.since),
            verdict.reason
        ));
    }
    problems.extend(
        observed
            .instance
            .object
            .as_ref()
            .and_then(|i| helm_wrote_adopted(&i.metadata)),
    );
    problems.extend(observed.adoption.clone());
    problems.extend(operator_gone(&facts.operator_namespace, observed));
    Status {
        agent: AgentInfo {
            version: facts.version.clone(),
            namespace: facts.namespace.clone(),
            health: if problems.is_empty() {
                Health::Ok
            } else {
                Health::Degraded
            },
            problems,
            kubernetes_version: observed.kubernetes_version.clone().unwrap_or_default(),
            started_at: facts.started_at,
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
        },
        operator: with_install(
            operator_status(&facts.operator_namespace, &observed.operator),
            observed.install.as_ref(),
        ),
        instance: instance_status(
            observed.instance.object.as_ref(),
            observed.report.object.as_ref(),
        ),
        policy: observed.policy.accepted.as_ref().map(|accepted| {
            let mut status = policy_status(&accepted.policy, observed.instance.object.as_ref());
            // Verified against the installed key, so it is that key's id.
            status.key_id.clone_from(&accepted.signed.key_id);
            if let Some(validity) = accepted.validity {
                status.expires_at = Some(unix_time(validity.expires_at));
                status.stale = accepted.is_stale_at(tenantflux_core::policy::signing::now());
            }
            status.enforcement.clone_from(&observed.policy.enforcement);
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
        enforcement: None,
    }
}

fn operator_status(namespace: &str, tracked: &Tracked<Deployment>) -> OperatorStatus {
    let mut status = OperatorStatus {
        namespace: namespace.to_owned(),
        ..OperatorStatus::default()
    };
    let Some(deployment) = &tracked.object else {
        if tracked.synced {
            status.phase = OperatorPhase::NotInstalled;
            status.reason =
                format!("no Deployment {OPERATOR_DEPLOYMENT:?} in namespace {namespace:?}");
        } else {
            status.phase = OperatorPhase::WaitingForApi;
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
        .map(|t| SystemTime::from(t.0));

    if available.is_some_and(|c| c.status == "True") {
        status.phase = OperatorPhase::Ready;
        return status;
    }
    status.phase = OperatorPhase::WaitingForOperator;
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
    status.phase = install.phase;
    status.reason = install.reason.clone();
    if status.version.is_empty() {
        status.version = install.version.clone();
    }
    status.bundle_digest = install.digest.clone();
    status.trust = install.trust;
    status.source = install.source.clone();
    status.notices.clone_from(&install.notices);
    status.last_transition = Some(install.last_transition);
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

/// flux-operator's Deployment gone while its FluxInstance exists, and the agent only observes
/// the operator (no bundle): nothing applies a change of the FluxInstance or repairs Flux any
/// more, while the controllers keep running, so nothing else would show it. (With a bundle the
/// install loop restores the Deployment and reports its own phase.)
fn operator_gone(namespace: &str, observed: &Observed) -> Option<String> {
    let gone = observed.install.is_none()
        && observed.operator.synced
        && observed.operator.object.is_none()
        && observed.instance.object.is_some();
    gone.then(|| format!(
        "Deployment {namespace}/{OPERATOR_DEPLOYMENT} is gone while FluxInstance {namespace}/{INSTANCE_NAME} exists: Flux's controllers keep running, but no change of the FluxInstance, upgrade or repair is applied; the agent only observes the operator here, so have the platform give it a bundle to install from (the policy's spec.operator.bundle, or the chart's operatorBundle), which restores it, or reinstall flux-operator in {namespace}"
    ))
}

/// A FluxInstance adopted from a Helm release that carries Helm's ownership again: Helm wrote
/// it after the adoption (`helm upgrade --take-ownership`), and its next upgrade may revert
/// the tenant's spec. Reported as a problem until the ownership is removed again.
pub fn helm_wrote_adopted(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> Option<String> {
    let annotations = meta.annotations.as_ref()?;
    let adopted_from = annotations.get(ADOPTED_FROM_HELM_ANNOTATION)?;
    let helm_label = meta
        .labels
        .as_ref()
        .and_then(|l| l.get(MANAGED_BY_LABEL))
        .is_some_and(|v| v == "Helm");
    let release = annotations.get("meta.helm.sh/release-name");
    if !helm_label && release.is_none() {
        return None;
    }
    let namespace = meta.namespace.as_deref().unwrap_or_default();
    let release = match (annotations.get("meta.helm.sh/release-namespace"), release) {
        (Some(ns), Some(name)) => format!("{ns}/{name}"),
        (None, Some(name)) => format!("{namespace}/{name}"),
        _ => adopted_from.clone(),
    };
    Some(format!(
        "FluxInstance {namespace}/{INSTANCE_NAME}, adopted from Helm release {adopted_from}, carries Helm's ownership again (release {release}): Helm wrote it after the adoption, and its next upgrade may revert the tenant's spec; run `kubectl tenantflux adopt apply` to remove Helm's ownership again, and delete the release's records (`kubectl tenantflux adopt plan` names them)"
    ))
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
        type_: str_at(ready, "/type"),
        status: str_at(ready, "/status"),
        reason: str_at(ready, "/reason"),
        message: str_at(ready, "/message"),
        last_transition: ready
            .get("lastTransitionTime")
            .and_then(Value::as_str)
            .and_then(|t| t.parse::<Timestamp>().ok())
            .map(SystemTime::from),
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

/// Unix seconds (as signed claims carry them) as a time; out of range is the epoch.
fn unix_time(seconds: i64) -> SystemTime {
    Timestamp::from_second(seconds).map_or(SystemTime::UNIX_EPOCH, SystemTime::from)
}

#[cfg(test)]
mod tests;
