//! Identity CSRs that are too old to prove anything are denied by the agent, so
//! kube-controller-manager deletes them (an hour after the denial) and callers need only
//! `create` on CSRs, not `delete` on every CSR of the cluster.

use std::time::Duration;

use k8s_openapi::{
    api::certificates::v1::{CertificateSigningRequest, CertificateSigningRequestCondition},
    jiff::Timestamp,
};
use kube::{
    Api, Client,
    api::{ListParams, PostParams},
};
use tenantflux_core::identity;
use tokio_util::sync::CancellationToken;

use crate::reconcile::{Next, Wake};

/// The reason the agent's denial gives.
pub const DENIED_REASON: &str = "TenantfluxProofExpired";

/// Every `interval`, denies the identity CSRs older than `max_age` that nobody has decided on.
/// Errors are logged and tried again at the next interval (a missing permission named).
pub async fn deny_expired_identity_csrs(
    client: Client,
    max_age: Duration,
    interval: Duration,
    shutdown: CancellationToken,
) {
    let sweeper = Sweeper {
        api: Api::all(client),
        max_age,
        interval,
    };
    crate::reconcile::run(sweeper, futures::stream::pending(), &shutdown).await;
}

/// The sweep loop.
struct Sweeper {
    api: Api<CertificateSigningRequest>,
    max_age: Duration,
    interval: Duration,
}

impl crate::reconcile::Pass for Sweeper {
    type Event = ();

    async fn pass(&mut self, _: Wake<()>) -> Next {
        match sweep(&self.api, self.max_age).await {
            Ok(0) => {}
            Ok(denied) => tracing::info!(denied, "denied identity CSRs too old to prove anything"),
            Err(err) => tracing::warn!(
                error = %err,
                "denying expired identity CSRs (the agent needs list on certificatesigningrequests, \
                 update on certificatesigningrequests/approval and approve on signers/{}: apply deploy/manifests)",
                identity::SIGNER_NAME
            ),
        }
        Next::after(self.interval)
    }
}

/// One pass: how many CSRs it denied.
async fn sweep(api: &Api<CertificateSigningRequest>, max_age: Duration) -> kube::Result<usize> {
    let selector = format!("spec.signerName={}", identity::SIGNER_NAME);
    let list = api.list(&ListParams::default().fields(&selector)).await?;
    let now = Timestamp::now();
    let mut denied = 0;
    for mut csr in list.items {
        let Some(name) = csr.metadata.name.clone() else {
            continue;
        };
        if !expired(&csr, now, max_age) {
            continue;
        }
        csr.status
            .get_or_insert_with(Default::default)
            .conditions
            .get_or_insert_with(Vec::new)
            .push(CertificateSigningRequestCondition {
                type_: "Denied".into(),
                status: "True".into(),
                reason: Some(DENIED_REASON.into()),
                message: Some(format!(
                    "tenantflux-agent: older than {} s, so it no longer proves who created it",
                    max_age.as_secs()
                )),
                ..Default::default()
            });
        // The approval subresource is updated whole (RBAC's update; a patch would need patch
        // on every CSR), at the version listed.
        match api
            .replace_subresource::<CertificateSigningRequest>(
                "approval",
                &name,
                &PostParams::default(),
                &csr,
            )
            .await
        {
            Ok(_) => denied += 1,
            // Deleted or changed meanwhile: the next pass sees it as it is.
            Err(kube::Error::Api(status)) if status.is_not_found() || status.code == 409 => {}
            Err(err) => return Err(err),
        }
    }
    Ok(denied)
}

/// Whether `csr` is of the identity signer, undecided, and older than `max_age` at `now`.
fn expired(csr: &CertificateSigningRequest, now: Timestamp, max_age: Duration) -> bool {
    let decided = csr
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| !c.is_empty());
    let Some(created) = csr.metadata.creation_timestamp.as_ref() else {
        return false;
    };
    let age = now.duration_since(created.0).as_secs();
    csr.spec.signer_name == identity::SIGNER_NAME
        && !decided
        && age >= i64::try_from(max_age.as_secs()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::certificates::v1::CertificateSigningRequestStatus;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;

    fn csr(signer: &str, created: i64, conditions: Vec<&str>) -> CertificateSigningRequest {
        let mut csr = CertificateSigningRequest::default();
        csr.spec.signer_name = signer.into();
        csr.metadata.creation_timestamp = Some(Time(Timestamp::from_second(created).unwrap()));
        if !conditions.is_empty() {
            csr.status = Some(CertificateSigningRequestStatus {
                conditions: Some(
                    conditions
                        .into_iter()
                        .map(|t| CertificateSigningRequestCondition {
                            type_: t.into(),
                            status: "True".into(),
                            ..Default::default()
                        })
                        .collect(),
                ),
                ..Default::default()
            });
        }
        csr
    }

    #[test]
    fn only_undecided_identity_csrs_past_their_age_are_denied() {
        let now = Timestamp::from_second(10_000).unwrap();
        let max = Duration::from_secs(900);
        assert!(expired(
            &csr(identity::SIGNER_NAME, 9_100, vec![]),
            now,
            max
        ));
        assert!(!expired(
            &csr(identity::SIGNER_NAME, 9_200, vec![]),
            now,
            max
        ));
        assert!(!expired(
            &csr(identity::SIGNER_NAME, 1_000, vec!["Denied"]),
            now,
            max
        ));
        assert!(!expired(
            &csr("kubernetes.io/kube-apiserver-client", 1_000, vec![]),
            now,
            max
        ));
        let mut no_time = csr(identity::SIGNER_NAME, 0, vec![]);
        no_time.metadata.creation_timestamp = None;
        assert!(!expired(&no_time, now, max));
    }
}
