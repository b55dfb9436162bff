//! The `fleet` subcommands, how they find the tenant clusters, and how many they ask at once.

use std::{path::PathBuf, time::Duration};

use clap::{Args, Subcommand, ValueHint};

use tenantflux_core::selector::Selector;

use super::{
    PLATFORM_SERVICE_ACCOUNT,
    discover::{self, Discovery},
};
use crate::context::{FileArg, RequestTimeout};

#[derive(Debug, Subcommand)]
pub enum FleetCommand {
    /// List the tenant clusters the fleet is made of (reads only the management cluster or
    /// the fleet file).
    #[command(
        after_help = "Examples:\n  kubectl tenantflux fleet list\n  kubectl tenantflux fleet list -l tenantflux.io/tenant=tenant-a -o json\n  kubectl tenantflux fleet list --fleet-file fleet.yaml"
    )]
    List {
        #[command(flatten)]
        discovery: DiscoveryArgs,
    },
    /// Ask every tenant cluster's agent for its status: one row per cluster. Exits 1 when
    /// any cluster could not be asked.
    #[command(
        after_help = "Examples:\n  kubectl tenantflux fleet status\n  kubectl tenantflux fleet status -l tier=gold --concurrency 32\n  kubectl tenantflux fleet status --watch --interval 30s\n  kubectl tenantflux fleet status --channel oci://registry.example/platform/policy:stable --public-key ed25519.pub"
    )]
    Status {
        #[command(flatten)]
        discovery: DiscoveryArgs,
        #[command(flatten)]
        fan_out: FanOutArgs,
        /// Ask again every --interval and print the fleet again when anything changed, until
        /// interrupted (Ctrl-C).
        #[arg(short, long)]
        watch: bool,
        /// How often -w asks the fleet again.
        #[arg(long, default_value = "10s", value_name = "DURATION", value_parser = parse_interval)]
        interval: Duration,
        /// The signed policy the platform pushed: flag (and exit 1 for) every cluster that
        /// holds another generation or a policy signed with another key.
        #[arg(long, value_name = "PATH", value_hint = ValueHint::FilePath)]
        expect_policy: Option<PathBuf>,
        /// A policy channel (oci://REGISTRY/REPOSITORY:TAG), read once and verified with
        /// --public-key: each cluster is marked current, behind (N), ahead (N), stale
        /// (expired) or bound elsewhere; exits 1 when any is behind or stale, or when the
        /// channel holds a policy none of the keys signed. Credentials:
        /// TENANTFLUX_REGISTRY_USERNAME/_PASSWORD.
        #[arg(
            long,
            value_name = "oci://REGISTRY/REPOSITORY:TAG",
            requires = "public_key"
        )]
        channel: Option<tenantflux_core::policy::channel::Channel>,
        /// The platform's policy public key(s) (PEM, e.g. ed25519.pub): the channel's policy
        /// counts only if one of them signed it and its claims agree with it.
        #[arg(long = "public-key", value_name = "PATH", requires = "channel", value_hint = ValueHint::FilePath)]
        public_key: Vec<PathBuf>,
        /// Read --channel over plain HTTP (local development registries).
        #[arg(long, requires = "channel")]
        plain_http: bool,
    },
    /// Serve the fleet as a live web page on 127.0.0.1: a tile per cluster coloured by its
    /// policy (stale, not enforced, unreachable; current or behind against --channel or
    /// --expect-policy, else the generation it holds), charts of the Flux versions and policy
    /// generations, and each cluster's detail. The fleet is read again every --interval, as
    /// `fleet status` reads it, and the page follows without reloading.
    #[command(
        after_help = "Examples:\n  kubectl tenantflux fleet dashboard\n  kubectl tenantflux fleet dashboard --fleet-file fleet.yaml --interval 1m\n  kubectl tenantflux fleet dashboard -l tier=gold --concurrency 32 --port 8080 --no-open\n  kubectl tenantflux fleet dashboard --channel oci://registry.example/platform/policy:stable --public-key ed25519.pub\n  kubectl tenantflux fleet dashboard --expect-policy policy.signed.yaml"
    )]
    Dashboard(Box<FleetDashboardArgs>),
    /// The platform's policy across the fleet.
    #[command(subcommand)]
    #[command(
        after_help = "Examples:\n  kubectl tenantflux fleet policy push -f policy.signed.yaml --all"
    )]
    Policy(FleetPolicyCommand),
}

