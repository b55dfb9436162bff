//! Where the flux-operator bundle comes from: a file (development), a ConfigMap or Secret in
//! the agent's namespace holding `install.yaml` (air-gapped installs), or the official OCI
//! manifests artifact (`oci://…/flux-operator-manifests:<tag>`, a gzipped tarball layer with
//! `flux-operator/install.yaml`), optionally pinned by digest, pulled with registry credentials
//! from a `kubernetes.io/dockerconfigjson` Secret.

use std::{fmt, path::PathBuf, str::FromStr};

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::{Api, Client};
use oci_client::{
    Reference,
    manifest::{OciDescriptor, OciImageManifest},
    secrets::RegistryAuth,
};

use crate::oci::{IMAGE_MANIFEST_TYPES, ManifestError, Registry};
use tenantflux_core::digest::sha256;

mod layer;

pub use layer::{
    distributions_from_layer, install_yaml_from_layer, registry_auth_from_docker_config,
};

/// The key of a ConfigMap or Secret source, and the file name in the OCI artifact's directory.
pub const INSTALL_KEY: &str = "install.yaml";
/// The path of the install manifest inside the official flux-operator-manifests artifact.
pub const ARTIFACT_PATH: &str = "flux-operator/install.yaml";
/// The largest artifact layer the agent downloads, and the largest `install.yaml` it unpacks
/// from one: a registry tag is whoever can push to it, and the agent runs with 128 MiB. The
/// official artifact (every Flux distribution's manifests) is a few MiB; its install.yaml is
/// about 100 KiB.
pub const MAX_LAYER_BYTES: u64 = 32 * 1024 * 1024;
/// The largest manifest the agent reads for a bundle (flux-operator-manifests' is under 2 KiB);
/// a registry that answers with more is cut off there ([`crate::oci`]).
pub const MAX_MANIFEST_BYTES: usize = 64 * 1024;

/// A configured bundle source (`--operator-bundle`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BundleSource {
    /// `file:PATH`
    File(PathBuf),
    /// `configmap:NAME`, key `install.yaml`, in the agent's namespace.
    ConfigMap(String),
    /// `secret:NAME`, key `install.yaml`, in the agent's namespace.
    Secret(String),
    /// `oci://REGISTRY/REPOSITORY:TAG[@sha256:…]`
    Oci(OciArtifact),
}

/// An OCI artifact reference, with its digest pin when one was given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OciArtifact {
    pub registry: String,
    pub repository: String,
    pub tag: Option<String>,
    pub digest: Option<String>,
}

impl OciArtifact {
    fn tagged(&self) -> Option<Reference> {
        let tag = self.tag.clone()?;
        Some(Reference::with_tag(
            self.registry.clone(),
            self.repository.clone(),
            tag,
        ))
    }

    fn by_digest(&self, digest: &str) -> Reference {
        Reference::with_digest(
            self.registry.clone(),
            self.repository.clone(),
            digest.to_owned(),
        )
    }
}

impl fmt::Display for BundleSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::File(path) => write!(f, "file:{}", path.display()),
            Self::ConfigMap(name) => write!(f, "configmap:{name}"),
            Self::Secret(name) => write!(f, "secret:{name}"),
            Self::Oci(a) => {
                write!(f, "oci://{}/{}", a.registry, a.repository)?;
                if let Some(tag) = &a.tag {
                    write!(f, ":{tag}")?;
                }
                if let Some(digest) = &a.digest {
                    write!(f, "@{digest}")?;
                }
                Ok(())
            }
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error(
    "{text:?} is not a bundle source: {problem} (use file:PATH, configmap:NAME, secret:NAME or \
     oci://REGISTRY/REPOSITORY:TAG[@sha256:DIGEST])"
)]
pub struct BadSource {
    text: String,
    problem: String,
}

