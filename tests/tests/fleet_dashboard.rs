//! `kubectl tenantflux fleet dashboard` over ten real agents: against the policy the platform
//! pushed (`--expect-policy`) the page shows ten clusters, one stale and one behind marked, the
//! others current; its live stream sends the tiles again with the page's filter, and a tile's
//! cluster page reads that cluster's agent; then the same in a real browser (chromium through
//! chromedriver), which follows the live stream, with a screenshot
//! (target/screenshots/fleet-dashboard.png). The page answers only under its own name.
//!
//! The attack: one tenant's agent reports a higher generation than the platform published.
//! Against `--expect-policy` that cluster is "other policy" and the others stay current;
//! without a reference nobody is "behind": each tile says the generation it holds.
//!
//! Each agent is a real tenantflux-agent process with a namespace of its own, a Deployment kwok
//! runs as its pod and a kwok ClusterPortForward that sends port-forwards to that pod to the
//! process (as tests/bench/fleet does), so every tile is the path a tenant cluster takes: the
//! plugin reads the fleet file's kubeconfig, requests a token of ServiceAccount
//! tenantflux-platform, port-forwards through the API server and calls GetStatus.
//!
//! Two control planes: the admission policy an agent writes is cluster-wide and names the
//! generation it enforces, so agents of two generations on one API server would overwrite each
//! other's. Nine agents share the first (generation 2, one of them signed to expire in 20s);
//! the one held at generation 1 has the second to itself.

use std::{
    io::{Read as _, Write as _},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::Duration,
};

use fantoccini::{Client, Locator, elements::Element};
use tenantflux_tests::{
    TestCluster, apply_flux_instance, bin_dir,
    browser::{Browser, http_get, read_printed_address},
    json, path, stderr, wait_for,
};

const AGENTS: usize = 10;
/// The agent that holds generation 1 while the others hold 2.
const BEHIND: &str = "cluster-9";
/// The agent whose generation 2 expires 20s after signing.
const STALE: &str = "cluster-8";
/// How long ten agents may take to start and answer on a loaded 2-core machine.
const STARTED: Duration = Duration::from_secs(180);

/// The agent processes, killed by their pids when dropped (also on panic).
struct Agents(Vec<Child>);

impl Drop for Agents {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A running `kubectl tenantflux fleet dashboard`, stopped when dropped.
struct Dashboard {
    child: Child,
    url: String,
    /// `tenantflux-<random>.localhost:PORT`: the name and port it answers under.
    host: String,
    port: u16,
}

impl Dashboard {
    fn start(plane: &TestCluster, args: &[&str]) -> Dashboard {
        let mut all = vec!["fleet", "dashboard", "--no-open"];
        all.extend_from_slice(args);
        let mut child = plane
            .plugin_command(None, &all)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the fleet dashboard");
        let ((url, host, port), _stdout) = read_printed_address(&mut child, "the fleet dashboard");
        Dashboard {
            child,
            url,
            host,
            port,
        }
    }

    /// GET `target` as the page's browser would: under its name, with `cookie`.
    fn get(&self, target: &str, cookie: &str) -> (u16, String, String) {
        http_get(self.port, &self.host, target, cookie)
    }

    /// Signs in with the printed address over HTTP; the session cookie (`name=value`).
    fn sign_in(&self) -> String {
        let login = &self.url[self.url.find("/login").expect("a sign-in path")..];
        let (status, head, _) = self.get(login, "");
        assert_eq!(status, 303, "{head}");
        head.lines()
            .find_map(|l| {
                l.strip_prefix("set-cookie: ")
                    .or_else(|| l.strip_prefix("Set-Cookie: "))
            })
            .and_then(|c| c.split(';').next())
            .expect("a session cookie")
            .to_owned()
    }

