use ed25519_dalek::SigningKey;

use super::*;
use crate::policy::{
    keyring::{self, Roots},
    signing::{generate, key_id},
};

const NOW: i64 = 1_800_000_000;

fn here() -> ClusterIdentity {
    ClusterIdentity {
        uid: "uid-here".into(),
        name: Some("kubernetes-a".into()),
    }
}

fn text(name: &str, generation: u64, clusters: &str) -> String {
    format!(
        "apiVersion: tenantflux.io/v1alpha1\nkind: Policy\nmetadata:\n  name: {name}\nspec:\n  generation: {generation}\n{clusters}"
    )
}

/// An envelope v2 of policy `platform` at `generation`, valid until `expires_at`.
fn v2(key: &SigningKey, generation: u64, expires_at: i64) -> (SignedPolicy, Policy, Validity) {
    let issued_at = expires_at - 3600;
    let (signed, policy) = SignedPolicy::sign(
        &text("platform", generation, ""),
        key,
        issued_at,
        expires_at,
    )
    .unwrap();
    let validity = Validity {
        issued_at,
        expires_at,
    };
    (signed, policy, validity)
}

fn v1(key: &SigningKey, text: &str) -> (SignedPolicy, Policy) {
    SignedPolicy::sign_v1(text, key).unwrap()
}

fn offer<'a>(signed: &'a SignedPolicy, policy: &'a Policy) -> Candidate<'a> {
    Candidate { signed, policy }
}

fn holding<'a>(signed: &'a SignedPolicy, policy: &'a Policy, trusted: bool) -> Holding<'a> {
    Holding {
        signed,
        policy,
        trusted,
    }
}

fn key() -> SigningKey {
    generate().unwrap()
}

#[test]
fn a_first_policy_is_accepted() {
    let (signed, policy, validity) = v2(&key(), 1, NOW + 60);
    let decision = push(
        offer(&signed, &policy),
        Some(validity),
        None,
        Some(&here()),
        NOW,
    );
    assert!(
        matches!(
            decision,
            Push::Accept {
                previous_generation: 0
            }
        ),
        "{decision:?}"
    );
}

#[test]
fn a_higher_generation_is_accepted_and_names_the_one_it_replaces() {
    let key = key();
    let (held_signed, held_policy, _) = v2(&key, 3, NOW + 60);
    let (signed, policy, validity) = v2(&key, 4, NOW + 60);
    let decision = push(
        offer(&signed, &policy),
        Some(validity),
        Some(holding(&held_signed, &held_policy, true)),
        Some(&here()),
        NOW,
    );
    assert!(
        matches!(
            decision,
            Push::Accept {
                previous_generation: 3
            }
        ),
        "{decision:?}"
    );
}

#[test]
fn the_same_generation_with_the_same_content_is_unchanged() {
    let (signed, policy, validity) = v2(&key(), 3, NOW + 60);
    let decision = push(
        offer(&signed, &policy),
        Some(validity),
        Some(holding(&signed, &policy, true)),
        Some(&here()),
        NOW,
    );
    assert!(
        matches!(
            decision,
            Push::Unchanged {
                previous_generation: 3
            }
        ),
        "{decision:?}"
    );
}

#[test]
fn the_same_generation_with_other_content_is_refused_as_stale() {
    let key = key();
    let (held_signed, held_policy) = v1(&key, &text("platform", 3, ""));
    let (signed, policy) = v1(&key, &text("other", 3, ""));
    let decision = push(
        offer(&signed, &policy),
        None,
        Some(holding(&held_signed, &held_policy, true)),
        Some(&here()),
        NOW,
    );
    assert!(
        matches!(
            &decision,
            Push::Refuse(Refused::Stale { new: 3, old: 3, held }) if held == "policy \"platform\" generation 3"
        ),
        "{decision:?}"
    );
}

#[test]
fn a_lower_generation_is_refused_as_a_rollback() {
    let key = key();
    let (held_signed, held_policy, _) = v2(&key, 5, NOW + 60);
    let (signed, policy, validity) = v2(&key, 4, NOW + 60);
    let decision = push(
        offer(&signed, &policy),
        Some(validity),
        Some(holding(&held_signed, &held_policy, true)),
        Some(&here()),
        NOW,
    );
    assert!(
        matches!(
            decision,
            Push::Refuse(Refused::Stale { new: 4, old: 5, .. })
        ),
        "{decision:?}"
    );
}