#[derive(Debug, Subcommand)]
pub enum FleetPolicyCommand {
    /// Send a signed policy to every selected cluster's agent; reports accepted, unchanged
    /// (already held), rejected (with the agent's reason) or unreachable per cluster. Safe
    /// to run again. Exits 1 when any cluster did not take it.
    #[command(
        after_help = "Examples:\n  kubectl tenantflux fleet policy push -f policy.signed.yaml --all\n  kubectl tenantflux fleet policy push -f policy.signed.yaml -l \"tenantflux.io/tenant in (tenant-a,tenant-b)\" -o json"
    )]
    Push {
        #[command(flatten)]
        file: FileArg,
        /// Push to every cluster of the fleet (else --selector must choose).
        #[arg(
            long,
            conflicts_with = "selector",
            required_unless_present = "selector"
        )]
        all: bool,
        #[command(flatten)]
        discovery: DiscoveryArgs,
        #[command(flatten)]
        fan_out: FanOutArgs,
    },
}

/// `fleet dashboard`'s flags.
#[derive(Debug, Args)]
pub struct FleetDashboardArgs {
    #[command(flatten)]
    pub discovery: DiscoveryArgs,
    #[command(flatten)]
    pub fan_out: FanOutArgs,
    /// How often the fleet is read again (at least 5s: each round asks every cluster).
    #[arg(long, default_value = "30s", value_name = "DURATION", value_parser = parse_dashboard_interval)]
    pub interval: Duration,
    /// A policy channel (oci://REGISTRY/REPOSITORY:TAG), read once and verified with
    /// --public-key: a cluster is behind when it holds an older generation than the channel,
    /// and "other policy" when it is ahead of it. Without --channel or --expect-policy nobody is
    /// called behind: what a tenant's agent reports is no measure for the others. Credentials:
    /// TENANTFLUX_REGISTRY_USERNAME/_PASSWORD.
    #[arg(
        long,
        value_name = "oci://REGISTRY/REPOSITORY:TAG",
        requires = "public_key",
        conflicts_with = "expect_policy"
    )]
    pub channel: Option<tenantflux_core::policy::channel::Channel>,
    /// The platform's policy public key(s) (PEM, e.g. ed25519.pub) the channel's policy must
    /// be signed with.
    #[arg(long = "public-key", value_name = "PATH", requires = "channel", value_hint = ValueHint::FilePath)]
    pub public_key: Vec<PathBuf>,
    /// Read --channel over plain HTTP (local development registries).
    #[arg(long, requires = "channel")]
    pub plain_http: bool,
    /// The signed policy the platform pushed (as `fleet status --expect-policy`): a cluster is
    /// behind when it holds an older generation or none, current when it holds this one, and
    /// "other policy" when it holds a newer generation or one of another key.
    #[arg(long, value_name = "PATH", value_hint = ValueHint::FilePath)]
    pub expect_policy: Option<PathBuf>,
    /// The port on 127.0.0.1 to serve on (default: a free one).
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// Print the address only; do not open a browser.
    #[arg(long)]
    pub no_open: bool,
    #[command(flatten)]
    pub session: crate::web::SessionArgs,
}

