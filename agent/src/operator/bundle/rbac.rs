//! The cluster RBAC flux-operator's releases ship, as a ceiling a bundle's ClusterRoles and
//! ClusterRoleBindings are held to. Pure: [`super`] calls it while parsing.
//!
//! Cluster RBAC is where a bundle could reach past the operator: a ClusterRole labelled to
//! aggregate into `view` gives every viewer of every namespace what it grants, and a binding
//! to another subject hands the role to someone else. So each ClusterRole a bundle holds must
//! be one a release ships (by name), grant nothing that release's role does not, aggregate
//! into no role but the ones the release's does, and aggregate no other role itself; each
//! ClusterRoleBinding must be one a release ships, to the same role. The table below is
//! flux-operator v0.58.0 – v0.59.0 (identical in all three); a release that adds or widens a
//! role needs an agent that knows it, and until then its bundle is refused with a message
//! naming the role and the grant.

use serde_json::Value;

use tenantflux_core::{policy::ClusterRule, text::quote};

use super::{BundleError, ObjectRef};

/// The releases the table describes, for messages.
pub const RELEASES: &str = "flux-operator v0.58.0 to v0.59.0";

/// One rule of a release's ClusterRole: every verb on every resource of every group listed
/// (`*` stands for any, as in Kubernetes).
struct Grant {
    groups: &'static [&'static str],
    resources: &'static [&'static str],
    verbs: &'static [&'static str],
}

/// A ClusterRole as a release ships it.
struct ReleaseRole {
    name: &'static str,
    /// The `rbac.authorization.k8s.io/aggregate-to-*` labels it carries.
    aggregates_to: &'static [&'static str],
    rules: &'static [Grant],
}

const AGGREGATE_PREFIX: &str = "rbac.authorization.k8s.io/aggregate-to-";

const FLUX_GROUPS: &[&str] = &[
    "fluxcd.controlplane.io",
    "source.toolkit.fluxcd.io",
    "source.extensions.fluxcd.io",
    "kustomize.toolkit.fluxcd.io",
    "helm.toolkit.fluxcd.io",
    "image.toolkit.fluxcd.io",
    "notification.toolkit.fluxcd.io",
];

const OPERATOR_RESOURCES: &[&str] = &["resourcesets", "resourcesetinputproviders"];

const READ_ALL: Grant = Grant {
    groups: &["*"],
    resources: &["*"],
    verbs: &["get", "list", "watch"],
};

const CLUSTER_ROLES: &[ReleaseRole] = &[
    ReleaseRole {
        name: "flux-operator-edit",
        aggregates_to: &["admin", "edit"],
        rules: &[Grant {
            groups: &["fluxcd.controlplane.io"],
            resources: OPERATOR_RESOURCES,
            verbs: &["create", "delete", "deletecollection", "patch", "update"],
        }],
    },
    ReleaseRole {
        name: "flux-operator-view",
        aggregates_to: &["admin", "edit", "view"],
        rules: &[Grant {
            groups: &["fluxcd.controlplane.io"],
            resources: OPERATOR_RESOURCES,
            verbs: &["get", "list", "watch"],
        }],
    },
    ReleaseRole {
        name: "flux-web-admin",
        aggregates_to: &[],
        rules: &[
            READ_ALL,
            Grant {
                groups: FLUX_GROUPS,
                resources: &["*"],
                verbs: &["patch", "reconcile", "suspend", "resume", "download"],
            },
            Grant {
                groups: &["apps"],
                resources: &["deployments", "statefulsets", "daemonsets"],
                verbs: &["patch", "restart"],
            },
            Grant {
                groups: &["batch"],
                resources: &["cronjobs", "jobs"],
                verbs: &["create", "restart"],
            },
            Grant {
                groups: &[""],
                resources: &["pods"],
                verbs: &["delete"],
            },
            Grant {
                groups: &[""],
                resources: &["pods/log"],
                verbs: &["get"],
            },
        ],
    },
    ReleaseRole {
        name: "flux-web-user",
        aggregates_to: &[],
        rules: &[READ_ALL],
    },
];

/// The ClusterRoleBindings a release ships and the ClusterRole each binds.
const CLUSTER_ROLE_BINDINGS: &[(&str, &str)] = &[("flux-operator-cluster-admin", "cluster-admin")];

