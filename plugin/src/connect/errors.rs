//! What can go wrong reaching the agent or in a call, said so that a user knows what to do:
//! connection errors, gRPC codes mapped to causes and remedies, error chains without repeats.

use std::{error::Error as StdError, time::Duration};

use thiserror::Error;
use tonic::Code;

use super::*;

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

#[cfg(test)]
mod tests {

    use super::*;

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
