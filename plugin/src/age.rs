//! Durations as kubectl's AGE column writes them, for every table and page: a reader who
//! knows `kubectl get` reads ours the same way.
//!
//! The rules are those of `HumanDuration` in k8s.io/apimachinery's `pkg/util/duration`: about
//! two significant figures, the second unit only while it still says something.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

const MINUTE: u64 = 60;
const HOUR: u64 = 60 * MINUTE;
const DAY: u64 = 24 * HOUR;
const YEAR: u64 = 365 * DAY;

/// `45s`, `119s`, `2m1s`, `10m`, `179m`, `3h1m`, `8h`, `47h`, `2d1h`, `8d`, `729d`, `2y1d`,
/// `8y`; whole units, never rounded up.
pub fn human(duration: Duration) -> String {
    let s = duration.as_secs();
    let (minutes, hours, days) = (s / MINUTE, s / HOUR, s / DAY);
    // A unit and, when it is not zero, the next smaller one.
    let two = |big: u64, big_unit: &str, small: u64, small_unit: &str| {
        if small == 0 {
            format!("{big}{big_unit}")
        } else {
            format!("{big}{big_unit}{small}{small_unit}")
        }
    };
    if s < 2 * MINUTE {
        format!("{s}s")
    } else if minutes < 10 {
        two(minutes, "m", s % MINUTE, "s")
    } else if minutes < 3 * 60 {
        format!("{minutes}m")
    } else if hours < 8 {
        two(hours, "h", minutes % 60, "m")
    } else if hours < 48 {
        format!("{hours}h")
    } else if days < 8 {
        two(days, "d", hours % 24, "h")
    } else if days < 2 * 365 {
        format!("{days}d")
    } else if days < 8 * 365 {
        two(s / YEAR, "y", days % 365, "d")
    } else {
        format!("{}y", s / YEAR)
    }
}

/// How long before `now` `at` was. A time ahead of `now` (the cluster's clock ahead of this
/// machine's) reads as just now, `0s`, where kubectl would write `<invalid>` beyond a second.
pub fn since(at: Timestamp, now: Timestamp) -> String {
    let seconds = now.as_second().saturating_sub(at.as_second());
    human(Duration::from_secs(seconds.max(0).unsigned_abs()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// apimachinery's own cases for `HumanDuration`, each boundary with the second before it
    /// (whole seconds: our inputs have no fractions).
    #[test]
    fn ages_follow_kubectls_rules_at_every_boundary() {
        let cases: &[(u64, &str)] = &[
            (0, "0s"),
            (1, "1s"),
            (70, "70s"),
            (2 * MINUTE - 1, "119s"),
            (2 * MINUTE, "2m"),
            (2 * MINUTE + 1, "2m1s"),
            (190, "3m10s"),
            (10 * MINUTE - 1, "9m59s"),
            (10 * MINUTE, "10m"),
            (10 * MINUTE + 1, "10m"),
            (70 * MINUTE, "70m"),
            (3 * HOUR - 1, "179m"),
            (3 * HOUR, "3h"),
            (3 * HOUR + MINUTE, "3h1m"),
            (8 * HOUR - 1, "7h59m"),
            (8 * HOUR, "8h"),
            (8 * HOUR + 59 * MINUTE, "8h"),
            (47 * HOUR, "47h"),
            (2 * DAY - 1, "47h"),
            (2 * DAY, "2d"),
            (49 * HOUR, "2d1h"),
            (8 * DAY - 1, "7d23h"),
            (8 * DAY, "8d"),
            (8 * DAY + 2 * HOUR, "8d"),
            (8 * DAY + 23 * HOUR, "8d"),
            (367 * DAY, "367d"),
            (2 * YEAR - 1, "729d"),
            (2 * YEAR, "2y"),
            (2 * YEAR + 23 * HOUR + 59 * MINUTE, "2y"),
            (2 * YEAR + DAY - 1, "2y"),
            (2 * YEAR + DAY, "2y1d"),
            (2 * YEAR + 25 * HOUR, "2y1d"),
            (3 * YEAR, "3y"),
            (7 * YEAR, "7y"),
            (8 * YEAR - 1, "7y364d"),
            (8 * YEAR, "8y"),
            (8 * YEAR + 2 * HOUR, "8y"),
            (8 * YEAR + 364 * DAY, "8y"),
            (9 * YEAR, "9y"),
        ];
        for &(seconds, want) in cases {
            assert_eq!(human(Duration::from_secs(seconds)), want, "{seconds} s");
        }
    }

    #[test]
    fn fractions_of_a_second_are_dropped() {
        assert_eq!(human(Duration::from_millis(999)), "0s");
        assert_eq!(human(Duration::from_millis(2 * 60_000 - 1)), "119s");
    }

    #[test]
    fn an_age_counts_back_from_now_and_a_future_time_is_now() {
        let now: Timestamp = "2026-11-30T12:00:00Z".parse().unwrap();
        let at = |s: &str| since(s.parse().unwrap(), now);
        assert_eq!(at("2026-11-30T11:59:15Z"), "45s");
        assert_eq!(at("2026-11-28T11:00:00Z"), "2d1h");
        assert_eq!(at("2026-11-30T12:00:00Z"), "0s");
        assert_eq!(at("2026-11-30T12:00:01Z"), "0s");
        assert_eq!(at("2026-11-30T13:00:00Z"), "0s");
    }
}