impl FromStr for BundleSource {
    type Err = BadSource;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = |problem: &str| BadSource {
            text: text.to_owned(),
            problem: problem.to_owned(),
        };
        let non_empty = |rest: &str, what: &str| {
            if rest.is_empty() {
                Err(bad(&format!("no {what}")))
            } else {
                Ok(rest.to_owned())
            }
        };
        if let Some(path) = text.strip_prefix("file:") {
            return Ok(Self::File(non_empty(path, "path")?.into()));
        }
        if let Some(name) = text.strip_prefix("configmap:") {
            return Ok(Self::ConfigMap(non_empty(name, "ConfigMap name")?));
        }
        if let Some(name) = text.strip_prefix("secret:") {
            return Ok(Self::Secret(non_empty(name, "Secret name")?));
        }
        let Some(rest) = text.strip_prefix("oci://") else {
            return Err(bad("unknown scheme"));
        };
        // Without a tag, a reference means `latest`: a bundle source names its version.
        let last_segment = rest.rsplit('/').next().unwrap_or(rest);
        if !last_segment.contains([':', '@']) {
            return Err(bad("no tag or digest"));
        }
        let reference: Reference = rest
            .parse()
            .map_err(|err: oci_client::ParseError| bad(&err.to_string()))?;
        if let Some(digest) = reference.digest()
            && !digest.starts_with("sha256:")
        {
            return Err(bad("only sha256 digests are supported"));
        }
        Ok(Self::Oci(OciArtifact {
            registry: reference.registry().to_owned(),
            repository: reference.repository().to_owned(),
            tag: reference.tag().map(str::to_owned),
            digest: reference.digest().map(str::to_owned),
        }))
    }
}

/// A bundle as read from its source, before any check.
#[derive(Clone, Debug)]
pub struct Fetched {
    pub yaml: String,
    /// The OCI manifest digest, or `sha256:` of the YAML.
    pub digest: String,
    /// The artifact's `flux/` files (path, content): the distributions the operator ships,
    /// from which the agent knows the Flux releases. Empty for ConfigMap, Secret and file
    /// bundles, which hold `install.yaml` only.
    pub distributions: Vec<(String, String)>,
}

/// Why the bundle could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("reading bundle file {path}")]
    File {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("reading {kind} {namespace}/{name}")]
    Read {
        kind: &'static str,
        namespace: String,
        name: String,
        #[source]
        source: Box<kube::Error>,
    },

    #[error("{kind} {namespace}/{name} does not exist: create it with key {INSTALL_KEY}")]
    NotFound {
        kind: &'static str,
        namespace: String,
        name: String,
    },

    #[error("{kind} {namespace}/{name} has no key {INSTALL_KEY}")]
    NoKey {
        kind: &'static str,
        namespace: String,
        name: String,
    },

    #[error("the bundle in {what} is not UTF-8 text")]
    NotText { what: String },

    #[error("pull secret {namespace}/{name} is unusable: {problem}")]
    PullSecret {
        namespace: String,
        name: String,
        problem: String,
    },

    #[error("{step} of {artifact} failed: {message}")]
    Registry {
        step: &'static str,
        artifact: String,
        message: String,
    },

    #[error(
        "tag {tag} of {artifact} points at {actual}, not at the pinned digest {pinned}: the tag \
         was moved, or the pin is wrong"
    )]
    DigestMismatch {
        artifact: String,
        tag: String,
        pinned: String,
        actual: String,
    },

    #[error("{artifact} is not a flux-operator manifests artifact: {problem}")]
    Artifact { artifact: String, problem: String },
}

/// Reads bundles from the configured source.
#[derive(Clone)]
pub struct Fetcher {
    client: Client,
    namespace: String,
    pull_secret: Option<String>,
    plain_http: bool,
}

impl Fetcher {
    /// `namespace` holds ConfigMap/Secret sources and the pull secret; `plain_http` talks to
    /// the registry without TLS (local development registries only).
    pub fn new(
        client: Client,
        namespace: impl Into<String>,
        pull_secret: Option<String>,
        plain_http: bool,
    ) -> Self {
        Self {
            client,
            namespace: namespace.into(),
            pull_secret,
            plain_http,
        }
    }