#[test]
fn the_generations_of_a_key_no_longer_trusted_bind_nobody() {
    let (revoked, current) = (key(), key());
    let (held_signed, held_policy, _) = v2(&revoked, 5, NOW + 60);
    for generation in [4, 5] {
        let (signed, policy, validity) = v2(&current, generation, NOW + 60);
        let decision = push(
            offer(&signed, &policy),
            Some(validity),
            Some(holding(&held_signed, &held_policy, false)),
            Some(&here()),
            NOW,
        );
        assert!(
            matches!(
                decision,
                Push::Accept {
                    previous_generation: 5
                }
            ),
            "generation {generation}: {decision:?}"
        );
    }
}

#[test]
fn nothing_is_accepted_before_the_cluster_identity_is_read() {
    let (signed, policy, validity) = v2(&key(), 1, NOW + 60);
    let decision = push(offer(&signed, &policy), Some(validity), None, None, NOW);
    assert!(
        matches!(decision, Push::Refuse(Refused::NoIdentity)),
        "{decision:?}"
    );
}

#[test]
fn a_policy_for_another_cluster_is_refused_before_its_generation_counts() {
    let key = key();
    let (signed, policy) = v1(
        &key,
        &text("platform", 3, "  clusters:\n  - uid: uid-other\n"),
    );
    // Even equal to what is held: it is not for this cluster.
    let decision = push(
        offer(&signed, &policy),
        None,
        Some(holding(&signed, &policy, true)),
        Some(&here()),
        NOW,
    );
    let Push::Refuse(Refused::OtherCluster(refusal)) = decision else {
        panic!("{decision:?}");
    };
    assert!(
        refusal.to_string().contains("not for this cluster"),
        "{refusal}"
    );
    let (signed, policy) = v1(
        &key,
        &text("platform", 3, "  clusters:\n  - name: kubernetes-*\n"),
    );
    let decision = push(offer(&signed, &policy), None, None, Some(&here()), NOW);
    assert!(matches!(decision, Push::Accept { .. }), "{decision:?}");
}

#[test]
fn an_expired_policy_is_refused_from_its_expiry_on() {
    let (signed, policy, validity) = v2(&key(), 2, NOW);
    let decision = push(
        offer(&signed, &policy),
        Some(validity),
        None,
        Some(&here()),
        NOW,
    );
    assert!(
        matches!(decision, Push::Refuse(Refused::Expired { expires_at: NOW })),
        "{decision:?}"
    );
    let decision = push(
        offer(&signed, &policy),
        Some(validity),
        None,
        Some(&here()),
        NOW - 1,
    );
    assert!(matches!(decision, Push::Accept { .. }), "{decision:?}");
}

#[test]
fn an_expired_policy_equal_to_the_held_one_is_unchanged_and_a_lower_one_stale() {
    let key = key();
    let (held_signed, held_policy, validity) = v2(&key, 3, NOW - 60);
    let held = holding(&held_signed, &held_policy, true);
    let decision = push(
        offer(&held_signed, &held_policy),
        Some(validity),
        Some(held),
        Some(&here()),
        NOW,
    );
    assert!(matches!(decision, Push::Unchanged { .. }), "{decision:?}");
    let (signed, policy, validity) = v2(&key, 2, NOW - 60);
    let decision = push(
        offer(&signed, &policy),
        Some(validity),
        Some(held),
        Some(&here()),
        NOW,
    );
    assert!(
        matches!(decision, Push::Refuse(Refused::Stale { .. })),
        "{decision:?}"
    );
}

#[test]
fn an_envelope_v1_never_expires() {
    let (signed, policy) = v1(&key(), &text("platform", 1, ""));
    let decision = push(offer(&signed, &policy), None, None, Some(&here()), i64::MAX);
    assert!(matches!(decision, Push::Accept { .. }), "{decision:?}");
    assert_eq!(expiry(None, i64::MAX), Expiry::Never);
}

fn policy(generation: u64, clusters: &str) -> Policy {
    Policy::parse(&text("platform", generation, clusters)).unwrap()
}

fn start(stored: Read<Policy>, recorded: Read<Policy>) -> Start<Policy> {
    at_start(stored, recorded, &here(), |p| p)
}

