#![forbid(unsafe_code)]
#![deny(warnings)]

use std::process::ExitCode;

use clap::Parser;
use tenantflux_agent::Args;

#[tokio::main]
async fn main() -> ExitCode {
    // The OCI client's TLS (reqwest, rustls without a bundled provider) uses the process
    // default; ring is what kube uses too. Fails only if one is already installed.
    let _ = rustls::crypto::ring::default_provider().install_default();
    match Args::parse().run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("tenantflux-agent: {:#}", anyhow::Error::new(err));
            ExitCode::FAILURE
        }
    }
}
