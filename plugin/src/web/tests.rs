//! The guard over a real socket: raw HTTP/1.1 requests, as a browser or an attacker sends them.

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use axum::{Extension, Router, routing::get};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::*;

struct Answer {
    status: u16,
    head: String,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.eq_ignore_ascii_case(name).then(|| value.trim())
        })
    }
}

async fn send(port: u16, request: String) -> Answer {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.expect("read");
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status line");
    Answer {
        status,
        head: head.to_owned(),
        body: body.to_owned(),
    }
}

fn request(method: &str, path: &str, host: &str, extra: &[&str], body: &str) -> String {
    let mut text = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
    for line in extra {
        text.push_str(line);
        text.push_str("\r\n");
    }
    if method == "POST" {
        text.push_str("Content-Type: application/x-www-form-urlencoded\r\n");
        text.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    text.push_str("\r\n");
    text.push_str(body);
    text
}

/// The time the server reads, moved by the test.
#[derive(Clone)]
struct TestClock(Arc<Mutex<Instant>>);

impl TestClock {
    fn advance(&self, by: Duration) {
        *self.0.lock().unwrap() += by;
    }
}

/// A test's server: its port, its site, how many posts reached the page, its clock, and the
/// sign-in addresses it announced after a session ended.
struct Server {
    port: u16,
    site: Arc<Site>,
    posted: Arc<AtomicUsize>,
    clock: TestClock,
    announced: Arc<Mutex<Vec<String>>>,
}

impl Server {
    /// `NAME.localhost:PORT`, the one Host answered.
    fn host(&self) -> String {
        self.site.origin()["http://".len()..].to_owned()
    }

    async fn get(&self, path: &str, cookie: &str) -> Answer {
        let extra = format!("Cookie: {cookie}");
        send(self.port, request("GET", path, &self.host(), &[&extra], "")).await
    }
}

/// Two fields of a page's query or form, each empty when left out.
#[derive(Default, serde::Deserialize)]
#[serde(default)]
struct Echo {
    a: String,
    b: String,
}

/// A server whose page says hello, whose action counts the posts it was let through, whose
/// `/csrf` says the session's CSRF token, whose `/echo` says the fields of its query (GET) or
/// form (POST), and whose `/live` streams until it is cut; its time is the test's.
async fn server_with(limits: SessionLimits) -> Server {
    let listener = bind(0).await.expect("bind");
    let port = listener.local_addr().expect("address").port();
    let clock = TestClock(Arc::new(Mutex::new(Instant::now())));
    let announced = Arc::new(Mutex::new(Vec::new()));
    let site = {
        let (clock, announced) = (clock.clone(), announced.clone());
        Arc::new(
            Site::with_clock(
                port,
                limits,
                Arc::new(move || *clock.0.lock().unwrap()),
                Box::new(move |url| announced.lock().unwrap().push(url.to_owned())),
            )
            .expect("site"),
        )
    };
    let posted = Arc::new(AtomicUsize::new(0));
    let counter = posted.clone();
    let pages = Router::new()
        .route(
            "/",
            get(|| async { "hello" }).post(move || {
                counter.fetch_add(1, Ordering::SeqCst);
                async { "done" }
            }),
        )
        .route(
            "/echo",
            get(|Query(echo): Query<Echo>| async move { format!("{}|{}", echo.a, echo.b) })
                .post(|Form(echo): Form<Echo>| async move { format!("{}|{}", echo.a, echo.b) }),
        )
        .route(
            "/csrf",
            get(|Extension(csrf): Extension<Csrf>| async move { csrf.token().to_owned() }),
        )
        .route(
            "/live",
            get(|| async {
                let events = futures::stream::repeat_with(|| {
                    Ok::<_, std::convert::Infallible>(
                        axum::response::sse::Event::default().data("tick"),
                    )
                })
                .then(|event| async {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    event
                });
                axum::response::sse::Sse::new(events)
            }),
        );
    let app = app(site.clone(), pages);
    tokio::spawn(async move { axum::serve(listener, app).await });
    Server {
        port,
        site,
        posted,
        clock,
        announced,
    }
}

async fn server() -> Server {
    server_with(SessionLimits::default()).await
}

fn token(site: &Site) -> String {
    site.login_url()
        .split_once("token=")
        .map(|(_, t)| t.to_owned())
        .expect("a token")
}

async fn signed_in(server: &Server) -> String {
    let answer = send(
        server.port,
        request(
            "GET",
            &format!("/login?token={}", token(&server.site)),
            &server.host(),
            &[],
            "",
        ),
    )
    .await;
    assert_eq!(answer.status, 303, "{}", answer.head);
    assert_eq!(answer.header("location"), Some("/"));
    let cookie = answer.header("set-cookie").expect("a cookie").to_owned();
    assert!(cookie.contains("HttpOnly"), "{cookie}");
    assert!(cookie.contains("SameSite=Strict"), "{cookie}");
    assert!(!cookie.contains("Domain"), "a host-only cookie: {cookie}");
    assert!(cookie.contains("Path=/"), "{cookie}");
    assert!(
        !cookie.contains("Expires") && !cookie.contains("Max-Age"),
        "the server ends the session, not the browser: {cookie}"
    );
    cookie.split(';').next().expect("name=value").to_owned()
}

#[tokio::test]
async fn the_one_time_token_becomes_a_cookie_and_works_once() {
    let server = server().await;
    let login = format!("/login?token={}", token(&server.site));
    let cookie = signed_in(&server).await;
    assert!(cookie.starts_with("tenantflux-session="), "{cookie}");

    let page = server.get("/", &cookie).await;
    assert_eq!(page.status, 200);
    assert_eq!(page.body, "hello");

    let again = server.get(&login, "").await;
    assert_eq!(again.status, 401, "a used token signs nobody in");
    assert!(again.body.contains("used already"), "{}", again.body);
    assert!(
        server.site.login_url().ends_with("token="),
        "the token is gone"
    );
}

#[tokio::test]
async fn without_the_cookie_or_with_a_wrong_one_nothing_is_shown() {
    let server = server().await;
    let bare = server.get("/", "").await;
    assert_eq!(bare.status, 401);
    assert!(!bare.body.contains("hello"));
    let forged = server.get("/", "tenantflux-session=00ff").await;
    assert_eq!(forged.status, 401);
    let wrong_token = server.get("/login?token=abc", "").await;
    assert_eq!(wrong_token.status, 401);
    assert!(
        wrong_token
            .body
            .contains("not the one the dashboard printed last"),
        "{}",
        wrong_token.body
    );
    // The real token beside a guess: a query that does not read signs nobody in.
    let twice = format!("/login?token=abc&token={}", token(&server.site));
    let twice = server.get(&twice, "").await;
    assert_eq!(twice.status, 401);
    assert_eq!(twice.header("set-cookie"), None);
    assert!(
        twice
            .body
            .contains("not the one the dashboard printed last"),
        "{}",
        twice.body
    );
    // The real token still works after a wrong guess.
    let cookie = signed_in(&server).await;
    let value = &cookie["tenantflux-session=".len()..];
    // A planted cookie of the same name, before or after the session's, hides nothing; forged
    // ones alone, however written, are strangers.
    for both in [
        format!("tenantflux-session=00ff; {cookie}"),
        format!("{cookie}; tenantflux-session=00ff"),
        format!("other=1;{cookie} ;x"),
    ] {
        assert_eq!(server.get("/", &both).await.status, 200, "{both}");
    }
    for forged in [
        format!("tenantflux-session={}", &value[..value.len() - 1]),
        format!("tenantflux-session={value}0"),
        format!("tenantflux-session=\"{value}\""),
        format!("Tenantflux-Session={value}"),
        format!("x-tenantflux-session={value}"),
        "tenantflux-session".to_owned(),
    ] {
        assert_eq!(server.get("/", &forged).await.status, 401, "{forged}");
    }
}

#[tokio::test]
async fn the_server_answers_only_its_own_name_which_nobody_else_learns() {
    let server = server().await;
    let (port, host) = (server.port, server.host());
    let name = host
        .strip_suffix(&format!(".localhost:{port}"))
        .expect("a .localhost name");
    let random = name.strip_prefix("tenantflux-").expect("tenantflux-…");
    assert_eq!(random.len(), 32, "{name}");
    assert!(random.bytes().all(|b| b.is_ascii_hexdigit()), "{name}");
    assert_ne!(
        server_with(SessionLimits::default())
            .await
            .host()
            .split('.')
            .next(),
        Some(name),
        "a name per run"
    );
    assert!(
        server
            .site
            .login_url()
            .starts_with(&format!("http://{host}/login?token="))
    );

    // The printed token, presented under another name (the cookie would be kept for that
    // name, and sent to every server there): refused, no cookie, and the token still works.
    let login = format!("/login?token={}", token(&server.site));
    for other in [format!("127.0.0.1:{port}"), format!("localhost:{port}")] {
        let answer = send(port, request("GET", &login, &other, &[], "")).await;
        assert_eq!(answer.status, 421, "host {other}");
        assert_eq!(answer.header("set-cookie"), None, "host {other}");
    }
    let cookie = signed_in(&server).await;
    for other in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        format!("attacker.example:{port}"),
        format!("{name}.localhost:{}", port.wrapping_add(1)),
        format!("tenantflux-{}.localhost:{port}", "0".repeat(32)),
        format!("{name}.localhost"),
        "127.0.0.1".to_owned(),
        String::new(),
    ] {
        let answer = send(
            port,
            request("GET", "/", &other, &[&format!("Cookie: {cookie}")], ""),
        )
        .await;
        assert_eq!(answer.status, 421, "host {other:?}");
        assert!(!answer.body.contains("hello"));
        assert!(
            other.contains(random) || !answer.body.contains(random),
            "the refusal does not say the name: {}",
            answer.body
        );
    }
    let own = server.get("/", &cookie).await;
    assert_eq!(own.status, 200);
    let upper = send(
        port,
        request(
            "GET",
            "/",
            &host.to_uppercase(),
            &[&format!("Cookie: {cookie}")],
            "",
        ),
    )
    .await;
    assert_eq!(upper.status, 200, "host names have no case");
}

