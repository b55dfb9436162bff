//! The policy commands that reach out: push and show (the agent), publish (an OCI registry).

use std::{fs, path::Path};

use anyhow::Context as _;
use serde::Serialize;
use tenantflux_core::policy::{
    Policy,
    signing::{self, SignedPolicy},
};
use tenantflux_proto::v1::{GetPolicyRequest, PolicyState, PushPolicyRequest};

use super::{
    args::{KeyringCommand, PolicyCommand},
    local::run_local,
};
use crate::{
    connect::{Agent, ConnectOptions},
    context::FileArg,
    exit::Exit,
    output::{Printer, Style},
    views::status::EnforcementView,
};

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PushView {
    name: String,
    generation: u64,
    previous_generation: u64,
    unchanged: bool,
}

pub async fn run_remote(
    command: PolicyCommand,
    options: &ConnectOptions,
    printer: &Printer,
) -> anyhow::Result<()> {
    match command {
        PolicyCommand::Push { file } => push(&file, options, printer).await,
        PolicyCommand::Show => show(options, printer).await,
        PolicyCommand::Publish {
            file,
            channel,
            plain_http,
            public_key,
        } => publish(&file, &channel, plain_http, public_key.as_deref(), printer).await,
        PolicyCommand::Keyring(KeyringCommand::Publish {
            file,
            channel,
            plain_http,
        }) => publish_keyring(&file, &channel, plain_http, printer).await,
        local => run_local(&local, printer).unwrap_or(Ok(())),
    }
}

/// `policy push`: the signed policy sent to the agent, which takes it or refuses it (exit 4).
async fn push(file: &FileArg, options: &ConnectOptions, printer: &Printer) -> anyhow::Result<()> {
    let text = file.read()?;
    // The agent verifies too; parsing here gives a local, earlier error for a file
    // that is not a signed policy at all.
    SignedPolicy::parse(&text)
        .with_context(|| format!("{} is not a signed policy", file.path.display()))?;
    let agent = Agent::connect(options).await?;
    let response = agent
        .call(agent.policy().push_policy(PushPolicyRequest {
            signed_policy: text,
        }))
        .await
        // The agent does not take it: a stale, rolled-back or expired generation, one for
        // another cluster, or an agent installed without a policy key.
        .map_err(|err| Exit::Refused.on_refusal(err))
        .context("the agent refused the policy")?;
    let view = PushView {
        name: response.name,
        generation: response.generation,
        previous_generation: response.previous_generation,
        unchanged: response.unchanged,
    };
    printer.print(&view, render_push)
}

/// `policy show`: what the agent holds, as it answers.
async fn show(options: &ConnectOptions, printer: &Printer) -> anyhow::Result<()> {
    let agent = Agent::connect(options).await?;
    let state = agent
        .call(agent.policy().get_policy(GetPolicyRequest {}))
        .await?;
    printer.print(&ShowView::from(state), render_show)
}

/// `policy keyring publish`: a signed keyring, checked to parse, pushed to the keyring
/// channel beside `channel`.
async fn publish_keyring(
    file: &FileArg,
    channel: &tenantflux_core::policy::channel::Channel,
    plain_http: bool,
    printer: &Printer,
) -> anyhow::Result<()> {
    let text = file.read()?;
    let signed: tenantflux_core::policy::keyring::SignedKeyring =
        tenantflux_core::yaml::from_str(&text)
            .with_context(|| format!("{} is not a signed keyring", file.path.display()))?;
    let target = crate::channel::keyring_channel(channel);
    eprintln!("publishing the keyring to {target} ...");
    drop(signed);
    let digest = crate::channel::publish_keyring(&target, plain_http, &text).await?;
    printer.print(
        &serde_json::json!({"channel": target.to_string(), "digest": digest}),
        |_, _| format!("published the keyring to {target} at {digest}\n"),
    )
}

/// `policy push`'s answer: accepted over the generation held before, or unchanged.
fn render_push(v: &PushView, _: Style) -> String {
    if v.unchanged {
        format!(
            "policy {:?} generation {} unchanged (the agent already holds it)\n",
            v.name, v.generation
        )
    } else {
        format!(
            "policy {:?} generation {} accepted (was {})\n",
            v.name, v.generation, v.previous_generation
        )
    }
}

