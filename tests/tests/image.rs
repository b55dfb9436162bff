//! The agent image (deploy/image/build, buildah, offline) run by podman as the chart's pod
//! runs it, against a real control plane: the Pod the API server stored for the chart's
//! Deployment is translated to `podman run` the way a kubelet runs it (its user, read-only
//! root, dropped capabilities, no new privileges, limits, env with the downward API resolved,
//! the service-account volume with a TokenRequest token bound to that Pod, the policy-key
//! ConfigMap), so the agent takes the in-cluster configuration path every real install takes.
//! Then: /readyz, `status` and a policy push through the plugin (kwok's port-forward routed to
//! the container), and a clean stop on SIGTERM within the pod's grace period when `helm
//! upgrade` rotates the policy key: the Deployment recreates the pod, and the agent in the new
//! one refuses a policy signed with the old key and takes one signed with the new key. Before that, the
//! index the build wrote: exactly linux/amd64 and linux/arm64, and the arm64 image's agent run
//! under qemu-user; in both images the CA bundle the agent's TLS reads is the pinned one.
//!
//! The attack on the image's trust: a CA the build host trusts (a corporate or local one) would
//! be trusted by every agent if the build copied the host's bundle. Built with a host bundle
//! that holds a test CA, the image's bundle is still the pinned bytes.
//!
//! Both agents are built unoptimized (`TENANTFLUX_RELEASE_PROFILE=dev`): what is checked is how
//! the image is made and that its agent runs; a release build spends ten minutes more in LTO on
//! this suite's two cores and proves nothing more here.

use std::{
    collections::BTreeMap,
    net::{SocketAddr, TcpListener},
    os::unix::fs::PermissionsExt as _,
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
    time::{Duration, Instant},
};

use serde_json::Value;
use sha2::Digest as _;
use tenantflux_tests::{
    TestCluster, ensure_packaging_tools, installed, path, repo_root,
    tenant::{AGENT_NAMESPACE, example_without_defaults},
    tool_path, wait_for,
};

/// Runs `command`, failing the test unless it exits 0; its stdout.
fn run(command: &mut Command) -> String {
    let output = output_of(command);
    assert!(
        output.status.success(),
        "{command:?} failed ({}):\n{}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("UTF-8 output")
}

fn output_of(command: &mut Command) -> Output {
    command
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|err| panic!("running {command:?}: {err}"))
}

/// podman as this machine needs it: crun (podman's default) refuses the host's hybrid cgroups,
/// so runc with the cgroupfs manager, and no default RLIMIT_NOFILE (it cannot be set here).
struct Podman {
    conf: PathBuf,
}

impl Podman {
    fn new(dir: &Path) -> Podman {
        let conf = dir.join("containers.conf");
        std::fs::write(
            &conf,
            "[engine]\ncgroup_manager = \"cgroupfs\"\n\n[containers]\ndefault_ulimits = []\n",
        )
        .expect("containers.conf written");
        Podman { conf }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new("podman");
        command
            .env("CONTAINERS_CONF", &self.conf)
            .args(["--runtime", "runc"])
            .args(args);
        command
    }

    fn ok(&self, args: &[&str]) -> String {
        run(&mut self.command(args))
    }
}

/// The container a test started, removed when the test ends however it ends.
struct Container<'a> {
    podman: &'a Podman,
    name: String,
}

impl Container<'_> {
    fn logs(&self) -> String {
        let output = output_of(&mut self.podman.command(&["logs", &self.name]));
        format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    }

    fn state(&self) -> Value {
        let text = self.podman.ok(&["inspect", &self.name]);
        let all: Value = serde_json::from_str(&text).expect("podman inspect JSON");
        all[0]["State"].clone()
    }
}

impl Drop for Container<'_> {
    fn drop(&mut self) {
        let _ = output_of(&mut self.podman.command(&["rm", "--force", &self.name]));
    }
}

