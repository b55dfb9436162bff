//! The upgrade plan, from facts read from the cluster: no I/O here, so every rule is
//! unit-tested. Blockers stop `apply`; warnings only inform.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};
use tenantflux_proto::v1::{CrdMigration, Finding, RemovedApiUse, UpgradePlan};

use tenantflux_core::policy::{Policy, Range, Release};
use tenantflux_core::releases::{self, KindVersions, Releases};

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

fn finding(code: &str, message: String) -> Finding {
    Finding {
        code: code.to_owned(),
        message,
    }
}

/// `2.8.0` → true: the range is one exact version.
fn is_exact(range: &Range) -> bool {
    range.high()
        == Some(Release::new(
            range.low().major,
            range.low().minor,
            range.low().patch + 1,
        ))
}

fn minor_text(release: Release) -> String {
    format!("{}.{}", release.major, release.minor)
}

/// `kinds` of the target that the given table has.
fn target_kind<'a>(
    target: &'a releases::Minor,
    group: &str,
    kind: &str,
) -> Option<&'a KindVersions> {
    target.kind(group, kind)
}

/// `spec` with `distribution.version` set to `version`; `None` when `spec` or its
/// `distribution` is something other than an object (a tenant can write that, the API server's
/// schema aside, and it must fail the upgrade, not the agent).
pub fn with_version(spec: Option<&Value>, version: &str) -> Option<Value> {
    let mut spec = match spec {
        None | Some(Value::Null) => json!({}),
        Some(spec) => spec.clone(),
    };
    let distribution = spec
        .as_object_mut()?
        .entry("distribution")
        .or_insert_with(|| json!({}));
    if distribution.is_null() {
        *distribution = json!({});
    }
    distribution
        .as_object_mut()?
        .insert("version".to_owned(), Value::String(version.to_owned()));
    Some(spec)
}

