//! What a caller asks to do, in SubjectAccessReview's terms.

use std::fmt;

use k8s_openapi::api::authorization::v1::ResourceAttributes;

/// What a denied caller is told to do about an agent permission.
const AGENT_PERMISSION_HINT: &str = "bind Role tenantflux-user, see deploy/manifests";

/// One permission on a Kubernetes resource, as SubjectAccessReview checks it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Permission {
    pub verb: String,
    /// API group; empty for the core group.
    pub group: String,
    pub resource: String,
    pub subresource: Option<String>,
    /// Namespace; `None` for a cluster-wide permission.
    pub namespace: Option<String>,
    /// One object's name, so that RBAC's `resourceNames` decide; `None` for every object.
    pub name: Option<String>,
}

impl Permission {
    /// `get agents.tenantflux.io/status` in the agent's namespace: what both status RPCs need.
    pub fn agent_status(namespace: impl Into<String>) -> Self {
        Self {
            verb: "get".into(),
            group: "tenantflux.io".into(),
            resource: "agents".into(),
            subresource: Some("status".into()),
            namespace: Some(namespace.into()),
            name: None,
        }
    }

    /// What a caller denied this permission should do about it.
    pub(super) fn hint(&self) -> &'static str {
        if self.group == "tenantflux.io" {
            AGENT_PERMISSION_HINT
        } else {
            "ask a cluster administrator for a Role that grants it"
        }
    }

    pub(super) fn resource_attributes(&self) -> ResourceAttributes {
        ResourceAttributes {
            verb: Some(self.verb.clone()),
            group: Some(self.group.clone()),
            resource: Some(self.resource.clone()),
            subresource: self.subresource.clone(),
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            ..ResourceAttributes::default()
        }
    }
}

/// Reads like kubectl's `auth can-i`: `get agents.tenantflux.io/status in namespace "x"`.
impl fmt::Display for Permission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.verb, self.resource)?;
        if !self.group.is_empty() {
            write!(f, ".{}", self.group)?;
        }
        if let Some(subresource) = &self.subresource {
            write!(f, "/{subresource}")?;
        }
        match &self.namespace {
            Some(namespace) => write!(f, " in namespace {namespace:?}"),
            None => f.write_str(" cluster-wide"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permission_reads_like_kubectl_auth_can_i() {
        let patch = Permission {
            verb: "patch".into(),
            group: "kustomize.toolkit.fluxcd.io".into(),
            resource: "kustomizations".into(),
            subresource: None,
            namespace: Some("apps".into()),
            name: None,
        };
        assert_eq!(
            patch.to_string(),
            "patch kustomizations.kustomize.toolkit.fluxcd.io in namespace \"apps\""
        );
        let core = Permission {
            verb: "list".into(),
            group: String::new(),
            resource: "nodes".into(),
            subresource: None,
            namespace: None,
            name: None,
        };
        assert_eq!(core.to_string(), "list nodes cluster-wide");
        let attrs = Permission::agent_status("ns").resource_attributes();
        assert_eq!(attrs.verb.as_deref(), Some("get"));
        assert_eq!(attrs.group.as_deref(), Some("tenantflux.io"));
        assert_eq!(attrs.resource.as_deref(), Some("agents"));
        assert_eq!(attrs.subresource.as_deref(), Some("status"));
        assert_eq!(attrs.namespace.as_deref(), Some("ns"));
    }
}
