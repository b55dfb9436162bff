//! Which tenant clusters make the fleet, and the kubeconfig that reaches each.
//!
//! - Cozystack (the default): Kamaji writes Secret `<release>-admin-kubeconfig` next to each
//!   tenant's Kubernetes release, in namespace `tenant-<x>` of the management cluster. The
//!   tenant is the namespace, the cluster the release name.
//! - Other platforms: Secrets chosen by a label selector (`--secret-selector`), in any
//!   namespace (or `-n`); the tenant is the namespace, the cluster the Secret's name without a
//!   `-admin-kubeconfig` or `-kubeconfig` suffix.
//! - A fleet file (`--fleet-file`): a YAML list of clusters, each with a kubeconfig file.
//!
//! Only Secret metadata is listed here; each Secret's kubeconfig is read when its cluster's
//! turn comes, so one unreadable Secret fails one cluster, not the fleet. A Secret's writer
//! wrote its kubeconfig: one that would run or read anything here is refused
//! ([`super::untrusted`]).

use std::{
    collections::{BTreeMap, BTreeSet},
    fmt,
    path::{Path, PathBuf},
};

use k8s_openapi::api::core::v1::Secret;
use kube::{
    Api, Client,
    api::{ListParams, ObjectMeta},
    config::Kubeconfig,
};
use serde::{Deserialize, Serialize};

use super::untrusted;
use crate::connect::describe;
use tenantflux_core::selector::Selector;

/// Name suffix of the admin kubeconfig Secret Kamaji writes for a tenant control plane.
pub const ADMIN_KUBECONFIG_SUFFIX: &str = "-admin-kubeconfig";
/// Cozystack's tenant namespaces.
pub const TENANT_PREFIX: &str = "tenant-";
/// The key of the in-cluster endpoint, reachable from pods of the management cluster.
pub const IN_CLUSTER_KEY: &str = "super-admin.svc";
/// The key of the external endpoint, reachable from outside the management cluster.
pub const EXTERNAL_KEY: &str = "admin.conf";
/// Labels every cluster carries for `--selector`, besides its Secret's or fleet file's labels.
pub const TENANT_LABEL: &str = "tenantflux.io/tenant";
pub const CLUSTER_LABEL: &str = "tenantflux.io/cluster";
/// The annotation on a kubeconfig Secret recording the UID of the cluster's kube-system
/// namespace, which `fleet status` checks the cluster against.
pub const CLUSTER_UID_ANNOTATION: &str = "tenantflux.io/cluster-uid";

/// The Secret key a kubeconfig is read from unless `--secret-key` says: the in-cluster
/// endpoint when the plugin runs in a pod (KUBERNETES_SERVICE_HOST set), else the external one.
pub fn default_secret_key(in_pod: bool) -> &'static str {
    if in_pod { IN_CLUSTER_KEY } else { EXTERNAL_KEY }
}

/// Where the fleet is found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Discovery {
    Cozystack {
        namespace: Option<String>,
        key: String,
    },
    SecretSelector {
        selector: String,
        namespace: Option<String>,
        key: String,
    },
    File(PathBuf),
}

/// Where one cluster's kubeconfig is read from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum Source {
    Secret {
        namespace: String,
        name: String,
        key: String,
    },
    File {
        kubeconfig: PathBuf,
        #[serde(skip_serializing_if = "Option::is_none")]
        context: Option<String>,
    },
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Secret {
                namespace,
                name,
                key,
            } => write!(f, "Secret {namespace}/{name} key {key}"),
            Self::File {
                kubeconfig,
                context: Some(context),
            } => write!(f, "{} context {context}", kubeconfig.display()),
            Self::File {
                kubeconfig,
                context: None,
            } => write!(f, "{}", kubeconfig.display()),
        }
    }
}

/// One tenant cluster of the fleet.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Member {
    pub tenant: String,
    pub cluster: String,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    pub source: Source,
    /// The agent's namespace in this cluster, when not `--agent-namespace`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_namespace: Option<String>,
    /// The UID of the cluster's kube-system namespace as the platform recorded it (the fleet
    /// file's `uid`, or the Secret's annotation [`CLUSTER_UID_ANNOTATION`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
}

impl Member {
    /// What `--selector` is matched against: the labels, the tenant and the cluster.
    pub fn selectable_labels(&self) -> BTreeMap<String, String> {
        let mut labels = self.labels.clone();
        labels.insert(TENANT_LABEL.to_owned(), self.tenant.clone());
        labels.insert(CLUSTER_LABEL.to_owned(), self.cluster.clone());
        labels
    }