/// More (group, resource, verb) combinations than one rule of a real release holds by far; a
/// rule past it is refused rather than expanded.
const MAX_GRANTS_PER_RULE: usize = 4096;

fn known_names() -> String {
    let roles: Vec<_> = CLUSTER_ROLES.iter().map(|r| r.name).collect();
    let bindings: Vec<_> = CLUSTER_ROLE_BINDINGS.iter().map(|(n, _)| *n).collect();
    format!(
        "ClusterRoles {}; ClusterRoleBinding {}",
        roles.join(", "),
        bindings.join(", ")
    )
}

fn strings<'a>(value: &'a Value, field: &str) -> Vec<&'a str> {
    value
        .get(field)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|v| v.as_str().unwrap_or(""))
        .collect()
}

fn covers(allowed: &[&str], wanted: &str) -> bool {
    allowed.iter().any(|a| *a == "*" || *a == wanted)
}

/// Checks one ClusterRole of a bundle against the release's role of the same name, widened
/// by the `extra` rules a vouching names for it. A role no release ships is allowed only when
/// a vouching names rules for it, and then it may aggregate into no other role.
pub fn check_cluster_role(
    value: &Value,
    object: &ObjectRef,
    extra: &[ClusterRule],
) -> Result<(), BundleError> {
    let vouched_only = ReleaseRole {
        name: "",
        aggregates_to: &[],
        rules: &[],
    };
    let role = match CLUSTER_ROLES.iter().find(|r| r.name == object.name) {
        Some(role) => role,
        None if extra.iter().any(|r| r.cluster_role == object.name) => &vouched_only,
        None => {
            return Err(BundleError::ForeignClusterRbac {
                object: object.clone(),
                known: known_names(),
            });
        }
    };
    if value.get("aggregationRule").is_some_and(|v| !v.is_null()) {
        return Err(BundleError::ForeignAggregation {
            object: Box::new(object.clone()),
            what: "sets aggregationRule (it would take in the rules of other roles)".into(),
        });
    }
    let labels = value
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten();
    for (key, _) in labels {
        if let Some(target) = key.strip_prefix(AGGREGATE_PREFIX)
            && !role.aggregates_to.contains(&target)
        {
            return Err(BundleError::ForeignAggregation {
                object: Box::new(object.clone()),
                what: format!(
                    "has label {} (its rules would join ClusterRole {}); {RELEASES} aggregate \
                     it into {}",
                    quote(key),
                    quote(target),
                    if role.aggregates_to.is_empty() {
                        "no role".to_owned()
                    } else {
                        role.aggregates_to.join(", ")
                    }
                ),
            });
        }
    }
    let rules = value.get("rules").and_then(Value::as_array);
    for (index, rule) in rules.into_iter().flatten().enumerate() {
        let beyond = |grant: String| BundleError::RuleBeyondRelease {
            object: Box::new(object.clone()),
            index,
            grant,
        };
        if let Some(url) = strings(rule, "nonResourceURLs").first() {
            return Err(beyond(format!("non-resource URL {}", quote(url))));
        }
        let (groups, resources, verbs) = (
            strings(rule, "apiGroups"),
            strings(rule, "resources"),
            strings(rule, "verbs"),
        );
        if groups.len() * resources.len() * verbs.len() > MAX_GRANTS_PER_RULE {
            return Err(beyond(format!(
                "more than {MAX_GRANTS_PER_RULE} group, resource and verb combinations"
            )));
        }
        for group in &groups {
            for resource in &resources {
                for verb in &verbs {
                    let granted = role.rules.iter().any(|g| {
                        covers(g.groups, group)
                            && covers(g.resources, resource)
                            && covers(g.verbs, verb)
                    }) || extra
                        .iter()
                        .any(|r| r.grants(&object.name, group, resource, verb));
                    if !granted {
                        return Err(beyond(format!(
                            "{} on {} in group {}",
                            quote(verb),
                            quote(resource),
                            quote(group)
                        )));
                    }
                }
            }
        }
    }
    Ok(())
}

