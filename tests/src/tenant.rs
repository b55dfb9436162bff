//! A tenant cluster set up as in production, for the reliability tests: the real flux-operator
//! with a FluxInstance that complies with deploy/policy/example.yaml, the agent holding a
//! policy key, that policy (without its defaults) pushed by the platform's account, a
//! Kustomization `apps/podinfo`, and a cluster-admin account whose token the tests use both
//! through the plugin and on raw gRPC calls.

use std::{
    path::{Path, PathBuf},
    process::Output,
    time::Duration,
};

use serde_json::Value;

use crate::{Result, TestCluster, path, repo_root, wait_for};

pub const AGENT_NAMESPACE: &str = "tenantflux-system";
pub const APPS: &str = "apps";

/// deploy/policy/example.yaml without `spec.defaults` (its last field), so the instance is the
/// test's own.
pub fn example_without_defaults() -> String {
    let example = std::fs::read_to_string(repo_root().join("deploy/policy/example.yaml"))
        .expect("deploy/policy/example.yaml");
    let (head, _) = example
        .split_once("  defaults:\n")
        .expect("the example ends with spec.defaults");
    head.to_owned()
}

/// A FluxInstance `flux-system/flux` that complies with the example policy.
pub fn compliant_instance() -> Value {
    serde_json::json!({
        "apiVersion": "fluxcd.controlplane.io/v1",
        "kind": "FluxInstance",
        "metadata": {"name": "flux", "namespace": "flux-system"},
        "spec": {
            "distribution": {"version": "2.9.x", "registry": "ghcr.io/fluxcd"},
            "components": ["source-controller", "kustomize-controller", "helm-controller", "notification-controller"],
            "cluster": {"type": "kubernetes", "multitenant": true, "networkPolicy": true, "size": "small"},
        }
    })
}

/// The live FluxInstance `flux-system/flux` as JSON, or None when there is none.
pub fn instance_json(cluster: &TestCluster) -> Option<Value> {
    let output = cluster
        .kubectl(&[
            "-n",
            "flux-system",
            "get",
            "fluxinstance",
            "flux",
            "-o",
            "json",
        ])
        .expect("kubectl get fluxinstance");
    if output.status.success() {
        return Some(serde_json::from_slice(&output.stdout).expect("JSON"));
    }
    // Only "not found" (or no FluxInstance API at all) means absent: any other failure (the
    // API server down, RBAC) would make a test that expects no instance pass for the wrong
    // reason.
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("(NotFound)") || stderr.contains("doesn't have a resource type"),
        "kubectl get fluxinstance flux failed: {stderr}"
    );
    None
}

/// Waits until the API server itself enforces policy `generation`: the agent has written the
/// ValidatingAdmissionPolicy and its binding at that generation, and a server-side dry run of
/// a FluxInstance from a registry no policy allows is refused by that generation. The binding
/// written is not yet the binding enforced: the API server loads it through an informer, a
/// moment after the write, so a test that asserts on the write alone races it.
pub async fn wait_enforced(cluster: &TestCluster, generation: u64) -> Result<()> {
    let mut probe = compliant_instance();
    probe["spec"]["distribution"]["registry"] = "docker.io/not-allowed".into();
    let file = tempfile::NamedTempFile::new().expect("a temporary file");
    std::fs::write(file.path(), probe.to_string()).expect("writing the probe");
    let by = format!("allowed by policy generation {generation}");
    wait_for(
        &format!("the API server to enforce policy generation {generation}"),
        Duration::from_secs(60),
        || {
            let written = [
                "validatingadmissionpolicy",
                "validatingadmissionpolicybinding",
            ]
            .iter()
            .all(|kind| {
                cluster
                    .kubectl_ok(&[
                        "get",
                        kind,
                        "tenantflux-policy",
                        "-o",
                        "jsonpath={.metadata.annotations.tenantflux\\.io/policy-generation}",
                        "--ignore-not-found",
                    ])
                    .is_ok_and(|g| g == generation.to_string())
            });
            let refused = written
                && cluster
                    .kubectl(&["apply", "--dry-run=server", "-f", path(file.path())])
                    .is_ok_and(|o| String::from_utf8_lossy(&o.stderr).contains(&by));
            async move { refused.then_some(()) }
        },
    )
    .await
}

/// The agent's defaults record as `outcome/policyGeneration`, empty when there is none.
pub fn defaults_record(cluster: &TestCluster) -> String {
    cluster
        .kubectl_ok(&[
            "-n",
            AGENT_NAMESPACE,
            "get",
            "configmap",
            "tenantflux-defaults",
            "-o",
            "jsonpath={.data.outcome}/{.data.policyGeneration}",
            "--ignore-not-found",
        ])
        .unwrap_or_default()
}

pub struct Tenant<'a> {
    pub cluster: &'a TestCluster,
    pub dir: tempfile::TempDir,
    /// The platform's signing key and the public key the agent holds.
    pub key: PathBuf,
    pub public_key: PathBuf,
    /// Kubeconfig of the platform's account (may push policies).
    pub platform: PathBuf,
    /// Kubeconfig of a cluster-admin ServiceAccount with a token.
    pub admin: PathBuf,
}

