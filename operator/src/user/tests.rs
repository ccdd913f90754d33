#![allow(clippy::unwrap_used)]
use super::*;
use kaas_shared::crd::KafkaUserSpec;
use kaas_shared::fs::MemFs;

fn user(name: &str, spec: serde_json::Value) -> KafkaUser {
    let spec: KafkaUserSpec = serde_json::from_value(spec).unwrap();
    let mut u = KafkaUser::new(name, spec);
    u.metadata.namespace = Some("ns".into());
    u.metadata.uid = Some(format!("uid-{name}"));
    u
}

fn scram_user() -> KafkaUser {
    user(
        "alice",
        json!({
            "clusterRef": "kc",
            "authentication": {"type": "scram-sha-512"},
            "authorization": {"type": "simple", "acls": [
                {"resource": {"type": "topic", "name": "orders"}, "operations": ["Read", "Describe"]},
                {"resource": {"type": "group", "name": "orders-", "patternType": "prefix"}, "operations": ["Read"], "host": "10.0.0.1"},
            ]},
            "quotas": {"producerByteRate": 1048576, "requestPercentage": 50},
        }),
    )
}

#[test]
fn the_username_is_the_name_or_a_certificate_subject() {
    assert_eq!(scram_user().username(), "alice");
    let cert = user(
        "bob",
        json!({"clusterRef": "kc", "authentication": {"type": "tls-external"}}),
    );
    assert_eq!(cert.username(), "CN=bob");
    assert_eq!(
        user("carol", json!({"clusterRef": "kc"})).username(),
        "carol"
    );
}

#[test]
fn the_entry_holds_both_mechanisms_acls_quotas_and_keeps_salts_while_the_password_matches() {
    let alice = scram_user();
    let first = entry(&alice, "uid-alice", Some("pw"), None);
    assert_eq!(first.uid, "uid-alice");
    assert_eq!(
        first.scram.keys().copied().collect::<Vec<_>>(),
        [ScramHash::Sha256, ScramHash::Sha512]
    );
    for (hash, credential) in &first.scram {
        assert!(credential.matches_password(*hash, b"pw"));
        assert_eq!(credential.iterations, kafka_users::SCRAM_ITERATIONS);
    }
    assert_eq!(first.acls.len(), 2);
    assert_eq!(first.acls[1].host, "10.0.0.1");
    assert_eq!(first.quotas.producer_byte_rate, Some(1048576));
    assert_eq!(first.quotas.request_percentage, Some(50));
    assert_eq!(entry(&alice, "uid-alice", Some("pw"), Some(&first)), first);
    let changed = entry(&alice, "uid-alice", Some("new"), Some(&first));
    assert_ne!(changed.scram, first.scram);
    assert!(changed.scram[&ScramHash::Sha512].matches_password(ScramHash::Sha512, b"new"));

    let cert = user(
        "bob",
        json!({"clusterRef": "kc", "authentication": {"type": "tls-external"}}),
    );
    let e = entry(&cert, "uid-bob", None, None);
    assert!(e.scram.is_empty() && e.acls.is_empty() && e.quotas.is_empty());
    assert_eq!(
        ready_message("alice", &first),
        "user \"alice\": SCRAM-SHA-512 and SCRAM-SHA-256 credentials, 2 ACL rules, 2 quotas"
    );
}

#[test]
fn the_user_secret_is_strimzis_shape_and_owned_by_the_user() {
    let alice = scram_user();
    let secret = user_secret(&alice, "kc", "p\"w").unwrap();
    assert_eq!(secret.metadata.name.as_deref(), Some("alice"));
    assert_eq!(secret.metadata.namespace.as_deref(), Some("ns"));
    let data = secret.data.as_ref().unwrap();
    assert_eq!(data[PASSWORD_KEY].0, b"p\"w");
    assert_eq!(
        String::from_utf8(data[JAAS_CONFIG_KEY].0.clone()).unwrap(),
        r#"org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" password="p\"w";"#
    );
    let labels = secret.metadata.labels.as_ref().unwrap();
    assert_eq!(labels[LABEL_MANAGED_BY], "kaas-operator");
    assert_eq!(labels[LABEL_CLUSTER], "kc");
    assert_eq!(labels[LABEL_USER], "alice");
    let owner = &secret.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
        ("KafkaUser", "alice", "uid-alice")
    );
    assert_eq!(owner.controller, Some(true));
    assert!(owned_by(&secret, "uid-alice") && !owned_by(&secret, "uid-other"));
    assert!(secret_current(&secret, &secret));
    let other = user_secret(&alice, "kc", "other").unwrap();
    assert!(!secret_current(&secret, &other));
    let mut foreign = secret.clone();
    foreign.metadata.owner_references = None;
    assert!(!secret_current(&foreign, &secret));
}