/// The index `image` names holds linux/amd64 and linux/arm64, nothing else; the arm64 image is
/// the chart's pod's (user, entrypoint) and its agent, taken out of the image, is an aarch64
/// program that runs under qemu-user. Returns what it printed for `--version`.
fn arm64_image_runs_under_qemu(podman: &Podman, image: &str, dir: &Path) -> String {
    let index: Value = serde_json::from_str(&run(
        Command::new("buildah").args(["manifest", "inspect", image])
    ))
    .expect("buildah manifest inspect JSON");
    let manifests = index["manifests"].as_array().expect("manifests");
    let mut platforms: Vec<String> = manifests
        .iter()
        .map(|m| {
            format!(
                "{}/{}",
                str_at(m, "/platform/os"),
                str_at(m, "/platform/architecture")
            )
        })
        .collect();
    platforms.sort();
    assert_eq!(platforms, ["linux/amd64", "linux/arm64"], "{index:#}");
    let arm64 = manifests
        .iter()
        .find(|m| m["platform"]["architecture"] == "arm64")
        .map(|m| str_at(m, "/digest"))
        .expect("the arm64 manifest");

    // podman resolves a local index to this machine's image whatever `--platform` says: the
    // arm64 image is named by its digest (podman warns that its platform is not this one's).
    let repository = match image.rsplit_once(':') {
        Some((repository, tag)) if !tag.contains('/') => repository,
        _ => image,
    };
    let reference = format!("{repository}@{arm64}");
    let inspected: Value =
        serde_json::from_str(&podman.ok(&["image", "inspect", &reference])).expect("JSON");
    assert_eq!(inspected[0]["Architecture"], "arm64", "{reference}");
    let config = &inspected[0]["Config"];
    assert_eq!(config["User"], "65532:65532", "{reference}: {config:#}");
    assert_eq!(
        config["Entrypoint"],
        serde_json::json!(["/tenantflux-agent"]),
        "{reference}"
    );

    let name = format!("tf-image-arm64-{}", std::process::id());
    podman.ok(&["create", "--pull=never", "--name", &name, &reference]);
    let agent = dir.join("tenantflux-agent-arm64");
    {
        let _container = Container {
            podman,
            name: name.clone(),
        };
        podman.ok(&["cp", &format!("{name}:/tenantflux-agent"), path(&agent)]);
        let bundle = dir.join("ca-certificates-arm64.crt");
        podman.ok(&["cp", &format!("{name}:{CA_BUNDLE}"), path(&bundle)]);
        is_the_pinned_ca_bundle(&bundle, &reference);
    }
    let bytes = std::fs::read(&agent).expect("the arm64 agent");
    assert_eq!(&bytes[..4], b"\x7fELF", "{reference}: an ELF file");
    const EM_AARCH64: u16 = 183;
    assert_eq!(
        u16::from_le_bytes([bytes[0x12], bytes[0x13]]),
        EM_AARCH64,
        "{reference}: e_machine"
    );
    let qemu = installed("qemu-aarch64", "qemu-user", false);
    let version = run(Command::new(qemu).arg(&agent).arg("--version"));
    let version = version.trim();
    assert_eq!(
        version,
        concat!("tenantflux-agent ", env!("CARGO_PKG_VERSION")),
        "{reference} under qemu"
    );
    version.to_owned()
}

/// Where the agent's TLS (rustls-platform-verifier, through rustls-native-certs and
/// openssl-probe) reads its roots on Linux when neither SSL_CERT_FILE nor SSL_CERT_DIR is set.
const CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// The sha256 deploy/image/build pins for the image's CA bundle.
fn pinned_ca_bundle_sha256() -> String {
    let script = std::fs::read_to_string(repo_root().join("deploy/image/build"))
        .expect("deploy/image/build");
    script
        .lines()
        .find_map(|line| line.strip_prefix("ca_bundle_sha256="))
        .expect("deploy/image/build pins ca_bundle_sha256=")
        .trim()
        .to_owned()
}

/// `bundle` (taken out of `what`) is the pinned CA bundle, byte for byte.
fn is_the_pinned_ca_bundle(bundle: &Path, what: &str) {
    let bytes = std::fs::read(bundle).expect("the CA bundle");
    assert_eq!(
        format!("{:x}", sha2::Sha256::digest(&bytes)),
        pinned_ca_bundle_sha256(),
        "{what}: {CA_BUNDLE} is not the pinned bundle"
    );
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free local port")
        .port()
}

fn str_at<'a>(value: &'a Value, pointer: &str) -> &'a str {
    value
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("no string at {pointer} in {value:#}"))
}

/// What a kubelet gives a container, as `podman run` arguments.
struct PodRun {
    args: Vec<String>,
    /// containerPort → the host port that stands for it (host networking shares the host's
    /// ports with everything else on this machine, which a pod's own network namespace does not).
    ports: BTreeMap<u16, u16>,
    grace: Duration,
    token: String,
}

/// `--memory` from a Kubernetes quantity such as `128Mi`.
fn memory_limit(quantity: &str) -> String {
    for (suffix, unit) in [("Ki", "k"), ("Mi", "m"), ("Gi", "g")] {
        if let Some(number) = quantity.strip_suffix(suffix) {
            return format!("{number}{unit}");
        }
    }
    panic!("memory limit {quantity:?}: the image test knows Ki, Mi and Gi");
}

