//! deploy/manifests against the code: every document is a well-formed object of its kind, and
//! the RBAC grants exactly what the agent asks the API server for (and what it tells callers
//! to bind). Applying them to a real API server is the integration tests' part.
//!
//! Over 600 lines because one test (the agent's ClusterRole) lists, one by one, every request
//! the agent makes with the rule that allows it: that list is the test, and split it would be
//! one table in two files.

use std::{fs, path::PathBuf};

use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{Namespace, Service, ServiceAccount},
    networking::v1::NetworkPolicy,
    rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding},
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::Deserialize;
use tenantflux_agent::{
    cli::Args,
    flux_instance_resource, flux_report_resource,
    operator::{
        RECORD_CONFIGMAP,
        bundle::{KINDS, Stage},
    },
    server::auth::Permission,
    workloads::catalog,
};
use tenantflux_core::flux::{INSTANCE_NAME, OPERATOR_DEPLOYMENT};

fn manifests_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/manifests")
}

#[derive(Default)]
struct Objects {
    namespaces: Vec<Namespace>,
    service_accounts: Vec<ServiceAccount>,
    cluster_roles: Vec<ClusterRole>,
    cluster_role_bindings: Vec<ClusterRoleBinding>,
    roles: Vec<Role>,
    role_bindings: Vec<RoleBinding>,
    deployments: Vec<Deployment>,
    services: Vec<Service>,
    network_policies: Vec<NetworkPolicy>,
}

fn load() -> Objects {
    #[derive(Deserialize)]
    struct Kustomization {
        resources: Vec<String>,
    }
    let dir = manifests_dir();
    let kustomization: Kustomization = tenantflux_core::yaml::from_str(
        &fs::read_to_string(dir.join("kustomization.yaml")).unwrap(),
    )
    .unwrap();
    let mut listed = kustomization.resources.clone();
    listed.sort();
    let mut present: Vec<String> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".yaml") && n != "kustomization.yaml")
        .collect();
    present.sort();
    assert_eq!(listed, present, "kustomization.yaml lists every manifest");

    let mut objects = Objects::default();
    for file in &kustomization.resources {
        let text = fs::read_to_string(dir.join(file)).unwrap();
        for value in tenantflux_core::yaml::documents::<serde_json::Value>(&text).unwrap() {
            let kind = value["kind"].as_str().unwrap_or_default().to_owned();
            let context = format!("{file}: {kind}");
            macro_rules! push {
                ($list:ident) => {
                    objects
                        .$list
                        .push(serde_json::from_value(value).expect(&context))
                };
            }
            match kind.as_str() {
                "Namespace" => push!(namespaces),
                "ServiceAccount" => push!(service_accounts),
                "ClusterRole" => push!(cluster_roles),
                "ClusterRoleBinding" => push!(cluster_role_bindings),
                "Role" => push!(roles),
                "RoleBinding" => push!(role_bindings),
                "Deployment" => push!(deployments),
                "Service" => push!(services),
                "NetworkPolicy" => push!(network_policies),
                other => panic!("{file}: unexpected kind {other:?}"),
            }
        }
    }
    objects
}

fn allows(
    rules: &[PolicyRule],
    group: &str,
    resource: &str,
    verb: &str,
    name: Option<&str>,
) -> bool {
    rules.iter().any(|rule| {
        let has = |list: &Option<Vec<String>>, want: &str| {
            list.as_ref()
                .is_some_and(|l| l.iter().any(|v| v == want || v == "*"))
        };
        has(&rule.api_groups, group)
            && has(&rule.resources, resource)
            && rule.verbs.iter().any(|v| v == verb || v == "*")
            && match (&rule.resource_names, name) {
                (None, _) => true,
                (Some(names), _) if names.is_empty() => true,
                (Some(names), Some(name)) => names.iter().any(|n| n == name),
                (Some(_), None) => false,
            }
    })
}

