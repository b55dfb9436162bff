//! `kubectl tenantflux fleet dashboard`: the fleet as a live web page on the user's own machine
//! (127.0.0.1, under a name of its own). A round reads the fleet exactly as `fleet status` does
//! (the same discovery, the same bounded concurrency and per-cluster timeout, the same rows),
//! every --interval; the page shows the last round and what it cost, and its live stream sends
//! the re-rendered tiles after each round. The page only reads: it has no actions, so no forms
//! but its GET filter. A cluster is judged behind only against what the platform says
//! (`--channel`, `--expect-policy`), never against what another cluster's agent reports.

use std::{
    sync::{Arc, RwLock},
    time::{Duration, Instant},
};

use axum::{
    Router,
    extract::{Path, State},
    http::StatusCode,
    response::{
        IntoResponse, Response,
        sse::{Event, KeepAlive, Sse},
    },
    routing::get,
};
use futures::{Stream, StreamExt as _};
use k8s_openapi::jiff::Timestamp;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio_stream::wrappers::WatchStream;

mod pages;
#[cfg(test)]
mod tests;

use self::pages::{Filter, Reference, Round, Snapshot};
use super::{
    FanOutArgs, FleetDashboardArgs, channel_policy, expected_policy,
    reach::{Fleet, bounded, call_failure},
    view::{ChannelPolicy, ExpectedPolicy, FleetStatus},
};
use crate::{
    connect::ConnectOptions,
    views::status::StatusView,
    web::{self, Site},
};

/// What the pages read: the fleet's last round, and how to reach one cluster for its page.
struct Board {
    fleet: Fleet,
    fan_out: FanOutArgs,
    channel: Option<ChannelPolicy>,
    expected: Option<ExpectedPolicy>,
    interval: Duration,
    /// The last round (none before the first ends); each new one is announced to the live
    /// streams by the watch.
    latest: RwLock<Option<Snapshot>>,
    rounds: watch::Sender<u64>,
}