/// Plans an upgrade to `requested` under `policy` (the held one, if any), with the releases
/// `known` lists.
pub fn plan(
    requested: &str,
    policy: Option<&Policy>,
    facts: &Facts,
    known: &Releases,
) -> UpgradePlan {
    let mut plan = UpgradePlan {
        requested: requested.to_owned(),
        known_releases: known.source.clone(),
        current_version: facts.installed.map(|r| r.to_string()).unwrap_or_default(),
        current_range: facts
            .instance_spec
            .as_ref()
            .and_then(|s| s.pointer("/distribution/version"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        kubernetes_version: facts
            .kubernetes
            .map(|(major, minor)| format!("{major}.{minor}"))
            .unwrap_or_default(),
        ..UpgradePlan::default()
    };
    let policy_range = policy.and_then(|p| {
        let text = p.document().spec.distribution.as_ref()?.versions.as_ref()?;
        Range::parse(text).ok()
    });
    if let Some(policy) = policy {
        plan.policy = policy.to_string();
        plan.policy_range = policy_range
            .as_ref()
            .map(|r| r.text().to_owned())
            .unwrap_or_default();
        plan.deadline = crate::status::upgrade_deadline(policy);
    }
    let mut blockers = Vec::new();
    let mut warnings = Vec::new();
    let finish = |mut plan: UpgradePlan, blockers: Vec<Finding>, warnings: Vec<Finding>| {
        plan.blocked = !blockers.is_empty();
        plan.blockers = blockers;
        plan.warnings = warnings;
        plan
    };

    let range = match Range::parse(requested) {
        Ok(range) => range,
        Err(err) => {
            blockers.push(finding("unknown-release", err.to_string()));
            return finish(plan, blockers, warnings);
        }
    };
    let known_span = || format!("{}, from {}", known.span(), plan.known_releases);
    let target = match known.resolve(&range, policy_range.as_ref()) {
        Some(target) => target,
        None => match known.resolve(&range, None) {
            // Planned anyway, so the tenant sees everything else too.
            Some(outside) => {
                let allowed = policy_range.as_ref().map(Range::text).unwrap_or_default();
                blockers.push(finding(
                    "policy",
                    format!(
                        "no Flux release in {requested:?} is inside {allowed:?} allowed by {}",
                        plan.policy
                    ),
                ));
                outside
            }
            None => {
                let message = format!(
                    "no known Flux release matches {requested:?} (known: {})",
                    known_span()
                );
                blockers.push(finding("unknown-release", message));
                return finish(plan, blockers, warnings);
            }
        },
    };
    let Some(table) = known.minor(target) else {
        blockers.push(finding(
            "unknown-release",
            format!(
                "{} lists Flux {target} but no API versions for {}",
                plan.known_releases,
                minor_text(target)
            ),
        ));
        return finish(plan, blockers, warnings);
    };
    plan.target = target.to_string();
    plan.written_version = if is_exact(&range) {
        target.to_string()
    } else {
        format!("{}.x", minor_text(target))
    };
    plan.kubernetes_minimum = format!("1.{}", table.kubernetes_minimum);
    let to = format!("Flux {}", minor_text(target));

    // The FluxInstance as the bump would leave it, against the policy.
    match &facts.instance_spec {
        None => blockers.push(finding(
            "no-instance",
            "the cluster has no FluxInstance to upgrade (create one with `kubectl tenantflux instance apply`)"
                .to_owned(),
        )),
        Some(spec) => {
            if let Some(policy) = policy
                && let Some(bumped) = with_version(Some(spec), &plan.written_version)
            {
                let evaluation = policy.evaluate_at(&bumped, facts.day);
                // The range check is reported above with the resolution when nothing fits.
                let range_refused = blockers.iter().any(|b| b.code == "policy");
                for violation in evaluation.violations {
                    if !(range_refused && violation.message.contains(" is outside ")) {
                        blockers.push(finding("policy", violation.message));
                    }
                }
                warnings.extend(
                    evaluation
                        .warnings
                        .into_iter()
                        .map(|w| finding("deadline", w)),
                );
            }
        }
    }

    match facts.installed {
        None if facts.instance_spec.is_some() => warnings.push(finding(
            "not-applied",
            "the FluxInstance has not applied a distribution yet (no status.lastAppliedRevision)"
                .to_owned(),
        )),
        None => {}
        Some(installed) if (target.major, target.minor) < (installed.major, installed.minor) => {
            blockers.push(finding(
                "downgrade",
                format!(
                    "{target} is a downgrade from {installed} across minors, which flux-operator refuses (CRDs and stored objects of {} cannot go back to {}); choose {}.x or later",
                    minor_text(installed),
                    minor_text(target),
                    minor_text(installed)
                ),
            ));
        }
        Some(installed) if installed == target => warnings.push(finding(
            "same-version",
            format!("Flux {installed} is already installed"),
        )),
        Some(_) => {}
    }

    if let Some((major, minor)) = facts.kubernetes
        && (major, minor) < (1, table.kubernetes_minimum)
    {
        blockers.push(finding(
            "kubernetes",
            format!(
                "{to} needs Kubernetes 1.{} or later; this cluster runs {major}.{minor}: upgrade Kubernetes first, or choose an older Flux",
                table.kubernetes_minimum
            ),
        ));
    }

    for crd in &facts.crds {
        let Some(kind) = target_kind(table, &crd.group, &crd.kind) else {
            continue;
        };
        if !kind.serves(&crd.storage_version) {
            let via = known
                .minors
                .iter()
                .filter(|m| {
                    facts.installed.is_none_or(|i| m.minor > i.minor) && m.minor < target.minor
                })
                .find(|m| {
                    m.kind(&crd.group, &crd.kind)
                        .is_some_and(|k| kind.serves(k.storage()))
                })
                .map(|m| format!("upgrade to 2.{}.x first", m.minor))
                .unwrap_or_else(|| "upgrade one minor at a time".to_owned());
            blockers.push(finding(
                "storage-version",
                format!(
                    "CRD {} stores objects at {} now, which {to} does not serve: {via}, so its objects are stored at a version {to} serves",
                    crd.name, crd.storage_version
                ),
            ));
            continue;
        }
        let mut unserved: Vec<String> = crd
            .stored_versions
            .iter()
            .filter(|v| !kind.serves(v))
            .cloned()
            .collect();
        // Objects whose managedFields name a version the target removes break server-side
        // apply after the upgrade ("request to convert CR to an invalid group/version"), even
        // when nothing is stored at it: the migration rewrites those entries too.
        for entry in &facts.managed {
            let o = &entry.object;
            if o.group == crd.group
                && o.kind == crd.kind
                && !kind.serves(&o.version)
                && !unserved.contains(&o.version)
            {
                unserved.push(o.version.clone());
            }
        }
        if !unserved.is_empty() {
            plan.migrations.push(CrdMigration {
                crd: crd.name.clone(),
                kind: crd.kind.clone(),
                stored_versions: crd.stored_versions.clone(),
                storage_version: crd.storage_version.clone(),
                unserved,
                objects: crd.objects,
            });
        }
    }

    let removed = |object: &ObjectRef| -> Option<&KindVersions> {
        target_kind(table, &object.group, &object.kind).filter(|k| !k.serves(&object.version))
    };
    // One blocker per Kustomization, one warning per writer and version: the uses themselves
    // are all listed in removed_api_uses.
    let mut in_git = BTreeSet::new();
    let mut by_kustomization: BTreeMap<(String, String, String), Vec<String>> = BTreeMap::new();
    for entry in &facts.inventory {
        let Some(kind) = removed(&entry.object) else {
            continue;
        };
        let o = &entry.object;
        in_git.insert((
            o.group.clone(),
            o.kind.clone(),
            o.namespace.clone(),
            o.name.clone(),
        ));
        by_kustomization
            .entry((
                entry.kustomization.clone(),
                entry.source.clone(),
                entry.path.clone(),
            ))
            .or_default()
            .push(format!(
                "{} {}/{} as {}/{} (use {}/{})",
                o.kind,
                o.namespace,
                o.name,
                o.group,
                o.version,
                o.group,
                kind.storage()
            ));
        plan.removed_api_uses.push(RemovedApiUse {
            kind: o.kind.clone(),
            namespace: o.namespace.clone(),
            name: o.name.clone(),
            api_version: format!("{}/{}", o.group, o.version),
            replacement: format!("{}/{}", o.group, kind.storage()),
            kustomization: entry.kustomization.clone(),
            source: entry.source.clone(),
            path: entry.path.clone(),
            manager: String::new(),
            blocking: true,
        });
    }
    for ((kustomization, source, path), uses) in by_kustomization {
        blockers.push(finding(
            "removed-api-in-git",
            format!(
                "Kustomization {kustomization} (source {source}, path {path:?}) applies API versions {to} no longer serves: {}; change them in Git, let it reconcile, then plan again",
                uses.join(", ")
            ),
        ));
    }
    let mut by_writer: BTreeMap<(String, String, String), Vec<String>> = BTreeMap::new();
    for entry in &facts.managed {
        let o = &entry.object;
        let Some(kind) = removed(o) else { continue };
        if in_git.contains(&(
            o.group.clone(),
            o.kind.clone(),
            o.namespace.clone(),
            o.name.clone(),
        )) {
            continue;
        }
        by_writer
            .entry((
                entry.manager.clone(),
                format!("{}/{}", o.group, o.version),
                format!("{}/{}", o.group, kind.storage()),
            ))
            .or_default()
            .push(format!("{} {}/{}", o.kind, o.namespace, o.name));
        plan.removed_api_uses.push(RemovedApiUse {
            kind: o.kind.clone(),
            namespace: o.namespace.clone(),
            name: o.name.clone(),
            api_version: format!("{}/{}", o.group, o.version),
            replacement: format!("{}/{}", o.group, kind.storage()),
            manager: entry.manager.clone(),
            blocking: false,
            ..RemovedApiUse::default()
        });
    }
    for ((manager, old, new), objects) in by_writer {
        let shown = if objects.len() > 3 {
            format!("{} and {} more", objects[..3].join(", "), objects.len() - 3)
        } else {
            objects.join(", ")
        };
        warnings.push(finding(
            "removed-api-in-cluster",
            format!(
                "{shown} written by {manager:?} as {old}, which {to} no longer serves: the upgrade migrates the objects, but that writer must use {new} afterwards"
            ),
        ));
    }
    finish(plan, blockers, warnings)
}

/// The distribution in `v2.8.8@sha256:…` (status.lastAppliedRevision).
pub fn installed_release(last_applied_revision: &str) -> Option<Release> {
    let version = last_applied_revision.split('@').next()?;
    let version = semver::Version::parse(version.strip_prefix('v').unwrap_or(version)).ok()?;
    Some(Release::new(version.major, version.minor, version.patch))
}

/// `1`, `36+` (as /version reports them) → (1, 36).
pub fn kubernetes_version(major: &str, minor: &str) -> Option<(u64, u64)> {
    let digits = |s: &str| -> Option<u64> {
        s.chars()
            .take_while(char::is_ascii_digit)
            .collect::<String>()
            .parse()
            .ok()
    };
    Some((digits(major)?, digits(minor)?))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const SOURCE: &str = "source.toolkit.fluxcd.io";

    /// Plans with the embedded release table.
    fn plan_of(requested: &str, policy: Option<&Policy>, facts: &Facts) -> UpgradePlan {
        super::plan(requested, policy, facts, &Releases::embedded())
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
        let plan = super::plan("2.x", None, &facts(), &from_artifact);
        assert_eq!(plan.known_releases, from_artifact.source);
        assert_eq!(
            plan.target, "2.10.1",
            "a release no table in the agent names"
        );
        assert_eq!(plan.migrations.len(), 1, "{plan:?}");
        assert_eq!(plan.migrations[0].unserved, ["v1beta2"]);
        let unknown = super::plan("2.8.x", None, &facts(), &from_artifact);
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
        let blocked = super::plan("2.10.x", None, &facts(), &partial);
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
}
