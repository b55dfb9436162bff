//! Whether the agent takes a policy: the trust and rollback rules between what it is offered
//! (pushed, pulled, or found stored at start) and what it holds. The caller has verified the
//! signature with the keyring in force and does every read and write; these functions say what
//! follows, so each rule is tested without a cluster.

use std::fmt;

use ed25519_dalek::VerifyingKey;

use super::{
    ClusterIdentity, Policy, Refusal,
    keyring::{KeyRefusal, Keyring},
    signing::{SignedPolicy, Validity},
};

/// A verified policy: its envelope as signed and the policy it carries.
#[derive(Clone, Copy, Debug)]
pub struct Candidate<'a> {
    pub signed: &'a SignedPolicy,
    pub policy: &'a Policy,
}

/// The policy in force, as far as a decision needs it.
#[derive(Clone, Copy, Debug)]
pub struct Holding<'a> {
    pub signed: &'a SignedPolicy,
    pub policy: &'a Policy,
    /// Whether the keyring in force still trusts the key that signed it ([`trusts`]): the
    /// generations of a revoked key bind nobody.
    pub trusted: bool,
}

/// What to do with a pushed or pulled policy.
#[derive(Debug)]
pub enum Push {
    /// Take it; `previous_generation` is the one held before (0 if none).
    Accept { previous_generation: u64 },
    /// The same generation with the same content is held already: nothing to write.
    Unchanged { previous_generation: u64 },
    /// Keep the one held.
    Refuse(Refused),
}

/// Why a verified policy is not taken.
#[derive(Debug)]
pub enum Refused {
    /// The cluster's identity is not read yet, so `spec.clusters` cannot be checked.
    NoIdentity,
    /// `spec.clusters` does not name this cluster.
    OtherCluster(Refusal),
    /// Not above the generation held, while the key that signed the held one is trusted: a
    /// rollback, or the same generation with other content.
    Stale { new: u64, old: u64, held: String },
    /// Its signed expiry has passed.
    Expired { expires_at: i64 },
}

/// Decides a pushed or pulled policy against the one `held`, at `now` (unix seconds).
pub fn push(
    offered: Candidate<'_>,
    validity: Option<Validity>,
    held: Option<Holding<'_>>,
    cluster: Option<&ClusterIdentity>,
    now: i64,
) -> Push {
    let Some(cluster) = cluster else {
        return Push::Refuse(Refused::NoIdentity);
    };
    if let Err(refusal) = offered.policy.is_for(cluster) {
        return Push::Refuse(Refused::OtherCluster(refusal));
    }
    let previous_generation = held.map_or(0, |h| h.policy.generation());
    if let Some(held) = held {
        let (new, old) = (offered.policy.generation(), held.policy.generation());
        if new == old
            && held.signed.policy == offered.signed.policy
            && held.signed.claims == offered.signed.claims
        {
            return Push::Unchanged {
                previous_generation,
            };
        }
        if new <= old && held.trusted {
            return Push::Refuse(Refused::Stale {
                new,
                old,
                held: held.policy.to_string(),
            });
        }
    }
    // Only after the checks above: an expired policy equal to the one held is still answered
    // as unchanged, so a re-push of what is in force does not read as a refusal.
    if let Some(validity) = validity.filter(|v| v.is_expired_at(now)) {
        return Push::Refuse(Refused::Expired {
            expires_at: validity.expires_at,
        });
    }
    Push::Accept {
        previous_generation,
    }
}

/// A copy read at start: `None` when absent, `Err` with the reason it failed verification.
pub type Read<T> = Option<Result<T, String>>;

/// What the agent holds after reading its two copies at start.
#[derive(Debug)]
pub struct Start<T> {
    pub hold: Option<Hold<T>>,
    /// What to report, in this order.
    pub problems: Vec<StartProblem>,
}

/// Which copy is in force after the start.
#[derive(Debug)]
pub enum Hold<T> {
    /// The stored copy; `record` when the highest-generation record is absent or lower, so it
    /// is written again.
    Stored { copy: T, record: bool },
    /// The recorded copy, which the store gets back.
    Recorded(T),
}

#[derive(Debug, PartialEq, Eq)]
pub enum StartProblem {
    /// The record failed verification or is for another cluster; it tells no rollback.
    RecordIgnored { reason: String },
    /// The stored copy failed verification, is for another cluster, or is below the record.
    StoredRefused { reason: String },
    /// The record says less than the stored copy, so the record itself was rolled back.
    RecordRolledBack { recorded: u64, stored: u64 },
    /// The stored copy was `deleted` (or refused); the recorded `generation` replaces it.
    StoredReplaced { deleted: bool, generation: u64 },
    /// No record beside a stored copy of `stored`: the agent records before it stores, so the
    /// record was deleted, and a rollback to `stored` cannot be ruled out.
    RecordMissing { stored: u64 },
}

