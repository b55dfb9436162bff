//! Reaching tenantflux-agent: a port-forward to its pod through the API server (or a direct
//! address), and the bearer token every call carries.

mod bearer;
mod cache;
mod credentials;
mod errors;
mod kubeconfig;
mod pod;
mod reconnect;

use self::credentials::{Cached, resolve_token};
pub use self::{
    bearer::*,
    cache::{
        CacheKey, ClusterIdentity, CredentialCache, CredentialKind, Entry, NO_CACHE_ENV,
        default_dir as default_credential_cache_dir,
    },
    errors::*,
    kubeconfig::*,
    pod::*,
    reconnect::*,
};

use std::{
    error::Error as StdError,
    ffi::OsString,
    fmt,
    future::Future,
    path::PathBuf,
    sync::{Arc, Mutex},
    time::Duration,
};

use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::Pod;
use kube::{Api, Client, api::ListParams, config::Kubeconfig};
use tenantflux_proto::v1::{
    GetStatusRequest, Status, WatchStatusRequest, adopt_client::AdoptClient,
    agent_client::AgentClient, inspect_client::InspectClient, instance_client::InstanceClient,
    policy_client::PolicyClient, upgrade_client::UpgradeClient, workloads_client::WorkloadsClient,
};
use tonic::{
    Streaming,
    transport::{Channel, Endpoint},
};

/// Label every tenantflux-agent pod carries (deploy/manifests sets it). Anyone who can create
/// a pod can set it too, so it only finds candidates: see [`check_agent_pod`].
pub const AGENT_SELECTOR: &str = "app.kubernetes.io/name=tenantflux-agent";
/// The Deployment whose pods are the agent (deploy/ creates it).
pub const AGENT_DEPLOYMENT: &str = "tenantflux-agent";
/// The ServiceAccount the agent's pods run as (deploy/ creates it).
pub const AGENT_SERVICE_ACCOUNT: &str = "tenantflux-agent";
/// Set (to anything but empty or `0`) to have every command say, on stderr, which pod it
/// checked and what credential it sends there.
pub const VERBOSE_ENV: &str = "TENANTFLUX_VERBOSE";
/// The port the agent serves gRPC on when its pod does not name a `grpc` container port.
pub const DEFAULT_GRPC_PORT: u16 = 9090;
/// ServiceAccount (created by deploy/) whose tokens users without a token of their own borrow.
pub const CLIENT_SERVICE_ACCOUNT: &str = "tenantflux-client";
/// Lifetime asked of a TokenRequest token: long enough for one command, short if it leaks.
const TOKEN_LIFETIME_SECONDS: i64 = 600;
/// How often an open call pings the agent, and how long a ping may go unanswered: a
/// port-forward can die without closing, and a watch on it would otherwise wait forever.
const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(30);
const KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// What the connection needs from the global flags.
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    pub kubeconfig: Option<OsString>,
    /// A kubeconfig held in memory (e.g. read from a tenant cluster's Secret by `fleet`);
    /// used instead of `kubeconfig` and KUBECONFIG when set.
    pub inline_kubeconfig: Option<Kubeconfig>,
    pub context: Option<String>,
    pub namespace: Option<String>,
    pub agent_namespace: String,
    pub agent_address: Option<http::Uri>,
    pub audience: String,
    pub token: Option<Token>,
    /// Send the kubeconfig user's own token to the agent (`--forward-token`) instead of a
    /// proof of identity or a token requested for the agent.
    pub forward_token: bool,
    /// The ServiceAccount (in `agent_namespace`) whose token is requested for a kubeconfig
    /// user without one.
    pub token_account: String,
    pub timeout: Option<Duration>,
    /// Say on stderr which pod was checked and what credential is sent to it.
    pub verbose: bool,
    /// Where requested credentials are kept between commands; None keeps none.
    pub credential_cache: Option<PathBuf>,
}

