//! Command-line flags. Every flag has an environment twin so the Deployment can set them with
//! `env:` (and the downward API) instead of `args:`.

use std::{net::SocketAddr, time::Duration};

use clap::{Parser, ValueEnum};

use tenantflux_core::operator::AllowedVersions;

use crate::operator::source::BundleSource;

/// The default of `--log-level`.
pub const DEFAULT_LOG_FILTER: &str = "info,kube_client::client::builder=off";

/// Flags of `tenantflux-agent`.
#[derive(Debug, Clone, Parser)]
#[command(name = "tenantflux-agent", version, about)]
pub struct Args {
    /// Address the gRPC API listens on. Loopback by default: a port-forward (how the plugin
    /// comes) arrives inside the pod, and nothing else needs the API, so no other pod can
    /// reach it.
    #[arg(
        long,
        env = "TENANTFLUX_GRPC_ADDRESS",
        default_value = "127.0.0.1:9090"
    )]
    pub grpc_address: SocketAddr,

    /// Address of the admin HTTP server (/livez, /readyz, /metrics).
    #[arg(long, env = "TENANTFLUX_ADMIN_ADDRESS", default_value = "0.0.0.0:8080")]
    pub admin_address: SocketAddr,

    /// Namespace the agent runs in; callers are authorized against `agents.tenantflux.io` here.
    #[arg(
        long,
        env = "TENANTFLUX_NAMESPACE",
        default_value = "tenantflux-system"
    )]
    pub namespace: String,

    /// Namespace of the flux-operator Deployment and of the FluxInstance `flux`.
    #[arg(
        long,
        env = "TENANTFLUX_OPERATOR_NAMESPACE",
        default_value = "flux-system"
    )]
    pub operator_namespace: String,

    /// Adopt the Flux that runs in --operator-namespace when the agent starts (an orphaned Helm
    /// install of flux-operator, e.g. Cozystack's add-on in `cozy-fluxcd`), as `kubectl
    /// tenantflux adopt apply` without --allow-rollout does; recorded in ConfigMap
    /// `tenantflux-adoption`, so it is done once.
    #[arg(long, env = "TENANTFLUX_ADOPT")]
    pub adopt: bool,

    /// Audience that callers' tokens are bound to (TokenRequest `audiences`).
    #[arg(
        long,
        env = "TENANTFLUX_TOKEN_AUDIENCE",
        default_value = "tenantflux-agent"
    )]
    pub token_audience: String,

    /// Where the agent installs flux-operator from: `file:PATH`, `configmap:NAME` or
    /// `secret:NAME` (key `install.yaml`, in --namespace), or the flux-operator-manifests
    /// artifact `oci://REGISTRY/REPOSITORY:TAG[@sha256:DIGEST]`. Without it the agent only
    /// observes an install made by someone else.
    #[arg(
        long,
        env = "TENANTFLUX_OPERATOR_BUNDLE",
        requires = "operator_version"
    )]
    pub operator_bundle: Option<BundleSource>,

    /// The flux-operator versions the agent may install: a version (`v0.58.1`, that one only)
    /// or a semver range (`>=0.58.0 <0.59.0`). Needed with --operator-bundle; a bundle of
    /// another version is refused and nothing of it applied.
    #[arg(long, env = "TENANTFLUX_OPERATOR_VERSION", value_parser = parse_allowed_versions)]
    pub operator_version: Option<AllowedVersions>,

    /// Where the operator Deployment's images may come from: globs over the image reference
    /// (comma-separated or repeated). A bundle whose Deployment runs another image is refused
    /// and nothing of it applied.
    #[arg(
        long = "operator-image-registry",
        env = "TENANTFLUX_OPERATOR_IMAGE_REGISTRIES",
        value_delimiter = ',',
        default_value = "ghcr.io/controlplaneio-fluxcd/*",
        value_name = "GLOB"
    )]
    pub operator_image_registries: Vec<String>,

    /// Pod settings of flux-operator's Deployment a bundle may set beyond what its releases
    /// ship (comma-separated): hostNetwork, tolerations, resources, nodeSelector. Any other is
    /// refused before anything is applied, naming the field. Cozystack runs the operator with
    /// hostNetwork, a not-ready toleration and its own resources.
    #[arg(
        long = "operator-allow-pod-fields",
        env = "TENANTFLUX_OPERATOR_ALLOW_POD_FIELDS",
        value_delimiter = ',',
        value_parser = clap::builder::PossibleValuesParser::new(crate::operator::bundle::POD_FIELDS),
        value_name = "FIELD"
    )]
    pub operator_allow_pod_fields: Vec<String>,

    /// Refuse a bundle whose Deployment runs an image not pinned by digest
    /// (`NAME:TAG@sha256:DIGEST`): then whoever can move the image's tag in its registry cannot
    /// change what the operator runs. Off by default, since flux-operator's own releases name
    /// their image by tag only.
    #[arg(long, env = "TENANTFLUX_OPERATOR_REQUIRE_IMAGE_DIGEST")]
    pub operator_require_image_digest: bool,

    /// A `kubernetes.io/dockerconfigjson` Secret in --namespace with the credentials for the
    /// bundle's OCI registry.
    #[arg(long, env = "TENANTFLUX_OPERATOR_BUNDLE_PULL_SECRET")]
    pub operator_bundle_pull_secret: Option<String>,

    /// Pull the OCI bundle over plain HTTP instead of HTTPS (local development registries).
    #[arg(long, env = "TENANTFLUX_OPERATOR_BUNDLE_PLAIN_HTTP")]
    pub operator_bundle_plain_http: bool,

    /// How often the bundle is read again and the install re-applied (`30s`, `5m`, `1h`).
    /// ConfigMap and Secret sources are also watched, so their changes apply at once.
    #[arg(
        long,
        env = "TENANTFLUX_OPERATOR_RESYNC_INTERVAL",
        default_value = "5m",
        value_parser = parse_duration
    )]
    pub operator_resync_interval: Duration,

    /// How often an open watch (WatchStatus, WatchObjects, WatchUpgrade) checks again that
    /// its caller's token is valid and still grants what the watch shows; a watch whose
    /// token expires sooner is checked at its expiry. A watch that no longer holds ends with
    /// UNAUTHENTICATED or PERMISSION_DENIED.
    #[arg(
        long,
        env = "TENANTFLUX_STREAM_RECHECK_INTERVAL",
        default_value = "1m",
        value_parser = parse_duration
    )]
    pub stream_recheck_interval: Duration,

    /// How often the agent denies the identity CSRs (signer tenantflux.io/caller-identity)
    /// older than --identity-csr-max-age, so kube-controller-manager deletes them an hour
    /// later and callers need only create on CSRs.
    #[arg(
        long,
        env = "TENANTFLUX_IDENTITY_CSR_SWEEP_INTERVAL",
        default_value = "1m",
        value_parser = parse_duration
    )]
    pub identity_csr_sweep_interval: Duration,

    /// How often the agent proves that the API server enforces the held policy (a server-side
    /// dry run of a FluxInstance the policy refuses). A failed proof is repeated after 2 s;
    /// failures for 10 s in a row are reported as NOT ENFORCED.
    #[arg(
        long,
        env = "TENANTFLUX_ENFORCEMENT_CHECK_INTERVAL",
        default_value = "15s",
        value_parser = parse_duration
    )]
    pub enforcement_check_interval: Duration,

    /// How often the agent checks that it still has every permission its policy work needs
    /// (SelfSubjectAccessReview), naming each one it lacks in `status`.
    #[arg(
        long,
        env = "TENANTFLUX_PERMISSIONS_CHECK_INTERVAL",
        default_value = "5m",
        value_parser = parse_duration
    )]
    pub permissions_check_interval: Duration,

    /// The age after which the agent denies an identity CSR. A proof is refused with a CSR
    /// older than 15 minutes, or denied, whatever this says.
    #[arg(
        long,
        env = "TENANTFLUX_IDENTITY_CSR_MAX_AGE",
        default_value = "15m",
        value_parser = parse_duration
    )]
    pub identity_csr_max_age: Duration,

    /// The management side's ed25519 public key (PEM or base64 file) that signed policies
    /// must verify against. Without it the agent accepts no policy.
    #[arg(long, env = "TENANTFLUX_POLICY_PUBLIC_KEY", value_name = "PATH")]
    pub policy_public_key: Option<std::path::PathBuf>,

    /// Root public keys (PEM or base64 files, comma-separated in the env twin) that sign
    /// keyrings: which policy keys are active and which are revoked. A keyring is taken from
    /// the channel's `TAG-keyring` tag; until one is held, --policy-public-key (if any) is
    /// the keyring of one.
    #[arg(
        long = "policy-root-key",
        env = "TENANTFLUX_POLICY_ROOT_KEYS",
        value_name = "PATH",
        value_delimiter = ','
    )]
    pub policy_root_keys: Vec<std::path::PathBuf>,

    /// How many distinct root keys must sign a keyring.
    #[arg(
        long,
        env = "TENANTFLUX_POLICY_ROOT_THRESHOLD",
        default_value_t = 1,
        value_parser = clap::value_parser!(u32).range(1..=16)
    )]
    pub policy_root_threshold: u32,

    /// A policy channel to pull from, `oci://REGISTRY/REPOSITORY:TAG` (what `kubectl
    /// tenantflux policy publish` pushes to): the tag is checked on a jittered interval and
    /// a new policy there is taken exactly as a push would be. Pushes keep working.
    #[arg(
        long,
        env = "TENANTFLUX_POLICY_SOURCE",
        value_name = "oci://REGISTRY/REPOSITORY:TAG"
    )]
    pub policy_source: Option<tenantflux_core::policy::channel::Channel>,

    /// The mean time between two checks of the policy channel's tag (each wait ±20 %); a
    /// check of an unchanged tag is one HEAD request.
    #[arg(
        long,
        env = "TENANTFLUX_POLICY_SOURCE_INTERVAL",
        default_value = "5m",
        value_parser = parse_duration
    )]
    pub policy_source_interval: Duration,

    /// A `kubernetes.io/dockerconfigjson` Secret in the agent's namespace with the policy
    /// registry's credentials.
    #[arg(
        long,
        env = "TENANTFLUX_POLICY_SOURCE_PULL_SECRET",
        value_name = "NAME"
    )]
    pub policy_source_pull_secret: Option<String>,

    /// Pull the policy over plain HTTP (local development registries).
    #[arg(long, env = "TENANTFLUX_POLICY_SOURCE_PLAIN_HTTP")]
    pub policy_source_plain_http: bool,

    /// A name for this cluster, set at install, that a policy's `spec.clusters` may match
    /// (besides the UID of namespace kube-system, which the agent always knows).
    #[arg(long, env = "TENANTFLUX_CLUSTER_NAME", value_name = "NAME")]
    pub cluster_name: Option<String>,

    /// How many objects an upgrade's storage migration rewrites at once, when the request
    /// sets none.
    #[arg(
        long,
        env = "TENANTFLUX_UPGRADE_CONCURRENCY",
        default_value_t = 8,
        value_parser = clap::value_parser!(u32).range(1..=256)
    )]
    pub upgrade_concurrency: u32,

    /// Log line format.
    #[arg(long, env = "TENANTFLUX_LOG_FORMAT", value_enum, default_value_t = LogFormat::Json)]
    pub log_format: LogFormat,

    /// Log filter, in tracing's EnvFilter syntax (e.g. `info`, `tenantflux_agent=debug`).
    /// kube-rs's per-request error lines are off by default: the agent logs each failing
    /// watch once per change instead of once per retry.
    #[arg(long, env = "RUST_LOG", default_value = DEFAULT_LOG_FILTER)]
    pub log_level: String,
}

