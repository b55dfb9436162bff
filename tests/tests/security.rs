//! Attacks on the plugin, tried on the real control plane (SECURITY.md lists what each test
//! stands for):
//! - a Secret writer's kubeconfig that would run a command or read the platform's files on
//!   the next `fleet status` / `fleet policy push` (finding 1);
//! - a pod that carries the agent's labels without being the agent's, waiting for the
//!   plugin's token (finding 5);
//! - the agent's pod itself, a process the tenant runs, receiving a kubeconfig user's own
//!   bearer token: it gets a proof of identity instead, unless `--forward-token` says so.

use std::{
    path::{Path, PathBuf},
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::api::{Api, ObjectMeta, PostParams};
use tenantflux_tests::{TestCluster, json, path, stderr, stdout, wait_for};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

const AGENT_NAMESPACE: &str = "tenantflux-system";

/// A field of the cluster admin's kubeconfig (kwokctl's: file paths for the CA and the
/// client certificate and key).
fn admin_kubeconfig_field(cluster: &TestCluster, jsonpath: &str) -> String {
    cluster
        .kubectl_ok(&[
            "config",
            "view",
            "--minify",
            "--raw",
            "-o",
            &format!("jsonpath={{{jsonpath}}}"),
        ])
        .unwrap_or_else(|err| panic!("kubeconfig field {jsonpath}: {err}"))
}

/// A kubeconfig for `cluster` with the CA inline and `user` (a YAML flow mapping) as its user.
fn kubeconfig_with_user(cluster: &TestCluster, user: &str) -> String {
    let server = admin_kubeconfig_field(cluster, ".clusters[0].cluster.server");
    let ca_path = admin_kubeconfig_field(cluster, ".clusters[0].cluster.certificate-authority");
    let ca = std::fs::read(&ca_path).unwrap_or_else(|err| panic!("reading {ca_path}: {err}"));
    let ca = base64(&ca);
    format!(
        "apiVersion: v1\nkind: Config\n\
         clusters: [{{name: tenant, cluster: {{server: \"{server}\", certificate-authority-data: \"{ca}\"}}}}]\n\
         users: [{{name: admin, user: {user}}}]\n\
         contexts: [{{name: tenant, context: {{cluster: tenant, user: admin}}}}]\n\
         current-context: tenant\n"
    )
}

/// Standard base64 (the tests crate has no encoder of its own; `base64` the tool is
/// everywhere kubectl is).
fn base64(bytes: &[u8]) -> String {
    use std::io::Write as _;
    let mut child = std::process::Command::new("base64")
        .arg("-w0")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("base64");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(bytes)
        .expect("writing to base64");
    let output = child.wait_with_output().expect("base64");
    assert!(output.status.success());
    String::from_utf8(output.stdout).expect("base64 is ASCII")
}

async fn create_namespace(client: &kube::Client, name: &str) {
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &k8s_openapi::api::core::v1::Namespace {
                metadata: ObjectMeta {
                    name: Some(name.to_owned()),
                    ..ObjectMeta::default()
                },
                ..Default::default()
            },
        )
        .await
        .unwrap_or_else(|err| panic!("creating namespace {name}: {err}"));
}

/// Each kind of kubeconfig a Secret writer could plant, and what honouring it would do: run
/// a command that leaves `marker` behind, read the pusher's token from a file, read the
/// admin's client certificate and key from files. Every one of them works (the fleet file
/// below uses them), so only the refusal keeps them out.
struct Planted {
    marker: PathBuf,
    kubeconfigs: Vec<(&'static str, String, &'static str)>,
}

