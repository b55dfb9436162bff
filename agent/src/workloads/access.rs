//! What a workloads call asks of the caller's rights: the server answers these questions with
//! SubjectAccessReview for the call's credentials, so the service itself knows no RBAC.

use std::future::Future;

use super::catalog::FluxKind;

/// Why the caller may not do something, or why that could not be decided.
#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    #[error("{0}")]
    Unauthenticated(String),
    #[error("{0}")]
    Denied(String),
    /// The API server could not answer; worth retrying.
    #[error("{0}")]
    Unavailable(String),
}

/// What a permission is on: a Flux kind, or another resource (Events, or the object a trace
/// starts from).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Resource {
    Flux(&'static FluxKind),
    /// `group` empty for the core group; `plural` as RBAC names it, e.g. "events".
    Other {
        group: String,
        plural: String,
    },
}

/// A permission a call needs: `verb` on the resource, in `namespace` or cluster-wide.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Need {
    pub verb: &'static str,
    pub resource: Resource,
    pub namespace: Option<String>,
    /// One object, so that RBAC's `resourceNames` decide; `None` for every object of the kind.
    pub name: Option<String>,
}

impl Need {
    pub fn new(verb: &'static str, kind: &'static FluxKind, namespace: Option<&str>) -> Self {
        Self {
            verb,
            resource: Resource::Flux(kind),
            namespace: namespace.map(str::to_owned),
            name: None,
        }
    }

    /// `verb` on a resource that is not a Flux kind, e.g. ("", "events").
    pub fn other(verb: &'static str, group: &str, plural: &str, namespace: Option<&str>) -> Self {
        Self {
            verb,
            resource: Resource::Other {
                group: group.to_owned(),
                plural: plural.to_owned(),
            },
            namespace: namespace.map(str::to_owned),
            name: None,
        }
    }

    /// The permission on one object of the kind.
    pub fn on(mut self, name: &str) -> Self {
        self.name = Some(name.to_owned());
        self
    }
}

/// What the caller of one call may do.
pub trait Access: Sync {
    /// Succeeds once the caller is authenticated, whatever it may do.
    fn identify(&self) -> impl Future<Output = Result<(), AccessError>> + Send;
    fn check(&self, need: &Need) -> impl Future<Output = Result<(), AccessError>> + Send;
    /// One answer per need; `Err` when nothing could be decided.
    fn check_each(
        &self,
        needs: &[Need],
    ) -> impl Future<Output = Result<Vec<Result<(), AccessError>>, AccessError>> + Send;
}
