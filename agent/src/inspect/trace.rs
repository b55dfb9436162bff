//! `flux trace`, through ResourceSets as well: which Kustomization, HelmRelease or ResourceSet
//! applied an object, which applied that one, and so on, with each one's source, revision and
//! Ready. The first hop of an object that is not a Flux kind is found in the appliers' cached
//! inventories (the agent reads no object of other kinds: it holds no right to), every later
//! hop through the labels the controllers set on what they apply.

use std::{collections::BTreeMap, sync::Arc};

use kube::{Discovery, discovery::Scope};

use crate::workloads::{
    WorkloadsError,
    access::{Access, Need},
    cache::KindCache,
    catalog,
    model::ObjectRef,
    rows::Cached,
};

use super::{
    Inspector, Result,
    inventory::{self, APPLIERS},
};

/// How many appliers a trace follows up (a cycle ends it before).
const MAX_HOPS: usize = 16;

/// The labels each applier sets on what it applies: (group, kind, name label, namespace label).
const APPLIER_LABELS: &[(&str, &str, &str, &str)] = &[
    (
        "kustomize.toolkit.fluxcd.io",
        "Kustomization",
        "kustomize.toolkit.fluxcd.io/name",
        "kustomize.toolkit.fluxcd.io/namespace",
    ),
    (
        "helm.toolkit.fluxcd.io",
        "HelmRelease",
        "helm.toolkit.fluxcd.io/name",
        "helm.toolkit.fluxcd.io/namespace",
    ),
    (
        "fluxcd.controlplane.io",
        "ResourceSet",
        "resourceset.fluxcd.controlplane.io/name",
        "resourceset.fluxcd.controlplane.io/namespace",
    ),
];

/// What a step of the chain is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Object,
    AppliedBy,
    Source,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Object => "object",
            Role::AppliedBy => "applied by",
            Role::Source => "source",
        }
    }
}

/// One step of the chain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    pub role: Role,
    pub kind: String,
    pub api_version: String,
    pub namespace: String,
    pub name: String,
    /// A Flux object's row, when the step is one.
    pub flux: Option<Arc<Cached>>,
}

/// The chain.
#[derive(Clone, Debug)]
pub struct Trace {
    pub steps: Vec<Step>,
    /// Nothing applied the object.
    pub unmanaged: bool,
}

/// The applier the labels name: (group, kind, namespace, name).
pub fn applier_of(
    labels: &BTreeMap<String, String>,
    own_namespace: &str,
) -> Option<(&'static str, &'static str, String, String)> {
    APPLIER_LABELS
        .iter()
        .find_map(|(group, kind, name, namespace)| {
            let name = labels.get(*name)?;
            let namespace = labels
                .get(*namespace)
                .cloned()
                .unwrap_or_else(|| own_namespace.to_owned());
            Some((*group, *kind, namespace, name.clone()))
        })
}

/// A kind the cluster serves, as discovery found it.
struct Resolved {
    group: String,
    kind: String,
    plural: String,
    api_version: String,
    namespaced: bool,
}

/// The short names kubectl accepts for built-in kinds (kube's discovery does not carry them):
/// (short name, plural).
const SHORT_NAMES: &[(&str, &str)] = &[
    ("cm", "configmaps"),
    ("cj", "cronjobs"),
    ("crd", "customresourcedefinitions"),
    ("deploy", "deployments"),
    ("ds", "daemonsets"),
    ("hpa", "horizontalpodautoscalers"),
    ("ing", "ingresses"),
    ("netpol", "networkpolicies"),
    ("ns", "namespaces"),
    ("pdb", "poddisruptionbudgets"),
    ("po", "pods"),
    ("pv", "persistentvolumes"),
    ("pvc", "persistentvolumeclaims"),
    ("rs", "replicasets"),
    ("sa", "serviceaccounts"),
    ("sts", "statefulsets"),
    ("svc", "services"),
];

