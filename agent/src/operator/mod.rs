//! The flux-operator install the agent owns, as a loop:
//!
//! wait until the API server answers `/readyz` (no timeout clock runs while the tenant control
//! plane comes up) → read the bundle → check it → apply CRDs, wait until Established → apply
//! the namespace, ServiceAccounts, RBAC, Services → apply the Deployment → remember what was
//! applied → prune what the new bundle dropped → wait until the Deployment has rolled out.
//!
//! Then it watches: the bundle source (a ConfigMap or Secret is watched, a file or OCI artifact
//! is read again every resync interval) and the operator Deployment (the runtime's shared
//! watch, which the status reads too), which is restored when someone edits, deletes or
//! replaces it. Every write is a server-side apply by field manager
//! `tenantflux-agent`, and every applied object carries label
//! `app.kubernetes.io/managed-by: tenantflux-agent`.
//!
//! A bundle that fails a check changes nothing: the previous install keeps running and the
//! phase is FAILED with the reason.

use std::{
    sync::Arc,
    time::{Duration, SystemTime},
};

use futures::{Stream, StreamExt};
use k8s_openapi::{
    api::{
        apps::v1::Deployment,
        core::v1::{ConfigMap, ObjectReference, Secret},
    },
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::{
    Api, Client,
    api::{DeleteParams, DynamicObject, Patch, PatchParams},
    runtime::{
        WatchStreamExt,
        events::{Event as KubeEvent, EventType, Recorder},
        wait::{await_condition, conditions},
        watcher::{self, Event},
    },
};
use tokio::sync::watch;

use tenantflux_core::{
    FIELD_MANAGER, MANAGED_BY_LABEL,
    flux::OPERATOR_DEPLOYMENT,
    operator::AllowedVersions,
    policy::{Policy, Trust},
    releases::Releases,
    text::{chain, quote},
};
use tokio_stream::wrappers::WatchStream;
use tokio_util::sync::CancellationToken;

mod apply;
pub mod bundle;
mod install;
mod prune;
mod record;
mod rollout;
pub mod source;
mod triggers;

use bundle::{Bundle, BundleError, BundleObject, ImageRules, ObjectRef, Stage, kind_of, to_prune};
pub use record::RECORD_CONFIGMAP;

/// The ConfigMap in the agent's namespace that records an adoption (`crate::adopt` writes it;
/// the install loop reads whether it allowed a rollout).
pub const ADOPTION_RECORD: &str = "tenantflux-adoption";
use record::Record;
pub use rollout::rollout;
use source::{BundleSource, Fetcher, SourceError};
use triggers::{Change, Trigger, source_changes};

use crate::{
    policy::store::Held,
    reconcile::{Next, Retry, Wake},
    watches::{Seen, Shared},
};

/// How long CRDs may take to become Established once the API server serves.
const CRD_TIMEOUT: Duration = Duration::from_secs(60);
/// The first wait while the API server does not answer.
const BACKOFF_MIN: Duration = Duration::from_secs(1);
/// The delays after a failed attempt: from a second, doubling, at most a minute.
const RETRY: Retry = Retry {
    min: BACKOFF_MIN,
    max: Duration::from_secs(60),
};
/// The longest wait between two `/readyz` tries while the API server does not answer.
const API_WAIT_MAX: Duration = Duration::from_secs(30);
/// How long one `/readyz` request may take.
const READYZ_TIMEOUT: Duration = Duration::from_secs(5);

/// What the agent installs and from where.
#[derive(Clone, Debug)]
pub struct InstallConfig {
    pub source: BundleSource,
    pub allowed: AllowedVersions,
    pub agent_namespace: String,
    pub operator_namespace: String,
    /// How often the source is read again and the whole bundle re-applied (which also undoes
    /// edits of objects other than the Deployment).
    pub resync: Duration,
    /// What the operator Deployment's images must be (`--operator-image-registry`,
    /// `--operator-require-image-digest`).
    pub images: ImageRules,
    /// `--adopt`: an operator someone else installed is replaced by a bundle of another
    /// version only once the adoption allowed a rollout (`adopt apply --allow-rollout`).
    pub adopt: bool,
}

/// Where the flux-operator install stands. Without a configured bundle the agent only observes
/// the operator (NotInstalled, WaitingForOperator, Ready); with one it drives the install through
/// every phase.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum OperatorPhase {
    NotInstalled,
    #[default]
    WaitingForApi,
    ApplyingCrds,
    WaitingForOperator,
    Ready,
    Failed,
}

