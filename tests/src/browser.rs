//! A real browser for the dashboard tests: Debian's `chromium`, headless, driven through
//! `chromedriver` over WebDriver with fantoccini. The packages are installed with apt-get when
//! the machine lacks them, as on a fresh CI machine.
//!
//! [`Browser::start`] gives a test a browser of its own; dropping it kills chromedriver and
//! every chromium process, also when the test panics, and a test process that is killed takes
//! them down with it.

use std::{
    fs::File,
    io::{BufRead as _, BufReader, Read as _},
    path::PathBuf,
    process::{Child, ChildStdout, Command, Stdio},
    time::Duration,
};

use fantoccini::{
    Client, ClientBuilder, Locator,
    elements::Element,
    error::{CmdError, NewSessionError},
};
use hyper_util::client::legacy::connect::HttpConnector;
use rustix::process::{Pid, Signal};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
    time::Instant,
};

use crate::{installed, repo_root};

/// Both programs come from one Debian package set, so chromedriver matches the browser.
/// fonts-liberation gives pages the metrics of the fonts they name; chromium only recommends it,
/// and its other recommendations (udev, upower, printing) are desktop services a test has no use
/// for, so none are installed.
const PACKAGES: &str = "chromium chromium-driver fonts-liberation";

/// How long chromedriver may take to answer `/status`.
const DRIVER_READY: Duration = Duration::from_secs(30);

/// How long a navigation may take; pages come from 127.0.0.1.
const PAGE_LOAD: Duration = Duration::from_secs(30);

const POLL: Duration = Duration::from_millis(100);

/// chromium's flags. Tests run as root, where chromium's sandbox cannot start; the page is only
/// ever served from 127.0.0.1, so everything that would reach out on its own is off.
const CHROMIUM_ARGS: &[&str] = &[
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--window-size=1280,900",
    "--hide-scrollbars",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-extensions",
    "--disable-component-extensions-with-background-pages",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-default-apps",
    "--disable-sync",
    "--disable-domain-reliability",
    "--disable-client-side-phishing-detection",
    "--disable-features=Translate,MediaRouter,OptimizationHints,AutofillServerCommunication",
    "--no-pings",
    "--metrics-recording-only",
    "--password-store=basic",
    "--mute-audio",
];

/// Runs `"$@"` (chromedriver) in the shell's own process group, which chromium's processes
/// join, and kills the whole group when chromedriver exits or when the shell's stdin closes:
/// [`Browser`] holds that pipe, so a test process that dies, however it dies, closes it.
const SUPERVISOR: &str = r#"{ "$@"; kill -s KILL 0; } & read -r line; kill -s KILL 0"#;

/// What [`Browser`]'s methods return.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A browser that could not be started or did not do what it was asked, with what was being done.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("starting {command}: {source}")]
    Spawn {
        command: String,
        source: std::io::Error,
    },
    #[error("chromedriver {problem}; its output:\n{log}")]
    Driver { problem: String, log: String },
    #[error(
        "opening a chromium session through chromedriver: {source}; chromedriver's output:\n{log}"
    )]
    Session {
        source: Box<NewSessionError>,
        log: String,
    },
    #[error("{what}: {source}")]
    Command { what: String, source: Box<CmdError> },
    #[error("writing {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("timed out after {after:?} waiting for {what} on {url}; the page reads:\n{page}")]
    Timeout {
        what: String,
        after: Duration,
        url: String,
        page: String,
    },
}

/// A headless chromium session of the caller's own, ended on drop.
#[derive(Debug)]
pub struct Browser {
    client: Client,
    /// Held for its drop, which ends chromedriver and chromium.
    _driver: Driver,
}

/// chromedriver, killed with chromium on drop.
#[derive(Debug)]
struct Driver {
    /// The shell that supervises chromedriver; its process group holds chromium too.
    shell: Child,
    /// Holds chromium's `--user-data-dir` and chromedriver's output.
    dir: tempfile::TempDir,
}

