//! Caller-identity proofs: a call names a CertificateSigningRequest its caller just created
//! and signs a proof with the CSR's key; the API server recorded who created it, and that is
//! the caller (see `tenantflux_core::identity`).

use std::time::Instant;

use k8s_openapi::{api::certificates::v1::CertificateSigningRequest, jiff::Timestamp};
use kube::Api;
use tenantflux_core::identity;

use super::{AuthError, Authorizer, CallerProof, UserInfo};

impl Authorizer {
    /// Reads the proof's CertificateSigningRequest and checks it (signer, age when `fresh`)
    /// and the proof (signed by the CSR's key, for this agent, made now when `fresh`); the
    /// user is the one the API server recorded as the CSR's creator.
    pub(super) async fn proven_user(
        &self,
        proof: &CallerProof,
        fresh: bool,
    ) -> Result<UserInfo, AuthError> {
        let refused = |reason: String| AuthError::Identity {
            csr: proof.csr.clone(),
            reason,
        };
        let api: Api<CertificateSigningRequest> = Api::all(self.client.clone());
        let started = Instant::now();
        let csr = api.get_opt(&proof.csr).await;
        crate::server::timing::record("csr-read", started.elapsed());
        let csr = csr
            .map_err(|source| AuthError::CsrRead {
                csr: proof.csr.clone(),
                source,
            })?
            .ok_or_else(|| {
                refused(
                    "it does not exist (deleted when its command ended, or by someone else): run the command again"
                        .into(),
                )
            })?;
        if csr.spec.signer_name != identity::SIGNER_NAME {
            return Err(refused(format!(
                "its signerName is {}, not {}",
                tenantflux_core::text::quote(&csr.spec.signer_name),
                identity::SIGNER_NAME
            )));
        }
        let now = Timestamp::now();
        if fresh {
            // One the API server gave no creation time is refused as if ancient.
            let created = csr
                .metadata
                .creation_timestamp
                .as_ref()
                .map_or(Timestamp::UNIX_EPOCH, |t| t.0);
            let age = now.duration_since(created).as_secs();
            if age > identity::MAX_CSR_AGE_SECONDS {
                return Err(refused(format!(
                    "it was created {age} s ago; a proof may use one at most {} s old: run the command again",
                    identity::MAX_CSR_AGE_SECONDS
                )));
            }
        }
        let public_key = identity::csr_public_key(&csr.spec.request.0)
            .map_err(|err| refused(err.to_string()))?;
        identity::verify_proof(
            &public_key,
            &proof.proof,
            &proof.csr,
            &self.audience,
            &self.namespace,
            fresh.then_some(now.as_second()),
        )
        .map_err(|err| refused(err.to_string()))?;
        let username = csr.spec.username.unwrap_or_default();
        if username.is_empty() {
            return Err(refused(
                "the API server recorded no creator (spec.username)".into(),
            ));
        }
        Ok(UserInfo {
            username,
            uid: csr.spec.uid.unwrap_or_default(),
            groups: csr.spec.groups.unwrap_or_default(),
            extra: csr.spec.extra.unwrap_or_default(),
        })
    }
}
