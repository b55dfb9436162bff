//! Keys that rotate and revoke, after TUF's root and targets roles, kept small.
//!
//! The agent is installed with one or more *root* public keys and a threshold. The root keys
//! sign a versioned keyring document: which policy-signing keys are active and which are
//! revoked. A policy verifies only with an active key of the keyring in force; a keyring
//! replaces the one in force only when at least `threshold` distinct installed root keys
//! signed exactly its bytes and its version is higher (an equal version must be
//! byte-identical), so the version never goes back. The install of a single
//! `--policy-public-key` is a keyring of one: version 0, that key, no root to change it.
//!
//! ```yaml
//! apiVersion: tenantflux.io/v1alpha2
//! kind: SignedKeyring
//! signatures:
//! - keyId: 1a2b...          # a root key's id
//!   signature: base64...    # ed25519 over the UTF-8 bytes of `keyring`
//! keyring: |
//!   kind: Keyring
//!   version: 3
//!   keys:
//!   - keyId: 3f2a...
//!     publicKey: base64 of the 32 key bytes
//!   revoked: [9c1e...]
//! ```

use std::collections::BTreeSet;

use base64::{Engine as _, engine::general_purpose::STANDARD};
use ed25519_dalek::{Signature, Signer as _, SigningKey, Verifier as _, VerifyingKey};
use serde::{Deserialize, Serialize};

use super::signing::{API_VERSION_V2, key_id};
use crate::text::quote;

pub const SIGNED_KIND: &str = "SignedKeyring";
pub const KIND: &str = "Keyring";

/// The keyring as written (and signed).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Document {
    pub kind: String,
    pub version: u64,
    pub keys: Vec<KeyEntry>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub revoked: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct KeyEntry {
    pub key_id: String,
    /// Base64 of the 32 public key bytes.
    pub public_key: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RootSignature {
    pub key_id: String,
    pub signature: String,
}

/// A keyring with the root signatures over its exact bytes.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SignedKeyring {
    pub api_version: String,
    pub kind: String,
    pub signatures: Vec<RootSignature>,
    pub keyring: String,
}

#[derive(Debug, thiserror::Error)]
pub enum KeyringError {
    #[error("the signed keyring is not valid YAML or has a field the envelope lacks")]
    Yaml(#[source] crate::yaml::Error),
    #[error("kind is {}; expected {SIGNED_KIND} (sign one with `kubectl tenantflux policy keyring sign`)", quote(.0))]
    Kind(String),
    #[error("apiVersion is {}; expected {API_VERSION_V2}", quote(.0))]
    ApiVersion(String),
    #[error("the keyring is not a {KIND} document: {0}")]
    Document(String),
    #[error(
        "keyring version {version} is signed by {valid} of the installed root keys, fewer than the threshold {threshold}"
    )]
    Threshold {
        version: u64,
        valid: usize,
        threshold: usize,
    },
    #[error(
        "keyring version {new} is not newer than version {held}, which the agent holds: a keyring's version never goes back"
    )]
    Rollback { new: u64, held: u64 },
    #[error("keyring version {0} differs from the keyring of the same version the agent holds")]
    Conflict(u64),
}

/// Why a policy's key is not trusted by the keyring in force.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KeyRefusal {
    #[error(
        "revoked key: the policy is signed with key {key_id}, which keyring version {version} revokes"
    )]
    Revoked { key_id: String, version: u64 },
    #[error(
        "unknown key: the policy is signed with key {key_id}, which is not in keyring version {version} (active: {active})"
    )]
    Unknown {
        key_id: String,
        version: u64,
        active: String,
    },
}

/// A checked keyring: the document and its parsed keys.
#[derive(Clone, Debug, PartialEq)]
pub struct Keyring {
    pub version: u64,
    keys: Vec<VerifyingKey>,
    revoked: BTreeSet<String>,
    /// The signed text it came from (none for the keyring of one of a single-key install).
    pub signed: Option<SignedKeyring>,
}