#[test]
fn a_tls_users_certificate_is_issued_again_when_missing_lost_expiring_or_from_another_ca() {
    let bob = user(
        "bob",
        json!({"clusterRef": "kc", "authentication": {"type": "tls"}}),
    );
    assert!(is_tls(&bob) && !is_scram(&bob));
    assert_eq!(bob.username(), "CN=bob");
    let names = Names {
        cluster: "kc".into(),
        namespace: "ns".into(),
    };
    let now = time::OffsetDateTime::now_utc();
    let ca = certificates::issue_ca(Ca::Clients, &names, now).unwrap();
    let (cert, not_after) = certificates::issue_user(&names, &ca.key, "bob", now).unwrap();
    let secret = certificate_secret(&bob, "kc", &ca.cert, &cert, not_after).unwrap();
    let data = secret.data.as_ref().unwrap();
    assert_eq!(
        data.keys().collect::<Vec<_>>(),
        [CA_CERT_KEY, USER_CERT_KEY, USER_KEY_KEY]
    );
    assert_eq!(data[USER_CERT_KEY].0, cert.cert.as_bytes());
    let labels = secret.metadata.labels.as_ref().unwrap();
    assert_eq!(labels[LABEL_USER], "bob");
    assert_eq!(labels[LABEL_CLUSTER], "kc");
    assert!(owned_by(&secret, "uid-bob"));

    assert_eq!(certificate_reason(Some(&secret), &ca.cert, now), None);
    assert_eq!(
        certificate_reason(None, &ca.cert, now),
        Some("no user certificate yet")
    );
    let other = certificates::issue_ca(Ca::Clients, &names, now).unwrap();
    assert_eq!(
        certificate_reason(Some(&secret), &other.cert, now),
        Some("the clients CA changed")
    );
    let mut lost = secret.clone();
    lost.data.as_mut().unwrap().remove(USER_KEY_KEY);
    assert_eq!(
        certificate_reason(Some(&lost), &ca.cert, now),
        Some("the user Secret lost its certificate")
    );
    let later =
        now + certificates::LEAF_VALIDITY - certificates::RENEW_BEFORE + time::Duration::hours(1);
    assert_eq!(
        certificate_reason(Some(&secret), &ca.cert, later),
        Some("the certificate expires within 30 days")
    );
    let mut unannotated = secret.clone();
    unannotated.metadata.annotations = None;
    assert_eq!(
        certificate_reason(Some(&unannotated), &ca.cert, now),
        Some("the certificate's expiry is unknown")
    );
    // A certificate user has no SCRAM credentials.
    let e = entry(&bob, "uid-bob", None, None);
    assert!(e.scram.is_empty());
}

#[test]
fn generated_passwords_are_32_random_alphanumerics() {
    let a = generate_password().unwrap();
    let b = generate_password().unwrap();
    assert_eq!(a.len(), PASSWORD_LENGTH);
    assert!(a.chars().all(|c| c.is_ascii_alphanumeric()), "{a}");
    assert_ne!(a, b);
    assert_eq!(password_text(b"pw"), Ok("pw".to_owned()));
    assert!(password_text(b"").is_err() && password_text(&[0xff]).is_err());
}

#[test]
fn specs_are_refused_with_readable_messages() {
    assert_eq!(refusal(&scram_user()), None);
    let bad = user(
        "bad",
        json!({
            "clusterRef": "kc",
            "authentication": {"type": "scram-sha-512", "password": {"valueFrom": {"secretKeyRef": {"name": "bad", "key": "pw"}}}},
            "authorization": {"type": "simple", "acls": [
                {"resource": {"type": "group", "name": "g"}, "operations": ["Read", "Write"]},
                {"resource": {"type": "transactionalId", "name": "t"}, "operations": ["Read"], "host": "example.com"},
                {"resource": {"type": "cluster"}, "operations": ["IdempotentWrite", "ClusterAction"], "host": "fd00::1"},
                {"resource": {"type": "topic", "name": "*"}, "operations": ["All", "DescribeConfigs"]},
            ]},
        }),
    );
    let message = refusal(&bad).unwrap();
    assert!(
        message.contains(
            "authorization.acls[0]: Kafka does not support Write on a group resource (only Read, Describe, Delete, DescribeConfigs, AlterConfigs, All)"
        ),
        "{message}"
    );
    assert!(
        message.contains("acls[1]: Kafka does not support Read on a transactionalId"),
        "{message}"
    );
    assert!(
        message.contains(r#"acls[1]: host "example.com" is neither "*" nor an IP address"#),
        "{message}"
    );
    assert!(
        !message.contains("acls[2]") && !message.contains("acls[3]"),
        "{message}"
    );
    assert!(message.contains("is the user's own Secret"), "{message}");
}

#[test]
fn the_file_is_written_only_when_an_entry_changes_and_a_renamed_user_leaves_no_old_entry() {
    let fs = MemFs::new();
    let layout = Layout::new("/data");
    fs.create_dir_all(std::path::Path::new("/data")).unwrap();
    let alice = scram_user();
    let build =
        |existing: Option<&KafkaUserEntry>| entry(&alice, "uid-alice", Some("pw"), existing);
    assert_eq!(
        set_entry(&fs, &layout, "alice", "uid-alice", build).unwrap(),
        Written::Created
    );
    let file = kafka_users::read(&fs, &layout).unwrap();
    assert_eq!(file.revision, 1);
    assert_eq!(
        set_entry(&fs, &layout, "alice", "uid-alice", build).unwrap(),
        Written::Unchanged
    );
    assert_eq!(kafka_users::read(&fs, &layout).unwrap(), file);
    let other =
        |existing: Option<&KafkaUserEntry>| entry(&alice, "uid-alice", Some("new"), existing);
    assert_eq!(
        set_entry(&fs, &layout, "alice", "uid-alice", other).unwrap(),
        Written::Updated
    );
    // The same user, now by certificate: its name to Kafka changed.
    let cert = |_: Option<&KafkaUserEntry>| entry(&alice, "uid-alice", None, None);
    assert_eq!(
        set_entry(&fs, &layout, "CN=alice", "uid-alice", cert).unwrap(),
        Written::Created
    );
    let file = kafka_users::read(&fs, &layout).unwrap();
    assert_eq!(file.users.keys().collect::<Vec<_>>(), ["CN=alice"]);
    // A recreated user of the same name (a new uid) replaces the old entry.
    let again = |_: Option<&KafkaUserEntry>| entry(&alice, "uid-2", None, None);
    assert_eq!(
        set_entry(&fs, &layout, "CN=alice", "uid-2", again).unwrap(),
        Written::Created
    );
}
