//! A FluxInstance spec against a policy: one violation per field that breaks a constraint,
//! each a sentence naming the field, its value, and the constraint with the policy generation.
//!
//! The version rule: `spec.distribution.version` may be a range (`2.8.x`); flux-operator picks
//! a version inside it when it reconciles, so the instance complies only if *every* version its
//! range allows is inside the policy's range (the instance's interval is within the policy's).
//! The same rule applies to an upgrade deadline: from its date, the range's lowest version must
//! be at least the minimum.
//!
//! What a caller sent is quoted through [`quote`] only, duplicates are reported once, and at
//! most [`MAX_VIOLATIONS`] violations are listed, then one saying how many more there are: a
//! 1 MiB spec of `components: [a, a, …]` would otherwise become megabytes of text.

use std::{collections::HashSet, fmt};

use serde::Serialize;
use serde_json::Value;

use super::{
    ClusterRules, ComponentRules, Deadline, KustomizeRules, Policy, Range, Requirement, glob,
};
use crate::{flux::DEFAULT_COMPONENTS, text::quote};

/// How many violations an evaluation lists before it only counts the rest.
pub const MAX_VIOLATIONS: usize = 20;

/// One field that breaks the policy.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Violation {
    /// The field's path, e.g. `spec.distribution.version`.
    pub field: String,
    /// The whole sentence, starting with the field.
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// The outcome of evaluating one spec.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Evaluation {
    pub violations: Vec<Violation>,
    /// Upgrade deadlines coming up; not violations yet.
    pub warnings: Vec<String>,
}

impl Evaluation {
    pub fn compliant(&self) -> bool {
        self.violations.is_empty()
    }
}

struct Checker<'a> {
    by: String,
    out: Evaluation,
    spec: &'a Value,
    /// Violations past [`MAX_VIOLATIONS`], counted, not kept.
    omitted: usize,
}

impl Checker<'_> {
    fn violation(&mut self, field: &str, message: String) {
        if self.out.violations.iter().any(|v| v.message == message) {
            return;
        }
        if self.out.violations.len() >= MAX_VIOLATIONS {
            self.omitted += 1;
            return;
        }
        self.out.violations.push(Violation {
            field: field.to_owned(),
            message,
        });
    }

    /// The evaluation, with one last violation counting those not listed.
    fn finish(mut self) -> Evaluation {
        if self.omitted > 0 {
            let (count, noun) = match self.omitted {
                1 => (1, "violation"),
                n => (n, "violations"),
            };
            self.out.violations.push(Violation {
                field: "spec".to_owned(),
                message: format!(
                    "and {count} more {noun} (the first {MAX_VIOLATIONS} are listed): fix those and apply again"
                ),
            });
        }
        self.out
    }

    fn string(&self, path: &str) -> Option<&str> {
        self.spec.pointer(path).and_then(Value::as_str)
    }

    /// `field` (at JSON pointer `path`), when set, must match one of `patterns`.
    fn patterns(&mut self, field: &str, path: &str, patterns: Option<&Vec<String>>) {
        let (Some(patterns), Some(value)) = (patterns, self.string(path)) else {
            return;
        };
        if !patterns.iter().any(|p| glob::matches(p, value)) {
            let message = format!(
                "{field} {} is not one of {} allowed by {}",
                quote(value),
                quoted(patterns),
                self.by
            );
            self.violation(field, message);
        }
    }

    fn requirement(&mut self, field: &str, path: &str, requirement: Requirement, default: bool) {
        let value = self
            .spec
            .pointer(path)
            .and_then(Value::as_bool)
            .unwrap_or(default);
        let message = match (requirement, value) {
            (Requirement::Required, false) => {
                format!("{field} false must be true, as {} requires", self.by)
            }
            (Requirement::Forbidden, true) => format!("{field} true is forbidden by {}", self.by),
            _ => return,
        };
        self.violation(field, message);
    }
}

