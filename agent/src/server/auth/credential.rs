//! What a call presents as its credential: a bearer token, or a caller-identity proof naming a
//! CertificateSigningRequest. Read from metadata only; the API server decides what they prove.

use std::fmt;

use k8s_openapi::jiff::Timestamp;
use sha2::{Digest, Sha256};
use tonic::metadata::MetadataMap;

use super::AuthError;

/// A bearer token. It never leaves this type in text: `Debug` and `Display` redact it.
#[derive(Clone, PartialEq, Eq)]
pub struct BearerToken(String);

impl BearerToken {
    pub fn new(token: impl Into<String>) -> Self {
        Self(token.into())
    }

    /// The token itself, for the one place that must send it (the TokenReview body).
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The key the token is cached under: its SHA-256, so the cache holds no tokens.
    pub fn cache_key(&self) -> TokenKey {
        TokenKey::digest(&self.0)
    }
}

impl fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("BearerToken(<redacted>)")
    }
}

impl fmt::Display for BearerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// SHA-256 of a bearer token.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct TokenKey([u8; 32]);

impl TokenKey {
    fn digest(secret: &str) -> Self {
        Self(Sha256::digest(secret.as_bytes()).into())
    }
}

impl fmt::Debug for TokenKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TokenKey(")?;
        for byte in self.0 {
            write!(f, "{byte:02x}")?;
        }
        f.write_str(")")
    }
}

/// Reads the bearer token from the `authorization` metadata of a call.
pub fn bearer_token(metadata: &MetadataMap) -> Result<BearerToken, AuthError> {
    let value = metadata
        .get("authorization")
        .ok_or(AuthError::MissingToken {
            reason: "the call has no \"authorization\" metadata; send \"authorization: Bearer <token>\"",
        })?;
    let value = value.to_str().map_err(|_| AuthError::MissingToken {
        reason: "the \"authorization\" metadata is not printable ASCII",
    })?;
    let (scheme, token) = value.split_once(' ').ok_or(AuthError::MissingToken {
        reason: "the \"authorization\" metadata is not of the form \"Bearer <token>\"",
    })?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(AuthError::MissingToken {
            reason: "the \"authorization\" metadata does not use the Bearer scheme",
        });
    }
    let token = token.trim();
    if token.is_empty() {
        return Err(AuthError::MissingToken {
            reason: "the \"authorization\" metadata has an empty Bearer token",
        });
    }
    Ok(BearerToken::new(token))
}

/// A caller-identity proof: the CSR a call names and the proof it carries (see
/// `tenantflux_core::identity`).
#[derive(Clone)]
pub struct CallerProof {
    pub(super) csr: String,
    pub(super) proof: String,
    /// The call the server received ([`tenantflux_core::identity::CALL_METADATA`], set by
    /// the server's call layer, never by the caller); None when the layer did not run.
    pub(super) call: Option<String>,
}

/// Reads a caller-identity proof from the call's metadata; None when the call carries none.
pub fn caller_proof(metadata: &MetadataMap) -> Result<Option<CallerProof>, AuthError> {
    use tenantflux_core::identity::{CSR_METADATA, PROOF_METADATA};
    let Some(csr) = metadata.get(CSR_METADATA) else {
        return Ok(None);
    };
    let text = |value: &tonic::metadata::MetadataValue<tonic::metadata::Ascii>| {
        value.to_str().map(str::to_owned).ok()
    };
    let csr = text(csr)
        .filter(|c| !c.is_empty())
        .ok_or(AuthError::MissingToken {
            reason: "the \"x-tenantflux-csr\" metadata is empty or not printable ASCII",
        })?;
    let proof = metadata
        .get(PROOF_METADATA)
        .and_then(text)
        .ok_or(AuthError::MissingToken {
            reason: "the call names a CertificateSigningRequest (\"x-tenantflux-csr\") but carries no \"x-tenantflux-proof\"",
        })?;
    let call = metadata
        .get(tenantflux_core::identity::CALL_METADATA)
        .and_then(text);
    Ok(Some(CallerProof { csr, proof, call }))
}

/// What a stream was opened with, for its rechecks.
pub(super) enum Credential {
    Token(BearerToken),
    Proof(CallerProof),
}

impl Credential {
    /// The call's credential as [`super::Authorizer::identify`] picks it: the proof first.
    /// None when it has neither, which a call that got this far cannot be.
    pub(super) fn of(metadata: &MetadataMap) -> Option<Self> {
        match caller_proof(metadata) {
            Ok(Some(proof)) => Some(Self::Proof(proof)),
            _ => bearer_token(metadata).ok().map(Self::Token),
        }
    }
}

/// The longest a service-account token may be valid (from issue to expiry) for the agent to
/// accept it. A token minted for tenantflux-client by a user who may no longer mint one would
/// otherwise outlive that user's revocation by as long as they asked for.
pub const MAX_SERVICE_ACCOUNT_TOKEN_SECONDS: i64 = 3600;

