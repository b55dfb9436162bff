//! The processes a test cluster runs beside its control plane (the agent, flux-operator, the
//! controller supervisor, the registry, git servers, the reaper), as `tests/env/cluster` starts
//! and stops them through `tenantflux-test-supervisor spawn|stop|running|reap|free-port`: each
//! in a process group of its own with its output appended to a log and its pid in a file, started
//! only once it answers (or failing with the log's last lines when it exits first), stopped with
//! SIGTERM and, after a grace period, SIGKILL. The bash script says what runs with which
//! arguments; how a process is started, watched and stopped is written here once.

use std::{
    fs,
    io::{Read as _, Write as _},
    os::unix::process::CommandExt as _,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

/// How long a process has between SIGTERM and SIGKILL.
pub const STOP_GRACE: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{what}: {doing} {path}: {source}")]
    File {
        what: String,
        doing: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{what}: starting {program}: {source}")]
    Spawn {
        what: String,
        program: String,
        source: std::io::Error,
    },
    #[error("{what}: it exited ({status}) before it was ready; the end of {log}:\n{tail}", log = log.display())]
    Exited {
        what: String,
        status: std::process::ExitStatus,
        log: PathBuf,
        tail: String,
    },
    #[error("{what}: not ready within {timeout:?} ({ready}); the end of {log}:\n{tail}", log = log.display())]
    NotReady {
        what: String,
        ready: Ready,
        timeout: Duration,
        log: PathBuf,
        tail: String,
    },
    #[error("{what}: running {program}: {source}")]
    Run {
        what: String,
        program: String,
        source: std::io::Error,
    },
    #[error("finding a free loopback port: {source}")]
    Port { source: std::io::Error },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// When a started process counts as ready.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ready {
    /// At once.
    Started,
    /// An HTTP GET of this `http://127.0.0.1:PORT/PATH` answers 200.
    Http { port: u16, path: String },
    /// This file exists and is not empty (a port the process wrote, say).
    File(PathBuf),
}

impl std::fmt::Display for Ready {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ready::Started => write!(f, "started"),
            Ready::Http { port, path } => {
                write!(f, "GET http://127.0.0.1:{port}{path} answers 200")
            }
            Ready::File(path) => write!(f, "{} written", path.display()),
        }
    }
}

impl Ready {
    /// `http://127.0.0.1:PORT/PATH` (a loopback URL; the processes listen nowhere else).
    pub fn http(url: &str) -> Option<Ready> {
        let rest = url.strip_prefix("http://127.0.0.1:")?;
        let (port, path) = rest.split_once('/').unwrap_or((rest, ""));
        Some(Ready::Http {
            port: port.parse().ok()?,
            path: format!("/{path}"),
        })
    }

    fn holds(&self) -> bool {
        match self {
            Ready::Started => true,
            Ready::Http { port, path } => http_status(*port, path) == Some(200),
            Ready::File(path) => fs::metadata(path).is_ok_and(|m| m.len() > 0),
        }
    }
}

/// A process to start: `command`'s program and arguments, what to call it in errors.
#[derive(Debug, Clone)]
pub struct Spawn {
    pub what: String,
    pub command: Vec<String>,
    pub pidfile: PathBuf,
    pub log: PathBuf,
    /// Start the log afresh rather than appending to it.
    pub truncate: bool,
    pub ready: Ready,
    pub timeout: Duration,
}

