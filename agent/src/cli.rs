//! Command-line flags. Every flag has an environment twin so the Deployment can set them with
//! `env:` (and the downward API) instead of `args:`.

use std::net::SocketAddr;

use clap::{Parser, ValueEnum};

/// The default of `--log-level`.
pub const DEFAULT_LOG_FILTER: &str = "info,kube_client::client::builder=off";

/// Flags of `tenantflux-agent`.
#[derive(Debug, Clone, Parser)]
#[command(name = "tenantflux-agent", version, about)]
pub struct Args {
    /// Address the gRPC API listens on.
    #[arg(long, env = "TENANTFLUX_GRPC_ADDRESS", default_value = "0.0.0.0:9090")]
    pub grpc_address: SocketAddr,

    /// Address of the admin HTTP server (/livez, /readyz, /metrics).
    #[arg(long, env = "TENANTFLUX_ADMIN_ADDRESS", default_value = "0.0.0.0:8080")]
    pub admin_address: SocketAddr,

    /// Namespace the agent runs in; callers are authorized against `agents.tenantflux.io` here.
    #[arg(
        long,
        env = "TENANTFLUX_NAMESPACE",
        default_value = "tenantflux-system"
    )]
    pub namespace: String,

    /// Namespace of the flux-operator Deployment and of the FluxInstance `flux`.
    #[arg(
        long,
        env = "TENANTFLUX_OPERATOR_NAMESPACE",
        default_value = "flux-system"
    )]
    pub operator_namespace: String,

    /// Audience that callers' tokens are bound to (TokenRequest `audiences`).
    #[arg(
        long,
        env = "TENANTFLUX_TOKEN_AUDIENCE",
        default_value = "tenantflux-agent"
    )]
    pub token_audience: String,

    /// Log line format.
    #[arg(long, env = "TENANTFLUX_LOG_FORMAT", value_enum, default_value_t = LogFormat::Json)]
    pub log_format: LogFormat,

    /// Log filter, in tracing's EnvFilter syntax (e.g. `info`, `tenantflux_agent=debug`).
    /// kube-rs's per-request error lines are off by default: the agent logs each failing
    /// watch once per change instead of once per retry.
    #[arg(long, env = "RUST_LOG", default_value = DEFAULT_LOG_FILTER)]
    pub log_level: String,
}

/// How log lines are written to stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// One JSON object per line, for log collectors.
    Json,
    /// Human-readable lines, for a terminal.
    Text,
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    // Editing the process environment is `unsafe` in edition 2024 (and the crate forbids
    // unsafe), so env twins are checked on the clap definition; reading them is clap's job.
    #[test]
    fn every_flag_has_its_env_twin_and_default() {
        let cmd = Args::command();
        let expected = [
            ("grpc_address", "TENANTFLUX_GRPC_ADDRESS", "0.0.0.0:9090"),
            ("admin_address", "TENANTFLUX_ADMIN_ADDRESS", "0.0.0.0:8080"),
            ("namespace", "TENANTFLUX_NAMESPACE", "tenantflux-system"),
            (
                "operator_namespace",
                "TENANTFLUX_OPERATOR_NAMESPACE",
                "flux-system",
            ),
            (
                "token_audience",
                "TENANTFLUX_TOKEN_AUDIENCE",
                "tenantflux-agent",
            ),
            ("log_format", "TENANTFLUX_LOG_FORMAT", "json"),
            ("log_level", "RUST_LOG", DEFAULT_LOG_FILTER),
        ];
        for (id, env, default) in expected {
            let arg = cmd
                .get_arguments()
                .find(|a| a.get_id() == id)
                .unwrap_or_else(|| panic!("no flag {id}"));
            assert_eq!(arg.get_env().and_then(|e| e.to_str()), Some(env), "{id}");
            let defaults: Vec<_> = arg.get_default_values().iter().collect();
            assert_eq!(defaults, [default], "{id}");
        }
        let flags = cmd
            .get_arguments()
            .filter(|a| {
                a.get_long().is_some() && !matches!(a.get_id().as_str(), "help" | "version")
            })
            .count();
        assert_eq!(
            flags,
            expected.len(),
            "a flag was added without a test of its env twin"
        );
    }

    #[test]
    fn flags_parse_into_typed_values() {
        let args = Args::try_parse_from([
            "tenantflux-agent",
            "--grpc-address=127.0.0.1:19090",
            "--admin-address=127.0.0.1:18080",
            "--namespace=ns",
            "--operator-namespace=ops",
            "--token-audience=aud",
            "--log-format=text",
            "--log-level=debug",
        ])
        .expect("valid flags");
        assert_eq!(args.grpc_address, "127.0.0.1:19090".parse().unwrap());
        assert_eq!(args.admin_address, "127.0.0.1:18080".parse().unwrap());
        assert_eq!(args.namespace, "ns");
        assert_eq!(args.operator_namespace, "ops");
        assert_eq!(args.token_audience, "aud");
        assert_eq!(args.log_format, LogFormat::Text);
        assert_eq!(args.log_level, "debug");
    }

    #[test]
    fn bad_values_are_refused() {
        assert!(Args::try_parse_from(["tenantflux-agent", "--log-format=xml"]).is_err());
        assert!(Args::try_parse_from(["tenantflux-agent", "--grpc-address=nowhere"]).is_err());
    }
}