/// Decides the stored copy against the record of the highest generation this `cluster`
/// accepted, which stops an older validly signed copy put in the store while the agent was
/// down from taking effect. `policy` names the policy a copy carries.
pub fn at_start<T>(
    stored: Read<T>,
    recorded: Read<T>,
    cluster: &ClusterIdentity,
    policy: impl Fn(&T) -> &Policy,
) -> Start<T> {
    let mut problems = Vec::new();
    let record_absent = recorded.is_none();
    let recorded = recorded.and_then(|read| {
        read.and_then(|copy| match policy(&copy).is_for(cluster) {
            Ok(()) => Ok(copy),
            Err(refusal) => Err(refusal.to_string()),
        })
        .map_err(|reason| problems.push(StartProblem::RecordIgnored { reason }))
        .ok()
    });
    let highest = recorded.as_ref().map(|copy| policy(copy).generation());
    let deleted = stored.is_none();
    let stored = stored.and_then(|read| {
        read.and_then(|copy| {
            let stored = policy(&copy);
            match stored
                .is_for(cluster)
                .and_then(|()| stored.is_not_rollback(highest))
            {
                Ok(()) => Ok(copy),
                Err(refusal) => Err(refusal.to_string()),
            }
        })
        .map_err(|reason| problems.push(StartProblem::StoredRefused { reason }))
        .ok()
    });
    let hold = match (stored, recorded) {
        (Some(copy), _) => {
            let generation = policy(&copy).generation();
            if record_absent {
                problems.push(StartProblem::RecordMissing { stored: generation });
            }
            if let Some(recorded) = highest.filter(|g| *g < generation) {
                problems.push(StartProblem::RecordRolledBack {
                    recorded,
                    stored: generation,
                });
            }
            Some(Hold::Stored {
                copy,
                record: highest.is_none_or(|g| g < generation),
            })
        }
        (None, Some(copy)) => {
            problems.push(StartProblem::StoredReplaced {
                deleted,
                generation: policy(&copy).generation(),
            });
            Some(Hold::Recorded(copy))
        }
        (None, None) => None,
    };
    Start { hold, problems }
}

/// How the stored copy differs from the policy in force, which the agent reports and undoes.
#[derive(Debug, PartialEq, Eq)]
pub enum Tampering {
    Deleted,
    /// A validly signed policy of `generation` was put there without a push.
    Replaced {
        generation: u64,
    },
    /// It no longer verifies, for `reason`.
    Edited {
        reason: String,
    },
}

impl fmt::Display for Tampering {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Deleted => f.write_str("was deleted"),
            Self::Replaced { generation } => {
                write!(
                    f,
                    "was replaced with generation {generation} without a push"
                )
            }
            Self::Edited { reason } => write!(f, "was edited ({reason})"),
        }
    }
}

/// What the stored copy (`text`, `None` when deleted) says while `held` is in force: `None`
/// when it is held's own text. `verify` (the generation, or why it fails) runs only on a
/// differing copy.
pub fn tampering(
    held: &SignedPolicy,
    text: Option<&str>,
    verify: impl FnOnce(&str) -> Result<u64, String>,
) -> Option<Tampering> {
    let Some(text) = text else {
        return Some(Tampering::Deleted);
    };
    if text == held.to_yaml() {
        return None;
    }
    Some(match verify(text) {
        Ok(generation) => Tampering::Replaced { generation },
        Err(reason) => Tampering::Edited { reason },
    })
}

/// Where the held policy stands against its signed expiry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expiry {
    /// An envelope v1: it never expires.
    Never,
    /// Still valid; stale from `expires_at` on.
    At(i64),
    /// Past `expires_at`: still enforced (nothing newer was verified), reported as stale.
    Stale { expires_at: i64 },
}

pub fn expiry(validity: Option<Validity>, now: i64) -> Expiry {
    match validity {
        None => Expiry::Never,
        Some(v) if v.is_expired_at(now) => Expiry::Stale {
            expires_at: v.expires_at,
        },
        Some(v) => Expiry::At(v.expires_at),
    }
}

/// The key to verify a policy signed with `key_id` by. A keyring of one (a single-key
/// install, version 0) answers with its key whatever id the envelope names, so the
/// verification says which key it trusts instead of "unknown key".
pub fn signing_key<'k>(keyring: &'k Keyring, key_id: &str) -> Result<&'k VerifyingKey, KeyRefusal> {
    match keyring.version {
        0 => keyring.key(&keyring.key_ids()[0]),
        _ => keyring.key(key_id),
    }
}

/// Whether `keyring` (none: the agent trusts no key) still trusts the key `key_id`.
pub fn trusts(keyring: Option<&Keyring>, key_id: &str) -> bool {
    keyring.is_some_and(|k| match k.version {
        0 => k.key_ids().iter().any(|id| id == key_id),
        _ => k.key(key_id).is_ok(),
    })
}

/// Whether an offered keyring (already verified by the root keys, so not older) is the one
/// in force, byte for byte: nothing to store.
pub fn same_keyring(held: Option<&Keyring>, offered: &Keyring) -> bool {
    held.is_some_and(|h| h.signed.is_some() && h.signed == offered.signed)
}

#[cfg(test)]
mod tests;
