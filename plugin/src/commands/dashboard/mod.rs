//! `kubectl tenantflux dashboard`: the cluster's Flux as a live web page on the user's own
//! machine (127.0.0.1, under a name of its own), through the agent with the user's own
//! credentials: every Flux object the user may watch, each one's inventory and Events, the
//! cluster's state, and suspend, resume and reconcile, which the agent authorizes as the user.

use std::sync::Arc;

use axum::{
    Extension, Router,
    extract::{Path, State},
    http::StatusCode,
    response::{
        IntoResponse, Response,
        sse::{Event, KeepAlive, Sse},
    },
    routing::{get, post},
};
use futures::{Stream, StreamExt as _};
use serde::{Deserialize, Serialize};
use tenantflux_proto::v1 as pb;
use tokio_stream::wrappers::BroadcastStream;

mod live;
mod pages;
#[cfg(test)]
mod tests;

use self::{
    live::{Change, Key, Live},
    pages::Filter,
};
use crate::{
    connect::{Agent, CallError, ConnectOptions},
    views::object::ObjectView,
    web::{self, Site},
};

/// `dashboard`'s flags.
#[derive(Debug, clap::Args)]
pub struct DashboardArgs {
    /// The port on 127.0.0.1 to serve on (default: a free one).
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// Print the address only; do not open a browser.
    #[arg(long)]
    pub no_open: bool,
    #[command(flatten)]
    pub session: web::SessionArgs,
}

struct App {
    live: Arc<Live>,
    title: String,
}

pub async fn run(options: &ConnectOptions, args: DashboardArgs) -> anyhow::Result<()> {
    let listener = web::bind(args.port).await?;
    let port = listener.local_addr()?.port();
    let live = Live::start(options.clone()).await?;
    let site = Arc::new(Site::new(port, (&args.session).into())?);
    let title = match &options.context {
        Some(context) => format!("Flux in {context}"),
        None => "Flux in this cluster".to_owned(),
    };
    let app = Arc::new(App { live, title });
    web::serve(
        listener,
        site,
        routes(app),
        "tenantflux dashboard",
        !args.no_open,
    )
    .await
}

fn routes(app: Arc<App>) -> Router {
    Router::new()
        .route("/", get(index))
        .route("/live", get(live_events))
        .route("/object/{kind}/{namespace}/{name}", get(object))
        .route("/confirm", get(confirm))
        .route("/action", post(action))
        .with_state(app)
}

async fn index(State(app): State<Arc<App>>, web::Query(filter): web::Query<Filter>) -> Response {
    let live = &app.live;
    let version = live.version();
    let cluster = pages::cluster(
        &live.status(),
        &live.upgrades(),
        live.watch_error().as_deref(),
    );
    pages::index(
        &app.title,
        &live.scope,
        &live.kinds,
        &live.objects(),
        &filter,
        version,
        cluster,
    )
    .into_response()
}

#[derive(Serialize)]
struct Upsert<'a> {
    key: String,
    kind: &'a str,
    html: String,
    /// How many objects the page's watch holds, for its count ("N of TOTAL").
    total: usize,
}

#[derive(Serialize)]
struct Remove {
    key: String,
    total: usize,
}

#[derive(Serialize)]
struct Part {
    id: &'static str,
    html: String,
}

/// The state version a page was rendered at, from its live stream's query.
#[derive(Deserialize)]
struct Since {
    /// Text, not a number: a version that does not read is one the page missed changes since.
    since: Option<String>,
}

/// The page's live stream: each change of an object the page's filter shows (a row to put in
/// place, or to take out), the cluster's state, or "reload" when the watch started over.
async fn live_events(
    State(app): State<Arc<App>>,
    web::Query(filter): web::Query<Filter>,
    web::Query(Since { since }): web::Query<Since>,
) -> Sse<impl Stream<Item = Result<Event, std::convert::Infallible>>> {
    let since = since.and_then(|v| v.parse::<u64>().ok());
    // Subscribed before the state is read, so nothing falls between the two.
    let changes = BroadcastStream::new(app.live.subscribe());
    let missed = since != Some(app.live.version());
    let resync = missed.then(|| resync(&app, &filter));
    let app_for_changes = app.clone();
    let stream = futures::stream::iter(resync.into_iter().flatten().map(Ok))
        .chain(changes.map(move |change| Ok(event(&app_for_changes, &filter, change.ok()))));
    Sse::new(stream).keep_alive(KeepAlive::default())
}

