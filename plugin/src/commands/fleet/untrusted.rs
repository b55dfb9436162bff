//! What a kubeconfig read from a Secret may hold.
//!
//! Whoever can write a Secret the fleet discovers (a `tenant-*` namespace's, or one with the
//! `--secret-selector` labels) writes that kubeconfig, and kube-client acts on all of it:
//! `exec` and `auth-provider` run programs (or talk to identity providers) on the platform's
//! machine, file paths (`tokenFile`, `client-key`, `certificate-authority`, …) read its files,
//! the management ServiceAccount's token among them, and `proxy-url` sends the connection, and
//! whatever it carries, through another host. So a kubeconfig from a Secret may carry its
//! credentials only inline; a fleet file is the platform's own and may use everything.
//!
//! Entries are named by their position (`users[0].user.exec`), never by their text: the
//! Secret's writer chooses the names, and a refusal should not repeat them.

use kube::config::Kubeconfig;

/// Each field of `kubeconfig` that would run something, read a local file or reroute the
/// connection, with what it would do; empty when it holds inline credentials only. Every
/// cluster and user is checked, not only the current context's: which one is used depends
/// on fields the same writer controls.
pub fn refusals(kubeconfig: &Kubeconfig) -> Vec<String> {
    let mut found = Vec::new();
    let mut refuse = |path: String, does: &str| found.push(format!("{path} ({does})"));
    for (i, named) in kubeconfig.auth_infos.iter().enumerate() {
        let Some(user) = &named.auth_info else {
            continue;
        };
        let at = |field: &str| format!("users[{i}].user.{field}");
        if user.exec.is_some() {
            refuse(at("exec"), "runs a command");
        }
        if user.auth_provider.is_some() {
            refuse(
                at("auth-provider"),
                "runs a command or calls an identity provider",
            );
        }
        for (field, value) in [
            ("tokenFile", &user.token_file),
            ("client-certificate", &user.client_certificate),
            ("client-key", &user.client_key),
        ] {
            if value.is_some() {
                refuse(at(field), "reads a local file");
            }
        }
    }
    for (i, named) in kubeconfig.clusters.iter().enumerate() {
        let Some(cluster) = &named.cluster else {
            continue;
        };
        let at = |field: &str| format!("clusters[{i}].cluster.{field}");
        if cluster.certificate_authority.is_some() {
            refuse(at("certificate-authority"), "reads a local file");
        }
        if cluster.proxy_url.is_some() {
            refuse(at("proxy-url"), "connects through a proxy");
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Kubeconfig {
        Kubeconfig::from_yaml(yaml).expect("a kubeconfig")
    }

    /// What Kamaji stores: every credential inline.
    const INLINE: &str = "\
apiVersion: v1
kind: Config
clusters:
- name: acme
  cluster:
    server: https://acme.example:6443
    certificate-authority-data: Y2E=
    tls-server-name: acme
contexts:
- name: admin@acme
  context: {cluster: acme, user: admin}
current-context: admin@acme
users:
- name: admin
  user:
    client-certificate-data: Y2VydA==
    client-key-data: a2V5
- name: robot
  user:
    token: abc
";

    #[test]
    fn inline_credentials_pass() {
        assert_eq!(refusals(&parse(INLINE)), Vec::<String>::new());
    }

    #[test]
    fn commands_files_and_proxies_are_refused_wherever_they_are() {
        let kubeconfig = parse(
            "\
apiVersion: v1
kind: Config
clusters:
- name: acme
  cluster: {server: 'https://acme.example:6443', certificate-authority-data: Y2E=}
- name: elsewhere
  cluster:
    server: https://elsewhere.example
    certificate-authority: /etc/kubernetes/pki/ca.crt
    proxy-url: http://proxy.example:3128
users:
- name: admin
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: /bin/sh
      args: [-c, 'touch /tmp/owned']
- name: reader
  user:
    tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token
    client-certificate: /home/admin/.kube/cert.pem
    client-key: /home/admin/.kube/key.pem
- name: oidc
  user:
    auth-provider:
      name: oidc
      config: {idp-issuer-url: 'https://idp.example'}
",
        );
        assert_eq!(
            refusals(&kubeconfig),
            [
                "users[0].user.exec (runs a command)",
                "users[1].user.tokenFile (reads a local file)",
                "users[1].user.client-certificate (reads a local file)",
                "users[1].user.client-key (reads a local file)",
                "users[2].user.auth-provider (runs a command or calls an identity provider)",
                "clusters[1].cluster.certificate-authority (reads a local file)",
                "clusters[1].cluster.proxy-url (connects through a proxy)",
            ]
        );
    }

    #[test]
    fn refusals_never_repeat_the_writers_text() {
        let kubeconfig = parse(
            "\
apiVersion: v1
kind: Config
clusters: []
users:
- name: \"\\e[31mlook here\"
  user:
    exec: {apiVersion: client.authentication.k8s.io/v1, command: /tmp/evil-command}
",
        );
        let found = refusals(&kubeconfig).join(", ");
        assert_eq!(found, "users[0].user.exec (runs a command)");
    }
}
