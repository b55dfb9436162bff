//! Signed policy documents and ed25519 keys.
//!
//! A signed policy is a YAML envelope that carries the policy text verbatim and a detached
//! signature over exactly those bytes, so no canonical form has to be agreed on:
//!
//! ```yaml
//! apiVersion: tenantflux.io/v1alpha1
//! kind: SignedPolicy
//! keyId: 3f2a...           # first 16 hex digits of sha256(public key)
//! signature: base64...     # ed25519 over the UTF-8 bytes of `policy`
//! policy: |
//!   apiVersion: tenantflux.io/v1alpha1
//!   kind: Policy
//!   ...
//! ```
//!
//! Keys are PEM files as OpenSSL writes them (`openssl genpkey -algorithm ed25519`): PKCS#8
//! for the private key, SubjectPublicKeyInfo for the public one. A bare base64 line holding
//! the 32 raw key bytes is accepted too (e.g. a Helm value).
//!
//! Envelope v2 (`apiVersion: tenantflux.io/v1alpha2`) signs a small claims document instead of
//! the policy itself, so that what the agent decides on is all inside the signed bytes: the
//! key id, the generation, when it was issued, when it expires, the clusters it is for, and
//! the sha256 of the policy text that travels verbatim beside it:
//!
//! ```yaml
//! apiVersion: tenantflux.io/v1alpha2
//! kind: SignedPolicy
//! keyId: 3f2a...
//! signature: base64...     # ed25519 over the UTF-8 bytes of `claims`
//! claims: |
//!   kind: PolicyClaims
//!   keyId: 3f2a...
//!   generation: 7
//!   issuedAt: 2026-12-01T18:00:00Z
//!   expiresAt: 2026-12-31T18:00:00Z
//!   policySha256: 9c1e...
//! policy: |
//!   ...
//! ```
//!
//! A v1 envelope (no claims, the signature over `policy`) is still read; it never expires.

use base64::{Engine as _, engine::general_purpose::STANDARD};
use ed25519_dalek::{
    Signature, Signer as _, SigningKey, Verifier as _, VerifyingKey,
    pkcs8::{
        DecodePrivateKey as _, DecodePublicKey as _, EncodePrivateKey as _, EncodePublicKey as _,
        KeypairBytes, spki::der::pem::LineEnding,
    },
};
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use super::{Policy, PolicyError};

pub const SIGNED_KIND: &str = "SignedPolicy";
/// The envelope whose signature covers a claims document (v2).
pub const API_VERSION_V2: &str = "tenantflux.io/v1alpha2";
pub const CLAIMS_KIND: &str = "PolicyClaims";

/// DER prefix of an Ed25519 SubjectPublicKeyInfo (RFC 8410); the 32 key bytes follow. Keys
/// are read and written through ed25519-dalek's pkcs8/pem; the caller-identity CSR
/// (`crate::identity`) builds its DER with this.
pub(crate) const SPKI_PREFIX: [u8; 12] = [
    0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00,
];

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("not an ed25519 {what} key: expected a PEM \"{label}\" block or base64 of 32 bytes")]
    Format {
        what: &'static str,
        label: &'static str,
    },
    #[error("the ed25519 public key is not a valid curve point")]
    Point(#[source] ed25519_dalek::SignatureError),
    #[error("reading random bytes for a new key from the operating system")]
    Random(#[source] getrandom::Error),
}

#[derive(Debug, thiserror::Error)]
pub enum SignedError {
    #[error("the signed policy is not valid YAML or has a field the envelope lacks")]
    Yaml(#[source] crate::yaml::Error),
    #[error(
        "kind is {}; expected {SIGNED_KIND} (sign a Policy with `kubectl tenantflux policy sign`)",
        crate::text::quote(found)
    )]
    Kind { found: String },
    #[error(
        "apiVersion is {}; expected {} or {API_VERSION_V2}",
        crate::text::quote(found),
        super::API_VERSION
    )]
    ApiVersion { found: String },
    #[error(
        "a {API_VERSION_V2} envelope must carry claims (sign it again with `kubectl tenantflux policy sign`)"
    )]
    NoClaims,
    #[error(
        "a {} envelope carries no claims; claims belong to {API_VERSION_V2}",
        super::API_VERSION
    )]
    UnexpectedClaims,
    #[error("the signed claims are not a {CLAIMS_KIND} document")]
    Claims(#[source] crate::yaml::Error),
    #[error("the signed claims: {0}")]
    ClaimsInvalid(String),
    #[error("the signature is not base64 of 64 bytes")]
    SignatureEncoding,
    #[error(
        "unknown key: the policy is signed with key {signed_with}, but this agent trusts key {trusted}"
    )]
    UnknownKey {
        signed_with: String,
        trusted: String,
    },
    #[error(
        "bad signature: the policy does not match its signature by key {key_id} (it was changed after signing, or signed by another key)"
    )]
    BadSignature { key_id: String },
    #[error("the signed policy")]
    Policy(#[source] PolicyError),
}

