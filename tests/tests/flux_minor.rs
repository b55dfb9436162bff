//! A Flux minor the agent's build does not know (issue #38), on the real control plane and the
//! real flux-operator v0.59.0: Flux 2.10.1, assembled by `tests/env/cluster flux-data` from
//! 2.9.5's manifests with the CRDs of the source-controller and kustomize-controller v1.10.1
//! modules and their Deployments at image tag v1.10.1. The agent installs flux-operator from a
//! manifests artifact (pushed to a local registry) whose `flux/` holds that distribution and
//! learns its releases from it; flux-operator runs with the assembled data directory (it installs
//! only minors its own data holds) and reads the distributions from the same artifact, named in
//! the FluxInstance's `spec.distribution.artifact`: go-containerregistry speaks plain HTTP to a
//! loopback registry, which the operator's log shows it pulled. From Flux 2.9.5 with a Git app
//! Ready, `upgrade plan --to 2.10.x` plans from the artifact (the Kubernetes minimum is a
//! warning: the build does not know 2.10's), `upgrade apply` rolls 2.10.1 out, the app stays
//! Ready at its revision and a new commit is applied afterwards, and `get all -A` lists every
//! kind the installed components of 2.10 serve.
//!
//! What runs for the v1.10.1 image tags: the v1.9.4 builds (FLUX_CONTROLLER_SUBSTITUTES in
//! versions.env). The module proxy serves the v1.10.1 controller modules (their CRDs are real
//! here) but refuses modules they import, so they cannot be built yet; the test asserts the
//! Deployments' tags and that the supervisor replaced both processes for them, and names the
//! binary it runs, so it holds unchanged once v1.10.1 is in FLUX_CONTROLLERS.

use std::{
    path::PathBuf,
    process::{Command, Output, Stdio},
    time::Duration,
};

use serde_json::{Value, json};
use tenantflux_tests::{
    TestCluster, bin_dir, cluster_script,
    flux::{GitRepo, fleet_apps, minimal_spec, revision},
    operator_bundle, path, tool_path, wait_for,
};

const TIMEOUT: Duration = Duration::from_secs(180);
/// The components installed: the default four and the image automation controllers, so that
/// every Flux kind `get all` lists is served.
const COMPONENTS: &str = "[source-controller, kustomize-controller, helm-controller, \
     notification-controller, image-reflector-controller, image-automation-controller]";
/// Every kind `get all` lists for these components of Flux 2.10 (source and kustomize from the
/// v1.10.1 modules' CRDs, the others from 2.9.5's manifests), with the version listed.
const KINDS: &[(&str, &str)] = &[
    ("OCIRepository", "source.toolkit.fluxcd.io/v1"),
    ("Bucket", "source.toolkit.fluxcd.io/v1"),
    ("GitRepository", "source.toolkit.fluxcd.io/v1"),
    ("HelmRepository", "source.toolkit.fluxcd.io/v1"),
    ("HelmChart", "source.toolkit.fluxcd.io/v1"),
    ("ExternalArtifact", "source.toolkit.fluxcd.io/v1"),
    ("ImageRepository", "image.toolkit.fluxcd.io/v1"),
    ("ImagePolicy", "image.toolkit.fluxcd.io/v1"),
    ("ImageUpdateAutomation", "image.toolkit.fluxcd.io/v1"),
    ("HelmRelease", "helm.toolkit.fluxcd.io/v2"),
    ("Kustomization", "kustomize.toolkit.fluxcd.io/v1"),
    ("Receiver", "notification.toolkit.fluxcd.io/v1"),
    ("Provider", "notification.toolkit.fluxcd.io/v1beta3"),
    ("Alert", "notification.toolkit.fluxcd.io/v1beta3"),
];

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Runs `tests/env/cluster ARGS` (with the supervisor cargo built, never building it) and
/// returns the last line of its stdout.
fn cluster_env(args: &[&str]) -> String {
    let output = Command::new(cluster_script())
        .args(args)
        .env(
            "TENANTFLUX_SUPERVISOR_BIN",
            bin_dir().join("tenantflux-test-supervisor"),
        )
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .expect("tests/env/cluster");
    assert!(output.status.success(), "tests/env/cluster {args:?} failed");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .last()
        .unwrap_or_default()
        .trim()
        .to_owned()
}

