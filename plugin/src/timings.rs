//! `TENANTFLUX_TIMINGS=1`: where one command's milliseconds go. Each phase (kubeconfig, client,
//! the agent pod's lookup and check, the port-forward upgrade, the HTTP/2 handshake, the
//! credential, the call and, from the agent's `server-timing` answer, its TokenReview,
//! SubjectAccessReview and handler) is printed on stderr when the command ends, one line each:
//!
//! ```text
//! timing: pod-lookup 2.41 ms
//! ```
//!
//! Only names and durations: never a token, a name or an address. `tests/bench/plugin` reads
//! these lines.

use std::{
    future::Future,
    sync::{Mutex, OnceLock},
    time::{Duration, Instant},
};

pub const TIMINGS_ENV: &str = "TENANTFLUX_TIMINGS";
/// The metadata that asks the agent for its side (`server-timing` in the answer's headers).
pub const REQUEST_METADATA: &str = "x-tenantflux-timings";
pub const RESPONSE_METADATA: &str = "server-timing";

static PHASES: Mutex<Vec<(String, Duration)>> = Mutex::new(Vec::new());

pub fn enabled() -> bool {
    static ENABLED: OnceLock<bool> = OnceLock::new();
    *ENABLED
        .get_or_init(|| std::env::var_os(TIMINGS_ENV).is_some_and(|v| !v.is_empty() && v != "0"))
}

pub fn record(phase: &str, took: Duration) {
    if enabled() {
        PHASES
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((phase.to_owned(), took));
    }
}

/// Runs `future`, recording how long it took as `phase`.
pub async fn timed<F: Future>(phase: &str, future: F) -> F::Output {
    let started = Instant::now();
    let output = future.await;
    record(phase, started.elapsed());
    output
}

/// Records the agent's phases from its `server-timing` value (`name;dur=MS, …`), each as
/// `agent-<name>`.
pub fn record_server_timing(value: &str) {
    for (name, ms) in parse_server_timing(value) {
        record(
            &format!("agent-{name}"),
            Duration::from_secs_f64(ms / 1000.0),
        );
    }
}

/// `name;dur=1.5, other;dur=2` → [(name, 1.5), (other, 2.0)]; entries without a duration, or
/// with names that are not plain words, are left out.
pub fn parse_server_timing(value: &str) -> Vec<(String, f64)> {
    value
        .split(',')
        .filter_map(|entry| {
            let mut parts = entry.trim().split(';');
            let name = parts.next()?.trim();
            let plain = !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
            let ms = parts
                .filter_map(|p| p.trim().strip_prefix("dur="))
                .find_map(|d| d.parse::<f64>().ok())
                .filter(|ms| ms.is_finite() && *ms >= 0.0)?;
            plain.then(|| (name.to_owned(), ms))
        })
        .collect()
}

/// Prints every recorded phase, then the whole command since `started`.
pub fn print(started: Instant) {
    if !enabled() {
        return;
    }
    let phases = std::mem::take(&mut *PHASES.lock().unwrap_or_else(|p| p.into_inner()));
    for (phase, took) in phases
        .iter()
        .chain([&("total".to_owned(), started.elapsed())])
    {
        eprintln!("timing: {phase} {:.2} ms", took.as_secs_f64() * 1000.0);
    }
}

#[cfg(test)]
mod tests {

    use super::*;

    #[test]
    fn server_timing_is_read_as_names_and_milliseconds() {
        assert_eq!(
            parse_server_timing("tokenreview;dur=1.25, sar;desc=\"x\";dur=0.5,handler;dur=3"),
            vec![
                ("tokenreview".to_owned(), 1.25),
                ("sar".to_owned(), 0.5),
                ("handler".to_owned(), 3.0)
            ]
        );
        assert!(parse_server_timing("").is_empty());
        assert!(parse_server_timing("nodur, bad name;dur=1, neg;dur=-1, nan;dur=NaN").is_empty());
    }
}
