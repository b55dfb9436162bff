//! The kubeconfig: the files of `--kubeconfig`/`KUBECONFIG` merged as kubectl merges them, and
//! the Kubernetes client and user it selects.

use std::ffi::OsString;

use kube::{
    Client,
    config::{AuthInfo, KubeConfigOptions, Kubeconfig},
};

use super::*;

/// A client for the kubeconfig's cluster, the kubeconfig user it authenticates as, and the
/// cluster as cached credentials are keyed.
pub async fn kube_client(
    options: &ConnectOptions,
) -> Result<(Client, AuthInfo, ClusterIdentity), ConnectError> {
    let started = std::time::Instant::now();
    let kube_options = KubeConfigOptions {
        context: options.context.clone(),
        ..KubeConfigOptions::default()
    };
    let given = match (&options.inline_kubeconfig, &options.kubeconfig) {
        (Some(inline), _) => Some(inline.clone()),
        (None, Some(paths)) if !paths.is_empty() => Some(read_kubeconfigs(paths)?),
        (None, _) => None,
    };
    let mut config = match given {
        Some(kubeconfig) => kube::Config::from_custom_kubeconfig(kubeconfig, &kube_options)
            .await
            .map_err(|err| ConnectError::Kubeconfig {
                cause: describe(&err),
            })?,
        None => match kube::Config::from_kubeconfig(&kube_options).await {
            Ok(config) => config,
            // Like kubectl: with no kubeconfig at all, a pod uses its ServiceAccount.
            Err(err) if options.context.is_none() => {
                kube::Config::incluster().map_err(|_| ConnectError::NoConfig {
                    cause: describe(&err),
                })?
            }
            Err(err) => {
                return Err(ConnectError::Kubeconfig {
                    cause: describe(&err),
                });
            }
        },
    };
    if let Some(namespace) = &options.namespace {
        config.default_namespace.clone_from(namespace);
    }
    // Only the connect timeout: a read timeout would also cut idle port-forward streams.
    config.connect_timeout = options.timeout;
    crate::timings::record("kubeconfig", started.elapsed());
    let started = std::time::Instant::now();
    let cluster = config.cluster_url.to_string();
    let identity = ClusterIdentity::new(&cluster, config.root_cert.as_deref());
    let user = config.auth_info.clone();
    let client = client_from(config).map_err(|err| ConnectError::Client {
        cluster,
        cause: describe(&err),
    })?;
    crate::timings::record("client", started.elapsed());
    Ok((client, user, identity))
}

/// kube's own client, but with TCP_NODELAY: kube leaves Nagle's algorithm on (hyper's
/// default), so the port-forward's small websocket writes waited for the API server's delayed
/// ACK, 40 ms on Linux, in most calls. Through a proxy, kube's own builder (which knows them).
fn client_from(config: kube::Config) -> Result<Client, kube::Error> {
    use hyper_util::{client::legacy::connect::HttpConnector, rt::TokioExecutor};
    use kube::client::ConfigExt as _;
    if config.proxy_url.is_some() {
        return Client::try_from(config);
    }
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(config.connect_timeout);
    let https = config.rustls_https_connector_with_connector(http)?;
    let hyper: hyper_util::client::legacy::Client<_, kube::client::Body> =
        hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build(https);
    // The layers above report their own errors boxed; so must the client below them.
    let hyper = tower::ServiceExt::map_err(hyper, |err| {
        Box::new(err) as Box<dyn std::error::Error + Send + Sync>
    });
    let service = tower::ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .service(hyper);
    Ok(Client::new(service, config.default_namespace))
}

pub fn read_kubeconfigs(paths: &OsString) -> Result<Kubeconfig, ConnectError> {
    std::env::split_paths(paths)
        .filter(|p| !p.as_os_str().is_empty())
        .try_fold(Kubeconfig::default(), |merged, path| {
            Kubeconfig::read_from(&path).and_then(|next| merged.merge(next))
        })
        .map_err(|err| ConnectError::Kubeconfig {
            cause: describe(&err),
        })
}
