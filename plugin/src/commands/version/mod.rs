//! `kubectl tenantflux version`: the plugin's version, the agent's and Flux's in the cluster,
//! whether the flux CLI on PATH is close enough to the installed Flux to be safe, and whether
//! the exact release `kubectl tenantflux flux` runs is cached.

use std::{fmt::Write as _, path::Path};

use serde::Serialize;

use crate::{
    connect::{Agent, ConnectOptions},
    flux_cli::{
        self, FLUX_CLI_TIMEOUT, FluxCli, Skew, cache, installed_flux,
        release::{Platform, Release},
    },
    output::{Printer, Style, Tone},
};

/// Set `TENANTFLUX_GIT_COMMIT` when building a release to have the commit reported.
const GIT_COMMIT: Option<&str> = option_env!("TENANTFLUX_GIT_COMMIT");

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
    /// The flux CLI `kubectl tenantflux flux` runs; absent when the cluster runs no Flux.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flux_cli_cache: Option<FluxCliCacheView>,
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

/// The release of the cluster's Flux in the plugin's cache (`kubectl tenantflux flux`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FluxCliCacheView {
    /// The cluster's Flux, the release `kubectl tenantflux flux` runs.
    pub version: String,
    pub cached: bool,
    /// Where the binary is, or is put on first use.
    pub path: Option<String>,
    /// Why there is no path: the cluster's version is no release, no cache directory.
    pub note: Option<String>,
}

pub fn print_client(printer: &Printer) -> anyhow::Result<()> {
    let view = VersionView {
        client: ClientVersion::current(),
        cluster: None,
        flux_cli: None,
        flux_cli_cache: None,
    };
    printer.print(&view, render_table)
}

pub async fn run(options: &ConnectOptions, printer: &Printer) -> anyhow::Result<()> {
    let cli_timeout = options.timeout.unwrap_or(FLUX_CLI_TIMEOUT);
    let agent_status = async {
        let agent = Agent::connect(options).await?;
        anyhow::Ok(agent.get_status().await?)
    };
    let (status, flux_cli) = tokio::join!(agent_status, flux_cli::detect(cli_timeout));
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
    let root = cache::default_root().map_err(|err| err.to_string());
    let flux_cli_cache = flux_cli_cache_view(
        &cluster.flux,
        root.as_deref().map_err(String::as_str),
        Platform::current(),
    );
    let view = VersionView {
        client: ClientVersion::current(),
        cluster: Some(cluster),
        flux_cli: Some(flux_cli),
        flux_cli_cache,
    };
    printer.print(&view, render_table)
}

/// Whether the release of `cluster_flux` is in the cache at `root`; `None` without Flux.
pub fn flux_cli_cache_view(
    cluster_flux: &str,
    root: Result<&Path, &str>,
    platform: Result<Platform, impl std::fmt::Display>,
) -> Option<FluxCliCacheView> {
    if cluster_flux.is_empty() {
        return None;
    }
    let unknown = |note: String| FluxCliCacheView {
        version: cluster_flux.to_owned(),
        cached: false,
        path: None,
        note: Some(note),
    };
    let release = match Release::of_cluster(cluster_flux) {
        Ok(release) => release,
        Err(err) => return Some(unknown(err.to_string())),
    };
    let platform = match platform {
        Ok(platform) => platform,
        Err(err) => return Some(unknown(err.to_string())),
    };
    let root = match root {
        Ok(root) => root,
        Err(err) => return Some(unknown(err.to_owned())),
    };
    let cached = cache::cached(root, &release, platform);
    let path = flux_cli::release::cached_binary(root, &release, platform);
    Some(FluxCliCacheView {
        version: release.tag(),
        cached: cached.is_some(),
        path: Some(path.display().to_string()),
        note: None,
    })
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
        FluxCli::Found(version) => match flux_cli::skew(&version, cluster_flux) {
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
    if let Some(cache) = &view.flux_cli_cache {
        let value = match (&cache.path, cache.cached) {
            (Some(path), true) => format!("{} cached ({path})", cache.version),
            (Some(_), false) => format!(
                "{} not cached yet (kubectl tenantflux flux downloads it)",
                cache.version
            ),
            (None, _) => format!("{} (no flux CLI to cache)", cache.version),
        };
        line(&mut out, "tenantflux flux", &value);
        if let Some(note) = &cache.note {
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
            flux_cli_cache: None,
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
            flux_cli_cache: None,
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
    fn the_cache_of_the_matching_cli_is_shown() {
        let cache = tempfile::tempdir().unwrap();
        let platform = Platform::current().unwrap();
        let view =
            |flux: &str| flux_cli_cache_view(flux, Ok(cache.path()), Ok::<_, String>(platform));
        assert_eq!(view(""), None);
        let missing = view("v2.9.4").unwrap();
        assert!(!missing.cached);
        let path = cache.path().join("v2.9.4").join(platform.binary());
        assert_eq!(missing.path, Some(path.display().to_string()));
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, "binary").unwrap();
        let cached = view("v2.9.4").unwrap();
        assert!(cached.cached);
        let mut full = full_view(FluxCli::NotFound);
        full.flux_cli_cache = Some(cached);
        let table = render_table(&full, Style::PLAIN);
        assert!(
            table.contains(&format!(
                "tenantflux flux:    v2.9.4 cached ({})\n",
                path.display()
            )),
            "{table}"
        );
        let json = serde_json::to_value(&full).unwrap();
        assert_eq!(json["fluxCliCache"]["cached"], true);
        assert_eq!(json["fluxCliCache"]["version"], "v2.9.4");
        full.flux_cli_cache = Some(missing);
        assert!(render_table(&full, Style::PLAIN).contains(
            "tenantflux flux:    v2.9.4 not cached yet (kubectl tenantflux flux downloads it)\n"
        ));
        let odd = view("2.9.x").unwrap();
        assert_eq!((odd.cached, odd.path), (false, None));
        assert!(odd.note.unwrap().contains("not a release version"));
        let homeless = flux_cli_cache_view(
            "v2.9.4",
            Err("no cache directory"),
            Ok::<_, String>(platform),
        )
        .unwrap();
        assert_eq!(homeless.note.as_deref(), Some("no cache directory"));
    }

    #[test]
    fn the_client_version_is_the_crate_version() {
        assert_eq!(
            ClientVersion::current().version,
            format!("v{}", env!("CARGO_PKG_VERSION"))
        );
    }
}