/// `policy show`: the policy the agent holds, its keyring, enforcement, source and problems,
/// then the document.
fn render_show(v: &ShowView, _: Style) -> String {
    let mut out = if v.present {
        let expiry = match &v.expires_at {
            Some(at) if v.stale => format!(", STALE: expired at {at}"),
            Some(at) => format!(", expires at {at}"),
            None => String::new(),
        };
        format!(
            "policy {:?} generation {} (key {}{expiry})\n",
            v.name, v.generation, v.key_id
        )
    } else {
        "no policy: the agent holds none\n".to_owned()
    };
    if v.keyring_version > 0 {
        out.push_str(&format!(
            "keyring: version {} (active keys: {})\n",
            v.keyring_version,
            v.keyring_key_ids.join(", ")
        ));
    }
    if v.present {
        let enforced = v
            .enforcement
            .as_ref()
            .map_or_else(|| "not proven yet".to_owned(), EnforcementView::line);
        out.push_str(&format!("enforced: {enforced}\n"));
    }
    if let Some(source) = &v.source {
        let how = match (&source.unanswered_since, &source.digest) {
            (Some(since), _) => format!("not answering since {since}"),
            (None, Some(digest)) => format!("at {digest}"),
            (None, None) => "not checked yet".to_owned(),
        };
        out.push_str(&format!("source: {} ({how})\n", source.channel));
    }
    for problem in &v.problems {
        out.push_str(&format!("problem: {problem}\n"));
    }
    if v.present {
        out.push_str("---\n");
        out.push_str(&v.policy);
    }
    out
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PublishView {
    channel: String,
    digest: String,
    name: String,
    generation: u64,
    key_id: String,
}

async fn publish(
    file: &FileArg,
    channel: &tenantflux_core::policy::channel::Channel,
    plain_http: bool,
    public_key: Option<&Path>,
    printer: &Printer,
) -> anyhow::Result<()> {
    let text = file.read()?;
    let signed = SignedPolicy::parse(&text)
        .with_context(|| format!("{} is not a signed policy", file.path.display()))?;
    // Without a key the policy is still parsed: agents refuse what does not parse anyway,
    // and a channel is no place to find out.
    let policy = match public_key {
        Some(path) => {
            let key_text =
                fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
            let key = signing::read_public_key(&key_text)
                .with_context(|| format!("reading the public key {}", path.display()))?;
            signed
                .verify(&key)
                .with_context(|| format!("{} does not verify", file.path.display()))?
        }
        None => Policy::parse(&signed.policy)
            .with_context(|| format!("{} holds no valid policy", file.path.display()))?,
    };
    eprintln!("publishing {policy} to {channel} ...");
    let digest = crate::channel::publish(channel, plain_http, &text, policy.generation()).await?;
    let view = PublishView {
        channel: channel.to_string(),
        digest,
        name: policy.name().to_owned(),
        generation: policy.generation(),
        key_id: signed.key_id.clone(),
    };
    printer.print(&view, |v, _| {
        format!(
            "published policy {:?} generation {} (key {}) to {} at {}\n",
            v.name, v.generation, v.key_id, v.channel, v.digest
        )
    })
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ShowView {
    present: bool,
    name: String,
    generation: u64,
    key_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    expires_at: Option<String>,
    stale: bool,
    /// 0: the single installed key (a keyring of one).
    keyring_version: u64,
    keyring_key_ids: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    source: Option<SourceView>,
    problems: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    enforcement: Option<EnforcementView>,
    policy: String,
}

impl From<PolicyState> for ShowView {
    fn from(state: PolicyState) -> Self {
        Self {
            present: state.present,
            name: state.name,
            generation: state.generation,
            key_id: state.key_id,
            expires_at: state
                .expires_at
                .map(|t| signing::format_timestamp(t.seconds)),
            stale: state.stale,
            keyring_version: state.keyring_version,
            keyring_key_ids: state.keyring_key_ids,
            source: state.source.map(|s| SourceView {
                channel: s.channel,
                digest: (!s.digest.is_empty()).then_some(s.digest),
                checked_at: s.checked_at.map(|t| signing::format_timestamp(t.seconds)),
                unanswered_since: s
                    .unanswered_since
                    .map(|t| signing::format_timestamp(t.seconds)),
                error: (!s.error.is_empty()).then_some(s.error),
            }),
            problems: state.problems,
            enforcement: EnforcementView::from_wire(state.enforcement),
            policy: state.policy,
        }
    }
}

/// The channel the agent pulls from, and how it last answered.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct SourceView {
    channel: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    digest: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    checked_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    unanswered_since: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_push_says_whether_the_agent_took_it() {
        let mut view = PushView {
            name: "platform".into(),
            generation: 4,
            previous_generation: 3,
            unchanged: false,
        };
        assert_eq!(
            render_push(&view, Style::PLAIN),
            "policy \"platform\" generation 4 accepted (was 3)\n"
        );
        view.unchanged = true;
        assert_eq!(
            render_push(&view, Style::PLAIN),
            "policy \"platform\" generation 4 unchanged (the agent already holds it)\n"
        );
    }

    fn held() -> ShowView {
        ShowView {
            present: true,
            name: "platform".into(),
            generation: 7,
            key_id: "k1".into(),
            expires_at: Some("2026-12-01T00:00:00Z".into()),
            stale: false,
            keyring_version: 2,
            keyring_key_ids: vec!["k1".into(), "k2".into()],
            source: Some(SourceView {
                channel: "oci://r.example/policy:stable".into(),
                digest: Some("sha256:00".into()),
                checked_at: Some("2026-11-30T05:00:00Z".into()),
                unanswered_since: None,
                error: None,
            }),
            problems: vec!["the channel is behind".into(), "second".into()],
            enforcement: Some(EnforcementView {
                enforced: true,
                since: Some("2026-11-30T05:00:00Z".into()),
                checked_at: Some("2026-11-30T05:10:00Z".into()),
                reason: String::new(),
            }),
            policy: "apiVersion: tenantflux.io/v1alpha1\nkind: Policy\n".into(),
        }
    }

    #[test]
    fn show_says_every_line_of_a_held_policy() {
        assert_eq!(
            render_show(&held(), Style::PLAIN),
            "\
policy \"platform\" generation 7 (key k1, expires at 2026-12-01T00:00:00Z)
keyring: version 2 (active keys: k1, k2)
enforced: yes (proven since 2026-11-30T05:00:00Z, last at 2026-11-30T05:10:00Z)
source: oci://r.example/policy:stable (at sha256:00)
problem: the channel is behind
problem: second
---
apiVersion: tenantflux.io/v1alpha1
kind: Policy
"
        );
        let stale = ShowView {
            stale: true,
            keyring_version: 0,
            enforcement: None,
            source: Some(SourceView {
                unanswered_since: Some("2026-11-29T00:00:00Z".into()),
                ..held().source.unwrap()
            }),
            problems: Vec::new(),
            ..held()
        };
        assert_eq!(
            render_show(&stale, Style::PLAIN),
            "\
policy \"platform\" generation 7 (key k1, STALE: expired at 2026-12-01T00:00:00Z)
enforced: not proven yet
source: oci://r.example/policy:stable (not answering since 2026-11-29T00:00:00Z)
---
apiVersion: tenantflux.io/v1alpha1
kind: Policy
"
        );
        let unexpiring = ShowView {
            expires_at: None,
            source: Some(SourceView {
                digest: None,
                ..held().source.unwrap()
            }),
            ..held()
        };
        assert_eq!(
            render_show(&unexpiring, Style::PLAIN),
            "\
policy \"platform\" generation 7 (key k1)
keyring: version 2 (active keys: k1, k2)
enforced: yes (proven since 2026-11-30T05:00:00Z, last at 2026-11-30T05:10:00Z)
source: oci://r.example/policy:stable (not checked yet)
problem: the channel is behind
problem: second
---
apiVersion: tenantflux.io/v1alpha1
kind: Policy
"
        );
    }

    #[test]
    fn show_without_a_policy_says_so() {
        let none = ShowView {
            present: false,
            source: None,
            ..held()
        };
        assert_eq!(
            render_show(&none, Style::PLAIN),
            "\
no policy: the agent holds none
keyring: version 2 (active keys: k1, k2)
problem: the channel is behind
problem: second
"
        );
    }
}
