//! The one backoff of every reconnect to the agent: `status --watch`, `upgrade apply` following
//! the upgrade, and the dashboard's watches.

use std::time::Duration;

/// The longest wait between two attempts: an agent that came back is found within it.
const MAX_DELAY: Duration = Duration::from_secs(5);

/// A quarter second before the first attempt, doubled after each failed one up to
/// [`MAX_DELAY`], for as long as the caller goes on (the caller decides when to give up).
pub fn reconnect_backoff() -> backon::ExponentialBuilder {
    backon::ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(250))
        .with_max_delay(MAX_DELAY)
        .with_factor(2.0)
        .without_max_times()
}

/// The waits of one series of attempts to reach the agent again; a new series (after a
/// connection that worked) starts from the shortest wait.
#[derive(Debug)]
pub struct Reconnects(backon::ExponentialBackoff);

impl Reconnects {
    pub fn new() -> Self {
        use backon::BackoffBuilder as _;
        Self(reconnect_backoff().build())
    }

    /// The wait before the next attempt.
    pub fn next_delay(&mut self) -> Duration {
        // Built without a limit of attempts, the series never ends; the longest wait if it did.
        self.0.next().unwrap_or(MAX_DELAY)
    }

    /// Waits before the next attempt.
    pub async fn wait(&mut self) {
        tokio::time::sleep(self.next_delay()).await;
    }
}

impl Default for Reconnects {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reconnects_back_off_from_a_quarter_second_to_five_seconds_and_never_run_out() {
        let mut delays = Reconnects::new();
        let waits: Vec<_> = (0..1000).map(|_| delays.next_delay()).collect();
        assert_eq!(
            waits[..7],
            [250, 500, 1000, 2000, 4000, 5000, 5000].map(Duration::from_millis)
        );
        assert!(waits[5..].iter().all(|w| *w == MAX_DELAY));
        assert_eq!(
            Reconnects::new().next_delay(),
            Duration::from_millis(250),
            "a new series starts again"
        );
    }
}