    /// The tiles the page shows once they are `want`.
    async fn settles_on(&self, cookie: &str, want: &[(String, String)]) -> String {
        wait_for("the page's tiles", Duration::from_secs(120), || {
            let (status, _, page) = self.get("/", cookie);
            async move { (status == 200 && tiles(&page) == want).then_some(page) }
        })
        .await
        .unwrap_or_else(|err| {
            let (_, _, page) = self.get("/", cookie);
            panic!("{err}: {:?} wanted {want:?}\n{page}", tiles(&page))
        })
    }
}

impl Drop for Dashboard {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The first `part` event of the live stream at `target`, as JSON.
fn first_part(dashboard: &Dashboard, target: &str, cookie: &str) -> serde_json::Value {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", dashboard.port)).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("a read timeout");
    write!(
        stream,
        "GET {target} HTTP/1.1\r\nHost: {}\r\nCookie: {cookie}\r\n\r\n",
        dashboard.host
    )
    .expect("send");
    let mut seen = Vec::new();
    let mut buffer = [0_u8; 8192];
    loop {
        let text = String::from_utf8_lossy(&seen).into_owned();
        if let Some(data) = text
            .split_once("event: part\ndata: ")
            .and_then(|(_, rest)| rest.split_once('\n'))
            .map(|(data, _)| data)
        {
            return serde_json::from_str(data).unwrap_or_else(|err| panic!("{err}: {data}"));
        }
        let read = stream.read(&mut buffer).expect("the live stream");
        assert!(read > 0, "the live stream ended: {text}");
        seen.extend_from_slice(&buffer[..read]);
    }
}

/// The tiles of the page: (cluster, state), as `data-cluster` and `data-state` say.
fn tiles(page: &str) -> Vec<(String, String)> {
    let attribute = |text: &str, name: &str| {
        let start = text.find(&format!("{name}=\""))? + name.len() + 2;
        text[start..].split('"').next().map(str::to_owned)
    };
    page.split("<div class=\"card ")
        .skip(1)
        .filter_map(|tile| {
            let head = tile.split('>').next()?;
            Some((
                attribute(head, "data-cluster")?,
                attribute(head, "data-state")?,
            ))
        })
        .collect()
}

/// The states the page should settle on: `odd` for the one held apart, the stale one, `rest`
/// for the others.
fn expected(odd: &str, rest: &str) -> Vec<(String, String)> {
    (0..AGENTS)
        .map(|j| {
            let name = format!("cluster-{j}");
            let state = match name.as_str() {
                BEHIND => odd,
                STALE => "stale",
                _ => rest,
            };
            (name, state.to_owned())
        })
        .collect()
}

/// Distinct free ports on 127.0.0.1, all held at once while picked.
fn free_ports(count: usize) -> Vec<u16> {
    let held: Vec<std::net::TcpListener> = (0..count)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("a free port"))
        .collect();
    held.iter()
        .map(|l| l.local_addr().expect("address").port())
        .collect()
}

/// Namespace, platform account, agent Deployment and port-forward route of one agent.
fn agent_objects(namespace: &str, port: u16) -> String {
    format!(
        "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {namespace}}}\n---\n\
         apiVersion: v1\nkind: ServiceAccount\nmetadata: {{name: tenantflux-platform, namespace: {namespace}}}\n---\n\
         apiVersion: v1\nkind: ServiceAccount\nmetadata: {{name: tenantflux-agent, namespace: {namespace}}}\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\n\
         metadata: {{name: tenantflux-platform, namespace: {namespace}}}\n\
         rules:\n  - {{apiGroups: [tenantflux.io], resources: [agents/status], verbs: [get]}}\n\
         \x20 - {{apiGroups: [tenantflux.io], resources: [policies], verbs: [get, update]}}\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\n\
         metadata: {{name: tenantflux-platform, namespace: {namespace}}}\n\
         roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: tenantflux-platform}}\n\
         subjects: [{{kind: ServiceAccount, name: tenantflux-platform, namespace: {namespace}}}]\n---\n\
         apiVersion: apps/v1\nkind: Deployment\n\
         metadata: {{name: tenantflux-agent, namespace: {namespace}, labels: {{app.kubernetes.io/name: tenantflux-agent}}}}\n\
         spec:\n  replicas: 1\n  selector: {{matchLabels: {{app.kubernetes.io/name: tenantflux-agent}}}}\n\
         \x20 template:\n    metadata: {{labels: {{app.kubernetes.io/name: tenantflux-agent}}}}\n\
         \x20   spec:\n      serviceAccountName: tenantflux-agent\n\
         \x20     containers: [{{name: agent, image: ghcr.io/tenantflux/tenantflux-agent:v0.1.0, ports: [{{name: grpc, containerPort: 9090}}]}}]\n---\n\
         apiVersion: kwok.x-k8s.io/v1alpha1\nkind: ClusterPortForward\nmetadata: {{name: {namespace}}}\n\
         spec:\n  selector: {{matchNamespaces: [{namespace}]}}\n\
         \x20 forwards: [{{ports: [9090], target: {{address: 127.0.0.1, port: {port}}}}}]\n"
    )
}

/// Starts the agent of `namespace` on `plane` as the plane's admin (its own RBAC is not what
/// is tested here, and deploy/'s cluster-wide part would be shared by every agent of a plane).
fn start_agent(
    plane: &TestCluster,
    namespace: &str,
    ports: (u16, u16),
    public_key: &Path,
    log: &Path,
) -> Child {
    let log = std::fs::File::create(log).expect("agent log");
    Command::new(bin_dir().join("tenantflux-agent"))
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        .env("KUBECONFIG", plane.kubeconfig())
        .env("TENANTFLUX_NAMESPACE", namespace)
        .env("TENANTFLUX_GRPC_ADDRESS", format!("127.0.0.1:{}", ports.0))
        .env("TENANTFLUX_ADMIN_ADDRESS", format!("127.0.0.1:{}", ports.1))
        .env("TENANTFLUX_POLICY_PUBLIC_KEY", public_key)
        .env("TENANTFLUX_LOG_FORMAT", "text")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("agent log"))
        .stderr(log)
        .spawn()
        .expect("start an agent")
}

