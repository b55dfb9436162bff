//! Every planning rule, from facts written out by hand.

use serde_json::json;

use super::*;

const SOURCE: &str = "source.toolkit.fluxcd.io";

/// Plans with the embedded release table.
fn plan_of(requested: &str, policy: Option<&Policy>, facts: &Facts) -> UpgradePlan {
    super::plan(
        requested,
        policy,
        facts,
        &Releases::embedded(),
        &|_, _, _| true,
    )
}

fn facts() -> Facts {
    Facts {
        instance_spec: Some(json!({
            "distribution": {"version": "2.6.x", "registry": "ghcr.io/fluxcd"},
        })),
        installed: Some(Release::new(2, 6, 4)),
        kubernetes: Some((1, 36)),
        crds: vec![
            CrdFacts {
                name: "ocirepositories.source.toolkit.fluxcd.io".into(),
                group: SOURCE.into(),
                kind: "OCIRepository".into(),
                stored_versions: vec!["v1beta2".into(), "v1".into()],
                storage_version: "v1".into(),
                objects: 12,
            },
            CrdFacts {
                name: "gitrepositories.source.toolkit.fluxcd.io".into(),
                group: SOURCE.into(),
                kind: "GitRepository".into(),
                stored_versions: vec!["v1".into()],
                storage_version: "v1".into(),
                objects: 3,
            },
        ],
        day: tenantflux_core::policy::parse_date("2026-11-30").unwrap(),
        ..Facts::default()
    }
}

fn codes(findings: &[Finding]) -> Vec<&str> {
    findings.iter().map(|f| f.code.as_str()).collect()
}

fn policy(distribution: &str) -> Policy {
    Policy::parse(&format!(
            "apiVersion: tenantflux.io/v1alpha1\nkind: Policy\nmetadata: {{name: acme}}\nspec:\n  generation: 3\n  distribution:\n{distribution}"
        ))
        .unwrap()
}

#[test]
fn the_plan_follows_the_release_list_it_is_given_and_names_it() {
    let kind = |served: &[&str]| releases::KindVersions {
        group: SOURCE.into(),
        kind: "OCIRepository".into(),
        served: served.iter().map(|v| (*v).to_owned()).collect(),
    };
    let minor = |minor: u64, served: &[&str]| releases::Minor {
        minor,
        kubernetes_minimum: releases::kubernetes_minimum(minor),
        kinds: vec![kind(served)],
    };
    let from_artifact = Releases {
        source: "flux-operator v0.61.0 manifests artifact oci://r/m:v0.61.0 (sha256:1)".into(),
        releases: vec![Release::new(2, 6, 4), Release::new(2, 10, 1)],
        minors: vec![minor(6, &["v1", "v1beta2"]), minor(10, &["v1"])],
    };
    let plan = super::plan("2.x", None, &facts(), &from_artifact, &|_, _, _| true);
    assert_eq!(plan.known_releases, from_artifact.source);
    assert_eq!(
        plan.target, "2.10.1",
        "a release no table in the agent names"
    );
    assert_eq!(plan.migrations.len(), 1, "{plan:?}");
    assert_eq!(plan.migrations[0].unserved, ["v1beta2"]);
    // Flux's Kubernetes minimum for 2.10 is in no artifact and not in the build: assumed, and
    // said so.
    let assumed = plan
        .warnings
        .iter()
        .find(|w| w.code == "unknown-kubernetes-minimum")
        .unwrap_or_else(|| panic!("{:?}", plan.warnings));
    assert!(
        assumed.message.contains("which Kubernetes Flux 2.10 needs"),
        "{}",
        assumed.message
    );
    assert!(
        !plan_of("2.8.x", None, &facts())
            .warnings
            .iter()
            .any(|w| w.code == "unknown-kubernetes-minimum")
    );
    let unknown = super::plan("2.8.x", None, &facts(), &from_artifact, &|_, _, _| true);
    assert!(unknown.blocked);
    assert!(
        unknown.blockers[0]
            .message
            .contains("(known: 2.6.4 … 2.10.1, from flux-operator v0.61.0 manifests artifact"),
        "{:?}",
        unknown.blockers
    );
    // A list naming a release without its minor's API versions blocks instead of guessing.
    let mut partial = from_artifact.clone();
    partial.minors.pop();
    let blocked = super::plan("2.10.x", None, &facts(), &partial, &|_, _, _| true);
    assert!(blocked.blocked);
    assert!(
        blocked.blockers[0]
            .message
            .ends_with("lists Flux 2.10.1 but no API versions for 2.10"),
        "{:?}",
        blocked.blockers
    );
}

