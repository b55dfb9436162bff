//! `kubectl tenantflux fleet ...`: the management side's view. Finds the tenant clusters
//! (Cozystack's kubeconfig Secrets, Secrets by label, or a fleet file), then asks every
//! cluster's agent at once, a bounded number at a time, each within its own timeout.

pub mod discover;
pub mod untrusted;
pub mod view;

use std::{
    future::Future,
    io::{self, IsTerminal as _, Write as _},
    path::PathBuf,
    time::Duration,
};

use anyhow::{Context as _, bail};
use clap::{Args, Subcommand, ValueHint};
use futures::{StreamExt as _, stream};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use tenantflux_core::{
    policy::{Policy, signing::SignedPolicy, today},
    selector::Selector,
};
use tenantflux_proto::v1::PushPolicyRequest;
use tonic::Code;

use self::{
    discover::{Discovery, Member, Source},
    view::{
        ChannelPolicy, ExpectedPolicy, Failure, FleetPush, FleetStatus, PushResult, PushRow, Reach,
        StatusRow,
    },
};
use crate::{
    cli::RequestTimeout,
    connect::{self, Agent, CallError, ConnectError, ConnectOptions},
    output::{Cell, Printer, Style, table},
    policy::FileArg,
    status::StatusView,
};

/// The ServiceAccount whose token the fleet borrows with a client-certificate kubeconfig
/// (deploy/ creates it in every tenant cluster; it may read status and push policies).
pub const PLATFORM_SERVICE_ACCOUNT: &str = "tenantflux-platform";

#[derive(Debug, Subcommand)]
pub enum FleetCommand {
    /// List the tenant clusters the fleet is made of (reads only the management cluster or
    /// the fleet file).
    List {
        #[command(flatten)]
        discovery: DiscoveryArgs,
    },
    /// Ask every tenant cluster's agent for its status: one row per cluster. Exits 1 when
    /// any cluster could not be asked.
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
        /// A policy channel (oci://REGISTRY/REPOSITORY:TAG), read once: each cluster is
        /// marked current, behind (N), ahead (N), stale (expired) or bound elsewhere; exits 1
        /// when any is behind or stale. Credentials: TENANTFLUX_REGISTRY_USERNAME/_PASSWORD.
        #[arg(long, value_name = "oci://REGISTRY/REPOSITORY:TAG")]
        channel: Option<tenantflux_core::policy::channel::Channel>,
        /// Read --channel over plain HTTP (local development registries).
        #[arg(long, requires = "channel")]
        plain_http: bool,
    },
    /// The platform's policy across the fleet.
    #[command(subcommand)]
    Policy(FleetPolicyCommand),
}

