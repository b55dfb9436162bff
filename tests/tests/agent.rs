//! The agent and the plugin on the real path: the real `kubectl` runs `kubectl-tenantflux` from
//! PATH, which finds the agent pod, port-forwards through the real API server (kwok forwards the
//! pod's port to the agent process), and calls the agent with the caller's identity, which the
//! agent checks with TokenReview and SubjectAccessReview against the same API server.

use std::{
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Child, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

use serde_json::Value;
use tenantflux_tests::{TestCluster, apply_flux_instance, repo_root, stderr, stdout, wait_for};

const AGENT_NAMESPACE: &str = "tenantflux-system";

fn status_json(cluster: &TestCluster, kubeconfig: Option<&Path>) -> Value {
    let output = cluster
        .kubectl_tenantflux(kubeconfig, &["status", "-o", "json"])
        .expect("run kubectl tenantflux status");
    assert!(
        output.status.success(),
        "kubectl tenantflux status -o json failed: {}",
        stderr(&output)
    );
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|err| panic!("status -o json is not JSON ({err}): {}", stdout(&output)))
}

/// A kubeconfig whose user is ServiceAccount `namespace/name` (a token with the API server's
/// audience, as `kubectl create token` gives), bound to `role` in the agent's namespace.
fn service_account_kubeconfig(
    cluster: &TestCluster,
    namespace: &str,
    name: &str,
    role: &str,
) -> PathBuf {
    let kubeconfig = cluster
        .token_kubeconfig(namespace, name)
        .expect("service account kubeconfig");
    cluster
        .apply_yaml(&format!(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\n\
             metadata: {{name: {namespace}-{name}, namespace: {AGENT_NAMESPACE}}}\n\
             roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: {role}}}\n\
             subjects: [{{kind: ServiceAccount, name: {name}, namespace: {namespace}}}]\n"
        ))
        .expect("role binding");
    kubeconfig
}

#[tokio::test]
async fn status_with_client_certificates_goes_through_kubectl_and_the_port_forward() {
    let cluster = TestCluster::shared();
    cluster.ensure_flux_operator().expect("flux-operator");
    let client = cluster.client().await.expect("client");
    apply_flux_instance(&client, "2.9.x")
        .await
        .expect("FluxInstance");
    cluster.ensure_agent().expect("agent");

    // The admin kubeconfig authenticates with a client certificate, so the plugin proves the
    // admin's identity with a CertificateSigningRequest (tests/tests/security_api.rs).
    let status = wait_for(
        "kubectl tenantflux status to report a Ready FluxInstance",
        // Well under flux-operator's 5-minute report interval: the agent asks for a fresh
        // FluxReport when it lags the instance.
        Duration::from_secs(90),
        || async {
            let status = status_json(cluster, None);
            // FluxReport, where component readiness comes from, may trail the instance.
            let components_ready = status["instance"]["components"]
                .as_array()
                .is_some_and(|c| !c.is_empty() && c.iter().all(|c| c["ready"] == true));
            (status.pointer("/instance/ready/status") == Some(&Value::from("True"))
                && components_ready)
                .then_some(status)
        },
    )
    .await
    .expect("Ready FluxInstance in status");

    assert_eq!(status["agent"]["namespace"], AGENT_NAMESPACE);
    assert_eq!(status["agent"]["kubernetesVersion"], "v1.36.3");
    assert!(
        !status["agent"]["version"]
            .as_str()
            .unwrap_or_default()
            .is_empty(),
        "{status:#}"
    );
    assert_eq!(status["operator"]["phase"], "ready", "{status:#}");
    assert_eq!(
        status["operator"]["version"],
        tenantflux_tests::tool_path("FLUX_OPERATOR_VERSION")
            .to_string_lossy()
            .as_ref(),
        "{status:#}"
    );
    assert_eq!(status["instance"]["requestedVersion"], "2.9.x");
    let installed = status["instance"]["distributionVersion"]
        .as_str()
        .unwrap_or_default();
    assert!(installed.starts_with("v2.9."), "{status:#}");
    let components = status["instance"]["components"]
        .as_array()
        .expect("components");
    let source = components
        .iter()
        .find(|c| c["name"] == "source-controller")
        .expect("source-controller listed");
    assert_eq!(source["ready"], true);

    // The table a person reads says the same.
    let table = cluster
        .kubectl_tenantflux(None, &["status"])
        .expect("status");
    assert!(table.status.success(), "{}", stderr(&table));
    let text = stdout(&table);
    assert!(text.contains("FluxInstance"), "{text}");
    assert!(text.contains(installed), "{text}");
    assert!(text.contains("source-controller"), "{text}");
}