/// `--cpus` from a Kubernetes quantity such as `500m` or `2`.
fn cpu_limit(quantity: &str) -> String {
    match quantity.strip_suffix('m') {
        Some(milli) => {
            let milli: u32 = milli.parse().expect("millicores");
            format!("{}.{:03}", milli / 1000, milli % 1000)
        }
        None => quantity.to_owned(),
    }
}

/// The downward API fields the chart uses.
fn field_of(pod: &Value, field_path: &str) -> String {
    match field_path {
        "metadata.namespace" => str_at(pod, "/metadata/namespace").to_owned(),
        "metadata.name" => str_at(pod, "/metadata/name").to_owned(),
        other => panic!("fieldRef {other}: the image test resolves metadata.namespace and .name"),
    }
}

/// `value` with its port replaced when it is a socket address on one of the container's ports.
fn on_host_port(value: &str, ports: &BTreeMap<u16, u16>) -> String {
    match value.parse::<SocketAddr>() {
        Ok(mut address) if ports.contains_key(&address.port()) => {
            address.set_port(ports[&address.port()]);
            address.to_string()
        }
        _ => value.to_owned(),
    }
}

fn write_file(file: &Path, text: &str, mode: u32) {
    std::fs::create_dir_all(file.parent().expect("a parent")).expect("volume directory");
    std::fs::write(file, text).expect("volume file written");
    std::fs::set_permissions(file, std::fs::Permissions::from_mode(mode)).expect("file mode");
}