impl OperatorPhase {
    pub const ALL: [Self; 6] = [
        Self::NotInstalled,
        Self::WaitingForApi,
        Self::ApplyingCrds,
        Self::WaitingForOperator,
        Self::Ready,
        Self::Failed,
    ];

    /// The phase as a metric label: `waiting_for_api`.
    pub fn name(self) -> &'static str {
        match self {
            Self::NotInstalled => "not_installed",
            Self::WaitingForApi => "waiting_for_api",
            Self::ApplyingCrds => "applying_crds",
            Self::WaitingForOperator => "waiting_for_operator",
            Self::Ready => "ready",
            Self::Failed => "failed",
        }
    }
}

/// Where the install stands; it goes into `Status.operator` and the metrics.
#[derive(Clone, Debug, PartialEq)]
pub struct InstallState {
    pub phase: OperatorPhase,
    pub reason: String,
    /// The configured source (`--operator-bundle`).
    pub source: String,
    /// The flux-operator version of the bundle last applied ("" before the first install).
    pub version: String,
    /// The digest of the bundle last applied.
    pub digest: String,
    /// Why the agent may install the bundle last applied: the build knows it, or the platform
    /// vouched for it.
    pub trust: Trust,
    /// The flux-operator version of the bundle last read, applied or not ("" before).
    pub offered: String,
    /// What the install did that its owner should know: objects taken over from another
    /// field manager. Kept until a bundle of another digest is applied.
    pub notices: Vec<String>,
    pub last_transition: SystemTime,
}

impl InstallState {
    pub fn initial(source: &BundleSource) -> Self {
        Self {
            phase: OperatorPhase::WaitingForApi,
            reason: "the agent has not yet asked the Kubernetes API server".into(),
            source: source.to_string(),
            version: String::new(),
            digest: String::new(),
            trust: Trust::None,
            offered: String::new(),
            notices: Vec::new(),
            last_transition: SystemTime::now(),
        }
    }
}

/// Why the held policy refuses the configured bundle source.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "the bundle source {source_name} is not one of {patterns} allowed by policy generation {generation}"
)]
pub struct SourceNotAllowed {
    source_name: String,
    patterns: String,
    generation: u64,
}

/// The flux-operator versions one install attempt may apply: the held policy's
/// `spec.operator.versions` when it sets them, else `--operator-version` (`flag`). A policy
/// that sets `spec.operator.bundles` must also allow `source`.
pub fn install_rules<'a>(
    policy: Option<&'a Policy>,
    flag: &'a AllowedVersions,
    source: &str,
) -> Result<&'a AllowedVersions, SourceNotAllowed> {
    let Some(policy) = policy else {
        return Ok(flag);
    };
    if !policy.allows_bundle(source) {
        let patterns = policy
            .document()
            .spec
            .operator
            .iter()
            .flat_map(|o| o.bundles.iter().flatten())
            .map(|p| format!("{p:?}"))
            .collect::<Vec<_>>()
            .join(", ");
        return Err(SourceNotAllowed {
            source_name: source.to_owned(),
            patterns,
            generation: policy.generation(),
        });
    }
    Ok(policy.operator_versions().unwrap_or(flag))
}

/// Why one install attempt failed.
#[derive(Debug, thiserror::Error)]
enum InstallError {
    #[error("reading the bundle from {source_name}: {message}")]
    Source {
        source_name: String,
        message: String,
    },

    #[error("the bundle from {source_name} was refused, nothing was applied: {error}")]
    Rejected {
        source_name: String,
        error: BundleError,
    },

    #[error("{0}; nothing was applied")]
    SourceNotAllowed(#[from] SourceNotAllowed),

    #[error("applying {object} failed: {message}")]
    Apply { object: ObjectRef, message: String },

    #[error("{what} failed: {message}")]
    Kube { what: String, message: String },

    #[error("CustomResourceDefinition {name} is not Established after {}s: {detail}", CRD_TIMEOUT.as_secs())]
    CrdNotEstablished { name: String, detail: String },

    #[error(
        "flux-operator {running} runs in {namespace}, installed by someone else; the bundle's {bundle} may re-render Flux's controllers, so nothing was applied: adopt it with `kubectl tenantflux adopt apply --allow-rollout`, or give the agent a bundle of {running}"
    )]
    AdoptionRollout {
        running: String,
        bundle: String,
        namespace: String,
    },
}

