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
        "apiVersion is {}; expected {}",
        crate::text::quote(found),
        super::API_VERSION
    )]
    ApiVersion { found: String },
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
    pub key_id: String,
    pub signature: String,
    /// The policy document, byte for byte as signed.
    pub policy: String,
}

impl SignedPolicy {
    /// Checks `policy_text` (a signature over a policy the agent would refuse helps nobody)
    /// and signs it.
    pub fn sign(policy_text: &str, key: &SigningKey) -> Result<(Self, Policy), PolicyError> {
        let policy = Policy::parse(policy_text)?;
        let signature = key.sign(policy_text.as_bytes());
        Ok((
            Self {
                api_version: super::API_VERSION.to_owned(),
                kind: SIGNED_KIND.to_owned(),
                key_id: key_id(&key.verifying_key()),
                signature: STANDARD.encode(signature.to_bytes()),
                policy: policy_text.to_owned(),
            },
            policy,
        ))
    }

    pub fn parse(text: &str) -> Result<Self, SignedError> {
        let signed: Self = crate::yaml::from_str(text).map_err(SignedError::Yaml)?;
        if signed.api_version != super::API_VERSION {
            return Err(SignedError::ApiVersion {
                found: signed.api_version,
            });
        }
        if signed.kind != SIGNED_KIND {
            return Err(SignedError::Kind { found: signed.kind });
        }
        Ok(signed)
    }

    pub fn to_yaml(&self) -> String {
        crate::yaml::to_string(self).expect("a signed policy serializes")
    }

    /// The policy, if `key` signed exactly this text.
    pub fn verify(&self, key: &VerifyingKey) -> Result<Policy, SignedError> {
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
        key.verify(self.policy.as_bytes(), &Signature::from_bytes(&bytes))
            .map_err(|_| SignedError::BadSignature {
                key_id: self.key_id.clone(),
            })?;
        Policy::parse(&self.policy).map_err(SignedError::Policy)
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
        let (signed, policy) = SignedPolicy::sign(POLICY, &key).unwrap();
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
        let (mut impostor, _) = SignedPolicy::sign(POLICY, &other).unwrap();
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
        assert!(SignedPolicy::sign("kind: Policy", &key).is_err());
        let err = SignedPolicy::parse(POLICY).unwrap_err().to_string();
        assert!(err.contains("not valid YAML or has a field"), "{err}");
        let (signed, _) = SignedPolicy::sign(POLICY, &key).unwrap();
        let wrong_kind = signed.to_yaml().replace("SignedPolicy", "Policy");
        let err = SignedPolicy::parse(&wrong_kind).unwrap_err().to_string();
        assert!(err.contains("expected SignedPolicy"), "{err}");
    }
}
