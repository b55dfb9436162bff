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
use k8s_openapi::{
    api::{
        apps::v1::{Deployment, ReplicaSet},
        authentication::v1::{TokenRequest, TokenRequestSpec},
        certificates::v1::{CertificateSigningRequest, CertificateSigningRequestSpec},
        core::v1::{Pod, ServiceAccount},
    },
    apimachinery::pkg::apis::meta::v1::OwnerReference,
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
    /// Say on stderr which pod was checked and what credential is sent to it.
    pub verbose: bool,
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
            verbose: std::env::var_os(VERBOSE_ENV).is_some_and(|v| !v.is_empty() && v != "0"),
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

    #[error(
        "cannot check that the pods in namespace {namespace} with selector {AGENT_SELECTOR} are tenantflux-agent's \
         (no credential is sent to an unchecked pod): {cause}"
    )]
    CheckPods { namespace: String, cause: String },

    #[error(
        "not allowed to check that the pods in namespace {namespace} with selector {AGENT_SELECTOR} are tenantflux-agent's \
         (no credential is sent to an unchecked pod): {message}; the kubeconfig user needs `get` on \
         deployments/{AGENT_DEPLOYMENT} and on replicasets in {namespace} (the Role tenantflux-user of deploy/ grants both)"
    )]
    CheckPodsForbidden { namespace: String, message: String },

    #[error(
        "refused every pod in namespace {namespace} with selector {AGENT_SELECTOR}, and sent them no credential: {refused}. \
         The agent's pod runs as ServiceAccount {AGENT_SERVICE_ACCOUNT} and belongs to Deployment {AGENT_DEPLOYMENT}; \
         ask the cluster's admins who created these pods (`kubectl -n {namespace} get pods -l {AGENT_SELECTOR} -o yaml`)"
    )]
    NotTheAgent { namespace: String, refused: String },

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

    #[error(
        "cannot create the CertificateSigningRequest that proves who you are to the agent: {cause}"
    )]
    IdentityCsr { cause: String },

    #[error(
        "no token audience given (--agent-audience is empty): a token without one would be valid \
         for the API server itself, so none is requested; use the agent's --token-audience (default tenantflux-agent)"
    )]
    NoAudience,
}

impl ConnectError {
    /// Whether trying again later may succeed: the agent pod or the API server coming back
    /// (e.g. the agent restarting), as opposed to configuration or permissions a retry repeats.
    pub fn is_transient(&self) -> bool {
        match self {
            Self::TimedOut { .. }
            | Self::ListPods { .. }
            | Self::NoAgentPod { .. }
            | Self::CheckPods { .. }
            | Self::Unreachable { .. }
            | Self::TokenRequest { .. }
            | Self::IdentityCsr { .. } => true,
            Self::Kubeconfig { .. }
            | Self::NoConfig { .. }
            | Self::Client { .. }
            | Self::TokenFile { .. }
            | Self::TokenRequestForbidden { .. }
            | Self::ClientAccountMissing { .. }
            | Self::CheckPodsForbidden { .. }
            | Self::NotTheAgent { .. }
            | Self::InvalidToken
            | Self::NoAudience => false,
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

/// What is sent, as `TENANTFLUX_VERBOSE` says it (never the token). A token forwarded from
/// the flag or the kubeconfig is one the API server accepts: whoever holds it can act as the
/// user until it expires, so it goes only to a checked pod.
impl fmt::Display for TokenSource<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Flag(_) => f.write_str("the bearer token of --token (TENANTFLUX_TOKEN)"),
            Self::Kubeconfig(_) => f.write_str("the kubeconfig user's own bearer token"),
            Self::KubeconfigFile(path) => {
                write!(
                    f,
                    "the bearer token in the kubeconfig user's tokenFile {path}"
                )
            }
            Self::TokenRequest => f.write_str("a TokenRequest token"),
        }
    }
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

/// The pods a port-forward may go to: Running, Ready, not terminating; newest first.
pub fn ready_agent_pods(pods: &[Pod]) -> Vec<&Pod> {
    let mut ready: Vec<&Pod> = pods
        .iter()
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
        .collect();
    let created = |pod: &Pod| pod.metadata.creation_timestamp.as_ref().map(|t| t.0);
    ready.sort_by(|a, b| {
        created(b)
            .cmp(&created(a))
            .then_with(|| a.metadata.name.cmp(&b.metadata.name))
    });
    ready
}

/// The name of the ReplicaSet that controls `pod`, if a ReplicaSet does.
pub fn controlling_replica_set(pod: &Pod) -> Option<&str> {
    controller(&pod.metadata.owner_references, "ReplicaSet").map(|owner| owner.name.as_str())
}

fn controller<'a>(
    owners: &'a Option<Vec<OwnerReference>>,
    kind: &str,
) -> Option<&'a OwnerReference> {
    owners
        .iter()
        .flatten()
        .find(|owner| owner.controller == Some(true))
        .filter(|owner| owner.kind == kind && owner.api_version == "apps/v1")
}

