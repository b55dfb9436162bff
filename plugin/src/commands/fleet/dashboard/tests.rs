use std::{path::PathBuf, time::Duration};

use clap::Parser as _;
use k8s_openapi::jiff::Timestamp;

use super::pages::{self, ClusterState, Filter, Reference, Round, Snapshot};
use crate::commands::fleet::{
    FleetCommand,
    discover::{Member, Source},
    view::{ExpectedPolicy, Failure, FleetStatus, Reach, StatusRow},
};

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

fn unreachable(cluster: &str) -> StatusRow {
    StatusRow::failed(
        &member("tenant-a", cluster),
        Failure {
            reach: Reach::Unreachable,
            reason: "no answer within 30s (--cluster-timeout)".to_owned(),
        },
    )
}

/// A cluster that answered, holding `generation` (none: no policy) of Flux `flux`.
fn answered(cluster: &str, flux: &str, generation: Option<u64>) -> StatusRow {
    let mut row = unreachable(cluster);
    row.state = Reach::Ok;
    row.reason = None;
    row.flux_version = Some(flux.to_owned());
    row.agent_version = Some("0.1.0".to_owned());
    row.policy_generation = generation;
    row.policy_name = generation.map(|_| "platform".to_owned());
    row.policy_key_id = generation.map(|_| "platform-key".to_owned());
    row.enforced = generation.map(|_| true);
    row
}

/// What the platform pushed, as `--expect-policy` reads it.
fn pushed(generation: u64) -> Reference {
    Reference::Pushed(ExpectedPolicy {
        generation,
        key_id: "platform-key".to_owned(),
    })
}

fn fleet(rows: Vec<StatusRow>) -> FleetStatus {
    FleetStatus { clusters: rows }
}

fn snapshot(fleet: FleetStatus) -> Snapshot {
    Snapshot {
        round: Round {
            clusters: fleet.clusters.len(),
            took: Duration::from_millis(1234),
            concurrency: 16,
            interval: Duration::from_secs(30),
            at: Timestamp::from_second(1_800_000_000).unwrap(),
        },
        fleet,
        error: None,
        reference: Reference::None,
    }
}

/// A filter from its query, read as the page reads it.
fn from_query(query: &str) -> Filter {
    crate::web::read_query(query).expect("a filter's query reads")
}

#[test]
fn each_row_has_the_state_its_policy_is_in() {
    let mut stale = answered("stale", "2.9.0", Some(2));
    stale.policy_stale = true;
    let mut unenforced = answered("open", "2.9.0", Some(2));
    unenforced.enforced = Some(false);
    // Not enforced outweighs stale: it refuses nothing.
    let mut both = answered("both", "2.9.0", Some(2));
    both.enforced = Some(false);
    both.policy_stale = true;
    let mut unproven = answered("unproven", "2.9.0", Some(2));
    unproven.enforced = None;
    let fleet = fleet(vec![
        answered("a", "2.9.0", Some(2)),
        answered("old", "2.9.0", Some(1)),
        stale,
        unenforced,
        both,
        unproven,
        answered("bare", "2.9.0", None),
        unreachable("gone"),
    ]);
    use ClusterState::*;
    assert_eq!(
        pages::states(&fleet, &pushed(2)),
        [
            Current,
            Behind,
            Stale,
            NotEnforced,
            NotEnforced,
            Current,
            Behind,
            Unreachable
        ]
    );
    // Without the platform's word, what each holds is shown, not judged.
    assert_eq!(
        pages::states(&fleet, &Reference::None),
        [
            Holds,
            Holds,
            Stale,
            NotEnforced,
            NotEnforced,
            Holds,
            NoPolicy,
            Unreachable
        ]
    );
}

