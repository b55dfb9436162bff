//! The guard over a real socket: raw HTTP/1.1 requests, as a browser or an attacker sends them.

use std::sync::Arc;

use axum::{Router, routing::get};
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

/// A server whose one page says hello and whose one action counts the posts it was let
/// through.
async fn server() -> (u16, Arc<Site>, Arc<std::sync::atomic::AtomicUsize>) {
    let listener = bind(0).await.expect("bind");
    let port = listener.local_addr().expect("address").port();
    let site = Arc::new(Site::new(port).expect("site"));
    let posted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = posted.clone();
    let pages = Router::new().route(
        "/",
        get(|| async { "hello" }).post(move || {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async { "done" }
        }),
    );
    let app = app(site.clone(), pages);
    tokio::spawn(async move { axum::serve(listener, app).await });
    (port, site, posted)
}

fn token(site: &Site) -> String {
    site.login_url()
        .split_once("token=")
        .map(|(_, t)| t.to_owned())
        .expect("a token")
}

async fn signed_in(port: u16, site: &Site) -> String {
    let host = format!("127.0.0.1:{port}");
    let answer = send(
        port,
        request(
            "GET",
            &format!("/login?token={}", token(site)),
            &host,
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
    cookie.split(';').next().expect("name=value").to_owned()
}

#[tokio::test]
async fn the_one_time_token_becomes_a_cookie_and_works_once() {
    let (port, site, _) = server().await;
    let host = format!("127.0.0.1:{port}");
    let login = format!("/login?token={}", token(&site));
    let cookie = signed_in(port, &site).await;
    assert!(
        cookie.starts_with(&format!("tenantflux-{port}=")),
        "{cookie}"
    );

    let page = send(
        port,
        request("GET", "/", &host, &[&format!("Cookie: {cookie}")], ""),
    )
    .await;
    assert_eq!(page.status, 200);
    assert_eq!(page.body, "hello");

    let again = send(port, request("GET", &login, &host, &[], "")).await;
    assert_eq!(again.status, 401, "a used token signs nobody in");
    assert!(again.body.contains("used already"), "{}", again.body);
    assert!(site.login_url().ends_with("token="), "the token is gone");
}

#[tokio::test]
async fn without_the_cookie_or_with_a_wrong_one_nothing_is_shown() {
    let (port, site, _) = server().await;
    let host = format!("127.0.0.1:{port}");
    let bare = send(port, request("GET", "/", &host, &[], "")).await;
    assert_eq!(bare.status, 401);
    assert!(!bare.body.contains("hello"));
    let forged = send(
        port,
        request(
            "GET",
            "/",
            &host,
            &[&format!("Cookie: tenantflux-{port}=00ff")],
            "",
        ),
    )
    .await;
    assert_eq!(forged.status, 401);
    let wrong_token = send(port, request("GET", "/login?token=abc", &host, &[], "")).await;
    assert_eq!(wrong_token.status, 401);
    // The real token still works after a wrong guess.
    signed_in(port, &site).await;
}

#[tokio::test]
async fn a_foreign_host_header_is_refused_even_with_the_cookie() {
    let (port, site, _) = server().await;
    let cookie = signed_in(port, &site).await;
    for host in [
        format!("attacker.example:{port}"),
        format!("127.0.0.1:{}", port.wrapping_add(1)),
        "127.0.0.1".to_owned(),
        String::new(),
    ] {
        let answer = send(
            port,
            request("GET", "/", &host, &[&format!("Cookie: {cookie}")], ""),
        )
        .await;
        assert_eq!(answer.status, 421, "host {host:?}");
        assert!(!answer.body.contains("hello"));
    }
    let local = send(
        port,
        request(
            "GET",
            "/",
            &format!("localhost:{port}"),
            &[&format!("Cookie: {cookie}")],
            "",
        ),
    )
    .await;
    assert_eq!(local.status, 200, "localhost names this server too");
}

#[tokio::test]
async fn a_post_needs_the_csrf_token_and_this_origin() {
    let (port, site, posted) = server().await;
    let host = format!("127.0.0.1:{port}");
    let cookie = format!("Cookie: {}", signed_in(port, &site).await);
    let count = || posted.load(std::sync::atomic::Ordering::SeqCst);

    let without = send(
        port,
        request("POST", "/", &host, &[&cookie], "action=suspend"),
    )
    .await;
    assert_eq!(without.status, 403);
    let wrong = send(
        port,
        request("POST", "/", &host, &[&cookie], "csrf=1234&action=suspend"),
    )
    .await;
    assert_eq!(wrong.status, 403);
    let csrf = format!("csrf={}&action=suspend", site.csrf());
    let foreign = send(
        port,
        request(
            "POST",
            "/",
            &host,
            &[&cookie, "Origin: http://attacker.example"],
            &csrf,
        ),
    )
    .await;
    assert_eq!(foreign.status, 403);
    let no_cookie = send(port, request("POST", "/", &host, &[], &csrf)).await;
    assert_eq!(no_cookie.status, 401);
    assert_eq!(count(), 0, "no refused post reached the page");

    let ok = send(
        port,
        request(
            "POST",
            "/",
            &host,
            &[&cookie, &format!("Origin: http://{host}")],
            &csrf,
        ),
    )
    .await;
    assert_eq!(ok.status, 200, "{}", ok.body);
    assert_eq!(count(), 1);
}

#[tokio::test]
async fn every_answer_carries_the_content_security_policy() {
    let (port, site, _) = server().await;
    let host = format!("127.0.0.1:{port}");
    let cookie = format!("Cookie: {}", signed_in(port, &site).await);
    for answer in [
        send(port, request("GET", "/", &host, &[&cookie], "")).await,
        send(port, request("GET", "/", &host, &[], "")).await,
        send(
            port,
            request("GET", "/static/app.js", &host, &[&cookie], ""),
        )
        .await,
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
fn forms_decode_as_browsers_encode_them() {
    assert_eq!(
        form_fields(b"a=1&b=two+words&c=%2Fx%3D&d=&e"),
        [
            ("a".to_owned(), "1".to_owned()),
            ("b".to_owned(), "two words".to_owned()),
            ("c".to_owned(), "/x=".to_owned()),
            ("d".to_owned(), String::new()),
            ("e".to_owned(), String::new()),
        ]
    );
    assert_eq!(
        form_field(b"x=1&csrf=ab%ZZ", "csrf").as_deref(),
        Some("ab%ZZ")
    );
    assert_eq!(form_field(b"x=%E2%9C%94", "x").as_deref(), Some("✔"));
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
