//! The Cozystack add-on package (`deploy/cozystack/`), as Cozystack's tooling would use it:
//!
//! 1. the add-on's HelmRelease template, rendered by the real `helm` inside a chart that stands
//!    for Cozystack's Kubernetes application (its values are the package's values lines, with
//!    the tenant namespace's `_namespace.etcd`): nothing with the add-on off, the whole
//!    HelmRelease with it on, the platform's policy key and channel when set, and a
//!    `valuesOverride` merged over the add-on's values;
//! 2. that HelmRelease accepted by the real API server against Flux's HelmRelease CRD (a
//!    server-side dry run), and one with a chart reference the CRD does not allow refused;
//! 3. the values lines against their JSON Schema, with the `jsonschema` validator: the defaults
//!    and a configured add-on pass, `enabled: "yes"` does not, and the cozyvalues-gen comments
//!    say what the schema says;
//! 4. the system package vendored as its Makefile does it (`make update` from this checkout),
//!    rendered with the values the HelmRelease carries: the agent adopts in `cozy-fluxcd` with
//!    flux-operator's bundle and the platform's policy, and the chart's own schema still
//!    refuses a bad value through the wrapper;
//! 5. the operator namespace the package renders (the adopt Role goes there): on a new cluster
//!    only, not over the one the removed add-on left, looked up on the real API server.
//!
//! The agent these values configure runs in `adopt.rs`, configured from the same render
//! (`tenantflux_tests::cozystack`): installing Flux on a new tenant cluster, and adopting the
//! removed add-on's Flux.

use std::process::Output;

use serde_json::{Value, json};
use tenantflux_tests::{
    TestCluster,
    cozystack::{
        BUNDLE, CHANNEL, HELMRELEASE_CRD, PUBLIC_KEY, RELEASE, TENANT_NAMESPACE, Vendored,
        addon_release, agent_env, documents, enabled_with_policy, external_artifact_name, helm_ok,
        package_dir, read, render_addon, write,
    },
    repo_root, stderr, stdout, tool_path,
};

