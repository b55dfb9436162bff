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
    let seconds = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    i64::try_from(seconds).unwrap_or(i64::MAX)
}

/// Unix seconds as RFC 3339 UTC, to the second.
pub fn format_timestamp(unix: i64) -> String {
    let (days, secs) = (unix.div_euclid(86_400), unix.rem_euclid(86_400));
    // Howard Hinnant's civil_from_days, the inverse of `super::parse_date`.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    )
}

/// RFC 3339 in UTC (`YYYY-MM-DDTHH:MM:SSZ`) to unix seconds; anything else is `None`.
pub fn parse_timestamp(text: &str) -> Option<i64> {
    let (date, time) = text.split_once('T')?;
    let time = time.strip_suffix('Z')?;
    let day = super::parse_date(date)?;
    let mut parts = time.split(':');
    let (h, m, s) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || [h, m, s].iter().any(|p| p.len() != 2) {
        return None;
    }
    let (h, m, s): (i64, i64, i64) = (h.parse().ok()?, m.parse().ok()?, s.parse().ok()?);
    if h > 23 || m > 59 || s > 59 {
        return None;
    }
    Some(day * 86_400 + h * 3600 + m * 60 + s)
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
mod tests {
    use super::*;

    const POLICY: &str = include_str!("../../../../deploy/policy/example.yaml");

    #[test]
    fn keys_round_trip_through_pem_and_bare_base64() {
        let key = generate().unwrap();
        let private = private_pem(&key);
        let public = public_pem(&key.verifying_key());
        assert!(
            private.starts_with("-----BEGIN PRIVATE KEY-----\n"),
            "{private}"
        );
        assert_eq!(
            read_private_key(&private).unwrap().as_bytes(),
            key.as_bytes()
        );
        assert_eq!(read_public_key(&public).unwrap(), key.verifying_key());
        let bare = STANDARD.encode(key.verifying_key().as_bytes());
        assert_eq!(read_public_key(&bare).unwrap(), key.verifying_key());
        assert_eq!(key_id(&key.verifying_key()).len(), 16);
        // A private key is not a public one.
        assert!(read_public_key(&private).is_err());
        assert!(read_public_key("hello").is_err());
    }

    /// A key OpenSSL wrote (`openssl genpkey -algorithm ed25519`, then `openssl pkey -pubout`).
    #[test]
    fn reads_openssl_keys() {
        let private = "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIPBiGBDOv5wSC7ShL9H4ZoeARcALL6RQulIw1d856qRI\n-----END PRIVATE KEY-----\n";
        let public = "-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEAAJo2V6z47o5JPkLf0pDerCk+u0Jec3ujwJ+uIXuOwtE=\n-----END PUBLIC KEY-----\n";
        let key = read_private_key(private).unwrap();
        assert_eq!(key.verifying_key(), read_public_key(public).unwrap());
        assert_eq!(public_pem(&key.verifying_key()), public);
        assert_eq!(private_pem(&key), private);
    }

    #[test]
    fn reads_pkcs8_v2_and_refuses_other_algorithms() {
        let key = generate().unwrap();
        let v2 = key.to_pkcs8_pem(LineEnding::LF).unwrap();
        assert_eq!(read_private_key(&v2).unwrap().to_bytes(), key.to_bytes());
        let p256 = "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEOJfelARbsg7pPeAsPrJNYyxHLN/f\nQLbMrxbU5QFoCMBhDpH0QETLwAwouH7FN1c/0drs3WWlgTTNp19K7zYZtw==\n-----END PUBLIC KEY-----\n";
        assert_eq!(
            read_public_key(p256).unwrap_err().to_string(),
            "not an ed25519 public key: expected a PEM \"PUBLIC KEY\" block or base64 of 32 bytes"
        );
        assert!(read_private_key(&public_pem(&key.verifying_key())).is_err());
    }

    #[test]
    fn sign_then_verify_and_refuse_tampering_and_other_keys() {
        let key = generate().unwrap();
        let (signed, policy) = SignedPolicy::sign_v1(POLICY, &key).unwrap();
        let text = signed.to_yaml();
        let parsed = SignedPolicy::parse(&text).unwrap();
        assert_eq!(parsed, signed);
        assert_eq!(parsed.verify(&key.verifying_key()).unwrap(), policy);

        let mut forged = parsed.clone();
        forged.policy = forged.policy.replace("generation: 7", "generation: 8");
        let err = forged.verify(&key.verifying_key()).unwrap_err().to_string();
        assert!(err.starts_with("bad signature"), "{err}");

        let other = generate().unwrap();
        let err = parsed
            .verify(&other.verifying_key())
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("unknown key"), "{err}");

        // Signed by another key but labelled with the trusted key's id.
        let (mut impostor, _) = SignedPolicy::sign_v1(POLICY, &other).unwrap();
        impostor.key_id = key_id(&key.verifying_key());
        let err = impostor
            .verify(&key.verifying_key())
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("bad signature"), "{err}");
    }

    #[test]
    fn envelopes_and_policies_that_do_not_parse_are_refused() {
        let key = generate().unwrap();
        assert!(SignedPolicy::sign_v1("kind: Policy", &key).is_err());
        let err = SignedPolicy::parse(POLICY).unwrap_err().to_string();
        assert!(err.contains("not valid YAML or has a field"), "{err}");
        let (signed, _) = SignedPolicy::sign_v1(POLICY, &key).unwrap();
        let wrong_kind = signed.to_yaml().replace("SignedPolicy", "Policy");
        let err = SignedPolicy::parse(&wrong_kind).unwrap_err().to_string();
        assert!(err.contains("expected SignedPolicy"), "{err}");
    }

    const DAY: i64 = 86_400;
    const T0: i64 = 1_796_083_200; // 2026-12-01T00:00:00Z

    #[test]
    fn timestamps_round_trip_and_refuse_other_forms() {
        assert_eq!(format_timestamp(T0), "2026-12-01T00:00:00Z");
        assert_eq!(format_timestamp(T0 + 3661), "2026-12-01T01:01:01Z");
        assert_eq!(format_timestamp(0), "1970-01-01T00:00:00Z");
        for t in [0, T0, T0 + 86_399, 951_782_400 /* 2000-02-29 */] {
            assert_eq!(parse_timestamp(&format_timestamp(t)), Some(t));
        }
        for bad in [
            "2026-12-01",
            "2026-12-01T00:00:00",
            "2026-12-01T00:00:00+01:00",
            "2026-12-01T24:00:00Z",
            "2026-02-30T00:00:00Z",
            "2026-12-01T0:00:00Z",
        ] {
            assert_eq!(parse_timestamp(bad), None, "{bad}");
        }
    }

    #[test]
    fn v2_claims_are_signed_and_agree_with_the_policy() {
        let key = generate().unwrap();
        let (signed, policy) = SignedPolicy::sign(POLICY, &key, T0, T0 + 30 * DAY).unwrap();
        assert_eq!(signed.api_version, API_VERSION_V2);
        let parsed = SignedPolicy::parse(&signed.to_yaml()).unwrap();
        assert_eq!(parsed, signed);
        let verified = parsed.verify_claims(&key.verifying_key()).unwrap();
        assert_eq!(verified.policy, policy);
        let validity = verified.validity.unwrap();
        assert_eq!(validity.issued_at, T0);
        assert!(!validity.is_expired_at(T0 + 30 * DAY - 1));
        assert!(validity.is_expired_at(T0 + 30 * DAY));
        let claims = signed.claims.as_deref().unwrap();
        assert!(claims.contains("generation: 7"), "{claims}");
        assert!(
            claims.contains("expiresAt: \"2026-12-31T00:00:00Z\""),
            "{claims}"
        );

        // The policy changed after signing: its hash no longer matches the claims.
        let mut forged = signed.clone();
        forged.policy = forged.policy.replace("generation: 7", "generation: 8");
        let err = forged.verify(&key.verifying_key()).unwrap_err().to_string();
        assert!(err.starts_with("bad signature"), "{err}");
        // The claims changed (a later expiry): the signature no longer matches.
        let mut extended = signed.clone();
        extended.claims = Some(claims.replace("2026-12-31", "2027-12-31"));
        let err = extended
            .verify(&key.verifying_key())
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("bad signature"), "{err}");
        // A v2 envelope relabelled v1: the signature covers the claims, not the policy.
        let mut downgraded = signed.clone();
        downgraded.api_version = crate::policy::API_VERSION.to_owned();
        downgraded.claims = None;
        let err = downgraded
            .verify(&key.verifying_key())
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("bad signature"), "{err}");
        // A v2 envelope without claims, or a v1 envelope with them, is not an envelope.
        let err = SignedPolicy::parse(
            &signed
                .to_yaml()
                .replace(API_VERSION_V2, crate::policy::API_VERSION),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("carries no claims"), "{err}");

        assert!(SignedPolicy::sign(POLICY, &key, T0, T0).is_err());
    }

    /// Claims signed by the right key that disagree with the policy are refused, naming the
    /// field.
    #[test]
    fn claims_that_disagree_with_the_policy_are_refused() {
        let key = generate().unwrap();
        let (signed, _) = SignedPolicy::sign(POLICY, &key, T0, T0 + DAY).unwrap();
        let resign = |edit: &dyn Fn(&str) -> String| {
            let mut envelope = signed.clone();
            let claims = edit(signed.claims.as_deref().unwrap());
            envelope.signature = STANDARD.encode(key.sign(claims.as_bytes()).to_bytes());
            envelope.claims = Some(claims);
            envelope
                .verify(&key.verifying_key())
                .unwrap_err()
                .to_string()
        };
        let err = resign(&|c| c.replace("generation: 7", "generation: 70"));
        assert!(
            err.contains("generation 70 is not the policy's spec.generation 7"),
            "{err}"
        );
        let err = resign(&|c| format!("{c}clusters:\n- name: blue\n"));
        assert!(
            err.contains("clusters are not the policy's spec.clusters"),
            "{err}"
        );
        let err = resign(&|c| c.replace("T00:00:00Z", "T00:00:00+00:00"));
        assert!(err.contains("not an RFC 3339 UTC time"), "{err}");
        let err = resign(&|c| c.replace(&signed.key_id, "0000000000000000"));
        assert!(err.contains("is not the envelope's key"), "{err}");
        let err = resign(&|c| c.replace("PolicyClaims", "Keyring"));
        assert!(err.contains("not PolicyClaims"), "{err}");
    }
}
