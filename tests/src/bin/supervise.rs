//! tenantflux-test-supervisor: runs the Flux controllers flux-operator rolls out on a test
//! cluster as local processes (see `tenantflux_tests::supervise`). Started by
//! `tests/env/cluster flux-operator`; stopped by SIGTERM (`tests/env/cluster down`).

#![forbid(unsafe_code)]
#![deny(warnings)]

use std::{path::PathBuf, process::ExitCode};

use clap::Parser;
use tenantflux_tests::supervise::{self, spec::Builds};

#[derive(Debug, Parser)]
#[command(about = "Runs the Flux controllers of a test cluster as local processes")]
struct Args {
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

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args = Args::parse();
    let result = match Builds::parse(&args.controllers, &args.substitutes) {
        Ok(builds) => {
            supervise::run(supervise::Config {
                cluster_dir: args.cluster_dir,
                cache: args.cache,
                namespace: args.namespace,
                builds,
            })
            .await
        }
        Err(err) => Err(err),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::FAILURE
        }
    }
}
