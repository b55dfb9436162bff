//! Attacks on the agent's API, tried on the real control plane (SECURITY.md lists what each
//! test stands for):
//! - a megabyte of input that the agent's answer would multiply, an OCI artifact whose
//!   layer is larger than the agent's memory, and a registry whose manifest never ends;
//! - a watch kept open after its caller lost the right to it (finding 7);
//! - client-certificate users, who now prove who they are with a CertificateSigningRequest,
//!   and a caller who names someone else's CSR (finding 8);
//! - identity CSRs kept past their age, which the agent denies (callers may not delete any),
//!   and service-account tokens minted to outlive a revocation.
//!
//! They leave a policy and its admission policy behind, so they run on a cluster of their own
//! (not the suite's shared one), one at a time, since they restart its agent.

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use serde_json::Value;
use tenantflux_proto::v1::{
    ApplyInstanceRequest, GetObjectRequest, ObjectRef, ResumeRequest, WatchObjectsRequest,
    WatchStatusRequest, agent_client::AgentClient, instance_client::InstanceClient, object_event,
    workloads_client::WorkloadsClient,
};
use tenantflux_tests::{
    TestCluster, json, operator_bundle, path, push_bundle,
    tenant::{AGENT_NAMESPACE, APPS, Tenant, compliant_instance},
    tool_path, wait_for,
};
use tonic::{Code, Request, transport::Channel};

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// This binary's own cluster, stopped by its reaper when the process exits.
fn own_cluster() -> &'static TestCluster {
    static CLUSTER: std::sync::OnceLock<TestCluster> = std::sync::OnceLock::new();
    CLUSTER.get_or_init(|| {
        TestCluster::start(&format!("sec-api-{}", std::process::id())).expect("own cluster")
    })
}

const TIMEOUT: Duration = Duration::from_secs(120);

fn with_token<T>(message: T, token: &str) -> Request<T> {
    let mut request = Request::new(message);
    request.metadata_mut().insert(
        "authorization",
        format!("Bearer {token}").parse().expect("ASCII token"),
    );
    request
}

async fn channel(cluster: &TestCluster) -> Channel {
    tonic::transport::Endpoint::from_shared(cluster.agent_grpc_address())
        .unwrap()
        .timeout(Duration::from_secs(60))
        .connect()
        .await
        .expect("connecting to the agent")
}

