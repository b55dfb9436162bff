//! Domain types to `tenantflux.v1` messages: the only place that knows both. Each capability
//! module reports in its own types; the services convert at the edge with these.

use std::time::SystemTime;

use prost_types::Timestamp;
use tenantflux_core::policy::Trust;
use tenantflux_proto::v1 as wire;

use crate::{
    operator::OperatorPhase,
    status::model,
    upgrade::{
        health::Healthy,
        plan::{CrdMigration, Finding, RemovedApiUse, UpgradePlan},
        state::{CrdRecord, Phase, Record},
    },
};

fn time(time: SystemTime) -> Timestamp {
    time.into()
}

/// A unix time in seconds (the policy's signed claims keep them so), as protobuf carries it.
pub fn timestamp(unix: i64) -> Timestamp {
    Timestamp {
        seconds: unix,
        nanos: 0,
    }
}

impl From<OperatorPhase> for wire::OperatorPhase {
    fn from(phase: OperatorPhase) -> Self {
        match phase {
            OperatorPhase::NotInstalled => Self::NotInstalled,
            OperatorPhase::WaitingForApi => Self::WaitingForApi,
            OperatorPhase::ApplyingCrds => Self::ApplyingCrds,
            OperatorPhase::WaitingForOperator => Self::WaitingForOperator,
            OperatorPhase::Ready => Self::Ready,
            OperatorPhase::Failed => Self::Failed,
        }
    }
}

impl From<model::Health> for wire::Health {
    fn from(health: model::Health) -> Self {
        match health {
            model::Health::Ok => Self::Ok,
            model::Health::Degraded => Self::Degraded,
        }
    }
}

/// A condition's status as Kubernetes writes it; the API server admits no other word, so
/// anything else is UNSPECIFIED.
pub fn condition_status(status: &str) -> wire::ConditionStatus {
    match status {
        "True" => wire::ConditionStatus::True,
        "False" => wire::ConditionStatus::False,
        "Unknown" => wire::ConditionStatus::Unknown,
        _ => wire::ConditionStatus::Unspecified,
    }
}

impl From<Phase> for wire::UpgradePhase {
    fn from(phase: Phase) -> Self {
        match phase {
            Phase::Migrating => Self::Migrating,
            Phase::Bumping => Self::Bumping,
            Phase::Waiting => Self::Waiting,
            Phase::Succeeded => Self::Succeeded,
            Phase::Failed => Self::Failed,
        }
    }
}

impl From<model::Status> for wire::Status {
    fn from(status: model::Status) -> Self {
        Self {
            agent: Some(status.agent.into()),
            operator: Some(status.operator.into()),
            instance: Some(status.instance.into()),
            policy: status.policy.map(Into::into),
            observed_at: status.observed_at.map(time),
        }
    }
}

impl From<model::AgentInfo> for wire::AgentInfo {
    fn from(agent: model::AgentInfo) -> Self {
        Self {
            version: agent.version,
            namespace: agent.namespace,
            health: wire::Health::from(agent.health).into(),
            problems: agent.problems,
            kubernetes_version: agent.kubernetes_version,
            started_at: Some(time(agent.started_at)),
            cluster_uid: agent.cluster_uid,
            cluster_name: agent.cluster_name,
        }
    }
}

impl From<model::OperatorStatus> for wire::OperatorStatus {
    fn from(operator: model::OperatorStatus) -> Self {
        Self {
            phase: wire::OperatorPhase::from(operator.phase).into(),
            reason: operator.reason,
            version: operator.version,
            namespace: operator.namespace,
            ready_replicas: operator.ready_replicas,
            desired_replicas: operator.desired_replicas,
            bundle_digest: operator.bundle_digest,
            last_transition: operator.last_transition.map(time),
            source: operator.source,
            notices: operator.notices,
            trust: match operator.trust {
                Trust::None => wire::ReleaseTrust::Unspecified,
                Trust::Known => wire::ReleaseTrust::Known,
                Trust::Vouched { .. } => wire::ReleaseTrust::Vouched,
            }
            .into(),
            vouched_generation: match operator.trust {
                Trust::Vouched { generation } => generation,
                Trust::None | Trust::Known => 0,
            },
        }
    }
}