/// Whether adopting (`--adopt`) holds the bundle back: the operator running is someone
/// else's, of another version than the bundle's, and no adoption allowed a rollout.
pub fn adoption_holds(
    adopt: bool,
    running: Option<(&str, bool)>,
    bundle: &str,
    rollout_allowed: bool,
) -> bool {
    match running {
        Some((version, ours)) => adopt && !ours && version != bundle && !rollout_allowed,
        None => false,
    }
}

impl InstallError {
    /// The Event reason (PascalCase) for this failure.
    fn event_reason(&self) -> &'static str {
        match self {
            Self::Source { .. } => "BundleUnavailable",
            Self::Rejected { .. } | Self::SourceNotAllowed(_) => "BundleRejected",
            Self::Apply { .. } | Self::Kube { .. } | Self::CrdNotEstablished { .. } => {
                "InstallFailed"
            }
            Self::AdoptionRollout { .. } => "AdoptionHeldBack",
        }
    }
}

fn kube_message(err: &kube::Error) -> String {
    match err {
        kube::Error::Api(status) => format!("{} ({})", status.message, status.code),
        other => other.to_string(),
    }
}

/// The install loop's state.
struct Installer {
    client: Client,
    fetcher: Fetcher,
    config: InstallConfig,
    /// The policy held now: its operator rules replace `config.allowed`.
    policy: watch::Receiver<Held>,
    tx: watch::Sender<InstallState>,
    recorder: Recorder,
    record_ref: ObjectReference,
    /// The bundle last applied in full, and the Deployment generation that apply produced.
    applied: Option<(Bundle, i64)>,
    /// The latest observed operator Deployment.
    deployment: Option<Deployment>,
    /// The uid of the operator Deployment the watch showed last: when it is gone or another
    /// takes its place, someone deleted it.
    watched: Option<String>,
    /// Set while the latest attempt failed; the phase stays FAILED until an attempt succeeds.
    failure: Option<String>,
    /// The Flux releases of the artifact the operator was installed from, with its digest.
    releases: watch::Sender<Option<Arc<Releases>>>,
    /// See [`InstallState::notices`].
    notices: Vec<String>,
    /// See [`InstallState::offered`].
    offered: String,
    /// Ends the wait for the API server.
    shutdown: CancellationToken,
    /// The source read last: `--operator-bundle`, or the held policy's `spec.operator.bundle`.
    source: String,
}

/// At most this many notices are kept (the newest).
const MAX_NOTICES: usize = 10;

/// What the install loop reads and reports through.
pub struct Channels {
    /// The policy held now: its operator rules replace `--operator-version`.
    pub policy: watch::Receiver<Held>,
    /// The operator Deployment, as the runtime's shared watch shows it.
    pub deployment: Shared<Deployment>,
    /// Where the install stands.
    pub state: watch::Sender<InstallState>,
    /// The Flux releases of the artifact the operator was installed from.
    pub releases: watch::Sender<Option<Arc<Releases>>>,
}

/// Runs the install loop until the shutdown.
pub async fn run(
    client: Client,
    fetcher: Fetcher,
    config: InstallConfig,
    channels: Channels,
    shutdown: CancellationToken,
) {
    let Channels {
        policy,
        deployment: deployments,
        state: tx,
        releases,
    } = channels;
    let policy_changes = WatchStream::from_changes(policy.clone()).map(|_| Change::Policy);
    let record_ref = crate::configmap_reference(&config.agent_namespace, RECORD_CONFIGMAP);
    let recorder = crate::recorder(&client);
    let sources = source_changes(&client, &config).map(Change::Source);
    let installer = Installer {
        client,
        fetcher,
        source: config.source.to_string(),
        config,
        policy,
        tx,
        recorder,
        record_ref,
        applied: None,
        deployment: None,
        watched: None,
        failure: None,
        releases,
        notices: Vec::new(),
        offered: String::new(),
        shutdown: shutdown.clone(),
    };
    let changes = futures::stream::select_all([
        sources.boxed(),
        policy_changes.boxed(),
        deployments.updates().map(Change::Deployment).boxed(),
    ]);
    crate::reconcile::run(installer, changes, &shutdown).await;
}

impl crate::reconcile::Pass for Installer {
    type Event = Change;