#[test]
fn agent_cluster_role_grants_what_the_agent_uses_and_nothing_broad() {
    let objects = load();
    let role = objects
        .cluster_roles
        .iter()
        .find(|r| r.metadata.name.as_deref() == Some("tenantflux-agent"))
        .expect("ClusterRole tenantflux-agent");
    let rules = role.rules.as_deref().unwrap();
    assert!(allows(
        rules,
        "authentication.k8s.io",
        "tokenreviews",
        "create",
        None
    ));
    assert!(allows(
        rules,
        "authorization.k8s.io",
        "subjectaccessreviews",
        "create",
        None
    ));
    // Reading a caller's identity CSR and listing them (to deny the expired ones); nothing
    // that would create, change or delete one, and approval only for the identity signer,
    // whom nobody signs for.
    for verb in ["get", "list"] {
        assert!(
            allows(
                rules,
                "certificates.k8s.io",
                "certificatesigningrequests",
                verb,
                None
            ),
            "{verb} certificatesigningrequests"
        );
    }
    for verb in ["create", "update", "patch", "delete"] {
        assert!(
            !allows(
                rules,
                "certificates.k8s.io",
                "certificatesigningrequests",
                verb,
                None
            ),
            "{verb} certificatesigningrequests"
        );
    }
    assert!(!allows(
        rules,
        "certificates.k8s.io",
        "certificatesigningrequests/status",
        "update",
        None
    ));
    assert!(allows(
        rules,
        "certificates.k8s.io",
        "certificatesigningrequests/approval",
        "update",
        None
    ));
    assert!(allows(
        rules,
        "certificates.k8s.io",
        "signers",
        "approve",
        Some(tenantflux_core::identity::SIGNER_NAME)
    ));
    for other in [
        "kubernetes.io/kube-apiserver-client",
        "kubernetes.io/kubelet-serving",
    ] {
        assert!(
            !allows(
                rules,
                "certificates.k8s.io",
                "signers",
                "approve",
                Some(other)
            ),
            "approve {other}"
        );
    }
    assert!(!allows(
        rules,
        "certificates.k8s.io",
        "signers",
        "sign",
        None
    ));
    for verb in ["get", "list", "watch"] {
        assert!(allows(
            rules,
            "apps",
            "deployments",
            verb,
            Some(OPERATOR_DEPLOYMENT)
        ));
        for resource in [flux_instance_resource(), flux_report_resource()] {
            assert!(
                allows(
                    rules,
                    &resource.group,
                    &resource.plural,
                    verb,
                    Some(INSTANCE_NAME)
                ),
                "{verb} {}",
                resource.plural
            );
        }
    }
    assert!(!allows(rules, "apps", "deployments", "get", Some("other")));
    // Adoption finds Flux's controllers by name in any namespace, and only reads them.
    for name in tenantflux_agent::adopt::plan::controller_names() {
        for verb in ["get", "list"] {
            assert!(
                allows(rules, "apps", "deployments", verb, Some(name)),
                "{verb} {name}"
            );
        }
        assert!(
            !allows(rules, "apps", "deployments", "patch", Some(name)),
            "patch {name}"
        );
    }
    assert!(!allows(rules, "apps", "deployments", "list", None));
    // Helm's release records are listed only where the chart's `adopt: true` grants it, never
    // by the agent's ClusterRole.
    assert!(!allows(rules, "", "secrets", "list", None));
    // Every Flux kind of the catalog: cached (list/watch), read (get) and controlled (patch),
    // except read-only kinds, which the agent never patches.
    for kind in catalog::KINDS {
        for verb in ["get", "list", "watch", "patch"] {
            let needed = verb != "patch" || kind.controllable();
            assert_eq!(
                allows(rules, kind.group, kind.plural, verb, None),
                needed,
                "{verb} {}",
                kind.resource()
            );
        }
    }
    for verb in ["get", "list", "watch"] {
        assert!(allows(
            rules,
            "apiextensions.k8s.io",
            "customresourcedefinitions",
            verb,
            None
        ));
    }
    assert!(!allows(
        rules,
        "apps",
        "deployments",
        "patch",
        Some("other")
    ));
    // `events` lists and follows the Events of Flux objects (inspect::events), in one namespace
    // or cluster-wide; it never writes them there.
    for verb in ["list", "watch"] {
        assert!(allows(rules, "", "events", verb, None), "{verb} events");
    }
    assert!(!allows(rules, "", "events", "create", None));
    // Upgrades trim status.storedVersions of the CRDs whose objects they migrated.
    assert!(allows(
        rules,
        "apiextensions.k8s.io",
        "customresourcedefinitions/status",
        "patch",
        Some("ocirepositories.source.toolkit.fluxcd.io")
    ));

    // Installing flux-operator: server-side apply of every kind a bundle may hold.
    for kind in KINDS {
        let name = (kind.stage == Stage::Operator).then_some(OPERATOR_DEPLOYMENT);
        for verb in ["get", "patch"] {
            assert!(
                allows(rules, kind.group(), kind.plural, verb, name),
                "{verb} {}",
                kind.plural
            );
        }
        assert!(
            allows(rules, kind.group(), kind.plural, "create", None),
            "create {}",
            kind.plural
        );
        // Pruning deletes what a new bundle dropped, but never CRDs or Namespaces: that would
        // delete the tenant's Flux objects with them.
        let prunable = !matches!(
            kind.stage,
            Stage::Crds | Stage::Namespaces | Stage::Operator
        );
        assert_eq!(
            allows(rules, kind.group(), kind.plural, "delete", Some("x")),
            prunable,
            "delete {}",
            kind.plural
        );
    }
    // flux-operator binds cluster-admin and ships aggregated ClusterRoles.
    let rbac = "rbac.authorization.k8s.io";
    assert!(allows(
        rules,
        rbac,
        "clusterroles",
        "bind",
        Some("cluster-admin")
    ));
    assert!(!allows(rules, rbac, "clusterroles", "bind", Some("other")));
    assert!(allows(
        rules,
        rbac,
        "clusterroles",
        "escalate",
        Some("flux-operator-edit")
    ));

    // Deletes go to bundle kinds only (pruning an upgrade); Flux objects are never deleted.
    let bundle_resources: Vec<(&str, &str)> = KINDS.iter().map(|k| (k.group(), k.plural)).collect();
    for rule in rules {
        assert!(!rule.verbs.iter().any(|v| v == "*"), "no wildcard verbs");
        if rule.verbs.iter().any(|v| v == "delete") {
            for group in rule.api_groups.iter().flatten() {
                for resource in rule.resources.iter().flatten() {
                    assert!(
                        bundle_resources.contains(&(group.as_str(), resource.as_str())),
                        "delete on {resource}.{group}, which no bundle holds"
                    );
                }
            }
        }
        assert!(
            !rule.resources.iter().flatten().any(|r| r == "*"),
            "no wildcard resources"
        );
        // The one update: denying expired identity CSRs (the approval subresource takes no
        // apply).
        let approval = rule.resources.as_deref()
            == Some(&["certificatesigningrequests/approval".to_owned()][..]);
        assert!(
            !rule
                .verbs
                .iter()
                .any(|v| v == "deletecollection" || (v == "update" && !approval)),
            "server-side apply needs neither update nor deletecollection"
        );
        // Patches go to Flux objects (local control), to what a bundle holds (the install), or to
        // the admission policy.
        if rule.verbs.iter().any(|v| v == "patch") {
            for group in rule.api_groups.iter().flatten() {
                for resource in rule.resources.iter().flatten() {
                    // FluxReport: only its refresh annotation, only the one named flux.
                    let report_refresh = group == "fluxcd.controlplane.io"
                        && resource == "fluxreports"
                        && rule.resource_names.as_deref() == Some(&[INSTANCE_NAME.to_string()][..]);
                    // The admission policy rendered from the held policy, only by its name.
                    let admission = group == "admissionregistration.k8s.io"
                        && rule.resource_names.as_deref()
                            == Some(&[tenantflux_core::policy::admission::NAME.to_string()][..]);
                    // Upgrades: storedVersions of CRDs after their objects were migrated.
                    let stored_versions = group == "apiextensions.k8s.io"
                        && resource == "customresourcedefinitions/status";
                    let flux_kind = report_refresh
                        || admission
                        || stored_versions
                        || catalog::KINDS
                            .iter()
                            .any(|k| k.group == group && k.plural == resource);
                    assert!(
                        flux_kind
                            || bundle_resources.contains(&(group.as_str(), resource.as_str())),
                        "patch on {resource}.{group}, neither a Flux kind nor a bundle kind"
                    );
                }
            }
        }
    }
    let binding = objects
        .cluster_role_bindings
        .iter()
        .find(|b| b.role_ref.name == "tenantflux-agent")
        .expect("ClusterRoleBinding to tenantflux-agent");
    let subject = &binding.subjects.as_ref().unwrap()[0];
    assert_eq!(
        (
            subject.kind.as_str(),
            subject.name.as_str(),
            subject.namespace.as_deref()
        ),
        (
            "ServiceAccount",
            "tenantflux-agent",
            Some("tenantflux-system")
        )
    );
}