fn planted(cluster: &TestCluster, dir: &Path) -> Planted {
    let marker = dir.join("exec-ran");
    // The exec plugin hands back the admin's client certificate (ExecCredential), after
    // touching the marker.
    let cert_path = admin_kubeconfig_field(cluster, ".users[0].user.client-certificate");
    let key_path = admin_kubeconfig_field(cluster, ".users[0].user.client-key");
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_else(|err| panic!("{p}: {err}"));
    let credential = dir.join("exec-credential.json");
    std::fs::write(
        &credential,
        serde_json::json!({
            "apiVersion": "client.authentication.k8s.io/v1",
            "kind": "ExecCredential",
            "status": {"clientCertificateData": read(&cert_path), "clientKeyData": read(&key_path)},
        })
        .to_string(),
    )
    .unwrap();
    let exec = format!(
        "{{exec: {{apiVersion: client.authentication.k8s.io/v1, command: /bin/sh, \
         args: [-c, 'touch {} && cat {}'], interactiveMode: Never}}}}",
        marker.display(),
        credential.display()
    );
    // The token of an account that may push policies, as a mounted ServiceAccount token is.
    let pusher = cluster.policy_pusher_kubeconfig().expect("pusher account");
    let pusher_token = std::fs::read_to_string(&pusher)
        .unwrap()
        .split("token: \"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("the pusher kubeconfig holds a token")
        .to_owned();
    let token_file = dir.join("token");
    std::fs::write(&token_file, &pusher_token).unwrap();
    let token = format!("{{tokenFile: {}}}", token_file.display());
    let key = format!("{{client-certificate: {cert_path}, client-key: {key_path}}}");
    Planted {
        marker,
        kubeconfigs: vec![
            (
                "exec",
                kubeconfig_with_user(cluster, &exec),
                "users[0].user.exec (runs a command)",
            ),
            (
                "tokenfile",
                kubeconfig_with_user(cluster, &token),
                "users[0].user.tokenFile (reads a local file)",
            ),
            (
                "clientkey",
                kubeconfig_with_user(cluster, &key),
                "users[0].user.client-key (reads a local file)",
            ),
        ],
    }
}

/// The policy the agent holds, as stored in its ConfigMap (None: it holds none).
async fn held_policy(client: &kube::Client) -> Option<String> {
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), AGENT_NAMESPACE);
    maps.get_opt("tenantflux-policy")
        .await
        .expect("reading ConfigMap tenantflux-policy")
        .and_then(|map| map.data?.get("signed-policy.yaml").cloned())
}