/// Translates the agent Pod the API server stored into `podman run` arguments, materializing
/// its volumes under `dir` as a kubelet does: ConfigMap files 0644, the projected token 0600
/// owned by the container's user (the pod sets runAsUser and no fsGroup).
fn pod_run(cluster: &TestCluster, pod: &Value, dir: &Path, server: &str) -> PodRun {
    let spec = &pod["spec"];
    let containers = spec["containers"].as_array().expect("containers");
    assert_eq!(containers.len(), 1, "one container: {spec:#}");
    let container = &containers[0];
    let pod_security = &spec["securityContext"];
    let security = &container["securityContext"];
    let setting = |key: &str| {
        let own = &security[key];
        if own.is_null() {
            pod_security[key].clone()
        } else {
            own.clone()
        }
    };
    let known = [
        "runAsUser",
        "runAsGroup",
        "runAsNonRoot",
        "readOnlyRootFilesystem",
        "allowPrivilegeEscalation",
        "capabilities",
        "seccompProfile",
    ];
    for context in [pod_security, security] {
        for key in context.as_object().into_iter().flat_map(|o| o.keys()) {
            assert!(
                known.contains(&key.as_str()),
                "securityContext.{key}: the image test does not translate it yet"
            );
        }
    }
    let user = setting("runAsUser").as_u64().expect("runAsUser is set");
    let group = setting("runAsGroup").as_u64().unwrap_or(user);
    if setting("runAsNonRoot") == Value::Bool(true) {
        assert_ne!(user, 0, "runAsNonRoot with runAsUser 0");
    }
    let mut args: Vec<String> = vec![format!("--user={user}:{group}")];
    if setting("readOnlyRootFilesystem") == Value::Bool(true) {
        // A pod's root filesystem gets no tmpfs mounts of podman's own either.
        args.extend(["--read-only".into(), "--read-only-tmpfs=false".into()]);
    }
    if setting("allowPrivilegeEscalation") == Value::Bool(false) {
        args.push("--security-opt=no-new-privileges".into());
    }
    let capabilities = setting("capabilities");
    for (key, flag) in [("drop", "--cap-drop"), ("add", "--cap-add")] {
        for capability in capabilities[key].as_array().into_iter().flatten() {
            args.push(format!("{flag}={}", capability.as_str().expect("a name")));
        }
    }
    match setting("seccompProfile")["type"].as_str() {
        // podman's default profile is the runtime's default.
        None | Some("RuntimeDefault") => {}
        Some("Unconfined") => args.push("--security-opt=seccomp=unconfined".into()),
        Some(other) => panic!("seccompProfile {other}: the image test does not translate it"),
    }
    if let Some(memory) = container.pointer("/resources/limits/memory") {
        args.push(format!(
            "--memory={}",
            memory_limit(memory.as_str().expect("quantity"))
        ));
    }
    if let Some(cpu) = container.pointer("/resources/limits/cpu") {
        args.push(format!(
            "--cpus={}",
            cpu_limit(cpu.as_str().expect("quantity"))
        ));
    }

    let ports: BTreeMap<u16, u16> = container["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|port| {
            let number = port["containerPort"].as_u64().expect("containerPort");
            (u16::try_from(number).expect("a port"), free_port())
        })
        .collect();

    // The kubelet's service variables; nothing routes the `kubernetes` Service's ClusterIP on
    // this machine, so they name the test API server itself.
    let server = server.strip_prefix("https://").expect("an https server");
    let (host, port) = server.rsplit_once(':').expect("HOST:PORT");
    args.push(format!("--env=KUBERNETES_SERVICE_HOST={host}"));
    args.push(format!("--env=KUBERNETES_SERVICE_PORT={port}"));
    for env in container["env"].as_array().into_iter().flatten() {
        let name = str_at(env, "/name");
        let value = match (
            env.get("value"),
            env.pointer("/valueFrom/fieldRef/fieldPath"),
        ) {
            (Some(value), _) => on_host_port(value.as_str().expect("a string"), &ports),
            (None, Some(field)) => field_of(pod, field.as_str().expect("a string")),
            _ => panic!("env {name}: the image test resolves value and fieldRef: {env:#}"),
        };
        args.push(format!("--env={name}={value}"));
    }

    let volumes: BTreeMap<&str, &Value> = spec["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|volume| (str_at(volume, "/name"), volume))
        .collect();
    let namespace = str_at(pod, "/metadata/namespace");
    let config_map = |name: &str| -> Value {
        let text = cluster
            .kubectl_ok(&["-n", namespace, "get", "configmap", name, "-o", "json"])
            .unwrap_or_else(|err| panic!("ConfigMap {namespace}/{name}: {err}"));
        serde_json::from_str(&text).expect("JSON")
    };
    let write_config_map = |source: &Value, root: &Path| {
        let data = config_map(str_at(source, "/name"));
        let items: Vec<(String, String)> = match source["items"].as_array() {
            Some(items) => items
                .iter()
                .map(|item| (str_at(item, "/key").into(), str_at(item, "/path").into()))
                .collect(),
            None => data["data"]
                .as_object()
                .expect("data")
                .keys()
                .map(|key| (key.clone(), key.clone()))
                .collect(),
        };
        for (key, file) in items {
            write_file(
                &root.join(file),
                data["data"][&key].as_str().expect("a key"),
                0o644,
            );
        }
    };
    let mut token = String::new();
    for mount in container["volumeMounts"].as_array().into_iter().flatten() {
        let name = str_at(mount, "/name");
        let volume = volumes[name];
        let root = dir.join("volumes").join(name);
        std::fs::create_dir_all(&root).expect("volume directory");
        if let Some(source) = volume.get("configMap") {
            write_config_map(source, &root);
        } else if let Some(projected) = volume.pointer("/projected/sources") {
            for source in projected.as_array().expect("sources") {
                if let Some(request) = source.get("serviceAccountToken") {
                    let seconds = request["expirationSeconds"].as_u64().unwrap_or(3607);
                    let mut create = vec![
                        "-n".to_owned(),
                        namespace.to_owned(),
                        "create".into(),
                        "token".into(),
                        str_at(spec, "/serviceAccountName").into(),
                        format!("--duration={seconds}s"),
                        "--bound-object-kind=Pod".into(),
                        format!("--bound-object-name={}", str_at(pod, "/metadata/name")),
                        format!("--bound-object-uid={}", str_at(pod, "/metadata/uid")),
                    ];
                    if let Some(audience) = request["audience"].as_str() {
                        create.push(format!("--audience={audience}"));
                    }
                    let create: Vec<&str> = create.iter().map(String::as_str).collect();
                    token = cluster
                        .kubectl_ok(&create)
                        .expect("a TokenRequest token of the agent's ServiceAccount")
                        .trim()
                        .to_owned();
                    let file = root.join(str_at(request, "/path"));
                    write_file(&file, &token, 0o600);
                    std::os::unix::fs::chown(&file, Some(user as u32), Some(group as u32))
                        .expect("the token handed to the container's user (run as root)");
                } else if let Some(config) = source.get("configMap") {
                    write_config_map(config, &root);
                } else if let Some(downward) = source.pointer("/downwardAPI/items") {
                    for item in downward.as_array().expect("items") {
                        let value = field_of(pod, str_at(item, "/fieldRef/fieldPath"));
                        write_file(&root.join(str_at(item, "/path")), &value, 0o644);
                    }
                } else {
                    panic!("projected source {source}: the image test does not know it");
                }
            }
        } else {
            panic!("volume {volume}: the image test knows configMap and projected volumes");
        }
        // The kubelet mounts ConfigMap and projected volumes read-only whatever the mount says.
        args.push(format!(
            "--volume={}:{}:ro",
            path(&root),
            str_at(mount, "/mountPath")
        ));
    }
    assert!(
        !token.is_empty(),
        "the pod has no service-account token volume: {spec:#}"
    );
    for arg in container["args"].as_array().into_iter().flatten() {
        args.push(on_host_port(arg.as_str().expect("a string"), &ports));
    }
    let grace = spec["terminationGracePeriodSeconds"].as_u64().unwrap_or(30);
    PodRun {
        args,
        ports,
        grace: Duration::from_secs(grace),
        token,
    }
}

