//! The policy rendered as a ValidatingAdmissionPolicy and its binding
//! (admissionregistration.k8s.io/v1, CEL), so that the API server itself refuses a
//! non-compliant FluxInstance, with the agent's messages, even while the agent is down.
//!
//! Versions: the CEL semver library of the API server reads versions, not ranges, and Flux's
//! `spec.distribution.version` is usually a range (`2.8.x`). So the rendered CEL parses the
//! range the way `range.rs` does: it splits it into comparators, turns each into an interval of
//! releases encoded as one integer (`major·10¹² + minor·10⁶ + patch`), intersects them, and
//! requires the result to lie within the policy's interval, the same rule as `Range::is_within`.
//! Known gaps against the agent (the agent's check is the exact one): a minor or patch above
//! 999,999 is not representable; comparators are recognised by a regular expression, so a
//! malformed range the semver crate refuses for a subtler reason (e.g. a wildcard after an
//! operator, `>=2.8.x`) is read leniently (as `>=2.8.0`); an upgrade deadline applies only from
//! the day the agent renders after its date (it re-renders hourly), since CEL has no clock.

use serde_json::{Value, json};

use super::{ClusterRules, ComponentRules, Policy, Release, Requirement, glob};
use crate::flux::DEFAULT_COMPONENTS;

/// The name of both objects (cluster-scoped): one policy per cluster.
pub const NAME: &str = "tenantflux-policy";
/// The generation of the policy an object was rendered from.
pub const GENERATION_ANNOTATION: &str = "tenantflux.io/policy-generation";

const MAJOR: i64 = 1_000_000_000_000;
const MINOR: i64 = 1_000_000;
/// Above every encodable release: "no upper bound".
const UNBOUNDED: i64 = 9_000_000_000_000_000_000;

/// One comparator of a range, as CEL finds it: operator, optional `v`, up to three parts
/// (digits or a wildcard), and a pre-release or build suffix that is ignored.
const COMPARATOR: &str =
    r"[<>=~^]*\s*v?[0-9xX*]+(\.[0-9xX*]+){0,2}(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?";
const CORE: &str = r"[0-9xX*]+(\.[0-9xX*]+){0,2}";

/// The two objects to apply, in this order.
#[derive(Clone, Debug, PartialEq)]
pub struct Rendered {
    pub policy: Value,
    pub binding: Value,
}

/// Renders `policy` as it applies on `day` (days since 1970-01-01, UTC).
pub fn render(policy: &Policy, day: i64) -> Rendered {
    let rules = &policy.document.spec;
    let by = format!("policy generation {}", rules.generation);
    let mut validations = distribution_validations(policy, day, &by);
    if let Some(components) = &rules.components {
        validations.extend(component_validations(components, &by));
    }
    if let Some(cluster) = &rules.cluster {
        validations.extend(cluster_validations(cluster, &by));
    }
    validations.extend(sync_and_kustomize_validations(policy, &by));
    objects(rules.generation, validations)
}

/// The version (valid, inside the policy's range, not below a deadline that has passed), the
/// registry and the artifact.
fn distribution_validations(policy: &Policy, day: i64, by: &str) -> Vec<Value> {
    let rules = &policy.document.spec;
    let mut validations = vec![validation(
        "variables.versionValid",
        format!(
            "{VERSION} + ' is neither a version (2.8.0) nor a semver range (2.8.x, >=2.7.0 <2.10.0)'"
        ),
    )];

    if let Some(allowed) = &policy.distribution_versions {
        let high = allowed.high().map_or(UNBOUNDED, encode);
        validations.push(validation(
            &format!(
                "!variables.versionValid || (variables.low >= {} && variables.high <= {high})",
                encode(allowed.low())
            ),
            format!(
                "{VERSION} + {}",
                literal(&format!(" is outside {:?} allowed by {by}", allowed.text()))
            ),
        ));
    }
    if let Some(deadline) = &policy.deadline
        && day >= deadline.day
    {
        validations.push(validation(
            &format!(
                "!variables.versionValid || variables.low >= {}",
                encode(deadline.minimum)
            ),
            format!(
                "{VERSION} + {}",
                literal(&format!(
                    " allows versions below {}, which {by} requires since {}",
                    deadline.minimum_text, deadline.date
                ))
            ),
        ));
    }

    let distribution = rules.distribution.as_ref();
    let spec = "object.spec";
    validations.extend(patterns(
        "spec.distribution.registry",
        &[spec, "distribution", "registry"],
        distribution.and_then(|d| d.registries.as_deref()),
        by,
    ));
    validations.extend(patterns(
        "spec.distribution.artifact",
        &[spec, "distribution", "artifact"],
        distribution.and_then(|d| d.artifacts.as_deref()),
        by,
    ));
    validations
}

