//! Reaching tenantflux-agent: a port-forward to its pod through the API server (or a direct
//! address), and the bearer token every call carries.

use std::{
    error::Error as StdError,
    ffi::OsString,
    fmt,
    future::Future,
    str::FromStr,
    sync::{Arc, Mutex},
    time::Duration,
};

use hyper_util::rt::TokioIo;
use k8s_openapi::api::{
    authentication::v1::{TokenRequest, TokenRequestSpec},
    core::v1::{Pod, ServiceAccount},
};
use kube::{
    Api, Client,
    api::{ListParams, PostParams},
    config::{AuthInfo, KubeConfigOptions, Kubeconfig},
};
use secrecy::ExposeSecret as _;
use tenantflux_proto::v1::{
    GetStatusRequest, Status, WatchStatusRequest, agent_client::AgentClient,
    instance_client::InstanceClient, policy_client::PolicyClient, upgrade_client::UpgradeClient,
    workloads_client::WorkloadsClient,
};
use thiserror::Error;
use tonic::{
    Code, Streaming,
    metadata::{Ascii, MetadataValue},
    service::{Interceptor, interceptor::InterceptedService},
    transport::{Channel, Endpoint},
};

use crate::cli::GlobalArgs;

/// Label every tenantflux-agent pod carries (deploy/manifests sets it).
pub const AGENT_SELECTOR: &str = "app.kubernetes.io/name=tenantflux-agent";
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

/// A bearer token. Never printed: Debug redacts it, and it has no Display.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl Token {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into().trim().to_owned())
    }

    fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

impl FromStr for Token {
    type Err = String;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        let token = Self::new(value);
        if token.0.is_empty() {
            Err("the token is empty".to_owned())
        } else {
            Ok(token)
        }
    }
}

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
    /// The ServiceAccount (in `agent_namespace`) whose token is requested for a kubeconfig
    /// user without one.
    pub token_account: String,
    pub timeout: Option<Duration>,
}

impl From<&GlobalArgs> for ConnectOptions {
    fn from(args: &GlobalArgs) -> Self {
        Self {
            kubeconfig: args.kubeconfig.clone(),
            inline_kubeconfig: None,
            context: args.context.clone(),
            namespace: args.namespace.clone(),
            agent_namespace: args.agent_namespace.clone(),
            agent_address: args.agent_address.clone(),
            audience: args.agent_audience.clone(),
            token: args.token.clone(),
            token_account: CLIENT_SERVICE_ACCOUNT.to_owned(),
            timeout: args.request_timeout.get(),
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

#[derive(Debug, Error)]
pub enum ConnectError {
    #[error("cannot load the kubeconfig: {cause}; check --kubeconfig, --context and KUBECONFIG")]
    Kubeconfig { cause: String },

    #[error(
        "no kubeconfig found ({cause}) and not running inside a cluster; pass --kubeconfig or set KUBECONFIG"
    )]
    NoConfig { cause: String },

    #[error("cannot create a Kubernetes client for {cluster}: {cause}")]
    Client { cluster: String, cause: String },

    #[error("timed out after {timeout:?} {what}; retry, or raise --request-timeout")]
    TimedOut { what: String, timeout: Duration },

    #[error("cannot list pods in namespace {namespace} with selector {AGENT_SELECTOR}: {cause}")]
    ListPods { namespace: String, cause: String },

    #[error(
        "no Running and Ready tenantflux-agent pod in namespace {namespace} (selector {AGENT_SELECTOR}); \
         is the agent installed? Check with `kubectl -n {namespace} get pods -l {AGENT_SELECTOR}`, \
         install it with `kubectl apply -k deploy/manifests`, or name its namespace with --agent-namespace"
    )]
    NoAgentPod { namespace: String },

    #[error("cannot reach {target}: {cause}")]
    Unreachable { target: AgentTarget, cause: String },

    #[error("cannot read the kubeconfig user's token file {path}: {cause}")]
    TokenFile { path: String, cause: String },

    #[error(
        "not allowed to request a token for ServiceAccount {account} in namespace {namespace}: {message}; \
         the kubeconfig user needs `create serviceaccounts/token` on {account} in {namespace}, \
         or use a kubeconfig user with a token (or --token)"
    )]
    TokenRequestForbidden {
        account: String,
        namespace: String,
        message: String,
    },

    #[error(
        "ServiceAccount {account} not found in namespace {namespace}, so no token can be requested for it; \
         is the agent installed (`kubectl apply -k deploy/manifests`), or does it run in another namespace (--agent-namespace)?"
    )]
    ClientAccountMissing { account: String, namespace: String },

    #[error(
        "cannot request a token for ServiceAccount {account} in namespace {namespace}: {cause}"
    )]
    TokenRequest {
        account: String,
        namespace: String,
        cause: String,
    },

    #[error("the bearer token contains characters not allowed in gRPC metadata; check --token")]
    InvalidToken,
}

