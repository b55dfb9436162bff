//! The local web server behind `dashboard` and `fleet dashboard`, safe by construction:
//!
//! - it listens on 127.0.0.1 only, under a name of its own for each run
//!   (`http://tenantflux-<random>.localhost:PORT`, which browsers resolve to loopback
//!   themselves), and answers only requests whose Host header is that name and port. Browsers
//!   keep cookies per host name, not per port: under 127.0.0.1 or localhost the session cookie
//!   would also go to every other server there (another local user's, on another port); under
//!   a random name it goes to none, and a DNS-rebinding page elsewhere cannot reach the pages;
//! - the address it prints carries a one-time token; the first request with it gets an
//!   HttpOnly, SameSite=Strict session cookie, and every other request needs that cookie;
//! - a session ends after a while without a request and, however busy, a while after it
//!   began ([`SessionLimits`]); its pages then say so, and the terminal gets a new sign-in
//!   address;
//! - every request that is not a GET or HEAD needs the session's own CSRF token as the form
//!   field `csrf`, and an Origin (when the browser sends one) of this server;
//! - every answer carries a Content-Security-Policy that allows only this server's own script,
//!   style and images, no inline script, no framing, and no other origin: nothing from outside is
//!   loaded.
//!
//! What the pages show comes from the agent, asked with the user's own credentials: the server
//! adds no power of its own.

use std::{
    io::Write as _,
    net::{Ipv4Addr, SocketAddr},
    sync::{Arc, Mutex, MutexGuard},
    time::{Duration, Instant},
};

use anyhow::Context as _;
use axum::{
    Router,
    body::Body,
    extract::{FromRequest, FromRequestParts, Request, State},
    http::{HeaderMap, HeaderValue, Method, StatusCode, header, request::Parts},
    middleware::{self, Next},
    response::{IntoResponse, Response},
    routing::get,
};
use cookie::{Cookie, SameSite};
use futures::StreamExt as _;
use serde::{Deserialize, de::DeserializeOwned};
use tokio::net::TcpListener;

pub mod page;

/// The longest form a page may post: an action names one object.
const FORM_LIMIT: usize = 16 * 1024;

/// The policy of every answer: this origin's script, style and images only.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// The session cookie's name. One server per host name, so one name serves every dashboard.
const COOKIE: &str = "tenantflux-session";

/// `bytes` random bytes from the OS, as hex.
fn random_hex(bytes: usize) -> anyhow::Result<String> {
    let mut random = vec![0_u8; bytes];
    getrandom::fill(&mut random)
        .map_err(|err| anyhow::anyhow!("cannot draw a random token from the OS: {err}"))?;
    Ok(random.iter().map(|b| format!("{b:02x}")).collect())
}

/// A random secret: 32 bytes from the OS, as hex.
#[derive(Clone)]
pub struct Secret(String);

impl Secret {
    fn new() -> anyhow::Result<Self> {
        random_hex(32).map(Self)
    }

    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Compares in time that does not depend on where the two differ.
    fn matches(&self, given: &str) -> bool {
        let (a, b) = (self.0.as_bytes(), given.as_bytes());
        a.len() == b.len() && a.iter().zip(b).fold(0_u8, |acc, (x, y)| acc | (x ^ y)) == 0
    }
}

/// The CSRF token of the session a request came with, for the pages' forms (an axum
/// extension the guard puts on every signed-in request).
#[derive(Clone)]
pub struct Csrf(Secret);

impl Csrf {
    pub fn token(&self) -> &str {
        self.0.expose()
    }
}

/// How long a session lasts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionLimits {
    /// Without a request. A page left open is not idle: its live stream is ended well within
    /// this, and the browser's reconnection is a request.
    pub idle: Duration,
    /// Since the sign-in, however busy.
    pub absolute: Duration,
}

impl Default for SessionLimits {
    fn default() -> Self {
        Self {
            idle: Duration::from_secs(30 * 60),
            absolute: Duration::from_secs(12 * 3600),
        }
    }
}

/// The session limits as flags, hidden: they are there for tests that watch a session end.
#[derive(Clone, Debug, clap::Args)]
pub struct SessionArgs {
    /// How long a session lasts without a request.
    #[arg(long, hide = true, env = "TENANTFLUX_DASHBOARD_SESSION_IDLE", default_value = "30m", value_parser = parse_limit)]
    pub session_idle: Duration,
    /// How long a session lasts at most.
    #[arg(long, hide = true, env = "TENANTFLUX_DASHBOARD_SESSION_MAX", default_value = "12h", value_parser = parse_limit)]
    pub session_max: Duration,
}

