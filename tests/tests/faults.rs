//! Faults against the real control plane: the agent killed with SIGKILL in the middle of each
//! long operation it runs (the flux-operator install, a policy push with its store and
//! admission policy, the create of the FluxInstance from policy defaults), etcd and the API
//! server stopped for 30 s, no management side at all, and plugins racing on one object. Each
//! test runs on a cluster of its own, one at a time, taken down however the test ends.

use std::{
    io::{Read as _, Seek as _, Write as _},
    net::TcpStream,
    path::Path,
    process::{Command, Output, Stdio},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread,
    time::{Duration, Instant},
};

use serde_json::Value;
use tenantflux_tests::{
    TestCluster, operator_bundle, path,
    tenant::{
        AGENT_NAMESPACE, APPS, Tenant, compliant_instance, defaults_record, instance_json,
        wait_enforced,
    },
    tool_path, wait_for,
};

/// One cluster at a time: the machine is small.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The agent's log filter in these tests: its debug lines mark the steps the kills aim at.
const DEBUG_LOG: (&str, &str) = (
    "RUST_LOG",
    "info,tenantflux_agent=debug,kube_client::client::builder=off",
);

fn cluster(purpose: &str) -> TestCluster {
    TestCluster::start(&format!("ft-{purpose}-{}", std::process::id()))
        .unwrap_or_else(|err| panic!("starting the cluster for {purpose}: {err}"))
}

fn alive(pid: u32) -> bool {
    // A zombie is dead too: its state in /proc is Z.
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

/// What the agent logged after byte `offset` of `log`.
fn log_since(log: &std::path::Path, offset: u64) -> String {
    let mut seen = String::new();
    if let Ok(mut file) = std::fs::File::open(log) {
        let _ = file.seek(std::io::SeekFrom::Start(offset));
        let _ = file.read_to_string(&mut seen);
    }
    seen
}

/// Runs `action` (which starts the agent or makes it work) and kills the agent with SIGKILL
/// as soon as its log shows a line containing `trigger`; returns that line.
fn kill_9_when(cluster: &TestCluster, trigger: &str, action: impl FnOnce()) -> String {
    let trigger = trigger.to_owned();
    let log = cluster.dir().join("agent.log");
    let offset = std::fs::metadata(&log).map_or(0, |m| m.len());
    let pidfile = cluster.dir().join("agent.pid");
    let watcher = thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(180);
        let mut seen = String::new();
        while Instant::now() < deadline {
            seen = log_since(&log, offset);
            if let Some(line) = seen.lines().find(|l| l.contains(&trigger)) {
                let pid: u32 = std::fs::read_to_string(&pidfile)
                    .expect("agent.pid")
                    .trim()
                    .parse()
                    .expect("a pid");
                let killed = Command::new("kill")
                    .args(["-9", &pid.to_string()])
                    .status()
                    .is_ok_and(|s| s.success());
                assert!(killed, "kill -9 {pid}");
                while alive(pid) {
                    thread::sleep(Duration::from_millis(10));
                }
                return line.to_owned();
            }
            // No sleep: the kill must land within the next request the agent makes.
            thread::yield_now();
        }
        panic!("the agent never logged {trigger:?}; it logged:\n{seen}");
    });
    action();
    let line = watcher.join().expect("the kill watcher");
    eprintln!("killed the agent (SIGKILL) at: {line}");
    line
}

fn kubectl_json(cluster: &TestCluster, args: &[&str]) -> Value {
    let mut all = vec!["get"];
    all.extend_from_slice(args);
    all.extend(["-o", "json"]);
    let text = cluster.kubectl_ok(&all).expect("kubectl get");
    serde_json::from_str(&text).expect("JSON")
}

/// The Events the agent recorded (`object/Reason`, oldest first).
fn event_reasons(cluster: &TestCluster) -> Vec<String> {
    let events = kubectl_json(cluster, &["-n", AGENT_NAMESPACE, "events"]);
    let mut reasons: Vec<(String, String)> = events["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| {
            e["reportingComponent"] == "tenantflux-agent"
                || e["source"]["component"] == "tenantflux-agent"
        })
        .map(|e| {
            let count = e["count"].as_u64().unwrap_or(1);
            (
                e["metadata"]["creationTimestamp"]
                    .as_str()
                    .unwrap_or("")
                    .to_owned(),
                format!(
                    "{}/{}{}",
                    e["involvedObject"]["name"].as_str().unwrap_or(""),
                    e["reason"].as_str().unwrap_or(""),
                    if count > 1 {
                        format!(" x{count}")
                    } else {
                        String::new()
                    }
                ),
            )
        })
        .collect();
    reasons.sort();
    reasons.into_iter().map(|(_, r)| r).collect()
}