/// Whether `pod` is tenantflux-agent's, so that a credential may be sent to it: it runs as
/// ServiceAccount tenantflux-agent, and its controller is a ReplicaSet (`replica_set`, as
/// read from the API server) whose controller is Deployment tenantflux-agent (`deployment`).
/// The agent's labels alone prove nothing: whoever may create a pod sets them. Err says why
/// not, in words for the user.
pub fn check_agent_pod(
    pod: &Pod,
    replica_set: Option<&ReplicaSet>,
    deployment: Option<&Deployment>,
) -> Result<(), String> {
    let spec = pod.spec.as_ref();
    let account = spec
        .and_then(|s| s.service_account_name.as_deref())
        .unwrap_or("default");
    if account != AGENT_SERVICE_ACCOUNT {
        return Err(format!(
            "it runs as ServiceAccount {account}, not {AGENT_SERVICE_ACCOUNT}"
        ));
    }
    let Some(owner) = controller(&pod.metadata.owner_references, "ReplicaSet") else {
        return Err(format!(
            "it was not created by a ReplicaSet of Deployment {AGENT_DEPLOYMENT}"
        ));
    };
    let Some(replica_set) = replica_set.filter(|rs| rs.metadata.uid.as_deref() == Some(&owner.uid))
    else {
        return Err(format!(
            "its ReplicaSet {} does not exist (or is another one by that name)",
            owner.name
        ));
    };
    let of_deployment = controller(&replica_set.metadata.owner_references, "Deployment")
        .filter(|owner| owner.name == AGENT_DEPLOYMENT);
    let (Some(rs_owner), Some(deployment)) = (of_deployment, deployment) else {
        return Err(format!(
            "its ReplicaSet {} does not belong to Deployment {AGENT_DEPLOYMENT}",
            owner.name
        ));
    };
    if deployment.metadata.uid.as_deref() != Some(&rs_owner.uid) {
        return Err(format!(
            "its ReplicaSet {} belongs to an earlier Deployment {AGENT_DEPLOYMENT}, since deleted",
            owner.name
        ));
    }
    Ok(())
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

/// What calls carry: a bearer token, or a proof of the caller's identity.
pub enum Credential {
    Bearer(Token),
    Identity(Box<IdentityCsr>),
}

/// A CertificateSigningRequest this process created to prove its user's identity, and the
/// key in it (see `tenantflux_core::identity`).
pub struct IdentityCsr {
    name: String,
    key: tenantflux_core::identity::SigningKey,
    audience: String,
    namespace: String,
}

/// Adds `authorization: Bearer <token>`, or a fresh caller-identity proof, to every call.
#[derive(Clone)]
pub enum BearerAuth {
    Token(MetadataValue<Ascii>),
    Proof {
        csr: MetadataValue<Ascii>,
        name: String,
        key: Arc<tenantflux_core::identity::SigningKey>,
        audience: String,
        namespace: String,
    },
}

impl BearerAuth {
    pub fn new(token: &Token) -> Result<Self, ConnectError> {
        let mut value: MetadataValue<Ascii> = format!("Bearer {}", token.expose())
            .parse()
            .map_err(|_| ConnectError::InvalidToken)?;
        value.set_sensitive(true);
        Ok(Self::Token(value))
    }

    fn from_credential(credential: Credential) -> Result<Self, ConnectError> {
        match credential {
            Credential::Bearer(token) => Self::new(&token),
            Credential::Identity(csr) => {
                let csr = *csr;
                Ok(Self::Proof {
                    // CSR names are DNS subdomains: ASCII.
                    csr: csr.name.parse().map_err(|_| ConnectError::InvalidToken)?,
                    name: csr.name,
                    key: Arc::new(csr.key),
                    audience: csr.audience,
                    namespace: csr.namespace,
                })
            }
        }
    }
}

impl Interceptor for BearerAuth {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        match self {
            Self::Token(value) => {
                request
                    .metadata_mut()
                    .insert("authorization", value.clone());
            }
            Self::Proof {
                csr,
                name,
                key,
                audience,
                namespace,
            } => {
                use tenantflux_core::identity;
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs() as i64);
                let proof = identity::sign_proof(key, name, audience, namespace, now);
                let mut proof: MetadataValue<Ascii> = proof
                    .parse()
                    .map_err(|_| tonic::Status::internal("the identity proof is not ASCII"))?;
                proof.set_sensitive(true);
                let metadata = request.metadata_mut();
                metadata.insert(identity::CSR_METADATA, csr.clone());
                metadata.insert(identity::PROOF_METADATA, proof);
            }
        }
        Ok(request)
    }
}