impl From<&SessionArgs> for SessionLimits {
    fn from(args: &SessionArgs) -> Self {
        Self {
            idle: args.session_idle,
            absolute: args.session_max,
        }
    }
}

fn parse_limit(text: &str) -> Result<Duration, String> {
    let limit = tenantflux_core::duration::parse(text).map_err(|err| err.to_string())?;
    if limit.is_zero() {
        return Err("a session must last longer than 0s".to_owned());
    }
    Ok(limit)
}

/// Why a session ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expiry {
    Idle,
    Absolute,
}

/// The signed-in browser's session.
#[derive(Clone)]
struct Session {
    cookie: Secret,
    csrf: Secret,
    started: Instant,
    seen: Instant,
}

impl Session {
    fn expiry(&self, now: Instant, limits: SessionLimits) -> Option<Expiry> {
        if now.saturating_duration_since(self.started) >= limits.absolute {
            Some(Expiry::Absolute)
        } else if now.saturating_duration_since(self.seen) >= limits.idle {
            Some(Expiry::Idle)
        } else {
            None
        }
    }

    /// When a stream opened at `now` must end: before the session could go idle (so the
    /// browser reconnects in time, and an open page keeps its session), and when it ends.
    fn stream_end(&self, now: Instant, limits: SessionLimits) -> Instant {
        (now + limits.idle / 2).min(self.started + limits.absolute)
    }
}

/// A sign-in token and the session it opens, drawn together so that signing in cannot fail.
struct Pending {
    token: Secret,
    session: (Secret, Secret),
}

impl Pending {
    fn new() -> anyhow::Result<Self> {
        Ok(Self {
            token: Secret::new()?,
            session: (Secret::new()?, Secret::new()?),
        })
    }
}

/// What a request's cookie is worth.
#[derive(Clone)]
enum Visit {
    /// The live session's: its CSRF token, and when a stream opened now must end.
    Signed { csrf: Secret, stream_end: Instant },
    /// The cookie of the session that ended last.
    Expired(Expiry),
    /// No cookie, or one this server never gave.
    Stranger,
}

/// Why the sign-in address did not sign the browser in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SignInRefused {
    /// There is no sign-in address now: the one printed was used and its session is live.
    Used,
    /// Not the address printed last.
    Wrong,
}

/// Who may come in: the sign-in token while nobody is signed in, the one session, and the last
/// session that ended (so that its cookie is told "expired", not "not signed in").
struct Door {
    pending: Option<Pending>,
    session: Option<Session>,
    ended: Option<(Secret, Expiry)>,
}

impl Door {
    fn new() -> anyhow::Result<Self> {
        Ok(Self {
            pending: Some(Pending::new()?),
            session: None,
            ended: None,
        })
    }

    /// Ends the session when it is past a limit at `now`, and draws a new sign-in token for the
    /// next one; true when it did (the new address is to be printed).
    fn end_expired(&mut self, now: Instant, limits: SessionLimits) -> anyhow::Result<bool> {
        let Some(why) = self.session.as_ref().and_then(|s| s.expiry(now, limits)) else {
            return Ok(false);
        };
        if let Some(session) = self.session.take() {
            self.ended = Some((session.cookie, why));
        }
        self.pending = Some(Pending::new()?);
        Ok(true)
    }

    /// The session a request's cookies (the values of every cookie of [`COOKIE`]'s name) belong
    /// to; a live session's request counts as use.
    fn visit(&mut self, cookies: &[&str], now: Instant, limits: SessionLimits) -> Visit {
        let holds = |secret: &Secret| cookies.iter().any(|c| secret.matches(c));
        if let Some(session) = self.session.as_mut().filter(|s| holds(&s.cookie)) {
            session.seen = now;
            return Visit::Signed {
                csrf: session.csrf.clone(),
                stream_end: session.stream_end(now, limits),
            };
        }
        match &self.ended {
            Some((cookie, why)) if holds(cookie) => Visit::Expired(*why),
            _ => Visit::Stranger,
        }
    }