#[test]
fn a_clean_upgrade_lists_the_migrations_and_resolves_the_range() {
    let plan = plan_of("2.8.x", None, &facts());
    assert!(!plan.blocked, "{:?}", plan.blockers);
    assert_eq!(plan.target, "2.8.8");
    assert_eq!(plan.written_version, "2.8.x");
    assert_eq!(plan.current_version, "2.6.4");
    assert_eq!(plan.kubernetes_minimum, "1.33");
    assert_eq!(plan.migrations.len(), 1);
    let m = &plan.migrations[0];
    assert_eq!(m.crd, "ocirepositories.source.toolkit.fluxcd.io");
    assert_eq!(m.unserved, ["v1beta2"]);
    assert_eq!((m.storage_version.as_str(), m.objects), ("v1", 12));

    let exact = plan_of("2.8.3", None, &facts());
    assert_eq!(
        (exact.target.as_str(), exact.written_version.as_str()),
        ("2.8.3", "2.8.3")
    );
    // 2.7 still serves v1beta2: nothing to migrate.
    assert!(plan_of("2.7.x", None, &facts()).migrations.is_empty());
}

#[test]
fn kubernetes_too_old_for_the_target_blocks() {
    let mut old = facts();
    old.kubernetes = Some((1, 32));
    let plan = plan_of("2.8.x", None, &old);
    assert!(plan.blocked);
    assert_eq!(codes(&plan.blockers), ["kubernetes"]);
    assert!(
        plan.blockers[0].message.contains("needs Kubernetes 1.33"),
        "{:?}",
        plan.blockers
    );
    assert!(!plan_of("2.7.x", None, &old).blocked);
}

#[test]
fn downgrades_across_minors_are_refused_with_the_reason() {
    let mut newer = facts();
    newer.installed = Some(Release::new(2, 8, 8));
    let plan = plan_of("2.7.x", None, &newer);
    assert_eq!(codes(&plan.blockers), ["downgrade"]);
    assert!(
        plan.blockers[0].message.contains("flux-operator refuses"),
        "{:?}",
        plan.blockers
    );
    assert_eq!(
        codes(&plan_of("2.8.8", None, &newer).warnings),
        ["same-version"]
    );
}

#[test]
fn a_target_outside_the_policy_blocks_and_the_rest_is_still_planned() {
    let policy = policy("    versions: \">=2.5.0 <2.8.0\"\n");
    let plan = plan_of("2.8.x", Some(&policy), &facts());
    assert_eq!(codes(&plan.blockers), ["policy"]);
    assert!(
        plan.blockers[0]
            .message
            .contains("inside \">=2.5.0 <2.8.0\" allowed by policy \"acme\" generation 3"),
        "{:?}",
        plan.blockers
    );
    assert_eq!(plan.target, "2.8.8");
    assert_eq!(plan.migrations.len(), 1);
    // A range reaching into the policy resolves inside it.
    let inside = plan_of("2.x", Some(&policy), &facts());
    assert!(!inside.blocked, "{:?}", inside.blockers);
    assert_eq!(inside.target, "2.7.5");
}

