use serde_json::{Value, json};

use super::*;

const FULL: &str = include_str!("../../../../deploy/policy/example.yaml");
const SCHEMA: &str = include_str!("../../../../deploy/policy/policy.schema.json");
const MINIMAL: &str = include_str!("fixtures/policy-minimal.yaml");
const COMPLIANT: &str = include_str!("fixtures/instance-compliant.yaml");
const EVERY_VIOLATION: &str = include_str!("fixtures/instance-every-violation.yaml");

fn policy(text: &str) -> Policy {
    Policy::parse(text).unwrap_or_else(|err| panic!("{err:#?}"))
}

fn spec(yaml: &str) -> Value {
    crate::yaml::from_str(yaml).expect("fixture parses")
}

fn day(date: &str) -> i64 {
    parse_date(date).unwrap()
}

/// Long before the example's deadline warnings start.
fn early() -> i64 {
    day("2026-01-01")
}

fn messages(evaluation: &Evaluation) -> Vec<&str> {
    evaluation
        .violations
        .iter()
        .map(|v| v.message.as_str())
        .collect()
}

#[test]
fn the_example_parses_with_every_constraint() {
    let policy = policy(FULL);
    assert_eq!(policy.name(), "platform");
    assert_eq!(policy.generation(), 7);
    assert!(
        policy
            .operator_versions()
            .unwrap()
            .allows(&semver::Version::new(0, 58, 1))
    );
    assert!(
        !policy
            .operator_versions()
            .unwrap()
            .allows(&semver::Version::new(0, 59, 0))
    );
    assert!(policy.allows_bundle("configmap:flux-operator-bundle"));
    assert!(
        policy.allows_bundle("oci://ghcr.io/controlplaneio-fluxcd/flux-operator-manifests:v0.58.1")
    );
    assert!(!policy.allows_bundle("oci://evil.example.com/flux-operator-manifests:v0.58.1"));
    assert_eq!(
        policy.defaults().unwrap()["distribution"]["version"],
        "2.9.x"
    );
    // What `policy show` prints parses back to the same policy.
    assert_eq!(Policy::parse(&policy.to_yaml()).unwrap(), policy);
}

#[test]
fn a_compliant_instance_has_no_violations() {
    let evaluation = policy(FULL).evaluate_at(&spec(COMPLIANT), early());
    assert!(evaluation.compliant(), "{evaluation:#?}");
    assert!(evaluation.warnings.is_empty());
}

#[test]
fn one_message_per_violated_field() {
    let evaluation = policy(FULL).evaluate_at(&spec(EVERY_VIOLATION), early());
    assert_eq!(
        messages(&evaluation),
        [
            r#"spec.distribution.version "2.6.x" is outside ">=2.7.0 <2.10.0" allowed by policy generation 7"#,
            r#"spec.distribution.registry "docker.io/fluxcd" is not one of "ghcr.io/fluxcd", "registry.example.com/fluxcd" allowed by policy generation 7"#,
            r#"spec.distribution.artifact "oci://evil.example.com/manifests:latest" is not one of "oci://ghcr.io/controlplaneio-fluxcd/flux-operator-manifests*" allowed by policy generation 7"#,
            r#"spec.components "image-automation-controller" is not one of "source-controller", "kustomize-controller", "helm-controller", "notification-controller", "source-watcher" allowed by policy generation 7"#,
            r#"spec.components lacks "kustomize-controller", required by policy generation 7"#,
            "spec.cluster.multitenant false must be true, as policy generation 7 requires",
            "spec.cluster.networkPolicy false must be true, as policy generation 7 requires",
            r#"spec.cluster.size "large" is not one of "small", "medium" allowed by policy generation 7"#,
            r#"spec.sync.url "https://github.com/evil/fleet" is not one of "https://github.com/acme/*", "oci://ghcr.io/acme/*" allowed by policy generation 7"#,
            "spec.kustomize.patches is set; policy generation 7 allows no kustomize patches",
        ]
    );
    let fields: Vec<_> = evaluation
        .violations
        .iter()
        .map(|v| v.field.as_str())
        .collect();
    assert_eq!(fields[0], "spec.distribution.version");
    assert_eq!(fields[9], "spec.kustomize.patches");
}