#[tokio::test]
async fn a_post_needs_the_sessions_csrf_token_and_this_origin() {
    let server = server().await;
    let host = server.host();
    let cookie = format!("Cookie: {}", signed_in(&server).await);
    let count = || server.posted.load(Ordering::SeqCst);
    let post = |extra: Vec<String>, body: String| {
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        let text = request("POST", "/", &host, &extra, &body);
        send(server.port, text)
    };

    let without = post(vec![cookie.clone()], "action=suspend".to_owned()).await;
    assert_eq!(without.status, 403);
    assert!(
        without
            .body
            .contains("did not carry this session's CSRF token"),
        "{}",
        without.body
    );
    let wrong = post(vec![cookie.clone()], "csrf=1234&action=suspend".to_owned()).await;
    assert_eq!(wrong.status, 403);
    let session_csrf = server.get("/csrf", &cookie["Cookie: ".len()..]).await.body;
    assert_eq!(session_csrf.len(), 64, "{session_csrf}");
    let csrf = format!("csrf={session_csrf}&action=suspend");
    for origin in [
        "http://attacker.example".to_owned(),
        format!("http://127.0.0.1:{}", server.port),
        format!("http://localhost:{}", server.port),
    ] {
        let foreign = post(
            vec![cookie.clone(), format!("Origin: {origin}")],
            csrf.clone(),
        )
        .await;
        assert_eq!(foreign.status, 403, "{origin}");
    }
    let no_cookie = post(Vec::new(), csrf.clone()).await;
    assert_eq!(no_cookie.status, 401);
    assert_eq!(count(), 0, "no refused post reached the page");

    let ok = post(vec![cookie.clone(), format!("Origin: http://{host}")], csrf).await;
    assert_eq!(ok.status, 200, "{}", ok.body);
    assert_eq!(count(), 1);

    // The token given twice (the right one and another) is no token.
    let twice = post(
        vec![cookie.clone()],
        format!("csrf={session_csrf}&csrf=1234&action=suspend"),
    )
    .await;
    assert_eq!(twice.status, 403);
    assert_eq!(count(), 1);
}