impl From<model::Condition> for wire::Condition {
    fn from(condition: model::Condition) -> Self {
        Self {
            r#type: condition.type_,
            status: condition_status(&condition.status).into(),
            reason: condition.reason,
            message: condition.message,
            last_transition: condition.last_transition.map(time),
        }
    }
}

impl From<model::Component> for wire::Component {
    fn from(component: model::Component) -> Self {
        Self {
            name: component.name,
            image: component.image,
            ready: component.ready,
            status: component.status,
        }
    }
}

impl From<model::InstanceStatus> for wire::InstanceStatus {
    fn from(instance: model::InstanceStatus) -> Self {
        Self {
            present: instance.present,
            name: instance.name,
            namespace: instance.namespace,
            ready: instance.ready.map(Into::into),
            requested_version: instance.requested_version,
            distribution_version: instance.distribution_version,
            registry: instance.registry,
            last_applied_revision: instance.last_applied_revision,
            components: instance.components.into_iter().map(Into::into).collect(),
            suspended: instance.suspended,
        }
    }
}

impl From<model::PolicyStatus> for wire::PolicyStatus {
    fn from(policy: model::PolicyStatus) -> Self {
        Self {
            generation: policy.generation,
            name: policy.name,
            compliant: policy.compliant,
            violations: policy.violations,
            warnings: policy.warnings,
            upgrade_deadline: policy.upgrade_deadline.map(Into::into),
            key_id: policy.key_id,
            expires_at: policy.expires_at.map(time),
            stale: policy.stale,
            enforcement: policy.enforcement.map(enforcement),
        }
    }
}

/// The enforcement verdict on the wire (both types live in other crates: no `From`).
pub fn enforcement(verdict: model::Enforcement) -> wire::Enforcement {
    wire::Enforcement {
        enforced: verdict.enforced,
        since: Some(timestamp(verdict.since)),
        checked_at: Some(timestamp(verdict.checked_at)),
        reason: verdict.reason,
    }
}

impl From<model::UpgradeDeadline> for wire::UpgradeDeadline {
    fn from(deadline: model::UpgradeDeadline) -> Self {
        Self {
            minimum_version: deadline.minimum_version,
            date: deadline.date,
            warn_days: deadline.warn_days,
        }
    }
}

impl From<UpgradePlan> for wire::UpgradePlan {
    fn from(plan: UpgradePlan) -> Self {
        let findings = |f: Vec<Finding>| f.into_iter().map(Into::into).collect();
        Self {
            requested: plan.requested,
            target: plan.target,
            written_version: plan.written_version,
            current_version: plan.current_version,
            current_range: plan.current_range,
            kubernetes_version: plan.kubernetes_version,
            kubernetes_minimum: plan.kubernetes_minimum,
            policy: plan.policy,
            policy_range: plan.policy_range,
            deadline: plan.deadline.map(Into::into),
            blockers: findings(plan.blockers),
            warnings: findings(plan.warnings),
            migrations: plan.migrations.into_iter().map(Into::into).collect(),
            removed_api_uses: plan.removed_api_uses.into_iter().map(Into::into).collect(),
            hidden_removed_api_uses: plan.hidden_removed_api_uses,
            known_releases: plan.known_releases,
            blocked: plan.blocked,
        }
    }
}

impl From<Finding> for wire::Finding {
    fn from(finding: Finding) -> Self {
        Self {
            code: finding.code,
            message: finding.message,
        }
    }
}

impl From<CrdMigration> for wire::CrdMigration {
    fn from(migration: CrdMigration) -> Self {
        Self {
            crd: migration.crd,
            kind: migration.kind,
            stored_versions: migration.stored_versions,
            storage_version: migration.storage_version,
            unserved: migration.unserved,
            objects: migration.objects,
        }
    }
}

