//! Kubernetes' rules for names, checked before a name reaches the API server. A name goes
//! into the API server's URL as it is (kube does not escape it), so `podinfo/status` would
//! address a subresource: only what Kubernetes accepts as a name passes. Error text quotes
//! the caller's input through [`crate::text::quote`], which cuts it short.

use crate::text::quote;

/// Checks an object name: a DNS subdomain (RFC 1123), as Kubernetes requires.
pub fn object_name(field: &str, name: &str) -> Result<(), String> {
    dns(field, name, 253, true)
}

/// Checks a namespace: a DNS label (RFC 1123), as Kubernetes requires.
pub fn namespace(field: &str, namespace: &str) -> Result<(), String> {
    dns(field, namespace, 63, false)
}

fn dns(field: &str, text: &str, max: usize, dots: bool) -> Result<(), String> {
    let what = if dots {
        "lowercase letters, digits, '-' and '.'"
    } else {
        "lowercase letters, digits and '-'"
    };
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    let ok = !text.is_empty()
        && text.len() <= max
        && text
            .chars()
            .all(|c| alnum(c) || c == '-' || (dots && c == '.'))
        && text.starts_with(alnum)
        && text.ends_with(alnum);
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{field} {} is not a Kubernetes name: use 1-{max} {what}, starting and ending with a letter or digit",
            quote(text)
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_dns_subdomains_and_namespaces_dns_labels() {
        for good in ["podinfo", "a", "apps-1", "x.y.z", &"a".repeat(253)] {
            assert_eq!(object_name("name", good), Ok(()), "{good}");
        }
        for bad in [
            "",
            "podinfo/status",
            "../kube-system",
            "Podinfo",
            "-a",
            "a-",
            "a b",
            "a%2Fb",
            "ä",
            &"a".repeat(254),
        ] {
            let err = object_name("name", bad).unwrap_err();
            assert!(err.starts_with("name \""), "{err}");
            assert!(err.contains("is not a Kubernetes name"), "{err}");
        }
        assert_eq!(namespace("namespace", "flux-system"), Ok(()));
        for bad in ["a.b", &"a".repeat(64), "kube_system", ""] {
            assert!(namespace("namespace", bad).is_err(), "{bad}");
        }
    }
}
