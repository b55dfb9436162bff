//! Which clusters a policy is for, and which generation a cluster has held: the two facts that
//! stop a validly signed policy from being replayed where it was not meant to be (another
//! cluster) or when it was superseded (a rollback).
//!
//! A cluster is known by the UID of its `kube-system` namespace (created with the cluster,
//! never recreated) and optionally by a name set at the agent's install. A policy with
//! `spec.clusters` applies only to a cluster one of its entries matches; one without applies
//! everywhere.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::{Policy, PolicyError, glob};

/// One entry of `spec.clusters`: a cluster matches when it has every field the entry sets.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ClusterSelector {
    /// The name set at the agent's install (`--cluster-name`); `*` matches any run of
    /// characters (`kubernetes-*`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The UID of the cluster's `kube-system` namespace, exactly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
}

impl ClusterSelector {
    pub fn matches(&self, cluster: &ClusterIdentity) -> bool {
        let name = self.name.as_deref().is_none_or(|pattern| {
            cluster
                .name
                .as_deref()
                .is_some_and(|name| glob::matches(pattern, name))
        });
        let uid = self.uid.as_deref().is_none_or(|uid| uid == cluster.uid);
        name && uid
    }

    fn check(&self, index: usize) -> Result<(), PolicyError> {
        let blank = |v: &Option<String>| v.as_deref().is_some_and(|v| v.trim().is_empty());
        if (self.name.is_none() && self.uid.is_none()) || blank(&self.name) || blank(&self.uid) {
            return Err(PolicyError::ClusterSelector { index });
        }
        Ok(())
    }
}

impl fmt::Display for ClusterSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = [("name", &self.name), ("uid", &self.uid)]
            .into_iter()
            .filter_map(|(k, v)| v.as_ref().map(|v| format!("{k} {v:?}")))
            .collect();
        f.write_str(&parts.join(" and "))
    }
}

/// Who a cluster is, as its agent reports it in `status`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterIdentity {
    /// The UID of namespace `kube-system`.
    pub uid: String,
    /// The name set at install, if any.
    pub name: Option<String>,
}

impl fmt::Display for ClusterIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "uid {:?}", self.uid)?;
        match &self.name {
            Some(name) => write!(f, ", name {name:?}"),
            None => f.write_str(", no name set at install"),
        }
    }
}

/// Why a policy does not apply here.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    #[error(
        "policy {name} generation {generation} is for the clusters {selectors}, not for this cluster ({cluster}); sign it with this cluster in spec.clusters, or push it to the cluster it names"
    )]
    OtherCluster {
        name: String,
        generation: u64,
        selectors: String,
        cluster: ClusterIdentity,
    },
    #[error(
        "policy {name} generation {generation} is a rollback: this cluster has held generation {highest}; sign the change as generation {} or higher",
        highest + 1
    )]
    Rollback {
        name: String,
        generation: u64,
        highest: u64,
    },
}

impl Policy {
    /// Whether this policy is for `cluster` (`spec.clusters`; without it, every cluster).
    pub fn is_for(&self, cluster: &ClusterIdentity) -> Result<(), Refusal> {
        let Some(selectors) = &self.document.spec.clusters else {
            return Ok(());
        };
        if selectors.iter().any(|s| s.matches(cluster)) {
            return Ok(());
        }
        Err(Refusal::OtherCluster {
            name: self.name().to_owned(),
            generation: self.generation(),
            selectors: selectors
                .iter()
                .map(|s| format!("[{s}]"))
                .collect::<Vec<_>>()
                .join(", "),
            cluster: cluster.clone(),
        })
    }

    /// The entries of `spec.clusters` that select by name alone. The name is the agent's
    /// `--cluster-name`, which whoever runs the agent (the tenant) sets: only a `uid` binds
    /// a policy to one cluster.
    pub fn name_only_clusters(&self) -> Vec<&ClusterSelector> {
        self.document
            .spec
            .clusters
            .iter()
            .flatten()
            .filter(|s| s.uid.is_none())
            .collect()
    }

    /// Whether this policy may be held by a cluster that has held `highest` (the highest
    /// generation it ever accepted, `None` before the first): not if it is lower.
    pub fn is_not_rollback(&self, highest: Option<u64>) -> Result<(), Refusal> {
        match highest {
            Some(highest) if self.generation() < highest => Err(Refusal::Rollback {
                name: self.name().to_owned(),
                generation: self.generation(),
                highest,
            }),
            _ => Ok(()),
        }
    }
}