/// The agent process's resident memory, in KiB.
fn agent_rss_kib(cluster: &TestCluster) -> u64 {
    let pid = cluster.agent_pid().expect("the agent runs");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// The FluxInstance as JSON text with `components` listed as given, padded to just under
/// the agent's 1 MiB request limit.
fn instance_with_components(component: impl Fn(usize) -> String) -> String {
    let mut instance = compliant_instance();
    let budget = tenantflux_agent::server::MAX_REQUEST_BYTES - 4096;
    let mut components = Vec::new();
    let mut size = instance.to_string().len();
    for i in 0.. {
        let name = component(i);
        size += name.len() + 3;
        if size > budget {
            break;
        }
        components.push(Value::String(name));
    }
    instance["spec"]["components"] = Value::Array(components);
    instance.to_string()
}

#[tokio::test]
async fn a_megabyte_of_components_is_refused_with_a_bounded_message() {
    let _serial = SERIAL.lock().await;
    let cluster = own_cluster();
    let tenant = Tenant::prepare(cluster, &[]).await;
    let token = tenant.admin_token();
    let channel = channel(cluster).await;
    let before = tenant.fingerprint().expect("fingerprint");
    let rss_before = agent_rss_kib(cluster);

    // A quarter of a million one-letter components is more nodes than the YAML parser takes
    // in one document (its budget, 250,000): refused before any policy is evaluated.
    let too_many_nodes = instance_with_components(|_| "a".to_owned());
    let err = InstanceClient::new(channel.clone())
        .apply_instance(with_token(
            ApplyInstanceRequest {
                manifest: too_many_nodes,
                dry_run: false,
            },
            &token,
        ))
        .await
        .expect_err("a manifest over the parser's budget is refused");
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(
        err.message().contains("exceeds the parser's limits") && err.message().len() < 1024,
        "{}",
        err.message()
    );

    // Two hundred thousand of the same unknown component, then as many distinct ones as fit,
    // then a known one repeated: each was once a sentence of the policy's answer of its own
    // (70 bytes of answer per 5 bytes asked), and without a policy flux-operator stored them.
    // The agent refuses the first offender with the count, before the policy or the API server.
    let repeated = instance_with_components(|_| "aa".to_owned());
    let distinct = instance_with_components(|i| format!("c{i}"));
    let known_repeated = instance_with_components(|_| "source-controller".to_owned());
    for (case, manifest, wanted) in [
        (
            "repeated",
            repeated,
            "spec.components[0] \"aa\" is not a Flux component (",
        ),
        (
            "distinct",
            distinct,
            "spec.components[0] \"c0\" is not a Flux component (",
        ),
        (
            "known repeated",
            known_repeated,
            "spec.components names \"source-controller\" ",
        ),
    ] {
        assert!(
            manifest.len() > 1_000_000,
            "{case}: {} bytes",
            manifest.len()
        );
        let err = InstanceClient::new(channel.clone())
            .apply_instance(with_token(
                ApplyInstanceRequest {
                    manifest,
                    dry_run: false,
                },
                &token,
            ))
            .await
            .expect_err("unknown or repeated components are refused");
        assert_eq!(err.code(), Code::InvalidArgument, "{case}: {err:?}");
        let message = err.message();
        assert!(message.starts_with(wanted), "{case}: {message}");
        assert!(message.contains("nothing was changed"), "{case}: {message}");
        assert!(
            message.len() < 8 * 1024,
            "{case}: a {} byte message",
            message.len()
        );
        assert!(message.lines().count() <= 2, "{case}: {message}");
    }

    assert_eq!(tenant.fingerprint().expect("fingerprint"), before);
    // Before the bound the two answers were about 70 MB of text each; what remains is the
    // parse of the request.
    let rss_after = agent_rss_kib(cluster);
    assert!(
        rss_after < rss_before + 64 * 1024,
        "agent RSS grew from {rss_before} KiB to {rss_after} KiB"
    );
    // And the agent still answers.
    let output = tenant.plugin(&["status", "-o", "json"]);
    assert!(output.status.success(), "{output:?}");
}

/// A flux-operator install.yaml followed by a comment of random text, so the artifact's
/// (gzipped) layer is larger than the agent downloads.
fn oversized_bundle(dir: &Path, version: &str) -> std::path::PathBuf {
    let bundle = operator_bundle(version).expect("bundle");
    let padded = dir.join("install.yaml");
    let mut text = std::fs::read_to_string(&bundle).expect("bundle");
    let random = std::process::Command::new("sh")
        .args(["-c", "head -c 36000000 /dev/urandom | base64 -w 96"])
        .output()
        .expect("random text");
    assert!(random.status.success());
    for line in String::from_utf8(random.stdout).unwrap().lines() {
        text.push_str("# ");
        text.push_str(line);
        text.push('\n');
    }
    std::fs::write(&padded, text).expect("writing the padded bundle");
    padded
}

/// Restarts the agent installing flux-operator `version` from the plain-HTTP OCI `source` and
/// waits until the install is `failed`; its reason.
async fn failed_install(cluster: &TestCluster, source: &str, version: &str, what: &str) -> String {
    cluster
        .restart_agent_with(&[
            ("TENANTFLUX_OPERATOR_BUNDLE", source),
            ("TENANTFLUX_OPERATOR_VERSION", version),
            ("TENANTFLUX_OPERATOR_BUNDLE_PLAIN_HTTP", "true"),
        ])
        .expect("agent");
    let mut last = Value::Null;
    let failed = wait_for(what, TIMEOUT, || {
        let output = cluster.kubectl_tenantflux(None, &["status", "-o", "json"]);
        let operator = output
            .ok()
            .filter(|o| o.status.success())
            .map(|o| json(&o)["operator"].clone());
        if let Some(o) = &operator {
            last = o.clone();
        }
        let found = operator.filter(|o| o["phase"] == "failed");
        async move { found }
    })
    .await
    .unwrap_or_else(|err| panic!("{err}; last operator status: {last:#}"));
    failed["reason"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test]
async fn an_oversized_oci_layer_is_refused_before_it_is_downloaded() {
    let _serial = SERIAL.lock().await;
    let cluster = own_cluster();
    cluster.ensure_flux_operator().expect("flux-operator");
    let version = tenantflux_core::releases::OPERATOR_VERSION.to_owned();
    let registry = cluster.registry().expect("registry");
    let dir = tempfile::tempdir().expect("temp dir");
    let reference = format!("{registry}/controlplaneio-fluxcd/flux-operator-manifests:{version}");
    let digest = push_bundle(&reference, &oversized_bundle(dir.path(), &version)).expect("push");
    let operator_before = cluster
        .kubectl_ok(&[
            "-n",
            "flux-system",
            "get",
            "deployment",
            "flux-operator",
            "-o",
            "jsonpath={.metadata.generation}/{.spec.template.spec.containers[0].image}",
        ])
        .expect("the flux-operator Deployment");
    let registry_log = cluster.dir().join("registry.log");
    let log_from = std::fs::metadata(&registry_log).map_or(0, |m| m.len()) as usize;

    let source = format!("oci://{reference}@{digest}");
    let reason = failed_install(
        cluster,
        &source,
        &version,
        "the bundle refused for its size",
    )
    .await;
    assert!(
        reason.contains(
            "more than the 33554432 bytes (32 MiB) the agent downloads; nothing was downloaded"
        ),
        "{reason}"
    );
    assert!(reason.contains(&source), "{reason}");

    // The registry served the manifest (so the agent asked) and never the layer.
    let log = std::fs::read(&registry_log).expect("registry log");
    let log = String::from_utf8_lossy(&log[log_from.min(log.len())..]).into_owned();
    let requests: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("http.request.method=GET"))
        .collect();
    assert!(
        requests
            .iter()
            .any(|l| l.contains(&format!("/manifests/{digest}"))),
        "{log}"
    );
    assert!(
        !requests.iter().any(|l| l.contains("/blobs/")),
        "the layer was downloaded: {requests:#?}"
    );
    let operator_after = cluster
        .kubectl_ok(&[
            "-n",
            "flux-system",
            "get",
            "deployment",
            "flux-operator",
            "-o",
            "jsonpath={.metadata.generation}/{.spec.template.spec.containers[0].image}",
        ])
        .expect("the flux-operator Deployment");
    assert_eq!(operator_after, operator_before, "nothing was applied");
    let record = cluster
        .kubectl_ok(&[
            "-n",
            AGENT_NAMESPACE,
            "get",
            "configmap",
            "tenantflux-operator-install",
            "--ignore-not-found",
            "-o",
            "name",
        ])
        .unwrap_or_default();
    assert_eq!(record, "", "no install was recorded");
}

/// A hostile registry on 127.0.0.1: `/v2/` answers 200, a HEAD of a manifest sends no digest
/// header (so the agent must GET it to learn the digest), and a GET answers with a manifest
/// that never ends (no Content-Length), 64 KiB at a time until the reader hangs up or 1 GiB
/// was sent. Returns its port and the most one response sent.
async fn endless_manifest_registry() -> (u16, std::sync::Arc<std::sync::atomic::AtomicU64>) {
    use std::sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    };
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("address").port();
    let most = Arc::new(AtomicU64::new(0));
    let record = most.clone();
    tokio::spawn(async move {
        // Bounded: a few hundred connections at most, each at most 1 GiB.
        for _ in 0..500 {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let record = record.clone();
            tokio::spawn(async move {
                let mut stream = BufReader::new(stream);
                loop {
                    let mut request = String::new();
                    if stream.read_line(&mut request).await.unwrap_or(0) == 0 {
                        return;
                    }
                    loop {
                        let mut header = String::new();
                        if stream.read_line(&mut header).await.unwrap_or(0) == 0 {
                            return;
                        }
                        if header == "\r\n" {
                            break;
                        }
                    }
                    let stream = stream.get_mut();
                    if !request.contains("/manifests/") {
                        let _ = stream
                            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
                            .await;
                        continue;
                    }
                    let head = "HTTP/1.1 200 OK\r\nContent-Type: application/vnd.oci.image.manifest.v1+json\r\n";
                    if request.starts_with("HEAD ") {
                        let _ = stream
                            .write_all(format!("{head}Content-Length: 0\r\n\r\n").as_bytes())
                            .await;
                        continue;
                    }
                    let _ = stream
                        .write_all(format!("{head}Connection: close\r\n\r\n").as_bytes())
                        .await;
                    let chunk = vec![b'a'; 64 * 1024];
                    let mut sent = 0u64;
                    while sent < 1 << 30 && stream.write_all(&chunk).await.is_ok() {
                        sent += chunk.len() as u64;
                        record.fetch_max(sent, Ordering::Relaxed);
                    }
                    return;
                }
            });
        }
    });
    (port, most)
}