impl<'a> Tenant<'a> {
    /// Sets `cluster` up (see the module docs); `agent_env` goes to the agent besides its key.
    pub async fn prepare(cluster: &'a TestCluster, agent_env: &[(&str, &str)]) -> Tenant<'a> {
        cluster.ensure_flux_operator().expect("flux-operator");
        cluster
            .apply_yaml(&compliant_instance().to_string())
            .expect("FluxInstance");
        let crd = "crd/kustomizations.kustomize.toolkit.fluxcd.io";
        wait_for(crd, Duration::from_secs(180), || async {
            cluster
                .kubectl_ok(&["wait", "--for=condition=Established", crd, "--timeout=1s"])
                .ok()
        })
        .await
        .expect("Flux CRDs installed by flux-operator");
        let dir = tempfile::tempdir().expect("temp dir");
        let keys = dir.path().join("keys");
        let output = cluster
            .kubectl_tenantflux(None, &["policy", "keygen", "--out", path(&keys)])
            .expect("policy keygen");
        assert!(output.status.success(), "{output:?}");
        let public_key = keys.join("ed25519.pub");
        let mut env = vec![("TENANTFLUX_POLICY_PUBLIC_KEY", path(&public_key))];
        env.extend_from_slice(agent_env);
        cluster.restart_agent_with(&env).expect("agent");
        let platform = cluster
            .policy_pusher_kubeconfig()
            .expect("platform account");
        let admin = cluster
            .token_kubeconfig(AGENT_NAMESPACE, "rel-admin")
            .expect("admin account");
        cluster
            .apply_yaml(&format!(
                "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\n\
                 metadata: {{name: rel-admin}}\n\
                 roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}}\n\
                 subjects: [{{kind: ServiceAccount, name: rel-admin, namespace: {AGENT_NAMESPACE}}}]\n---\n\
                 apiVersion: v1\nkind: Namespace\nmetadata: {{name: {APPS}}}\n---\n\
                 apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\n\
                 metadata: {{name: podinfo, namespace: {APPS}}}\n\
                 spec: {{interval: 10m, path: ./kustomize, prune: true, sourceRef: {{kind: GitRepository, name: podinfo}}}}\n"
            ))
            .expect("admin binding and Kustomization");
        let tenant = Tenant {
            cluster,
            key: keys.join("ed25519.key"),
            public_key,
            platform,
            admin,
            dir,
        };
        let signed = tenant.sign("policy-7", &example_without_defaults());
        let output = tenant.push(&signed);
        assert!(output.status.success(), "policy push: {output:?}");
        // Done once the API server enforces it too, so that nothing the setup started is
        // still changing the cluster when a test looks.
        wait_enforced(cluster, 7)
            .await
            .expect("the API server enforces the policy");
        tenant
    }

    /// Signs `text` with the platform's key; returns the signed file.
    pub fn sign(&self, name: &str, text: &str) -> PathBuf {
        let unsigned = self.dir.path().join(format!("{name}.yaml"));
        std::fs::write(&unsigned, text).expect("write policy");
        let signed = self.dir.path().join(format!("{name}-signed.yaml"));
        let output = self.plugin_as(
            None,
            &[
                "policy",
                "sign",
                "-f",
                path(&unsigned),
                "--key",
                path(&self.key),
                "--out",
                path(&signed),
            ],
        );
        assert!(output.status.success(), "policy sign: {output:?}");
        signed
    }

    /// `policy push -f FILE` as the platform's account.
    pub fn push(&self, signed: &Path) -> Output {
        self.plugin_as(
            Some(&self.platform),
            &["policy", "push", "-f", path(signed)],
        )
    }

    /// `kubectl tenantflux ARGS` as the cluster-admin account.
    pub fn plugin(&self, args: &[&str]) -> Output {
        self.plugin_as(Some(&self.admin), args)
    }

    fn plugin_as(&self, kubeconfig: Option<&Path>, args: &[&str]) -> Output {
        self.cluster
            .kubectl_tenantflux(kubeconfig, args)
            .unwrap_or_else(|err| panic!("kubectl tenantflux {args:?}: {err}"))
    }

    /// The cluster-admin account's token (for raw gRPC calls).
    pub fn admin_token(&self) -> String {
        let text = std::fs::read_to_string(&self.admin).expect("admin kubeconfig");
        text.split("token: \"")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .expect("a token in the admin kubeconfig")
            .to_owned()
    }

    /// What the bad-input and fault tests compare before and after: everything a tenant or
    /// the platform could change through the agent (spec, generation and annotations, not
    /// status, which flux-operator writes on its own).
    pub fn fingerprint(&self) -> Result<Value> {
        let get = |args: &[&str]| -> Result<Value> {
            let mut all = vec!["get"];
            all.extend_from_slice(args);
            all.extend(["-o", "json", "--ignore-not-found"]);
            let text = self.cluster.kubectl_ok(&all)?;
            Ok(serde_json::from_str(&text).unwrap_or(Value::Null))
        };
        let object = |v: Value| {
            serde_json::json!({
                "generation": v.pointer("/metadata/generation"),
                "annotations": v.pointer("/metadata/annotations"),
                "spec": v.get("spec"),
                "data": v.get("data"),
            })
        };
        let instance = get(&["-n", "flux-system", "fluxinstance", "flux"])?;
        let kustomizations = get(&["-A", "kustomizations.kustomize.toolkit.fluxcd.io"])?;
        let policy = get(&["-n", AGENT_NAMESPACE, "configmap", "tenantflux-policy"])?;
        let vap = get(&["validatingadmissionpolicy", "tenantflux-policy"])?;
        let items: Vec<Value> = kustomizations["items"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .map(|k| {
                serde_json::json!({
                    "name": format!("{}/{}", k["metadata"]["namespace"].as_str().unwrap_or(""), k["metadata"]["name"].as_str().unwrap_or("")),
                    "object": object(k),
                })
            })
            .collect();
        Ok(serde_json::json!({
            "instance": object(instance),
            "kustomizations": items,
            "policy": object(policy),
            "vap": object(vap),
        }))
    }
}