#[tokio::test]
async fn kubeconfigs_from_secrets_run_no_command_and_read_no_file() {
    let cluster =
        TestCluster::start(&format!("sec-fleet-{}", std::process::id())).expect("own cluster");
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys");
    let run = |args: &[&str]| {
        cluster
            .kubectl_tenantflux(None, args)
            .unwrap_or_else(|err| panic!("kubectl tenantflux {args:?}: {err}"))
    };
    let out = run(&["policy", "keygen", "--out", path(&keys)]);
    assert!(out.status.success(), "{}", stderr(&out));
    cluster
        .restart_agent_with(&[(
            "TENANTFLUX_POLICY_PUBLIC_KEY",
            path(&keys.join("ed25519.pub")),
        )])
        .expect("agent with the policy key");
    let unsigned = dir.path().join("policy.yaml");
    std::fs::write(
        &unsigned,
        "apiVersion: tenantflux.io/v1alpha1\nkind: Policy\nmetadata: {name: fleet}\nspec: {generation: 1}\n",
    )
    .unwrap();
    let signed = dir.path().join("signed.yaml");
    let out = run(&[
        "policy",
        "sign",
        "-f",
        path(&unsigned),
        "--key",
        path(&keys.join("ed25519.key")),
        "--out",
        path(&signed),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));

    // The cluster is its own management cluster: the Secrets point back at it.
    let planted = planted(&cluster, dir.path());
    let client = cluster.client().await.expect("client");
    let namespace = "tenant-planted";
    create_namespace(&client, namespace).await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    for (name, kubeconfig, _) in &planted.kubeconfigs {
        secrets
            .create(
                &PostParams::default(),
                &Secret {
                    metadata: ObjectMeta {
                        name: Some(format!("kubernetes-{name}-admin-kubeconfig")),
                        ..ObjectMeta::default()
                    },
                    string_data: Some([("admin.conf".to_owned(), kubeconfig.clone())].into()),
                    ..Secret::default()
                },
            )
            .await
            .unwrap_or_else(|err| panic!("creating Secret for {name}: {err}"));
    }
    let before = held_policy(&client).await;
    assert_eq!(before, None, "the agent starts without a policy");

    let status = run(&["fleet", "status", "-n", namespace, "-o", "json"]);
    assert_eq!(status.status.code(), Some(1), "{}", stderr(&status));
    let push = |fleet: &[&str]| {
        let mut args = vec!["fleet", "policy", "push", "-f", path(&signed), "--all"];
        args.extend(fleet);
        args.extend(["-o", "json"]);
        run(&args)
    };
    let pushed = push(&["-n", namespace]);
    assert_eq!(pushed.status.code(), Some(1), "{}", stderr(&pushed));
    for (answer, outcome) in [(json(&status), "state"), (json(&pushed), "result")] {
        let rows = answer["clusters"].as_array().expect("clusters");
        assert_eq!(rows.len(), planted.kubeconfigs.len(), "{answer:#}");
        for (name, _, field) in &planted.kubeconfigs {
            let row = rows
                .iter()
                .find(|row| row["cluster"] == format!("kubernetes-{name}"))
                .unwrap_or_else(|| panic!("no row for {name}: {answer:#}"));
            assert_eq!(row[outcome], "error", "{row:#}");
            let reason = row["reason"].as_str().unwrap_or_default();
            assert!(
                reason.starts_with(&format!(
                    "refused the kubeconfig in Secret {namespace}/kubernetes-{name}-admin-kubeconfig key admin.conf"
                )),
                "{reason}"
            );
            assert!(reason.contains(field), "{reason}");
            assert!(reason.contains("nothing of it was used"), "{reason}");
        }
    }
    assert!(
        !planted.marker.exists(),
        "the exec plugin of a Secret's kubeconfig ran"
    );
    assert_eq!(
        held_policy(&client).await,
        None,
        "a policy reached the agent through a refused kubeconfig"
    );

    // The same kubeconfigs in the platform's own fleet file are honoured: each one reaches
    // the agent (one at a time, so the first takes the policy and the others find it held),
    // and the exec plugin runs.
    let fleet_file = dir.path().join("fleet.yaml");
    let mut entries = String::new();
    for (name, kubeconfig, _) in &planted.kubeconfigs {
        std::fs::write(dir.path().join(format!("{name}.kubeconfig")), kubeconfig).unwrap();
        entries.push_str(&format!(
            "- {{name: {name}, tenant: own, kubeconfig: {name}.kubeconfig}}\n"
        ));
    }
    std::fs::write(&fleet_file, entries).unwrap();
    // --forward-token: the tokenFile's token itself goes to the agent (without it the fleet
    // would request a token for its own account, which the pusher may not).
    let pushed = push(&[
        "--fleet-file",
        path(&fleet_file),
        "--concurrency",
        "1",
        "--forward-token",
    ]);
    assert!(
        pushed.status.success(),
        "{}\n{}",
        stdout(&pushed),
        stderr(&pushed)
    );
    let results: Vec<String> = json(&pushed)["clusters"]
        .as_array()
        .expect("clusters")
        .iter()
        .map(|row| row["result"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(results, ["accepted", "unchanged", "unchanged"]);
    assert!(planted.marker.exists(), "the fleet file's exec plugin ran");
    assert!(held_policy(&client).await.is_some());
}

/// A local stand-in for an impostor's process: counts the connections a port-forward to the
/// impostor's pods brings, and what they carry.
struct Trap {
    port: u16,
    connections: Arc<AtomicUsize>,
    received: Arc<std::sync::Mutex<Vec<u8>>>,
}

impl Trap {
    async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let connections = Arc::new(AtomicUsize::new(0));
        let received = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (count, bytes) = (connections.clone(), received.clone());
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                let bytes = bytes.clone();
                tokio::spawn(async move {
                    let mut buffer = [0; 4096];
                    while let Ok(n @ 1..) = stream.read(&mut buffer).await {
                        bytes.lock().unwrap().extend_from_slice(&buffer[..n]);
                    }
                });
            }
        });
        Self {
            port,
            connections,
            received,
        }
    }

    fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    fn received(&self) -> String {
        String::from_utf8_lossy(&self.received.lock().unwrap()).into_owned()
    }
}

