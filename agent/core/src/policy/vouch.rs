//! The platform vouching for a flux-operator release the agent's build does not know.
//!
//! A release is trusted in one of two ways: the build knows it object by object (the agent's
//! compiled table), or the platform names its bundle's digest in a signed policy
//! (`spec.operator.vouched`). The vouching rides in the policy so it inherits the policy's two
//! guarantees: only the platform's key can write it, and a replayed older policy (one that
//! still vouched for a release the platform has since withdrawn) is refused by its generation.
//!
//! A vouching widens nothing else: the bundle still passes every structural check (no host
//! paths, no privileged containers, only flux-operator's kinds and names), and its cluster RBAC
//! may grant only what the known releases grant plus the rules the vouching names one by one.

use std::collections::BTreeSet;
use std::fmt;

use serde::{Deserialize, Serialize};

use super::range;
use crate::text::quote;

/// One release the platform vouches for.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Vouching {
    /// flux-operator's version as its bundle states it (`v0.60.0`).
    pub version: String,
    /// The bundle's digest: the OCI manifest digest of the manifests artifact, or `sha256:` of
    /// the install.yaml for a ConfigMap, Secret or file source.
    pub digest: String,
    /// Where the platform reviewed it from (for people; the agent matches by digest only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Cluster RBAC rules the release grants beyond the releases the agent knows.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cluster_rules: Vec<ClusterRule>,
}

/// One ClusterRole rule a vouching allows: every verb on every resource of every group listed.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ClusterRule {
    /// The ClusterRole of the bundle the rule is for (`flux-operator-edit`, or a role the
    /// release adds).
    pub cluster_role: String,
    pub api_groups: Vec<String>,
    pub resources: Vec<String>,
    pub verbs: Vec<String>,
}

impl ClusterRule {
    /// Whether this rule grants `verb` on `resource` of `group` in `role` (`*` stands for any).
    pub fn grants(&self, role: &str, group: &str, resource: &str, verb: &str) -> bool {
        let covers = |list: &[String], wanted: &str| list.iter().any(|a| a == "*" || a == wanted);
        self.cluster_role == role
            && covers(&self.api_groups, group)
            && covers(&self.resources, resource)
            && covers(&self.verbs, verb)
    }
}

impl fmt::Display for ClusterRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ClusterRole {}: verbs [{}] on [{}] in groups [{}]",
            self.cluster_role,
            self.verbs.join(", "),
            self.resources.join(", "),
            self.api_groups
                .iter()
                .map(|g| if g.is_empty() { "\"\"" } else { g.as_str() })
                .collect::<Vec<_>>()
                .join(", ")
        )
    }
}

/// Why a vouching is refused at signing time (and again by the agent).
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum VouchingError {
    #[error(
        "spec.operator.vouched[{index}].version {} is not a flux-operator version (v0.60.0)",
        quote(version)
    )]
    Version { index: usize, version: String },
    #[error(
        "spec.operator.vouched[{index}].digest {} is not a digest: write sha256: and 64 lowercase \
         hex digits, as `kubectl tenantflux operator review` prints it",
        quote(digest)
    )]
    Digest { index: usize, digest: String },
    #[error(
        "spec.operator.vouched[{index}] vouches for {version} again (an earlier entry names it): \
         one digest per version"
    )]
    Duplicate { index: usize, version: String },
    #[error(
        "spec.operator.vouched[{index}].clusterRules[{rule}].{field} is empty: a rule that names \
         nothing grants nothing; leave the rule out"
    )]
    EmptyRule {
        index: usize,
        rule: usize,
        field: &'static str,
    },
}

/// Checks every vouching of a policy: versions, digests, one entry per version, rules that say
/// something.
pub fn check(vouched: &[Vouching]) -> Result<(), VouchingError> {
    let mut seen = BTreeSet::new();
    for (index, vouching) in vouched.iter().enumerate() {
        let version = vouching.version.trim();
        if !version.starts_with('v') || semver::Version::parse(range::strip_v(version)).is_err() {
            return Err(VouchingError::Version {
                index,
                version: vouching.version.clone(),
            });
        }
        if !is_digest(&vouching.digest) {
            return Err(VouchingError::Digest {
                index,
                digest: vouching.digest.clone(),
            });
        }
        if !seen.insert(version) {
            return Err(VouchingError::Duplicate {
                index,
                version: version.to_owned(),
            });
        }
        for (rule_index, rule) in vouching.cluster_rules.iter().enumerate() {
            let empty = |field| VouchingError::EmptyRule {
                index,
                rule: rule_index,
                field,
            };
            if rule.cluster_role.trim().is_empty() {
                return Err(empty("clusterRole"));
            }
            for (field, list) in [
                ("apiGroups", &rule.api_groups),
                ("resources", &rule.resources),
                ("verbs", &rule.verbs),
            ] {
                if list.is_empty() {
                    return Err(empty(field));
                }
            }
        }
    }
    Ok(())
}

