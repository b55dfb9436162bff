//! Every planning rule, from facts written out by hand.

use serde_json::json;
use tenantflux_core::releases;

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

// Each check of the pipeline on its own.

/// What `requested` resolves to in `known`, with no policy.
fn resolved<'a>(requested: &str, known: &'a Releases) -> checks::Target<'a> {
    checks::resolve(requested, None, "", known)
        .unwrap_or_else(|e| panic!("{requested}: {e:?}"))
        .0
}

/// The embedded table, naming 2.10.1 too; with its API versions (those of 2.9) when `served`.
fn with_2_10(served: bool) -> Releases {
    let mut known = Releases::embedded();
    known.releases.push(Release::new(2, 10, 1));
    if served {
        let mut minor = known.minors.last().unwrap().clone();
        minor.minor = 10;
        known.minors.push(minor);
    }
    known
}

fn source_object(kind: &str, namespace: &str, name: &str, version: &str) -> ObjectRef {
    ObjectRef {
        group: SOURCE.into(),
        kind: kind.into(),
        namespace: namespace.into(),
        name: name.into(),
        version: version.into(),
    }
}

fn applied(kustomization: &str, object: ObjectRef) -> InventoryEntry {
    InventoryEntry {
        kustomization: kustomization.into(),
        source: "GitRepository/flux-system/fleet".into(),
        path: "./apps".into(),
        object,
    }
}

fn written(manager: &str, object: ObjectRef) -> ManagedEntry {
    ManagedEntry {
        manager: manager.into(),
        object,
    }
}

#[test]
fn resolve_names_the_release_what_it_serves_and_what_is_written() {
    let known = Releases::embedded();
    let (target, findings) = checks::resolve("2.8.x", None, "", &known).unwrap();
    assert_eq!(target.release, Release::new(2, 8, 8));
    assert_eq!(target.written_version, "2.8.x");
    assert_eq!(target.table.kubernetes_minimum, 33);
    assert!(!target.outside_policy);
    assert_eq!(findings, checks::Findings::default());
    assert_eq!(resolved("2.8.3", &known).written_version, "2.8.3");

    let range = Range::parse(">=2.5.0 <2.8.0").unwrap();
    let (outside, findings) =
        checks::resolve("2.8.x", Some(&range), "policy \"p\"", &known).unwrap();
    assert!(outside.outside_policy);
    assert_eq!(outside.release, Release::new(2, 8, 8));
    assert_eq!(codes(&findings.blockers), ["policy"]);
    assert!(
        findings.blockers[0]
            .message
            .ends_with("is inside \">=2.5.0 <2.8.0\" allowed by policy \"p\""),
        "{:?}",
        findings.blockers
    );
}

#[test]
fn resolve_stops_the_plan_when_nothing_resolves_or_the_table_is_missing() {
    let known = Releases::embedded();
    for requested in ["latest", "3.x", "2.10.x"] {
        let stopped = checks::resolve(requested, None, "", &known).unwrap_err();
        assert_eq!(codes(&stopped.blockers), ["unknown-release"], "{requested}");
        assert!(stopped.warnings.is_empty());
    }
    // Outside the policy and without API versions: both, in that order.
    let range = Range::parse(">=2.5.0 <2.8.0").unwrap();
    let stopped = checks::resolve("2.10.x", Some(&range), "p", &with_2_10(false)).unwrap_err();
    assert_eq!(codes(&stopped.blockers), ["policy", "unknown-release"]);
    // A minor the build has no Kubernetes minimum for: assumed, and said so.
    let (_, findings) = checks::resolve("2.10.x", None, "", &with_2_10(true)).unwrap();
    assert_eq!(codes(&findings.warnings), ["unknown-kubernetes-minimum"]);
}

