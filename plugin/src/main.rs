//! kubectl-tenantflux: the tenant's view of Flux, through the tenantflux-agent in its cluster.

#![forbid(unsafe_code)]

mod cli;
mod connect;
mod output;
mod status;
mod version;
mod workloads;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    match cli::Cli::parse().run() {
        Ok(()) => ExitCode::SUCCESS,
        // `kubectl tenantflux status | head` closing the pipe early is not a failure.
        Err(err) if output::is_broken_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