fn status(cluster: &TestCluster, kubeconfig: Option<&Path>) -> Option<Value> {
    let output = cluster
        .kubectl_tenantflux(kubeconfig, &["status", "-o", "json"])
        .ok()?;
    output
        .status
        .success()
        .then(|| serde_json::from_slice(&output.stdout).ok())
        .flatten()
}

async fn wait_operator_ready(cluster: &TestCluster) -> Value {
    wait_for(
        "the operator install READY",
        Duration::from_secs(240),
        || {
            let found = status(cluster, None)
                .map(|s| s["operator"].clone())
                .filter(|o| o["phase"] == "ready");
            async move { found }
        },
    )
    .await
    .unwrap_or_else(|err| {
        panic!(
            "{err}; status: {:#}",
            status(cluster, None).unwrap_or_default()
        )
    })
}

/// What an install leaves in the cluster: the record, every object carrying the agent's
/// label, and the operator Deployment's spec.
fn install_state(cluster: &TestCluster) -> Value {
    let record = kubectl_json(
        cluster,
        &[
            "-n",
            AGENT_NAMESPACE,
            "configmap",
            "tenantflux-operator-install",
        ],
    );
    let labelled = |args: &[&str]| -> Vec<String> {
        let mut all = vec!["get"];
        all.extend_from_slice(args);
        all.extend([
            "-l",
            "app.kubernetes.io/managed-by=tenantflux-agent",
            "-o",
            "name",
        ]);
        let mut names: Vec<String> = cluster
            .kubectl_ok(&all)
            .expect("kubectl get -l")
            .lines()
            .map(str::to_owned)
            .collect();
        names.sort();
        names
    };
    let deployment = kubectl_json(
        cluster,
        &["-n", "flux-system", "deployment", "flux-operator"],
    );
    serde_json::json!({
        "record": record["data"],
        "cluster-scoped": labelled(&["crd,clusterrole,clusterrolebinding,namespace"]),
        "namespaced": labelled(&["-n", "flux-system", "serviceaccount,role,rolebinding,service,deployment"]),
        "deployment": deployment["spec"],
        "deploymentGeneration": deployment["metadata"]["generation"],
    })
}