    /// Exchanges the sign-in token for a session; its cookie's value.
    fn sign_in(&mut self, given: &str, now: Instant) -> Result<Secret, SignInRefused> {
        let pending = self.pending.take().ok_or(SignInRefused::Used)?;
        if !pending.token.matches(given) {
            self.pending = Some(pending);
            return Err(SignInRefused::Wrong);
        }
        let (cookie, csrf) = pending.session;
        self.session = Some(Session {
            cookie: cookie.clone(),
            csrf,
            started: now,
            seen: now,
        });
        Ok(cookie)
    }
}

/// What the server reads the time from: `Instant::now`, but for tests.
pub type Clock = Arc<dyn Fn() -> Instant + Send + Sync>;

/// One server's name, secrets and session.
pub struct Site {
    /// `tenantflux-<random>.localhost:PORT`: the one Host header answered.
    host: String,
    limits: SessionLimits,
    clock: Clock,
    door: Mutex<Door>,
    /// Says a new sign-in address (a session ended) where the user reads the first one.
    announce: Box<dyn Fn(&str) + Send + Sync>,
}

impl Site {
    pub fn new(port: u16, limits: SessionLimits) -> anyhow::Result<Self> {
        Self::with_clock(
            port,
            limits,
            Arc::new(Instant::now),
            Box::new(|url| {
                let mut stdout = std::io::stdout().lock();
                // Nobody may read stdout any more (a pipe closed): the page still says what
                // happened, and a restart gives a new address.
                let _ = writeln!(stdout, "The session ended: sign in again at {url}");
                let _ = stdout.flush();
            }),
        )
    }

    fn with_clock(
        port: u16,
        limits: SessionLimits,
        clock: Clock,
        announce: Box<dyn Fn(&str) + Send + Sync>,
    ) -> anyhow::Result<Self> {
        // 16 bytes: a name nobody guesses, in one DNS label (at most 63 characters).
        let name = random_hex(16)?;
        Ok(Self {
            host: format!("tenantflux-{name}.localhost:{port}"),
            limits,
            clock,
            door: Mutex::new(Door::new()?),
            announce,
        })
    }

    fn door(&self) -> MutexGuard<'_, Door> {
        self.door
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `http://NAME.localhost:PORT`, the only origin this server answers.
    pub fn origin(&self) -> String {
        format!("http://{}", self.host)
    }

    /// The address that signs a browser in, once (no token while a session is live).
    pub fn login_url(&self) -> String {
        let token = self
            .door()
            .pending
            .as_ref()
            .map(|p| p.token.expose().to_owned())
            .unwrap_or_default();
        format!("{}/login?token={token}", self.origin())
    }

    fn host_allowed(&self, host: &str) -> bool {
        host.eq_ignore_ascii_case(&self.host)
    }

    fn origin_allowed(&self, origin: &str) -> bool {
        origin
            .strip_prefix("http://")
            .is_some_and(|host| self.host_allowed(host))
    }

    /// Ends a session past its limits; prints the next sign-in address when it did.
    fn end_expired(&self, now: Instant) -> anyhow::Result<()> {
        if self.door().end_expired(now, self.limits)? {
            (self.announce)(&self.login_url());
        }
        Ok(())
    }

    /// Every value of a cookie of [`COOKIE`]'s name the request holds, not only the last: a
    /// cookie of the same name planted by another page must not hide the session's.
    fn visit(&self, headers: &HeaderMap, now: Instant) -> Visit {
        let cookies: Vec<Cookie<'_>> = headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(Cookie::split_parse)
            .filter_map(Result::ok)
            .filter(|cookie| cookie.name() == COOKIE)
            .collect();
        let values: Vec<&str> = cookies.iter().map(Cookie::value).collect();
        self.door().visit(&values, now, self.limits)
    }

    /// Exchanges the one-time token (`given`) for the session cookie.
    fn sign_in(&self, given: &str, now: Instant) -> Response {
        let cookie = match self.door().sign_in(given, now) {
            Ok(cookie) => cookie,
            Err(SignInRefused::Used) => {
                return refusal(
                    StatusCode::UNAUTHORIZED,
                    "This sign-in address was used already: it works once. Use the browser that opened it, or stop the dashboard (Ctrl-C) and start it again for a new address.",
                );
            }
            Err(SignInRefused::Wrong) => {
                return refusal(
                    StatusCode::UNAUTHORIZED,
                    "This sign-in address is not the one the dashboard printed last. Copy the whole address from the terminal.",
                );
            }
        };
        // A session cookie (no expiry: the server ends the session) for this host only (no
        // Domain), never readable by script, never sent from another site's page.
        let cookie = Cookie::build((COOKIE, cookie.expose()))
            .path("/")
            .http_only(true)
            .same_site(SameSite::Strict)
            .build();
        let mut response = (StatusCode::SEE_OTHER, [(header::LOCATION, "/")]).into_response();
        if let Ok(value) = HeaderValue::from_str(&cookie.to_string()) {
            response.headers_mut().insert(header::SET_COOKIE, value);
        }
        response
    }