/// The components allowed and required.
fn component_validations(components: &ComponentRules, by: &str) -> Vec<Value> {
    let mut validations = Vec::new();
    if let Some(allowed) = &components.allowed {
        let list = list(allowed);
        validations.push(validation(
            &format!("variables.components.all(c, c in {list})"),
            format!(
                "'spec.components ' + variables.components.filter(c, !(c in {list})).map(c, '\"' + c + '\"').join(', ') + {}",
                literal(&format!(" is not one of {} allowed by {by}", quoted(allowed)))
            ),
        ));
    }
    for name in &components.required {
        validations.push(validation(
            &format!("{} in variables.components", literal(name)),
            literal(&format!("spec.components lacks {name:?}, required by {by}")),
        ));
    }
    validations
}

/// Multitenancy, network policies and the cluster's size.
fn cluster_validations(cluster: &ClusterRules, by: &str) -> Vec<Value> {
    let spec = "object.spec";
    let mut validations = Vec::new();
    validations.extend(requirement(
        "spec.cluster.multitenant",
        "multitenant",
        cluster.multitenant,
        false,
        by,
    ));
    validations.extend(requirement(
        "spec.cluster.networkPolicy",
        "networkPolicy",
        cluster.network_policy,
        true,
        by,
    ));
    validations.extend(patterns(
        "spec.cluster.size",
        &[spec, "cluster", "size"],
        cluster.sizes.as_deref(),
        by,
    ));
    validations
}

/// The sync URL, and kustomize patches when the policy allows none.
fn sync_and_kustomize_validations(policy: &Policy, by: &str) -> Vec<Value> {
    let rules = &policy.document.spec;
    let spec = "object.spec";
    let mut validations = Vec::new();
    if let Some(sync) = &rules.sync {
        validations.extend(patterns(
            "spec.sync.url",
            &[spec, "sync", "url"],
            Some(&sync.urls),
            by,
        ));
    }

    if let Some(kustomize) = &rules.kustomize
        && !kustomize.allow_patches
    {
        validations.push(validation(
            &format!(
                "!({} && size(object.spec.kustomize.patches) > 0)",
                present(&[spec, "kustomize", "patches"])
            ),
            literal(&format!(
                "spec.kustomize.patches is set; {by} allows no kustomize patches"
            )),
        ));
    }
    validations
}

/// The ValidatingAdmissionPolicy holding `validations`, and its binding.
fn objects(generation: u64, validations: Vec<Value>) -> Rendered {
    let metadata = json!({
        "name": NAME,
        "labels": {(crate::MANAGED_BY_LABEL): crate::FIELD_MANAGER},
        "annotations": {GENERATION_ANNOTATION: generation.to_string()},
    });
    let policy = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": metadata,
        "spec": {
            // A check that cannot run (e.g. a version too large for an integer) refuses.
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [{
                    "apiGroups": ["fluxcd.controlplane.io"],
                    "apiVersions": ["*"],
                    "operations": ["CREATE", "UPDATE"],
                    "resources": ["fluxinstances"],
                }],
            },
            // Only a change to the spec is judged: an instance that a newer policy made
            // non-compliant can still get finalizers and annotations (and so be deleted or
            // reconciled); the agent reports it in `status`.
            "matchConditions": [{
                "name": "spec-changed",
                "expression": "request.operation == 'CREATE' || object.spec != oldObject.spec",
            }],
            "variables": variables(),
            "validations": validations,
        },
    });
    let binding = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": metadata,
        "spec": {
            "policyName": NAME,
            "validationActions": ["Deny"],
        },
    });
    Rendered { policy, binding }
}

/// `"spec.distribution.version \"<value>\""` as a CEL expression.
const VERSION: &str = "'spec.distribution.version \"' + variables.version + '\"'";

