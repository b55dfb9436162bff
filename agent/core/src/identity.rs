//! Proof of a client-certificate user's identity, for the agent.
//!
//! A kubeconfig user with a client certificate has no token the agent could review. The API
//! server, though, fills `spec.username`, `uid`, `groups` and `extra` of a
//! CertificateSigningRequest from whoever creates it, and keeps them immutable. So the plugin
//! creates a CSR for [`SIGNER_NAME`] (no signer exists for it: it is never approved) carrying
//! a fresh ed25519 key, and proves with that key, on every call, that it is the CSR's
//! creator: it signs [`proof_message`] (the CSR's name, the agent's audience and namespace,
//! and the time). The agent reads the CSR by name, takes the public key from it, checks the
//! signature, and authorizes the CSR's user. Someone else's CSR is of no use without its key.

use base64::{Engine as _, engine::general_purpose::STANDARD};
/// The key of an identity CSR (the plugin keeps it for the command's calls).
pub use ed25519_dalek::SigningKey;
use ed25519_dalek::{Signature, Signer as _, Verifier as _, VerifyingKey};

use crate::policy::signing::SPKI_PREFIX;

/// The signer name of identity CSRs: no controller signs for it.
pub const SIGNER_NAME: &str = "tenantflux.io/caller-identity";
/// The metadata key naming the CSR a call proves it created.
pub const CSR_METADATA: &str = "x-tenantflux-csr";
/// The metadata key carrying the proof: `t=<unix seconds>,sig=<base64 signature>`.
pub const PROOF_METADATA: &str = "x-tenantflux-proof";
/// How far a proof's time may be from the agent's clock.
pub const MAX_SKEW_SECONDS: i64 = 300;
/// How old an identity CSR may be when a call is made with it; the plugin caches it for later
/// commands until shortly before this age (or deletes it when its command ends, uncached).
pub const MAX_CSR_AGE_SECONDS: i64 = 900;

/// Why a CSR or a proof does not hold.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProofError {
    #[error("spec.request is not a PEM CERTIFICATE REQUEST with an ed25519 key")]
    Request,
    #[error("the proof is not of the form t=<unix seconds>,sig=<base64 of 64 bytes>")]
    Format,
    #[error(
        "the proof was made at {at} (unix time), more than {MAX_SKEW_SECONDS} s from the agent's clock ({now}): check the clocks, then retry"
    )]
    Time { at: i64, now: i64 },
    #[error(
        "the proof is not signed by the key of the CertificateSigningRequest: it was created by someone else, or for another agent"
    )]
    Signature,
}

/// The bytes the plugin signs: which CSR, for which agent, when.
pub fn proof_message(csr: &str, audience: &str, namespace: &str, at: i64) -> Vec<u8> {
    format!("tenantflux caller identity v1\ncsr={csr}\naudience={audience}\nnamespace={namespace}\nt={at}\n")
        .into_bytes()
}

/// The proof header value for a call made at `at`.
pub fn sign_proof(key: &SigningKey, csr: &str, audience: &str, namespace: &str, at: i64) -> String {
    let signature = key.sign(&proof_message(csr, audience, namespace, at));
    format!("t={at},sig={}", STANDARD.encode(signature.to_bytes()))
}

/// Checks `proof` against `public_key` (from the CSR) and the agent's clock `now`
/// (`None`: the time is not checked, for rechecks of a stream opened with a fresh proof).
pub fn verify_proof(
    public_key: &[u8; 32],
    proof: &str,
    csr: &str,
    audience: &str,
    namespace: &str,
    now: Option<i64>,
) -> Result<(), ProofError> {
    let (at, signature) = proof
        .strip_prefix("t=")
        .and_then(|rest| rest.split_once(",sig="))
        .ok_or(ProofError::Format)?;
    let at: i64 = at.parse().map_err(|_| ProofError::Format)?;
    let signature: [u8; 64] = STANDARD
        .decode(signature)
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or(ProofError::Format)?;
    if let Some(now) = now
        && (now - at).abs() > MAX_SKEW_SECONDS
    {
        return Err(ProofError::Time { at, now });
    }
    let key = VerifyingKey::from_bytes(public_key).map_err(|_| ProofError::Signature)?;
    key.verify(
        &proof_message(csr, audience, namespace, at),
        &Signature::from_bytes(&signature),
    )
    .map_err(|_| ProofError::Signature)
}

/// A PKCS#10 certificate request (PEM) for `key`, subject `CN=<common_name>`, self-signed as
/// PKCS#10 requires (the API server checks that signature when the CSR is created).
pub fn csr_pem(key: &SigningKey, common_name: &str) -> String {
    let cn = der(0x0c, common_name.as_bytes());
    let attribute = der(0x30, &[der(0x06, &[0x55, 0x04, 0x03]), cn].concat());
    let subject = der(0x30, &der(0x31, &attribute));
    let mut spki = SPKI_PREFIX.to_vec();
    spki.extend_from_slice(key.verifying_key().as_bytes());
    let info = der(
        0x30,
        &[der(0x02, &[0]), subject, spki, vec![0xa0, 0x00]].concat(),
    );
    let signature = key.sign(&info).to_bytes();
    let mut bits = vec![0];
    bits.extend_from_slice(&signature);
    let request = der(
        0x30,
        &[
            info,
            der(0x30, &der(0x06, &[0x2b, 0x65, 0x70])),
            der(0x03, &bits),
        ]
        .concat(),
    );
    let body = STANDARD.encode(request);
    let mut pem = String::from("-----BEGIN CERTIFICATE REQUEST-----\n");
    for line in body.as_bytes().chunks(64) {
        pem.push_str(std::str::from_utf8(line).unwrap_or_default());
        pem.push('\n');
    }
    pem.push_str("-----END CERTIFICATE REQUEST-----\n");
    pem
}