#[tokio::test]
async fn kill_9_during_the_operator_install_ends_in_the_same_install() {
    let _serial = SERIAL.lock().await;
    let version = tool_path("FLUX_OPERATOR_VERSION").display().to_string();
    let bundle = std::fs::read_to_string(operator_bundle(&version).expect("bundle")).unwrap();
    let put_bundle = |cluster: &TestCluster| {
        let map = serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "flux-operator-bundle", "namespace": AGENT_NAMESPACE},
            "data": {"install.yaml": bundle},
        });
        cluster
            .apply_yaml(&format!(
                "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {AGENT_NAMESPACE}}}\n---\n{map}"
            ))
            .expect("the bundle ConfigMap");
    };
    let envs = [
        (
            "TENANTFLUX_OPERATOR_BUNDLE",
            "configmap:flux-operator-bundle",
        ),
        ("TENANTFLUX_OPERATOR_VERSION", ">=0.58.0 <0.60.0"),
        ("TENANTFLUX_OPERATOR_RESYNC_INTERVAL", "1h"),
        DEBUG_LOG,
    ];

    // The reference: the same bundle installed without a fault, on a cluster of its own.
    let reference = {
        let cluster = cluster("install-ref");
        put_bundle(&cluster);
        cluster.restart_agent_with(&envs).expect("agent");
        wait_operator_ready(&cluster).await;
        (install_state(&cluster), event_reasons(&cluster))
    };
    eprintln!("reference events: {:?}", reference.1);

    let cluster = cluster("install-kill");
    put_bundle(&cluster);
    // One kill in each step of the install, each on a fresh agent that starts the install over.
    for trigger in [
        "phase=ApplyingCrds",
        "applied object=CustomResourceDefinition",
        "applied object=Namespace",
        "applied object=Deployment",
        "install recorded",
    ] {
        kill_9_when(&cluster, trigger, || {
            // The agent dies under the script that starts it, which then fails: expected.
            let _ = cluster.restart_agent_with(&envs);
        });
    }
    cluster.restart_agent_with(&envs).expect("agent");
    let ready = wait_operator_ready(&cluster).await;
    assert_eq!(ready["version"], version.as_str(), "{ready:#}");
    let state = install_state(&cluster);
    assert_eq!(
        state, reference.0,
        "the install after five kills differs from the uninterrupted one"
    );
    let events = event_reasons(&cluster);
    eprintln!("events after the kills: {events:?}");
    // Never installed twice, never a failure, never a `TookOver` (each restarted agent meets
    // only fields of its own manager); the Installed Event itself may be lost when the
    // kill falls between the record and the Event (Events are best effort).
    let installed = events.iter().filter(|e| e.contains("Installed")).count();
    assert!(installed <= 1, "{events:?}");
    assert!(
        events.iter().all(|e| e.ends_with("/Installed")),
        "unexpected Events: {events:?}"
    );

    // The API server away for 10 s under a running install changes nothing either.
    let pid = cluster.agent_pid().expect("agent pid");
    cluster.apiserver_outage(10).expect("outage");
    // Proof that the agent is past the outage: a change to the bundle's ConfigMap that leaves
    // the bundle as it was must reach the install loop, which reconciles and records again.
    let log = cluster.dir().join("agent.log");
    let offset = std::fs::metadata(&log).map_or(0, |m| m.len());
    cluster
        .kubectl_ok(&[
            "-n",
            AGENT_NAMESPACE,
            "annotate",
            "configmap",
            "flux-operator-bundle",
            "tenantflux.test/touched=after-the-outage",
        ])
        .expect("annotate the bundle ConfigMap");
    wait_for(
        "the install loop to reconcile the touched source after the outage",
        Duration::from_secs(120),
        || {
            let seen = log_since(&log, offset);
            let done = seen
                .split_once("trigger=SourceChanged")
                .is_some_and(|(_, after)| after.contains("install recorded"));
            async move { done.then_some(()) }
        },
    )
    .await
    .unwrap_or_else(|err| panic!("{err}\n{}", log_since(&log, offset)));
    wait_operator_ready(&cluster).await;
    assert_eq!(cluster.agent_pid(), Some(pid));
    assert!(alive(pid), "the agent exited during the outage");
    assert_eq!(install_state(&cluster), state);
    assert_eq!(event_reasons(&cluster), events);
}

