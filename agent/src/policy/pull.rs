//! Pulling the policy from a channel in an OCI registry (`--policy-source
//! oci://REGISTRY/REPOSITORY:TAG`), so that the platform publishes once and every agent,
//! including one created later, takes it on its own.
//!
//! On a jittered interval the agent asks the registry for the tag's digest (a HEAD of the
//! manifest: no download while it is unchanged); when it changes, it fetches that manifest
//! and its one layer by digest, with size limits, and offers the envelope to the store
//! exactly as a push is offered (`PolicyStore::push`): the same signature, cluster and
//! generation checks, the same record, the same refusals. Push and pull therefore converge:
//! the highest valid generation wins and an equal generation must be byte-identical.
//!
//! The registry is whoever can push to the tag. An older policy tagged over the channel is
//! refused as a rollback and reported; a registry that does not answer changes nothing (the
//! last verified policy stays in force) and is reported with the time it stopped answering.

use std::{
    hash::{BuildHasher as _, Hasher as _},
    sync::Arc,
    time::{Duration, SystemTime},
};

use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client};
use oci_client::{
    Reference,
    manifest::{OCI_IMAGE_MEDIA_TYPE, OciImageManifest},
    secrets::RegistryAuth,
};
use tenantflux_core::{
    policy::channel::{
        ARTIFACT_TYPE, Channel, KEYRING_ARTIFACT_TYPE, KEYRING_LAYER_MEDIA_TYPE, LAYER_MEDIA_TYPE,
        MAX_LAYER_BYTES, MAX_MANIFEST_BYTES, docker_config_credentials, keyring_tag,
    },
    text::chain,
};
use tokio_util::sync::CancellationToken;

use super::store::{KeyringRefused, PolicyStore, PushError};
use crate::{
    oci::ManifestError,
    reconcile::{Next, Wake},
};

/// What `--policy-source` and its companions configure.
#[derive(Clone, Debug)]
pub struct PullConfig {
    pub channel: Channel,
    /// The mean time between two checks of the tag; each wait is jittered ±20 %.
    pub interval: Duration,
    pub plain_http: bool,
    /// A `kubernetes.io/dockerconfigjson` Secret in the agent's namespace.
    pub pull_secret: Option<String>,
    pub namespace: String,
}

/// Why one check of the channel did not give a policy to offer.
#[derive(Debug)]
enum Fetch {
    /// The registry did not answer, or not as a registry: retried at the next check.
    Unanswered(String),
    /// The registry answered with something that is not a policy artifact: refused until
    /// the tag moves.
    Refused(String),
}

struct Puller {
    config: PullConfig,
    client: Client,
    store: Arc<PolicyStore>,
    registry: crate::oci::Registry,
    /// The digest last offered to the store (or refused), so an unchanged tag costs one HEAD.
    seen: Option<String>,
    /// The same for the keyring's tag (`TAG-keyring`), checked first when the agent has
    /// root keys, so that a rotation (new keyring, policy by the new key) lands in one check.
    seen_keyring: Option<String>,
}

/// The two artifacts a channel may hold.
#[derive(Clone, Copy)]
enum Kind {
    Policy,
    Keyring,
}

impl Kind {
    fn types(self) -> (&'static str, &'static str) {
        match self {
            Self::Policy => (ARTIFACT_TYPE, LAYER_MEDIA_TYPE),
            Self::Keyring => (KEYRING_ARTIFACT_TYPE, KEYRING_LAYER_MEDIA_TYPE),
        }
    }
}

/// Checks the channel now and then every jittered interval, until the shutdown.
pub async fn run(
    client: Client,
    store: Arc<PolicyStore>,
    config: PullConfig,
    shutdown: CancellationToken,
) {
    store.pull_from(config.channel.to_string());
    // The stored copy is weighed first: a pulled policy is offered once it is in force.
    let mut held = store.subscribe();
    let loaded = async { held.wait_for(|h| h.loaded).await.is_ok() };
    if crate::until_woken(&shutdown, None, loaded).await.is_none() {
        return;
    }
    drop(held);
    let registry = crate::oci::Registry::new(
        config.plain_http,
        Duration::from_secs(10),
        Duration::from_secs(30),
    );
    let puller = Puller {
        config,
        client,
        store,
        registry,
        seen: None,
        seen_keyring: None,
    };
    crate::reconcile::run(puller, futures::stream::pending(), &shutdown).await;
}

impl crate::reconcile::Pass for Puller {
    type Event = ();

    /// Checks the channel; again after a jittered interval (a failure is reported by the check
    /// and tried again then too).
    async fn pass(&mut self, _: Wake<()>) -> Next {
        self.check().await;
        Next::after(jittered(self.config.interval))
    }
}

/// `interval` × a random factor in [0.8, 1.2), so that agents started together do not ask
/// together.
fn jittered(interval: Duration) -> Duration {
    let random = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    let factor = 0.8 + 0.4 * (random as f64 / u64::MAX as f64);
    interval.mul_f64(factor)
}

impl Puller {
    fn channel(&self) -> String {
        self.config.channel.to_string()
    }