/// A new private key from the operating system's randomness.
pub fn generate() -> Result<SigningKey, KeyError> {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).map_err(KeyError::Random)?;
    Ok(SigningKey::from_bytes(&seed))
}

/// The private key as a PKCS#8 v1 PEM file, byte for byte what OpenSSL writes (v2 would add
/// the public key, which the seed determines anyway).
pub fn private_pem(key: &SigningKey) -> String {
    let seed_only = KeypairBytes {
        secret_key: key.to_bytes(),
        public_key: None,
    };
    seed_only
        .to_pkcs8_pem(LineEnding::LF)
        .expect("an ed25519 key encodes as PKCS#8")
        .to_string()
}

/// The public key as a SubjectPublicKeyInfo PEM file.
pub fn public_pem(key: &VerifyingKey) -> String {
    key.to_public_key_pem(LineEnding::LF)
        .expect("an ed25519 key encodes as SubjectPublicKeyInfo")
}

/// The DER of a bare base64 key (no PEM armour), or its 32 raw bytes.
enum Bare {
    Raw([u8; 32]),
    Der(Vec<u8>),
}

fn bare(text: &str) -> Option<Bare> {
    let compact: String = text.split_whitespace().collect();
    let bytes = STANDARD.decode(compact).ok()?;
    Some(match <[u8; 32]>::try_from(&bytes[..]) {
        Ok(raw) => Bare::Raw(raw),
        Err(_) => Bare::Der(bytes),
    })
}

fn is_pem(text: &str) -> bool {
    text.trim_start().starts_with("-----BEGIN ")
}

pub fn read_private_key(text: &str) -> Result<SigningKey, KeyError> {
    let key = if is_pem(text) {
        SigningKey::from_pkcs8_pem(text.trim()).ok()
    } else {
        match bare(text) {
            Some(Bare::Raw(seed)) => Some(SigningKey::from_bytes(&seed)),
            Some(Bare::Der(der)) => SigningKey::from_pkcs8_der(&der).ok(),
            None => None,
        }
    };
    key.ok_or(KeyError::Format {
        what: "private",
        label: "PRIVATE KEY",
    })
}

pub fn read_public_key(text: &str) -> Result<VerifyingKey, KeyError> {
    let format = KeyError::Format {
        what: "public",
        label: "PUBLIC KEY",
    };
    if is_pem(text) {
        // SubjectPublicKeyInfo decoding checks the curve point too; a bad point reads as a
        // malformed key here.
        return VerifyingKey::from_public_key_pem(text.trim()).map_err(|_| format);
    }
    match bare(text) {
        Some(Bare::Raw(bytes)) => VerifyingKey::from_bytes(&bytes).map_err(KeyError::Point),
        Some(Bare::Der(der)) => VerifyingKey::from_public_key_der(&der).map_err(|_| format),
        None => Err(format),
    }
}

/// The first 16 hex digits of sha256 over the 32 public key bytes.
pub fn key_id(key: &VerifyingKey) -> String {
    Sha256::digest(key.as_bytes())[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A policy with its signature, as stored and sent.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SignedPolicy {
    pub api_version: String,
    pub kind: String,
    /// Which key to verify with; in v2 the signed claims must say the same.
    pub key_id: String,
    pub signature: String,
    /// v2: the claims document, byte for byte as signed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claims: Option<String>,
    /// The policy document, byte for byte as signed (v1) or as hashed into the claims (v2).
    pub policy: String,
}

/// What a v2 envelope's signature covers.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Claims {
    pub kind: String,
    pub key_id: String,
    pub generation: u64,
    /// RFC 3339, UTC (`2026-12-01T18:00:00Z`).
    pub issued_at: String,
    pub expires_at: String,
    /// The policy's `spec.clusters`, when it sets them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clusters: Option<Vec<super::ClusterSelector>>,
    /// Lowercase hex sha256 of the UTF-8 bytes of the envelope's `policy`.
    pub policy_sha256: String,
}

/// When a v2 policy holds: unix seconds, UTC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Validity {
    pub issued_at: i64,
    pub expires_at: i64,
}

