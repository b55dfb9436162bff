//! Which flux-operator versions the agent may install, and who said so.

use std::fmt;

use crate::policy::range;

/// The flux-operator versions the agent may install, and who said so: the held policy's
/// `spec.operator.versions`, else the agent's `--operator-version`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllowedVersions {
    requirement: semver::VersionReq,
    text: String,
    by: String,
}

impl fmt::Display for AllowedVersions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} allowed by {}", self.text, self.by)
    }
}

#[derive(Debug, thiserror::Error)]
#[error("{text:?} is neither a version (v0.58.1) nor a semver range (>=0.58.0 <0.59.0)")]
pub struct BadRequirement {
    text: String,
    #[source]
    source: semver::Error,
}

impl AllowedVersions {
    /// `text` is an exact version (`v0.58.1`, `0.58.1`: that one only) or a range in the
    /// notation Flux uses (`>=0.58.0 <0.59.0`, `0.58.x`; a `v` before numbers is ignored).
    /// `by` names who allows it, for messages (`--operator-version`).
    pub fn parse(text: &str, by: impl Into<String>) -> Result<Self, BadRequirement> {
        let requirement = match semver::Version::parse(range::strip_v(text.trim())) {
            Ok(exact) => Ok(semver::VersionReq {
                comparators: vec![semver::Comparator {
                    op: semver::Op::Exact,
                    major: exact.major,
                    minor: Some(exact.minor),
                    patch: Some(exact.patch),
                    pre: exact.pre,
                }],
            }),
            Err(_) => semver::VersionReq::parse(&range::normalize(text)),
        }
        .map_err(|source| BadRequirement {
            text: text.to_owned(),
            source,
        })?;
        Ok(Self {
            requirement,
            text: text.trim().to_owned(),
            by: by.into(),
        })
    }

    pub fn allows(&self, version: &semver::Version) -> bool {
        self.requirement.matches(version)
    }
}