    /// `tenant/cluster`, as messages name a cluster.
    pub fn name(&self) -> String {
        format!("{}/{}", self.tenant, self.cluster)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    #[error("cannot list Secrets {scope} in the management cluster: {cause}")]
    ListSecrets { scope: String, cause: String },
    #[error("cannot read the fleet file {path}: {cause}")]
    ReadFile { path: String, cause: String },
    #[error(
        "the fleet file {path} is not a YAML list of clusters ({{name, kubeconfig, context, tenant, agentNamespace, labels}}): {cause}"
    )]
    ParseFile { path: String, cause: String },
    #[error("the fleet file {path} names cluster {name:?} of tenant {tenant:?} twice")]
    Duplicate {
        path: String,
        tenant: String,
        name: String,
    },
    #[error(
        "finding the fleet {how} reads the management cluster, and there is no client of it; check --kubeconfig and --context"
    )]
    NoManagementCluster { how: &'static str },
}

/// Why one cluster's kubeconfig could not be had.
#[derive(Debug, thiserror::Error)]
pub enum KubeconfigError {
    #[error("cannot read {what}: {cause}")]
    Read { what: String, cause: String },
    #[error("{what} has no key {key} (it has {present}); choose the key with --secret-key")]
    MissingKey {
        what: String,
        key: String,
        present: String,
    },
    #[error("{what} is not a kubeconfig: {cause}")]
    Parse { what: String, cause: String },
    #[error(
        "refused the kubeconfig in {what}: a kubeconfig from a Secret may carry credentials only inline, \
         and this one would run commands, read local files or use a proxy on this machine: {found}; \
         nothing of it was used. Store the credentials inline (token, client-certificate-data, \
         client-key-data, certificate-authority-data), or list this cluster in a --fleet-file"
    )]
    Refused { what: String, found: String },
    #[error("{what} is read from the management cluster, and there is no client of it")]
    NoManagementCluster { what: String },
}

/// The cluster name a Secret stands for: its name without the kubeconfig suffixes.
fn cluster_of(secret_name: &str) -> &str {
    [ADMIN_KUBECONFIG_SUFFIX, "-kubeconfig"]
        .iter()
        .find_map(|suffix| {
            secret_name
                .strip_suffix(suffix)
                .filter(|rest| !rest.is_empty())
        })
        .unwrap_or(secret_name)
}

/// The member a Secret makes, if it is one of the fleet: with `cozystack`, only
/// `<release>-admin-kubeconfig` in a `tenant-*` namespace is.
fn member_of_secret(meta: &ObjectMeta, key: &str, cozystack: bool) -> Option<Member> {
    let namespace = meta.namespace.as_deref()?;
    let name = meta.name.as_deref()?;
    if cozystack
        && !(namespace.starts_with(TENANT_PREFIX)
            && name.len() > ADMIN_KUBECONFIG_SUFFIX.len()
            && name.ends_with(ADMIN_KUBECONFIG_SUFFIX))
    {
        return None;
    }
    Some(Member {
        tenant: namespace.to_owned(),
        cluster: cluster_of(name).to_owned(),
        labels: meta.labels.clone().unwrap_or_default(),
        source: Source::Secret {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            key: key.to_owned(),
        },
        agent_namespace: None,
        uid: meta
            .annotations
            .as_ref()
            .and_then(|a| a.get(CLUSTER_UID_ANNOTATION))
            .filter(|uid| !uid.trim().is_empty())
            .cloned(),
    })
}

/// One entry of a fleet file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct FileEntry {
    name: String,
    kubeconfig: PathBuf,
    #[serde(default)]
    context: Option<String>,
    #[serde(default)]
    tenant: Option<String>,
    #[serde(default)]
    agent_namespace: Option<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    /// The UID of the cluster's kube-system namespace, as the platform knows it.
    #[serde(default)]
    uid: Option<String>,
}

/// The members a fleet file lists; kubeconfig paths are relative to the file's directory.
pub fn parse_fleet_file(path: &Path, text: &str) -> Result<Vec<Member>, DiscoveryError> {
    let shown = path.display().to_string();
    let entries: Vec<FileEntry> =
        tenantflux_core::yaml::from_str(text).map_err(|err| DiscoveryError::ParseFile {
            path: shown.clone(),
            cause: err.to_string(),
        })?;
    let base = path.parent().unwrap_or(Path::new("."));
    let mut seen = BTreeSet::new();
    let mut members = Vec::with_capacity(entries.len());
    for entry in entries {
        let tenant = entry.tenant.unwrap_or_else(|| "-".to_owned());
        if !seen.insert((tenant.clone(), entry.name.clone())) {
            return Err(DiscoveryError::Duplicate {
                path: shown,
                tenant,
                name: entry.name,
            });
        }
        members.push(Member {
            tenant,
            cluster: entry.name,
            labels: entry.labels,
            source: Source::File {
                kubeconfig: base.join(entry.kubeconfig),
                context: entry.context,
            },
            agent_namespace: entry.agent_namespace,
            uid: entry.uid,
        });
    }
    Ok(members)
}

