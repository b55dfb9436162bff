//! `events`, `tree`, `trace`, `stats` and `reconcile` waiting by default, on the shared cluster
//! with Flux 2.9 and the real source-controller and kustomize-controller: a GitRepository served
//! from a local repository, a Kustomization that applies a ConfigMap, a Deployment and a nested
//! Kustomization (which applies another Deployment), one pointing at a path Git does not hold
//! and one suspended; and a ResourceSet the real flux-operator applies. Every status and Event
//! shown is the controllers' own; `events`, `tree` and `stats` are compared with the flux CLI
//! v2.9.5 (built by `tests/env/cluster build-flux-cli`) on the same objects.
//!
//! One test per scenario, each runnable alone (`tests/run inspect::stats`): the first to run
//! prepares the objects, and they run one at a time, as each changes what another reads.

use std::{
    collections::BTreeSet,
    io::{BufRead as _, BufReader},
    path::{Path, PathBuf},
    process::Stdio,
    sync::{Arc, Mutex},
    time::Duration,
};

use serde_json::Value;
use tenantflux_tests::{
    TestCluster, agent_user_with_role, columns,
    flux::{GIT_REPOSITORIES, GitRepo, KUSTOMIZATIONS, ready_now, revision},
    plugin, plugin_json, plugin_ok, stderr, stdout, wait_for,
};

const NS: &str = "insp";
/// The rules of a tenant who may read Kustomizations in their namespace.
const READ_KUSTOMIZATIONS: &str = "[{apiGroups: [kustomize.toolkit.fluxcd.io], resources: [kustomizations], verbs: [get, list, watch]}]";
/// How long a real reconciliation may take on a loaded 2-core machine.
const RECONCILE: Duration = Duration::from_secs(120);

/// The flux CLI v2.9.5 against the cluster, as its admin.
fn flux(cluster: &TestCluster, args: &[&str]) -> String {
    let output = std::process::Command::new(tenantflux_tests::flux_cli())
        .args(args)
        .arg("--kubeconfig")
        .arg(cluster.kubeconfig())
        .stdin(Stdio::null())
        .output()
        .expect("run flux");
    assert!(
        output.status.success(),
        "flux {} failed: {}",
        args.join(" "),
        stderr(&output)
    );
    stdout(&output)
}

/// The columns of each row of a table, cut where the header's columns start.
fn table(text: &str) -> Vec<Vec<String>> {
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let Some(header) = lines.next() else {
        return Vec::new();
    };
    let starts: Vec<usize> = header
        .char_indices()
        // A heading of two words ("LAST SEEN") is one column: only starts after two spaces.
        .filter(|&(i, c)| c != ' ' && (i == 0 || header[..i].ends_with("  ")))
        .map(|(i, _)| i)
        .collect();
    lines.map(|line| columns(line, &starts)).collect()
}

fn kustomization(name: &str, path: &str, suspend: bool) -> String {
    format!(
        "---\napiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\n\
         metadata: {{name: {name}, namespace: {NS}}}\n\
         spec: {{interval: 1h, path: {path}, prune: true, suspend: {suspend}, \
         sourceRef: {{kind: GitRepository, name: repo}}}}\n"
    )
}

fn files(release: &str) -> Vec<(&'static str, String)> {
    let deployment = |name: &str| {
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: {name}, namespace: {NS}}}\n\
             spec:\n  replicas: 1\n  selector: {{matchLabels: {{app: {name}}}}}\n  template:\n    \
             metadata: {{labels: {{app: {name}}}}}\n    \
             spec: {{containers: [{{name: app, image: registry.example/app:1}}]}}\n"
        )
    };
    vec![
        (
            "root/configmap.yaml",
            format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: root-config, namespace: {NS}}}\ndata: {{release: \"{release}\"}}\n"
            ),
        ),
        ("root/deployment.yaml", deployment("root-app")),
        (
            "root/child.yaml",
            kustomization("insp-child", "./child", false)
                .trim_start_matches("---\n")
                .to_owned(),
        ),
        ("child/deployment.yaml", deployment("child-app")),
    ]
}