/// Checks `spec.clusters` as written.
pub(super) fn check(selectors: Option<&[ClusterSelector]>) -> Result<(), PolicyError> {
    let Some(selectors) = selectors else {
        return Ok(());
    };
    if selectors.is_empty() {
        return Err(PolicyError::EmptyList {
            field: "spec.clusters",
        });
    }
    selectors
        .iter()
        .enumerate()
        .try_for_each(|(i, s)| s.check(i))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(clusters: &str) -> Policy {
        Policy::parse(&format!(
            "apiVersion: tenantflux.io/v1alpha1\nkind: Policy\nmetadata: {{name: p}}\nspec:\n  generation: 4\n{clusters}"
        ))
        .unwrap_or_else(|err| panic!("{err}"))
    }

    fn cluster(uid: &str, name: Option<&str>) -> ClusterIdentity {
        ClusterIdentity {
            uid: uid.into(),
            name: name.map(Into::into),
        }
    }

    #[test]
    fn a_policy_without_clusters_is_for_every_cluster() {
        let p = policy("");
        assert!(p.is_for(&cluster("u1", None)).is_ok());
        assert!(p.is_for(&cluster("u2", Some("kubernetes-acme"))).is_ok());
        assert!(!p.to_yaml().contains("clusters"), "{}", p.to_yaml());
    }

    #[test]
    fn selectors_by_name_alone_are_named_as_not_binding() {
        let p = policy(
            "  clusters:\n    - {uid: u1}\n    - {name: kubernetes-acme-*}\n    - {name: blue, uid: u9}\n",
        );
        let shown: Vec<String> = p
            .name_only_clusters()
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(shown, ["name \"kubernetes-acme-*\""]);
        assert!(policy("").name_only_clusters().is_empty());
    }

    #[test]
    fn a_policy_with_clusters_is_for_those_only() {
        let p = policy(
            "  clusters:\n    - {uid: u1}\n    - {name: kubernetes-acme-*}\n    - {name: blue, uid: u9}\n",
        );
        assert!(p.is_for(&cluster("u1", None)).is_ok());
        assert!(
            p.is_for(&cluster("u2", Some("kubernetes-acme-prod")))
                .is_ok()
        );
        assert!(p.is_for(&cluster("u9", Some("blue"))).is_ok());
        for other in [
            cluster("u2", None),
            cluster("u2", Some("kubernetes-other")),
            cluster("u9", Some("green")),
            cluster("u8", Some("blue")),
        ] {
            let err = p.is_for(&other).expect_err("refused").to_string();
            assert!(
                err.contains(&format!("not for this cluster ({other})")),
                "{err}"
            );
            assert!(
                err.starts_with(
                    "policy p generation 4 is for the clusters [uid \"u1\"], [name \"kubernetes-acme-*\"], [name \"blue\" and uid \"u9\"]"
                ),
                "{err}"
            );
        }
        assert_eq!(
            cluster("u2", None).to_string(),
            "uid \"u2\", no name set at install"
        );
    }

    #[test]
    fn empty_or_blank_selectors_are_refused() {
        for (clusters, message) in [
            ("  clusters: []\n", "spec.clusters is empty"),
            ("  clusters: [{}]\n", "spec.clusters[0]"),
            (
                "  clusters: [{uid: u1}, {name: \" \"}]\n",
                "spec.clusters[1]",
            ),
        ] {
            let text = format!(
                "apiVersion: tenantflux.io/v1alpha1\nkind: Policy\nmetadata: {{name: p}}\nspec:\n  generation: 4\n{clusters}"
            );
            let err = Policy::parse(&text).expect_err(clusters).to_string();
            assert!(err.contains(message), "{clusters}: {err}");
        }
    }

    #[test]
    fn a_lower_generation_than_ever_held_is_a_rollback() {
        let p = policy("");
        assert!(p.is_not_rollback(None).is_ok());
        assert!(p.is_not_rollback(Some(4)).is_ok());
        assert!(p.is_not_rollback(Some(3)).is_ok());
        let err = p
            .is_not_rollback(Some(9))
            .expect_err("rollback")
            .to_string();
        assert_eq!(
            err,
            "policy p generation 4 is a rollback: this cluster has held generation 9; sign the change as generation 10 or higher"
        );
    }
}
