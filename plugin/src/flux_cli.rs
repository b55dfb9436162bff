//! The flux CLI on PATH: which version it is, and whether it is close enough to the Flux in
//! the cluster to be safe (Flux supports a CLI within one minor of its controllers). `version`
//! reports it; `upgrade plan` checks it against the target. `kubectl tenantflux flux` runs the
//! release that matches exactly, from [`cache`] (the pure part is [`release`]).

pub mod cache;
pub mod release;

use std::{ffi::OsStr, io, time::Duration};

/// How long the flux CLI may take to say its version when no request timeout is set.
pub const FLUX_CLI_TIMEOUT: Duration = Duration::from_secs(10);

/// What running the flux CLI found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FluxCli {
    NotFound,
    Found(String),
    Unusable(String),
}

pub async fn detect(timeout: Duration) -> FluxCli {
    detect_at(OsStr::new("flux"), timeout).await
}

/// What the flux CLI at `program` (a path, or a name looked up on PATH) says its version is.
pub async fn detect_at(program: &OsStr, timeout: Duration) -> FluxCli {
    let json = match flux_output(program, &["version", "--client", "-o", "json"], timeout).await {
        Ok(output) => output,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return FluxCli::NotFound,
        Err(err) => return FluxCli::Unusable(format!("cannot run `flux version --client`: {err}")),
    };
    if let Some(version) = json.as_deref().and_then(parse_flux_version_json) {
        return FluxCli::Found(version);
    }
    // Releases without `-o json` print `flux: v2.x.y`.
    match flux_output(program, &["version", "--client"], timeout).await {
        Ok(Some(text)) => match parse_flux_version_text(&text) {
            Some(version) => FluxCli::Found(version),
            None => FluxCli::Unusable("`flux version --client` printed no version".to_owned()),
        },
        Ok(None) => FluxCli::Unusable("`flux version --client` failed".to_owned()),
        Err(err) => FluxCli::Unusable(format!("cannot run `flux version --client`: {err}")),
    }
}

/// stdout of a successful `flux` run; `None` when it exits non-zero.
async fn flux_output(
    program: &OsStr,
    args: &[&str],
    timeout: Duration,
) -> io::Result<Option<String>> {
    let run = tokio::process::Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(timeout, run).await.map_err(|_| {
        io::Error::new(
            io::ErrorKind::TimedOut,
            format!("no answer within {timeout:?}"),
        )
    })??;
    Ok(output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).into_owned()))
}

/// The Flux release the cluster runs, as the agent reports its FluxInstance: the distribution
/// version, which older operators only report in the applied revision (`v2.9.4@sha256:…`).
pub fn installed_flux(distribution_version: &str, last_applied_revision: &str) -> String {
    if !distribution_version.is_empty() {
        return distribution_version.to_owned();
    }
    last_applied_revision
        .split('@')
        .next()
        .unwrap_or_default()
        .to_owned()
}

/// `flux version --client -o json` prints `{"flux": "v2.9.4"}`.
pub fn parse_flux_version_json(text: &str) -> Option<String> {
    let value: serde_json::Value = serde_json::from_str(text).ok()?;
    let version = value.get("flux")?.as_str()?.trim();
    SemVer::parse(version).map(|_| with_v(version))
}

/// `flux version --client` prints `flux: v2.9.4` (YAML).
pub fn parse_flux_version_text(text: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let version = line
            .trim()
            .strip_prefix("flux:")?
            .trim()
            .trim_matches(['"', '\'']);
        SemVer::parse(version).map(|_| with_v(version))
    })
}

fn with_v(version: &str) -> String {
    if version.starts_with('v') {
        version.to_owned()
    } else {
        format!("v{version}")
    }
}

/// The parts of a version the skew rule compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SemVer {
    pub major: u64,
    pub minor: u64,
    pub patch: u64,
}

