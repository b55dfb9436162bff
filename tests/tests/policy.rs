//! Signed policy against the real control plane: keys and signatures made by the plugin, the
//! agent (as its ServiceAccount, with deploy/'s RBAC) verifying pushes, storing the accepted
//! policy, keeping it across a restart, and undoing an edit of the stored copy. The cluster is
//! the test's own: the agent runs with a policy key there.

use std::{path::Path, process::Output, time::Duration};

use serde_json::Value;
use tenantflux_agent::instance::defaults::DEALT_WITH;
use tenantflux_tests::{
    TestCluster, path, repo_root,
    tenant::{
        AGENT_NAMESPACE, compliant_instance, defaults_record, example_without_defaults,
        instance_json, wait_enforced,
    },
    wait_for,
};

const STORE: &str = "tenantflux-policy";

/// Each test starts a cluster of its own; one at a time, since several control planes
/// starting at once on a small machine time out.
static ONE_CLUSTER_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn run(cluster: &TestCluster, args: &[&str]) -> Output {
    run_as(cluster, None, args)
}

fn run_as(cluster: &TestCluster, kubeconfig: Option<&Path>, args: &[&str]) -> Output {
    cluster
        .kubectl_tenantflux(kubeconfig, args)
        .unwrap_or_else(|err| panic!("kubectl tenantflux {args:?}: {err}"))
}