/// The fleet, filtered by `selector`, sorted by tenant and cluster. `management` is needed
/// for Secret discovery only.
pub async fn discover(
    discovery: &Discovery,
    management: Option<&Client>,
    selector: &Selector,
) -> Result<Vec<Member>, DiscoveryError> {
    let mut members = match discovery {
        Discovery::File(path) => {
            let text = std::fs::read_to_string(path).map_err(|err| DiscoveryError::ReadFile {
                path: path.display().to_string(),
                cause: err.to_string(),
            })?;
            parse_fleet_file(path, &text)?
        }
        Discovery::Cozystack { namespace, key } => {
            let client = management.ok_or(DiscoveryError::NoManagementCluster {
                how: "from Cozystack's Secrets",
            })?;
            list_secrets(client, namespace.as_deref(), None)
                .await?
                .iter()
                .filter_map(|meta| member_of_secret(meta, key, true))
                .collect()
        }
        Discovery::SecretSelector {
            selector: labels,
            namespace,
            key,
        } => {
            let client = management.ok_or(DiscoveryError::NoManagementCluster {
                how: "by --secret-selector",
            })?;
            list_secrets(client, namespace.as_deref(), Some(labels))
                .await?
                .iter()
                .filter_map(|meta| member_of_secret(meta, key, false))
                .collect()
        }
    };
    members.retain(|m| selector.matches(&m.selectable_labels()));
    members.sort_by(|a, b| (&a.tenant, &a.cluster).cmp(&(&b.tenant, &b.cluster)));
    Ok(members)
}

async fn list_secrets(
    client: &Client,
    namespace: Option<&str>,
    labels: Option<&str>,
) -> Result<Vec<ObjectMeta>, DiscoveryError> {
    let api: Api<Secret> = match namespace {
        Some(namespace) => Api::namespaced(client.clone(), namespace),
        None => Api::all(client.clone()),
    };
    let mut params = ListParams::default();
    if let Some(labels) = labels {
        params = params.labels(labels);
    }
    let scope = match (namespace, labels) {
        (Some(ns), Some(l)) => format!("in namespace {ns} with selector {l}"),
        (Some(ns), None) => format!("in namespace {ns}"),
        (None, Some(l)) => format!("in all namespaces with selector {l}"),
        (None, None) => "in all namespaces".to_owned(),
    };
    // Metadata only: the kubeconfigs themselves are read one cluster at a time.
    let list = api
        .list_metadata(&params)
        .await
        .map_err(|err| DiscoveryError::ListSecrets {
            scope,
            cause: describe(&err),
        })?;
    Ok(list.items.into_iter().map(|item| item.metadata).collect())
}