#[test]
fn agent_cluster_role_may_keep_only_its_own_admission_policy() {
    let objects = load();
    let role = objects
        .cluster_roles
        .iter()
        .find(|r| r.metadata.name.as_deref() == Some("tenantflux-agent"))
        .expect("ClusterRole tenantflux-agent");
    let rules = role.rules.as_deref().unwrap();
    let group = "admissionregistration.k8s.io";
    let name = tenantflux_core::policy::admission::NAME;
    for resource in [
        "validatingadmissionpolicies",
        "validatingadmissionpolicybindings",
    ] {
        for verb in ["get", "create", "patch"] {
            assert!(
                allows(rules, group, resource, verb, Some(name)),
                "{verb} {resource} {name}"
            );
            assert!(
                !allows(rules, group, resource, verb, Some("other")),
                "{verb} {resource} other"
            );
        }
        assert!(!allows(rules, group, resource, "delete", Some(name)));
    }
}

#[test]
fn agent_role_in_its_namespace_covers_sources_record_and_events() {
    let objects = load();
    let role = objects
        .roles
        .iter()
        .find(|r| r.metadata.name.as_deref() == Some("tenantflux-agent"))
        .expect("Role tenantflux-agent");
    assert_eq!(
        role.metadata.namespace.as_deref(),
        Some("tenantflux-system")
    );
    let rules = role.rules.as_deref().unwrap();
    for resource in ["configmaps", "secrets"] {
        for verb in ["get", "list", "watch"] {
            assert!(
                allows(rules, "", resource, verb, Some("bundle")),
                "{verb} {resource}"
            );
        }
    }
    assert!(allows(rules, "", "configmaps", "create", None));
    assert!(allows(
        rules,
        "",
        "configmaps",
        "patch",
        Some(RECORD_CONFIGMAP)
    ));
    // The adoption's record.
    assert!(allows(
        rules,
        "",
        "configmaps",
        "patch",
        Some(tenantflux_agent::adopt::RECORD_NAME)
    ));
    assert!(!allows(rules, "", "configmaps", "patch", Some("bundle")));
    assert!(!allows(rules, "", "secrets", "patch", Some("bundle")));
    assert!(allows(rules, "events.k8s.io", "events", "create", None));
    assert!(allows(rules, "events.k8s.io", "events", "patch", None));
    let binding = objects
        .role_bindings
        .iter()
        .find(|b| b.role_ref.name == "tenantflux-agent")
        .expect("RoleBinding of tenantflux-agent");
    assert_eq!(binding.role_ref.kind, "Role");
    assert_eq!(
        binding.subjects.as_ref().unwrap()[0].name,
        "tenantflux-agent"
    );
}

