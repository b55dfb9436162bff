//! The ValidatingAdmissionPolicy rendered from policies, expression by expression.

use super::*;

/// RFC 7386's application, to check the patch against.
fn apply_merge(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(patch) => {
            if !target.is_object() {
                *target = json!({});
            }
            let object = target.as_object_mut().unwrap();
            for (key, value) in patch {
                if value.is_null() {
                    object.remove(key);
                } else {
                    apply_merge(object.entry(key.clone()).or_insert(Value::Null), value);
                }
            }
        }
        _ => *target = patch.clone(),
    }
}

#[test]
fn merge_patch_restores_the_rendered_spec_and_drops_foreign_fields() {
    let want = render(&policy(""), 0).binding["spec"].clone();
    let mut live = want.clone();
    live["matchResources"] =
        json!({"namespaceSelector": {"matchLabels": {"x": "y"}}, "matchPolicy": "Equivalent"});
    live["validationActions"] = json!(["Audit", "Deny"]);
    let patch = merge_patch(&live, &want);
    assert_eq!(
        patch,
        json!({"matchResources": null, "validationActions": ["Deny"]})
    );
    apply_merge(&mut live, &patch);
    assert_eq!(live, want);

    let want = render(&policy(""), 0).policy["spec"].clone();
    let mut live = want.clone();
    live["matchConditions"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "off", "expression": "false"}));
    live["matchConstraints"]["namespaceSelector"] = json!({"matchLabels": {"x": "y"}});
    let patch = merge_patch(&live, &want);
    apply_merge(&mut live, &patch);
    assert_eq!(live, want);
    assert_eq!(merge_patch(&want, &want), json!({}));
}

#[test]
fn drift_names_each_field_added_changed_or_removed() {
    let expected = json!({
        "policyName": NAME,
        "validationActions": ["Deny"],
        "matchResources": {"matchPolicy": "Equivalent", "objectSelector": {}},
    });
    assert!(drift(&expected, &expected).is_empty());
    let mut live = expected.clone();
    live["matchResources"]["namespaceSelector"] = json!({"matchLabels": {"x": "y"}});
    live["validationActions"] = json!(["Audit"]);
    live["paramRef"] = json!({"name": "p"});
    assert_eq!(
        drift(&expected, &live),
        [
            "spec.matchResources.namespaceSelector",
            "spec.paramRef.name",
            "spec.validationActions",
        ]
    );
    let mut live = expected.clone();
    live.as_object_mut().unwrap().remove("matchResources");
    assert_eq!(
        drift(&expected, &live),
        [
            "spec.matchResources.matchPolicy",
            "spec.matchResources.objectSelector"
        ]
    );
    let mut live = expected.clone();
    live["matchConditions"] = json!([{"name": "off", "expression": "false"}]);
    assert_eq!(drift(&expected, &live), ["spec.matchConditions"]);
    assert_eq!(drift(&expected, &Value::Null).len(), 4);
    assert_eq!(drift(&json!(1), &json!("1")), ["spec"]);
}

fn policy(spec: &str) -> Policy {
    let text = format!(
        "apiVersion: tenantflux.io/v1alpha1\nkind: Policy\nmetadata:\n  name: p\nspec:\n  generation: 7\n{spec}"
    );
    Policy::parse(&text).unwrap_or_else(|err| panic!("{err}"))
}