fn parse_allowed_versions(text: &str) -> Result<AllowedVersions, String> {
    AllowedVersions::parse(text, "--operator-version").map_err(|err| err.to_string())
}

/// A duration as kubectl writes them (`90s`, `5m`, `1h`, `1m30s`, plain seconds), not zero.
fn parse_duration(text: &str) -> Result<Duration, String> {
    match tenantflux_core::duration::parse(text) {
        Ok(d) if d.is_zero() => Err("the interval must be longer than 0s".into()),
        Ok(d) => Ok(d),
        Err(err) => Err(err.to_string()),
    }
}

/// How log lines are written to stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// One JSON object per line, for log collectors.
    Json,
    /// Human-readable lines, for a terminal.
    Text,
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    // Editing the process environment is `unsafe` in edition 2024 (and the crate forbids
    // unsafe), so env twins are checked on the clap definition; reading them is clap's job.
    #[test]
    fn every_flag_has_its_env_twin_and_default() {
        let cmd = Args::command();
        let expected = [
            ("grpc_address", "TENANTFLUX_GRPC_ADDRESS", "127.0.0.1:9090"),
            ("admin_address", "TENANTFLUX_ADMIN_ADDRESS", "0.0.0.0:8080"),
            ("namespace", "TENANTFLUX_NAMESPACE", "tenantflux-system"),
            (
                "operator_namespace",
                "TENANTFLUX_OPERATOR_NAMESPACE",
                "flux-system",
            ),
            (
                "token_audience",
                "TENANTFLUX_TOKEN_AUDIENCE",
                "tenantflux-agent",
            ),
            ("log_format", "TENANTFLUX_LOG_FORMAT", "json"),
            ("log_level", "RUST_LOG", DEFAULT_LOG_FILTER),
            (
                "operator_resync_interval",
                "TENANTFLUX_OPERATOR_RESYNC_INTERVAL",
                "5m",
            ),
            ("upgrade_concurrency", "TENANTFLUX_UPGRADE_CONCURRENCY", "8"),
            (
                "policy_root_threshold",
                "TENANTFLUX_POLICY_ROOT_THRESHOLD",
                "1",
            ),
            (
                "policy_source_interval",
                "TENANTFLUX_POLICY_SOURCE_INTERVAL",
                "5m",
            ),
            (
                "stream_recheck_interval",
                "TENANTFLUX_STREAM_RECHECK_INTERVAL",
                "1m",
            ),
            (
                "identity_csr_sweep_interval",
                "TENANTFLUX_IDENTITY_CSR_SWEEP_INTERVAL",
                "1m",
            ),
            (
                "identity_csr_max_age",
                "TENANTFLUX_IDENTITY_CSR_MAX_AGE",
                "15m",
            ),
            (
                "enforcement_check_interval",
                "TENANTFLUX_ENFORCEMENT_CHECK_INTERVAL",
                "15s",
            ),
            (
                "permissions_check_interval",
                "TENANTFLUX_PERMISSIONS_CHECK_INTERVAL",
                "5m",
            ),
            (
                "operator_image_registries",
                "TENANTFLUX_OPERATOR_IMAGE_REGISTRIES",
                "ghcr.io/controlplaneio-fluxcd/*",
            ),
        ];
        let without_default = [
            ("operator_bundle", "TENANTFLUX_OPERATOR_BUNDLE"),
            ("adopt", "TENANTFLUX_ADOPT"),
            (
                "operator_allow_pod_fields",
                "TENANTFLUX_OPERATOR_ALLOW_POD_FIELDS",
            ),
            ("operator_version", "TENANTFLUX_OPERATOR_VERSION"),
            (
                "operator_bundle_pull_secret",
                "TENANTFLUX_OPERATOR_BUNDLE_PULL_SECRET",
            ),
            (
                "operator_bundle_plain_http",
                "TENANTFLUX_OPERATOR_BUNDLE_PLAIN_HTTP",
            ),
            (
                "operator_require_image_digest",
                "TENANTFLUX_OPERATOR_REQUIRE_IMAGE_DIGEST",
            ),
            ("policy_public_key", "TENANTFLUX_POLICY_PUBLIC_KEY"),
            ("cluster_name", "TENANTFLUX_CLUSTER_NAME"),
            ("policy_source", "TENANTFLUX_POLICY_SOURCE"),
            ("policy_root_keys", "TENANTFLUX_POLICY_ROOT_KEYS"),
            (
                "policy_source_pull_secret",
                "TENANTFLUX_POLICY_SOURCE_PULL_SECRET",
            ),
            (
                "policy_source_plain_http",
                "TENANTFLUX_POLICY_SOURCE_PLAIN_HTTP",
            ),
        ];
        for (id, env) in without_default {
            let arg = cmd
                .get_arguments()
                .find(|a| a.get_id() == id)
                .unwrap_or_else(|| panic!("no flag {id}"));
            assert_eq!(arg.get_env().and_then(|e| e.to_str()), Some(env), "{id}");
        }
        for (id, env, default) in expected {
            let arg = cmd
                .get_arguments()
                .find(|a| a.get_id() == id)
                .unwrap_or_else(|| panic!("no flag {id}"));
            assert_eq!(arg.get_env().and_then(|e| e.to_str()), Some(env), "{id}");
            let defaults: Vec<_> = arg.get_default_values().iter().collect();
            assert_eq!(defaults, [default], "{id}");
        }
        let flags = cmd
            .get_arguments()
            .filter(|a| {
                a.get_long().is_some() && !matches!(a.get_id().as_str(), "help" | "version")
            })
            .count();
        assert_eq!(
            flags,
            expected.len() + without_default.len(),
            "a flag was added without a test of its env twin"
        );
    }

    #[test]
    fn flags_parse_into_typed_values() {
        let args = Args::try_parse_from([
            "tenantflux-agent",
            "--grpc-address=127.0.0.1:19090",
            "--admin-address=127.0.0.1:18080",
            "--namespace=ns",
            "--operator-namespace=ops",
            "--token-audience=aud",
            "--log-format=text",
            "--log-level=debug",
        ])
        .expect("valid flags");
        assert_eq!(args.grpc_address, "127.0.0.1:19090".parse().unwrap());
        assert_eq!(args.admin_address, "127.0.0.1:18080".parse().unwrap());
        assert_eq!(args.namespace, "ns");
        assert_eq!(args.operator_namespace, "ops");
        assert_eq!(args.token_audience, "aud");
        assert_eq!(args.log_format, LogFormat::Text);
        assert_eq!(args.log_level, "debug");
        assert!(args.operator_bundle.is_none(), "no bundle: observe only");
    }

    #[test]
    fn operator_install_flags_parse_and_need_a_version() {
        let args = Args::try_parse_from([
            "tenantflux-agent",
            "--operator-bundle=configmap:flux-operator-bundle",
            "--operator-version=>=0.58.0 <0.59.0",
            "--operator-resync-interval=30s",
            "--operator-bundle-pull-secret=registry",
        ])
        .expect("valid flags");
        assert_eq!(
            args.operator_bundle,
            Some(BundleSource::ConfigMap("flux-operator-bundle".into()))
        );
        assert!(
            args.operator_version
                .unwrap()
                .allows(&semver::Version::new(0, 58, 3))
        );
        assert_eq!(args.operator_resync_interval, Duration::from_secs(30));
        assert_eq!(
            args.operator_bundle_pull_secret.as_deref(),
            Some("registry")
        );
        assert!(!args.operator_bundle_plain_http);

        let err = Args::try_parse_from(["tenantflux-agent", "--operator-bundle=file:/x"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("--operator-version"), "{err}");
        let err = Args::try_parse_from(["tenantflux-agent", "--operator-bundle=install.yaml"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("is not a bundle source"), "{err}");
        assert!(Args::try_parse_from(["tenantflux-agent", "--operator-version=latest"]).is_err());
        for bad in ["0s", "5d", "m"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("45"), Ok(Duration::from_secs(45)));
        // Used to panic on overflow (number * 3600).
        let err = parse_duration("18446744073709551615h").unwrap_err();
        assert!(err.contains("longer than a duration may be"), "{err}");
    }

    #[test]
    fn bad_values_are_refused() {
        assert!(Args::try_parse_from(["tenantflux-agent", "--log-format=xml"]).is_err());
        assert!(Args::try_parse_from(["tenantflux-agent", "--grpc-address=nowhere"]).is_err());
    }
}