#[test]
fn an_instance_range_must_stay_inside_the_policy_range() {
    let policy = policy(FULL);
    let with_version = |version: &str| {
        let mut instance = spec(COMPLIANT);
        instance["distribution"]["version"] = json!(version);
        policy.evaluate_at(&instance, early())
    };
    for inside in [
        "2.7.0",
        "2.8.x",
        "2.9.x",
        "v2.9.4",
        ">=2.8.0 <2.10.0",
        "~2.9",
    ] {
        assert!(with_version(inside).compliant(), "{inside}");
    }
    for outside in ["2.x", "2.10.x", ">=2.8.0", "2.6.3", "*"] {
        let evaluation = with_version(outside);
        assert_eq!(
            messages(&evaluation),
            [format!(
                "spec.distribution.version {outside:?} is outside \">=2.7.0 <2.10.0\" allowed by policy generation 7"
            )],
        );
    }
    let evaluation = with_version("latest");
    assert!(
        messages(&evaluation)[0]
            .starts_with("spec.distribution.version: \"latest\" is neither a version"),
        "{evaluation:?}"
    );
    let mut without = spec(COMPLIANT);
    without["distribution"]
        .as_object_mut()
        .unwrap()
        .remove("version");
    assert_eq!(
        messages(&policy.evaluate_at(&without, early())),
        ["spec.distribution.version is missing (a version or range is required)"]
    );
    // Unquoted in YAML, 2.9 is a number.
    let mut number = spec(COMPLIANT);
    number["distribution"]["version"] = json!(2.9);
    assert_eq!(
        messages(&policy.evaluate_at(&number, early())),
        ["spec.distribution.version is 2.9, not a string: quote it, e.g. \"2.9.x\""]
    );
}

#[test]
fn the_upgrade_deadline_warns_then_refuses() {
    let policy = policy(FULL);
    let mut instance = spec(COMPLIANT);
    instance["distribution"]["version"] = json!("2.7.x");

    let before = policy.evaluate_at(&instance, day("2026-08-01"));
    assert!(
        before.compliant() && before.warnings.is_empty(),
        "{before:?}"
    );

    let warned = policy.evaluate_at(&instance, day("2026-08-20"));
    assert!(warned.compliant(), "{warned:?}");
    assert_eq!(
        warned.warnings,
        [
            "spec.distribution.version \"2.7.x\" allows versions below 2.8.0, which policy generation 7 requires from 2026-09-01 (in 12 days)"
        ]
    );

    let after = policy.evaluate_at(&instance, day("2026-09-01"));
    assert_eq!(
        messages(&after),
        [
            "spec.distribution.version \"2.7.x\" allows versions below 2.8.0, which policy generation 7 requires since 2026-09-01"
        ]
    );

    instance["distribution"]["version"] = json!("2.8.x");
    assert_eq!(
        policy.evaluate_at(&instance, day("2026-09-02")),
        Evaluation::default()
    );
}

#[test]
fn absent_components_are_the_default_four() {
    // Without defaults, which list the four and would break this policy.
    let text = FULL[..FULL.find("  defaults:").unwrap()].replace(
        "required: [source-controller, kustomize-controller]",
        "required: [source-controller, source-watcher]",
    );
    let policy = policy(&text);
    let mut instance = spec(COMPLIANT);
    instance.as_object_mut().unwrap().remove("components");
    assert_eq!(
        messages(&policy.evaluate_at(&instance, early())),
        ["spec.components lacks \"source-watcher\", required by policy generation 7"]
    );
}

#[test]
fn forbidden_settings_and_defaults_of_absent_fields() {
    let text = FULL
        .replace("multitenant: required", "multitenant: forbidden")
        .replace("networkPolicy: required", "networkPolicy: forbidden")
        .replace("      multitenant: true\n", "")
        .replace(
            "      networkPolicy: true\n",
            "      networkPolicy: false\n",
        );
    let policy = policy(&text);
    let mut instance = spec(COMPLIANT);
    // networkPolicy defaults to true, multitenant to false.
    instance["cluster"] = json!({});
    assert_eq!(
        messages(&policy.evaluate_at(&instance, early())),
        ["spec.cluster.networkPolicy true is forbidden by policy generation 7"]
    );
    instance["cluster"] = json!({"multitenant": true, "networkPolicy": false});
    assert_eq!(
        messages(&policy.evaluate_at(&instance, early())),
        ["spec.cluster.multitenant true is forbidden by policy generation 7"]
    );
}

