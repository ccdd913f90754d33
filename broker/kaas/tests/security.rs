//! TLS and SASL on the Kafka listener with real clients: librdkafka (confluent-kafka) and kafka-python
//! connect over TLS, with and without client certificates, and authenticate with SCRAM and
//! PLAIN against credentials `kaas scram-credential` wrote; the wrong ones are refused.

mod common;

use std::process::Command;
use std::time::Duration;

use common::pki::{Pki, add_user, path};
use common::{Kaas, TestResult};
use rcgen::{DnType, KeyPair};

/// Runs a Python client (confluent-kafka, i.e. librdkafka 2.16, or kafka-python) against the
/// broker; returns what it printed ("secure ok N" or "refused: ...").
fn client(kaas: &Kaas, client: &str, topic: &str, args: &[&str]) -> TestResult<String> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients/secure_roundtrip.py");
    let out = Command::new(std::env::var("PYTHON").unwrap_or_else(|_| "python3".into()))
        .arg(script)
        .args([client, kaas.bootstrap.as_str(), topic])
        .args(args)
        .output()?;
    Ok(format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

/// Runs every `(client, topic, args)` at once and returns what each printed, in order. Each is
/// its own process, and a refusal is mostly a client waiting out its timeout: one after the
/// other they took minutes.
fn clients_at_once(kaas: &Kaas, runs: &[(&str, String, &[&str])]) -> TestResult<Vec<String>> {
    std::thread::scope(|s| {
        let running: Vec<_> = runs.iter().map(|(name, topic, args)| s.spawn(move || client(kaas, name, topic, args))).collect();
        running.into_iter().map(|r| r.join().map_err(|_| "a client thread panicked")?).collect()
    })
}

const CLIENTS: [&str; 2] = ["confluent", "kafka-python"];

/// Both clients, with each of the settings, read back what they wrote (`topic` per setting).
fn all_succeed(kaas: &Kaas, settings: &[(&str, &[&str])]) -> TestResult {
    let runs: Vec<(&str, String, &[&str])> =
        settings.iter().flat_map(|(topic, args)| CLIENTS.map(|name| (name, format!("{topic}-{name}"), *args))).collect();
    for ((name, _, args), out) in runs.iter().zip(clients_at_once(kaas, &runs)?) {
        assert!(out.contains("secure ok 20"), "{name} {args:?}:\n{out}");
    }
    Ok(())
}

/// Both clients are refused with each of the settings.
fn all_refused(kaas: &Kaas, settings: &[&[&str]]) -> TestResult {
    let runs: Vec<(&str, String, &[&str])> =
        settings.iter().flat_map(|args| CLIENTS.map(|name| (name, "never".to_string(), *args))).collect();
    for ((name, _, args), out) in runs.iter().zip(clients_at_once(kaas, &runs)?) {
        assert!(out.contains("refused"), "{name} {args:?} was not refused:\n{out}");
    }
    Ok(())
}

#[test]
fn tls_with_and_without_client_certificates() -> TestResult {
    let dir = tempfile::tempdir()?;
    let servers = Pki::new(dir.path(), "servers-ca")?;
    let clients = Pki::new(dir.path(), "clients-ca")?;
    let (crt, key) = servers.leaf("broker", &["localhost", "127.0.0.1"])?;
    let (alice_crt, alice_key) = clients.leaf("alice", &["alice"])?;
    let (mallory_crt, mallory_key) = servers.leaf("mallory", &["mallory"])?;
    let ca = servers.ca("servers-ca");

    // TLS only: any client that trusts the broker's CA.
    let kaas = Kaas::start_with(&["--security-protocol", "SSL", "--ssl-certificate", path(&crt), "--ssl-key", path(&key)])?;
    all_succeed(&kaas, &[("tls", &["--ssl", path(&ca)])])?;
    all_refused(&kaas, &[&[]])?; // plaintext against TLS
    drop(kaas);

    // mTLS: a certificate from the clients CA is required.
    let kaas = Kaas::start_with(&[
        "--security-protocol", "SSL",
        "--ssl-certificate", path(&crt), "--ssl-key", path(&key),
        "--ssl-truststore", path(&clients.ca("clients-ca")), "--ssl-client-auth", "required",
    ])?;
    all_succeed(&kaas, &[("mtls", &["--ssl", path(&ca), "--cert", path(&alice_crt), path(&alice_key)])])?;
    all_refused(&kaas, &[&["--ssl", path(&ca)], &["--ssl", path(&ca), "--cert", path(&mallory_crt), path(&mallory_key)]])?;
    Ok(())
}

/// mTLS identities: the user of a connection is its client certificate's subject as Java
/// prints it (`CN=carol,OU=ops`), mapped by `--ssl-principal-mapping-rules` as Kafka maps it;
/// ACLs and super users see that user. Admin maps to `admin` (a super user), carol's name
/// matches no rule and stays whole (a super user under that name), alice maps to `alice`, who
/// has no ACLs and is refused.
#[test]
fn client_certificates_name_their_users() -> TestResult {
    let dir = tempfile::tempdir()?;
    let servers = Pki::new(dir.path(), "servers-ca")?;
    let clients = Pki::new(dir.path(), "clients-ca")?;
    let (crt, key) = servers.leaf("broker", &["localhost", "127.0.0.1"])?;
    let in_org = |cn| [(DnType::OrganizationName, "Kaas Test"), (DnType::CommonName, cn)];
    let (admin_crt, admin_key) = clients.leaf_named("admin", &["admin"], &in_org("Admin"))?;
    let (alice_crt, alice_key) = clients.leaf_named("alice", &["alice"], &in_org("alice"))?;
    let (carol_crt, carol_key) = clients.leaf_named("carol", &["carol"], &[(DnType::OrganizationalUnitName, "ops"), (DnType::CommonName, "carol")])?;
    let ca = servers.ca("servers-ca");
    let kaas = Kaas::start_with(&[
        "--security-protocol", "SSL",
        "--ssl-certificate", path(&crt), "--ssl-key", path(&key),
        "--ssl-truststore", path(&clients.ca("clients-ca")), "--ssl-client-auth", "required",
        "--ssl-principal-mapping-rules", "RULE:^CN=([^,]*),O=Kaas Test$/$1/L,DEFAULT",
        "--authorizer", "standard", "--super-users", "User:admin;User:CN=carol,OU=ops",
    ])?;
    all_succeed(&kaas, &[
        ("admin", &["--ssl", path(&ca), "--cert", path(&admin_crt), path(&admin_key)]),
        ("carol", &["--ssl", path(&ca), "--cert", path(&carol_crt), path(&carol_key)]),
    ])?;
    let alice: &[&str] = &["--ssl", path(&ca), "--cert", path(&alice_crt), path(&alice_key)];
    let runs: Vec<(&str, String, &[&str])> = CLIENTS.iter().map(|name| (*name, format!("alice-{name}"), alice)).collect();
    for ((name, _, _), out) in runs.iter().zip(clients_at_once(&kaas, &runs)?) {
        assert!(!out.contains("secure ok") && out.to_lowercase().contains("authorization"), "{name} as alice was not refused by the authorizer:\n{out}");
    }
    Ok(())
}

/// An ES256 key that signs OAUTHBEARER tokens, as an identity provider's would.
struct TokenIssuer {
    key: jsonwebtoken::EncodingKey,
    jwk: serde_json::Value,
}

impl TokenIssuer {
    fn new(kid: &str) -> TestResult<TokenIssuer> {
        use base64::Engine as _;
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let pair = KeyPair::generate()?; // ECDSA P-256
        let point = pair.public_key_raw(); // 0x04 || x || y
        let (x, y) = point.get(1..).ok_or("empty public key")?.split_at(32);
        let jwk = serde_json::json!({"kty": "EC", "crv": "P-256", "kid": kid, "alg": "ES256", "x": b64.encode(x), "y": b64.encode(y)});
        Ok(TokenIssuer { key: jsonwebtoken::EncodingKey::from_ec_der(&pair.serialize_der()), jwk })
    }

    /// A token for `user` and `audience`, expiring `lifetime` seconds from now (negative: expired).
    fn token(&self, user: &str, audience: &str, lifetime: i64) -> TestResult<String> {
        let now = i64::try_from(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_secs())?;
        let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::ES256);
        header.kid = self.jwk["kid"].as_str().map(str::to_owned);
        let claims = serde_json::json!({"sub": user, "aud": audience, "iat": now, "exp": now + lifetime});
        Ok(jsonwebtoken::encode(&header, &claims, &self.key)?)
    }
}

