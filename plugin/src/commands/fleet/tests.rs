use std::{path::PathBuf, time::Duration};

use clap::Parser;
use tenantflux_core::policy::parse_date;
use tenantflux_proto::v1 as pb;
use tonic::Code;

use super::{
    args::parse_interval,
    discover::{Discovery, Source},
    reach::{bounded, call_failure, connect_failure},
    render::*,
    view::*,
    *,
};
use crate::{
    connect::{self, CallError, ConnectError},
    output::Style,
    views::status::{
        AgentView, ConditionView, DeadlineView, EnforcementView, InstanceView, OperatorView,
        PolicyView, StatusView,
    },
};

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

/// `kubectl tenantflux fleet ARGS`, parsed on its own.
#[derive(Parser)]
struct Fleet {
    #[command(subcommand)]
    command: FleetCommand,
}

fn parse(args: &[&str]) -> Result<Fleet, clap::Error> {
    Fleet::try_parse_from(["fleet"].iter().chain(args.iter()))
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
    let FleetCommand::Status {
        discovery, fan_out, ..
    } = cli.command
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

fn member(tenant: &str, cluster: &str) -> Member {
    Member {
        tenant: tenant.to_owned(),
        cluster: cluster.to_owned(),
        labels: Default::default(),
        source: Source::File {
            kubeconfig: PathBuf::from("k.yaml"),
            context: None,
        },
        agent_namespace: None,
        uid: None,
    }
}

fn status(flux: &str, policy: Option<PolicyView>) -> StatusView {
    StatusView {
        agent: AgentView {
            version: "0.1.0".into(),
            namespace: "tenantflux-system".into(),
            health: pb::Health::Ok,
            problems: vec![],
            kubernetes_version: "v1.36.3".into(),
            started_at: None,
            cluster_uid: String::new(),
            cluster_name: String::new(),
        },
        operator: OperatorView {
            phase: pb::OperatorPhase::Ready,
            reason: String::new(),
            version: "v0.58.1".into(),
            namespace: "flux-system".into(),
            ready_replicas: 1,
            desired_replicas: 1,
            bundle_digest: String::new(),
            source: String::new(),
            notices: Vec::new(),
            last_transition: None,
            trust: "",
            vouched_generation: None,
        },
        instance: InstanceView {
            present: true,
            name: "flux".into(),
            namespace: "flux-system".into(),
            ready: Some(ConditionView {
                status: pb::ConditionStatus::True,
                reason: "ReconciliationSucceeded".into(),
                message: String::new(),
                last_transition: None,
            }),
            requested_version: "2.x".into(),
            distribution_version: flux.into(),
            registry: "ghcr.io/fluxcd".into(),
            last_applied_revision: String::new(),
            suspended: false,
            components: vec![],
        },
        policy,
        observed_at: Some("2026-11-30T05:00:00Z".into()),
    }
}

fn policy(deadline: Option<(&str, &str)>) -> PolicyView {
    PolicyView {
        generation: 7,
        name: "platform".into(),
        compliant: true,
        violations: vec![],
        warnings: vec![],
        upgrade_deadline: deadline.map(|(minimum, date)| DeadlineView {
            minimum_version: minimum.into(),
            date: date.into(),
        }),
        key_id: String::new(),
        expires_at: None,
        stale: false,
        enforcement: None,
    }
}

#[test]
fn each_cluster_is_marked_against_the_channel() {
    let channel_policy = |clusters: &str| {
        ChannelPolicy {
            channel: "oci://r.example/policy:stable".into(),
            digest: "sha256:00".into(),
            policy: Policy::parse(&format!(
                "apiVersion: tenantflux.io/v1alpha1\nkind: Policy\nmetadata: {{name: p}}\nspec:\n  generation: 7\n{clusters}"
            ))
            .unwrap(),
        }
    };
    let everywhere = channel_policy("");
    let mark = |policy: Option<PolicyView>, channel: &ChannelPolicy| {
        let mut status = status("v2.8.0", policy);
        status.agent.cluster_name = "blue".into();
        let mut row = StatusRow::answered(&member("t", "c"), status, 0);
        row.against(channel);
        (row.channel.clone(), row.lags())
    };
    let at = |generation| PolicyView {
        generation,
        ..policy(None)
    };
    assert_eq!(
        mark(Some(at(7)), &everywhere),
        (Some("current".into()), false)
    );
    assert_eq!(
        mark(Some(at(4)), &everywhere),
        (Some("behind (3)".into()), true)
    );
    assert_eq!(mark(None, &everywhere), (Some("behind (7)".into()), true));
    assert_eq!(
        mark(Some(at(9)), &everywhere),
        (Some("ahead (2)".into()), false)
    );
    let stale = PolicyView {
        stale: true,
        ..at(7)
    };
    assert_eq!(
        mark(Some(stale), &everywhere),
        (Some("stale (expired)".into()), true)
    );
    let green = channel_policy("  clusters: [{name: green}]\n");
    assert_eq!(
        mark(Some(at(4)), &green),
        (Some("bound elsewhere".into()), false)
    );
    let blue = channel_policy("  clusters: [{name: blu*}]\n");
    assert_eq!(mark(Some(at(7)), &blue), (Some("current".into()), false));
    let mut unreachable = StatusRow::failed(
        &member("t", "c"),
        Failure {
            reach: Reach::Unreachable,
            reason: "down".into(),
        },
    );
    unreachable.against(&everywhere);
    assert_eq!(unreachable.channel, None);
    let rendered = render_status(
        &FleetStatus {
            clusters: vec![{
                let mut row =
                    StatusRow::answered(&member("t", "c"), status("v2.8.0", Some(at(4))), 0);
                row.against(&everywhere);
                row
            }],
        },
        Style::PLAIN,
        Timestamp::now(),
    );
    assert!(
        rendered.contains("CHANNEL") && rendered.contains("behind (3)"),
        "{rendered}"
    );
}

#[test]
fn a_cluster_holding_another_generation_or_key_is_flagged() {
    let expected = ExpectedPolicy {
        generation: 7,
        key_id: "k1".into(),
    };
    let row = |policy: Option<PolicyView>| {
        let mut row = StatusRow::answered(&member("t", "c"), status("v2.8.0", policy), 0);
        row.compare(&expected);
        row.policy_mismatch
    };
    let keyed = |generation, key: &str| PolicyView {
        generation,
        key_id: key.into(),
        ..policy(None)
    };
    assert_eq!(row(Some(keyed(7, "k1"))), None);
    assert_eq!(
        row(Some(keyed(6, "k1"))).as_deref(),
        Some("holds policy generation 6 (key k1); the platform pushed generation 7 (key k1)")
    );
    assert_eq!(
        row(Some(keyed(7, "k2"))).as_deref(),
        Some("holds policy generation 7 (key k2); the platform pushed generation 7 (key k1)")
    );
    assert_eq!(
        row(None).as_deref(),
        Some("holds no policy; the platform pushed generation 7 (key k1)")
    );
    let mut unreachable = StatusRow::failed(
        &member("t", "c"),
        Failure {
            reach: Reach::Unreachable,
            reason: "down".into(),
        },
    );
    unreachable.compare(&expected);
    assert_eq!(unreachable.policy_mismatch, None, "no answer, no verdict");
}

fn day(date: &str) -> i64 {
    parse_date(date).unwrap()
}

#[test]
fn a_cluster_past_its_deadline_below_the_minimum_is_non_compliant() {
    let acme = member("tenant-acme", "kubernetes-acme");
    let deadline = Some(("2.8.0", "2026-09-01"));
    let before = StatusRow::answered(
        &acme,
        status("v2.7.3", Some(policy(deadline))),
        day("2026-08-31"),
    );
    assert_eq!(before.compliant, Some(true));
    assert!(!before.deadline.as_ref().unwrap().passed);
    let on = StatusRow::answered(
        &acme,
        status("v2.7.3", Some(policy(deadline))),
        day("2026-09-01"),
    );
    assert_eq!(on.compliant, Some(false));
    assert!(on.deadline.as_ref().unwrap().passed);
    assert_eq!(
        on.violations,
        ["Flux v2.7.3 is below 2.8.0, required since 2026-09-01"]
    );
    let upgraded = StatusRow::answered(
        &acme,
        status("v2.8.0", Some(policy(deadline))),
        day("2026-12-01"),
    );
    assert_eq!(upgraded.compliant, Some(true));
    assert!(upgraded.violations.is_empty());
}

#[test]
fn the_agents_own_verdict_stands_and_no_policy_is_no_verdict() {
    let acme = member("tenant-acme", "kubernetes-acme");
    let mut broken = policy(None);
    broken.compliant = false;
    broken.violations = vec!["spec.cluster.size \"large\" is not one of \"small\"".into()];
    let row = StatusRow::answered(&acme, status("v2.9.4", Some(broken)), day("2026-01-01"));
    assert_eq!(row.compliant, Some(false));
    assert_eq!(row.policy_generation, Some(7));
    let none = StatusRow::answered(&acme, status("v2.9.4", None), day("2026-01-01"));
    assert_eq!(none.compliant, None);
    assert_eq!(none.policy_generation, None);
}

#[test]
fn a_cluster_whose_api_server_does_not_enforce_its_policy_says_so_in_a_column() {
    let now: Timestamp = "2026-11-30T05:12:00Z".parse().unwrap();
    let verdict = |enforced: bool| {
        let mut p = policy(None);
        p.enforcement = Some(EnforcementView {
            enforced,
            since: Some("2026-11-30T05:00:00Z".into()),
            checked_at: Some("2026-11-30T05:11:50Z".into()),
            reason: if enforced {
                String::new()
            } else {
                "a FluxInstance that the policy refuses was admitted in a dry run".into()
            },
        });
        p
    };
    let view = FleetStatus {
        clusters: vec![
            StatusRow::answered(
                &member("tenant-a", "kubernetes-a"),
                status("v2.9.4", Some(verdict(true))),
                day("2026-11-30"),
            ),
            StatusRow::answered(
                &member("tenant-b", "kubernetes-b"),
                status("v2.9.4", Some(verdict(false))),
                day("2026-11-30"),
            ),
            StatusRow::answered(
                &member("tenant-c", "kubernetes-c"),
                status("v2.9.4", Some(policy(None))),
                day("2026-11-30"),
            ),
        ],
    };
    assert_eq!(
        view.clusters.iter().map(|c| c.enforced).collect::<Vec<_>>(),
        [Some(true), Some(false), None]
    );
    let text = render_status(&view, Style::PLAIN, now);
    let lines: Vec<&str> = text.lines().collect();
    let column = lines[0].find("ENFORCED").expect("an ENFORCED column");
    assert_eq!(&lines[1][column..column + 3], "yes", "{text}");
    assert_eq!(&lines[2][column..column + 2], "NO", "{text}");
    assert_eq!(&lines[3][column..column + 1], "-", "{text}");
    assert!(
        lines[2].contains("NOT ENFORCED since 2026-11-30T05:00:00Z: a FluxInstance that the policy refuses was admitted in a dry run"),
        "{text}"
    );
    let json = serde_json::to_value(&view).unwrap();
    assert_eq!(json["clusters"][1]["enforced"], false);
    assert!(json["clusters"][0].get("notEnforced").is_none());
}

#[test]
fn the_table_shows_answers_failures_and_deadlines() {
    let now: Timestamp = "2026-11-30T05:12:00Z".parse().unwrap();
    let view = FleetStatus {
        clusters: vec![
            StatusRow::answered(
                &member("tenant-a", "kubernetes-a"),
                status("v2.7.3", Some(policy(Some(("2.8.0", "2026-09-01"))))),
                day("2026-11-30"),
            ),
            StatusRow::failed(
                &member("tenant-b", "kubernetes-b"),
                Failure {
                    reach: Reach::Unreachable,
                    reason: "connection refused".into(),
                },
            ),
        ],
    };
    assert_eq!(view.failed(), 1);
    let text = render_status(&view, Style::PLAIN, now);
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with("TENANT     CLUSTER        AGENT   OPERATOR"),
        "{text}"
    );
    assert!(lines[1].contains("v2.7.3   True"), "{text}");
    assert!(lines[1].contains("2.8.0 since 2026-09-01   12m"), "{text}");
    assert!(lines[1].contains("   no   "), "{text}");
    assert!(lines[2].contains("Unreachable"), "{text}");
    assert!(lines[2].ends_with("connection refused"), "{text}");
    let json = serde_json::to_value(&view).unwrap();
    assert_eq!(json["clusters"][0]["deadline"]["passed"], true);
    assert_eq!(json["clusters"][0]["compliant"], false);
    assert_eq!(json["clusters"][1]["state"], "unreachable");
    assert_eq!(json["clusters"][1]["reason"], "connection refused");
}

