//! `kubectl tenantflux version`: the plugin's version, the agent's and Flux's in the cluster,
//! and whether the flux CLI on PATH is close enough to the installed Flux to be safe.

use std::{fmt::Write as _, io, time::Duration};

use serde::Serialize;

use crate::{
    connect::{Agent, ConnectOptions},
    output::{Printer, Style, Tone},
};

/// Set `TENANTFLUX_GIT_COMMIT` when building a release to have the commit reported.
const GIT_COMMIT: Option<&str> = option_env!("TENANTFLUX_GIT_COMMIT");

/// How long the flux CLI may take to say its version when no request timeout is set.
pub const FLUX_CLI_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClientVersion {
    pub version: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub git_commit: Option<String>,
}

impl ClientVersion {
    fn current() -> Self {
        Self {
            version: concat!("v", env!("CARGO_PKG_VERSION")).to_owned(),
            git_commit: GIT_COMMIT.filter(|c| !c.is_empty()).map(str::to_owned),
        }
    }
}

/// The stable `-o json|yaml` shape of `version`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VersionView {
    pub client: ClientVersion,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<ClusterVersions>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flux_cli: Option<FluxCliView>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterVersions {
    pub agent: String,
    pub flux_operator: String,
    /// The Flux distribution the FluxInstance installed, e.g. `v2.9.4`; empty when none is.
    pub flux: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FluxCliView {
    pub found: bool,
    pub version: Option<String>,
    /// `compatible`, `skewed` or `unknown`.
    pub compatibility: &'static str,
    /// What to install, when the CLI is too far from the cluster's Flux.
    pub advice: Option<String>,
    /// Why compatibility is unknown.
    pub note: Option<String>,
}

pub fn print_client(printer: &Printer) -> anyhow::Result<()> {
    let view = VersionView {
        client: ClientVersion::current(),
        cluster: None,
        flux_cli: None,
    };
    printer.print(&view, render_table)
}

pub async fn run(options: &ConnectOptions, printer: &Printer) -> anyhow::Result<()> {
    let cli_timeout = options.timeout.unwrap_or(FLUX_CLI_TIMEOUT);
    let agent_status = async {
        let agent = Agent::connect(options).await?;
        anyhow::Ok(agent.get_status().await?)
    };
    let (status, flux_cli) = tokio::join!(agent_status, detect_flux_cli(cli_timeout));
    let status = status?;
    let operator = status.operator.unwrap_or_default();
    let instance = status.instance.unwrap_or_default();
    let cluster = ClusterVersions {
        agent: status.agent.unwrap_or_default().version,
        flux_operator: operator.version,
        flux: installed_flux(
            &instance.distribution_version,
            &instance.last_applied_revision,
        ),
    };
    let flux_cli = flux_cli_view(flux_cli, &cluster.flux);
    let view = VersionView {
        client: ClientVersion::current(),
        cluster: Some(cluster),
        flux_cli: Some(flux_cli),
    };
    printer.print(&view, render_table)
}

/// The installed Flux version; older operators only report it in the applied revision.
fn installed_flux(distribution_version: &str, last_applied_revision: &str) -> String {
    if !distribution_version.is_empty() {
        return distribution_version.to_owned();
    }
    last_applied_revision
        .split('@')
        .next()
        .unwrap_or_default()
        .to_owned()
}

/// What running the flux CLI found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FluxCli {
    NotFound,
    Found(String),
    Unusable(String),
}

pub async fn detect_flux_cli(timeout: Duration) -> FluxCli {
    let json = match flux_output(&["version", "--client", "-o", "json"], timeout).await {
        Ok(output) => output,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return FluxCli::NotFound,
        Err(err) => return FluxCli::Unusable(format!("cannot run `flux version --client`: {err}")),
    };
    if let Some(version) = json.as_deref().and_then(parse_flux_version_json) {
        return FluxCli::Found(version);
    }
    // Releases without `-o json` print `flux: v2.x.y`.
    match flux_output(&["version", "--client"], timeout).await {
        Ok(Some(text)) => match parse_flux_version_text(&text) {
            Some(version) => FluxCli::Found(version),
            None => FluxCli::Unusable("`flux version --client` printed no version".to_owned()),
        },
        Ok(None) => FluxCli::Unusable("`flux version --client` failed".to_owned()),
        Err(err) => FluxCli::Unusable(format!("cannot run `flux version --client`: {err}")),
    }
}