/// Which copy is held, at which generation, and whether the record is written again.
fn held(start: &Start<Policy>) -> Option<(&'static str, u64, bool)> {
    start.hold.as_ref().map(|hold| match hold {
        Hold::Stored { copy, record } => ("stored", copy.generation(), *record),
        Hold::Recorded(copy) => ("recorded", copy.generation(), false),
    })
}

#[test]
fn at_start_with_no_copy_nothing_is_held() {
    let start = start(None, None);
    assert_eq!(held(&start), None);
    assert_eq!(start.problems, []);
}

#[test]
fn at_start_a_stored_copy_without_a_record_is_held_recorded_and_reported() {
    let start = start(Some(Ok(policy(3, ""))), None);
    assert_eq!(held(&start), Some(("stored", 3, true)));
    assert_eq!(start.problems, [StartProblem::RecordMissing { stored: 3 }]);
}

#[test]
fn at_start_a_stored_copy_at_the_recorded_generation_is_held_as_is() {
    let start = start(Some(Ok(policy(3, ""))), Some(Ok(policy(3, ""))));
    assert_eq!(held(&start), Some(("stored", 3, false)));
    assert_eq!(start.problems, []);
}

#[test]
fn at_start_a_record_below_the_stored_copy_was_rolled_back_and_is_written_again() {
    let start = start(Some(Ok(policy(5, ""))), Some(Ok(policy(3, ""))));
    assert_eq!(held(&start), Some(("stored", 5, true)));
    assert_eq!(
        start.problems,
        [StartProblem::RecordRolledBack {
            recorded: 3,
            stored: 5
        }]
    );
}

#[test]
fn at_start_a_stored_copy_below_the_record_is_a_rollback_and_the_record_is_held() {
    let start = start(Some(Ok(policy(3, ""))), Some(Ok(policy(5, ""))));
    assert_eq!(held(&start), Some(("recorded", 5, false)));
    let [
        StartProblem::StoredRefused { reason },
        StartProblem::StoredReplaced {
            deleted: false,
            generation: 5,
        },
    ] = start.problems.as_slice()
    else {
        panic!("{:?}", start.problems);
    };
    assert!(
        reason.contains("is a rollback: this cluster has held generation 5"),
        "{reason}"
    );
}

#[test]
fn at_start_a_deleted_store_gets_the_record_back() {
    let start = start(None, Some(Ok(policy(5, ""))));
    assert_eq!(held(&start), Some(("recorded", 5, false)));
    assert_eq!(
        start.problems,
        [StartProblem::StoredReplaced {
            deleted: true,
            generation: 5
        }]
    );
}

#[test]
fn at_start_a_stored_copy_that_fails_verification_is_refused_for_the_record() {
    let start = start(Some(Err("bad signature".into())), Some(Ok(policy(5, ""))));
    assert_eq!(held(&start), Some(("recorded", 5, false)));
    assert_eq!(
        start.problems,
        [
            StartProblem::StoredRefused {
                reason: "bad signature".into()
            },
            StartProblem::StoredReplaced {
                deleted: false,
                generation: 5
            }
        ]
    );
}

#[test]
fn at_start_a_record_that_fails_verification_tells_no_rollback() {
    let start = start(Some(Ok(policy(3, ""))), Some(Err("bad signature".into())));
    assert_eq!(held(&start), Some(("stored", 3, true)));
    assert_eq!(
        start.problems,
        [StartProblem::RecordIgnored {
            reason: "bad signature".into()
        }]
    );
}

#[test]
fn at_start_copies_for_another_cluster_are_refused() {
    let elsewhere = "  clusters:\n  - uid: uid-other\n";
    let start = start(
        Some(Ok(policy(3, elsewhere))),
        Some(Ok(policy(5, elsewhere))),
    );
    assert_eq!(held(&start), None);
    let [
        StartProblem::RecordIgnored { reason: record },
        StartProblem::StoredRefused { reason: store },
    ] = start.problems.as_slice()
    else {
        panic!("{:?}", start.problems);
    };
    // The record being ignored, the stored copy is refused for its cluster, not as a rollback.
    assert!(
        record.contains("generation 5 is for the clusters"),
        "{record}"
    );
    assert!(
        store.contains("generation 3 is for the clusters"),
        "{store}"
    );
}