fn commit(repo: &GitRepo, release: &str) -> String {
    let files = files(release);
    let files: Vec<(&str, &str)> = files.iter().map(|(p, c)| (*p, c.as_str())).collect();
    repo.commit(&files, &[], &format!("release {release}"))
        .expect("git commit")
}

/// Every path from the root to a node, as `Kind/ns/name > Kind/ns/name …`, of a tree in the
/// plugin's JSON (`kind`, `namespace`, `name`, `children`) or flux's (`resource` with
/// `Namespace`, `Name`, `GroupKind.Kind`, and `resources`).
fn paths(node: &Value, prefix: &str, out: &mut BTreeSet<String>) {
    let (kind, namespace, name, children) = if node.get("resource").is_some() {
        let r = &node["resource"];
        (
            r["GroupKind"]["Kind"].as_str().unwrap_or_default(),
            r["Namespace"].as_str().unwrap_or_default(),
            r["Name"].as_str().unwrap_or_default(),
            &node["resources"],
        )
    } else {
        (
            node["kind"].as_str().unwrap_or_default(),
            node["namespace"].as_str().unwrap_or_default(),
            node["name"].as_str().unwrap_or_default(),
            &node["children"],
        )
    };
    let title = if namespace.is_empty() {
        format!("{kind}/{name}")
    } else {
        format!("{kind}/{namespace}/{name}")
    };
    let path = if prefix.is_empty() {
        title
    } else {
        format!("{prefix} > {title}")
    };
    out.insert(path.clone());
    for child in children.as_array().into_iter().flatten() {
        paths(child, &path, out);
    }
}

/// The rows of a table the flux CLI printed (tablewriter: cells padded, then a tab; a message
/// of several lines goes on in rows whose first cells are empty, left out here).
fn flux_table(text: &str) -> Vec<Vec<String>> {
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with([' ', '\t']))
        .skip(1)
        .map(|l| {
            let mut cells: Vec<String> = l.split('\t').map(|c| c.trim().to_owned()).collect();
            while cells.last().is_some_and(String::is_empty) {
                cells.pop();
            }
            cells
        })
        .collect()
}

/// The (TYPE, REASON, OBJECT) of each row of an Events table.
fn event_keys(rows: Vec<Vec<String>>) -> BTreeSet<(String, String, String)> {
    rows.into_iter()
        .map(|row| (row[1].clone(), row[2].clone(), row[3].clone()))
        .collect()
}

/// What the scenarios share: an admin kubeconfig, the Git repository and its newest commit.
struct Prepared {
    admin: PathBuf,
    repo: GitRepo,
    head: std::sync::Mutex<String>,
}

/// Prepared once per test process, by whichever scenario runs first.
static PREPARED: tokio::sync::OnceCell<Prepared> = tokio::sync::OnceCell::const_new();
/// One scenario at a time: `events` adds a Kustomization that `stats` would count, and
/// `reconcile` commits a revision that `tree` and `trace` show.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The shared cluster, prepared, held for one scenario.
async fn scenario() -> (
    &'static TestCluster,
    &'static Prepared,
    tokio::sync::MutexGuard<'static, ()>,
) {
    let cluster = TestCluster::shared();
    let prepared = PREPARED.get_or_init(|| prepare(cluster)).await;
    (cluster, prepared, ONE_AT_A_TIME.lock().await)
}