#[tokio::test]
async fn a_registry_that_sends_an_endless_manifest_is_cut_off_at_the_limit() {
    let _serial = SERIAL.lock().await;
    let cluster = own_cluster();
    cluster.ensure_flux_operator().expect("flux-operator");
    let version = tenantflux_core::releases::OPERATOR_VERSION.to_owned();
    let (port, most) = endless_manifest_registry().await;
    let source =
        format!("oci://127.0.0.1:{port}/controlplaneio-fluxcd/flux-operator-manifests:{version}");
    let reason = failed_install(cluster, &source, &version, "the endless manifest refused").await;
    assert!(
        reason.contains(
            "is more than the 65536 bytes the agent reads (the registry sent more); it stopped reading"
        ),
        "{reason}"
    );
    // What one response got out before the agent hung up is the limit plus what the two
    // sockets' buffers hold, not the gigabyte on offer.
    let sent = most.load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        sent < 32 << 20,
        "the registry sent {sent} bytes in one response"
    );
    let rss = agent_rss_kib(cluster);
    assert!(rss < 200 * 1024, "the agent holds {rss} KiB");
}

/// A token of ServiceAccount `namespace/name`, created here, as `kubectl create token` gives.
fn service_account_token(cluster: &TestCluster, namespace: &str, name: &str) -> String {
    cluster
        .apply_yaml(&format!(
            "apiVersion: v1\nkind: ServiceAccount\nmetadata: {{name: {name}, namespace: {namespace}}}\n"
        ))
        .expect("ServiceAccount");
    cluster
        .kubectl_ok(&["-n", namespace, "create", "token", name, "--duration=1h"])
        .expect("token")
        .trim()
        .to_owned()
}

/// How long a watch may outlive its caller's right to it: the agent here rechecks every 2 s
/// (`TENANTFLUX_STREAM_RECHECK_INTERVAL`), so 30 s is generous; the default is a minute.
const RECHECK: &str = "2s";
const REVOKED_WITHIN: Duration = Duration::from_secs(30);