/// `kubectl tenantflux status` as the admin (client certificates) with the credential cache
/// in `cache`; the verbose line that says what was sent, and stderr.
fn status_cached(cluster: &TestCluster, cache: &Path) -> (bool, String) {
    let output = cluster
        .plugin_command(None, &["status", "-o", "json"])
        .env_remove("TENANTFLUX_NO_CREDENTIAL_CACHE")
        .env("XDG_CACHE_HOME", cache)
        .env("TENANTFLUX_VERBOSE", "1")
        .output()
        .expect("run kubectl tenantflux status");
    (output.status.success(), stderr(&output))
}

/// The one cached identity file, its mode and the CSR it names.
fn cached_identity(dir: &Path) -> (PathBuf, u32, Value) {
    use std::os::unix::fs::PermissionsExt as _;
    let files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("the cache directory exists")
        .map(|e| e.expect("entry").path())
        .collect();
    assert_eq!(files.len(), 1, "one cached credential: {files:?}");
    let path = files[0].clone();
    let mode = std::fs::metadata(&path)
        .expect("metadata")
        .permissions()
        .mode()
        & 0o7777;
    let entry: Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("read")).expect("JSON");
    (path, mode, entry)
}

#[tokio::test]
async fn a_requested_credential_is_cached_0600_reused_and_replaced_when_stale_or_refused() {
    use std::os::unix::fs::PermissionsExt as _;

    use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
    let cluster = TestCluster::shared();
    cluster.ensure_agent().expect("agent");
    let csrs: kube::Api<CertificateSigningRequest> =
        kube::Api::all(cluster.client().await.expect("client"));
    let home = tempfile::tempdir().expect("temp dir");
    let dir = home.path().join("tenantflux").join("tokens");

    let (ok, err) = status_cached(cluster, home.path());
    assert!(ok, "{err}");
    assert_eq!(
        std::fs::metadata(&dir).expect("dir").permissions().mode() & 0o7777,
        0o700
    );
    let (path, mode, entry) = cached_identity(&dir);
    assert_eq!(mode, 0o600);
    assert_eq!(entry["kind"], "identity");
    let first = entry["csr"].as_str().expect("csr name").to_owned();
    assert!(
        err.contains(&format!("CertificateSigningRequest {first}")),
        "{err}"
    );
    assert!(err.contains("cached for later commands"), "{err}");
    assert!(
        csrs.get_opt(&first).await.expect("get csr").is_some(),
        "the cached CSR outlives the command"
    );

    // Reused: no new CSR, the same file.
    let (ok, err) = status_cached(cluster, home.path());
    assert!(ok, "{err}");
    assert!(
        err.contains(&format!("the cached CertificateSigningRequest {first}")),
        "{err}"
    );
    assert_eq!(cached_identity(&dir).2["csr"], first.as_str());

    // Expired: replaced by a new CSR; the old one is left to the agent, which denies it once
    // too old (users may only create CSRs).
    let mut stale = entry.clone();
    stale["expiresAt"] = Value::from(stale["issuedAt"].as_i64().expect("issuedAt") + 30);
    std::fs::write(&path, stale.to_string()).expect("write");
    let (ok, err) = status_cached(cluster, home.path());
    assert!(ok, "{err}");
    let second = cached_identity(&dir).2["csr"]
        .as_str()
        .expect("csr")
        .to_owned();
    assert_ne!(second, first);
    assert!(
        csrs.get_opt(&first).await.expect("get csr").is_some(),
        "the plugin deletes no CSR"
    );

    // Others may read it: not used, and replaced by a 0600 file.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let (ok, err) = status_cached(cluster, home.path());
    assert!(ok, "{err}");
    assert!(err.contains("not using the cached credential"), "{err}");
    assert!(err.contains("0644"), "{err}");
    let (_, mode, entry) = cached_identity(&dir);
    assert_eq!(mode, 0o600);
    let third = entry["csr"].as_str().expect("csr").to_owned();
    assert_ne!(third, second);

    // Refused by the agent (its CSR deleted): the command says so and drops the entry, and the
    // next one requests a new credential.
    csrs.delete(&third, &Default::default())
        .await
        .expect("delete csr");
    // The agent keeps what it read of a CSR as long as a reviewed token (30 s): within that
    // the cached proof still works, after it the deleted CSR proves nothing.
    let err = wait_for(
        "the deleted CSR to be refused",
        Duration::from_secs(45),
        || {
            let (ok, err) = status_cached(cluster, home.path());
            async move { (!ok).then_some(err) }
        },
    )
    .await
    .expect("a deleted CSR proves nothing");
    assert!(err.contains("the cached credential was dropped"), "{err}");
    assert_eq!(std::fs::read_dir(&dir).expect("dir").count(), 0, "dropped");
    let (ok, err) = status_cached(cluster, home.path());
    assert!(ok, "{err}");
    let fourth = cached_identity(&dir).2["csr"]
        .as_str()
        .expect("csr")
        .to_owned();
    assert_ne!(fourth, third);
    for csr in [fourth, second] {
        if let Err(err) = csrs.delete(&csr, &Default::default()).await {
            panic!("cleaning up CSR {csr}: {err}");
        }
    }
}

