//! `kubectl tenantflux dashboard` in a real browser (Debian's chromium through chromedriver)
//! on a cluster of its own (its Flux objects would change what other binaries list on the
//! shared one), with Flux 2.9 and the real source-controller and kustomize-controller
//! reconciling a local Git repository: two namespaces with a Kustomization each, an admin and a
//! viewer who may only read one namespace. The page shows what the controllers report, a new
//! commit arrives without a reload, suspend goes through the agent as the user, the viewer's
//! action is refused with the agent's message and the viewer sees nothing of the other
//! namespace; requests without the cookie, with a foreign Host or without the CSRF token are
//! refused and change nothing. The page is served under a name of its own
//! (`tenantflux-<random>.localhost`): pages of other servers on 127.0.0.1 opened in the same
//! browser receive no cookie, and 127.0.0.1 or localhost get no page. A session that ends shows
//! why and the next address the terminal got, and its confirmations are refused in the next
//! session; the confirmation takes no focus. Each step saves a screenshot under
//! target/screenshots/.

use std::{
    io::{BufRead as _, BufReader, Read as _, Write as _},
    path::{Path, PathBuf},
    process::{Child, ChildStdout, Stdio},
    time::Duration,
};

use fantoccini::Locator;
use tenantflux_tests::{
    TestCluster,
    browser::{Browser, http, http_get, printed_address, read_printed_address},
    flux::{GitRepo, KUSTOMIZATIONS, revision},
    wait_for,
};

const NS: &str = "dash";
const OTHER: &str = "dash-other";
/// How long a real reconciliation may take on a loaded 2-core machine.
const RECONCILE: Duration = Duration::from_secs(120);
/// How long the page may take to show what the agent knows.
const SHOWN: Duration = Duration::from_secs(30);
/// The session cookie's name.
const COOKIE: &str = "tenantflux-session";
/// How long the session of the dashboard that shows a session ending lasts.
const SHORT_SESSION: &str = "45s";

/// A running `kubectl tenantflux dashboard`, stopped when dropped.
struct Dashboard {
    child: Child,
    /// The sign-in address it printed.
    url: String,
    /// `tenantflux-<random>.localhost:PORT`: the name and port it answers under.
    host: String,
    port: u16,
    /// What it prints after the first line: the next sign-in address when a session ended.
    stdout: BufReader<ChildStdout>,
}

impl Dashboard {
    fn start(cluster: &TestCluster, kubeconfig: &Path, args: &[&str]) -> Dashboard {
        Self::start_with(cluster, kubeconfig, args, &[])
    }