/// The spec's fields checked in a fixed order, so the violations read in the order of the
/// document: the version (its form, the policy's range, the upgrade deadline), the
/// distribution's registry and artifact, the components, the cluster settings, the sync URL and
/// the kustomize patches.
pub(super) fn evaluate(policy: &Policy, spec: &Value, day: i64) -> Evaluation {
    let rules = &policy.document.spec;
    let mut check = Checker {
        by: format!("policy generation {}", rules.generation),
        out: Evaluation::default(),
        spec,
        omitted: 0,
    };
    if let Some(instance) = check.instance_range() {
        check.version_allowed(&instance, policy.distribution_versions.as_ref());
        check.deadline(&instance, policy.deadline.as_ref(), day);
    }
    let distribution = rules.distribution.as_ref();
    check.patterns(
        "spec.distribution.registry",
        "/distribution/registry",
        distribution.and_then(|d| d.registries.as_ref()),
    );
    check.patterns(
        "spec.distribution.artifact",
        "/distribution/artifact",
        distribution.and_then(|d| d.artifacts.as_ref()),
    );
    if let Some(components) = &rules.components {
        check.components(components);
    }
    if let Some(cluster) = &rules.cluster {
        check.cluster(cluster);
    }
    if let Some(sync) = &rules.sync {
        check.patterns("spec.sync.url", "/sync/url", Some(&sync.urls));
    }
    if let Some(kustomize) = &rules.kustomize {
        check.kustomize(kustomize);
    }
    check.finish()
}

/// The field every version check names.
const VERSION_FIELD: &str = "spec.distribution.version";

/// Why `spec.distribution.version`, at `value`, is no string to parse: YAML reads
/// `version: 2.9` as a number, which is said as such rather than as missing.
fn version_not_a_string(value: Option<&Value>) -> String {
    match value {
        Some(value) if !value.is_null() => {
            let shown = match value {
                Value::Number(_) | Value::Bool(_) => value.to_string(),
                _ => quote(&value.to_string()),
            };
            format!("{VERSION_FIELD} is {shown}, not a string: quote it, e.g. \"2.9.x\"")
        }
        _ => format!("{VERSION_FIELD} is missing (a version or range is required)"),
    }
}

/// The days left before a deadline, as its warning says them: `1 day`, `3 days`.
fn days_left(days: i64) -> String {
    let unit = if days == 1 { "day" } else { "days" };
    format!("{days} {unit}")
}

/// The components an instance runs: each listed name once, in the order given, or the
/// default ones when it lists none.
fn listed_components(spec: &Value) -> Vec<&str> {
    let mut seen = HashSet::new();
    match spec.get("components").and_then(Value::as_array) {
        Some(items) => items
            .iter()
            .filter_map(Value::as_str)
            .filter(|n| seen.insert(*n))
            .collect(),
        None => DEFAULT_COMPONENTS.to_vec(),
    }
}

