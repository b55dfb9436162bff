//! `kubectl tenantflux flux [--] ARGS…`: the flux CLI of exactly the release the cluster runs,
//! with the user's kubeconfig, context and namespace. The release comes from the agent; the
//! binary from the cache ([`crate::flux_cli::cache`]), filled from Flux's release archives or
//! a mirror after their sha256 checked out, or from `--flux-cli PATH` once its version did.

use std::{
    ffi::OsString,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::Context as _;
use clap::{Args, ValueHint};

use crate::{
    connect::{Agent, ConnectOptions},
    context::GlobalArgs,
    exit::Exit,
    flux_cli::{
        self, FLUX_CLI_TIMEOUT, FluxCli,
        cache::{self, Source},
        installed_flux,
        release::{self, DEFAULT_MIRROR, Mirror, Platform, Release},
    },
};

#[derive(Debug, Args)]
pub struct FluxArgs {
    /// Print the path of the matching flux CLI (downloading it first if needed) instead of
    /// running it, e.g. for `alias flux="$(kubectl tenantflux flux --print-path)"`.
    #[arg(long, conflicts_with = "args")]
    pub print_path: bool,

    /// Run this flux binary instead of the cached one, once `flux version --client` says it is
    /// the cluster's release.
    #[arg(long, env = "TENANTFLUX_FLUX_CLI", value_name = "PATH", value_hint = ValueHint::FilePath)]
    pub flux_cli: Option<PathBuf>,

    /// Where flux CLI releases are downloaded from: a URL (https://, http://), or for
    /// air-gapped machines a directory (file:// URL or path), holding
    /// vX.Y.Z/flux_X.Y.Z_OS_ARCH.tar.gz (.zip on Windows) and vX.Y.Z/flux_X.Y.Z_checksums.txt
    /// as Flux's GitHub releases do.
    #[arg(
        long,
        env = "TENANTFLUX_FLUX_CLI_MIRROR",
        value_name = "URL",
        default_value = DEFAULT_MIRROR
    )]
    pub flux_cli_mirror: String,

    /// A PEM bundle of CAs to trust for the mirror, besides the system's.
    #[arg(long, env = "TENANTFLUX_FLUX_CLI_MIRROR_CA", value_name = "FILE", value_hint = ValueHint::FilePath)]
    pub flux_cli_mirror_ca: Option<PathBuf>,

    /// The flux CLI's arguments; `--` before them passes flags such as --help to flux.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "ARGS"
    )]
    pub args: Vec<OsString>,
}

pub fn help() -> &'static str {
    "The flux CLI release matching the cluster's Flux is downloaded on first use into\n\
     ~/.cache/tenantflux/flux-cli/vX.Y.Z/ (XDG_CACHE_HOME; %LOCALAPPDATA% on Windows), only after\n\
     its archive's sha256 matched the release's checksums file. Flags before ARGS are the\n\
     plugin's (--kubeconfig, --context and -n are passed on to flux); everything from the\n\
     first argument on is flux's.\n\n\
     Examples:\n  \
     kubectl tenantflux flux get sources git -A\n  \
     kubectl tenantflux flux -n apps get kustomizations\n  \
     kubectl tenantflux flux -- --help\n  \
     kubectl tenantflux flux --flux-cli-mirror https://mirror.example/flux get ks -A\n  \
     alias flux=\"$(kubectl tenantflux flux --print-path)\""
}

/// Resolves the binary (asking the agent, downloading if needed), then runs it: on Unix by
/// replacing this process, so stdin, stdout, stderr, signals and the exit code are flux's.
pub fn run(global: &GlobalArgs, args: FluxArgs) -> anyhow::Result<Exit> {
    let options = ConnectOptions::from(global);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("failed to start the async runtime")?;
    let binary = runtime.block_on(resolve(&options, &args))?;
    // The connection to the agent and its port-forward end here, not in flux.
    drop(runtime);
    if args.print_path {
        println!("{}", binary.display());
        return Ok(Exit::Success);
    }
    let env_kubeconfig = std::env::var_os("KUBECONFIG");
    let (flags, kubeconfig_env) = release::flux_flags(
        global.kubeconfig.as_ref(),
        env_kubeconfig.as_ref(),
        global.context.as_deref(),
        global.namespace.as_deref(),
    );
    let mut command = Command::new(&binary);
    command.args(flags).args(&args.args);
    if let Some(kubeconfig) = kubeconfig_env {
        command.env("KUBECONFIG", kubeconfig);
    }
    launch(command, &binary)
}