/// The fleet's policy at `generation` (Flux 2.9.0 at least, since 2026-01-01), signed with
/// `extra` flags.
fn sign(
    plane: &TestCluster,
    dir: &Path,
    key: &Path,
    name: &str,
    generation: u64,
    extra: &[&str],
) -> PathBuf {
    let unsigned = dir.join(format!("{name}.yaml"));
    std::fs::write(
        &unsigned,
        format!(
            "apiVersion: tenantflux.io/v1alpha1\nkind: Policy\nmetadata: {{name: fleet}}\n\
             spec:\n  generation: {generation}\n  distribution:\n    upgradeDeadline:\n      \
             minimumVersion: \"2.9.0\"\n      date: \"2026-01-01\"\n"
        ),
    )
    .unwrap();
    let signed = dir.join(format!("{name}.signed.yaml"));
    let mut args = vec![
        "policy",
        "sign",
        "-f",
        path(&unsigned),
        "--key",
        path(key),
        "--out",
        path(&signed),
    ];
    args.extend_from_slice(extra);
    let out = plane.kubectl_tenantflux(None, &args).unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    signed
}

/// Waits until the tile of `cluster` on the fleet page carries the badge `text`.
async fn wait_for_badge(
    browser: &Browser,
    cluster: &str,
    text: &str,
    timeout: Duration,
) -> tenantflux_tests::browser::Result<Element> {
    browser
        .wait_for_text(
            &format!("[data-cluster=\"{cluster}\"] .badge"),
            text,
            timeout,
        )
        .await
}

/// How many elements of the page `css` selects.
async fn count(client: &Client, css: &str) -> usize {
    client
        .find_all(Locator::Css(css))
        .await
        .expect("tiles")
        .len()
}