fn ok(cluster: &TestCluster, args: &[&str]) -> String {
    let output = run(cluster, args);
    assert!(
        output.status.success(),
        "kubectl tenantflux {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Runs a command that must fail with exit code 1; returns its stderr.
fn refused(cluster: &TestCluster, args: &[&str]) -> String {
    let output = run(cluster, args);
    assert_eq!(
        output.status.code(),
        Some(1),
        "kubectl tenantflux {args:?} should fail: {}",
        String::from_utf8_lossy(&output.stdout)
    );
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn show(cluster: &TestCluster) -> Value {
    serde_json::from_str(&ok(cluster, &["policy", "show", "-o", "json"])).expect("JSON")
}

fn stored(cluster: &TestCluster) -> String {
    let output = cluster
        .kubectl(&[
            "-n",
            AGENT_NAMESPACE,
            "get",
            "configmap",
            STORE,
            "-o",
            "jsonpath={.data.signed-policy\\.yaml}",
        ])
        .expect("kubectl get");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[tokio::test]
async fn signed_policy_is_verified_stored_kept_and_guarded() {
    let _serial = ONE_CLUSTER_AT_A_TIME.lock().await;
    let cluster = TestCluster::start(&format!("po-sign-{}", std::process::id()))
        .expect("starting the cluster");
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys");
    let other = dir.path().join("other");

    // Keys, signing and verification need no cluster.
    let out = ok(&cluster, &["policy", "keygen", "--out", path(&keys)]);
    assert!(out.starts_with("key "), "{out}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(keys.join("ed25519.key"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let err = refused(&cluster, &["policy", "keygen", "--out", path(&keys)]);
    assert!(err.contains("never overwrites a key"), "{err}");
    ok(&cluster, &["policy", "keygen", "--out", path(&other)]);

    let example = std::fs::read_to_string(repo_root().join("deploy/policy/example.yaml")).unwrap();
    let write = |name: &str, text: &str| {
        let file = dir.path().join(name);
        std::fs::write(&file, text).unwrap();
        file
    };
    let key = keys.join("ed25519.key");
    let public = keys.join("ed25519.pub");
    let sign = |policy: &Path, key: &Path, out: &Path| {
        ok(
            &cluster,
            &[
                "policy",
                "sign",
                "-f",
                path(policy),
                "--key",
                path(key),
                "--out",
                path(out),
            ],
        );
    };
    let gen7 = dir.path().join("signed-7.yaml");
    sign(&write("policy-7.yaml", &example), &key, &gen7);
    let gen6 = dir.path().join("signed-6.yaml");
    sign(
        &write(
            "policy-6.yaml",
            &example.replace("generation: 7", "generation: 6"),
        ),
        &key,
        &gen6,
    );
    let gen8_other_key = dir.path().join("signed-8-other.yaml");
    sign(
        &write(
            "policy-8.yaml",
            &example.replace("generation: 7", "generation: 8"),
        ),
        &other.join("ed25519.key"),
        &gen8_other_key,
    );
    let forged = write(
        "forged.yaml",
        &std::fs::read_to_string(&gen7)
            .unwrap()
            .replace("generation: 7", "generation: 9"),
    );

    let verified = ok(
        &cluster,
        &[
            "policy",
            "verify",
            "-f",
            path(&gen7),
            "--public-key",
            path(&public),
        ],
    );
    assert!(verified.contains("generation 7"), "{verified}");
    let err = refused(
        &cluster,
        &[
            "policy",
            "verify",
            "-f",
            path(&forged),
            "--public-key",
            path(&public),
        ],
    );
    assert!(err.contains("bad signature"), "{err}");
    let err = refused(
        &cluster,
        &[
            "policy",
            "verify",
            "-f",
            path(&gen8_other_key),
            "--public-key",
            path(&public),
        ],
    );
    assert!(err.contains("unknown key"), "{err}");

    // A malformed policy is refused at signing, and nothing is written.
    let unknown_field = write(
        "unknown-field.yaml",
        &example.replace("  generation: 7\n", "  generation: 7\n  colour: blue\n"),
    );
    let not_written = dir.path().join("never.yaml");
    let err = refused(
        &cluster,
        &[
            "policy",
            "sign",
            "-f",
            path(&unknown_field),
            "--key",
            path(&key),
            "--out",
            path(&not_written),
        ],
    );
    assert!(err.contains("unknown field `colour`"), "{err}");
    assert!(!not_written.exists());
    let bad_semver = write(
        "bad-semver.yaml",
        &example.replace(">=2.7.0 <2.10.0", "2.7 or later"),
    );
    let err = refused(
        &cluster,
        &[
            "policy",
            "sign",
            "-f",
            path(&bad_semver),
            "--key",
            path(&key),
        ],
    );
    assert!(
        err.contains("spec.distribution.versions") && err.contains("\"2.7 or later\""),
        "{err}"
    );

    // The agent, installed with the public key.
    let key_env = [("TENANTFLUX_POLICY_PUBLIC_KEY", path(&public))];
    cluster.restart_agent_with(&key_env).expect("agent");
    assert_eq!(show(&cluster)["present"], false);

    // A tenant user (tenantflux-user) may read the policy but not push one. (The cluster's
    // admin, with its client certificate, now proves who it is and may push.)
    let tenant_user = cluster
        .token_kubeconfig("tenantflux-system", "policy-reader")
        .expect("tenant user");
    cluster
        .apply_yaml(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\n\
             metadata: {name: policy-reader, namespace: tenantflux-system}\n\
             roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: tenantflux-user}\n\
             subjects: [{kind: ServiceAccount, name: policy-reader, namespace: tenantflux-system}]\n",
        )
        .expect("tenant user's binding");
    let output = run_as(
        &cluster,
        Some(&tenant_user),
        &["policy", "push", "-f", path(&gen7)],
    );
    assert_eq!(output.status.code(), Some(6), "{output:?}");
    let err = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        err.contains("may not update policies.tenantflux.io in namespace \"tenantflux-system\""),
        "{err}"
    );
    let platform = cluster
        .policy_pusher_kubeconfig()
        .expect("platform account");
    let push = |file: &Path| {
        run_as(
            &cluster,
            Some(&platform),
            &["policy", "push", "-f", path(file)],
        )
    };
    let pushed = |file: &Path| {
        let output = push(file);
        assert!(
            output.status.success(),
            "push {}: {}",
            file.display(),
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let push_refused = |file: &Path, code: i32| {
        let output = push(file);
        assert_eq!(
            output.status.code(),
            Some(code),
            "push {} should fail: {}",
            file.display(),
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stderr).into_owned()
    };

    let out = pushed(&gen7);
    assert_eq!(out, "policy \"platform\" generation 7 accepted (was 0)\n");
    let out = pushed(&gen7);
    assert!(out.contains("generation 7 unchanged"), "{out}");

    // A signature the agent does not trust is denied (6); a generation it does not take is
    // refused by its policy rules (4); a file that is no signed policy at all fails here (1).
    let err = push_refused(&forged, 6);
    assert!(err.contains("bad signature"), "{err}");
    let err = push_refused(&gen8_other_key, 6);
    assert!(err.contains("unknown key"), "{err}");
    let err = push_refused(&gen6, 4);
    assert!(err.contains("stale generation 6 ≤ 7"), "{err}");
    let err = push_refused(&example_file(&dir, &example), 1);
    assert!(err.contains("is not a signed policy"), "{err}");

    let held = show(&cluster);
    assert_eq!(held["generation"], 7);
    assert_eq!(held["name"], "platform");
    assert_eq!(held["problems"], serde_json::json!([]));
    let signed_text = std::fs::read_to_string(&gen7).unwrap();
    assert_eq!(stored(&cluster), signed_text);
    let status: Value =
        serde_json::from_str(&ok(&cluster, &["status", "-o", "json"])).expect("JSON");
    assert_eq!(status["policy"]["generation"], 7);
    assert_eq!(status["policy"]["compliant"], true, "no FluxInstance yet");

    // A restart re-reads and re-verifies the stored copy.
    cluster.restart_agent_with(&key_env).expect("agent restart");
    let held = wait_for(
        "the policy after a restart",
        Duration::from_secs(30),
        || {
            let held = show(&cluster);
            async move { (held["generation"] == 7).then_some(held) }
        },
    )
    .await
    .expect("policy kept");
    assert_eq!(held["problems"], serde_json::json!([]));

    // Someone with access to the cluster edits the stored copy: detected, reported, undone.
    let tampered = signed_text.replace("generation: 7", "generation: 70");
    let patch = serde_json::json!({"data": {"signed-policy.yaml": tampered}}).to_string();
    let output = cluster
        .kubectl(&[
            "-n",
            AGENT_NAMESPACE,
            "patch",
            "configmap",
            STORE,
            "--type=merge",
            "-p",
            &patch,
        ])
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let held = wait_for("the edit to be reported", Duration::from_secs(30), || {
        let held = show(&cluster);
        async move {
            held["problems"]
                .as_array()
                .is_some_and(|p| !p.is_empty())
                .then_some(held)
        }
    })
    .await
    .expect("edit reported");
    assert_eq!(held["generation"], 7, "{held:#}");
    let problem = held["problems"][0].as_str().unwrap();
    assert!(
        problem.contains("ConfigMap tenantflux-system/tenantflux-policy was edited (bad signature"),
        "{problem}"
    );
    assert!(
        problem.contains("keeps generation 7 and restored it"),
        "{problem}"
    );
    let restored = wait_for("the stored copy restored", Duration::from_secs(30), || {
        let text = stored(&cluster);
        let want = signed_text.clone();
        async move { (text == want).then_some(()) }
    })
    .await;
    assert!(restored.is_ok(), "stored copy not restored");
    let status: Value =
        serde_json::from_str(&ok(&cluster, &["status", "-o", "json"])).expect("JSON");
    assert_eq!(status["agent"]["health"], "degraded", "{status:#}");
}

fn example_file(dir: &tempfile::TempDir, example: &str) -> std::path::PathBuf {
    let file = dir.path().join("unsigned.yaml");
    std::fs::write(&file, example).unwrap();
    file
}

/// Makes keys, restarts the agent with the public one, and pushes the example policy without
/// its defaults (they would create the instance these tests create themselves) as the
/// platform account.
fn push_example_without_defaults(cluster: &TestCluster, dir: &Path) {
    let keys = dir.join("keys");
    ok(cluster, &["policy", "keygen", "--out", path(&keys)]);
    let unsigned = dir.join("policy.yaml");
    std::fs::write(&unsigned, example_without_defaults()).unwrap();
    let signed = dir.join("signed.yaml");
    let key = keys.join("ed25519.key");
    ok(
        cluster,
        &[
            "policy",
            "sign",
            "-f",
            path(&unsigned),
            "--key",
            path(&key),
            "--out",
            path(&signed),
        ],
    );
    let public = keys.join("ed25519.pub");
    cluster
        .restart_agent_with(&[("TENANTFLUX_POLICY_PUBLIC_KEY", path(&public))])
        .expect("agent");
    let platform = cluster
        .policy_pusher_kubeconfig()
        .expect("platform account");
    let output = run_as(
        cluster,
        Some(&platform),
        &["policy", "push", "-f", path(&signed)],
    );
    assert!(output.status.success(), "{output:?}");
}

#[tokio::test]
async fn the_api_server_refuses_a_non_compliant_instance_while_the_agent_is_down() {
    let _serial = ONE_CLUSTER_AT_A_TIME.lock().await;
    let cluster = TestCluster::start(&format!("po-vap-{}", std::process::id()))
        .expect("starting the cluster");
    cluster.ensure_flux_operator().expect("flux-operator");
    let dir = tempfile::tempdir().unwrap();
    push_example_without_defaults(&cluster, dir.path());

    // The agent renders the policy into the API server, as its ServiceAccount (deploy/ RBAC).
    for kind in [
        "validatingadmissionpolicy",
        "validatingadmissionpolicybinding",
    ] {
        wait_for(kind, Duration::from_secs(30), || {
            let generation = cluster.kubectl(&[
                "get",
                kind,
                "tenantflux-policy",
                "-o",
                "jsonpath={.metadata.annotations.tenantflux\\.io/policy-generation}",
            ]);
            async move { generation.ok().filter(|o| o.stdout == b"7").map(drop) }
        })
        .await
        .unwrap_or_else(|err| panic!("{err}"));
    }
    let typing = cluster
        .kubectl_ok(&[
            "get",
            "validatingadmissionpolicy",
            "tenantflux-policy",
            "-o",
            "jsonpath={.status.typeChecking}",
        ])
        .unwrap();
    assert!(!typing.contains("warning"), "CEL type warnings: {typing}");

    cluster.stop_agent().expect("stopping the agent");

    let apply = |instance: &Value| cluster.apply_yaml(&instance.to_string());
    // The API server picks up a new admission policy within seconds.
    wait_enforced(&cluster, 7).await.expect("policy enforced");

    let by = "allowed by policy generation 7";
    type Change = fn(&mut Value);
    let cases: [(Change, String); 12] = [
        (
            |s| s["distribution"]["version"] = "2.6.x".into(),
            format!("spec.distribution.version \"2.6.x\" is outside \">=2.7.0 <2.10.0\" {by}"),
        ),
        (
            |s| s["distribution"]["version"] = "latest".into(),
            "spec.distribution.version \"latest\" is neither a version (2.8.0) nor a semver range (2.8.x, >=2.7.0 <2.10.0)".into(),
        ),
        (
            |s| s["distribution"]["version"] = "2.7.x".into(),
            "spec.distribution.version \"2.7.x\" allows versions below 2.8.0, which policy generation 7 requires since 2026-09-01".into(),
        ),
        (
            |s| s["distribution"]["registry"] = "docker.io/evil".into(),
            format!("spec.distribution.registry \"docker.io/evil\" is not one of \"ghcr.io/fluxcd\", \"registry.example.com/fluxcd\" {by}"),
        ),
        (
            |s| s["distribution"]["artifact"] = "oci://evil.io/manifests".into(),
            format!("spec.distribution.artifact \"oci://evil.io/manifests\" is not one of \"oci://ghcr.io/controlplaneio-fluxcd/flux-operator-manifests*\" {by}"),
        ),
        (
            |s| s["components"] = serde_json::json!(["source-controller", "kustomize-controller", "image-reflector-controller"]),
            format!("spec.components \"image-reflector-controller\" is not one of \"source-controller\", \"kustomize-controller\", \"helm-controller\", \"notification-controller\", \"source-watcher\" {by}"),
        ),
        (
            |s| s["components"] = serde_json::json!(["source-controller", "helm-controller"]),
            "spec.components lacks \"kustomize-controller\", required by policy generation 7".into(),
        ),
        (
            |s| s["cluster"]["multitenant"] = false.into(),
            "spec.cluster.multitenant false must be true, as policy generation 7 requires".into(),
        ),
        (
            |s| s["cluster"]["networkPolicy"] = false.into(),
            "spec.cluster.networkPolicy false must be true, as policy generation 7 requires".into(),
        ),
        (
            |s| s["cluster"]["size"] = "large".into(),
            format!("spec.cluster.size \"large\" is not one of \"small\", \"medium\" {by}"),
        ),
        (
            |s| {
                s["sync"] = serde_json::json!({"kind": "GitRepository", "url": "https://github.com/evil/fleet", "ref": "refs/heads/main", "path": "clusters/tenant"});
            },
            format!("spec.sync.url \"https://github.com/evil/fleet\" is not one of \"https://github.com/acme/*\", \"oci://ghcr.io/acme/*\" {by}"),
        ),
        (
            |s| s["kustomize"] = serde_json::json!({"patches": [{"patch": "- op: remove\n  path: /spec/replicas", "target": {"kind": "Deployment"}}]}),
            "spec.kustomize.patches is set; policy generation 7 allows no kustomize patches".into(),
        ),
    ];
    for (change, message) in &cases {
        let mut instance = compliant_instance();
        change(&mut instance["spec"]);
        let err = apply(&instance).expect_err(message).to_string();
        assert!(
            err.contains(&format!(
                "ValidatingAdmissionPolicy 'tenantflux-policy' with binding 'tenantflux-policy' denied request: {message}"
            )),
            "{err}"
        );
    }
    let missing = cluster
        .kubectl(&["-n", "flux-system", "get", "fluxinstance", "flux"])
        .unwrap();
    assert!(!missing.status.success(), "a refused instance was stored");

    // A compliant instance is accepted and flux-operator makes it Ready.
    apply(&compliant_instance()).expect("compliant instance");
    let client = cluster.client().await.unwrap();
    wait_for("the instance Ready", Duration::from_secs(120), || {
        let instances = tenantflux_tests::flux_instances(&client);
        async move {
            let instance = instances.get("flux").await.ok()?;
            let value = serde_json::to_value(instance).ok()?;
            (tenantflux_tests::condition_status(&value, "Ready") == Some("True")).then_some(())
        }
    })
    .await
    .expect("instance Ready");

    // Changing its spec is judged too; metadata alone is not (finalizers, annotations).
    let mut instance = compliant_instance();
    (cases[9].0)(&mut instance["spec"]);
    let err = apply(&instance).expect_err("update refused").to_string();
    assert!(err.contains(&cases[9].1), "{err}");
    cluster
        .kubectl_ok(&[
            "-n",
            "flux-system",
            "annotate",
            "fluxinstance",
            "flux",
            "example.com/note=kept",
        ])
        .expect("metadata-only update");
}

/// Whether the API server refuses `instance` (server-side dry run, nothing stored).
/// Sets the verbs the tenant account has on FluxInstances (Role instance-editor).
fn allow_instance_verbs(cluster: &TestCluster, verbs: &str) {
    cluster
        .apply_yaml(&format!(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\n\
             metadata: {{name: instance-editor, namespace: flux-system}}\n\
             rules: [{{apiGroups: [fluxcd.controlplane.io], resources: [fluxinstances], verbs: [{verbs}]}}]\n"
        ))
        .expect("Role instance-editor");
}

/// A tenant account: tenantflux-user plus get/patch on the FluxInstance; returns its
/// kubeconfig.
fn tenant_account(cluster: &TestCluster) -> std::path::PathBuf {
    let tenant = cluster
        .token_kubeconfig(AGENT_NAMESPACE, "tenant")
        .expect("tenant account");
    allow_instance_verbs(cluster, "get, patch");
    cluster
        .apply_yaml(&format!(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\n\
             metadata: {{name: instance-editor, namespace: flux-system}}\n\
             roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: instance-editor}}\n\
             subjects: [{{kind: ServiceAccount, name: tenant, namespace: {AGENT_NAMESPACE}}}]\n---\n\
             apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\n\
             metadata: {{name: tenant-user, namespace: {AGENT_NAMESPACE}}}\n\
             roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: tenantflux-user}}\n\
             subjects: [{{kind: ServiceAccount, name: tenant, namespace: {AGENT_NAMESPACE}}}]\n"
        ))
        .expect("RBAC of the tenant account");
    tenant
}

#[tokio::test]
async fn instance_commands_check_the_policy_and_change_nothing_on_a_violation() {
    let _serial = ONE_CLUSTER_AT_A_TIME.lock().await;
    let cluster = TestCluster::start(&format!("po-inst-{}", std::process::id()))
        .expect("starting the cluster");
    cluster.ensure_flux_operator().expect("flux-operator");
    let dir = tempfile::tempdir().unwrap();
    push_example_without_defaults(&cluster, dir.path());
    let tenant = tenant_account(&cluster);
    let as_tenant = |args: &[&str]| run_as(&cluster, Some(&tenant), args);
    let stderr = |o: &Output| String::from_utf8_lossy(&o.stderr).into_owned();
    let stdout = |o: &Output| String::from_utf8_lossy(&o.stdout).into_owned();
    let write = |name: &str, instance: &Value| {
        let file = dir.path().join(name);
        std::fs::write(&file, tenantflux_core::yaml::to_string(instance).unwrap()).unwrap();
        file
    };
    let absent = || {
        !cluster
            .kubectl(&["-n", "flux-system", "get", "fluxinstance", "flux"])
            .unwrap()
            .status
            .success()
    };

    let output = as_tenant(&["instance", "get"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains("has no FluxInstance"),
        "{output:?}"
    );

    // Creating needs create, as it would through kubectl: patch alone is not enough.
    let good = write("good.yaml", &compliant_instance());
    let output = as_tenant(&["instance", "apply", "-f", path(&good)]);
    assert_eq!(output.status.code(), Some(6), "{output:?}");
    assert!(
        stderr(&output).contains("may not create fluxinstances.fluxcd.controlplane.io"),
        "{}",
        stderr(&output)
    );
    assert!(absent());
    allow_instance_verbs(&cluster, "get, patch, create");

    // Two violated fields: one message each, nothing created.
    let mut bad = compliant_instance();
    bad["spec"]["distribution"]["registry"] = "docker.io/evil".into();
    bad["spec"]["cluster"]["size"] = "large".into();
    let bad_file = write("bad.yaml", &bad);
    let output = as_tenant(&["instance", "apply", "-f", path(&bad_file)]);
    // 4: refused by policy.
    assert_eq!(output.status.code(), Some(4), "{output:?}");
    let err = stderr(&output);
    assert!(
        err.contains("breaks policy \"platform\" generation 7; nothing was changed"),
        "{err}"
    );
    assert!(err.contains("spec.distribution.registry \"docker.io/evil\" is not one of \"ghcr.io/fluxcd\", \"registry.example.com/fluxcd\" allowed by policy generation 7"), "{err}");
    assert!(err.contains("spec.cluster.size \"large\" is not one of \"small\", \"medium\" allowed by policy generation 7"), "{err}");
    assert!(absent());

    // Malformed manifests: a clear error, exit 1, nothing changed.
    let mut wrong_name = compliant_instance();
    wrong_name["metadata"]["name"] = "other".into();
    let mut unknown_field = compliant_instance();
    unknown_field["spec"]["colour"] = "blue".into();
    let bad_yaml = dir.path().join("bad-yaml.yaml");
    std::fs::write(&bad_yaml, "spec: [\n").unwrap();
    for (file, want) in [
        (bad_yaml, "not valid YAML"),
        (
            write("name.yaml", &wrong_name),
            "metadata.name is \"other\"",
        ),
        (
            write("unknown.yaml", &unknown_field),
            ".spec.colour: field not declared in schema",
        ),
    ] {
        let output = as_tenant(&["instance", "apply", "-f", path(&file)]);
        assert_eq!(output.status.code(), Some(1), "{output:?}");
        assert!(
            stderr(&output).contains(want),
            "{want}: {}",
            stderr(&output)
        );
        assert!(absent());
    }

    // A dry run checks everything and stores nothing; then the real apply.
    let output = as_tenant(&["instance", "apply", "-f", path(&good), "--dry-run"]);
    assert_eq!(
        stdout(&output),
        "fluxinstance/flux created (dry run)\n",
        "{output:?}"
    );
    assert!(absent());
    let output = as_tenant(&["instance", "apply", "-f", path(&good)]);
    assert_eq!(stdout(&output), "fluxinstance/flux created\n", "{output:?}");
    let client = cluster.client().await.unwrap();
    wait_for("the instance Ready", Duration::from_secs(120), || {
        let instances = tenantflux_tests::flux_instances(&client);
        async move {
            let instance = instances.get("flux").await.ok()?;
            let value = serde_json::to_value(instance).ok()?;
            (tenantflux_tests::condition_status(&value, "Ready") == Some("True")).then_some(())
        }
    })
    .await
    .expect("instance Ready");
    let output = as_tenant(&["instance", "apply", "-f", path(&good)]);
    assert_eq!(
        stdout(&output),
        "fluxinstance/flux unchanged\n",
        "{output:?}"
    );

    // diff shows the change a manifest would make, and makes none.
    let mut older = compliant_instance();
    older["spec"]["distribution"]["version"] = "2.8.x".into();
    let older = write("older.yaml", &older);
    let output = as_tenant(&["instance", "diff", "-f", path(&older)]);
    let diff = stdout(&output);
    // As `kubectl diff`: 1 says there are differences.
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert!(
        diff.lines()
            .any(|l| l.starts_with("- ") && l.ends_with("version: 2.9.x")),
        "{diff}"
    );
    assert!(
        diff.lines()
            .any(|l| l.starts_with("+ ") && l.ends_with("version: 2.8.x")),
        "{diff}"
    );
    let output = as_tenant(&["instance", "get", "-o", "json"]);
    let live: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(live["spec"]["distribution"]["version"], "2.9.x");
    // ...and 0 when there is none.
    let output = as_tenant(&["instance", "diff", "-f", path(&good)]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert_eq!(stdout(&output), "", "{output:?}");
    assert!(live["metadata"].get("managedFields").is_none());

    // edit, as kubectl edit: an editor that breaks the policy gets the reasons back in the
    // file; saving it unchanged ends with them, the edit kept, the instance untouched.
    let edit_with = |editor: &str| {
        cluster
            .plugin_command(Some(&tenant), &["instance", "edit"])
            .env("EDITOR", editor)
            .env_remove("KUBE_EDITOR")
            .output()
            .expect("kubectl tenantflux instance edit")
    };
    let output = edit_with(r"sed -i -e 's/^\( *size:\).*/\1 large/'");
    assert_eq!(output.status.code(), Some(4), "{output:?}");
    let err = stderr(&output);
    assert!(err.contains("fluxinstance/flux was not applied"), "{err}");
    assert!(err.contains("spec.cluster.size \"large\""), "{err}");
    let kept = err
        .lines()
        .find_map(|l| l.strip_prefix("your edit is in "))
        .expect("the path of the kept edit");
    let kept_text = std::fs::read_to_string(kept).expect("the kept edit");
    assert!(
        kept_text.contains("# * spec.cluster.size \"large\""),
        "{kept_text}"
    );
    let _ = std::fs::remove_file(kept);
    let size = |cluster: &TestCluster| {
        cluster
            .kubectl_ok(&[
                "-n",
                "flux-system",
                "get",
                "fluxinstance",
                "flux",
                "-o",
                "jsonpath={.spec.cluster.size}",
            ])
            .expect("live size")
    };
    assert_eq!(size(&cluster), "small");
    // A compliant edit is applied.
    let output = edit_with("sed -i -e 's/2.9.x/2.8.x/'");
    assert!(output.status.success(), "{output:?}");
    assert_eq!(stdout(&output), "fluxinstance/flux edited\n");
    let version = cluster
        .kubectl_ok(&[
            "-n",
            "flux-system",
            "get",
            "fluxinstance",
            "flux",
            "-o",
            "jsonpath={.spec.distribution.version}",
        ])
        .expect("live version");
    assert_eq!(version, "2.8.x");
}

/// Keys, the agent restarted with the public one, and a signer: `sign_and_push(text)` signs the
/// policy text with the private key and pushes it as the platform account.
struct Platform<'a> {
    cluster: &'a TestCluster,
    dir: tempfile::TempDir,
    key: std::path::PathBuf,
    account: std::path::PathBuf,
}

impl<'a> Platform<'a> {
    fn new(cluster: &'a TestCluster) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let keys = dir.path().join("keys");
        ok(cluster, &["policy", "keygen", "--out", path(&keys)]);
        cluster
            .restart_agent_with(&[(
                "TENANTFLUX_POLICY_PUBLIC_KEY",
                path(&keys.join("ed25519.pub")),
            )])
            .expect("agent");
        Self {
            cluster,
            key: keys.join("ed25519.key"),
            account: cluster
                .policy_pusher_kubeconfig()
                .expect("platform account"),
            dir,
        }
    }

    fn sign_and_push(&self, name: &str, text: &str) {
        let unsigned = self.dir.path().join(format!("{name}.yaml"));
        std::fs::write(&unsigned, text).unwrap();
        let signed = self.dir.path().join(format!("{name}-signed.yaml"));
        ok(
            self.cluster,
            &[
                "policy",
                "sign",
                "-f",
                path(&unsigned),
                "--key",
                path(&self.key),
                "--out",
                path(&signed),
            ],
        );
        let output = run_as(
            self.cluster,
            Some(&self.account),
            &["policy", "push", "-f", path(&signed)],
        );
        assert!(output.status.success(), "{output:?}");
    }
}

#[tokio::test]
async fn defaults_create_the_instance_once_and_then_the_tenant_owns_it() {
    let _serial = ONE_CLUSTER_AT_A_TIME.lock().await;
    let cluster = TestCluster::start(&format!("po-def-{}", std::process::id()))
        .expect("starting the cluster");
    cluster.ensure_flux_operator().expect("flux-operator");
    let platform = Platform::new(&cluster);
    let example = std::fs::read_to_string(repo_root().join("deploy/policy/example.yaml")).unwrap();

    // The attack: a namespace's admin creates a Deployment named like a Flux controller before
    // the first policy with defaults; it must not pass for a running Flux (which would stop the
    // defaults for good) nor block adoption.
    cluster
        .apply_yaml(
            "apiVersion: v1\nkind: Namespace\nmetadata: {name: team-a}\n---\n\
             apiVersion: apps/v1\nkind: Deployment\n\
             metadata: {name: notification-controller, namespace: team-a}\n\
             spec:\n  selector: {matchLabels: {app: decoy}}\n  template:\n    metadata: {labels: {app: decoy}}\n\
             \x20   spec: {containers: [{name: manager, image: ghcr.io/fluxcd/notification-controller:v1.9.4}]}\n",
        )
        .expect("the decoy");
    // No instance: the defaults of generation 7 create it, and flux-operator makes it Ready.
    assert!(instance_json(&cluster).is_none());
    platform.sign_and_push("policy-7", &example);
    let instance = wait_for("the instance Ready", Duration::from_secs(120), || {
        let instance = instance_json(&cluster);
        async move {
            instance.filter(|v| tenantflux_tests::condition_status(v, "Ready") == Some("True"))
        }
    })
    .await
    .expect("instance from the defaults Ready");
    assert_eq!(instance["spec"]["distribution"]["version"], "2.9.x");
    assert_eq!(instance["spec"]["cluster"]["size"], "small");
    assert_eq!(
        instance["spec"]["components"],
        serde_json::json!([
            "source-controller",
            "kustomize-controller",
            "helm-controller",
            "notification-controller"
        ])
    );
    assert_eq!(defaults_record(&cluster), "created/7");
    let plan = cluster
        .kubectl_tenantflux(None, &["adopt", "plan", "-o", "json"])
        .expect("adopt plan");
    let plan: serde_json::Value = serde_json::from_slice(&plan.stdout).expect("adopt plan JSON");
    assert!(
        plan["ignored"].as_array().is_some_and(|i| i
            .iter()
            .any(|o| o["namespace"] == "team-a" && o["name"] == "notification-controller")),
        "the decoy is named as ignored: {plan:#}"
    );
    assert!(
        !plan["refusals"]
            .to_string()
            .contains("more than one namespace"),
        "{plan:#}"
    );

    // The tenant edits a field; generation 8 with other defaults overwrites nothing.
    cluster
        .kubectl_ok(&[
            "-n",
            "flux-system",
            "patch",
            "fluxinstance",
            "flux",
            "--type=merge",
            "-p",
            r#"{"spec":{"cluster":{"size":"medium"}}}"#,
        ])
        .expect("tenant edit");
    let gen8 = example
        .replace("generation: 7", "generation: 8")
        .replace("version: \"2.9.x\"", "version: \"2.8.x\"")
        .replace("size: small", "size: large")
        .replace("sizes: [small, medium]", "sizes: [small, medium, large]");
    assert!(gen8.contains("version: \"2.8.x\""), "{gen8}");
    platform.sign_and_push("policy-8", &gen8);
    assert_eq!(show(&cluster)["generation"], 8);
    // The agent's defaults task ended once generation 7's were dealt with: nothing is left in
    // the agent that could act on generation 8's.
    cluster
        .wait_agent_log(0, DEALT_WITH, Duration::from_secs(30))
        .await
        .expect("the defaults task ended");
    let instance = instance_json(&cluster).expect("instance kept");
    assert_eq!(instance["spec"]["distribution"]["version"], "2.9.x");
    assert_eq!(instance["spec"]["cluster"]["size"], "medium");
    assert_eq!(defaults_record(&cluster), "created/7");

    // The tenant deletes it: neither a new policy nor an agent restart brings it back.
    cluster
        .kubectl_ok(&[
            "-n",
            "flux-system",
            "delete",
            "fluxinstance",
            "flux",
            "--wait=true",
            "--timeout=120s",
        ])
        .expect("tenant delete");
    platform.sign_and_push("policy-9", &gen8.replace("generation: 8", "generation: 9"));
    assert_eq!(show(&cluster)["generation"], 9);
    let restarted_at = cluster.agent_log_len();
    cluster
        .restart_agent_with(&[(
            "TENANTFLUX_POLICY_PUBLIC_KEY",
            path(&platform.dir.path().join("keys/ed25519.pub")),
        )])
        .expect("agent restart");
    assert_eq!(show(&cluster)["generation"], 9);
    // The restarted agent read the record and decided, for good, to create nothing.
    cluster
        .wait_agent_log(restarted_at, DEALT_WITH, Duration::from_secs(30))
        .await
        .expect("the restarted agent's defaults task ended");
    assert!(instance_json(&cluster).is_none(), "the instance came back");
    assert_eq!(defaults_record(&cluster), "created/7");
}