#[test]
fn one_agent_reporting_a_higher_generation_makes_nobody_behind() {
    // A tenant's agent reports generation 99, which the platform never published.
    let liar = answered("liar", "2.9.0", Some(99));
    let fleet = fleet(vec![
        answered("a", "2.9.0", Some(2)),
        answered("b", "2.9.0", Some(2)),
        liar,
    ]);
    use ClusterState::*;
    assert_eq!(
        pages::states(&fleet, &Reference::None),
        [Holds, Holds, Holds]
    );
    // Against what the platform pushed, the others are current and the liar is the odd one.
    assert_eq!(pages::states(&fleet, &pushed(2)), [Current, Current, Other]);
    let page = pages::fleet_part(Some(&snapshot(fleet)), &Filter::default()).into_string();
    assert!(!page.contains("behind"), "{page}");
    assert!(page.contains("holds generation 2"), "{page}");
    assert!(page.contains("holds generation 99"), "{page}");
    assert!(page.contains("generations are shown, not judged"), "{page}");
    assert!(
        page.contains(r#"class="card muted""#),
        "a neutral tone: {page}"
    );
}

#[test]
fn with_a_channel_behind_is_what_the_channel_says() {
    // Every cluster holds generation 3, the newest in the fleet, but the channel is at 4.
    let marked = |generation: Option<u64>, channel: &str| {
        let mut row = answered("a", "2.9.0", generation);
        row.channel = Some(channel.to_owned());
        row
    };
    let fleet = fleet(vec![
        marked(Some(3), "behind (1)"),
        marked(Some(4), "current"),
        marked(None, "behind (4)"),
        marked(Some(5), "ahead (1)"),
        marked(Some(3), "bound elsewhere"),
        marked(None, "bound elsewhere"),
    ]);
    use ClusterState::*;
    assert_eq!(
        pages::states(&fleet, &Reference::Channel("oci://r/p:stable".to_owned())),
        [Behind, Current, Behind, Other, Holds, NoPolicy]
    );
}

#[test]
fn with_the_pushed_policy_behind_is_older_and_another_key_or_newer_is_other() {
    let mut foreign = answered("foreign", "2.9.0", Some(2));
    foreign.policy_key_id = Some("another-key".to_owned());
    let mut unknown_key = answered("unknown", "2.9.0", Some(2));
    unknown_key.policy_key_id = None;
    let mut older = answered("older", "2.9.0", Some(1));
    older.compare(&ExpectedPolicy {
        generation: 2,
        key_id: "platform-key".to_owned(),
    });
    let fleet = fleet(vec![
        answered("same", "2.9.0", Some(2)),
        older,
        answered("newer", "2.9.0", Some(3)),
        foreign,
        unknown_key,
        answered("none", "2.9.0", None),
    ]);
    use ClusterState::*;
    assert_eq!(
        pages::states(&fleet, &pushed(2)),
        [Current, Behind, Other, Other, Other, Behind]
    );
    let mut snapshot = snapshot(fleet);
    snapshot.reference = pushed(2);
    let part = pages::fleet_part(Some(&snapshot), &Filter::default()).into_string();
    assert!(
        part.contains("holds policy generation 1 (key platform-key); the platform pushed generation 2 (key platform-key)"),
        "the tile says against what: {part}"
    );
    assert!(
        part.contains("behind: against generation 2 (key platform-key) of --expect-policy"),
        "{part}"
    );
}

#[test]
fn a_filter_survives_its_query_and_selects_what_it_says() {
    let filter = from_query("q=Prod+EU&state=not-enforced");
    assert_eq!(filter.search, "Prod EU");
    assert_eq!(filter.state, Some(ClusterState::NotEnforced));
    assert_eq!(from_query(&filter.query()), filter);
    let row = answered("kubernetes-prod-eu-1", "2.9.0", Some(1));
    assert!(!filter.passes(&row, ClusterState::NotEnforced), "a space");
    let filter = from_query("q=PROD-eu");
    assert!(filter.passes(&row, ClusterState::Current));
    assert!(from_query("q=tenant-a").passes(&row, ClusterState::Current));
    assert!(!from_query("q=staging").passes(&row, ClusterState::Current));
    assert!(!from_query("state=stale").passes(&row, ClusterState::Current));
    assert_eq!(from_query("state=nonsense"), Filter::default());
    assert_eq!(Filter::default().query(), "");
}

#[test]
fn charts_are_svg_with_attributes_and_escaped_labels() {
    let hostile = "<script>alert(1)</script>\"";
    let html = crate::web::page::bar_chart(
        "Flux versions",
        &[(hostile.to_owned(), 3), ("2.9.0".to_owned(), 1)],
    )
    .into_string();
    assert!(!html.contains("<script"), "{html}");
    assert!(
        html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "{html}"
    );
    assert!(
        !html.contains("style="),
        "the CSP forbids inline style: {html}"
    );
    assert!(html.contains(r#"<svg class="chart""#), "{html}");
    // The largest count has the longest bar; every bar says its count.
    assert!(html.contains(r#"width="240""#), "{html}");
    assert!(html.contains(r#"width="80""#), "{html}");
    assert!(
        html.contains(">3</text>") && html.contains(">1</text>"),
        "{html}"
    );
}

#[test]
fn the_charts_count_versions_in_order_and_generations() {
    let fleet = fleet(vec![
        answered("a", "2.10.0", Some(2)),
        answered("b", "2.9.1", Some(2)),
        answered("c", "2.9.1", Some(1)),
        answered("d", "2.9.1", None),
        unreachable("e"),
    ]);
    let versions = pages::flux_versions(&fleet);
    assert_eq!(
        versions,
        [
            ("2.9.1".to_owned(), 3),
            ("2.10.0".to_owned(), 1),
            ("unreachable".to_owned(), 1)
        ]
    );
    assert_eq!(
        pages::generations(&fleet),
        [
            ("generation 1".to_owned(), 1),
            ("generation 2".to_owned(), 2),
            ("no policy".to_owned(), 1),
            ("unreachable".to_owned(), 1)
        ]
    );
}

#[test]
fn the_page_marks_every_tile_with_its_state_and_shows_the_cost() {
    let mut stale = answered("c-stale", "2.9.0", Some(2));
    stale.policy_stale = true;
    stale.policy_expires_at = Some("2026-12-04T05:00:00Z".to_owned());
    let fleet = fleet(vec![
        answered("c-1", "2.9.0", Some(2)),
        answered("c-old", "2.9.0", Some(1)),
        stale,
        unreachable("c-gone"),
    ]);
    let mut snapshot = snapshot(fleet);
    snapshot.reference = pushed(2);
    let page = pages::index("Tenant fleet", Some(&snapshot), &Filter::default()).into_string();
    for (cluster, state) in [
        ("c-1", "current"),
        ("c-old", "behind"),
        ("c-stale", "stale"),
        ("c-gone", "unreachable"),
    ] {
        assert!(
            page.contains(&format!(
                r#"data-cluster="{cluster}" data-tenant="tenant-a" data-state="{state}""#
            )),
            "{cluster}: {page}"
        );
    }
    assert!(page.contains(r#"class="card warn""#), "{page}");
    assert!(page.contains("the platform pushed generation 2"), "{page}");
    assert!(page.contains("expired 2026-12-04T05:00:00Z"), "{page}");
    assert!(page.contains(r#"href="/cluster/c-old""#), "{page}");
    assert!(
        page.contains(
            "refreshed every 30s; the last round read 4 clusters in 1.2 s, at most 16 at once"
        ),
        "{page}"
    );
    assert!(page.contains(r#"data-live="/live?""#), "{page}");
    assert!(page.contains(r#"<section id="fleet""#), "{page}");
    assert!(!page.contains("<script>"), "no inline script");
    assert!(!page.contains("style="), "no inline style");
}

#[test]
fn the_filter_applies_to_the_tiles_and_the_live_address() {
    let fleet = fleet(vec![
        answered("prod-1", "2.9.0", Some(2)),
        answered("prod-2", "2.9.0", Some(1)),
        answered("dev-1", "2.9.0", Some(2)),
    ]);
    let filter = from_query("q=prod&state=current");
    let mut snapshot = snapshot(fleet);
    snapshot.reference = pushed(2);
    let part = pages::fleet_part(Some(&snapshot), &filter).into_string();
    assert!(part.contains(r#"data-cluster="prod-1""#), "{part}");
    assert!(!part.contains(r#"data-cluster="prod-2""#), "{part}");
    assert!(!part.contains(r#"data-cluster="dev-1""#), "{part}");
    assert!(part.contains("1 of 3 clusters"), "{part}");
    let page = pages::index("Tenant fleet", Some(&snapshot), &filter).into_string();
    assert!(
        page.contains(r#"data-live="/live?q=prod&amp;state=current""#),
        "{page}"
    );
    assert!(
        page.contains(r#"<option value="current" selected>"#),
        "{page}"
    );
}

#[test]
fn names_from_the_fleet_are_escaped_and_clusters_of_one_name_told_apart() {
    let mut a = answered("<b>x</b>", "2.9.0", Some(1));
    a.reason = None;
    let mut b = answered("<b>x</b>", "2.9.0", Some(1));
    b.tenant = "tenant-b".to_owned();
    let snapshot = snapshot(fleet(vec![a, b]));
    let part = pages::fleet_part(Some(&snapshot), &Filter::default()).into_string();
    assert!(!part.contains("<b>x"), "{part}");
    assert!(
        part.contains(r#"href="/cluster/%3Cb%3Ex%3C%2Fb%3E?tenant=tenant-b""#),
        "{part}"
    );
    let (row, _) = pages::find(&snapshot, "<b>x</b>", Some("tenant-b")).unwrap();
    assert_eq!(row.tenant, "tenant-b");
}

/// `kubectl tenantflux fleet ARGS`, parsed on its own.
#[derive(clap::Parser)]
struct Fleet {
    #[command(subcommand)]
    command: FleetCommand,
}

fn dashboard(args: &[&str]) -> Result<super::FleetDashboardArgs, String> {
    let all = ["fleet", "dashboard"].iter().chain(args);
    match Fleet::try_parse_from(all)
        .map_err(|e| e.to_string())?
        .command
    {
        FleetCommand::Dashboard(args) => Ok(*args),
        other => Err(format!("{other:?}")),
    }
}

#[test]
fn the_dashboard_takes_the_fleet_flags_and_reads_at_most_every_5s() {
    let args = dashboard(&["--fleet-file", "f.yaml", "--concurrency", "4", "--no-open"]).unwrap();
    assert_eq!(args.interval, Duration::from_secs(30));
    assert_eq!(args.fan_out.concurrency, 4);
    assert_eq!(args.port, 0);
    assert!(args.no_open);
    assert_eq!(
        dashboard(&["--interval", "5s", "--port", "8080"]).map(|a| (a.interval, a.port)),
        Ok((Duration::from_secs(5), 8080))
    );
    let too_often = dashboard(&["--interval", "2s"]).unwrap_err();
    assert!(too_often.contains("at least 5s"), "{too_often}");
    assert!(
        dashboard(&["--channel", "oci://r.example/p:stable"]).is_err(),
        "needs --public-key"
    );
    assert_eq!(
        dashboard(&["--expect-policy", "p.signed.yaml"]).map(|a| a.expect_policy),
        Ok(Some(PathBuf::from("p.signed.yaml")))
    );
    let both = dashboard(&[
        "--expect-policy",
        "p.signed.yaml",
        "--channel",
        "oci://r.example/p:stable",
        "--public-key",
        "k.pub",
    ])
    .unwrap_err();
    assert!(both.contains("cannot be used with"), "{both}");
    // Sessions last 30 minutes idle and 12 hours at most, unless a test says otherwise.
    let limits = crate::web::SessionLimits::from(&args.session);
    assert_eq!(limits, crate::web::SessionLimits::default());
    let short = dashboard(&["--session-idle", "20s", "--session-max", "1m"]).unwrap();
    assert_eq!(
        (short.session.session_idle, short.session.session_max),
        (Duration::from_secs(20), Duration::from_secs(60))
    );
    assert!(dashboard(&["--session-max", "0s"]).is_err());
}