/// The version range of the instance as an interval `[low, high)` of encoded releases.
fn variables() -> Value {
    let t = |i: usize| format!("t[{i}]");
    let number = |i: usize| format!("({0}.matches('^[0-9]+$') ? int({0}) : -1)", t(i));
    let (m, n, p) = (number(1), number(2), number(3));
    let wildcard = (1..=3)
        .map(|i| format!("{} in ['x', 'X', '*']", t(i)))
        .collect::<Vec<_>>()
        .join(" || ");
    let base = format!("({m} * {MAJOR} + ({n} < 0 ? 0 : {n}) * {MINOR} + ({p} < 0 ? 0 : {p}))");
    // The first release after everything the written parts match (`2.8` → 2.9.0).
    let after = format!(
        "({n} < 0 ? ({m} + 1) * {MAJOR} : {p} < 0 ? {m} * {MAJOR} + ({n} + 1) * {MINOR} : {base} + 1)"
    );
    let next_minor = format!("({m} * {MAJOR} + (({n} < 0 ? 0 : {n}) + 1) * {MINOR})");
    let next_major = format!("(({m} + 1) * {MAJOR})");
    let caret = format!(
        "({m} == 0 && {n} == 0 && {p} >= 0 ? {base} + 1 : {m} == 0 && {n} >= 0 ? {next_minor} : {next_major})"
    );
    // As `range::bounds` reads each comparator; a bare full version alone is that version
    // only (Flux's reading), a bare version among others a caret (the semver crate's).
    let bound = format!(
        "{m} < 0 ? [0, {UNBOUNDED}] : \
         t[0] == '>=' ? [{base}, {UNBOUNDED}] : \
         t[0] == '>' ? [{after}, {UNBOUNDED}] : \
         t[0] == '<=' ? [0, {after}] : \
         t[0] == '<' ? [0, {base}] : \
         t[0] == '~' ? [{base}, {n} < 0 ? {next_major} : {next_minor}] : \
         t[0] == '^' ? [{base}, {caret}] : \
         t[0] == '=' || (t[0] == '' && ({wildcard})) ? [{base}, {after}] : \
         t[0] == '' && size(variables.comparators) == 1 && {p} >= 0 ? [{base}, {base} + 1] : \
         t[0] == '' ? [{base}, {caret}] : [1, 0]"
    );
    let whole = format!("^{COMPARATOR}([\\s,]+{COMPARATOR})*$");
    let components = format!(
        "has(object.spec.components) ? object.spec.components : {}",
        list(DEFAULT_COMPONENTS)
    );
    json!([
        {"name": "version", "expression": "object.spec.distribution.version.trim()"},
        {"name": "comparators", "expression": format!("variables.version.findAll({})", literal(COMPARATOR))},
        {"name": "parts", "expression": format!(
            "variables.comparators.map(c, [c.find('^[<>=~^]*')] + (c.find({}) + '..').split('.'))",
            literal(CORE)
        )},
        {"name": "bounds", "expression": format!("variables.parts.map(t, {bound})")},
        {"name": "low", "expression": "size(variables.bounds) == 0 ? 0 : variables.bounds.map(b, b[0]).max()"},
        {"name": "high", "expression": format!("size(variables.bounds) == 0 ? {UNBOUNDED} : variables.bounds.map(b, b[1]).min()")},
        {"name": "versionValid", "expression": format!(
            "variables.version.matches({}) && variables.low < variables.high",
            literal(&whole)
        )},
        {"name": "components", "expression": components},
    ])
}

fn validation(expression: &str, message_expression: String) -> Value {
    json!({
        "expression": expression,
        "messageExpression": message_expression,
        "reason": "Invalid",
    })
}

/// `field` at `path`, when set, must match one of `patterns`.
fn patterns(field: &str, path: &[&str], patterns: Option<&[String]>, by: &str) -> Option<Value> {
    let patterns = patterns?;
    let regex = patterns
        .iter()
        .map(|p| glob::to_regex(p))
        .collect::<Vec<_>>()
        .join("|");
    let value = path.join(".");
    Some(validation(
        &format!(
            "!({}) || {value}.matches({})",
            present(path),
            literal(&regex)
        ),
        format!(
            "{} + {value} + {}",
            literal(&format!("{field} \"")),
            literal(&format!(
                "\" is not one of {} allowed by {by}",
                quoted(patterns)
            ))
        ),
    ))
}