/// helm as a platform runs it against `cluster`, with a configuration, cache and data of the
/// test's own under `home` (no repository or registry login of whoever runs the test).
fn helm(cluster: &TestCluster, home: &Path, args: &[&str]) -> String {
    run(Command::new(tool_path("HELM"))
        .args(args)
        .arg("--kubeconfig")
        .arg(cluster.kubeconfig())
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_DATA_HOME", home.join("data")))
}

/// The chart installed with `helm install` as the README has it (release in kube-system, the
/// agent in its own namespace) and a policy key; returns the agent's Running Pod as stored.
async fn install_chart(cluster: &TestCluster, public_key: &Path, helm_home: &Path) -> Value {
    ensure_packaging_tools().expect("tests/env/cluster build-tools");
    let chart = repo_root().join("deploy/helm/tenantflux-agent");
    helm(
        cluster,
        helm_home,
        &[
            "install",
            RELEASE,
            path(&chart),
            "-n",
            "kube-system",
            "--set-file",
            &format!("policy.publicKey={}", path(public_key)),
        ],
    );
    // The controller-manager publishes the cluster's CA into every namespace.
    wait_for(
        "ConfigMap kube-root-ca.crt in the agent's namespace",
        Duration::from_secs(60),
        || async {
            cluster
                .kubectl_ok(&[
                    "-n",
                    AGENT_NAMESPACE,
                    "get",
                    "configmap",
                    "kube-root-ca.crt",
                ])
                .ok()
        },
    )
    .await
    .expect("kube-root-ca.crt");
    running_pod(cluster, None).await
}

/// The agent's Running Pod as stored, once there is one whose UID is not `other_than`.
async fn running_pod(cluster: &TestCluster, other_than: Option<&str>) -> Value {
    wait_for(
        "the agent's Pod Running",
        Duration::from_secs(120),
        || async {
            let text = cluster
                .kubectl_ok(&[
                    "-n",
                    AGENT_NAMESPACE,
                    "get",
                    "pods",
                    "-l",
                    "app.kubernetes.io/name=tenantflux-agent",
                    "--field-selector=status.phase=Running",
                    "-o",
                    "json",
                ])
                .ok()?;
            let list: Value = serde_json::from_str(&text).ok()?;
            list["items"]
                .as_array()?
                .iter()
                .find(|pod| pod.pointer("/metadata/uid").and_then(Value::as_str) != other_than)
                .cloned()
        },
    )
    .await
    .expect("agent Pod")
}

fn plugin_ok(cluster: &TestCluster, kubeconfig: Option<&Path>, args: &[&str]) -> String {
    let output = cluster
        .kubectl_tenantflux(kubeconfig, args)
        .unwrap_or_else(|err| panic!("kubectl tenantflux {args:?}: {err}"));
    assert!(
        output.status.success(),
        "kubectl tenantflux {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn status_json(cluster: &TestCluster) -> Option<Value> {
    let output = cluster
        .kubectl_tenantflux(None, &["status", "-o", "json"])
        .ok()?;
    if !output.status.success() {
        return None;
    }
    serde_json::from_slice(&output.stdout).ok()
}

#[tokio::test]
async fn agent_image_runs_as_the_charts_pod_against_the_api_server() {
    let dir = tempfile::tempdir().expect("temporary directory");

    let started = Instant::now();
    let build = run(Command::new(repo_root().join("deploy/image/build"))
        .env("TENANTFLUX_RELEASE_PROFILE", "dev")
        .stderr(Stdio::inherit()));
    let image = build.lines().last().expect("the image reference").trim();
    let build_time = started.elapsed();
    let podman = Podman::new(dir.path());
    let inspected: Value =
        serde_json::from_str(&podman.ok(&["image", "inspect", image])).expect("JSON");
    let config = &inspected[0]["Config"];
    assert_eq!(config["User"], "65532:65532", "{config:#}");
    assert_eq!(
        config["Entrypoint"],
        serde_json::json!(["/tenantflux-agent"])
    );
    // Nothing in the image replaces the bundle the agent reads (nor in the chart's pod, below).
    let env = config["Env"].as_array().into_iter().flatten();
    for variable in env.filter_map(Value::as_str) {
        assert!(!variable.starts_with("SSL_CERT_"), "{variable}");
    }
    let name = format!("tf-image-amd64-{}", std::process::id());
    podman.ok(&["create", "--pull=never", "--name", &name, image]);
    {
        let _container = Container {
            podman: &podman,
            name: name.clone(),
        };
        let bundle = dir.path().join("ca-certificates.crt");
        podman.ok(&["cp", &format!("{name}:{CA_BUNDLE}"), path(&bundle)]);
        is_the_pinned_ca_bundle(&bundle, image);
    }
    let size = inspected[0]["Size"].as_u64().expect("image size");
    println!(
        "image {image}: {:.1} MiB, built in {:.0?}",
        size as f64 / (1024.0 * 1024.0),
        build_time
    );
    let checking = Instant::now();
    let version = arm64_image_runs_under_qemu(&podman, image, dir.path());
    println!(
        "arm64 agent under qemu: {version} (index and arm64 image checked in {:.1?})",
        checking.elapsed()
    );

    let cluster = TestCluster::start(&format!("tf-image-{}", std::process::id()))
        .expect("starting the cluster");
    let keys = dir.path().join("keys");
    plugin_ok(&cluster, None, &["policy", "keygen", "--out", path(&keys)]);
    let helm_home = dir.path().join("helm");
    let pod = install_chart(&cluster, &keys.join("ed25519.pub"), &helm_home).await;
    assert_eq!(
        str_at(&pod, "/spec/containers/0/image"),
        image,
        "deploy/image/build's default reference is the chart's default image"
    );
    let env = pod["spec"]["containers"][0]["env"].as_array().into_iter();
    for variable in env.flatten() {
        assert!(
            !str_at(variable, "/name").starts_with("SSL_CERT_"),
            "{variable}"
        );
    }
    let server = cluster
        .kubectl_ok(&[
            "config",
            "view",
            "--minify",
            "-o",
            "jsonpath={.clusters[0].cluster.server}",
        ])
        .expect("the API server's address");

    let launched = Instant::now();
    let first = AgentPod::run(
        &podman,
        &cluster,
        &pod,
        &dir.path().join("first"),
        &server,
        image,
    );
    let ready = first.ready(&cluster).await;
    println!(
        "agent container ready {:.2?} after podman run",
        ready - launched
    );
    let status = status_json(&cluster).expect("status");
    assert_eq!(status["agent"]["namespace"], AGENT_NAMESPACE, "{status:#}");
    // Asked of the API server by the agent, through its in-cluster configuration.
    assert_eq!(
        status["agent"]["kubernetesVersion"], "v1.36.3",
        "{status:#}"
    );
    assert_eq!(
        status["agent"]["version"],
        concat!("v", env!("CARGO_PKG_VERSION")),
        "{status:#}"
    );

    // A policy push: verified with the key from the chart's ConfigMap, stored and enforced by
    // the agent with its own ServiceAccount's RBAC.
    let platform = cluster
        .policy_pusher_kubeconfig()
        .expect("platform account");
    let push = |generation: u32, key: &Path| {
        let unsigned = dir.path().join(format!("policy-{generation}.yaml"));
        let text = example_without_defaults();
        assert!(text.contains("  generation: 7\n"), "{text}");
        let text = text.replace(
            "  generation: 7\n",
            &format!("  generation: {generation}\n"),
        );
        std::fs::write(&unsigned, text).expect("policy written");
        let signed = dir.path().join(format!("signed-{generation}.yaml"));
        plugin_ok(
            &cluster,
            None,
            &[
                "policy",
                "sign",
                "-f",
                path(&unsigned),
                "--key",
                path(key),
                "--out",
                path(&signed),
            ],
        );
        cluster
            .kubectl_tenantflux(Some(&platform), &["policy", "push", "-f", path(&signed)])
            .expect("kubectl tenantflux policy push")
    };
    let pushed = push(7, &keys.join("ed25519.key"));
    assert!(
        pushed.status.success(),
        "{}",
        String::from_utf8_lossy(&pushed.stderr)
    );
    enforced_generation(&cluster, "7", &first).await;

    // The platform rotates the key with `helm upgrade`: the pod template's checksum of the key
    // changes, the Deployment recreates its pod, and the agent in it trusts the new key only.
    let rotated_keys = dir.path().join("rotated-keys");
    plugin_ok(
        &cluster,
        None,
        &["policy", "keygen", "--out", path(&rotated_keys)],
    );
    let chart = repo_root().join("deploy/helm/tenantflux-agent");
    helm(
        &cluster,
        &helm_home,
        &[
            "upgrade",
            RELEASE,
            path(&chart),
            "-n",
            "kube-system",
            "--reuse-values",
            "--set-file",
            &format!(
                "policy.publicKey={}",
                path(&rotated_keys.join("ed25519.pub"))
            ),
        ],
    );
    let rotated = running_pod(&cluster, Some(str_at(&pod, "/metadata/uid"))).await;
    // Recreate: the old pod is gone before the new one exists, and its kubelet stopped its
    // container: SIGTERM, then SIGKILL once the grace period is over.
    first.stops_cleanly();
    let second = AgentPod::run(
        &podman,
        &cluster,
        &rotated,
        &dir.path().join("second"),
        &server,
        image,
    );
    second.ready(&cluster).await;
    let refused = push(8, &keys.join("ed25519.key"));
    assert_eq!(
        refused.status.code(),
        Some(6),
        "a policy signed with the replaced key: {}",
        String::from_utf8_lossy(&refused.stderr)
    );
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("unknown key"), "{said}");
    let accepted = push(8, &rotated_keys.join("ed25519.key"));
    assert!(
        accepted.status.success(),
        "a policy signed with the new key: {}\n{}",
        String::from_utf8_lossy(&accepted.stderr),
        second.container.logs()
    );
    enforced_generation(&cluster, "8", &second).await;
    second.stops_cleanly();
}

/// The chart's release name in the image test.
const RELEASE: &str = "tenantflux-agent";

/// The agent's Pod run as its kubelet would, by podman.
struct AgentPod<'a> {
    container: Container<'a>,
    kubelet: PodRun,
}

