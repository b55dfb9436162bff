//! The checks `plan` runs, in its order: each a pure function of the facts and the resolved
//! target that returns what it found. The plan lists their findings in the order they run, so
//! the order of this file is the order of the blockers and warnings a tenant reads.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use tenantflux_core::kinds;
use tenantflux_core::policy::{Policy, Range, Release};
use tenantflux_core::releases::{self, KindVersions, Releases};

use super::{
    CrdFacts, CrdMigration, Finding, InventoryEntry, ManagedEntry, ObjectRef, RemovedApiUse, Sees,
    with_version,
};

/// What one check found: blockers stop `apply`, warnings only inform.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct Findings {
    pub blockers: Vec<Finding>,
    pub warnings: Vec<Finding>,
}

impl Findings {
    pub fn blocking(blocker: Finding) -> Self {
        Self {
            blockers: vec![blocker],
            warnings: Vec::new(),
        }
    }

    /// `other`'s findings after these.
    pub fn append(&mut self, mut other: Findings) {
        self.blockers.append(&mut other.blockers);
        self.warnings.append(&mut other.warnings);
    }
}

/// The release a request resolves to, and what it serves.
#[derive(Clone, Debug)]
pub(super) struct Target<'a> {
    pub release: Release,
    /// Its minor's API versions and Kubernetes minimum.
    pub table: &'a releases::Minor,
    /// What spec.distribution.version becomes: the release when one was asked for, else its
    /// minor's `.x`.
    pub written_version: String,
    /// It lies outside the policy's range, which `resolve` already reported.
    pub outside_policy: bool,
}

impl Target<'_> {
    /// `Flux 2.8`, as findings name the target.
    fn name(&self) -> String {
        format!("Flux {}", minor_text(self.release))
    }

    /// The target's versions of `object`'s kind, when it no longer serves `object`'s version.
    fn removes(&self, object: &ObjectRef) -> Option<&KindVersions> {
        self.table
            .kind(&object.group, &object.kind)
            .filter(|k| !k.serves(&object.version))
    }
}

/// Objects that use a version the target removes: those the reader may see, and how many more
/// there are.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct RemovedUses {
    pub uses: Vec<RemovedApiUse>,
    pub hidden: u32,
    pub findings: Findings,
}