    /// The page of a session that ended: why, and where the next sign-in address is.
    fn expired(&self, why: Expiry) -> Response {
        let after = match why {
            Expiry::Idle => format!(
                "after {} without a request",
                crate::age::human(self.limits.idle)
            ),
            Expiry::Absolute => format!(
                "{} after signing in",
                crate::age::human(self.limits.absolute)
            ),
        };
        notice(
            StatusCode::UNAUTHORIZED,
            "Session expired",
            &format!(
                "This dashboard's session ended {after}. The dashboard printed a new sign-in address in the terminal: open it to sign in again."
            ),
        )
    }
}

/// A refusal as a small page (it carries the same headers as every answer).
pub fn refusal(status: StatusCode, message: &str) -> Response {
    notice(status, "Refused", message)
}

fn notice(status: StatusCode, heading: &str, message: &str) -> Response {
    (
        status,
        page::layout(
            "tenantflux dashboard",
            None,
            maud::html! { main { h1 { (heading) } p role="alert" { (message) } } },
        ),
    )
        .into_response()
}

/// The checks every request passes before a page sees it, in this order: Host, sign-in or
/// session, CSRF; and the headers every answer gets.
async fn guard(State(site): State<Arc<Site>>, request: Request, next: Next) -> Response {
    let mut response = check(&site, request, next).await;
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::X_FRAME_OPTIONS, "DENY"),
        // The sign-in address holds a token: never send it to another site. Not
        // `no-referrer`: with it a browser sends `Origin: null` on a form's POST, and the
        // Origin check above could not tell this dashboard's forms from another site's.
        (header::REFERRER_POLICY, "same-origin"),
        (header::CACHE_CONTROL, "no-store"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

async fn check(site: &Site, mut request: Request, next: Next) -> Response {
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or_default();
    if !site.host_allowed(host) {
        // The name is not said: whoever knew it could serve a page under it on another port,
        // and the browser would send that page the cookie.
        return refusal(
            StatusCode::MISDIRECTED_REQUEST,
            &format!(
                "This dashboard answers only at the address it printed in the terminal (http://tenantflux-….localhost:PORT/), not at host {}.",
                tenantflux_core::text::quote(host)
            ),
        );
    }
    let now = (site.clock)();
    if let Err(err) = site.end_expired(now) {
        return refusal(StatusCode::INTERNAL_SERVER_ERROR, &format!("{err:#}"));
    }
    if request.uri().path() == "/login" && request.method() == Method::GET {
        // A query that does not read (a token given twice) signs in as no token does.
        let given = axum::extract::Query::<SignIn>::try_from_uri(request.uri())
            .map(|query| query.0.token)
            .unwrap_or_default();
        return site.sign_in(&given, now);
    }
    let (csrf, stream_end) = match site.visit(request.headers(), now) {
        Visit::Signed { csrf, stream_end } => (csrf, stream_end),
        Visit::Expired(why) => return site.expired(why),
        Visit::Stranger => {
            return refusal(
                StatusCode::UNAUTHORIZED,
                "Not signed in: open the address the dashboard printed in the terminal (it signs one browser in).",
            );
        }
    };
    request.extensions_mut().insert(Csrf(csrf.clone()));
    if matches!(*request.method(), Method::GET | Method::HEAD) {
        let response = next.run(request).await;
        return ending_at(response, stream_end.saturating_duration_since(now));
    }
    if let Some(origin) = request.headers().get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or_default();
        if !site.origin_allowed(origin) {
            return refusal(
                StatusCode::FORBIDDEN,
                &format!(
                    "Refused: the form was sent from another site ({}).",
                    tenantflux_core::text::quote(origin)
                ),
            );
        }
    }
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, FORM_LIMIT).await else {
        return refusal(
            StatusCode::PAYLOAD_TOO_LARGE,
            "Refused: the form is larger than any page of this dashboard sends.",
        );
    };
    // Read as the page's `Form` will read the body; a form without the field, or with it
    // twice, carries no token.
    let csrf_ok = serde_urlencoded::from_bytes::<CsrfField>(&bytes)
        .is_ok_and(|form| csrf.matches(&form.csrf));
    if !csrf_ok {
        return refusal(
            StatusCode::FORBIDDEN,
            "Refused: the form did not carry this session's CSRF token. Reload the page and try again.",
        );
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

/// A live stream (server-sent events) cut after `left`: a session's stream must not outlive
/// it, and must end before the session could go idle. The browser reconnects, as a request
/// the guard judges anew.
fn ending_at(response: Response, left: Duration) -> Response {
    let streams = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|t| t.as_bytes().starts_with(b"text/event-stream"));
    if !streams {
        return response;
    }
    let (parts, body) = response.into_parts();
    let cut = body.into_data_stream().take_until(tokio::time::sleep(left));
    Response::from_parts(parts, Body::from_stream(cut))
}