impl From<RemovedApiUse> for wire::RemovedApiUse {
    fn from(usage: RemovedApiUse) -> Self {
        Self {
            kind: usage.kind,
            namespace: usage.namespace,
            name: usage.name,
            api_version: usage.api_version,
            replacement: usage.replacement,
            kustomization: usage.kustomization,
            source: usage.source,
            path: usage.path,
            manager: usage.manager,
            blocking: usage.blocking,
        }
    }
}

impl From<&Record> for wire::UpgradeState {
    fn from(record: &Record) -> Self {
        Self {
            present: true,
            id: record.id.clone(),
            requested: record.requested.clone(),
            target: record.target.clone(),
            written_version: record.written_version.clone(),
            from_version: record.from_version.clone(),
            from_range: record.from_range.clone(),
            phase: wire::UpgradePhase::from(record.phase).into(),
            message: record.message.clone(),
            crds: record.crds.iter().map(Into::into).collect(),
            bumped: record.bumped,
            instance_generation: record.instance_generation,
            concurrency: record.concurrency,
            started_at: record.started_at.clone(),
            updated_at: record.updated_at.clone(),
            finished_at: record.finished_at.clone(),
            deadline: record.deadline(),
            requested_by: record.requested_by.clone(),
            runs: record.runs,
            kustomizations: record
                .ready_before
                .iter()
                .flatten()
                .map(Into::into)
                .collect(),
        }
    }
}

impl From<&CrdRecord> for wire::CrdProgress {
    fn from(crd: &CrdRecord) -> Self {
        Self {
            crd: crd.crd.clone(),
            storage_version: crd.storage_version.clone(),
            total: crd.total,
            migrated: crd.migrated,
            done: crd.done,
            attempts: crd.attempts,
            seconds: crd.seconds,
        }
    }
}

impl From<&Healthy> for wire::KustomizationHealth {
    fn from(healthy: &Healthy) -> Self {
        Self {
            namespace: healthy.namespace.clone(),
            name: healthy.name.clone(),
            revision: healthy.revision.clone(),
            ready_again: healthy.ready_again,
            message: healthy.message.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reports_its_phase_and_its_deadline_as_rfc3339() {
        let record = Record {
            phase: Phase::Migrating,
            ready_by: 1_700_000_000,
            ..Record::default()
        };
        let state = wire::UpgradeState::from(&record);
        assert_eq!(state.phase(), wire::UpgradePhase::Migrating);
        assert_eq!(state.deadline, "2023-11-14T22:13:20Z");
        assert!(state.present);
        assert_eq!(wire::UpgradeState::from(&Record::default()).deadline, "");
    }

    #[test]
    fn an_operator_phase_keeps_its_wire_value() {
        for phase in OperatorPhase::ALL {
            let wire = wire::OperatorPhase::from(phase);
            assert_eq!(
                wire.as_str_name()
                    .trim_start_matches("OPERATOR_PHASE_")
                    .to_ascii_lowercase(),
                phase.name()
            );
        }
    }

    #[test]
    fn an_upgrade_phase_keeps_its_wire_value() {
        for phase in [
            Phase::Migrating,
            Phase::Bumping,
            Phase::Waiting,
            Phase::Succeeded,
            Phase::Failed,
        ] {
            let wire = wire::UpgradePhase::from(phase);
            assert_eq!(
                wire.as_str_name()
                    .trim_start_matches("UPGRADE_PHASE_")
                    .to_ascii_lowercase(),
                phase.name()
            );
        }
    }

    #[test]
    fn a_condition_status_is_read_as_kubernetes_writes_it() {
        for (word, wire) in [
            ("True", wire::ConditionStatus::True),
            ("False", wire::ConditionStatus::False),
            ("Unknown", wire::ConditionStatus::Unknown),
            ("true", wire::ConditionStatus::Unspecified),
            ("", wire::ConditionStatus::Unspecified),
        ] {
            assert_eq!(condition_status(word), wire, "{word:?}");
        }
    }
}
