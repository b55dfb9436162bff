//! Why a call was refused or could not be checked, and the one place that maps it to a code.

use super::Permission;
use crate::workloads::access::AccessError;

/// Why a call was not allowed, or could not be checked.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("missing bearer token: {reason}")]
    MissingToken { reason: &'static str },

    #[error("bearer token not accepted by the Kubernetes API server (TokenReview): {reason}")]
    Unauthenticated { reason: String },

    #[error("user {user:?} may not {permission}{detail} ({hint})", hint = permission.hint())]
    Denied {
        user: String,
        permission: Box<Permission>,
        /// `": <reason>"` from the SubjectAccessReview, or empty.
        detail: String,
    },

    #[error(
        "the token of {user} is valid for {seconds} s; the agent accepts service-account tokens \
         valid for at most {max} s, so that one outlives neither a revocation nor its minter: \
         request a shorter one (kubectl create token ... --duration=1h)",
        max = super::credential::MAX_SERVICE_ACCOUNT_TOKEN_SECONDS
    )]
    TokenTooLong { user: String, seconds: i64 },

    #[error(
        "the caller-identity proof with CertificateSigningRequest {} does not hold: {reason}",
        tenantflux_core::text::quote(csr)
    )]
    Identity { csr: String, reason: String },

    #[error(
        "could not read CertificateSigningRequest {} to check the caller's identity: {source}",
        tenantflux_core::text::quote(csr)
    )]
    CsrRead {
        csr: String,
        #[source]
        source: kube::Error,
    },

    #[error("could not check the bearer token: TokenReview failed: {source}")]
    TokenReview {
        #[source]
        source: kube::Error,
    },

    #[error(
        "could not check whether user {user:?} may {permission}: SubjectAccessReview failed: {source}"
    )]
    AccessReview {
        user: String,
        permission: Box<Permission>,
        #[source]
        source: kube::Error,
    },
}

/// The one classification of an authorizer's error: who is refused (the caller is unknown or
/// may not) or what could not be decided, with the text the caller reads.
impl From<AuthError> for AccessError {
    fn from(err: AuthError) -> Self {
        let message = err.to_string();
        match err {
            AuthError::MissingToken { .. }
            | AuthError::Unauthenticated { .. }
            | AuthError::TokenTooLong { .. }
            | AuthError::Identity { .. } => AccessError::Unauthenticated(message),
            AuthError::CsrRead {
                source: kube::Error::Api(ref status),
                ..
            } if status.code == 403 => AccessError::Unavailable(format!(
                "{message} (the agent's own ClusterRole lacks get on certificatesigningrequests: apply deploy/manifests)"
            )),
            AuthError::Denied { .. } => AccessError::Denied(message),
            AuthError::CsrRead { .. }
            | AuthError::TokenReview { .. }
            | AuthError::AccessReview { .. } => AccessError::Unavailable(message),
        }
    }
}

/// The code of each class, the one place it is decided.
pub fn access_code(err: &AccessError) -> tonic::Code {
    match err {
        AccessError::Unauthenticated(_) => tonic::Code::Unauthenticated,
        AccessError::Denied(_) => tonic::Code::PermissionDenied,
        AccessError::Unavailable(_) => tonic::Code::Unavailable,
    }
}

impl From<AuthError> for tonic::Status {
    fn from(err: AuthError) -> Self {
        let access = AccessError::from(err);
        tonic::Status::new(access_code(&access), access.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn denied_message_names_user_and_missing_permission() {
        let err = AuthError::Denied {
            user: "system:serviceaccount:default:bob".into(),
            permission: Box::new(Permission::agent_status("tenantflux-system")),
            detail: String::new(),
        };
        let status = tonic::Status::from(err);
        assert_eq!(status.code(), tonic::Code::PermissionDenied);
        assert_eq!(
            status.message(),
            "user \"system:serviceaccount:default:bob\" may not get agents.tenantflux.io/status \
             in namespace \"tenantflux-system\" (bind Role tenantflux-user, see deploy/manifests)"
        );
    }

    #[test]
    fn each_error_is_classified_once_and_its_code_follows() {
        let missing = AuthError::MissingToken { reason: "none" };
        assert!(matches!(
            AccessError::from(AuthError::MissingToken { reason: "none" }),
            AccessError::Unauthenticated(_)
        ));
        assert_eq!(
            tonic::Status::from(missing).code(),
            tonic::Code::Unauthenticated
        );
        let forbidden = || AuthError::CsrRead {
            csr: "tf-x".into(),
            source: kube::Error::Api(Box::new(
                kube::core::Status::failure("forbidden", "Forbidden").with_code(403),
            )),
        };
        match AccessError::from(forbidden()) {
            AccessError::Unavailable(message) => {
                assert!(message.contains("apply deploy/manifests"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        let status = tonic::Status::from(forbidden());
        assert_eq!(status.code(), tonic::Code::Unavailable);
        assert!(status.message().contains("apply deploy/manifests"));
    }
}