/// The sign-in address's query.
#[derive(Deserialize)]
struct SignIn {
    #[serde(default)]
    token: String,
}

/// The one field of a posted form the guard reads; the page reads the rest.
#[derive(Deserialize)]
struct CsrfField {
    csrf: String,
}

/// A page's query, read by axum's [`axum::extract::Query`] into `T`; a query that does not read
/// (a field given twice) is refused as the dashboards refuse, on a page of their own.
pub struct Query<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for Query<T> {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Response> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|query| Self(query.0))
            .map_err(|rejection| unreadable("the address's query", &rejection.body_text()))
    }
}

/// A posted form, read by [`axum::Form`] into `T`; one that does not read (another content
/// type, a field given twice) is refused as the dashboards refuse.
pub struct Form<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for Form<T> {
    type Rejection = Response;

    async fn from_request(request: Request, state: &S) -> Result<Self, Response> {
        axum::Form::<T>::from_request(request, state)
            .await
            .map(|form| Self(form.0))
            .map_err(|rejection| unreadable("the form", &rejection.body_text()))
    }
}

fn unreadable(what: &str, why: &str) -> Response {
    refusal(
        StatusCode::BAD_REQUEST,
        &format!(
            "Refused: {what} is not one this dashboard's pages send ({}).",
            tenantflux_core::text::quote(why)
        ),
    )
}

/// `query` read as a page's [`Query`] reads it.
#[cfg(test)]
pub fn read_query<T: DeserializeOwned>(query: &str) -> Result<T, String> {
    let uri: axum::http::Uri = format!("/?{query}")
        .parse()
        .map_err(|err| format!("{err}"))?;
    axum::extract::Query::try_from_uri(&uri)
        .map(|query| query.0)
        .map_err(|rejection| rejection.body_text())
}

