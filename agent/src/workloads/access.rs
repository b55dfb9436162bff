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

/// A permission a call needs: `verb` on the kind's resource, in `namespace` or cluster-wide.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Need {
    pub verb: &'static str,
    pub kind: &'static FluxKind,
    pub namespace: Option<String>,
    /// One object, so that RBAC's `resourceNames` decide; `None` for every object of the kind.
    pub name: Option<String>,
}

impl Need {
    pub fn new(verb: &'static str, kind: &'static FluxKind, namespace: Option<&str>) -> Self {
        Self {
            verb,
            kind,
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
