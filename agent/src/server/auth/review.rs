//! The API server's answers, uncached: TokenReview says who a token is, SubjectAccessReview
//! whether that user may do something.

use std::time::Instant;

use k8s_openapi::api::{
    authentication::v1::{TokenReview, TokenReviewSpec, TokenReviewStatus},
    authorization::v1::{SubjectAccessReview, SubjectAccessReviewSpec, SubjectAccessReviewStatus},
};
use kube::{Api, api::PostParams};

use super::{AuthError, Authorizer, BearerToken, Permission, UserInfo};

/// What a SubjectAccessReview answered.
#[derive(Debug)]
pub(super) struct Decision {
    allowed: bool,
    /// `": <reason>"`, or empty when the API server gave none.
    detail: String,
}

impl Decision {
    /// Ok when granted, else the refusal naming `user` and `permission`.
    pub(super) fn into_result(
        self,
        user: &UserInfo,
        permission: &Permission,
    ) -> Result<(), AuthError> {
        if self.allowed {
            Ok(())
        } else {
            Err(AuthError::Denied {
                user: user.username.clone(),
                permission: Box::new(permission.clone()),
                detail: self.detail,
            })
        }
    }
}

impl Authorizer {
    /// The token's user, from the API server (TokenReview), without the cache.
    pub(super) async fn review_user(&self, token: &BearerToken) -> Result<UserInfo, AuthError> {
        let bound = self.review(token, Some(self.audience.clone())).await?;
        let status = if authenticated(&bound) {
            bound
        } else {
            // Tokens a kubeconfig user holds are bound to the API server's own audience; the
            // API server accepts them, so the agent does too.
            let unbound = self.review(token, None).await?;
            if !authenticated(&unbound) {
                let reason = bound
                    .error
                    .filter(|e| !e.is_empty())
                    .or(unbound.error.filter(|e| !e.is_empty()))
                    .unwrap_or_else(|| "the token is not valid".into());
                return Err(AuthError::Unauthenticated {
                    reason: reason.replace(token.expose(), "<redacted>"),
                });
            }
            unbound
        };
        let user = status
            .user
            .map(|u| UserInfo {
                username: u.username.unwrap_or_default(),
                uid: u.uid.unwrap_or_default(),
                groups: u.groups.unwrap_or_default(),
                extra: u.extra.unwrap_or_default(),
            })
            .unwrap_or_default();
        if user.username.starts_with("system:serviceaccount:")
            && let Some(seconds) = super::credential::token_lifetime(token)
            && seconds > super::credential::MAX_SERVICE_ACCOUNT_TOKEN_SECONDS
        {
            return Err(AuthError::TokenTooLong {
                user: user.username,
                seconds,
            });
        }
        Ok(user)
    }

    async fn review(
        &self,
        token: &BearerToken,
        audience: Option<String>,
    ) -> Result<TokenReviewStatus, AuthError> {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.expose().to_owned()),
                audiences: audience.map(|a| vec![a]),
            },
            ..TokenReview::default()
        };
        let api: Api<TokenReview> = Api::all(self.client.clone());
        let started = Instant::now();
        let created = api.create(&PostParams::default(), &review).await;
        super::timing::record("tokenreview", started.elapsed());
        let created = created.map_err(|source| AuthError::TokenReview { source })?;
        Ok(created.status.unwrap_or_default())
    }

    /// Whether `user` holds `permission`, from the API server (SubjectAccessReview), without
    /// the cache.
    pub(super) async fn access_review(
        &self,
        user: &UserInfo,
        permission: &Permission,
    ) -> Result<Decision, AuthError> {
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.username.clone()),
                uid: Some(user.uid.clone()).filter(|u| !u.is_empty()),
                groups: Some(user.groups.clone()),
                extra: Some(user.extra.clone()).filter(|e| !e.is_empty()),
                resource_attributes: Some(permission.resource_attributes()),
                ..SubjectAccessReviewSpec::default()
            },
            ..SubjectAccessReview::default()
        };
        let api: Api<SubjectAccessReview> = Api::all(self.client.clone());
        let started = Instant::now();
        let created = api.create(&PostParams::default(), &review).await;
        super::timing::record("subjectaccessreview", started.elapsed());
        let created = created.map_err(|source| AuthError::AccessReview {
            user: user.username.clone(),
            permission: Box::new(permission.clone()),
            source,
        })?;
        Ok(decision(created.status.unwrap_or_default()))
    }
}

fn authenticated(status: &TokenReviewStatus) -> bool {
    status.authenticated == Some(true)
}

fn decision(status: SubjectAccessReviewStatus) -> Decision {
    let reason = [status.reason, status.evaluation_error]
        .into_iter()
        .flatten()
        .filter(|r| !r.is_empty())
        .collect::<Vec<_>>()
        .join("; ");
    Decision {
        allowed: status.allowed && status.denied != Some(true),
        detail: if reason.is_empty() {
            String::new()
        } else {
            format!(": {reason}")
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_review_reason_becomes_detail_and_explicit_deny_wins() {
        let denied = decision(SubjectAccessReviewStatus {
            allowed: false,
            reason: Some("no RBAC policy matched".into()),
            ..SubjectAccessReviewStatus::default()
        });
        assert!(!denied.allowed);
        assert_eq!(denied.detail, ": no RBAC policy matched");
        let contradictory = decision(SubjectAccessReviewStatus {
            allowed: true,
            denied: Some(true),
            ..SubjectAccessReviewStatus::default()
        });
        assert!(!contradictory.allowed);
        assert!(
            decision(SubjectAccessReviewStatus {
                allowed: true,
                ..SubjectAccessReviewStatus::default()
            })
            .allowed
        );
    }
}
