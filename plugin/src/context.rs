//! What every command shares: the global flags (kubectl's where kubectl has one), the
//! connection options they make, and the arguments several commands take. A leaf: it knows no
//! command, so commands depend on it and never on the dispatcher in [`crate::cli`].

use std::{
    ffi::OsString,
    fmt, fs,
    path::{Path, PathBuf},
    str::FromStr,
    time::Duration,
};

use anyhow::Context as _;
use clap::{Args, ValueHint};

use crate::{
    connect::{self, CLIENT_SERVICE_ACCOUNT, ConnectOptions, Token, VERBOSE_ENV},
    output::{ColorMode, OutputFormat, Printer},
};

#[derive(Debug, Args)]
pub struct GlobalArgs {
    /// Path to the kubeconfig file (a list of paths, as in KUBECONFIG, is merged).
    #[arg(
        long,
        global = true,
        env = "KUBECONFIG",
        value_name = "PATH",
        value_hint = ValueHint::FilePath
    )]
    pub kubeconfig: Option<OsString>,

    /// The kubeconfig context to use.
    #[arg(long, global = true, value_name = "NAME")]
    pub context: Option<String>,

    /// The namespace for namespaced operations (default: the context's namespace).
    #[arg(short = 'n', long, global = true, value_name = "NAMESPACE")]
    pub namespace: Option<String>,

    /// Namespace the tenantflux-agent runs in.
    #[arg(
        long,
        global = true,
        env = "TENANTFLUX_AGENT_NAMESPACE",
        default_value = "tenantflux-system",
        value_name = "NAMESPACE"
    )]
    pub agent_namespace: String,

    /// Connect straight to the agent at http://HOST:PORT instead of a port-forward through the
    /// API server. Hidden: it skips the check of the agent's pod, so it is for tests and
    /// benchmarks, not for users.
    #[arg(
        long,
        global = true,
        hide = true,
        env = "TENANTFLUX_AGENT_ADDRESS",
        value_name = "URL",
        value_parser = parse_agent_address
    )]
    pub agent_address: Option<http::Uri>,

    /// Audience of the tokens the agent accepts (used when requesting a token).
    #[arg(
        long,
        global = true,
        env = "TENANTFLUX_AGENT_AUDIENCE",
        default_value = "tenantflux-agent",
        value_name = "AUDIENCE"
    )]
    pub agent_audience: String,

    /// Bearer token for the agent, instead of the kubeconfig user's credentials.
    #[arg(
        long,
        global = true,
        env = "TENANTFLUX_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    pub token: Option<Token>,

    /// Send the kubeconfig user's own bearer token (token or tokenFile) to the agent. Off by
    /// default: the agent's pod is the tenant's process, and the
    /// token works wherever the API server accepts it; without it the plugin proves who you
    /// are with an identity CSR (or acts as ServiceAccount tenantflux-client).
    #[arg(long, global = true, env = "TENANTFLUX_FORWARD_TOKEN", value_parser = clap::builder::FalseyValueParser::new())]
    pub forward_token: bool,

    /// Request a new token (or identity CSR) for this command instead of reusing the one
    /// cached under ~/.cache/tenantflux/tokens (mode 0600, reused until shortly before it
    /// expires), and cache nothing.
    #[arg(long, global = true, env = "TENANTFLUX_NO_CREDENTIAL_CACHE", value_parser = clap::builder::FalseyValueParser::new())]
    pub no_credential_cache: bool,

    /// Output format.
    #[arg(short = 'o', long, global = true, value_enum, default_value_t = OutputFormat::Table)]
    pub output: OutputFormat,

    /// When to color the table output.
    #[arg(long, global = true, value_enum, default_value_t = ColorMode::Auto)]
    pub color: ColorMode,

    /// How long to wait for each request to the API server or the agent; 0 waits forever
    /// (e.g. 30s, 1m, 1m30s, 500ms; a bare number is seconds).
    #[arg(long, global = true, default_value = "30s", value_name = "DURATION")]
    pub request_timeout: RequestTimeout,
}

