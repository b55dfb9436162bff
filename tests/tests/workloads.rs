//! Local control of Flux objects on two real Flux minors: the real flux-operator installs Flux
//! 2.9 on the shared cluster and Flux 2.6 (with the image controllers) on a cluster of this
//! test's own, so the two serve different API versions. Objects of each kind are created at the
//! version the cluster serves. On Flux 2.9 the real source-controller and kustomize-controller
//! (v1.9.4, built from their modules by tests/env/cluster; Flux 2.9.5 rolls out v1.9.5, run as
//! the v1.9.4 build) reconcile a GitRepository served from
//! a local git repository and the Kustomizations that apply it: every status the plugin shows
//! here is the controllers' own. helm-controller and notification-controller cannot be built
//! here (the module proxy refuses them), so HelmReleases, Alerts, Providers and Receivers never
//! get a status; neither does anything on Flux 2.6, whose controllers are not built. Every
//! command goes the real path: kubectl → plugin → API server port-forward → agent →
//! SubjectAccessReview → API server.

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use serde_json::Value;
use tenantflux_tests::{
    TestCluster, agent_user_with_role, apply_flux_instance, columns,
    flux::{
        GIT_REPOSITORIES, GitRepo, KUSTOMIZATIONS, minimal_spec, ready_message, ready_now, revision,
    },
    plugin, plugin_json, plugin_ok, stderr, stdout, wait_for,
};

const NS: &str = "wl-a";
const OTHER_NS: &str = "wl-b";
/// Where the GitRepository served from a local repository and its Kustomizations live.
const GIT_NS: &str = "wl-git";
/// How long a real reconciliation may take on a loaded 2-core machine.
const RECONCILE: Duration = Duration::from_secs(120);

/// The API versions a Flux minor serves each kind at (what the agent must find by discovery).
struct Minor {
    instance_version: &'static str,
    /// What it serves besides [`SOURCE_TO_NOTIFICATION`] (which both minors serve alike).
    more_versions: &'static [(&'static str, &'static str)],
    /// Whether tests/env/cluster runs this minor's source- and kustomize-controller.
    reconciled: bool,
}

impl Minor {
    /// Each kind it serves with its API version: [`SOURCE_TO_NOTIFICATION`], then the rest.
    fn versions(&self) -> impl Iterator<Item = &'static (&'static str, &'static str)> {
        SOURCE_TO_NOTIFICATION.iter().chain(self.more_versions)
    }
}

/// The source, kustomize, helm and notification kinds, served at these versions by Flux 2.6
/// and 2.9 alike.
const SOURCE_TO_NOTIFICATION: &[(&str, &str)] = &[
    ("GitRepository", "source.toolkit.fluxcd.io/v1"),
    ("OCIRepository", "source.toolkit.fluxcd.io/v1"),
    ("HelmRepository", "source.toolkit.fluxcd.io/v1"),
    ("HelmChart", "source.toolkit.fluxcd.io/v1"),
    ("Bucket", "source.toolkit.fluxcd.io/v1"),
    ("Kustomization", "kustomize.toolkit.fluxcd.io/v1"),
    ("HelmRelease", "helm.toolkit.fluxcd.io/v2"),
    ("Receiver", "notification.toolkit.fluxcd.io/v1"),
    ("Alert", "notification.toolkit.fluxcd.io/v1beta3"),
    ("Provider", "notification.toolkit.fluxcd.io/v1beta3"),
];

const FLUX_2_9: Minor = Minor {
    instance_version: "2.9.x",
    reconciled: true,
    more_versions: &[],
};

const FLUX_2_6: Minor = Minor {
    instance_version: "2.6.x",
    reconciled: false,
    more_versions: &[
        // Image automation at v1beta2: v1 came with Flux 2.7.
        ("ImageRepository", "image.toolkit.fluxcd.io/v1beta2"),
        ("ImagePolicy", "image.toolkit.fluxcd.io/v1beta2"),
        ("ImageUpdateAutomation", "image.toolkit.fluxcd.io/v1beta2"),
    ],
};

fn plural(kind: &str) -> String {
    let lower = kind.to_ascii_lowercase();
    match lower.strip_suffix('y') {
        Some(stem) => format!("{stem}ies"),
        None => format!("{lower}s"),
    }
}

fn get_json(cluster: &TestCluster, resource: &str, namespace: &str, name: &str) -> Value {
    let text = cluster
        .kubectl_ok(&[
            "-n",
            namespace,
            "get",
            resource,
            name,
            "-o",
            "json",
            "--show-managed-fields",
        ])
        .expect("kubectl get");
    serde_json::from_str(&text).expect("JSON")
}

fn annotation(object: &Value, key: &str) -> Option<String> {
    object["metadata"]["annotations"][key]
        .as_str()
        .map(str::to_owned)
}

/// Runs `kubectl tenantflux ARGS` as `admin` (it must succeed), then gets object `[resource,
/// namespace, name]` and checks that its annotation `key` is `value`; returns the object.
#[track_caller]
fn annotated_after(
    cluster: &TestCluster,
    admin: &Path,
    args: &[&str],
    [resource, namespace, name]: [&str; 3],
    key: &str,
    value: &str,
) -> Value {
    plugin_ok(cluster, admin, args);
    let object = get_json(cluster, resource, namespace, name);
    assert_eq!(annotation(&object, key).as_deref(), Some(value));
    object
}

/// Installs Flux `minor` with the operator, the agent, and one object of each kind in NS
/// (plus a Kustomization in OTHER_NS); returns a kubeconfig with rights on everything.
async fn prepare(cluster: &TestCluster, minor: &Minor, image_components: bool) -> PathBuf {
    cluster.ensure_flux_operator().expect("flux-operator");
    let client = cluster.client().await.expect("client");
    if image_components {
        cluster
            .apply_yaml(&format!(
                "apiVersion: fluxcd.controlplane.io/v1\nkind: FluxInstance\n\
                 metadata: {{name: flux, namespace: flux-system}}\n\
                 spec:\n  distribution: {{version: \"{}\", registry: ghcr.io/fluxcd}}\n\
                 \x20 components: [source-controller, kustomize-controller, helm-controller, notification-controller, image-reflector-controller, image-automation-controller]\n\
                 \x20 cluster: {{type: kubernetes, networkPolicy: true}}\n",
                minor.instance_version
            ))
            .expect("FluxInstance");
    } else {
        apply_flux_instance(&client, minor.instance_version)
            .await
            .expect("FluxInstance");
    }
    // The operator applies that release's CRDs.
    for (kind, api_version) in minor.versions() {
        let crd = format!(
            "crd/{}.{}",
            plural(kind),
            api_version.split('/').next().unwrap()
        );
        wait_for(&crd, Duration::from_secs(180), || async {
            cluster
                .kubectl_ok(&["wait", "--for=condition=Established", &crd, "--timeout=1s"])
                .ok()
        })
        .await
        .expect("Flux CRDs installed by the operator");
    }
    cluster.ensure_agent().expect("agent");

    let mut objects = String::new();
    for namespace in [NS, OTHER_NS] {
        objects.push_str(&format!(
            "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {namespace}}}\n---\n"
        ));
    }
    for (kind, api_version) in minor.versions() {
        let labels = if *kind == "Kustomization" {
            "{team: a}"
        } else {
            "{}"
        };
        objects.push_str(&format!(
            "apiVersion: {api_version}\nkind: {kind}\nmetadata: {{name: podinfo, namespace: {NS}, labels: {labels}}}\nspec: {}\n---\n",
            minimal_spec(kind)
        ));
    }
    objects.push_str(&format!(
        "apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata: {{name: other, namespace: {OTHER_NS}}}\nspec: {}\n",
        minimal_spec("Kustomization")
    ));
    // A reused cluster starts over: objects left by an earlier run are gone first.
    let resources = minor
        .versions()
        .map(|(kind, api_version)| {
            format!(
                "{}.{}",
                plural(kind),
                api_version.split('/').next().unwrap()
            )
        })
        .collect::<Vec<_>>()
        .join(",");
    for namespace in [NS, OTHER_NS, GIT_NS] {
        // A namespace that does not exist yet has nothing to delete.
        let _ = cluster.kubectl(&[
            "-n",
            namespace,
            "delete",
            &resources,
            "--all",
            "--ignore-not-found",
            "--wait",
        ]);
    }
    cluster.apply_yaml(&objects).expect("Flux objects");

    // An operator with rights on everything (a token user: a client-certificate user would
    // reach the agent as ServiceAccount tenantflux-client).
    cluster
        .cluster_admin_token_user("wl-operator")
        .expect("kubeconfig")
}

