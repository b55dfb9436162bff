//! The Cozystack add-on package (`deploy/cozystack/`) as Cozystack's tooling uses it: the
//! add-on's HelmRelease template rendered inside a chart that stands for Cozystack's Kubernetes
//! application, and the system package vendored by its Makefile and rendered with the values
//! that HelmRelease carries. Shared by the package's tests and the adoption test, which runs
//! the agent as the package configures it.

use std::{
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
};

use serde_json::{Value, json};

use crate::{ensure_packaging_tools, repo_root, stderr, stdout, tool_path};

/// The Kubernetes application's release and namespace, as Cozystack names them.
pub const RELEASE: &str = "kubernetes-acme";
pub const TENANT_NAMESPACE: &str = "tenant-acme";
pub const BUNDLE: &str = "oci://ghcr.io/controlplaneio-fluxcd/flux-operator-manifests:v0.59.0";
pub const PUBLIC_KEY: &str = "-----BEGIN PUBLIC KEY-----\n\
    MCowBQYDK2VwAyEAGb9ECWmEzf6FQbrBZ9w7lshQhqowtrbLDFw4rXAxZuE=\n\
    -----END PUBLIC KEY-----\n";
pub const CHANNEL: &str = "oci://registry.example/platform/policy:stable";
pub const HELMRELEASE_CRD: &str = "helmreleases.helm.toolkit.fluxcd.io";

pub fn package_dir() -> PathBuf {
    repo_root().join("deploy/cozystack/packages")
}

pub fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|err| panic!("{}: {err}", path.display()))
}

pub fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().expect("a parent")).expect("create the directory");
    std::fs::write(path, text).unwrap_or_else(|err| panic!("{}: {err}", path.display()));
}

/// Copies the files under `from` to `to`, directories included.
pub fn copy_dir(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).unwrap_or_else(|err| panic!("{}: {err}", from.display())) {
        let path = entry.expect("a directory entry").path();
        let target = to.join(path.file_name().expect("a file name"));
        if path.is_dir() {
            copy_dir(&path, &target);
        } else {
            write(&target, &read(&path));
        }
    }
}

/// Runs `command`, failing the test unless it exits 0; its stdout.
pub fn run_ok(command: &mut Command) -> String {
    let shown = format!("{command:?}");
    let output = command
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|err| panic!("running {shown}: {err}"));
    assert!(
        output.status.success(),
        "{shown} failed ({}):\n{}\n{}",
        output.status,
        stdout(&output),
        stderr(&output)
    );
    stdout(&output)
}

