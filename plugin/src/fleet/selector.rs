//! Kubernetes label selectors (`-l`), evaluated locally: the fleet filters clusters found in
//! Secrets and in fleet files alike, on their labels plus the tenant and cluster names.

use std::{collections::BTreeMap, fmt, str::FromStr};

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
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }
}

impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// Splits at commas outside `( )`.
fn split_top_level(text: &str) -> Result<Vec<&str>, String> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0_i32, 0);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        if depth < 0 {
            return Err("unbalanced ')'".to_owned());
        }
    }
    if depth != 0 {
        return Err("unbalanced '('".to_owned());
    }
    parts.push(&text[start..]);
    Ok(parts)
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
        Err(format!("{key:?} is not a label key"))
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
        Err(format!("{value:?} is not a label value"))
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
        .ok_or_else(|| format!("{part:?}: a set must end with ')'"))?;
    let values = body.split(',').map(value).collect::<Result<Vec<_>, _>>()?;
    let (name, op) = head
        .rsplit_once(char::is_whitespace)
        .ok_or_else(|| format!("{part:?}: expected `key in (...)` or `key notin (...)`"))?;
    let name = key(name)?;
    match op {
        "in" => Ok(Some(Requirement::In(name, values))),
        "notin" => Ok(Some(Requirement::NotIn(name, values))),
        _ => Err(format!("{part:?}: expected `in` or `notin` before the set")),
    }
}

impl FromStr for Selector {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let mut requirements = Vec::new();
        if !text.trim().is_empty() {
            for part in split_top_level(text)? {
                let part = part.trim();
                let requirement = if let Some(set) = set_requirement(part)? {
                    set
                } else if let Some((k, v)) = part.split_once("!=") {
                    Requirement::NotEquals(key(k)?, value(v)?)
                } else if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('='))
                {
                    Requirement::Equals(key(k)?, value(v)?)
                } else if let Some(k) = part.strip_prefix('!') {
                    Requirement::DoesNotExist(key(k)?)
                } else {
                    Requirement::Exists(key(part)?)
                };
                requirements.push(requirement);
            }
        }
        Ok(Self {
            text: text.trim().to_owned(),
            requirements,
        })
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
        selector
            .parse::<Selector>()
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
    }

    #[test]
    fn sets() {
        let acme = [("tier", "gold")];
        assert!(matches("tier in (gold, silver)", &acme));
        assert!(!matches("tier in (silver)", &acme));
        assert!(matches("tier notin (silver,bronze)", &acme));
        assert!(matches("region notin (eu)", &acme));
        assert!(!matches("region in (eu)", &acme));
        assert!(matches("tier in (gold),!region", &acme));
    }

    #[test]
    fn bad_selectors_say_what_is_wrong() {
        for bad in [
            "tier in (gold",
            "tier) ",
            "tier inn (gold)",
            "=gold",
            "tier=go ld",
            "ti er",
        ] {
            assert!(bad.parse::<Selector>().is_err(), "{bad} should not parse");
        }
    }
}
