#![allow(clippy::unwrap_used)]
use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use kaas_shared::crd::KafkaUserSpec;
use kaas_shared::fs::MemFs;

use super::*;
use crate::resources::LABEL_MANAGED_BY;

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
    let now = time::OffsetDateTime::now_utc();
    let (ca, cert, expiry) = issued("bob");
    let names = Names {
        cluster: "kc".into(),
        namespace: "ns".into(),
    };
    let secret = certificate_secret(&bob, "kc", &ca.cert, &cert, expiry).unwrap();
    let data = secret.data.as_ref().unwrap();
    assert_eq!(data.keys().collect::<Vec<_>>(), TLS_KEYS);
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
    let other = certificates::issue_ca(Ca::Clients, &names, 365, now).unwrap();
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
        Some("the certificate is due for renewal")
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

/// A user's issued certificate and its clients CA.
fn issued(name: &str) -> (certificates::Pem, certificates::Pem, certificates::Expiry) {
    let names = Names {
        cluster: "kc".into(),
        namespace: "ns".into(),
    };
    let now = time::OffsetDateTime::now_utc();
    let ca = certificates::issue_ca(Ca::Clients, &names, 365, now).unwrap();
    let signing = certificates::SigningCa::parse(&ca.cert, &ca.key).unwrap();
    let (cert, expiry) = certificates::issue_user(&signing, name, now).unwrap();
    (ca, cert, expiry)
}

fn tls_user(name: &str) -> KafkaUser {
    user(
        name,
        json!({"clusterRef": "kc", "authentication": {"type": "tls"}}),
    )
}

fn keys(secret: &Secret) -> Vec<&str> {
    secret
        .data
        .iter()
        .flatten()
        .map(|(k, _)| k.as_str())
        .collect()
}

/// `secret` after the JSON merge patch `patch` (RFC 7386), as the API server applies it.
fn merged(secret: &Secret, patch: &serde_json::Value) -> Secret {
    fn merge(target: &mut serde_json::Value, patch: &serde_json::Value) {
        let Some(patch) = patch.as_object() else {
            *target = patch.clone();
            return;
        };
        if !target.is_object() {
            *target = json!({});
        }
        let target = target.as_object_mut().unwrap();
        for (key, value) in patch {
            if value.is_null() {
                target.remove(key);
            } else {
                merge(target.entry(key.clone()).or_insert(json!(null)), value);
            }
        }
    }
    let mut value = serde_json::to_value(secret).unwrap();
    merge(&mut value, patch);
    serde_json::from_value(value).unwrap()
}

/// The keystore in a `tls` user's Secret opens with its password and holds its certificate.
fn assert_keystore_holds(secret: &Secret, cert_pem: &str) {
    let data = secret.data.as_ref().unwrap();
    let password = String::from_utf8(data[KEYSTORE_PASSWORD_KEY].0.clone()).unwrap();
    assert_eq!(password.len(), PASSWORD_LENGTH);
    assert!(password.chars().all(|c| c.is_ascii_alphanumeric()));
    let store = p12_keystore::KeyStore::from_pkcs12(
        &data[KEYSTORE_KEY].0,
        &password,
        p12_keystore::Pkcs12ImportPolicy::Strict,
    )
    .unwrap();
    let (alias, chain) = store.private_key_chain().unwrap();
    assert_eq!(alias, secret.metadata.name.as_deref().unwrap());
    let (_, pem) = x509_parser::pem::parse_x509_pem(cert_pem.as_bytes()).unwrap();
    assert_eq!(chain.certs()[0].as_der(), pem.contents);
}

#[test]
fn a_tls_users_secret_has_a_keystore_of_its_certificate_under_a_new_password() {
    let bob = tls_user("bob");
    let (ca, cert, expiry) = issued("bob");
    let first = certificate_secret(&bob, "kc", &ca.cert, &cert, expiry).unwrap();
    assert_keystore_holds(&first, &cert.cert);
    let again = certificate_secret(&bob, "kc", &ca.cert, &cert, expiry).unwrap();
    assert_ne!(
        first.data.as_ref().unwrap()[KEYSTORE_PASSWORD_KEY],
        again.data.as_ref().unwrap()[KEYSTORE_PASSWORD_KEY]
    );
}

