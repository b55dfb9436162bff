//! Signing, envelopes and their claims, and RFC 3339 times.

use super::*;

const POLICY: &str = include_str!("../../../../../deploy/policy/example.yaml");

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
        "2026-12-31T23:59:60Z",
        "2026-12-01T00:00:00.5Z",
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
