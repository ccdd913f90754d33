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
    OAuthBearer::new(OAuthSettings { jwks: Some(JwksSource::File(path)), ..settings }).unwrap()
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

/// An identity provider's key set endpoint over HTTPS (a CA of its own, a certificate for
/// 127.0.0.1): serves whatever `answer` holds, one request per connection, and counts them.
struct Provider {
    url: String,
    ca: PathBuf,
    answer: Arc<parking_lot::Mutex<(u16, String)>>,
    requests: Arc<std::sync::atomic::AtomicUsize>,
    _dir: tempfile::TempDir,
}

impl Provider {
    async fn start(keys: &[&Signer]) -> Provider {
        use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        use tokio::io::{AsyncReadExt, AsyncWriteExt};

        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        let leaf_key = KeyPair::generate().unwrap();
        let leaf = CertificateParams::new(vec!["127.0.0.1".to_owned()]).unwrap().signed_by(&leaf_key, &*ca).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let ca_path = dir.path().join("ca.pem");
        std::fs::write(&ca_path, ca.pem()).unwrap();
        let server = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![CertificateDer::from(leaf.der().to_vec())], PrivateKeyDer::try_from(leaf_key.serialize_der()).unwrap())
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("https://{}/realms/kafka/certs", listener.local_addr().unwrap());
        let answer = Arc::new(parking_lot::Mutex::new((200, jwks_json(keys))));
        let requests = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (serving, counted) = (answer.clone(), requests.clone());
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let Ok(mut tls) = acceptor.accept(tcp).await else { continue };
                let mut request = Vec::new();
                let mut buf = [0u8; 1024];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match tls.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                assert!(request.starts_with(b"GET /realms/kafka/certs HTTP/1.1\r\n"), "{}", String::from_utf8_lossy(&request));
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let (status, body) = serving.lock().clone();
                let head = format!(
                    "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                let _ = tls.write_all(head.as_bytes()).await;
                let _ = tls.write_all(body.as_bytes()).await;
                let _ = tls.shutdown().await;
            }
        });
        Provider { url, ca: ca_path, answer, requests, _dir: dir }
    }

    fn serve(&self, status: u16, body: String) {
        *self.answer.lock() = (status, body);
    }

    fn requests(&self) -> usize {
        self.requests.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn validator(&self) -> OAuthBearer {
        let endpoint = JwksEndpoint { url: self.url.clone(), refresh: Duration::from_secs(3600), ca: Some(self.ca.clone()) };
        OAuthBearer::new(OAuthSettings { jwks: Some(JwksSource::Endpoint(endpoint)), ..OAuthSettings::default() }).unwrap()
    }
}

fn jwks_json(keys: &[&Signer]) -> String {
    json!({"keys": keys.iter().map(|s| s.jwk.clone()).collect::<Vec<_>>()}).to_string()
}

