//! Certificates chain, renew and refuse as users and clients need.
use rustls::client::danger::ServerCertVerifier;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};

use super::*;

fn names() -> Names {
    Names {
        cluster: "kc".into(),
        namespace: "prod".into(),
    }
}

/// The listener certificate chains to the stored CA (rustls' verifier, as a client checks
/// it) for every name it must carry, and is valid for a year.
#[test]
fn the_listener_certificate_chains_to_the_stored_ca_for_its_names() {
    let now = OffsetDateTime::now_utc();
    let ca = issue_ca(Ca::Cluster, &names(), 365, now).unwrap();
    // Signed later, by the CA as stored.
    let signing = SigningCa::parse(&ca.cert, &ca.key).unwrap();
    let (leaf, expiry) =
        issue_listener(&names(), &signing, &listener_names(&names()), now).unwrap();
    assert!(expiry.not_after - now > LEAF_VALIDITY - time::Duration::minutes(1));

    use rustls::pki_types::pem::PemObject;
    let der = |pem: &str| CertificateDer::from_pem_slice(pem.as_bytes()).unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(der(&ca.cert)).unwrap();
    let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
        std::sync::Arc::new(roots),
        std::sync::Arc::new(rustls::crypto::ring::default_provider()),
    )
    .build()
    .unwrap();
    for name in [
        "kc-bootstrap.prod.svc",
        "kc-2.kc-brokers.prod.svc",
        "kc-0.kc-brokers.prod.svc.cluster.local",
    ] {
        let server = ServerName::try_from(name).unwrap();
        verifier
            .verify_server_cert(&der(&leaf.cert), &[], &server, &[], UnixTime::now())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    let other = ServerName::try_from("kc-0.other.prod.svc").unwrap();
    assert!(
        verifier
            .verify_server_cert(&der(&leaf.cert), &[], &other, &[], UnixTime::now())
            .is_err()
    );
}

/// A user certificate chains to the stored clients CA (rustls' client verifier, as the
/// broker checks it) and to no other CA, for client authentication only, with exactly the
/// subject `CN=<user>` (the broker's principal is the whole subject).
#[test]
fn a_user_certificate_chains_to_the_clients_ca_with_exactly_its_name() {
    use rustls::pki_types::pem::PemObject;

    let now = OffsetDateTime::now_utc();
    let clients = issue_ca(Ca::Clients, &names(), 365, now).unwrap();
    let cluster = issue_ca(Ca::Cluster, &names(), 365, now).unwrap();
    // Signed later, by the CA as stored.
    let signing = SigningCa::parse(&clients.cert, &clients.key).unwrap();
    let (user, expiry) = issue_user(&signing, "alice", now).unwrap();
    assert!(expiry.not_after - now > LEAF_VALIDITY - time::Duration::minutes(1));
    assert!(
        user.key.starts_with("-----BEGIN PRIVATE KEY-----"),
        "PKCS#8"
    );

    let der = |pem: &str| CertificateDer::from_pem_slice(pem.as_bytes()).unwrap();
    let verifier = |ca: &Pem| {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(der(&ca.cert)).unwrap();
        rustls::server::WebPkiClientVerifier::builder_with_provider(
            std::sync::Arc::new(roots),
            std::sync::Arc::new(rustls::crypto::ring::default_provider()),
        )
        .build()
        .unwrap()
    };
    verifier(&clients)
        .verify_client_cert(&der(&user.cert), &[], UnixTime::now())
        .unwrap();
    assert!(
        verifier(&cluster)
            .verify_client_cert(&der(&user.cert), &[], UnixTime::now())
            .is_err()
    );

    let (_, pem) = x509_parser::pem::parse_x509_pem(user.cert.as_bytes()).unwrap();
    let cert = pem.parse_x509().unwrap();
    assert_eq!(cert.subject().to_string(), "CN=alice");
    assert_eq!(cert.subject().iter().count(), 1);
    let eku = cert.extended_key_usage().unwrap().unwrap().value;
    assert!(eku.client_auth && !eku.server_auth);
    let (_, ca_pem) = x509_parser::pem::parse_x509_pem(clients.cert.as_bytes()).unwrap();
    let ca_cert = ca_pem.parse_x509().unwrap();
    assert_eq!(cert.issuer(), ca_cert.subject());
    assert_eq!(
        ca_cert.subject().to_string(),
        "O=kaas, CN=clients-ca prod/kc"
    );
}