/// Waits until the FluxInstance is Ready, for its generation, at `version` (e.g. `v2.9.5`).
async fn wait_ready_at(cluster: &TestCluster, version: &str) -> Value {
    wait_for(
        &format!("FluxInstance flux Ready at {version}"),
        TIMEOUT,
        || async {
            let i = cluster.object("fluxinstance", "flux-system", "flux")?;
            let applied = i["status"]["lastAppliedRevision"].as_str()?;
            (tenantflux_tests::flux::ready_now(&i) == Some("True")
                && applied.starts_with(&format!("{version}@")))
            .then_some(i)
        },
    )
    .await
    .unwrap()
}

/// The image of Deployment `flux-system/NAME`.
fn deployment_image(cluster: &TestCluster, name: &str) -> String {
    cluster
        .object("deployment", "flux-system", name)
        .expect("Deployment")["spec"]["template"]["spec"]["containers"][0]["image"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// What the supervisor records for Deployment `name`'s process: its pid and its spec (the
/// image and args it was started for).
fn controller_process(cluster: &TestCluster, name: &str) -> (String, String) {
    let file = |suffix: &str| {
        std::fs::read_to_string(cluster.dir().join(format!("controllers/{name}{suffix}")))
            .unwrap_or_default()
            .trim()
            .to_owned()
    };
    (file(".pid"), file(".spec"))
}

fn codes(plan: &Value, list: &str) -> Vec<String> {
    plan[list]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["code"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn a_flux_minor_the_build_does_not_know_is_planned_from_the_artifact_and_applied() {
    let cluster =
        TestCluster::start(&format!("tfm-{}", std::process::id())).expect("starting the cluster");
    let operator = tool_path("FLUX_OPERATOR_VERSION").display().to_string();

    // The data directory with Flux 2.10.1: flux-operator's own plus the assembled distribution,
    // whose source- and kustomize-controller CRDs are the v1.10.1 modules' own.
    let data = PathBuf::from(cluster_env(&["flux-data"]));
    let next = data.join("flux/v2.10.1");
    let kustomize = std::fs::read_to_string(next.join("kustomize-controller.yaml")).unwrap();
    assert!(
        kustomize.contains("image: fluxcd/kustomize-controller:v1.10.1"),
        "{}",
        next.display()
    );
    // kustomize-controller v1.10.1's CRD writes the kubeConfig rule as one expression (2.9.5's
    // as two): the CRD in the distribution is the module's.
    assert!(kustomize.contains("rule: has(self.configMapRef) != has(self.secretRef)"));

    // The manifests artifact, with every distribution of the data directory, in a local
    // registry; the agent installs flux-operator from it, pinned by digest.
    let registry = cluster.registry().expect("registry");
    let bundle = operator_bundle(&operator).expect("bundle");
    let reference = format!("{registry}/controlplaneio-fluxcd/flux-operator-manifests:{operator}");
    let digest = tenantflux_tests::push_artifact(&reference, &bundle, Some(&data.join("flux")))
        .expect("oras push");
    let pinned = format!("oci://{reference}@{digest}");
    cluster
        .restart_agent_with(&[
            ("TENANTFLUX_OPERATOR_BUNDLE", &pinned),
            ("TENANTFLUX_OPERATOR_VERSION", &operator),
            ("TENANTFLUX_OPERATOR_BUNDLE_PLAIN_HTTP", "true"),
        ])
        .expect("agent");
    wait_for(
        "flux-operator installed from the artifact",
        TIMEOUT,
        || async {
            let output = cluster
                .kubectl_tenantflux(None, &["status", "-o", "json"])
                .ok()?;
            let status: Value = serde_json::from_slice(&output.stdout).ok()?;
            (status["operator"]["phase"] == "ready"
                && status["operator"]["bundleDigest"] == digest.as_str())
            .then_some(())
        },
    )
    .await
    .unwrap();
    // The operator the agent installed runs as a local process on the assembled data.
    cluster_env(&[
        "flux-operator",
        cluster.name(),
        "--process-only",
        &format!("--data-dir={}", path(&data)),
    ]);

    // Flux 2.9 from the artifact (plain HTTP to the loopback registry).
    let artifact = format!("oci://{reference}");
    cluster
        .apply_yaml(&format!(
            "apiVersion: fluxcd.controlplane.io/v1\nkind: FluxInstance\n\
             metadata: {{name: flux, namespace: flux-system}}\n\
             spec:\n  distribution: {{version: \"2.9.x\", registry: ghcr.io/fluxcd, artifact: \"{artifact}\"}}\n  \
             components: {COMPONENTS}\n  cluster: {{type: kubernetes, networkPolicy: true}}\n"
        ))
        .expect("FluxInstance");
    wait_ready_at(&cluster, "v2.9.5").await;
    let operator_log = std::fs::read_to_string(cluster.dir().join("flux-operator.log")).unwrap();
    assert!(
        operator_log.contains("fetched latest manifests") && operator_log.contains(&artifact),
        "flux-operator did not pull {artifact}: {operator_log}"
    );
    for controller in ["source-controller", "kustomize-controller"] {
        assert!(deployment_image(&cluster, controller).contains(&format!("{controller}:v1.9.5")));
        cluster
            .flux_controller_runs(controller, &format!("{controller}-v1.9.4"))
            .await
            .unwrap();
    }
    let before: Vec<(String, String)> = ["source-controller", "kustomize-controller"]
        .iter()
        .map(|c| controller_process(&cluster, c))
        .collect();

    // A Git app, applied by the real controllers.
    let repo = GitRepo::new("fleet").expect("git repository");
    let settings = |value: &str| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: settings, namespace: default}}\n\
             data: {{value: \"{value}\"}}\n"
        )
    };
    let rev1 = repo
        .commit(&[("apps/settings.yaml", &settings("one"))], &[], "one")
        .unwrap();
    let url = cluster.git_server(&repo).expect("git server");
    cluster.apply_yaml(&fleet_apps(&url)).unwrap();
    cluster
        .kustomization_applied("flux-system", "apps", &revision(&rev1), TIMEOUT)
        .await
        .expect("the Git app applied on 2.9");

    // The tenant: cluster-admin of its own cluster, reaching the agent with a token.
    let tenant = cluster.cluster_admin_token_user("tenant").expect("tenant");
    let as_tenant = |args: &[&str]| cluster.kubectl_tenantflux(Some(&tenant), args).unwrap();

    // The plan: 2.10.1 from the artifact, not refused as unknown; Kubernetes minimum a guess.
    let plan = as_tenant(&["upgrade", "plan", "--to", "2.10.x", "-o", "json"]);
    let plan: Value = serde_json::from_slice(&plan.stdout)
        .unwrap_or_else(|err| panic!("plan JSON: {err}: {}", text(&plan)));
    assert_eq!(
        plan["knownReleases"],
        format!("flux-operator {operator} manifests artifact {pinned} ({digest})"),
        "{plan:#}"
    );
    assert_eq!(plan["target"], "2.10.1", "{plan:#}");
    assert_eq!(plan["currentVersion"], "2.9.5", "{plan:#}");
    assert_eq!(plan["blocked"], false, "{plan:#}");
    assert_eq!(codes(&plan, "blockers"), Vec::<String>::new(), "{plan:#}");
    assert!(
        codes(&plan, "warnings").contains(&"unknown-kubernetes-minimum".to_owned()),
        "{plan:#}"
    );

    // The upgrade: the agent bumps the FluxInstance; flux-operator rolls 2.10.1 out from the
    // artifact; the Kustomization is Ready again at its revision.
    let applied = as_tenant(&["upgrade", "apply", "--to", "2.10.x", "--yes", "-o", "json"]);
    assert!(applied.status.success(), "{}", text(&applied));
    let report: Value = serde_json::from_slice(&applied.stdout)
        .unwrap_or_else(|err| panic!("report JSON: {err}: {}", text(&applied)));
    assert_eq!(report["phase"], "succeeded", "{report:#}");
    assert_eq!(report["target"], "2.10.1", "{report:#}");
    assert_eq!(
        report["kustomizations"],
        json!([{"namespace": "flux-system", "name": "apps", "revision": revision(&rev1),
                "readyAgain": true, "message": ""}]),
        "{report:#}"
    );
    let live = wait_ready_at(&cluster, "v2.10.1").await;
    assert_eq!(live["spec"]["distribution"]["version"], "2.10.x");
    assert_eq!(live["spec"]["distribution"]["artifact"], artifact.as_str());

    // The controllers at v1.10.1: the Deployments' tags, and the supervisor replaced both
    // processes for them (running the build FLUX_CONTROLLER_SUBSTITUTES names for the tag).
    for (controller, (pid_before, _)) in ["source-controller", "kustomize-controller"]
        .iter()
        .zip(&before)
    {
        let image = deployment_image(&cluster, controller);
        assert!(
            image.starts_with(&format!("ghcr.io/fluxcd/{controller}:v1.10.1")),
            "{image}"
        );
        let (pid, spec) = wait_for(
            &format!("the {controller} process replaced for v1.10.1"),
            Duration::from_secs(60),
            || async {
                let (pid, spec) = controller_process(&cluster, controller);
                (spec.contains(&format!("{controller}:v1.10.1")) && !pid.is_empty())
                    .then_some((pid, spec))
            },
        )
        .await
        .unwrap();
        assert_ne!(&pid, pid_before, "{spec}");
        let exe = cluster
            .flux_controller_binary(controller)
            .expect("a process runs");
        eprintln!(
            "{controller}: image {image}, pid {pid}, binary {}",
            exe.display()
        );
        // The v1.9.4 build while v1.10.1 is a substitute (versions.env), v1.10.1's once built.
        let exe = exe.to_string_lossy();
        assert!(
            ["v1.9.4", "v1.10.1"]
                .iter()
                .any(|v| exe.contains(&format!("/{controller}-{v}/"))),
            "{exe}"
        );
    }
    let crd = cluster
        .kubectl_ok(&[
            "get",
            "crd",
            "kustomizations.kustomize.toolkit.fluxcd.io",
            "-o",
            "json",
        ])
        .unwrap();
    assert!(
        crd.contains("has(self.configMapRef) != has(self.secretRef)"),
        "the cluster serves kustomize-controller v1.10.1's CRD"
    );
    let ks = cluster
        .object(
            tenantflux_tests::flux::KUSTOMIZATIONS,
            "flux-system",
            "apps",
        )
        .unwrap();
    assert_eq!(ks["status"]["lastAppliedRevision"], revision(&rev1));

    // A new commit is applied by the controllers of 2.10.
    let rev2 = repo
        .commit(&[("apps/settings.yaml", &settings("two"))], &[], "two")
        .unwrap();
    let reconciled = as_tenant(&[
        "reconcile",
        "ks",
        "apps",
        "-n",
        "flux-system",
        "--with-source",
        "--wait",
    ]);
    assert!(reconciled.status.success(), "{}", text(&reconciled));
    cluster
        .kustomization_applied("flux-system", "apps", &revision(&rev2), TIMEOUT)
        .await
        .expect("the new commit applied on 2.10");
    let settings = cluster.object("configmap", "default", "settings").unwrap();
    assert_eq!(settings["data"]["value"], "two");

    // get all -A: one object of every kind 2.10 serves here (those the running controllers
    // reconcile suspended: nothing reaches the network), listed at its version.
    let mut objects = String::from("apiVersion: v1\nkind: Namespace\nmetadata: {name: kinds}\n");
    for (kind, api_version) in KINDS {
        let suspended = ["source.", "kustomize."]
            .iter()
            .any(|g| api_version.starts_with(g))
            && *kind != "ExternalArtifact";
        let spec = if suspended {
            minimal_spec(kind).replacen('{', "{suspend: true, ", 1)
        } else {
            minimal_spec(kind).to_owned()
        };
        objects.push_str(&format!(
            "---\napiVersion: {api_version}\nkind: {kind}\n\
             metadata: {{name: podinfo, namespace: kinds}}\nspec: {spec}\n"
        ));
    }
    cluster.apply_yaml(&objects).expect("one object per kind");
    let all = wait_for(
        "get all -A to list every kind 2.10 serves",
        Duration::from_secs(60),
        || async {
            let output = as_tenant(&["get", "all", "-A", "-o", "json"]);
            let list: Value = serde_json::from_slice(&output.stdout).ok()?;
            let items = list["items"].as_array()?.clone();
            KINDS
                .iter()
                .all(|(kind, api_version)| {
                    items.iter().any(|i| {
                        i["kind"] == *kind
                            && i["apiVersion"] == *api_version
                            && i["namespace"] == "kinds"
                    })
                })
                .then_some(items)
        },
    )
    .await
    .expect("every kind listed");
    assert!(
        all.iter()
            .any(|i| i["kind"] == "Kustomization" && i["name"] == "apps"),
        "{all:?}"
    );
}