#[tokio::test]
async fn a_watch_ends_once_its_caller_loses_the_right_to_it() {
    let _serial = SERIAL.lock().await;
    let cluster = own_cluster();
    let _tenant =
        Tenant::prepare(cluster, &[("TENANTFLUX_STREAM_RECHECK_INTERVAL", RECHECK)]).await;
    let channel = channel(cluster).await;

    // A user who may watch Kustomizations in apps, through one RoleBinding.
    let token = service_account_token(cluster, APPS, "watcher");
    cluster
        .apply_yaml(&format!(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\n\
             metadata: {{name: watch-kustomizations, namespace: {APPS}}}\n\
             rules: [{{apiGroups: [kustomize.toolkit.fluxcd.io], resources: [kustomizations], verbs: [get, list, watch]}}]\n---\n\
             apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\n\
             metadata: {{name: watcher, namespace: {APPS}}}\n\
             roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: watch-kustomizations}}\n\
             subjects: [{{kind: ServiceAccount, name: watcher, namespace: {APPS}}}]\n"
        ))
        .expect("Role and RoleBinding");
    let mut watch = WorkloadsClient::new(channel.clone())
        .watch_objects(with_token(
            WatchObjectsRequest {
                kind: "kustomization".into(),
                namespace: APPS.into(),
                ..Default::default()
            },
            &token,
        ))
        .await
        .expect("the watcher may watch")
        .into_inner();
    // Positive barrier: the watch is open and has sent what it holds.
    let mut names = Vec::new();
    loop {
        let event = tokio::time::timeout(TIMEOUT, watch.message())
            .await
            .expect("the watch's snapshot")
            .expect("an event")
            .expect("the watch is open");
        if event.r#type() == object_event::Type::Synced {
            break;
        }
        names.extend(event.object.map(|o| o.name));
    }
    assert_eq!(names, ["podinfo"]);

    cluster
        .kubectl_ok(&["-n", APPS, "delete", "rolebinding", "watcher"])
        .expect("deleting the RoleBinding");
    let revoked = std::time::Instant::now();
    let end = loop {
        let next = tokio::time::timeout(REVOKED_WITHIN, watch.message())
            .await
            .unwrap_or_else(|_| {
                panic!("the watch is still open {REVOKED_WITHIN:?} after the RoleBinding went")
            });
        match next {
            Ok(Some(_)) => continue,
            Err(status) => break status,
            Ok(None) => panic!("the watch ended without saying why"),
        }
    };
    assert_eq!(end.code(), Code::PermissionDenied, "{end:?}");
    assert_eq!(
        end.message(),
        "the stream ended: user \"system:serviceaccount:apps:watcher\" may not watch \
         kustomizations.kustomize.toolkit.fluxcd.io in namespace \"apps\" (ask a cluster \
         administrator for a Role that grants it)"
    );
    eprintln!(
        "the watch ended {:?} after the RoleBinding was deleted",
        revoked.elapsed()
    );
    assert!(
        matches!(watch.message().await, Ok(None)),
        "nothing after the end"
    );

    // A token that stops being valid ends the stream with UNAUTHENTICATED.
    let token = service_account_token(cluster, AGENT_NAMESPACE, "status-watcher");
    cluster
        .apply_yaml(&format!(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\n\
             metadata: {{name: status-watcher, namespace: {AGENT_NAMESPACE}}}\n\
             roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: tenantflux-user}}\n\
             subjects: [{{kind: ServiceAccount, name: status-watcher, namespace: {AGENT_NAMESPACE}}}]\n"
        ))
        .expect("RoleBinding");
    let mut status = AgentClient::new(channel)
        .watch_status(with_token(WatchStatusRequest {}, &token))
        .await
        .expect("the status watcher may watch")
        .into_inner();
    tokio::time::timeout(TIMEOUT, status.message())
        .await
        .expect("the first status")
        .expect("a status")
        .expect("open");
    cluster
        .kubectl_ok(&[
            "-n",
            AGENT_NAMESPACE,
            "delete",
            "serviceaccount",
            "status-watcher",
        ])
        .expect("deleting the ServiceAccount");
    let end = loop {
        match tokio::time::timeout(REVOKED_WITHIN, status.message())
            .await
            .expect("the status watch ends once its token is gone")
        {
            Ok(Some(_)) => continue,
            Err(err) => break err,
            Ok(None) => panic!("the status watch ended without saying why"),
        }
    };
    assert_eq!(end.code(), Code::Unauthenticated, "{end:?}");
    assert!(
        end.message().starts_with(
            "the stream ended: bearer token not accepted by the Kubernetes API server (TokenReview)"
        ),
        "{end:?}"
    );
    assert!(!end.message().contains(&token), "the token is not echoed");
}