    fn not_answering_prefix(&self) -> String {
        format!("policy source {} has not answered since ", self.channel())
    }

    fn keyring_channel(&self) -> Channel {
        Channel {
            tag: keyring_tag(&self.config.channel.tag),
            ..self.config.channel.clone()
        }
    }

    /// The keyring's tag: absent is normal (no keyring published: the installed key or the
    /// keyring held stays); a new digest is fetched and offered to the store.
    async fn check_keyring(&mut self) {
        let channel = self.keyring_channel();
        let digest = match self.head(&channel).await {
            Ok(Some(digest)) => digest,
            // Not published, or the registry does not answer (the policy's check says so).
            Ok(None) | Err(_) => return,
        };
        if self.seen_keyring.as_deref() == Some(digest.as_str()) {
            return;
        }
        let text = match self.fetch(&channel, &digest, Kind::Keyring).await {
            Ok(text) => text,
            Err(Fetch::Unanswered(_)) => return,
            Err(Fetch::Refused(reason)) => {
                self.seen_keyring = Some(digest.clone());
                self.store.report(format!(
                    "the keyring at {channel} ({digest}) is refused: {reason}; the agent keeps the keyring it holds"
                ));
                return;
            }
        };
        self.seen_keyring = Some(digest.clone());
        match self.store.accept_keyring(&text).await {
            // A policy refused under the old keyring (an unknown key) may pass now.
            Ok(true) => self.seen = None,
            Ok(false) => {}
            Err(err @ KeyringRefused::Store(_)) => {
                self.seen_keyring = None;
                tracing::warn!(error = %chain(&err), %channel, "storing the pulled keyring");
            }
            Err(err) => self.store.report(format!(
                "the keyring at {channel} ({digest}) is refused: {}; the agent keeps the keyring it holds",
                chain(&err)
            )),
        }
    }

    async fn check(&mut self) {
        if self.store.has_roots() {
            self.check_keyring().await;
        }
        let now = SystemTime::now();
        let channel = self.config.channel.clone();
        let digest = match self.head(&channel).await {
            Ok(Some(digest)) => digest,
            Ok(None) => {
                self.unanswered(
                    now,
                    "the registry has no such tag: nothing was published to it yet".into(),
                );
                return;
            }
            Err(Fetch::Unanswered(reason) | Fetch::Refused(reason)) => {
                self.unanswered(now, reason);
                return;
            }
        };
        let prefix = self.not_answering_prefix();
        self.store.clear_problems(|p| p.starts_with(&prefix));
        self.store.set_source(|s| {
            s.digest = Some(digest.clone());
            s.checked_at = Some(now);
            s.unanswered_since = None;
            s.error = None;
        });
        if self.seen.as_deref() == Some(digest.as_str()) {
            return;
        }
        let text = match self.fetch(&channel, &digest, Kind::Policy).await {
            Ok(text) => text,
            Err(Fetch::Unanswered(reason)) => {
                self.unanswered(now, reason);
                return;
            }
            Err(Fetch::Refused(reason)) => {
                self.seen = Some(digest.clone());
                self.refused(&digest, reason);
                return;
            }
        };
        self.seen = Some(digest.clone());
        match self.store.push(&text).await {
            Ok(response) if response.unchanged => {}
            Ok(response) => tracing::info!(
                channel = %self.config.channel,
                digest,
                generation = response.generation,
                previous_generation = response.previous_generation,
                "pulled a new policy"
            ),
            // Not the artifact's fault: offer it again at the next check.
            Err(err @ (PushError::Store(_) | PushError::NoIdentity)) => {
                self.seen = None;
                tracing::warn!(error = %chain(&err), channel = %self.config.channel, "offering the pulled policy");
            }
            Err(err @ PushError::Stale { .. }) => self.refused(
                &digest,
                format!(
                    "{} (an older policy was tagged over the channel: a rollback, refused)",
                    chain(&err)
                ),
            ),
            Err(err) => self.refused(&digest, chain(&err)),
        }
    }