/// stdout of a successful `flux` run; `None` when it exits non-zero.
async fn flux_output(args: &[&str], timeout: Duration) -> io::Result<Option<String>> {
    let run = tokio::process::Command::new("flux")
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

pub fn flux_cli_view(cli: FluxCli, cluster_flux: &str) -> FluxCliView {
    let unknown = |found, version, note: String| FluxCliView {
        found,
        version,
        compatibility: "unknown",
        advice: None,
        note: Some(note),
    };
    match cli {
        FluxCli::NotFound => unknown(false, None, "flux CLI not found on PATH".to_owned()),
        FluxCli::Unusable(reason) => unknown(true, None, reason),
        FluxCli::Found(version) => match skew(&version, cluster_flux) {
            Skew::Compatible => FluxCliView {
                found: true,
                version: Some(version),
                compatibility: "compatible",
                advice: None,
                note: None,
            },
            Skew::Skewed { advice } => FluxCliView {
                found: true,
                version: Some(version),
                compatibility: "skewed",
                advice: Some(advice),
                note: None,
            },
            Skew::Unknown { reason } => unknown(true, Some(version), reason),
        },
    }
}

fn line(out: &mut String, key: &str, value: &str) {
    let key = format!("{key}:");
    let _ = writeln!(out, "{key:<20}{value}");
}

pub fn render_table(view: &VersionView, style: Style) -> String {
    let mut out = String::new();
    let client = match &view.client.git_commit {
        Some(commit) => format!("{} (commit {commit})", view.client.version),
        None => view.client.version.clone(),
    };
    line(&mut out, "kubectl-tenantflux", &client);
    let or_dash = |s: &str| {
        if s.is_empty() {
            "-".to_owned()
        } else {
            s.to_owned()
        }
    };
    if let Some(cluster) = &view.cluster {
        line(&mut out, "tenantflux-agent", &or_dash(&cluster.agent));
        line(&mut out, "flux-operator", &or_dash(&cluster.flux_operator));
        line(
            &mut out,
            "flux (cluster)",
            if cluster.flux.is_empty() {
                "not installed"
            } else {
                &cluster.flux
            },
        );
    }
    if let Some(cli) = &view.flux_cli {
        let tone = match cli.compatibility {
            "compatible" => Tone::Good,
            "skewed" => Tone::Bad,
            _ => Tone::Plain,
        };
        let value = match (&cli.version, cli.found) {
            (Some(version), _) => {
                format!("{version} ({})", style.paint(cli.compatibility, tone))
            }
            (None, true) => "found, version unknown".to_owned(),
            (None, false) => "not found on PATH".to_owned(),
        };
        line(&mut out, "flux CLI", &value);
        if let Some(advice) = &cli.advice {
            let _ = writeln!(out, "  {advice}");
        }
        // A missing CLI already says so on its own line.
        if let (true, Some(note)) = (cli.found, &cli.note) {
            let _ = writeln!(out, "  {note}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::{OutputFormat, render};

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

    #[test]
    fn installed_flux_falls_back_to_the_applied_revision() {
        assert_eq!(installed_flux("v2.9.4", "v2.9.3@sha256:abc"), "v2.9.4");
        assert_eq!(installed_flux("", "v2.9.3@sha256:abc"), "v2.9.3");
        assert_eq!(installed_flux("", ""), "");
    }

    #[test]
    fn flux_cli_view_reports_each_case() {
        let skewed = flux_cli_view(FluxCli::Found("v2.7.0".to_owned()), "v2.9.4");
        assert_eq!(skewed.compatibility, "skewed");
        assert_eq!(
            skewed.advice.as_deref(),
            Some("install flux CLI v2.9.x to match Flux v2.9.4 in this cluster")
        );
        let ok = flux_cli_view(FluxCli::Found("v2.9.1".to_owned()), "v2.9.4");
        assert_eq!((ok.compatibility, ok.advice), ("compatible", None));
        let missing = flux_cli_view(FluxCli::NotFound, "v2.9.4");
        assert!(!missing.found);
        assert_eq!(missing.note.as_deref(), Some("flux CLI not found on PATH"));
        let no_flux = flux_cli_view(FluxCli::Found("v2.9.1".to_owned()), "");
        assert_eq!(no_flux.compatibility, "unknown");
        assert!(no_flux.note.unwrap().contains("no Flux distribution"));
    }

    fn full_view(cli: FluxCli) -> VersionView {
        VersionView {
            client: ClientVersion {
                version: "v0.1.0".to_owned(),
                git_commit: Some("abc1234".to_owned()),
            },
            cluster: Some(ClusterVersions {
                agent: "v0.1.0".to_owned(),
                flux_operator: "v0.58.1".to_owned(),
                flux: "v2.9.4".to_owned(),
            }),
            flux_cli: Some(flux_cli_view(cli, "v2.9.4")),
        }
    }

    #[test]
    fn table_shows_versions_and_advice() {
        assert_eq!(
            render_table(
                &full_view(FluxCli::Found("v2.7.0".to_owned())),
                Style::PLAIN
            ),
            "\
kubectl-tenantflux: v0.1.0 (commit abc1234)
tenantflux-agent:   v0.1.0
flux-operator:      v0.58.1
flux (cluster):     v2.9.4
flux CLI:           v2.7.0 (skewed)
  install flux CLI v2.9.x to match Flux v2.9.4 in this cluster
"
        );
        let missing = render_table(&full_view(FluxCli::NotFound), Style::PLAIN);
        assert!(missing.ends_with("flux CLI:           not found on PATH\n"));
        let colored = render_table(
            &full_view(FluxCli::Found("v2.9.0".to_owned())),
            Style { color: true },
        );
        assert!(colored.contains("v2.9.0 (\x1b[32mcompatible\x1b[0m)"));
    }

    #[test]
    fn client_only_view_has_no_cluster_fields() {
        let view = VersionView {
            client: ClientVersion {
                version: "v0.1.0".to_owned(),
                git_commit: None,
            },
            cluster: None,
            flux_cli: None,
        };
        assert_eq!(
            render_table(&view, Style::PLAIN),
            "kubectl-tenantflux: v0.1.0\n"
        );
        assert_eq!(
            render(OutputFormat::Json, Style::PLAIN, &view, render_table).unwrap(),
            "{\n  \"client\": {\n    \"version\": \"v0.1.0\"\n  }\n}\n"
        );
    }

    #[test]
    fn json_view_of_a_full_version() {
        let json = serde_json::to_value(full_view(FluxCli::Found("v2.7.0".to_owned()))).unwrap();
        assert_eq!(json["client"]["gitCommit"], "abc1234");
        assert_eq!(json["cluster"]["fluxOperator"], "v0.58.1");
        assert_eq!(json["cluster"]["flux"], "v2.9.4");
        assert_eq!(json["fluxCli"]["compatibility"], "skewed");
        assert_eq!(json["fluxCli"]["found"], true);
    }

    #[test]
    fn the_client_version_is_the_crate_version() {
        assert_eq!(
            ClientVersion::current().version,
            format!("v{}", env!("CARGO_PKG_VERSION"))
        );
    }
}