/// Validates `token` until `accepted` says the answer is the one awaited (the fetcher works in
/// the background); the last answer after 10 s.
async fn validate_until(
    oauth: &OAuthBearer,
    token: &str,
    accepted: impl Fn(&Result<Validated, OAuthError>) -> bool,
) -> Result<Validated, OAuthError> {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let answer = oauth.validate(token, now());
        if accepted(&answer) || std::time::Instant::now() > deadline {
            return answer;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn keys_come_from_an_https_endpoint_and_a_rotation_is_fetched_early() {
    let (old, new) = (signer("2026-11"), signer("2026-12"));
    let provider = Provider::start(&[&old]).await;
    let oauth = provider.validator();
    let by_old = token(&old, Some("2026-11"), claims("alice", 600));
    assert_eq!(validate_until(&oauth, &by_old, Result::is_ok).await.unwrap().user, "alice");
    assert_eq!(provider.requests(), 1, "one fetch at start");

    // The provider rotates: a token signed with the new key is refused once (the set held has
    // no such key) and asks for an early fetch, well before the hour's refresh.
    provider.serve(200, jwks_json(&[&old, &new]));
    let by_new = token(&new, Some("2026-12"), claims("bob", 600));
    let first = oauth.validate(&by_new, now());
    assert!(matches!(&first, Err(OAuthError::Token(why)) if why.contains("no key")), "{first:?}");
    assert_eq!(validate_until(&oauth, &by_new, Result::is_ok).await.unwrap().user, "bob");
    assert_eq!(provider.requests(), 2);

    // Unknown key ids ask for at most one early fetch per backoff: made-up kids cannot make the
    // broker hammer the provider.
    let Some(KeySet::Endpoint(fetcher)) = &oauth.keys else { panic!("an endpoint key set") };
    assert!(!fetcher.missing_key(), "the rotation's early fetch was just now");
    for _ in 0..50 {
        assert!(oauth.validate(&token(&new, Some("made-up"), claims("mallory", 600)), now()).is_err());
    }
    assert!(!fetcher.missing_key());
}

#[tokio::test]
async fn a_failing_endpoint_refuses_tokens_with_its_error_and_keeps_the_keys_it_had() {
    let key = signer("k");
    let provider = Provider::start(&[&key]).await;
    provider.serve(503, "down".into());
    let oauth = provider.validator();
    let by_key = token(&key, Some("k"), claims("alice", 600));
    let refused = validate_until(&oauth, &by_key, |a| matches!(a, Err(OAuthError::Jwks { why, .. }) if why.contains("503"))).await;
    assert!(matches!(&refused, Err(OAuthError::Jwks { path, why }) if path == &provider.url && why.contains("503")), "{refused:?}");

    // The provider comes back: a retry (with backoff, no restart) fetches the keys.
    provider.serve(200, jwks_json(&[&key]));
    assert_eq!(validate_until(&oauth, &by_key, Result::is_ok).await.unwrap().user, "alice");

    // A later fetch that fails keeps the keys held: tokens still validate.
    let fetched = provider.requests();
    provider.serve(200, "{\"not\": \"a key set\"}".into());
    let Some(KeySet::Endpoint(fetcher)) = &oauth.keys else { panic!("an endpoint key set") };
    assert!(fetcher.missing_key(), "no early fetch asked yet");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while provider.requests() == fetched {
        assert!(std::time::Instant::now() < deadline, "the early fetch never came");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(oauth.validate(&by_key, now()).unwrap().user, "alice");
}

#[tokio::test]
async fn an_endpoint_whose_certificate_is_not_trusted_is_refused() {
    let key = signer("k");
    let provider = Provider::start(&[&key]).await;
    let stranger = Provider::start(&[&key]).await;
    // The stranger's CA did not sign the provider's certificate.
    let endpoint = JwksEndpoint { url: provider.url.clone(), refresh: Duration::from_secs(3600), ca: Some(stranger.ca.clone()) };
    let oauth = OAuthBearer::new(OAuthSettings { jwks: Some(JwksSource::Endpoint(endpoint)), ..OAuthSettings::default() }).unwrap();
    let by_key = token(&key, Some("k"), claims("alice", 600));
    let refused = validate_until(&oauth, &by_key, |a| matches!(a, Err(OAuthError::Jwks { why, .. }) if why.contains("TLS"))).await;
    assert!(matches!(&refused, Err(OAuthError::Jwks { why, .. }) if why.contains("TLS")), "{refused:?}");
    assert_eq!(provider.requests(), 0);
    // Bad settings are refused at start with a clear error.
    for (url, why) in [("ftp://idp/keys", "must be https://"), ("https://", "not a URL")] {
        let endpoint = JwksEndpoint::new(url);
        let refused =
            OAuthBearer::new(OAuthSettings { jwks: Some(JwksSource::Endpoint(endpoint)), ..OAuthSettings::default() }).unwrap_err();
        assert!(refused.to_string().contains(why), "{url}: {refused}");
    }
}
