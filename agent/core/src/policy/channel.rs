//! A policy channel: a tag in an OCI registry that the platform publishes signed policies
//! to (`kubectl tenantflux policy publish`) and every agent pulls from (`--policy-source`).
//!
//! The artifact is one manifest with its own `artifactType`, the empty config, and one layer
//! holding the SignedPolicy envelope as `policy publish` read it. The signature is inside the
//! layer, so nothing depends on the registry's referrers API, and whoever can push to the tag
//! can at most offer a policy the agent then verifies like a push: an unsigned or older one
//! is refused and reported.

use crate::text::quote;

/// The manifest's `artifactType`.
pub const ARTIFACT_TYPE: &str = "application/vnd.tenantflux.policy.v1";
/// The one layer's media type: a SignedPolicy envelope (YAML).
pub const LAYER_MEDIA_TYPE: &str = "application/vnd.tenantflux.signed-policy.v1+yaml";
/// The layer's file name (annotation `org.opencontainers.image.title`).
pub const LAYER_TITLE: &str = "signed-policy.yaml";
/// The empty config of an OCI artifact (image-spec 1.1).
pub const EMPTY_CONFIG_MEDIA_TYPE: &str = "application/vnd.oci.empty.v1+json";
/// The keyring's artifact, published beside the policy (tag `TAG-keyring`).
pub const KEYRING_ARTIFACT_TYPE: &str = "application/vnd.tenantflux.keyring.v1";
pub const KEYRING_LAYER_MEDIA_TYPE: &str = "application/vnd.tenantflux.signed-keyring.v1+yaml";
pub const KEYRING_LAYER_TITLE: &str = "signed-keyring.yaml";

/// The tag the keyring of channel tag `tag` is published to.
pub fn keyring_tag(tag: &str) -> String {
    format!("{tag}-keyring")
}

/// The largest layer an agent downloads: a registry tag is whoever can push to it, and a
/// signed policy is a few KiB (the ConfigMap it is stored in holds at most 1 MiB).
pub const MAX_LAYER_BYTES: u64 = 512 * 1024;
/// The largest manifest an agent accepts.
pub const MAX_MANIFEST_BYTES: usize = 64 * 1024;

/// `oci://REGISTRY/REPOSITORY:TAG`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Channel {
    pub registry: String,
    pub repository: String,
    pub tag: String,
}

#[derive(Debug, thiserror::Error)]
#[error("{} is not a policy channel: {problem} (write oci://REGISTRY/REPOSITORY:TAG, e.g. oci://registry.example/platform/policy:stable)", quote(.text))]
pub struct BadChannel {
    text: String,
    problem: &'static str,
}

impl std::str::FromStr for Channel {
    type Err = BadChannel;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = |problem| BadChannel {
            text: text.to_owned(),
            problem,
        };
        let rest = text
            .strip_prefix("oci://")
            .ok_or_else(|| bad("no oci:// scheme"))?;
        if rest.contains('@') {
            return Err(bad(
                "a channel is a tag the platform moves; a digest would never change",
            ));
        }
        let (registry, path) = rest.split_once('/').ok_or_else(|| bad("no repository"))?;
        let (repository, tag) = match path.rsplit_once(':') {
            Some((repository, tag)) if !tag.contains('/') => (repository, tag),
            _ => return Err(bad("no tag")),
        };
        let valid_tag = !tag.is_empty()
            && tag.len() <= 128
            && tag
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
            && !tag.starts_with(['.', '-']);
        if !valid_tag {
            return Err(bad("the tag is not [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"));
        }
        let valid_repository = !repository.is_empty()
            && repository.split('/').all(|part| {
                !part.is_empty()
                    && part.bytes().all(|b| {
                        b.is_ascii_lowercase()
                            || b.is_ascii_digit()
                            || matches!(b, b'.' | b'_' | b'-')
                    })
            });
        if !valid_repository {
            return Err(bad("the repository is not lowercase path components"));
        }
        if registry.is_empty() || registry.contains(|c: char| c.is_whitespace()) {
            return Err(bad("no registry"));
        }
        Ok(Self {
            registry: registry.to_owned(),
            repository: repository.to_owned(),
            tag: tag.to_owned(),
        })
    }
}

