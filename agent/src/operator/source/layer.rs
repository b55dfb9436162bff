//! The OCI artifact's layer (a gzipped tarball) read for what the agent needs of it, and
//! registry credentials from a Docker config.

use std::io::Read;

use oci_client::secrets::RegistryAuth;

use super::{ARTIFACT_PATH, MAX_LAYER_BYTES};

/// The most of `flux/` an artifact may hold (flux-operator v0.59.0's is 16 MiB for 30
/// distributions): beyond it the release list falls back to the embedded table.
const DISTRIBUTIONS_MAX: u64 = 128 << 20;

/// The `flux/` YAML files of the artifact's layer (path without `./`, content). A layer that
/// cannot be read, or holds more than [`DISTRIBUTIONS_MAX`], gives none: the install itself
/// only needs `install.yaml`, and the release list then comes from the embedded table.
pub fn distributions_from_layer(layer: &[u8]) -> Vec<(String, String)> {
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(layer));
    let Ok(entries) = archive.entries() else {
        return Vec::new();
    };
    let mut files = Vec::new();
    let mut total = 0;
    for entry in entries {
        let Ok(mut entry) = entry else {
            return Vec::new();
        };
        let Ok(path) = entry
            .path()
            .map(|p| p.to_string_lossy().trim_start_matches("./").to_owned())
        else {
            continue;
        };
        if !path.starts_with("flux/") || !path.ends_with(".yaml") {
            continue;
        }
        total += entry.size();
        if total > DISTRIBUTIONS_MAX {
            tracing::warn!(
                limit = DISTRIBUTIONS_MAX,
                "the artifact's flux/ holds more than the limit; Flux releases come from the embedded table"
            );
            return Vec::new();
        }
        let mut text = String::new();
        if entry.read_to_string(&mut text).is_ok() {
            files.push((path, text));
        }
    }
    files
}

/// `flux-operator/install.yaml` from the artifact's layer (a gzipped tarball, as `flux push
/// artifact` writes it).
pub fn install_yaml_from_layer(layer: &[u8]) -> Result<String, String> {
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(layer));
    let entries = archive
        .entries()
        .map_err(|err| format!("its layer is not a gzipped tarball: {err}"))?;
    for entry in entries {
        let entry = entry.map_err(|err| format!("its layer is not a gzipped tarball: {err}"))?;
        let path = entry
            .path()
            .map_err(|err| format!("a tarball entry has a bad path: {err}"))?
            .to_string_lossy()
            .trim_start_matches("./")
            .to_owned();
        if path == ARTIFACT_PATH {
            // A small gzip can unpack to gigabytes: read no more than the limit, plus one
            // byte to tell "at the limit" from "over it".
            let mut bytes = Vec::new();
            entry
                .take(MAX_LAYER_BYTES + 1)
                .read_to_end(&mut bytes)
                .map_err(|err| format!("its layer is not a gzipped tarball: {err}"))?;
            if bytes.len() as u64 > MAX_LAYER_BYTES {
                return Err(format!(
                    "its {ARTIFACT_PATH} unpacks to more than the {MAX_LAYER_BYTES} bytes (32 MiB) the agent reads"
                ));
            }
            return String::from_utf8(bytes)
                .map_err(|err| format!("{ARTIFACT_PATH} is not UTF-8 text: {err}"));
        }
    }
    Err(format!("its layer has no {ARTIFACT_PATH}"))
}

/// Credentials for `registry` from a `.dockerconfigjson` document (the parsing is
/// `tenantflux_core`'s, shared with the policy channel's pull Secret).
pub fn registry_auth_from_docker_config(
    json: &[u8],
    registry: &str,
) -> Result<RegistryAuth, String> {
    tenantflux_core::policy::channel::docker_config_credentials(json, registry)
        .map(|(user, password)| RegistryAuth::Basic(user, password))
}

#[cfg(test)]
mod tests {
    use base64::Engine as _;

    use super::*;

