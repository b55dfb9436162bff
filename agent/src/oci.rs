//! Manifests read from an OCI registry with a bound on what is read.
//!
//! oci-client reads a manifest response whole before its caller can look at the size, and its
//! tag lookup falls back to such a GET when the registry sends no digest header, so a registry
//! that answers with gigabytes (whoever controls it, or the network path to a plain-HTTP one)
//! would take the agent's memory and crash it in a loop, stopping everything the agent does on
//! its last verified policy. Here every manifest request is the agent's own: the
//! Content-Length is judged before the body, the body is read chunk by chunk and dropped at
//! the limit, and the digest is checked. oci-client still does what has a bound of its own:
//! the registry's token exchange, and blobs (which the callers pull into a limited writer).

use std::{sync::Mutex, time::Duration};

use oci_client::{
    Reference, RegistryOperation,
    client::{ClientConfig, ClientProtocol},
    manifest::{IMAGE_MANIFEST_MEDIA_TYPE, OCI_IMAGE_MEDIA_TYPE},
    secrets::RegistryAuth,
};
use reqwest::{StatusCode, header};

use tenantflux_core::digest::sha256;

/// The media types of a single image manifest (OCI's and Docker's v2): what the agent's
/// artifacts are.
pub const IMAGE_MANIFEST_TYPES: &[&str] = &[OCI_IMAGE_MEDIA_TYPE, IMAGE_MANIFEST_MEDIA_TYPE];

/// Why a manifest could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("the registry has no manifest {reference}")]
    NotFound { reference: String },

    #[error(
        "the manifest {reference} is more than the {limit} bytes the agent reads ({what}); \
         it stopped reading"
    )]
    TooLarge {
        reference: String,
        what: String,
        limit: usize,
    },

    #[error("the registry sent manifest {actual} for {expected}")]
    DigestMismatch { expected: String, actual: String },

    #[error("the registry answered {status} for manifest {reference}")]
    Status {
        reference: String,
        status: StatusCode,
    },

    #[error("reaching the registry for manifest {reference}")]
    Transport {
        reference: String,
        #[source]
        source: reqwest::Error,
    },

    #[error("authenticating to the registry for manifest {reference}")]
    Auth {
        reference: String,
        #[source]
        source: oci_client::errors::OciDistributionError,
    },
}

/// One registry client: oci-client for tokens and blobs, the agent's own requests for
/// manifests.
pub struct Registry {
    oci: oci_client::Client,
    http: reqwest::Client,
    plain_http: bool,
    /// The last bearer token the registry's token service gave, by registry and repository;
    /// renewed when the registry answers 401.
    token: Mutex<Option<(String, String)>>,
}

impl Registry {
    pub fn new(plain_http: bool, connect_timeout: Duration, read_timeout: Duration) -> Self {
        let oci = oci_client::Client::new(ClientConfig {
            protocol: if plain_http {
                ClientProtocol::Http
            } else {
                ClientProtocol::Https
            },
            connect_timeout: Some(connect_timeout),
            read_timeout: Some(read_timeout),
            ..ClientConfig::default()
        });
        let http = reqwest::Client::builder()
            .connect_timeout(connect_timeout)
            .read_timeout(read_timeout)
            .build()
            .unwrap_or_default();
        Self {
            oci,
            http,
            plain_http,
            token: Mutex::new(None),
        }
    }

    /// The oci-client of this registry, for blobs.
    pub fn oci(&self) -> &oci_client::Client {
        &self.oci
    }

    /// The digest `reference` (a tag) points at: the `Docker-Content-Digest` of a HEAD, or,
    /// when the registry sends none, the digest of the manifest read within `limit`.
    pub async fn resolve(
        &self,
        reference: &Reference,
        auth: &RegistryAuth,
        accept: &[&str],
        limit: usize,
    ) -> Result<String, ManifestError> {
        let response = self
            .send(reqwest::Method::HEAD, reference, auth, accept)
            .await?;
        let digest = response
            .headers()
            .get("docker-content-digest")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        match digest {
            Some(digest) => Ok(digest),
            None => Ok(self.manifest(reference, auth, accept, limit).await?.1),
        }
    }