#[tokio::test]
async fn kill_9_during_policy_apply_and_defaults_create_ends_in_the_same_state() {
    let _serial = SERIAL.lock().await;
    let cluster = cluster("policy-kill");
    cluster.ensure_flux_operator().expect("flux-operator");
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys");
    let keygen = cluster
        .kubectl_tenantflux(None, &["policy", "keygen", "--out", path(&keys)])
        .unwrap();
    assert!(keygen.status.success(), "{keygen:?}");
    let public = keys.join("ed25519.pub");
    let envs = [("TENANTFLUX_POLICY_PUBLIC_KEY", path(&public)), DEBUG_LOG];
    cluster.restart_agent_with(&envs).expect("agent");
    let platform = cluster
        .policy_pusher_kubeconfig()
        .expect("platform account");
    // The example policy with its defaults: the agent creates the FluxInstance from them.
    let unsigned = dir.path().join("policy.yaml");
    std::fs::copy(
        tenantflux_tests::repo_root().join("deploy/policy/example.yaml"),
        &unsigned,
    )
    .unwrap();
    let signed = dir.path().join("signed.yaml");
    let sign = cluster
        .kubectl_tenantflux(
            None,
            &[
                "policy",
                "sign",
                "-f",
                path(&unsigned),
                "--key",
                path(&keys.join("ed25519.key")),
                "--out",
                path(&signed),
            ],
        )
        .unwrap();
    assert!(sign.status.success(), "{sign:?}");
    let push = || {
        cluster
            .kubectl_tenantflux(Some(&platform), &["policy", "push", "-f", path(&signed)])
            .unwrap()
    };

    // Each kill lands at a failpoint (TENANTFLUX_FAILPOINTS): the agent stops between two
    // steps and is killed there, so every window is hit however loaded the machine is.
    let stopping_at = |failpoint: &'static str| {
        let mut envs = envs.to_vec();
        envs.push((tenantflux_agent::FAILPOINTS_ENV, failpoint));
        envs
    };
    let reached = |failpoint: &str| format!("failpoint {failpoint} reached");

    // Killed once the push is stored, before it answers, renders or creates anything.
    cluster
        .restart_agent_with(&stopping_at("policy-accepted"))
        .expect("agent");
    let mut first: Option<Output> = None;
    kill_9_when(&cluster, &reached("policy-accepted"), || {
        first = Some(push())
    });
    eprintln!("the push cut short answered: {:?}", first);
    assert!(
        instance_json(&cluster).is_none(),
        "nothing was created before the push answered"
    );
    // Killed while the defaults create the FluxInstance: once the record says "creating"
    // (written first) and before the create, then once after the create and before the record
    // says "created".
    for (failpoint, exists) in [
        ("defaults-recorded-creating", false),
        ("defaults-created", true),
    ] {
        kill_9_when(&cluster, &reached(failpoint), || {
            let _ = cluster.restart_agent_with(&stopping_at(failpoint));
        });
        assert_eq!(
            defaults_record(&cluster),
            "creating/7",
            "after the kill at {failpoint}"
        );
        assert_eq!(
            instance_json(&cluster).is_some(),
            exists,
            "the FluxInstance after the kill at {failpoint}"
        );
    }
    // Killed as the admission policy is applied.
    kill_9_when(&cluster, &reached("admission-applied"), || {
        let _ = cluster.restart_agent_with(&stopping_at("admission-applied"));
    });
    cluster.restart_agent_with(&envs).expect("agent");

    // The platform, not knowing whether its push landed, pushes again: nothing new.
    let again = push();
    assert!(again.status.success(), "{again:?}");
    assert!(
        String::from_utf8_lossy(&again.stdout).contains("unchanged"),
        "{again:?}"
    );
    // The same state an uninterrupted push reaches (see tests/policy.rs): generation 7 held
    // and enforced by the API server, the instance created once from the defaults and
    // recorded as created.
    wait_for("the record created/7", Duration::from_secs(60), || {
        let done = defaults_record(&cluster) == "created/7";
        async move { done.then_some(()) }
    })
    .await
    .unwrap_or_else(|err| panic!("{err}: {}", defaults_record(&cluster)));
    wait_enforced(&cluster, 7)
        .await
        .expect("the API server enforces generation 7");
    let instance = instance_json(&cluster).expect("the instance from the defaults");
    assert_eq!(
        instance["metadata"]["generation"], 1,
        "created once, never changed"
    );
    assert_eq!(instance["spec"]["distribution"]["version"], "2.9.x");
    assert_eq!(instance["spec"]["cluster"]["size"], "small");
    let shown = cluster
        .kubectl_tenantflux(Some(&platform), &["policy", "show", "-o", "json"])
        .unwrap();
    let shown: Value = serde_json::from_slice(&shown.stdout).expect("policy show JSON");
    assert_eq!(shown["generation"], 7, "{shown:#}");
    assert!(
        shown["problems"].as_array().is_none_or(Vec::is_empty),
        "{shown:#}"
    );
    // The API server refuses a non-compliant instance.
    let mut evil = compliant_instance();
    evil["spec"]["distribution"]["registry"] = "docker.io/evil".into();
    let refused = apply_forced(&cluster, &evil);
    assert!(
        refused.contains("allowed by policy generation 7"),
        "{refused}"
    );
}