/// A kubeconfig whose user authenticates with a client certificate for `user` (groups
/// `groups`), signed here with the cluster's CA as kwokctl keeps it.
fn client_certificate_kubeconfig(cluster: &TestCluster, user: &str, groups: &[&str]) -> PathBuf {
    let pki = cluster.dir().join("pki");
    let dir = cluster.dir().join(format!("cert-{user}"));
    std::fs::create_dir_all(&dir).unwrap();
    let key = dir.join("key.pem");
    let request = dir.join("csr.pem");
    let cert = dir.join("cert.pem");
    let subject: String = std::iter::once(format!("/CN={user}"))
        .chain(groups.iter().map(|g| format!("/O={g}")))
        .collect();
    let run = |args: &[&str]| {
        let output = std::process::Command::new("openssl")
            .args(args)
            .output()
            .expect("openssl");
        assert!(output.status.success(), "openssl {args:?}: {output:?}");
    };
    // Extensions make it an X.509 v3 certificate, which rustls requires.
    let extensions = dir.join("ext.cnf");
    std::fs::write(
        &extensions,
        "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n",
    )
    .unwrap();
    run(&["genrsa", "-out", path(&key), "2048"]);
    run(&[
        "req",
        "-new",
        "-key",
        path(&key),
        "-subj",
        &subject,
        "-out",
        path(&request),
    ]);
    run(&[
        "x509",
        "-req",
        "-in",
        path(&request),
        "-CA",
        path(&pki.join("ca.crt")),
        "-CAkey",
        path(&pki.join("ca.key")),
        "-CAcreateserial",
        "-days",
        "1",
        "-extfile",
        path(&extensions),
        "-out",
        path(&cert),
    ]);
    let server = cluster
        .kubectl_ok(&[
            "config",
            "view",
            "--minify",
            "-o",
            "jsonpath={.clusters[0].cluster.server}",
        ])
        .expect("server");
    let kubeconfig = dir.join("kubeconfig.yaml");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\n\
             clusters: [{{name: test, cluster: {{server: \"{server}\", certificate-authority: \"{}\"}}}}]\n\
             users: [{{name: {user}, user: {{client-certificate: \"{}\", client-key: \"{}\"}}}}]\n\
             contexts: [{{name: test, context: {{cluster: test, user: {user}}}}}]\n\
             current-context: test\n",
            path(&pki.join("ca.crt")),
            path(&cert),
            path(&key),
        ),
    )
    .unwrap();
    kubeconfig
}

fn plugin_as(cluster: &TestCluster, kubeconfig: &Path, args: &[&str]) -> std::process::Output {
    cluster
        .plugin_command(Some(kubeconfig), args)
        .env("TENANTFLUX_VERBOSE", "1")
        .output()
        .expect("kubectl tenantflux")
}

fn suspended(cluster: &TestCluster) -> String {
    cluster
        .kubectl_ok(&[
            "-n",
            APPS,
            "get",
            "kustomizations.kustomize.toolkit.fluxcd.io",
            "podinfo",
            "-o",
            "jsonpath={.spec.suspend}",
        ])
        .expect("the Kustomization")
}

fn identity_csrs(cluster: &TestCluster) -> String {
    cluster
        .kubectl_ok(&[
            "get",
            "csr",
            "-l",
            "app.kubernetes.io/part-of=tenantflux",
            "-o",
            "name",
        ])
        .expect("CSRs")
}

#[tokio::test]
async fn client_certificate_users_act_as_themselves_and_not_as_the_owner_of_another_csr() {
    let _serial = SERIAL.lock().await;
    let cluster = own_cluster();
    let tenant = Tenant::prepare(cluster, &[]).await;
    cluster
        .apply_yaml(&format!(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\n\
             metadata: {{name: cert-admin}}\n\
             roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}}\n\
             subjects: [{{kind: User, apiGroup: rbac.authorization.k8s.io, name: cert-admin}}]\n---\n\
             apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\n\
             metadata: {{name: cert-users, namespace: {AGENT_NAMESPACE}}}\n\
             roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: tenantflux-user}}\n\
             subjects: [{{kind: User, apiGroup: rbac.authorization.k8s.io, name: cert-reader}}, \
                        {{kind: User, apiGroup: rbac.authorization.k8s.io, name: cert-nocsr}}]\n---\n\
             apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\n\
             metadata: {{name: cert-reader-identity}}\n\
             roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: tenantflux-caller-identity}}\n\
             subjects: [{{kind: User, apiGroup: rbac.authorization.k8s.io, name: cert-reader}}]\n---\n\
             apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\n\
             metadata: {{name: read-kustomizations, namespace: {APPS}}}\n\
             rules: [{{apiGroups: [kustomize.toolkit.fluxcd.io], resources: [kustomizations], verbs: [get, list, watch]}}]\n---\n\
             apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\n\
             metadata: {{name: cert-reader, namespace: {APPS}}}\n\
             roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: read-kustomizations}}\n\
             subjects: [{{kind: User, apiGroup: rbac.authorization.k8s.io, name: cert-reader}}]\n"
        ))
        .expect("RBAC of the certificate users");
    let admin = client_certificate_kubeconfig(cluster, "cert-admin", &["tenant-admins"]);
    let reader = client_certificate_kubeconfig(cluster, "cert-reader", &[]);
    let nocsr = client_certificate_kubeconfig(cluster, "cert-nocsr", &[]);
    // Not suspended to start with (a cluster shared across runs may hold an earlier suspend).
    cluster
        .kubectl_ok(&[
            "-n",
            APPS,
            "patch",
            "kustomizations.kustomize.toolkit.fluxcd.io",
            "podinfo",
            "--type=merge",
            "-p",
            r#"{"spec":{"suspend":false}}"#,
        ])
        .expect("resetting the Kustomization");
    assert_eq!(suspended(cluster), "false");

    // The admin suspends as itself (tenantflux-client may not patch Kustomizations).
    let output = plugin_as(cluster, &admin, &["suspend", "ks", "podinfo", "-n", APPS]);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "{output:?}");
    assert!(
        stderr.contains(
            "sending a proof of your identity with CertificateSigningRequest tenantflux-caller-"
        ),
        "{stderr}"
    );
    assert_eq!(suspended(cluster), "true");

    // The reader reads, and is refused the resume as itself.
    let output = plugin_as(cluster, &reader, &["get", "ks", "-n", APPS]);
    assert!(output.status.success(), "{output:?}");
    assert!(
        String::from_utf8_lossy(&output.stdout).contains("podinfo"),
        "{output:?}"
    );
    let output = plugin_as(cluster, &reader, &["resume", "ks", "podinfo", "-n", APPS]);
    assert!(!output.status.success(), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        stderr.contains(
            "user \"cert-reader\" may not patch kustomizations.kustomize.toolkit.fluxcd.io in namespace \"apps\""
        ),
        "{stderr}"
    );
    assert_eq!(suspended(cluster), "true");
    // Callers may only create CSRs: theirs stay, undecided, until the agent denies them.
    let left = identity_csrs(cluster);
    assert!(left.contains("tenantflux-caller-"), "{left}");

    // Who may not create CSRs is told they act as tenantflux-client.
    let output = plugin_as(cluster, &nocsr, &["status"]);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "{output:?}");
    assert!(
        stderr.contains("note: you may not create CertificateSigningRequests")
            && stderr.contains("acting as ServiceAccount tenantflux-system/tenantflux-client"),
        "{stderr}"
    );

    // The attack: the admin's CSR (its creator recorded by the API server), named by a caller
    // who holds another key.
    use tenantflux_core::identity;
    let owner_key = tenantflux_core::policy::signing::generate().unwrap();
    let attacker_key = tenantflux_core::policy::signing::generate().unwrap();
    let csr_name = "cert-admin-identity";
    let csr = serde_json::json!({
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"name": csr_name},
        "spec": {
            "request": base64_of(identity::csr_pem(&owner_key, "cert-admin").as_bytes()),
            "signerName": identity::SIGNER_NAME,
            "usages": ["digital signature"],
        }
    });
    let file = tenant.dir.path().join("csr.json");
    std::fs::write(&file, csr.to_string()).unwrap();
    let output = std::process::Command::new(tool_path("KUBECTL"))
        .args(["--kubeconfig", path(&admin), "create", "-f", path(&file)])
        .output()
        .expect("kubectl create");
    assert!(output.status.success(), "{output:?}");
    let channel = channel(cluster).await;
    let before = tenant.fingerprint().expect("fingerprint");
    let resume = ResumeRequest {
        object: Some(ObjectRef {
            kind: "ks".into(),
            namespace: APPS.into(),
            name: "podinfo".into(),
        }),
    };
    let err = WorkloadsClient::new(channel.clone())
        .resume(proven(
            &attacker_key,
            csr_name,
            "/tenantflux.v1.Workloads/Resume",
            resume.clone(),
        ))
        .await
        .expect_err("a proof by another key is refused");
    assert_eq!(err.code(), Code::Unauthenticated, "{err:?}");
    assert_eq!(
        err.message(),
        "the caller-identity proof with CertificateSigningRequest \"cert-admin-identity\" does not hold: \
         the proof is not signed by the key of the CertificateSigningRequest for this call: it was created by someone else, \
         for another agent, or for another call"
    );
    assert_eq!(
        tenant.fingerprint().expect("fingerprint"),
        before,
        "nothing changed"
    );
    assert_eq!(suspended(cluster), "true");
    // The same CSR with its own key is the admin: the refusal was the key's alone.
    let read = WorkloadsClient::new(channel)
        .get_object(proven(
            &owner_key,
            csr_name,
            "/tenantflux.v1.Workloads/GetObject",
            GetObjectRequest {
                object: resume.object.clone(),
            },
        ))
        .await
        .expect("the CSR's creator, proven by its key");
    assert_eq!(read.into_inner().name, "podinfo");
    cluster
        .kubectl_ok(&["delete", "csr", csr_name])
        .expect("deleting the CSR");
}

