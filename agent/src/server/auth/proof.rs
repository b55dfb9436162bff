//! Caller-identity proofs: a call names a CertificateSigningRequest its caller just created
//! and signs a proof of that call with the CSR's key; the API server recorded who created it,
//! and that is the caller (see `tenantflux_core::identity`).

use std::{sync::Arc, time::Instant};

use k8s_openapi::{api::certificates::v1::CertificateSigningRequest, jiff::Timestamp};
use kube::Api;
use tenantflux_core::identity;

use super::{AuthError, Authorizer, CallerProof, UserInfo};

/// What an identity CSR says, read once and cached briefly by name (its creator is immutable):
/// every call's proof is still checked against it.
#[derive(Clone, Debug)]
pub(super) struct CsrFacts {
    public_key: [u8; 32],
    user: UserInfo,
    created: Timestamp,
    /// Why it proves nothing whatever the proof (denied, another signer, no creator).
    refused: Option<String>,
}

impl Authorizer {
    /// Checks the proof's CertificateSigningRequest (signer, not denied, not older than
    /// [`identity::MAX_CSR_AGE_SECONDS`]) and the proof (signed by the CSR's key, for this
    /// agent and this call; made now, with a nonce the call layer saw first, when `fresh`).
    /// The user is the one the API server recorded as the CSR's creator, returned with the
    /// time the CSR stops proving anything. A fresh call may take the CSR from the cache; a
    /// stream's recheck reads it again.
    pub(super) async fn proven_user(
        &self,
        proof: &CallerProof,
        fresh: bool,
    ) -> Result<(UserInfo, Timestamp), AuthError> {
        let refused = |reason: String| AuthError::Identity {
            csr: proof.csr.clone(),
            reason,
        };
        let cached = fresh.then(|| self.caches.csrs.get(&proof.csr)).flatten();
        let facts = match cached {
            Some(facts) => facts,
            None => {
                let facts = Arc::new(self.read_csr(&proof.csr).await?);
                self.caches.csrs.insert(proof.csr.clone(), facts.clone());
                facts
            }
        };
        if let Some(reason) = &facts.refused {
            return Err(refused(reason.clone()));
        }
        let now = Timestamp::now();
        // The age is checked on every recheck of a stream too, so none outlives its CSR.
        let age = now.duration_since(facts.created).as_secs();
        if age > identity::MAX_CSR_AGE_SECONDS {
            return Err(refused(format!(
                "it was created {age} s ago; a proof may use one at most {} s old: run the command again",
                identity::MAX_CSR_AGE_SECONDS
            )));
        }
        let expires = facts
            .created
            .checked_add(k8s_openapi::jiff::SignedDuration::from_secs(
                identity::MAX_CSR_AGE_SECONDS,
            ))
            .unwrap_or(now);
        let (method, body_sha256) = proof
            .call
            .as_deref()
            .and_then(identity::parse_call_value)
            .ok_or_else(|| refused("the agent did not record which call it was made for".into()))?;
        let subject = identity::ProofSubject {
            csr: &proof.csr,
            audience: &self.audience,
            namespace: &self.namespace,
            method,
            body_sha256: &body_sha256,
        };
        identity::verify_proof(
            &facts.public_key,
            &proof.proof,
            &subject,
            fresh.then_some(now.as_second()),
        )
        .map_err(|err| refused(err.to_string()))?;
        Ok((facts.user.clone(), expires))
    }

    /// Reads an identity CSR from the API server.
    async fn read_csr(&self, name: &str) -> Result<CsrFacts, AuthError> {
        let refused = |reason: String| AuthError::Identity {
            csr: name.to_owned(),
            reason,
        };
        let api: Api<CertificateSigningRequest> = Api::all(self.client.clone());
        let started = Instant::now();
        let csr = api.get_opt(name).await;
        super::timing::record("csr-read", started.elapsed());
        let csr = csr
            .map_err(|source| AuthError::CsrRead {
                csr: name.to_owned(),
                source,
            })?
            .ok_or_else(|| {
                refused(
                    "it does not exist (deleted by someone, or by kube-controller-manager after the agent denied it): run the command again"
                        .into(),
                )
            })?;
        let public_key = identity::csr_public_key(&csr.spec.request.0)
            .map_err(|err| refused(err.to_string()))?;
        let mut refused_for = None;
        if csr.spec.signer_name != identity::SIGNER_NAME {
            refused_for = Some(format!(
                "its signerName is {}, not {}",
                tenantflux_core::text::quote(&csr.spec.signer_name),
                identity::SIGNER_NAME
            ));
        }
        if let Some(condition) = csr
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| {
                c.iter()
                    .find(|c| c.type_ == "Denied" || c.type_ == "Failed")
            })
        {
            refused_for.get_or_insert(format!(
                "it is {} ({}): run the command again",
                condition.type_.to_lowercase(),
                condition.reason.as_deref().unwrap_or("no reason given")
            ));
        }
        let username = csr.spec.username.unwrap_or_default();
        if username.is_empty() {
            refused_for.get_or_insert("the API server recorded no creator (spec.username)".into());
        }
        Ok(CsrFacts {
            public_key,
            // One the API server gave no creation time is refused as if ancient.
            created: csr
                .metadata
                .creation_timestamp
                .as_ref()
                .map_or(Timestamp::UNIX_EPOCH, |t| t.0),
            user: UserInfo {
                username,
                uid: csr.spec.uid.unwrap_or_default(),
                groups: csr.spec.groups.unwrap_or_default(),
                extra: csr.spec.extra.unwrap_or_default(),
            },
            refused: refused_for,
        })
    }
}