impl Board {
    fn snapshot(&self) -> Option<Snapshot> {
        self.latest
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// One round: the fleet read as `fleet status` reads it, timed.
    async fn read(&self) {
        let started = Instant::now();
        let status = self
            .fleet
            .status(&self.fan_out, self.expected.as_ref(), self.channel.as_ref())
            .await;
        let took = started.elapsed();
        let mut latest = self
            .latest
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let round = Round {
            clusters: 0,
            took,
            concurrency: self.fan_out.concurrency,
            interval: self.interval,
            at: Timestamp::now(),
        };
        let reference = match (&self.channel, &self.expected) {
            (Some(channel), _) => Reference::Channel(channel.channel.clone()),
            (None, Some(expected)) => Reference::Pushed(expected.clone()),
            (None, None) => Reference::None,
        };
        let next = match (status, latest.take()) {
            (Ok(fleet), _) => Snapshot {
                round: Round {
                    clusters: fleet.clusters.len(),
                    ..round
                },
                fleet,
                error: None,
                reference,
            },
            // The management cluster may come back: the last fleet stays on the page, with why
            // it is not newer.
            (Err(err), Some(mut last)) => {
                last.error = Some(format!("{err:#}"));
                last
            }
            (Err(err), None) => Snapshot {
                round,
                fleet: FleetStatus {
                    clusters: Vec::new(),
                },
                error: Some(format!("{err:#}")),
                reference,
            },
        };
        *latest = Some(next);
        drop(latest);
        self.rounds.send_modify(|n| *n += 1);
    }

    /// Reads the fleet now and then every interval, for as long as the dashboard runs; a round
    /// that takes longer than the interval is followed by the next at once, never overlapped.
    async fn refresh(&self) -> anyhow::Result<()> {
        let mut ticks = tokio::time::interval(self.interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            self.read().await;
        }
    }
}

struct App {
    board: Arc<Board>,
    title: String,
}

pub async fn run(args: FleetDashboardArgs, options: &ConnectOptions) -> anyhow::Result<()> {
    let listener = web::bind(args.port).await?;
    let port = listener.local_addr()?.port();
    let channel = match &args.channel {
        Some(channel) => Some(channel_policy(channel, &args.public_key, args.plain_http).await?),
        None => None,
    };
    let expected = args
        .expect_policy
        .as_deref()
        .map(expected_policy)
        .transpose()?;
    let fleet = Fleet::new(&args.discovery, options).await?;
    let (rounds, _) = watch::channel(0);
    let board = Arc::new(Board {
        fleet,
        fan_out: args.fan_out,
        channel,
        expected,
        interval: args.interval,
        latest: RwLock::new(None),
        rounds,
    });
    let site = Arc::new(Site::new(port, (&args.session).into())?);
    let app = Arc::new(App {
        board: board.clone(),
        title: "Tenant fleet".to_owned(),
    });
    let served = web::serve(
        listener,
        site,
        routes(app),
        "tenantflux fleet dashboard",
        !args.no_open,
    );
    tokio::select! {
        served = served => served,
        refreshed = board.refresh() => refreshed,
    }
}

fn routes(app: Arc<App>) -> Router {
    Router::new()
        .route("/", get(index))
        .route("/live", get(live_events))
        .route("/cluster/{name}", get(cluster))
        .with_state(app)
}

async fn index(State(app): State<Arc<App>>, web::Query(filter): web::Query<Filter>) -> Response {
    pages::index(&app.title, app.board.snapshot().as_ref(), &filter).into_response()
}

#[derive(Serialize)]
struct Part {
    id: &'static str,
    html: String,
}

/// The page's live stream: after each round, the tiles (with the page's filter) rendered anew.
async fn live_events(
    State(app): State<Arc<App>>,
    web::Query(filter): web::Query<Filter>,
) -> Sse<impl Stream<Item = Result<Event, std::convert::Infallible>>> {
    let rounds = WatchStream::new(app.board.rounds.subscribe());
    let stream = rounds.map(move |_| {
        let part = Part {
            id: "fleet",
            html: pages::fleet_part(app.board.snapshot().as_ref(), &filter).into_string(),
        };
        let data = serde_json::to_string(&part).unwrap_or_else(|_| "{}".to_owned());
        Ok(Event::default().event("part").data(data))
    });
    Sse::new(stream).keep_alive(KeepAlive::default())
}

/// A cluster page's query: `?tenant=` tells clusters of one name apart.
#[derive(Deserialize)]
struct ClusterQuery {
    tenant: Option<String>,
}

/// One cluster's page: its row of the last round, and its status read now from its agent
/// (within --cluster-timeout), as `status` shows it.
async fn cluster(
    State(app): State<Arc<App>>,
    Path(name): Path<String>,
    web::Query(ClusterQuery { tenant }): web::Query<ClusterQuery>,
) -> Response {
    let snapshot = app.board.snapshot();
    let Some((row, state)) = snapshot
        .as_ref()
        .and_then(|s| pages::find(s, &name, tenant.as_deref()))
    else {
        return web::refusal(
            StatusCode::NOT_FOUND,
            &format!("{name} is not a cluster of the fleet's last round."),
        );
    };
    let status = read_one(&app.board, &row.tenant, &row.cluster).await;
    pages::cluster_page(&row, state, &status).into_response()
}

/// The status of one cluster, read now as a round reads it.
async fn read_one(board: &Board, tenant: &str, cluster: &str) -> Result<StatusView, String> {
    let members = board
        .fleet
        .members()
        .await
        .map_err(|err| format!("{err:#}"))?;
    let member = members
        .into_iter()
        .find(|m| m.tenant == tenant && m.cluster == cluster)
        .ok_or_else(|| format!("{tenant}/{cluster} is no longer part of the fleet"))?;
    bounded(board.fan_out.cluster_timeout.get(), async {
        let agent = board.fleet.connect(&member).await?;
        agent.get_status().await.map_err(call_failure)
    })
    .await
    .map(StatusView::from)
    .map_err(|failure| failure.reason)
}
