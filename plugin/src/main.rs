//! kubectl-tenantflux: the tenant's view of Flux, through the tenantflux-agent in its cluster.

#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::Parser;
use kubectl_tenantflux::{cli, exit::Exit, output};

fn main() -> ExitCode {
    match cli::Cli::parse().run() {
        Ok(exit) => exit.into(),
        // `kubectl tenantflux status | head` closing the pipe early is not a failure.
        Err(err) if output::is_broken_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {}", output::printable(&format!("{err:#}")));
            Exit::of(&err).into()
        }
    }
}
