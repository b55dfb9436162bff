//! The policy channel from the platform's side: `policy publish` pushes a signed policy to
//! `oci://REGISTRY/REPOSITORY:TAG` as an OCI artifact (its own `artifactType`, the empty
//! config, the envelope as its one layer), and `fleet status --channel` reads what the
//! channel holds now. Registry credentials come from `TENANTFLUX_REGISTRY_USERNAME` and
//! `TENANTFLUX_REGISTRY_PASSWORD` (never from flags, which other users of the machine see).

use std::collections::BTreeMap;

use anyhow::{Context as _, bail};
use oci_client::{
    Reference,
    client::{ClientConfig, ClientProtocol, Config, ImageLayer},
    manifest::{OCI_IMAGE_MEDIA_TYPE, OciImageManifest},
    secrets::RegistryAuth,
};
use tenantflux_core::policy::channel::{
    ARTIFACT_TYPE, Channel, EMPTY_CONFIG_MEDIA_TYPE, KEYRING_ARTIFACT_TYPE,
    KEYRING_LAYER_MEDIA_TYPE, KEYRING_LAYER_TITLE, LAYER_MEDIA_TYPE, LAYER_TITLE, MAX_LAYER_BYTES,
    MAX_MANIFEST_BYTES,
};

pub const USERNAME_ENV: &str = "TENANTFLUX_REGISTRY_USERNAME";
pub const PASSWORD_ENV: &str = "TENANTFLUX_REGISTRY_PASSWORD";

pub(crate) fn auth() -> RegistryAuth {
    match (std::env::var(USERNAME_ENV), std::env::var(PASSWORD_ENV)) {
        (Ok(user), Ok(password)) if !user.is_empty() => RegistryAuth::Basic(user, password),
        _ => RegistryAuth::Anonymous,
    }
}

pub(crate) fn client(plain_http: bool) -> oci_client::Client {
    oci_client::Client::new(ClientConfig {
        protocol: if plain_http {
            ClientProtocol::Http
        } else {
            ClientProtocol::Https
        },
        connect_timeout: Some(std::time::Duration::from_secs(10)),
        read_timeout: Some(std::time::Duration::from_secs(30)),
        ..ClientConfig::default()
    })
}

fn tagged(channel: &Channel) -> Reference {
    Reference::with_tag(
        channel.registry.clone(),
        channel.repository.clone(),
        channel.tag.clone(),
    )
}

/// Where the keyring of `channel` is published: its tag with `-keyring` appended.
pub fn keyring_channel(channel: &Channel) -> Channel {
    Channel {
        tag: tenantflux_core::policy::channel::keyring_tag(&channel.tag),
        ..channel.clone()
    }
}

/// The artifact for `signed` (a SignedPolicy envelope's text), as it is pushed.
pub fn artifact(signed: &str, generation: u64) -> (ImageLayer, Config, OciImageManifest) {
    typed_artifact(
        signed,
        (ARTIFACT_TYPE, LAYER_MEDIA_TYPE, LAYER_TITLE),
        Some(("io.tenantflux.policy.generation", generation)),
    )
}

fn typed_artifact(
    signed: &str,
    (artifact_type, layer_type, title): (&str, &str, &str),
    annotation: Option<(&str, u64)>,
) -> (ImageLayer, Config, OciImageManifest) {
    let layer = ImageLayer::new(
        signed.as_bytes().to_vec(),
        layer_type.to_owned(),
        Some(BTreeMap::from([(
            "org.opencontainers.image.title".to_owned(),
            title.to_owned(),
        )])),
    );
    let config = Config::new(b"{}".to_vec(), EMPTY_CONFIG_MEDIA_TYPE.to_owned(), None);
    let mut manifest = OciImageManifest::build(
        std::slice::from_ref(&layer),
        &config,
        annotation.map(|(key, value)| BTreeMap::from([(key.to_owned(), value.to_string())])),
    );
    manifest.media_type = Some(OCI_IMAGE_MEDIA_TYPE.to_owned());
    manifest.artifact_type = Some(artifact_type.to_owned());
    (layer, config, manifest)
}

