//! The stable `-o json|yaml` shapes of `upgrade plan` and of an upgrade's state, made from
//! the agent's answers.

use serde::Serialize;
use tenantflux_proto::v1 as pb;

/// The stable `-o json|yaml` shape of `upgrade plan`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanView {
    pub requested: String,
    pub target: String,
    pub written_version: String,
    pub current_version: String,
    pub current_range: String,
    pub kubernetes_version: String,
    pub kubernetes_minimum: String,
    pub policy: String,
    pub policy_range: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deadline: Option<DeadlineView>,
    pub known_releases: String,
    pub flux_cli: String,
    pub blocked: bool,
    pub blockers: Vec<FindingView>,
    pub warnings: Vec<FindingView>,
    pub migrations: Vec<MigrationView>,
    pub removed_api_uses: Vec<RemovedUseView>,
    /// Uses in namespaces the caller may not list: counted by the agent, not named.
    pub hidden_removed_api_uses: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeadlineView {
    pub minimum_version: String,
    pub date: String,
    pub warn_days: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FindingView {
    pub code: String,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MigrationView {
    pub crd: String,
    pub kind: String,
    pub stored_versions: Vec<String>,
    pub storage_version: String,
    pub unserved: Vec<String>,
    pub objects: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RemovedUseView {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub api_version: String,
    pub replacement: String,
    pub kustomization: String,
    pub source: String,
    pub path: String,
    pub manager: String,
    pub blocking: bool,
}

fn findings(list: Vec<pb::Finding>) -> Vec<FindingView> {
    list.into_iter()
        .map(|f| FindingView {
            code: f.code,
            message: f.message,
        })
        .collect()
}

impl From<pb::UpgradePlan> for PlanView {
    fn from(p: pb::UpgradePlan) -> Self {
        Self {
            requested: p.requested,
            target: p.target,
            written_version: p.written_version,
            current_version: p.current_version,
            current_range: p.current_range,
            kubernetes_version: p.kubernetes_version,
            kubernetes_minimum: p.kubernetes_minimum,
            policy: p.policy,
            policy_range: p.policy_range,
            deadline: p.deadline.map(|d| DeadlineView {
                minimum_version: d.minimum_version,
                date: d.date,
                warn_days: d.warn_days,
            }),
            known_releases: p.known_releases,
            flux_cli: String::new(),
            blocked: p.blocked,
            blockers: findings(p.blockers),
            warnings: findings(p.warnings),
            migrations: p
                .migrations
                .into_iter()
                .map(|m| MigrationView {
                    crd: m.crd,
                    kind: m.kind,
                    stored_versions: m.stored_versions,
                    storage_version: m.storage_version,
                    unserved: m.unserved,
                    objects: m.objects,
                })
                .collect(),
            removed_api_uses: p
                .removed_api_uses
                .into_iter()
                .map(|u| RemovedUseView {
                    kind: u.kind,
                    namespace: u.namespace,
                    name: u.name,
                    api_version: u.api_version,
                    replacement: u.replacement,
                    kustomization: u.kustomization,
                    source: u.source,
                    path: u.path,
                    manager: u.manager,
                    blocking: u.blocking,
                })
                .collect(),
            hidden_removed_api_uses: p.hidden_removed_api_uses,
        }
    }
}

/// The stable `-o json|yaml` shape of an upgrade's state (`apply`'s final report).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StateView {
    pub present: bool,
    pub id: String,
    pub requested: String,
    pub target: String,
    pub written_version: String,
    pub from_version: String,
    /// `migrating`, `bumping`, `waiting`, `succeeded`, `failed` or `unknown`.
    #[serde(serialize_with = "crate::state::word")]
    pub phase: pb::UpgradePhase,
    pub message: String,
    pub crds: Vec<CrdView>,
    pub bumped: bool,
    pub instance_generation: i64,
    pub concurrency: u32,
    pub started_at: String,
    pub finished_at: String,
    pub requested_by: String,
    pub runs: u32,
    /// The post-upgrade health check: the Kustomizations Ready when the version was bumped.
    pub kustomizations: Vec<KustomizationHealthView>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KustomizationHealthView {
    pub namespace: String,
    pub name: String,
    pub revision: String,
    pub ready_again: bool,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CrdView {
    pub crd: String,
    pub storage_version: String,
    pub total: i64,
    pub migrated: i64,
    pub done: bool,
    pub attempts: u32,
    pub seconds: f64,
}

impl StateView {
    pub(super) fn finished(&self) -> bool {
        matches!(
            self.phase,
            pb::UpgradePhase::Succeeded | pb::UpgradePhase::Failed
        )
    }
}

impl From<pb::UpgradeState> for StateView {
    fn from(s: pb::UpgradeState) -> Self {
        let phase = s.phase();
        Self {
            present: s.present,
            id: s.id,
            requested: s.requested,
            target: s.target,
            written_version: s.written_version,
            from_version: s.from_version,
            phase,
            message: s.message,
            crds: s
                .crds
                .into_iter()
                .map(|c| CrdView {
                    crd: c.crd,
                    storage_version: c.storage_version,
                    total: c.total,
                    migrated: c.migrated,
                    done: c.done,
                    attempts: c.attempts,
                    seconds: c.seconds,
                })
                .collect(),
            bumped: s.bumped,
            instance_generation: s.instance_generation,
            concurrency: s.concurrency,
            started_at: s.started_at,
            finished_at: s.finished_at,
            requested_by: s.requested_by,
            runs: s.runs,
            kustomizations: s
                .kustomizations
                .into_iter()
                .map(|k| KustomizationHealthView {
                    namespace: k.namespace,
                    name: k.name,
                    revision: k.revision,
                    ready_again: k.ready_again,
                    message: k.message,
                })
                .collect(),
        }
    }
}
