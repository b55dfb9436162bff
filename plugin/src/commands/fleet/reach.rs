//! Reaching every cluster of the fleet: a bounded number at a time, each within its own
//! timeout, each failure said as the cluster's row.

use std::{
    future::Future,
    io::{self, IsTerminal as _, Write as _},
    time::Duration,
};

use anyhow::{Context as _, bail};
use futures::{StreamExt as _, stream};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use tenantflux_core::{policy::today, selector::Selector};
use tenantflux_proto::v1::PushPolicyRequest;
use tonic::Code;

use super::{
    DiscoveryArgs, FanOutArgs,
    discover::{self, Discovery, Member, Source},
    render,
    view::{
        ChannelPolicy, ExpectedPolicy, Failure, FleetPush, FleetStatus, KnownIdentity, PushResult,
        PushRow, Reach, StatusRow,
    },
};
use crate::{
    connect::{self, Agent, CallError, ConnectError, ConnectOptions},
    output::Printer,
    views::status::StatusView,
};

/// The fleet as discovered, and what reaching each cluster needs.
pub(super) struct Fleet {
    discovery: Discovery,
    selector: Selector,
    management: Option<Client>,
    /// The global flags, as the base of each cluster's connection.
    base: ConnectOptions,
}

impl Fleet {
    pub(super) async fn new(
        args: &DiscoveryArgs,
        options: &ConnectOptions,
    ) -> anyhow::Result<Self> {
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

    pub(super) async fn members(&self) -> anyhow::Result<Vec<Member>> {
        Ok(discover::discover(&self.discovery, self.management.as_ref(), &self.selector).await?)
    }

    /// Connects to `member`'s agent with its kubeconfig.
    pub(super) async fn connect(&self, member: &Member) -> Result<Agent, Failure> {
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

    pub(super) async fn status(
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
                let status = agent.get_status().await.map_err(call_failure)?;
                // The cluster's identity as the platform's own kubeconfig reads it, to check
                // the agent's account against.
                let api_uid = match agent.kube() {
                    Some(client) => kube_system_uid(client).await,
                    None => None,
                };
                Ok((status, api_uid))
            };
            let mut row = match bounded(fan_out.cluster_timeout.get(), result).await {
                Ok((status, api_uid)) => {
                    let mut row = StatusRow::answered(&member, StatusView::from(status), today);
                    row.check_identity(&KnownIdentity {
                        name: member.cluster.clone(),
                        recorded_uid: member.uid.clone(),
                        api_uid,
                    });
                    row
                }
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

    pub(super) async fn watch(
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
                        render::render_status(v, style, now)
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

    pub(super) async fn push(
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

pub(super) fn connect_failure(err: ConnectError) -> Failure {
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

pub(super) fn call_failure(err: CallError) -> Failure {
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
pub(super) async fn bounded<T>(
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

/// The UID of namespace kube-system, read with the platform's kubeconfig (None when it may
/// not read it: the agent's account then stands unchecked, and the row says nothing of it).
async fn kube_system_uid(client: &Client) -> Option<String> {
    let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> =
        kube::Api::all(client.clone());
    namespaces.get("kube-system").await.ok()?.metadata.uid
}