/// Pushes a signed keyring to `target` (see [`keyring_channel`]); returns its digest.
pub async fn publish_keyring(
    target: &Channel,
    plain_http: bool,
    signed: &str,
) -> anyhow::Result<String> {
    let (layer, config, manifest) = typed_artifact(
        signed,
        (
            KEYRING_ARTIFACT_TYPE,
            KEYRING_LAYER_MEDIA_TYPE,
            KEYRING_LAYER_TITLE,
        ),
        None,
    );
    push(target, plain_http, layer, config, manifest).await
}

async fn push(
    channel: &Channel,
    plain_http: bool,
    layer: ImageLayer,
    config: Config,
    manifest: OciImageManifest,
) -> anyhow::Result<String> {
    let client = client(plain_http);
    let reference = tagged(channel);
    client
        .push(&reference, &[layer], config, &auth(), Some(manifest))
        .await
        .with_context(|| format!("pushing to {channel}"))?;
    client
        .fetch_manifest_digest(&reference, &auth())
        .await
        .with_context(|| format!("reading back the digest of {channel}"))
}

/// Pushes `signed` to `channel`; returns the manifest digest the tag now points at.
pub async fn publish(
    channel: &Channel,
    plain_http: bool,
    signed: &str,
    generation: u64,
) -> anyhow::Result<String> {
    if signed.len() as u64 > MAX_LAYER_BYTES {
        bail!(
            "the signed policy is {} bytes; agents download at most {MAX_LAYER_BYTES}",
            signed.len()
        );
    }
    let (layer, config, manifest) = artifact(signed, generation);
    push(channel, plain_http, layer, config, manifest).await
}

/// What the channel holds now: its digest and the envelope's text (within the agents'
/// limits, so the platform sees what they would).
pub async fn read(channel: &Channel, plain_http: bool) -> anyhow::Result<(String, String)> {
    let client = client(plain_http);
    let auth = auth();
    let (raw, digest) = client
        .pull_manifest_raw(&tagged(channel), &auth, &[OCI_IMAGE_MEDIA_TYPE])
        .await
        .with_context(|| format!("reading {channel}"))?;
    if raw.len() > MAX_MANIFEST_BYTES {
        bail!("{channel}: the manifest is {} bytes", raw.len());
    }
    let manifest: OciImageManifest = serde_json::from_slice(&raw)
        .with_context(|| format!("{channel}: the manifest is not an OCI image manifest"))?;
    let (Some(ARTIFACT_TYPE), [layer]) = (manifest.artifact_type.as_deref(), &manifest.layers[..])
    else {
        bail!("{channel} does not hold a policy artifact ({ARTIFACT_TYPE} with one layer)");
    };
    if u64::try_from(layer.size).map_or(true, |s| s > MAX_LAYER_BYTES) {
        bail!("{channel}: the layer is {} bytes", layer.size);
    }
    let mut bytes = Vec::new();
    let by_digest = Reference::with_digest(
        channel.registry.clone(),
        channel.repository.clone(),
        digest.clone(),
    );
    client
        .pull_blob(&by_digest, layer, &mut bytes)
        .await
        .with_context(|| format!("reading the layer of {channel}"))?;
    let text = String::from_utf8(bytes).with_context(|| format!("{channel}: not UTF-8"))?;
    Ok((digest, text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_artifact_has_its_type_the_empty_config_and_one_layer() {
        let (layer, config, manifest) = artifact("kind: SignedPolicy\n", 7);
        let json = serde_json::to_value(&manifest).unwrap();
        assert_eq!(json["artifactType"], ARTIFACT_TYPE);
        assert_eq!(json["mediaType"], OCI_IMAGE_MEDIA_TYPE);
        assert_eq!(json["config"]["mediaType"], EMPTY_CONFIG_MEDIA_TYPE);
        assert_eq!(json["config"]["size"], 2);
        assert_eq!(json["layers"].as_array().unwrap().len(), 1);
        assert_eq!(json["layers"][0]["mediaType"], LAYER_MEDIA_TYPE);
        assert_eq!(
            json["layers"][0]["annotations"]["org.opencontainers.image.title"],
            LAYER_TITLE
        );
        assert_eq!(json["annotations"]["io.tenantflux.policy.generation"], "7");
        assert_eq!(&layer.data[..], b"kind: SignedPolicy\n");
        assert_eq!(&config.data[..], b"{}");
    }
}