#[test]
fn ages_read_like_kubectl() {
    let now: Timestamp = "2026-11-30T12:00:00Z".parse().unwrap();
    let at = |s: &str| age(s, now);
    assert_eq!(at("2026-11-30T11:59:15Z"), "45s");
    assert_eq!(at("2026-11-30T11:55:30Z"), "4m30s");
    assert_eq!(at("2026-11-30T11:00:00Z"), "60m");
    assert_eq!(at("2026-11-30T07:30:00Z"), "4h30m");
    assert_eq!(at("2026-11-29T12:00:00Z"), "24h");
    assert_eq!(at("2026-11-20T12:00:00Z"), "10d");
    assert_eq!(at("not a time"), "-");
}

#[test]
fn push_results_say_what_happened_per_cluster() {
    let mut accepted = PushRow::new(&member("t", "a"), PushResult::Accepted, None);
    accepted.previous_generation = Some(6);
    let view = FleetPush {
        policy: "platform".into(),
        generation: 7,
        clusters: vec![
            accepted,
            PushRow::new(&member("t", "b"), PushResult::Unchanged, None),
            PushRow::new(
                &member("t", "c"),
                PushResult::Rejected,
                Some("stale generation 7 ≤ 8".into()),
            ),
            PushRow::failed(
                &member("t", "d"),
                Failure {
                    reach: Reach::NoAgent,
                    reason: "no agent pod".into(),
                },
            ),
        ],
    };
    assert_eq!(view.failed(), 2);
    let text = render_push(&view, Style::PLAIN);
    assert!(text.starts_with("policy \"platform\" generation 7 to 4 cluster(s)\n"));
    assert!(
        text.contains("accepted    held generation 6 before"),
        "{text}"
    );
    assert!(text.contains("unchanged   already held"), "{text}");
    assert!(
        text.contains("rejected    stale generation 7 ≤ 8"),
        "{text}"
    );
    assert!(text.contains("no agent    no agent pod"), "{text}");
}

