//! `kubectl tenantflux dashboard` in a real browser (Debian's chromium through chromedriver)
//! on a cluster of its own (its Flux objects would change what other binaries list on the
//! shared one), with Flux 2.9 and the real source-controller and kustomize-controller
//! reconciling a local Git repository: two namespaces with a Kustomization each, an admin and a
//! viewer who may only read one namespace. The page shows what the controllers report, a new
//! commit arrives without a reload, suspend goes through the agent as the user, the viewer's
//! action is refused with the agent's message and the viewer sees nothing of the other
//! namespace; requests without the cookie, with a foreign Host or without the CSRF token are
//! refused and change nothing. Each step saves a screenshot under target/screenshots/.

use std::{
    io::{BufRead as _, BufReader, Read as _, Write as _},
    path::{Path, PathBuf},
    process::{Child, Stdio},
    time::Duration,
};

use fantoccini::Locator;
use tenantflux_tests::{
    TestCluster, apply_flux_instance,
    browser::Browser,
    flux::{GitRepo, KUSTOMIZATIONS, revision},
    wait_for,
};

const NS: &str = "dash";
const OTHER: &str = "dash-other";
/// How long a real reconciliation may take on a loaded 2-core machine.
const RECONCILE: Duration = Duration::from_secs(120);
/// How long the page may take to show what the agent knows.
const SHOWN: Duration = Duration::from_secs(30);

/// A running `kubectl tenantflux dashboard`, stopped when dropped.
struct Dashboard {
    child: Child,
    /// The sign-in address it printed.
    url: String,
    port: u16,
}

impl Dashboard {
    fn start(cluster: &TestCluster, kubeconfig: &Path, args: &[&str]) -> Dashboard {
        let mut all = vec!["dashboard", "--no-open"];
        all.extend_from_slice(args);
        let mut child = cluster
            .plugin_command(Some(kubeconfig), &all)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the dashboard");
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        let read = stdout
            .read_line(&mut line)
            .expect("read the dashboard's address");
        if read == 0 {
            let mut err = String::new();
            let _ = child
                .stderr
                .take()
                .expect("stderr")
                .read_to_string(&mut err);
            panic!("the dashboard exited before printing its address: {err}");
        }
        let url = line
            .split_whitespace()
            .find(|word| word.starts_with("http://127.0.0.1:"))
            .unwrap_or_else(|| panic!("no address in {line:?}"))
            .to_owned();
        let port = url["http://127.0.0.1:".len()..]
            .split('/')
            .next()
            .and_then(|p| p.parse().ok())
            .expect("a port");
        Dashboard { child, url, port }
    }

    fn base(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
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

/// One HTTP/1.1 request to 127.0.0.1:`port` as written; the status and the body.
fn http(port: u16, request: &str) -> (u16, String) {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream.write_all(request.as_bytes()).expect("send");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("read");
    let status = answer
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status line");
    let body = answer
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

fn post(port: u16, host: &str, cookie: &str, extra: &str, body: &str) -> (u16, String) {
    http(
        port,
        &format!(
            "POST /action HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nCookie: {cookie}\r\n{extra}\
             Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        ),
    )
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
    cluster.ensure_flux_operator().expect("flux-operator");
    let client = cluster.client().await.expect("client");
    apply_flux_instance(&client, "2.9.x")
        .await
        .expect("FluxInstance");
    for crd in [
        "crd/kustomizations.kustomize.toolkit.fluxcd.io",
        "crd/gitrepositories.source.toolkit.fluxcd.io",
    ] {
        wait_for(crd, Duration::from_secs(180), || async {
            cluster
                .kubectl_ok(&["wait", "--for=condition=Established", crd, "--timeout=1s"])
                .ok()
        })
        .await
        .expect("Flux CRDs installed by the operator");
    }
    cluster.ensure_agent().expect("agent");
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

    // The object's page: its inventory and its Events, as the controllers left them.
    page.find(Locator::Css(&format!("{app} td.name a")))
        .await
        .expect("the object's link")
        .click()
        .await
        .expect("follow it");
    browser
        .wait_for_text("ul.tree", "ConfigMap dash/dash-config", SHOWN)
        .await
        .expect("the inventory");
    wait_for("dash-app's Events on its page", SHOWN, || async {
        let text = page
            .find(Locator::Css("main"))
            .await
            .ok()?
            .text()
            .await
            .ok()?;
        if text.contains("ReconciliationSucceeded") {
            return Some(());
        }
        let _ = page.refresh().await;
        None
    })
    .await
    .expect("Events");
    browser
        .screenshot("dashboard-object")
        .await
        .expect("screenshot");

    // Suspend, confirmed: the agent suspends it as the admin.
    page.find(Locator::Css(&format!(
        r#"a[aria-label="suspend Kustomization {NS}/dash-app"]"#
    )))
    .await
    .expect("the suspend action")
    .click()
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
    page.find(Locator::Css(r#"form button[type="submit"]"#))
        .await
        .expect("the confirm button")
        .click()
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

    // Refused without the cookie, with a foreign Host, or without the CSRF token.
    let cookies = page.get_all_cookies().await.expect("cookies");
    let name = format!("tenantflux-{}", dashboard.port);
    let session = cookies
        .iter()
        .find(|c| c.name() == name)
        .unwrap_or_else(|| panic!("the session cookie {name} in {cookies:?}"));
    assert_eq!(session.http_only(), Some(true), "HttpOnly");
    let cookie = format!("{name}={}", session.value());
    let host = format!("127.0.0.1:{}", dashboard.port);
    let (status, body) = http(
        dashboard.port,
        &format!("GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"),
    );
    assert_eq!(status, 401, "no cookie");
    assert!(!body.contains("dash-app"), "{body}");
    let (status, body) = http(
        dashboard.port,
        &format!(
            "GET / HTTP/1.1\r\nHost: rebound.example:{}\r\nCookie: {cookie}\r\nConnection: close\r\n\r\n",
            dashboard.port
        ),
    );
    assert_eq!(status, 421, "foreign Host");
    assert!(!body.contains("dash-app"), "{body}");
    let form = format!("action=suspend&kind=Kustomization&namespace={OTHER}&name=other-app");
    assert_eq!(
        post(dashboard.port, &host, &cookie, "", &form).0,
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
    let csrf = page
        .find(Locator::Css(r#"input[name="csrf"]"#))
        .await
        .expect("the form's token")
        .attr("value")
        .await
        .expect("value")
        .expect("a token");
    let with_token = format!("csrf={csrf}&{form}");
    let (status, _) = post(
        dashboard.port,
        &host,
        "tenantflux-0=forged",
        "",
        &with_token,
    );
    assert_eq!(status, 401, "a token without the session cookie");
    let (status, _) = post(
        dashboard.port,
        &host,
        &cookie,
        "Origin: http://attacker.example\r\n",
        &with_token,
    );
    assert_eq!(status, 403, "a post from another origin");
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
    page.find(Locator::Css(&format!(
        r#"a[aria-label="resume Kustomization {NS}/dash-app"]"#
    )))
    .await
    .expect("the resume action")
    .click()
    .await
    .expect("click resume");
    page.find(Locator::Css(r#"form button[type="submit"]"#))
        .await
        .expect("the confirm button")
        .click()
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
    let url = line
        .split_whitespace()
        .find(|word| word.starts_with("http://127.0.0.1:"))
        .unwrap_or_else(|| panic!("no address in {line:?}"));
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