/// The identity CSRs this process created, deleted by [`delete_identity_csrs`] when the
/// command ends.
static IDENTITY_CSRS: Mutex<Vec<(Client, String)>> = Mutex::new(Vec::new());

/// Deletes the CSRs this process created to prove its user's identity. One left behind (the
/// process killed) proves nothing without its key, which never left the process; the
/// controller-manager removes pending CSRs after a day.
pub async fn delete_identity_csrs() {
    let created = std::mem::take(&mut *IDENTITY_CSRS.lock().unwrap_or_else(|p| p.into_inner()));
    for (client, name) in created {
        let api: Api<CertificateSigningRequest> = Api::all(client);
        if let Err(err) = api.delete(&name, &Default::default()).await {
            eprintln!(
                "warning: could not delete CertificateSigningRequest {name}, which proved who you are to the agent: {}",
                describe(&err)
            );
        }
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
        let (channel, target, (token, credential)) = match &options.agent_address {
            Some(address) => {
                let (channel, target) = direct_channel(address, options.timeout).await?;
                let token = match &options.token {
                    // A direct address with an explicit token needs no Kubernetes at all.
                    Some(token) => (
                        Credential::Bearer(token.clone()),
                        TokenSource::Flag(token).to_string(),
                    ),
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
                // The pod first: "agent not installed" explains more than a failed TokenRequest,
                // and no token is requested or read for a pod that is not the agent's.
                let (channel, target) =
                    port_forward_channel(client.clone(), options, forward_error.clone()).await?;
                let token = resolve_token(options, client, &user).await?;
                (channel, target, token)
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

/// The credential calls carry, and what it is (for `TENANTFLUX_VERBOSE`).
async fn resolve_token(
    options: &ConnectOptions,
    client: Client,
    user: &AuthInfo,
) -> Result<(Credential, String), ConnectError> {
    let source = token_source(options.token.as_ref(), user);
    let what = source.to_string();
    match source {
        TokenSource::Flag(token) => Ok((Credential::Bearer(token.clone()), what)),
        TokenSource::Kubeconfig(token) => Ok((Credential::Bearer(token), what)),
        TokenSource::KubeconfigFile(path) => tokio::fs::read_to_string(path)
            .await
            .map(|text| (Credential::Bearer(Token::new(text)), what))
            .map_err(|err| ConnectError::TokenFile {
                path: path.to_owned(),
                cause: err.to_string(),
            }),
        TokenSource::TokenRequest => {
            let namespace = &options.agent_namespace;
            let account = &options.token_account;
            let audience = &options.audience;
            // A user without a token proves who they are, so the agent authorizes them and
            // not a borrowed account; the fleet acts as its own account by design.
            if account == CLIENT_SERVICE_ACCOUNT {
                let identity = bounded(
                    options.timeout,
                    || "creating the CertificateSigningRequest that proves who you are".to_owned(),
                    create_identity_csr(client.clone(), audience, namespace),
                )
                .await??;
                match identity {
                    Ok(csr) => {
                        let what = format!(
                            "a proof of your identity with CertificateSigningRequest {} (signer {}, never approved; deleted when the command ends)",
                            csr.name,
                            tenantflux_core::identity::SIGNER_NAME
                        );
                        return Ok((Credential::Identity(Box::new(csr)), what));
                    }
                    Err(forbidden) => eprintln!(
                        "note: you may not create CertificateSigningRequests ({forbidden}), so the agent cannot \
                         tell who you are: acting as ServiceAccount {namespace}/{account}, whose RBAC decides \
                         what you may do; ask for `create certificatesigningrequests` (see the README) to act as yourself"
                    ),
                }
            }
            let what = format!(
                "a TokenRequest token of ServiceAccount {account} in namespace {namespace} \
                 (audience {audience}, valid {TOKEN_LIFETIME_SECONDS} s)"
            );
            bounded(
                options.timeout,
                || {
                    format!(
                        "requesting a token for ServiceAccount {account} in namespace {namespace}"
                    )
                },
                request_token(client, namespace, account, audience),
            )
            .await?
            .map(|token| (Credential::Bearer(token), what))
        }
    }
}

/// Creates an identity CSR with a fresh key. `Ok(Err(message))`: the user may not create
/// CSRs (the caller falls back to the ServiceAccount).
async fn create_identity_csr(
    client: Client,
    audience: &str,
    namespace: &str,
) -> Result<Result<IdentityCsr, String>, ConnectError> {
    use tenantflux_core::identity;
    let key =
        tenantflux_core::policy::signing::generate().map_err(|err| ConnectError::IdentityCsr {
            cause: describe(&err),
        })?;
    // The key is random; its first bytes make the name unique.
    let suffix: String = key.verifying_key().as_bytes()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let name = format!("tenantflux-caller-{suffix}");
    let csr = CertificateSigningRequest {
        metadata: kube::api::ObjectMeta {
            name: Some(name.clone()),
            labels: Some(
                [(
                    "app.kubernetes.io/part-of".to_owned(),
                    "tenantflux".to_owned(),
                )]
                .into(),
            ),
            ..Default::default()
        },
        spec: CertificateSigningRequestSpec {
            request: k8s_openapi::ByteString(
                identity::csr_pem(&key, "tenantflux caller identity").into_bytes(),
            ),
            signer_name: identity::SIGNER_NAME.to_owned(),
            usages: Some(vec!["digital signature".to_owned()]),
            expiration_seconds: Some(600),
            ..Default::default()
        },
        status: None,
    };
    let api: Api<CertificateSigningRequest> = Api::all(client.clone());
    match api.create(&PostParams::default(), &csr).await {
        Ok(_) => {
            IDENTITY_CSRS
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((client, name.clone()));
            Ok(Ok(IdentityCsr {
                name,
                key,
                audience: audience.to_owned(),
                namespace: namespace.to_owned(),
            }))
        }
        Err(kube::Error::Api(status)) if status.is_forbidden() => Ok(Err(status.message)),
        Err(err) => Err(ConnectError::IdentityCsr {
            cause: describe(&err),
        }),
    }
}

async fn request_token(
    client: Client,
    namespace: &str,
    account: &str,
    audience: &str,
) -> Result<Token, ConnectError> {
    // The API server gives a token requested without an audience its own: one that works
    // against the API server, not only against the agent.
    if audience.trim().is_empty() {
        return Err(ConnectError::NoAudience);
    }
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

/// The newest of `candidates` that is tenantflux-agent's ([`check_agent_pod`]). Pods with the
/// agent's labels that are not its are named: in a warning when the agent's pod is there
/// too, in the error when it is not.
async fn checked_agent_pod<'a>(
    client: Client,
    namespace: &str,
    candidates: &[&'a Pod],
) -> Result<&'a Pod, ConnectError> {
    let read_error = |err: kube::Error| match err {
        kube::Error::Api(status) if status.is_forbidden() => ConnectError::CheckPodsForbidden {
            namespace: namespace.to_owned(),
            message: status.message.clone(),
        },
        err => ConnectError::CheckPods {
            namespace: namespace.to_owned(),
            cause: describe(&err),
        },
    };
    let deployment = Api::<Deployment>::namespaced(client.clone(), namespace)
        .get_opt(AGENT_DEPLOYMENT)
        .await
        .map_err(read_error)?;
    let replica_sets: Api<ReplicaSet> = Api::namespaced(client, namespace);
    let mut refused = Vec::new();
    for &pod in candidates {
        let replica_set = match controlling_replica_set(pod) {
            Some(name) => replica_sets.get_opt(name).await.map_err(read_error)?,
            None => None,
        };
        let name = pod.metadata.name.clone().unwrap_or_default();
        match check_agent_pod(pod, replica_set.as_ref(), deployment.as_ref()) {
            Ok(()) => {
                for (other, why) in &refused {
                    eprintln!(
                        "warning: ignored pod {other} in namespace {namespace}: it has the agent's labels, but {why}"
                    );
                }
                return Ok(pod);
            }
            Err(why) => refused.push((name, why)),
        }
    }
    Err(ConnectError::NotTheAgent {
        namespace: namespace.to_owned(),
        refused: refused
            .iter()
            .map(|(name, why)| format!("pod {name}: {why}"))
            .collect::<Vec<_>>()
            .join("; "),
    })
}

/// A gRPC channel whose every connection is a new port-forward to the agent pod.
async fn port_forward_channel(
    client: Client,
    options: &ConnectOptions,
    forward_error: ForwardError,
) -> Result<(Channel, AgentTarget), ConnectError> {
    let namespace = options.agent_namespace.clone();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
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
    let candidates = ready_agent_pods(&list.items);
    if candidates.is_empty() {
        return Err(ConnectError::NoAgentPod { namespace });
    }
    let pod = bounded(
        options.timeout,
        || format!("checking the pods in namespace {namespace} with selector {AGENT_SELECTOR}"),
        checked_agent_pod(client, &namespace, &candidates),
    )
    .await??;
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

    fn names<'a>(pods: &[&'a Pod]) -> Vec<&'a str> {
        pods.iter()
            .filter_map(|p| p.metadata.name.as_deref())
            .collect()
    }

    #[test]
    fn candidates_are_the_running_ready_pods_newest_first() {
        let pods = vec![
            pod("old", 100, "Running", "True"),
            pod("new", 300, "Running", "True"),
            pod("mid", 200, "Running", "True"),
        ];
        assert_eq!(names(&ready_agent_pods(&pods)), ["new", "mid", "old"]);
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
        assert_eq!(names(&ready_agent_pods(&pods)), ["good"]);
        assert!(ready_agent_pods(&pods[..4]).is_empty());
        assert!(ready_agent_pods(&[]).is_empty());
        let no_status = Pod {
            status: None,
            ..pod("bare", 1, "Running", "True")
        };
        assert!(ready_agent_pods(&[no_status]).is_empty());
    }

    fn owner(kind: &str, name: &str, uid: &str) -> OwnerReference {
        OwnerReference {
            api_version: "apps/v1".to_owned(),
            kind: kind.to_owned(),
            name: name.to_owned(),
            uid: uid.to_owned(),
            controller: Some(true),
            ..OwnerReference::default()
        }
    }

    /// The agent's pod as the Deployment's ReplicaSet creates it, with that ReplicaSet and
    /// Deployment.
    fn agent_pod() -> (Pod, ReplicaSet, Deployment) {
        let mut pod = pod("tenantflux-agent-7d9f-x2x", 1, "Running", "True");
        pod.spec = Some(PodSpec {
            service_account_name: Some("tenantflux-agent".to_owned()),
            ..PodSpec::default()
        });
        pod.metadata.owner_references =
            Some(vec![owner("ReplicaSet", "tenantflux-agent-7d9f", "rs-uid")]);
        let replica_set = ReplicaSet {
            metadata: ObjectMeta {
                name: Some("tenantflux-agent-7d9f".to_owned()),
                uid: Some("rs-uid".to_owned()),
                owner_references: Some(vec![owner("Deployment", "tenantflux-agent", "deploy-uid")]),
                ..ObjectMeta::default()
            },
            ..ReplicaSet::default()
        };
        let deployment = Deployment {
            metadata: ObjectMeta {
                name: Some("tenantflux-agent".to_owned()),
                uid: Some("deploy-uid".to_owned()),
                ..ObjectMeta::default()
            },
            ..Deployment::default()
        };
        (pod, replica_set, deployment)
    }

    #[test]
    fn the_agents_pod_runs_as_its_account_and_belongs_to_its_deployment() {
        let (pod, rs, deployment) = agent_pod();
        assert_eq!(check_agent_pod(&pod, Some(&rs), Some(&deployment)), Ok(()));
        assert_eq!(controlling_replica_set(&pod), Some("tenantflux-agent-7d9f"));
    }

    #[test]
    fn a_pod_with_the_agents_labels_only_is_refused_with_the_reason() {
        let (agent, rs, deployment) = agent_pod();
        let refused = |pod: &Pod, rs: Option<&ReplicaSet>, deployment: Option<&Deployment>| {
            check_agent_pod(pod, rs, deployment).unwrap_err()
        };

        let mut other_account = agent.clone();
        other_account.spec.as_mut().unwrap().service_account_name = Some("default".to_owned());
        assert_eq!(
            refused(&other_account, Some(&rs), Some(&deployment)),
            "it runs as ServiceAccount default, not tenantflux-agent"
        );
        let no_account = Pod {
            spec: None,
            ..agent.clone()
        };
        assert!(refused(&no_account, Some(&rs), Some(&deployment)).contains("default"));

        let mut bare = agent.clone();
        bare.metadata.owner_references = None;
        assert_eq!(
            refused(&bare, Some(&rs), Some(&deployment)),
            "it was not created by a ReplicaSet of Deployment tenantflux-agent"
        );
        // An owner that is not the controller, or a controller of another kind, is no proof.
        let mut not_controller = agent.clone();
        not_controller.metadata.owner_references.as_mut().unwrap()[0].controller = None;
        assert!(refused(&not_controller, Some(&rs), Some(&deployment)).contains("not created"));
        let mut job = agent.clone();
        job.metadata.owner_references = Some(vec![owner("Job", "tenantflux-agent", "rs-uid")]);
        assert!(refused(&job, Some(&rs), Some(&deployment)).contains("not created"));

        assert!(refused(&agent, None, Some(&deployment)).contains("does not exist"));
        let mut same_name = rs.clone();
        same_name.metadata.uid = Some("forged".to_owned());
        assert!(refused(&agent, Some(&same_name), Some(&deployment)).contains("another one"));

        let mut foreign = rs.clone();
        foreign.metadata.owner_references =
            Some(vec![owner("Deployment", "lookalike", "deploy-uid")]);
        assert_eq!(
            refused(&agent, Some(&foreign), Some(&deployment)),
            "its ReplicaSet tenantflux-agent-7d9f does not belong to Deployment tenantflux-agent"
        );
        assert!(refused(&agent, Some(&rs), None).contains("does not belong"));
        let mut recreated = deployment.clone();
        recreated.metadata.uid = Some("new-uid".to_owned());
        assert!(refused(&agent, Some(&rs), Some(&recreated)).contains("earlier Deployment"));
    }

    #[test]
    fn what_is_sent_is_said_without_the_token() {
        let flag = Token::new("s3cr3t-flag");
        assert_eq!(
            TokenSource::Flag(&flag).to_string(),
            "the bearer token of --token (TENANTFLUX_TOKEN)"
        );
        let own = TokenSource::Kubeconfig(Token::new("s3cr3t-own")).to_string();
        assert_eq!(own, "the kubeconfig user's own bearer token");
        assert_eq!(
            TokenSource::KubeconfigFile("/run/token").to_string(),
            "the bearer token in the kubeconfig user's tokenFile /run/token"
        );
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
    fn each_call_carries_a_fresh_proof_the_agent_can_check() {
        use tenantflux_core::identity;
        let key = tenantflux_core::policy::signing::generate().unwrap();
        let public = *key.verifying_key().as_bytes();
        let mut auth = BearerAuth::from_credential(Credential::Identity(Box::new(IdentityCsr {
            name: "tenantflux-caller-0011".into(),
            key,
            audience: "tenantflux-agent".into(),
            namespace: "tenantflux-system".into(),
        })))
        .unwrap();
        let request = auth.call(tonic::Request::new(())).unwrap();
        let metadata = request.metadata();
        assert!(metadata.get("authorization").is_none(), "no token is sent");
        assert_eq!(
            metadata.get(identity::CSR_METADATA).unwrap(),
            "tenantflux-caller-0011"
        );
        let proof = metadata.get(identity::PROOF_METADATA).unwrap();
        assert!(proof.is_sensitive());
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        identity::verify_proof(
            &public,
            proof.to_str().unwrap(),
            "tenantflux-caller-0011",
            "tenantflux-agent",
            "tenantflux-system",
            Some(now),
        )
        .unwrap();
    }

    #[test]
    fn tokens_never_show_in_debug_output() {
        let token = Token::new("s3cr3t-value");
        assert!(!format!("{token:?}").contains("s3cr3t"));
        let BearerAuth::Token(value) = BearerAuth::new(&token).unwrap() else {
            panic!("a token is sent as a bearer token");
        };
        assert!(!format!("{value:?}").contains("s3cr3t"));
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
            verbose: false,
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
            ConnectError::CheckPods {
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
            ConnectError::CheckPodsForbidden {
                namespace: namespace(),
                message: "forbidden".to_owned(),
            },
            ConnectError::NotTheAgent {
                namespace: namespace(),
                refused: "pod x: it runs as ServiceAccount default, not tenantflux-agent"
                    .to_owned(),
            },
            ConnectError::NoAudience,
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
            verbose: false,
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
