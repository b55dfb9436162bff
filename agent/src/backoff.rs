//! How the agent's watches wait between failures while the API server does not answer.
//!
//! kube-rs's default doubles the wait up to 30 s, so after a 30 s outage of the API server the
//! agent noticed its return only 20–50 s later (measured in the fault tests). The agent watches
//! a handful of resources in one cluster: retrying at most every 5 s costs the API server little
//! and brings the agent back within seconds.

use std::time::Duration;

use kube::runtime::{utils::ResetTimerBackoff, watcher::ExponentialBackoff};

/// The longest wait between two attempts.
const MAX_DELAY: Duration = Duration::from_secs(5);
/// A watch that has run without an error for this long starts again from the shortest wait.
const RESET_AFTER: Duration = Duration::from_secs(120);

/// The backoff for every watch the agent runs (`WatchStreamExt::backoff`).
pub fn watch() -> ResetTimerBackoff<ExponentialBackoff> {
    let builder = backon::ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(500))
        .with_max_delay(MAX_DELAY)
        .with_factor(2.0)
        .with_jitter()
        .without_max_times();
    ResetTimerBackoff::new(ExponentialBackoff::from(builder), RESET_AFTER)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_grow_but_never_past_the_cap() {
        let waits: Vec<Duration> = watch().take(20).collect();
        assert!(waits[0] < Duration::from_secs(2), "{waits:?}");
        // With jitter a wait may exceed its base by up to the base again, never by more.
        assert!(waits.iter().all(|w| *w <= 2 * MAX_DELAY), "{waits:?}");
        assert!(waits[10..].iter().all(|w| *w >= MAX_DELAY), "{waits:?}");
    }
}