#[test]
fn a_minimal_policy_allows_any_instance_with_a_version() {
    let policy = policy(MINIMAL);
    assert!(policy.operator_versions().is_none());
    assert!(policy.allows_bundle("file:/anything"));
    assert!(
        policy
            .evaluate_at(&spec(EVERY_VIOLATION), early())
            .compliant()
    );
}

#[test]
fn malformed_policies_say_what_is_wrong() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "spec:\n  generation: 7\n",
            "spec:\n  generation: 7\n  color: blue\n",
            "unknown field `color`",
        ),
        (
            "kind: Policy",
            "kind: Polcy",
            "kind is \"Polcy\"; a policy is Policy",
        ),
        (
            "apiVersion: tenantflux.io/v1alpha1",
            "apiVersion: tenantflux.io/v1",
            "apiVersion is \"tenantflux.io/v1\"",
        ),
        (
            "name: platform",
            "name: \"\"",
            "metadata.name must not be empty",
        ),
        (
            "generation: 7",
            "generation: 0",
            "spec.generation must be 1 or more",
        ),
        ("generation: 7", "generation: -1", "not valid YAML"),
        (
            "versions: \">=2.7.0 <2.10.0\"",
            "versions: \"2.7 or so\"",
            "spec.distribution.versions",
        ),
        (
            "versions: \">=0.58.0 <0.59.0\"",
            "versions: latest",
            "spec.operator.versions",
        ),
        (
            "date: \"2026-09-01\"",
            "date: \"2026-02-30\"",
            "\"2026-02-30\" is not a date",
        ),
        (
            "      - source-watcher\n",
            "      - source-watchers\n",
            "names \"source-watchers\", which is not a Flux component",
        ),
        (
            "required: [source-controller, kustomize-controller]",
            "required: [image-reflector-controller]",
            "which spec.components.allowed leaves out",
        ),
        (
            "sizes: [small, medium]",
            "sizes: [huge]",
            "sizes are small, medium, large",
        ),
        (
            "sizes: [small, medium]",
            "sizes: []",
            "spec.cluster.sizes is empty",
        ),
        (
            "multitenant: required",
            "multitenant: sometimes",
            "unknown variant `sometimes`",
        ),
        (
            "      size: small\n",
            "      size: large\n",
            "spec.defaults breaks the policy itself: spec.cluster.size \"large\"",
        ),
        ("allowPatches: false", "allowPatches: no", "not valid YAML"),
        ("kind: Policy", "kind: [Policy", "not valid YAML"),
    ];
    for (from, to, expected) in cases {
        assert!(FULL.contains(from), "fixture lacks {from:?}");
        let text = FULL.replacen(from, to, 1);
        let err = match Policy::parse(&text) {
            Ok(_) => panic!("{to:?} was accepted"),
            Err(err) => error_chain(&err),
        };
        assert!(err.contains(expected), "{to:?}: {err}");
    }
}

fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[test]
fn dates_count_days_since_the_epoch() {
    assert_eq!(parse_date("1970-01-01"), Some(0));
    assert_eq!(parse_date("2000-03-01"), Some(11_017));
    assert_eq!(parse_date("2024-02-29"), Some(19_782));
    for bad in [
        "2023-02-29",
        "2026-13-01",
        "2026-1-1",
        "26-01-01",
        "2026-01-01T00:00",
    ] {
        assert_eq!(parse_date(bad), None, "{bad}");
    }
    assert!(today() > parse_date("2025-01-01").unwrap());
}