#[tokio::test]
async fn the_fleet_page_over_10_real_agents_judges_behind_only_against_the_platform() {
    let started = std::time::Instant::now();
    let pid = std::process::id();
    let shared = TestCluster::start(&format!("tf-fleetdash-{pid}")).expect("control plane");
    let alone = TestCluster::start(&format!("tf-fleetdash-b-{pid}")).expect("control plane");
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys");
    let out = shared
        .kubectl_tenantflux(None, &["policy", "keygen", "--out", path(&keys)])
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let (key, public_key) = (keys.join("ed25519.key"), keys.join("ed25519.pub"));
    // The CRDs and the operator namespace the agents' enforcement proof dry-runs its canary in.
    shared.ensure_flux_operator().expect("flux-operator");
    alone.ensure_flux_operator().expect("flux-operator");
    // Flux on the first plane, as the real flux-operator applies it (the nine agents there
    // report it); the second plane's cluster has none.
    let client = shared.client().await.expect("a client");
    apply_flux_instance(&client, "2.9.x")
        .await
        .expect("the FluxInstance");

    let plane = |j: usize| if j == AGENTS - 1 { &alone } else { &shared };
    let ports = free_ports(2 * AGENTS);
    let (mut on_shared, mut on_alone) = (String::new(), String::new());
    for j in 0..AGENTS {
        let objects = agent_objects(&format!("tf-fd-{j}"), ports[2 * j]) + "---\n";
        if j == AGENTS - 1 {
            on_alone.push_str(&objects);
        } else {
            on_shared.push_str(&objects);
        }
    }
    shared.apply_yaml(&on_shared).expect("the agents' objects");
    alone.apply_yaml(&on_alone).expect("the agent's objects");
    let mut agents = Agents(Vec::new());
    let mut fleet = String::new();
    for j in 0..AGENTS {
        let namespace = format!("tf-fd-{j}");
        let log = dir.path().join(format!("agent-{j}.log"));
        agents.0.push(start_agent(
            plane(j),
            &namespace,
            (ports[2 * j], ports[2 * j + 1]),
            &public_key,
            &log,
        ));
        let track = match j {
            9 => "behind",
            8 => "stale",
            _ => "current",
        };
        fleet.push_str(&format!(
            "- {{name: cluster-{j}, tenant: tenant-{j}, kubeconfig: {}, agentNamespace: {namespace}, labels: {{track: {track}}}}}\n",
            plane(j).kubeconfig().display()
        ));
    }
    let fleet_file = dir.path().join("fleet.yaml");
    std::fs::write(&fleet_file, fleet).unwrap();
    for j in 0..AGENTS {
        let admin = ports[2 * j + 1];
        wait_for(&format!("agent {j} ready"), STARTED, || async move {
            std::net::TcpStream::connect(("127.0.0.1", admin))
                .is_ok()
                .then(|| http_get(admin, &format!("127.0.0.1:{admin}"), "/readyz", ""))
                .filter(|(status, _, _)| *status == 200)
                .map(drop)
        })
        .await
        .unwrap_or_else(|err| {
            let log = std::fs::read_to_string(dir.path().join(format!("agent-{j}.log")));
            panic!("{err}: {}", log.unwrap_or_default())
        });
    }
    // kwok picks up ClusterPortForwards asynchronously: every agent answers through its own.
    let fleet_status = || {
        let args = [
            "fleet",
            "status",
            "--fleet-file",
            path(&fleet_file),
            "-o",
            "json",
        ];
        json(&shared.kubectl_tenantflux(None, &args).unwrap())
    };
    wait_for("every agent answering", STARTED, || {
        let rows = fleet_status();
        let answered = rows["clusters"]
            .as_array()
            .is_some_and(|r| r.len() == AGENTS && r.iter().all(|r| r["state"] == "ok"));
        async move { answered.then_some(()) }
    })
    .await
    .expect("the fleet answers");
    eprintln!("10 agents answering after {:?}", started.elapsed());

    // Generation 2 to eight, 1 to the behind one, and 2 signed to expire soon to the last.
    let push = |file: &Path, track: &str| {
        let selector = format!("track={track}");
        let args = [
            "fleet",
            "policy",
            "push",
            "-f",
            path(file),
            "--fleet-file",
            path(&fleet_file),
            "-l",
            &selector,
            "-o",
            "json",
        ];
        let out = shared.kubectl_tenantflux(None, &args).unwrap();
        assert!(out.status.success(), "{track}: {}", stderr(&out));
        let answer = json(&out);
        let rows = answer["clusters"].as_array().expect("rows").clone();
        assert!(rows.iter().all(|r| r["result"] == "accepted"), "{answer:#}");
        rows.len()
    };
    let gen1 = sign(&shared, dir.path(), &key, "gen1", 1, &[]);
    let gen2 = sign(&shared, dir.path(), &key, "gen2", 2, &[]);
    assert_eq!(push(&gen1, "behind"), 1);
    assert_eq!(push(&gen2, "current"), 8);
    let short = sign(
        &shared,
        dir.path(),
        &key,
        "gen2-short",
        2,
        &["--expires-in", "20s"],
    );
    assert_eq!(push(&short, "stale"), 1);

    // The dashboard reads the fleet every 5s; against the policy the platform pushed, the page
    // settles on the states once the short policy expired and every agent proved its policy
    // enforced.
    let expect = ["--expect-policy", path(&gen2)];
    let mut args = vec!["--fleet-file", path(&fleet_file), "--interval", "5s"];
    args.extend_from_slice(&expect);
    let dashboard = Dashboard::start(&shared, &args);
    // The printed token under 127.0.0.1 or localhost (whose cookies go to every local server):
    // refused, no cookie, the token still good under the printed name.
    let login = &dashboard.url[dashboard.url.find("/login").expect("a sign-in path")..];
    for other in [
        format!("127.0.0.1:{}", dashboard.port),
        format!("localhost:{}", dashboard.port),
    ] {
        let (status, head, _) = http_get(dashboard.port, &other, login, "");
        assert_eq!(status, 421, "the token under {other}");
        assert!(!head.to_lowercase().contains("set-cookie"), "{head}");
    }
    let cookie = dashboard.sign_in();
    let page = dashboard
        .settles_on(&cookie, &expected("behind", "current"))
        .await;
    eprintln!("the page settled after {:?}", started.elapsed());
    assert!(
        page.contains("the last round read 10 clusters in") && page.contains("at most 16 at once"),
        "{page}"
    );
    assert!(page.contains("refreshed every 5s"), "{page}");
    assert!(page.contains("generation 2</text>"), "{page}");
    assert!(
        page.contains("the platform pushed generation 2"),
        "the behind tile says against what: {page}"
    );
    let (status, _, filtered) = dashboard.get("/?state=behind", &cookie);
    assert_eq!(status, 200);
    assert_eq!(tiles(&filtered), [(BEHIND.to_owned(), "behind".to_owned())]);
    let (status, _, _) = dashboard.get("/", "");
    assert_eq!(status, 401, "no page without the session");
    for other in [
        format!("127.0.0.1:{}", dashboard.port),
        format!("localhost:{}", dashboard.port),
        format!("rebound.example:{}", dashboard.port),
    ] {
        let (status, _, body) = http_get(dashboard.port, &other, "/", &cookie);
        assert_eq!(status, 421, "Host {other}");
        assert!(!body.contains("cluster-"), "{body}");
    }

    // The live stream sends the tiles again after each round, with the page's filter.
    let event = first_part(&dashboard, "/live?state=behind", &cookie);
    assert_eq!(event["id"], "fleet", "{event:#}");
    let html = event["html"].as_str().expect("html");
    assert!(html.starts_with("<section id=\"fleet\""), "{html}");
    assert_eq!(tiles(html), [(BEHIND.to_owned(), "behind".to_owned())]);

    // A tile leads to its cluster, read now: the stale policy, still held.
    let (status, _, detail) = dashboard.get(&format!("/cluster/{STALE}"), &cookie);
    assert_eq!(status, 200, "{detail}");
    assert!(detail.contains("fleet (generation 2)"), "{detail}");
    assert!(detail.contains("stale"), "{detail}");
    // The same page in a real browser, which signs in with the printed address (the HTTP
    // sign-in above used the one-time token, so a second dashboard prints a new one).
    drop(dashboard);
    let seen = Dashboard::start(&shared, &args);
    let browser = Browser::start().await.expect("a browser");
    let client = browser.client();
    client.goto(&seen.url).await.expect("sign in");
    browser
        .wait_for_text("#live-state", "live", Duration::from_secs(30))
        .await
        .expect("the live stream");
    wait_for_badge(&browser, STALE, "stale", Duration::from_secs(60))
        .await
        .expect("the stale one marked");
    wait_for_badge(&browser, BEHIND, "behind", Duration::from_secs(10))
        .await
        .expect("the behind one marked");
    assert_eq!(count(client, "div.card[data-cluster]").await, AGENTS);
    assert_eq!(
        count(client, "div.card.good[data-state=\"current\"]").await,
        AGENTS - 2
    );
    // A round later the live stream has replaced the tiles' section: its cost line is new.
    let cost = client
        .find(Locator::Css("#cost"))
        .await
        .expect("the cost")
        .text()
        .await
        .expect("its text");
    wait_for(
        "a round over the live stream",
        Duration::from_secs(30),
        || {
            let cost = cost.clone();
            async move {
                let now = client
                    .find(Locator::Css("#cost"))
                    .await
                    .ok()?
                    .text()
                    .await
                    .ok()?;
                (now != cost).then_some(())
            }
        },
    )
    .await
    .expect("the page follows the rounds");
    // Flux as each agent reports it, on the page the screenshot shows: Ready on the first
    // plane, none on the second.
    wait_for(
        "Flux Ready on the first plane",
        Duration::from_secs(180),
        || {
            let rows = fleet_status();
            let ready = rows["clusters"].as_array().is_some_and(|rows| {
                rows.iter().all(|row| {
                    if row["cluster"] == BEHIND {
                        row["fluxVersion"].is_null()
                    } else {
                        row["ready"] == "True"
                            && row["fluxVersion"]
                                .as_str()
                                .is_some_and(|v| v.contains("2.9"))
                    }
                })
            });
            async move { ready.then_some(()) }
        },
    )
    .await
    .unwrap_or_else(|err| panic!("{err}: {:#}", fleet_status()));
    browser
        .wait_for_text(
            &format!("[data-cluster=\"{STALE}\"]"),
            "2.9",
            Duration::from_secs(30),
        )
        .await
        .expect("the tile shows the Flux version");
    let shot = browser
        .screenshot("fleet-dashboard")
        .await
        .expect("screenshot");
    eprintln!("screenshot: {}", shot.display());

    // A tile leads to its cluster: the stale policy, still enforced.
    browser
        .click(&format!("[data-cluster=\"{STALE}\"] h3 a"))
        .await
        .expect("follow it");
    let policy = browser
        .wait_for_text("#policy", "generation 2", Duration::from_secs(30))
        .await
        .expect("the cluster's policy");
    let text = policy.text().await.expect("its text");
    assert!(text.contains("stale"), "{text}");

    // The attack: the tenant of the cluster held apart makes its agent report a generation the
    // platform never published (here the agent holds a generation 3 the platform signed but
    // pushed to nobody else; a tenant's own agent could report any number).
    let gen3 = sign(&shared, dir.path(), &key, "gen3", 3, &[]);
    assert_eq!(push(&gen3, "behind"), 1);
    // Against what the platform pushed, that cluster holds another policy; the others stay
    // current.
    browser.click("header a.brand").await.expect("follow it");
    wait_for_badge(&browser, BEHIND, "other policy", Duration::from_secs(60))
        .await
        .expect("the one ahead marked");
    assert_eq!(
        count(client, "div.card.good[data-state=\"current\"]").await,
        AGENTS - 2,
        "the others are still current"
    );
    browser
        .screenshot("fleet-dashboard-other-policy")
        .await
        .expect("screenshot");
    browser.close().await.expect("close the browser");
    drop(seen);
    // Without --channel or --expect-policy, nobody is behind: every tile says the generation it
    // holds, in a neutral tone.
    let unjudged = Dashboard::start(
        &shared,
        &["--fleet-file", path(&fleet_file), "--interval", "5s"],
    );
    let cookie = unjudged.sign_in();
    let page = unjudged
        .settles_on(&cookie, &expected("holds", "holds"))
        .await;
    assert!(!page.contains("data-state=\"behind\""), "{page}");
    assert!(page.contains("holds generation 3"), "{page}");
    assert!(page.contains("holds generation 2"), "{page}");
    assert!(page.contains("generations are shown, not judged"), "{page}");
    let (status, _, filtered) = unjudged.get("/?state=behind", &cookie);
    assert_eq!(status, 200);
    assert_eq!(tiles(&filtered), [], "nobody behind");
    drop(unjudged);
    drop(agents);
    eprintln!("done after {:?}", started.elapsed());
}