#[derive(Debug, Subcommand)]
pub enum FleetPolicyCommand {
    /// Send a signed policy to every selected cluster's agent; reports accepted, unchanged
    /// (already held), rejected (with the agent's reason) or unreachable per cluster. Safe
    /// to run again. Exits 1 when any cluster did not take it.
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
    fn discovery(&self, namespace: Option<&str>) -> Discovery {
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

pub async fn run(
    command: FleetCommand,
    options: &ConnectOptions,
    printer: &Printer,
) -> anyhow::Result<()> {
    match command {
        FleetCommand::List { discovery } => {
            let fleet = Fleet::new(&discovery, options).await?;
            let members = fleet.members().await?;
            printer.print(&ListView { clusters: members }, render_list)
        }
        FleetCommand::Status {
            discovery,
            fan_out,
            watch: false,
            expect_policy,
            channel,
            plain_http,
            ..
        } => {
            let expected = expect_policy.as_deref().map(expected_policy).transpose()?;
            let channel = match &channel {
                Some(channel) => Some(channel_policy(channel, plain_http).await?),
                None => None,
            };
            let fleet = Fleet::new(&discovery, options).await?;
            let view = fleet
                .status(&fan_out, expected.as_ref(), channel.as_ref())
                .await?;
            printer.print(&view, |v, style| {
                view::render_status(v, style, Timestamp::now())
            })?;
            let mismatched = view
                .clusters
                .iter()
                .filter(|c| c.policy_mismatch.is_some())
                .count();
            let lagging = view.clusters.iter().filter(|c| c.lags()).count();
            match (view.failed(), mismatched) {
                (0, 0) if lagging > 0 => bail!(
                    "{lagging} of {} tenant clusters are behind the channel or hold an expired policy (see the table)",
                    view.clusters.len()
                ),
                (0, 0) => Ok(()),
                (0, n) => bail!(
                    "{n} of {} tenant clusters hold another policy than --expect-policy (see the table)",
                    view.clusters.len()
                ),
                (n, _) => bail!(
                    "{n} of {} tenant clusters could not be asked (see the table)",
                    view.clusters.len()
                ),
            }
        }
        FleetCommand::Status {
            discovery,
            fan_out,
            watch: true,
            interval,
            expect_policy,
            channel,
            plain_http,
        } => {
            let expected = expect_policy.as_deref().map(expected_policy).transpose()?;
            let channel = match &channel {
                Some(channel) => Some(channel_policy(channel, plain_http).await?),
                None => None,
            };
            let fleet = Fleet::new(&discovery, options).await?;
            tokio::select! {
                watched = fleet.watch(&fan_out, interval, expected.as_ref(), channel.as_ref(), printer) => watched,
                interrupted = tokio::signal::ctrl_c() => interrupted.context("cannot listen for Ctrl-C"),
            }
        }
        FleetCommand::Policy(FleetPolicyCommand::Push {
            file,
            all: _,
            discovery,
            fan_out,
        }) => {
            let text = file.read()?;
            // The agents verify it too; a file that is not a signed policy at all is said once
            // here instead of once per cluster.
            let signed = SignedPolicy::parse(&text)
                .with_context(|| format!("{} is not a signed policy", file.path.display()))?;
            let policy = tenantflux_core::policy::Policy::parse(&signed.policy)
                .with_context(|| format!("{} holds no valid policy", file.path.display()))?;
            let fleet = Fleet::new(&discovery, options).await?;
            let view = fleet.push(&fan_out, &text, &policy).await?;
            printer.print(&view, view::render_push)?;
            match view.failed() {
                0 => Ok(()),
                n => bail!(
                    "{n} of {} tenant clusters did not take the policy (see the table)",
                    view.clusters.len()
                ),
            }
        }
    }
}

fn parse_interval(text: &str) -> Result<Duration, String> {
    text.parse::<RequestTimeout>()?
        .get()
        .ok_or_else(|| "the interval must be longer than 0s".to_owned())
}

#[derive(serde::Serialize)]
struct ListView {
    clusters: Vec<Member>,
}

fn render_list(view: &ListView, style: Style) -> String {
    if view.clusters.is_empty() {
        return "No tenant clusters found.\n".to_owned();
    }
    let rows: Vec<Vec<Cell>> = view
        .clusters
        .iter()
        .map(|m| {
            vec![
                Cell::plain(&m.tenant),
                Cell::plain(&m.cluster),
                Cell::plain(m.source.to_string()),
            ]
        })
        .collect();
    table("", &["TENANT", "CLUSTER", "KUBECONFIG"], &rows, style)
}

/// The fleet as discovered, and what reaching each cluster needs.
struct Fleet {
    discovery: Discovery,
    selector: Selector,
    management: Option<Client>,
    /// The global flags, as the base of each cluster's connection.
    base: ConnectOptions,
}

impl Fleet {
    async fn new(args: &DiscoveryArgs, options: &ConnectOptions) -> anyhow::Result<Self> {
        let discovery = args.discovery(options.namespace.as_deref());
        // Secrets are read from the management cluster: the kubeconfig's current context (or
        // --context), as kubectl would.
        let management = match discovery {
            Discovery::File(_) => None,
            _ => Some(
                connect::kube_client(options)
                    .await
                    .context("connecting to the management cluster")?
                    .0,
            ),
        };
        Ok(Self {
            discovery,
            selector: args.selector.clone().unwrap_or_default(),
            management,
            base: ConnectOptions {
                token_account: args.service_account.clone(),
                ..options.clone()
            },
        })
    }

    async fn members(&self) -> anyhow::Result<Vec<Member>> {
        Ok(discover::discover(&self.discovery, self.management.as_ref(), &self.selector).await?)
    }

    /// Connects to `member`'s agent with its kubeconfig.
    async fn connect(&self, member: &Member) -> Result<Agent, Failure> {
        let kubeconfig = discover::kubeconfig(member, self.management.as_ref())
            .await
            .map_err(|err| Failure {
                reach: Reach::Error,
                reason: err.to_string(),
            })?;
        let context = match &member.source {
            Source::File { context, .. } => context.clone(),
            Source::Secret { .. } => None,
        };
        let options = ConnectOptions {
            kubeconfig: None,
            inline_kubeconfig: Some(kubeconfig),
            context,
            namespace: None,
            agent_namespace: member
                .agent_namespace
                .clone()
                .unwrap_or_else(|| self.base.agent_namespace.clone()),
            // Each cluster is reached through its own API server; a token or address given
            // for one cluster means nothing for the others.
            agent_address: None,
            token: None,
            ..self.base.clone()
        };
        Agent::connect(&options).await.map_err(|err| match err {
            // Its own message names the command line's flags, which did not give this one.
            ConnectError::Kubeconfig { cause } => Failure {
                reach: Reach::Error,
                reason: format!("the kubeconfig in {} does not load: {cause}", member.source),
            },
            err => connect_failure(err),
        })
    }

    async fn status(
        &self,
        fan_out: &FanOutArgs,
        expected: Option<&ExpectedPolicy>,
        channel: Option<&ChannelPolicy>,
    ) -> anyhow::Result<FleetStatus> {
        let members = self.members().await?;
        let today = today();
        let clusters = fan(members, fan_out, |member| async move {
            let result = async {
                let agent = self.connect(&member).await?;
                agent.get_status().await.map_err(call_failure)
            };
            let mut row = match bounded(fan_out.cluster_timeout.get(), result).await {
                Ok(status) => StatusRow::answered(&member, StatusView::from(status), today),
                Err(failure) => StatusRow::failed(&member, failure),
            };
            if let Some(expected) = expected {
                row.compare(expected);
            }
            if let Some(channel) = channel {
                row.against(channel);
            }
            row
        })
        .await;
        Ok(FleetStatus { clusters })
    }

    async fn watch(
        &self,
        fan_out: &FanOutArgs,
        interval: Duration,
        expected: Option<&ExpectedPolicy>,
        channel: Option<&ChannelPolicy>,
        printer: &Printer,
    ) -> anyhow::Result<()> {
        let mut last: Option<FleetStatus> = None;
        loop {
            match self.status(fan_out, expected, channel).await {
                Ok(view) if last.as_ref() != Some(&view) => {
                    let now = Timestamp::now();
                    let header = format!("Fleet at {}", now.strftime("%Y-%m-%d %H:%M:%S UTC"));
                    printer.print_next(last.is_none(), &header, &view, |v, style| {
                        view::render_status(v, style, now)
                    })?;
                    last = Some(view);
                }
                Ok(_) => {}
                // The first round fails as `status` does; later, the management cluster may
                // come back.
                Err(err) if last.is_none() => return Err(err),
                Err(err) => {
                    let _ = writeln!(io::stderr(), "reading the fleet failed: {err:#}; retrying");
                }
            }
            tokio::time::sleep(interval).await;
        }
    }

    async fn push(
        &self,
        fan_out: &FanOutArgs,
        text: &str,
        policy: &tenantflux_core::policy::Policy,
    ) -> anyhow::Result<FleetPush> {
        let members = self.members().await?;
        if members.is_empty() {
            // Most likely a selector that matches nothing: say so rather than succeed.
            bail!(
                "no tenant cluster matched (check -l, --secret-selector or --fleet-file); nothing was pushed"
            );
        }
        let clusters = fan(members, fan_out, |member| async move {
            // Err: the cluster could not be asked; Ok(Err): its agent refused the policy.
            let result = async {
                let agent = self.connect(&member).await?;
                let pushed = agent
                    .call(agent.policy().push_policy(PushPolicyRequest {
                        signed_policy: text.to_owned(),
                    }))
                    .await;
                match pushed {
                    Ok(response) => Ok(Ok(response)),
                    // The agent's refusals: stale generation (FAILED_PRECONDITION), bad
                    // signature or unknown key (PERMISSION_DENIED, as is a caller without
                    // `update` on policies), not a policy (INVALID_ARGUMENT).
                    Err(err @ (CallError::Refused { .. } | CallError::PermissionDenied { .. })) => {
                        Ok(Err(err.to_string()))
                    }
                    Err(err) => Err(call_failure(err)),
                }
            };
            match bounded(fan_out.cluster_timeout.get(), result).await {
                Ok(Ok(response)) => {
                    let result = if response.unchanged {
                        PushResult::Unchanged
                    } else {
                        PushResult::Accepted
                    };
                    let mut row = PushRow::new(&member, result, None);
                    row.previous_generation =
                        (!response.unchanged).then_some(response.previous_generation);
                    row
                }
                Ok(Err(reason)) => PushRow::new(&member, PushResult::Rejected, Some(reason)),
                Err(failure) => PushRow::failed(&member, failure),
            }
        })
        .await;
        Ok(FleetPush {
            policy: policy.name().to_owned(),
            generation: policy.generation(),
            clusters,
        })
    }
}

fn connect_failure(err: ConnectError) -> Failure {
    let reach = match &err {
        ConnectError::NoAgentPod { .. } | ConnectError::ClientAccountMissing { .. } => {
            Reach::NoAgent
        }
        err if err.is_transient() => Reach::Unreachable,
        _ => Reach::Error,
    };
    Failure {
        reach,
        reason: err.to_string(),
    }
}

fn call_failure(err: CallError) -> Failure {
    let reach = match &err {
        err if err.is_transient() => Reach::Unreachable,
        CallError::Other {
            code: Code::Unimplemented,
            ..
        } => Reach::NoAgent,
        _ => Reach::Error,
    };
    Failure {
        reach,
        reason: err.to_string(),
    }
}

/// Runs `work` for one cluster within `timeout`; running out is being unreachable.
async fn bounded<T>(
    timeout: Option<Duration>,
    work: impl Future<Output = Result<T, Failure>>,
) -> Result<T, Failure> {
    match timeout {
        None => work.await,
        Some(timeout) => tokio::time::timeout(timeout, work)
            .await
            .unwrap_or_else(|_| {
                Err(Failure {
                    reach: Reach::Unreachable,
                    reason: format!("no answer within {timeout:?} (--cluster-timeout)"),
                })
            }),
    }
}

/// `work` for every member, `--concurrency` at a time; rows in the members' order. Progress
/// goes to stderr when it is a terminal.
async fn fan<'a, R, F, Fut>(members: Vec<Member>, fan_out: &FanOutArgs, work: F) -> Vec<R>
where
    F: Fn(Member) -> Fut + 'a,
    Fut: Future<Output = R> + 'a,
{
    let total = members.len();
    let mut progress = Progress::new(total, io::stderr().is_terminal());
    let work = &work;
    let mut indexed: Vec<(usize, R)> = stream::iter(members.into_iter().enumerate())
        .map(|(i, member)| async move { (i, work(member).await) })
        .buffer_unordered(usize::from(fan_out.concurrency))
        .inspect(|_| progress.step())
        .collect()
        .await;
    progress.finish();
    indexed.sort_by_key(|(i, _)| *i);
    indexed.into_iter().map(|(_, row)| row).collect()
}

/// `12/100 clusters` on one stderr line, rewritten as clusters answer.
struct Progress {
    total: usize,
    done: usize,
    enabled: bool,
}

impl Progress {
    fn new(total: usize, enabled: bool) -> Self {
        let progress = Self {
            total,
            done: 0,
            enabled: enabled && total > 0,
        };
        progress.draw();
        progress
    }

    fn draw(&self) {
        if self.enabled {
            let _ = write!(io::stderr(), "\r{}/{} clusters", self.done, self.total);
        }
    }

    fn step(&mut self) {
        self.done += 1;
        self.draw();
    }

    fn finish(&self) {
        if self.enabled {
            // Clears the line, so the table starts clean.
            let _ = write!(io::stderr(), "\r\x1b[K");
        }
    }
}

/// What the channel holds now: read once (a manifest and one small layer), however large
/// the fleet.
async fn channel_policy(
    channel: &tenantflux_core::policy::channel::Channel,
    plain_http: bool,
) -> anyhow::Result<ChannelPolicy> {
    let (digest, text) = crate::channel::read(channel, plain_http).await?;
    let signed = SignedPolicy::parse(&text)
        .with_context(|| format!("{channel} does not hold a signed policy"))?;
    let policy =
        Policy::parse(&signed.policy).with_context(|| format!("the policy in {channel}"))?;
    Ok(ChannelPolicy {
        channel: channel.to_string(),
        digest,
        policy,
    })
}

/// The generation and key id of the signed policy file `path` (`--expect-policy`).
fn expected_policy(path: &std::path::Path) -> anyhow::Result<ExpectedPolicy> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading --expect-policy {}", path.display()))?;
    let signed = SignedPolicy::parse(&text)
        .with_context(|| format!("--expect-policy {} is not a signed policy", path.display()))?;
    let policy = Policy::parse(&signed.policy)
        .with_context(|| format!("the policy in --expect-policy {}", path.display()))?;
    Ok(ExpectedPolicy {
        generation: policy.generation(),
        key_id: signed.key_id,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_failures_say_whether_the_cluster_or_the_agent_is_missing() {
        let no_agent = connect_failure(ConnectError::NoAgentPod {
            namespace: "tenantflux-system".into(),
        });
        assert_eq!(no_agent.reach, Reach::NoAgent);
        let down = connect_failure(ConnectError::ListPods {
            namespace: "tenantflux-system".into(),
            cause: "connection refused".into(),
        });
        assert_eq!(down.reach, Reach::Unreachable);
        assert!(down.reason.contains("connection refused"));
        let config = connect_failure(ConnectError::Kubeconfig {
            cause: "no context".into(),
        });
        assert_eq!(config.reach, Reach::Error);
        let old_agent = call_failure(CallError::Other {
            target: connect::AgentTarget::Address("http://x".into()),
            code: Code::Unimplemented,
            message: "unknown service".into(),
        });
        assert_eq!(old_agent.reach, Reach::NoAgent);
    }

    fn parse(args: &[&str]) -> Result<crate::cli::Cli, clap::Error> {
        use clap::Parser as _;
        crate::cli::Cli::try_parse_from(["kubectl-tenantflux", "fleet"].iter().chain(args.iter()))
    }

    #[test]
    fn pushing_to_the_fleet_needs_all_or_a_selector_never_both() {
        assert!(parse(&["policy", "push", "-f", "p.yaml", "--all"]).is_ok());
        assert!(parse(&["policy", "push", "-f", "p.yaml", "-l", "tier=gold"]).is_ok());
        assert!(parse(&["policy", "push", "-f", "p.yaml"]).is_err());
        assert!(parse(&["policy", "push", "-f", "p.yaml", "--all", "-l", "tier=gold"]).is_err());
    }

    #[test]
    fn discovery_flags_parse_and_exclude_each_other() {
        let cli = parse(&[
            "status",
            "--secret-selector",
            "platform.example/kubeconfig=true",
            "--secret-key",
            "value",
            "-l",
            "tenantflux.io/tenant in (tenant-a)",
            "--concurrency",
            "4",
            "--cluster-timeout",
            "5s",
        ])
        .unwrap();
        let crate::cli::Command::Fleet(FleetCommand::Status {
            discovery, fan_out, ..
        }) = cli.command
        else {
            panic!("fleet status");
        };
        assert_eq!(
            discovery.discovery(Some("platform")),
            Discovery::SecretSelector {
                selector: "platform.example/kubeconfig=true".into(),
                namespace: Some("platform".into()),
                key: "value".into(),
            }
        );
        assert_eq!(fan_out.concurrency, 4);
        assert_eq!(fan_out.cluster_timeout.get(), Some(Duration::from_secs(5)));
        assert!(parse(&["status", "--fleet-file", "f.yaml", "--secret-key", "k"]).is_err());
        assert!(parse(&["status", "--concurrency", "0"]).is_err());
        assert!(parse(&["status", "-l", "tier in (gold"]).is_err());
    }

    #[test]
    fn a_watch_interval_is_a_positive_duration() {
        assert_eq!(parse_interval("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_interval("1m30s"), Ok(Duration::from_secs(90)));
        assert!(parse_interval("0").is_err());
        assert!(parse_interval("soon").is_err());
    }

    #[tokio::test]
    async fn a_cluster_out_of_time_is_unreachable() {
        let slow = async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            Ok::<_, Failure>(())
        };
        let failure = bounded(Some(Duration::from_millis(10)), slow)
            .await
            .unwrap_err();
        assert_eq!(failure.reach, Reach::Unreachable);
        assert!(
            failure.reason.contains("--cluster-timeout"),
            "{}",
            failure.reason
        );
    }
}