    /// The manifest `reference` names, at most `limit` bytes, and its digest (checked against
    /// the reference's when it has one).
    pub async fn manifest(
        &self,
        reference: &Reference,
        auth: &RegistryAuth,
        accept: &[&str],
        limit: usize,
    ) -> Result<(Vec<u8>, String), ManifestError> {
        let mut response = self
            .send(reqwest::Method::GET, reference, auth, accept)
            .await?;
        let too_large = |what: String| ManifestError::TooLarge {
            reference: reference.whole(),
            what,
            limit,
        };
        if let Some(length) = response.content_length()
            && length > limit as u64
        {
            return Err(too_large(format!("Content-Length {length}")));
        }
        let mut body = Vec::new();
        while let Some(chunk) =
            response
                .chunk()
                .await
                .map_err(|source| ManifestError::Transport {
                    reference: reference.whole(),
                    source,
                })?
        {
            if body.len() + chunk.len() > limit {
                return Err(too_large("the registry sent more".to_owned()));
            }
            body.extend_from_slice(&chunk);
        }
        let actual = sha256(&body);
        if let Some(expected) = reference.digest()
            && expected != actual
        {
            return Err(ManifestError::DigestMismatch {
                expected: expected.to_owned(),
                actual,
            });
        }
        Ok((body, actual))
    }

    /// A manifest request with the registry's credentials: the cached bearer token, or a new
    /// one after a 401; Basic credentials as they are for a registry without a token service.
    async fn send(
        &self,
        method: reqwest::Method,
        reference: &Reference,
        auth: &RegistryAuth,
        accept: &[&str],
    ) -> Result<reqwest::Response, ManifestError> {
        // What oci-client's blob pulls of the same registry authenticate with.
        self.oci
            .store_auth_if_needed(reference.resolve_registry(), auth)
            .await;
        let key = format!(
            "{}/{}",
            reference.resolve_registry(),
            reference.repository()
        );
        let cached = self.cached_token(&key);
        let mut response = self
            .request(method.clone(), reference, auth, accept, cached.as_deref())
            .await?;
        if response.status() == StatusCode::UNAUTHORIZED {
            let token = self
                .oci
                .auth(reference, auth, RegistryOperation::Pull)
                .await
                .map_err(|source| ManifestError::Auth {
                    reference: reference.whole(),
                    source,
                })?;
            if let Ok(mut held) = self.token.lock() {
                *held = token.clone().map(|t| (key, t));
            }
            response = self
                .request(method, reference, auth, accept, token.as_deref())
                .await?;
        }
        match response.status() {
            status if status.is_success() => Ok(response),
            StatusCode::NOT_FOUND => Err(ManifestError::NotFound {
                reference: reference.whole(),
            }),
            status => Err(ManifestError::Status {
                reference: reference.whole(),
                status,
            }),
        }
    }

    fn cached_token(&self, key: &str) -> Option<String> {
        let held = self.token.lock().ok()?;
        held.as_ref()
            .filter(|(k, _)| k == key)
            .map(|(_, t)| t.clone())
    }

    async fn request(
        &self,
        method: reqwest::Method,
        reference: &Reference,
        auth: &RegistryAuth,
        accept: &[&str],
        token: Option<&str>,
    ) -> Result<reqwest::Response, ManifestError> {
        let mut request = self
            .http
            .request(method, manifest_url(reference, self.plain_http))
            .header(header::ACCEPT, accept.join(", "));
        request = match (token, auth) {
            (Some(token), _) => request.bearer_auth(token),
            (None, RegistryAuth::Basic(user, password)) => request.basic_auth(user, Some(password)),
            (None, _) => request,
        };
        request
            .send()
            .await
            .map_err(|source| ManifestError::Transport {
                reference: reference.whole(),
                source,
            })
    }
}

/// `SCHEME://REGISTRY/v2/REPOSITORY/manifests/DIGEST-OR-TAG`.
fn manifest_url(reference: &Reference, plain_http: bool) -> String {
    format!(
        "{}://{}/v2/{}/manifests/{}",
        if plain_http { "http" } else { "https" },
        reference.resolve_registry(),
        reference.repository(),
        reference
            .digest()
            .or_else(|| reference.tag())
            .unwrap_or("latest"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_urls_name_the_digest_before_the_tag() {
        let tagged = Reference::with_tag(
            "127.0.0.1:5000".into(),
            "tenantflux/policy".into(),
            "stable".into(),
        );
        assert_eq!(
            manifest_url(&tagged, true),
            "http://127.0.0.1:5000/v2/tenantflux/policy/manifests/stable"
        );
        let pinned = tagged.clone_with_digest(format!("sha256:{}", "a".repeat(64)));
        assert_eq!(
            manifest_url(&pinned, false),
            format!(
                "https://127.0.0.1:5000/v2/tenantflux/policy/manifests/sha256:{}",
                "a".repeat(64)
            )
        );
    }
}
