//! `flux tree`: the inventory of a Kustomization, HelmRelease or ResourceSet, recursing into
//! the appliers it applied, each Flux object with its Ready condition from the caches. The
//! inventories are read from the API server (the caches keep no inventory), one GET per
//! applier, each after the caller's own `get` on it was allowed. The Ready of a Flux object
//! is shown only when the caller may `get` that object: an inventory is written by whoever owns
//! the applier, so without the check it would probe any Flux object of the cluster.

use std::collections::HashSet;

use kube::{Api, api::DynamicObject};

use crate::workloads::{
    WorkloadsError,
    access::{Access, AccessError, Need},
    model::ObjectRef,
    rows::Condition,
};

use super::{
    Inspector, Result, find_kind,
    inventory::{self, Entry},
};

/// The most nodes one tree holds; the rest are counted in `more`.
pub const MAX_NODES: usize = 5000;
/// How deep appliers are followed (a cycle is cut by the visited set before this).
const MAX_DEPTH: usize = 32;

/// One object of the tree.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Node {
    pub entry: Entry,
    /// Whether it is a Flux kind the agent caches.
    pub flux: bool,
    pub ready: Option<Condition>,
    pub children: Vec<Node>,
    /// Children left out to keep the answer within [`MAX_NODES`].
    pub more: u32,
    /// Why its own inventory was not read, or why its state is not shown.
    pub error: String,
}

/// What a node says when the caller may not `get` its object: it is listed (the inventory the
/// caller may read names it) but its state is not.
pub const HIDDEN: &str = "state not shown: you may not get it";

impl Inspector {
    /// The tree of the applier `reference` names.
    pub async fn tree(&self, access: &impl Access, reference: Option<&ObjectRef>) -> Result<Node> {
        access.identify().await?;
        let reference = reference
            .filter(|r| !r.namespace.is_empty() && !r.name.is_empty())
            .ok_or(WorkloadsError::MissingName { what: "Tree" })?;
        tenantflux_core::names::namespace("namespace", &reference.namespace)
            .map_err(WorkloadsError::InvalidArgument)?;
        tenantflux_core::names::object_name("name", &reference.name)
            .map_err(WorkloadsError::InvalidArgument)?;
        let kind = find_kind(&self.caches, &reference.kind)?;
        let root = Entry {
            namespace: reference.namespace.clone(),
            name: reference.name.clone(),
            group: kind.group.into(),
            kind: kind.kind.into(),
            version: String::new(),
        };
        if !root.is_applier() {
            return Err(WorkloadsError::InvalidArgument(format!(
                "tree shows the inventory of a Kustomization, HelmRelease or ResourceSet, not of a {}",
                kind.kind
            )));
        }
        let cache = self.cache_of(kind).await?;
        access
            .check(&Need::new("get", kind, Some(&root.namespace)).on(&root.name))
            .await?;
        let api = Api::<DynamicObject>::namespaced_with(
            self.client.clone(),
            &root.namespace,
            &cache.resource,
        );
        let object = api
            .get_opt(&root.name)
            .await
            .map_err(|source| WorkloadsError::Api {
                action: "reading",
                kind: kind.kind,
                namespace: root.namespace.clone(),
                name: root.name.clone(),
                source: Box::new(source),
            })?
            .ok_or_else(|| WorkloadsError::NotFound {
                kind: kind.kind,
                namespace: root.namespace.clone(),
                name: root.name.clone(),
            })?;
        let object = serde_json::to_value(object).unwrap_or_default();
        let mut node = self.leaf(access, root.clone()).await?;
        let mut visited = HashSet::from([root]);
        let mut budget = MAX_NODES;
        self.grow(access, &mut node, &object, &mut visited, &mut budget, 0)
            .await?;
        Ok(node)
    }

    /// A node without children: its Ready condition if it is a cached Flux object the caller
    /// may `get`; [`HIDDEN`] if they may not.
    async fn leaf(&self, access: &impl Access, entry: Entry) -> Result<Node> {
        let cache = self.flux_cache(&entry.group, &entry.kind);
        let mut node = Node {
            flux: cache.is_some(),
            entry,
            ..Node::default()
        };
        let Some(cache) = cache else {
            return Ok(node);
        };
        let need = Need::new("get", cache.kind, Some(&node.entry.namespace)).on(&node.entry.name);
        match access.check(&need).await {
            Ok(()) => {
                node.ready = cache
                    .store
                    .get(&node.entry.namespace, &node.entry.name)
                    .and_then(|o| o.row.ready.clone());
            }
            Err(AccessError::Denied(_)) => node.error = HIDDEN.to_owned(),
            Err(err) => return Err(err.into()),
        }
        Ok(node)
    }

    /// Adds the inventory of `object` under `node`, following appliers.
    async fn grow(
        &self,
        access: &impl Access,
        node: &mut Node,
        object: &serde_json::Value,
        visited: &mut HashSet<Entry>,
        budget: &mut usize,
        depth: usize,
    ) -> Result<()> {
        let own = Entry {
            version: String::new(),
            ..node.entry.clone()
        };
        for mut entry in inventory::entries(object) {
            entry.version.clear();
            // A Kustomization may list itself (flux tree skips it too).
            if entry == own {
                continue;
            }
            if *budget == 0 {
                node.more += 1;
                continue;
            }
            *budget -= 1;
            let mut child = self.leaf(access, entry.clone()).await?;
            let follow = child.error.is_empty()
                && entry.is_applier()
                && !inventory::targets_remote_cluster(object)
                && depth < MAX_DEPTH
                && visited.insert(entry.clone());
            if follow {
                match self.read_applier(access, &entry).await {
                    Ok(Some(inner)) => {
                        Box::pin(self.grow(access, &mut child, &inner, visited, budget, depth + 1))
                            .await?;
                    }
                    Ok(None) => child.error = "inventory not shown: not found".into(),
                    Err(WorkloadsError::Access(AccessError::Denied(reason))) => {
                        child.error = format!("inventory not shown: {reason}");
                    }
                    Err(err) => return Err(err),
                }
            }
            node.children.push(child);
        }
        Ok(())
    }

    /// An applier of the inventory, if the caller may get it; `None` if it is gone.
    async fn read_applier(
        &self,
        access: &impl Access,
        entry: &Entry,
    ) -> Result<Option<serde_json::Value>> {
        let Some(cache) = self.flux_cache(&entry.group, &entry.kind) else {
            return Ok(None);
        };
        access
            .check(&Need::new("get", cache.kind, Some(&entry.namespace)).on(&entry.name))
            .await?;
        let api = Api::<DynamicObject>::namespaced_with(
            self.client.clone(),
            &entry.namespace,
            &cache.resource,
        );
        let object = api
            .get_opt(&entry.name)
            .await
            .map_err(|source| WorkloadsError::Api {
                action: "reading",
                kind: cache.kind.kind,
                namespace: entry.namespace.clone(),
                name: entry.name.clone(),
                source: Box::new(source),
            })?;
        Ok(object.map(|o| serde_json::to_value(o).unwrap_or_default()))
    }
}