/// `kubectl apply --server-side --force-conflicts` of `object` as a plain kubectl user
/// (taking fields over from the agent's field manager, as a tenant could); returns stderr.
fn apply_forced(cluster: &TestCluster, object: &Value) -> String {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), object.to_string()).unwrap();
    let output = cluster
        .kubectl(&[
            "apply",
            "--server-side",
            "--force-conflicts",
            "-f",
            path(file.path()),
        ])
        .unwrap();
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// `GET /livez` on the agent's admin listener answers 200.
fn live(address: &str) -> bool {
    let Ok(mut stream) = TcpStream::connect(address) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    if stream
        .write_all(b"GET /livez HTTP/1.1\r\nHost: agent\r\nConnection: close\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer.starts_with("HTTP/1.1 200")
}

fn count_in_log(cluster: &TestCluster, from: u64, needle: &str) -> usize {
    let mut text = String::new();
    let mut file = std::fs::File::open(cluster.dir().join("agent.log")).expect("agent.log");
    file.seek(std::io::SeekFrom::Start(from)).unwrap();
    file.read_to_string(&mut text).unwrap();
    text.matches(needle).count()
}

#[tokio::test]
async fn the_agent_rides_out_a_restarted_api_server_and_etcd_without_a_restart_or_a_repeat() {
    let _serial = SERIAL.lock().await;
    let cluster = cluster("outage");
    let tenant = Tenant::prepare(&cluster, &[]).await;
    // The agent's own proof of enforcement (and its Event) comes first.
    wait_for(
        "the agent to prove enforcement",
        Duration::from_secs(60),
        || {
            let output = tenant.plugin(&["status", "-o", "json"]);
            let proven = serde_json::from_slice::<Value>(&output.stdout)
                .is_ok_and(|s| s["policy"]["enforcement"]["enforced"] == true);
            async move { proven.then_some(()) }
        },
    )
    .await
    .expect("enforcement proven");
    let before = tenant.fingerprint().expect("fingerprint");
    let events = event_reasons(&cluster);
    let pid = cluster.agent_pid().expect("agent pid");
    let admin = cluster.agent_admin_address();
    let log_offset = std::fs::metadata(cluster.dir().join("agent.log"))
        .unwrap()
        .len();

    // /livez sampled every half second for the whole outage: the agent must never look dead
    // to its kubelet (which would restart it).
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (stop, admin) = (stop.clone(), admin.clone());
        thread::spawn(move || {
            let (mut samples, mut dead) = (0, 0);
            while !stop.load(Ordering::Relaxed) {
                samples += 1;
                if !live(&admin) || !alive(pid) {
                    dead += 1;
                }
                thread::sleep(Duration::from_millis(500));
            }
            (samples, dead)
        })
    };
    let started = Instant::now();
    // Killed, down for 30 s, started again: the agent's connections break and every watch
    // must be set up again (a frozen API server, as in the install test, keeps them).
    cluster.apiserver_restart(30).expect("outage");
    let outage = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    let (samples, dead) = sampler.join().unwrap();
    eprintln!("outage {outage:?}: {samples} /livez samples, {dead} failed");
    assert_eq!(dead, 0, "the agent looked dead during the outage");
    assert!(samples >= 50, "{samples} samples");
    assert_eq!(cluster.agent_pid(), Some(pid), "the agent was restarted");

    // It recovers on its own: the status answers with the API server reachable again, and its
    // caches follow a change made after the outage.
    let recovered = Instant::now();
    wait_for(
        "the status without an API problem",
        Duration::from_secs(120),
        || {
            let s = status(&cluster, Some(&tenant.admin));
            async move {
                s.filter(|s| {
                    !s.to_string()
                        .contains("the Kubernetes API server did not answer")
                })
            }
        },
    )
    .await
    .expect("status after the outage");
    cluster
        .kubectl_ok(&[
            "-n",
            APPS,
            "patch",
            "kustomizations.kustomize.toolkit.fluxcd.io",
            "podinfo",
            "--type=merge",
            "-p",
            r#"{"spec":{"suspend":true}}"#,
        ])
        .expect("suspend outside the agent");
    wait_for(
        "the agent's cache to see the change",
        Duration::from_secs(120),
        || {
            let output = tenant.plugin(&["get", "ks", "podinfo", "-n", APPS, "-o", "json"]);
            async move {
                let object: Value = serde_json::from_slice(&output.stdout).ok()?;
                (object["suspended"] == true || object[0]["suspended"] == true).then_some(())
            }
        },
    )
    .await
    .expect("the cache follows again");
    eprintln!(
        "recovered {:?} after the API server came back",
        recovered.elapsed()
    );
    let resumed = tenant.plugin(&["resume", "ks", "podinfo", "-n", APPS]);
    assert!(resumed.status.success(), "{resumed:?}");

    // Nothing done twice: the admission policy not re-applied, the policy not re-stored, no
    // Events, the instance untouched, the agent the same process.
    assert_eq!(
        count_in_log(
            &cluster,
            log_offset,
            "ValidatingAdmissionPolicy tenantflux-policy applied"
        ),
        0
    );
    assert_eq!(
        count_in_log(&cluster, log_offset, "accepted a new policy"),
        0
    );
    assert_eq!(count_in_log(&cluster, log_offset, "panicked"), 0);
    let after = tenant.fingerprint().expect("fingerprint");
    assert_eq!(after["instance"], before["instance"]);
    assert_eq!(after["policy"], before["policy"]);
    assert_eq!(after["vap"], before["vap"]);
    assert_eq!(event_reasons(&cluster), events);
    assert_eq!(cluster.agent_pid(), Some(pid));
}