/// SASL/OAUTHBEARER with tokens from an identity provider: librdkafka's token callback and
/// kafka-python's token provider log in with signed JWTs; the `sub` claim is the user ACLs see
/// (alice is a super user, bob has no ACLs and is refused by the authorizer); a token signed by
/// another key, an expired one and one for another audience do not log in.
#[test]
fn oauthbearer_tokens_name_their_users() -> TestResult {
    let dir = tempfile::tempdir()?;
    let (idp, impostor) = (TokenIssuer::new("idp-1")?, TokenIssuer::new("idp-1")?);
    let jwks = dir.path().join("jwks.json");
    std::fs::write(&jwks, serde_json::json!({"keys": [idp.jwk.clone()]}).to_string())?;
    let jwks_url = format!("file://{}", path(&jwks));
    let kaas = Kaas::start_with(&[
        "--security-protocol", "SASL_PLAINTEXT",
        "--sasl-enabled-mechanisms", "OAUTHBEARER",
        "--sasl-oauthbearer-jwks", &jwks_url,
        "--sasl-oauthbearer-expected-audience", "kafka",
        "--authorizer", "standard", "--super-users", "User:alice",
    ])?;
    let alice = idp.token("alice", "kafka", 600)?;
    all_succeed(&kaas, &[("oauth", &["--oauth", &alice])])?;
    let bob = idp.token("bob", "kafka", 600)?;
    let runs: Vec<(&str, String, Vec<&str>)> = CLIENTS.iter().map(|name| (*name, format!("bob-{name}"), vec!["--oauth", bob.as_str()])).collect();
    let runs: Vec<(&str, String, &[&str])> = runs.iter().map(|(n, t, a)| (*n, t.clone(), a.as_slice())).collect();
    for ((name, _, _), out) in runs.iter().zip(clients_at_once(&kaas, &runs)?) {
        assert!(!out.contains("secure ok") && out.to_lowercase().contains("authorization"), "{name} as bob was not refused by the authorizer:\n{out}");
    }
    let (forged, expired, elsewhere) = (impostor.token("alice", "kafka", 600)?, idp.token("alice", "kafka", -120)?, idp.token("alice", "billing", 600)?);
    all_refused(&kaas, &[&["--oauth", &forged], &["--oauth", &expired], &["--oauth", &elsewhere]])?;
    Ok(())
}