/// A kept certificate keeps its Secret's keys as they are; a Secret from before keystores gets
/// one of the certificate it holds (not a new certificate); only the operator's keys and
/// certificate annotations are desired.
#[test]
fn a_kept_certificate_keeps_its_keystore_or_gets_one_of_the_same_certificate() {
    let bob = tls_user("bob");
    let (ca, cert, expiry) = issued("bob");
    let mut live = certificate_secret(&bob, "kc", &ca.cert, &cert, expiry).unwrap();
    let annotations = live.metadata.annotations.clone().unwrap();
    live.metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert("someone/else".into(), "x".into());
    live.data
        .as_mut()
        .unwrap()
        .insert("app.properties".into(), ByteString(b"mine".to_vec()));

    let kept = kept_certificate_secret(&bob, "kc", Some(&live)).unwrap();
    assert_eq!(keys(&kept), TLS_KEYS);
    for key in TLS_KEYS {
        assert_eq!(
            kept.data.as_ref().unwrap()[key],
            live.data.as_ref().unwrap()[key],
            "{key}"
        );
    }
    assert_eq!(kept.metadata.annotations.as_ref(), Some(&annotations));
    assert!(secret_current(&live, &kept), "nothing to write");

    let mut upgraded = live.clone();
    upgraded.data.as_mut().unwrap().remove(KEYSTORE_KEY);
    let desired = kept_certificate_secret(&bob, "kc", Some(&upgraded)).unwrap();
    assert_eq!(keys(&desired), TLS_KEYS);
    assert_eq!(
        desired.data.as_ref().unwrap()[USER_CERT_KEY].0,
        cert.cert.as_bytes(),
        "the same certificate"
    );
    assert_keystore_holds(&desired, &cert.cert);
    assert!(!secret_current(&upgraded, &desired));
    let written = merged(&upgraded, &secret_patch(&upgraded, &desired).unwrap());
    assert!(secret_current(&written, &desired));
    assert_eq!(
        written.data.as_ref().unwrap()["app.properties"].0,
        b"mine",
        "a key not the operator's stays"
    );

    assert_eq!(
        keys(&kept_certificate_secret(&bob, "kc", None).unwrap()),
        [] as [&str; 0]
    );
}

/// A user switched between SCRAM and tls: the Secret's keys of the old type (and a
/// certificate's annotations) are removed by name, since a merge patch keeps what it does not
/// name; the patch carries the resourceVersion read.
#[test]
fn a_secret_switched_between_scram_and_tls_keeps_none_of_the_old_types_keys() {
    let alice = scram_user();
    let (ca, cert, expiry) = issued("alice");
    let mut as_tls = certificate_secret(&alice, "kc", &ca.cert, &cert, expiry).unwrap();
    as_tls.metadata.resource_version = Some("7".into());
    let as_scram = user_secret(&alice, "kc", "pw").unwrap();

    // tls → SCRAM
    assert_eq!(stale_keys(&as_tls, &as_scram), TLS_KEYS);
    assert_eq!(
        stale_annotations(&as_tls, &as_scram),
        CERTIFICATE_ANNOTATIONS
    );
    assert!(!secret_current(&as_tls, &as_scram));
    let patch = secret_patch(&as_tls, &as_scram).unwrap();
    assert_eq!(patch["metadata"]["resourceVersion"], "7");
    for key in TLS_KEYS {
        assert!(
            patch["data"][key].is_null() && patch["data"].get(key).is_some(),
            "{key}"
        );
    }
    for key in CERTIFICATE_ANNOTATIONS {
        assert!(
            patch["metadata"]["annotations"].get(key).unwrap().is_null(),
            "{key}"
        );
    }
    assert_eq!(
        patch["data"][PASSWORD_KEY], "cHc=",
        "base64 of the password"
    );
    let written = merged(&as_tls, &patch);
    assert_eq!(keys(&written), SCRAM_KEYS);
    assert!(
        written
            .metadata
            .annotations
            .as_ref()
            .is_none_or(BTreeMap::is_empty)
    );
    assert!(secret_current(&written, &as_scram));
    assert!(owned_by(&written, "uid-alice"), "the owner stays");

    // SCRAM → tls
    assert_eq!(stale_keys(&as_scram, &as_tls), SCRAM_KEYS);
    assert!(stale_annotations(&as_scram, &as_tls).is_empty());
    let written = merged(&as_scram, &secret_patch(&as_scram, &as_tls).unwrap());
    assert_eq!(keys(&written), TLS_KEYS);
    assert!(secret_current(&written, &as_tls));

    // The same type: nothing is stale, and the patch removes nothing.
    let other = user_secret(&alice, "kc", "other").unwrap();
    assert!(stale_keys(&as_scram, &other).is_empty());
    let patch = secret_patch(&as_scram, &other).unwrap();
    assert!(
        patch["data"]
            .as_object()
            .unwrap()
            .values()
            .all(|v| !v.is_null())
    );
    assert_eq!(patch["metadata"].get("resourceVersion"), None);
}