impl<'a> AgentPod<'a> {
    fn run(
        podman: &'a Podman,
        cluster: &TestCluster,
        pod: &Value,
        dir: &Path,
        server: &str,
        image: &str,
    ) -> AgentPod<'a> {
        let kubelet = pod_run(cluster, pod, dir, server);
        let name = format!(
            "tf-image-{}-{}",
            str_at(pod, "/metadata/name"),
            std::process::id()
        );
        let grace = kubelet.grace.as_secs().to_string();
        let mut run_args = vec![
            "run",
            "--detach",
            "--pull=never",
            "--name",
            &name,
            "--network=host",
            "--log-driver=k8s-file",
            "--stop-timeout",
            &grace,
        ];
        run_args.extend(kubelet.args.iter().map(String::as_str));
        run_args.push(image);
        podman.ok(&run_args);
        AgentPod {
            container: Container { podman, name },
            kubelet,
        }
    }

    /// Waits for the container's /readyz, routes port-forwards to its pod to the container's
    /// ports (kwok) and waits for `status` through one; when it was ready.
    async fn ready(&self, cluster: &TestCluster) -> Instant {
        let container = &self.container;
        let admin_port = self.kubelet.ports[&8080];
        let readiness = format!("http://127.0.0.1:{admin_port}/readyz");
        let ready = wait_for("the container's /readyz", Duration::from_secs(60), || {
            let state = container.state();
            assert_eq!(
                state["Running"],
                true,
                "the agent container stopped: {state:#}\n{}",
                container.logs()
            );
            let answered = output_of(Command::new("curl").args(["-fsS", &readiness]))
                .status
                .success();
            async move { answered.then(Instant::now) }
        })
        .await
        .unwrap_or_else(|err| panic!("{err}\n{}", container.logs()));
        let forwards: String = self
            .kubelet
            .ports
            .iter()
            .map(|(container_port, host_port)| {
                format!(
                    "  - ports: [{container_port}]\n    target: {{address: 127.0.0.1, port: {host_port}}}\n"
                )
            })
            .collect();
        cluster
            .apply_yaml(&format!(
                "apiVersion: kwok.x-k8s.io/v1alpha1\nkind: ClusterPortForward\n\
                 metadata: {{name: tenantflux-agent}}\n\
                 spec:\n  selector: {{matchNamespaces: [{AGENT_NAMESPACE}]}}\n  forwards:\n{forwards}"
            ))
            .expect("ClusterPortForward");
        // Only this pod's container runs (an earlier one was stopped before it started), so
        // whatever answers is this agent.
        wait_for(
            "kubectl tenantflux status through the port-forward",
            Duration::from_secs(60),
            || async { status_json(cluster) },
        )
        .await
        .unwrap_or_else(|err| panic!("{err}\n{}", container.logs()));
        ready
    }

    /// Stops the container as its kubelet does (SIGTERM, SIGKILL after the grace period): the
    /// agent exits 0 within the grace period, and its log holds no token.
    fn stops_cleanly(&self) {
        let container = &self.container;
        let grace = self.kubelet.grace.as_secs().to_string();
        let stopping = Instant::now();
        container
            .podman
            .ok(&["stop", "--time", &grace, &container.name]);
        let stopped = stopping.elapsed();
        let state = container.state();
        let logs = container.logs();
        assert_eq!(
            state["ExitCode"], 0,
            "the agent exits 0 on SIGTERM, not killed: {state:#}\n{logs}"
        );
        assert!(
            stopped < self.kubelet.grace,
            "stopped in {stopped:?}, the grace period is {:?}",
            self.kubelet.grace
        );
        assert!(logs.contains("shutting down"), "{logs}");
        assert!(
            !logs.contains(&self.kubelet.token),
            "the service-account token is in the agent's log"
        );
        println!("agent container stopped on SIGTERM in {stopped:.2?}");
    }
}