/// `sha256:` and 64 lowercase hex digits.
pub fn is_digest(text: &str) -> bool {
    text.strip_prefix("sha256:").is_some_and(|hex| {
        hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// Why the agent trusts the flux-operator release it installed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Trust {
    /// The agent did not install it (it observes someone else's install), or has not yet.
    #[default]
    None,
    /// The build knows the release object by object.
    Known,
    /// The platform vouched for its digest in this policy generation.
    Vouched { generation: u64 },
}

impl fmt::Display for Trust {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::None => f.write_str("-"),
            Self::Known => f.write_str("known to this agent's build"),
            Self::Vouched { generation } => {
                write!(f, "vouched for by policy generation {generation}")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vouching(version: &str, digest: &str) -> Vouching {
        Vouching {
            version: version.into(),
            digest: digest.into(),
            source: None,
            cluster_rules: Vec::new(),
        }
    }

    const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn a_vouching_names_a_version_and_a_digest() {
        assert_eq!(check(&[vouching("v0.60.0", DIGEST)]), Ok(()));
        assert!(matches!(
            check(&[vouching("0.60.0", DIGEST)]),
            Err(VouchingError::Version { index: 0, .. })
        ));
        assert!(matches!(
            check(&[vouching("v0.60", DIGEST)]),
            Err(VouchingError::Version { .. })
        ));
        for digest in [
            "",
            "sha256:abc",
            &DIGEST.to_uppercase(),
            &DIGEST.replace("sha256", "sha512"),
        ] {
            assert!(
                matches!(
                    check(&[vouching("v0.60.0", digest)]),
                    Err(VouchingError::Digest { .. })
                ),
                "{digest}"
            );
        }
        let error = check(&[vouching("v0.60.0", "sha256:abc")]).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("spec.operator.vouched[0].digest"),
            "{error}"
        );
    }

    #[test]
    fn one_digest_per_version() {
        let other = DIGEST.replace('0', "1");
        assert_eq!(
            check(&[vouching("v0.60.0", DIGEST), vouching("v0.60.0", &other)]),
            Err(VouchingError::Duplicate {
                index: 1,
                version: "v0.60.0".into()
            })
        );
    }

    #[test]
    fn rules_must_name_something_and_grant_only_what_they_name() {
        let rule = ClusterRule {
            cluster_role: "flux-operator-edit".into(),
            api_groups: vec!["fluxcd.controlplane.io".into()],
            resources: vec!["resourcesets".into(), "fluxschedules".into()],
            verbs: vec!["create".into()],
        };
        let mut v = vouching("v0.60.0", DIGEST);
        v.cluster_rules.push(rule.clone());
        assert_eq!(check(std::slice::from_ref(&v)), Ok(()));
        assert!(rule.grants(
            "flux-operator-edit",
            "fluxcd.controlplane.io",
            "fluxschedules",
            "create"
        ));
        assert!(!rule.grants(
            "flux-operator-view",
            "fluxcd.controlplane.io",
            "fluxschedules",
            "create"
        ));
        assert!(!rule.grants(
            "flux-operator-edit",
            "fluxcd.controlplane.io",
            "fluxschedules",
            "delete"
        ));
        assert!(!rule.grants("flux-operator-edit", "", "secrets", "create"));

        v.cluster_rules[0].verbs.clear();
        assert_eq!(
            check(&[v]),
            Err(VouchingError::EmptyRule {
                index: 0,
                rule: 0,
                field: "verbs"
            })
        );
    }

    #[test]
    fn trust_says_who_vouched() {
        assert_eq!(
            Trust::Vouched { generation: 7 }.to_string(),
            "vouched for by policy generation 7"
        );
        assert_eq!(Trust::Known.to_string(), "known to this agent's build");
    }
}