#[tokio::test]
async fn a_query_or_form_that_does_not_read_is_refused_with_a_page() {
    let server = server().await;
    let cookie = signed_in(&server).await;
    let csrf = server.get("/csrf", &cookie).await.body;

    let read = server
        .get("/echo?a=two+words&b=%2Fx%3D&c=other", &cookie)
        .await;
    assert_eq!((read.status, read.body.as_str()), (200, "two words|/x="));
    let twice = server.get("/echo?a=1&a=2", &cookie).await;
    assert_eq!(twice.status, 400);
    assert!(twice.body.contains("Refused"), "{}", twice.body);
    assert!(twice.body.contains("duplicate field"), "{}", twice.body);
    assert_eq!(
        twice.header("content-security-policy"),
        Some(CONTENT_SECURITY_POLICY)
    );

    let post = |content_type: &str, body: String| {
        let text = request(
            "POST",
            "/echo",
            &server.host(),
            &[&format!("Cookie: {cookie}")],
            &body,
        )
        .replace("application/x-www-form-urlencoded", content_type);
        send(server.port, text)
    };
    let form = "application/x-www-form-urlencoded";
    let posted = post(form, format!("csrf={csrf}&a=%E2%9C%94&b=ab%ZZ")).await;
    assert_eq!((posted.status, posted.body.as_str()), (200, "✔|ab%ZZ"));
    let twice = post(form, format!("csrf={csrf}&a=1&a=2")).await;
    assert_eq!(twice.status, 400, "{}", twice.body);
    assert!(twice.body.contains("Refused: the form"), "{}", twice.body);
    let plain = post("text/plain", format!("csrf={csrf}&a=1")).await;
    assert_eq!(plain.status, 400, "{}", plain.body);
}

