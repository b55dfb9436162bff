//! tenantflux-test-supervisor: the processes of a test cluster (see `tenantflux_tests::supervise`).
//! `controllers` runs the Flux controllers flux-operator rolls out as local processes; `spawn`,
//! `stop`, `running`, `reap` and `free-port` are how `tests/env/cluster` starts, watches and
//! stops everything else it runs beside the control plane.

#![forbid(unsafe_code)]
#![deny(warnings)]

use std::{path::PathBuf, process::ExitCode, time::Duration};

use clap::{Parser, Subcommand};
use tenantflux_tests::supervise::{
    self,
    process::{self, Ready, Spawn},
    spec::Builds,
};

#[derive(Debug, Parser)]
#[command(about = "The processes a test cluster runs beside its control plane")]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Runs the Flux controllers of a test cluster as local processes, until SIGTERM.
    Controllers(Controllers),
    /// Starts COMMAND in a process group of its own, its pid in --pidfile and its output in
    /// --log, and returns once it is ready (exit 1, with the log's end, if it exits first or is
    /// not ready in time).
    Spawn {
        /// What the process is, for errors ("flux-operator on CLUSTER").
        #[arg(long)]
        what: String,
        #[arg(long)]
        pidfile: PathBuf,
        #[arg(long)]
        log: PathBuf,
        /// Start the log afresh instead of appending to it.
        #[arg(long)]
        truncate: bool,
        /// Ready once a GET of this http://127.0.0.1:PORT/PATH answers 200.
        #[arg(long, conflicts_with = "ready_file")]
        ready_url: Option<String>,
        /// Ready once this file exists and is not empty.
        #[arg(long)]
        ready_file: Option<PathBuf>,
        /// Seconds to wait for it to be ready.
        #[arg(long, default_value_t = 60)]
        timeout: u64,
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Stops the processes of PIDFILE... (SIGTERM, then SIGKILL after 5s) and removes the files.
    Stop { pidfiles: Vec<PathBuf> },
    /// Exits 0 if the process of PIDFILE runs, 1 if not.
    Running { pidfile: PathBuf },
    /// Waits until process --owner is gone, then runs COMMAND (and exits with its status).
    Reap {
        #[arg(long)]
        owner: u32,
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Prints a free loopback port from below the kernel's ephemeral range.
    FreePort,
}

#[derive(Debug, clap::Args)]
struct Controllers {
    /// The cluster's directory (kubeconfig.yaml, controllers/).
    #[arg(long, env = "TENANTFLUX_CLUSTER_DIR")]
    cluster_dir: PathBuf,
    /// The build cache (`<cache>/<component>-<version>/<component>`).
    #[arg(long, env = "TENANTFLUX_CACHE")]
    cache: PathBuf,
    /// The namespace flux-operator rolls the controllers out in.
    #[arg(long, env = "RUNTIME_NAMESPACE", default_value = "flux-system")]
    namespace: String,
    /// COMPONENT@VERSION builds, space-separated (versions.env).
    #[arg(long, env = "FLUX_CONTROLLERS", default_value = "")]
    controllers: String,
    /// COMPONENT@TAG=VERSION substitutes, space-separated (versions.env).
    #[arg(long, env = "FLUX_CONTROLLER_SUBSTITUTES", default_value = "")]
    substitutes: String,
}

fn main() -> ExitCode {
    let result: Result<ExitCode, String> = match Args::parse().command {
        Command::Controllers(args) => controllers(args).map(|()| ExitCode::SUCCESS),
        Command::Spawn {
            what,
            pidfile,
            log,
            truncate,
            ready_url,
            ready_file,
            timeout,
            command,
        } => {
            let ready = match (ready_url, ready_file) {
                (Some(url), _) => Ready::http(&url).ok_or_else(|| {
                    format!("--ready-url {url:?} is not http://127.0.0.1:PORT/PATH")
                }),
                (None, Some(file)) => Ok(Ready::File(file)),
                (None, None) => Ok(Ready::Started),
            };
            ready.and_then(|ready| {
                let spawn = Spawn {
                    what,
                    command,
                    pidfile,
                    log,
                    truncate,
                    ready,
                    timeout: Duration::from_secs(timeout),
                };
                process::spawn(&spawn)
                    .map(|_| ExitCode::SUCCESS)
                    .map_err(|err| err.to_string())
            })
        }
        Command::Stop { pidfiles } => {
            process::stop(&pidfiles);
            Ok(ExitCode::SUCCESS)
        }
        Command::Running { pidfile } => Ok(if process::running(&pidfile) {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        }),
        Command::Reap { owner, command } => process::reap(owner, &command)
            .map(|status| ExitCode::from(u8::try_from(status.code().unwrap_or(1)).unwrap_or(1)))
            .map_err(|err| err.to_string()),
        Command::FreePort => process::free_port()
            .map(|port| {
                println!("{port}");
                ExitCode::SUCCESS
            })
            .map_err(|err| err.to_string()),
    };
    result.unwrap_or_else(|err| {
        eprintln!("error: {err}");
        ExitCode::FAILURE
    })
}

fn controllers(args: Controllers) -> Result<(), String> {
    let builds = Builds::parse(&args.controllers, &args.substitutes).map_err(|e| e.to_string())?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|err| format!("starting the async runtime: {err}"))?;
    runtime
        .block_on(supervise::run(supervise::Config {
            cluster_dir: args.cluster_dir,
            cache: args.cache,
            namespace: args.namespace,
            builds,
        }))
        .map_err(|err| err.to_string())
}