    fn tarball(path: &str, content: &str) -> Vec<u8> {
        let mut builder = tar::Builder::new(flate2::write::GzEncoder::new(
            Vec::new(),
            flate2::Compression::default(),
        ));
        let mut header = tar::Header::new_gnu();
        header.set_size(content.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        builder
            .append_data(&mut header, path, content.as_bytes())
            .unwrap();
        builder.into_inner().unwrap().finish().unwrap()
    }

    #[test]
    fn an_install_yaml_that_unpacks_past_the_limit_is_refused() {
        let huge = " ".repeat(MAX_LAYER_BYTES as usize + 1);
        let layer = tarball(ARTIFACT_PATH, &huge);
        assert!(layer.len() < 1024 * 1024, "the layer itself is small");
        let err = install_yaml_from_layer(&layer).unwrap_err();
        assert_eq!(
            err,
            "its flux-operator/install.yaml unpacks to more than the 33554432 bytes (32 MiB) the agent reads"
        );
    }

    #[test]
    fn the_install_yaml_comes_out_of_the_artifact_layer() {
        let yaml = "kind: Namespace\n";
        assert_eq!(
            install_yaml_from_layer(&tarball("flux-operator/install.yaml", yaml)).unwrap(),
            yaml
        );
        assert_eq!(
            install_yaml_from_layer(&tarball("./flux-operator/install.yaml", yaml)).unwrap(),
            yaml
        );
        assert_eq!(
            install_yaml_from_layer(&tarball("flux/install.yaml", yaml)).unwrap_err(),
            "its layer has no flux-operator/install.yaml"
        );
        assert!(
            install_yaml_from_layer(b"not gzip")
                .unwrap_err()
                .starts_with("its layer is not a gzipped tarball")
        );
    }

    #[test]
    fn the_distributions_come_out_of_the_artifact_layer() {
        let mut builder = tar::Builder::new(flate2::write::GzEncoder::new(
            Vec::new(),
            flate2::Compression::fast(),
        ));
        for (path, content) in [
            ("flux-operator/install.yaml", "kind: Namespace\n"),
            (
                "./flux/v2.9.4/source-controller.yaml",
                "kind: CustomResourceDefinition\n",
            ),
            ("flux/v2.9.4/README.md", "not yaml"),
            ("flux-images/v2.9.4.yaml", "images: []\n"),
        ] {
            let mut header = tar::Header::new_gnu();
            header.set_size(content.len() as u64);
            header.set_mode(0o644);
            header.set_cksum();
            builder
                .append_data(&mut header, path, content.as_bytes())
                .unwrap();
        }
        let layer = builder.into_inner().unwrap().finish().unwrap();
        assert_eq!(
            distributions_from_layer(&layer),
            [(
                "flux/v2.9.4/source-controller.yaml".to_owned(),
                "kind: CustomResourceDefinition\n".to_owned()
            )]
        );
        assert!(distributions_from_layer(b"not gzip").is_empty());
    }

    #[test]
    fn docker_config_gives_basic_auth_for_the_registry() {
        let encoded = base64::engine::general_purpose::STANDARD.encode("robot:s3cret");
        let json = format!(
            r#"{{"auths": {{"https://registry.local:5000": {{"auth": "{encoded}"}}, "ghcr.io": {{"username": "u", "password": "p"}}}}}}"#
        );
        let auth = registry_auth_from_docker_config(json.as_bytes(), "registry.local:5000");
        assert!(matches!(auth, Ok(RegistryAuth::Basic(u, p)) if u == "robot" && p == "s3cret"));
        let auth = registry_auth_from_docker_config(json.as_bytes(), "ghcr.io");
        assert!(matches!(auth, Ok(RegistryAuth::Basic(u, p)) if u == "u" && p == "p"));
        assert_eq!(
            registry_auth_from_docker_config(json.as_bytes(), "quay.io").unwrap_err(),
            "it has no credentials for registry quay.io"
        );
        assert!(
            registry_auth_from_docker_config(b"{", "x")
                .unwrap_err()
                .starts_with(".dockerconfigjson is not valid JSON")
        );
    }
}