#[cfg(test)]
impl ConnectOptions {
    /// The options the unit tests start from: the default agent namespace and audience, the
    /// client account, a 5 s timeout, no token and no credential cache.
    pub(crate) fn for_tests() -> Self {
        Self {
            kubeconfig: None,
            inline_kubeconfig: None,
            context: None,
            namespace: None,
            agent_namespace: "tenantflux-system".to_owned(),
            agent_address: None,
            audience: "tenantflux-agent".to_owned(),
            token: None,
            forward_token: false,
            token_account: CLIENT_SERVICE_ACCOUNT.to_owned(),
            timeout: Some(Duration::from_secs(5)),
            verbose: false,
            credential_cache: None,
        }
    }
}

/// The agent a connection goes to, as error messages name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AgentTarget {
    Pod { name: String, namespace: String },
    Address(String),
}

impl fmt::Display for AgentTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Pod { name, namespace } => {
                write!(f, "tenantflux-agent pod {name} in namespace {namespace}")
            }
            Self::Address(address) => write!(f, "tenantflux-agent at {address}"),
        }
    }
}

/// The last error the API server reported for a port-forward to the agent pod.
type ForwardError = Arc<Mutex<Option<String>>>;

/// A connected, authenticated client of one tenantflux-agent.
pub struct Agent {
    client: AgentClient<AuthChannel>,
    workloads: WorkloadsClient<AuthChannel>,
    policy: PolicyClient<AuthChannel>,
    instance: InstanceClient<AuthChannel>,
    upgrade: UpgradeClient<AuthChannel>,
    adopt: AdoptClient<AuthChannel>,
    inspect: InspectClient<AuthChannel>,
    /// The API server the agent was reached through (none for `--agent-address` with
    /// `--token`).
    kube: Option<Client>,
    target: AgentTarget,
    forward_error: ForwardError,
    namespace: String,
    /// Where the credential came from or went to, if it is cached: forgotten once the agent
    /// refuses it.
    cached: Option<Cached>,
}

impl Agent {
    pub async fn connect(options: &ConnectOptions) -> Result<Self, ConnectError> {
        let forward_error = ForwardError::default();
        // kubectl's: -n, else the kubeconfig context's namespace, else "default".
        let mut namespace = options
            .namespace
            .clone()
            .unwrap_or_else(|| "default".to_owned());
        let (channel, target, kube, (token, credential, cached)) = match &options.agent_address {
            Some(address) => {
                let (channel, target) = direct_channel(address, options.timeout).await?;
                let (kube, token) = match &options.token {
                    // A direct address with an explicit token needs no Kubernetes at all.
                    Some(token) => (
                        None,
                        (
                            Credential::Bearer(token.clone()),
                            TokenSource::Flag(token).to_string(),
                            None,
                        ),
                    ),
                    None => {
                        let (client, user, cluster) = kube_client(options).await?;
                        client.default_namespace().clone_into(&mut namespace);
                        let token = resolve_token(options, client.clone(), &user, &cluster).await?;
                        (Some(client), token)
                    }
                };
                (channel, target, kube, token)
            }
            None => {
                let (client, user, cluster) = kube_client(options).await?;
                client.default_namespace().clone_into(&mut namespace);
                // The pod first: "agent not installed" explains more than a failed TokenRequest,
                // and no token is requested or read for a pod that is not the agent's.
                let (channel, target) =
                    port_forward_channel(client.clone(), options, forward_error.clone()).await?;
                let token = crate::timings::timed(
                    "credential",
                    resolve_token(options, client.clone(), &user, &cluster),
                )
                .await?;
                (channel, target, Some(client), token)
            }
        };
        if options.verbose {
            let checked = match &target {
                AgentTarget::Pod { .. } => format!(
                    " (checked: it runs as ServiceAccount {AGENT_SERVICE_ACCOUNT} and belongs to Deployment {AGENT_DEPLOYMENT})"
                ),
                AgentTarget::Address(_) => String::new(),
            };
            eprintln!("sending {credential} to {target}{checked}");
        }
        let auth = BearerAuth::from_credential(token)?;
        let channel = AuthChannel::new(channel, auth);
        Ok(Self {
            client: AgentClient::new(channel.clone()),
            workloads: WorkloadsClient::new(channel.clone()),
            policy: PolicyClient::new(channel.clone()),
            instance: InstanceClient::new(channel.clone()),
            upgrade: UpgradeClient::new(channel.clone()),
            adopt: AdoptClient::new(channel.clone()),
            inspect: InspectClient::new(channel),
            kube,
            target,
            forward_error,
            namespace,
            cached,
        })
    }

