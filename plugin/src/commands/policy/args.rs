//! The `policy` subcommands and their flags.

use std::path::PathBuf;

use clap::{Subcommand, ValueHint};

use crate::context::FileArg;

#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Make an ed25519 key pair: DIR/ed25519.key (private, mode 0600) and DIR/ed25519.pub
    /// (install it with the agent: Helm value policy.publicKey).
    #[command(
        after_help = "Examples:\n  kubectl tenantflux policy keygen --out ./keys\n  kubectl tenantflux policy keygen --root --out ./root-keys"
    )]
    Keygen {
        /// Directory to write the key files to (created if missing; existing keys are kept).
        #[arg(long, value_name = "DIR", value_hint = ValueHint::DirPath)]
        out: PathBuf,
        /// A root key (DIR/root.key, DIR/root.pub): it signs keyrings, never policies;
        /// install its public half with the agent (--policy-root-key) and keep the private
        /// half offline.
        #[arg(long)]
        root: bool,
    },
    /// Keyrings: which policy-signing keys are active and which are revoked, signed by the
    /// root keys the agents were installed with.
    #[command(subcommand)]
    #[command(
        after_help = "Examples:\n  kubectl tenantflux policy keyring sign --version 2 --key keys/ed25519.pub --root-key root-keys/root.key --out keyring.yaml\n  kubectl tenantflux policy keyring publish -f keyring.yaml oci://registry.example/platform/policy:stable"
    )]
    Keyring(KeyringCommand),
    /// Check a policy and sign it; writes the signed policy to stdout or --out.
    #[command(
        after_help = "Examples:\n  kubectl tenantflux policy sign -f policy.yaml --key keys/ed25519.key --out policy.signed.yaml\n  kubectl tenantflux policy sign -f policy.yaml --key keys/ed25519.key --expires-in 2160h"
    )]
    Sign {
        #[command(flatten)]
        file: FileArg,
        /// The private key (PEM, as keygen or `openssl genpkey -algorithm ed25519` write it).
        #[arg(long, value_name = "PATH", value_hint = ValueHint::FilePath)]
        key: PathBuf,
        /// Write the signed policy here instead of stdout.
        #[arg(long, value_name = "PATH", value_hint = ValueHint::FilePath)]
        out: Option<PathBuf>,
        /// How long the policy holds (signed into it, from now): past it agents keep
        /// enforcing it but report it stale. Sign and publish a new generation before then.
        #[arg(long, value_name = "DURATION", default_value = "720h", value_parser = parse_duration)]
        expires_in: std::time::Duration,
        /// v2 (default): the signature covers claims (key, generation, issue and expiry
        /// times, clusters, the policy's sha256); v1: the signature covers the policy only,
        /// no expiry, for agents older than v2.
        #[arg(long, value_name = "VERSION", default_value = "v2", value_parser = ["v1", "v2"])]
        envelope: String,
    },
    /// Check a signed policy against a public key, as the agent does.
    #[command(
        after_help = "Examples:\n  kubectl tenantflux policy verify -f policy.signed.yaml --public-key keys/ed25519.pub"
    )]
    Verify {
        #[command(flatten)]
        file: FileArg,
        #[arg(long, value_name = "PATH", value_hint = ValueHint::FilePath)]
        public_key: PathBuf,
    },
    /// Publish a signed policy to a channel in an OCI registry (oci://REGISTRY/REPOSITORY:TAG)
    /// that agents with --policy-source pull from. Credentials: TENANTFLUX_REGISTRY_USERNAME
    /// and TENANTFLUX_REGISTRY_PASSWORD.
    #[command(
        after_help = "Examples:\n  kubectl tenantflux policy publish -f policy.signed.yaml oci://registry.example/platform/policy:stable\n  kubectl tenantflux policy publish -f policy.signed.yaml --public-key keys/ed25519.pub oci://localhost:5000/policy:dev --plain-http"
    )]
    Publish {
        #[command(flatten)]
        file: FileArg,
        /// The channel, e.g. oci://registry.example/platform/policy:stable.
        #[arg(value_name = "oci://REGISTRY/REPOSITORY:TAG")]
        channel: tenantflux_core::policy::channel::Channel,
        /// Talk plain HTTP to the registry (local development registries).
        #[arg(long)]
        plain_http: bool,
        /// Check the signature against this public key before publishing.
        #[arg(long, value_name = "PATH", value_hint = ValueHint::FilePath)]
        public_key: Option<PathBuf>,
    },
    /// Send a signed policy to the current context's agent.
    #[command(
        after_help = "Examples:\n  kubectl tenantflux policy push -f policy.signed.yaml\n  kubectl tenantflux policy push -f policy.signed.yaml --context tenant-a"
    )]
    Push {
        #[command(flatten)]
        file: FileArg,
    },
    /// Show the policy the agent holds.
    #[command(
        after_help = "Examples:\n  kubectl tenantflux policy show\n  kubectl tenantflux policy show -o yaml"
    )]
    Show,
}

#[derive(Debug, Subcommand)]
pub enum KeyringCommand {
    /// Write a keyring of VERSION naming the active policy keys and the revoked key ids,
    /// signed by every --root-key given.
    #[command(
        after_help = "Examples:\n  kubectl tenantflux policy keyring sign --version 2 --key keys/ed25519.pub --root-key root-keys/root.key --out keyring.yaml\n  kubectl tenantflux policy keyring sign --version 3 --key new/ed25519.pub --revoke OLD_KEY_ID --root-key root-keys/root.key"
    )]
    Sign {
        /// Higher than every keyring published before: agents never go back.
        #[arg(long)]
        version: u64,
        /// A policy-signing public key to make active (repeat for several).
        #[arg(long = "key", value_name = "PATH", required = true, value_hint = ValueHint::FilePath)]
        keys: Vec<PathBuf>,
        /// A key id to revoke (repeat for several): policies it signed are refused.
        #[arg(long, value_name = "KEY_ID")]
        revoke: Vec<String>,
        /// A root private key to sign with (repeat up to the agents' threshold).
        #[arg(long = "root-key", value_name = "PATH", required = true, value_hint = ValueHint::FilePath)]
        root_keys: Vec<PathBuf>,
        /// Write the signed keyring here instead of stdout.
        #[arg(long, value_name = "PATH", value_hint = ValueHint::FilePath)]
        out: Option<PathBuf>,
    },
    /// Publish a signed keyring beside a policy channel: to tag TAG-keyring of
    /// oci://REGISTRY/REPOSITORY:TAG, where agents pulling that channel look for it.
    #[command(
        after_help = "Examples:\n  kubectl tenantflux policy keyring publish -f keyring.yaml oci://registry.example/platform/policy:stable"
    )]
    Publish {
        #[command(flatten)]
        file: FileArg,
        /// The policy channel (the keyring goes to its tag with `-keyring` appended).
        #[arg(value_name = "oci://REGISTRY/REPOSITORY:TAG")]
        channel: tenantflux_core::policy::channel::Channel,
        #[arg(long)]
        plain_http: bool,
    },
}

pub(super) fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    tenantflux_core::duration::parse(text).map_err(|err| err.to_string())
}