/// The remote ports of the agent's established TCP connections that it opened itself (not
/// the ones callers opened to its listeners).
fn outbound_ports(pid: u32, listeners: &[u16]) -> Vec<u16> {
    let output = Command::new("ss")
        .args(["-Htnp", "state", "established"])
        .output()
        .expect("ss");
    let text = String::from_utf8_lossy(&output.stdout);
    let port = |addr: &str| addr.rsplit(':').next().and_then(|p| p.parse::<u16>().ok());
    text.lines()
        .filter(|l| l.contains(&format!("pid={pid},")))
        .filter_map(|l| {
            let fields: Vec<&str> = l.split_whitespace().collect();
            let (local, peer) = (port(fields.get(2)?)?, port(fields.get(3)?)?);
            (!listeners.contains(&local)).then_some(peer)
        })
        .collect()
}

#[tokio::test]
async fn without_any_management_side_the_last_verified_policy_stays_in_force() {
    let _serial = SERIAL.lock().await;
    let cluster = cluster("no-mgmt");
    let tenant = Tenant::prepare(&cluster, &[]).await;
    // No management side at all: its account is gone, and the agent restarts from what the
    // cluster stores.
    cluster
        .kubectl_ok(&[
            "-n",
            AGENT_NAMESPACE,
            "delete",
            "serviceaccount/platform",
            "rolebinding/policy-pusher",
            "rolebinding/platform-user",
        ])
        .expect("removing the platform's account");
    cluster
        .restart_agent_with(&[("TENANTFLUX_POLICY_PUBLIC_KEY", path(&tenant.public_key))])
        .expect("agent restart");
    let status = status(&cluster, Some(&tenant.admin)).expect("status");
    let text = status.to_string();
    assert!(text.contains("\"generation\":7"), "{status:#}");
    let shown = tenant.plugin(&["policy", "show", "-o", "json"]);
    let shown: Value = serde_json::from_slice(&shown.stdout).expect("policy show");
    assert_eq!(shown["generation"], 7, "{shown:#}");
    assert!(
        shown["problems"].as_array().is_none_or(Vec::is_empty),
        "{shown:#}"
    );

    // Tenant operations go on.
    for args in [
        &["get", "all", "-n", APPS][..],
        &["suspend", "ks", "podinfo", "-n", APPS],
        &["resume", "ks", "podinfo", "-n", APPS],
        &["reconcile", "ks", "podinfo", "-n", APPS, "--wait=false"],
        &["instance", "get"],
    ] {
        let output = tenant.plugin(args);
        assert!(output.status.success(), "{args:?}: {output:?}");
    }
    let write = |name: &str, instance: &Value| {
        let file = tenant.dir.path().join(name);
        std::fs::write(&file, tenantflux_core::yaml::to_string(instance).unwrap()).unwrap();
        file
    };
    let mut medium = compliant_instance();
    medium["spec"]["cluster"]["size"] = "medium".into();
    let output = tenant.plugin(&[
        "instance",
        "apply",
        "-f",
        path(&write("medium.yaml", &medium)),
    ]);
    assert!(output.status.success(), "{output:?}");
    // Policy enforcement goes on, in the agent...
    let mut evil = compliant_instance();
    evil["spec"]["distribution"]["registry"] = "docker.io/evil".into();
    let output = tenant.plugin(&["instance", "apply", "-f", path(&write("evil.yaml", &evil))]);
    // 4: refused by policy.
    assert_eq!(output.status.code(), Some(4), "{output:?}");
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("allowed by policy generation 7"),
        "{output:?}"
    );
    // ...which talks to nothing but the API server...
    let pid = cluster.agent_pid().expect("agent pid");
    let apiserver_port: u16 = cluster
        .kubectl_ok(&[
            "config",
            "view",
            "--minify",
            "-o",
            "jsonpath={.clusters[0].cluster.server}",
        ])
        .unwrap()
        .rsplit(':')
        .next()
        .and_then(|p| p.trim().parse().ok())
        .expect("the API server's port");
    let listeners: Vec<u16> = [cluster.agent_admin_address(), cluster.agent_grpc_address()]
        .iter()
        .filter_map(|a| a.rsplit(':').next()?.parse().ok())
        .collect();
    let ports = outbound_ports(pid, &listeners);
    assert!(
        !ports.is_empty(),
        "the agent holds no connection to the API server"
    );
    assert!(
        ports.iter().all(|p| *p == apiserver_port),
        "the agent connects to ports {ports:?}, not only the API server's {apiserver_port}"
    );
    // ...and in the API server with the agent stopped.
    cluster.stop_agent().expect("stopping the agent");
    let refused = apply_forced(&cluster, &evil);
    assert!(
        refused.contains("allowed by policy generation 7"),
        "{refused}"
    );
    let mut large = compliant_instance();
    large["spec"]["cluster"]["size"] = "large".into();
    let refused = apply_forced(&cluster, &large);
    assert!(refused.contains("spec.cluster.size \"large\""), "{refused}");
    let accepted = apply_forced(&cluster, &compliant_instance());
    assert!(
        accepted.is_empty(),
        "a compliant change is refused: {accepted}"
    );
}