/// What a page rendered before its stream started may lack: its objects and the cluster,
/// rendered now.
fn resync(app: &App, filter: &Filter) -> Vec<Event> {
    let objects = pages::objects_part(
        &app.live.kinds,
        &app.live.objects(),
        filter,
        filter.name.is_empty(),
    );
    vec![
        part("objects", objects.into_string()),
        part("cluster", cluster_part(app).into_string()),
    ]
}

fn cluster_part(app: &App) -> maud::Markup {
    pages::cluster(
        &app.live.status(),
        &app.live.upgrades(),
        app.live.watch_error().as_deref(),
    )
}

fn part(id: &'static str, html: String) -> Event {
    Event::default()
        .event("part")
        .data(serde_json::to_string(&Part { id, html }).unwrap_or_else(|_| "{}".to_owned()))
}

/// The server-sent event of one change (`None`: some were missed, so the page reloads).
fn event(app: &App, filter: &Filter, change: Option<Change>) -> Event {
    let json =
        |name: &str, value: &dyn erased::Json| Event::default().event(name).data(value.json());
    let total = app.live.count();
    let remove = |key: Key| {
        json(
            "remove",
            &Remove {
                key: key.dom(),
                total,
            },
        )
    };
    match change {
        Some(Change::Object(key)) => match app.live.object(&key) {
            Some(object) if filter.passes(&object) => match app.live.kind(&key.kind) {
                Some((_, kind)) => json(
                    "upsert",
                    &Upsert {
                        key: key.dom(),
                        kind: &kind.kind,
                        html: pages::row(&key, kind, &object).into_string(),
                        total,
                    },
                ),
                None => remove(key),
            },
            _ => remove(key),
        },
        Some(Change::Removed(key)) => remove(key),
        Some(Change::Status) => part("cluster", cluster_part(app).into_string()),
        Some(Change::Reset) | None => Event::default().event("reload").data("{}"),
    }
}

/// JSON for the events, without a generic closure per type.
mod erased {
    pub trait Json {
        fn json(&self) -> String;
    }

    impl<T: serde::Serialize> Json for T {
        fn json(&self) -> String {
            serde_json::to_string(self).unwrap_or_else(|_| "{}".to_owned())
        }
    }
}

/// The object in the live state, by the parts of its path.
fn find(app: &App, kind: &str, namespace: &str, name: &str) -> Option<(Key, ObjectView)> {
    let (order, kind) = app.live.kind(kind)?;
    let key = Key {
        order,
        kind: kind.kind.clone(),
        namespace: namespace.to_owned(),
        name: name.to_owned(),
    };
    app.live.object(&key).map(|object| (key, object))
}

fn not_found(what: &str) -> Response {
    web::refusal(
        StatusCode::NOT_FOUND,
        &format!("{what} is not among the Flux objects this dashboard watches."),
    )
}

/// How many of the controllers' newest log lines about an object its page shows.
const LOG_LINES: usize = 50;

async fn object(
    State(app): State<Arc<App>>,
    Path((kind, namespace, name)): Path<(String, String, String)>,
) -> Response {
    let version = app.live.version();
    let Some((_, object)) = find(&app, &kind, &namespace, &name) else {
        return not_found(&format!("{kind} {namespace}/{name}"));
    };
    let agent = app.live.agent();
    let reference = pb::ObjectRef {
        kind: object.kind.clone(),
        namespace: object.namespace.clone(),
        name: object.name.clone(),
    };
    let tree = if matches!(
        object.kind.as_str(),
        "Kustomization" | "HelmRelease" | "ResourceSet"
    ) {
        Some(
            agent
                .call(agent.inspect().tree(pb::TreeRequest {
                    object: Some(reference.clone()),
                }))
                .await
                .map_err(|err| err.to_string())
                .and_then(|t| t.root.ok_or_else(|| "the agent sent no tree".to_owned())),
        )
    } else {
        None
    };
    let events = agent
        .call(agent.inspect().list_events(pb::ListEventsRequest {
            namespace: object.namespace.clone(),
            object: Some(reference),
            types: Vec::new(),
        }))
        .await
        .map(|e| e.events)
        .map_err(|err| err.to_string());
    // The newest lines only: a page, not a log viewer (`kubectl tenantflux logs -f` is).
    let logs = agent
        .call(agent.inspect().list_logs(pb::LogsRequest {
            namespace: object.namespace.clone(),
            kind: object.kind.clone(),
            name: object.name.clone(),
            ..Default::default()
        }))
        .await
        .map(|l| {
            let skip = l.lines.len().saturating_sub(LOG_LINES);
            l.lines.into_iter().skip(skip).collect()
        })
        .map_err(|err| err.to_string());
    let objects = app.live.objects();
    pages::object_page(
        &app.live.kinds,
        &objects,
        &object,
        version,
        &pages::Detail { tree, events, logs },
    )
    .into_response()
}