/// An identity provider's key set endpoint over HTTPS: answers every GET with the key set
/// `keys` holds (one request per connection) until the test ends; returns its URL.
fn jwks_endpoint(pki: &Pki, keys: std::sync::Arc<std::sync::Mutex<String>>) -> TestResult<String> {
    use rustls::pki_types::pem::PemObject;
    use std::io::{Read, Write};
    let (crt, key) = pki.leaf("idp", &["127.0.0.1"])?;
    let certs = rustls::pki_types::CertificateDer::pem_file_iter(&crt)?.collect::<Result<Vec<_>, _>>()?;
    let key = rustls::pki_types::PrivateKeyDer::from_pem_file(&key)?;
    let config = rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs, key)?;
    let config = std::sync::Arc::new(config);
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let url = format!("https://{}/protocol/openid-connect/certs", listener.local_addr()?);
    std::thread::spawn(move || {
        for tcp in listener.incoming().flatten() {
            let Ok(tls) = rustls::ServerConnection::new(config.clone()) else { continue };
            let mut stream = rustls::StreamOwned::new(tls, tcp);
            let mut request = Vec::new();
            let mut buf = [0u8; 1024];
            while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                match stream.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => request.extend_from_slice(&buf[..n]),
                }
            }
            let body = keys.lock().map(|k| k.clone()).unwrap_or_default();
            let answer = format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len());
            let _ = stream.write_all(answer.as_bytes());
            stream.conn.send_close_notify();
            let _ = stream.flush();
        }
    });
    Ok(url)
}

/// OAUTHBEARER with the key set an identity provider publishes over HTTPS (Keycloak's, Okta's
/// `jwks_uri`), its certificate signed by a private CA: tokens log in, and after the provider
/// rotates its keys a token signed with the new key logs in without a restart (the unknown key
/// id makes the broker fetch the set early, not at the hour's refresh).
#[test]
fn oauthbearer_keys_from_an_identity_providers_https_endpoint() -> TestResult {
    let dir = tempfile::tempdir()?;
    let pki = Pki::new(dir.path(), "idp-ca")?;
    let (old, new) = (TokenIssuer::new("2026-11")?, TokenIssuer::new("2026-12")?);
    let keys = std::sync::Arc::new(std::sync::Mutex::new(serde_json::json!({"keys": [old.jwk.clone()]}).to_string()));
    let url = jwks_endpoint(&pki, keys.clone())?;
    let ca = pki.ca("idp-ca");
    let kaas = Kaas::start_with(&[
        "--security-protocol", "SASL_PLAINTEXT",
        "--sasl-enabled-mechanisms", "OAUTHBEARER",
        "--sasl-oauthbearer-jwks", &url,
        "--sasl-oauthbearer-jwks-endpoint-ca", path(&ca),
        "--sasl-oauthbearer-expected-audience", "kafka",
    ])?;
    let alice = old.token("alice", "kafka", 600)?;
    let mut last = String::new();
    let fetched = common::wait_for(Duration::from_secs(20), || {
        last = client(&kaas, "confluent", "alice", &["--oauth", &alice]).unwrap_or_default();
        last.contains("secure ok")
    });
    assert!(fetched, "alice's token never logged in: {last}");
    all_succeed(&kaas, &[("oauth-endpoint", &["--oauth", &alice])])?;

    *keys.lock().map_err(|_| "poisoned")? = serde_json::json!({"keys": [old.jwk.clone(), new.jwk.clone()]}).to_string();
    let bob = new.token("bob", "kafka", 600)?;
    let rotated = common::wait_for(Duration::from_secs(30), || {
        last = client(&kaas, "confluent", "bob", &["--oauth", &bob]).unwrap_or_default();
        last.contains("secure ok")
    });
    assert!(rotated, "a token signed with the rotated key never logged in: {last}");
    let impostor = TokenIssuer::new("2026-12")?.token("mallory", "kafka", 600)?;
    all_refused(&kaas, &[&["--oauth", &impostor]])?;
    Ok(())
}

