#![allow(clippy::unwrap_used)]

use jsonwebtoken::{EncodingKey, Header};
use serde_json::json;

use super::*;

/// An ES256 signing key and its JWKS entry.
struct Signer {
    key: EncodingKey,
    jwk: Value,
}

fn signer(kid: &str) -> Signer {
    let pair = rcgen::KeyPair::generate().unwrap(); // ECDSA P-256
    let point = pair.public_key_raw(); // 0x04 || x || y
    let (x, y) = point[1..].split_at(32);
    let jwk = json!({"kty": "EC", "crv": "P-256", "kid": kid, "alg": "ES256", "use": "sig", "x": B64URL.encode(x), "y": B64URL.encode(y)});
    Signer { key: EncodingKey::from_ec_der(&pair.serialize_der()), jwk }
}

fn token(signer: &Signer, kid: Option<&str>, claims: Value) -> String {
    let mut header = Header::new(Algorithm::ES256);
    header.kid = kid.map(str::to_owned);
    jsonwebtoken::encode(&header, &claims, &signer.key).unwrap()
}

fn unsigned(claims: &Value) -> String {
    format!("{}.{}.", B64URL.encode(br#"{"alg":"none"}"#), B64URL.encode(claims.to_string()))
}

fn now() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_800_000_000)
}

fn claims(sub: &str, exp_in: i64) -> Value {
    json!({"sub": sub, "exp": 1_800_000_000 + exp_in, "iat": 1_800_000_000 - 10, "aud": ["kafka"], "iss": "https://issuer"})
}

fn validator(dir: &tempfile::TempDir, keys: &[&Signer], settings: OAuthSettings) -> OAuthBearer {
    let path = dir.path().join("jwks.json");
    std::fs::write(&path, json!({"keys": keys.iter().map(|s| s.jwk.clone()).collect::<Vec<_>>()}).to_string()).unwrap();
    OAuthBearer::new(OAuthSettings { jwks: Some(path), ..settings }).unwrap()
}

fn message(token: &str) -> Vec<u8> {
    format!("n,,\u{1}auth=Bearer {token}\u{1}\u{1}").into_bytes()
}

#[test]
fn a_signed_token_names_its_user_until_it_expires() {
    let dir = tempfile::tempdir().unwrap();
    let (one, two) = (signer("one"), signer("two"));
    let oauth = validator(&dir, &[&one, &two], OAuthSettings::default());
    let valid = oauth.authenticate(&message(&token(&two, Some("two"), claims("alice", 600))), now()).unwrap();
    assert_eq!(valid, Validated { user: "alice".into(), expires: now() + Duration::from_secs(600) });
    // An extension and an authorization id equal to the user are fine.
    let with_extras = format!("n,a=alice,\u{1}auth=Bearer {}\u{1}traceId=7\u{1}\u{1}", token(&one, Some("one"), claims("alice", 60)));
    assert_eq!(oauth.authenticate(with_extras.as_bytes(), now()).unwrap().user, "alice");
}

#[test]
fn forged_expired_and_misdirected_tokens_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (trusted, stranger) = (signer("k"), signer("k"));
    let settings = OAuthSettings {
        expected_audience: vec!["kafka".into()],
        expected_issuer: Some("https://issuer".into()),
        ..OAuthSettings::default()
    };
    let oauth = validator(&dir, &[&trusted], settings);
    let refused = |token: String, says: &str| {
        let e = oauth.authenticate(&message(&token), now()).unwrap_err().to_string();
        assert!(e.contains(says), "{e} (wanted {says:?})");
    };
    refused(token(&stranger, Some("k"), claims("alice", 600)), "InvalidSignature");
    refused(token(&trusted, Some("other"), claims("alice", 600)), "no key \"other\"");
    refused(token(&trusted, Some("k"), claims("alice", -31)), "expired");
    refused(
        token(&trusted, Some("k"), json!({"sub": "alice", "exp": 1_800_000_600, "aud": "billing", "iss": "https://issuer"})),
        "audience",
    );
    refused(token(&trusted, Some("k"), json!({"sub": "alice", "exp": 1_800_000_600, "aud": "kafka", "iss": "https://evil"})), "issuer");
    refused(token(&trusted, Some("k"), json!({"sub": "alice", "aud": "kafka", "iss": "https://issuer"})), "no exp");
    refused(token(&trusted, Some("k"), json!({"exp": 1_800_000_600, "aud": "kafka", "iss": "https://issuer"})), "no sub");
    refused(
        token(
            &trusted,
            Some("k"),
            json!({"sub": "a", "exp": 1_800_000_600, "nbf": 1_800_000_100, "aud": "kafka", "iss": "https://issuer"}),
        ),
        "nbf",
    );
    refused(unsigned(&claims("alice", 600)), "unsigned tokens are not accepted");
    // Within the clock-skew leeway an expired token still passes, as in Kafka.
    assert!(oauth.authenticate(&message(&token(&trusted, Some("k"), claims("alice", -29))), now()).is_ok());
    // The authorization id must be the token's user.
    let other = format!("n,a=bob,\u{1}auth=Bearer {}\u{1}\u{1}", token(&trusted, Some("k"), claims("alice", 600)));
    assert!(oauth.authenticate(other.as_bytes(), now()).unwrap_err().to_string().contains("authorization id"));
}

#[test]
fn unsigned_tokens_pass_only_when_allowed() {
    let oauth = OAuthBearer::new(OAuthSettings { allow_unsecured: true, ..OAuthSettings::default() }).unwrap();
    assert_eq!(oauth.authenticate(&message(&unsigned(&claims("dev", 60))), now()).unwrap().user, "dev");
    assert!(oauth.authenticate(&message(&unsigned(&claims("dev", -60))), now()).is_err(), "expiry is still checked");
    assert!(OAuthBearer::new(OAuthSettings::default()).is_err(), "no key set and no unsecured tokens: nothing could log in");
}

#[test]
fn another_claim_can_name_the_user() {
    let dir = tempfile::tempdir().unwrap();
    let key = signer("k");
    let oauth = validator(&dir, &[&key], OAuthSettings { sub_claim: "preferred_username".into(), ..OAuthSettings::default() });
    let t = token(&key, None, json!({"sub": "0f3c", "preferred_username": "carol", "exp": 1_800_000_600}));
    assert_eq!(oauth.authenticate(&message(&t), now()).unwrap().user, "carol");
}

#[test]
fn malformed_messages_are_refused() {
    let oauth = OAuthBearer::new(OAuthSettings { allow_unsecured: true, ..OAuthSettings::default() }).unwrap();
    let t = unsigned(&claims("dev", 60));
    for bad in [
        format!("n,,auth=Bearer {t}\u{1}\u{1}"),
        format!("p=tls,,\u{1}auth=Bearer {t}\u{1}\u{1}"),
        format!("n,,\u{1}auth=Bearer {t}\u{1}"),
        format!("n,,\u{1}auth=Basic {t}\u{1}\u{1}"),
        "n,,\u{1}traceId=1\u{1}\u{1}".to_string(),
        format!("n,,\u{1}auth=Bearer {t}.extra\u{1}\u{1}"),
    ] {
        assert!(oauth.authenticate(bad.as_bytes(), now()).is_err(), "{bad:?} was accepted");
    }
}