#[test]
fn the_version_is_set_only_where_the_spec_has_room_for_it() {
    assert_eq!(
        with_version(Some(&json!({"distribution": {"registry": "r"}})), "2.8.x"),
        Some(json!({"distribution": {"registry": "r", "version": "2.8.x"}}))
    );
    assert_eq!(
        with_version(None, "2.8.x"),
        Some(json!({"distribution": {"version": "2.8.x"}}))
    );
    // Used to panic the agent (indexing into a string).
    assert_eq!(
        with_version(Some(&json!({"distribution": "2.7"})), "2.8.x"),
        None
    );
    assert_eq!(with_version(Some(&json!([1])), "2.8.x"), None);
}

#[test]
fn the_deadline_is_reported_and_a_target_below_it_warns_then_blocks() {
    let policy = policy(
        "    upgradeDeadline: {minimumVersion: 2.8.0, date: \"2026-12-15\", warnDays: 30}\n",
    );
    let soon = plan_of("2.7.x", Some(&policy), &facts());
    assert_eq!(soon.deadline.as_ref().unwrap().date, "2026-12-15");
    assert!(!soon.blocked);
    assert_eq!(codes(&soon.warnings), ["deadline"]);
    assert!(
        soon.warnings[0].message.contains("in 15 days"),
        "{:?}",
        soon.warnings
    );
    let mut late = facts();
    late.day = tenantflux_core::policy::parse_date("2027-01-01").unwrap();
    let after = plan_of("2.7.x", Some(&policy), &late);
    assert_eq!(codes(&after.blockers), ["policy"]);
    assert!(
        after.blockers[0].message.contains("since 2026-12-15"),
        "{:?}",
        after.blockers
    );
    assert!(!plan_of("2.8.x", Some(&policy), &late).blocked);
}

#[test]
fn objects_git_applies_with_a_removed_version_block_and_others_warn() {
    let mut f = facts();
    let object = |name: &str, version: &str| ObjectRef {
        group: SOURCE.into(),
        kind: "OCIRepository".into(),
        namespace: "apps".into(),
        name: name.into(),
        version: version.into(),
    };
    f.inventory = vec![
        InventoryEntry {
            kustomization: "flux-system/apps".into(),
            source: "GitRepository/flux-system/fleet".into(),
            path: "./apps".into(),
            object: object("podinfo", "v1beta2"),
        },
        InventoryEntry {
            kustomization: "flux-system/apps".into(),
            source: "GitRepository/flux-system/fleet".into(),
            path: "./apps".into(),
            object: object("fine", "v1"),
        },
    ];
    f.managed = vec![
        ManagedEntry {
            manager: "kustomize-controller".into(),
            object: object("podinfo", "v1beta2"),
        },
        ManagedEntry {
            manager: "ci-bot".into(),
            object: object("manual", "v1beta2"),
        },
    ];
    let plan = plan_of("2.8.x", None, &f);
    assert_eq!(codes(&plan.blockers), ["removed-api-in-git"]);
    let message = &plan.blockers[0].message;
    for part in [
        "Kustomization flux-system/apps",
        "GitRepository/flux-system/fleet",
        "\"./apps\"",
        "OCIRepository apps/podinfo as source.toolkit.fluxcd.io/v1beta2 (use source.toolkit.fluxcd.io/v1)",
        "change them in Git",
    ] {
        assert!(message.contains(part), "{part}: {message}");
    }
    assert_eq!(codes(&plan.warnings), ["removed-api-in-cluster"]);
    assert!(plan.warnings[0].message.contains("\"ci-bot\""));
    assert_eq!(plan.removed_api_uses.len(), 2);
    assert!(plan.removed_api_uses[0].blocking && !plan.removed_api_uses[1].blocking);
    // 2.7 still serves v1beta2.
    assert!(!plan_of("2.7.x", None, &f).blocked);

    // A reader who may not list in `apps` learns how many, not which, and is still blocked.
    let outside_apps = |_: &str, _: &str, namespace: &str| namespace != "apps";
    let hidden = super::plan("2.8.x", None, &f, &Releases::embedded(), &outside_apps);
    assert!(hidden.blocked);
    assert_eq!(
        codes(&hidden.blockers),
        ["removed-api-in-git"],
        "{:?}",
        hidden.blockers
    );
    assert_eq!(codes(&hidden.warnings), ["removed-api-in-cluster"]);
    let text = format!("{:?} {:?}", hidden.blockers, hidden.warnings);
    for secret in ["podinfo", "manual", "ci-bot", "flux-system/apps", "./apps"] {
        assert!(!text.contains(secret), "{secret} named: {text}");
    }
    assert!(
        text.contains("1 object in namespaces you may not list is applied from Git"),
        "{text}"
    );
    assert!(
        text.contains("1 object in namespaces you may not list was written"),
        "{text}"
    );
    assert!(hidden.removed_api_uses.is_empty());
    assert_eq!(hidden.hidden_removed_api_uses, 2);
    // The Kustomization's namespace counts too: its name, source and path are its own.
    let outside_flux_system = |_: &str, kind: &str, namespace: &str| {
        !(kind == "Kustomization" && namespace == "flux-system")
    };
    let ks_hidden = super::plan(
        "2.8.x",
        None,
        &f,
        &Releases::embedded(),
        &outside_flux_system,
    );
    assert_eq!(ks_hidden.hidden_removed_api_uses, 1);
    assert!(!format!("{:?}", ks_hidden.blockers).contains("flux-system/apps"));
}

