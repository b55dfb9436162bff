//! `logs`: the Flux controllers' log lines about objects, through the agent, on the shared
//! cluster with Flux 2.9 and the real source-controller and kustomize-controller. The
//! controllers run as local processes; kwok serves their pods' logs from the processes' log
//! files (the supervisor publishes a kwok `Logs` object per pod), so the agent reads them
//! through the API server's pods/log as it would from a kubelet. Two namespaces each hold a
//! Kustomization whose path Git does not have; one also one that applies.

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    sync::mpsc,
    time::Duration,
};

use serde_json::Value;
use tenantflux_tests::{
    TestCluster, agent_user_with_role,
    flux::{GitRepo, revision},
    stderr, stdout, wait_for,
};
use tokio::sync::OnceCell;

const A: &str = "logs-a";
const B: &str = "logs-b";
/// How long a real reconciliation may take on a loaded 2-core machine.
const RECONCILE: Duration = Duration::from_secs(120);

struct Prepared {
    admin: PathBuf,
    repo: GitRepo,
}

static PREPARED: OnceCell<Prepared> = OnceCell::const_new();

fn plugin_json(kubeconfig: &Path, args: &[&str]) -> Result<Value, String> {
    let cluster = TestCluster::shared();
    let mut args = args.to_vec();
    args.extend(["-o", "json"]);
    let output = cluster
        .kubectl_tenantflux(Some(kubeconfig), &args)
        .expect("run kubectl tenantflux");
    if !output.status.success() {
        return Err(stderr(&output));
    }
    serde_json::from_slice(&output.stdout).map_err(|err| format!("not JSON ({err})"))
}

fn lines(view: &Value) -> Vec<Value> {
    view["lines"].as_array().cloned().unwrap_or_default()
}

fn objects(namespace: &str, url: &str) -> String {
    let kustomization = |name: &str, path: &str| {
        format!(
            "---\napiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\n\
             metadata: {{name: {name}, namespace: {namespace}}}\n\
             spec: {{interval: 1h, path: {path}, prune: true, targetNamespace: {namespace}, \
             sourceRef: {{kind: GitRepository, name: repo}}}}\n"
        )
    };
    format!(
        "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {namespace}}}\n---\n\
         apiVersion: source.toolkit.fluxcd.io/v1\nkind: GitRepository\n\
         metadata: {{name: repo, namespace: {namespace}}}\n\
         spec: {{interval: 1h, url: \"{url}\", ref: {{branch: main}}}}\n{}{}",
        kustomization("broken", "./nope"),
        kustomization("app", "./app"),
    )
}

fn commit(repo: &GitRepo, release: &str) -> String {
    let config = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: logs-config}}\n\
         data: {{release: \"{release}\"}}\n"
    );
    repo.commit(
        &[("app/configmap.yaml", &config)],
        &[],
        &format!("release {release}"),
    )
    .expect("git commit")
}

/// Flux 2.9 with its controllers, the agent, and in each namespace a GitRepository, the
/// Kustomization `broken` (a path Git does not hold) and `app`; an admin kubeconfig.
async fn prepare() -> &'static Prepared {
    PREPARED
        .get_or_init(|| async {
            let cluster = TestCluster::shared();
            cluster
                .ensure_flux_and_agent("2.9.x")
                .await
                .expect("Flux 2.9 and the agent");
            for namespace in [A, B] {
                cluster.delete_kustomizations_and_git_repositories(namespace);
            }
            let repo = GitRepo::new("logs").expect("git repository");
            let first = commit(&repo, "1");
            let url = cluster.git_server(&repo).expect("git server");
            for namespace in [A, B] {
                cluster
                    .apply_yaml(&objects(namespace, &url))
                    .expect("the Flux objects");
            }
            let admin = cluster
                .cluster_admin_token_user("logs-admin")
                .expect("kubeconfig");
            for namespace in [A, B] {
                cluster
                    .kustomization_applied(namespace, "app", &revision(&first), RECONCILE)
                    .await
                    .expect("app applied");
            }
            Prepared { admin, repo }
        })
        .await
}

/// The lines `args` show, once one satisfies `found` (the controllers write asynchronously).
async fn lines_once(
    kubeconfig: &Path,
    args: &[&str],
    found: impl Fn(&Value) -> bool,
) -> Vec<Value> {
    wait_for(
        &format!("a line of `logs {}`", args.join(" ")),
        RECONCILE,
        || async {
            let view = plugin_json(kubeconfig, args).ok()?;
            let lines = lines(&view);
            lines.iter().any(&found).then_some(lines)
        },
    )
    .await
    .expect("the controllers' lines")
}