#[test]
fn the_addon_renders_its_helmrelease_only_when_enabled() {
    // Step 1: off (the values lines' default), and on in a tenant without etcd: nothing.
    assert_eq!(render_addon(&json!({})), Vec::<Value>::new(), "step 1: off");
    assert_eq!(
        render_addon(&json!({"addons": {"fluxcd": {"enabled": true}}, "_namespace": {"etcd": ""}})),
        Vec::<Value>::new(),
        "step 1: no etcd"
    );

    // Step 2: on, without a policy: the whole HelmRelease, field by field.
    let release = addon_release(&json!({"addons": {"fluxcd": {"enabled": true}}}));
    let agent_values = json!({
        "operatorNamespace": "cozy-fluxcd",
        "adopt": true,
        "operatorBundle": BUNDLE,
        "operatorVersion": "v0.59.0",
        "operatorAllowPodFields": ["hostNetwork", "tolerations", "resources"],
    });
    assert_eq!(
        release,
        json!({
            "apiVersion": "helm.toolkit.fluxcd.io/v2",
            "kind": "HelmRelease",
            "metadata": {
                "name": "kubernetes-acme-tenantflux",
                "labels": {
                    "cozystack.io/repository": "system",
                    "cozystack.io/target-cluster-name": RELEASE,
                    "sharding.fluxcd.io/key": "tenants",
                },
            },
            "spec": {
                "releaseName": "tenantflux-agent",
                "chartRef": {
                    "kind": "ExternalArtifact",
                    "name": "cozystack-kubernetes-application-kubevirt-kubernetes-tenantflux-agent",
                    "namespace": "cozy-system",
                },
                "kubeConfig": {"secretRef": {
                    "name": "kubernetes-acme-admin-kubeconfig",
                    "key": "super-admin.svc",
                }},
                "targetNamespace": "tenantflux-system",
                "storageNamespace": "tenantflux-system",
                "interval": "5m",
                "timeout": "10m",
                "install": {"createNamespace": true, "remediation": {"retries": -1}},
                "upgrade": {"remediation": {"retries": -1}},
                "values": {"tenantflux-agent": agent_values},
                "dependsOn": [{"name": "kubernetes-acme-cilium", "namespace": TENANT_NAMESPACE}],
            },
        }),
        "step 2: enabled"
    );
    assert_eq!(
        release["spec"]["chartRef"]["name"],
        external_artifact_name(),
        "step 2: the chart is the package's ExternalArtifact"
    );

    // Step 3: the platform's key and channel reach the agent's values.
    let release = addon_release(&enabled_with_policy());
    assert_eq!(
        release["spec"]["values"]["tenantflux-agent"]["policy"],
        json!({"publicKey": PUBLIC_KEY, "source": CHANNEL}),
        "step 3: policy"
    );

    // Step 4: a valuesOverride is merged over the add-on's values: a value it sets wins
    // (false and a list included), one it adds is added, the others stay.
    let mut values = enabled_with_policy();
    values["addons"]["fluxcd"]["valuesOverride"] = json!({"tenantflux-agent": {
        "adopt": false,
        "operatorAllowPodFields": ["resources"],
        "policy": {"sourceInterval": "1m"},
        "userSubjects": [{"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "acme-devs"}],
    }});
    let merged = &addon_release(&values)["spec"]["values"]["tenantflux-agent"];
    assert_eq!(merged["adopt"], false, "step 4: {merged}");
    assert_eq!(merged["operatorAllowPodFields"], json!(["resources"]));
    assert_eq!(merged["userSubjects"][0]["name"], "acme-devs");
    assert_eq!(
        merged["policy"],
        json!({"publicKey": PUBLIC_KEY, "source": CHANNEL, "sourceInterval": "1m"})
    );
    assert_eq!(merged["operatorNamespace"], "cozy-fluxcd");
    assert_eq!(merged["operatorBundle"], BUNDLE);
}

/// Puts back on drop what a test changed on the shared cluster, by the kubectl command given;
/// `finish` does it on the way out of a passing test and fails it when that does not work.
struct Restore<'a> {
    cluster: &'a TestCluster,
    undo: Vec<String>,
    done: bool,
}

impl<'a> Restore<'a> {
    fn new(cluster: &'a TestCluster, undo: &[&str]) -> Self {
        Self {
            cluster,
            undo: undo.iter().map(|arg| arg.to_string()).collect(),
            done: false,
        }
    }

    fn finish(mut self) {
        self.done = true;
        let undo: Vec<&str> = self.undo.iter().map(String::as_str).collect();
        self.cluster
            .kubectl_ok(&undo)
            .unwrap_or_else(|err| panic!("kubectl {undo:?}: {err}"));
    }
}

impl Drop for Restore<'_> {
    fn drop(&mut self) {
        if !self.done {
            let undo: Vec<&str> = self.undo.iter().map(String::as_str).collect();
            if let Err(err) = self.cluster.kubectl_ok(&undo) {
                eprintln!("restoring the shared cluster: kubectl {undo:?}: {err}");
            }
        }
    }
}

/// The HelmRelease CRD of the newest Flux distribution in flux-operator's data (the one the
/// test environment runs), from helm-controller's manifest.
fn helmrelease_crd() -> String {
    let data = tool_path("FLUX_OPERATOR_SRC").join("config/data/flux");
    let version = |name: &str| -> Option<(u64, u64, u64)> {
        let mut parts = name.strip_prefix('v')?.split('.').map(str::parse::<u64>);
        let version = (
            parts.next()?.ok()?,
            parts.next()?.ok()?,
            parts.next()?.ok()?,
        );
        parts.next().is_none().then_some(version)
    };
    let newest = std::fs::read_dir(&data)
        .unwrap_or_else(|err| panic!("{}: {err}", data.display()))
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter_map(|name| Some((version(&name)?, name)))
        .max()
        .map(|(_, name)| name)
        .expect("a Flux distribution in flux-operator's data");
    read(&data.join(newest).join("helm-controller.yaml"))
        .split("\n---")
        .find(|document| {
            document.contains("kind: CustomResourceDefinition")
                && document.contains(&format!("name: {HELMRELEASE_CRD}"))
        })
        .expect("the HelmRelease CRD in helm-controller's manifest")
        .to_owned()
}