    pub async fn fetch(&self, source: &BundleSource) -> Result<Fetched, SourceError> {
        match source {
            BundleSource::File(path) => {
                let bytes = tokio::fs::read(path)
                    .await
                    .map_err(|source| SourceError::File {
                        path: path.clone(),
                        source,
                    })?;
                text(bytes, || path.display().to_string())
            }
            BundleSource::ConfigMap(name) => {
                let api = Api::<ConfigMap>::namespaced(self.client.clone(), &self.namespace);
                let map = self.get(&api, "ConfigMap", name).await?;
                let yaml = map
                    .data
                    .and_then(|mut d| d.remove(INSTALL_KEY))
                    .ok_or_else(|| self.no_key("ConfigMap", name))?;
                Ok(Fetched {
                    digest: sha256(yaml.as_bytes()),
                    yaml,
                    distributions: Vec::new(),
                })
            }
            BundleSource::Secret(name) => {
                let api = Api::<Secret>::namespaced(self.client.clone(), &self.namespace);
                let secret = self.get(&api, "Secret", name).await?;
                let bytes = secret
                    .data
                    .and_then(|mut d| d.remove(INSTALL_KEY))
                    .ok_or_else(|| self.no_key("Secret", name))?;
                text(bytes.0, || format!("Secret {}/{name}", self.namespace))
            }
            BundleSource::Oci(artifact) => self.pull(source, artifact).await,
        }
    }

    async fn get<K>(&self, api: &Api<K>, kind: &'static str, name: &str) -> Result<K, SourceError>
    where
        K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        api.get_opt(name)
            .await
            .map_err(|source| SourceError::Read {
                kind,
                namespace: self.namespace.clone(),
                name: name.to_owned(),
                source: Box::new(source),
            })?
            .ok_or_else(|| SourceError::NotFound {
                kind,
                namespace: self.namespace.clone(),
                name: name.to_owned(),
            })
    }

    fn no_key(&self, kind: &'static str, name: &str) -> SourceError {
        SourceError::NoKey {
            kind,
            namespace: self.namespace.clone(),
            name: name.to_owned(),
        }
    }

    /// Pulls the OCI artifact: the digest to pull (the pin, checked against the tag), its
    /// manifest, its first layer within [`MAX_LAYER_BYTES`], and from that layer the install
    /// YAML and the Flux distributions.
    async fn pull(
        &self,
        source: &BundleSource,
        artifact: &OciArtifact,
    ) -> Result<Fetched, SourceError> {
        let name = source.to_string();
        let auth = self.registry_auth(&artifact.registry).await?;
        let client = Registry::new(
            self.plain_http,
            std::time::Duration::from_secs(10),
            std::time::Duration::from_secs(60),
        );
        let tag = artifact.tag.clone().unwrap_or_default();
        let digest = pinned_digest(&client, &auth, artifact, &name).await?;
        let reference = artifact.by_digest(&digest);
        let (raw, manifest_digest) = client
            .manifest(&reference, &auth, IMAGE_MANIFEST_TYPES, MAX_MANIFEST_BYTES)
            .await
            .map_err(registry_error(&name, &tag, "pulling the manifest"))?;
        let layer = first_layer(&raw, &name)?;
        let bytes = pull_layer(&client, &reference, &layer, &name).await?;
        let yaml = install_yaml_from_layer(&bytes).map_err(|problem| SourceError::Artifact {
            artifact: name.clone(),
            problem,
        })?;
        Ok(Fetched {
            yaml,
            digest: manifest_digest,
            distributions: distributions_from_layer(&bytes),
        })
    }

    async fn registry_auth(&self, registry: &str) -> Result<RegistryAuth, SourceError> {
        let Some(name) = &self.pull_secret else {
            return Ok(RegistryAuth::Anonymous);
        };
        let api = Api::<Secret>::namespaced(self.client.clone(), &self.namespace);
        let secret = self.get(&api, "Secret", name).await?;
        let problem = |problem: &str| SourceError::PullSecret {
            namespace: self.namespace.clone(),
            name: name.clone(),
            problem: problem.to_owned(),
        };
        let config = secret
            .data
            .and_then(|mut d| d.remove(".dockerconfigjson"))
            .ok_or_else(|| problem("no key .dockerconfigjson (create it with kubectl create secret docker-registry)"))?;
        registry_auth_from_docker_config(&config.0, registry).map_err(|p| problem(&p))
    }
}

/// How a registry's error in `step` of pulling `artifact` (tagged `tag`) is told: a manifest
/// that is not the one asked for as a moved tag, one over the bound as a bad artifact, anything
/// else as the step that failed.
fn registry_error(
    artifact: &str,
    tag: &str,
    step: &'static str,
) -> impl FnOnce(ManifestError) -> SourceError {
    let artifact = artifact.to_owned();
    let tag = tag.to_owned();
    move |err: ManifestError| match err {
        ManifestError::DigestMismatch { expected, actual } => SourceError::DigestMismatch {
            artifact,
            tag,
            pinned: expected,
            actual,
        },
        ManifestError::TooLarge { .. } => SourceError::Artifact {
            artifact,
            problem: err.to_string(),
        },
        err => SourceError::Registry {
            step,
            artifact,
            message: tenantflux_core::text::chain(&err),
        },
    }
}