/// Finds `name` (a kind, plural, singular or kubectl's short name, case-insensitive;
/// `group/Kind` or `Kind.group` for one group) among the resources discovery lists,
/// preferring the core group, then `apps`.
fn resolve(discovery: &Discovery, name: &str) -> Option<Resolved> {
    let (group, name) = match name.split_once('/') {
        Some((group, kind)) => (Some(group.to_ascii_lowercase()), kind),
        None => match name.split_once('.') {
            Some((kind, group)) => (Some(group.to_ascii_lowercase()), kind),
            None => (None, name),
        },
    };
    let wanted = name.to_ascii_lowercase();
    let wanted = SHORT_NAMES
        .iter()
        .find(|(short, _)| *short == wanted)
        .map_or(wanted.clone(), |(_, plural)| (*plural).to_owned());
    let mut found: Vec<Resolved> = Vec::new();
    for api_group in discovery.groups() {
        if group.as_deref().is_some_and(|g| g != api_group.name()) {
            continue;
        }
        for (resource, capabilities) in api_group.recommended_resources() {
            let matches = resource.kind.to_ascii_lowercase() == wanted
                || resource.plural == wanted
                || resource.kind.to_ascii_lowercase() + "s" == wanted;
            if matches && !resource.plural.contains('/') {
                found.push(Resolved {
                    group: resource.group.clone(),
                    kind: resource.kind.clone(),
                    plural: resource.plural.clone(),
                    api_version: resource.api_version.clone(),
                    namespaced: capabilities.scope == Scope::Namespaced,
                });
            }
        }
    }
    let rank = |r: &Resolved| match r.group.as_str() {
        "" => 0,
        "apps" => 1,
        _ => 2,
    };
    found.sort_by_key(rank);
    found.into_iter().next()
}

/// The object a trace starts at: a kind and a name, and a namespace's name when one is given.
fn check_reference(reference: Option<&ObjectRef>) -> Result<&ObjectRef> {
    let reference = reference
        .filter(|r| !r.kind.is_empty() && !r.name.is_empty())
        .ok_or(WorkloadsError::MissingName { what: "Trace" })?;
    if !reference.namespace.is_empty() {
        tenantflux_core::names::namespace("namespace", &reference.namespace)
            .map_err(WorkloadsError::InvalidArgument)?;
    }
    tenantflux_core::names::object_name("name", &reference.name)
        .map_err(WorkloadsError::InvalidArgument)?;
    Ok(reference)
}

/// Where the object is looked up: the reference's namespace for a namespaced kind (which
/// needs one), none for a cluster-scoped one.
fn object_namespace(resolved: &Resolved, reference: &ObjectRef) -> Result<String> {
    if !resolved.namespaced {
        return Ok(String::new());
    }
    if reference.namespace.is_empty() {
        return Err(WorkloadsError::MissingName { what: "Trace" });
    }
    Ok(reference.namespace.clone())
}

impl Resolved {
    /// A Flux kind, known without discovery.
    fn flux(cache: &KindCache) -> Self {
        Resolved {
            group: cache.kind.group.into(),
            kind: cache.kind.kind.into(),
            plural: cache.kind.plural.into(),
            api_version: cache.resource.api_version.clone(),
            namespaced: true,
        }
    }
}