#[test]
fn a_session_ends_idle_or_at_its_absolute_limit_whichever_first() {
    let limits = SessionLimits {
        idle: Duration::from_secs(30 * 60),
        absolute: Duration::from_secs(12 * 3600),
    };
    let start = Instant::now();
    let at = |minutes: u64| start + Duration::from_secs(minutes * 60);
    let mut session = Session {
        cookie: Secret::new().unwrap(),
        csrf: Secret::new().unwrap(),
        started: start,
        seen: start,
    };
    assert_eq!(session.expiry(at(29), limits), None);
    assert_eq!(session.expiry(at(30), limits), Some(Expiry::Idle));
    // Used every 20 minutes, it lasts its 12 hours and no longer.
    for minute in (20..12 * 60).step_by(20) {
        assert_eq!(session.expiry(at(minute), limits), None, "minute {minute}");
        session.seen = at(minute);
    }
    assert_eq!(session.expiry(at(12 * 60), limits), Some(Expiry::Absolute));
    // A stream ends before the session could go idle, and with the session.
    session.seen = at(60);
    assert_eq!(session.stream_end(at(60), limits), at(75));
    assert_eq!(session.stream_end(at(12 * 60 - 5), limits), at(12 * 60));
}

#[test]
fn the_door_opens_once_per_token_and_tells_an_ended_session_from_a_stranger() {
    let limits = SessionLimits {
        idle: Duration::from_secs(60),
        absolute: Duration::from_secs(600),
    };
    let start = Instant::now();
    let at = |secs: u64| start + Duration::from_secs(secs);
    let mut door = Door::new().unwrap();
    let token = door.pending.as_ref().unwrap().token.expose().to_owned();
    assert!(matches!(
        door.sign_in("nope", at(0)),
        Err(SignInRefused::Wrong)
    ));
    let cookie = door.sign_in(&token, at(0)).expect("signed in");
    assert!(matches!(
        door.sign_in(&token, at(1)),
        Err(SignInRefused::Used)
    ));
    let signed = |door: &mut Door, now| match door.visit(&[cookie.expose()], now, limits) {
        Visit::Signed { csrf, .. } => Some(csrf.expose().to_owned()),
        _ => None,
    };
    let csrf = signed(&mut door, at(50)).expect("signed");
    assert!(matches!(
        door.visit(&["other"], at(50), limits),
        Visit::Stranger
    ));
    assert!(!door.end_expired(at(100), limits).unwrap(), "seen at 50");
    assert!(door.end_expired(at(110), limits).unwrap(), "idle since 50");
    assert!(matches!(
        door.visit(&[cookie.expose()], at(111), limits),
        Visit::Expired(Expiry::Idle)
    ));
    assert!(!door.end_expired(at(112), limits).unwrap(), "ended once");
    // The next session has a cookie and a CSRF token of its own.
    let next = door.pending.as_ref().unwrap().token.expose().to_owned();
    assert_ne!(next, token);
    let second = door.sign_in(&next, at(120)).expect("signed in again");
    assert_ne!(second.expose(), cookie.expose());
    match door.visit(&[second.expose()], at(121), limits) {
        Visit::Signed { csrf: new, .. } => assert_ne!(new.expose(), csrf),
        _ => panic!("the new session"),
    }
    assert!(door.end_expired(at(720), limits).unwrap());
    assert!(matches!(
        door.visit(&[second.expose()], at(720), limits),
        Visit::Expired(Expiry::Absolute)
    ));
}