/// The ed25519 public key of a PEM certificate request.
pub fn csr_public_key(pem: &[u8]) -> Result<[u8; 32], ProofError> {
    let text = std::str::from_utf8(pem).map_err(|_| ProofError::Request)?;
    let body = text
        .trim()
        .strip_prefix("-----BEGIN CERTIFICATE REQUEST-----")
        .and_then(|rest| rest.strip_suffix("-----END CERTIFICATE REQUEST-----"))
        .ok_or(ProofError::Request)?;
    let body: String = body.chars().filter(|c| !c.is_whitespace()).collect();
    let request = STANDARD.decode(body).map_err(|_| ProofError::Request)?;
    let (request, _) = tlv(&request, 0x30).ok_or(ProofError::Request)?;
    let (info, _) = tlv(request, 0x30).ok_or(ProofError::Request)?;
    let (_, rest) = tlv(info, 0x02).ok_or(ProofError::Request)?;
    let (_, rest) = tlv(rest, 0x30).ok_or(ProofError::Request)?;
    let spki_len = SPKI_PREFIX.len() + 32;
    match rest.get(..spki_len) {
        Some(spki) if spki.starts_with(&SPKI_PREFIX) => spki[SPKI_PREFIX.len()..]
            .try_into()
            .map_err(|_| ProofError::Request),
        _ => Err(ProofError::Request),
    }
}

/// DER: `tag`, the definite length, `content`.
fn der(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let len = content.len();
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes: Vec<u8> = len
            .to_be_bytes()
            .into_iter()
            .skip_while(|b| *b == 0)
            .collect();
        out.push(0x80 | bytes.len() as u8);
        out.extend(bytes);
    }
    out.extend_from_slice(content);
    out
}

/// One DER element of `tag` at the start of `input`: its content and what follows it.
fn tlv(input: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    let (&found, rest) = input.split_first()?;
    if found != tag {
        return None;
    }
    let (&first, mut rest) = rest.split_first()?;
    let len = if first < 0x80 {
        usize::from(first)
    } else {
        let count = usize::from(first & 0x7f);
        if count == 0 || count > 4 || rest.len() < count {
            return None;
        }
        let (bytes, after) = rest.split_at(count);
        rest = after;
        bytes.iter().fold(0usize, |n, b| (n << 8) | usize::from(*b))
    };
    (rest.len() >= len).then(|| rest.split_at(len))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(seed: u8) -> SigningKey {
        SigningKey::from_bytes(&[seed; 32])
    }

    #[test]
    fn the_csr_carries_the_key_and_its_pem_reads_back() {
        let key = key(1);
        let pem = csr_pem(&key, "tenantflux caller");
        assert!(pem.starts_with("-----BEGIN CERTIFICATE REQUEST-----\n"));
        assert_eq!(
            csr_public_key(pem.as_bytes()).unwrap(),
            *key.verifying_key().as_bytes()
        );
        // A long subject takes the long length form.
        let long = csr_pem(&key, &"x".repeat(300));
        assert_eq!(
            csr_public_key(long.as_bytes()).unwrap(),
            *key.verifying_key().as_bytes()
        );
        for bad in [
            "",
            "-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----",
            "not pem",
        ] {
            assert_eq!(csr_public_key(bad.as_bytes()), Err(ProofError::Request));
        }
    }

    #[test]
    fn a_proof_holds_for_its_key_csr_agent_and_time_only() {
        let key = key(2);
        let public = *key.verifying_key().as_bytes();
        let proof = sign_proof(&key, "csr-a", "tenantflux-agent", "tenantflux-system", 1000);
        let check = |public: &[u8; 32], csr: &str, audience: &str, now: Option<i64>| {
            verify_proof(public, &proof, csr, audience, "tenantflux-system", now)
        };
        assert_eq!(
            check(&public, "csr-a", "tenantflux-agent", Some(1100)),
            Ok(())
        );
        assert_eq!(check(&public, "csr-a", "tenantflux-agent", None), Ok(()));
        // Someone else's CSR (another key), another CSR name, another agent.
        let other = *self::key(3).verifying_key().as_bytes();
        assert_eq!(
            check(&other, "csr-a", "tenantflux-agent", Some(1000)),
            Err(ProofError::Signature)
        );
        assert_eq!(
            check(&public, "csr-b", "tenantflux-agent", Some(1000)),
            Err(ProofError::Signature)
        );
        assert_eq!(
            check(&public, "csr-a", "other-agent", Some(1000)),
            Err(ProofError::Signature)
        );
        assert_eq!(
            check(
                &public,
                "csr-a",
                "tenantflux-agent",
                Some(1000 + MAX_SKEW_SECONDS + 1)
            ),
            Err(ProofError::Time {
                at: 1000,
                now: 1301
            })
        );
        for bad in ["", "t=1", "t=x,sig=AAAA", "t=1,sig=AAAA"] {
            assert_eq!(
                verify_proof(&public, bad, "csr-a", "a", "n", None),
                Err(ProofError::Format),
                "{bad}"
            );
        }
    }
}