/// The API server of a scripted conversation with one user's reconcile: `secrets` are the
/// Secrets it has; every request is recorded (method, path, content type, body) and answered
/// — a Secret read from `secrets`, a write with the Secret, the user's status with the user.
mod api {
    use super::*;
    use http::{Method, Request, Response};
    use kube::client::Body;

    use crate::leader::Leadership;
    use crate::metrics::ReconcileMetrics;

    /// One request the reconcile made.
    #[derive(Debug)]
    pub(super) struct Call {
        pub(super) method: Method,
        pub(super) path: String,
        pub(super) content_type: String,
        pub(super) body: serde_json::Value,
    }

    fn respond(status: u16, body: &serde_json::Value) -> Response<Body> {
        Response::builder()
            .status(status)
            .body(Body::from(serde_json::to_vec(body).unwrap()))
            .unwrap()
    }

    fn not_found() -> Response<Body> {
        let status = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "reason": "NotFound", "code": 404, "message": "not found"});
        respond(404, &status)
    }

    /// Reconciles `user` against an API server that has `secrets`; what was asked of it.
    pub(super) async fn reconcile_with(user: KafkaUser, secrets: Vec<Secret>) -> Vec<Call> {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let client = kube::Client::new(service, "ns");
        let fs = MemFs::new();
        fs.create_dir_all(std::path::Path::new("/data")).unwrap();
        let ctx = Arc::new(AgentContext {
            recorder: events::recorder(&client, "kaas-volume-agent"),
            client,
            namespace: "ns".into(),
            cluster: "kc".into(),
            fs: Arc::new(fs),
            root: "/data".into(),
            volume_lock: Arc::default(),
            topics: kube::runtime::reflector::store::Writer::default().as_reader(),
            leadership: Leadership::always(),
            metrics: ReconcileMetrics::default(),
            backoff: Arc::default(),
        });
        let user_json = serde_json::to_value(&user).unwrap();
        let server = tokio::spawn(async move {
            let mut calls = Vec::new();
            while let Some((request, send)) = handle.next_request().await {
                let method = request.method().clone();
                let path = request.uri().path().to_owned();
                let content_type = request
                    .headers()
                    .get(http::header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_owned();
                let body = request.into_body().collect_bytes().await.unwrap();
                let body: serde_json::Value = if body.is_empty() {
                    json!(null)
                } else {
                    serde_json::from_slice(&body).unwrap()
                };
                let name = path.rsplit('/').next().unwrap_or_default();
                let secret = secrets
                    .iter()
                    .find(|s| s.metadata.name.as_deref() == Some(name));
                let response = if path.contains("/events") || path.ends_with("/secrets") {
                    respond(201, &body)
                } else if path.contains("/secrets/") {
                    match secret {
                        Some(secret) => respond(200, &serde_json::to_value(secret).unwrap()),
                        None => not_found(),
                    }
                } else if path.ends_with("/status") {
                    respond(200, &user_json)
                } else {
                    panic!("unexpected {method} {path}");
                };
                calls.push(Call {
                    method,
                    path,
                    content_type,
                    body,
                });
                send.send_response(response);
            }
            calls
        });
        reconcile(Arc::new(user), ctx).await.unwrap();
        server.await.unwrap()
    }
}