#[test]
fn a_deadline_keeps_its_minimum_as_written_without_the_v() {
    let rule = |minimum: &str, date: &str| UpgradeDeadline {
        minimum_version: minimum.to_owned(),
        date: date.to_owned(),
        warn_days: 14,
    };
    let deadline = Deadline::from_rule(&rule(" v2.8.0", "2026-09-01")).unwrap();
    assert_eq!(deadline.minimum, Release::new(2, 8, 0));
    assert_eq!(deadline.minimum_version(), "2.8.0");
    assert_eq!(deadline.day, day("2026-09-01"));
    assert_eq!(deadline.warn_days(), 14);
    let err = Deadline::from_rule(&rule("soon", "2026-09-01")).unwrap_err();
    assert_eq!(
        err.to_string(),
        "spec.distribution.upgradeDeadline.minimumVersion"
    );
    let err = Deadline::from_rule(&rule("2.8.0", "2026-9-1")).unwrap_err();
    assert_eq!(
        err.to_string(),
        "spec.distribution.upgradeDeadline.date \"2026-9-1\" is not a date (YYYY-MM-DD)"
    );
}

#[test]
fn cluster_sizes_are_known_ones_and_at_least_one() {
    let sizes = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
    assert!(check_sizes(None).is_ok());
    assert!(check_sizes(Some(&sizes(&["small", "large"]))).is_ok());
    assert!(matches!(
        check_sizes(Some(&sizes(&[]))),
        Err(PolicyError::EmptyList {
            field: "spec.cluster.sizes"
        })
    ));
    assert!(matches!(
        check_sizes(Some(&sizes(&["small", "huge"]))),
        Err(PolicyError::Size { name }) if name == "huge"
    ));
}

/// Every error of `document` against deploy/policy/policy.schema.json, by a complete JSON
/// Schema (2020-12) validator: patterns, lengths and formats count too.
fn validate(document: &str) -> Vec<String> {
    let schema: Value = serde_json::from_str(SCHEMA).expect("the schema is JSON");
    let validator = jsonschema::draft202012::new(&schema).expect("the schema is a valid schema");
    let value: Value = crate::yaml::from_str(document).expect("YAML");
    validator
        .iter_errors(&value)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect()
}

#[test]
fn the_schema_accepts_what_the_parser_accepts() {
    let schema: Value = serde_json::from_str(SCHEMA).unwrap();
    assert_eq!(
        schema["$schema"],
        "https://json-schema.org/draft/2020-12/schema"
    );
    assert_eq!(
        schema["required"],
        json!(["apiVersion", "kind", "metadata", "spec"])
    );
    assert_eq!(
        schema["properties"]["spec"]["required"],
        json!(["generation"])
    );
    assert_eq!(validate(FULL), Vec::<String>::new());
    assert_eq!(validate(MINIMAL), Vec::<String>::new());
    // Serializing a parsed policy fills in defaults (warnDays, optional requirements): still
    // valid.
    assert_eq!(validate(&policy(FULL).to_yaml()), Vec::<String>::new());
}

#[test]
fn the_schema_refuses_what_the_parser_refuses() {
    let cases = [
        ("  generation: 7\n", "  generation: 7\n  color: blue\n"),
        (
            "    allowPatches: false\n",
            "    allowPatches: false\n    extra: 1\n",
        ),
        ("kind: Policy", "kind: Polcy"),
        ("generation: 7", "generation: 0"),
        ("multitenant: required", "multitenant: sometimes"),
        ("      - source-watcher\n", "      - source-watchers\n"),
        ("sizes: [small, medium]", "sizes: []"),
        (
            "      warnDays: 30\n",
            "      warnDays: 30\n      grace: 3\n",
        ),
        // What the hand-written checker this replaced skipped: minLength and pattern.
        ("  name: platform\n", "  name: \"\"\n"),
        ("date: \"2026-09-01\"", "date: \"2026/09/01\""),
        ("version: v0.58.2", "version: 0.58.2"),
        ("digest: sha256:5f1c", "digest: sha512:5f1c"),
        ("verbs: [get, list, watch]", "verbs: []"),
        (
            "clusterRole: flux-operator-view\n",
            "clusterRole: flux-operator-view\n            extra: 1\n",
        ),
    ];
    for (from, to) in cases {
        assert!(FULL.contains(from), "fixture lacks {from:?}");
        let text = FULL.replacen(from, to, 1);
        assert!(Policy::parse(&text).is_err(), "parser accepts {to:?}");
        assert!(!validate(&text).is_empty(), "schema accepts {to:?}");
    }
}