/// Where the fleet comes from, and which of it to act on.
#[derive(Debug, Args)]
pub struct DiscoveryArgs {
    /// A YAML list of clusters instead of Secrets: `- {name, kubeconfig, context, tenant,
    /// agentNamespace, labels}` (kubeconfig paths relative to the file).
    #[arg(
        long,
        env = "TENANTFLUX_FLEET_FILE",
        value_name = "PATH",
        value_hint = ValueHint::FilePath
    )]
    pub fleet_file: Option<PathBuf>,

    /// Take the kubeconfigs from the Secrets with these labels (any name, in every namespace
    /// or -n's) instead of Cozystack's `<release>-admin-kubeconfig` in `tenant-*` namespaces.
    #[arg(
        long,
        env = "TENANTFLUX_FLEET_SECRET_SELECTOR",
        value_name = "LABELS",
        conflicts_with = "fleet_file"
    )]
    pub secret_selector: Option<String>,

    /// The key of the Secrets that holds the kubeconfig. Default: `super-admin.svc` (the
    /// in-cluster endpoint) when running in a pod (KUBERNETES_SERVICE_HOST set), else
    /// `admin.conf` (the external endpoint).
    #[arg(
        long,
        env = "TENANTFLUX_FLEET_SECRET_KEY",
        value_name = "KEY",
        conflicts_with = "fleet_file"
    )]
    pub secret_key: Option<String>,

    /// Only the clusters whose labels match (the Secret's or the fleet file's labels, plus
    /// tenantflux.io/tenant=<tenant> and tenantflux.io/cluster=<cluster>), e.g.
    /// `-l tenantflux.io/tenant=tenant-acme` or `-l 'tier in (gold,silver)'`.
    #[arg(short = 'l', long, value_name = "SELECTOR")]
    pub selector: Option<Selector>,

    /// The ServiceAccount (in the agent's namespace of each tenant cluster) whose token is
    /// requested when the tenant kubeconfig has none (client certificates, as Kamaji's).
    #[arg(
        long,
        env = "TENANTFLUX_FLEET_SERVICE_ACCOUNT",
        default_value = PLATFORM_SERVICE_ACCOUNT,
        value_name = "NAME"
    )]
    pub service_account: String,
}

impl DiscoveryArgs {
    pub(super) fn discovery(&self, namespace: Option<&str>) -> Discovery {
        let key = self.secret_key.clone().unwrap_or_else(|| {
            discover::default_secret_key(std::env::var_os("KUBERNETES_SERVICE_HOST").is_some())
                .to_owned()
        });
        let namespace = namespace.map(str::to_owned);
        match (&self.fleet_file, &self.secret_selector) {
            (Some(path), _) => Discovery::File(path.clone()),
            (None, Some(selector)) => Discovery::SecretSelector {
                selector: selector.clone(),
                namespace,
                key,
            },
            (None, None) => Discovery::Cozystack { namespace, key },
        }
    }
}

/// How many clusters are asked at once, and for how long each.
#[derive(Debug, Args)]
pub struct FanOutArgs {
    /// How many clusters are asked at the same time.
    #[arg(
        long,
        env = "TENANTFLUX_FLEET_CONCURRENCY",
        default_value_t = 16,
        value_parser = clap::value_parser!(u16).range(1..),
        value_name = "N"
    )]
    pub concurrency: u16,

    /// How long one cluster may take in all (reading its kubeconfig, reaching its agent,
    /// the call) before it is reported unreachable; 0 waits forever.
    #[arg(
        long,
        env = "TENANTFLUX_FLEET_CLUSTER_TIMEOUT",
        default_value = "30s",
        value_name = "DURATION"
    )]
    pub cluster_timeout: RequestTimeout,
}

pub(super) fn parse_interval(text: &str) -> Result<Duration, String> {
    text.parse::<RequestTimeout>()?
        .get()
        .ok_or_else(|| "the interval must be longer than 0s".to_owned())
}

/// The dashboard's interval: every round asks every cluster, so not more often than 5s.
fn parse_dashboard_interval(text: &str) -> Result<Duration, String> {
    let interval = parse_interval(text)?;
    if interval < Duration::from_secs(5) {
        return Err(format!(
            "{text} is too often: every round asks every cluster, so at least 5s"
        ));
    }
    Ok(interval)
}