fn events_of(calls: &[api::Call]) -> Vec<String> {
    calls
        .iter()
        .filter(|c| c.path.contains("/events"))
        .filter_map(|c| c.body["reason"].as_str().map(str::to_owned))
        .collect()
}

fn status_of(calls: &[api::Call]) -> serde_json::Value {
    calls
        .iter()
        .rfind(|c| c.path.ends_with("/status"))
        .map(|c| c.body["status"].clone())
        .unwrap()
}

/// A user whose authentication type needs no Secret loses its own, named by uid and version
/// (a Secret replaced meanwhile is not deleted unseen), with an event; a Secret of its name
/// that it does not own stays.
#[tokio::test]
async fn a_user_without_a_secret_type_loses_its_own_secret_and_no_one_elses() {
    for (owned, authentication) in [
        (true, json!({"type": "tls-external"})),
        (true, json!(null)),
        (false, json!({"type": "tls-external"})),
    ] {
        let mut spec = json!({"clusterRef": "kc"});
        if !authentication.is_null() {
            spec["authentication"] = authentication.clone();
        }
        let bob = user("bob", spec);
        let mut secret = user_secret(&bob, "kc", "pw").unwrap();
        secret.metadata.uid = Some("secret-uid".into());
        secret.metadata.resource_version = Some("7".into());
        if !owned {
            secret.metadata.owner_references = None;
        }
        let calls = api::reconcile_with(bob, vec![secret]).await;
        let deletes: Vec<&api::Call> = calls
            .iter()
            .filter(|c| c.method == http::Method::DELETE)
            .collect();
        let case = format!("owned {owned}, authentication {authentication}");
        if owned {
            assert_eq!(deletes.len(), 1, "{case}: {calls:?}");
            assert!(
                deletes[0].path.ends_with("/namespaces/ns/secrets/bob"),
                "{case}"
            );
            assert_eq!(
                deletes[0].body["preconditions"],
                json!({"uid": "secret-uid", "resourceVersion": "7"}),
                "{case}"
            );
            assert!(
                events_of(&calls).contains(&"SecretDeleted".to_owned()),
                "{case}"
            );
        } else {
            assert!(deletes.is_empty(), "{case}: {calls:?}");
            assert!(
                !events_of(&calls).contains(&"SecretDeleted".to_owned()),
                "{case}"
            );
        }
        assert!(
            calls
                .iter()
                .all(|c| !(c.path.contains("/secrets") && c.method == http::Method::PATCH)),
            "{case}: no Secret written"
        );
        let status = status_of(&calls);
        assert_eq!(status.get("secret"), None, "{case}: {status}");
    }
}

/// A SCRAM user whose Secret still holds a certificate (it was `tls`): one merge patch sets
/// the password and removes the certificate's keys and annotations.
#[tokio::test]
async fn a_user_switched_to_scram_has_its_certificate_keys_removed_in_one_patch() {
    let alice = scram_user();
    let (ca, cert, expiry) = issued("alice");
    let mut live = certificate_secret(&alice, "kc", &ca.cert, &cert, expiry).unwrap();
    live.metadata.resource_version = Some("3".into());
    let calls = api::reconcile_with(alice, vec![live]).await;
    let patches: Vec<&api::Call> = calls
        .iter()
        .filter(|c| c.path.contains("/secrets/") && c.method == http::Method::PATCH)
        .collect();
    assert_eq!(patches.len(), 1, "{calls:?}");
    let patch = patches[0];
    assert_eq!(patch.content_type, "application/merge-patch+json");
    assert_eq!(patch.body["metadata"]["resourceVersion"], "3");
    for key in TLS_KEYS {
        assert!(patch.body["data"][key].is_null(), "{key}: {}", patch.body);
    }
    for key in SCRAM_KEYS {
        assert!(patch.body["data"][key].is_string(), "{key}: {}", patch.body);
    }
    assert!(events_of(&calls).contains(&"SecretUpdated".to_owned()));
    assert_eq!(status_of(&calls)["secret"], "alice");
}