/// Flux 2.9 with its controllers, the agent, the git source and the Kustomizations.
async fn prepare(cluster: &TestCluster) -> Prepared {
    cluster
        .ensure_flux_and_agent("2.9.x")
        .await
        .expect("Flux 2.9 and the agent");
    // A reused cluster starts over.
    cluster.delete_kustomizations_and_git_repositories(NS);

    let repo = GitRepo::new("inspect").expect("git repository");
    let rev1 = commit(&repo, "1");
    let url = cluster.git_server(&repo).expect("git server");
    let mut objects = format!(
        "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {NS}}}\n---\n\
         apiVersion: source.toolkit.fluxcd.io/v1\nkind: GitRepository\n\
         metadata: {{name: repo, namespace: {NS}}}\n\
         spec: {{interval: 1h, url: \"{url}\", ref: {{branch: main}}}}\n"
    );
    objects.push_str(&kustomization("insp-root", "./root", false));
    objects.push_str(&kustomization("insp-missing", "./missing", false));
    objects.push_str(&kustomization("insp-suspended", "./root", true));
    cluster.apply_yaml(&objects).expect("the Flux objects");

    let admin = cluster
        .cluster_admin_token_user("insp-admin")
        .expect("kubeconfig");

    for name in ["insp-root", "insp-child"] {
        cluster
            .kustomization_applied(NS, name, &revision(&rev1), RECONCILE)
            .await
            .expect("applied");
    }
    let missing = cluster
        .settled(KUSTOMIZATIONS, NS, "insp-missing", RECONCILE)
        .await
        .expect("settled");
    assert_eq!(ready_now(&missing), Some("False"), "{missing:#}");
    // The agent answers from its cache: wait until it shows what the controllers reported.
    wait_for(
        "the agent's cache to show insp-missing failing",
        Duration::from_secs(30),
        || async {
            let shown = plugin(
                cluster,
                &admin,
                &["get", "ks", "insp-missing", "-n", NS, "-o", "json"],
            );
            let shown: Value = serde_json::from_slice(&shown.stdout).ok()?;
            (shown["ready"]["status"] == "False").then_some(())
        },
    )
    .await
    .expect("cached");
    Prepared {
        admin,
        repo,
        head: std::sync::Mutex::new(rev1),
    }
}

async fn tree_and_trace(cluster: &TestCluster, admin: &Path, rev1: &str) {
    // `reconcile` may have run first: both appliers at the newest commit.
    for name in ["insp-root", "insp-child"] {
        cluster
            .kustomization_applied(NS, name, &revision(rev1), RECONCILE)
            .await
            .expect("applied at the newest commit");
    }
    let tree = plugin_json(cluster, admin, &["tree", "ks", "insp-root", "-n", NS]);
    let mut shown = BTreeSet::new();
    paths(&tree, "", &mut shown);
    let root = format!("Kustomization/{NS}/insp-root");
    let child = format!("{root} > Kustomization/{NS}/insp-child");
    for expected in [
        format!("{root} > ConfigMap/{NS}/root-config"),
        format!("{root} > Deployment/{NS}/root-app"),
        child.clone(),
        format!("{child} > Deployment/{NS}/child-app"),
    ] {
        assert!(shown.contains(&expected), "{expected} in {shown:#?}");
    }
    // READY as the controllers report it.
    assert_eq!(tree["ready"], "True", "{tree:#}");
    let nested = tree["children"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "insp-child")
        .unwrap();
    let nested_object = cluster.object(KUSTOMIZATIONS, NS, "insp-child").unwrap();
    assert_eq!(
        nested["ready"],
        ready_now(&nested_object).unwrap(),
        "{nested:#}"
    );
    assert!(
        tree["children"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["kind"] == "ConfigMap")
            .all(|c| c.get("ready").is_none()),
        "no READY for other kinds: {tree:#}"
    );
    let text = plugin_ok(cluster, admin, &["tree", "ks", "insp-root", "-n", NS]);
    assert!(text.starts_with(&format!("{root} Ready=True\n")), "{text}");
    assert!(
        text.contains(&format!("    └── Deployment/{NS}/child-app"))
            || text.contains(&format!("│   └── Deployment/{NS}/child-app")),
        "the nested Kustomization's children under it: {text}"
    );

    // The flux CLI shows the same objects in the same places.
    let theirs: Value = serde_json::from_str(&flux(
        cluster,
        &["tree", "ks", "insp-root", "-n", NS, "-o", "json"],
    ))
    .expect("flux tree JSON");
    let mut flux_paths = BTreeSet::new();
    paths(&theirs, "", &mut flux_paths);
    assert_eq!(shown, flux_paths, "plugin vs flux tree");

    // trace: the Deployment of the nested Kustomization, through both, to the GitRepository.
    let trace = plugin_json(
        cluster,
        admin,
        &["trace", "deployment", "child-app", "-n", NS],
    );
    let steps: Vec<(String, String, String)> = trace["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["role"].as_str().unwrap().to_owned(),
                s["kind"].as_str().unwrap().to_owned(),
                s["name"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let step =
        |role: &str, kind: &str, name: &str| (role.to_owned(), kind.to_owned(), name.to_owned());
    assert_eq!(
        steps,
        [
            step("object", "Deployment", "child-app"),
            step("applied by", "Kustomization", "insp-child"),
            step("applied by", "Kustomization", "insp-root"),
            step("source", "GitRepository", "repo"),
        ],
        "{trace:#}"
    );
    assert_eq!(trace["unmanaged"], false);
    let source = &trace["steps"][3];
    assert_eq!(source["revision"], revision(rev1), "{trace:#}");
    assert_eq!(source["ready"], "True", "{trace:#}");
    for applier in &trace["steps"].as_array().unwrap()[1..3] {
        assert_eq!(applier["revision"], revision(rev1), "{trace:#}");
        assert_eq!(applier["ready"], "True", "{trace:#}");
    }
    let text = plugin_ok(cluster, admin, &["trace", "deployment/child-app", "-n", NS]);
    assert!(text.contains("Managed by Flux"), "{text}");
    assert!(text.contains(&revision(rev1)), "{text}");

    // An object nothing applied says so.
    cluster
        .apply_yaml(&format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: loose, namespace: {NS}}}\n"
        ))
        .expect("a ConfigMap of kubectl's");
    let loose = plugin_json(cluster, admin, &["trace", "configmap", "loose", "-n", NS]);
    assert_eq!(loose["unmanaged"], true, "{loose:#}");
    assert_eq!(loose["steps"].as_array().unwrap().len(), 1, "{loose:#}");
    let text = plugin_ok(cluster, admin, &["trace", "cm", "loose", "-n", NS]);
    assert!(text.contains("Not managed by Flux"), "{text}");
    // A kind the cluster does not serve is a clear error.
    let unknown = plugin(cluster, admin, &["trace", "gadget", "x", "-n", NS]);
    assert_eq!(unknown.status.code(), Some(1), "{}", stderr(&unknown));
    assert!(
        stderr(&unknown).contains("serves no kind named \"gadget\""),
        "{}",
        stderr(&unknown)
    );
}