/// The digest to pull: the pin, after checking that the tag (when given) still points at it,
/// so a moved tag is reported as such instead of silently ignored; else what the tag points at.
async fn pinned_digest(
    client: &Registry,
    auth: &RegistryAuth,
    artifact: &OciArtifact,
    name: &str,
) -> Result<String, SourceError> {
    let tag = artifact.tag.clone().unwrap_or_default();
    match (artifact.tagged(), &artifact.digest) {
        (Some(tagged), pinned) => {
            let actual = client
                .resolve(&tagged, auth, IMAGE_MANIFEST_TYPES, MAX_MANIFEST_BYTES)
                .await
                .map_err(registry_error(name, &tag, "resolving the tag"))?;
            if let Some(pinned) = pinned
                && *pinned != actual
            {
                return Err(SourceError::DigestMismatch {
                    artifact: name.to_owned(),
                    tag,
                    pinned: pinned.clone(),
                    actual,
                });
            }
            Ok(actual)
        }
        (None, Some(pinned)) => Ok(pinned.clone()),
        (None, None) => unreachable!("BundleSource::from_str refuses a reference without both"),
    }
}

/// The layer of the artifact's manifest (`raw`) that holds the bundle: the first, refused on
/// the manifest's word before any of it is downloaded when it declares more than
/// [`MAX_LAYER_BYTES`].
fn first_layer(raw: &[u8], name: &str) -> Result<OciDescriptor, SourceError> {
    let manifest: OciImageManifest =
        serde_json::from_slice(raw).map_err(|err| SourceError::Artifact {
            artifact: name.to_owned(),
            problem: format!("its manifest is not an OCI image manifest: {err}"),
        })?;
    let layer = manifest
        .layers
        .into_iter()
        .next()
        .ok_or_else(|| SourceError::Artifact {
            artifact: name.to_owned(),
            problem: "it has no layers".into(),
        })?;
    if u64::try_from(layer.size).map_or(true, |size| size > MAX_LAYER_BYTES) {
        return Err(SourceError::Artifact {
            artifact: name.to_owned(),
            problem: format!(
                "its layer {} is {} bytes, more than the {MAX_LAYER_BYTES} bytes (32 MiB) the agent downloads; nothing was downloaded",
                layer.digest, layer.size
            ),
        });
    }
    Ok(layer)
}

/// The layer's bytes. The writer holds a registry that sends more than the manifest declared
/// to the same limit.
async fn pull_layer(
    client: &Registry,
    reference: &Reference,
    layer: &OciDescriptor,
    name: &str,
) -> Result<Vec<u8>, SourceError> {
    let mut blob = crate::Limited::new(MAX_LAYER_BYTES);
    client
        .oci()
        .pull_blob(reference, layer, &mut blob)
        .await
        .map_err(|err| match blob.exceeded {
            true => SourceError::Artifact {
                artifact: name.to_owned(),
                problem: format!(
                    "the registry sent more than the {MAX_LAYER_BYTES} bytes (32 MiB) the agent downloads for layer {} ({} bytes declared)",
                    layer.digest, layer.size
                ),
            },
            false => SourceError::Registry {
                step: "pulling the layer",
                artifact: name.to_owned(),
                message: tenantflux_core::text::chain(&err),
            },
        })?;
    Ok(blob.bytes)
}

fn text(bytes: Vec<u8>, what: impl FnOnce() -> String) -> Result<Fetched, SourceError> {
    let digest = sha256(&bytes);
    let yaml = String::from_utf8(bytes).map_err(|_| SourceError::NotText { what: what() })?;
    Ok(Fetched {
        yaml,
        digest,
        distributions: Vec::new(),
    })
}

#[cfg(test)]
mod tests {

    use super::*;