impl ConnectError {
    /// Whether trying again later may succeed: the agent pod or the API server coming back
    /// (e.g. the agent restarting), as opposed to configuration or permissions a retry repeats.
    pub fn is_transient(&self) -> bool {
        match self {
            Self::TimedOut { .. }
            | Self::ListPods { .. }
            | Self::NoAgentPod { .. }
            | Self::Unreachable { .. }
            | Self::TokenRequest { .. } => true,
            Self::Kubeconfig { .. }
            | Self::NoConfig { .. }
            | Self::Client { .. }
            | Self::TokenFile { .. }
            | Self::TokenRequestForbidden { .. }
            | Self::ClientAccountMissing { .. }
            | Self::InvalidToken => false,
        }
    }
}

/// A failed call to the agent, said the way a user can act on.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum CallError {
    #[error("the agent rejected the credentials: {message}")]
    Unauthenticated { message: String },

    #[error("{message}")]
    PermissionDenied { message: String },

    #[error("cannot reach {target}: {cause}")]
    Unavailable { target: AgentTarget, cause: String },

    #[error("{target} did not answer in time ({message}); retry, or raise --request-timeout")]
    DeadlineExceeded {
        target: AgentTarget,
        message: String,
    },

    /// The agent refused the request itself (unknown kind, object not found, bad selector):
    /// its message says what and what to do.
    #[error("{message}")]
    Refused { code: Code, message: String },

    #[error("{target} failed the call ({code:?}): {message}")]
    Other {
        target: AgentTarget,
        code: Code,
        message: String,
    },
}

impl CallError {
    /// Whether the call may succeed on a new connection: the agent or the way to it was
    /// gone, or too slow; the agent's own refusals are repeated by every retry.
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Unavailable { .. } | Self::DeadlineExceeded { .. } => true,
            Self::Unauthenticated { .. }
            | Self::PermissionDenied { .. }
            | Self::Refused { .. }
            | Self::Other { .. } => false,
        }
    }
}

/// Turns a gRPC status into what went wrong; `forward_error` is the port-forward's own
/// report (e.g. the pod refused the connection), clearer than the transport's.
pub fn call_error(
    status: &tonic::Status,
    target: &AgentTarget,
    forward_error: Option<String>,
) -> CallError {
    let message = status.message().to_owned();
    match status.code() {
        Code::Unauthenticated => CallError::Unauthenticated { message },
        Code::PermissionDenied if message.is_empty() => CallError::PermissionDenied {
            message: format!("{target} denied the call without saying which permission is missing"),
        },
        Code::PermissionDenied => CallError::PermissionDenied { message },
        Code::Unavailable => CallError::Unavailable {
            target: target.clone(),
            cause: forward_error.unwrap_or_else(|| status_cause(status)),
        },
        // tonic reports its own request timeout as CANCELLED "Timeout expired".
        Code::Cancelled if message.contains("Timeout expired") => CallError::DeadlineExceeded {
            target: target.clone(),
            message,
        },
        Code::DeadlineExceeded => CallError::DeadlineExceeded {
            target: target.clone(),
            message,
        },
        Code::NotFound | Code::InvalidArgument | Code::FailedPrecondition | Code::Aborted
            if status.source().is_none() =>
        {
            CallError::Refused {
                code: status.code(),
                message,
            }
        }
        // The agent's statuses arrive bare; tonic makes one with a source (an h2, hyper or I/O
        // error) when the connection breaks, whatever code it guesses for it.
        _ if status.source().is_some() => CallError::Unavailable {
            target: target.clone(),
            cause: forward_error.unwrap_or_else(|| status_cause(status)),
        },
        code => CallError::Other {
            target: target.clone(),
            code,
            message,
        },
    }
}