impl Validity {
    /// From `expires_at` on the policy is stale: an agent keeps enforcing it (fail-static,
    /// nothing better is known) and reports it, so that freezing a cluster on an old policy
    /// shows.
    pub fn is_expired_at(&self, now: i64) -> bool {
        now >= self.expires_at
    }
}

/// A verified envelope: the policy and, for v2, its validity.
#[derive(Clone, Debug, PartialEq)]
pub struct Verified {
    pub policy: Policy,
    pub validity: Option<Validity>,
}

#[derive(Debug, thiserror::Error)]
pub enum SignError {
    #[error(transparent)]
    Policy(#[from] PolicyError),
    #[error("the expiry ({expires_at}) must be after the issue time ({issued_at})")]
    Expiry {
        issued_at: String,
        expires_at: String,
    },
}

fn hex_sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Now, in unix seconds.
pub fn now() -> i64 {
    jiff::Timestamp::now().as_second()
}

/// Unix seconds as RFC 3339 UTC, to the second; beyond the years 9999 either way (which no
/// signer writes), the nearest end of that range.
pub fn format_timestamp(unix: i64) -> String {
    let clamped = unix.clamp(
        jiff::Timestamp::MIN.as_second(),
        jiff::Timestamp::MAX.as_second(),
    );
    jiff::Timestamp::from_second(clamped)
        .unwrap_or(jiff::Timestamp::UNIX_EPOCH)
        .to_string()
}

/// RFC 3339 in UTC (`YYYY-MM-DDTHH:MM:SSZ`) to unix seconds; anything else is `None`. Only the
/// one form the envelope writes is read: claims are compared as signed, never normalized.
pub fn parse_timestamp(text: &str) -> Option<i64> {
    let shape = text.len() == 20
        && text.bytes().enumerate().all(|(i, c)| match i {
            4 | 7 => c == b'-',
            10 => c == b'T',
            13 | 16 => c == b':',
            19 => c == b'Z',
            _ => c.is_ascii_digit(),
        });
    // jiff reads a leap second (:60) as :59; a claim that says :60 is not one the signer wrote.
    if !shape || &text[17..19] > "59" {
        return None;
    }
    text.parse::<jiff::Timestamp>().ok().map(|t| t.as_second())
}

impl SignedPolicy {
    /// A v1 envelope (the signature over the policy; no claims, no expiry), for agents
    /// older than envelope v2. Checks `policy_text` first: a signature over a policy the
    /// agent would refuse helps nobody.
    pub fn sign_v1(policy_text: &str, key: &SigningKey) -> Result<(Self, Policy), PolicyError> {
        let policy = Policy::parse(policy_text)?;
        let signature = key.sign(policy_text.as_bytes());
        Ok((
            Self {
                api_version: super::API_VERSION.to_owned(),
                kind: SIGNED_KIND.to_owned(),
                key_id: key_id(&key.verifying_key()),
                signature: STANDARD.encode(signature.to_bytes()),
                claims: None,
                policy: policy_text.to_owned(),
            },
            policy,
        ))
    }

    /// A v2 envelope: claims (key id, generation, issue and expiry times in unix seconds,
    /// clusters, the policy's sha256) signed by `key`.
    pub fn sign(
        policy_text: &str,
        key: &SigningKey,
        issued_at: i64,
        expires_at: i64,
    ) -> Result<(Self, Policy), SignError> {
        let policy = Policy::parse(policy_text)?;
        if expires_at <= issued_at {
            return Err(SignError::Expiry {
                issued_at: format_timestamp(issued_at),
                expires_at: format_timestamp(expires_at),
            });
        }
        let id = key_id(&key.verifying_key());
        let claims = Claims {
            kind: CLAIMS_KIND.to_owned(),
            key_id: id.clone(),
            generation: policy.generation(),
            issued_at: format_timestamp(issued_at),
            expires_at: format_timestamp(expires_at),
            clusters: policy.document().spec.clusters.clone(),
            policy_sha256: hex_sha256(policy_text.as_bytes()),
        };
        let claims = crate::yaml::to_string(&claims).expect("claims serialize");
        let signature = key.sign(claims.as_bytes());
        Ok((
            Self {
                api_version: API_VERSION_V2.to_owned(),
                kind: SIGNED_KIND.to_owned(),
                key_id: id,
                signature: STANDARD.encode(signature.to_bytes()),
                claims: Some(claims),
                policy: policy_text.to_owned(),
            },
            policy,
        ))
    }