#[test]
fn repeated_and_countless_violations_stay_bounded() {
    let policy = policy(FULL);
    // A megabyte of the same unknown component: reported once.
    let mut repeated = spec(COMPLIANT);
    repeated["components"] = json!(vec!["a"; 250_000]);
    let evaluation = policy.evaluate_at(&repeated, early());
    assert_eq!(
        messages(&evaluation)
            .iter()
            .filter(|m| m.starts_with("spec.components \"a\""))
            .count(),
        1
    );
    assert!(evaluation.violations.len() <= MAX_VIOLATIONS);
    // As many distinct ones, each with a long name: the first 20 (each name quoted short),
    // then one counting the rest.
    let mut distinct = spec(COMPLIANT);
    let names: Vec<String> = (0..100_000)
        .map(|i| format!("{i:>6}{}", "x".repeat(94)))
        .collect();
    distinct["components"] = json!(names);
    let evaluation = policy.evaluate_at(&distinct, early());
    assert_eq!(evaluation.violations.len(), MAX_VIOLATIONS + 1);
    let text: usize = evaluation.violations.iter().map(|v| v.message.len()).sum();
    assert!(text < 8 * 1024, "{text} bytes of violations");
    assert!(
        evaluation.violations[0]
            .message
            .contains("… (100 bytes) is not one of"),
        "{}",
        evaluation.violations[0].message
    );
    let last = &evaluation.violations[MAX_VIOLATIONS];
    assert_eq!(last.field, "spec");
    // Every listed component breaks the policy, and so do the required ones it now lacks.
    assert!(
        last.message
            .starts_with("and 99982 more violations (the first 20 are listed)"),
        "{}",
        last.message
    );
    assert!(!evaluation.compliant());
}

#[test]
fn schema_and_parser_agree_on_spec_clusters() {
    let with = |clusters: &str| format!("{MINIMAL}  clusters: {clusters}\n");
    for good in [
        "[{uid: 5f1c}]",
        "[{name: kubernetes-acme}, {name: \"tenant-*\", uid: 5f1c}]",
    ] {
        let text = with(good);
        assert!(Policy::parse(&text).is_ok(), "parser refuses {good}");
        assert_eq!(validate(&text), Vec::<String>::new(), "{good}");
    }
    for bad in ["[]", "[{}]", "[{name: \"\"}]", "[{uid: u, zone: eu}]"] {
        let text = with(bad);
        assert!(Policy::parse(&text).is_err(), "parser accepts {bad}");
        assert!(!validate(&text).is_empty(), "schema accepts {bad}");
    }
}

#[test]
fn the_policy_may_name_the_bundle_inside_its_own_patterns() {
    let with = |operator: &str| {
        Policy::parse(&format!(
            "apiVersion: tenantflux.io/v1alpha1\nkind: Policy\nmetadata: {{name: p}}\nspec:\n  generation: 2\n  operator: {operator}\n"
        ))
    };
    let policy = with(
        "{bundle: \"oci://r.example/fo:v0.61.0@sha256:abc\", bundles: [\"oci://r.example/*\"]}",
    )
    .unwrap();
    assert_eq!(
        policy.operator_bundle(),
        Some("oci://r.example/fo:v0.61.0@sha256:abc")
    );
    let err = with("{bundle: \"oci://other.example/fo:v1\", bundles: [\"oci://r.example/*\"]}")
        .unwrap_err()
        .to_string();
    assert!(err.contains("spec.operator.bundles leaves it out"), "{err}");
    let err = with("{bundle: \"https://r.example/fo\"}")
        .unwrap_err()
        .to_string();
    assert!(err.contains("not a bundle source"), "{err}");
    for (document, bad) in [
        ("oci://r.example/fo:v1", false),
        ("https://r.example/fo", true),
    ] {
        let text = format!(
            "apiVersion: tenantflux.io/v1alpha1\nkind: Policy\nmetadata: {{name: p}}\nspec:\n  generation: 2\n  operator: {{bundle: \"{document}\"}}\n"
        );
        assert_eq!(!validate(&text).is_empty(), bad, "{document}");
    }
}