fn base64_of(bytes: &[u8]) -> String {
    use std::io::Write as _;
    let mut child = std::process::Command::new("base64")
        .arg("-w0")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("base64");
    child.stdin.take().unwrap().write_all(bytes).unwrap();
    let output = child.wait_with_output().expect("base64");
    String::from_utf8(output.stdout).unwrap()
}

/// `message` to `method`, naming `csr`, with a proof of that call made now by `key`: what
/// the plugin signs (the method, the SHA-256 of the gRPC frame of the message, a nonce).
fn proven<T: prost::Message>(
    key: &tenantflux_core::identity::SigningKey,
    csr: &str,
    method: &str,
    message: T,
) -> Request<T> {
    use tenantflux_core::identity;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let encoded = message.encode_to_vec();
    let mut frame = vec![0u8];
    frame.extend_from_slice(&u32::try_from(encoded.len()).unwrap().to_be_bytes());
    frame.extend_from_slice(&encoded);
    let digest = identity::body_digest(&frame);
    let subject = identity::ProofSubject {
        csr,
        audience: "tenantflux-agent",
        namespace: AGENT_NAMESPACE,
        method,
        body_sha256: &digest,
    };
    let proof = identity::sign_proof(key, &subject, &identity::nonce().unwrap(), now);
    let mut request = Request::new(message);
    request
        .metadata_mut()
        .insert(identity::CSR_METADATA, csr.parse().unwrap());
    request
        .metadata_mut()
        .insert(identity::PROOF_METADATA, proof.parse().unwrap());
    request
}

