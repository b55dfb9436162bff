//! Version ranges as intervals, so that "every version this instance's range can resolve to is
//! inside the policy's range" is a comparison of two intervals instead of a guess at which
//! releases exist.
//!
//! A range is written as Flux writes `spec.distribution.version`: an exact version (`2.8.0`,
//! `v2.8.0`: that one only, as Flux reads it, not semver's caret), a wildcard (`2.8.x`, `2.x`,
//! `*`), or comparators joined by spaces or commas (`>=2.7.0 <2.10.0`, `~2.8`, `^2.8.1`).
//! Alternatives (`||`) are refused: one interval per range keeps the rule exact. Pre-release
//! tags are ignored: Flux distributions are released without them.

use std::{cmp::Ordering, fmt};

/// A release version, without pre-release or build parts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Release {
    pub major: u64,
    pub minor: u64,
    pub patch: u64,
}

impl Release {
    pub const fn new(major: u64, minor: u64, patch: u64) -> Self {
        Self {
            major,
            minor,
            patch,
        }
    }

    const fn next_patch(self) -> Self {
        Self::new(self.major, self.minor, self.patch + 1)
    }

    const fn next_minor(self) -> Self {
        Self::new(self.major, self.minor + 1, 0)
    }

    const fn next_major(self) -> Self {
        Self::new(self.major + 1, 0, 0)
    }
}

impl fmt::Display for Release {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// The versions a range allows: from `low` (inclusive) up to `high` (exclusive; `None`: no
/// upper bound).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Range {
    text: String,
    low: Release,
    high: Option<Release>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RangeError {
    #[error(
        "{} is neither a version (2.8.0) nor a semver range (2.8.x, >=2.7.0 <2.10.0): {reason}",
        crate::text::quote(text)
    )]
    Syntax { text: String, reason: String },
    #[error(
        "{} uses ||; write one range (e.g. >=2.7.0 <2.10.0)",
        crate::text::quote(text)
    )]
    Alternatives { text: String },
    #[error("{} matches no version", crate::text::quote(text))]
    Empty { text: String },
}