#[tokio::test]
async fn status_with_a_service_account_token_from_the_kubeconfig() {
    let cluster = TestCluster::shared();
    cluster.ensure_agent().expect("agent");
    let kubeconfig = service_account_kubeconfig(cluster, "tf-callers", "viewer", "tenantflux-user");
    let status = status_json(cluster, Some(&kubeconfig));
    assert_eq!(status["agent"]["namespace"], AGENT_NAMESPACE);
    assert!(status["operator"]["phase"].is_string(), "{status:#}");
}

#[test]
fn a_call_with_a_token_the_api_server_does_not_know_is_unauthenticated() {
    let cluster = TestCluster::shared();
    cluster.ensure_agent().expect("agent");
    let bogus = "not-a-real-token-6f1d2c";
    let output = cluster
        .kubectl_tenantflux(None, &["status", "--token", bogus])
        .expect("status");
    // 6: unauthenticated or forbidden.
    assert_eq!(output.status.code(), Some(6), "{}", stderr(&output));
    let err = stderr(&output);
    assert!(
        err.contains("the agent rejected the credentials"),
        "stderr: {err}"
    );
    assert!(!err.contains(bogus), "the token leaked into stderr: {err}");
    assert!(!stdout(&output).contains(bogus));
    let log = std::fs::read_to_string(cluster.dir().join("agent.log")).unwrap_or_default();
    assert!(!log.contains(bogus), "the token leaked into the agent log");
}

