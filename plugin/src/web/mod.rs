//! The local web server behind `dashboard` and `fleet dashboard`, safe by construction:
//!
//! - it listens on 127.0.0.1 only, and answers only requests whose Host header names that
//!   address (or `localhost`) and port, so a DNS-rebinding page elsewhere cannot reach it;
//! - the address it prints carries a one-time token; the first request with it gets an
//!   HttpOnly, SameSite=Strict session cookie, and every other request needs that cookie;
//! - every request that is not a GET or HEAD needs the session's CSRF token as the form field
//!   `csrf`, and an Origin (when the browser sends one) of this server;
//! - every answer carries a Content-Security-Policy that allows only this server's own script,
//!   style and images, no inline script, no framing, and no other origin: nothing from outside is
//!   loaded.
//!
//! What the pages show comes from the agent, asked with the user's own credentials: the server
//! adds no power of its own.

use std::{
    io::Write as _,
    net::{Ipv4Addr, SocketAddr},
    sync::{Arc, Mutex},
};

use anyhow::Context as _;
use axum::{
    Router,
    body::Body,
    extract::{Request, State},
    http::{HeaderMap, HeaderValue, Method, StatusCode, header},
    middleware::{self, Next},
    response::{IntoResponse, Response},
    routing::get,
};
use tokio::net::TcpListener;

pub mod page;

/// The longest form a page may post: an action names one object.
const FORM_LIMIT: usize = 16 * 1024;

/// The policy of every answer: this origin's script, style and images only.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// A random secret: 32 bytes from the OS, as hex.
#[derive(Clone)]
pub struct Secret(String);

