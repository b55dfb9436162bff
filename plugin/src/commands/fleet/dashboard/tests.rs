use std::{path::PathBuf, time::Duration};

use clap::Parser as _;
use k8s_openapi::jiff::Timestamp;

use super::pages::{self, ClusterState, Filter, Round, Snapshot};
use crate::commands::fleet::{
    FleetCommand,
    discover::{Member, Source},
    view::{Failure, FleetStatus, Reach, StatusRow},
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
    row.enforced = generation.map(|_| true);
    row
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
        channel: None,
    }
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
        pages::states(&fleet),
        [
            Current,
            Behind,
            Stale,
            NotEnforced,
            NotEnforced,
            Current,
            NoPolicy,
            Unreachable
        ]
    );
}

#[test]
fn with_a_channel_behind_is_what_the_channel_says() {
    // Every cluster holds generation 3, the newest in the fleet, but the channel is at 4.
    let mut row = answered("a", "2.9.0", Some(3));
    row.channel = Some("behind (1)".to_owned());
    let mut ahead = answered("b", "2.9.0", Some(3));
    ahead.channel = Some("current".to_owned());
    let mut none = answered("c", "2.9.0", None);
    none.channel = Some("behind (4)".to_owned());
    assert_eq!(
        pages::states(&fleet(vec![row, ahead, none])),
        [
            ClusterState::Behind,
            ClusterState::Current,
            ClusterState::Behind
        ]
    );
}

#[test]
fn a_filter_survives_its_query_and_selects_what_it_says() {
    let filter = Filter::from_query("q=Prod+EU&state=not-enforced");
    assert_eq!(filter.search, "Prod EU");
    assert_eq!(filter.state, Some(ClusterState::NotEnforced));
    assert_eq!(Filter::from_query(&filter.query()), filter);
    let row = answered("kubernetes-prod-eu-1", "2.9.0", Some(1));
    assert!(!filter.passes(&row, ClusterState::NotEnforced), "a space");
    let filter = Filter::from_query("q=PROD-eu");
    assert!(filter.passes(&row, ClusterState::Current));
    assert!(Filter::from_query("q=tenant-a").passes(&row, ClusterState::Current));
    assert!(!Filter::from_query("q=staging").passes(&row, ClusterState::Current));
    assert!(!Filter::from_query("state=stale").passes(&row, ClusterState::Current));
    assert_eq!(Filter::from_query("state=nonsense"), Filter::default());
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
    let page =
        pages::index("Tenant fleet", Some(&snapshot(fleet)), &Filter::default()).into_string();
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
    assert!(
        page.contains("the newest in the fleet is generation 2"),
        "{page}"
    );
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
    let filter = Filter::from_query("q=prod&state=current");
    let snapshot = snapshot(fleet);
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
    let (row, _) = pages::find(&snapshot.fleet, "<b>x</b>", Some("tenant-b")).unwrap();
    assert_eq!(row.tenant, "tenant-b");
}

#[test]
fn intervals_read_as_people_write_them() {
    assert_eq!(pages::duration_text(Duration::from_secs(30)), "30s");
    assert_eq!(pages::duration_text(Duration::from_secs(120)), "2m");
    assert_eq!(pages::duration_text(Duration::from_secs(90)), "1m30s");
    assert_eq!(pages::duration_text(Duration::from_secs(3600)), "1h");
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
        FleetCommand::Dashboard(args) => Ok(args),
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
}