impl Browser {
    /// Starts chromedriver on a free 127.0.0.1 port, waits until it answers `/status`, and opens
    /// a headless chromium session with a fresh profile and a 1280x900 window (the page's
    /// viewport, and so a screenshot, is shorter by the headless window's frame).
    pub async fn start() -> Result<Browser> {
        let chromedriver = installed("chromedriver", PACKAGES, true);
        let chromium = installed("chromium", PACKAGES, true);
        let dir = tempfile::tempdir().map_err(|source| Error::Write {
            path: std::env::temp_dir(),
            source,
        })?;
        let log_path = dir.path().join("chromedriver.log");
        let log = File::create(&log_path).map_err(|source| Error::Write {
            path: log_path.clone(),
            source,
        })?;
        let log_err = log.try_clone().map_err(|source| Error::Write {
            path: log_path.clone(),
            source,
        })?;
        let shell = {
            use std::os::unix::process::CommandExt;
            Command::new("sh")
                .args(["-c", SUPERVISOR, "sh"])
                .arg(&chromedriver)
                // The kernel picks the port, so parallel tests cannot race for one.
                .arg("--port=0")
                // chromium keeps its crash database under ~/.config, not --user-data-dir.
                .env("XDG_CONFIG_HOME", dir.path())
                .env("XDG_CACHE_HOME", dir.path())
                .stdin(Stdio::piped())
                .stdout(log)
                .stderr(log_err)
                .process_group(0)
                .spawn()
                .map_err(|source| Error::Spawn {
                    command: chromedriver.display().to_string(),
                    source,
                })?
        };
        let mut driver = Driver { shell, dir };
        let port = driver.wait_ready().await?;

        let profile = driver.dir.path().join("profile");
        let mut args: Vec<String> = CHROMIUM_ARGS.iter().map(|arg| arg.to_string()).collect();
        args.push(format!("--user-data-dir={}", profile.display()));
        let mut capabilities = serde_json::Map::new();
        capabilities.insert(
            "goog:chromeOptions".into(),
            serde_json::json!({ "binary": chromium, "args": args }),
        );
        // WebDriver's 300 s would let a page that never loads hold a test for five minutes.
        capabilities.insert(
            "timeouts".into(),
            serde_json::json!({ "pageLoad": PAGE_LOAD.as_millis() as u64 }),
        );
        let client = ClientBuilder::new(HttpConnector::new())
            .capabilities(capabilities)
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
            .map_err(|source| Error::Session {
                source: Box::new(source),
                log: driver.log(),
            })?;
        Ok(Browser {
            client,
            _driver: driver,
        })
    }

    /// The WebDriver client, for navigating, finding elements, cookies and alerts.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Saves a PNG screenshot of the window as `<target dir>/screenshots/<name>.png` and returns
    /// its path.
    pub async fn screenshot(&self, name: &str) -> Result<PathBuf> {
        assert!(
            !name.is_empty() && !name.contains('/'),
            "a screenshot is named by one path component, not {name:?}"
        );
        let png = self
            .client
            .screenshot()
            .await
            .map_err(|source| command(format!("taking the screenshot {name}"), source))?;
        let dir = target_dir().join("screenshots");
        let path = dir.join(format!("{name}.png"));
        std::fs::create_dir_all(&dir)
            .and_then(|()| std::fs::write(&path, png))
            .map_err(|source| Error::Write {
                path: path.clone(),
                source,
            })?;
        Ok(path)
    }

