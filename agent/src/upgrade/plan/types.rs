//! What the planner reads (facts from the cluster) and what it answers (the plan).

use serde_json::Value;
use tenantflux_core::policy::Release;

use crate::status::model::UpgradeDeadline;

/// What the planner needs to know about the cluster.
#[derive(Clone, Debug, Default)]
pub struct Facts {
    /// The FluxInstance's spec, if there is one.
    pub instance_spec: Option<Value>,
    /// The distribution it applied last (`status.lastAppliedRevision`).
    pub installed: Option<Release>,
    /// The API server's (major, minor).
    pub kubernetes: Option<(u64, u64)>,
    pub crds: Vec<CrdFacts>,
    /// Objects that Kustomizations applied, from their `status.inventory`.
    pub inventory: Vec<InventoryEntry>,
    /// Objects of Flux kinds written with some version, from `metadata.managedFields`.
    pub managed: Vec<ManagedEntry>,
    /// Days since the epoch (UTC), for the deadline.
    pub day: i64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CrdFacts {
    pub name: String,
    pub group: String,
    pub kind: String,
    pub stored_versions: Vec<String>,
    /// The version the CRD stores objects at now.
    pub storage_version: String,
    pub objects: i64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectRef {
    pub group: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub version: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InventoryEntry {
    /// namespace/name of the Kustomization.
    pub kustomization: String,
    /// Kind/namespace/name of its source.
    pub source: String,
    pub path: String,
    pub object: ObjectRef,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ManagedEntry {
    pub manager: String,
    pub object: ObjectRef,
}

/// Whether the plan's reader may see objects of a kind (group, kind) in a namespace.
pub type Sees<'a> = dyn Fn(&str, &str, &str) -> bool + Sync + 'a;

/// What an upgrade to the requested release would do and what stops it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct UpgradePlan {
    /// The request as given.
    pub requested: String,
    /// The release it resolves to; empty when nothing resolves.
    pub target: String,
    /// What spec.distribution.version would become.
    pub written_version: String,
    /// The distribution the FluxInstance runs now.
    pub current_version: String,
    /// spec.distribution.version now.
    pub current_range: String,
    /// The cluster's Kubernetes version and the target's minimum.
    pub kubernetes_version: String,
    pub kubernetes_minimum: String,
    /// The held policy, its range, and its upgrade deadline.
    pub policy: String,
    pub policy_range: String,
    pub deadline: Option<UpgradeDeadline>,
    pub blockers: Vec<Finding>,
    pub warnings: Vec<Finding>,
    /// CRDs whose status.storedVersions hold versions the target does not serve.
    pub migrations: Vec<CrdMigration>,
    /// Objects that use an API version the target removes, that the reader may see.
    pub removed_api_uses: Vec<RemovedApiUse>,
    /// How many more there are, in namespaces the reader may not list.
    pub hidden_removed_api_uses: u32,
    /// Where the list of known releases comes from.
    pub known_releases: String,
    pub blocked: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Finding {
    /// A stable identifier (policy, kubernetes, downgrade, unknown-release, …).
    pub code: String,
    pub message: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CrdMigration {
    pub crd: String,
    pub kind: String,
    pub stored_versions: Vec<String>,
    /// The version objects are rewritten at.
    pub storage_version: String,
    /// The stored versions the target does not serve.
    pub unserved: Vec<String>,
    pub objects: i64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RemovedApiUse {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    /// The removed version it is applied or written with.
    pub api_version: String,
    /// The version to write instead.
    pub replacement: String,
    /// namespace/name of the Kustomization whose inventory holds it; empty when found from
    /// metadata.managedFields.
    pub kustomization: String,
    pub source: String,
    pub path: String,
    /// The field manager that wrote it with that version.
    pub manager: String,
    /// Whether it blocks the upgrade.
    pub blocking: bool,
}