impl Inspector {
    /// The chain that applied the object `reference` names: the object, each applier up from
    /// it, then each applier's source.
    pub async fn trace(
        &self,
        access: &impl Access,
        reference: Option<&ObjectRef>,
    ) -> Result<Trace> {
        access.identify().await?;
        let reference = check_reference(reference)?;
        let served = self.served().await?;
        // A Flux kind is known without discovery; anything else is found by it.
        let flux_kind = self
            .caches
            .find(&reference.kind)
            .and_then(|k| served.iter().find(|c| std::ptr::eq(c.kind, k)).cloned());
        let resolved = match &flux_kind {
            Some(cache) => Resolved::flux(cache),
            None => self.discover(&reference.kind).await?,
        };
        let namespace = object_namespace(&resolved, reference)?;
        let start = Need::other(
            "get",
            &resolved.group,
            &resolved.plural,
            resolved.namespaced.then_some(namespace.as_str()),
        )
        .on(&reference.name);
        access.check(&start).await?;

        let mut steps = vec![Step {
            role: Role::Object,
            kind: resolved.kind.clone(),
            api_version: resolved.api_version.clone(),
            namespace: namespace.clone(),
            name: reference.name.clone(),
            flux: flux_kind
                .as_ref()
                .and_then(|c| c.store.get(&namespace, &reference.name)),
        }];
        if let Some(cache) = &flux_kind
            && steps[0].flux.is_none()
        {
            return Err(WorkloadsError::NotFound {
                kind: cache.kind.kind,
                namespace,
                name: reference.name.clone(),
            });
        }
        // The first applier: from the labels of a Flux object, else from the inventories.
        let first = match &steps[0].flux {
            Some(object) => applier_of(&object.labels, &object.namespace),
            None => self.holder(&resolved.group, &resolved.kind, &namespace, &reference.name),
        };
        let appliers = self.follow_appliers(access, first, &mut steps).await?;
        let unmanaged = appliers.is_empty() && steps.len() == 1;
        self.source_steps(access, &appliers, &mut steps).await?;
        Ok(Trace { steps, unmanaged })
    }

    /// The kind `name` names, found by discovery (for a kind that is not Flux's).
    async fn discover(&self, name: &str) -> Result<Resolved> {
        let discovery = Discovery::new(self.client.clone())
            .run_aggregated()
            .await
            .map_err(|source| WorkloadsError::Read {
                what: "the API resources the cluster serves".into(),
                source: Box::new(source),
            })?;
        resolve(&discovery, name).ok_or_else(|| {
            WorkloadsError::InvalidArgument(format!(
                "the cluster serves no kind named {} (give a kind, its plural, or group/Kind)",
                tenantflux_core::text::quote(name)
            ))
        })
    }

    /// Up the chain from `next`, one step per applier the caller may `get`, through the labels
    /// each applier's controller set; it ends at an applier of no Flux kind the cluster
    /// serves, one that is gone (still named), a cycle or [`MAX_HOPS`]. Returns the appliers
    /// found, the nearest first.
    async fn follow_appliers(
        &self,
        access: &impl Access,
        mut next: Option<(&'static str, &'static str, String, String)>,
        steps: &mut Vec<Step>,
    ) -> Result<Vec<Arc<Cached>>> {
        let mut appliers: Vec<Arc<Cached>> = Vec::new();
        while let Some((group, kind, applier_namespace, applier_name)) = next.take() {
            if appliers.len() >= MAX_HOPS {
                break;
            }
            let Some(cache) = self.flux_cache(group, kind) else {
                break;
            };
            access
                .check(&Need::new("get", cache.kind, Some(&applier_namespace)).on(&applier_name))
                .await?;
            let Some(object) = cache.store.get(&applier_namespace, &applier_name) else {
                // Labelled by an applier that is gone: say who it was.
                steps.push(Step {
                    role: Role::AppliedBy,
                    kind: kind.into(),
                    api_version: cache.resource.api_version.clone(),
                    namespace: applier_namespace,
                    name: applier_name,
                    flux: None,
                });
                break;
            };
            if appliers
                .iter()
                .any(|a| a.namespace == object.namespace && a.name == object.name)
            {
                break;
            }
            steps.push(Step {
                role: Role::AppliedBy,
                kind: kind.into(),
                api_version: cache.resource.api_version.clone(),
                namespace: object.namespace.clone(),
                name: object.name.clone(),
                flux: Some(object.clone()),
            });
            next = applier_of(&object.labels, &object.namespace);
            appliers.push(object);
        }
        Ok(appliers)
    }

