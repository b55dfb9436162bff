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

use super::{Policy, Range, Requirement, glob};
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

pub(super) fn evaluate(policy: &Policy, spec: &Value, day: i64) -> Evaluation {
    let rules = &policy.document.spec;
    let mut check = Checker {
        by: format!("policy generation {}", rules.generation),
        out: Evaluation::default(),
        spec,
        omitted: 0,
    };

    let version_field = "spec.distribution.version";
    let version = check.string("/distribution/version").map(str::to_owned);
    let instance_range = match version.as_deref().map(Range::parse) {
        None => {
            let message = match check.spec.pointer("/distribution/version") {
                // YAML reads `version: 2.9` as a number: say so, not that it is missing.
                Some(value) if !value.is_null() => {
                    let shown = match value {
                        Value::Number(_) | Value::Bool(_) => value.to_string(),
                        _ => quote(&value.to_string()),
                    };
                    format!("{version_field} is {shown}, not a string: quote it, e.g. \"2.9.x\"")
                }
                _ => format!("{version_field} is missing (a version or range is required)"),
            };
            check.violation(version_field, message);
            None
        }
        Some(Err(err)) => {
            check.violation(version_field, format!("{version_field}: {err}"));
            None
        }
        Some(Ok(range)) => Some(range),
    };
    if let (Some(instance), Some(allowed)) = (&instance_range, &policy.distribution_versions)
        && !instance.is_within(allowed)
    {
        let message = format!(
            "{version_field} {} is outside {:?} allowed by {}",
            quote(instance.text()),
            allowed.text(),
            check.by
        );
        check.violation(version_field, message);
    }
    if let (Some(instance), Some(deadline)) = (&instance_range, &policy.deadline)
        && instance.low() < deadline.minimum
    {
        let head = format!(
            "{version_field} {} allows versions below {}, which {} requires",
            quote(instance.text()),
            deadline.minimum_text,
            check.by
        );
        if day >= deadline.day {
            check.violation(version_field, format!("{head} since {}", deadline.date));
        } else if day >= deadline.day - i64::from(deadline.warn_days) {
            let days = deadline.day - day;
            let unit = if days == 1 { "day" } else { "days" };
            check
                .out
                .warnings
                .push(format!("{head} from {} (in {days} {unit})", deadline.date));
        }
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
        let mut seen = HashSet::new();
        let listed: Vec<&str> = match spec.get("components").and_then(Value::as_array) {
            // Each name once, in the order given.
            Some(items) => items
                .iter()
                .filter_map(Value::as_str)
                .filter(|n| seen.insert(*n))
                .collect(),
            None => DEFAULT_COMPONENTS.to_vec(),
        };
        if let Some(allowed) = &components.allowed {
            for name in listed.iter().filter(|n| !allowed.iter().any(|a| a == *n)) {
                let message = format!(
                    "spec.components {} is not one of {} allowed by {}",
                    quote(name),
                    quoted(allowed),
                    check.by
                );
                check.violation("spec.components", message);
            }
        }
        for name in components
            .required
            .iter()
            .filter(|r| !listed.contains(&r.as_str()))
        {
            let message = format!("spec.components lacks {name:?}, required by {}", check.by);
            check.violation("spec.components", message);
        }
    }

    if let Some(cluster) = &rules.cluster {
        check.requirement(
            "spec.cluster.multitenant",
            "/cluster/multitenant",
            cluster.multitenant,
            false,
        );
        check.requirement(
            "spec.cluster.networkPolicy",
            "/cluster/networkPolicy",
            cluster.network_policy,
            true,
        );
        check.patterns("spec.cluster.size", "/cluster/size", cluster.sizes.as_ref());
    }

    if let Some(sync) = &rules.sync {
        check.patterns("spec.sync.url", "/sync/url", Some(&sync.urls));
    }

    if let Some(kustomize) = &rules.kustomize {
        let has_patches = spec
            .pointer("/kustomize/patches")
            .and_then(Value::as_array)
            .is_some_and(|p| !p.is_empty());
        if has_patches && !kustomize.allow_patches {
            let message = format!(
                "spec.kustomize.patches is set; {} allows no kustomize patches",
                check.by
            );
            check.violation("spec.kustomize.patches", message);
        }
    }
    check.finish()
}

/// `"a", "b"`.
fn quoted(items: &[String]) -> String {
    items
        .iter()
        .map(|i| format!("{i:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}
