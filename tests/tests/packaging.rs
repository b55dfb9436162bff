//! What users install: the Helm chart (linted, the source deploy/manifests is generated from,
//! accepted by the real API server, installed from an OCI registry), the agent image's static
//! binary, the krew release (checked by krew's own validator and installed by krew), and shell
//! completion through the real kubectl. helm and krew are built from their Go modules
//! (`tests/env/cluster build-tools`), the registry too (`tests/env/cluster oci-tools`).

use std::{
    collections::BTreeMap,
    io::Write as _,
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
};

use serde_json::Value;
use tenantflux_tests::{
    TestCluster, bin_dir, ensure_packaging_tools, installed, repo_root, tool_path,
};

fn chart_dir() -> PathBuf {
    repo_root().join("deploy/helm/tenantflux-agent")
}

fn tool(key: &str) -> PathBuf {
    ensure_packaging_tools().expect("tests/env/cluster build-tools");
    tool_path(key)
}

/// Runs `command` (with `input` on stdin), failing the test unless it exits 0; its stdout.
fn run(command: &mut Command, input: Option<&str>) -> String {
    let shown = format!("{command:?}");
    let mut child = command
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|err| panic!("running {shown}: {err}"));
    if let Some(input) = input {
        child
            .stdin
            .take()
            .expect("piped stdin")
            .write_all(input.as_bytes())
            .unwrap_or_else(|err| panic!("writing to {shown}: {err}"));
    }
    let output: Output = child
        .wait_with_output()
        .unwrap_or_else(|err| panic!("waiting for {shown}: {err}"));
    assert!(
        output.status.success(),
        "{shown} failed ({}):\n{}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("UTF-8 output")
}

fn helm(args: &[&str]) -> String {
    run(Command::new(tool("HELM")).args(args), None)
}

/// The objects of a multi-document YAML stream by kind, namespace and name.
fn objects(yaml: &str) -> BTreeMap<(String, String, String), Value> {
    let mut objects = BTreeMap::new();
    for value in tenantflux_core::yaml::documents::<Value>(yaml).expect("YAML documents") {
        let field = |path: &str| {
            value
                .pointer(path)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned()
        };
        let key = (
            field("/kind"),
            field("/metadata/namespace"),
            field("/metadata/name"),
        );
        assert!(
            objects.insert(key.clone(), value).is_none(),
            "{key:?} twice"
        );
    }
    objects
}

fn render(args: &[&str]) -> String {
    let chart = chart_dir();
    let mut all = vec![
        "template",
        "tenantflux-agent",
        chart.to_str().expect("UTF-8 path"),
    ];
    all.extend(args);
    helm(&all)
}

/// Values that exercise every optional part of the chart.
const ALL_VALUES: &str = r#"
namespace: tenantflux-chart-test
image: {repository: registry.example/tenantflux-agent, tag: v9.9.9, pullPolicy: Always}
imagePullSecrets: [{name: registry-credentials}]
operatorNamespace: flux-operator-system
operatorBundle: oci://registry.example/flux-operator-manifests:v0.58.1
operatorVersion: ">=0.58.0 <0.60.0"
operatorBundlePullSecret: registry-credentials
operatorRequireImageDigest: true
operatorAllowPodFields: [hostNetwork, tolerations]
operatorImageRegistries: ["registry.example/mirror/*", "ghcr.io/controlplaneio-fluxcd/*"]
operatorResyncInterval: 10m
streamRecheckInterval: 30s
tokenAudience: tenantflux-acme
clusterName: kubernetes-acme
policy:
  publicKey: MCowBQYDK2VwAyEAGb9ECWmEzf6FQbrBZ9w7lshQhqowtrbLDFw4rXAxZuE=
  rootKeys: [MCowBQYDK2VwAyEAGb9ECWmEzf6FQbrBZ9w7lshQhqowtrbLDFw4rXAxZuE=, MCowBQYDK2VwAyEAAJo2V6z47o5JPkLf0pDerCk+u0Jec3ujwJ+uIXuOwtE=]
  rootThreshold: 2
  source: oci://registry.example/platform/policy:stable
  sourceInterval: 2m
  sourcePullSecret: registry-credentials
  sourcePlainHTTP: true
logFormat: text
logLevel: info,tenantflux_agent=debug
# null drops a default (Helm merges maps).
resources: {requests: {cpu: 20m, memory: 64Mi}, limits: null}
nodeSelector: {node-role.kubernetes.io/infra: ""}
tolerations: [{key: infra, operator: Exists, effect: NoSchedule}]
affinity:
  nodeAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      nodeSelectorTerms: [{matchExpressions: [{key: kubernetes.io/os, operator: In, values: [linux]}]}]
podAnnotations: {example.com/team: platform}
podLabels: {example.com/tier: system}
# OpenShift's restricted-v2 assigns the user and group.
podSecurityContext: {runAsUser: null, runAsGroup: null}
priorityClassName: ""
commonLabels: {platform.example/tenant: acme}
podDisruptionBudget: {enabled: true}
serviceAccount: {annotations: {iam.example.com/role: tenantflux-agent}}
networkPolicy:
  adminFrom: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: monitoring}}}]
userSubjects: [{kind: Group, apiGroup: rbac.authorization.k8s.io, name: tenant-admins}]
extraArgs: ["--token-audience=tenantflux-agent"]
extraEnv: [{name: TENANTFLUX_EXAMPLE, value: "1"}]
"#;

fn all_values_file() -> tempfile::NamedTempFile {
    let mut file = tempfile::NamedTempFile::new().expect("temporary values file");
    file.write_all(ALL_VALUES.as_bytes())
        .expect("values written");
    file
}

/// Chart.yaml's version and appVersion.
fn chart_versions() -> (String, String) {
    let text = std::fs::read_to_string(chart_dir().join("Chart.yaml")).expect("Chart.yaml");
    let chart: Value = tenantflux_core::yaml::from_str(&text).expect("Chart.yaml is YAML");
    let field = |name: &str| {
        chart[name]
            .as_str()
            .unwrap_or_else(|| panic!("Chart.yaml has no {name}"))
            .to_owned()
    };
    (field("version"), field("appVersion"))
}

/// The labels Helm's conventions give every object of release `release` of the chart at
/// version `chart_version`: `what` (the object) fails the test without one of them.
fn assert_release_labels(what: &str, labels: &Value, release: &str, chart_version: &str) {
    let (_, app_version) = chart_versions();
    let expected = [
        ("app.kubernetes.io/part-of", "tenantflux".to_owned()),
        ("app.kubernetes.io/instance", release.to_owned()),
        ("app.kubernetes.io/version", app_version),
        ("app.kubernetes.io/managed-by", "Helm".to_owned()),
        // A label value cannot hold the "+" of a version's build metadata.
        (
            "helm.sh/chart",
            format!("tenantflux-agent-{}", chart_version.replace('+', "_")),
        ),
    ];
    for (label, value) in expected {
        assert_eq!(labels[label], value.as_str(), "{what}: label {label}");
    }
}

#[test]
fn chart_lints_with_default_and_all_values() {
    let chart = chart_dir();
    let chart = chart.to_str().expect("UTF-8 path");
    helm(&["lint", "--strict", chart]);
    let values = all_values_file();
    helm(&[
        "lint",
        "--strict",
        chart,
        "-f",
        values.path().to_str().expect("UTF-8 path"),
    ]);
}

#[test]
fn chart_rejects_values_outside_its_schema() {
    let chart = chart_dir();
    // Each bad setting, and what the error must name.
    let cases: [(&[&str], &str); 5] = [
        (&["--set", "logFormat=xml"], "logFormat"),
        // A typo is refused, not ignored: the key would be silently off.
        (&["--set", "policy.publickey=MCowBQ"], "publickey"),
        (&["--set", "imagePullSecret=x"], "imagePullSecret"),
        // A bundle without the versions the agent may install from it crash-loops the agent.
        (
            &[
                "--set",
                "operatorBundle=oci://registry.example/flux-operator-manifests:v0.59.0",
            ],
            "operatorVersion",
        ),
        // ValidatingAdmissionPolicy, which enforces the policy, is GA from 1.30.
        (&["--kube-version", "1.29.0"], "kubeVersion"),
    ];
    for (args, named) in cases {
        let output = Command::new(tool("HELM"))
            .args(["template", "t", chart.to_str().expect("UTF-8 path")])
            .args(args)
            .output()
            .expect("run helm template");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{args:?} rendered");
        assert!(
            stderr.contains(named),
            "{args:?}: the error names {named}: {stderr}"
        );
    }
}