/// Starts `spawn.command` to outlive this process and waits until it is ready: its pid is in
/// the pidfile from the start (so a failed start can be stopped too). Its environment is this
/// process's.
pub fn spawn(spawn: &Spawn) -> Result<u32> {
    let what = &spawn.what;
    let file_error = |doing, path: &Path| {
        let path = path.to_owned();
        move |source| Error::File {
            what: what.clone(),
            doing,
            path,
            source,
        }
    };
    let log = fs::OpenOptions::new()
        .create(true)
        .write(true)
        .append(!spawn.truncate)
        .truncate(spawn.truncate)
        .open(&spawn.log)
        .map_err(file_error("opening", &spawn.log))?;
    let err_log = log.try_clone().map_err(file_error("opening", &spawn.log))?;
    let (program, args) = spawn.command.split_first().ok_or_else(|| Error::Spawn {
        what: what.clone(),
        program: String::new(),
        source: std::io::Error::other("no command given"),
    })?;
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(err_log)
        // Its own process group: a signal to its starter's group (a stopped background build,
        // ^C in the terminal) is not one to it, and it lives on when its starter exits.
        .process_group(0)
        .spawn()
        .map_err(|source| Error::Spawn {
            what: what.clone(),
            program: program.clone(),
            source,
        })?;
    let pid = child.id();
    fs::write(&spawn.pidfile, format!("{pid}\n")).map_err(file_error("writing", &spawn.pidfile))?;
    let deadline = Instant::now() + spawn.timeout;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            let _ = fs::remove_file(&spawn.pidfile);
            return Err(Error::Exited {
                what: what.clone(),
                status,
                log: spawn.log.clone(),
                tail: tail(&spawn.log),
            });
        }
        if spawn.ready.holds() {
            // Dropping `child` neither waits for it nor kills it: once this process exits, init
            // reaps it.
            return Ok(pid);
        }
        if Instant::now() >= deadline {
            return Err(Error::NotReady {
                what: what.clone(),
                ready: spawn.ready.clone(),
                timeout: spawn.timeout,
                log: spawn.log.clone(),
                tail: tail(&spawn.log),
            });
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Stops the processes of `pidfiles` that run, all at once (SIGTERM, SIGKILL to what is left
/// after [`STOP_GRACE`]), and removes the pidfiles.
pub fn stop(pidfiles: &[PathBuf]) {
    let pids: Vec<u32> = pidfiles
        .iter()
        .filter_map(|p| read_pid(p))
        .filter(|&pid| alive(pid))
        .collect();
    for &pid in &pids {
        send_signal(pid, rustix::process::Signal::TERM);
    }
    let deadline = Instant::now() + STOP_GRACE;
    while pids.iter().any(|&pid| alive(pid)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    for &pid in pids.iter().filter(|&&pid| alive(pid)) {
        send_signal(pid, rustix::process::Signal::KILL);
    }
    // SIGKILL is delivered asynchronously: gone when this returns.
    let deadline = Instant::now() + Duration::from_secs(2);
    while pids.iter().any(|&pid| alive(pid)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    for pidfile in pidfiles {
        let _ = fs::remove_file(pidfile);
    }
}

/// Whether the process of `pidfile` runs.
pub fn running(pidfile: &Path) -> bool {
    read_pid(pidfile).is_some_and(alive)
}

/// Waits until process `owner` is gone, then runs `command` (its exit status is returned): a
/// cluster taken down once the test run that started it ends, however it ends.
pub fn reap(owner: u32, command: &[String]) -> Result<std::process::ExitStatus> {
    while alive(owner) {
        std::thread::sleep(Duration::from_secs(1));
    }
    let what = format!("after process {owner} ended");
    let (program, args) = command.split_first().ok_or_else(|| Error::Run {
        what: what.clone(),
        program: String::new(),
        source: std::io::Error::other("no command given"),
    })?;
    Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .status()
        .map_err(|source| Error::Run {
            what,
            program: program.clone(),
            source,
        })
}

/// The last 20 lines of `log`, for an error.
fn tail(log: &Path) -> String {
    let text = fs::read(log).unwrap_or_default();
    let text = String::from_utf8_lossy(&text);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

/// The status code of `GET path` on 127.0.0.1:`port`, if it answered within a second.
fn http_status(port: u16, path: &str) -> Option<u16> {
    let timeout = Duration::from_secs(1);
    let address = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut stream = std::net::TcpStream::connect_timeout(&address, timeout).ok()?;
    stream.set_read_timeout(Some(timeout)).ok()?;
    stream.set_write_timeout(Some(timeout)).ok()?;
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).ok()?;
    let mut head = [0u8; 64];
    let mut read = 0;
    while read < 12 {
        match stream.read(&mut head[read..]) {
            Ok(0) | Err(_) => break,
            Ok(n) => read += n,
        }
    }
    // "HTTP/1.1 200 OK"
    let line = std::str::from_utf8(&head[..read]).ok()?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Sends `signal` to process `pid` (nothing if there is none).
pub fn send_signal(pid: u32, signal: rustix::process::Signal) {
    if let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process(pid, signal);
    }
}

/// The process exists and has not exited: a zombie (exited, not yet reaped) counts as gone.
pub fn alive(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            // The state follows the command name, which is in parentheses and may hold any.
            let (_, rest) = stat.rsplit_once(')')?;
            rest.split_whitespace()
                .next()
                .map(|state| state != "Z" && state != "X")
        })
        .unwrap_or(false)
}

/// The pid in `path`, if it holds one.
pub fn read_pid(path: &Path) -> Option<u32> {
    fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The first port of the kernel's ephemeral range (Linux's default when it cannot be read).
fn ephemeral_low() -> u16 {
    fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse().ok())
        .unwrap_or(32768)
}

/// A free loopback port, from below the kernel's ephemeral range where there is room: a port
/// from that range, once released, can be taken by any outgoing connection (another lane's)
/// before the process it is for binds it (seen: the agent's gRPC port, "Address already in
/// use"). Where the range leaves no room below it, any port the kernel gives.
pub fn free_port() -> Result<u16> {
    let low = ephemeral_low();
    if low > 11_000 {
        // Random enough to keep two picks apart: std's per-process hash keys.
        use std::hash::{BuildHasher as _, RandomState};
        let seed = RandomState::new();
        for attempt in 0u32..100 {
            let port = 10_000 + (seed.hash_one(attempt) % u64::from(low - 10_000)) as u16;
            if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
                return Ok(port);
            }
        }
    }
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .map_err(|source| Error::Port { source })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Vec<String> {
        vec!["sh".into(), "-c".into(), script.into()]
    }

    fn spec(dir: &Path, command: Vec<String>, ready: Ready) -> Spawn {
        Spawn {
            what: "the test process".into(),
            command,
            pidfile: dir.join("p.pid"),
            log: dir.join("p.log"),
            truncate: false,
            ready,
            timeout: Duration::from_secs(10),
        }
    }

    #[test]
    fn this_process_is_alive_and_an_absent_pid_is_not() {
        assert!(alive(std::process::id()));
        // Above the kernel's pid_max (at most 2^22).
        assert!(!alive(1 << 23));
    }

    #[test]
    fn a_spawned_process_runs_in_its_own_group_until_stopped() {
        let dir = tempfile::tempdir().unwrap();
        let ready = Ready::File(dir.path().join("port"));
        let process = spec(
            dir.path(),
            sh("echo started; echo 1234 > \"$0\"; exec sleep 60")
                .into_iter()
                .chain([dir.path().join("port").display().to_string()])
                .collect(),
            ready,
        );
        let pid = spawn(&process).expect("started");
        assert!(running(&process.pidfile));
        assert_eq!(read_pid(&process.pidfile), Some(pid));
        let group = rustix::process::getpgid(rustix::process::Pid::from_raw(pid as i32))
            .expect("its group");
        assert_eq!(
            group.as_raw_nonzero().get() as u32,
            pid,
            "a group of its own"
        );
        assert!(
            fs::read_to_string(&process.log)
                .unwrap()
                .contains("started")
        );
        // SIGTERM is enough for sleep: gone well before the grace period, pidfile removed.
        let started = Instant::now();
        stop(std::slice::from_ref(&process.pidfile));
        assert!(started.elapsed() < STOP_GRACE);
        assert!(!process.pidfile.exists());
        assert!(!alive(pid));
    }

    #[test]
    fn a_process_that_ignores_sigterm_is_killed_after_the_grace_period() {
        let dir = tempfile::tempdir().unwrap();
        let process = spec(
            dir.path(),
            sh("trap '' TERM; echo up; while :; do sleep 1; done"),
            Ready::Started,
        );
        let pid = spawn(&process).expect("started");
        // The trap is set before "up" is written.
        while !fs::read_to_string(&process.log)
            .unwrap_or_default()
            .contains("up")
        {
            std::thread::sleep(Duration::from_millis(50));
        }
        stop(std::slice::from_ref(&process.pidfile));
        assert!(!alive(pid));
        assert!(!process.pidfile.exists());
    }

    #[test]
    fn a_process_that_exits_before_it_is_ready_fails_with_its_log() {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port().unwrap();
        let process = spec(
            dir.path(),
            sh("echo 'listen tcp: address already in use' >&2; exit 3"),
            Ready::http(&format!("http://127.0.0.1:{port}/readyz")).unwrap(),
        );
        let err = spawn(&process).expect_err("it exited").to_string();
        assert!(err.contains("the test process: it exited"), "{err}");
        assert!(err.contains("address already in use"), "{err}");
        assert!(
            !process.pidfile.exists(),
            "no pid of a process that is gone"
        );

        // Not ready in time: named with what it waited for; its pid stays for the stop.
        let mut slow = spec(
            dir.path(),
            sh("exec sleep 60"),
            Ready::File(dir.path().join("never")),
        );
        slow.timeout = Duration::from_millis(300);
        let err = spawn(&slow).expect_err("not ready").to_string();
        assert!(err.contains("not ready within 300ms"), "{err}");
        assert!(err.contains("never written"), "{err}");
        assert!(running(&slow.pidfile));
        stop(std::slice::from_ref(&slow.pidfile));
    }

    #[test]
    fn ready_over_http_is_a_200_from_the_port() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = std::thread::spawn(move || {
            for status in ["503 Service Unavailable", "200 OK"] {
                let (mut stream, _) = listener.accept().unwrap();
                let mut request = [0u8; 512];
                let n = stream.read(&mut request).unwrap();
                let request = String::from_utf8_lossy(&request[..n]).into_owned();
                assert!(request.starts_with("GET /readyz HTTP/1.1\r\n"), "{request}");
                write!(stream, "HTTP/1.1 {status}\r\nContent-Length: 0\r\n\r\n").unwrap();
            }
        });
        let ready = Ready::http(&format!("http://127.0.0.1:{port}/readyz")).unwrap();
        assert!(!ready.holds(), "503 is not ready");
        assert!(ready.holds());
        server.join().unwrap();
        assert_eq!(Ready::http("http://example.com:80/"), None, "loopback only");
        assert_eq!(
            Ready::http("http://127.0.0.1:5000"),
            Some(Ready::Http {
                port: 5000,
                path: "/".into()
            })
        );
    }

    #[test]
    fn reap_runs_the_command_once_the_owner_is_gone() {
        let dir = tempfile::tempdir().unwrap();
        let mut owner = Command::new("sleep").arg("0.5").spawn().unwrap();
        let pid = owner.id();
        let marker = dir.path().join("reaped");
        let waiter = std::thread::spawn(move || owner.wait());
        let command = sh("test ! -e \"$0\" && touch \"$0\"")
            .into_iter()
            .chain([marker.display().to_string()])
            .collect::<Vec<_>>();
        let status = reap(pid, &command).unwrap();
        assert!(status.success());
        assert!(marker.exists());
        waiter.join().unwrap().unwrap();
    }

    #[test]
    fn free_ports_are_real_loopback_ports() {
        let port = free_port().unwrap();
        assert_ne!(port, 0);
        std::net::TcpListener::bind(("127.0.0.1", port)).expect("the port is free");
        let low = ephemeral_low();
        if low > 11_000 {
            assert!(
                (10_000..low).contains(&port),
                "{port} is in the ephemeral range"
            );
        }
    }
}