    /// A manifest of `layers` (digest, declared size).
    fn manifest(layers: &[(&str, i64)]) -> Vec<u8> {
        let layers: Vec<_> = layers
            .iter()
            .map(|(digest, size)| {
                serde_json::json!({
                    "mediaType": "application/vnd.cncf.flux.content.v1.tar+gzip",
                    "digest": digest,
                    "size": size,
                })
            })
            .collect();
        serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.empty.v1+json",
                "digest": "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a",
                "size": 2,
            },
            "layers": layers,
        }))
        .unwrap()
    }

    #[test]
    fn the_bundle_is_the_first_layer_within_the_bound() {
        let name = "oci://r/op:v1";
        let layer = first_layer(&manifest(&[("sha256:a", 10), ("sha256:b", 20)]), name).unwrap();
        assert_eq!(layer.digest, "sha256:a");
        let problem = |raw: &[u8]| match first_layer(raw, name) {
            Err(SourceError::Artifact { artifact, problem }) => {
                assert_eq!(artifact, name);
                problem
            }
            other => panic!("{other:?}"),
        };
        assert_eq!(problem(&manifest(&[])), "it has no layers");
        assert!(
            problem(b"{}").starts_with("its manifest is not an OCI image manifest: "),
            "not a manifest"
        );
        let too_large = i64::try_from(MAX_LAYER_BYTES).unwrap() + 1;
        assert_eq!(
            problem(&manifest(&[("sha256:a", too_large)])),
            format!(
                "its layer sha256:a is {too_large} bytes, more than the {MAX_LAYER_BYTES} bytes (32 MiB) the agent downloads; nothing was downloaded"
            )
        );
        assert!(problem(&manifest(&[("sha256:a", -1)])).contains("is -1 bytes"));
    }

    #[test]
    fn a_registry_error_is_told_as_a_moved_tag_a_bad_artifact_or_the_step() {
        let moved = registry_error("oci://r/op:v1", "v1", "resolving the tag")(
            ManifestError::DigestMismatch {
                expected: "sha256:a".into(),
                actual: "sha256:b".into(),
            },
        );
        assert!(matches!(
            moved,
            SourceError::DigestMismatch { ref tag, ref pinned, ref actual, .. }
                if tag == "v1" && pinned == "sha256:a" && actual == "sha256:b"
        ));
        let large = registry_error("oci://r/op:v1", "v1", "pulling the manifest")(
            ManifestError::TooLarge {
                reference: "r/op@sha256:a".into(),
                what: "the body".into(),
                limit: 10,
            },
        );
        assert!(matches!(large, SourceError::Artifact { .. }), "{large:?}");
        let missing = registry_error("oci://r/op:v1", "v1", "pulling the manifest")(
            ManifestError::NotFound {
                reference: "r/op@sha256:a".into(),
            },
        );
        assert_eq!(
            missing.to_string(),
            "pulling the manifest of oci://r/op:v1 failed: the registry has no manifest r/op@sha256:a"
        );
    }

    #[test]
    fn sources_parse_and_print_back() {
        for text in [
            "file:/tmp/install.yaml",
            "configmap:flux-operator-bundle",
            "secret:flux-operator-bundle",
            "oci://127.0.0.1:5000/flux-operator-manifests:v0.58.1",
            "oci://ghcr.io/controlplaneio-fluxcd/flux-operator-manifests:v0.58.1@sha256:0123456789012345678901234567890123456789012345678901234567890123",
        ] {
            let source: BundleSource = text.parse().unwrap();
            assert_eq!(source.to_string(), text);
        }
        let BundleSource::Oci(artifact) = "oci://127.0.0.1:5000/flux-operator-manifests:v0.58.1"
            .parse()
            .unwrap()
        else {
            panic!("oci");
        };
        assert_eq!(artifact.registry, "127.0.0.1:5000");
        assert_eq!(artifact.repository, "flux-operator-manifests");
        assert_eq!(artifact.tag.as_deref(), Some("v0.58.1"));
        assert_eq!(artifact.digest, None);
    }

    #[test]
    fn bad_sources_say_what_to_write() {
        for (text, problem) in [
            ("install.yaml", "unknown scheme"),
            ("file:", "no path"),
            ("configmap:", "no ConfigMap name"),
            (
                "oci://ghcr.io/x/flux-operator-manifests",
                "no tag or digest",
            ),
        ] {
            let err = text.parse::<BundleSource>().unwrap_err().to_string();
            assert!(
                err.starts_with(&format!("{text:?} is not a bundle source: {problem}")),
                "{err}"
            );
            assert!(err.contains("use file:PATH"), "{err}");
        }
    }
}