#[test]
fn the_two_cas_have_their_own_secrets() {
    assert_eq!(Ca::Cluster.secret_name(&names()), "kc-cluster-ca");
    assert_eq!(Ca::Cluster.cert_secret_name(&names()), "kc-cluster-ca-cert");
    assert_eq!(Ca::Clients.secret_name(&names()), "kc-clients-ca");
    assert_eq!(Ca::Clients.cert_secret_name(&names()), "kc-clients-ca-cert");
}

#[test]
fn a_certificate_is_issued_again_before_expiry_or_when_its_names_change() {
    let now = OffsetDateTime::now_utc();
    let wanted = listener_names(&names());
    assert!(renewal_reason(None, &wanted, now).is_some());
    let fresh = listener_annotations(&wanted, Expiry::of(now, now + LEAF_VALIDITY));
    assert_eq!(renewal_reason(Some(&fresh), &wanted, now), None);
    // Eleven months later: 30 days or less left.
    let later = now + LEAF_VALIDITY - RENEW_BEFORE + time::Duration::hours(1);
    assert_eq!(
        renewal_reason(Some(&fresh), &wanted, later),
        Some("the certificate is due for renewal")
    );
    // A Secret from before renewal times were recorded: 30 days before its expiry.
    let mut old = fresh.clone();
    old.remove(RENEW_AT_ANNOTATION);
    assert_eq!(renewal_reason(Some(&old), &wanted, now), None);
    assert_eq!(
        renewal_reason(Some(&old), &wanted, later),
        Some("the certificate is due for renewal")
    );
    let renamed = listener_names(&Names {
        cluster: "kc".into(),
        namespace: "staging".into(),
    });
    assert_eq!(
        renewal_reason(Some(&fresh), &renamed, now),
        Some("the names clients connect to changed")
    );
}

fn der(pem: &str) -> CertificateDer<'static> {
    use rustls::pki_types::pem::PemObject;
    CertificateDer::from_pem_slice(pem.as_bytes()).unwrap()
}

fn server_verifier(roots: &[&str]) -> std::sync::Arc<rustls::client::WebPkiServerVerifier> {
    let mut store = rustls::RootCertStore::empty();
    for root in roots {
        store.add(der(root)).unwrap();
    }
    rustls::client::WebPkiServerVerifier::builder_with_provider(
        std::sync::Arc::new(store),
        std::sync::Arc::new(rustls::crypto::ring::default_provider()),
    )
    .build()
    .unwrap()
}

fn serial(pem: &str) -> Vec<u8> {
    let (_, pem) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).unwrap();
    pem.parse_x509().unwrap().raw_serial().to_vec()
}

/// A renewed CA keeps its key and subject: certificates the old one signed verify against
/// the renewed certificate, and new ones against the old (clients that still trust it keep
/// working); it lives longer, under another serial number.
#[test]
fn a_renewed_ca_and_its_predecessor_verify_each_others_certificates() {
    let now = OffsetDateTime::now_utc();
    let old = issue_ca(Ca::Cluster, &names(), 365, now).unwrap();
    let later = now + time::Duration::days(340);
    let renewed = renew_ca(Ca::Cluster, &names(), &old, 365, later).unwrap();
    assert_eq!(renewed.key, old.key);
    assert_ne!(serial(&renewed.cert), serial(&old.cert));
    let old_signing = SigningCa::parse(&old.cert, &old.key).unwrap();
    let new_signing = SigningCa::parse(&renewed.cert, &renewed.key).unwrap();
    assert!(new_signing.not_after > old_signing.not_after + time::Duration::days(300));

    let wanted = listener_names(&names());
    let (before, _) = issue_listener(&names(), &old_signing, &wanted, now).unwrap();
    let (after, _) = issue_listener(&names(), &new_signing, &wanted, now).unwrap();
    let name = ServerName::try_from("kc-bootstrap.prod.svc").unwrap();
    for (leaf, root) in [
        (&before, &renewed.cert),
        (&after, &old.cert),
        (&after, &renewed.cert),
    ] {
        server_verifier(&[root])
            .verify_server_cert(&der(&leaf.cert), &[], &name, &[], UnixTime::now())
            .unwrap();
    }
    // Another CA of the same name (a new key) does not.
    let other = issue_ca(Ca::Cluster, &names(), 365, now).unwrap();
    assert!(
        server_verifier(&[&other.cert])
            .verify_server_cert(&der(&after.cert), &[], &name, &[], UnixTime::now())
            .is_err()
    );
}