#[test]
fn user_role_grants_the_permission_the_agent_checks() {
    let objects = load();
    let role = objects
        .roles
        .iter()
        .find(|r| r.metadata.name.as_deref() == Some("tenantflux-user"))
        .expect("Role tenantflux-user");
    assert_eq!(
        role.metadata.namespace.as_deref(),
        Some("tenantflux-system")
    );
    let rules = role.rules.as_deref().unwrap();
    let permission = Permission::agent_status("tenantflux-system");
    let resource = format!(
        "{}/{}",
        permission.resource,
        permission.subresource.as_deref().unwrap()
    );
    assert!(allows(
        rules,
        &permission.group,
        &resource,
        &permission.verb,
        None
    ));
    assert!(allows(rules, "", "pods", "list", None));
    assert!(allows(rules, "", "pods", "get", None));
    assert!(allows(rules, "", "pods/portforward", "create", None));
    assert!(allows(rules, "", "pods/portforward", "get", None));
    assert!(allows(
        rules,
        "",
        "configmaps",
        "get",
        Some(RECORD_CONFIGMAP)
    ));
    assert!(allows(rules, "", "events", "list", None));
    assert!(allows(rules, "events.k8s.io", "events", "list", None));

    // A user may mint a token of tenantflux-client (client-certificate users who may not
    // create CSRs); tenantflux-client itself holds the same rules but may not mint its own.
    let mint = |rules: &[PolicyRule]| {
        allows(
            rules,
            "",
            "serviceaccounts/token",
            "create",
            Some("tenantflux-client"),
        )
    };
    assert!(mint(rules));
    let client_role = objects
        .roles
        .iter()
        .find(|r| r.metadata.name.as_deref() == Some("tenantflux-client"))
        .expect("Role tenantflux-client");
    let client_rules = client_role.rules.as_deref().unwrap();
    assert!(
        !mint(client_rules),
        "tenantflux-client mints its own tokens"
    );
    let without_mint: Vec<_> = rules
        .iter()
        .filter(|r| !mint(std::slice::from_ref(r)))
        .collect();
    assert_eq!(
        without_mint,
        client_rules.iter().collect::<Vec<_>>(),
        "tenantflux-client holds what a user holds, less minting"
    );
    let binding = objects
        .role_bindings
        .iter()
        .find(|b| b.metadata.name.as_deref() == Some("tenantflux-client"))
        .expect("RoleBinding tenantflux-client");
    assert_eq!(binding.role_ref.name, "tenantflux-client");
    let subject = &binding.subjects.as_ref().unwrap()[0];
    assert_eq!(
        (subject.kind.as_str(), subject.name.as_str()),
        ("ServiceAccount", "tenantflux-client")
    );
    // Users may create identity CSRs, not delete anyone's.
    let identity = objects
        .cluster_roles
        .iter()
        .find(|r| r.metadata.name.as_deref() == Some("tenantflux-caller-identity"))
        .expect("ClusterRole tenantflux-caller-identity");
    let identity_rules = identity.rules.as_deref().unwrap();
    assert!(allows(
        identity_rules,
        "certificates.k8s.io",
        "certificatesigningrequests",
        "create",
        None
    ));
    for verb in ["delete", "deletecollection", "update", "patch", "list"] {
        assert!(
            !allows(
                identity_rules,
                "certificates.k8s.io",
                "certificatesigningrequests",
                verb,
                None
            ),
            "{verb} certificatesigningrequests"
        );
    }
    let mut names: Vec<_> = objects
        .service_accounts
        .iter()
        .filter_map(|s| s.metadata.name.as_deref())
        .collect();
    // In whatever order the generated files list them.
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "tenantflux-agent",
            "tenantflux-client",
            "tenantflux-platform"
        ]
    );
    assert_eq!(
        objects.namespaces[0].metadata.name.as_deref(),
        Some("tenantflux-system")
    );
}