#[tokio::test]
async fn the_agent_denies_identity_csrs_past_their_age_and_they_prove_nothing_after() {
    let _serial = SERIAL.lock().await;
    let cluster = own_cluster();
    // An age of 20 s instead of 15 minutes, swept every second.
    let tenant = Tenant::prepare(
        cluster,
        &[
            ("TENANTFLUX_IDENTITY_CSR_MAX_AGE", "20s"),
            ("TENANTFLUX_IDENTITY_CSR_SWEEP_INTERVAL", "1s"),
            ("TENANTFLUX_STREAM_RECHECK_INTERVAL", RECHECK),
        ],
    )
    .await;
    cluster
        .apply_yaml(&format!(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\n\
             metadata: {{name: cert-sweep, namespace: {AGENT_NAMESPACE}}}\n\
             roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: tenantflux-user}}\n\
             subjects: [{{kind: User, apiGroup: rbac.authorization.k8s.io, name: cert-sweep}}]\n---\n\
             apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\n\
             metadata: {{name: cert-sweep-identity}}\n\
             roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: tenantflux-caller-identity}}\n\
             subjects: [{{kind: User, apiGroup: rbac.authorization.k8s.io, name: cert-sweep}}]\n"
        ))
        .expect("RBAC of the certificate user");
    let user = client_certificate_kubeconfig(cluster, "cert-sweep", &[]);
    use tenantflux_core::identity;
    let key = tenantflux_core::policy::signing::generate().unwrap();
    let name = "cert-sweep-identity";
    let csr = serde_json::json!({
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": "tenantflux"}},
        "spec": {
            "request": base64_of(identity::csr_pem(&key, "cert-sweep").as_bytes()),
            "signerName": identity::SIGNER_NAME,
            "usages": ["digital signature"],
        }
    });
    let file = tenant.dir.path().join("sweep-csr.json");
    std::fs::write(&file, csr.to_string()).unwrap();
    let kubectl_as = |args: &[&str]| {
        std::process::Command::new(tool_path("KUBECTL"))
            .args(["--kubeconfig", path(&user)])
            .args(args)
            .output()
            .expect("kubectl")
    };
    let output = kubectl_as(&["create", "-f", path(&file)]);
    assert!(output.status.success(), "{output:?}");
    // The user may not delete it (nor anyone's): only create.
    let output = kubectl_as(&["delete", "csr", name]);
    assert!(!output.status.success(), "{output:?}");
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("forbidden"),
        "{output:?}"
    );

    let channel = channel(cluster).await;
    let status = AgentClient::new(channel.clone())
        .get_status(proven(
            &key,
            name,
            "/tenantflux.v1.Agent/GetStatus",
            tenantflux_proto::v1::GetStatusRequest {},
        ))
        .await;
    assert!(status.is_ok(), "a young CSR proves its creator: {status:?}");

    // A captured proof is worth the one call it was made for, once: replayed, or sent with
    // another method or another body, it is refused.
    let request = proven(
        &key,
        name,
        "/tenantflux.v1.Agent/GetStatus",
        tenantflux_proto::v1::GetStatusRequest {},
    );
    let captured = request.metadata().clone();
    AgentClient::new(channel.clone())
        .get_status(request)
        .await
        .expect("the proof's own call");
    let mut replay = Request::new(tenantflux_proto::v1::GetStatusRequest {});
    *replay.metadata_mut() = captured.clone();
    let err = AgentClient::new(channel.clone())
        .get_status(replay)
        .await
        .expect_err("a replayed proof is refused");
    assert_eq!(err.code(), Code::Unauthenticated, "{err:?}");
    assert!(err.message().contains("was used before"), "{err:?}");
    let fresh = proven(
        &key,
        name,
        "/tenantflux.v1.Agent/GetStatus",
        tenantflux_proto::v1::GetStatusRequest {},
    );
    let mut elsewhere = Request::new(tenantflux_proto::v1::ListKindsRequest {});
    *elsewhere.metadata_mut() = fresh.metadata().clone();
    let err = WorkloadsClient::new(channel.clone())
        .list_kinds(elsewhere)
        .await
        .expect_err("a proof for another method is refused");
    assert_eq!(err.code(), Code::Unauthenticated, "{err:?}");
    assert!(err.message().contains("or for another call"), "{err:?}");
    let object = |name: &str| GetObjectRequest {
        object: Some(ObjectRef {
            kind: "ks".into(),
            namespace: APPS.into(),
            name: name.into(),
        }),
    };
    let signed = proven(
        &key,
        name,
        "/tenantflux.v1.Workloads/GetObject",
        object("podinfo"),
    );
    let mut other_body = Request::new(object("another"));
    *other_body.metadata_mut() = signed.metadata().clone();
    let err = WorkloadsClient::new(channel.clone())
        .get_object(other_body)
        .await
        .expect_err("a proof for another body is refused");
    assert_eq!(err.code(), Code::Unauthenticated, "{err:?}");
    assert!(err.message().contains("or for another call"), "{err:?}");

    // A watch opened with the CSR ends once it proves nothing any more.
    let mut watch = AgentClient::new(channel.clone())
        .watch_status(proven(
            &key,
            name,
            "/tenantflux.v1.Agent/WatchStatus",
            WatchStatusRequest {},
        ))
        .await
        .expect("a watch with a young CSR")
        .into_inner();

    let denied = wait_for(
        "the agent denying the CSR once it is older than its age",
        TIMEOUT,
        || async move {
            let reason = cluster
                .kubectl_ok(&[
                    "get",
                    "csr",
                    name,
                    "-o",
                    "jsonpath={.status.conditions[?(@.type==\"Denied\")].reason}",
                ])
                .unwrap_or_default();
            (!reason.is_empty()).then_some(reason)
        },
    )
    .await
    .expect("the CSR denied");
    assert_eq!(denied, "TenantfluxProofExpired");

    let ended = tokio::time::timeout(TIMEOUT, async {
        loop {
            match watch.message().await {
                Ok(Some(_)) => continue,
                Ok(None) => break None,
                Err(status) => break Some(status),
            }
        }
    })
    .await
    .expect("the watch ends once its CSR is denied")
    .expect("with the reason");
    assert_eq!(ended.code(), Code::Unauthenticated, "{ended:?}");
    assert!(
        ended.message().starts_with("the stream ended: ")
            && ended
                .message()
                .contains("it is denied (TenantfluxProofExpired)"),
        "{ended:?}"
    );

    // A fresh proof with the denied CSR is refused, whatever the proof's own time.
    let err = AgentClient::new(channel)
        .get_status(proven(
            &key,
            name,
            "/tenantflux.v1.Agent/GetStatus",
            tenantflux_proto::v1::GetStatusRequest {},
        ))
        .await
        .expect_err("a denied CSR proves nothing");
    assert_eq!(err.code(), Code::Unauthenticated, "{err:?}");
    assert!(
        err.message()
            .contains("does not hold: it is denied (TenantfluxProofExpired)")
            || err.message().contains("a proof may use one at most"),
        "{err:?}"
    );
    cluster
        .kubectl_ok(&["delete", "csr", name])
        .expect("deleting the CSR");
}