#[test]
fn managed_fields_at_a_removed_version_are_migrated_even_when_nothing_is_stored_at_it() {
    let mut f = facts();
    f.managed = vec![ManagedEntry {
        manager: "kustomize-controller".into(),
        object: ObjectRef {
            group: SOURCE.into(),
            kind: "GitRepository".into(),
            namespace: "apps".into(),
            name: "fleet".into(),
            version: "v1beta2".into(),
        },
    }];
    let plan = plan_of("2.8.x", None, &f);
    let git = plan
        .migrations
        .iter()
        .find(|m| m.crd == "gitrepositories.source.toolkit.fluxcd.io")
        .expect("migrated for its managedFields");
    assert_eq!(git.stored_versions, ["v1"]);
    assert_eq!(git.unserved, ["v1beta2"]);
    assert_eq!(git.objects, 3);
}

#[test]
fn a_storage_version_the_target_does_not_serve_needs_an_intermediate_minor() {
    let mut f = facts();
    f.crds.push(CrdFacts {
        name: "imageupdateautomations.image.toolkit.fluxcd.io".into(),
        group: "image.toolkit.fluxcd.io".into(),
        kind: "ImageUpdateAutomation".into(),
        stored_versions: vec!["v1beta2".into()],
        storage_version: "v1beta2".into(),
        objects: 0,
    });
    let plan = plan_of("2.9.x", None, &f);
    assert_eq!(codes(&plan.blockers), ["storage-version"]);
    assert!(
        plan.blockers[0].message.contains("upgrade to 2.7.x first"),
        "{:?}",
        plan.blockers
    );
}

#[test]
fn unknown_targets_and_missing_instances() {
    let plan = plan_of("2.10.x", None, &facts());
    assert_eq!(codes(&plan.blockers), ["unknown-release"]);
    assert!(
        plan.blockers[0].message.contains("2.2.3 … 2.9.5"),
        "{:?}",
        plan.blockers
    );
    assert_eq!(
        codes(&plan_of("latest", None, &facts()).blockers),
        ["unknown-release"]
    );
    let none = Facts {
        instance_spec: None,
        installed: None,
        ..facts()
    };
    assert_eq!(
        codes(&plan_of("2.8.x", None, &none).blockers),
        ["no-instance"]
    );
}

#[test]
fn versions_read_from_the_cluster() {
    assert_eq!(
        installed_release("v2.6.4@sha256:abc"),
        Some(Release::new(2, 6, 4))
    );
    assert_eq!(installed_release(""), None);
    assert_eq!(kubernetes_version("1", "36+"), Some((1, 36)));
    assert_eq!(kubernetes_version("1", ""), None);
}