#[test]
fn platform_role_may_read_status_and_push_policies_only() {
    let objects = load();
    let role = objects
        .roles
        .iter()
        .find(|r| r.metadata.name.as_deref() == Some("tenantflux-platform"))
        .expect("Role tenantflux-platform");
    let rules = role.rules.as_deref().unwrap();
    assert!(allows(rules, "tenantflux.io", "agents/status", "get", None));
    assert!(allows(rules, "tenantflux.io", "policies", "update", None));
    assert!(allows(rules, "tenantflux.io", "policies", "get", None));
    // The kubeconfig's own credentials find the pod and port-forward; the token only calls.
    assert!(!allows(rules, "", "pods", "list", None));
    assert!(!allows(rules, "", "serviceaccounts/token", "create", None));
    let binding = objects
        .role_bindings
        .iter()
        .find(|b| b.role_ref.name == "tenantflux-platform")
        .expect("RoleBinding of tenantflux-platform");
    let subject = &binding.subjects.as_ref().unwrap()[0];
    assert_eq!(
        (subject.kind.as_str(), subject.name.as_str()),
        ("ServiceAccount", "tenantflux-platform")
    );
}

#[test]
fn deployment_matches_the_agent_flags_and_is_locked_down() {
    use clap::Parser;
    let defaults = Args::parse_from(["tenantflux-agent"]);
    let objects = load();
    let deployment = &objects.deployments[0];
    assert_eq!(
        deployment.metadata.name.as_deref(),
        Some("tenantflux-agent")
    );
    let labels = deployment.metadata.labels.as_ref().unwrap();
    assert_eq!(labels["app.kubernetes.io/name"], "tenantflux-agent");
    assert_eq!(labels["app.kubernetes.io/part-of"], "tenantflux");
    let pod = deployment
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap();
    assert_eq!(
        pod.service_account_name.as_deref(),
        Some("tenantflux-agent")
    );
    let container = &pod.containers[0];
    assert_eq!(
        container.image.as_deref(),
        Some("ghcr.io/tenantflux/tenantflux-agent:v0.1.0")
    );

    let ports = container.ports.as_ref().unwrap();
    let port = |name: &str| {
        ports
            .iter()
            .find(|p| p.name.as_deref() == Some(name))
            .unwrap_or_else(|| panic!("port {name}"))
            .container_port
    };
    assert_eq!(port("grpc"), i32::from(defaults.grpc_address.port()));
    assert_eq!(port("admin"), i32::from(defaults.admin_address.port()));

    let env = container.env.as_ref().unwrap();
    let namespace = env
        .iter()
        .find(|e| e.name == "TENANTFLUX_NAMESPACE")
        .expect("TENANTFLUX_NAMESPACE");
    assert_eq!(
        namespace
            .value_from
            .as_ref()
            .and_then(|v| v.field_ref.as_ref())
            .map(|f| f.field_path.as_str()),
        Some("metadata.namespace")
    );

    let probe_path = |probe: &Option<k8s_openapi::api::core::v1::Probe>| {
        probe
            .as_ref()
            .and_then(|p| p.http_get.as_ref())
            .and_then(|h| h.path.clone())
    };
    assert_eq!(
        probe_path(&container.liveness_probe).as_deref(),
        Some("/livez")
    );
    assert_eq!(
        probe_path(&container.readiness_probe).as_deref(),
        Some("/readyz")
    );

    let security = container.security_context.as_ref().unwrap();
    assert_eq!(security.run_as_non_root, Some(true));
    assert_eq!(security.read_only_root_filesystem, Some(true));
    assert_eq!(security.allow_privilege_escalation, Some(false));
    assert_eq!(
        security.capabilities.as_ref().and_then(|c| c.drop.clone()),
        Some(vec!["ALL".to_owned()])
    );
    assert_eq!(
        security.seccomp_profile.as_ref().map(|s| s.type_.as_str()),
        Some("RuntimeDefault")
    );
    let resources = container.resources.as_ref().unwrap();
    assert!(resources.requests.is_some() && resources.limits.is_some());

    let service = &objects.services[0];
    let names: Vec<_> = service
        .spec
        .as_ref()
        .unwrap()
        .ports
        .as_ref()
        .unwrap()
        .iter()
        .filter_map(|p| p.name.as_deref())
        .collect();
    // gRPC listens on the pod's loopback (reached through port-forwards only), so neither the
    // Service nor the NetworkPolicy offers it.
    assert!(
        defaults.grpc_address.ip().is_loopback(),
        "{}",
        defaults.grpc_address
    );
    assert_eq!(names, ["admin"]);
    let policy = &objects.network_policies[0];
    let spec = policy.spec.as_ref().unwrap();
    assert_eq!(
        spec.pod_selector
            .as_ref()
            .and_then(|s| s.match_labels.as_ref())
            .map(|l| l["app.kubernetes.io/name"].as_str()),
        Some("tenantflux-agent")
    );
    let admitted: Vec<_> = spec
        .ingress
        .iter()
        .flatten()
        .flat_map(|rule| rule.ports.iter().flatten())
        .map(|p| p.port.clone())
        .collect();
    assert_eq!(admitted, [Some(IntOrString::String("admin".into()))]);
}