fn dry_run(cluster: &TestCluster, namespace: &str, object: &Value) -> Output {
    let args = [
        "apply",
        "--server-side",
        "--dry-run=server",
        "--field-manager",
        "tenantflux-tests",
        "-n",
        namespace,
        "-f",
        "-",
    ];
    cluster
        .kubectl_with_input(&args, object.to_string().as_bytes())
        .expect("run kubectl apply")
}

#[test]
fn the_helmrelease_is_accepted_by_the_helmrelease_crd() {
    let cluster = TestCluster::shared();
    // Step 1: Flux's HelmRelease CRD. The shared cluster has it when a FluxInstance applied
    // Flux there; otherwise it is applied for this test and deleted afterwards.
    let crd_added = if cluster
        .kubectl(&["get", "crd", HELMRELEASE_CRD])
        .expect("kubectl get crd")
        .status
        .success()
    {
        None
    } else {
        let restore = Restore::new(cluster, &["delete", "crd", HELMRELEASE_CRD]);
        cluster
            .apply_yaml(&helmrelease_crd())
            .expect("step 1: apply the HelmRelease CRD");
        cluster
            .kubectl_ok(&[
                "wait",
                "--for=condition=Established",
                &format!("crd/{HELMRELEASE_CRD}"),
                "--timeout=60s",
            ])
            .expect("step 1: the CRD is established");
        Some(restore)
    };

    // Step 2: the tenant's namespace (one of this run's own: a previous run's may still be
    // terminating), the HelmRelease rendered for it, and the dry run.
    let namespace = format!("{TENANT_NAMESPACE}-{}", std::process::id());
    cluster
        .kubectl_ok(&["create", "namespace", &namespace])
        .expect("step 2: create the namespace");
    let namespace_created = Restore::new(
        cluster,
        &["delete", "namespace", &namespace, "--wait=false"],
    );
    let mut release = addon_release(&enabled_with_policy());
    release["metadata"]["namespace"] = json!(namespace);
    let applied = dry_run(cluster, &namespace, &release);
    assert!(
        applied.status.success()
            && stdout(&applied).contains(
                "helmrelease.helm.toolkit.fluxcd.io/kubernetes-acme-tenantflux serverside-applied (server dry run)"
            ),
        "step 2: {}\n{}",
        stdout(&applied),
        stderr(&applied)
    );

    // Step 3: the dry run checks the CRD's schema: a chart reference of a kind it does not
    // allow is refused, naming the field.
    release["spec"]["chartRef"]["kind"] = json!("GitRepository");
    let refused = dry_run(cluster, &namespace, &release);
    assert!(
        !refused.status.success() && stderr(&refused).contains("spec.chartRef.kind"),
        "step 3: {}\n{}",
        stdout(&refused),
        stderr(&refused)
    );

    namespace_created.finish();
    if let Some(restore) = crd_added {
        restore.finish();
    }
}

/// A cozyvalues-gen field comment: `## @field {TYPE} NAME - DESCRIPTION`, `[NAME]` when
/// optional.
#[derive(Debug)]
struct Field {
    name: String,
    kind: String,
    required: bool,
    description: String,
}

fn field(line: &str) -> Option<Field> {
    let rest = line.strip_prefix("## @field {")?;
    let (kind, rest) = rest.split_once("} ")?;
    let (name, description) = rest.split_once(" - ")?;
    let (name, required) = match name.strip_prefix('[') {
        Some(optional) => (optional.strip_suffix(']')?, false),
        None => (name, true),
    };
    Some(Field {
        name: name.to_owned(),
        kind: kind.to_owned(),
        required,
        description: description.to_owned(),
    })
}