/// The boolean `spec.cluster.<name>` (default `default`) against `requirement`.
fn requirement(
    field: &str,
    name: &str,
    requirement: Requirement,
    default: bool,
    by: &str,
) -> Option<Value> {
    let value = format!(
        // `== true` types the unknown (`dyn`) field as the bool a validation must return.
        "({} ? object.spec.cluster.{name} == true : {default})",
        present(&["object.spec", "cluster", name])
    );
    let (expression, message) = match requirement {
        Requirement::Optional => return None,
        Requirement::Required => (
            value,
            format!("{field} false must be true, as {by} requires"),
        ),
        Requirement::Forbidden => (
            format!("!{value}"),
            format!("{field} true is forbidden by {by}"),
        ),
    };
    Some(validation(&expression, literal(&message)))
}

/// `has(a.b) && has(a.b.c)` for the path `a`, `b`, `c`.
fn present(path: &[&str]) -> String {
    (2..=path.len())
        .map(|end| format!("has({})", path[..end].join(".")))
        .collect::<Vec<_>>()
        .join(" && ")
}

/// A CEL string literal.
fn literal(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('\'');
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

fn list<S: AsRef<str>>(items: &[S]) -> String {
    let items: Vec<String> = items.iter().map(|i| literal(i.as_ref())).collect();
    format!("[{}]", items.join(", "))
}

/// `"a", "b"`, as the agent's messages quote.
fn quoted(items: &[String]) -> String {
    items
        .iter()
        .map(|i| format!("{i:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A release as one comparable integer; parts too large to encode saturate.
fn encode(release: Release) -> i64 {
    let part = |v: u64, limit: i64| i64::try_from(v).unwrap_or(i64::MAX).min(limit - 1);
    let major = part(release.major, UNBOUNDED / MAJOR);
    major * MAJOR + part(release.minor, MAJOR / MINOR) * MINOR + part(release.patch, MINOR)
}

/// Where `live` differs from `expected` (an object's `spec` as the agent wrote it and as the API
/// server holds it now), as field paths two levels deep (`spec.matchConditions`,
/// `spec.matchResources.namespaceSelector`): what a report of a tampered admission policy
/// names. A field someone added counts as much as one they changed or removed.
pub fn drift(expected: &Value, live: &Value) -> Vec<String> {
    fn walk(path: &str, expected: &Value, live: &Value, depth: usize, out: &mut Vec<String>) {
        if expected == live {
            return;
        }
        let empty = serde_json::Map::new();
        let object = |v: &'_ Value| match v {
            Value::Object(o) => Some(o.clone()),
            Value::Null => Some(empty.clone()),
            _ => None,
        };
        // A missing object is an empty one, so that an added object names its added fields.
        let objects = (expected.is_object() || live.is_object())
            .then(|| object(expected).zip(object(live)))
            .flatten();
        match objects {
            Some((e, l)) if depth < 2 => {
                let mut keys: Vec<&String> = e.keys().chain(l.keys()).collect();
                keys.sort();
                keys.dedup();
                for key in keys {
                    let (e, l) = (
                        e.get(key).unwrap_or(&Value::Null),
                        l.get(key).unwrap_or(&Value::Null),
                    );
                    walk(&format!("{path}.{key}"), e, l, depth + 1, out);
                }
            }
            _ => out.push(path.to_owned()),
        }
    }
    let mut out = Vec::new();
    walk("spec", expected, live, 0, &mut out);
    out
}

/// The JSON merge patch (RFC 7386) that turns `live` into `want`: what the agent sends to put
/// a tampered object back with `patch` alone, since a merge patch replaces lists whole and a
/// `null` removes a field someone else added.
pub fn merge_patch(live: &Value, want: &Value) -> Value {
    match (live, want) {
        (Value::Object(live), Value::Object(want)) => {
            let mut patch = serde_json::Map::new();
            for (key, value) in want {
                let part = live
                    .get(key)
                    .map_or_else(|| value.clone(), |old| merge_patch(old, value));
                if live.get(key) != Some(value) {
                    patch.insert(key.clone(), part);
                }
            }
            for key in live.keys().filter(|k| !want.contains_key(*k)) {
                patch.insert(key.clone(), Value::Null);
            }
            Value::Object(patch)
        }
        _ => want.clone(),
    }
}

#[cfg(test)]
mod tests;