/// `helm install -n tenantflux-system --create-namespace` of the chart on a real API server,
/// then `helm upgrade` with a new policy key: the key's ConfigMap holds the new key and the
/// Deployment rolls its pod (Recreate: the old ReplicaSet is scaled to zero before the new one
/// runs, and a watch of the pods sees the old pod deleted before the new one is created: one
/// agent at a time). The agent itself is not in that pod here (the test environment's pods have
/// no process); image.rs runs the image as the pods of such an upgrade and shows the new pod's
/// agent trusts only the new key.
#[test]
fn a_helm_upgrade_with_a_new_policy_key_restarts_the_agent() {
    let cluster = TestCluster::start(&format!("pkg-helm-{}", std::process::id())).expect("cluster");
    let chart = chart_dir();
    let chart = chart.to_str().expect("UTF-8 path");
    let kubeconfig = cluster
        .kubeconfig()
        .to_str()
        .expect("UTF-8 path")
        .to_owned();
    let helm_in = |args: &[&str]| {
        let mut all = vec!["--kubeconfig", kubeconfig.as_str()];
        all.extend(args);
        helm(&all)
    };
    let old_key = "MCowBQYDK2VwAyEAGb9ECWmEzf6FQbrBZ9w7lshQhqowtrbLDFw4rXAxZuE=";
    let new_key = "MCowBQYDK2VwAyEAAJo2V6z47o5JPkLf0pDerCk+u0Jec3ujwJ+uIXuOwtE=";
    // Into the agent's own namespace, which Helm creates: the chart then renders no Namespace
    // of its own to collide with it.
    helm_in(&[
        "install",
        "tenantflux-agent",
        chart,
        "-n",
        "tenantflux-system",
        "--create-namespace",
        "--wait",
        "--timeout",
        "120s",
        "--set",
        &format!("policy.publicKey={old_key}"),
    ]);
    let get = |what: &str| -> Value {
        let text = cluster
            .kubectl_ok(&["-n", "tenantflux-system", "get", what, "-o", "json"])
            .unwrap_or_else(|err| panic!("{what}: {err}"));
        serde_json::from_str(&text).expect("JSON")
    };
    let checksum = |deployment: &Value| {
        deployment["spec"]["template"]["metadata"]["annotations"]["checksum/policy-key"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    let before = checksum(&get("deployment/tenantflux-agent"));
    assert_eq!(before.len(), 64, "{before}");
    // Every change to the agent's pods while the upgrade rolls them, as the API server sends it.
    let watch = PodWatch::start(
        &cluster,
        "tenantflux-system",
        "app.kubernetes.io/name=tenantflux-agent",
    );
    helm_in(&[
        "upgrade",
        "tenantflux-agent",
        chart,
        "-n",
        "tenantflux-system",
        "--reuse-values",
        "--wait",
        "--timeout",
        "120s",
        "--set",
        &format!("policy.publicKey={new_key}"),
    ]);
    assert_eq!(
        get("configmap/tenantflux-policy-key")["data"]["ed25519.pub"],
        new_key
    );
    let deployment = get("deployment/tenantflux-agent");
    assert_ne!(
        checksum(&deployment),
        before,
        "the pod template did not change"
    );
    assert_eq!(deployment["spec"]["strategy"]["type"], "Recreate");
    // Two ReplicaSets: the old one at zero, the new one with the agent's one pod.
    let sets = get("replicasets");
    let mut replicas: Vec<i64> = sets["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|rs| rs["spec"]["replicas"].as_i64().unwrap_or(-1))
        .collect();
    replicas.sort_unstable();
    assert_eq!(replicas, [0, 1], "{sets:#}");
    // One agent at a time: the new pod was created only once the old one was gone.
    let events = watch.stop();
    let mut live = std::collections::BTreeSet::new();
    let mut seen = std::collections::BTreeSet::new();
    for (kind, uid) in &events {
        match kind.as_str() {
            "ADDED" => {
                live.insert(uid.clone());
                seen.insert(uid.clone());
            }
            "DELETED" => {
                live.remove(uid);
            }
            _ => {}
        }
        assert!(live.len() <= 1, "two agent pods at once: {events:?}");
    }
    assert_eq!(
        seen.len(),
        2,
        "the upgrade replaced the agent's pod: {events:?}"
    );
    assert_eq!(live.len(), 1, "{events:?}");
}

/// `kubectl get pods --watch` in the background: the watch events' types and pods' UIDs.
struct PodWatch {
    child: std::process::Child,
    reader: std::thread::JoinHandle<Vec<(String, String)>>,
}

impl PodWatch {
    /// Starts the watch and returns once its initial listing has arrived (a pod is there).
    fn start(cluster: &TestCluster, namespace: &str, selector: &str) -> PodWatch {
        let mut child = Command::new(tool("KUBECTL"))
            .arg("--kubeconfig")
            .arg(cluster.kubeconfig())
            .args([
                "-n",
                namespace,
                "get",
                "pods",
                "-l",
                selector,
                "--watch",
                "--output-watch-events",
                "-o",
                "json",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("kubectl get pods --watch");
        let stdout = child.stdout.take().expect("stdout");
        let (listed, first) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            let mut events = Vec::new();
            for event in serde_json::Deserializer::from_reader(stdout).into_iter::<Value>() {
                let Ok(event) = event else { break };
                let field = |pointer: &str| {
                    event
                        .pointer(pointer)
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned()
                };
                events.push((field("/type"), field("/object/metadata/uid")));
                let _ = listed.send(());
            }
            events
        });
        first
            .recv_timeout(std::time::Duration::from_secs(30))
            .expect("the watch's initial listing");
        PodWatch { child, reader }
    }

    fn stop(mut self) -> Vec<(String, String)> {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.reader.join().expect("the watch's reader")
    }
}

/// The chart as a platform publishes it and a user installs it: `helm package`, `helm push` to
/// an OCI registry (the test environment's, over plain HTTP), then `helm show chart`, `helm
/// pull` and `helm install` from the oci:// reference into a real API server. The version has
/// build metadata, which an OCI tag cannot hold (Helm tags it with "_" for "+"), nor a label.
/// Every object of the release carries the release's labels on the API server.
#[test]
fn the_chart_installs_from_its_oci_reference() {
    let cluster = TestCluster::start(&format!("pkg-oci-{}", std::process::id())).expect("cluster");
    let registry = cluster.registry().expect("the cluster's registry");
    let (chart_version, _) = chart_versions();
    let version = format!("{chart_version}+oci");
    let work = tempfile::tempdir().expect("a temporary directory");
    // Helm's configuration, cache and data of the test's own: no registry login or repository
    // of whoever runs it takes part.
    let helm_here = |args: &[&str]| {
        run(
            Command::new(tool("HELM"))
                .args(args)
                .env("HELM_CONFIG_HOME", work.path().join("config"))
                .env("HELM_CACHE_HOME", work.path().join("cache"))
                .env("HELM_DATA_HOME", work.path().join("data"))
                .env("KUBECONFIG", cluster.kubeconfig()),
            None,
        )
    };
    let dir = |name: &str| work.path().join(name).to_str().expect("UTF-8").to_owned();
    let chart = chart_dir();
    helm_here(&[
        "package",
        chart.to_str().expect("UTF-8 path"),
        "--version",
        &version,
        "-d",
        &dir("packaged"),
    ]);
    let package = work
        .path()
        .join(format!("packaged/tenantflux-agent-{version}.tgz"));
    let charts = format!("oci://{registry}/charts");
    helm_here(&[
        "push",
        package.to_str().expect("UTF-8 path"),
        &charts,
        "--plain-http",
    ]);
    let reference = format!("{charts}/tenantflux-agent");
    let from_registry = ["--version", &version, "--plain-http"];

    let shown = helm_here(&[&["show", "chart", &reference][..], &from_registry].concat());
    let shown: Value = tenantflux_core::yaml::from_str(&shown).expect("Chart.yaml as YAML");
    assert_eq!(shown["name"], "tenantflux-agent");
    assert_eq!(shown["version"], version.as_str());
    // helm pull writes into a directory that exists.
    std::fs::create_dir(dir("pulled")).expect("a directory to pull into");
    helm_here(
        &[
            &["pull", &reference, "-d", &dir("pulled")][..],
            &from_registry,
        ]
        .concat(),
    );
    let pulled = work
        .path()
        .join(format!("pulled/tenantflux-agent-{version}.tgz"));
    assert!(
        std::fs::read(&pulled).expect("the pulled chart")
            == std::fs::read(&package).expect("the package"),
        "helm pull gives the package that was pushed"
    );

    // As the README has it, under a release name of its own: the instance label is the
    // release's name, not the chart's.
    let release = "agent-from-oci";
    helm_here(
        &[
            &[
                "install",
                release,
                &reference,
                "-n",
                "tenantflux-system",
                "--create-namespace",
                "--wait",
                "--timeout",
                "120s",
            ][..],
            &from_registry,
        ]
        .concat(),
    );
    let status: Value = serde_json::from_str(&helm_here(&[
        "status",
        release,
        "-n",
        "tenantflux-system",
        "-o",
        "json",
    ]))
    .expect("helm status as JSON");
    assert_eq!(status["info"]["status"], "deployed", "{status:#}");

    // What the release holds, and what the API server holds with its labels: the same objects.
    let released = objects(&helm_here(&[
        "get",
        "manifest",
        release,
        "-n",
        "tenantflux-system",
    ]));
    let kinds: std::collections::BTreeSet<&str> =
        released.keys().map(|(kind, _, _)| kind.as_str()).collect();
    let kinds = kinds.into_iter().collect::<Vec<_>>().join(",");
    let live: Value = serde_json::from_str(
        &cluster
            .kubectl_ok(&[
                "get",
                &kinds,
                "-A",
                "-l",
                &format!("app.kubernetes.io/instance={release}"),
                "-o",
                "json",
            ])
            .expect("the release's objects"),
    )
    .expect("JSON");
    let live: BTreeMap<(String, String, String), &Value> = live["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|object| {
            let field = |path: &str| {
                object
                    .pointer(path)
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned()
            };
            (
                (
                    field("/kind"),
                    field("/metadata/namespace"),
                    field("/metadata/name"),
                ),
                object,
            )
        })
        .collect();
    assert_eq!(
        live.keys().collect::<Vec<_>>(),
        released.keys().collect::<Vec<_>>(),
        "the objects labelled app.kubernetes.io/instance={release}"
    );
    for ((kind, namespace, name), object) in &live {
        assert_release_labels(
            &format!("{kind} {namespace}/{name}"),
            &object["metadata"]["labels"],
            release,
            &version,
        );
    }
}

/// The YAML files of `dir` by name, with their text.
fn yaml_files(dir: &Path) -> BTreeMap<String, String> {
    std::fs::read_dir(dir)
        .unwrap_or_else(|err| panic!("reading {}: {err}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "yaml"))
        .map(|path| {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|err| panic!("reading {}: {err}", path.display()));
            (name, text)
        })
        .collect()
}

/// The chart is the one source of deploy/manifests: generated again into a temporary directory
/// by deploy/manifests/generate, every file is the committed one and there is no other; and
/// kustomize takes the directory (`kubectl apply -k deploy/manifests` is what users run).
#[test]
fn deploy_manifests_are_generated_from_the_chart() {
    let manifests = repo_root().join("deploy/manifests");
    let fresh = tempfile::tempdir().expect("a temporary directory");
    run(
        Command::new(manifests.join("generate"))
            .arg(fresh.path())
            .env("HELM", tool("HELM")),
        None,
    );
    let committed = yaml_files(&manifests);
    let generated = yaml_files(fresh.path());
    assert_eq!(
        committed.keys().collect::<Vec<_>>(),
        generated.keys().collect::<Vec<_>>(),
        "deploy/manifests holds the files the chart renders: run deploy/manifests/generate"
    );
    for (name, text) in &generated {
        assert!(
            committed[name] == *text,
            "deploy/manifests/{name} is not what the chart renders: run deploy/manifests/generate"
        );
    }
    let kustomized = run(
        Command::new(tool_path("KUBECTL")).args(["kustomize", manifests.to_str().expect("UTF-8")]),
        None,
    );
    let kustomized = objects(&kustomized);
    assert_eq!(
        kustomized.keys().collect::<Vec<_>>(),
        objects(&render(&[])).keys().collect::<Vec<_>>(),
        "kustomize of deploy/manifests gives the chart's objects"
    );
    // Applied with kubectl, they belong to no Helm release and do not say they do; what they
    // are part of and the agent's version stay.
    let (_, app_version) = chart_versions();
    for ((kind, namespace, name), object) in &kustomized {
        let labels = &object["metadata"]["labels"];
        for label in [
            "app.kubernetes.io/instance",
            "app.kubernetes.io/managed-by",
            "helm.sh/chart",
        ] {
            assert!(
                labels[label].is_null(),
                "{kind} {namespace}/{name}: {label} in deploy/manifests"
            );
        }
        assert_eq!(
            labels["app.kubernetes.io/part-of"], "tenantflux",
            "{kind} {name}"
        );
        assert_eq!(
            labels["app.kubernetes.io/version"],
            app_version.as_str(),
            "{kind} {name}"
        );
    }
}

#[test]
fn chart_values_reach_the_objects() {
    let values = all_values_file();
    let objects = objects(&render(&[
        "-f",
        values.path().to_str().expect("UTF-8 path"),
    ]));
    let ns = "tenantflux-chart-test";
    let key = |kind: &str, namespace: &str, name: &str| {
        (kind.to_owned(), namespace.to_owned(), name.to_owned())
    };
    let deployment = &objects[&key("Deployment", ns, "tenantflux-agent")];
    let pod = &deployment["spec"]["template"];
    let container = &pod["spec"]["containers"][0];
    assert_eq!(
        container["image"],
        "registry.example/tenantflux-agent:v9.9.9"
    );
    assert_eq!(container["imagePullPolicy"], "Always");
    assert_eq!(
        container["args"],
        serde_json::json!(["--token-audience=tenantflux-agent"])
    );
    let env: BTreeMap<&str, &Value> = container["env"]
        .as_array()
        .expect("env")
        .iter()
        .map(|e| (e["name"].as_str().expect("env name"), &e["value"]))
        .collect();
    for (name, value) in [
        ("TENANTFLUX_OPERATOR_NAMESPACE", "flux-operator-system"),
        ("TENANTFLUX_LOG_FORMAT", "text"),
        ("RUST_LOG", "info,tenantflux_agent=debug"),
        (
            "TENANTFLUX_OPERATOR_BUNDLE",
            "oci://registry.example/flux-operator-manifests:v0.58.1",
        ),
        ("TENANTFLUX_OPERATOR_VERSION", ">=0.58.0 <0.60.0"),
        (
            "TENANTFLUX_OPERATOR_BUNDLE_PULL_SECRET",
            "registry-credentials",
        ),
        ("TENANTFLUX_CLUSTER_NAME", "kubernetes-acme"),
        ("TENANTFLUX_OPERATOR_REQUIRE_IMAGE_DIGEST", "true"),
        (
            "TENANTFLUX_OPERATOR_ALLOW_POD_FIELDS",
            "hostNetwork,tolerations",
        ),
        (
            "TENANTFLUX_OPERATOR_IMAGE_REGISTRIES",
            "registry.example/mirror/*,ghcr.io/controlplaneio-fluxcd/*",
        ),
        ("TENANTFLUX_OPERATOR_RESYNC_INTERVAL", "10m"),
        ("TENANTFLUX_STREAM_RECHECK_INTERVAL", "30s"),
        ("TENANTFLUX_TOKEN_AUDIENCE", "tenantflux-acme"),
    ] {
        assert_eq!(env[name], value, "{name}");
    }
    assert!(!env.contains_key("TENANTFLUX_ADOPT"));
    // adopt: true (rendered apart: its Role lives in the operator namespace, which exists only
    // where Flux runs already) turns adoption on and lets the agent list Helm's release
    // records in the operator namespace, only there.
    let adopting = self::objects(&render(&[
        "--set",
        "adopt=true",
        "--set",
        "operatorNamespace=cozy-fluxcd",
    ]));
    let adopt_env = adopting[&key("Deployment", "tenantflux-system", "tenantflux-agent")]["spec"]
        ["template"]["spec"]["containers"][0]["env"]
        .to_string();
    assert!(
        adopt_env.contains(r#"{"name":"TENANTFLUX_ADOPT","value":"true"}"#),
        "{adopt_env}"
    );
    let adopt_role = &adopting[&key("Role", "cozy-fluxcd", "tenantflux-agent-adopt")];
    assert_eq!(
        adopt_role["rules"],
        serde_json::json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list", "patch"]}])
    );
    assert!(!objects.contains_key(&key(
        "Role",
        "flux-operator-system",
        "tenantflux-agent-adopt"
    )));
    for (name, value) in [
        (
            "TENANTFLUX_POLICY_ROOT_KEYS",
            "/etc/tenantflux/policy/root-0.pub,/etc/tenantflux/policy/root-1.pub",
        ),
        ("TENANTFLUX_POLICY_ROOT_THRESHOLD", "2"),
        (
            "TENANTFLUX_POLICY_SOURCE",
            "oci://registry.example/platform/policy:stable",
        ),
        ("TENANTFLUX_POLICY_SOURCE_INTERVAL", "2m"),
        (
            "TENANTFLUX_POLICY_SOURCE_PULL_SECRET",
            "registry-credentials",
        ),
        ("TENANTFLUX_POLICY_SOURCE_PLAIN_HTTP", "true"),
        ("TENANTFLUX_EXAMPLE", "1"),
    ] {
        assert_eq!(env[name], value, "{name}");
    }
    assert_eq!(
        container["resources"],
        serde_json::json!({"requests": {"cpu": "20m", "memory": "64Mi"}})
    );
    assert_eq!(
        container["volumeMounts"][0]["mountPath"],
        "/etc/tenantflux/policy"
    );
    assert_eq!(
        pod["spec"]["volumes"][0]["configMap"]["name"],
        "tenantflux-policy-key"
    );
    assert_eq!(
        pod["spec"]["nodeSelector"]["node-role.kubernetes.io/infra"],
        ""
    );
    assert_eq!(pod["spec"]["tolerations"][0]["key"], "infra");
    assert!(pod["spec"]["affinity"]["nodeAffinity"].is_object());
    assert_eq!(
        pod["spec"]["imagePullSecrets"][0]["name"],
        "registry-credentials"
    );
    assert_eq!(
        pod["metadata"]["annotations"]["example.com/team"],
        "platform"
    );
    assert_eq!(pod["metadata"]["labels"]["example.com/tier"], "system");
    // The selector's label is still on the pod, whatever labels are added.
    assert_eq!(
        pod["metadata"]["labels"]["app.kubernetes.io/name"],
        "tenantflux-agent"
    );
    // The platform's labels and the release's are on every object; the agent's pod has the
    // platform's but not the release's, which would roll it on every chart release.
    let (chart_version, _) = chart_versions();
    for ((kind, namespace, name), object) in &objects {
        let what = format!("{kind} {namespace}/{name}");
        let labels = &object["metadata"]["labels"];
        assert_eq!(labels["platform.example/tenant"], "acme", "{what}");
        assert_release_labels(&what, labels, "tenantflux-agent", &chart_version);
    }
    let pod_labels: Vec<&String> = pod["metadata"]["labels"]
        .as_object()
        .expect("pod labels")
        .keys()
        .collect();
    assert_eq!(
        pod_labels,
        [
            "app.kubernetes.io/name",
            "app.kubernetes.io/part-of",
            "example.com/tier",
            "platform.example/tenant"
        ]
    );
    assert_eq!(
        deployment["spec"]["selector"],
        serde_json::json!({"matchLabels": {"app.kubernetes.io/name": "tenantflux-agent"}})
    );
    let budget = &objects[&key("PodDisruptionBudget", ns, "tenantflux-agent")];
    assert_eq!(budget["spec"]["maxUnavailable"], 1);
    assert_eq!(
        budget["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"],
        "tenantflux-agent"
    );
    // A ServiceMonitor only when asked for (its CRD is the Prometheus Operator's, which the
    // API server of these tests does not serve, so it is checked as rendered).
    let monitored = self::objects(&render(&[
        "--set",
        "serviceMonitor.create=true",
        "--set",
        "serviceMonitor.labels.release=kube-prometheus-stack",
    ]));
    let monitor = &monitored[&key("ServiceMonitor", "tenantflux-system", "tenantflux-agent")];
    assert_eq!(
        monitor["metadata"]["labels"]["release"],
        "kube-prometheus-stack"
    );
    assert_release_labels(
        "ServiceMonitor",
        &monitor["metadata"]["labels"],
        "tenantflux-agent",
        &chart_version,
    );
    assert_eq!(
        monitor["spec"]["endpoints"],
        serde_json::json!([{"port": "admin", "path": "/metrics", "interval": "30s"}])
    );
    assert!(!objects.keys().any(|(kind, _, _)| kind == "ServiceMonitor"));
    // The Linux default stays beside the platform's selector (Helm merges maps).
    assert_eq!(pod["spec"]["nodeSelector"]["kubernetes.io/os"], "linux");
    assert_eq!(
        pod["spec"]["securityContext"],
        serde_json::json!({"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}})
    );
    assert!(pod["spec"]["priorityClassName"].is_null());
    assert_eq!(
        objects[&key("ServiceAccount", ns, "tenantflux-agent")]["metadata"]["annotations"],
        serde_json::json!({"iam.example.com/role": "tenantflux-agent"})
    );
    assert_eq!(
        deployment["spec"]["strategy"],
        serde_json::json!({"type": "Recreate"})
    );
    // A new key changes the pod template, so that `helm upgrade` restarts the agent (it reads
    // its keys at start); without a key there is nothing to watch.
    let checksum = pod["metadata"]["annotations"]["checksum/policy-key"]
        .as_str()
        .expect("checksum/policy-key");
    assert_eq!(checksum.len(), 64, "{checksum}");
    let rotated = self::objects(&render(&[
        "-f",
        values.path().to_str().expect("UTF-8 path"),
        "--set",
        "policy.publicKey=MCowBQYDK2VwAyEAAJo2V6z47o5JPkLf0pDerCk+u0Jec3ujwJ+uIXuOwtE=",
    ]));
    let rotated = &rotated[&key("Deployment", ns, "tenantflux-agent")]["spec"]["template"];
    assert_ne!(
        rotated["metadata"]["annotations"]["checksum/policy-key"],
        checksum
    );
    // Installed into its own namespace (`-n tenantflux-system --create-namespace`), the chart
    // leaves the Namespace to Helm.
    let own = self::objects(&render(&["-n", "tenantflux-system"]));
    assert!(!own.contains_key(&key("Namespace", "", "tenantflux-system")));
    assert!(own.contains_key(&key("Deployment", "tenantflux-system", "tenantflux-agent")));
    let defaults = self::objects(&render(&[]));
    let default_pod =
        &defaults[&key("Deployment", "tenantflux-system", "tenantflux-agent")]["spec"]["template"];
    assert!(
        default_pod["metadata"]["annotations"].is_null(),
        "{default_pod}"
    );
    assert_eq!(
        default_pod["spec"]["priorityClassName"],
        "system-cluster-critical"
    );
    assert_eq!(default_pod["spec"]["securityContext"]["runAsUser"], 65532);
    let key_map = &objects[&key("ConfigMap", ns, "tenantflux-policy-key")];
    assert_eq!(
        key_map["data"]["ed25519.pub"],
        "MCowBQYDK2VwAyEAGb9ECWmEzf6FQbrBZ9w7lshQhqowtrbLDFw4rXAxZuE="
    );
    let users = &objects[&key("RoleBinding", ns, "tenantflux-users")];
    assert_eq!(users["subjects"][0]["name"], "tenant-admins");
    assert_eq!(users["roleRef"]["name"], "tenantflux-user");
    // The same users may prove who they are (client certificates act as themselves).
    let identity = &objects[&key("ClusterRoleBinding", "", "tenantflux-users-caller-identity")];
    assert_eq!(identity["subjects"][0]["name"], "tenant-admins");
    assert_eq!(identity["roleRef"]["name"], "tenantflux-caller-identity");
    let admin = &objects[&key("NetworkPolicy", ns, "tenantflux-agent")]["spec"]["ingress"][0];
    assert_eq!(
        admin["ports"],
        serde_json::json!([{"port": "admin", "protocol": "TCP"}])
    );
    assert_eq!(
        admin["from"][0]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
        "monitoring"
    );
    let binding = &objects[&key("ClusterRoleBinding", "", "tenantflux-agent")];
    assert_eq!(binding["subjects"][0]["namespace"], ns);
    assert!(objects.contains_key(&key("Namespace", "", ns)));
}

/// The platform guide's HelmRelease (the agent installed into a tenant cluster from the
/// management side, as Cozystack installs add-ons): its values render with the chart, the
/// policy key reaches the agent, and it uses the Secret and key `fleet` discovers clusters by.
#[test]
fn platform_guide_helmrelease_example_renders_with_the_chart() {
    let guide =
        std::fs::read_to_string(repo_root().join("docs/platform.md")).expect("docs/platform.md");
    let example = guide
        .split("```yaml\n")
        .skip(1)
        .filter_map(|block| block.split_once("```").map(|(yaml, _)| yaml))
        .find(|yaml| yaml.contains("kind: HelmRelease"))
        .expect("a HelmRelease example in docs/platform.md");
    let release: Value = tenantflux_core::yaml::from_str(example).expect("the example is YAML");
    let secret = &release["spec"]["kubeConfig"]["secretRef"];
    assert!(
        secret["name"]
            .as_str()
            .is_some_and(|n| n.ends_with("-admin-kubeconfig")),
        "{secret}"
    );
    assert_eq!(secret["key"], "super-admin.svc");
    let mut values = tempfile::NamedTempFile::new().expect("values file");
    values
        .write_all(
            tenantflux_core::yaml::to_string(&release["spec"]["values"])
                .expect("values as YAML")
                .as_bytes(),
        )
        .expect("values written");
    let objects = objects(&render(&[
        "-f",
        values.path().to_str().expect("UTF-8 path"),
    ]));
    let key = |kind: &str, name: &str| {
        (
            kind.to_owned(),
            "tenantflux-system".to_owned(),
            name.to_owned(),
        )
    };
    assert_eq!(
        objects[&key("ConfigMap", "tenantflux-policy-key")]["data"]["ed25519.pub"],
        release["spec"]["values"]["policy"]["publicKey"]
    );
    let users = &objects[&key("RoleBinding", "tenantflux-users")];
    assert_eq!(users["subjects"][0]["name"], "tenant-acme-developers");
    // The example installs flux-operator, not only an agent that observes.
    let env =
        objects[&key("Deployment", "tenantflux-agent")]["spec"]["template"]["spec"]["containers"]
            [0]["env"]
            .to_string();
    for name in ["TENANTFLUX_OPERATOR_BUNDLE", "TENANTFLUX_OPERATOR_VERSION"] {
        assert!(
            env.contains(&format!("\"name\":\"{name}\"")),
            "{name}: {env}"
        );
    }
    // What `fleet` acts as with Kamaji's client-certificate kubeconfigs.
    assert!(objects.contains_key(&key("ServiceAccount", "tenantflux-platform")));
    assert!(objects.contains_key(&key("RoleBinding", "tenantflux-platform")));
}

/// Server-side applies the chart's output as a dry run: the real API server validates every
/// object (schemas, RBAC escalation checks, Pod Security admission). The namespace is created
/// for real first, since a dry run cannot create what the other objects go into. Conflicts are
/// forced: the cluster-scoped RBAC objects are also applied (with the default namespace) by
/// other tests' `tests/env/cluster agent`, and a dry run changes nothing either way.
fn dry_run_apply(cluster: &TestCluster, rendered: &str) -> String {
    let objects = objects(rendered);
    let (namespaces, rest): (Vec<_>, Vec<_>) = objects
        .into_iter()
        .partition(|((kind, _, _), _)| kind == "Namespace");
    let to_yaml = |objects: Vec<((String, String, String), Value)>| {
        objects
            .into_iter()
            .map(|(_, o)| tenantflux_core::yaml::to_string(&o).expect("YAML"))
            .collect::<Vec<_>>()
            .join("---\n")
    };
    cluster
        .apply_yaml(&to_yaml(namespaces))
        .expect("apply the chart's Namespace");
    run(
        Command::new(tool_path("KUBECTL"))
            .arg("--kubeconfig")
            .arg(cluster.kubeconfig())
            .args([
                "apply",
                "--server-side",
                "--field-manager",
                "tenantflux-tests-helm",
                "--dry-run=server",
                "--force-conflicts",
                "-f",
                "-",
            ]),
        Some(&to_yaml(rest)),
    )
}

#[test]
fn chart_is_accepted_by_the_api_server() {
    let cluster = TestCluster::shared();
    let applied = dry_run_apply(cluster, &render(&[]));
    assert!(
        applied.contains("deployment.apps/tenantflux-agent serverside-applied (server dry run)"),
        "{applied}"
    );

    // A namespace of this run's own: one a previous run deleted may still be terminating.
    let namespace = format!("tenantflux-chart-{}", std::process::id());
    let values = all_values_file();
    let applied = dry_run_apply(
        cluster,
        &render(&[
            "-f",
            values.path().to_str().expect("UTF-8 path"),
            "--set",
            &format!("namespace={namespace}"),
        ]),
    );
    for object in [
        "configmap/tenantflux-policy-key",
        "rolebinding.rbac.authorization.k8s.io/tenantflux-users",
        "deployment.apps/tenantflux-agent",
    ] {
        assert!(
            applied.contains(&format!("{object} serverside-applied (server dry run)")),
            "{object}: {applied}"
        );
    }
    cluster
        .kubectl_ok(&["delete", "namespace", &namespace, "--wait=false"])
        .expect("delete the test namespace");
}

/// The ELF program headers' types and, for PT_DYNAMIC, whether any DT_NEEDED entry (a shared
/// library to load) is present. ELF64 little-endian only (what x86_64/aarch64 Linux use).
fn elf_facts(bytes: &[u8]) -> (Vec<u32>, bool) {
    let u16_at = |at: usize| u16::from_le_bytes(bytes[at..at + 2].try_into().expect("2 bytes"));
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
    let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
    assert_eq!(&bytes[..4], b"\x7fELF", "an ELF file");
    assert_eq!((bytes[4], bytes[5]), (2, 1), "ELF64, little-endian");
    let (phoff, phentsize, phnum) = (
        u64_at(0x20) as usize,
        u16_at(0x36) as usize,
        u16_at(0x38) as usize,
    );
    let mut types = Vec::new();
    let mut needs_libraries = false;
    for i in 0..phnum {
        let header = phoff + i * phentsize;
        let kind = u32_at(header);
        types.push(kind);
        const PT_DYNAMIC: u32 = 2;
        if kind == PT_DYNAMIC {
            let (offset, size) = (u64_at(header + 8) as usize, u64_at(header + 32) as usize);
            const DT_NEEDED: u64 = 1;
            needs_libraries |= (offset..offset + size)
                .step_by(16)
                .any(|entry| u64_at(entry) == DT_NEEDED);
        }
    }
    (types, needs_libraries)
}

#[test]
fn agent_image_binary_is_static_and_runs() {
    let dockerfile =
        std::fs::read_to_string(repo_root().join("deploy/image/Dockerfile")).expect("Dockerfile");
    // What this test builds is what deploy/image/build puts in the image, and the image runs
    // it as the user deploy/manifests asks for.
    let build = std::fs::read_to_string(repo_root().join("deploy/image/build")).expect("build");
    // This machine's architecture: build-agent without one, as here.
    assert!(
        build
            .lines()
            .any(|line| line.trim() == r#""$here/build-agent" "$dir/tenantflux-agent""#),
        "{build}"
    );
    assert!(
        dockerfile.contains("COPY tenantflux-agent /tenantflux-agent"),
        "{dockerfile}"
    );
    assert!(dockerfile.contains("USER 65532:65532"), "{dockerfile}");
    assert!(
        dockerfile.contains(r#"ENTRYPOINT ["/tenantflux-agent"]"#),
        "{dockerfile}"
    );

    let out = tempfile::tempdir().expect("temporary directory");
    let binary = out.path().join("tenantflux-agent");
    run(
        Command::new(repo_root().join("deploy/image/build-agent"))
            .arg(&binary)
            .env("TENANTFLUX_RELEASE_PROFILE", "dev"),
        None,
    );
    let (types, needs_libraries) = elf_facts(&std::fs::read(&binary).expect("read the binary"));
    const PT_INTERP: u32 = 3;
    assert!(
        !types.contains(&PT_INTERP),
        "no program interpreter (dynamic loader): {types:?}"
    );
    assert!(!needs_libraries, "no shared library needed");
    // An empty environment, as on the image's empty (scratch) base.
    let help = run(Command::new(&binary).arg("--help").env_clear(), None);
    assert!(help.contains("--grpc-address"), "{help}");
    let version = run(Command::new(&binary).arg("--version").env_clear(), None);
    assert_eq!(
        version.trim(),
        concat!("tenantflux-agent ", env!("CARGO_PKG_VERSION"))
    );
}

/// `validate-krew-manifest -skip-install`: krew's structural checks (names, selectors that
/// match supported platforms and do not overlap, sha256 and URI formats).
fn validate_krew_manifest(manifest: &Path) {
    run(
        Command::new(tool("VALIDATE_KREW_MANIFEST"))
            .arg("-manifest")
            .arg(manifest)
            .arg("-skip-install"),
        None,
    );
}

#[test]
fn krew_manifest_covers_every_platform() {
    // The committed template, as a release with all six archives would fill it in.
    let template =
        std::fs::read_to_string(repo_root().join("deploy/krew/tenantflux.yaml")).expect("template");
    let mut filled = template.replace("VERSION", concat!("v", env!("CARGO_PKG_VERSION")));
    for os in ["LINUX", "DARWIN", "WINDOWS"] {
        for arch in ["AMD64", "ARM64"] {
            filled = filled.replace(&format!("SHA256_{os}_{arch}"), &"ab".repeat(32));
        }
    }
    let platforms: Vec<(String, String)> = tenantflux_core::yaml::from_str::<Value>(&filled)
        .expect("YAML")["spec"]["platforms"]
        .as_array()
        .expect("platforms")
        .iter()
        .map(|p| {
            let labels = &p["selector"]["matchLabels"];
            (
                labels["os"].as_str().expect("os").to_owned(),
                labels["arch"].as_str().expect("arch").to_owned(),
            )
        })
        .collect();
    assert_eq!(platforms.len(), 6, "{platforms:?}");
    let dir = tempfile::tempdir().expect("temporary directory");
    let manifest = dir.path().join("tenantflux.yaml");
    std::fs::write(&manifest, filled).expect("manifest written");
    validate_krew_manifest(&manifest);
}

/// `deploy/krew/release` for `platforms` only ("linux/amd64 windows/amd64"), unoptimized (the
/// tests check how the archives and binaries are made, not how fast they run); the manifest.
fn krew_release(platforms: &str, dist: &Path) -> PathBuf {
    let manifest = run(
        Command::new(repo_root().join("deploy/krew/release"))
            .arg(concat!("v", env!("CARGO_PKG_VERSION")))
            .arg(dist)
            .env("TENANTFLUX_RELEASE_PLATFORMS", platforms)
            .env("TENANTFLUX_RELEASE_PROFILE", "dev"),
        None,
    );
    PathBuf::from(manifest.trim())
}

/// `kubectl krew install` of one platform's archive, as a user on that platform would run it
/// (krew picks the platform from KREW_OS/KREW_ARCH and checks the archive's sha256 against the
/// manifest); the PATH on which kubectl then finds what krew installed.
fn krew_install(
    manifest: &Path,
    archive: &Path,
    os: &str,
    arch: &str,
    krew_root: &Path,
) -> std::ffi::OsString {
    let path = std::env::join_paths(
        [
            tool("KUBECTL_KREW")
                .parent()
                .expect("krew's directory")
                .to_path_buf(),
            krew_root.join("bin"),
        ]
        .into_iter()
        .chain(std::env::split_paths(
            &std::env::var_os("PATH").unwrap_or_default(),
        )),
    )
    .expect("PATH");
    run(
        Command::new(tool("KUBECTL_KREW"))
            .args(["install", "--manifest"])
            .arg(manifest)
            .arg("--archive")
            .arg(archive)
            .env("KREW_ROOT", krew_root)
            .env("KREW_OS", os)
            .env("KREW_ARCH", arch)
            .env("PATH", &path),
        None,
    );
    path
}

#[test]
fn krew_release_validates_and_installs_with_krew() {
    let version = concat!("v", env!("CARGO_PKG_VERSION"));
    let dist = tempfile::tempdir().expect("temporary directory");
    let manifest = krew_release("linux/amd64", dist.path());
    validate_krew_manifest(&manifest);

    // krew installs the linux/amd64 archive as a user's `kubectl krew install` would; then the
    // real kubectl finds the plugin krew installed.
    let archive = dist
        .path()
        .join(format!("kubectl-tenantflux_{version}_linux_amd64.tar.gz"));
    let krew_root = tempfile::tempdir().expect("temporary directory");
    let path = krew_install(&manifest, &archive, "linux", "amd64", krew_root.path());
    let store = krew_root.path().join("store/tenantflux").join(version);
    for file in [
        "LICENSE",
        "kubectl-tenantflux",
        "kubectl_complete-tenantflux",
    ] {
        assert!(
            store.join(file).is_file(),
            "krew installed {file} into {}",
            store.display()
        );
    }
    // Static (musl): it runs on any Linux distribution, whatever its libc.
    let (types, needs_libraries) =
        elf_facts(&std::fs::read(store.join("kubectl-tenantflux")).expect("the plugin"));
    const PT_INTERP: u32 = 3;
    assert!(!types.contains(&PT_INTERP), "no dynamic loader: {types:?}");
    assert!(!needs_libraries, "no shared library needed");
    let version_output = run(
        Command::new(tool_path("KUBECTL"))
            .args(["tenantflux", "version", "--client", "-o", "json"])
            .env("PATH", &path),
        None,
    );
    let version_json: Value = serde_json::from_str(&version_output).expect("JSON");
    assert_eq!(version_json["client"]["version"], version);
}

/// The members of a zip archive as deploy/krew/release writes them (deflated, sizes in each
/// local header, no data descriptors): name, Unix mode, contents.
fn unzip(bytes: &[u8]) -> Vec<(String, u32, Vec<u8>)> {
    let u16_at =
        |at: usize| u16::from_le_bytes(bytes[at..at + 2].try_into().expect("2 bytes")) as usize;
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
    let mut members = Vec::new();
    let mut at = 0;
    // Local file headers, then the central directory (which carries the modes).
    while u32_at(at) == 0x0403_4b50 {
        assert_eq!(u16_at(at + 6) & 0x8, 0, "no data descriptor");
        assert_eq!(u16_at(at + 8), 8, "deflated");
        let size = u32_at(at + 18) as usize;
        let (name_len, extra_len) = (u16_at(at + 26), u16_at(at + 28));
        let name =
            String::from_utf8(bytes[at + 30..at + 30 + name_len].to_vec()).expect("UTF-8 name");
        let data = at + 30 + name_len + extra_len;
        let mut contents = Vec::new();
        std::io::Read::read_to_end(
            &mut flate2::read::DeflateDecoder::new(&bytes[data..data + size]),
            &mut contents,
        )
        .expect("inflate");
        assert_eq!(contents.len(), u32_at(at + 22) as usize, "{name}: size");
        members.push((name, 0, contents));
        at = data + size;
    }
    for member in &mut members {
        assert_eq!(u32_at(at), 0x0201_4b50, "a central directory entry");
        let (name_len, extra_len, comment_len) =
            (u16_at(at + 28), u16_at(at + 30), u16_at(at + 32));
        assert_eq!(&bytes[at + 46..at + 46 + name_len], member.0.as_bytes());
        member.1 = u32_at(at + 38) >> 16;
        at += 46 + name_len + extra_len + comment_len;
    }
    members
}

/// The members of a .tar.gz archive: name, mode, contents.
fn untar(bytes: &[u8]) -> Vec<(String, u32, Vec<u8>)> {
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(bytes));
    archive
        .entries()
        .expect("tar entries")
        .map(|entry| {
            let mut entry = entry.expect("tar entry");
            let name = entry.path().expect("name").to_string_lossy().into_owned();
            let mode = entry.header().mode().expect("mode");
            let mut contents = Vec::new();
            std::io::Read::read_to_end(&mut entry, &mut contents).expect("read");
            (name, mode, contents)
        })
        .collect()
}

/// A Mach-O executable's CPU type, minimum macOS (`LC_BUILD_VERSION`, as 0xMMMMmmpp), the
/// dylibs it loads, and whether it carries a code signature whose page hashes match the file.
/// 64-bit little-endian only.
struct MachO {
    cpu: u32,
    min_macos: Option<u32>,
    dylibs: Vec<String>,
    signed: bool,
}

/// Whether the code signature at `offset` (`LC_CODE_SIGNATURE`) holds a SHA-256 code directory
/// whose hash of every page matches the file: what macOS checks as it maps the pages in, and
/// what a change after signing (such as stripping) would break.
fn code_signature_matches(bytes: &[u8], offset: usize) -> bool {
    use sha2::Digest as _;
    let be32 = |at: usize| u32::from_be_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
    const SUPERBLOB: u32 = 0xfade_0cc0;
    const CODE_DIRECTORY: u32 = 0xfade_0c02;
    const SHA256: u8 = 2;
    assert_eq!(be32(offset), SUPERBLOB, "an embedded signature");
    let Some(directory) = (0..be32(offset + 8) as usize)
        .map(|i| offset + be32(offset + 12 + 8 * i + 4) as usize)
        .find(|&blob| be32(blob) == CODE_DIRECTORY)
    else {
        return false;
    };
    let (hash_offset, code_slots, code_limit) = (
        be32(directory + 16) as usize,
        be32(directory + 28) as usize,
        be32(directory + 32) as usize,
    );
    let (hash_size, hash_type, page_size) = (
        bytes[directory + 36] as usize,
        bytes[directory + 37],
        1usize << bytes[directory + 39],
    );
    hash_type == SHA256
        && code_slots == code_limit.div_ceil(page_size)
        && (0..code_slots).all(|page| {
            let code = &bytes[page * page_size..((page + 1) * page_size).min(code_limit)];
            let stored = directory + hash_offset + page * hash_size;
            sha2::Sha256::digest(code)[..hash_size] == bytes[stored..stored + hash_size]
        })
}

fn macho_facts(bytes: &[u8]) -> MachO {
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
    assert_eq!(u32_at(0), 0xfeed_facf, "a 64-bit Mach-O file");
    const MH_EXECUTE: u32 = 2;
    assert_eq!(u32_at(12), MH_EXECUTE, "an executable");
    let mut facts = MachO {
        cpu: u32_at(4),
        min_macos: None,
        dylibs: Vec::new(),
        signed: false,
    };
    let mut at = 32;
    for _ in 0..u32_at(16) {
        let (command, size) = (u32_at(at), u32_at(at + 4) as usize);
        const LC_LOAD_DYLIB: u32 = 0xc;
        const LC_LOAD_WEAK_DYLIB: u32 = 0x8000_0018;
        const LC_CODE_SIGNATURE: u32 = 0x1d;
        const LC_BUILD_VERSION: u32 = 0x32;
        const PLATFORM_MACOS: u32 = 1;
        match command {
            LC_LOAD_DYLIB | LC_LOAD_WEAK_DYLIB => {
                let name = &bytes[at + u32_at(at + 8) as usize..at + size];
                let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
                facts
                    .dylibs
                    .push(String::from_utf8(name[..end].to_vec()).expect("UTF-8 dylib path"));
            }
            LC_CODE_SIGNATURE => {
                facts.signed = code_signature_matches(bytes, u32_at(at + 8) as usize)
            }
            LC_BUILD_VERSION => {
                assert_eq!(u32_at(at + 8), PLATFORM_MACOS, "built for macOS");
                facts.min_macos = Some(u32_at(at + 12));
            }
            _ => {}
        }
        at += size;
    }
    facts
}

/// A PE executable's machine, whether it is a console program, and the DLLs it imports.
fn pe_facts(bytes: &[u8]) -> (u16, bool, Vec<String>) {
    let u16_at = |at: usize| u16::from_le_bytes(bytes[at..at + 2].try_into().expect("2 bytes"));
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
    assert_eq!(&bytes[..2], b"MZ", "a DOS/PE file");
    let pe = u32_at(0x3c) as usize;
    assert_eq!(&bytes[pe..pe + 4], b"PE\0\0", "a PE file");
    let (machine, sections, optional_size) = (
        u16_at(pe + 4),
        u16_at(pe + 6) as usize,
        u16_at(pe + 20) as usize,
    );
    let optional = pe + 24;
    assert_eq!(u16_at(optional), 0x20b, "PE32+");
    const IMAGE_SUBSYSTEM_WINDOWS_CUI: u16 = 3;
    let console = u16_at(optional + 68) == IMAGE_SUBSYSTEM_WINDOWS_CUI;
    // Where a virtual address lies in the file, from the section table.
    let table = optional + optional_size;
    let file_offset = |rva: u32| -> usize {
        (0..sections)
            .map(|i| table + i * 40)
            .find_map(|s| {
                let (address, size, raw) = (u32_at(s + 12), u32_at(s + 16), u32_at(s + 20));
                (address..address + size)
                    .contains(&rva)
                    .then(|| (rva - address + raw) as usize)
            })
            .expect("an address inside a section")
    };
    // The import directory (data directory 1): one 20-byte descriptor per DLL, then zeros.
    let mut imports = Vec::new();
    let mut descriptor = file_offset(u32_at(optional + 112 + 8));
    while u32_at(descriptor + 12) != 0 {
        let name = &bytes[file_offset(u32_at(descriptor + 12))..];
        let end = name
            .iter()
            .position(|&b| b == 0)
            .expect("a NUL-terminated DLL name");
        imports.push(String::from_utf8(name[..end].to_vec()).expect("ASCII DLL name"));
        descriptor += 20;
    }
    (machine, console, imports)
}

/// What Windows 10 and later ship: a binary importing only these runs without a redistributable.
fn is_system_dll(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    name.starts_with("api-ms-win-")
        || [
            "kernel32.dll",
            "ntdll.dll",
            "advapi32.dll",
            "bcrypt.dll",
            "bcryptprimitives.dll",
            "crypt32.dll",
            "ncrypt.dll",
            "secur32.dll",
            "userenv.dll",
            "ws2_32.dll",
        ]
        .contains(&name.as_str())
}

/// Wine 8 (Debian 12's) has no bcryptprimitives.dll, from which Rust's std on Windows 10 and
/// later takes its randomness (`ProcessPrng`): a DLL next to the .exe gives it, by the
/// `BCryptGenRandom` Wine has, compiled by the zig deploy/krew/release installed.
fn wine_process_prng_dll(dir: &Path) {
    let release = std::fs::read_to_string(repo_root().join("deploy/krew/release"))
        .expect("deploy/krew/release");
    let zig_version = release
        .lines()
        .find_map(|line| line.strip_prefix("zig_version="))
        .and_then(|rest| rest.split_whitespace().next())
        .expect("deploy/krew/release pins zig_version=");
    let cache = std::env::var_os("TENANTFLUX_CACHE").map_or_else(
        || PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/tenantflux"),
        PathBuf::from,
    );
    let source = dir.join("process_prng.c");
    std::fs::write(
        &source,
        r#"#include <windows.h>
#include <bcrypt.h>
__declspec(dllexport) BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len) {
  while (len) {
    ULONG n = len > 0x10000000 ? 0x10000000 : (ULONG)len;
    if (BCryptGenRandom(NULL, data, n, BCRYPT_USE_SYSTEM_PREFERRED_RNG) != 0) return FALSE;
    data += n, len -= n;
  }
  return TRUE;
}
"#,
    )
    .expect("write the DLL's source");
    run(
        Command::new(cache.join(format!("zig-{zig_version}/bin/python3")))
            .args([
                "-m",
                "ziglang",
                "cc",
                "-target",
                "x86_64-windows-gnu",
                "-shared",
                "-o",
            ])
            .arg(dir.join("bcryptprimitives.dll"))
            .arg(&source)
            .arg("-lbcrypt"),
        None,
    );
}

#[test]
fn krew_release_cross_builds_every_other_platform() {
    // Every platform of the manifest but linux/amd64 (krew_release_validates_and_installs_with_krew),
    // built here as a release does and installed by krew for its platform. linux/arm64 runs
    // under qemu, windows/amd64 under wine; darwin and windows/arm64 are built, not run.
    let version = concat!("v", env!("CARGO_PKG_VERSION"));
    let platforms = [
        ("linux", "arm64"),
        ("darwin", "amd64"),
        ("darwin", "arm64"),
        ("windows", "amd64"),
        ("windows", "arm64"),
    ];
    let dist = tempfile::tempdir().expect("temporary directory");
    let manifest = krew_release(
        &platforms.map(|(os, arch)| format!("{os}/{arch}")).join(" "),
        dist.path(),
    );
    validate_krew_manifest(&manifest);
    let work = tempfile::tempdir().expect("temporary directory");
    for (os, arch) in platforms {
        let (exe, ext) = if os == "windows" {
            (".exe", "zip")
        } else {
            ("", "tar.gz")
        };
        let archive = dist
            .path()
            .join(format!("kubectl-tenantflux_{version}_{os}_{arch}.{ext}"));
        let bytes = std::fs::read(&archive).expect("the archive");
        let mut members = if os == "windows" {
            unzip(&bytes)
        } else {
            untar(&bytes)
        };
        members.sort();
        let names: Vec<&str> = members.iter().map(|(name, _, _)| name.as_str()).collect();
        let (plugin, complete) = (
            format!("kubectl-tenantflux{exe}"),
            format!("kubectl_complete-tenantflux{exe}"),
        );
        assert_eq!(names, ["LICENSE", &plugin, &complete], "{os}/{arch}");
        for (name, mode, _) in &members[1..] {
            assert_eq!(mode & 0o111, 0o111, "{os}/{arch}: {name} is executable");
        }
        let krew_root = work.path().join(format!("krew-{os}-{arch}"));
        krew_install(&manifest, &archive, os, arch, &krew_root);
        let store = krew_root.join("store/tenantflux").join(version);
        let dir = work.path().join(format!("{os}-{arch}"));
        std::fs::create_dir(&dir).expect("a directory per platform");
        for (name, _, contents) in &members {
            assert!(
                store.join(name).is_file(),
                "krew installed {name} for {os}/{arch}"
            );
            std::fs::write(dir.join(name), contents).expect("extract");
            std::fs::set_permissions(
                dir.join(name),
                std::os::unix::fs::PermissionsExt::from_mode(0o755),
            )
            .expect("chmod");
        }
        let binaries = [dir.join(&plugin), dir.join(&complete)];
        match os {
            "linux" => linux_arm64_is_static_and_runs_under_qemu(&binaries, version),
            "darwin" => darwin_is_what_macos_loads(arch, &binaries),
            _ => windows_imports_only_windows(arch, &binaries),
        }
        if (os, arch) == ("windows", "amd64") {
            windows_amd64_runs_under_wine(&binaries, &dir, version);
        }
    }
}

fn linux_arm64_is_static_and_runs_under_qemu(binaries: &[PathBuf; 2], version: &str) {
    for binary in binaries {
        let bytes = std::fs::read(binary).expect("the binary");
        const EM_AARCH64: u16 = 183;
        assert_eq!(u16::from_le_bytes([bytes[0x12], bytes[0x13]]), EM_AARCH64);
        let (types, needs_libraries) = elf_facts(&bytes);
        const PT_INTERP: u32 = 3;
        assert!(!types.contains(&PT_INTERP), "no dynamic loader: {types:?}");
        assert!(!needs_libraries, "no shared library needed");
    }
    let qemu = installed("qemu-aarch64", "qemu-user", false);
    let out = run(
        Command::new(&qemu)
            .arg(&binaries[0])
            .args(["version", "--client", "-o", "json"]),
        None,
    );
    let json: Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(json["client"]["version"], version, "linux/arm64 under qemu");
    let out = run(Command::new(&qemu).arg(&binaries[1]).arg("stat"), None);
    assert!(
        out.starts_with("status\t"),
        "linux/arm64 completion under qemu: {out}"
    );
}

/// Built, not run (no macOS here): what macOS's loader checks before it starts a program.
fn darwin_is_what_macos_loads(arch: &str, binaries: &[PathBuf; 2]) {
    const CPU_TYPE_X86_64: u32 = 0x0100_0007;
    const CPU_TYPE_ARM64: u32 = 0x0100_000c;
    let cpu = if arch == "amd64" {
        CPU_TYPE_X86_64
    } else {
        CPU_TYPE_ARM64
    };
    for binary in binaries {
        let facts = macho_facts(&std::fs::read(binary).expect("the binary"));
        assert_eq!(facts.cpu, cpu, "darwin/{arch}: the CPU type");
        assert_eq!(
            facts.min_macos,
            Some(0x000b_0000),
            "darwin/{arch}: macOS 11 or later"
        );
        // Only what every macOS has: libSystem, libiconv and the system frameworks (the stubs
        // in deploy/krew/darwin-frameworks name them).
        assert!(
            facts.dylibs.iter().all(|d| d.starts_with("/usr/lib/")
                || d.starts_with("/System/Library/Frameworks/")),
            "darwin/{arch}: {:?}",
            facts.dylibs
        );
        assert!(
            facts
                .dylibs
                .iter()
                .any(|d| d == "/usr/lib/libSystem.B.dylib"),
            "{:?}",
            facts.dylibs
        );
        // Apple silicon starts no code without a valid signature (zig signs ad hoc).
        assert!(
            facts.signed || arch == "amd64",
            "darwin/{arch}: code signature"
        );
    }
}

fn windows_imports_only_windows(arch: &str, binaries: &[PathBuf; 2]) {
    const IMAGE_FILE_MACHINE_AMD64: u16 = 0x8664;
    const IMAGE_FILE_MACHINE_ARM64: u16 = 0xaa64;
    let machine = if arch == "amd64" {
        IMAGE_FILE_MACHINE_AMD64
    } else {
        IMAGE_FILE_MACHINE_ARM64
    };
    for binary in binaries {
        let (found, console, dlls) = pe_facts(&std::fs::read(binary).expect("the binary"));
        assert_eq!(found, machine, "windows/{arch}: the machine");
        assert!(console, "windows/{arch}: a console program");
        assert!(
            dlls.iter().all(|dll| is_system_dll(dll)),
            "windows/{arch}: only Windows' own DLLs: {dlls:?}"
        );
    }
}

fn windows_amd64_runs_under_wine(binaries: &[PathBuf; 2], dir: &Path, version: &str) {
    let wine = installed("wine", "wine wine64", false);
    wine_process_prng_dll(dir);
    let prefix = dir.join("wine");
    let wine_run = |binary: &Path, args: &[&str]| {
        run(
            Command::new(&wine)
                .arg(binary)
                .args(args)
                .env("WINEPREFIX", &prefix)
                .env("WINEDEBUG", "-all")
                .env_remove("DISPLAY"),
            None,
        )
    };
    let out = wine_run(&binaries[0], &["version", "--client", "-o", "json"]);
    let json: Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(
        json["client"]["version"], version,
        "windows/amd64 under wine"
    );
    let script = wine_run(&binaries[0], &["completion", "powershell"]);
    assert!(
        script.contains("Register-ArgumentCompleter") && script.contains("kubectl-tenantflux"),
        "{script}"
    );
    let out = wine_run(&binaries[1], &["stat"]);
    assert!(
        out.starts_with("status\t"),
        "windows/amd64 completion under wine: {out}"
    );
    // wine's server outlives the programs a few seconds: wait for it, then the prefix goes.
    run(
        Command::new(installed("wineserver", "wine", false))
            .arg("-w")
            .env("WINEPREFIX", &prefix),
        None,
    );
}

/// What `kubectl __complete tenantflux ARGS` offers (the protocol bash/zsh/fish completion of
/// `kubectl tenantflux ...` uses), and its directive.
fn kubectl_complete(kubeconfig: Option<&Path>, args: &[&str]) -> (Vec<String>, String) {
    let path = std::env::join_paths(std::iter::once(bin_dir()).chain(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    )))
    .expect("PATH");
    let mut command = Command::new(tool_path("KUBECTL"));
    command
        .args(["__complete", "tenantflux"])
        .args(args)
        .env("PATH", path)
        .env_remove("KUBECONFIG");
    if let Some(kubeconfig) = kubeconfig {
        command.env("KUBECONFIG", kubeconfig);
    }
    let out = run(&mut command, None);
    let mut lines: Vec<String> = out.lines().map(str::to_owned).collect();
    let directive = lines.pop().expect("a directive line");
    // Candidates may carry a description after a tab.
    let values = lines
        .into_iter()
        .map(|l| l.split('\t').next().unwrap_or("").to_owned())
        .collect();
    (values, directive)
}

#[test]
fn kubectl_completes_the_plugins_commands_flags_and_values() {
    let (commands, directive) = kubectl_complete(None, &[""]);
    for command in ["status", "version", "completion"] {
        assert!(
            commands.iter().any(|c| c == command),
            "{command} in {commands:?}"
        );
    }
    assert_eq!(directive, ":4", "no file names after `kubectl tenantflux`");
    assert_eq!(kubectl_complete(None, &["st"]).0, ["status", "stats"]);
    assert_eq!(kubectl_complete(None, &["sta"]).0, ["status", "stats"]);
    assert_eq!(kubectl_complete(None, &["statu"]).0, ["status"]);
    let (flags, _) = kubectl_complete(None, &["status", "--w"]);
    assert_eq!(flags, ["--watch"]);
    assert_eq!(
        kubectl_complete(None, &["status", "-o", ""]).0,
        ["table", "json", "yaml"]
    );
    assert_eq!(
        kubectl_complete(None, &["version", "--color", "n"]).0,
        ["never"]
    );
    assert_eq!(kubectl_complete(None, &["completion", "z"]).0, ["zsh"]);
}

#[test]
fn kubectl_completes_contexts_and_namespaces_from_the_cluster() {
    let cluster = TestCluster::shared();
    let kubeconfig = cluster.kubeconfig().to_str().expect("UTF-8 path");
    let (contexts, directive) = kubectl_complete(
        None,
        &["--kubeconfig", kubeconfig, "status", "--context", ""],
    );
    assert_eq!(contexts, [format!("kwok-{}", cluster.name())]);
    assert_eq!(directive, ":4");
    let (namespaces, directive) =
        kubectl_complete(Some(cluster.kubeconfig()), &["status", "-n", "kube-"]);
    for namespace in ["kube-system", "kube-public"] {
        assert!(
            namespaces.iter().any(|n| n == namespace),
            "{namespace} in {namespaces:?}"
        );
    }
    assert!(
        namespaces.iter().all(|n| n.starts_with("kube-")),
        "{namespaces:?}"
    );
    assert_eq!(directive, ":4");
}

#[test]
fn completion_scripts_are_printed_for_each_shell() {
    for shell in ["bash", "zsh", "fish"] {
        let script = run(
            Command::new(bin_dir().join("kubectl-tenantflux")).args(["completion", shell]),
            None,
        );
        assert!(script.contains("kubectl-tenantflux"), "{shell}: {script}");
    }
    let bash = run(
        Command::new(bin_dir().join("kubectl-tenantflux")).args(["completion", "bash"]),
        None,
    );
    // bash accepts the script (syntax check without running it). It goes in on stdin: the
    // script is larger than one command-line argument may be (128 KiB on Linux).
    let mut child = Command::new("bash")
        .arg("-n")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run bash -n");
    child
        .stdin
        .take()
        .expect("bash's stdin")
        .write_all(bash.as_bytes())
        .expect("write the script to bash");
    let checked = child.wait_with_output().expect("wait for bash -n");
    assert!(
        checked.status.success(),
        "{}",
        String::from_utf8_lossy(&checked.stderr)
    );
}