#[test]
fn sasl_scram_and_plain_over_tls() -> TestResult {
    let dir = tempfile::tempdir()?;
    let servers = Pki::new(dir.path(), "servers-ca")?;
    let (crt, key) = servers.leaf("broker", &["localhost", "127.0.0.1"])?;
    let credentials = dir.path().join("users.json");
    add_user(&credentials, "alice", "alice-secret", "SCRAM-SHA-512")?;
    add_user(&credentials, "bob", "bob-secret", "SCRAM-SHA-256")?;
    let kaas = Kaas::start_with(&[
        "--security-protocol", "SASL_SSL",
        "--ssl-certificate", path(&crt), "--ssl-key", path(&key),
        "--sasl-enabled-mechanisms", "SCRAM-SHA-512,SCRAM-SHA-256,PLAIN",
        "--sasl-credentials", path(&credentials),
    ])?;
    let ca = servers.ca("servers-ca");
    let ssl = ["--ssl", path(&ca)];
    let sasl = |mechanism: &'static str, user: &'static str, password: &'static str| {
        [ssl[0], ssl[1], "--sasl", mechanism, user, password]
    };
    all_succeed(
        &kaas,
        &[
            ("scram512", &sasl("SCRAM-SHA-512", "alice", "alice-secret")),
            ("scram256", &sasl("SCRAM-SHA-256", "bob", "bob-secret")),
            ("plain", &sasl("PLAIN", "alice", "alice-secret")),
        ],
    )?;
    all_refused(
        &kaas,
        &[
            &sasl("SCRAM-SHA-512", "alice", "wrong"),
            &sasl("SCRAM-SHA-512", "nobody", "x"),
            &sasl("SCRAM-SHA-512", "bob", "bob-secret"), // bob has SHA-256 only
            &sasl("PLAIN", "bob", "wrong"),
            &ssl, // TLS without SASL
        ],
    )?;

    // A user added while the broker runs can log in without a restart.
    add_user(&credentials, "carol", "carol-secret", "SCRAM-SHA-512")?;
    let carol = sasl("SCRAM-SHA-512", "carol", "carol-secret");
    let mut last = String::new();
    let picked_up = common::wait_for(Duration::from_secs(20), || {
        last = client(&kaas, "confluent", "carol", &carol).unwrap_or_default();
        last.contains("secure ok")
    });
    assert!(picked_up, "carol was not picked up: {last}");
    Ok(())
}

#[test]
fn sessions_are_reauthenticated_and_clients_carry_on() -> TestResult {
    let dir = tempfile::tempdir()?;
    let credentials = dir.path().join("users.json");
    add_user(&credentials, "alice", "alice-secret", "SCRAM-SHA-256")?;
    let kaas = Kaas::start_with(&[
        "--security-protocol", "SASL_PLAINTEXT",
        "--sasl-enabled-mechanisms", "SCRAM-SHA-256",
        "--sasl-credentials", path(&credentials),
        "--connections-max-reauth-ms", "2000",
    ])?;
    // One producer sending over 8 s, four session lifetimes: librdkafka re-authenticates on its
    // connections (KIP-368) and every record is acknowledged and read back.
    let out = client(&kaas, "confluent", "reauth", &["--sasl", "SCRAM-SHA-256", "alice", "alice-secret", "--spread", "8"])?;
    assert!(out.contains("secure ok 20"), "{out}");
    Ok(())
}