/// A certificate never outlives its CA, and one that lives less than twice the renewal
/// window is renewed halfway (so a short-lived CA does not make every reconcile issue it).
#[test]
fn a_certificate_lives_no_longer_than_its_ca_and_short_ones_renew_halfway() {
    let now = OffsetDateTime::now_utc();
    let ca = issue_ca(Ca::Clients, &names(), 10, now).unwrap();
    let signing = SigningCa::parse(&ca.cert, &ca.key).unwrap();
    let (_, expiry) = issue_user(&signing, "alice", now).unwrap();
    assert_eq!(expiry.not_after, signing.not_after);
    let half = (expiry.not_after - now) / 2;
    assert_eq!(expiry.renew_at, expiry.not_after - half);
    let annotations = user_annotations(expiry);
    assert_eq!(
        expiry_reason(&annotations, now + time::Duration::days(4)),
        None
    );
    assert!(expiry_reason(&annotations, now + time::Duration::days(6)).is_some());
}

/// A CA the user provides, made by openssl with a subject of several attributes, signs a
/// listener certificate that chains to it; a key of another certificate, or a certificate
/// that is not a CA, is refused with what is wrong.
#[test]
fn a_user_provided_ca_signs_and_a_mismatched_one_is_refused() {
    let dir = std::env::temp_dir().join(format!("kaas-ca-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let openssl = |args: &[&str]| {
        let out = std::process::Command::new("openssl")
            .args(args)
            .current_dir(&dir)
            .output()
            .expect("openssl must be installed (Debian's openssl package)");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "30",
        "-subj",
        "/C=DE/O=Example Corp/OU=Platform/CN=Example Kafka CA",
    ]);
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-keyout",
        "leaf.key",
        "-out",
        "leaf.crt",
        "-days",
        "30",
        "-subj",
        "/CN=not-a-ca",
        "-addext",
        "basicConstraints=critical,CA:FALSE",
    ]);
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap();
    let (cert, key) = (read("ca.crt"), read("ca.key"));
    let signing = SigningCa::parse(&cert, &key).unwrap();
    let now = OffsetDateTime::now_utc();
    let wanted = listener_names(&names());
    let (leaf, expiry) = issue_listener(&names(), &signing, &wanted, now).unwrap();
    // Capped at the CA's 30 days.
    assert_eq!(expiry.not_after, signing.not_after);
    let name = ServerName::try_from("kc-0.kc-brokers.prod.svc").unwrap();
    server_verifier(&[&cert])
        .verify_server_cert(&der(&leaf.cert), &[], &name, &[], UnixTime::now())
        .unwrap();

    let mismatched = SigningCa::parse(&cert, &read("leaf.key")).unwrap_err();
    assert!(mismatched.contains("not the key"), "{mismatched}");
    let not_ca = SigningCa::parse(&read("leaf.crt"), &read("leaf.key")).unwrap_err();
    assert!(not_ca.contains("not a CA"), "{not_ca}");
    let garbage = SigningCa::parse("nonsense", &key).unwrap_err();
    assert!(garbage.contains("ca.crt"), "{garbage}");
    std::fs::remove_dir_all(&dir).ok();
}