async fn events(cluster: &TestCluster, admin: &Path) {
    // The controller's own Warning about the missing path.
    let kubectl = cluster
        .kubectl_ok(&[
            "-n",
            NS,
            "get",
            "events",
            "--field-selector",
            "involvedObject.name=insp-missing,type=Warning",
            "-o",
            "json",
        ])
        .expect("kubectl get events");
    let kubectl: Value = serde_json::from_str(&kubectl).unwrap();
    let reasons: BTreeSet<String> = kubectl["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["reason"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        !reasons.is_empty(),
        "kustomize-controller emitted a Warning: {kubectl:#}"
    );
    let shown = plugin_json(
        cluster,
        admin,
        &[
            "events",
            "ks",
            "insp-missing",
            "-n",
            NS,
            "--types",
            "Warning",
        ],
    );
    let rows = shown["events"].as_array().unwrap();
    assert!(!rows.is_empty(), "{shown:#}");
    for row in rows {
        assert_eq!(row["type"], "Warning", "{shown:#}");
        assert!(
            row["object"] == "Kustomization/insp-missing" || row["object"] == "GitRepository/repo",
            "only the object and its source: {shown:#}"
        );
    }
    assert!(
        rows.iter()
            .any(|r| r["object"] == "Kustomization/insp-missing"
                && reasons.contains(r["reason"].as_str().unwrap())
                && r["message"].as_str().unwrap().contains("missing")),
        "the controller's Warning about the path: {shown:#}"
    );
    let text = plugin_ok(cluster, admin, &["events", "ks", "insp-missing", "-n", NS]);
    let header: Vec<&str> = text
        .lines()
        .next()
        .unwrap()
        .split("  ")
        .filter(|s| !s.is_empty())
        .map(str::trim)
        .collect();
    assert_eq!(
        header,
        ["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"],
        "{text}"
    );

    // The flux CLI shows the same Events (as far as a moment apart can: each of its rows is in
    // the plugin's next answer, each of the plugin's first answer in its).
    let before = event_keys(table(&plugin_ok(cluster, admin, &["events", "-n", NS])));
    let theirs = event_keys(flux_table(&flux(cluster, &["events", "-n", NS])));
    let after = event_keys(table(&plugin_ok(cluster, admin, &["events", "-n", NS])));
    assert!(
        before.is_subset(&theirs),
        "plugin {before:#?} within flux {theirs:#?}"
    );
    assert!(
        theirs.is_subset(&after),
        "flux {theirs:#?} within plugin {after:#?}"
    );
    assert!(
        before
            .iter()
            .any(|(t, _, o)| t == "Warning" && o == "Kustomization/insp-missing"),
        "{before:#?}"
    );

    // A caller without `list events` in the namespace: refused, naming the permission.
    let tenant = cluster.token_kubeconfig(NS, "insp-tenant").expect("tenant");
    cluster
        .apply_yaml(&agent_user_with_role(
            NS,
            "insp-tenant",
            "insp-tenant",
            "insp-tenant",
            READ_KUSTOMIZATIONS,
        ))
        .expect("tenant RBAC");
    for args in [
        &["events", "-n", NS][..],
        &["events", "ks", "insp-missing", "-n", NS],
        &["events", "-n", NS, "-w"],
    ] {
        let refused = plugin(cluster, &tenant, args);
        assert_eq!(
            refused.status.code(),
            Some(6),
            "{args:?}: {}",
            stderr(&refused)
        );
        let verb = if args.contains(&"-w") {
            "watch"
        } else {
            "list"
        };
        assert!(
            stderr(&refused).contains(&format!(
                "user \"system:serviceaccount:{NS}:insp-tenant\" may not {verb} events in namespace \"{NS}\""
            )),
            "{args:?}: {}",
            stderr(&refused)
        );
    }
    // What it may read still works.
    plugin_ok(cluster, &tenant, &["get", "ks", "-n", NS]);

    // -w shows a new Event once the controller emits it.
    let mut watch = cluster
        .plugin_command(Some(admin), &["events", "-n", NS, "-w"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("events -w");
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let reader = {
        let lines = lines.clone();
        let out = watch.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                lines.lock().unwrap().push(line);
            }
        })
    };
    wait_for(
        "the watch to show the existing Events",
        Duration::from_secs(30),
        || async {
            lines
                .lock()
                .unwrap()
                .iter()
                .any(|l| l.contains("Kustomization/insp-missing"))
                .then_some(())
        },
    )
    .await
    .expect("existing Events");
    // A name of this run's: Events outlive their object, so an earlier run's stay a while.
    let late = format!("insp-late-{}", std::process::id());
    let object = format!("Kustomization/{late}");
    assert!(
        !lines.lock().unwrap().iter().any(|l| l.contains(&object)),
        "no Event of {late} before it exists"
    );
    cluster
        .apply_yaml(&kustomization(&late, "./late", false))
        .expect("a new failing Kustomization");
    let shown = wait_for(
        "the watch to show the new Kustomization's Event",
        RECONCILE,
        || async {
            lines
                .lock()
                .unwrap()
                .iter()
                .find(|l| l.contains(&object))
                .cloned()
        },
    )
    .await;
    watch.kill().expect("stop the watch");
    let _ = watch.wait();
    reader.join().unwrap();
    let shown = shown.unwrap_or_else(|err| panic!("{err}: {:#?}", lines.lock().unwrap()));
    assert!(shown.contains("Warning"), "{shown}");
    cluster
        .kubectl_ok(&["-n", NS, "delete", KUSTOMIZATIONS, &late, "--wait"])
        .expect("the new Kustomization deleted");
}