    /// Each applier's source, the outermost first, once each: a step per source of a Flux
    /// kind the cluster serves, which the caller must be allowed to `get`.
    async fn source_steps(
        &self,
        access: &impl Access,
        appliers: &[Arc<Cached>],
        steps: &mut Vec<Step>,
    ) -> Result<()> {
        let mut sources: Vec<(String, String, String)> = Vec::new();
        for applier in appliers.iter().rev() {
            if let Some(source) = &applier.row.source
                && !sources.contains(source)
            {
                sources.push(source.clone());
            }
        }
        for (kind, source_namespace, source_name) in sources {
            let Some(cache) = catalog::find(&kind).and_then(|k| self.flux_cache(k.group, k.kind))
            else {
                continue;
            };
            access
                .check(&Need::new("get", cache.kind, Some(&source_namespace)).on(&source_name))
                .await?;
            steps.push(Step {
                role: Role::Source,
                kind: cache.kind.kind.into(),
                api_version: cache.resource.api_version.clone(),
                flux: cache.store.get(&source_namespace, &source_name),
                namespace: source_namespace,
                name: source_name,
            });
        }
        Ok(())
    }

    /// The applier whose inventory holds the object: (group, kind, namespace, name), from the
    /// cache (which keeps each applier's inventory); the first by namespace and name when
    /// several claim it.
    fn holder(
        &self,
        group: &str,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> Option<(&'static str, &'static str, String, String)> {
        let id = inventory::id(namespace, name, group, kind);
        APPLIERS.iter().find_map(|(applier_group, applier_kind)| {
            let cache = self.flux_cache(applier_group, applier_kind)?;
            let holder = cache
                .store
                .state()
                .into_iter()
                .filter(|applier| applier.holds(&id))
                .min_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)))?;
            Some((
                cache.kind.group,
                cache.kind.kind,
                holder.namespace.clone(),
                holder.name.clone(),
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_controllers_labels_name_the_applier() {
        let labels = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        assert_eq!(
            applier_of(
                &labels(&[
                    ("kustomize.toolkit.fluxcd.io/name", "apps"),
                    ("kustomize.toolkit.fluxcd.io/namespace", "flux-system"),
                ]),
                "apps"
            ),
            Some((
                "kustomize.toolkit.fluxcd.io",
                "Kustomization",
                "flux-system".into(),
                "apps".into()
            ))
        );
        assert_eq!(
            applier_of(
                &labels(&[("resourceset.fluxcd.controlplane.io/name", "tenants")]),
                "ns"
            )
            .map(|a| (a.1, a.2)),
            Some(("ResourceSet", "ns".into()))
        );
        assert_eq!(applier_of(&labels(&[("app", "x")]), "ns"), None);
    }

    fn reference(kind: &str, namespace: &str, name: &str) -> ObjectRef {
        ObjectRef {
            kind: kind.into(),
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    #[test]
    fn a_trace_starts_at_a_kind_and_a_name_in_a_namespace_when_namespaced() {
        assert!(matches!(
            check_reference(None),
            Err(WorkloadsError::MissingName { what: "Trace" })
        ));
        assert!(matches!(
            check_reference(Some(&reference("Deployment", "apps", ""))),
            Err(WorkloadsError::MissingName { what: "Trace" })
        ));
        assert!(matches!(
            check_reference(Some(&reference("Deployment", "Not_A_Namespace", "web"))),
            Err(WorkloadsError::InvalidArgument(_))
        ));
        let web = reference("Deployment", "apps", "web");
        assert_eq!(check_reference(Some(&web)).unwrap(), &web);

        let kind = |namespaced| Resolved {
            group: "apps".into(),
            kind: "Deployment".into(),
            plural: "deployments".into(),
            api_version: "apps/v1".into(),
            namespaced,
        };
        assert_eq!(object_namespace(&kind(true), &web).unwrap(), "apps");
        assert_eq!(object_namespace(&kind(false), &web).unwrap(), "");
        let nowhere = reference("Deployment", "", "web");
        assert!(matches!(
            object_namespace(&kind(true), &nowhere),
            Err(WorkloadsError::MissingName { what: "Trace" })
        ));
    }
}