/// Everything a user does, on one cluster.
/// Every scenario of `minor` on `cluster`, in order (the Flux 2.6 cluster of its own).
async fn exercise(cluster: &TestCluster, minor: &Minor, image_components: bool) {
    let admin = prepare(cluster, minor, image_components).await;
    lists_suspends_and_reconciles(cluster, minor, image_components, &admin).await;
    if minor.reconciled {
        flux_words_and_operator_kinds(cluster, &admin).await;
        reconciles_from_git(cluster, &admin).await;
    }
    tenant_acts_in_its_namespace_only(cluster).await;
    suspend_and_resume_all(cluster).await;
    control_characters_are_shown_escaped(cluster, &admin).await;
}

/// get, selectors, suspend, resume and reconcile of one object of every kind the minor serves.
async fn lists_suspends_and_reconciles(
    cluster: &TestCluster,
    minor: &Minor,
    image_components: bool,
    admin: &Path,
) {
    let admin = admin.to_path_buf();
    // Lists come from the agent's caches at the served versions, once they hold everything.
    let listed = wait_for(
        "get all -n wl-a to list one object of every kind",
        Duration::from_secs(60),
        || async {
            let list = plugin_json(cluster, &admin, &["get", "all", "-n", NS]);
            (list["items"].as_array().map_or(0, Vec::len) == minor.versions().count())
                .then_some(list)
        },
    )
    .await
    .expect("every kind listed");
    for (kind, api_version) in minor.versions() {
        let item = listed["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["kind"] == *kind)
            .unwrap_or_else(|| panic!("{kind} missing: {listed}"));
        assert_eq!(item["apiVersion"], *api_version, "{kind}");
        assert_eq!(item["namespace"], NS);
        assert_eq!(item["suspended"], false);
    }
    if !image_components {
        let output = plugin(cluster, &admin, &["get", "imagepolicy", "-n", NS]);
        assert_eq!(output.status.code(), Some(1));
        assert!(
            stderr(&output).contains(
                "the cluster does not serve ImagePolicy (imagepolicies.image.toolkit.fluxcd.io)"
            ),
            "{}",
            stderr(&output)
        );
    }

    // -A puts NAMESPACE first; get all groups by kind; --no-header drops the headers.
    let all = plugin_ok(cluster, &admin, &["get", "all", "-A"]);
    assert!(all.starts_with("NAMESPACE   NAME"), "{all}");
    assert!(all.contains("\nwl-a        gitrepository/podinfo"), "{all}");
    assert!(all.contains("wl-b        kustomization/other"), "{all}");
    // The cluster is shared: other tests' namespaces may be listed too, so count only ours.
    let no_header = plugin_ok(cluster, &admin, &["get", "ks", "-A", "--no-header"]);
    let ours = no_header.lines().filter(|l| l.starts_with("wl-")).count();
    assert_eq!(ours, 2, "{no_header}");
    assert!(!no_header.contains("NAME"), "{no_header}");
    // The cache's size is on the agent's metrics, one series per served kind.
    let metrics = cluster.agent_metrics();
    let cached = metrics
        .lines()
        .find_map(|l| l.strip_prefix("tenantflux_agent_cached_objects{kind=\"Kustomization\"} "))
        .and_then(|n| n.trim().parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no cached Kustomization series: {metrics}"));
    assert!(cached >= 2.0, "{metrics}");
    assert!(
        metrics.contains("tenantflux_agent_cached_objects{kind=\"GitRepository\"} "),
        "{metrics}"
    );

    // Selectors.
    let labelled = plugin_json(cluster, &admin, &["get", "all", "-A", "-l", "team=a"]);
    let names: Vec<(&str, &str)> = labelled["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["kind"].as_str().unwrap(),
                i["namespace"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(names, [("Kustomization", NS)]);
    let yaml = plugin_ok(
        cluster,
        &admin,
        &["get", "hr", "podinfo", "-n", NS, "-o", "yaml"],
    );
    assert!(
        yaml.contains("kind: HelmRelease")
            && yaml.contains("apiVersion: helm.toolkit.fluxcd.io/v2"),
        "{yaml}"
    );
    assert!(yaml.contains("kind: HelmRepository"), "the source: {yaml}");

    // suspend / resume write spec.suspend (and resume asks for a reconciliation).
    plugin_ok(cluster, &admin, &["suspend", "ks", "podinfo", "-n", NS]);
    let ks = get_json(
        cluster,
        "kustomizations.kustomize.toolkit.fluxcd.io",
        NS,
        "podinfo",
    );
    assert_eq!(ks["spec"]["suspend"], true);
    let managers: Vec<&str> = ks["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["manager"].as_str())
        .collect();
    assert!(managers.contains(&"tenantflux-agent"), "{managers:?}");
    wait_for("SUSPENDED True in get", Duration::from_secs(30), || async {
        let table = plugin_ok(cluster, &admin, &["get", "ks", "podinfo", "-n", NS]);
        table
            .lines()
            .nth(1)
            .is_some_and(|l| l.split_whitespace().nth(1) == Some("True"))
            .then_some(())
    })
    .await
    .expect("suspended shown");
    let resumed = plugin_ok(cluster, &admin, &["resume", "ks", "podinfo", "-n", NS]);
    assert!(
        resumed.contains("Kustomization wl-a/podinfo resumed"),
        "{resumed}"
    );
    let ks = get_json(
        cluster,
        "kustomizations.kustomize.toolkit.fluxcd.io",
        NS,
        "podinfo",
    );
    assert_eq!(ks["spec"]["suspend"], false);
    assert!(annotation(&ks, "reconcile.fluxcd.io/requestedAt").is_some());

    // reconcile: requestedAt; --force adds forceAt with the same value (HelmRelease only);
    // --with-source annotates the source with the same value too.
    plugin_ok(
        cluster,
        &admin,
        &[
            "reconcile",
            "hr",
            "podinfo",
            "-n",
            NS,
            "--force",
            "--wait=false",
        ],
    );
    let hr = get_json(
        cluster,
        "helmreleases.helm.toolkit.fluxcd.io",
        NS,
        "podinfo",
    );
    let requested = annotation(&hr, "reconcile.fluxcd.io/requestedAt").expect("requestedAt");
    assert_eq!(
        annotation(&hr, "reconcile.fluxcd.io/forceAt").as_ref(),
        Some(&requested)
    );
    let output = plugin(
        cluster,
        &admin,
        &["reconcile", "ks", "podinfo", "-n", NS, "--force"],
    );
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains("force applies to HelmReleases only"),
        "{}",
        stderr(&output)
    );
    plugin_ok(
        cluster,
        &admin,
        &[
            "reconcile",
            "ks",
            "podinfo",
            "-n",
            NS,
            "--with-source",
            "--wait=false",
        ],
    );
    let ks = get_json(
        cluster,
        "kustomizations.kustomize.toolkit.fluxcd.io",
        NS,
        "podinfo",
    );
    let git = get_json(
        cluster,
        "gitrepositories.source.toolkit.fluxcd.io",
        NS,
        "podinfo",
    );
    let at = annotation(&ks, "reconcile.fluxcd.io/requestedAt");
    assert!(at.is_some());
    assert_eq!(annotation(&git, "reconcile.fluxcd.io/requestedAt"), at);

    // helm-controller does not run here (its module is not served), so nothing ever handles a
    // HelmRelease's request: --wait gives up at --timeout, saying so.
    let output = plugin(
        cluster,
        &admin,
        &[
            "reconcile",
            "hr",
            "podinfo",
            "-n",
            NS,
            "--wait",
            "--timeout",
            "2s",
        ],
    );
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains("timed out after 2s waiting for HelmRelease wl-a/podinfo"),
        "{}",
        stderr(&output)
    );

    // The FluxInstance: suspend/resume by flux-operator's annotation.
    let instance = [
        "fluxinstances.fluxcd.controlplane.io",
        "flux-system",
        "flux",
    ];
    annotated_after(
        cluster,
        &admin,
        &["suspend", "instance", "flux", "-n", "flux-system"],
        instance,
        "fluxcd.controlplane.io/reconcile",
        "disabled",
    );
    let instance = annotated_after(
        cluster,
        &admin,
        &["resume", "instance", "flux", "-n", "flux-system"],
        instance,
        "fluxcd.controlplane.io/reconcile",
        "enabled",
    );
    assert!(annotation(&instance, "reconcile.fluxcd.io/requestedAt").is_some());

    // Clear errors, exit 1.
    let output = plugin(cluster, &admin, &["get", "deployments"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output)
            .contains("unknown kind \"deployments\"; known kinds: ocirepository (ocirepo)"),
        "{}",
        stderr(&output)
    );
    let output = plugin(cluster, &admin, &["suspend", "ks", "missing", "-n", NS]);
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(
        stderr(&output).trim(),
        "error: Kustomization wl-a/missing not found"
    );
}

/// Where the objects of flux-operator's and source-watcher's kinds live.
const NEW_NS: &str = "wl-new";

/// The kinds and namespaces of a JSON list, in order.
fn kinds_of(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["kind"].as_str().unwrap().to_owned())
        .collect()
}

/// The flux CLI's words select the same objects as kubectl's and change the cluster the same
/// way; flux-operator's kinds (ResourceSet, ResourceSetInputProvider, FluxReport) and
/// ExternalArtifact are listed and, where their controller honours it, controlled. Flux 2.9
/// with the default components: source-watcher (ArtifactGenerator) is not installed, so its
/// kind is left out without a word. helm-controller and notification-controller do not run
/// here: their objects are listed and annotated, never reconciled.
async fn flux_words_and_operator_kinds(cluster: &TestCluster, admin: &Path) {
    cluster
        .apply_yaml(&format!(
            "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {NEW_NS}}}\n---\n\
             apiVersion: fluxcd.controlplane.io/v1\nkind: ResourceSet\n\
             metadata: {{name: apps, namespace: {NEW_NS}}}\n\
             spec: {{resources: [{{apiVersion: v1, kind: ConfigMap, metadata: {{name: rset-made, namespace: {NEW_NS}}}}}]}}\n---\n\
             apiVersion: fluxcd.controlplane.io/v1\nkind: ResourceSetInputProvider\n\
             metadata: {{name: inputs, namespace: {NEW_NS}}}\n\
             spec: {{type: Static, defaultValues: {{env: staging}}}}\n---\n\
             apiVersion: source.toolkit.fluxcd.io/v1\nkind: ExternalArtifact\n\
             metadata: {{name: generated, namespace: {NEW_NS}}}\n\
             spec: {{sourceRef: {{apiVersion: source.extensions.fluxcd.io/v1beta1, kind: ArtifactGenerator, name: gen}}}}\n"
        ))
        .expect("flux-operator's and ExternalArtifact objects");

    // get sources git is get gitrepositories; sources all is flux's source kinds, in its order.
    let kubectl_words = plugin_json(cluster, admin, &["get", "gitrepositories", "-n", NS]);
    let flux_words = plugin_json(cluster, admin, &["get", "sources", "git", "-n", NS]);
    assert_eq!(flux_words, kubectl_words);
    assert_eq!(kinds_of(&flux_words), ["GitRepository"]);
    let one = plugin_json(
        cluster,
        admin,
        &["get", "source", "git", "podinfo", "-n", NS],
    );
    assert_eq!(one["name"], "podinfo");
    assert_eq!(one["kind"], "GitRepository");
    for (words, kind) in [
        (vec!["sources", "oci"], "OCIRepository"),
        (vec!["sources", "helm"], "HelmRepository"),
        (vec!["sources", "chart"], "HelmChart"),
        (vec!["sources", "bucket"], "Bucket"),
        (vec!["kustomizations"], "Kustomization"),
        (vec!["helmreleases"], "HelmRelease"),
        (vec!["alerts"], "Alert"),
        (vec!["alert-providers"], "Provider"),
        (vec!["receivers"], "Receiver"),
    ] {
        let mut args = vec!["get"];
        args.extend(&words);
        args.extend(["-n", NS]);
        assert_eq!(
            kinds_of(&plugin_json(cluster, admin, &args)),
            [kind],
            "{words:?}"
        );
    }
    let sources = plugin_json(cluster, admin, &["get", "sources", "all", "-n", NS]);
    assert_eq!(
        kinds_of(&sources),
        [
            "OCIRepository",
            "Bucket",
            "GitRepository",
            "HelmRepository",
            "HelmChart"
        ]
    );
    let table = plugin_ok(cluster, admin, &["get", "sources", "all", "-n", NS]);
    assert!(
        table.contains("gitrepository/podinfo"),
        "grouped by kind: {table}"
    );
    let external = plugin_json(
        cluster,
        admin,
        &["get", "sources", "external", "-n", NEW_NS],
    );
    assert_eq!(kinds_of(&external), ["ExternalArtifact"]);
    // Image automation is not installed on Flux 2.9 here: nothing to list, no error.
    let images = plugin(cluster, admin, &["get", "images", "all", "-n", NS]);
    assert!(images.status.success(), "{}", stderr(&images));
    assert!(
        stderr(&images).contains("no Flux objects found"),
        "{}",
        stderr(&images)
    );
    // source-watcher is not installed: its kind is not served, and says so by name.
    let generators = plugin(cluster, admin, &["get", "artifact", "generators", "-n", NS]);
    assert_eq!(generators.status.code(), Some(1));
    assert!(
        stderr(&generators).contains("the cluster does not serve ArtifactGenerator"),
        "{}",
        stderr(&generators)
    );
    // Its CRD, from the distribution flux-operator applied (source-watcher's manifest in the
    // operator's data; the controller itself is not built here), makes it served: the agent
    // finds it by discovery, and suspend writes source-watcher's own annotation.
    artifact_generators(cluster, admin).await;

    // suspend|resume|reconcile source git NAME: what flux writes, on the same object.
    plugin_ok(
        cluster,
        admin,
        &["suspend", "source", "git", "podinfo", "-n", NS],
    );
    let git = get_json(cluster, GIT_REPOSITORIES, NS, "podinfo");
    assert_eq!(git["spec"]["suspend"], true);
    plugin_ok(
        cluster,
        admin,
        &["resume", "source", "git", "podinfo", "-n", NS],
    );
    let git = get_json(cluster, GIT_REPOSITORIES, NS, "podinfo");
    assert_eq!(git["spec"]["suspend"], false);
    let before = annotation(&git, "reconcile.fluxcd.io/requestedAt");
    plugin_ok(
        cluster,
        admin,
        &[
            "reconcile",
            "source",
            "git",
            "podinfo",
            "-n",
            NS,
            "--wait=false",
        ],
    );
    let git = get_json(cluster, GIT_REPOSITORIES, NS, "podinfo");
    let requested = annotation(&git, "reconcile.fluxcd.io/requestedAt");
    assert!(requested.is_some() && requested != before, "{git}");
    plugin_ok(
        cluster,
        admin,
        &[
            "reconcile",
            "helmrelease",
            "podinfo",
            "-n",
            NS,
            "--wait=false",
        ],
    );
    let hr = get_json(
        cluster,
        "helmreleases.helm.toolkit.fluxcd.io",
        NS,
        "podinfo",
    );
    assert!(annotation(&hr, "reconcile.fluxcd.io/requestedAt").is_some());
    plugin_ok(
        cluster,
        admin,
        &[
            "reconcile",
            "kustomization",
            "podinfo",
            "-n",
            NS,
            "--with-source",
            "--wait=false",
        ],
    );
    let ks = get_json(cluster, KUSTOMIZATIONS, NS, "podinfo");
    let git = get_json(cluster, GIT_REPOSITORIES, NS, "podinfo");
    assert_eq!(
        annotation(&ks, "reconcile.fluxcd.io/requestedAt"),
        annotation(&git, "reconcile.fluxcd.io/requestedAt")
    );
    let output = plugin(
        cluster,
        admin,
        &["reconcile", "source", "svn", "podinfo", "-n", NS],
    );
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output)
            .contains("unknown source kind \"svn\": expected one of oci, bucket, git, helm, chart"),
        "{}",
        stderr(&output)
    );

    // flux-operator's kinds: the real operator reconciles the ResourceSet.
    wait_for(
        "the ResourceSet applied by flux-operator",
        RECONCILE,
        || async { cluster.object("configmap", NEW_NS, "rset-made") },
    )
    .await
    .expect("flux-operator reconciled the ResourceSet");
    let all = wait_for(
        "get all -A to list flux-operator's kinds",
        Duration::from_secs(60),
        || async {
            let list = plugin_json(cluster, admin, &["get", "all", "-A"]);
            let kinds = kinds_of(&list);
            [
                "ExternalArtifact",
                "FluxInstance",
                "FluxReport",
                "ResourceSet",
                "ResourceSetInputProvider",
            ]
            .iter()
            .all(|k| kinds.iter().any(|x| x == k))
            .then_some(kinds)
        },
    )
    .await
    .expect("every kind listed");
    // One table per kind, in flux get all's order, flux-operator's kinds after Flux's.
    let mut order = all.clone();
    order.dedup();
    let position = |kind: &str| order.iter().position(|k| k == kind).unwrap();
    assert!(
        position("OCIRepository") < position("GitRepository"),
        "{order:?}"
    );
    assert!(
        position("GitRepository") < position("ExternalArtifact"),
        "{order:?}"
    );
    assert!(
        position("HelmRelease") < position("Kustomization"),
        "{order:?}"
    );
    assert!(
        position("Kustomization") < position("Receiver"),
        "{order:?}"
    );
    assert!(position("Alert") < position("FluxInstance"), "{order:?}");
    assert!(
        position("FluxReport") < position("ResourceSet"),
        "{order:?}"
    );
    assert_eq!(
        order.len(),
        all.iter().collect::<std::collections::BTreeSet<_>>().len(),
        "{order:?}"
    );
    let report = plugin_json(
        cluster,
        admin,
        &["get", "fluxreport", "flux", "-n", "flux-system"],
    );
    assert_eq!(report["kind"], "FluxReport");
    assert!(
        report["revision"].as_str().unwrap().starts_with("v2.9."),
        "{report}"
    );

    annotated_after(
        cluster,
        admin,
        &["suspend", "rset", "apps", "-n", NEW_NS],
        ["resourcesets.fluxcd.controlplane.io", NEW_NS, "apps"],
        "fluxcd.controlplane.io/reconcile",
        "disabled",
    );
    let shown = plugin_json(cluster, admin, &["get", "rset", "apps", "-n", NEW_NS]);
    assert_eq!(shown["suspended"], true);
    annotated_after(
        cluster,
        admin,
        &["resume", "resourceset", "apps", "-n", NEW_NS],
        ["resourcesets.fluxcd.controlplane.io", NEW_NS, "apps"],
        "fluxcd.controlplane.io/reconcile",
        "enabled",
    );
    plugin_ok(
        cluster,
        admin,
        &["reconcile", "rsip", "inputs", "-n", NEW_NS, "--wait=false"],
    );
    let rsip = get_json(
        cluster,
        "resourcesetinputproviders.fluxcd.controlplane.io",
        NEW_NS,
        "inputs",
    );
    assert!(annotation(&rsip, "reconcile.fluxcd.io/requestedAt").is_some());

    // Read-only kinds are refused, saying why, and left alone.
    for args in [
        vec!["suspend", "externalartifact", "generated", "-n", NEW_NS],
        vec!["reconcile", "fluxreport", "flux", "-n", "flux-system"],
    ] {
        let output = plugin(cluster, admin, &args);
        assert_eq!(output.status.code(), Some(1), "{args:?}");
        assert!(
            stderr(&output).contains("is read-only"),
            "{args:?}: {}",
            stderr(&output)
        );
    }
    let external = get_json(
        cluster,
        "externalartifacts.source.toolkit.fluxcd.io",
        NEW_NS,
        "generated",
    );
    assert!(external["spec"]["suspend"].is_null(), "{external}");

    // The raw API: an unset kind is every kind (protobuf's default), as `all` is.
    let token = cluster
        .kubectl_ok(&[
            "-n",
            "tenantflux-system",
            "create",
            "token",
            "wl-operator",
            "--audience",
            "tenantflux-agent",
        ])
        .expect("token");
    let channel = tonic::transport::Endpoint::from_shared(cluster.agent_grpc_address())
        .unwrap()
        .connect()
        .await
        .expect("connecting to the agent");
    let mut workloads = tenantflux_proto::v1::workloads_client::WorkloadsClient::new(channel);
    let list = |kind: &str| {
        let mut request = tonic::Request::new(tenantflux_proto::v1::ListObjectsRequest {
            kind: kind.to_owned(),
            namespace: NS.to_owned(),
            ..Default::default()
        });
        request.metadata_mut().insert(
            "authorization",
            format!("Bearer {}", token.trim()).parse().unwrap(),
        );
        request
    };
    let unset = workloads
        .list_objects(list(""))
        .await
        .expect("ListObjects {}")
        .into_inner();
    let all = workloads
        .list_objects(list("all"))
        .await
        .expect("ListObjects all")
        .into_inner();
    assert_eq!(unset.objects, all.objects);
    assert!(unset.objects.len() >= 10, "{} objects", unset.objects.len());
}

