//! `kubectl tenantflux fleet ...`: the management side's view. Finds the tenant clusters
//! (Cozystack's kubeconfig Secrets, Secrets by label, or a fleet file), then asks every
//! cluster's agent at once, a bounded number at a time, each within its own timeout.

mod args;
mod dashboard;
pub mod discover;
mod reach;
mod render;
#[cfg(test)]
mod tests;
pub mod untrusted;
pub mod view;

use anyhow::{Context as _, bail};
use k8s_openapi::jiff::Timestamp;
use tenantflux_core::policy::{
    Policy,
    signing::{self, SignedPolicy},
};

pub use self::args::{
    DiscoveryArgs, FanOutArgs, FleetCommand, FleetDashboardArgs, FleetPolicyCommand,
};
use self::reach::Fleet;
use self::{
    discover::Member,
    view::{ChannelPolicy, ExpectedPolicy},
};
use crate::{
    connect::ConnectOptions,
    output::{Cell, Printer, Style, table},
};

/// The ServiceAccount whose token the fleet borrows with a client-certificate kubeconfig
/// (deploy/ creates it in every tenant cluster; it may read status and push policies).
pub const PLATFORM_SERVICE_ACCOUNT: &str = "tenantflux-platform";

pub async fn run(
    command: FleetCommand,
    options: &ConnectOptions,
    printer: &Printer,
) -> anyhow::Result<()> {
    match command {
        FleetCommand::List { discovery } => list(&discovery, options, printer).await,
        FleetCommand::Status {
            discovery,
            fan_out,
            watch,
            interval,
            expect_policy,
            channel,
            public_key,
            plain_http,
        } => {
            let (expected, channel) = expectations(
                expect_policy.as_deref(),
                channel.as_ref(),
                &public_key,
                plain_http,
            )
            .await?;
            let fleet = Fleet::new(&discovery, options).await?;
            if watch {
                tokio::select! {
                    watched = fleet.watch(&fan_out, interval, expected.as_ref(), channel.as_ref(), printer) => watched,
                    interrupted = tokio::signal::ctrl_c() => interrupted.context("cannot listen for Ctrl-C"),
                }
            } else {
                status(
                    &fleet,
                    &fan_out,
                    expected.as_ref(),
                    channel.as_ref(),
                    printer,
                )
                .await
            }
        }
        FleetCommand::Dashboard(args) => dashboard::run(*args, options).await,
        FleetCommand::Policy(FleetPolicyCommand::Push {
            file,
            all: _,
            discovery,
            fan_out,
        }) => push(&file, &discovery, &fan_out, options, printer).await,
    }
}

/// `fleet list`: the members discovery finds, nothing asked of them.
async fn list(
    discovery: &DiscoveryArgs,
    options: &ConnectOptions,
    printer: &Printer,
) -> anyhow::Result<()> {
    let fleet = Fleet::new(discovery, options).await?;
    let members = fleet.members().await?;
    printer.print(&ListView { clusters: members }, render_list)
}

/// What `fleet status` compares each cluster with: the policy `--expect-policy` names, then
/// the one `--channel` holds (each read once, before any cluster is asked).
async fn expectations(
    expect_policy: Option<&std::path::Path>,
    channel: Option<&tenantflux_core::policy::channel::Channel>,
    public_key: &[std::path::PathBuf],
    plain_http: bool,
) -> anyhow::Result<(Option<ExpectedPolicy>, Option<ChannelPolicy>)> {
    let expected = expect_policy.map(expected_policy).transpose()?;
    let channel = match channel {
        Some(channel) => Some(channel_policy(channel, public_key, plain_http).await?),
        None => None,
    };
    Ok((expected, channel))
}

/// `fleet status`: every cluster asked once, the table printed, then its verdict.
async fn status(
    fleet: &Fleet,
    fan_out: &FanOutArgs,
    expected: Option<&ExpectedPolicy>,
    channel: Option<&ChannelPolicy>,
    printer: &Printer,
) -> anyhow::Result<()> {
    let view = fleet.status(fan_out, expected, channel).await?;
    printer.print(&view, |v, style| {
        render::render_status(v, style, Timestamp::now())
    })?;
    status_verdict(&view)
}