impl Range {
    pub fn parse(text: &str) -> Result<Self, RangeError> {
        let trimmed = text.trim();
        if trimmed.contains("||") {
            return Err(RangeError::Alternatives {
                text: text.to_owned(),
            });
        }
        let mut range = Self {
            text: trimmed.to_owned(),
            low: Release::new(0, 0, 0),
            high: None,
        };
        if let Ok(exact) = semver::Version::parse(strip_v(trimmed)) {
            let exact = Release::new(exact.major, exact.minor, exact.patch);
            range.low = exact;
            range.high = Some(exact.next_patch());
            return Ok(range);
        }
        let requirement =
            semver::VersionReq::parse(&normalize(trimmed)).map_err(|err| RangeError::Syntax {
                text: text.to_owned(),
                reason: err.to_string(),
            })?;
        for comparator in &requirement.comparators {
            let (low, high) = bounds(comparator);
            range.low = range.low.max(low);
            range.high = match (range.high, high) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        if range.high.is_some_and(|high| high <= range.low) {
            return Err(RangeError::Empty {
                text: text.to_owned(),
            });
        }
        Ok(range)
    }

    /// The range as written.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The lowest version the range allows.
    pub fn low(&self) -> Release {
        self.low
    }

    /// The first version above the range (`None`: no upper bound).
    pub fn high(&self) -> Option<Release> {
        self.high
    }

    pub fn contains(&self, version: Release) -> bool {
        version >= self.low && self.high.is_none_or(|high| version < high)
    }

    /// Whether every version `self` allows is allowed by `outer` too.
    pub fn is_within(&self, outer: &Range) -> bool {
        self.low >= outer.low
            && match (self.high, outer.high) {
                (_, None) => true,
                (None, Some(_)) => false,
                (Some(a), Some(b)) => a.cmp(&b) != Ordering::Greater,
            }
    }
}

/// The interval one comparator allows, as `semver` reads it (missing parts are wildcards).
fn bounds(c: &semver::Comparator) -> (Release, Option<Release>) {
    use semver::Op;
    let zero = Release::new(0, 0, 0);
    let base = Release::new(c.major, c.minor.unwrap_or(0), c.patch.unwrap_or(0));
    // The first version after everything the written parts match (`2.8` → 2.9.0).
    let after = match (c.minor, c.patch) {
        (None, _) => base.next_major(),
        (Some(_), None) => base.next_minor(),
        (Some(_), Some(_)) => base.next_patch(),
    };
    match c.op {
        Op::Exact | Op::Wildcard => (base, Some(after)),
        Op::Greater => (after, None),
        Op::GreaterEq => (base, None),
        Op::Less => (zero, Some(base)),
        Op::LessEq => (zero, Some(after)),
        Op::Tilde => match c.minor {
            None => (base, Some(base.next_major())),
            Some(_) => (base, Some(base.next_minor())),
        },
        Op::Caret => match (c.major, c.minor, c.patch) {
            (0, Some(0), Some(_)) => (base, Some(base.next_patch())),
            (0, Some(_), _) => (base, Some(base.next_minor())),
            _ => (base, Some(base.next_major())),
        },
        // `semver::Op` is non-exhaustive; an operator added later is read narrowly, as
        // matching only the versions it names.
        _ => (base, Some(after)),
    }
}

pub fn strip_v(version: &str) -> &str {
    version.strip_prefix('v').unwrap_or(version)
}

/// `>=v2.7.0 <2.10.0` (Flux's space-separated notation) → `>=2.7.0, <2.10.0` (the semver
/// crate's), keeping an operator written apart from its version (`>= 2.7.0`) with it. Also
/// reads flux-operator version ranges (`bundle::AllowedVersions`).
pub(crate) fn normalize(text: &str) -> String {
    let mut comparators = Vec::new();
    let mut pending_op = String::new();
    for token in text.split(|c: char| c == ',' || c.is_whitespace()) {
        if token.is_empty() {
            continue;
        }
        let split = token
            .find(|c: char| !matches!(c, '<' | '>' | '=' | '~' | '^'))
            .unwrap_or(token.len());
        let (op, version) = token.split_at(split);
        if version.is_empty() {
            pending_op.push_str(op);
            continue;
        }
        comparators.push(format!("{pending_op}{op}{}", strip_v(version)));
        pending_op.clear();
    }
    comparators.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(text: &str) -> Range {
        Range::parse(text).unwrap_or_else(|err| panic!("{text}: {err}"))
    }

    fn r(major: u64, minor: u64, patch: u64) -> Release {
        Release::new(major, minor, patch)
    }

    #[test]
    fn forms_flux_accepts_become_intervals() {
        let cases = [
            ("2.8.0", r(2, 8, 0), Some(r(2, 8, 1))),
            ("v2.8.0", r(2, 8, 0), Some(r(2, 8, 1))),
            ("2.8.x", r(2, 8, 0), Some(r(2, 9, 0))),
            ("2.x", r(2, 0, 0), Some(r(3, 0, 0))),
            ("*", r(0, 0, 0), None),
            (">=2.7.0 <2.10.0", r(2, 7, 0), Some(r(2, 10, 0))),
            (">= v2.7.0, < 2.10.0", r(2, 7, 0), Some(r(2, 10, 0))),
            (">2.7", r(2, 8, 0), None),
            ("<=2.8", r(0, 0, 0), Some(r(2, 9, 0))),
            ("~2.8.1", r(2, 8, 1), Some(r(2, 9, 0))),
            ("^2.8.1", r(2, 8, 1), Some(r(3, 0, 0))),
            ("^0.58.1", r(0, 58, 1), Some(r(0, 59, 0))),
            (">=2.7.0 2.8.x", r(2, 8, 0), Some(r(2, 9, 0))),
        ];
        for (text, low, high) in cases {
            let got = range(text);
            assert_eq!((got.low, got.high), (low, high), "{text}");
        }
    }

    #[test]
    fn containment_is_exact_at_the_bounds() {
        let policy = range(">=2.7.0 <2.10.0");
        for inside in [
            "2.7.0",
            "2.7.x",
            "2.9.x",
            "2.9.4",
            ">=2.8.0 <2.10.0",
            "~2.8",
        ] {
            assert!(range(inside).is_within(&policy), "{inside}");
        }
        for outside in ["2.6.x", "2.x", "2.10.0", ">=2.8.0", "<2.9.0", "2.6.3", "*"] {
            assert!(!range(outside).is_within(&policy), "{outside}");
        }
        assert!(range("2.9.4").is_within(&range("*")));
        assert!(policy.contains(r(2, 9, 99)));
        assert!(!policy.contains(r(2, 10, 0)));
    }

    #[test]
    fn bad_ranges_say_what_is_wrong() {
        let err = Range::parse("latest").unwrap_err().to_string();
        assert!(err.contains("\"latest\" is neither a version"), "{err}");
        let err = Range::parse("2.7.x || 2.9.x").unwrap_err().to_string();
        assert!(err.contains("uses ||"), "{err}");
        let err = Range::parse(">=2.10.0 <2.7.0").unwrap_err().to_string();
        assert_eq!(err, "\">=2.10.0 <2.7.0\" matches no version");
    }
}