impl Secret {
    fn new() -> anyhow::Result<Self> {
        let mut bytes = [0_u8; 32];
        getrandom::fill(&mut bytes)
            .map_err(|err| anyhow::anyhow!("cannot draw a random token from the OS: {err}"))?;
        Ok(Self(bytes.iter().map(|b| format!("{b:02x}")).collect()))
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

/// One server's secrets and address.
pub struct Site {
    port: u16,
    /// The one-time login token, gone once used.
    login: Mutex<Option<Secret>>,
    session: Secret,
    csrf: Secret,
}

impl Site {
    pub fn new(port: u16) -> anyhow::Result<Self> {
        Ok(Self {
            port,
            login: Mutex::new(Some(Secret::new()?)),
            session: Secret::new()?,
            csrf: Secret::new()?,
        })
    }

    /// The address that signs a browser in, once.
    pub fn login_url(&self) -> String {
        let token = self
            .login
            .lock()
            .ok()
            .and_then(|t| t.as_ref().map(|t| t.expose().to_owned()))
            .unwrap_or_default();
        format!("http://127.0.0.1:{}/login?token={token}", self.port)
    }

    /// The token every form posts as `csrf`.
    pub fn csrf(&self) -> &str {
        self.csrf.expose()
    }

    /// Cookies are per host, not per port: one name per server, so two dashboards on one
    /// machine do not sign each other out.
    fn cookie_name(&self) -> String {
        format!("tenantflux-{}", self.port)
    }

    fn host_allowed(&self, host: &str) -> bool {
        host == format!("127.0.0.1:{}", self.port) || host == format!("localhost:{}", self.port)
    }

    fn origin_allowed(&self, origin: &str) -> bool {
        origin
            .strip_prefix("http://")
            .is_some_and(|host| self.host_allowed(host))
    }

    fn has_session(&self, headers: &HeaderMap) -> bool {
        let name = self.cookie_name();
        headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|pair| pair.trim().split_once('='))
            .any(|(key, value)| key == name && self.session.matches(value))
    }

    /// Exchanges the one-time token for the session cookie.
    fn sign_in(&self, query: Option<&str>) -> Response {
        let given = query
            .into_iter()
            .flat_map(|q| q.split('&'))
            .find_map(|pair| pair.strip_prefix("token="))
            .unwrap_or_default();
        let mut login = match self.login.lock() {
            Ok(login) => login,
            Err(poisoned) => poisoned.into_inner(),
        };
        let accepted = login.as_ref().is_some_and(|token| token.matches(given));
        if !accepted {
            let why = if login.is_none() {
                "This sign-in address was used already: it works once. Use the browser that opened it, or stop the dashboard (Ctrl-C) and start it again for a new address."
            } else {
                "This sign-in address is not the one the dashboard printed. Copy the whole address from the terminal."
            };
            return refusal(StatusCode::UNAUTHORIZED, why);
        }
        *login = None;
        let cookie = format!(
            "{}={}; Path=/; HttpOnly; SameSite=Strict",
            self.cookie_name(),
            self.session.expose()
        );
        let mut response = (StatusCode::SEE_OTHER, [(header::LOCATION, "/")]).into_response();
        if let Ok(value) = HeaderValue::from_str(&cookie) {
            response.headers_mut().insert(header::SET_COOKIE, value);
        }
        response
    }
}

/// A refusal as a small page (it carries the same headers as every answer).
pub fn refusal(status: StatusCode, message: &str) -> Response {
    (
        status,
        page::layout(
            "tenantflux dashboard",
            None,
            maud::html! { main { h1 { "Refused" } p role="alert" { (message) } } },
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

async fn check(site: &Site, request: Request, next: Next) -> Response {
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or_default();
    if !site.host_allowed(host) {
        return refusal(
            StatusCode::MISDIRECTED_REQUEST,
            &format!(
                "This dashboard answers only at http://127.0.0.1:{}/ (the request named host '{host}').",
                site.port
            ),
        );
    }
    if request.uri().path() == "/login" && request.method() == Method::GET {
        return site.sign_in(request.uri().query());
    }
    if !site.has_session(request.headers()) {
        return refusal(
            StatusCode::UNAUTHORIZED,
            "Not signed in: open the address the dashboard printed in the terminal (it signs one browser in).",
        );
    }
    if matches!(*request.method(), Method::GET | Method::HEAD) {
        return next.run(request).await;
    }
    if let Some(origin) = request.headers().get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or_default();
        if !site.origin_allowed(origin) {
            return refusal(
                StatusCode::FORBIDDEN,
                &format!("Refused: the form was sent from another site ({origin})."),
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
    let csrf_ok = form_field(&bytes, "csrf").is_some_and(|given| site.csrf.matches(&given));
    if !csrf_ok {
        return refusal(
            StatusCode::FORBIDDEN,
            "Refused: the form did not carry this dashboard's CSRF token. Reload the page and try again.",
        );
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

/// The first value of `name` in an `application/x-www-form-urlencoded` body.
pub fn form_field(body: &[u8], name: &str) -> Option<String> {
    form_fields(body)
        .into_iter()
        .find_map(|(key, value)| (key == name).then_some(value))
}

/// Every pair of an `application/x-www-form-urlencoded` body (or query), decoded.
pub fn form_fields(body: &[u8]) -> Vec<(String, String)> {
    body.split(|b| *b == b'&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let mut parts = pair.splitn(2, |b| *b == b'=');
            let key = decode(parts.next().unwrap_or_default());
            let value = decode(parts.next().unwrap_or_default());
            (key, value)
        })
        .collect()
}

fn decode(text: &[u8]) -> String {
    let mut out = Vec::with_capacity(text.len());
    let mut i = 0;
    while i < text.len() {
        match text[i] {
            b'+' => out.push(b' '),
            b'%' => match (text.get(i + 1).and_then(hex), text.get(i + 2).and_then(hex)) {
                (Some(high), Some(low)) => {
                    out.push(high << 4 | low);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            byte => out.push(byte),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex(byte: &u8) -> Option<u8> {
    (*byte as char).to_digit(16).map(|d| d as u8)
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

/// Listens on 127.0.0.1:`port` (0: a free port).
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

/// A page that sends the browser on to the sign-in address (`url` is ours: 127.0.0.1, a port
/// and a hex token, nothing to escape).
fn sign_in_file(url: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"refresh\" content=\"0;url={url}\"><title>tenantflux</title></head>\
         <body><p><a href=\"{url}\">Open the dashboard</a></p></body></html>\n"
    )
}

#[cfg(test)]
mod tests;