#[tokio::test]
async fn tenantflux_client_cannot_mint_its_own_tokens_and_long_lived_tokens_are_refused() {
    let _serial = SERIAL.lock().await;
    let cluster = own_cluster();
    let _tenant = Tenant::prepare(cluster, &[]).await;
    let client = format!("system:serviceaccount:{AGENT_NAMESPACE}:tenantflux-client");
    let can_mint = |who: &str| {
        cluster
            .kubectl(&[
                "auth",
                "can-i",
                "create",
                "serviceaccounts/tenantflux-client",
                "--subresource=token",
                "-n",
                AGENT_NAMESPACE,
                &format!("--as={who}"),
            ])
            .expect("kubectl auth can-i")
    };
    let answer = can_mint(&client);
    assert_eq!(
        String::from_utf8_lossy(&answer.stdout).trim(),
        "no",
        "{answer:?}"
    );
    // A user bound to tenantflux-user still may (client-certificate users without CSRs).
    cluster
        .apply_yaml(&format!(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\n\
             metadata: {{name: token-minter, namespace: {AGENT_NAMESPACE}}}\n\
             roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: tenantflux-user}}\n\
             subjects: [{{kind: User, apiGroup: rbac.authorization.k8s.io, name: token-minter}}]\n"
        ))
        .expect("RBAC of the minter");
    let answer = can_mint("token-minter");
    assert_eq!(
        String::from_utf8_lossy(&answer.stdout).trim(),
        "yes",
        "{answer:?}"
    );

    let token = |duration: &str| {
        cluster
            .kubectl_ok(&[
                "-n",
                AGENT_NAMESPACE,
                "create",
                "token",
                "tenantflux-client",
                "--audience",
                "tenantflux-agent",
                &format!("--duration={duration}"),
            ])
            .expect("a token of tenantflux-client")
            .trim()
            .to_owned()
    };
    let channel = channel(cluster).await;
    let long = token("2h");
    let err = AgentClient::new(channel.clone())
        .get_status(with_token(tenantflux_proto::v1::GetStatusRequest {}, &long))
        .await
        .expect_err("a token valid for two hours is refused");
    assert_eq!(err.code(), Code::Unauthenticated, "{err:?}");
    assert!(
        err.message().starts_with(&format!(
            "the token of {client} is valid for 7200 s; the agent accepts service-account tokens valid for at most 3600 s"
        )),
        "{err:?}"
    );
    assert!(!err.message().contains(&long), "the token is not echoed");
    let hour = token("1h");
    AgentClient::new(channel)
        .get_status(with_token(tenantflux_proto::v1::GetStatusRequest {}, &hour))
        .await
        .expect("a token of an hour is accepted");
}
