//! Proof of a client-certificate user's identity, for the agent.
//!
//! A kubeconfig user with a client certificate has no token the agent could review. The API
//! server, though, fills `spec.username`, `uid`, `groups` and `extra` of a
//! CertificateSigningRequest from whoever creates it, and keeps them immutable. So the plugin
//! creates a CSR for [`SIGNER_NAME`] (no signer exists for it: it is never approved) carrying
//! a fresh ed25519 key, and proves with that key, on every call, that it is the CSR's
//! creator: it signs [`proof_message`] — the CSR's name, the agent's audience and namespace,
//! the call's gRPC method and the SHA-256 of its request body, a random nonce and the time.
//! The agent reads the CSR by name, takes the public key from it, checks the signature
//! against the call it received, refuses a nonce it has seen, and authorizes the CSR's user.
//! Someone else's CSR is of no use without its key, and a captured proof is good for the one
//! call it was made for, once, within [`MAX_SKEW_SECONDS`].

use base64::{Engine as _, engine::general_purpose::STANDARD};
/// The key of an identity CSR (the plugin keeps it for the command's calls).
pub use ed25519_dalek::SigningKey;
use ed25519_dalek::{Signature, Signer as _, Verifier as _, VerifyingKey};
use sha2::{Digest as _, Sha256};

use crate::policy::signing::SPKI_PREFIX;

/// The signer name of identity CSRs: no controller signs for it.
pub const SIGNER_NAME: &str = "tenantflux.io/caller-identity";
/// The metadata key naming the CSR a call proves it created.
pub const CSR_METADATA: &str = "x-tenantflux-csr";
/// The metadata key carrying the proof: `t=<unix seconds>,n=<base64 nonce>,sig=<base64 signature>`.
pub const PROOF_METADATA: &str = "x-tenantflux-proof";
/// The metadata key the agent's server sets (replacing whatever a caller sent) to the call it
/// received: `<hex SHA-256 of the request body> <gRPC method path>`.
pub const CALL_METADATA: &str = "x-tenantflux-call";
/// How far a proof's time may be from the agent's clock; the agent remembers each nonce for
/// twice as long, so a proof is used once.
pub const MAX_SKEW_SECONDS: i64 = 30;
/// How old an identity CSR may be when a call is made with it (a stream opened with it ends
/// then too); the plugin caches it for later commands until shortly before this age.
pub const MAX_CSR_AGE_SECONDS: i64 = 900;

/// Why a CSR or a proof does not hold.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProofError {
    #[error("spec.request is not a PEM CERTIFICATE REQUEST with an ed25519 key")]
    Request,
    #[error(
        "the proof is not of the form t=<unix seconds>,n=<base64 nonce>,sig=<base64 of 64 bytes> \
         (a plugin older than the agent sends t=...,sig=...: update kubectl-tenantflux)"
    )]
    Format,
    #[error(
        "the proof was made at {at} (unix time), more than {MAX_SKEW_SECONDS} s from the agent's clock ({now}): check the clocks, then retry"
    )]
    Time { at: i64, now: i64 },
    #[error(
        "the proof is not signed by the key of the CertificateSigningRequest for this call: it was \
         created by someone else, for another agent, or for another call"
    )]
    Signature,
}

/// The call a proof is made for: which CSR, which agent, which method with which body.
#[derive(Clone, Copy, Debug)]
pub struct ProofSubject<'a> {
    pub csr: &'a str,
    pub audience: &'a str,
    pub namespace: &'a str,
    /// The gRPC method's path, e.g. `/tenantflux.v1.Workloads/Resume`.
    pub method: &'a str,
    /// SHA-256 of the request body as sent (its gRPC frames).
    pub body_sha256: &'a [u8; 32],
}

/// A proof that holds: its nonce (for the agent's replay check) and time.
#[derive(Debug, PartialEq, Eq)]
pub struct VerifiedProof {
    pub nonce: String,
    pub at: i64,
}

/// SHA-256 of a request body.
pub fn body_digest(body: &[u8]) -> [u8; 32] {
    Sha256::digest(body).into()
}

/// The value of [`CALL_METADATA`] for a call to `method` with a body of digest `digest`.
pub fn call_value(method: &str, digest: &[u8; 32]) -> String {
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("{hex} {method}")
}

/// The method and body digest of a [`CALL_METADATA`] value.
pub fn parse_call_value(value: &str) -> Option<(&str, [u8; 32])> {
    let (hex, method) = value.split_once(' ')?;
    if hex.len() != 64 || !hex.is_ascii() {
        return None;
    }
    let mut digest = [0u8; 32];
    for (i, byte) in digest.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
    }
    Some((method, digest))
}

/// The bytes the plugin signs: which CSR, for which agent, which call, which nonce, when.
pub fn proof_message(subject: &ProofSubject<'_>, nonce: &str, at: i64) -> Vec<u8> {
    let ProofSubject {
        csr,
        audience,
        namespace,
        method,
        body_sha256,
    } = subject;
    let call = call_value(method, body_sha256);
    format!(
        "tenantflux caller identity v2\ncsr={csr}\naudience={audience}\nnamespace={namespace}\n\
         call={call}\nnonce={nonce}\nt={at}\n"
    )
    .into_bytes()
}