pub fn helm(args: &[&str]) -> Output {
    ensure_packaging_tools().expect("tests/env/cluster build-tools");
    Command::new(tool_path("HELM"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run helm")
}

pub fn helm_ok(args: &[&str]) -> String {
    let output = helm(args);
    assert!(
        output.status.success(),
        "helm {args:?} failed:\n{}",
        stderr(&output)
    );
    stdout(&output)
}

pub fn documents(yaml: &str) -> Vec<Value> {
    tenantflux_core::yaml::documents::<Value>(yaml)
        .expect("YAML documents")
        .into_iter()
        .filter(|document| !document.is_null())
        .collect()
}

/// Renders the add-on's template in a chart standing for Cozystack's Kubernetes application:
/// the template as the package has it, the package's values lines as values.yaml, and the
/// tenant namespace's `_namespace` values (with an etcd, as every tenant that can run a
/// Kubernetes application has), then `values` over them.
pub fn render_addon(values: &Value) -> Vec<Value> {
    let chart = tempfile::tempdir().expect("temporary directory");
    let apps = package_dir().join("apps/kubernetes");
    write(
        &chart.path().join("Chart.yaml"),
        "apiVersion: v2\nname: kubernetes\nversion: 0.0.0\n",
    );
    write(
        &chart.path().join("values.yaml"),
        &format!(
            "{}\n_namespace:\n  etcd: tenant-root\n",
            read(&apps.join("values.fluxcd.yaml"))
        ),
    );
    write(
        &chart.path().join("templates/helmreleases/tenantflux.yaml"),
        &read(&apps.join("templates/helmreleases/tenantflux.yaml")),
    );
    write(&chart.path().join("given.json"), &values.to_string());
    documents(&helm_ok(&[
        "template",
        RELEASE,
        chart.path().to_str().expect("UTF-8 path"),
        "--namespace",
        TENANT_NAMESPACE,
        "-f",
        chart
            .path()
            .join("given.json")
            .to_str()
            .expect("UTF-8 path"),
    ]))
}

/// The one HelmRelease the add-on renders with `values`.
pub fn addon_release(values: &Value) -> Value {
    let mut rendered = render_addon(values);
    assert_eq!(rendered.len(), 1, "{rendered:#?}");
    rendered.remove(0)
}

pub fn enabled_with_policy() -> Value {
    json!({"addons": {"fluxcd": {
        "enabled": true,
        "policy": {"publicKey": PUBLIC_KEY, "source": CHANNEL},
    }}})
}

/// The ExternalArtifact the platform makes of the package's source entry.
pub fn external_artifact_name() -> String {
    let entry: Value = tenantflux_core::yaml::from_str(&read(
        &package_dir().join("core/platform/sources/kubernetes-application.yaml.fragment"),
    ))
    .expect("the source entry is YAML");
    let path = entry[0]["path"].as_str().expect("a path");
    assert!(
        package_dir().join(path).join("Chart.yaml").is_file(),
        "the entry's path {path} is the package's"
    );
    format!(
        "cozystack-kubernetes-application-kubevirt-{}",
        entry[0]["name"].as_str().expect("a name")
    )
}

/// The system package vendored as its Makefile does it (`make update` from this checkout), in a
/// tree laid out as Cozystack's (its `hack/package.mk`, which the Makefile includes, stood for
/// by an empty file).
pub struct Vendored {
    tree: tempfile::TempDir,
    pub package: PathBuf,
}

impl Vendored {
    pub fn new() -> Self {
        let tree = tempfile::tempdir().expect("temporary directory");
        write(&tree.path().join("hack/package.mk"), "");
        let package = tree.path().join("packages/system/tenantflux-agent");
        copy_dir(&package_dir().join("system/tenantflux-agent"), &package);
        run_ok(
            Command::new("make")
                .arg("-C")
                .arg(&package)
                .arg("update")
                .arg(format!("TENANTFLUX_SRC={}", repo_root().display())),
        );
        Self { tree, package }
    }

    /// `helm template` of the package with the values of the add-on's HelmRelease `release`,
    /// into its target namespace, with `extra` arguments.
    pub fn render(&self, release: &Value, extra: &[&str]) -> Output {
        let values = self.tree.path().join("values.json");
        write(&values, &release["spec"]["values"].to_string());
        let namespace = release["spec"]["targetNamespace"]
            .as_str()
            .expect("a target namespace");
        let mut args = vec![
            "template",
            "tenantflux-agent",
            self.package.to_str().expect("UTF-8 path"),
            "--namespace",
            namespace,
            "-f",
            values.to_str().expect("UTF-8 path"),
        ];
        args.extend(extra);
        helm(&args)
    }

    /// The objects [`Self::render`] renders, failing the test when it fails.
    pub fn objects(&self, release: &Value) -> Vec<Value> {
        let rendered = self.render(release, &[]);
        assert!(rendered.status.success(), "{}", stderr(&rendered));
        documents(&stdout(&rendered))
    }
}

impl Default for Vendored {
    fn default() -> Self {
        Self::new()
    }
}

/// The agent's environment as the rendered Deployment sets it (plain values only).
pub fn agent_env(objects: &[Value]) -> Vec<(String, String)> {
    let deployment = objects
        .iter()
        .find(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == "tenantflux-agent")
        .expect("the agent's Deployment rendered");
    deployment["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .expect("the agent's env")
        .iter()
        .filter_map(|e| {
            Some((
                e["name"].as_str()?.to_owned(),
                e["value"].as_str()?.to_owned(),
            ))
        })
        .collect()
}

/// The add-on as a platform ticks it, without policy.
pub fn enabled() -> Value {
    json!({"addons": {"fluxcd": {"enabled": true}}})
}