/// The stylesheet and the one script of the pages, compiled into the plugin.
fn assets() -> Router {
    Router::new()
        .route(
            "/static/app.css",
            get(|| async {
                (
                    [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
                    include_str!("assets/app.css"),
                )
            }),
        )
        .route(
            "/static/app.js",
            get(|| async {
                (
                    [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
                    include_str!("assets/app.js"),
                )
            }),
        )
}

/// `pages` and the assets behind the guard.
pub fn app(site: Arc<Site>, pages: Router) -> Router {
    pages
        .merge(assets())
        .layer(middleware::from_fn_with_state(site, guard))
}

/// Listens on 127.0.0.1:`port` (0: a free port); the pages are served under the [`Site`]'s
/// name, which the browser resolves to this address.
pub async fn bind(port: u16) -> anyhow::Result<TcpListener> {
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    TcpListener::bind(address).await.with_context(|| {
        if port == 0 {
            "cannot listen on 127.0.0.1".to_owned()
        } else {
            format!("cannot listen on 127.0.0.1:{port} (in use? choose another --port, or leave it out for a free one)")
        }
    })
}

/// Serves `pages` behind the guard until Ctrl-C, a closed terminal or SIGTERM: prints the
/// sign-in address, and opens it in the browser when `open`.
pub async fn serve(
    listener: TcpListener,
    site: Arc<Site>,
    pages: Router,
    what: &str,
    open: bool,
) -> anyhow::Result<()> {
    let app = app(site.clone(), pages);
    let url = site.login_url();
    {
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "{what} at {url}")?;
        stdout.flush()?;
    }
    let mut stderr = std::io::stderr().lock();
    let _ = writeln!(
        stderr,
        "The address signs one browser in, once. Ctrl-C stops the dashboard."
    );
    // Kept until the server stops: the browser may read the sign-in file late.
    let _sign_in = if open {
        open_browser(&url)
            .inspect_err(|why| {
                let _ = writeln!(
                    stderr,
                    "not opening a browser ({why}): open the address yourself"
                );
            })
            .ok()
    } else {
        None
    };
    drop(stderr);
    // Live pages hold their connections open: a stop ends them rather than wait.
    tokio::select! {
        served = axum::serve(listener, app) => served.context("the dashboard's server failed"),
        stopped = stop_signal() => stopped,
    }
}

/// Ctrl-C, the terminal closing (SIGHUP), or SIGTERM; on Windows Ctrl-C or the console closing.
async fn stop_signal() -> anyhow::Result<()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut hangup = signal(SignalKind::hangup()).context("cannot listen for SIGHUP")?;
        let mut terminate = signal(SignalKind::terminate()).context("cannot listen for SIGTERM")?;
        tokio::select! {
            interrupted = tokio::signal::ctrl_c() => interrupted.context("cannot listen for Ctrl-C"),
            _ = hangup.recv() => Ok(()),
            _ = terminate.recv() => Ok(()),
        }
    }
    #[cfg(windows)]
    {
        let mut close = tokio::signal::windows::ctrl_close()
            .context("cannot listen for the console closing")?;
        tokio::select! {
            interrupted = tokio::signal::ctrl_c() => interrupted.context("cannot listen for Ctrl-C"),
            _ = close.recv() => Ok(()),
        }
    }
    #[cfg(not(any(unix, windows)))]
    {
        tokio::signal::ctrl_c()
            .await
            .context("cannot listen for Ctrl-C")
    }
}

/// Hands the address to the system's browser: $BROWSER, else `open` (macOS), the URL handler
/// (Windows) or `xdg-open` (where a display is). The browser gets a file, not the address: a
/// command line is readable by every local user (`/proc/*/cmdline`, `ps`), who could sign in with
/// the token first. The file, in a directory only this user may read, redirects to the address;
/// it is removed with the returned directory.
fn open_browser(url: &str) -> Result<tempfile::TempDir, String> {
    use std::process::{Command, Stdio};
    let mut command = if let Some(browser) = std::env::var_os("BROWSER").filter(|b| !b.is_empty()) {
        Command::new(browser)
    } else if cfg!(target_os = "macos") {
        Command::new("open")
    } else if cfg!(windows) {
        let mut command = Command::new("rundll32");
        command.arg("url.dll,FileProtocolHandler");
        command
    } else {
        if std::env::var_os("DISPLAY").is_none() && std::env::var_os("WAYLAND_DISPLAY").is_none() {
            return Err("no display".to_owned());
        }
        Command::new("xdg-open")
    };
    let mut private = tempfile::Builder::new();
    private.prefix("tenantflux-dashboard-");
    // A temporary directory is 0777 less the umask unless asked: readable by all with 022. On
    // Windows the temporary directory is the user's own (%LOCALAPPDATA%\Temp).
    #[cfg(unix)]
    private.permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700));
    let dir = private
        .tempdir()
        .map_err(|err| format!("cannot create a private directory for the sign-in file: {err}"))?;
    let file = dir.path().join("sign-in.html");
    std::fs::write(&file, sign_in_file(url))
        .map_err(|err| format!("cannot write {}: {err}", file.display()))?;
    let mut child = command
        .arg(&file)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|err| format!("cannot start the browser: {err}"))?;
    // Reaped in the background: xdg-open and friends return at once, a browser may not.
    std::thread::spawn(move || child.wait());
    Ok(dir)
}

/// A page that sends the browser on to the sign-in address (`url` is ours: a hex name under
/// `.localhost`, a port and a hex token, nothing to escape).
fn sign_in_file(url: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"refresh\" content=\"0;url={url}\"><title>tenantflux</title></head>\
         <body><p><a href=\"{url}\">Open the dashboard</a></p></body></html>\n"
    )
}

#[cfg(test)]
mod tests;