/// Runs the commands at once, each as its own `kubectl tenantflux` process; returns their
/// outputs in order.
fn at_once(tenant: &Tenant, runs: &[(&[&str], Option<&str>)]) -> Vec<Output> {
    // A refused edit is kept in the temporary directory, as kubectl keeps it: this test's own,
    // removed when the runs end.
    let scratch = tempfile::tempdir().expect("a temporary directory");
    let children: Vec<_> = runs
        .iter()
        .map(|(args, editor)| {
            let mut command = tenant.cluster.plugin_command(Some(&tenant.admin), args);
            command.env("TMPDIR", scratch.path());
            if let Some(editor) = editor {
                command.env("KUBE_EDITOR", editor);
            }
            command
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn the plugin")
        })
        .collect();
    children
        .into_iter()
        .map(|c| c.wait_with_output().expect("plugin output"))
        .collect()
}

/// Waits until the FluxInstance's resourceVersion has not moved for five seconds.
async fn settle(cluster: &TestCluster) {
    let version = || {
        instance_json(cluster)
            .map(|i| i["metadata"]["resourceVersion"].clone())
            .unwrap_or_default()
    };
    let (mut last, mut since) = (version(), Instant::now());
    let deadline = Instant::now() + Duration::from_secs(120);
    while since.elapsed() < Duration::from_secs(5) {
        assert!(Instant::now() < deadline, "the FluxInstance never settled");
        tokio::time::sleep(Duration::from_millis(250)).await;
        let now = version();
        if now != last {
            (last, since) = (now, Instant::now());
        }
    }
}

