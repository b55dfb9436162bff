//! The upgrade plan, from facts read from the cluster: no I/O here, so every rule is
//! unit-tested. Blockers stop `apply`; warnings only inform.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use tenantflux_core::kinds;
use tenantflux_core::policy::{Policy, Range, Release};
use tenantflux_core::releases::{self, KindVersions, Releases};

mod types;

pub use types::{
    CrdFacts, CrdMigration, Facts, Finding, InventoryEntry, ManagedEntry, ObjectRef, RemovedApiUse,
    Sees, UpgradePlan,
};

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
/// `known` lists. Objects the caller may not see (`sees` is false for their namespace) are
/// counted, not named: the plan runs with the agent's rights, its reader with their own.
pub fn plan(
    requested: &str,
    policy: Option<&Policy>,
    facts: &Facts,
    known: &Releases,
    sees: &Sees<'_>,
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
    // Flux's support policy is not in any artifact: for a minor the build does not know, the
    // minimum is the newest known one's, and the plan says it is a guess.
    if !releases::kubernetes_minimum_known(target.minor) {
        warnings.push(finding(
            "unknown-kubernetes-minimum",
            format!(
                "this agent's build does not know which Kubernetes {to} needs: it assumes 1.{} \
                 (as the newest Flux minor it knows); check {to}'s release notes",
                table.kubernetes_minimum
            ),
        ));
    }

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
    let (mut hidden_in_git, mut hidden_in_cluster) = (0, 0);
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
        let kustomization_namespace = entry.kustomization.split('/').next().unwrap_or_default();
        if !sees(&o.group, &o.kind, &o.namespace)
            || !sees(kinds::KUSTOMIZE, "Kustomization", kustomization_namespace)
        {
            hidden_in_git += 1;
            continue;
        }
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
    if hidden_in_git > 0 {
        blockers.push(finding(
            "removed-api-in-git",
            format!(
                "{} in namespaces you may not list {} applied from Git with API versions {to} no longer serves; whoever may list them sees which, in the same plan",
                count(hidden_in_git, "object"),
                if hidden_in_git == 1 { "is" } else { "are" },
            ),
        ));
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
        if !sees(&o.group, &o.kind, &o.namespace) {
            hidden_in_cluster += 1;
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
    if hidden_in_cluster > 0 {
        warnings.push(finding(
            "removed-api-in-cluster",
            format!(
                "{} in namespaces you may not list {} written with API versions {to} no longer serves: the upgrade migrates them, but their writers must use the new versions afterwards",
                count(hidden_in_cluster, "object"),
                if hidden_in_cluster == 1 { "was" } else { "were" },
            ),
        ));
    }
    plan.hidden_removed_api_uses = hidden_in_git + hidden_in_cluster;
    finish(plan, blockers, warnings)
}

/// `1 object`, `3 objects`.
fn count(n: u32, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
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
mod tests;