impl Keyring {
    /// The keyring of a single-key install: version 0, that key.
    pub fn of_one(key: VerifyingKey) -> Self {
        Self {
            version: 0,
            keys: vec![key],
            revoked: BTreeSet::new(),
            signed: None,
        }
    }

    /// The key that may verify a policy signed by `id`.
    pub fn key(&self, id: &str) -> Result<&VerifyingKey, KeyRefusal> {
        if self.revoked.contains(id) {
            return Err(KeyRefusal::Revoked {
                key_id: id.to_owned(),
                version: self.version,
            });
        }
        self.keys
            .iter()
            .find(|k| key_id(k) == id)
            .ok_or_else(|| KeyRefusal::Unknown {
                key_id: quote(id),
                version: self.version,
                active: self.key_ids().join(", "),
            })
    }

    pub fn key_ids(&self) -> Vec<String> {
        self.keys.iter().map(key_id).collect()
    }
}

/// The installed root keys and how many of them must sign a keyring.
#[derive(Clone, Debug)]
pub struct Roots {
    keys: Vec<VerifyingKey>,
    threshold: usize,
}

impl Roots {
    /// `threshold` is at least 1 and at most the number of keys.
    pub fn new(keys: Vec<VerifyingKey>, threshold: usize) -> Result<Self, String> {
        let distinct: BTreeSet<String> = keys.iter().map(key_id).collect();
        if distinct.len() != keys.len() {
            return Err("the same root key is installed twice".into());
        }
        if threshold == 0 || threshold > keys.len() {
            return Err(format!(
                "the root threshold {threshold} must be between 1 and the number of root keys ({})",
                keys.len()
            ));
        }
        Ok(Self { keys, threshold })
    }

    /// The keyring in `text`, if enough root keys signed it and it may replace `held`.
    pub fn verify(&self, text: &str, held: Option<&Keyring>) -> Result<Keyring, KeyringError> {
        let signed: SignedKeyring = crate::yaml::from_str(text).map_err(KeyringError::Yaml)?;
        if signed.api_version != API_VERSION_V2 {
            return Err(KeyringError::ApiVersion(signed.api_version));
        }
        if signed.kind != SIGNED_KIND {
            return Err(KeyringError::Kind(signed.kind));
        }
        // Each root key counts once, however often it appears.
        let valid: BTreeSet<String> = signed
            .signatures
            .iter()
            .filter_map(|s| {
                let key = self.keys.iter().find(|k| key_id(k) == s.key_id)?;
                let bytes: [u8; 64] = STANDARD.decode(s.signature.trim()).ok()?.try_into().ok()?;
                key.verify(signed.keyring.as_bytes(), &Signature::from_bytes(&bytes))
                    .ok()
                    .map(|()| s.key_id.clone())
            })
            .collect();
        let document: Document = crate::yaml::from_str(&signed.keyring)
            .map_err(|err| KeyringError::Document(crate::text::chain(&err)))?;
        if valid.len() < self.threshold {
            return Err(KeyringError::Threshold {
                version: document.version,
                valid: valid.len(),
                threshold: self.threshold,
            });
        }
        if document.kind != KIND {
            return Err(KeyringError::Document(format!(
                "kind is {}",
                quote(&document.kind)
            )));
        }
        if let Some(held) = held {
            match document.version.cmp(&held.version) {
                std::cmp::Ordering::Less => {
                    return Err(KeyringError::Rollback {
                        new: document.version,
                        held: held.version,
                    });
                }
                std::cmp::Ordering::Equal
                    if held.signed.as_ref().map(|s| &s.keyring) != Some(&signed.keyring) =>
                {
                    return Err(KeyringError::Conflict(document.version));
                }
                _ => {}
            }
        }
        let keyring = parse_document(&document)?;
        Ok(Keyring {
            signed: Some(signed),
            ..keyring
        })
    }
}

