//! The upgrade plan, from facts read from the cluster: no I/O here, so every rule is
//! unit-tested. Blockers stop `apply`; warnings only inform.
//!
//! `plan` runs the checks of `checks.rs` in order (resolve the target and what it serves →
//! policy → installed distribution → Kubernetes → storage versions → objects applied from Git
//! → objects written outside Git), and the blockers and warnings come in that order.

use serde_json::{Value, json};

use tenantflux_core::policy::{Policy, Range, Release};
use tenantflux_core::releases::Releases;

mod checks;
mod types;

use checks::Findings;
pub use types::{
    CrdFacts, CrdMigration, Facts, Finding, InventoryEntry, ManagedEntry, ObjectRef, RemovedApiUse,
    Sees, UpgradePlan,
};

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
    let policy_range = policy_range(policy);
    let mut plan = as_read(requested, policy, policy_range.as_ref(), facts, known);
    let (target, mut findings) =
        match checks::resolve(requested, policy_range.as_ref(), &plan.policy, known) {
            Ok(resolved) => resolved,
            Err(blockers) => return finish(plan, blockers),
        };
    findings.append(checks::policy(
        policy,
        facts.instance_spec.as_ref(),
        facts.day,
        &target,
    ));
    findings.append(checks::installed(
        facts.installed,
        facts.instance_spec.is_some(),
        target.release,
    ));
    findings.append(checks::kubernetes(facts.kubernetes, &target));
    let (migrations, storage) =
        checks::storage(&facts.crds, &facts.managed, facts.installed, known, &target);
    findings.append(storage);
    let git = checks::git(&facts.inventory, &target, sees);
    let writers = checks::writers(&facts.managed, &facts.inventory, &target, sees);

    plan.target = target.release.to_string();
    plan.written_version = target.written_version;
    plan.kubernetes_minimum = format!("1.{}", target.table.kubernetes_minimum);
    plan.migrations = migrations;
    plan.hidden_removed_api_uses = git.hidden + writers.hidden;
    plan.removed_api_uses = git.uses;
    plan.removed_api_uses.extend(writers.uses);
    findings.append(git.findings);
    findings.append(writers.findings);
    finish(plan, findings)
}

/// The held policy's range of distribution versions, when it has one that parses.
fn policy_range(policy: Option<&Policy>) -> Option<Range> {
    let text = policy?
        .document()
        .spec
        .distribution
        .as_ref()?
        .versions
        .as_ref()?;
    Range::parse(text).ok()
}

/// The plan before any check: what was asked, what runs now, what the policy says.
fn as_read(
    requested: &str,
    policy: Option<&Policy>,
    policy_range: Option<&Range>,
    facts: &Facts,
    known: &Releases,
) -> UpgradePlan {
    UpgradePlan {
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
        policy: policy.map(ToString::to_string).unwrap_or_default(),
        policy_range: policy_range
            .map(|r| r.text().to_owned())
            .unwrap_or_default(),
        deadline: policy.and_then(crate::status::upgrade_deadline),
        ..UpgradePlan::default()
    }
}

fn finish(mut plan: UpgradePlan, findings: Findings) -> UpgradePlan {
    plan.blocked = !findings.blockers.is_empty();
    plan.blockers = findings.blockers;
    plan.warnings = findings.warnings;
    plan
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
