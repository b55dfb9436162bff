//! Durations as kubectl and Go write them: plain seconds (`30`) or amounts with units, one or
//! more (`500ms`, `30s`, `5m`, `1h`, `1m30s`).

use std::time::Duration;

/// Why a duration was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("{} is not a duration: expected e.g. 30s, 1m, 1m30s, 500ms", crate::text::quote(.0))]
    Syntax(String),
    #[error("{} is longer than a duration may be", crate::text::quote(.0))]
    TooLong(String),
}

/// Parses `text`; zero is a valid result (callers decide what zero means).
pub fn parse(text: &str) -> Result<Duration, DurationError> {
    let syntax = || DurationError::Syntax(text.to_owned());
    let too_long = || DurationError::TooLong(text.to_owned());
    if text.is_empty() {
        return Err(syntax());
    }
    if text.bytes().all(|b| b.is_ascii_digit()) {
        return text
            .parse::<u64>()
            .map(Duration::from_secs)
            .map_err(|_| too_long());
    }
    let mut total = Duration::ZERO;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .ok_or_else(syntax)?;
        if digits == 0 {
            return Err(syntax());
        }
        let amount: u64 = rest[..digits].parse().map_err(|_| too_long())?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let part = match &rest[..unit_len] {
            "ms" => Some(Duration::from_millis(amount)),
            "s" => Some(Duration::from_secs(amount)),
            "m" => amount.checked_mul(60).map(Duration::from_secs),
            "h" => amount.checked_mul(3600).map(Duration::from_secs),
            _ => return Err(syntax()),
        };
        rest = &rest[unit_len..];
        total = part
            .and_then(|part| total.checked_add(part))
            .ok_or_else(too_long)?;
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_like_kubectl() {
        assert_eq!(parse("30"), Ok(Duration::from_secs(30)));
        assert_eq!(parse("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse("0s"), Ok(Duration::ZERO));
        for bad in ["", "s", "m", "10x", "-5s", "5d", "1m s", "5 parsecs"] {
            assert_eq!(parse(bad), Err(DurationError::Syntax(bad.into())), "{bad}");
        }
    }

    #[test]
    fn overflowing_durations_are_refused_not_panics() {
        for huge in [
            "18446744073709551615h",
            "99999999999999999999",
            "99999999999999999999s",
            "307445734561825861m",
            "18446744073709551615s18446744073709551615s",
        ] {
            assert_eq!(
                parse(huge),
                Err(DurationError::TooLong(huge.into())),
                "{huge}"
            );
        }
        assert_eq!(
            parse("18446744073709551615ms").map(|d| d.as_secs()),
            Ok(18_446_744_073_709_551)
        );
    }
}