/// ArtifactGenerator once its CRD is installed; the CRD is removed again afterwards.
async fn artifact_generators(cluster: &TestCluster, admin: &Path) {
    // Run alone, this test may get here before flux-operator has applied the instance.
    let applied = wait_for("the FluxInstance applied", RECONCILE, || async {
        let instance = cluster.object(
            "fluxinstances.fluxcd.controlplane.io",
            "flux-system",
            "flux",
        )?;
        instance["status"]["lastAppliedRevision"]
            .as_str()
            .and_then(|r| r.split('@').next())
            .map(str::to_owned)
    })
    .await
    .expect("an applied distribution");
    let manifest = tenantflux_tests::tool_path("FLUX_OPERATOR_SRC")
        .join(format!("config/data/flux/{applied}/source-watcher.yaml"));
    let text = std::fs::read_to_string(&manifest)
        .unwrap_or_else(|err| panic!("{}: {err}", manifest.display()));
    let crd = text
        .split("\n---")
        .find(|doc| {
            doc.contains("kind: CustomResourceDefinition")
                && doc.contains("name: artifactgenerators.source.extensions.fluxcd.io")
        })
        .expect("the ArtifactGenerator CRD in source-watcher's manifest");
    cluster.apply_yaml(crd).expect("ArtifactGenerator CRD");
    cluster
        .kubectl_ok(&[
            "wait",
            "--for=condition=Established",
            "crd/artifactgenerators.source.extensions.fluxcd.io",
            "--timeout=60s",
        ])
        .expect("CRD established");
    cluster
        .apply_yaml(&format!(
            "apiVersion: source.extensions.fluxcd.io/v1beta1\nkind: ArtifactGenerator\n\
             metadata: {{name: gen, namespace: {NEW_NS}}}\n\
             spec: {{sources: [{{alias: repo, kind: GitRepository, name: podinfo, namespace: {NS}}}], \
             artifacts: [{{name: generated, copy: [{{from: '@repo/**', to: '@artifact/'}}]}}]}}\n"
        ))
        .expect("ArtifactGenerator");
    let listed = wait_for(
        "get artifact generators to list it",
        Duration::from_secs(90),
        || async {
            let output = plugin(
                cluster,
                admin,
                &["get", "artifact", "generators", "-n", NEW_NS, "-o", "json"],
            );
            let list: Value = serde_json::from_slice(&output.stdout).ok()?;
            (kinds_of(&list) == ["ArtifactGenerator"]).then_some(list)
        },
    )
    .await
    .expect("ArtifactGenerator served");
    assert_eq!(
        listed["items"][0]["apiVersion"],
        "source.extensions.fluxcd.io/v1beta1"
    );
    let generator = annotated_after(
        cluster,
        admin,
        &["suspend", "ag", "gen", "-n", NEW_NS],
        [
            "artifactgenerators.source.extensions.fluxcd.io",
            NEW_NS,
            "gen",
        ],
        "source.extensions.fluxcd.io/reconcile",
        "disabled",
    );
    assert!(generator["spec"]["suspend"].is_null(), "{generator}");
    annotated_after(
        cluster,
        admin,
        &["resume", "artifactgenerator", "gen", "-n", NEW_NS],
        [
            "artifactgenerators.source.extensions.fluxcd.io",
            NEW_NS,
            "gen",
        ],
        "source.extensions.fluxcd.io/reconcile",
        "enabled",
    );
    let all = plugin_json(cluster, admin, &["get", "all", "-n", NEW_NS]);
    assert_eq!(
        kinds_of(&all),
        [
            "ExternalArtifact",
            "ArtifactGenerator",
            "ResourceSet",
            "ResourceSetInputProvider"
        ]
    );
    cluster
        .kubectl_ok(&[
            "delete",
            "crd",
            "artifactgenerators.source.extensions.fluxcd.io",
            "--wait",
        ])
        .expect("CRD removed");
}