#[tokio::test]
async fn an_ended_session_shows_no_page_and_the_next_sign_in_address_is_announced() {
    let server = server_with(SessionLimits {
        idle: Duration::from_secs(30 * 60),
        absolute: Duration::from_secs(2 * 3600),
    })
    .await;
    let first = signed_in(&server).await;
    let first_csrf = server.get("/csrf", &first).await.body;
    // Used every 29 minutes, the session lasts its 2 hours.
    for _ in 0..4 {
        server.clock.advance(Duration::from_secs(29 * 60));
        assert_eq!(server.get("/", &first).await.status, 200);
    }
    assert!(server.announced.lock().unwrap().is_empty());
    server.clock.advance(Duration::from_secs(4 * 60));
    let ended = server.get("/", &first).await;
    assert_eq!(ended.status, 401);
    assert!(!ended.body.contains("hello"), "{}", ended.body);
    assert!(ended.body.contains("Session expired"), "{}", ended.body);
    assert!(
        ended.body.contains("120m after signing in"),
        "{}",
        ended.body
    );
    assert!(
        ended.body.contains("printed a new sign-in address"),
        "{}",
        ended.body
    );
    let announced = server.announced.lock().unwrap().clone();
    assert_eq!(announced, [server.site.login_url()], "one new address");
    assert!(announced[0].starts_with(&format!("http://{}/login?token=", server.host())));

    // The new address signs in a new session; the old cookie and the old session's CSRF
    // token stay refused.
    let second = signed_in(&server).await;
    assert_ne!(second, first);
    assert_eq!(server.get("/", &second).await.status, 200);
    assert_eq!(server.get("/", &first).await.status, 401);
    let stale_form = send(
        server.port,
        request(
            "POST",
            "/",
            &server.host(),
            &[&format!("Cookie: {second}")],
            &format!("csrf={first_csrf}&action=suspend"),
        ),
    )
    .await;
    assert_eq!(stale_form.status, 403, "a form of the ended session");
    assert_eq!(server.posted.load(Ordering::SeqCst), 0);

    // Left alone for 30 minutes, it ends too.
    server.clock.advance(Duration::from_secs(30 * 60));
    let idle = server.get("/", &second).await;
    assert_eq!(idle.status, 401);
    assert!(
        idle.body.contains("after 30m without a request"),
        "{}",
        idle.body
    );
    assert_eq!(server.announced.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn a_live_stream_ends_with_its_session() {
    let server = server_with(SessionLimits {
        idle: Duration::from_secs(2 * 3600),
        absolute: Duration::from_secs(3600),
    })
    .await;
    let cookie = signed_in(&server).await;
    // 300 ms of the session left: the stream ends then, though its page never stops.
    server
        .clock
        .advance(Duration::from_secs(3600) - Duration::from_millis(300));
    let stream = tokio::time::timeout(Duration::from_secs(20), server.get("/live", &cookie))
        .await
        .expect("the stream ended");
    assert_eq!(stream.status, 200);
    assert!(stream.body.contains("data: tick"), "{}", stream.body);
}

#[tokio::test]
async fn every_answer_carries_the_content_security_policy() {
    let server = server().await;
    let cookie = signed_in(&server).await;
    for answer in [
        server.get("/", &cookie).await,
        server.get("/", "").await,
        server.get("/static/app.js", &cookie).await,
    ] {
        assert_eq!(
            answer.header("content-security-policy"),
            Some(CONTENT_SECURITY_POLICY)
        );
        assert_eq!(answer.header("x-frame-options"), Some("DENY"));
        assert_eq!(answer.header("referrer-policy"), Some("same-origin"));
    }
    assert!(!CONTENT_SECURITY_POLICY.contains("unsafe-inline"));
    assert!(!CONTENT_SECURITY_POLICY.contains("http"), "no other origin");
}

#[test]
fn queries_decode_as_browsers_encode_them() {
    let echo = |query: &str| {
        read_query::<Echo>(query)
            .map(|e| (e.a, e.b))
            .expect("reads")
    };
    assert_eq!(echo("a=1&b=two+words"), ("1".into(), "two words".into()));
    assert_eq!(echo("a=%2Fx%3D&b="), ("/x=".into(), String::new()));
    assert_eq!(echo("a&&b=ab%ZZ&c=1"), (String::new(), "ab%ZZ".into()));
    assert_eq!(echo("a=%E2%9C%94"), ("✔".into(), String::new()));
    assert!(read_query::<Echo>("a=1&a=2").is_err(), "a field twice");
}

#[test]
fn secrets_are_random_and_compared_whole() {
    let (a, b) = (Secret::new().expect("a"), Secret::new().expect("b"));
    assert_eq!(a.expose().len(), 64);
    assert_ne!(a.expose(), b.expose());
    assert!(a.matches(a.expose()));
    assert!(!a.matches(&a.expose()[..63]));
    assert!(!a.matches(""));
}

#[test]
fn session_limits_read_as_kubectl_writes_ages() {
    let text = |seconds| crate::age::human(Duration::from_secs(seconds));
    assert_eq!(text(30), "30s");
    assert_eq!(text(120), "2m");
    assert_eq!(text(90), "90s");
    assert_eq!(text(3600), "60m");
    assert_eq!(text(12 * 3600), "12h");
}