async fn stats(cluster: &TestCluster, admin: &Path) {
    // What kubectl says of each kind in the namespace.
    let counts = |resource: &str| {
        let list: Value = serde_json::from_str(
            &cluster
                .kubectl_ok(&["-n", NS, "get", resource, "-o", "json"])
                .unwrap(),
        )
        .unwrap();
        let items = list["items"].as_array().unwrap().clone();
        let suspended = items
            .iter()
            .filter(|o| o["spec"]["suspend"] == true)
            .count() as u64;
        let failing = items
            .iter()
            .filter(|o| ready_now(o) == Some("False"))
            .count() as u64;
        let size: u64 = items
            .iter()
            .filter_map(|o| o["status"]["artifact"]["size"].as_u64())
            .sum();
        (items.len() as u64 - suspended, failing, suspended, size)
    };
    let shown = plugin_json(cluster, admin, &["stats", "-n", NS]);
    let of = |kind: &str| {
        let row = shown["kinds"]
            .as_array()
            .unwrap()
            .iter()
            .find(|k| k["kind"] == kind)
            .unwrap_or_else(|| panic!("{kind} in {shown:#}"));
        (
            row["running"].as_u64().unwrap(),
            row["failing"].as_u64().unwrap(),
            row["suspended"].as_u64().unwrap(),
            row["storageBytes"].as_u64().unwrap(),
        )
    };
    let ks = counts(KUSTOMIZATIONS);
    // insp-root, insp-child, insp-missing run; insp-missing fails; insp-suspended is suspended.
    assert_eq!((ks.0, ks.1, ks.2), (3, 1, 1), "the mix kubectl sees");
    assert_eq!(of("Kustomization"), (ks.0, ks.1, ks.2, 0), "{shown:#}");
    let git = counts(GIT_REPOSITORIES);
    assert!(git.3 > 0, "the artifact has a size");
    assert_eq!(of("GitRepository"), git, "{shown:#}");

    // The flux CLI counts the same.
    let theirs = flux_table(&flux(cluster, &["stats", "-n", NS]));
    let text = plugin_ok(cluster, admin, &["stats", "-n", NS]);
    let ours = table(&text);
    assert_eq!(
        text.lines()
            .next()
            .unwrap()
            .split_whitespace()
            .collect::<Vec<_>>(),
        ["RECONCILERS", "RUNNING", "FAILING", "SUSPENDED", "STORAGE"]
    );
    for kind in [
        "GitRepository",
        "Kustomization",
        "OCIRepository",
        "HelmRelease",
    ] {
        let row = |rows: &[Vec<String>]| {
            rows.iter()
                .find(|r| r[0] == kind)
                .cloned()
                .unwrap_or_else(|| panic!("{kind} in {rows:?}"))
        };
        assert_eq!(
            row(&ours),
            row(&theirs),
            "{kind}: plugin {text} vs flux {theirs:?}"
        );
    }
}