/// The fields of each `## @typedef {struct} NAME` in `text`.
fn typedefs(text: &str) -> Vec<(String, Vec<Field>)> {
    let mut types: Vec<(String, Vec<Field>)> = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("## @typedef {struct} ") {
            let (name, _) = rest.split_once(" - ").expect("a typedef's description");
            types.push((name.to_owned(), Vec::new()));
        } else if line.starts_with("## @field") {
            let field = field(line).unwrap_or_else(|| panic!("a field comment: {line}"));
            types
                .last_mut()
                .expect("a field inside a typedef")
                .1
                .push(field);
        }
    }
    types
}

/// Checks that `schema` is what the comments of `fields` say (cozyvalues-gen's mapping).
fn assert_schema_follows(
    schema: &Value,
    fields: &[Field],
    types: &[(String, Vec<Field>)],
    at: &str,
) {
    let required: Vec<&str> = fields
        .iter()
        .filter(|f| f.required)
        .map(|f| f.name.as_str())
        .collect();
    let mut listed: Vec<&str> = schema["required"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    listed.sort_unstable();
    let mut expected = required.clone();
    expected.sort_unstable();
    assert_eq!(listed, expected, "{at}: required");
    let properties = schema["properties"].as_object().expect("properties");
    assert_eq!(properties.len(), fields.len(), "{at}: {properties:?}");
    for field in fields {
        let property = &schema["properties"][&field.name];
        let at = format!("{at}.{}", field.name);
        assert_eq!(property["description"], field.description.as_str(), "{at}");
        match field.kind.as_str() {
            "bool" => assert_eq!(property["type"], "boolean", "{at}"),
            "string" => assert_eq!(property["type"], "string", "{at}"),
            "object" => {
                assert_eq!(property["type"], "object", "{at}");
                assert_eq!(
                    property["x-kubernetes-preserve-unknown-fields"], true,
                    "{at}"
                );
            }
            named => {
                let (_, nested) = types
                    .iter()
                    .find(|(name, _)| name == named)
                    .unwrap_or_else(|| panic!("{at}: type {named} is defined"));
                assert_eq!(property["type"], "object", "{at}");
                assert_schema_follows(property, nested, types, &at);
            }
        }
    }
}

#[test]
fn the_values_lines_follow_their_schema() {
    let apps = package_dir().join("apps/kubernetes");
    let lines = read(&apps.join("values.fluxcd.yaml"));
    let fragment: Value = serde_json::from_str(&read(&apps.join("values.schema.fluxcd.json")))
        .expect("the schema fragment is JSON");
    // Where it goes in values.schema.json: properties.addons.properties.fluxcd.
    let schema = json!({
        "type": "object",
        "properties": {"addons": {"type": "object", "properties": {"fluxcd": fragment}}},
    });
    let validator = jsonschema::validator_for(&schema).expect("a valid JSON Schema");
    let errors = |values: &Value| -> Vec<String> {
        validator
            .iter_errors(values)
            .map(|e| format!("{}: {e}", e.instance_path()))
            .collect()
    };

    // Step 1: the defaults, and an add-on with a policy and an override, are valid.
    let defaults: Value = tenantflux_core::yaml::from_str(&lines).expect("the lines are YAML");
    assert_eq!(
        defaults["addons"]["fluxcd"],
        json!({"enabled": false, "policy": {}, "valuesOverride": {}})
    );
    assert_eq!(errors(&defaults), Vec::<String>::new(), "step 1: defaults");
    let mut configured = enabled_with_policy();
    configured["addons"]["fluxcd"]["valuesOverride"] =
        json!({"tenantflux-agent": {"userSubjects": []}});
    assert_eq!(
        errors(&configured),
        Vec::<String>::new(),
        "step 1: configured"
    );

    // Step 2: what the dashboard must refuse.
    for (bad, at) in [
        (
            json!({"enabled": "yes", "policy": {}, "valuesOverride": {}}),
            "/addons/fluxcd/enabled",
        ),
        (
            json!({"enabled": true, "policy": {"publicKey": 7}, "valuesOverride": {}}),
            "/addons/fluxcd/policy/publicKey",
        ),
        (
            json!({"enabled": true, "policy": {}, "valuesOverride": []}),
            "/addons/fluxcd/valuesOverride",
        ),
        (
            json!({"policy": {}, "valuesOverride": {}}),
            "/addons/fluxcd",
        ),
    ] {
        let errors = errors(&json!({"addons": {"fluxcd": bad}}));
        assert!(
            errors.len() == 1 && errors[0].starts_with(&format!("{at}: ")),
            "step 2: {bad}: {errors:?}"
        );
    }

    // Step 3: the schema is what cozyvalues-gen writes from the comments: each field's type,
    // description and whether it is required, the add-on's description from its `Addons` field.
    let types = typedefs(&lines);
    let (_, addon) = types
        .iter()
        .find(|(name, _)| name == "FluxCDAddon")
        .expect("typedef FluxCDAddon");
    assert_schema_follows(&fragment, addon, &types, "fluxcd");
    let addons_field = lines
        .lines()
        .find_map(|line| field(line.strip_prefix("# ")?))
        .expect("the field line for the Addons typedef");
    assert_eq!(
        (addons_field.name.as_str(), addons_field.kind.as_str()),
        ("fluxcd", "FluxCDAddon")
    );
    assert_eq!(fragment["description"], addons_field.description.as_str());
    assert_eq!(fragment["default"], json!({}));
}

#[test]
fn the_system_package_installs_the_agent_adopting_in_cozy_fluxcd() {
    // Step 1: the package in a tree laid out as Cozystack's, vendored by its Makefile from this
    // checkout.
    let vendored = Vendored::new();
    assert_eq!(
        read(&vendored.package.join("charts/tenantflux-agent/values.yaml")),
        read(&repo_root().join("deploy/helm/tenantflux-agent/values.yaml")),
        "step 1: the chart is vendored as it is"
    );

    // Step 2: rendered with the values of the add-on's HelmRelease, into its target namespace.
    let release = addon_release(&enabled_with_policy());
    let objects = vendored.objects(&release);
    let object = |kind: &str, namespace: &str, name: &str| -> &Value {
        objects
            .iter()
            .find(|o| {
                o["kind"] == kind
                    && o["metadata"]["name"] == name
                    && o["metadata"]["namespace"].as_str().unwrap_or("") == namespace
            })
            .unwrap_or_else(|| panic!("{kind} {namespace}/{name} rendered"))
    };

    // Step 3: the agent adopts in cozy-fluxcd, installs from flux-operator's bundle with the
    // add-on's pod fields allowed, and takes the platform's key and channel.
    let env = agent_env(&objects);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    for expected in [
        ("TENANTFLUX_ADOPT", "true"),
        ("TENANTFLUX_OPERATOR_NAMESPACE", "cozy-fluxcd"),
        ("TENANTFLUX_OPERATOR_BUNDLE", BUNDLE),
        ("TENANTFLUX_OPERATOR_VERSION", "v0.59.0"),
        (
            "TENANTFLUX_OPERATOR_ALLOW_POD_FIELDS",
            "hostNetwork,tolerations,resources",
        ),
        (
            "TENANTFLUX_POLICY_PUBLIC_KEY",
            "/etc/tenantflux/policy/ed25519.pub",
        ),
        ("TENANTFLUX_POLICY_SOURCE", CHANNEL),
    ] {
        assert!(env.contains(&expected), "step 3: {expected:?} in {env:?}");
    }
    assert_eq!(
        object("ConfigMap", "tenantflux-system", "tenantflux-policy-key")["data"]["ed25519.pub"],
        PUBLIC_KEY
    );
    let adopt = object("Role", "cozy-fluxcd", "tenantflux-agent-adopt");
    assert_eq!(
        adopt["rules"],
        json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list", "patch"]}])
    );
    let binding = object("RoleBinding", "cozy-fluxcd", "tenantflux-agent-adopt");
    assert_eq!(
        binding["subjects"],
        json!([{"kind": "ServiceAccount", "name": "tenantflux-agent", "namespace": "tenantflux-system"}])
    );
    // The release's namespace is created by helm-controller (install.createNamespace), so the
    // chart does not render it; the operator namespace, which the adopt Role goes into, is
    // rendered by the package (kept when the release goes: Flux lives there).
    let namespaces: Vec<&Value> = objects
        .iter()
        .filter(|o| o["kind"] == "Namespace")
        .collect();
    assert_eq!(
        namespaces,
        [&json!({
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": "cozy-fluxcd", "annotations": {"helm.sh/resource-policy": "keep"}},
        })],
        "step 3: namespaces"
    );

    // Step 4: the chart's own schema holds through the wrapper: a channel without a tag is
    // refused, naming the value.
    let refused = vendored.render(
        &release,
        &[
            "--set",
            "tenantflux-agent.policy.source=oci://registry.example/p",
        ],
    );
    assert!(
        !refused.status.success() && stderr(&refused).contains("policy"),
        "step 4: {}",
        stderr(&refused)
    );
}

/// The package's own template renders the operator namespace only where a new tenant cluster
/// lacks it. Rendered alone (the agent's chart would also look up its cluster-wide objects,
/// which the shared cluster holds from other tests), with `--dry-run=server` so that Helm's
/// `lookup` reads the real API server, as helm-controller's install does.
#[test]
fn the_operator_namespace_is_rendered_only_where_a_new_cluster_lacks_it() {
    let cluster = TestCluster::shared();
    let chart = tempfile::tempdir().expect("temporary directory");
    let package = package_dir().join("system/tenantflux-agent");
    write(
        &chart.path().join("Chart.yaml"),
        &read(&package.join("Chart.yaml")),
    );
    write(
        &chart.path().join("templates/operator-namespace.yaml"),
        &read(&package.join("templates/operator-namespace.yaml")),
    );
    // A namespace of this run's own stands for cozy-fluxcd.
    let namespace = format!("cozy-fluxcd-{}", std::process::id());
    let values = chart.path().join("values.json");
    let render = |adopt: bool| -> Vec<Value> {
        write(
            &values,
            &json!({"tenantflux-agent": {"operatorNamespace": namespace, "adopt": adopt}})
                .to_string(),
        );
        documents(&helm_ok(&[
            "template",
            "tenantflux-agent",
            chart.path().to_str().expect("UTF-8 path"),
            "--namespace",
            "tenantflux-system",
            "-f",
            values.to_str().expect("UTF-8 path"),
            "--dry-run=server",
            "--kubeconfig",
            cluster.kubeconfig().to_str().expect("UTF-8 path"),
        ]))
    };
    let rendered_namespace = json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": namespace, "annotations": {"helm.sh/resource-policy": "keep"}},
    });

    // Step 1: a new cluster: rendered, kept when the release goes; without adopt: nothing.
    assert_eq!(
        render(true),
        std::slice::from_ref(&rendered_namespace),
        "step 1"
    );
    assert_eq!(render(false), Vec::<Value>::new(), "step 1: adopt off");

    // Step 2: the removed add-on's cluster, where helm-controller created the namespace outside
    // any release: left alone.
    cluster
        .kubectl_ok(&["create", "namespace", &namespace])
        .expect("step 2: create the namespace");
    let created = Restore::new(
        cluster,
        &["delete", "namespace", &namespace, "--wait=false"],
    );
    assert_eq!(render(true), Vec::<Value>::new(), "step 2");

    // Step 3: the release's own (after its first install): rendered again, so an upgrade keeps
    // it in the release.
    cluster
        .kubectl_ok(&[
            "annotate",
            "namespace",
            &namespace,
            "meta.helm.sh/release-name=tenantflux-agent",
            "meta.helm.sh/release-namespace=tenantflux-system",
        ])
        .expect("step 3: annotate the namespace");
    cluster
        .kubectl_ok(&[
            "label",
            "namespace",
            &namespace,
            "app.kubernetes.io/managed-by=Helm",
        ])
        .expect("step 3: label the namespace");
    assert_eq!(render(true), [rendered_namespace], "step 3");
    created.finish();
}