    /// Runs one call to the agent and maps its failure, the one place a gRPC status becomes
    /// a [`CallError`]. `call` is a request on one of this agent's clients, e.g.
    /// `agent.call(agent.workloads().list_kinds(request))`.
    pub async fn call<T>(
        &self,
        call: impl Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    ) -> Result<T, CallError> {
        let response = call.await.map_err(|status| self.error(&status))?;
        if let Some(value) = response
            .metadata()
            .get(crate::timings::RESPONSE_METADATA)
            .and_then(|v| v.to_str().ok())
        {
            crate::timings::record_server_timing(value);
        }
        Ok(response.into_inner())
    }

    /// The next message of a stream this agent answered a call with; `None` once it ended it.
    pub async fn next<T>(&self, stream: &mut Streaming<T>) -> Result<Option<T>, CallError> {
        stream.message().await.map_err(|status| self.error(&status))
    }

    pub async fn get_status(&self) -> Result<Status, CallError> {
        let mut client = self.client.clone();
        self.call(crate::timings::timed(
            "call",
            client.get_status(GetStatusRequest {}),
        ))
        .await
    }

    /// Starts a watch: the agent's status now, then again at every change. The watch owns the
    /// connection, and ends when the agent closes the stream or the connection breaks.
    pub async fn watch_status(self) -> Result<StatusWatch, CallError> {
        let stream = self.status_stream().await?;
        Ok(StatusWatch {
            stream,
            agent: self,
        })
    }

    /// The WatchStatus stream on this connection, which the caller reads with [`Agent::next`].
    pub async fn status_stream(&self) -> Result<Streaming<Status>, CallError> {
        let mut client = self.client.clone();
        self.call(client.watch_status(WatchStatusRequest {})).await
    }

    /// A client of the agent's Workloads service on the same connection.
    pub fn workloads(&self) -> WorkloadsClient<AuthChannel> {
        self.workloads.clone()
    }

    /// A client of the agent's Policy service on the same connection.
    pub fn policy(&self) -> PolicyClient<AuthChannel> {
        self.policy.clone()
    }

    /// A client of the agent's Instance service on the same connection.
    pub fn instance(&self) -> InstanceClient<AuthChannel> {
        self.instance.clone()
    }

    /// A client of the agent's Upgrade service on the same connection.
    pub fn upgrade(&self) -> UpgradeClient<AuthChannel> {
        self.upgrade.clone()
    }

    /// A client of the agent's Inspect service on the same connection.
    pub fn inspect(&self) -> InspectClient<AuthChannel> {
        self.inspect.clone()
    }

    /// A client of the agent's Adopt service on the same connection.
    pub fn adopt(&self) -> AdoptClient<AuthChannel> {
        self.adopt.clone()
    }

    /// The Kubernetes client of the API server the agent was reached through, if any.
    pub fn kube(&self) -> Option<&Client> {
        self.kube.as_ref()
    }

    /// The namespace commands act in: -n, else the kubeconfig context's.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    pub fn target(&self) -> &AgentTarget {
        &self.target
    }

    fn error(&self, status: &tonic::Status) -> CallError {
        let forward_error = self.forward_error.lock().ok().and_then(|e| e.clone());
        let error = call_error(status, &self.target, forward_error);
        if let (CallError::Unauthenticated { message }, Some(cached)) = (&error, &self.cached) {
            // A cached credential the agent no longer accepts (its CSR deleted, the token
            // revoked): the next command requests a new one.
            cached.drop_entry();
            return CallError::Unauthenticated {
                message: format!(
                    "{message} (the cached credential was dropped: run the command again to request a new one)"
                ),
            };
        }
        error
    }
}