async fn resolve(options: &ConnectOptions, args: &FluxArgs) -> anyhow::Result<PathBuf> {
    let agent = Agent::connect(options).await?;
    let status = agent
        .get_status()
        .await
        .context("asking the agent which Flux the cluster runs")?;
    let instance = status.instance.unwrap_or_default();
    let flux = installed_flux(
        &instance.distribution_version,
        &instance.last_applied_revision,
    );
    let wanted = Release::of_cluster(&flux)?;
    if let Some(path) = &args.flux_cli {
        let timeout = options.timeout.unwrap_or(FLUX_CLI_TIMEOUT);
        check_given(
            path,
            &wanted,
            flux_cli::detect_at(path.as_os_str(), timeout).await,
        )?;
        return Ok(path.clone());
    }
    let platform = Platform::current()?;
    let root = cache::default_root()?;
    let source = Source {
        mirror: Mirror::parse(&args.flux_cli_mirror).map_err(|err| Exit::Usage.mark(err))?,
        ca: args.flux_cli_mirror_ca.clone(),
    };
    cache::ensure(&root, &wanted, platform, &source)
        .await
        .with_context(|| format!("getting the flux CLI {wanted} that matches the cluster's Flux"))
}

/// `--flux-cli PATH` is used only when it is the cluster's release.
fn check_given(path: &Path, wanted: &Release, found: FluxCli) -> anyhow::Result<()> {
    let refuse = |what: String| {
        Exit::Usage.mark(anyhow::anyhow!(
            "--flux-cli {}: {what}; the cluster runs Flux {wanted}: pass a flux CLI {wanted}, or \
             leave out --flux-cli to use the cached one",
            path.display()
        ))
    };
    match found {
        FluxCli::Found(version) if wanted.is(&version) => Ok(()),
        FluxCli::Found(version) => Err(refuse(format!("it is flux {version}"))),
        FluxCli::NotFound => Err(refuse("no such file".to_owned())),
        FluxCli::Unusable(reason) => Err(refuse(reason)),
    }
}

#[cfg(unix)]
fn launch(mut command: Command, binary: &Path) -> anyhow::Result<Exit> {
    use std::os::unix::process::CommandExt as _;
    // Returns only when the exec failed.
    let err = command.exec();
    Err(anyhow::Error::new(err).context(format!("running {}", binary.display())))
}

#[cfg(not(unix))]
fn launch(mut command: Command, binary: &Path) -> anyhow::Result<Exit> {
    let status = command
        .status()
        .with_context(|| format!("running {}", binary.display()))?;
    // flux's own code, which the plugin's exit codes cannot express.
    std::process::exit(status.code().unwrap_or(1))
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;
    use crate::cli::{Cli, Command as CliCommand};

    fn flux_args(args: &[&str]) -> (GlobalArgs, FluxArgs) {
        let cli = Cli::try_parse_from(
            ["kubectl-tenantflux", "flux"]
                .into_iter()
                .chain(args.iter().copied()),
        )
        .expect("arguments parse");
        match cli.command {
            CliCommand::Flux(flux) => (cli.global, flux),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn everything_from_the_first_argument_on_is_fluxs() {
        let (global, args) = flux_args(&[
            "-n",
            "apps",
            "--context",
            "tenant-a",
            "get",
            "ks",
            "-A",
            "--status-selector",
            "ready=false",
            "-o",
            "json",
        ]);
        assert_eq!(global.namespace.as_deref(), Some("apps"));
        assert_eq!(global.context.as_deref(), Some("tenant-a"));
        assert_eq!(
            args.args,
            [
                "get",
                "ks",
                "-A",
                "--status-selector",
                "ready=false",
                "-o",
                "json"
            ]
        );
        assert!(!args.print_path);
        let (_, args) = flux_args(&["--", "--help"]);
        assert_eq!(args.args, ["--help"]);
        let (_, args) = flux_args(&["--print-path"]);
        assert!(args.print_path && args.args.is_empty());
        let (_, args) = flux_args(&[
            "--flux-cli-mirror",
            "file:///srv/flux",
            "--flux-cli-mirror-ca",
            "/ca.pem",
            "version",
            "--client",
        ]);
        assert_eq!(args.flux_cli_mirror, "file:///srv/flux");
        assert_eq!(args.flux_cli_mirror_ca, Some(PathBuf::from("/ca.pem")));
        assert_eq!(args.args, ["version", "--client"]);
    }

    #[test]
    fn print_path_takes_no_flux_arguments() {
        assert!(
            Cli::try_parse_from(["kubectl-tenantflux", "flux", "--print-path", "get", "ks"])
                .is_err()
        );
    }

    #[test]
    fn a_given_cli_must_be_the_clusters_release() {
        let wanted = Release::parse("v2.9.5").unwrap();
        let path = Path::new("/usr/local/bin/flux");
        assert!(check_given(path, &wanted, FluxCli::Found("v2.9.5".into())).is_ok());
        let err = check_given(path, &wanted, FluxCli::Found("v2.6.4".into())).unwrap_err();
        assert_eq!(Exit::of(&err), Exit::Usage);
        assert_eq!(
            err.to_string(),
            "--flux-cli /usr/local/bin/flux: it is flux v2.6.4; the cluster runs Flux v2.9.5: \
             pass a flux CLI v2.9.5, or leave out --flux-cli to use the cached one"
        );
        let missing = check_given(path, &wanted, FluxCli::NotFound).unwrap_err();
        assert!(missing.to_string().contains("no such file"), "{missing}");
    }
}
