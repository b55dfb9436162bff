//! `flux stats` from the caches: per reconciled kind, how many objects run, fail and are
//! suspended, and the artifact storage sources hold. No list of the cluster.

use crate::workloads::{
    WorkloadsError,
    access::{Access, Need},
    catalog::{self, FluxKind, Revision},
    model::Skipped,
    rows::Cached,
};

use super::{Inspector, Result, decide};

/// The kinds `flux stats` counts, in its order.
const FLUX_ORDER: &[&str] = &[
    "GitRepository",
    "OCIRepository",
    "HelmRepository",
    "HelmChart",
    "Bucket",
    "Kustomization",
    "HelmRelease",
    "Alert",
    "Provider",
    "Receiver",
    "ImageUpdateAutomation",
    "ImagePolicy",
    "ImageRepository",
];

/// The counts of one kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KindStats {
    pub kind: &'static FluxKind,
    /// Not suspended, as flux counts "running".
    pub running: u32,
    /// Ready=False.
    pub failing: u32,
    pub suspended: u32,
    pub storage_bytes: u64,
    pub has_storage: bool,
}

/// What `stats` answers.
#[derive(Clone, Debug)]
pub struct Stats {
    pub kinds: Vec<KindStats>,
    pub skipped: Vec<Skipped>,
}

/// Counts `objects` of `kind` as flux does.
pub fn count<'a>(
    kind: &'static FluxKind,
    objects: impl IntoIterator<Item = &'a Cached>,
) -> KindStats {
    let mut stats = KindStats {
        kind,
        running: 0,
        failing: 0,
        suspended: 0,
        storage_bytes: 0,
        has_storage: kind.revision == Revision::Artifact,
    };
    for object in objects {
        if object.row.suspended {
            stats.suspended += 1;
        } else {
            stats.running += 1;
        }
        if object
            .conditions
            .iter()
            .any(|(type_, status)| type_ == "Ready" && status == "False")
        {
            stats.failing += 1;
        }
        stats.storage_bytes += object.row.artifact_size.unwrap_or_default();
    }
    stats
}

/// The kinds `stats` counts of the `known` ones: flux's, in its order, then the other
/// controllable kinds (ArtifactGenerator, flux-operator's, the ones discovery found beyond the
/// table).
fn counted(known: &[&'static FluxKind]) -> Vec<&'static FluxKind> {
    let mut kinds: Vec<&'static FluxKind> = FLUX_ORDER
        .iter()
        .filter_map(|name| catalog::KINDS.iter().find(|k| k.kind == *name))
        .collect();
    for &kind in known {
        if kind.controllable() && !kinds.iter().any(|k| std::ptr::eq(*k, kind)) {
            kinds.push(kind);
        }
    }
    kinds
}

impl Inspector {
    /// The counts of every counted kind the cluster serves that the caller may list in
    /// `namespace` (every namespace when `None`).
    pub async fn stats(&self, access: &impl Access, namespace: Option<&str>) -> Result<Stats> {
        access.identify().await?;
        if let Some(namespace) = namespace {
            tenantflux_core::names::namespace("namespace", namespace)
                .map_err(WorkloadsError::InvalidArgument)?;
        }
        let served = self.served().await?;
        let items: Vec<_> = counted(&self.caches.known())
            .into_iter()
            .filter_map(|kind| served.iter().find(|c| std::ptr::eq(c.kind, kind)).cloned())
            .map(|cache| {
                let need = Need::new("list", cache.kind, namespace);
                (cache, need)
            })
            .collect();
        let (permitted, denied) = decide(access, items).await?;
        if permitted.is_empty()
            && let Some((_, reason)) = denied.first()
        {
            return Err(crate::workloads::access::AccessError::Denied(reason.clone()).into());
        }
        let mut kinds = Vec::new();
        for cache in permitted {
            let cache = self.cache_of(cache.kind).await?;
            let objects = cache.store.state();
            kinds.push(count(
                cache.kind,
                objects
                    .iter()
                    .map(|o| &**o)
                    .filter(|o| namespace.is_none_or(|ns| o.namespace == ns)),
            ));
        }
        Ok(Stats {
            kinds,
            skipped: denied
                .into_iter()
                .map(|(cache, reason)| Skipped {
                    kind: cache.kind.kind,
                    reason,
                })
                .collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use kube::api::DynamicObject;

    use super::*;

    fn cached(kind: &FluxKind, suspend: bool, ready: &str, size: Option<u64>) -> Cached {
        let object: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "v", "kind": kind.kind,
            "metadata": {"name": "a", "namespace": "ns"},
            "spec": {"suspend": suspend},
            "status": {"conditions": [{"type": "Ready", "status": ready}],
                       "artifact": size.map(|s| serde_json::json!({"size": s}))}
        }))
        .unwrap();
        Cached::new(kind, object)
    }

    #[test]
    fn counts_running_failing_suspended_and_storage_as_flux() {
        let git = catalog::find("gitrepository").unwrap();
        let objects = [
            cached(git, false, "True", Some(1000)),
            cached(git, false, "False", None),
            cached(git, true, "False", Some(24)),
            cached(git, true, "Unknown", None),
        ];
        let stats = count(git, &objects);
        assert_eq!(
            (
                stats.running,
                stats.failing,
                stats.suspended,
                stats.storage_bytes
            ),
            (2, 2, 2, 1024)
        );
        assert!(stats.has_storage);
        let ks = catalog::find("ks").unwrap();
        assert!(!count(ks, []).has_storage);
    }

    #[test]
    fn flux_kinds_come_first_in_flux_order() {
        let mut registry = catalog::Registry::default();
        let probe = registry
            .entry("Probe", "probe.toolkit.fluxcd.io", "probes", true)
            .unwrap();
        let read_only = registry
            .entry("Probe", "probe.toolkit.fluxcd.io", "probes", false)
            .unwrap();
        let known: Vec<&'static FluxKind> =
            catalog::KINDS.iter().chain([probe, read_only]).collect();
        let kinds: Vec<_> = counted(&known).iter().map(|k| k.kind).collect();
        assert_eq!(
            &kinds[..3],
            ["GitRepository", "OCIRepository", "HelmRepository"]
        );
        assert_eq!(kinds[5], "Kustomization");
        assert!(kinds.contains(&"ResourceSet"));
        assert!(!kinds.contains(&"FluxReport"));
        // A discovered kind is counted last, once: the read-only entry is not.
        assert_eq!(kinds.last(), Some(&"Probe"));
        assert_eq!(kinds.iter().filter(|k| **k == "Probe").count(), 1);
    }
}