    /// Waits until an element matching `css` has text containing `text`, and returns it. On
    /// timeout, the error names what was awaited, the page's URL and the start of its text.
    pub async fn wait_for_text(&self, css: &str, text: &str, timeout: Duration) -> Result<Element> {
        let deadline = Instant::now() + timeout;
        loop {
            match self.find_text(css, text).await {
                Ok(Some(element)) => return Ok(element),
                Ok(None) => {}
                // The page was replaced between finding an element and reading its text.
                Err(err) if err.is_stale_element_reference() => {}
                Err(err) => return Err(command(format!("finding {css:?}"), err)),
            }
            if Instant::now() >= deadline {
                return Err(Error::Timeout {
                    what: format!("an element matching {css:?} whose text contains {text:?}"),
                    after: timeout,
                    url: match self.client.current_url().await {
                        Ok(url) => url.to_string(),
                        Err(err) => format!("(no URL: {err})"),
                    },
                    page: self.page_text().await,
                });
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Clicks the element `css` finds. A live page re-renders rows as the agent's state
    /// changes, so an element found a moment ago may be gone by the click: it is found again.
    pub async fn click(&self, css: &str) -> Result<()> {
        const ATTEMPTS: usize = 5;
        for attempt in 1..=ATTEMPTS {
            let found = self.client.find(Locator::Css(css)).await;
            let clicked = match found {
                Ok(element) => element.click().await.map(drop),
                Err(err) => Err(err),
            };
            match clicked {
                Ok(()) => return Ok(()),
                Err(err) if err.is_stale_element_reference() && attempt < ATTEMPTS => {
                    tokio::time::sleep(POLL).await;
                }
                Err(err) => return Err(command(format!("clicking {css:?}"), err)),
            }
        }
        unreachable!("the last attempt returns")
    }

    /// Ends the session, which closes chromium; dropping the value then stops chromedriver.
    pub async fn close(self) -> Result<()> {
        self.client
            .close()
            .await
            .map_err(|source| command("closing the chromium session".into(), source))
    }

    async fn find_text(&self, css: &str, text: &str) -> Result<Option<Element>, CmdError> {
        for element in self.client.find_all(Locator::Css(css)).await? {
            if element.text().await?.contains(text) {
                return Ok(Some(element));
            }
        }
        Ok(None)
    }

    /// The start of the page's visible text, for an error message.
    async fn page_text(&self) -> String {
        const SHOWN: usize = 1000;
        let text = match self.client.find(Locator::Css("body")).await {
            Ok(body) => body.text().await,
            Err(err) => Err(err),
        };
        match text {
            Ok(text) if text.chars().count() > SHOWN => {
                format!("{}…", text.chars().take(SHOWN).collect::<String>())
            }
            Ok(text) => text,
            Err(err) => format!("(no text: {err})"),
        }
    }
}

impl Driver {
    /// The port chromedriver announced, once it answers `/status` there.
    async fn wait_ready(&mut self) -> Result<u16> {
        let deadline = Instant::now() + DRIVER_READY;
        loop {
            let port = announced_port(&self.log());
            if let Some(port) = port
                && answers_status(port).await
            {
                return Ok(port);
            }
            if let Ok(Some(status)) = self.shell.try_wait() {
                return Err(Error::Driver {
                    problem: format!("exited ({status}) before answering /status"),
                    log: self.log(),
                });
            }
            if Instant::now() >= deadline {
                let problem = match port {
                    Some(port) => format!(
                        "did not answer http://127.0.0.1:{port}/status within {DRIVER_READY:?}"
                    ),
                    None => format!("announced no port within {DRIVER_READY:?}"),
                };
                return Err(Error::Driver {
                    problem,
                    log: self.log(),
                });
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// The end of chromedriver's (and chromium's) output, for an error message.
    fn log(&self) -> String {
        const SHOWN: usize = 4000;
        let log = std::fs::read_to_string(self.dir.path().join("chromedriver.log"))
            .unwrap_or_else(|err| format!("(unreadable: {err})"));
        let skip = log.chars().count().saturating_sub(SHOWN);
        log.chars().skip(skip).collect()
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        // The group is the supervising shell's, so this also takes chromedriver and chromium.
        // chromium's crashpad handlers start sessions of their own and exit with chromium.
        let _ = rustix::process::kill_process_group(Pid::from_child(&self.shell), Signal::KILL);
        let _ = self.shell.wait();
    }
}

fn command(what: String, source: CmdError) -> Error {
    Error::Command {
        what,
        source: Box::new(source),
    }
}

/// The workspace's target directory: `CARGO_TARGET_DIR` (relative to the repository root when
/// relative), else `target/` in the repository.
fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| repo_root().join("target"), |dir| repo_root().join(dir))
}

/// The port in chromedriver's "ChromeDriver was started successfully on port N." line.
fn announced_port(log: &str) -> Option<u16> {
    let (_, rest) = log.split_once("started successfully on port ")?;
    let digits = rest.find(|c: char| !c.is_ascii_digit())?;
    rest[..digits].parse().ok()
}

/// Whether chromedriver on `port` says it is ready for a session.
async fn answers_status(port: u16) -> bool {
    // chromedriver keeps the connection open after its response despite `Connection: close`,
    // so the body is read by its Content-Length.
    let exchange = async {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).await.ok()?;
        let request =
            format!("GET /status HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut response = Vec::new();
        loop {
            let mut chunk = [0; 4096];
            let read = stream.read(&mut chunk).await.ok()?;
            if read == 0 {
                return None;
            }
            response.extend_from_slice(&chunk[..read]);
            let text = String::from_utf8_lossy(&response);
            let Some((head, body)) = text.split_once("\r\n\r\n") else {
                continue;
            };
            let length: usize = head.lines().find_map(|line| {
                let (name, value) = line.split_once(':')?;
                name.eq_ignore_ascii_case("content-length")
                    .then(|| value.trim().parse().ok())?
            })?;
            if body.len() >= length {
                return serde_json::from_str::<serde_json::Value>(&body[..length]).ok();
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(5), exchange)
        .await
        .ok()
        .flatten()
        .is_some_and(|status| status["value"]["ready"] == true)
}

/// The address a dashboard `child` (stdout and stderr piped), called `what`, prints first (see
/// [`printed_address`]), and its stdout for what it prints next. Panics with its stderr when it
/// exits before printing it.
pub fn read_printed_address(
    child: &mut Child,
    what: &str,
) -> ((String, String, u16), BufReader<ChildStdout>) {
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    let read = stdout
        .read_line(&mut line)
        .unwrap_or_else(|err| panic!("read {what}'s address: {err:?}"));
    if read == 0 {
        let mut err = String::new();
        let _ = child
            .stderr
            .take()
            .expect("stderr")
            .read_to_string(&mut err);
        panic!("{what} exited before printing its address: {err}");
    }
    (printed_address(&line), stdout)
}

/// The address in a line a dashboard printed: the address, its host (`NAME.localhost:PORT`)
/// and its port.
pub fn printed_address(line: &str) -> (String, String, u16) {
    let url = line
        .split_whitespace()
        .find(|word| word.starts_with("http://"))
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_owned();
    let host = url["http://".len()..]
        .split('/')
        .next()
        .expect("a host")
        .to_owned();
    let port = host
        .rsplit_once(':')
        .and_then(|(_, p)| p.parse().ok())
        .unwrap_or_else(|| panic!("a port in {url}"));
    (url, host, port)
}

/// One HTTP/1.1 request to 127.0.0.1:`port` as written (the Host header is the caller's):
/// the status, the head and the body.
pub fn http(port: u16, request: &str) -> (u16, String, String) {
    use std::io::{Read as _, Write as _};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream.write_all(request.as_bytes()).expect("send");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("read");
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status line");
    (status, head.to_owned(), body.to_owned())
}

/// A GET of `target` from 127.0.0.1:`port` naming `host`, with `cookie`.
pub fn http_get(port: u16, host: &str, target: &str, cookie: &str) -> (u16, String, String) {
    http(
        port,
        &format!(
            "GET {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nCookie: {cookie}\r\n\r\n"
        ),
    )
}