/// A random nonce for one proof.
pub fn nonce() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes)?;
    Ok(STANDARD.encode(bytes))
}

/// The proof header value for a call made at `at` with `nonce`.
pub fn sign_proof(key: &SigningKey, subject: &ProofSubject<'_>, nonce: &str, at: i64) -> String {
    let signature = key.sign(&proof_message(subject, nonce, at));
    format!(
        "t={at},n={nonce},sig={}",
        STANDARD.encode(signature.to_bytes())
    )
}

/// The nonce of a proof header value, unverified (for the agent's replay check).
pub fn proof_nonce(proof: &str) -> Option<&str> {
    let (_, rest) = proof.strip_prefix("t=")?.split_once(",n=")?;
    Some(rest.split_once(",sig=")?.0).filter(|n| !n.is_empty())
}

/// Checks `proof` against `public_key` (from the CSR), the call the agent received, and the
/// agent's clock `now` (`None`: the time is not checked, for rechecks of a stream opened with
/// a fresh proof). The caller checks the nonce was not seen before.
pub fn verify_proof(
    public_key: &[u8; 32],
    proof: &str,
    subject: &ProofSubject<'_>,
    now: Option<i64>,
) -> Result<VerifiedProof, ProofError> {
    let (at, rest) = proof
        .strip_prefix("t=")
        .and_then(|rest| rest.split_once(",n="))
        .ok_or(ProofError::Format)?;
    let (nonce, signature) = rest.split_once(",sig=").ok_or(ProofError::Format)?;
    let at: i64 = at.parse().map_err(|_| ProofError::Format)?;
    if STANDARD.decode(nonce).map_or(true, |n| n.len() < 16) {
        return Err(ProofError::Format);
    }
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
        &proof_message(subject, nonce, at),
        &Signature::from_bytes(&signature),
    )
    .map_err(|_| ProofError::Signature)?;
    Ok(VerifiedProof {
        nonce: nonce.to_owned(),
        at,
    })
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
    fn a_proof_holds_for_its_key_csr_agent_call_and_time_only() {
        let key = key(2);
        let public = *key.verifying_key().as_bytes();
        let body = body_digest(b"\0\0\0\0\x02\x0a\x00");
        let subject = ProofSubject {
            csr: "csr-a",
            audience: "tenantflux-agent",
            namespace: "tenantflux-system",
            method: "/tenantflux.v1.Workloads/Resume",
            body_sha256: &body,
        };
        let nonce = nonce().unwrap();
        let proof = sign_proof(&key, &subject, &nonce, 1000);
        assert_eq!(proof_nonce(&proof), Some(nonce.as_str()));
        assert_eq!(proof_nonce("t=1,sig=AAAA"), None);
        let verified = VerifiedProof {
            nonce: nonce.clone(),
            at: 1000,
        };
        assert_eq!(
            verify_proof(&public, &proof, &subject, Some(1020)),
            Ok(verified)
        );
        assert!(verify_proof(&public, &proof, &subject, None).is_ok());
        // Someone else's CSR (another key), another CSR name, another agent, another method,
        // another body.
        let other_key = *self::key(3).verifying_key().as_bytes();
        let other_body = body_digest(b"other");
        let others = [
            (other_key, subject),
            (
                public,
                ProofSubject {
                    csr: "csr-b",
                    ..subject
                },
            ),
            (
                public,
                ProofSubject {
                    audience: "other-agent",
                    ..subject
                },
            ),
            (
                public,
                ProofSubject {
                    method: "/tenantflux.v1.Workloads/Suspend",
                    ..subject
                },
            ),
            (
                public,
                ProofSubject {
                    body_sha256: &other_body,
                    ..subject
                },
            ),
        ];
        for (public, subject) in others {
            assert_eq!(
                verify_proof(&public, &proof, &subject, Some(1000)),
                Err(ProofError::Signature),
                "{subject:?}"
            );
        }
        assert_eq!(
            verify_proof(&public, &proof, &subject, Some(1000 + MAX_SKEW_SECONDS + 1)),
            Err(ProofError::Time {
                at: 1000,
                now: 1031
            })
        );
        // The nonce is part of what is signed.
        let replaced = proof.replace(&nonce, &self::nonce().unwrap());
        assert_eq!(
            verify_proof(&public, &replaced, &subject, Some(1000)),
            Err(ProofError::Signature)
        );
        for bad in [
            "",
            "t=1",
            "t=x,n=AAAA,sig=AAAA",
            "t=1,sig=AAAA",
            "t=1,n=AAAA,sig=AAAA",
        ] {
            assert_eq!(
                verify_proof(&public, bad, &subject, None),
                Err(ProofError::Format),
                "{bad}"
            );
        }
    }

    #[test]
    fn the_call_value_reads_back() {
        let digest = body_digest(b"body");
        let value = call_value("/tenantflux.v1.Agent/GetStatus", &digest);
        assert_eq!(
            parse_call_value(&value),
            Some(("/tenantflux.v1.Agent/GetStatus", digest))
        );
        for bad in ["", "abc /x", &value.replace(' ', "")] {
            assert_eq!(parse_call_value(bad), None, "{bad}");
        }
    }
}
