//! A flux-operator release read for review: an OCI manifests artifact (its manifest digest is
//! what agents compare, so it is computed here from the bytes received) or an install.yaml
//! (whose digest is the SHA-256 of the file, as agents compute it for ConfigMap, Secret and file
//! sources).

use std::{collections::BTreeSet, io::Read as _};

use anyhow::{Context as _, bail};
use oci_client::{Reference, manifest::OciImageManifest};
use serde_json::Value;
use tenantflux_core::{digest::sha256, review::Content};

use crate::channel;

/// The manifest media types a manifests artifact is pushed with.
const MANIFEST_TYPES: &[&str] = &[
    oci_client::manifest::OCI_IMAGE_MEDIA_TYPE,
    oci_client::manifest::IMAGE_MANIFEST_MEDIA_TYPE,
];
/// A manifests artifact's layer (flux-operator v0.59.0's is about 2 MiB compressed).
const MAX_LAYER_BYTES: i64 = 64 << 20;
const INSTALL_PATH: &str = "flux-operator/install.yaml";

pub async fn read(source: &str, plain_http: bool) -> anyhow::Result<Content> {
    let (yaml, digest, distributions) = match source.strip_prefix("oci://") {
        Some(reference) => pull(source, reference, plain_http).await?,
        None => {
            let bytes = std::fs::read(source).with_context(|| format!("reading {source}"))?;
            let digest = sha256(&bytes);
            let yaml = String::from_utf8(bytes).with_context(|| format!("{source} is not text"))?;
            (yaml, digest, BTreeSet::new())
        }
    };
    let objects: Vec<Value> = tenantflux_core::yaml::documents(&yaml)
        .with_context(|| format!("{source}: the install.yaml is not YAML"))?;
    let version = Content::stated_version(&objects).with_context(|| {
        format!("{source}: no flux-operator Deployment with a version (its image tag)")
    })?;
    Ok(Content {
        version,
        digest,
        source: source.to_owned(),
        objects,
        distributions,
    })
}

async fn pull(
    source: &str,
    reference: &str,
    plain_http: bool,
) -> anyhow::Result<(String, String, BTreeSet<String>)> {
    let reference: Reference = reference.parse().with_context(|| {
        format!("{source} is not an OCI reference (oci://REGISTRY/REPOSITORY:TAG)")
    })?;
    let client = channel::client(plain_http);
    let auth = channel::auth();
    let (raw, _) = client
        .pull_manifest_raw(&reference, &auth, MANIFEST_TYPES)
        .await
        .with_context(|| format!("pulling the manifest of {source}"))?;
    // What agents compare: the digest of the manifest's bytes, computed, not taken from the
    // registry's word.
    let digest = sha256(&raw);
    if let Some(pinned) = reference.digest()
        && pinned != digest
    {
        bail!("{source}: the registry sent a manifest of digest {digest}, not {pinned}");
    }
    let manifest: OciImageManifest = serde_json::from_slice(&raw)
        .with_context(|| format!("{source}: the manifest is not an OCI image manifest"))?;
    let Some(layer) = manifest.layers.first() else {
        bail!("{source}: the artifact has no layers");
    };
    if layer.size > MAX_LAYER_BYTES {
        bail!(
            "{source}: its layer is {} bytes, more than {MAX_LAYER_BYTES}",
            layer.size
        );
    }
    let by_digest = Reference::with_digest(
        reference.registry().to_owned(),
        reference.repository().to_owned(),
        digest.clone(),
    );
    let mut bytes = Vec::new();
    client
        .pull_blob(&by_digest, layer, &mut bytes)
        .await
        .with_context(|| format!("pulling the layer of {source}"))?;
    if sha256(&bytes) != layer.digest {
        bail!(
            "{source}: the layer's bytes do not have the digest {}",
            layer.digest
        );
    }
    let (yaml, distributions) = unpack(&bytes).with_context(|| format!("reading {source}"))?;
    Ok((yaml, digest, distributions))
}

/// `flux-operator/install.yaml` and the names of the `flux/vX.Y.Z/` distributions of a
/// manifests artifact's layer (a gzipped tarball).
fn unpack(layer: &[u8]) -> anyhow::Result<(String, BTreeSet<String>)> {
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(layer));
    let mut install = None;
    let mut distributions = BTreeSet::new();
    for entry in archive
        .entries()
        .context("the layer is not a gzipped tarball")?
    {
        let mut entry = entry.context("the layer's tarball is damaged")?;
        let path = entry
            .path()?
            .to_string_lossy()
            .trim_start_matches("./")
            .to_owned();
        if path == INSTALL_PATH {
            let mut text = String::new();
            entry
                .read_to_string(&mut text)
                .context("flux-operator/install.yaml is not text")?;
            install = Some(text);
        } else if let Some(rest) = path.strip_prefix("flux/")
            && let Some((version, _)) = rest.split_once('/')
            && version.starts_with('v')
        {
            distributions.insert(version.to_owned());
        }
    }
    let install = install.with_context(|| format!("the artifact holds no {INSTALL_PATH}"))?;
    Ok((install, distributions))
}