async fn reconcile_waits(cluster: &TestCluster, admin: &Path, prepared: &Prepared) {
    let rev2 = commit(&prepared.repo, "2");
    *prepared.head.lock().unwrap() = rev2.clone();
    // No flag: returns once the controller handled the request at the new revision.
    let output = plugin(
        cluster,
        admin,
        &["reconcile", "ks", "insp-root", "-n", NS, "--with-source"],
    );
    assert!(output.status.success(), "{}", stderr(&output));
    let ks = cluster.object(KUSTOMIZATIONS, NS, "insp-root").unwrap();
    assert_eq!(
        ks["status"]["lastAppliedRevision"],
        revision(&rev2),
        "{ks:#}"
    );
    assert_eq!(
        ks["status"]["lastHandledReconcileAt"],
        ks["metadata"]["annotations"]["reconcile.fluxcd.io/requestedAt"],
        "{ks:#}"
    );
    assert!(
        stderr(&output).contains("◎ waiting for"),
        "progress on stderr: {}",
        stderr(&output)
    );
    // --wait=false only asks.
    let asked = plugin_ok(
        cluster,
        admin,
        &["reconcile", "ks", "insp-root", "-n", NS, "--wait=false"],
    );
    assert!(asked.contains("reconciliation of"), "{asked}");
}