/// The files of the repository at `release`: an app (a ConfigMap and a Deployment), a witness
/// ConfigMap applied by a Kustomization of its own, and a manifest that does not parse.
fn fleet_files(release: &str) -> Vec<(&'static str, String)> {
    vec![
        (
            "app/configmap.yaml",
            format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: app-config}}\ndata: {{release: \"{release}\"}}\n"
            ),
        ),
        (
            "app/deployment.yaml",
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: app}\n\
             spec:\n  replicas: 1\n  selector: {matchLabels: {app: app}}\n  template:\n    \
             metadata: {labels: {app: app}}\n    \
             spec: {containers: [{name: app, image: registry.example/app:1}]}\n"
                .to_owned(),
        ),
        (
            "witness/configmap.yaml",
            format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: witness}}\ndata: {{release: \"{release}\"}}\n"
            ),
        ),
        (
            "bad/configmap.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: bad\ndata: [\n".to_owned(),
        ),
    ]
}

fn commit(repo: &GitRepo, release: &str) -> String {
    let files = fleet_files(release);
    let files: Vec<(&str, &str)> = files.iter().map(|(p, c)| (*p, c.as_str())).collect();
    repo.commit(&files, &[], &format!("release {release}"))
        .expect("git commit")
}

fn config_release(cluster: &TestCluster, name: &str) -> Option<String> {
    cluster.object("configmap", GIT_NS, name)?["data"]["release"]
        .as_str()
        .map(str::to_owned)
}