/// Waits until the API server enforces policy generation `generation` (the admission binding
/// the agent writes carries it) and `status` reports it.
async fn enforced_generation(cluster: &TestCluster, generation: &str, agent: &AgentPod<'_>) {
    wait_for(
        &format!("the admission policy at generation {generation}"),
        Duration::from_secs(60),
        || {
            let current = cluster.kubectl_ok(&[
                "get",
                "validatingadmissionpolicybinding",
                "tenantflux-policy",
                "-o",
                "jsonpath={.metadata.annotations.tenantflux\\.io/policy-generation}",
                "--ignore-not-found",
            ]);
            async move { current.ok().filter(|g| g == generation) }
        },
    )
    .await
    .unwrap_or_else(|err| panic!("{err}\n{}", agent.container.logs()));
    let status = status_json(cluster).expect("status after the push");
    assert_eq!(
        status["policy"]["generation"].to_string(),
        generation,
        "{status:#}"
    );
}

/// The build host trusts one CA more than Debian's bundle (here a test CA, bind-mounted over the
/// host's /etc/ssl/certs/ca-certificates.crt in a mount namespace of the build's own, so the
/// machine's bundle is untouched): the build context deploy/image/build stages, which the image
/// is built from (and another builder's `docker build` too), holds the pinned bundle, without
/// that CA.
#[test]
fn the_images_ca_bundle_is_the_pinned_one_whatever_the_build_host_trusts() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let openssl = installed("openssl", "openssl", false);
    let key = dir.path().join("test-ca.key");
    let ca = dir.path().join("test-ca.pem");
    run(Command::new(openssl).args([
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-days",
        "1",
        "-subj",
        "/CN=tenantflux test: a CA only the build host trusts",
        "-keyout",
        path(&key),
        "-out",
        path(&ca),
    ]));
    let ca_pem = std::fs::read_to_string(&ca).expect("the test CA");
    let ca_body: String = ca_pem.lines().filter(|l| !l.starts_with("-----")).collect();
    let host_bundle = dir.path().join("host-bundle.crt");
    let mut bundle = std::fs::read_to_string(CA_BUNDLE).unwrap_or_default();
    bundle.push_str(&ca_pem);
    std::fs::write(&host_bundle, bundle).expect("the host bundle");

    let context = dir.path().join("context");
    let mut unshare = Command::new("unshare");
    unshare.arg("--mount");
    if !rustix::process::geteuid().is_root() {
        unshare.arg("--map-root-user");
    }
    // The bind mount is checked to hold the test CA before the build starts.
    let staged = run(unshare
        .args([
            "sh",
            "-c",
            "mount --bind \"$1\" \"$2\" && grep -qF \"$3\" \"$2\" && exec \"$4\" --context \"$5\"",
            "sh",
            path(&host_bundle),
            CA_BUNDLE,
            ca_pem.lines().nth(1).expect("a PEM body"),
        ])
        .arg(repo_root().join("deploy/image/build"))
        .arg(&context)
        .env("TENANTFLUX_RELEASE_PROFILE", "dev")
        .stderr(Stdio::inherit()));
    assert_eq!(staged.trim(), path(&context));
    let image_bundle = context.join(CA_BUNDLE.trim_start_matches('/'));
    is_the_pinned_ca_bundle(&image_bundle, "the staged build context");
    let staged_bundle: String = std::fs::read_to_string(&image_bundle)
        .expect("the staged bundle")
        .lines()
        .collect();
    assert!(
        !staged_bundle.contains(&ca_body),
        "the build host's CA is in the image's bundle"
    );
}