pub(super) fn finding(code: &str, message: String) -> Finding {
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

/// `1 object`, `3 objects`.
fn count(n: u32, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

/// The highest known release in `requested` inside the policy's range, and its minor's API
/// versions. A release outside the range is still resolved, with a `policy` blocker, so the
/// tenant sees everything else too. `Err` holds the blockers of a plan that cannot go on:
/// nothing matches, or the list names the release without its minor's API versions.
pub(super) fn resolve<'a>(
    requested: &str,
    policy_range: Option<&Range>,
    policy_name: &str,
    known: &'a Releases,
) -> Result<(Target<'a>, Findings), Findings> {
    let range = Range::parse(requested)
        .map_err(|err| Findings::blocking(finding("unknown-release", err.to_string())))?;
    let mut findings = Findings::default();
    let release = match known.resolve(&range, policy_range) {
        Some(release) => release,
        None => {
            let Some(outside) = known.resolve(&range, None) else {
                return Err(Findings::blocking(finding(
                    "unknown-release",
                    format!(
                        "no known Flux release matches {requested:?} (known: {}, from {})",
                        known.span(),
                        known.source
                    ),
                )));
            };
            let allowed = policy_range.map(Range::text).unwrap_or_default();
            findings.blockers.push(finding(
                "policy",
                format!(
                    "no Flux release in {requested:?} is inside {allowed:?} allowed by {policy_name}"
                ),
            ));
            outside
        }
    };
    let Some(table) = known.minor(release) else {
        findings.blockers.push(finding(
            "unknown-release",
            format!(
                "{} lists Flux {release} but no API versions for {}",
                known.source,
                minor_text(release)
            ),
        ));
        return Err(findings);
    };
    let target = Target {
        release,
        table,
        written_version: if is_exact(&range) {
            release.to_string()
        } else {
            format!("{}.x", minor_text(release))
        },
        outside_policy: !findings.blockers.is_empty(),
    };
    findings
        .warnings
        .extend(kubernetes_minimum_guessed(&target));
    Ok((target, findings))
}

/// Flux's support policy is not in any artifact: for a minor the build does not know, the
/// minimum is the newest known one's, and the plan says it is a guess.
fn kubernetes_minimum_guessed(target: &Target) -> Option<Finding> {
    if releases::kubernetes_minimum_known(target.release.minor) {
        return None;
    }
    let to = target.name();
    Some(finding(
        "unknown-kubernetes-minimum",
        format!(
            "this agent's build does not know which Kubernetes {to} needs: it assumes 1.{} \
             (as the newest Flux minor it knows); check {to}'s release notes",
            target.table.kubernetes_minimum
        ),
    ))
}

/// The FluxInstance as the bump would leave it, against the policy: violations block, the
/// deadline warns. Without a FluxInstance there is nothing to upgrade.
pub(super) fn policy(
    policy: Option<&Policy>,
    instance_spec: Option<&Value>,
    day: i64,
    target: &Target,
) -> Findings {
    let Some(spec) = instance_spec else {
        return Findings::blocking(finding(
            "no-instance",
            "the cluster has no FluxInstance to upgrade (create one with `kubectl tenantflux instance apply`)"
                .to_owned(),
        ));
    };
    let Some(policy) = policy else {
        return Findings::default();
    };
    let Some(bumped) = with_version(Some(spec), &target.written_version) else {
        return Findings::default();
    };
    let evaluation = policy.evaluate_at(&bumped, day);
    Findings {
        blockers: evaluation
            .violations
            .into_iter()
            // The range was reported by `resolve` when nothing inside it fits.
            .filter(|v| !(target.outside_policy && v.message.contains(" is outside ")))
            .map(|v| finding("policy", v.message))
            .collect(),
        warnings: evaluation
            .warnings
            .into_iter()
            .map(|w| finding("deadline", w))
            .collect(),
    }
}

/// The distribution running now against the target: a downgrade across minors blocks
/// (flux-operator refuses it); the same release, or none applied yet, warns.
pub(super) fn installed(
    installed: Option<Release>,
    has_instance: bool,
    target: Release,
) -> Findings {
    let mut findings = Findings::default();
    match installed {
        None if has_instance => findings.warnings.push(finding(
            "not-applied",
            "the FluxInstance has not applied a distribution yet (no status.lastAppliedRevision)"
                .to_owned(),
        )),
        None => {}
        Some(installed) if (target.major, target.minor) < (installed.major, installed.minor) => {
            findings.blockers.push(finding(
                "downgrade",
                format!(
                    "{target} is a downgrade from {installed} across minors, which flux-operator refuses (CRDs and stored objects of {} cannot go back to {}); choose {}.x or later",
                    minor_text(installed),
                    minor_text(target),
                    minor_text(installed)
                ),
            ));
        }
        Some(installed) if installed == target => findings.warnings.push(finding(
            "same-version",
            format!("Flux {installed} is already installed"),
        )),
        Some(_) => {}
    }
    findings
}

/// The cluster's Kubernetes against the oldest the target supports.
pub(super) fn kubernetes(cluster: Option<(u64, u64)>, target: &Target) -> Findings {
    let minimum = target.table.kubernetes_minimum;
    match cluster {
        Some((major, minor)) if (major, minor) < (1, minimum) => Findings::blocking(finding(
            "kubernetes",
            format!(
                "{} needs Kubernetes 1.{minimum} or later; this cluster runs {major}.{minor}: upgrade Kubernetes first, or choose an older Flux",
                target.name()
            ),
        )),
        _ => Findings::default(),
    }
}

/// CRDs against the versions the target serves: a storage version it does not serve blocks
/// (an intermediate minor must move the objects first); stored versions, and versions that
/// managedFields name, that it does not serve are migrated by the upgrade.
pub(super) fn storage(
    crds: &[CrdFacts],
    managed: &[ManagedEntry],
    installed: Option<Release>,
    known: &Releases,
    target: &Target,
) -> (Vec<CrdMigration>, Findings) {
    let mut migrations = Vec::new();
    let mut findings = Findings::default();
    for crd in crds {
        let Some(kind) = target.table.kind(&crd.group, &crd.kind) else {
            continue;
        };
        if kind.serves(&crd.storage_version) {
            migrations.extend(migration(crd, kind, managed));
            continue;
        }
        let to = target.name();
        findings.blockers.push(finding(
            "storage-version",
            format!(
                "CRD {} stores objects at {} now, which {to} does not serve: {}, so its objects are stored at a version {to} serves",
                crd.name,
                crd.storage_version,
                intermediate_minor(crd, kind, installed, known, target.release)
            ),
        ));
    }
    (migrations, findings)
}

/// How to reach the target when it does not serve `crd`'s storage version: the first known
/// minor after the installed one and before the target whose storage version of the kind the
/// target serves.
fn intermediate_minor(
    crd: &CrdFacts,
    kind: &KindVersions,
    installed: Option<Release>,
    known: &Releases,
    target: Release,
) -> String {
    known
        .minors
        .iter()
        .filter(|m| installed.is_none_or(|i| m.minor > i.minor) && m.minor < target.minor)
        .find(|m| {
            m.kind(&crd.group, &crd.kind)
                .is_some_and(|k| kind.serves(k.storage()))
        })
        .map(|m| format!("upgrade to 2.{}.x first", m.minor))
        .unwrap_or_else(|| "upgrade one minor at a time".to_owned())
}

/// `crd`'s migration, if the target's `kind` does not serve one of its stored versions or a
/// version its objects' managedFields name.
fn migration(
    crd: &CrdFacts,
    kind: &KindVersions,
    managed: &[ManagedEntry],
) -> Option<CrdMigration> {
    let mut unserved: Vec<String> = crd
        .stored_versions
        .iter()
        .filter(|v| !kind.serves(v))
        .cloned()
        .collect();
    // Objects whose managedFields name a version the target removes break server-side
    // apply after the upgrade ("request to convert CR to an invalid group/version"), even
    // when nothing is stored at it: the migration rewrites those entries too.
    for entry in managed {
        let o = &entry.object;
        if o.group == crd.group
            && o.kind == crd.kind
            && !kind.serves(&o.version)
            && !unserved.contains(&o.version)
        {
            unserved.push(o.version.clone());
        }
    }
    (!unserved.is_empty()).then(|| CrdMigration {
        crd: crd.name.clone(),
        kind: crd.kind.clone(),
        stored_versions: crd.stored_versions.clone(),
        storage_version: crd.storage_version.clone(),
        unserved,
        objects: crd.objects,
    })
}

/// Objects Kustomizations apply from Git with a version the target removes: they block, since
/// only a change in Git fixes them. One blocker per Kustomization the reader may see (every use
/// is listed in the uses), and one counting the rest.
pub(super) fn git(inventory: &[InventoryEntry], target: &Target, sees: &Sees<'_>) -> RemovedUses {
    let mut found = RemovedUses::default();
    let mut by_kustomization: BTreeMap<(&str, &str, &str), Vec<String>> = BTreeMap::new();
    for entry in inventory {
        let o = &entry.object;
        let Some(kind) = target.removes(o) else {
            continue;
        };
        let kustomization_namespace = entry.kustomization.split('/').next().unwrap_or_default();
        if !sees(&o.group, &o.kind, &o.namespace)
            || !sees(kinds::KUSTOMIZE, "Kustomization", kustomization_namespace)
        {
            found.hidden += 1;
            continue;
        }
        by_kustomization
            .entry((&entry.kustomization, &entry.source, &entry.path))
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
        found.uses.push(RemovedApiUse {
            kustomization: entry.kustomization.clone(),
            source: entry.source.clone(),
            path: entry.path.clone(),
            blocking: true,
            ..removed_use(o, kind)
        });
    }
    let to = target.name();
    if found.hidden > 0 {
        found.findings.blockers.push(finding(
            "removed-api-in-git",
            format!(
                "{} in namespaces you may not list {} applied from Git with API versions {to} no longer serves; whoever may list them sees which, in the same plan",
                count(found.hidden, "object"),
                if found.hidden == 1 { "is" } else { "are" },
            ),
        ));
    }
    for ((kustomization, source, path), uses) in by_kustomization {
        found.findings.blockers.push(finding(
            "removed-api-in-git",
            format!(
                "Kustomization {kustomization} (source {source}, path {path:?}) applies API versions {to} no longer serves: {}; change them in Git, let it reconcile, then plan again",
                uses.join(", ")
            ),
        ));
    }
    found
}

/// Objects written outside Git with a version the target removes (their managedFields say
/// so): the upgrade migrates them, so they only warn that the writer must change. One warning
/// per writer and version the reader may see, and one counting the rest.
pub(super) fn writers(
    managed: &[ManagedEntry],
    inventory: &[InventoryEntry],
    target: &Target,
    sees: &Sees<'_>,
) -> RemovedUses {
    let in_git = applied_from_git(inventory, target);
    let mut found = RemovedUses::default();
    let mut by_writer: BTreeMap<(String, String, String), Vec<String>> = BTreeMap::new();
    for entry in managed {
        let o = &entry.object;
        let Some(kind) = target.removes(o) else {
            continue;
        };
        if in_git.contains(&(&o.group, &o.kind, &o.namespace, &o.name)) {
            continue;
        }
        if !sees(&o.group, &o.kind, &o.namespace) {
            found.hidden += 1;
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
        found.uses.push(RemovedApiUse {
            manager: entry.manager.clone(),
            blocking: false,
            ..removed_use(o, kind)
        });
    }
    let to = target.name();
    for ((manager, old, new), objects) in by_writer {
        found.findings.warnings.push(finding(
            "removed-api-in-cluster",
            format!(
                "{} written by {manager:?} as {old}, which {to} no longer serves: the upgrade migrates the objects, but that writer must use {new} afterwards",
                first_three(&objects)
            ),
        ));
    }
    if found.hidden > 0 {
        found.findings.warnings.push(finding(
            "removed-api-in-cluster",
            format!(
                "{} in namespaces you may not list {} written with API versions {to} no longer serves: the upgrade migrates them, but their writers must use the new versions afterwards",
                count(found.hidden, "object"),
                if found.hidden == 1 { "was" } else { "were" },
            ),
        ));
    }
    found
}

/// (group, kind, namespace, name) of every object Kustomizations apply with a version the
/// target removes, whoever may see it: `git` reports those, so `writers` leaves them out.
fn applied_from_git<'a>(
    inventory: &'a [InventoryEntry],
    target: &Target,
) -> BTreeSet<(&'a String, &'a String, &'a String, &'a String)> {
    inventory
        .iter()
        .map(|entry| &entry.object)
        .filter(|o| target.removes(o).is_some())
        .map(|o| (&o.group, &o.kind, &o.namespace, &o.name))
        .collect()
}

/// The use of `object` at a version the target's `kind` removes, and what to write instead.
fn removed_use(object: &ObjectRef, kind: &KindVersions) -> RemovedApiUse {
    RemovedApiUse {
        kind: object.kind.clone(),
        namespace: object.namespace.clone(),
        name: object.name.clone(),
        api_version: format!("{}/{}", object.group, object.version),
        replacement: format!("{}/{}", object.group, kind.storage()),
        ..RemovedApiUse::default()
    }
}

/// `a, b, c` or `a, b, c and 2 more`.
fn first_three(objects: &[String]) -> String {
    if objects.len() > 3 {
        format!("{} and {} more", objects[..3].join(", "), objects.len() - 3)
    } else {
        objects.join(", ")
    }
}