impl GlobalArgs {
    pub fn printer(&self) -> Printer {
        Printer::new(self.output, self.color)
    }
}

impl From<&GlobalArgs> for ConnectOptions {
    fn from(args: &GlobalArgs) -> Self {
        Self {
            kubeconfig: args.kubeconfig.clone(),
            inline_kubeconfig: None,
            context: args.context.clone(),
            namespace: args.namespace.clone(),
            agent_namespace: args.agent_namespace.clone(),
            agent_address: args.agent_address.clone(),
            audience: args.agent_audience.clone(),
            token: args.token.clone(),
            forward_token: args.forward_token,
            token_account: CLIENT_SERVICE_ACCOUNT.to_owned(),
            timeout: args.request_timeout.get(),
            verbose: std::env::var_os(VERBOSE_ENV).is_some_and(|v| !v.is_empty() && v != "0"),
            credential_cache: if args.no_credential_cache {
                None
            } else {
                connect::default_credential_cache_dir()
            },
        }
    }
}

#[derive(Debug, Args)]
pub struct FileArg {
    /// The file to read (`-` for stdin).
    #[arg(short = 'f', long = "filename", value_name = "PATH", value_hint = ValueHint::FilePath)]
    pub path: PathBuf,
}

impl FileArg {
    pub(crate) fn read(&self) -> anyhow::Result<String> {
        if self.path == Path::new("-") {
            return std::io::read_to_string(std::io::stdin()).context("reading stdin");
        }
        fs::read_to_string(&self.path).with_context(|| format!("reading {}", self.path.display()))
    }
}

fn parse_agent_address(value: &str) -> Result<http::Uri, String> {
    let uri: http::Uri = value
        .parse()
        .map_err(|err| format!("not a URL ({err}); expected http://HOST:PORT"))?;
    // The agent serves plaintext gRPC; the port-forward through the API server is what is
    // encrypted, so there is no https:// to offer here.
    match (uri.scheme_str(), uri.authority()) {
        (Some("http"), Some(_)) => Ok(uri),
        _ => Err("expected http://HOST:PORT".to_owned()),
    }
}

/// kubectl's `--request-timeout`: a Go-style duration, or whole seconds; zero means none.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestTimeout(Option<Duration>);

impl RequestTimeout {
    pub fn get(self) -> Option<Duration> {
        self.0
    }
}

impl fmt::Display for RequestTimeout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(d) => write!(f, "{d:?}"),
            None => f.write_str("0"),
        }
    }
}

impl FromStr for RequestTimeout {
    type Err = String;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        let total = tenantflux_core::duration::parse(value).map_err(|err| err.to_string())?;
        Ok(Self((!total.is_zero()).then_some(total)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_timeouts_parse_like_kubectl() {
        let parse = |s: &str| s.parse::<RequestTimeout>().map(RequestTimeout::get);
        assert_eq!(parse("30"), Ok(Some(Duration::from_secs(30))));
        assert_eq!(parse("30s"), Ok(Some(Duration::from_secs(30))));
        assert_eq!(parse("1m30s"), Ok(Some(Duration::from_secs(90))));
        assert_eq!(parse("2h"), Ok(Some(Duration::from_secs(7200))));
        assert_eq!(parse("250ms"), Ok(Some(Duration::from_millis(250))));
        assert_eq!(parse("0"), Ok(None));
        assert_eq!(parse("0s"), Ok(None));
        assert!(parse("").is_err());
        assert!(parse("s").is_err());
        assert!(parse("10x").is_err());
        assert!(parse("-5s").is_err());
        // Used to panic on overflow (Duration * u32).
        assert!(parse("5000000h").is_ok());
        assert!(parse("9999999999999999h").is_err());
        assert!(parse("18446744073709551615h").is_err());
    }
}