    /// Started with `env` too (the hidden session limits, say).
    fn start_with(
        cluster: &TestCluster,
        kubeconfig: &Path,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Dashboard {
        let mut all = vec!["dashboard", "--no-open"];
        all.extend_from_slice(args);
        let mut child = cluster
            .plugin_command(Some(kubeconfig), &all)
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the dashboard");
        let ((url, host, port), stdout) = read_printed_address(&mut child, "the dashboard");
        Dashboard {
            child,
            url,
            host,
            port,
            stdout,
        }
    }

    fn base(&self) -> String {
        format!("http://{}", self.host)
    }

    /// The next address the dashboard printed (it prints one when a session ended, before
    /// the page that says so is sent).
    fn next_address(&mut self) -> String {
        let mut line = String::new();
        let read = self
            .stdout
            .read_line(&mut line)
            .expect("read the dashboard's output");
        assert!(read > 0, "the dashboard's output ended");
        printed_address(&line).0
    }

    /// Sends `signal` (`HUP`: the terminal closed, `INT`: Ctrl-C) and waits for the dashboard
    /// to exit; how it exited.
    fn stop_with(&mut self, signal: &str) -> std::process::ExitStatus {
        let sent = std::process::Command::new("kill")
            .args([&format!("-{signal}"), &self.child.id().to_string()])
            .status()
            .expect("kill");
        assert!(sent.success(), "kill -{signal}");
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = self.child.try_wait().expect("the dashboard's state") {
                return status;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the dashboard still runs 10 s after SIG{signal}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Dashboard {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The CSRF token of the confirmation form the page shows.
async fn form_token(page: &fantoccini::Client) -> String {
    page.find(Locator::Css(r#"input[name="csrf"]"#))
        .await
        .expect("the form's token")
        .attr("value")
        .await
        .expect("value")
        .expect("a token")
}

fn post(port: u16, host: &str, cookie: &str, extra: &str, body: &str) -> u16 {
    http(
        port,
        &format!(
            "POST /action HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nCookie: {cookie}\r\n{extra}\
             Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        ),
    )
    .0
}

/// A server of another local user on another loopback port, as a page the user opens in the
/// same browser: it answers every request with the Host and Cookie headers it received.
struct Neighbour {
    port: u16,
}

impl Neighbour {
    fn start() -> Neighbour {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
        let port = listener.local_addr().expect("address").port();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                // A browser may open a connection it sends nothing on: one thread each.
                std::thread::spawn(move || Neighbour::answer(stream));
            }
        });
        Neighbour { port }
    }

    fn answer(mut stream: std::net::TcpStream) {
        let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
        let mut head = Vec::new();
        let mut buffer = [0_u8; 4096];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            match stream.read(&mut buffer) {
                Ok(0) | Err(_) => return,
                Ok(read) => head.extend_from_slice(&buffer[..read]),
            }
        }
        let head = String::from_utf8_lossy(&head);
        let header = |name: &str| {
            head.lines()
                .find_map(|line| {
                    let (key, value) = line.split_once(':')?;
                    key.eq_ignore_ascii_case(name)
                        .then(|| value.trim().to_owned())
                })
                .unwrap_or_default()
        };
        let body = format!(
            "<!DOCTYPE html><html><body><p id=\"seen\">host {} cookie [{}]</p></body></html>",
            header("host"),
            header("cookie")
        );
        let _ = write!(
            stream,
            "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
    }
}

fn suspended(cluster: &TestCluster, namespace: &str, name: &str) -> String {
    cluster
        .kubectl_ok(&[
            "-n",
            namespace,
            "get",
            KUSTOMIZATIONS,
            name,
            "-o",
            "jsonpath={.spec.suspend}",
        ])
        .expect("the Kustomization")
}

fn kustomization(namespace: &str, name: &str) -> String {
    format!(
        "---\napiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\n\
         metadata: {{name: {name}, namespace: {namespace}}}\n\
         spec: {{interval: 1h, path: ./{namespace}, prune: true, targetNamespace: {namespace}, \
         sourceRef: {{kind: GitRepository, name: repo}}}}\n"
    )
}

fn commit(repo: &GitRepo, release: &str) -> String {
    let config = |name: &str| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}}}\ndata: {{release: \"{release}\"}}\n"
        )
    };
    let (a, b) = (config("dash-config"), config("other-config"));
    repo.commit(
        &[
            (&format!("{NS}/config.yaml"), &a),
            (&format!("{OTHER}/config.yaml"), &b),
        ],
        &[],
        &format!("release {release}"),
    )
    .expect("git commit")
}

/// Flux 2.9 with its controllers, the agent, a GitRepository and a Kustomization in each
/// namespace, applied; an admin and a viewer of NS only. Returns their kubeconfigs, the
/// repository and its first commit.
async fn prepare(cluster: &TestCluster) -> (PathBuf, PathBuf, GitRepo, String) {
    cluster
        .ensure_flux_and_agent("2.9.x")
        .await
        .expect("Flux 2.9 and the agent");
    let repo = GitRepo::new("dashboard").expect("git repository");
    let rev1 = commit(&repo, "1");
    let url = cluster.git_server(&repo).expect("git server");
    let mut objects = String::new();
    for namespace in [NS, OTHER] {
        objects.push_str(&format!(
            "---\napiVersion: v1\nkind: Namespace\nmetadata: {{name: {namespace}}}\n---\n\
             apiVersion: source.toolkit.fluxcd.io/v1\nkind: GitRepository\n\
             metadata: {{name: repo, namespace: {namespace}}}\n\
             spec: {{interval: 1h, url: \"{url}\", ref: {{branch: main}}}}\n"
        ));
    }
    objects.push_str(&kustomization(NS, "dash-app"));
    objects.push_str(&kustomization(OTHER, "other-app"));
    cluster.apply_yaml(&objects).expect("the Flux objects");

    let admin = cluster
        .token_kubeconfig("tenantflux-system", "dash-admin")
        .expect("kubeconfig");
    let viewer = cluster
        .token_kubeconfig(NS, "dash-viewer")
        .expect("kubeconfig");
    cluster
        .apply_yaml(&format!(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\n\
             metadata: {{name: dash-admin}}\n\
             roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}}\n\
             subjects: [{{kind: ServiceAccount, name: dash-admin, namespace: tenantflux-system}}]\n\
             ---\napiVersion: rbac.authorization.k8s.io/v1\nkind: Role\n\
             metadata: {{name: flux-viewer, namespace: {NS}}}\n\
             rules:\n\
             - {{apiGroups: [source.toolkit.fluxcd.io, kustomize.toolkit.fluxcd.io, helm.toolkit.fluxcd.io, \
             notification.toolkit.fluxcd.io, image.toolkit.fluxcd.io, fluxcd.controlplane.io, \
             source.extensions.fluxcd.io], resources: [\"*\"], verbs: [get, list, watch]}}\n\
             - {{apiGroups: [\"\"], resources: [events, configmaps], verbs: [get, list, watch]}}\n\
             ---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\n\
             metadata: {{name: flux-viewer, namespace: {NS}}}\n\
             roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: flux-viewer}}\n\
             subjects: [{{kind: ServiceAccount, name: dash-viewer, namespace: {NS}}}]\n\
             ---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\n\
             metadata: {{name: dash-viewer, namespace: tenantflux-system}}\n\
             roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: tenantflux-user}}\n\
             subjects: [{{kind: ServiceAccount, name: dash-viewer, namespace: {NS}}}]\n\
             ---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\n\
             metadata: {{name: dash-viewer-identity}}\n\
             roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: tenantflux-caller-identity}}\n\
             subjects: [{{kind: ServiceAccount, name: dash-viewer, namespace: {NS}}}]\n"
        ))
        .expect("bindings");
    // The viewer's context names the namespace, as a tenant's kubeconfig does.
    let text = std::fs::read_to_string(&viewer).expect("kubeconfig");
    let text = text.replace(
        "context: {cluster: test, user: dash-viewer}",
        &format!("context: {{cluster: test, user: dash-viewer, namespace: {NS}}}"),
    );
    assert!(text.contains(&format!("namespace: {NS}")), "{text}");
    std::fs::write(&viewer, text).expect("kubeconfig");

    for (namespace, name) in [(NS, "dash-app"), (OTHER, "other-app")] {
        cluster
            .kustomization_applied(namespace, name, &revision(&rev1), RECONCILE)
            .await
            .expect("applied");
    }
    (admin, viewer, repo, rev1)
}

fn row(namespace: &str, name: &str) -> String {
    format!(r#"tr[data-key="Kustomization/{namespace}/{name}"]"#)
}

#[tokio::test]
async fn the_dashboard_shows_and_controls_flux_as_each_user_may() {
    let cluster = TestCluster::own("tf-dash");
    let (admin, viewer, repo, rev1) = prepare(cluster).await;
    let browser = Browser::start().await.expect("chromium");
    let page = browser.client();

    // The admin's page: every namespace, READY and revision as the controllers report them.
    let dashboard = Dashboard::start(cluster, &admin, &[]);
    page.goto(&dashboard.url).await.expect("open the address");
    let app = row(NS, "dash-app");
    browser
        .wait_for_text(&format!("{app} td.ready"), "True", SHOWN)
        .await
        .expect("dash-app Ready");
    browser
        .wait_for_text(&format!("{app} td.revision"), &revision(&rev1), SHOWN)
        .await
        .expect("dash-app at the first commit");
    browser
        .wait_for_text(
            &format!("{} td.ready", row(OTHER, "other-app")),
            "True",
            SHOWN,
        )
        .await
        .expect("the admin sees the other namespace");
    browser
        .wait_for_text("#cluster", "FluxInstance", SHOWN)
        .await
        .expect("the cluster's state");
    // The next upgrade, as the agent plans it: the newest Flux 2 release flux-operator knows.
    browser
        .wait_for_text("#next-upgrade", "Flux 2.9", SHOWN)
        .await
        .expect("the next upgrade's plan");
    browser
        .wait_for_text("#live-state", "live", SHOWN)
        .await
        .expect("the page follows the agent");
    assert_eq!(
        page.current_url().await.expect("url").path(),
        "/",
        "the sign-in address leads to the page"
    );
    // The screenshot (docs/images/dashboard.png) shows Flux as flux-operator applied it.
    let instance = wait_for("the FluxInstance applied and Ready", RECONCILE, || async {
        let instance = cluster.object(
            "fluxinstances.fluxcd.controlplane.io",
            "flux-system",
            "flux",
        )?;
        let applied = instance["status"]["lastAppliedRevision"]
            .as_str()
            .is_some_and(|r| !r.is_empty());
        (applied && tenantflux_tests::condition_status(&instance, "Ready") == Some("True"))
            .then_some(())
    })
    .await;
    assert!(
        instance.is_ok(),
        "{:#}",
        cluster
            .object(
                "fluxinstances.fluxcd.controlplane.io",
                "flux-system",
                "flux"
            )
            .unwrap_or_default()
    );
    browser
        .wait_for_text("#cluster .cards > .card:nth-child(3) h3", "True", SHOWN)
        .await
        .expect("the FluxInstance Ready on the page");
    browser
        .wait_for_text("#next-upgrade", "up to date", SHOWN)
        .await
        .expect("the next upgrade planned from the applied release");
    browser.screenshot("dashboard").await.expect("screenshot");
    // Every badge is readable: its text is not drawn in its own background colour (a muted
    // badge once was, through the later `.muted` rule).
    let unreadable = page
        .execute(
            "return [...document.querySelectorAll('.badge')]\
               .filter(b => { const s = getComputedStyle(b); return s.color === s.backgroundColor; })\
               .map(b => b.textContent);",
            vec![],
        )
        .await
        .expect("badge colours");
    assert_eq!(
        unreadable,
        serde_json::json!([]),
        "badges drawn in their background colour"
    );

    // A new commit turns up as a new revision without a reload.
    page.execute("window.tenantfluxMarker = 42; return true;", vec![])
        .await
        .expect("mark the page");
    let rev2 = commit(&repo, "2");
    let reconciled = cluster.kubectl_tenantflux(
        Some(&admin),
        &["reconcile", "ks", "dash-app", "-n", NS, "--with-source"],
    );
    assert!(
        reconciled.as_ref().is_ok_and(|o| o.status.success()),
        "{reconciled:?}"
    );
    browser
        .wait_for_text(&format!("{app} td.revision"), &revision(&rev2), RECONCILE)
        .await
        .expect("the new revision on the page");
    let same_page = page
        .execute("return window.tenantfluxMarker === 42;", vec![])
        .await
        .expect("read the mark");
    assert_eq!(same_page, serde_json::json!(true), "no reload");

    // The object's page: its inventory, its Events and the controller's log lines about it,
    // as the controllers left them.
    browser
        .click(&format!("{app} td.name a"))
        .await
        .expect("follow it");
    browser
        .wait_for_text("ul.tree", "ConfigMap dash/dash-config", SHOWN)
        .await
        .expect("the inventory");
    wait_for(
        "dash-app's Events and log lines on its page",
        SHOWN,
        || async {
            let text = page
                .find(Locator::Css("main"))
                .await
                .ok()?
                .text()
                .await
                .ok()?;
            let logs = page
                .find(Locator::Css("table.logs"))
                .await
                .ok()?
                .text()
                .await
                .ok()?;
            if text.contains("ReconciliationSucceeded") && logs.contains("kustomize-controller") {
                return Some(());
            }
            let _ = page.refresh().await;
            None
        },
    )
    .await
    .expect("Events and log lines");
    browser
        .screenshot("dashboard-object")
        .await
        .expect("screenshot");

    // Suspend, confirmed: the agent suspends it as the admin.
    browser
        .click(&format!(
            r#"a[aria-label="suspend Kustomization {NS}/dash-app"]"#
        ))
        .await
        .expect("click suspend");
    browser
        .wait_for_text("h1", "Suspend Kustomization dash/dash-app?", SHOWN)
        .await
        .expect("the confirmation");
    assert_eq!(
        suspended(cluster, NS, "dash-app"),
        "",
        "nothing before confirming"
    );
    browser
        .click(r#"form button[type="submit"]"#)
        .await
        .expect("confirm");
    browser
        .wait_for_text("#outcome", "Kustomization dash/dash-app suspended", SHOWN)
        .await
        .expect("the outcome");
    assert_eq!(suspended(cluster, NS, "dash-app"), "true");
    page.goto(&format!("{}/", dashboard.base()))
        .await
        .expect("back to the list");
    browser
        .wait_for_text(&format!("{app} td.suspended"), "Suspended", SHOWN)
        .await
        .expect("shown suspended");

    // The cookie is the page's name's alone: pages of other servers on 127.0.0.1 (another
    // local user's, on another port) opened in the same browser receive none, and the
    // dashboard's own port under 127.0.0.1 or localhost shows no page.
    let cookies = page.get_all_cookies().await.expect("cookies");
    let session = cookies
        .iter()
        .find(|c| c.name() == COOKIE)
        .unwrap_or_else(|| panic!("the session cookie {COOKIE} in {cookies:?}"));
    assert_eq!(session.http_only(), Some(true), "HttpOnly");
    let name = dashboard.host.rsplit_once(':').expect("name:port").0;
    assert_eq!(
        session.domain(),
        Some(name),
        "the page's name's: {session:?}"
    );
    let cookie = format!("{COOKIE}={}", session.value());
    let neighbour = Neighbour::start();
    for other in [
        format!("127.0.0.1:{}", neighbour.port),
        format!("localhost:{}", neighbour.port),
        format!("neighbour.localhost:{}", neighbour.port),
    ] {
        page.goto(&format!("http://{other}/"))
            .await
            .expect("the neighbour's page");
        let seen = browser
            .wait_for_text("#seen", &format!("host {other}"), SHOWN)
            .await
            .expect("the neighbour's answer")
            .text()
            .await
            .expect("its text");
        assert!(
            seen.ends_with("cookie []"),
            "{other} received a cookie: {seen}"
        );
    }
    for other in [
        format!("127.0.0.1:{}", dashboard.port),
        format!("localhost:{}", dashboard.port),
    ] {
        page.goto(&format!("http://{other}/"))
            .await
            .expect("the old address");
        browser
            .wait_for_text("main", "answers only at the address it printed", SHOWN)
            .await
            .expect("refused");
        let source = page.source().await.expect("source");
        assert!(!source.contains("dash-app"), "{other}: {source}");
    }

    // Refused without the cookie, with a foreign Host, or without the CSRF token.
    let host = dashboard.host.clone();
    let (status, _, body) = http_get(dashboard.port, &host, "/", "");
    assert_eq!(status, 401, "no cookie");
    assert!(!body.contains("dash-app"), "{body}");
    for other in [
        format!("rebound.example:{}", dashboard.port),
        format!("127.0.0.1:{}", dashboard.port),
        format!("localhost:{}", dashboard.port),
    ] {
        let (status, head, body) = http_get(dashboard.port, &other, "/", &cookie);
        assert_eq!(status, 421, "Host {other}");
        assert!(!body.contains("dash-app"), "{body}");
        assert!(!head.to_lowercase().contains("set-cookie"), "{head}");
    }
    let form = format!("action=suspend&kind=Kustomization&namespace={OTHER}&name=other-app");
    assert_eq!(
        post(dashboard.port, &host, &cookie, "", &form),
        403,
        "no CSRF token"
    );
    // The token is in every form the page renders: take it from the confirmation page.
    page.goto(&format!(
        "{}/confirm?action=suspend&kind=Kustomization&namespace={OTHER}&name=other-app",
        dashboard.base()
    ))
    .await
    .expect("a confirmation page");
    let csrf = form_token(page).await;
    let with_token = format!("csrf={csrf}&{form}");
    assert_eq!(
        post(
            dashboard.port,
            &host,
            &format!("{COOKIE}=forged"),
            "",
            &with_token
        ),
        401,
        "a token without the session cookie"
    );
    for origin in [
        "http://attacker.example".to_owned(),
        format!("http://127.0.0.1:{}", dashboard.port),
    ] {
        assert_eq!(
            post(
                dashboard.port,
                &host,
                &cookie,
                &format!("Origin: {origin}\r\n"),
                &with_token,
            ),
            403,
            "a post from {origin}"
        );
    }
    assert_eq!(
        suspended(cluster, OTHER, "other-app"),
        "",
        "nothing changed"
    );

    // The viewer: may read NS only. The page says it shows NS, holds nothing of OTHER, and
    // shows the agent's refusal of an action.
    let viewer_dashboard = Dashboard::start(cluster, &viewer, &[]);
    page.goto(&viewer_dashboard.url)
        .await
        .expect("the viewer's address");
    browser
        .wait_for_text(&format!("{app} td.ready"), "True", SHOWN)
        .await
        .expect("the viewer sees dash-app");
    browser
        .wait_for_text(".notice", &format!("this page shows namespace {NS}"), SHOWN)
        .await
        .expect("the narrowed scope is said");
    let source = page.source().await.expect("page source");
    assert!(
        !source.contains("other-app"),
        "nothing of {OTHER}: {source}"
    );
    assert!(!source.contains(OTHER), "not even its name: {source}");
    page.goto(&format!(
        "{}/object/Kustomization/{OTHER}/other-app",
        viewer_dashboard.base()
    ))
    .await
    .expect("the other namespace's object");
    assert!(
        !page
            .source()
            .await
            .expect("source")
            .contains("other-config"),
        "no inventory of {OTHER}"
    );
    page.goto(&format!("{}/", viewer_dashboard.base()))
        .await
        .expect("back");
    browser
        .click(&format!(
            r#"a[aria-label="resume Kustomization {NS}/dash-app"]"#
        ))
        .await
        .expect("click resume");
    browser
        .click(r#"form button[type="submit"]"#)
        .await
        .expect("confirm");
    let refused = browser
        .wait_for_text("#outcome", "The agent refused", SHOWN)
        .await
        .expect("the refusal")
        .text()
        .await
        .expect("text");
    assert!(
        refused.contains("patch"),
        "the agent's message names what is missing: {refused}"
    );
    assert_eq!(
        suspended(cluster, NS, "dash-app"),
        "true",
        "still suspended"
    );
    browser
        .screenshot("dashboard-refused")
        .await
        .expect("screenshot");

    // A session that ends. The printed token, presented under 127.0.0.1 or localhost (whose
    // cookies every local server receives), signs nobody in and sets no cookie; under the
    // printed name it signs the browser in.
    let mut short = Dashboard::start_with(
        cluster,
        &admin,
        &[],
        &[("TENANTFLUX_DASHBOARD_SESSION_MAX", SHORT_SESSION)],
    );
    let login = &short.url[short.url.find("/login").expect("a sign-in path")..];
    for other in [
        format!("127.0.0.1:{}", short.port),
        format!("localhost:{}", short.port),
    ] {
        let (status, head, body) = http_get(short.port, &other, login, "");
        assert_eq!(status, 421, "the token under {other}");
        assert!(!head.to_lowercase().contains("set-cookie"), "{head}");
        assert!(!body.contains(&short.host), "the name is not said: {body}");
    }
    page.goto(&short.url).await.expect("sign in");
    browser
        .wait_for_text(&format!("{app} td.ready"), "True", SHOWN)
        .await
        .expect("signed in with the same token");
    // The confirmation takes no focus, so no key pressed on the page (which another page may
    // have opened) submits it; its form carries the session's own token.
    page.goto(&format!(
        "{}/confirm?action=resume&kind=Kustomization&namespace={NS}&name=dash-app",
        short.base()
    ))
    .await
    .expect("a confirmation page");
    browser
        .wait_for_text("h1", "Resume Kustomization dash/dash-app?", SHOWN)
        .await
        .expect("the confirmation");
    let button = page
        .find(Locator::Css(r#"form button[type="submit"]"#))
        .await
        .expect("the confirm button");
    assert_eq!(button.attr("autofocus").await.expect("attribute"), None);
    let focused = page
        .execute_async(
            "const done = arguments[arguments.length - 1];\
             requestAnimationFrame(() => requestAnimationFrame(() => done(document.activeElement.tagName)));",
            vec![],
        )
        .await
        .expect("the focused element");
    assert_eq!(focused, serde_json::json!("BODY"), "nothing has the focus");
    let ended_csrf = form_token(page).await;
    let ended_cookie = page
        .get_named_cookie(COOKIE)
        .await
        .expect("the session cookie")
        .value()
        .to_owned();
    // The list stays open; when the session ends its live stream is cut, the browser is
    // refused on reconnecting, and the page, reloaded, says why and what to do.
    page.goto(&format!("{}/", short.base()))
        .await
        .expect("the list");
    browser
        .wait_for_text("#live-state", "live", SHOWN)
        .await
        .expect("live");
    let ended = browser
        .wait_for_text("main", "Session expired", Duration::from_secs(120))
        .await
        .expect("the session's end shown")
        .text()
        .await
        .expect("its text");
    assert!(
        ended.contains(&format!("{SHORT_SESSION} after signing in"))
            && ended.contains("printed a new sign-in address"),
        "{ended}"
    );
    browser
        .screenshot("dashboard-session-expired")
        .await
        .expect("screenshot");
    let (status, _, body) = http_get(
        short.port,
        &short.host,
        "/",
        &format!("{COOKIE}={ended_cookie}"),
    );
    assert_eq!(status, 401, "the ended session's cookie");
    assert!(!body.contains("dash-app"), "{body}");
    assert!(body.contains("Session expired"), "{body}");
    // The terminal has the next address; it signs the browser in again, as a new session.
    let next = short.next_address();
    assert_ne!(next, short.url);
    page.goto(&next).await.expect("sign in again");
    browser
        .wait_for_text(&format!("{app} td.ready"), "True", SHOWN)
        .await
        .expect("signed in again");
    let cookie = format!(
        "{COOKIE}={}",
        page.get_named_cookie(COOKIE)
            .await
            .expect("the new session cookie")
            .value()
    );
    assert_ne!(cookie, format!("{COOKIE}={ended_cookie}"));
    // A confirmation is bound to the session that asked for it: the ended session's form,
    // sent with the new session's cookie, is refused, as is one without a token.
    let form = format!("action=resume&kind=Kustomization&namespace={NS}&name=dash-app");
    assert_eq!(
        post(
            short.port,
            &short.host,
            &cookie,
            "",
            &format!("csrf={ended_csrf}&{form}")
        ),
        403,
        "the ended session's confirmation"
    );
    assert_eq!(
        post(short.port, &short.host, &cookie, "", &form),
        403,
        "no token"
    );
    assert_eq!(
        suspended(cluster, NS, "dash-app"),
        "true",
        "nothing resumed"
    );
    drop(short);

    // A closed terminal and Ctrl-C each stop a dashboard, live streams open or not: it exits
    // and its port is closed.
    browser.close().await.expect("close the browser");
    for (mut running, signal) in [(viewer_dashboard, "HUP"), (dashboard, "INT")] {
        let status = running.stop_with(signal);
        assert!(status.success(), "after SIG{signal}: {status}");
        assert!(
            std::net::TcpStream::connect(("127.0.0.1", running.port)).is_err(),
            "port {} still open after SIG{signal}",
            running.port
        );
    }

    // Opening the browser puts no token on a command line, where every local user could read
    // it (`ps`) and sign in first: the browser ($BROWSER) gets a file in a directory only
    // this user may read, which sends it on to the sign-in address.
    let work = tempfile::tempdir().expect("a temporary directory");
    let script = work.path().join("browser");
    let seen = work.path().join("seen");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nprintf '%s\\n' \"$@\" >'{seen}.argv'\ncp \"$1\" '{seen}.html'\n\
             stat -c %a \"$(dirname \"$1\")\" >'{seen}.tmp' && mv '{seen}.tmp' '{seen}.mode'\n",
            seen = seen.display()
        ),
    )
    .expect("browser script");
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("executable");
    let mut opened = cluster
        .plugin_command(Some(&admin), &["dashboard"])
        .env("BROWSER", &script)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the dashboard");
    let mut line = String::new();
    BufReader::new(opened.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("the address");
    let mode = wait_for("the browser started", SHOWN, || {
        let mode = std::fs::read_to_string(seen.with_extension("mode")).ok();
        async move { mode }
    })
    .await
    .expect("$BROWSER run");
    let _ = opened.kill();
    let _ = opened.wait();
    let (url, _, _) = printed_address(&line);
    let argv = std::fs::read_to_string(seen.with_extension("argv")).expect("argv");
    assert!(
        !argv.contains("token"),
        "the token on a command line: {argv}"
    );
    assert_eq!(mode.trim(), "700", "the sign-in file's directory");
    let html = std::fs::read_to_string(seen.with_extension("html")).expect("the file");
    assert!(
        html.contains(&format!("url={url}\"")),
        "the file sends the browser to {url}: {html}"
    );
}