#[test]
fn the_policy_check_judges_the_bumped_instance() {
    let known = Releases::embedded();
    let target = resolved("2.8.x", &known);
    let spec = facts().instance_spec;
    let day = facts().day;
    assert_eq!(
        codes(&checks::policy(None, None, day, &target).blockers),
        ["no-instance"]
    );
    assert_eq!(
        checks::policy(None, spec.as_ref(), day, &target),
        checks::Findings::default()
    );
    let narrow = policy("    versions: \">=2.5.0 <2.8.0\"\n");
    let refused = checks::policy(Some(&narrow), spec.as_ref(), day, &target);
    assert_eq!(codes(&refused.blockers), ["policy"]);
    assert!(refused.blockers[0].message.contains(" is outside "));
    // Already reported by `resolve`: not twice.
    let outside = checks::Target {
        outside_policy: true,
        ..target.clone()
    };
    assert!(
        checks::policy(Some(&narrow), spec.as_ref(), day, &outside)
            .blockers
            .is_empty()
    );
    // A spec with no room for the version: nothing to judge.
    let no_room = json!({"distribution": "2.7"});
    assert_eq!(
        checks::policy(Some(&narrow), Some(&no_room), day, &target),
        checks::Findings::default()
    );
    let deadline = policy(
        "    upgradeDeadline: {minimumVersion: 2.9.0, date: \"2026-12-15\", warnDays: 30}\n",
    );
    let soon = checks::policy(Some(&deadline), spec.as_ref(), day, &target);
    assert_eq!(
        (codes(&soon.blockers), codes(&soon.warnings)),
        (vec![], vec!["deadline"])
    );
}

#[test]
fn the_installed_check_refuses_downgrades_across_minors_only() {
    let release = Release::new;
    let installed = |now, target| checks::installed(now, true, target);
    assert_eq!(
        codes(&installed(Some(release(2, 8, 8)), release(2, 7, 5)).blockers),
        ["downgrade"]
    );
    assert_eq!(
        installed(Some(release(2, 8, 8)), release(2, 8, 3)),
        checks::Findings::default()
    );
    assert_eq!(
        installed(Some(release(2, 6, 4)), release(2, 8, 8)),
        checks::Findings::default()
    );
    assert_eq!(
        codes(&installed(Some(release(2, 8, 8)), release(2, 8, 8)).warnings),
        ["same-version"]
    );
    assert_eq!(
        codes(&installed(None, release(2, 8, 8)).warnings),
        ["not-applied"]
    );
    assert_eq!(
        checks::installed(None, false, release(2, 8, 8)),
        checks::Findings::default()
    );
}

#[test]
fn the_kubernetes_check_blocks_below_the_targets_minimum() {
    let known = Releases::embedded();
    let target = resolved("2.8.x", &known);
    let old = checks::kubernetes(Some((1, 32)), &target);
    assert_eq!(codes(&old.blockers), ["kubernetes"]);
    assert!(
        old.blockers[0]
            .message
            .starts_with("Flux 2.8 needs Kubernetes 1.33 or later; this cluster runs 1.32"),
        "{:?}",
        old.blockers
    );
    for fine in [Some((1, 33)), Some((2, 0)), None] {
        assert_eq!(
            checks::kubernetes(fine, &target),
            checks::Findings::default()
        );
    }
}

#[test]
fn the_storage_check_migrates_unserved_versions_and_blocks_an_unserved_storage_version() {
    let known = Releases::embedded();
    let f = facts();
    let managed = [
        written("kc", source_object("GitRepository", "apps", "a", "v1beta2")),
        written("kc", source_object("GitRepository", "apps", "b", "v1beta2")),
        written("kc", source_object("OCIRepository", "apps", "c", "v1beta2")),
    ];
    let (migrations, findings) = checks::storage(
        &f.crds,
        &managed,
        f.installed,
        &known,
        &resolved("2.8.x", &known),
    );
    assert_eq!(findings, checks::Findings::default());
    let unserved: Vec<_> = migrations
        .iter()
        .map(|m| (m.kind.as_str(), m.unserved.clone()))
        .collect();
    assert_eq!(
        unserved,
        [
            ("OCIRepository", vec!["v1beta2".to_owned()]),
            ("GitRepository", vec!["v1beta2".to_owned()]),
        ]
    );

    let automation = CrdFacts {
        name: "imageupdateautomations.image.toolkit.fluxcd.io".into(),
        group: "image.toolkit.fluxcd.io".into(),
        kind: "ImageUpdateAutomation".into(),
        stored_versions: vec!["v1beta2".into()],
        storage_version: "v1beta2".into(),
        objects: 0,
    };
    let crds = [automation];
    let via = |installed| {
        let (migrations, findings) =
            checks::storage(&crds, &[], installed, &known, &resolved("2.9.x", &known));
        assert!(migrations.is_empty());
        assert_eq!(codes(&findings.blockers), ["storage-version"]);
        findings.blockers[0].message.clone()
    };
    assert!(via(Some(Release::new(2, 6, 4))).contains(": upgrade to 2.7.x first, so"));
    assert!(via(None).contains(": upgrade to 2.7.x first, so"));
    assert!(via(Some(Release::new(2, 8, 8))).contains(": upgrade one minor at a time, so"));
}

