//! Label selectors in Kubernetes' string syntax (`a=b,c!=d,e in (f,g),f notin (h),g,!h`),
//! evaluated locally: the agent filters Flux objects with them, the plugin the clusters of a
//! fleet. One grammar, so `-l` means the same everywhere.

use std::{collections::BTreeMap, fmt};

use crate::text::quote;

/// The longest selector accepted. Kubernetes' own limits (keys of 317 characters, values of
/// 63) leave thousands of requirements within it.
pub const MAX_LEN: usize = 16 * 1024;

/// Why a selector was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid label selector {}: {reason}", quote(selector))]
pub struct SelectorError {
    pub selector: String,
    pub reason: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

impl Requirement {
    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        match self {
            Self::Equals(k, v) => labels.get(k) == Some(v),
            // As Kubernetes reads it: a missing label is "not equal".
            Self::NotEquals(k, v) => labels.get(k) != Some(v),
            Self::In(k, values) => labels.get(k).is_some_and(|v| values.contains(v)),
            Self::NotIn(k, values) => labels.get(k).is_none_or(|v| !values.contains(v)),
            Self::Exists(k) => labels.contains_key(k),
            Self::DoesNotExist(k) => !labels.contains_key(k),
        }
    }
}

/// A parsed label selector: every requirement must hold. The empty selector matches all.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selector {
    text: String,
    requirements: Vec<Requirement>,
}

impl Selector {
    pub fn parse(text: &str) -> Result<Self, SelectorError> {
        let invalid = |reason: String| SelectorError {
            selector: text.to_owned(),
            reason,
        };
        if text.len() > MAX_LEN {
            return Err(invalid(format!(
                "{} bytes is longer than the {MAX_LEN} a selector may have",
                text.len()
            )));
        }
        let mut requirements = Vec::new();
        if !text.trim().is_empty() {
            for part in split_top_level(text).map_err(|r| invalid(r.to_owned()))? {
                requirements.push(requirement(part.trim()).map_err(invalid)?);
            }
        }
        Ok(Self {
            text: text.trim().to_owned(),
            requirements,
        })
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }
}

impl std::str::FromStr for Selector {
    type Err = SelectorError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::parse(text)
    }
}

impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// Splits at commas outside `( )`.
fn split_top_level(text: &str) -> Result<Vec<&str>, &'static str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0_u32, 0);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' if depth == 0 => return Err("unbalanced ')'"),
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err("unbalanced '('");
    }
    parts.push(&text[start..]);
    Ok(parts)
}

fn requirement(part: &str) -> Result<Requirement, String> {
    if part.is_empty() {
        return Err("empty requirement".to_owned());
    }
    if let Some(set) = set_requirement(part)? {
        return Ok(set);
    }
    Ok(if let Some((k, v)) = part.split_once("!=") {
        Requirement::NotEquals(key(k)?, value(v)?)
    } else if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
        Requirement::Equals(key(k)?, value(v)?)
    } else if let Some(k) = part.strip_prefix('!') {
        Requirement::DoesNotExist(key(k)?)
    } else {
        Requirement::Exists(key(part)?)
    })
}

fn key(text: &str) -> Result<String, String> {
    let key = text.trim();
    let valid = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'));
    if valid {
        Ok(key.to_owned())
    } else {
        Err(format!("{} is not a label key", quote(key)))
    }
}

fn value(text: &str) -> Result<String, String> {
    let value = text.trim();
    if value
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        Ok(value.to_owned())
    } else {
        Err(format!("{} is not a label value", quote(value)))
    }
}