/// What an action's link (the confirmation's query) and its form (the post) name; a field left
/// out is empty, and [`requested`] says what is missing.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ActionForm {
    action: String,
    kind: String,
    namespace: String,
    name: String,
}

/// The action a form names, checked: one of the three, on an object of a known kind.
fn requested(form: ActionForm) -> Result<(String, pb::ObjectRef), String> {
    let ActionForm {
        action,
        kind,
        namespace,
        name,
    } = form;
    if !matches!(action.as_str(), "suspend" | "resume" | "reconcile") {
        return Err(format!(
            "unknown action {}: suspend, resume or reconcile",
            tenantflux_core::text::quote(&action)
        ));
    }
    let object = pb::ObjectRef {
        kind,
        namespace,
        name,
    };
    if object.kind.is_empty() || object.name.is_empty() {
        return Err("the form names no object (kind and name)".to_owned());
    }
    Ok((action, object))
}

/// The confirmation carries the CSRF token of the session that asked for it: a form from
/// another session (an ended one, or another browser's) is refused.
async fn confirm(
    Extension(csrf): Extension<web::Csrf>,
    web::Query(form): web::Query<ActionForm>,
) -> Response {
    match requested(form) {
        Ok((action, object)) => pages::confirm(&action, &object, csrf.token()).into_response(),
        Err(why) => web::refusal(StatusCode::BAD_REQUEST, &why),
    }
}

/// Performs a confirmed action as the user (the agent authorizes it) and shows the result.
/// The guard has checked the session and the CSRF token already.
async fn action(State(app): State<Arc<App>>, web::Form(form): web::Form<ActionForm>) -> Response {
    let (action, object) = match requested(form) {
        Ok(requested) => requested,
        Err(why) => return web::refusal(StatusCode::BAD_REQUEST, &why),
    };
    let mut done = perform(&app.live.agent(), &action, &object).await;
    if let Err(err) = &done
        && (err.is_transient() || matches!(err, CallError::Unauthenticated { .. }))
    {
        // A credential that expired while the page was open, or a lost port-forward: once
        // more on a new connection.
        if let Ok(agent) = app.live.refresh().await {
            done = perform(&agent, &action, &object).await;
        }
    }
    let status = match &done {
        Ok(_) => StatusCode::OK,
        Err(CallError::PermissionDenied { .. }) => StatusCode::FORBIDDEN,
        Err(CallError::Refused {
            code: tonic::Code::NotFound,
            ..
        }) => StatusCode::NOT_FOUND,
        Err(CallError::Refused { .. }) => StatusCode::CONFLICT,
        Err(_) => StatusCode::BAD_GATEWAY,
    };
    let result = done.map_err(|err| err.to_string());
    (status, pages::outcome(&action, &object, &result)).into_response()
}

async fn perform(agent: &Agent, action: &str, object: &pb::ObjectRef) -> Result<String, CallError> {
    let mut client = agent.workloads();
    let what = format!("{} {}/{}", object.kind, object.namespace, object.name);
    match action {
        "suspend" => agent
            .call(client.suspend(pb::SuspendRequest {
                object: Some(object.clone()),
            }))
            .await
            .map(|_| format!("{what} suspended")),
        "resume" => agent
            .call(client.resume(pb::ResumeRequest {
                object: Some(object.clone()),
            }))
            .await
            .map(|_| format!("{what} resumed, and a reconciliation requested")),
        _ => agent
            .call(client.reconcile(pb::ReconcileRequest {
                object: Some(object.clone()),
                with_source: false,
                force: false,
            }))
            .await
            .map(|r| format!("reconciliation of {what} requested at {}", r.requested_at)),
    }
}
