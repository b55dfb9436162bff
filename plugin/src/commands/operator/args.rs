//! The `operator` subcommands and their flags.

use std::path::PathBuf;

use clap::{Args, Subcommand, ValueHint};

use crate::context::FileArg;

#[derive(Debug, Subcommand)]
pub enum OperatorCommand {
    /// Review a flux-operator release before vouching for it: what it adds or changes against
    /// the nearest release this build knows (CRDs and their versions and schemas, cluster
    /// RBAC, the operator Deployment, the Flux distributions it ships). Reads a registry or a
    /// file, never a cluster.
    #[command(
        after_help = "SOURCE is an OCI manifests artifact (oci://REGISTRY/REPOSITORY:TAG) or the path of an\ninstall.yaml. Registry credentials: TENANTFLUX_REGISTRY_USERNAME and TENANTFLUX_REGISTRY_PASSWORD.\n\nExamples:\n  kubectl tenantflux operator review oci://ghcr.io/controlplaneio-fluxcd/flux-operator-manifests:v0.61.0\n  kubectl tenantflux operator review install.yaml --against old-install.yaml -o yaml"
    )]
    Review(ReviewArgs),
    /// Vouch for a flux-operator release in a policy file: adds its version, digest and the
    /// ClusterRole rules it adds to spec.operator.vouched and raises spec.generation by one.
    /// Sign and publish the result; every agent holding it may then install the release.
    #[command(
        after_help = "The policy is written back as YAML without its comments (to stdout, or --out).\n\nExamples:\n  kubectl tenantflux operator vouch oci://ghcr.io/controlplaneio-fluxcd/flux-operator-manifests:v0.61.0 -f policy.yaml --out policy.yaml\n  kubectl tenantflux policy sign -f policy.yaml --key keys/ed25519.key --out policy.signed.yaml\n  kubectl tenantflux policy publish -f policy.signed.yaml oci://registry.example/platform/policy:stable"
    )]
    Vouch {
        #[command(flatten)]
        review: ReviewArgs,
        /// The policy to add the vouching to.
        #[command(flatten)]
        file: FileArg,
        /// Write the policy here instead of stdout (it may be the file read).
        #[arg(long, value_name = "PATH", value_hint = ValueHint::FilePath)]
        out: Option<PathBuf>,
        /// Also make SOURCE, pinned by the reviewed digest, the policy's spec.operator.bundle:
        /// every agent that owns its flux-operator install switches to it with this policy,
        /// whatever its --operator-bundle says (an oci:// SOURCE only).
        #[arg(long)]
        rollout: bool,
    },
}

#[derive(Debug, Args)]
pub struct ReviewArgs {
    /// The release: oci://REGISTRY/REPOSITORY:TAG of a manifests artifact, or an install.yaml.
    #[arg(value_name = "SOURCE")]
    pub source: String,
    /// The release to compare with (same forms). Default for an OCI source: the same
    /// repository at the newest release this build knows, not newer than SOURCE.
    #[arg(long, value_name = "SOURCE")]
    pub against: Option<String>,
    /// Talk plain HTTP to the registry (local development registries).
    #[arg(long)]
    pub plain_http: bool,
}