#[test]
fn the_git_check_blocks_once_per_kustomization_and_counts_what_the_reader_may_not_see() {
    let known = Releases::embedded();
    let target = resolved("2.8.x", &known);
    let inventory = [
        applied(
            "flux-system/b",
            source_object("OCIRepository", "apps", "one", "v1beta2"),
        ),
        applied(
            "flux-system/a",
            source_object("OCIRepository", "apps", "two", "v1beta2"),
        ),
        applied(
            "flux-system/b",
            source_object("GitRepository", "apps", "three", "v1beta2"),
        ),
        applied(
            "flux-system/a",
            source_object("OCIRepository", "apps", "fine", "v1"),
        ),
        applied(
            "flux-system/a",
            source_object("OCIRepository", "secret", "four", "v1beta2"),
        ),
    ];
    let found = checks::git(&inventory, &target, &|_, _, namespace| {
        namespace != "secret"
    });
    assert_eq!(found.hidden, 1);
    assert!(found.findings.warnings.is_empty());
    let blockers: Vec<_> = found
        .findings
        .blockers
        .iter()
        .map(|b| b.message.split(" applie").next().unwrap())
        .collect();
    assert_eq!(
        blockers,
        [
            "1 object in namespaces you may not list is",
            "Kustomization flux-system/a (source GitRepository/flux-system/fleet, path \"./apps\")",
            "Kustomization flux-system/b (source GitRepository/flux-system/fleet, path \"./apps\")",
        ]
    );
    assert!(found.findings.blockers[2].message.contains(
        "OCIRepository apps/one as source.toolkit.fluxcd.io/v1beta2 (use source.toolkit.fluxcd.io/v1), GitRepository apps/three"
    ));
    let uses: Vec<_> = found
        .uses
        .iter()
        .map(|u| (u.name.as_str(), u.kustomization.as_str(), u.blocking))
        .collect();
    assert_eq!(
        uses,
        [
            ("one", "flux-system/b", true),
            ("two", "flux-system/a", true),
            ("three", "flux-system/b", true),
        ]
    );
}

#[test]
fn the_writers_check_warns_per_writer_and_leaves_out_what_git_applies() {
    let known = Releases::embedded();
    let target = resolved("2.8.x", &known);
    let inventory = [applied(
        "flux-system/a",
        source_object("OCIRepository", "apps", "from-git", "v1beta2"),
    )];
    let mut managed: Vec<_> = (1..=5)
        .map(|n| {
            written(
                "ci-bot",
                source_object("OCIRepository", "apps", &format!("o{n}"), "v1beta2"),
            )
        })
        .collect();
    managed.push(written(
        "kustomize-controller",
        source_object("OCIRepository", "apps", "from-git", "v1beta2"),
    ));
    managed.push(written(
        "alice",
        source_object("GitRepository", "apps", "g", "v1beta2"),
    ));
    managed.push(written(
        "alice",
        source_object("GitRepository", "secret", "h", "v1beta2"),
    ));
    managed.push(written(
        "alice",
        source_object("GitRepository", "apps", "current", "v1"),
    ));
    let found = checks::writers(&managed, &inventory, &target, &|_, _, namespace| {
        namespace != "secret"
    });
    assert!(found.findings.blockers.is_empty());
    let warnings: Vec<_> = found
        .findings
        .warnings
        .iter()
        .map(|w| w.message.split(", which").next().unwrap())
        .collect();
    assert_eq!(
        warnings,
        [
            "GitRepository apps/g written by \"alice\" as source.toolkit.fluxcd.io/v1beta2",
            "OCIRepository apps/o1, OCIRepository apps/o2, OCIRepository apps/o3 and 2 more written by \"ci-bot\" as source.toolkit.fluxcd.io/v1beta2",
            "1 object in namespaces you may not list was written with API versions Flux 2.8 no longer serves: the upgrade migrates them, but their writers must use the new versions afterwards",
        ]
    );
    assert_eq!(found.hidden, 1);
    assert_eq!(found.uses.len(), 6);
    assert!(
        found
            .uses
            .iter()
            .all(|u| !u.blocking && u.kustomization.is_empty())
    );
    assert!(!found.uses.iter().any(|u| u.name == "from-git"));
}