/// A status's message and the transport error beneath it (tonic's Display adds code noise).
fn status_cause(status: &tonic::Status) -> String {
    let message = status.message();
    match status.source() {
        Some(source) => {
            let cause = describe(source);
            if message.is_empty() || cause.contains(message) {
                cause
            } else {
                // tonic's message often repeats the source's ("h2 protocol error: <source>").
                join_causes(vec![message.to_owned()], source)
            }
        }
        None => message.to_owned(),
    }
}

/// An error with its causes, joined with ": " (transport errors hide their cause otherwise).
pub fn describe(err: &(dyn StdError + 'static)) -> String {
    join_causes(Vec::new(), err)
}

/// `parts`, then each of `err`'s causes that no part already says, joined with ": ".
fn join_causes(mut parts: Vec<String>, err: &(dyn StdError + 'static)) -> String {
    let mut next = Some(err);
    while let Some(cause) = next {
        let text = cause.to_string();
        if !text.is_empty() && !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        next = cause.source();
    }
    parts.join(": ")
}

/// Where the bearer token comes from, in order of precedence.
#[derive(Debug, PartialEq, Eq)]
pub enum TokenSource<'a> {
    /// `--token` / TENANTFLUX_TOKEN.
    Flag(&'a Token),
    /// The kubeconfig user's `token`.
    Kubeconfig(Token),
    /// The kubeconfig user's `tokenFile` (also how in-cluster credentials arrive).
    KubeconfigFile(&'a str),
    /// Client certificates, exec plugins and the like have no token to forward.
    TokenRequest,
}

pub fn token_source<'a>(flag: Option<&'a Token>, user: &'a AuthInfo) -> TokenSource<'a> {
    if let Some(token) = flag {
        return TokenSource::Flag(token);
    }
    if let Some(token) = user.token.as_ref().map(|t| t.expose_secret())
        && !token.trim().is_empty()
    {
        return TokenSource::Kubeconfig(Token::new(token));
    }
    match user.token_file.as_deref() {
        Some(path) if !path.is_empty() => TokenSource::KubeconfigFile(path),
        _ => TokenSource::TokenRequest,
    }
}

/// The agent pod a port-forward should go to: Running, Ready, not terminating; newest first.
pub fn pick_agent_pod(pods: &[Pod]) -> Option<&Pod> {
    pods.iter()
        .filter(|pod| pod.metadata.deletion_timestamp.is_none())
        .filter(|pod| {
            let Some(status) = &pod.status else {
                return false;
            };
            let running = status.phase.as_deref() == Some("Running");
            let ready = status
                .conditions
                .iter()
                .flatten()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            running && ready
        })
        .max_by(|a, b| {
            let created = |pod: &Pod| pod.metadata.creation_timestamp.as_ref().map(|t| t.0);
            created(a)
                .cmp(&created(b))
                .then_with(|| b.metadata.name.cmp(&a.metadata.name))
        })
}

/// The pod's container port named `grpc`, or the agent's default port.
pub fn grpc_port(pod: &Pod) -> u16 {
    pod.spec
        .iter()
        .flat_map(|spec| &spec.containers)
        .flat_map(|container| container.ports.iter().flatten())
        .find(|port| port.name.as_deref() == Some("grpc"))
        .and_then(|port| u16::try_from(port.container_port).ok())
        .unwrap_or(DEFAULT_GRPC_PORT)
}

/// Adds `authorization: Bearer <token>` to every call.
#[derive(Clone)]
pub struct BearerAuth(MetadataValue<Ascii>);

impl BearerAuth {
    pub fn new(token: &Token) -> Result<Self, ConnectError> {
        let mut value: MetadataValue<Ascii> = format!("Bearer {}", token.expose())
            .parse()
            .map_err(|_| ConnectError::InvalidToken)?;
        value.set_sensitive(true);
        Ok(Self(value))
    }
}

impl Interceptor for BearerAuth {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        request
            .metadata_mut()
            .insert("authorization", self.0.clone());
        Ok(request)
    }
}

/// The last error the API server reported for a port-forward to the agent pod.
type ForwardError = Arc<Mutex<Option<String>>>;

/// A connected, authenticated client of one tenantflux-agent.
pub struct Agent {
    client: AgentClient<InterceptedService<Channel, BearerAuth>>,
    workloads: WorkloadsClient<InterceptedService<Channel, BearerAuth>>,
    policy: PolicyClient<InterceptedService<Channel, BearerAuth>>,
    instance: InstanceClient<InterceptedService<Channel, BearerAuth>>,
    upgrade: UpgradeClient<InterceptedService<Channel, BearerAuth>>,
    target: AgentTarget,
    forward_error: ForwardError,
    namespace: String,
}

impl Agent {
    pub async fn connect(options: &ConnectOptions) -> Result<Self, ConnectError> {
        let forward_error = ForwardError::default();
        // kubectl's: -n, else the kubeconfig context's namespace, else "default".
        let mut namespace = options
            .namespace
            .clone()
            .unwrap_or_else(|| "default".to_owned());
        let (channel, target, token) = match &options.agent_address {
            Some(address) => {
                let (channel, target) = direct_channel(address, options.timeout).await?;
                let token = match &options.token {
                    // A direct address with an explicit token needs no Kubernetes at all.
                    Some(token) => token.clone(),
                    None => {
                        let (client, user) = kube_client(options).await?;
                        client.default_namespace().clone_into(&mut namespace);
                        resolve_token(options, client, &user).await?
                    }
                };
                (channel, target, token)
            }
            None => {
                let (client, user) = kube_client(options).await?;
                client.default_namespace().clone_into(&mut namespace);
                // The pod first: "agent not installed" explains more than a failed TokenRequest.
                let (channel, target) =
                    port_forward_channel(client.clone(), options, forward_error.clone()).await?;
                let token = resolve_token(options, client, &user).await?;
                (channel, target, token)
            }
        };
        let auth = BearerAuth::new(&token)?;
        Ok(Self {
            client: AgentClient::with_interceptor(channel.clone(), auth.clone()),
            workloads: WorkloadsClient::with_interceptor(channel.clone(), auth.clone()),
            policy: PolicyClient::with_interceptor(channel.clone(), auth.clone()),
            instance: InstanceClient::with_interceptor(channel.clone(), auth.clone()),
            upgrade: UpgradeClient::with_interceptor(channel, auth),
            target,
            forward_error,
            namespace,
        })
    }

    pub async fn get_status(&mut self) -> Result<Status, CallError> {
        match self.client.get_status(GetStatusRequest {}).await {
            Ok(response) => Ok(response.into_inner()),
            Err(status) => Err(self.error(&status)),
        }
    }

    /// Starts a watch: the agent's status now, then again at every change. The watch owns the
    /// connection, and ends when the agent closes the stream or the connection breaks.
    pub async fn watch_status(mut self) -> Result<StatusWatch, CallError> {
        match self.client.watch_status(WatchStatusRequest {}).await {
            Ok(response) => Ok(StatusWatch {
                stream: response.into_inner(),
                agent: self,
            }),
            Err(status) => Err(self.error(&status)),
        }
    }

    /// A client of the agent's Workloads service on the same connection.
    pub fn workloads(&self) -> WorkloadsClient<InterceptedService<Channel, BearerAuth>> {
        self.workloads.clone()
    }

    /// A client of the agent's Policy service on the same connection.
    pub fn policy(&self) -> PolicyClient<InterceptedService<Channel, BearerAuth>> {
        self.policy.clone()
    }

    /// A client of the agent's Instance service on the same connection.
    pub fn instance(&self) -> InstanceClient<InterceptedService<Channel, BearerAuth>> {
        self.instance.clone()
    }

    /// A client of the agent's Upgrade service on the same connection.
    pub fn upgrade(&self) -> UpgradeClient<InterceptedService<Channel, BearerAuth>> {
        self.upgrade.clone()
    }

    /// The namespace commands act in: -n, else the kubeconfig context's.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    pub fn target(&self) -> &AgentTarget {
        &self.target
    }

    pub fn error(&self, status: &tonic::Status) -> CallError {
        let forward_error = self.forward_error.lock().ok().and_then(|e| e.clone());
        call_error(status, &self.target, forward_error)
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
        self.stream
            .message()
            .await
            .map_err(|status| self.agent.error(&status))
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

/// A client for the kubeconfig's cluster, and the kubeconfig user it authenticates as.
pub async fn kube_client(options: &ConnectOptions) -> Result<(Client, AuthInfo), ConnectError> {
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
    let cluster = config.cluster_url.to_string();
    let user = config.auth_info.clone();
    let client = Client::try_from(config).map_err(|err| ConnectError::Client {
        cluster,
        cause: describe(&err),
    })?;
    Ok((client, user))
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

async fn resolve_token(
    options: &ConnectOptions,
    client: Client,
    user: &AuthInfo,
) -> Result<Token, ConnectError> {
    match token_source(options.token.as_ref(), user) {
        TokenSource::Flag(token) => Ok(token.clone()),
        TokenSource::Kubeconfig(token) => Ok(token),
        TokenSource::KubeconfigFile(path) => tokio::fs::read_to_string(path)
            .await
            .map(Token::new)
            .map_err(|err| ConnectError::TokenFile {
                path: path.to_owned(),
                cause: err.to_string(),
            }),
        TokenSource::TokenRequest => {
            let namespace = &options.agent_namespace;
            let account = &options.token_account;
            bounded(
                options.timeout,
                || {
                    format!(
                        "requesting a token for ServiceAccount {account} in namespace {namespace}"
                    )
                },
                request_token(client, namespace, account, &options.audience),
            )
            .await?
        }
    }
}

async fn request_token(
    client: Client,
    namespace: &str,
    account: &str,
    audience: &str,
) -> Result<Token, ConnectError> {
    let accounts: Api<ServiceAccount> = Api::namespaced(client, namespace);
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: vec![audience.to_owned()],
            expiration_seconds: Some(TOKEN_LIFETIME_SECONDS),
            bound_object_ref: None,
        },
        ..TokenRequest::default()
    };
    let response: TokenRequest = accounts
        .create_subresource("token", account, &PostParams::default(), &request)
        .await
        .map_err(|err| match err {
            kube::Error::Api(status) if status.is_forbidden() => {
                ConnectError::TokenRequestForbidden {
                    account: account.to_owned(),
                    namespace: namespace.to_owned(),
                    message: status.message.clone(),
                }
            }
            kube::Error::Api(status) if status.is_not_found() => {
                ConnectError::ClientAccountMissing {
                    account: account.to_owned(),
                    namespace: namespace.to_owned(),
                }
            }
            err => ConnectError::TokenRequest {
                account: account.to_owned(),
                namespace: namespace.to_owned(),
                cause: describe(&err),
            },
        })?;
    response
        .status
        .map(|status| Token::new(status.token))
        .filter(|token| !token.expose().is_empty())
        .ok_or_else(|| ConnectError::TokenRequest {
            account: account.to_owned(),
            namespace: namespace.to_owned(),
            cause: "the API server returned no token".to_owned(),
        })
}

/// A gRPC channel whose every connection is a new port-forward to the agent pod.
async fn port_forward_channel(
    client: Client,
    options: &ConnectOptions,
    forward_error: ForwardError,
) -> Result<(Channel, AgentTarget), ConnectError> {
    let namespace = options.agent_namespace.clone();
    let pods: Api<Pod> = Api::namespaced(client, &namespace);
    let list = bounded(
        options.timeout,
        || format!("listing pods in namespace {namespace} with selector {AGENT_SELECTOR}"),
        pods.list(&ListParams::default().labels(AGENT_SELECTOR)),
    )
    .await?
    .map_err(|err| ConnectError::ListPods {
        namespace: namespace.clone(),
        cause: describe(&err),
    })?;
    let pod = pick_agent_pod(&list.items).ok_or_else(|| ConnectError::NoAgentPod {
        namespace: namespace.clone(),
    })?;
    let name = pod.metadata.name.clone().unwrap_or_default();
    let port = grpc_port(pod);
    let target = AgentTarget::Pod {
        name: name.clone(),
        namespace,
    };

    let connector = tower::service_fn(move |_: http::Uri| {
        let pods = pods.clone();
        let name = name.clone();
        let forward_error = forward_error.clone();
        async move {
            let mut forwarder = pods.portforward(&name, &[port]).await?;
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
    let channel = endpoint(
        Endpoint::from_static("http://tenantflux-agent"),
        options.timeout,
    )
    .connect_with_connector(connector)
    .await
    .map_err(|err| ConnectError::Unreachable {
        target: target.clone(),
        cause: describe(&err),
    })?;
    Ok((channel, target))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::{
        api::core::v1::{Container, ContainerPort, PodCondition, PodSpec, PodStatus},
        apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time},
        jiff::Timestamp,
    };
    use secrecy::SecretString;

    use super::*;

    fn pod(name: &str, created: i64, phase: &str, ready: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                creation_timestamp: Some(Time(Timestamp::from_second(created).unwrap())),
                ..ObjectMeta::default()
            },
            status: Some(PodStatus {
                phase: Some(phase.to_owned()),
                conditions: Some(vec![PodCondition {
                    type_: "Ready".to_owned(),
                    status: ready.to_owned(),
                    ..PodCondition::default()
                }]),
                ..PodStatus::default()
            }),
            ..Pod::default()
        }
    }

    fn name(pod: Option<&Pod>) -> Option<&str> {
        pod.and_then(|p| p.metadata.name.as_deref())
    }

    #[test]
    fn picks_the_newest_running_ready_pod() {
        let pods = vec![
            pod("old", 100, "Running", "True"),
            pod("new", 300, "Running", "True"),
            pod("mid", 200, "Running", "True"),
        ];
        assert_eq!(name(pick_agent_pod(&pods)), Some("new"));
    }

    #[test]
    fn skips_pods_that_are_not_running_ready_or_are_terminating() {
        let mut terminating = pod("terminating", 900, "Running", "True");
        terminating.metadata.deletion_timestamp = Some(Time(Timestamp::from_second(950).unwrap()));
        let pods = vec![
            pod("pending", 800, "Pending", "False"),
            pod("unready", 700, "Running", "False"),
            pod("unknown", 600, "Running", "Unknown"),
            terminating,
            pod("good", 100, "Running", "True"),
        ];
        assert_eq!(name(pick_agent_pod(&pods)), Some("good"));
        assert_eq!(name(pick_agent_pod(&pods[..4])), None);
        assert_eq!(name(pick_agent_pod(&[])), None);
        let no_status = Pod {
            status: None,
            ..pod("bare", 1, "Running", "True")
        };
        assert_eq!(name(pick_agent_pod(&[no_status])), None);
    }

    #[test]
    fn grpc_port_comes_from_the_named_container_port() {
        let port = |name: &str, number: i32| ContainerPort {
            name: Some(name.to_owned()),
            container_port: number,
            ..ContainerPort::default()
        };
        let mut agent = pod("a", 1, "Running", "True");
        agent.spec = Some(PodSpec {
            containers: vec![Container {
                name: "agent".to_owned(),
                ports: Some(vec![port("admin", 8080), port("grpc", 9443)]),
                ..Container::default()
            }],
            ..PodSpec::default()
        });
        assert_eq!(grpc_port(&agent), 9443);
        agent.spec.as_mut().unwrap().containers[0].ports = Some(vec![port("admin", 8080)]);
        assert_eq!(grpc_port(&agent), DEFAULT_GRPC_PORT);
        assert_eq!(
            grpc_port(&pod("b", 1, "Running", "True")),
            DEFAULT_GRPC_PORT
        );
    }

    #[test]
    fn token_precedence_flag_then_kubeconfig_token_then_file_then_token_request() {
        let flag = Token::new("from-flag");
        let with_token = AuthInfo {
            token: Some(SecretString::from("from-kubeconfig".to_owned())),
            token_file: Some("/var/run/token".to_owned()),
            ..AuthInfo::default()
        };
        let with_file = AuthInfo {
            token_file: Some("/var/run/token".to_owned()),
            ..AuthInfo::default()
        };
        let with_cert = AuthInfo {
            client_certificate_data: Some("cert".to_owned()),
            ..AuthInfo::default()
        };
        assert_eq!(
            token_source(Some(&flag), &with_token),
            TokenSource::Flag(&flag)
        );
        assert_eq!(
            token_source(Some(&flag), &with_cert),
            TokenSource::Flag(&flag)
        );
        assert_eq!(
            token_source(None, &with_token),
            TokenSource::Kubeconfig(Token::new("from-kubeconfig"))
        );
        assert_eq!(
            token_source(None, &with_file),
            TokenSource::KubeconfigFile("/var/run/token")
        );
        assert_eq!(token_source(None, &with_cert), TokenSource::TokenRequest);
        assert_eq!(
            token_source(None, &AuthInfo::default()),
            TokenSource::TokenRequest
        );
        let blank = AuthInfo {
            token: Some(SecretString::from("  ".to_owned())),
            ..AuthInfo::default()
        };
        assert_eq!(token_source(None, &blank), TokenSource::TokenRequest);
    }

    #[test]
    fn tokens_never_show_in_debug_output() {
        let token = Token::new("s3cr3t-value");
        assert!(!format!("{token:?}").contains("s3cr3t"));
        let auth = BearerAuth::new(&token).unwrap();
        assert!(!format!("{:?}", auth.0).contains("s3cr3t"));
        let options = ConnectOptions {
            kubeconfig: None,
            inline_kubeconfig: None,
            context: None,
            namespace: None,
            agent_namespace: "tenantflux-system".to_owned(),
            agent_address: None,
            audience: "tenantflux-agent".to_owned(),
            token: Some(token),
            token_account: CLIENT_SERVICE_ACCOUNT.to_owned(),
            timeout: None,
        };
        assert!(!format!("{options:?}").contains("s3cr3t"));
        assert!("   ".parse::<Token>().is_err());
    }

    #[test]
    fn interceptor_sets_the_bearer_header() {
        let mut auth = BearerAuth::new(&Token::new("abc")).unwrap();
        let request = auth.call(tonic::Request::new(())).unwrap();
        assert_eq!(
            request
                .metadata()
                .get("authorization")
                .unwrap()
                .to_str()
                .unwrap(),
            "Bearer abc"
        );
        assert!(matches!(
            BearerAuth::new(&Token::new("bad\ntoken")),
            Err(ConnectError::InvalidToken)
        ));
    }

    #[test]
    fn grpc_codes_map_to_actionable_errors() {
        let pod = AgentTarget::Pod {
            name: "tenantflux-agent-abc".to_owned(),
            namespace: "tenantflux-system".to_owned(),
        };
        let unauth = call_error(&tonic::Status::unauthenticated("token expired"), &pod, None);
        assert_eq!(
            unauth.to_string(),
            "the agent rejected the credentials: token expired"
        );
        let denied = call_error(
            &tonic::Status::permission_denied(
                "user alice cannot get agents/status (tenantflux.io) in namespace tenantflux-system",
            ),
            &pod,
            None,
        );
        assert_eq!(
            denied.to_string(),
            "user alice cannot get agents/status (tenantflux.io) in namespace tenantflux-system"
        );
        let unavailable = call_error(
            &tonic::Status::unavailable("connection refused"),
            &pod,
            None,
        );
        assert_eq!(
            unavailable.to_string(),
            "cannot reach tenantflux-agent pod tenantflux-agent-abc in namespace tenantflux-system: connection refused"
        );
        let forwarded = call_error(
            &tonic::Status::unavailable("h2 protocol error"),
            &pod,
            Some("port-forward to port 9090 failed: connection refused".to_owned()),
        );
        assert!(
            forwarded
                .to_string()
                .ends_with("port-forward to port 9090 failed: connection refused")
        );
        let address = AgentTarget::Address("http://127.0.0.1:1/".to_owned());
        let other = call_error(&tonic::Status::internal("boom"), &address, None);
        assert_eq!(
            other,
            CallError::Other {
                target: address.clone(),
                code: Code::Internal,
                message: "boom".to_owned()
            }
        );
        assert!(matches!(
            call_error(&tonic::Status::deadline_exceeded("late"), &address, None),
            CallError::DeadlineExceeded { .. }
        ));
        assert!(matches!(
            call_error(&tonic::Status::cancelled("Timeout expired"), &address, None),
            CallError::DeadlineExceeded { .. }
        ));
        assert!(matches!(
            call_error(
                &tonic::Status::cancelled("client went away"),
                &address,
                None
            ),
            CallError::Other {
                code: Code::Cancelled,
                ..
            }
        ));
    }

    #[test]
    fn a_broken_connection_is_unavailable_whatever_code_tonic_guesses() {
        let pod = AgentTarget::Pod {
            name: "tenantflux-agent-abc".to_owned(),
            namespace: "tenantflux-system".to_owned(),
        };
        // How tonic reports a stream whose connection went away: Unknown, with the I/O error
        // beneath it; the agent's own Unknown has no source.
        let broken = tonic::Status::from_error(Box::new(std::io::Error::from(
            std::io::ErrorKind::UnexpectedEof,
        )));
        assert_eq!(broken.code(), Code::Unknown);
        let err = call_error(&broken, &pod, None);
        assert!(matches!(err, CallError::Unavailable { .. }), "{err:?}");
        assert!(err.is_transient());
        let forwarded = call_error(
            &broken,
            &pod,
            Some("port-forward to port 9090 failed: pod deleted".to_owned()),
        );
        assert!(
            forwarded
                .to_string()
                .ends_with("port-forward to port 9090 failed: pod deleted")
        );
        assert!(matches!(
            call_error(&tonic::Status::unknown("boom"), &pod, None),
            CallError::Other {
                code: Code::Unknown,
                ..
            }
        ));
    }

    #[test]
    fn only_unreachable_or_slow_agents_are_worth_retrying() {
        let target = AgentTarget::Address("http://127.0.0.1:1".to_owned());
        let transient = |status: tonic::Status| call_error(&status, &target, None).is_transient();
        assert!(transient(tonic::Status::unavailable("connection refused")));
        assert!(transient(tonic::Status::deadline_exceeded("late")));
        assert!(transient(tonic::Status::cancelled("Timeout expired")));
        assert!(!transient(tonic::Status::unauthenticated("token expired")));
        assert!(!transient(tonic::Status::permission_denied("no")));
        assert!(!transient(tonic::Status::unimplemented("old agent")));
        assert!(!transient(tonic::Status::internal("boom")));

        let namespace = || "tenantflux-system".to_owned();
        let cause = || "connection refused".to_owned();
        for err in [
            ConnectError::TimedOut {
                what: "listing pods".to_owned(),
                timeout: Duration::from_secs(30),
            },
            ConnectError::ListPods {
                namespace: namespace(),
                cause: cause(),
            },
            ConnectError::NoAgentPod {
                namespace: namespace(),
            },
            ConnectError::Unreachable {
                target: target.clone(),
                cause: cause(),
            },
            ConnectError::TokenRequest {
                account: CLIENT_SERVICE_ACCOUNT.to_owned(),
                namespace: namespace(),
                cause: cause(),
            },
        ] {
            assert!(err.is_transient(), "{err}");
        }
        for err in [
            ConnectError::Kubeconfig { cause: cause() },
            ConnectError::NoConfig { cause: cause() },
            ConnectError::Client {
                cluster: "https://k8s".to_owned(),
                cause: cause(),
            },
            ConnectError::TokenFile {
                path: "/token".to_owned(),
                cause: cause(),
            },
            ConnectError::TokenRequestForbidden {
                account: CLIENT_SERVICE_ACCOUNT.to_owned(),
                namespace: namespace(),
                message: "forbidden".to_owned(),
            },
            ConnectError::ClientAccountMissing {
                account: CLIENT_SERVICE_ACCOUNT.to_owned(),
                namespace: namespace(),
            },
            ConnectError::InvalidToken,
        ] {
            assert!(!err.is_transient(), "{err}");
        }
    }

    fn direct(address: &http::Uri, token: &str) -> ConnectOptions {
        ConnectOptions {
            kubeconfig: None,
            inline_kubeconfig: None,
            context: None,
            namespace: None,
            agent_namespace: "tenantflux-system".to_owned(),
            agent_address: Some(address.clone()),
            audience: "tenantflux-agent".to_owned(),
            token: Some(Token::new(token)),
            token_account: CLIENT_SERVICE_ACCOUNT.to_owned(),
            timeout: Some(Duration::from_secs(5)),
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

    #[test]
    fn no_agent_pod_error_names_namespace_selector_and_remedy() {
        let text = ConnectError::NoAgentPod {
            namespace: "tf".to_owned(),
        }
        .to_string();
        assert!(text.contains("namespace tf"));
        assert!(text.contains("app.kubernetes.io/name=tenantflux-agent"));
        assert!(text.contains("kubectl -n tf get pods -l app.kubernetes.io/name=tenantflux-agent"));
        assert!(text.contains("kubectl apply -k deploy/manifests"));
    }

    #[test]
    fn a_status_cause_says_each_part_once() {
        #[derive(Debug, Error)]
        #[error("error reading a body from connection")]
        struct Body(#[source] std::io::Error);
        let mut status =
            tonic::Status::unknown("h2 protocol error: error reading a body from connection");
        status.set_source(Arc::new(Body(std::io::Error::other(
            "stream closed because of a broken pipe",
        ))));
        assert_eq!(
            status_cause(&status),
            "h2 protocol error: error reading a body from connection: stream closed because of a broken pipe"
        );
    }

    #[test]
    fn describe_joins_causes_without_repeating_them() {
        let inner = std::io::Error::other("connection refused");
        #[derive(Debug, Error)]
        #[error("transport error")]
        struct Outer(#[source] std::io::Error);
        assert_eq!(
            describe(&Outer(inner)),
            "transport error: connection refused"
        );
    }
}