fn expressions(rendered: &Rendered) -> Vec<(String, String)> {
    rendered.policy["spec"]["validations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["expression"].as_str().unwrap().to_owned(),
                v["messageExpression"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[test]
fn an_empty_policy_checks_only_that_the_version_parses() {
    let rendered = render(&policy(""), 0);
    assert_eq!(
            expressions(&rendered),
            [(
                "variables.versionValid".to_owned(),
                "'spec.distribution.version \"' + variables.version + '\"' + ' is neither a version (2.8.0) nor a semver range (2.8.x, >=2.7.0 <2.10.0)'".to_owned()
            )]
        );
    assert_eq!(rendered.policy["metadata"]["name"], NAME);
    assert_eq!(
        rendered.policy["metadata"]["annotations"][GENERATION_ANNOTATION],
        "7"
    );
    assert_eq!(rendered.binding["spec"]["policyName"], NAME);
    assert_eq!(
        rendered.binding["spec"]["validationActions"],
        json!(["Deny"])
    );
    assert_eq!(
        rendered.policy["spec"]["matchConstraints"]["resourceRules"][0]["resources"],
        json!(["fluxinstances"])
    );
}

#[test]
fn every_constraint_becomes_a_validation_with_the_agents_message() {
    let rendered = render(
        &policy(
            r#"  distribution:
    versions: ">=2.7.0 <2.10.0"
    registries: ["ghcr.io/fluxcd", "registry.example.com/*"]
  components:
    allowed: [source-controller, kustomize-controller, helm-controller, notification-controller]
    required: [kustomize-controller]
  cluster:
    multitenant: required
    networkPolicy: forbidden
    sizes: [small]
  sync:
    urls: ["https://github.com/acme/*"]
  kustomize:
    allowPatches: false
"#,
        ),
        0,
    );
    let got = expressions(&rendered);
    let all = |i: usize| got[i].clone();
    assert_eq!(got.len(), 10, "{got:#?}");
    assert_eq!(
        all(1).0,
        format!(
            "!variables.versionValid || (variables.low >= {} && variables.high <= {})",
            2 * MAJOR + 7 * MINOR,
            2 * MAJOR + 10 * MINOR
        )
    );
    assert!(
        all(1)
            .1
            .ends_with("' is outside \">=2.7.0 <2.10.0\" allowed by policy generation 7'")
    );
    assert_eq!(
        all(2).0,
        "!(has(object.spec.distribution) && has(object.spec.distribution.registry)) || object.spec.distribution.registry.matches('^ghcr\\\\.io/fluxcd$|^registry\\\\.example\\\\.com/.*$')"
    );
    assert_eq!(
        all(2).1,
        "'spec.distribution.registry \"' + object.spec.distribution.registry + '\" is not one of \"ghcr.io/fluxcd\", \"registry.example.com/*\" allowed by policy generation 7'"
    );
    assert!(
        all(3)
            .0
            .starts_with("variables.components.all(c, c in ['source-controller'")
    );
    assert_eq!(
        all(4),
        (
            "'kustomize-controller' in variables.components".to_owned(),
            "'spec.components lacks \"kustomize-controller\", required by policy generation 7'"
                .to_owned()
        )
    );
    assert_eq!(
        all(5).0,
        "(has(object.spec.cluster) && has(object.spec.cluster.multitenant) ? object.spec.cluster.multitenant == true : false)"
    );
    assert_eq!(
        all(6).1,
        "'spec.cluster.networkPolicy true is forbidden by policy generation 7'"
    );
    assert!(
        all(7)
            .0
            .contains("object.spec.cluster.size.matches('^small$')")
    );
    assert!(
        all(8)
            .0
            .contains("object.spec.sync.url.matches('^https://github\\\\.com/acme/.*$')")
    );
    assert!(all(9).0.contains("has(object.spec.kustomize.patches)"));
}

#[test]
fn a_deadline_applies_from_its_date() {
    let policy = policy(
        "  distribution:\n    upgradeDeadline:\n      minimumVersion: 2.8.0\n      date: \"2026-03-01\"\n",
    );
    let day = super::super::parse_date("2026-03-01").unwrap();
    assert_eq!(expressions(&render(&policy, day - 1)).len(), 1);
    let after = expressions(&render(&policy, day));
    assert_eq!(
        after[1].0,
        format!(
            "!variables.versionValid || variables.low >= {}",
            2 * MAJOR + 8 * MINOR
        )
    );
    assert!(after[1].1.ends_with(
        "' allows versions below 2.8.0, which policy generation 7 requires since 2026-03-01'"
    ));
}

#[test]
fn literals_escape_quotes_and_backslashes() {
    assert_eq!(literal(r"a'b\c"), r"'a\'b\\c'");
    assert_eq!(list(&["x", "y"]), "['x', 'y']");
}

#[test]
fn releases_encode_in_order_and_saturate() {
    assert!(encode(Release::new(2, 10, 0)) > encode(Release::new(2, 9, 999)));
    assert_eq!(encode(Release::new(2, 8, 1)), 2_000_008_000_001);
    assert!(encode(Release::new(u64::MAX, u64::MAX, u64::MAX)) < UNBOUNDED);
}