#[tokio::test]
async fn plugins_racing_on_one_object_lose_no_update() {
    let _serial = SERIAL.lock().await;
    let cluster = cluster("race");
    let tenant = Tenant::prepare(&cluster, &[]).await;
    let ks = || {
        kubectl_json(
            &cluster,
            &[
                "-n",
                APPS,
                "kustomizations.kustomize.toolkit.fluxcd.io",
                "podinfo",
            ],
        )
    };

    // A suspend and a reconcile of one Kustomization at the same moment, ten times: both take
    // effect every time (a server-side apply by one field manager would drop the other).
    for round in 0..10 {
        let outputs = at_once(
            &tenant,
            &[
                (&["suspend", "ks", "podinfo", "-n", APPS], None),
                (
                    &["reconcile", "ks", "podinfo", "-n", APPS, "--wait=false"],
                    None,
                ),
            ],
        );
        for output in &outputs {
            assert!(output.status.success(), "round {round}: {output:?}");
        }
        let reconciled = String::from_utf8_lossy(&outputs[1].stdout).into_owned();
        let at = reconciled
            .rsplit("requested at ")
            .next()
            .unwrap()
            .trim()
            .to_owned();
        let object = ks();
        assert_eq!(object["spec"]["suspend"], true, "round {round}: {object:#}");
        assert_eq!(
            object["metadata"]["annotations"]["reconcile.fluxcd.io/requestedAt"],
            at.as_str(),
            "round {round}: {object:#}"
        );
        let resumed = tenant.plugin(&["resume", "ks", "podinfo", "-n", APPS]);
        assert!(resumed.status.success(), "{resumed:?}");
        assert_eq!(ks()["spec"]["suspend"], false);
    }
    // Another tool writing the same object meanwhile keeps its change too.
    let annotate = cluster.kubectl(&[
        "-n",
        APPS,
        "annotate",
        "--overwrite",
        "kustomizations.kustomize.toolkit.fluxcd.io/podinfo",
        "example.com/owner=team-a",
    ]);
    let outputs = at_once(
        &tenant,
        &[(&["suspend", "ks", "podinfo", "-n", APPS], None)],
    );
    assert!(annotate.unwrap().status.success());
    assert!(outputs[0].status.success(), "{outputs:?}");
    let object = ks();
    assert_eq!(object["spec"]["suspend"], true);
    assert_eq!(
        object["metadata"]["annotations"]["example.com/owner"],
        "team-a"
    );

    // A tenant's `suspend instance` after an `instance apply` keeps the applied spec.
    let file = tenant.dir.path().join("medium.yaml");
    let mut medium = compliant_instance();
    medium["spec"]["cluster"]["size"] = "medium".into();
    std::fs::write(&file, tenantflux_core::yaml::to_string(&medium).unwrap()).unwrap();
    let applied = tenant.plugin(&["instance", "apply", "-f", path(&file)]);
    assert!(applied.status.success(), "{applied:?}");
    let suspended = tenant.plugin(&["suspend", "instance", "flux", "-n", "flux-system"]);
    assert!(suspended.status.success(), "{suspended:?}");
    let instance = instance_json(&cluster).unwrap();
    assert_eq!(instance["spec"]["cluster"]["size"], "medium");
    assert_eq!(
        instance["metadata"]["annotations"]["fluxcd.controlplane.io/reconcile"],
        "disabled"
    );
    let resumed = tenant.plugin(&["resume", "instance", "flux", "-n", "flux-system"]);
    assert!(resumed.status.success(), "{resumed:?}");

    // Two tenants editing the FluxInstance at once, each a different field: an edit made from
    // a stale copy is refused (the copy's resourceVersion), never applied over the other.
    // flux-operator writes the status after each change, which moves the resourceVersion too:
    // each round starts once it is quiet, and a round it still disturbs (both edits refused,
    // nothing lost either) does not count.
    let mut decided = 0;
    for round in 0..8 {
        if decided == 3 {
            break;
        }
        settle(&cluster).await;
        let outputs = at_once(
            &tenant,
            &[
                (
                    &["instance", "edit"],
                    Some("sleep 1; sed -i -e 's/size: medium/size: small/'"),
                ),
                (
                    &["instance", "edit"],
                    Some("sleep 1; sed -i -e 's/version: 2.9.x/version: 2.8.x/'"),
                ),
            ],
        );
        let instance = instance_json(&cluster).unwrap();
        let size_won = outputs[0].status.success();
        let version_won = outputs[1].status.success();
        eprintln!(
            "round {round}: size edit {}, version edit {}",
            if size_won { "applied" } else { "refused" },
            if version_won { "applied" } else { "refused" }
        );
        decided += usize::from(size_won || version_won);
        if size_won {
            assert_eq!(instance["spec"]["cluster"]["size"], "small", "{outputs:?}");
        }
        if version_won {
            assert_eq!(
                instance["spec"]["distribution"]["version"], "2.8.x",
                "{outputs:?}"
            );
        }
        for (won, output) in [(size_won, &outputs[0]), (version_won, &outputs[1])] {
            if !won {
                let err = String::from_utf8_lossy(&output.stderr);
                assert!(err.contains("the object has been modified"), "{err}");
            }
        }
        // Back to the start for the next round.
        std::fs::write(&file, tenantflux_core::yaml::to_string(&medium).unwrap()).unwrap();
        let reset = tenant.plugin(&["instance", "apply", "-f", path(&file)]);
        assert!(reset.status.success(), "{reset:?}");
    }
    assert_eq!(decided, 3, "fewer than 3 of 8 rounds had an edit applied");
}

/// A task of the agent that dies while the agent runs (here the admission loop, panicking at a
/// failpoint as it starts) takes the whole agent down, named in its log, so the kubelet restarts
/// it; before, the agent kept answering /readyz and guarded nothing.
#[tokio::test]
async fn a_task_that_dies_stops_the_agent_and_is_named() {
    let cluster = cluster("task");
    let from = cluster.agent_log_len();
    let started =
        cluster.restart_agent_with(&[(tenantflux_agent::FAILPOINTS_ENV, "panic:admission")]);
    assert!(started.is_err(), "the agent must not come up ready");
    cluster
        .wait_agent_log(
            from,
            "tenantflux-agent: the agent's task \"admission\" panicked",
            Duration::from_secs(60),
        )
        .await
        .expect("the agent's exit names the task");
    let log = log_since(&cluster.dir().join("agent.log"), from);
    assert!(log.contains("failpoint panic:admission reached"), "{log}");
    let pid = cluster.agent_pid().expect("agent.pid");
    wait_for(
        "the agent process gone",
        Duration::from_secs(30),
        || async move { (!alive(pid)).then_some(()) },
    )
    .await
    .expect("the agent exited");
    // Without the failpoint the same agent starts and stays up.
    cluster.restart_agent_with(&[]).expect("the agent starts");
    assert!(alive(cluster.agent_pid().expect("agent.pid")));
}