impl std::fmt::Display for Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "oci://{}/{}:{}",
            self.registry, self.repository, self.tag
        )
    }
}

/// Username and password for `registry` from a `.dockerconfigjson` document (as `kubectl
/// create secret docker-registry` writes it).
pub fn docker_config_credentials(json: &[u8], registry: &str) -> Result<(String, String), String> {
    use base64::Engine as _;
    #[derive(serde::Deserialize)]
    struct DockerConfig {
        #[serde(default)]
        auths: std::collections::BTreeMap<String, Entry>,
    }
    #[derive(serde::Deserialize)]
    struct Entry {
        username: Option<String>,
        password: Option<String>,
        auth: Option<String>,
    }
    let config: DockerConfig = serde_json::from_slice(json)
        .map_err(|_| ".dockerconfigjson is not valid JSON of {\"auths\": {...}}".to_owned())?;
    let host = |key: &str| {
        key.trim_start_matches("https://")
            .trim_start_matches("http://")
            .split('/')
            .next()
            .unwrap_or_default()
            .to_owned()
    };
    let entry = config
        .auths
        .iter()
        .find(|(key, _)| host(key) == registry)
        .map(|(_, e)| e)
        .ok_or_else(|| format!("it has no credentials for registry {registry}"))?;
    if let (Some(user), Some(password)) = (&entry.username, &entry.password) {
        return Ok((user.clone(), password.clone()));
    }
    let decoded = entry
        .auth
        .as_deref()
        .and_then(|auth| base64::engine::general_purpose::STANDARD.decode(auth).ok())
        .and_then(|b| String::from_utf8(b).ok())
        .ok_or_else(|| {
            format!("the entry for {registry} has neither username/password nor an auth of base64 user:password")
        })?;
    let (user, password) = decoded
        .split_once(':')
        .ok_or_else(|| format!("the auth of the entry for {registry} is not user:password"))?;
    Ok((user.to_owned(), password.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channels_parse_and_print_back() {
        for text in [
            "oci://127.0.0.1:5000/platform/policy:stable",
            "oci://registry.example/policy:gen-7",
        ] {
            let channel: Channel = text.parse().unwrap();
            assert_eq!(channel.to_string(), text);
        }
        let channel: Channel = "oci://127.0.0.1:5000/platform/policy:stable"
            .parse()
            .unwrap();
        assert_eq!(channel.registry, "127.0.0.1:5000");
        assert_eq!(channel.repository, "platform/policy");
        assert_eq!(channel.tag, "stable");
    }

    #[test]
    fn bad_channels_say_what_to_write() {
        for (text, problem) in [
            ("127.0.0.1:5000/policy:stable", "no oci:// scheme"),
            ("oci://127.0.0.1:5000/policy", "no tag"),
            (
                "oci://127.0.0.1:5000/policy@sha256:00",
                "a digest would never change",
            ),
            ("oci://registry.example", "no repository"),
            ("oci://r.example/Policy:x", "lowercase"),
            ("oci://r.example/policy:-x", "the tag is not"),
        ] {
            let err = text.parse::<Channel>().unwrap_err().to_string();
            assert!(
                err.contains(problem) && err.contains("oci://REGISTRY/REPOSITORY:TAG"),
                "{text}: {err}"
            );
        }
    }

    #[test]
    fn docker_config_gives_the_registrys_credentials() {
        let config = br#"{"auths": {"https://r.example": {"auth": "cm9ib3Q6czNjcmV0"}, "o.example": {"username": "u", "password": "p"}}}"#;
        assert_eq!(
            docker_config_credentials(config, "r.example").unwrap(),
            ("robot".to_owned(), "s3cret".to_owned())
        );
        assert_eq!(
            docker_config_credentials(config, "o.example").unwrap(),
            ("u".to_owned(), "p".to_owned())
        );
        let err = docker_config_credentials(config, "x.example").unwrap_err();
        assert!(
            err.contains("no credentials for registry x.example"),
            "{err}"
        );
        // The document's text (which holds secrets) is never quoted.
        let err = docker_config_credentials(b"{\"auths\": s3cret", "r.example").unwrap_err();
        assert!(!err.contains("s3cret"), "{err}");
    }
}