fn parse_document(document: &Document) -> Result<Keyring, KeyringError> {
    if document.version == 0 {
        return Err(KeyringError::Document(
            "version must be 1 or more (0 is the keyring of one of a single-key install)".into(),
        ));
    }
    let mut keys = Vec::new();
    for (index, entry) in document.keys.iter().enumerate() {
        let key = super::signing::read_public_key(&entry.public_key).map_err(|_| {
            KeyringError::Document(format!("keys[{index}].publicKey is not an ed25519 key"))
        })?;
        if key_id(&key) != entry.key_id {
            return Err(KeyringError::Document(format!(
                "keys[{index}].keyId {} is not the id of its publicKey ({})",
                quote(&entry.key_id),
                key_id(&key)
            )));
        }
        if document.revoked.contains(&entry.key_id) {
            return Err(KeyringError::Document(format!(
                "keys[{index}] ({}) is also revoked",
                entry.key_id
            )));
        }
        keys.push(key);
    }
    if keys.is_empty() {
        return Err(KeyringError::Document(
            "keys is empty: no policy could verify".into(),
        ));
    }
    Ok(Keyring {
        version: document.version,
        keys,
        revoked: document.revoked.iter().cloned().collect(),
        signed: None,
    })
}

/// A keyring document for `keys` (public), revoking `revoked` ids, at `version`.
pub fn document(version: u64, keys: &[VerifyingKey], revoked: &[String]) -> String {
    let document = Document {
        kind: KIND.to_owned(),
        version,
        keys: keys
            .iter()
            .map(|k| KeyEntry {
                key_id: key_id(k),
                public_key: STANDARD.encode(k.as_bytes()),
            })
            .collect(),
        revoked: revoked.to_vec(),
    };
    crate::yaml::to_string(&document).expect("a keyring serializes")
}

/// Signs the keyring `text` with every root key in `roots`, after checking it.
pub fn sign(text: &str, roots: &[SigningKey]) -> Result<SignedKeyring, KeyringError> {
    let document: Document = crate::yaml::from_str(text)
        .map_err(|err| KeyringError::Document(crate::text::chain(&err)))?;
    if document.kind != KIND {
        return Err(KeyringError::Document(format!(
            "kind is {}",
            quote(&document.kind)
        )));
    }
    parse_document(&document)?;
    Ok(SignedKeyring {
        api_version: API_VERSION_V2.to_owned(),
        kind: SIGNED_KIND.to_owned(),
        signatures: roots
            .iter()
            .map(|root| RootSignature {
                key_id: key_id(&root.verifying_key()),
                signature: STANDARD.encode(root.sign(text.as_bytes()).to_bytes()),
            })
            .collect(),
        keyring: text.to_owned(),
    })
}