/// The first row's columns of a table, cut where the header's columns start (an empty
/// REVISION stays a column).
fn row(table: &str) -> Vec<String> {
    let mut lines = table.lines();
    let header = lines.next().unwrap_or_default();
    let line = lines.next().unwrap_or_default();
    let starts: Vec<usize> = header
        .char_indices()
        .filter(|&(i, c)| c != ' ' && (i == 0 || header.as_bytes()[i - 1] == b' '))
        .map(|(i, _)| i)
        .collect();
    columns(line, &starts)
}

/// The real source-controller and kustomize-controller at work, seen through the plugin.
async fn reconciles_from_git(cluster: &TestCluster, admin: &Path) {
    let repo = GitRepo::new("fleet").expect("git repository");
    let rev1 = commit(&repo, "1");
    let url = cluster.git_server(&repo).expect("git server");
    let kustomization = |name: &str, path: &str| {
        format!(
            "---\napiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\n\
             metadata: {{name: {name}, namespace: {GIT_NS}}}\n\
             spec: {{interval: 1h, path: {path}, prune: true, targetNamespace: {GIT_NS}, \
             sourceRef: {{kind: GitRepository, name: fleet}}}}\n"
        )
    };
    // Long intervals: the source fetches a new commit only when asked to.
    let mut objects = format!(
        "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {GIT_NS}}}\n---\n\
         apiVersion: source.toolkit.fluxcd.io/v1\nkind: GitRepository\n\
         metadata: {{name: fleet, namespace: {GIT_NS}}}\n\
         spec: {{interval: 1h, url: \"{url}\", ref: {{branch: main}}}}\n"
    );
    for (name, path) in [
        ("app", "./app"),
        ("witness", "./witness"),
        ("missing", "./missing"),
        ("bad", "./bad"),
    ] {
        objects.push_str(&kustomization(name, path));
    }
    cluster
        .apply_yaml(&objects)
        .expect("GitRepository and Kustomizations");

    // Ready with the commit's revision, and what Git holds is in the cluster.
    cluster
        .kustomization_applied(GIT_NS, "app", &revision(&rev1), RECONCILE)
        .await
        .expect("the app applied");
    cluster
        .kustomization_applied(GIT_NS, "witness", &revision(&rev1), RECONCILE)
        .await
        .expect("the witness applied");
    assert_eq!(config_release(cluster, "app-config").as_deref(), Some("1"));
    assert!(cluster.object("deployment", GIT_NS, "app").is_some());
    let git = cluster.object(GIT_REPOSITORIES, GIT_NS, "fleet").unwrap();
    assert_eq!(git["status"]["artifact"]["revision"], revision(&rev1));
    let table = plugin_ok(cluster, admin, &["get", "gitrepo", "fleet", "-n", GIT_NS]);
    assert_eq!(
        table
            .lines()
            .next()
            .unwrap()
            .split_whitespace()
            .collect::<Vec<_>>(),
        ["NAME", "REVISION", "SUSPENDED", "READY", "MESSAGE"]
    );
    assert_eq!(
        row(&table)[..4],
        ["fleet", revision(&rev1).as_str(), "False", "True"]
    );
    assert!(
        table.lines().nth(1).unwrap().ends_with(ready_message(&git)),
        "the controller's message {:?}: {table}",
        ready_message(&git)
    );
    assert!(ready_message(&git).contains(&revision(&rev1)), "{git:#}");
    let table = plugin_ok(cluster, admin, &["get", "ks", "app", "-n", GIT_NS]);
    assert_eq!(
        row(&table)[..4],
        ["app", revision(&rev1).as_str(), "False", "True"]
    );

    // A path that is not in Git and a manifest that does not parse: READY False, with the
    // controller's own message.
    for name in ["missing", "bad"] {
        let object = cluster
            .settled(KUSTOMIZATIONS, GIT_NS, name, RECONCILE)
            .await
            .expect("settled");
        assert_eq!(ready_now(&object), Some("False"), "{object:#}");
        let message = ready_message(&object);
        assert!(!message.is_empty(), "{object:#}");
        let shown = plugin_json(cluster, admin, &["get", "ks", name, "-n", GIT_NS]);
        assert_eq!(shown["ready"]["status"], "False", "{shown:#}");
        assert_eq!(shown["ready"]["message"], message, "{shown:#}");
        let table = plugin_ok(cluster, admin, &["get", "ks", name, "-n", GIT_NS]);
        assert_eq!(row(&table)[3], "False", "{table}");
    }
    let missing = cluster.object(KUSTOMIZATIONS, GIT_NS, "missing").unwrap();
    assert!(
        ready_message(&missing).contains("missing"),
        "names the path: {missing:#}"
    );
    let output = plugin(
        cluster,
        admin,
        &[
            "reconcile",
            "ks",
            "bad",
            "-n",
            GIT_NS,
            "--wait",
            "--timeout",
            "2m",
        ],
    );
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let bad = cluster.object(KUSTOMIZATIONS, GIT_NS, "bad").unwrap();
    assert!(
        stderr(&output).contains(&format!(
            "Kustomization wl-git/bad reconciliation failed: {}",
            ready_message(&bad)
        )),
        "{}",
        stderr(&output)
    );

    // The status selector reads the controllers' conditions.
    let names = |selector: &str| {
        let list = plugin_json(
            cluster,
            admin,
            &["get", "all", "-n", GIT_NS, "--status-selector", selector],
        );
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| {
                format!(
                    "{}/{}",
                    i["kind"].as_str().unwrap(),
                    i["name"].as_str().unwrap()
                )
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(
        names("ready=true"),
        [
            "GitRepository/fleet",
            "Kustomization/app",
            "Kustomization/witness"
        ]
    );
    assert_eq!(
        names("ready=false"),
        ["Kustomization/bad", "Kustomization/missing"]
    );

    // suspend holds a new commit back: the witness, which follows the same source, applies it,
    // so kustomize-controller has seen the new revision; the suspended app stays where it was.
    // In the flux CLI's words, as a Flux user types them.
    plugin_ok(
        cluster,
        admin,
        &["suspend", "kustomization", "app", "-n", GIT_NS],
    );
    let rev2 = commit(&repo, "2");
    let fetched = plugin_ok(
        cluster,
        admin,
        &[
            "reconcile",
            "source",
            "git",
            "fleet",
            "-n",
            GIT_NS,
            "--wait",
        ],
    );
    assert!(fetched.contains(&revision(&rev2)), "{fetched}");
    cluster
        .kustomization_applied(GIT_NS, "witness", &revision(&rev2), RECONCILE)
        .await
        .expect("the witness applied the new commit");
    assert_eq!(config_release(cluster, "witness").as_deref(), Some("2"));
    let app = cluster.object(KUSTOMIZATIONS, GIT_NS, "app").unwrap();
    assert_eq!(
        app["status"]["lastAppliedRevision"],
        revision(&rev1),
        "{app:#}"
    );
    assert_eq!(config_release(cluster, "app-config").as_deref(), Some("1"));
    let table = plugin_ok(cluster, admin, &["get", "ks", "app", "-n", GIT_NS]);
    assert_eq!(row(&table)[..3], ["app", revision(&rev1).as_str(), "True"]);

    // resume applies it.
    plugin_ok(
        cluster,
        admin,
        &["resume", "kustomization", "app", "-n", GIT_NS],
    );
    cluster
        .kustomization_applied(GIT_NS, "app", &revision(&rev2), RECONCILE)
        .await
        .expect("the app applied the new commit once resumed");
    assert_eq!(config_release(cluster, "app-config").as_deref(), Some("2"));

    // reconcile --wait returns once kustomize-controller handled this very request: without
    // --with-source the source still holds the previous commit...
    let rev3 = commit(&repo, "3");
    let waited = plugin_ok(
        cluster,
        admin,
        &["reconcile", "ks", "app", "-n", GIT_NS, "--wait"],
    );
    let app = get_json(cluster, KUSTOMIZATIONS, GIT_NS, "app");
    let requested = annotation(&app, "reconcile.fluxcd.io/requestedAt").expect("requestedAt");
    assert_eq!(app["status"]["lastHandledReconcileAt"], requested.as_str());
    assert_eq!(app["status"]["lastAppliedRevision"], revision(&rev2));
    assert!(
        waited.contains(&format!("Applied revision: {}", revision(&rev2))),
        "{waited}"
    );
    // ...with it, the new commit is fetched first, and applied by the time --wait returns.
    let output = plugin(
        cluster,
        admin,
        &[
            "reconcile",
            "kustomization",
            "app",
            "-n",
            GIT_NS,
            "--with-source",
            "--wait",
        ],
    );
    assert!(output.status.success(), "{}", stderr(&output));
    let app = get_json(cluster, KUSTOMIZATIONS, GIT_NS, "app");
    let git = get_json(cluster, GIT_REPOSITORIES, GIT_NS, "fleet");
    // The Kustomization is asked again once the source settled: a request made together with
    // the source's may be handled before the source fetched the new commit.
    for object in [&git, &app] {
        let requested = annotation(object, "reconcile.fluxcd.io/requestedAt").expect("requestedAt");
        assert_eq!(
            object["status"]["lastHandledReconcileAt"],
            requested.as_str()
        );
    }
    assert!(
        stderr(&output).contains("► Kustomization wl-git/app annotated again"),
        "{}",
        stderr(&output)
    );
    assert_eq!(app["status"]["lastAppliedRevision"], revision(&rev3));
    assert_eq!(config_release(cluster, "app-config").as_deref(), Some("3"));
    assert!(
        stdout(&output).contains(&format!("Applied revision: {}", revision(&rev3))),
        "{}",
        stdout(&output)
    );
    assert!(
        stderr(&output).contains("◎ waiting for GitRepository wl-git/fleet")
            && stderr(&output).contains("◎ waiting for Kustomization wl-git/app"),
        "{}",
        stderr(&output)
    );

    // A Git URL that does not answer (nothing listens on port 1): source-controller's own
    // error is shown, `reconcile --wait` fails with it, and nothing else changes.
    cluster
        .apply_yaml(&format!(
            "apiVersion: source.toolkit.fluxcd.io/v1\nkind: GitRepository\n\
             metadata: {{name: unreachable, namespace: {GIT_NS}}}\n\
             spec: {{interval: 1h, url: \"http://127.0.0.1:1/fleet.git\", ref: {{branch: main}}}}\n"
        ))
        .expect("the unreachable GitRepository");
    let unreachable = cluster
        .settled(GIT_REPOSITORIES, GIT_NS, "unreachable", RECONCILE)
        .await
        .expect("settled");
    assert_eq!(ready_now(&unreachable), Some("False"), "{unreachable:#}");
    assert!(
        ready_message(&unreachable).contains("127.0.0.1:1"),
        "names the URL: {unreachable:#}"
    );
    let shown = plugin_json(
        cluster,
        admin,
        &["get", "gitrepo", "unreachable", "-n", GIT_NS],
    );
    assert_eq!(shown["ready"]["status"], "False", "{shown:#}");
    let output = plugin(
        cluster,
        admin,
        &[
            "reconcile",
            "gitrepo",
            "unreachable",
            "-n",
            GIT_NS,
            "--wait",
            "--timeout",
            "2m",
        ],
    );
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let failed = cluster
        .object(GIT_REPOSITORIES, GIT_NS, "unreachable")
        .unwrap();
    assert!(
        stderr(&output).contains(&format!(
            "GitRepository wl-git/unreachable reconciliation failed: {}",
            ready_message(&failed)
        )),
        "{}",
        stderr(&output)
    );
    let app = get_json(cluster, KUSTOMIZATIONS, GIT_NS, "app");
    assert_eq!(app["status"]["lastAppliedRevision"], revision(&rev3));
}

/// A tenant allowed list/get/watch/patch on Kustomizations in NS only.
async fn tenant_acts_in_its_namespace_only(cluster: &TestCluster) {
    let tenant = cluster
        .token_kubeconfig(NS, "tenant")
        .expect("tenant kubeconfig");
    cluster
        .apply_yaml(&agent_user_with_role(
            NS,
            "tenant",
            "wl-tenant",
            "flux-kustomizations",
            "[{apiGroups: [kustomize.toolkit.fluxcd.io], resources: [kustomizations], verbs: [get, list, watch, patch]}]",
        ))
        .expect("tenant RBAC");

    let ks = plugin_ok(cluster, &tenant, &["get", "ks", "-n", NS]);
    assert!(ks.contains("podinfo"), "{ks}");
    plugin_ok(cluster, &tenant, &["suspend", "ks", "podinfo", "-n", NS]);
    let object = get_json(
        cluster,
        "kustomizations.kustomize.toolkit.fluxcd.io",
        NS,
        "podinfo",
    );
    assert_eq!(object["spec"]["suspend"], true);
    plugin_ok(cluster, &tenant, &["resume", "ks", "podinfo", "-n", NS]);

    // get all shows what the tenant may see, and says what it left out.
    let all = plugin(cluster, &tenant, &["get", "all", "-n", NS]);
    assert!(all.status.success(), "{}", stderr(&all));
    assert!(
        stdout(&all).contains("kustomization/podinfo") && !stdout(&all).contains("gitrepository/"),
        "{}",
        stdout(&all)
    );
    assert!(stderr(&all).contains("warning: GitRepository left out: user \"system:serviceaccount:wl-a:tenant\" may not list gitrepositories.source.toolkit.fluxcd.io in namespace \"wl-a\""), "{}", stderr(&all));

    // Elsewhere: refused, naming the permission.
    for (args, permission) in [
        (
            vec!["suspend", "ks", "other", "-n", OTHER_NS],
            "may not patch kustomizations.kustomize.toolkit.fluxcd.io in namespace \"wl-b\"",
        ),
        (
            vec!["get", "ks", "-n", OTHER_NS],
            "may not list kustomizations.kustomize.toolkit.fluxcd.io in namespace \"wl-b\"",
        ),
        (
            vec!["get", "ks", "-A"],
            "may not list kustomizations.kustomize.toolkit.fluxcd.io cluster-wide",
        ),
        (
            vec!["reconcile", "gitrepo", "podinfo", "-n", NS],
            "may not patch gitrepositories.source.toolkit.fluxcd.io in namespace \"wl-a\"",
        ),
        (
            vec!["reconcile", "ks", "podinfo", "-n", NS, "--with-source"],
            "may not patch gitrepositories.source.toolkit.fluxcd.io in namespace \"wl-a\"",
        ),
    ] {
        let output = plugin(cluster, &tenant, &args);
        assert_eq!(output.status.code(), Some(6), "{args:?}");
        assert!(
            stderr(&output).contains(permission),
            "{args:?}: {}",
            stderr(&output)
        );
    }
    let other = get_json(
        cluster,
        "kustomizations.kustomize.toolkit.fluxcd.io",
        OTHER_NS,
        "other",
    );
    assert!(other["spec"]["suspend"].is_null(), "untouched: {other}");
}

/// Whoever can write an object's status (a controller, anyone with `patch` on the status
/// subresource) writes the messages `get` prints: control characters in them must reach the
/// terminal escaped, or they retitle the window, clear the screen or rewrite a line. Receiver:
/// notification-controller does not run here, so nothing rewrites the status meanwhile.
async fn control_characters_are_shown_escaped(cluster: &TestCluster, admin: &Path) {
    cluster
        .apply_yaml(&format!(
            "apiVersion: notification.toolkit.fluxcd.io/v1\nkind: Receiver\n\
             metadata: {{name: hostile, namespace: {NS}}}\nspec: {}\n",
            minimal_spec("Receiver")
        ))
        .expect("the Receiver");
    let hostile = "\u{1b}]0;pwned\u{7}\u{1b}[2Jgone\rspoofed";
    let status = serde_json::json!({"status": {"conditions": [{
        "type": "Ready", "status": "False", "reason": "Hostile", "message": hostile,
        "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1,
    }]}});
    cluster
        .kubectl_ok(&[
            "patch",
            "receivers.notification.toolkit.fluxcd.io",
            "hostile",
            "-n",
            NS,
            "--subresource=status",
            "--type=merge",
            "-p",
            &status.to_string(),
        ])
        .expect("the hostile status");
    let shown = wait_for(
        "get receiver hostile to show its message",
        Duration::from_secs(30),
        || async {
            let out = plugin(cluster, admin, &["get", "receiver", "hostile", "-n", NS]);
            let text = stdout(&out);
            text.contains("spoofed").then_some(text)
        },
    )
    .await
    .expect("shown");
    assert!(
        !shown.contains('\u{1b}') && !shown.contains('\r') && !shown.contains('\u{7}'),
        "{shown:?}"
    );
    assert!(
        shown.contains("\\u{1b}]0;pwned\\u{7}\\u{1b}[2Jgone\\u{d}spoofed"),
        "{shown:?}"
    );
    // -o json carries the message as it is, JSON-escaped.
    let json = plugin_json(cluster, admin, &["get", "receiver", "hostile", "-n", NS]);
    assert_eq!(json["ready"]["message"], hostile, "{json:#}");
    cluster
        .kubectl_ok(&[
            "delete",
            "receivers.notification.toolkit.fluxcd.io",
            "hostile",
            "-n",
            NS,
        ])
        .expect("deleted");
}

/// `suspend|resume ks --all -n NS`: one line per object, each authorized on its own; a caller
/// who may patch only some Kustomizations (RBAC resourceNames) changes those, sees the others
/// refused by name, and gets exit 1.
async fn suspend_and_resume_all(cluster: &TestCluster) {
    let mut objects = String::new();
    for name in ["bulk-a", "bulk-b", "bulk-c"] {
        objects.push_str(&format!(
            "---\napiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\n\
             metadata: {{name: {name}, namespace: {NS}}}\n\
             spec: {{interval: 1h, path: ./, prune: false, sourceRef: {{kind: GitRepository, name: bulk-missing}}}}\n"
        ));
    }
    cluster.apply_yaml(&objects).expect("the Kustomizations");
    let bulk = cluster
        .token_kubeconfig(NS, "bulk")
        .expect("bulk kubeconfig");
    cluster
        .apply_yaml(&agent_user_with_role(
            NS,
            "bulk",
            "wl-bulk",
            "bulk-kustomizations",
            "[{apiGroups: [kustomize.toolkit.fluxcd.io], resources: [kustomizations], verbs: [get, list, watch]}, \
             {apiGroups: [kustomize.toolkit.fluxcd.io], resources: [kustomizations], verbs: [patch], resourceNames: [bulk-a, bulk-b]}]",
        ))
        .expect("bulk RBAC");
    // The agent lists from its cache: wait until it holds all three.
    wait_for(
        "the agent's cache to hold bulk-a, bulk-b and bulk-c",
        Duration::from_secs(30),
        || async {
            let listed = plugin(cluster, &bulk, &["get", "ks", "-n", NS]);
            let text = stdout(&listed);
            ["bulk-a", "bulk-b", "bulk-c"]
                .iter()
                .all(|name| text.contains(name))
                .then_some(())
        },
    )
    .await
    .expect("listed");
    let suspended = |name: &str| {
        get_json(
            cluster,
            "kustomizations.kustomize.toolkit.fluxcd.io",
            NS,
            name,
        )["spec"]["suspend"]
            == true
    };
    let refused = format!(
        "✗ Kustomization {NS}/bulk-c: user \"system:serviceaccount:{NS}:bulk\" may not patch kustomizations.kustomize.toolkit.fluxcd.io in namespace \"{NS}\""
    );

    let output = plugin(cluster, &bulk, &["suspend", "ks", "--all", "-n", NS]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let lines = stdout(&output);
    for done in ["bulk-a", "bulk-b"] {
        assert!(
            lines.contains(&format!("✔ Kustomization {NS}/{done} suspended")),
            "{lines}"
        );
        assert!(suspended(done), "{done} is suspended");
    }
    assert!(lines.contains(&refused), "{lines}");
    assert!(
        stderr(&output).contains("objects were not suspended"),
        "{}",
        stderr(&output)
    );
    assert!(!suspended("bulk-c"), "bulk-c is untouched");

    // The cluster's admin suspends bulk-c too; resuming all of them is refused for it alone.
    cluster
        .kubectl_ok(&[
            "patch",
            "kustomizations.kustomize.toolkit.fluxcd.io",
            "bulk-c",
            "-n",
            NS,
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"suspend":true}}"#,
        ])
        .expect("bulk-c suspended");
    wait_for(
        "the agent's cache to see bulk-a, bulk-b and bulk-c suspended",
        Duration::from_secs(30),
        || async {
            let list = plugin_json(cluster, &bulk, &["get", "ks", "-n", NS]);
            let suspended_in_cache = |name: &str| {
                list["items"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|o| o["name"] == name && o["suspended"] == true)
            };
            ["bulk-a", "bulk-b", "bulk-c"]
                .iter()
                .all(|n| suspended_in_cache(n))
                .then_some(())
        },
    )
    .await
    .expect("suspended in the cache");
    let json = plugin(
        cluster,
        &bulk,
        &["resume", "ks", "--all", "-n", NS, "-o", "json"],
    );
    assert_eq!(json.status.code(), Some(1), "{}", stderr(&json));
    let outcomes: Value = serde_json::from_slice(&json.stdout).expect("JSON outcomes");
    let of = |name: &str| {
        outcomes["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["name"] == name)
            .unwrap_or_else(|| panic!("{name} in {outcomes:#}"))
            .clone()
    };
    assert!(of("bulk-a")["error"].is_null() && of("bulk-b")["error"].is_null());
    assert!(
        of("bulk-c")["error"]
            .as_str()
            .unwrap()
            .contains("may not patch"),
        "{outcomes:#}"
    );
    assert!(!suspended("bulk-a") && !suspended("bulk-b") && suspended("bulk-c"));

    // --all names one kind, and no object.
    for (args, says) in [
        (
            vec!["suspend", "all", "--all", "-n", NS],
            "one kind at a time",
        ),
        (
            vec!["suspend", "ks", "bulk-a", "--all", "-n", NS],
            "drop the name",
        ),
    ] {
        let output = plugin(cluster, &bulk, &args);
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        assert!(
            stderr(&output).contains(says),
            "{args:?}: {}",
            stderr(&output)
        );
    }
    cluster
        .kubectl_ok(&[
            "delete",
            "kustomizations.kustomize.toolkit.fluxcd.io",
            "-n",
            NS,
            "bulk-a",
            "bulk-b",
            "bulk-c",
        ])
        .expect("the Kustomizations deleted");
}

/// Flux 2.9 on the shared cluster, one test per scenario, each runnable alone
/// (`tests/run workloads::flux_2_9::reconciles_from_git`): the first prepares the objects, and
/// they run one at a time, as several suspend, annotate or list the same ones.
mod flux_2_9 {
    use super::*;

    static PREPARED: tokio::sync::OnceCell<PathBuf> = tokio::sync::OnceCell::const_new();
    static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

    async fn scenario() -> (
        &'static TestCluster,
        &'static Path,
        tokio::sync::MutexGuard<'static, ()>,
    ) {
        let cluster = TestCluster::shared();
        let admin = PREPARED
            .get_or_init(|| prepare(cluster, &FLUX_2_9, false))
            .await;
        (cluster, admin, ONE_AT_A_TIME.lock().await)
    }

    #[tokio::test]
    async fn every_kind_is_listed_suspended_resumed_and_reconciled() {
        let (cluster, admin, _one) = scenario().await;
        lists_suspends_and_reconciles(cluster, &FLUX_2_9, false, admin).await;
    }

    #[tokio::test]
    async fn flux_words_and_flux_operators_kinds() {
        let (cluster, admin, _one) = scenario().await;
        flux_words_and_operator_kinds(cluster, admin).await;
    }

    #[tokio::test]
    async fn reconciles_from_git() {
        let (cluster, admin, _one) = scenario().await;
        super::reconciles_from_git(cluster, admin).await;
    }

    #[tokio::test]
    async fn a_tenant_acts_in_its_namespace_only() {
        let (cluster, _admin, _one) = scenario().await;
        tenant_acts_in_its_namespace_only(cluster).await;
    }

    #[tokio::test]
    async fn suspend_and_resume_all() {
        let (cluster, _admin, _one) = scenario().await;
        super::suspend_and_resume_all(cluster).await;
    }

    #[tokio::test]
    async fn control_characters_are_shown_escaped() {
        let (cluster, admin, _one) = scenario().await;
        super::control_characters_are_shown_escaped(cluster, admin).await;
    }
}

#[tokio::test]
async fn flux_2_6_with_image_automation_on_a_cluster_of_its_own() {
    let cluster =
        TestCluster::start(&format!("wl-flux26-{}", std::process::id())).expect("second cluster");
    exercise(&cluster, &FLUX_2_6, true).await;
}