impl SemVer {
    /// `v2.9.4`, `2.9.4`, `v2.9.0-rc.1` and `v2.9.4+build` all parse; ranges like `2.x` do not.
    pub fn parse(text: &str) -> Option<Self> {
        let text = text.strip_prefix('v').unwrap_or(text);
        let core = text.split(['-', '+']).next()?;
        let mut parts = core.split('.');
        let mut number = || -> Option<u64> {
            let part = parts.next()?;
            if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            part.parse().ok()
        };
        let version = Self {
            major: number()?,
            minor: number()?,
            patch: number()?,
        };
        parts.next().is_none().then_some(version)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Skew {
    /// Within one minor of the cluster's Flux, which Flux supports.
    Compatible,
    /// Further apart; the advice says what to install.
    Skewed { advice: String },
    /// One of the versions could not be read.
    Unknown { reason: String },
}

/// Flux supports a CLI within ±1 minor of its controllers; beyond that, say what to install.
pub fn skew(cli: &str, cluster: &str) -> Skew {
    let Some(cluster_version) = SemVer::parse(cluster) else {
        return Skew::Unknown {
            reason: if cluster.is_empty() {
                "no Flux distribution is installed in this cluster".to_owned()
            } else {
                format!("cannot read the cluster's Flux version {cluster:?}")
            },
        };
    };
    let Some(cli_version) = SemVer::parse(cli) else {
        return Skew::Unknown {
            reason: format!("cannot read the flux CLI version {cli:?}"),
        };
    };
    if cli_version.major == cluster_version.major
        && cli_version.minor.abs_diff(cluster_version.minor) <= 1
    {
        Skew::Compatible
    } else {
        Skew::Skewed {
            advice: format!(
                "install flux CLI v{}.{}.x to match Flux {} in this cluster",
                cluster_version.major,
                cluster_version.minor,
                with_v(cluster)
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skew_allows_one_minor_either_way() {
        assert_eq!(skew("v2.9.4", "v2.9.4"), Skew::Compatible);
        assert_eq!(skew("v2.9.0", "v2.9.4"), Skew::Compatible);
        assert_eq!(skew("v2.8.6", "v2.9.4"), Skew::Compatible);
        assert_eq!(skew("v2.10.0", "v2.9.4"), Skew::Compatible);
        assert_eq!(skew("2.8.0", "v2.9.4"), Skew::Compatible);
        assert_eq!(skew("v2.9.0-rc.1", "2.8.3"), Skew::Compatible);
    }

    #[test]
    fn skew_beyond_one_minor_advises_the_cluster_minor() {
        assert_eq!(
            skew("v2.7.0", "v2.9.4"),
            Skew::Skewed {
                advice: "install flux CLI v2.9.x to match Flux v2.9.4 in this cluster".to_owned()
            }
        );
        assert_eq!(
            skew("v2.11.1", "2.9.4"),
            Skew::Skewed {
                advice: "install flux CLI v2.9.x to match Flux v2.9.4 in this cluster".to_owned()
            }
        );
        assert!(matches!(skew("v3.9.0", "v2.9.4"), Skew::Skewed { .. }));
    }

    #[test]
    fn skew_is_unknown_for_unreadable_versions() {
        assert!(
            matches!(skew("v2.9.4", ""), Skew::Unknown { reason } if reason.contains("no Flux distribution"))
        );
        assert!(
            matches!(skew("v2.9.4", "2.x"), Skew::Unknown { reason } if reason.contains("\"2.x\""))
        );
        assert!(
            matches!(skew("dev", "v2.9.4"), Skew::Unknown { reason } if reason.contains("flux CLI"))
        );
        assert!(matches!(skew("v2.9", "v2.9.4"), Skew::Unknown { .. }));
        assert!(matches!(skew("v2.9.4.1", "v2.9.4"), Skew::Unknown { .. }));
        assert!(matches!(skew("v2.-1.0", "v2.9.4"), Skew::Unknown { .. }));
    }

    #[test]
    fn parses_the_flux_cli_version_outputs() {
        assert_eq!(
            parse_flux_version_json("{\n  \"flux\": \"v2.9.4\"\n}\n").as_deref(),
            Some("v2.9.4")
        );
        assert_eq!(
            parse_flux_version_json(r#"{"flux":"2.8.0"}"#).as_deref(),
            Some("v2.8.0")
        );
        assert_eq!(parse_flux_version_json(r#"{"other":"v2.8.0"}"#), None);
        assert_eq!(parse_flux_version_json("flux: v2.8.0"), None);
        // A flux built from source without version stamping still reports a version.
        assert_eq!(
            parse_flux_version_json(r#"{"flux":"0.0.0-dev.0"}"#).as_deref(),
            Some("v0.0.0-dev.0")
        );
        assert_eq!(parse_flux_version_json(r#"{"flux":"main"}"#), None);
        assert_eq!(
            parse_flux_version_text("flux: v2.9.4\n").as_deref(),
            Some("v2.9.4")
        );
        assert_eq!(
            parse_flux_version_text("► checking\nflux: \"2.7.1\"\n").as_deref(),
            Some("v2.7.1")
        );
        assert_eq!(parse_flux_version_text("fluxctl 1.25.4"), None);
        assert_eq!(parse_flux_version_text(""), None);
    }
}