/// How `fleet status` ends once the table is printed: the first of not enforced, an
/// unknown identity, behind the channel, another policy, or not asked that holds is the
/// error (exit 1); else success.
fn status_verdict(view: &view::FleetStatus) -> anyhow::Result<()> {
    let mismatched = view
        .clusters
        .iter()
        .filter(|c| c.policy_mismatch.is_some())
        .count();
    let lagging = view.clusters.iter().filter(|c| c.lags()).count();
    let impostors = view
        .clusters
        .iter()
        .filter(|c| c.identity_mismatch.is_some())
        .count();
    let unenforced = view
        .clusters
        .iter()
        .filter(|c| c.enforced == Some(false))
        .count();
    match (view.failed(), mismatched) {
        (0, 0) if unenforced > 0 => bail!(
            "{unenforced} of {} tenant clusters do not enforce the policy they hold (ENFORCED NO in the table)",
            view.clusters.len()
        ),
        (0, 0) if impostors > 0 => bail!(
            "{impostors} of {} tenant clusters report an identity the platform does not know them by (see the table)",
            view.clusters.len()
        ),
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

/// `fleet policy push`: the signed policy checked once here, then sent to every cluster;
/// an error (exit 1) when any did not take it.
async fn push(
    file: &crate::context::FileArg,
    discovery: &DiscoveryArgs,
    fan_out: &FanOutArgs,
    options: &ConnectOptions,
    printer: &Printer,
) -> anyhow::Result<()> {
    let text = file.read()?;
    // The agents verify it too; a file that is not a signed policy at all is said once
    // here instead of once per cluster.
    let signed = SignedPolicy::parse(&text)
        .with_context(|| format!("{} is not a signed policy", file.path.display()))?;
    let policy = Policy::parse(&signed.policy)
        .with_context(|| format!("{} holds no valid policy", file.path.display()))?;
    let fleet = Fleet::new(discovery, options).await?;
    let view = fleet.push(fan_out, &text, &policy).await?;
    printer.print(&view, render::render_push)?;
    match view.failed() {
        0 => Ok(()),
        n => bail!(
            "{n} of {} tenant clusters did not take the policy (see the table)",
            view.clusters.len()
        ),
    }
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

/// What the channel holds now: read once (a manifest and one small layer), however large
/// the fleet, and verified as an agent verifies it: whoever can push to the tag must not be
/// able to make the fleet look current (or behind) with a policy the platform never signed.
async fn channel_policy(
    channel: &tenantflux_core::policy::channel::Channel,
    public_keys: &[std::path::PathBuf],
    plain_http: bool,
) -> anyhow::Result<ChannelPolicy> {
    let mut keys = Vec::with_capacity(public_keys.len());
    for path in public_keys {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading --public-key {}", path.display()))?;
        keys.push(
            signing::read_public_key(&text)
                .with_context(|| format!("reading the public key {}", path.display()))?,
        );
    }
    let (digest, text) = crate::channel::read(channel, plain_http).await?;
    let signed = SignedPolicy::parse(&text)
        .with_context(|| format!("{channel} does not hold a signed policy"))?;
    let Some(key) = keys.iter().find(|k| signing::key_id(k) == signed.key_id) else {
        let ids: Vec<String> = keys.iter().map(signing::key_id).collect();
        bail!(
            "the policy in {channel} ({digest}) is signed by key {}, which is none of --public-key ({}): a forged or foreign channel; nothing was compared",
            tenantflux_core::text::quote(&signed.key_id),
            ids.join(", ")
        );
    };
    let policy = signed
        .verify_claims(key)
        .with_context(|| {
            format!("the policy in {channel} ({digest}) does not verify: a forged channel; nothing was compared")
        })?
        .policy;
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