    fn unanswered(&self, now: SystemTime, reason: String) {
        let mut since = now;
        self.store.set_source(|s| {
            since = *s.unanswered_since.get_or_insert(now);
            s.checked_at = Some(now);
            s.error = Some(reason.clone());
        });
        let since = tenantflux_core::policy::signing::format_timestamp(
            since
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX)),
        );
        let prefix = self.not_answering_prefix();
        // One problem per outage, its start in the text: replace the line of an earlier one.
        self.store.clear_problems(|p| {
            p.starts_with(&prefix) && !p.starts_with(&format!("{prefix}{since}"))
        });
        self.store.report(format!(
            "{prefix}{since}; the agent keeps the last verified policy ({reason})"
        ));
    }

    fn refused(&self, digest: &str, reason: String) {
        self.store.set_source(|s| s.error = Some(reason.clone()));
        self.store.report(format!(
            "the policy at {} ({digest}) is refused: {reason}; the agent keeps the policy it holds",
            self.channel()
        ));
    }

    async fn auth(&self) -> Result<RegistryAuth, Fetch> {
        let Some(name) = &self.config.pull_secret else {
            return Ok(RegistryAuth::Anonymous);
        };
        let problem = |what: String| {
            Fetch::Unanswered(format!(
                "pull Secret {}/{name}: {what}",
                self.config.namespace
            ))
        };
        let secret = Api::<Secret>::namespaced(self.client.clone(), &self.config.namespace)
            .get_opt(name)
            .await
            .map_err(|err| problem(chain(&err)))?
            .ok_or_else(|| problem("not found".into()))?;
        let config = secret
            .data
            .and_then(|mut d| d.remove(".dockerconfigjson"))
            .ok_or_else(|| {
                problem("no key .dockerconfigjson (create it with kubectl create secret docker-registry)".into())
            })?;
        let (user, password) =
            docker_config_credentials(&config.0, &self.config.channel.registry).map_err(problem)?;
        Ok(RegistryAuth::Basic(user, password))
    }

    /// The digest the tag points at (a HEAD; a GET within the manifest limit when the
    /// registry sends no digest header); none when the registry has no such tag.
    async fn head(&self, channel: &Channel) -> Result<Option<String>, Fetch> {
        let auth = self.auth().await?;
        let tagged = Reference::with_tag(
            channel.registry.clone(),
            channel.repository.clone(),
            channel.tag.clone(),
        );
        let accept = [OCI_IMAGE_MEDIA_TYPE];
        match self
            .registry
            .resolve(&tagged, &auth, &accept, MAX_MANIFEST_BYTES)
            .await
        {
            Ok(digest) => Ok(Some(digest)),
            Err(ManifestError::NotFound { .. }) => Ok(None),
            Err(err) => Err(manifest_problem(err)),
        }
    }

    /// The envelope in the artifact `digest`, within the size limits.
    async fn fetch(&self, channel: &Channel, digest: &str, kind: Kind) -> Result<String, Fetch> {
        let (artifact_type, layer_type) = kind.types();
        let auth = self.auth().await?;
        let reference = Reference::with_digest(
            channel.registry.clone(),
            channel.repository.clone(),
            digest.to_owned(),
        );
        let (raw, _) = self
            .registry
            .manifest(
                &reference,
                &auth,
                &[OCI_IMAGE_MEDIA_TYPE],
                MAX_MANIFEST_BYTES,
            )
            .await
            .map_err(manifest_problem)?;
        let manifest: OciImageManifest = serde_json::from_slice(&raw)
            .map_err(|_| Fetch::Refused("its manifest is not an OCI image manifest".into()))?;
        if manifest.artifact_type.as_deref() != Some(artifact_type) {
            return Err(Fetch::Refused(format!(
                "its artifactType is {}, not {artifact_type} (publish it with kubectl tenantflux policy publish)",
                tenantflux_core::text::quote(manifest.artifact_type.as_deref().unwrap_or(""))
            )));
        }
        let [layer] = manifest.layers.as_slice() else {
            return Err(Fetch::Refused(format!(
                "it has {} layers, not one",
                manifest.layers.len()
            )));
        };
        if layer.media_type != layer_type {
            return Err(Fetch::Refused(format!(
                "its layer is {}, not {layer_type}",
                tenantflux_core::text::quote(&layer.media_type)
            )));
        }
        // Refused on the manifest's word before a byte of the layer is read; the writer
        // holds a registry that sends more than it declared to the same limit.
        if u64::try_from(layer.size).map_or(true, |size| size > MAX_LAYER_BYTES) {
            return Err(Fetch::Refused(format!(
                "its layer {} is {} bytes, more than the {MAX_LAYER_BYTES} bytes a signed policy may be; nothing was downloaded",
                layer.digest, layer.size
            )));
        }
        let mut blob = crate::Limited::new(MAX_LAYER_BYTES);
        self.registry
            .oci()
            .pull_blob(&reference, layer, &mut blob)
            .await
            .map_err(|err| match blob.exceeded {
                true => Fetch::Refused(format!(
                    "the registry sent more than the {MAX_LAYER_BYTES} bytes a signed policy may be"
                )),
                false => Fetch::Unanswered(chain(&err)),
            })?;
        String::from_utf8(blob.bytes)
            .map_err(|_| Fetch::Refused("its layer is not UTF-8 text".into()))
    }
}

/// A manifest the registry sent too large or not the one asked for is refused (its writer
/// holds the registry); anything else is an unanswered fetch, tried again.
fn manifest_problem(err: ManifestError) -> Fetch {
    match err {
        ManifestError::TooLarge { .. } | ManifestError::DigestMismatch { .. } => {
            Fetch::Refused(err.to_string())
        }
        err => Fetch::Unanswered(chain(&err)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_are_jittered_around_the_interval() {
        let interval = Duration::from_secs(300);
        let waits: Vec<Duration> = (0..200).map(|_| jittered(interval)).collect();
        assert!(
            waits
                .iter()
                .all(|w| *w >= Duration::from_secs(240) && *w < Duration::from_secs(360))
        );
        let distinct: std::collections::BTreeSet<_> = waits.iter().collect();
        assert!(distinct.len() > 150, "{} distinct waits", distinct.len());
    }
}