/// The claims of a JWT bearer token, read without verifying them. Only trusted once the API
/// server accepted the token (TokenReview), or to schedule a check it makes.
fn jwt_claims(token: &BearerToken) -> Option<serde_json::Value> {
    use base64::Engine as _;
    let payload = token.expose().split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// When a JWT bearer token expires (its `exp` claim), read without verifying it: the time
/// only schedules a check by the API server, which decides. None for other tokens.
pub(super) fn token_expiry(token: &BearerToken) -> Option<Timestamp> {
    Timestamp::from_second(jwt_claims(token)?.get("exp")?.as_i64()?).ok()
}

/// How long a service-account token was issued for, in seconds: from `iat` to
/// `kubernetes.io.warnafter` when the API server extended a pod's token past what was asked
/// (the warning time is the lifetime asked for), else to `exp`. None when the token is no
/// JWT with those claims (a legacy Secret token has no `exp`).
pub(super) fn token_lifetime(token: &BearerToken) -> Option<i64> {
    let claims = jwt_claims(token)?;
    let issued = claims.get("iat")?.as_i64()?;
    let end = claims
        .pointer("/kubernetes.io/warnafter")
        .and_then(serde_json::Value::as_i64)
        .or_else(|| claims.get("exp")?.as_i64())?;
    Some(end - issued)
}

#[cfg(test)]
mod tests {
    use tonic::metadata::MetadataValue;

    use super::*;

    const TOKEN: &str = "eyJhbGciOiJSUzI1NiJ9.secret-part.signature";

    fn metadata(value: &str) -> MetadataMap {
        let mut map = MetadataMap::new();
        map.insert("authorization", MetadataValue::try_from(value).unwrap());
        map
    }

    #[test]
    fn bearer_token_is_read_from_authorization_metadata() {
        let token = bearer_token(&metadata(&format!("Bearer {TOKEN}"))).unwrap();
        assert_eq!(token.expose(), TOKEN);
        let token = bearer_token(&metadata(&format!("bearer  {TOKEN} "))).unwrap();
        assert_eq!(token.expose(), TOKEN);
    }

    #[test]
    fn missing_or_malformed_bearer_token_is_unauthenticated() {
        for map in [
            MetadataMap::new(),
            metadata(&format!("Basic {TOKEN}")),
            metadata("Bearer "),
            metadata("Bearer"),
            metadata(TOKEN),
        ] {
            let err = bearer_token(&map).unwrap_err();
            assert!(matches!(err, AuthError::MissingToken { .. }), "{err:?}");
            let status = tonic::Status::from(err);
            assert_eq!(status.code(), tonic::Code::Unauthenticated);
            assert!(status.message().starts_with("missing bearer token: "));
            assert!(
                !status.message().contains("secret-part"),
                "{}",
                status.message()
            );
        }
        let status = tonic::Status::from(bearer_token(&MetadataMap::new()).unwrap_err());
        assert_eq!(
            status.message(),
            "missing bearer token: the call has no \"authorization\" metadata; \
             send \"authorization: Bearer <token>\""
        );
    }

    #[test]
    fn token_is_redacted_in_debug_and_display() {
        let token = BearerToken::new(TOKEN);
        assert_eq!(format!("{token}"), "<redacted>");
        assert_eq!(format!("{token:?}"), "BearerToken(<redacted>)");
        assert!(!format!("{:?}", Some(&token)).contains("secret-part"));
    }

    #[test]
    fn cache_key_is_a_digest_not_the_token() {
        let token = BearerToken::new(TOKEN);
        let key = token.cache_key();
        assert_eq!(key, BearerToken::new(TOKEN).cache_key());
        assert_ne!(key, BearerToken::new("another").cache_key());
        assert_ne!(&key.0[..], &TOKEN.as_bytes()[..32]);
        let shown = format!("{key:?}");
        assert!(
            !shown.contains(TOKEN) && !shown.contains("secret-part"),
            "{shown}"
        );
        // Known SHA-256 test vector: a change of hash function would break cache semantics.
        assert_eq!(
            format!("{:?}", BearerToken::new("abc").cache_key()),
            "TokenKey(ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad)"
        );
    }

    fn jwt(claims: &str) -> BearerToken {
        use base64::Engine as _;
        let claims = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(claims);
        BearerToken::new(format!("eyJhbGciOiJSUzI1NiJ9.{claims}.c2lnbmF0dXJl"))
    }

    #[test]
    fn a_token_lifetime_is_from_issue_to_expiry_or_to_the_warning_of_an_extended_one() {
        assert_eq!(
            token_lifetime(&jwt(r#"{"iat":1000,"exp":4600}"#)),
            Some(3600)
        );
        assert_eq!(
            token_lifetime(&jwt(r#"{"iat":1000,"exp":87401000}"#)),
            Some(87_400_000)
        );
        // A pod's token the API server extended to a year: what was asked is the warning.
        let extended = r#"{"iat":1000,"exp":31537000,"kubernetes.io":{"warnafter":4607}}"#;
        assert_eq!(token_lifetime(&jwt(extended)), Some(3607));
        for none in [r#"{"exp":4600}"#, r#"{"iat":1000}"#, r#"{"sub":"x"}"#] {
            assert_eq!(token_lifetime(&jwt(none)), None, "{none}");
        }
        assert_eq!(token_lifetime(&BearerToken::new("opaque")), None);
    }

    #[test]
    fn a_jwt_tells_when_it_expires_and_other_tokens_do_not() {
        use base64::Engine as _;
        let claims = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(br#"{"aud":["tenantflux-agent"],"exp":1900000000}"#);
        let jwt = BearerToken::new(format!("eyJhbGciOiJSUzI1NiJ9.{claims}.c2lnbmF0dXJl"));
        assert_eq!(
            token_expiry(&jwt),
            Some(Timestamp::from_second(1_900_000_000).unwrap())
        );
        for opaque in ["abcdef", "a.b.c", "x.e30.y"] {
            assert_eq!(token_expiry(&BearerToken::new(opaque)), None, "{opaque}");
        }
    }
}