#[test]
fn a_cluster_whose_agent_tells_another_identity_is_flagged() {
    let row = |uid: &str, name: &str, known: KnownIdentity| {
        let mut status = status("v2.8.0", None);
        status.agent.cluster_uid = uid.into();
        status.agent.cluster_name = name.into();
        let mut row = StatusRow::answered(&member("t", "green"), status, 0);
        row.check_identity(&known);
        row.identity_mismatch
    };
    let known = |recorded: Option<&str>, api: Option<&str>| KnownIdentity {
        name: "green".into(),
        recorded_uid: recorded.map(Into::into),
        api_uid: api.map(Into::into),
    };
    // All agree (the name unset, or the platform's).
    assert_eq!(row("u-1", "", known(Some("u-1"), Some("u-1"))), None);
    assert_eq!(row("u-1", "green", known(None, Some("u-1"))), None);
    assert_eq!(row("u-1", "", known(None, None)), None);
    // The agent says another uid than the API server it is reached through.
    assert_eq!(
        row("u-forged", "", known(None, Some("u-1"))).as_deref(),
        Some(
            "the agent reports cluster uid \"u-forged\", but kube-system of the API server it was reached through has uid \"u-1\""
        )
    );
    // The kubeconfig reaches another cluster than the platform recorded.
    assert_eq!(
        row("u-2", "", known(Some("u-1"), Some("u-2"))).as_deref(),
        Some(
            "the platform recorded uid \"u-1\" for green, but this cluster has uid \"u-2\": its kubeconfig reaches another cluster"
        )
    );
    // Without the API server's answer, the recorded uid is checked against the agent's.
    assert!(row("u-2", "", known(Some("u-1"), None)).is_some());
    // The tenant renamed its cluster (name-bound policies would follow).
    let renamed = row("u-1", "blue", known(None, Some("u-1"))).unwrap();
    assert!(
        renamed.starts_with("the agent calls its cluster \"blue\" (TENANTFLUX_CLUSTER_NAME"),
        "{renamed}"
    );
    // No answer, no verdict.
    let mut unreachable = StatusRow::failed(
        &member("t", "green"),
        Failure {
            reach: Reach::Unreachable,
            reason: "down".into(),
        },
    );
    unreachable.check_identity(&known(Some("u-1"), None));
    assert_eq!(unreachable.identity_mismatch, None);
}