/// An open WatchStatus stream.
pub struct StatusWatch {
    stream: Streaming<Status>,
    agent: Agent,
}

impl StatusWatch {
    /// The next status; `None` once the agent has ended the stream.
    pub async fn next(&mut self) -> Result<Option<Status>, CallError> {
        self.agent.next(&mut self.stream).await
    }

    pub fn target(&self) -> &AgentTarget {
        &self.agent.target
    }
}

async fn direct_channel(
    address: &http::Uri,
    timeout: Option<Duration>,
) -> Result<(Channel, AgentTarget), ConnectError> {
    // The Uri's Display adds a path ("/") nobody typed.
    let shown = match (address.scheme_str(), address.authority()) {
        (Some(scheme), Some(authority)) => format!("{scheme}://{authority}"),
        _ => address.to_string(),
    };
    let target = AgentTarget::Address(shown);
    let channel = endpoint(Endpoint::from(address.clone()), timeout)
        .connect()
        .await
        .map_err(|err| ConnectError::Unreachable {
            target: target.clone(),
            cause: describe(&err),
        })?;
    Ok((channel, target))
}

fn endpoint(endpoint: Endpoint, timeout: Option<Duration>) -> Endpoint {
    // The timeout bounds connecting and each response's headers, never a stream's messages.
    let endpoint = endpoint
        .http2_keep_alive_interval(KEEP_ALIVE_INTERVAL)
        .keep_alive_timeout(KEEP_ALIVE_TIMEOUT);
    match timeout {
        Some(timeout) => endpoint.timeout(timeout).connect_timeout(timeout),
        None => endpoint,
    }
}

/// Runs `future`, giving up after the request timeout.
async fn bounded<F: Future>(
    timeout: Option<Duration>,
    what: impl FnOnce() -> String,
    future: F,
) -> Result<F::Output, ConnectError> {
    match timeout {
        Some(timeout) => {
            tokio::time::timeout(timeout, future)
                .await
                .map_err(|_| ConnectError::TimedOut {
                    what: what(),
                    timeout,
                })
        }
        None => Ok(future.await),
    }
}

/// A gRPC channel whose every connection is a new port-forward to the agent pod.
async fn port_forward_channel(
    client: Client,
    options: &ConnectOptions,
    forward_error: ForwardError,
) -> Result<(Channel, AgentTarget), ConnectError> {
    let namespace = options.agent_namespace.clone();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    // The Deployment the pods must belong to is read while they are listed.
    let selector = ListParams::default().labels(AGENT_SELECTOR);
    let (list, deployment) = tokio::join!(
        bounded(
            options.timeout,
            || format!("listing pods in namespace {namespace} with selector {AGENT_SELECTOR}"),
            crate::timings::timed("pod-lookup", pods.list(&selector),),
        ),
        bounded(
            options.timeout,
            || format!("reading Deployment {AGENT_DEPLOYMENT} in namespace {namespace}"),
            crate::timings::timed("deployment", agent_deployment(client.clone(), &namespace)),
        ),
    );
    let list = list?.map_err(|err| ConnectError::ListPods {
        namespace: namespace.clone(),
        cause: describe(&err),
    })?;
    let candidates = ready_agent_pods(&list.items);
    let Some(&newest) = candidates.first() else {
        return Err(ConnectError::NoAgentPod { namespace });
    };
    let deployment = deployment??;
    // The newest candidate is nearly always the agent's: its port-forward and HTTP/2
    // handshake are opened while it is checked. No call, so no credential, goes on a
    // connection before its pod has passed the check; one to a pod that fails it is dropped.
    let early_name = newest.metadata.name.clone().unwrap_or_default();
    let early = tokio::spawn(pod_channel(
        pods.clone(),
        early_name.clone(),
        grpc_port(newest),
        options.timeout,
        forward_error.clone(),
    ));
    // Aborted on every early return, so a pod that fails the check is never waited for.
    let early = AbortOnDrop(early);
    let pod = bounded(
        options.timeout,
        || format!("checking the pods in namespace {namespace} with selector {AGENT_SELECTOR}"),
        crate::timings::timed(
            "pod-check",
            checked_agent_pod(client, &namespace, &candidates, deployment.as_ref()),
        ),
    )
    .await??;
    let name = pod.metadata.name.clone().unwrap_or_default();
    let target = AgentTarget::Pod {
        name: name.clone(),
        namespace,
    };
    let channel = if name == early_name {
        early.join().await
    } else {
        drop(early);
        Some(pod_channel(pods, name, grpc_port(pod), options.timeout, forward_error).await)
    };
    let channel = channel.ok_or_else(|| ConnectError::Unreachable {
        target: target.clone(),
        cause: "the task opening the port-forward ended early".to_owned(),
    })?;
    let channel = channel.map_err(|err| ConnectError::Unreachable {
        target: target.clone(),
        cause: describe(&err),
    })?;
    Ok((channel, target))
}