/// Routes port-forwards to `pod`'s port 9090 to `port` on this machine (kwok's PortForward),
/// and returns once one really arrives there: a port-forward the plugin opened would too.
async fn route_to(
    cluster: &TestCluster,
    client: &kube::Client,
    namespace: &str,
    pod: &str,
    port: u16,
    arrived: impl Fn() -> usize,
) {
    cluster
        .apply_yaml(&format!(
            "apiVersion: kwok.x-k8s.io/v1alpha1\nkind: PortForward\n\
             metadata: {{name: {pod}, namespace: {namespace}}}\n\
             spec: {{forwards: [{{ports: [9090], target: {{address: 127.0.0.1, port: {port}}}}}]}}\n"
        ))
        .expect("PortForward");
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let before = arrived();
    wait_for(
        &format!("a port-forward to pod {namespace}/{pod} to arrive at 127.0.0.1:{port}"),
        Duration::from_secs(60),
        || {
            let pods = pods.clone();
            let arrived = &arrived;
            async move {
                if arrived() > before {
                    return Some(());
                }
                let mut forwarder = pods.portforward(pod, &[9090]).await.ok()?;
                let mut stream = forwarder.take_stream(9090)?;
                stream.write_all(b"probe").await.ok()?;
                stream.flush().await.ok()?;
                tokio::time::sleep(Duration::from_millis(200)).await;
                drop(stream);
                (arrived() > before).then_some(())
            }
        },
    )
    .await
    .expect("port-forward route");
}

/// A pod spec running as `account`, with the agent's container port.
fn pod_spec(account: &str) -> String {
    format!(
        "{{serviceAccountName: {account}, containers: [{{name: agent, image: impostor:1, \
         ports: [{{name: grpc, containerPort: 9090}}]}}]}}"
    )
}

/// A Deployment `tenantflux-agent` with the agent's labels, its pods running as `account`.
fn deployment(namespace: &str, account: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\n\
         metadata: {{name: tenantflux-agent, namespace: {namespace}}}\n\
         spec:\n  replicas: 1\n  selector: {{matchLabels: {{app.kubernetes.io/name: tenantflux-agent}}}}\n  \
         template:\n    metadata: {{labels: {{app.kubernetes.io/name: tenantflux-agent}}}}\n    \
         spec: {}\n",
        pod_spec(account)
    )
}

/// A pod of no controller with the agent's labels, running as `account`.
fn bare_pod(namespace: &str, name: &str, account: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\n\
         metadata: {{name: {name}, namespace: {namespace}, labels: {{app.kubernetes.io/name: tenantflux-agent}}}}\n\
         spec: {}\n",
        pod_spec(account)
    )
}

/// The names of the Running and Ready pods with the agent's label in `namespace`, once there
/// are `count`.
async fn ready_pods(client: &kube::Client, namespace: &str, count: usize) -> Vec<String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    wait_for(
        &format!("{count} Ready pods in {namespace}"),
        Duration::from_secs(120),
        || {
            let pods = pods.clone();
            async move {
                let list = pods
                    .list(
                        &kube::api::ListParams::default()
                            .labels("app.kubernetes.io/name=tenantflux-agent"),
                    )
                    .await
                    .ok()?;
                let ready: Vec<String> = list
                    .items
                    .iter()
                    .filter(|pod| {
                        pod.status.as_ref().is_some_and(|s| {
                            s.conditions
                                .iter()
                                .flatten()
                                .any(|c| c.type_ == "Ready" && c.status == "True")
                        })
                    })
                    .filter_map(|pod| pod.metadata.name.clone())
                    .collect();
                (ready.len() == count).then_some(ready)
            }
        },
    )
    .await
    .expect("pods Ready")
}

