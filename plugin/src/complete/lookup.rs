//! Completion values only the kubeconfig or the cluster knows, looked up with the connection
//! flags already on the command line.

use std::{io, time::Duration};

use clap::Parser;
use k8s_openapi::api::core::v1::Namespace;
use kube::{Api, api::ListParams, config::Kubeconfig};

use super::Source;
use crate::{
    connect::{ConnectOptions, kube_client, read_kubeconfigs},
    context::GlobalArgs,
};

/// The longest a lookup may keep a shell prompt waiting.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(5);

/// The global flags as the commands would see them, env twins included.
#[derive(Parser)]
struct Globals {
    #[command(flatten)]
    global: GlobalArgs,
}

/// Connection options from the flags given on the command line (those that do not parse, as
/// a half-typed line may have, are left out).
pub(super) fn connect_options(given: &[(String, String)]) -> ConnectOptions {
    let parse = |flags: &[&(String, String)]| {
        Globals::try_parse_from(
            std::iter::once("kubectl-tenantflux".to_owned())
                .chain(flags.iter().flat_map(|(k, v)| [k.clone(), v.clone()])),
        )
    };
    let all: Vec<_> = given.iter().collect();
    let globals = parse(&all).or_else(|_| {
        let valid: Vec<_> = given.iter().filter(|f| parse(&[f]).is_ok()).collect();
        parse(&valid)
    });
    let globals = globals.unwrap_or_else(|_| Globals::parse_from(["kubectl-tenantflux"]));
    ConnectOptions::from(&globals.global)
}

#[derive(Debug, thiserror::Error)]
pub enum LookupError {
    #[error("reading the kubeconfig: {0}")]
    Kubeconfig(String),
    #[error("connecting to the cluster: {0}")]
    Connect(#[from] crate::connect::ConnectError),
    #[error("listing namespaces: {0}")]
    List(#[from] kube::Error),
    #[error("no answer within {LOOKUP_TIMEOUT:?}")]
    TimedOut,
    #[error("starting the async runtime: {0}")]
    Runtime(io::Error),
}

/// The names `source` offers (unfiltered).
pub async fn lookup(source: Source, options: &ConnectOptions) -> Result<Vec<String>, LookupError> {
    let options = ConnectOptions {
        timeout: Some(
            options
                .timeout
                .unwrap_or(LOOKUP_TIMEOUT)
                .min(LOOKUP_TIMEOUT),
        ),
        ..options.clone()
    };
    let names = async {
        match source {
            Source::Contexts => {
                let kubeconfig = match options.kubeconfig.as_ref().filter(|p| !p.is_empty()) {
                    Some(paths) => read_kubeconfigs(paths)?,
                    None => Kubeconfig::read()
                        .map_err(|err| LookupError::Kubeconfig(err.to_string()))?,
                };
                Ok(kubeconfig.contexts.into_iter().map(|c| c.name).collect())
            }
            Source::Namespaces => {
                let (client, ..) = kube_client(&options).await?;
                let list = Api::<Namespace>::all(client)
                    .list_metadata(&ListParams::default())
                    .await?;
                Ok(list
                    .items
                    .into_iter()
                    .filter_map(|ns| ns.metadata.name)
                    .collect())
            }
        }
    };
    tokio::time::timeout(LOOKUP_TIMEOUT, names)
        .await
        .map_err(|_| LookupError::TimedOut)?
}

pub(super) fn run_lookup(
    source: Source,
    options: &ConnectOptions,
) -> Result<Vec<String>, LookupError> {
    // Several crates enable rustls; naming the provider avoids an ambiguous process default.
    let _ = rustls::crypto::ring::default_provider().install_default();
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(LookupError::Runtime)?
        .block_on(lookup(source, options))
}