/// A spawned task that is aborted when dropped.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> AbortOnDrop<T> {
    /// Its output; None if it panicked or was aborted.
    async fn join(mut self) -> Option<T> {
        (&mut self.0).await.ok()
    }
}

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A gRPC channel to pod `name`'s `port`, its connection a port-forward through the API server.
async fn pod_channel(
    pods: Api<Pod>,
    name: String,
    port: u16,
    timeout: Option<Duration>,
    forward_error: ForwardError,
) -> Result<Channel, tonic::transport::Error> {
    let connector = tower::service_fn(move |_: http::Uri| {
        let pods = pods.clone();
        let name = name.clone();
        let forward_error = forward_error.clone();
        async move {
            let mut forwarder =
                crate::timings::timed("port-forward", pods.portforward(&name, &[port])).await?;
            let stream = forwarder
                .take_stream(port)
                .ok_or_else(|| std::io::Error::other("the port-forward opened no stream"))?;
            if let Some(error) = forwarder.take_error(port) {
                tokio::spawn(async move {
                    if let Some(message) = error.await
                        && let Ok(mut slot) = forward_error.lock()
                    {
                        *slot = Some(format!("port-forward to port {port} failed: {message}"));
                    }
                });
            }
            Ok::<_, Box<dyn StdError + Send + Sync>>(TokioIo::new(stream))
        }
    });
    // The port-forward upgrade (also timed on its own) and the HTTP/2 handshake over it.
    crate::timings::timed(
        "channel",
        endpoint(Endpoint::from_static("http://tenantflux-agent"), timeout)
            .connect_with_connector(connector),
    )
    .await
}

#[cfg(test)]
mod tests {

    use super::*;

    fn direct(address: &http::Uri, token: &str) -> ConnectOptions {
        ConnectOptions {
            agent_address: Some(address.clone()),
            token: Some(Token::new(token)),
            ..ConnectOptions::for_tests()
        }
    }

    #[tokio::test]
    async fn an_unreachable_address_names_the_agent_and_the_cause() {
        // Bind then drop, so the port is (almost certainly) closed.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address: http::Uri = format!("http://{}", listener.local_addr().unwrap())
            .parse()
            .unwrap();
        drop(listener);
        let err = Agent::connect(&direct(&address, "good"))
            .await
            .err()
            .unwrap();
        let text = err.to_string();
        assert!(
            text.starts_with(&format!(
                "cannot reach tenantflux-agent at {}:",
                address.to_string().trim_end_matches('/')
            )),
            "{text}"
        );
        assert!(text.to_lowercase().contains("connection refused"), "{text}");
    }
}
