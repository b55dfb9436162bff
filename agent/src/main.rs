#![forbid(unsafe_code)]
#![deny(warnings)]

use std::process::ExitCode;

use clap::Parser;
use tenantflux_agent::Args;

#[tokio::main]
async fn main() -> ExitCode {
    match Args::parse().run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("tenantflux-agent: {:#}", anyhow::Error::new(err));
            ExitCode::FAILURE
        }
    }
}