    pub fn parse(text: &str) -> Result<Self, SignedError> {
        let signed: Self = crate::yaml::from_str(text).map_err(SignedError::Yaml)?;
        if signed.kind != SIGNED_KIND {
            return Err(SignedError::Kind { found: signed.kind });
        }
        match (signed.api_version.as_str(), &signed.claims) {
            (super::API_VERSION, None) | (API_VERSION_V2, Some(_)) => Ok(signed),
            (super::API_VERSION, Some(_)) => Err(SignedError::UnexpectedClaims),
            (API_VERSION_V2, None) => Err(SignedError::NoClaims),
            _ => Err(SignedError::ApiVersion {
                found: signed.api_version,
            }),
        }
    }

    pub fn to_yaml(&self) -> String {
        crate::yaml::to_string(self).expect("a signed policy serializes")
    }

    /// The policy, if `key` signed exactly this text.
    pub fn verify(&self, key: &VerifyingKey) -> Result<Policy, SignedError> {
        self.verify_claims(key).map(|verified| verified.policy)
    }

    /// The policy and its validity, if `key` signed this envelope and (v2) the claims agree
    /// with the policy they cover. Expiry is not checked here: what to do with a stale
    /// policy is the holder's decision.
    pub fn verify_claims(&self, key: &VerifyingKey) -> Result<Verified, SignedError> {
        let trusted = key_id(key);
        if self.key_id != trusted {
            return Err(SignedError::UnknownKey {
                signed_with: self.key_id.clone(),
                trusted,
            });
        }
        let bytes: [u8; 64] = STANDARD
            .decode(self.signature.trim())
            .ok()
            .and_then(|b| b.try_into().ok())
            .ok_or(SignedError::SignatureEncoding)?;
        let signed_bytes = self.claims.as_deref().unwrap_or(&self.policy);
        let bad_signature = || SignedError::BadSignature {
            key_id: self.key_id.clone(),
        };
        key.verify(signed_bytes.as_bytes(), &Signature::from_bytes(&bytes))
            .map_err(|_| bad_signature())?;
        let Some(claims) = &self.claims else {
            let policy = Policy::parse(&self.policy).map_err(SignedError::Policy)?;
            return Ok(Verified {
                policy,
                validity: None,
            });
        };
        let claims: Claims = crate::yaml::from_str(claims).map_err(SignedError::Claims)?;
        // The policy text is covered by its hash: a changed policy is a bad signature.
        if claims.policy_sha256 != hex_sha256(self.policy.as_bytes()) {
            return Err(bad_signature());
        }
        let invalid = |what: String| Err(SignedError::ClaimsInvalid(what));
        if claims.kind != CLAIMS_KIND {
            return invalid(format!(
                "kind is {}, not {CLAIMS_KIND}",
                crate::text::quote(&claims.kind)
            ));
        }
        if claims.key_id != self.key_id {
            return invalid(format!(
                "keyId {} is not the envelope's key {}",
                crate::text::quote(&claims.key_id),
                self.key_id
            ));
        }
        let time = |field: &str, text: &str| {
            parse_timestamp(text).ok_or_else(|| {
                SignedError::ClaimsInvalid(format!(
                    "{field} {} is not an RFC 3339 UTC time (YYYY-MM-DDTHH:MM:SSZ)",
                    crate::text::quote(text)
                ))
            })
        };
        let validity = Validity {
            issued_at: time("issuedAt", &claims.issued_at)?,
            expires_at: time("expiresAt", &claims.expires_at)?,
        };
        if validity.expires_at <= validity.issued_at {
            return invalid(format!(
                "expiresAt {} is not after issuedAt {}",
                claims.expires_at, claims.issued_at
            ));
        }
        let policy = Policy::parse(&self.policy).map_err(SignedError::Policy)?;
        if claims.generation != policy.generation() {
            return invalid(format!(
                "generation {} is not the policy's spec.generation {}",
                claims.generation,
                policy.generation()
            ));
        }
        if claims.clusters != policy.document().spec.clusters {
            return invalid("clusters are not the policy's spec.clusters".to_owned());
        }
        Ok(Verified {
            policy,
            validity: Some(validity),
        })
    }
}

#[cfg(test)]
mod tests;