#[tokio::test]
async fn a_failing_kustomization_shows_the_controllers_error() {
    let prepared = prepare().await;
    let is_error = |l: &Value| {
        l["kind"] == "Kustomization"
            && l["name"] == "broken"
            && l["namespace"] == A
            && l["level"] == "error"
    };
    let shown = lines_once(
        &prepared.admin,
        &["logs", "ks", "broken", "-n", A, "--level", "error"],
        is_error,
    )
    .await;
    let line = shown.iter().find(|l| is_error(l)).unwrap();
    assert_eq!(line["controller"], "kustomize-controller", "{line:#}");
    let message = line["message"].as_str().unwrap();
    assert!(
        message.contains("kustomization path not found"),
        "kustomize-controller's own error: {line:#}"
    );
    assert!(line["time"].as_str().is_some_and(|t| t.ends_with('Z')));
    // Only that object's lines, only errors.
    assert!(
        shown
            .iter()
            .all(|l| l["name"] == "broken" && l["level"] == "error"),
        "{shown:#?}"
    );
    // As flux logs prints it.
    let cluster = TestCluster::shared();
    let output = cluster
        .kubectl_tenantflux(
            Some(&prepared.admin),
            &["logs", "ks", "broken", "-n", A, "--level", "error"],
        )
        .expect("run logs");
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(
        text.lines()
            .any(|l| l.contains(" error Kustomization/broken.logs-a - ")
                && l.contains("kustomization path not found")),
        "{text}"
    );
}

#[tokio::test]
async fn a_viewer_of_one_namespace_sees_no_line_about_another() {
    let prepared = prepare().await;
    let cluster = TestCluster::shared();
    // The lines about B exist: the admin sees them.
    lines_once(&prepared.admin, &["logs", "-A"], |l| l["namespace"] == B).await;

    let viewer = cluster
        .token_kubeconfig(A, "logs-viewer")
        .expect("viewer kubeconfig");
    cluster
        .apply_yaml(&agent_user_with_role(
            A,
            "logs-viewer",
            "logs-viewer",
            "flux-viewer",
            "[{apiGroups: [kustomize.toolkit.fluxcd.io, source.toolkit.fluxcd.io], resources: ['*'], verbs: [get, list, watch]}]",
        ))
        .expect("viewer RBAC");
    // The viewer may not read pods in Flux's namespace: the agent reads them.
    let pods = cluster
        .kubectl(&[
            "--kubeconfig",
            viewer.to_str().unwrap(),
            "-n",
            "flux-system",
            "logs",
            "deploy/kustomize-controller",
        ])
        .expect("kubectl logs");
    assert!(!pods.status.success(), "the viewer reads pods/log itself");

    let shown = lines_once(&viewer, &["logs", "-A"], |l| {
        l["namespace"] == A && l["name"] == "broken"
    })
    .await;
    assert!(
        shown.iter().all(|l| l["namespace"] == A),
        "only lines about {A}: {shown:#?}"
    );
    // Asking for B's object by name is refused, naming the permission.
    let refused = plugin_json(&viewer, &["logs", "ks", "broken", "-n", B]).unwrap_err();
    assert!(
        refused.contains("get") && refused.contains(B),
        "a refusal that names the permission: {refused}"
    );
}

#[tokio::test]
async fn following_shows_a_new_line_after_a_new_commit() {
    let prepared = prepare().await;
    let cluster = TestCluster::shared();
    let mut follow = cluster
        .plugin_command(
            Some(&prepared.admin),
            &["logs", "ks", "app", "-n", A, "-f", "-o", "json"],
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("logs -f");
    // One JSON object per line followed, as `kubectl get -w -o json` writes them.
    let (sender, received) = mpsc::channel::<Value>();
    let output = follow.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in serde_json::Deserializer::from_reader(output).into_iter::<Value>() {
            let Ok(line) = line else { break };
            if sender.send(line).is_err() {
                break;
            }
        }
    });
    // Following has started once the agent answered; give the stream a moment to open.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let second = commit(&prepared.repo, "2");
    let reconcile = cluster
        .kubectl_tenantflux(
            Some(&prepared.admin),
            &["reconcile", "ks", "app", "-n", A, "--with-source"],
        )
        .expect("reconcile");
    assert!(reconcile.status.success(), "{}", stderr(&reconcile));
    cluster
        .kustomization_applied(A, "app", &revision(&second), RECONCILE)
        .await
        .expect("applied");
    let line = received.recv_timeout(Duration::from_secs(60));
    let _ = follow.kill();
    let output = follow.wait_with_output().expect("logs -f output");
    let line = line.unwrap_or_else(|err| {
        panic!(
            "no line followed after the commit ({err}): {}",
            stderr(&output)
        )
    });
    assert_eq!(
        (&line["kind"], &line["namespace"], &line["name"]),
        (
            &Value::from("Kustomization"),
            &Value::from(A),
            &Value::from("app")
        ),
        "{line:#}"
    );
}