impl Checker<'_> {
    /// The instance's version range, when it has one that parses; a violation otherwise.
    fn instance_range(&mut self) -> Option<Range> {
        let parsed = self.string("/distribution/version").map(Range::parse);
        match parsed {
            None => {
                let message = version_not_a_string(self.spec.pointer("/distribution/version"));
                self.violation(VERSION_FIELD, message);
                None
            }
            Some(Err(err)) => {
                self.violation(VERSION_FIELD, format!("{VERSION_FIELD}: {err}"));
                None
            }
            Some(Ok(range)) => Some(range),
        }
    }

    /// Every version the instance's range allows must be inside the policy's range.
    fn version_allowed(&mut self, instance: &Range, allowed: Option<&Range>) {
        let Some(allowed) = allowed else {
            return;
        };
        if !instance.is_within(allowed) {
            let message = format!(
                "{VERSION_FIELD} {} is outside {:?} allowed by {}",
                quote(instance.text()),
                allowed.text(),
                self.by
            );
            self.violation(VERSION_FIELD, message);
        }
    }

    /// A range reaching below the deadline's minimum: a violation from the deadline's day, a
    /// warning in the days before it, nothing earlier.
    fn deadline(&mut self, instance: &Range, deadline: Option<&Deadline>, day: i64) {
        let Some(deadline) = deadline else {
            return;
        };
        if instance.low() >= deadline.minimum {
            return;
        }
        let head = format!(
            "{VERSION_FIELD} {} allows versions below {}, which {} requires",
            quote(instance.text()),
            deadline.minimum_text,
            self.by
        );
        if day >= deadline.day {
            self.violation(VERSION_FIELD, format!("{head} since {}", deadline.date));
        } else if day >= deadline.day - i64::from(deadline.warn_days) {
            let left = days_left(deadline.day - day);
            self.out
                .warnings
                .push(format!("{head} from {} (in {left})", deadline.date));
        }
    }

    /// Each component the instance runs must be allowed, and each required one run.
    fn components(&mut self, rules: &ComponentRules) {
        let spec = self.spec;
        let listed = listed_components(spec);
        if let Some(allowed) = &rules.allowed {
            for name in listed.iter().filter(|n| !allowed.iter().any(|a| a == *n)) {
                let message = format!(
                    "spec.components {} is not one of {} allowed by {}",
                    quote(name),
                    quoted(allowed),
                    self.by
                );
                self.violation("spec.components", message);
            }
        }
        for name in rules
            .required
            .iter()
            .filter(|r| !listed.contains(&r.as_str()))
        {
            let message = format!("spec.components lacks {name:?}, required by {}", self.by);
            self.violation("spec.components", message);
        }
    }

    /// The cluster's multitenancy and network policy settings, and its size.
    fn cluster(&mut self, rules: &ClusterRules) {
        self.requirement(
            "spec.cluster.multitenant",
            "/cluster/multitenant",
            rules.multitenant,
            false,
        );
        self.requirement(
            "spec.cluster.networkPolicy",
            "/cluster/networkPolicy",
            rules.network_policy,
            true,
        );
        self.patterns("spec.cluster.size", "/cluster/size", rules.sizes.as_ref());
    }

    /// Kustomize patches, when the policy allows none.
    fn kustomize(&mut self, rules: &KustomizeRules) {
        let has_patches = self
            .spec
            .pointer("/kustomize/patches")
            .and_then(Value::as_array)
            .is_some_and(|p| !p.is_empty());
        if has_patches && !rules.allow_patches {
            let message = format!(
                "spec.kustomize.patches is set; {} allows no kustomize patches",
                self.by
            );
            self.violation("spec.kustomize.patches", message);
        }
    }
}

/// `"a", "b"`.
fn quoted(items: &[String]) -> String {
    items
        .iter()
        .map(|i| format!("{i:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn listed_components_are_each_once_in_order_or_the_defaults() {
        let spec = json!({"components": ["b", "a", "b", 3, "c"]});
        assert_eq!(listed_components(&spec), ["b", "a", "c"]);
        assert_eq!(listed_components(&json!({})), DEFAULT_COMPONENTS);
    }

    #[test]
    fn a_version_that_is_no_string_is_said_as_what_it_is() {
        let field = VERSION_FIELD;
        assert_eq!(
            version_not_a_string(None),
            format!("{field} is missing (a version or range is required)")
        );
        assert_eq!(
            version_not_a_string(Some(&Value::Null)),
            format!("{field} is missing (a version or range is required)")
        );
        assert_eq!(
            version_not_a_string(Some(&json!(true))),
            format!("{field} is true, not a string: quote it, e.g. \"2.9.x\"")
        );
    }

    #[test]
    fn days_left_count_one_day_alone() {
        assert_eq!(days_left(1), "1 day");
        assert_eq!(days_left(3), "3 days");
    }
}