#[test]
fn a_caller_without_the_permission_is_told_which_one_is_missing() {
    let cluster = TestCluster::shared();
    cluster.ensure_agent().expect("agent");
    // Enough to check the agent's pod and reach it through a port-forward, but nothing of the
    // agent's API.
    cluster
        .apply_yaml(&format!(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\n\
             metadata: {{name: port-forward-only, namespace: {AGENT_NAMESPACE}}}\n\
             rules:\n\
             - {{apiGroups: [''], resources: [pods], verbs: [get, list]}}\n\
             - {{apiGroups: [''], resources: [pods/portforward], verbs: [get, create]}}\n\
             - {{apiGroups: [apps], resources: [deployments, replicasets], verbs: [get]}}\n"
        ))
        .expect("role");
    let kubeconfig =
        service_account_kubeconfig(cluster, "tf-callers", "outsider", "port-forward-only");
    let output = cluster
        .kubectl_tenantflux(Some(&kubeconfig), &["status"])
        .expect("status");
    assert_eq!(output.status.code(), Some(6), "{}", stderr(&output));
    let err = stderr(&output);
    assert!(
        err.contains("system:serviceaccount:tf-callers:outsider"),
        "stderr: {err}"
    );
    assert!(
        err.contains(r#"may not get agents.tenantflux.io/status in namespace "tenantflux-system""#),
        "stderr: {err}"
    );
}

#[test]
fn a_missing_agent_pod_names_the_namespace_and_the_selector() {
    let cluster = TestCluster::shared();
    cluster
        .kubectl_ok(&[
            "create",
            "namespace",
            "tf-no-agent",
            "--dry-run=client",
            "-o",
            "yaml",
        ])
        .and_then(|yaml| cluster.apply_yaml(&yaml))
        .expect("namespace");
    let output = cluster
        .kubectl_tenantflux(None, &["status", "--agent-namespace", "tf-no-agent"])
        .expect("status");
    // 3: the agent is unreachable, which a script may retry.
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    let err = stderr(&output);
    assert!(err.contains("namespace tf-no-agent"), "stderr: {err}");
    assert!(
        err.contains("app.kubernetes.io/name=tenantflux-agent"),
        "stderr: {err}"
    );
    assert!(stdout(&output).is_empty());
}

#[test]
fn deploy_manifests_apply_cleanly_with_a_server_dry_run() {
    let cluster = TestCluster::shared();
    let manifests = repo_root().join("deploy/manifests");
    // A server-side dry run cannot create the namespace the other objects go into. The agent
    // may already run here, applied by another field manager: that must not conflict either.
    cluster
        .kubectl_ok(&[
            "apply",
            "--server-side",
            "--field-manager=tenantflux-tests",
            "-f",
            manifests.join("namespace.yaml").to_str().unwrap(),
        ])
        .expect("namespace");
    let out = cluster
        .kubectl_ok(&[
            "apply",
            "--server-side",
            "--field-manager=tenantflux-tests",
            "--dry-run=server",
            "-k",
            manifests.to_str().unwrap(),
        ])
        .expect("server dry run of deploy/manifests");
    for object in [
        "serviceaccount/tenantflux-agent",
        "serviceaccount/tenantflux-client",
        "deployment.apps/tenantflux-agent",
        "service/tenantflux-agent",
        "role.rbac.authorization.k8s.io/tenantflux-user",
    ] {
        assert!(out.contains(object), "{object} missing from:\n{out}");
    }
    assert!(out.contains("(server dry run)"), "{out}");
}

/// Reads JSON documents from a `status -w -o json` process as they arrive.
struct Watch {
    child: Child,
    documents: mpsc::Receiver<Value>,
    stderr: mpsc::Receiver<String>,
}

impl Watch {
    fn start(cluster: &TestCluster) -> Watch {
        let mut child = cluster
            .plugin_command(None, &["status", "-w", "-o", "json"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start kubectl tenantflux status -w");
        let (doc_tx, documents) = mpsc::channel();
        let out = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            let docs = serde_json::Deserializer::from_reader(out).into_iter::<Value>();
            for doc in docs.map_while(Result::ok) {
                if doc_tx.send(doc).is_err() {
                    break;
                }
            }
        });
        let (err_tx, stderr) = mpsc::channel();
        let err = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                if err_tx.send(line).is_err() {
                    break;
                }
            }
        });
        Watch {
            child,
            documents,
            stderr,
        }
    }

    /// The next status the watch prints that satisfies `wanted`.
    fn next_matching(
        &self,
        what: &str,
        timeout: Duration,
        wanted: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = Instant::now() + timeout;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.documents.recv_timeout(left) {
                Ok(doc) if wanted(&doc) => return doc,
                Ok(doc) => seen.push(doc),
                Err(_) => {
                    let stderr: Vec<String> = self.stderr.try_iter().collect();
                    panic!(
                        "no status with {what} within {timeout:?}; saw {} others (last: {:#}); stderr: {stderr:#?}",
                        seen.len(),
                        seen.last().cloned().unwrap_or_default()
                    );
                }
            }
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn the_watch_goes_on_across_an_agent_restart() {
    // Restarting the agent would disturb the other tests, so this one has a cluster of its own.
    let cluster =
        TestCluster::start(&format!("tf-restart-{}", std::process::id())).expect("own cluster");
    cluster.ensure_agent().expect("agent");
    let watch = Watch::start(&cluster);
    watch.next_matching(
        "flux-operator not installed",
        Duration::from_secs(60),
        |s| s["operator"]["phase"] == "not-installed",
    );

    cluster.restart_agent().expect("restart the agent");
    // A change made after the restart reaches the same watch through a new port-forward.
    cluster
        .apply_yaml(
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: flux-system}\n---\n\
         apiVersion: apps/v1\nkind: Deployment\n\
         metadata: {name: flux-operator, namespace: flux-system, labels: {app.kubernetes.io/name: flux-operator, app.kubernetes.io/version: v0.58.1}}\n\
         spec:\n  selector: {matchLabels: {app.kubernetes.io/name: flux-operator}}\n\
         \x20 template:\n    metadata: {labels: {app.kubernetes.io/name: flux-operator}}\n\
         \x20   spec: {containers: [{name: manager, image: 'ghcr.io/controlplaneio-fluxcd/flux-operator:v0.58.1'}]}\n",
    )
    .expect("flux-operator Deployment");
    let status = watch.next_matching("flux-operator ready", Duration::from_secs(90), |s| {
        s["operator"]["phase"] == "ready"
    });
    assert_eq!(status["operator"]["version"], "v0.58.1");
    let stderr: Vec<String> = watch.stderr.try_iter().collect();
    assert!(
        stderr.iter().any(|line| line.contains("reconnecting")),
        "the watch did not say it reconnected: {stderr:#?}"
    );
}
