//! Why a workloads call failed; `server::workloads` maps each to a gRPC code.

use super::access::AccessError;

/// Why a Workloads call failed. Each says what failed, on which object, and what to do.
#[derive(Debug, thiserror::Error)]
pub enum WorkloadsError {
    #[error(
        "unknown kind {}; known kinds: {known}",
        tenantflux_core::text::quote(name)
    )]
    UnknownKind { name: String, known: String },

    #[error(
        "the cluster does not serve {kind} ({resource}): is Flux (with the controller for it) installed?"
    )]
    NotServed {
        kind: &'static str,
        resource: String,
    },

    #[error(
        "{kind} is read-only: no controller suspends or reconciles it on request (what produces it does; get it with `get`)"
    )]
    ReadOnly { kind: &'static str },

    #[error(
        "{kind} ({resource}) is not in tenantflux's table of Flux kinds and its schema has no spec.suspend: tenantflux knows no way to suspend, resume or reconcile it (get it with `get`)"
    )]
    NoSpecSuspend {
        kind: &'static str,
        resource: String,
    },

    #[error("{kind} {namespace}/{name} not found")]
    NotFound {
        kind: &'static str,
        namespace: String,
        name: String,
    },

    #[error("{what} needs a namespace and a name")]
    MissingName { what: &'static str },

    #[error("{0}")]
    InvalidArgument(String),

    #[error("{kind} {namespace}/{name} names no source to reconcile")]
    NoSource {
        kind: &'static str,
        namespace: String,
        name: String,
    },

    #[error("the agent is still loading {what}; retry in a few seconds")]
    Loading { what: String },

    #[error("the watch fell more than {0} changes behind; watch again")]
    Lagged(u64),

    #[error(transparent)]
    Access(#[from] AccessError),

    #[error("reading {what} failed: {source}")]
    Read {
        what: String,
        #[source]
        source: Box<kube::Error>,
    },

    #[error("{action} {kind} {namespace}/{name} failed: {source}")]
    Api {
        action: &'static str,
        kind: &'static str,
        namespace: String,
        name: String,
        #[source]
        source: Box<kube::Error>,
    },
}