    /// A reconcile for what woke it (nothing for a change that needs none), once the API
    /// server answers; then the resync interval, or the retry delay after a failure.
    async fn pass(&mut self, wake: Wake<Change>) -> Next {
        let trigger = match wake {
            Wake::Start => Trigger::Start,
            Wake::Deadline if self.failure.is_some() => Trigger::Retry,
            Wake::Deadline => Trigger::Resync,
            Wake::Event(change) => match self.trigger(change) {
                Some(trigger) => trigger,
                None => return Next::Keep,
            },
        };
        if !matches!(trigger, Trigger::Start) {
            tracing::info!(?trigger, "reconciling the flux-operator install");
        }
        let shutdown = self.shutdown.clone();
        if crate::unless_shutdown(&shutdown, self.wait_for_api())
            .await
            .is_none()
        {
            return Next::Stop;
        }
        let attempt = match trigger {
            Trigger::DeploymentDeleted | Trigger::DeploymentEdited { .. } => {
                self.restore(&trigger).await
            }
            Trigger::Start
            | Trigger::Resync
            | Trigger::SourceChanged
            | Trigger::PolicyChanged
            | Trigger::Retry => self.reconcile().await,
        };
        match attempt {
            Ok(()) => Next::after(self.config.resync),
            Err(err) => {
                self.fail(&err).await;
                Next::Retry(RETRY)
            }
        }
    }
}

#[cfg(test)]
mod adoption {
    use super::adoption_holds;

    #[test]
    fn adopting_holds_back_only_another_version_over_someone_elses_operator() {
        // Someone else's v0.58.1 and a v0.59.0 bundle: held back until a rollout is allowed.
        assert!(adoption_holds(
            true,
            Some(("v0.58.1", false)),
            "v0.59.0",
            false
        ));
        assert!(!adoption_holds(
            true,
            Some(("v0.58.1", false)),
            "v0.59.0",
            true
        ));
        // The same version, the agent's own operator, no operator, or not adopting: applied.
        assert!(!adoption_holds(
            true,
            Some(("v0.59.0", false)),
            "v0.59.0",
            false
        ));
        assert!(!adoption_holds(
            true,
            Some(("v0.58.1", true)),
            "v0.59.0",
            false
        ));
        assert!(!adoption_holds(true, None, "v0.59.0", false));
        assert!(!adoption_holds(
            false,
            Some(("v0.58.1", false)),
            "v0.59.0",
            false
        ));
    }
}

#[cfg(test)]
mod policy_rules {
    use super::*;

    const EXAMPLE: &str = include_str!("../../../deploy/policy/example.yaml");

    fn policy(text: &str) -> Policy {
        Policy::parse(text).unwrap()
    }

    #[test]
    fn the_held_policy_decides_versions_and_sources_else_the_flag() {
        let flag = AllowedVersions::parse("v0.57.0", "--operator-version").unwrap();
        let example = policy(EXAMPLE);
        let oci = "oci://ghcr.io/controlplaneio-fluxcd/flux-operator-manifests:v0.58.1";

        assert_eq!(install_rules(None, &flag, oci).unwrap(), &flag);
        let allowed = install_rules(Some(&example), &flag, oci).unwrap();
        assert_eq!(
            allowed.to_string(),
            "\">=0.58.0 <0.59.0\" allowed by policy generation 7"
        );
        assert_eq!(
            install_rules(Some(&example), &flag, "configmap:flux-operator")
                .unwrap()
                .to_string(),
            allowed.to_string()
        );

        let err = install_rules(Some(&example), &flag, "oci://docker.io/evil/operator:v1")
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "the bundle source oci://docker.io/evil/operator:v1 is not one of \
             \"oci://ghcr.io/controlplaneio-fluxcd/flux-operator-manifests*\", \"configmap:*\" \
             allowed by policy generation 7"
        );

        // A policy without operator rules leaves the flag in force and any source allowed.
        let (head, _) = EXAMPLE.split_once("  operator:\n").unwrap();
        let (_, tail) = EXAMPLE.split_once("  distribution:\n").unwrap();
        let without = policy(&format!("{head}  distribution:\n{tail}"));
        assert_eq!(
            install_rules(Some(&without), &flag, "oci://docker.io/any:v1").unwrap(),
            &flag
        );
    }

    #[test]
    fn a_bundle_outside_the_policy_range_names_the_policy_generation() {
        let example = policy(EXAMPLE);
        let flag = AllowedVersions::parse("v0.99.0", "--operator-version").unwrap();
        let allowed = install_rules(Some(&example), &flag, "configmap:x").unwrap();
        // What `Bundle::check_version` returns for a bundle outside the range.
        let refused = BundleError::VersionNotAllowed {
            version: "v0.99.0".into(),
            allowed: allowed.clone(),
        };
        assert_eq!(
            refused.to_string(),
            "flux-operator v0.99.0 is outside \">=0.58.0 <0.59.0\" allowed by policy generation 7"
        );
    }
}