impl SignedKeyring {
    pub fn to_yaml(&self) -> String {
        crate::yaml::to_string(self).expect("a signed keyring serializes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::signing::generate;

    #[test]
    fn a_keyring_signed_by_enough_roots_names_the_active_keys() {
        let (root_a, root_b, root_c) = (
            generate().unwrap(),
            generate().unwrap(),
            generate().unwrap(),
        );
        let roots = Roots::new(
            vec![
                root_a.verifying_key(),
                root_b.verifying_key(),
                root_c.verifying_key(),
            ],
            2,
        )
        .unwrap();
        let (k1, k2) = (generate().unwrap(), generate().unwrap());
        let text = document(1, &[k1.verifying_key()], &[]);
        let one = sign(&text, std::slice::from_ref(&root_a))
            .unwrap()
            .to_yaml();
        let err = roots.verify(&one, None).unwrap_err().to_string();
        assert!(
            err.contains("signed by 1 of the installed root keys, fewer than the threshold 2"),
            "{err}"
        );
        // The same root twice counts once.
        let mut twice = sign(&text, std::slice::from_ref(&root_a)).unwrap();
        twice.signatures.push(twice.signatures[0].clone());
        assert!(roots.verify(&twice.to_yaml(), None).is_err());
        // A root key that is not installed counts for nothing.
        let stranger = generate().unwrap();
        assert!(
            roots
                .verify(
                    &sign(&text, &[root_a.clone(), stranger]).unwrap().to_yaml(),
                    None
                )
                .is_err()
        );

        let v1 = roots
            .verify(
                &sign(&text, &[root_a.clone(), root_c.clone()])
                    .unwrap()
                    .to_yaml(),
                None,
            )
            .unwrap();
        assert_eq!(v1.version, 1);
        assert!(v1.key(&key_id(&k1.verifying_key())).is_ok());
        let err = v1
            .key(&key_id(&k2.verifying_key()))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("unknown key") && err.contains("not in keyring version 1"),
            "{err}"
        );

        // Rotation: version 2 adds k2 and revokes k1.
        let k1_id = key_id(&k1.verifying_key());
        let text2 = document(2, &[k2.verifying_key()], std::slice::from_ref(&k1_id));
        let signed2 = sign(&text2, &[root_b.clone(), root_c.clone()])
            .unwrap()
            .to_yaml();
        let v2 = roots.verify(&signed2, Some(&v1)).unwrap();
        let err = v2.key(&k1_id).unwrap_err().to_string();
        assert!(
            err.starts_with("revoked key") && err.contains("keyring version 2 revokes"),
            "{err}"
        );
        assert!(v2.key(&key_id(&k2.verifying_key())).is_ok());

        // The version never goes back; an equal one must be the same bytes.
        let back = sign(&text, &[root_a.clone(), root_b.clone()])
            .unwrap()
            .to_yaml();
        let err = roots.verify(&back, Some(&v2)).unwrap_err().to_string();
        assert!(err.contains("not newer than version 2"), "{err}");
        assert!(
            roots.verify(&signed2, Some(&v2)).is_ok(),
            "the same keyring again"
        );
        let other2 = sign(&document(2, &[k1.verifying_key()], &[]), &[root_a, root_b])
            .unwrap()
            .to_yaml();
        let err = roots.verify(&other2, Some(&v2)).unwrap_err().to_string();
        assert!(
            err.contains("differs from the keyring of the same version"),
            "{err}"
        );
    }

    #[test]
    fn a_tampered_or_malformed_keyring_is_refused() {
        let root = generate().unwrap();
        let roots = Roots::new(vec![root.verifying_key()], 1).unwrap();
        let key = generate().unwrap();
        let signed = sign(
            &document(1, &[key.verifying_key()], &[]),
            std::slice::from_ref(&root),
        )
        .unwrap();
        let mut tampered = signed.clone();
        tampered.keyring = tampered.keyring.replace("version: 1", "version: 9");
        let err = roots
            .verify(&tampered.to_yaml(), None)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("signed by 0 of the installed root keys"),
            "{err}"
        );
        let id = key_id(&key.verifying_key());
        let err = sign(
            &document(1, &[key.verifying_key()], &[id]),
            std::slice::from_ref(&root),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("is also revoked"), "{err}");
        let err = sign(
            &document(0, &[key.verifying_key()], &[]),
            std::slice::from_ref(&root),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("version must be 1 or more"), "{err}");
        let err = sign(&document(1, &[], &[]), &[root])
            .unwrap_err()
            .to_string();
        assert!(err.contains("keys is empty"), "{err}");
        assert!(Roots::new(vec![key.verifying_key()], 2).is_err());
        assert!(Roots::new(vec![key.verifying_key(), key.verifying_key()], 1).is_err());
    }

    #[test]
    fn the_single_key_install_is_a_keyring_of_one() {
        let key = generate().unwrap();
        let one = Keyring::of_one(key.verifying_key());
        assert_eq!(one.version, 0);
        assert!(one.key(&key_id(&key.verifying_key())).is_ok());
        let other = generate().unwrap();
        assert!(one.key(&key_id(&other.verifying_key())).is_err());
    }
}