/// The attack on `tree`: whoever owns an applier writes its inventory, so a tenant who names
/// another namespace's Kustomization in the inventory of their own (suspended, status written by
/// hand) must not learn its Ready or message. The entry is listed (the tenant may read their
/// own inventory) with its state not shown; an entry they may read keeps its state.
async fn tree_hides_what_the_caller_may_not_get(cluster: &TestCluster, admin: &Path) {
    const OTHER: &str = "insp-other";
    const SECRET: &str = "the other tenant's deploy key was rotated";
    let suspended = |namespace: &str, name: &str| {
        format!(
            "apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\n\
             metadata: {{name: {name}, namespace: {namespace}}}\n\
             spec: {{interval: 1h, path: ./, prune: false, suspend: true, \
             sourceRef: {{kind: GitRepository, name: nowhere}}}}\n"
        )
    };
    cluster
        .apply_yaml(&format!(
            "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {OTHER}}}\n---\n{}---\n{}",
            suspended(OTHER, "secret-ks"),
            suspended(NS, "insp-probe")
        ))
        .expect("the two Kustomizations");
    let status = |namespace: &str, name: &str, patch: &str| {
        cluster
            .kubectl_ok(&[
                "-n",
                namespace,
                "patch",
                KUSTOMIZATIONS,
                name,
                "--subresource=status",
                "--type=merge",
                "-p",
                patch,
            ])
            .expect("status patch");
    };
    // Step 1: the other namespace's object carries a message its owner alone may read.
    status(
        OTHER,
        "secret-ks",
        &format!(
            r#"{{"status":{{"conditions":[{{"type":"Ready","status":"False","reason":"Probe","message":"{SECRET}","lastTransitionTime":"2026-12-01T00:00:00Z"}}]}}}}"#
        ),
    );
    // Step 2: the tenant's own inventory names it, and an object the tenant may read.
    status(
        NS,
        "insp-probe",
        &format!(
            r#"{{"status":{{"inventory":{{"entries":[{{"id":"{OTHER}_secret-ks_kustomize.toolkit.fluxcd.io_Kustomization","v":"v1"}},{{"id":"{NS}_insp-root_kustomize.toolkit.fluxcd.io_Kustomization","v":"v1"}}]}}}}}}"#
        ),
    );
    let child = |tree: &Value, name: &str| -> Value {
        tree["children"]
            .as_array()
            .and_then(|c| c.iter().find(|n| n["name"] == name))
            .cloned()
            .unwrap_or_else(|| panic!("{name} in {tree:#}"))
    };
    // Step 3: the cluster's admin sees the other object's state (so the agent holds it).
    let seen = wait_for("the admin's tree with the other state", RECONCILE, || {
        let tree = plugin_json(cluster, admin, &["tree", "ks", "insp-probe", "-n", NS]);
        async move { (child(&tree, "secret-ks")["message"] == SECRET).then_some(tree) }
    })
    .await
    .expect("the admin sees it");
    assert_eq!(child(&seen, "secret-ks")["ready"], "False");
    // Step 4: a tenant who may get Kustomizations in their own namespace only.
    let tenant = cluster.token_kubeconfig(NS, "insp-prober").expect("tenant");
    cluster
        .apply_yaml(&agent_user_with_role(
            NS,
            "insp-prober",
            "insp-prober",
            "insp-prober",
            READ_KUSTOMIZATIONS,
        ))
        .expect("tenant RBAC");
    let tree = plugin_json(cluster, &tenant, &["tree", "ks", "insp-probe", "-n", NS]);
    let hidden = child(&tree, "secret-ks");
    assert_eq!(hidden["namespace"], OTHER, "listed: {tree:#}");
    assert_eq!(
        hidden["error"], "state not shown: you may not get it",
        "{tree:#}"
    );
    assert_ne!(hidden["ready"], "False", "{tree:#}");
    assert!(
        !tree.to_string().contains(SECRET),
        "the message leaked: {tree:#}"
    );
    let text = plugin_ok(cluster, &tenant, &["tree", "ks", "insp-probe", "-n", NS]);
    assert!(
        !text.contains(SECRET) && text.contains("state not shown"),
        "{text}"
    );
    // What the tenant may read keeps its state.
    assert_eq!(child(&tree, "insp-root")["ready"], "True", "{tree:#}");
    cluster
        // Gone before the next test binary counts Kustomizations across namespaces.
        .kubectl_ok(&["delete", "namespace", OTHER, "--wait", "--timeout=120s"])
        .expect("cleanup");
    cluster
        .kubectl_ok(&["-n", NS, "delete", KUSTOMIZATIONS, "insp-probe", "--wait"])
        .expect("cleanup");
}