/// `key in (a, b)` / `key notin (a, b)`: the key and the values, if `part` is one.
fn set_requirement(part: &str) -> Result<Option<Requirement>, String> {
    let Some(open) = part.find('(') else {
        return Ok(None);
    };
    let head = part[..open].trim();
    let body = part[open + 1..]
        .trim_end()
        .strip_suffix(')')
        .ok_or_else(|| format!("{}: a set must end with ')'", quote(part)))?;
    let values = body
        .split(',')
        .filter(|v| !v.trim().is_empty())
        .map(value)
        .collect::<Result<Vec<_>, _>>()?;
    let (name, op) = head.rsplit_once(char::is_whitespace).ok_or_else(|| {
        format!(
            "{}: expected `key in (...)` or `key notin (...)`",
            quote(part)
        )
    })?;
    let name = key(name)?;
    match op {
        "in" => Ok(Some(Requirement::In(name, values))),
        "notin" => Ok(Some(Requirement::NotIn(name, values))),
        _ => Err(format!(
            "{}: expected `in` or `notin` before the set",
            quote(part)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn matches(selector: &str, pairs: &[(&str, &str)]) -> bool {
        Selector::parse(selector)
            .unwrap_or_else(|err| panic!("{selector}: {err}"))
            .matches(&labels(pairs))
    }

    #[test]
    fn equality_inequality_and_existence() {
        let acme = [("tenantflux.io/tenant", "tenant-acme"), ("tier", "gold")];
        assert!(matches("", &acme));
        assert!(matches("tenantflux.io/tenant=tenant-acme", &acme));
        assert!(matches(
            "tier==gold,tenantflux.io/tenant=tenant-acme",
            &acme
        ));
        assert!(!matches("tier=silver", &acme));
        assert!(matches("tier!=silver", &acme));
        assert!(matches("region!=eu", &acme));
        assert!(matches("tier", &acme));
        assert!(!matches("!tier", &acme));
        assert!(matches("!region", &acme));
        assert!(matches("tier,!missing", &acme));
    }

    #[test]
    fn sets() {
        let acme = [("tier", "gold"), ("team", "a")];
        assert!(matches("tier in (gold, silver)", &acme));
        assert!(!matches("tier in (silver)", &acme));
        assert!(matches("tier notin (silver,bronze)", &acme));
        assert!(matches("region notin (eu)", &acme));
        assert!(!matches("region in (eu)", &acme));
        assert!(matches("tier in (gold),!region", &acme));
        assert!(matches("tier in (gold, db),team notin (b)", &acme));
    }

    #[test]
    fn bad_selectors_say_what_is_wrong() {
        for (bad, reason) in [
            ("tier in (gold", "unbalanced '('"),
            ("tier) ", "unbalanced ')'"),
            ("tier inn (gold)", "expected `in` or `notin` before the set"),
            ("=gold", "\"\" is not a label key"),
            ("tier=go ld", "\"go ld\" is not a label value"),
            ("ti er", "\"ti er\" is not a label key"),
            ("a b=c", "\"a b\" is not a label key"),
            ("a=b,,c=d", "empty requirement"),
        ] {
            let err = Selector::parse(bad).unwrap_err();
            assert!(err.reason.ends_with(reason), "{bad}: {}", err.reason);
            assert!(
                err.to_string().starts_with("invalid label selector \""),
                "{err}"
            );
        }
    }

    #[test]
    fn a_huge_selector_is_refused_and_quoted_short() {
        let huge = format!("team in ({})", vec!["a"; 10_000].join(","));
        let err = Selector::parse(&huge).unwrap_err().to_string();
        assert!(
            err.ends_with("20009 bytes is longer than the 16384 a selector may have"),
            "{err}"
        );
        assert!(err.len() < 200, "{err}");
        let long_key = format!("{}=b", "k".repeat(1000));
        let err = Selector::parse(&format!("{long_key},a b=c"))
            .unwrap_err()
            .to_string();
        assert!(err.len() < 300, "{err}");
        let at_limit = format!("a in ({})", vec!["b"; (16384 - 7) / 2].join(","));
        assert!(at_limit.len() <= 16384);
        assert!(Selector::parse(&at_limit).is_ok());
    }
}