#[test]
fn a_stored_copy_equal_to_the_held_one_is_not_verified_again() {
    let (signed, _) = v1(&key(), &text("platform", 3, ""));
    let found = tampering(&signed, Some(&signed.to_yaml()), |_| {
        panic!("verified the held policy's own text")
    });
    assert_eq!(found, None);
}

#[test]
fn a_deleted_replaced_or_edited_stored_copy_is_tampering() {
    let (signed, _) = v1(&key(), &text("platform", 3, ""));
    let deleted = tampering(&signed, None, |_| panic!("nothing to verify"));
    assert_eq!(deleted, Some(Tampering::Deleted));
    let replaced = tampering(&signed, Some("other"), |text| {
        assert_eq!(text, "other");
        Ok(2)
    });
    assert_eq!(replaced, Some(Tampering::Replaced { generation: 2 }));
    let edited = tampering(&signed, Some("other"), |_| Err("bad signature".into()));
    assert_eq!(
        edited,
        Some(Tampering::Edited {
            reason: "bad signature".into()
        })
    );
    let said: Vec<String> = [deleted, replaced, edited]
        .into_iter()
        .flatten()
        .map(|t| t.to_string())
        .collect();
    assert_eq!(
        said,
        [
            "was deleted",
            "was replaced with generation 2 without a push",
            "was edited (bad signature)"
        ]
    );
}

#[test]
fn a_held_policy_turns_stale_at_its_expiry_and_stays_in_force() {
    let validity = Some(Validity {
        issued_at: NOW - 3600,
        expires_at: NOW,
    });
    assert_eq!(expiry(validity, NOW - 1), Expiry::At(NOW));
    assert_eq!(expiry(validity, NOW), Expiry::Stale { expires_at: NOW });
    assert_eq!(expiry(validity, NOW + 1), Expiry::Stale { expires_at: NOW });
}

/// A keyring of version 2 signed by one root: `active` trusted, `revoked` revoked.
fn keyring(active: &SigningKey, revoked: &SigningKey) -> Keyring {
    let root = key();
    let roots = Roots::new(vec![root.verifying_key()], 1).unwrap();
    let text = keyring::document(
        2,
        &[active.verifying_key()],
        &[key_id(&revoked.verifying_key())],
    );
    let signed = keyring::sign(&text, &[root]).unwrap();
    roots.verify(&signed.to_yaml(), None).unwrap()
}

#[test]
fn a_keyring_of_one_verifies_with_its_key_whatever_the_envelope_names() {
    let (installed, other) = (key(), key());
    let one = Keyring::of_one(installed.verifying_key());
    let id = key_id(&other.verifying_key());
    assert_eq!(signing_key(&one, &id).unwrap(), &installed.verifying_key());
    assert!(trusts(Some(&one), &key_id(&installed.verifying_key())));
    assert!(!trusts(Some(&one), &id));
    assert!(!trusts(None, &id));
}

#[test]
fn a_versioned_keyring_trusts_its_active_keys_only() {
    let (active, revoked, unknown) = (key(), key(), key());
    let ring = keyring(&active, &revoked);
    let (active_id, revoked_id, unknown_id) = (
        key_id(&active.verifying_key()),
        key_id(&revoked.verifying_key()),
        key_id(&unknown.verifying_key()),
    );
    assert_eq!(
        signing_key(&ring, &active_id).unwrap(),
        &active.verifying_key()
    );
    assert!(matches!(
        signing_key(&ring, &revoked_id),
        Err(KeyRefusal::Revoked { version: 2, .. })
    ));
    assert!(matches!(
        signing_key(&ring, &unknown_id),
        Err(KeyRefusal::Unknown { version: 2, .. })
    ));
    assert!(trusts(Some(&ring), &active_id));
    assert!(!trusts(Some(&ring), &revoked_id));
    assert!(!trusts(Some(&ring), &unknown_id));
}

#[test]
fn only_the_same_signed_keyring_is_unchanged() {
    let (active, revoked) = (key(), key());
    let ring = keyring(&active, &revoked);
    assert!(same_keyring(Some(&ring), &ring.clone()));
    assert!(!same_keyring(None, &ring));
    let other = keyring(&active, &revoked);
    assert!(!same_keyring(Some(&ring), &other));
    let one = Keyring::of_one(active.verifying_key());
    assert!(!same_keyring(Some(&one), &one.clone()));
}