/// What a ResourceSet applied (flux-operator reconciles it for real): in its tree, and traced
/// back to it, which `flux trace` cannot.
async fn resource_sets(cluster: &TestCluster, admin: &Path) {
    const RS_NS: &str = "insp-rs";
    cluster
        .apply_yaml(&format!(
            "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {RS_NS}}}\n---\n\
             apiVersion: fluxcd.controlplane.io/v1\nkind: ResourceSet\n\
             metadata: {{name: insp-set, namespace: {RS_NS}}}\n\
             spec:\n  resources:\n  - apiVersion: v1\n    kind: ConfigMap\n    \
             metadata: {{name: set-config, namespace: {RS_NS}}}\n    data: {{a: b}}\n"
        ))
        .expect("a ResourceSet");
    let set = cluster
        .settled(
            "resourcesets.fluxcd.controlplane.io",
            RS_NS,
            "insp-set",
            RECONCILE,
        )
        .await
        .expect("flux-operator reconciled it");
    assert_eq!(ready_now(&set), Some("True"), "{set:#}");
    let tree = wait_for(
        "the agent's cache to show insp-set Ready",
        Duration::from_secs(30),
        || async {
            let tree = plugin(
                cluster,
                admin,
                &["tree", "rset", "insp-set", "-n", RS_NS, "-o", "json"],
            );
            let tree: Value = serde_json::from_slice(&tree.stdout).ok()?;
            (tree["ready"] == "True").then_some(tree)
        },
    )
    .await
    .expect("cached");
    let mut shown = BTreeSet::new();
    paths(&tree, "", &mut shown);
    assert!(
        shown.contains(&format!(
            "ResourceSet/{RS_NS}/insp-set > ConfigMap/{RS_NS}/set-config"
        )),
        "{shown:#?}"
    );
    let trace = plugin_json(cluster, admin, &["trace", "cm", "set-config", "-n", RS_NS]);
    assert_eq!(trace["steps"][1]["role"], "applied by", "{trace:#}");
    assert_eq!(trace["steps"][1]["kind"], "ResourceSet", "{trace:#}");
    assert_eq!(trace["steps"][1]["name"], "insp-set", "{trace:#}");
    assert_eq!(trace["steps"][1]["ready"], "True", "{trace:#}");
    cluster
        .kubectl_ok(&["delete", "namespace", RS_NS, "--wait"])
        .expect("the ResourceSet's namespace deleted");
}

#[tokio::test]
async fn tree_shows_the_inventory_and_trace_the_applier_chain() {
    let (cluster, prepared, _one) = scenario().await;
    let head = prepared.head.lock().unwrap().clone();
    tree_and_trace(cluster, &prepared.admin, &head).await;
}

#[tokio::test]
async fn tree_hides_the_state_of_what_the_caller_may_not_get() {
    let (cluster, prepared, _one) = scenario().await;
    tree_hides_what_the_caller_may_not_get(cluster, &prepared.admin).await;
}

#[tokio::test]
async fn tree_and_trace_follow_a_resource_set() {
    let (cluster, prepared, _one) = scenario().await;
    resource_sets(cluster, &prepared.admin).await;
}

#[tokio::test]
async fn events_are_the_controllers_as_flux_shows_them() {
    let (cluster, prepared, _one) = scenario().await;
    events(cluster, &prepared.admin).await;
}

#[tokio::test]
async fn stats_count_what_kubectl_and_flux_count() {
    let (cluster, prepared, _one) = scenario().await;
    stats(cluster, &prepared.admin).await;
}

#[tokio::test]
async fn reconcile_waits_for_the_new_revision() {
    let (cluster, prepared, _one) = scenario().await;
    reconcile_waits(cluster, &prepared.admin, prepared).await;
}