/// A row with every column set, for the table's golden rendering.
fn full_row(tenant: &str) -> StatusRow {
    StatusRow {
        tenant: tenant.into(),
        cluster: format!("kubernetes-{tenant}"),
        state: Reach::Ok,
        reason: None,
        agent_version: Some("0.1.0".into()),
        operator_version: Some("v0.58.1".into()),
        operator_vouched_by: None,
        flux_version: Some("v2.9.4".into()),
        ready: Some(pb::ConditionStatus::True),
        policy_name: Some("platform".into()),
        policy_generation: Some(7),
        policy_key_id: Some("k1".into()),
        policy_expires_at: None,
        policy_stale: false,
        channel: None,
        cluster_uid: None,
        cluster_name: None,
        identity_mismatch: None,
        policy_mismatch: None,
        enforced: Some(true),
        not_enforced: None,
        compliant: Some(true),
        violations: Vec::new(),
        deadline: None,
        last_change: Some("2026-11-30T05:00:00Z".into()),
    }
}

#[test]
fn the_status_table_paints_every_column_it_marks() {
    let now: Timestamp = "2026-11-30T05:12:00Z".parse().unwrap();
    let vouched_and_stale = StatusRow {
        operator_vouched_by: Some(4),
        policy_stale: true,
        policy_expires_at: Some("2026-11-29T00:00:00Z".into()),
        channel: Some("current".into()),
        deadline: Some(DeadlineRow {
            minimum_version: "2.8.0".into(),
            date: "2027-01-01".into(),
            passed: false,
        }),
        ..full_row("a")
    };
    let mismatched = StatusRow {
        ready: Some(pb::ConditionStatus::False),
        policy_mismatch: Some("generation 7, not 8 (--expect-policy)".into()),
        identity_mismatch: Some("reports cluster other".into()),
        not_enforced: Some("NOT ENFORCED since 2026-11-30T05:00:00Z: admitted".into()),
        enforced: Some(false),
        compliant: Some(false),
        violations: vec!["version outside".into(), "registry outside".into()],
        deadline: Some(DeadlineRow {
            minimum_version: "2.8.0".into(),
            date: "2026-09-01".into(),
            passed: true,
        }),
        channel: Some("behind (3)".into()),
        policy_stale: true,
        ..full_row("b")
    };
    let ahead = StatusRow {
        ready: None,
        enforced: None,
        compliant: None,
        policy_generation: None,
        policy_key_id: None,
        last_change: None,
        operator_version: None,
        channel: Some("ahead (2)".into()),
        ..full_row("c")
    };
    let unreachable = StatusRow::failed(
        &member("d", "kubernetes-d"),
        Failure {
            reach: Reach::Unreachable,
            reason: "connection refused".into(),
        },
    );
    let view = FleetStatus {
        clusters: vec![vouched_and_stale, mismatched, ahead, unreachable],
    };
    let text = render_status(&view, Style { color: true }, now);
    assert_eq!(Style::shown(&text), "\
TENANT   CLUSTER        AGENT   OPERATOR                   FLUX     READY         POLICY      KEY   ENFORCED   CHANNEL      COMPLIANT   DEADLINE                 LAST CHANGE   MESSAGE
a        kubernetes-a   0.1.0   v0.58.1 (vouched, gen 4)   v2.9.4   <green>True</>          <red>7 (stale)</>   k1    <green>yes</>        <green>current</>      <green>yes</>         2.8.0 from 2027-01-01    12m           stale (expired 2026-11-29T00:00:00Z): still enforced, nothing newer verified
b        kubernetes-b   0.1.0   v0.58.1                    v2.9.4   <red>False</>         <red>7 (stale)</>   <red>k1</>    <red>NO</>         <red>behind (3)</>   <red>no</>          2.8.0 since 2026-09-01   12m           stale (expired -): still enforced, nothing newer verified; NOT ENFORCED since 2026-11-30T05:00:00Z: admitted; reports cluster other; generation 7, not 8 (--expect-policy); version outside; registry outside
c        kubernetes-c   0.1.0   -                          v2.9.4   -             -           -     -          ahead (2)    -           -                        -
d        kubernetes-d   -       -                          -        <red>Unreachable</>   -           -     -          -            -           -                        -             connection refused
");
    let without_channel = FleetStatus {
        clusters: vec![full_row("a")],
    };
    assert_eq!(
        render_status(&without_channel, Style::PLAIN, now),
        "\
TENANT   CLUSTER        AGENT   OPERATOR   FLUX     READY   POLICY   KEY   ENFORCED   COMPLIANT   DEADLINE   LAST CHANGE   MESSAGE
a        kubernetes-a   0.1.0   v0.58.1    v2.9.4   True    7        k1    yes        yes         -          12m
"
    );
    assert_eq!(
        render_status(&FleetStatus { clusters: vec![] }, Style::PLAIN, now),
        "No tenant clusters found.\n"
    );
}