#[tokio::test]
async fn a_pod_with_the_agents_labels_gets_no_token_unless_it_is_the_agents() {
    let cluster = TestCluster::shared();
    cluster.ensure_agent().expect("agent");
    let client = cluster.client().await.expect("client");
    let pid = std::process::id();
    let trap = Trap::start().await;
    let marker = format!("tf-marker-token-{pid}");

    // Only impostors: a Deployment tenantflux-agent whose pods run as another account, and a
    // bare pod that runs as tenantflux-agent but belongs to no Deployment.
    let impostors = format!("tf-impostors-{pid}");
    create_namespace(&client, &impostors).await;
    cluster
        .apply_yaml(&format!(
            "apiVersion: v1\nkind: ServiceAccount\nmetadata: {{name: tenantflux-agent, namespace: {impostors}}}\n---\n\
             {}---\n{}",
            deployment(&impostors, "default"),
            bare_pod(&impostors, "tenantflux-agent-bare", "tenantflux-agent"),
        ))
        .expect("impostors");
    let pods = ready_pods(&client, &impostors, 2).await;
    for pod in &pods {
        route_to(cluster, &client, &impostors, pod, trap.port, || {
            trap.connections()
        })
        .await;
    }
    let probes = trap.connections();

    for token in [Some(marker.as_str()), None] {
        let mut args = vec!["status", "--agent-namespace", impostors.as_str()];
        if let Some(token) = token {
            args.extend(["--token", token]);
        }
        let output = cluster
            .plugin_command(None, &args)
            .env("TENANTFLUX_VERBOSE", "1")
            .output()
            .expect("kubectl tenantflux status");
        assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
        let err = stderr(&output);
        assert!(
            err.contains(&format!("refused every pod in namespace {impostors}")),
            "{err}"
        );
        assert!(err.contains("sent them no credential"), "{err}");
        let deployed = pods.iter().find(|p| *p != "tenantflux-agent-bare").unwrap();
        assert!(
            err.contains(&format!(
                "pod {deployed}: it runs as ServiceAccount default, not tenantflux-agent"
            )),
            "{err}"
        );
        assert!(
            err.contains("pod tenantflux-agent-bare: it was not created by a ReplicaSet of Deployment tenantflux-agent"),
            "{err}"
        );
        assert!(!err.contains("sending"), "{err}");
        assert!(!err.contains(&marker), "{err}");
        // The plugin has exited: a connection it made would have been counted.
        assert_eq!(
            trap.connections(),
            probes,
            "the plugin connected to an impostor"
        );
    }
    assert!(!trap.received().contains(&marker));

    // The agent's own pod next to a newer impostor: the plugin goes to the agent's pod, says
    // what it sends there, and names the impostor it passed over.
    let lookalike = format!("tf-lookalike-{pid}");
    create_namespace(&client, &lookalike).await;
    cluster
        .apply_yaml(&format!(
            "apiVersion: v1\nkind: ServiceAccount\nmetadata: {{name: tenantflux-agent, namespace: {lookalike}}}\n---\n{}",
            deployment(&lookalike, "tenantflux-agent"),
        ))
        .expect("the agent's Deployment");
    let agent_pod = ready_pods(&client, &lookalike, 1).await.remove(0);
    let agent_port: u16 = cluster
        .agent_grpc_address()
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("the agent's port");
    cluster
        .apply_yaml(&format!(
            "apiVersion: kwok.x-k8s.io/v1alpha1\nkind: PortForward\n\
             metadata: {{name: {agent_pod}, namespace: {lookalike}}}\n\
             spec: {{forwards: [{{ports: [9090], target: {{address: 127.0.0.1, port: {agent_port}}}}}]}}\n"
        ))
        .expect("PortForward to the agent");
    // Created after the agent's pod, and named to sort first when both were created in the
    // same second: the plugin meets it first either way.
    cluster
        .apply_yaml(&bare_pod(
            &lookalike,
            "tenantflux-agent-0-impostor",
            "default",
        ))
        .expect("impostor");
    ready_pods(&client, &lookalike, 2).await;
    route_to(
        cluster,
        &client,
        &lookalike,
        "tenantflux-agent-0-impostor",
        trap.port,
        || trap.connections(),
    )
    .await;
    let probes = trap.connections();

    let token = cluster
        .kubectl_ok(&[
            "-n",
            AGENT_NAMESPACE,
            "create",
            "token",
            "tenantflux-client",
            "--audience",
            "tenantflux-agent",
            "--duration=10m",
        ])
        .expect("a token of tenantflux-client");
    let token = token.trim();
    let args = [
        "status",
        "--agent-namespace",
        lookalike.as_str(),
        "--token",
        token,
        "-o",
        "json",
    ];
    // kwok picks the agent pod's PortForward up asynchronously: retried until it has.
    let mut output = None;
    for _ in 0..60 {
        let answer = cluster
            .plugin_command(None, &args)
            .env("TENANTFLUX_VERBOSE", "1")
            .output()
            .expect("kubectl tenantflux status");
        let done = answer.status.success();
        output = Some(answer);
        if done {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let output = output.expect("status ran");
    assert!(output.status.success(), "{}", stderr(&output));
    let err = stderr(&output);
    assert!(
        err.contains(&format!(
            "warning: ignored pod tenantflux-agent-0-impostor in namespace {lookalike}: it has the agent's labels, \
             but it runs as ServiceAccount default, not tenantflux-agent"
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "sending the bearer token of --token (TENANTFLUX_TOKEN) to tenantflux-agent pod {agent_pod} \
             in namespace {lookalike} (checked: it runs as ServiceAccount tenantflux-agent and belongs to \
             Deployment tenantflux-agent)"
        )),
        "{err}"
    );
    assert!(!err.contains(token), "the token leaked into stderr");
    assert!(json(&output)["agent"].is_object(), "{}", stdout(&output));
    assert_eq!(
        trap.connections(),
        probes,
        "the plugin connected to the impostor"
    );
    assert!(!trap.received().contains(token));
}

#[tokio::test]
async fn a_kubeconfig_token_stays_with_the_api_server_unless_forwarded() {
    let cluster = TestCluster::shared();
    cluster.ensure_agent().expect("agent");
    let namespace = format!("tf-token-user-{}", std::process::id());
    let user = cluster
        .token_kubeconfig(&namespace, "reader")
        .expect("a token user");
    cluster
        .apply_yaml(&format!(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\n\
             metadata: {{name: {namespace}-reader, namespace: tenantflux-system}}\n\
             roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: tenantflux-user}}\n\
             subjects: [{{kind: ServiceAccount, name: reader, namespace: {namespace}}}]\n"
        ))
        .expect("the reader may read the agent's status");
    let token = std::fs::read_to_string(&user)
        .unwrap()
        .split("token: \"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("the kubeconfig holds a token")
        .to_owned();
    let status = |extra: &[&str]| {
        let mut args = vec!["status", "-o", "json", "--no-credential-cache"];
        args.extend(extra);
        cluster
            .plugin_command(Some(&user), &args)
            .env("TENANTFLUX_VERBOSE", "1")
            .output()
            .expect("kubectl tenantflux status")
    };

    // By default the agent gets a proof of who the user is, made with a CSR the user created
    // through the API server: the token never leaves for the agent's pod.
    let output = status(&[]);
    assert!(output.status.success(), "{}", stderr(&output));
    let err = stderr(&output);
    assert!(
        err.contains("sending a proof of your identity with CertificateSigningRequest"),
        "{err}"
    );
    assert!(!err.contains("bearer token"), "{err}");
    assert!(!err.contains(&token), "the token leaked into stderr");
    let csrs: serde_json::Value = serde_json::from_str(
        &cluster
            .kubectl_ok(&["get", "certificatesigningrequests", "-o", "json"])
            .expect("CSRs"),
    )
    .unwrap();
    let by_reader = format!("system:serviceaccount:{namespace}:reader");
    assert!(
        csrs["items"].as_array().into_iter().flatten().any(|csr| {
            csr["spec"]["username"] == by_reader.as_str()
                && csr["spec"]["signerName"] == "tenantflux.io/caller-identity"
        }),
        "the user proved who they are with an identity CSR of their own"
    );

    // Asked for, the token itself is sent, with a warning that says what that exposes.
    let output = status(&["--forward-token"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let err = stderr(&output);
    assert!(
        err.contains("warning: --forward-token sends your kubeconfig user's own bearer token to the agent's pod"),
        "{err}"
    );
    assert!(
        err.contains("sending the kubeconfig user's own bearer token to tenantflux-agent pod"),
        "{err}"
    );
    assert!(!err.contains(&token), "the token leaked into stderr");
}