/// The kubeconfig that reaches `member`.
pub async fn kubeconfig(
    member: &Member,
    management: Option<&Client>,
) -> Result<Kubeconfig, KubeconfigError> {
    let what = member.source.to_string();
    match &member.source {
        Source::File { kubeconfig, .. } => {
            Kubeconfig::read_from(kubeconfig).map_err(|err| KubeconfigError::Read {
                what,
                cause: describe(&err),
            })
        }
        Source::Secret {
            namespace,
            name,
            key,
        } => {
            let client = management
                .ok_or_else(|| KubeconfigError::NoManagementCluster { what: what.clone() })?;
            let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
            let secret = secrets
                .get(name)
                .await
                .map_err(|err| KubeconfigError::Read {
                    what: format!("Secret {namespace}/{name}"),
                    cause: describe(&err),
                })?;
            let data = secret.data.unwrap_or_default();
            let bytes = data.get(key).ok_or_else(|| KubeconfigError::MissingKey {
                what: format!("Secret {namespace}/{name}"),
                key: key.clone(),
                present: if data.is_empty() {
                    "no keys".to_owned()
                } else {
                    data.keys().cloned().collect::<Vec<_>>().join(", ")
                },
            })?;
            let text = std::str::from_utf8(&bytes.0).map_err(|err| KubeconfigError::Parse {
                what: what.clone(),
                cause: err.to_string(),
            })?;
            let kubeconfig = Kubeconfig::from_yaml(text).map_err(|err| KubeconfigError::Parse {
                what: what.clone(),
                cause: describe(&err),
            })?;
            match untrusted::refusals(&kubeconfig) {
                found if found.is_empty() => Ok(kubeconfig),
                found => Err(KubeconfigError::Refused {
                    what,
                    found: found.join(", "),
                }),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(namespace: &str, name: &str) -> ObjectMeta {
        ObjectMeta {
            namespace: Some(namespace.to_owned()),
            name: Some(name.to_owned()),
            labels: Some(BTreeMap::from([("tier".to_owned(), "gold".to_owned())])),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn the_secret_key_defaults_to_the_in_cluster_endpoint_only_in_a_pod() {
        assert_eq!(default_secret_key(true), "super-admin.svc");
        assert_eq!(default_secret_key(false), "admin.conf");
    }

    #[test]
    fn cozystack_members_are_admin_kubeconfigs_in_tenant_namespaces() {
        let member = member_of_secret(
            &meta("tenant-acme", "kubernetes-acme-admin-kubeconfig"),
            "admin.conf",
            true,
        )
        .unwrap();
        assert_eq!(member.tenant, "tenant-acme");
        assert_eq!(member.cluster, "kubernetes-acme");
        assert_eq!(
            member.source.to_string(),
            "Secret tenant-acme/kubernetes-acme-admin-kubeconfig key admin.conf"
        );
        let labels = member.selectable_labels();
        assert_eq!(labels["tenantflux.io/tenant"], "tenant-acme");
        assert_eq!(labels["tenantflux.io/cluster"], "kubernetes-acme");
        assert_eq!(labels["tier"], "gold");
        // CAPI's copy, other namespaces and the bare suffix are not tenant clusters.
        for (namespace, name) in [
            ("tenant-acme", "kubernetes-acme-kubeconfig"),
            ("cozy-system", "kubernetes-acme-admin-kubeconfig"),
            ("tenant-acme", "-admin-kubeconfig"),
        ] {
            assert_eq!(
                member_of_secret(&meta(namespace, name), "admin.conf", true),
                None,
                "{namespace}/{name}"
            );
        }
    }

    #[test]
    fn selected_secrets_name_the_cluster_without_the_kubeconfig_suffix() {
        let cluster = |name: &str| {
            member_of_secret(&meta("platform", name), "value", false)
                .unwrap()
                .cluster
        };
        assert_eq!(cluster("prod-admin-kubeconfig"), "prod");
        assert_eq!(cluster("prod-kubeconfig"), "prod");
        assert_eq!(cluster("prod"), "prod");
        assert_eq!(cluster("-kubeconfig"), "-kubeconfig");
    }

    #[test]
    fn a_fleet_file_lists_clusters_relative_to_itself() {
        let members = parse_fleet_file(
            Path::new("/etc/fleet/fleet.yaml"),
            "- {name: a, kubeconfig: a.yaml}\n\
             - name: b\n  tenant: tenant-b\n  kubeconfig: /abs/b.yaml\n  context: admin@b\n  \
               agentNamespace: tf-b\n  labels: {tier: gold}\n",
        )
        .unwrap();
        assert_eq!(members.len(), 2);
        assert_eq!(members[0].tenant, "-");
        assert_eq!(
            members[0].source,
            Source::File {
                kubeconfig: PathBuf::from("/etc/fleet/a.yaml"),
                context: None
            }
        );
        assert_eq!(members[1].tenant, "tenant-b");
        assert_eq!(members[1].agent_namespace.as_deref(), Some("tf-b"));
        assert_eq!(members[1].source.to_string(), "/abs/b.yaml context admin@b");
        assert_eq!(members[1].labels["tier"], "gold");
    }

    #[tokio::test]
    async fn secret_discovery_without_the_management_cluster_is_an_error() {
        let discovery = Discovery::Cozystack {
            namespace: None,
            key: EXTERNAL_KEY.to_owned(),
        };
        let err = discover(&discovery, None, &Selector::default())
            .await
            .unwrap_err();
        assert!(err.to_string().contains("--kubeconfig"), "{err}");
        let member = member_of_secret(
            &meta("tenant-acme", "kubernetes-acme-admin-kubeconfig"),
            EXTERNAL_KEY,
            true,
        )
        .unwrap();
        let err = kubeconfig(&member, None).await.unwrap_err();
        assert!(
            err.to_string()
                .starts_with("Secret tenant-acme/kubernetes-acme-admin-kubeconfig key admin.conf"),
            "{err}"
        );
    }

    #[test]
    fn a_bad_fleet_file_says_what_is_wrong() {
        let path = Path::new("fleet.yaml");
        let err = parse_fleet_file(path, "- {name: a}\n").unwrap_err();
        assert!(err.to_string().contains("kubeconfig"), "{err}");
        let err = parse_fleet_file(path, "- {name: a, kubeconfig: x, colour: blue}\n").unwrap_err();
        assert!(err.to_string().contains("colour"), "{err}");
        let err = parse_fleet_file(
            path,
            "- {name: a, kubeconfig: x}\n- {name: a, kubeconfig: y}\n",
        )
        .unwrap_err();
        assert!(err.to_string().contains("twice"), "{err}");
    }
}