/// Checks one ClusterRoleBinding of a bundle: a name a release ships, bound to the same role.
/// Its subjects are checked with the namespaced bindings' (see [`super`]).
pub fn check_cluster_role_binding(value: &Value, object: &ObjectRef) -> Result<(), BundleError> {
    let (_, role) = CLUSTER_ROLE_BINDINGS
        .iter()
        .find(|(name, _)| *name == object.name)
        .ok_or_else(|| BundleError::ForeignClusterRbac {
            object: object.clone(),
            known: known_names(),
        })?;
    let field = |name: &str| {
        value
            .pointer(&format!("/roleRef/{name}"))
            .and_then(Value::as_str)
            .unwrap_or("")
    };
    if field("kind") != "ClusterRole" || field("name") != *role {
        return Err(BundleError::ForeignRoleRef {
            object: Box::new(object.clone()),
            role_ref: format!("{} {}", quote(field("kind")), quote(field("name"))),
            expected: (*role).to_owned(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(kind: &str, name: &str) -> ObjectRef {
        ObjectRef {
            api_version: "rbac.authorization.k8s.io/v1".into(),
            kind: kind.into(),
            namespace: None,
            name: name.into(),
        }
    }

    fn role(name: &str, yaml: &str) -> Result<(), String> {
        let value: Value = tenantflux_core::yaml::from_str(yaml).unwrap();
        check_cluster_role(&value, &reference("ClusterRole", name), &[]).map_err(|e| e.to_string())
    }

    const VIEW: &str = "metadata:\n  name: flux-operator-view\n  labels:\n    \
        rbac.authorization.k8s.io/aggregate-to-view: \"true\"\n    \
        rbac.authorization.k8s.io/aggregate-to-edit: \"true\"\n\
        rules:\n- apiGroups: [fluxcd.controlplane.io]\n  resources: [resourcesets]\n  \
        verbs: [get, list, watch]\n";

    #[test]
    fn the_releases_roles_pass_and_narrower_ones_too() {
        role("flux-operator-view", VIEW).unwrap();
        role(
            "flux-web-admin",
            "rules:\n- apiGroups: ['*']\n  resources: ['*']\n  verbs: [get]\n\
             - apiGroups: [source.toolkit.fluxcd.io, helm.toolkit.fluxcd.io]\n  \
             resources: ['*']\n  verbs: [suspend, resume]\n- apiGroups: ['']\n  \
             resources: [pods/log]\n  verbs: [get]\n",
        )
        .unwrap();
        role("flux-web-user", "rules: []\n").unwrap();
    }

    #[test]
    fn a_wider_role_is_refused_naming_the_first_grant_past_the_release() {
        let widened = VIEW.replace(
            "resources: [resourcesets]",
            "resources: [resourcesets, secrets]",
        );
        assert_eq!(
            role("flux-operator-view", &widened).unwrap_err(),
            "ClusterRole flux-operator-view rules[0] grants \"get\" on \"secrets\" in group \
             \"fluxcd.controlplane.io\", which flux-operator v0.58.0 to v0.59.0 do not grant \
             that role and no vouching names (spec.operator.vouched[].clusterRules of the policy)"
        );
        let core = "rules:\n- apiGroups: ['']\n  resources: [secrets]\n  verbs: [get]\n";
        assert!(
            role("flux-operator-edit", core)
                .unwrap_err()
                .contains("rules[0] grants \"get\" on \"secrets\" in group \"\"")
        );
        let wildcard = "rules:\n- apiGroups: ['*']\n  resources: ['*']\n  verbs: ['*']\n";
        assert!(
            role("flux-web-user", wildcard)
                .unwrap_err()
                .contains("\"*\" on \"*\"")
        );
        let urls = "rules:\n- nonResourceURLs: ['/metrics']\n  verbs: [get]\n";
        assert!(
            role("flux-web-user", urls)
                .unwrap_err()
                .contains("non-resource URL \"/metrics\"")
        );
        let huge = format!(
            "rules:\n- apiGroups: [{}]\n  resources: [{}]\n  verbs: [get]\n",
            (0..100)
                .map(|i| format!("g{i}"))
                .collect::<Vec<_>>()
                .join(", "),
            (0..100)
                .map(|i| format!("r{i}"))
                .collect::<Vec<_>>()
                .join(", "),
        );
        assert!(
            role("flux-web-user", &huge)
                .unwrap_err()
                .contains("more than 4096")
        );
    }

    #[test]
    fn a_role_may_aggregate_only_where_the_releases_does() {
        let into_view = "metadata:\n  labels:\n    \
            rbac.authorization.k8s.io/aggregate-to-view: \"true\"\nrules: []\n";
        assert_eq!(
            role("flux-web-admin", into_view).unwrap_err(),
            "ClusterRole flux-web-admin has label \"rbac.authorization.k8s.io/aggregate-to-view\" \
             (its rules would join ClusterRole \"view\"); flux-operator v0.58.0 to v0.59.0 \
             aggregate it into no role"
        );
        let into_admin = VIEW.replace("aggregate-to-view", "aggregate-to-cluster-admin");
        assert!(
            role("flux-operator-view", &into_admin)
                .unwrap_err()
                .contains("into admin, edit, view")
        );
        let aggregating = "aggregationRule:\n  clusterRoleSelectors:\n  - matchLabels: {a: b}\n";
        assert!(
            role("flux-web-user", aggregating)
                .unwrap_err()
                .contains("sets aggregationRule")
        );
    }

    #[test]
    fn only_the_releases_names_and_role_refs() {
        assert!(
            role("flux-operator-extra", "rules: []\n")
                .unwrap_err()
                .starts_with(
                    "ClusterRole flux-operator-extra: a bundle creates only the cluster RBAC \
                     flux-operator's releases ship (ClusterRoles flux-operator-edit, \
                     flux-operator-view, flux-web-admin, flux-web-user; ClusterRoleBinding \
                     flux-operator-cluster-admin)"
                )
        );
        let binding = |role_ref: &str| {
            let value: Value = tenantflux_core::yaml::from_str(role_ref).unwrap();
            check_cluster_role_binding(
                &value,
                &reference("ClusterRoleBinding", "flux-operator-cluster-admin"),
            )
            .map_err(|e| e.to_string())
        };
        binding("roleRef: {kind: ClusterRole, name: cluster-admin}\n").unwrap();
        assert_eq!(
            binding("roleRef: {kind: ClusterRole, name: system:aggregate-to-admin}\n").unwrap_err(),
            "ClusterRoleBinding flux-operator-cluster-admin binds \"ClusterRole\" \
             \"system:aggregate-to-admin\"; flux-operator's releases bind it to ClusterRole \
             cluster-admin"
        );
    }

    #[test]
    fn a_vouching_widens_a_role_by_the_rules_it_names_and_no_more() {
        let role = serde_json::json!({
            "metadata": {"name": "flux-operator-edit"},
            "rules": [{
                "apiGroups": ["fluxcd.controlplane.io"],
                "resources": ["resourcesets", "fluxschedules"],
                "verbs": ["create"],
            }],
        });
        let object = reference("ClusterRole", "flux-operator-edit");
        let err = check_cluster_role(&role, &object, &[])
            .unwrap_err()
            .to_string();
        assert!(err.contains("\"create\" on \"fluxschedules\""), "{err}");
        let rule = |role: &str, verbs: &[&str]| ClusterRule {
            cluster_role: role.into(),
            api_groups: vec!["fluxcd.controlplane.io".into()],
            resources: vec!["fluxschedules".into()],
            verbs: verbs.iter().map(|v| v.to_string()).collect(),
        };
        check_cluster_role(&role, &object, &[rule("flux-operator-edit", &["create"])]).unwrap();
        // A rule for another role, or other verbs, does not count.
        for extra in [
            rule("flux-operator-view", &["create"]),
            rule("flux-operator-edit", &["get"]),
        ] {
            assert!(check_cluster_role(&role, &object, &[extra]).is_err());
        }
        // A role no release ships: only when a vouching names it, and never aggregated.
        let new = serde_json::json!({
            "metadata": {"name": "flux-operator-schedules"},
            "rules": [{"apiGroups": ["fluxcd.controlplane.io"], "resources": ["fluxschedules"], "verbs": ["create"]}],
        });
        let object = reference("ClusterRole", "flux-operator-schedules");
        assert!(check_cluster_role(&new, &object, &[]).is_err());
        check_cluster_role(
            &new,
            &object,
            &[rule("flux-operator-schedules", &["create"])],
        )
        .unwrap();
        let mut aggregated = new.clone();
        aggregated["metadata"]["labels"] =
            serde_json::json!({"rbac.authorization.k8s.io/aggregate-to-view": "true"});
        assert!(
            check_cluster_role(
                &aggregated,
                &object,
                &[rule("flux-operator-schedules", &["create"])]
            )
            .is_err()
        );
    }
}
