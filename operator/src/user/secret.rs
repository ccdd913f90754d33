//! A user's Secret (Strimzi's shape): its keys for SCRAM and `tls` users, how it is rendered
//! from the user, and how a live Secret is compared with and patched to the one wanted.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kaas_shared::crd::KafkaUser;
use kube::{Resource, ResourceExt};
use serde_json::json;
use tracing::info;

use super::keystore;
use crate::certificates;
use crate::resources::LABEL_MANAGED_BY;
use crate::{Error, FIELD_MANAGER, Result};

/// The user Secret's key holding the password (Strimzi's).
pub const PASSWORD_KEY: &str = "password";
/// The user Secret's key holding a Java client's `sasl.jaas.config` (Strimzi's).
pub const JAAS_CONFIG_KEY: &str = "sasl.jaas.config";
/// The length of a generated password (alphanumeric: about 190 bits).
pub const PASSWORD_LENGTH: usize = 32;
/// The user Secret's key holding the clients CA's certificate (Strimzi's).
pub const CA_CERT_KEY: &str = "ca.crt";
/// The user Secret's key holding the user's certificate (Strimzi's).
pub const USER_CERT_KEY: &str = "user.crt";
/// The user Secret's key holding the user's private key, PKCS#8 PEM (Strimzi's).
pub const USER_KEY_KEY: &str = "user.key";
/// The user Secret's key holding a PKCS#12 keystore of the user's key and certificate, with the
/// clients CA's, for Java clients (Strimzi's).
pub const KEYSTORE_KEY: &str = "user.p12";
/// The user Secret's key holding the password of [`KEYSTORE_KEY`] (Strimzi's).
pub const KEYSTORE_PASSWORD_KEY: &str = "user.password";
/// The keys of a SCRAM user's Secret.
pub const SCRAM_KEYS: [&str; 2] = [PASSWORD_KEY, JAAS_CONFIG_KEY];
/// The keys of a `tls` user's Secret.
pub const TLS_KEYS: [&str; 5] = [
    CA_CERT_KEY,
    USER_CERT_KEY,
    USER_KEY_KEY,
    KEYSTORE_KEY,
    KEYSTORE_PASSWORD_KEY,
];
/// The annotations of a `tls` user's Secret: its certificate's expiry and renewal time.
pub const CERTIFICATE_ANNOTATIONS: [&str; 2] = [
    certificates::NOT_AFTER_ANNOTATION,
    certificates::RENEW_AT_ANNOTATION,
];
/// Label of a user Secret: its cluster.
pub const LABEL_CLUSTER: &str = "kaas.dev/cluster";
/// Label of a user Secret: its KafkaUser.
pub const LABEL_USER: &str = "kaas.dev/user";

/// A new password: [`PASSWORD_LENGTH`] characters drawn uniformly from `[A-Za-z0-9]`.
pub fn generate_password() -> Result<String> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    // Bytes at or above the largest multiple of the alphabet's size are drawn again, so that
    // every character is equally likely.
    let limit = 256 - 256 % ALPHABET.len();
    let mut password = String::with_capacity(PASSWORD_LENGTH);
    let mut bytes = [0u8; 64];
    while password.len() < PASSWORD_LENGTH {
        getrandom::fill(&mut bytes).map_err(|e| Error::Random(e.to_string()))?;
        for b in bytes.iter().map(|b| usize::from(*b)).filter(|b| *b < limit) {
            if password.len() == PASSWORD_LENGTH {
                break;
            }
            password.push(char::from(ALPHABET[b % ALPHABET.len()]));
        }
    }
    Ok(password)
}

/// A Java client's `sasl.jaas.config` for the user (as Strimzi writes it).
pub fn jaas_config(username: &str, password: &str) -> String {
    // Kafka parses the value with quoted strings in which a backslash escapes.
    let quote = |s: &str| s.replace('\\', "\\\\").replace('"', "\\\"");
    format!(
        "org.apache.kafka.common.security.scram.ScramLoginModule required username=\"{}\" password=\"{}\";",
        quote(username),
        quote(password)
    )
}

/// The Secret a SCRAM user's password is kept in (Strimzi's shape): named after the user, in
/// its namespace, owned by it (deleted with it), with `password` and `sasl.jaas.config`.
pub fn user_secret(user: &KafkaUser, cluster: &str, password: &str) -> Result<Secret> {
    let data = BTreeMap::from([
        (
            PASSWORD_KEY.to_owned(),
            ByteString(password.as_bytes().to_vec()),
        ),
        (
            JAAS_CONFIG_KEY.to_owned(),
            ByteString(jaas_config(&user.username(), password).into_bytes()),
        ),
    ]);
    secret_of(user, cluster, data, None)
}

/// The Secret a `tls` user's certificate is kept in (Strimzi's shape, as the SCRAM one): the
/// clients CA's `ca.crt`, `user.crt`, `user.key`, a new keystore of them `user.p12` with its
/// `user.password`, and the certificate's expiry annotated.
pub fn certificate_secret(
    user: &KafkaUser,
    cluster: &str,
    ca_cert: &str,
    certificate: &certificates::Pem,
    expiry: certificates::Expiry,
) -> Result<Secret> {
    let data = tls_data(&user.name_any(), ca_cert, certificate)?;
    let annotations = certificates::user_annotations(expiry);
    secret_of(user, cluster, data, Some(annotations))
}

/// The Secret of a `tls` user whose certificate is kept: `own`'s (the live Secret's) keys and
/// certificate annotations, with up-to-date labels and owner. The keystore is made only when a
/// certificate is issued, so a Secret written before keystores (no `user.p12` or
/// `user.password`) gets one here, of the certificate it holds, rather than a new certificate.
pub fn kept_certificate_secret(
    user: &KafkaUser,
    cluster: &str,
    own: Option<&Secret>,
) -> Result<Secret> {
    let has = |key: &str| own.is_some_and(|s| s.data.as_ref().is_some_and(|d| d.contains_key(key)));
    let held = own.and_then(|s| {
        let ca_cert = certificates::text_in(s, CA_CERT_KEY)?;
        Some((
            ca_cert,
            certificates::pem_in(s, USER_CERT_KEY, USER_KEY_KEY)?,
        ))
    });
    let data = match held {
        Some((ca_cert, certificate)) if !(has(KEYSTORE_KEY) && has(KEYSTORE_PASSWORD_KEY)) => {
            info!(user = %user.name_any(), "keystore made of the kept certificate");
            tls_data(&user.name_any(), &ca_cert, &certificate)?
        }
        _ => own
            .and_then(|s| s.data.as_ref())
            .into_iter()
            .flatten()
            .filter(|(key, _)| TLS_KEYS.contains(&key.as_str()))
            .map(|(key, value)| (key.clone(), value.clone()))
            .collect(),
    };
    let annotations: BTreeMap<String, String> = own
        .and_then(|s| s.metadata.annotations.as_ref())
        .into_iter()
        .flatten()
        .filter(|(key, _)| CERTIFICATE_ANNOTATIONS.contains(&key.as_str()))
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect();
    let annotations = (!annotations.is_empty()).then_some(annotations);
    secret_of(user, cluster, data, annotations)
}

/// A `tls` user's Secret keys for `certificate`, issued by the clients CA `ca_cert`: Strimzi's
/// `ca.crt`, `user.crt`, `user.key`, and a keystore of them, `user.p12` (the entry named
/// `alias`), under a new password, `user.password`.
fn tls_data(
    alias: &str,
    ca_cert: &str,
    certificate: &certificates::Pem,
) -> Result<BTreeMap<String, ByteString>> {
    let password = generate_password()?;
    let p12 = keystore::pkcs12(alias, certificate, ca_cert, &password)?;
    let text = |s: &str| ByteString(s.as_bytes().to_vec());
    Ok(BTreeMap::from([
        (CA_CERT_KEY.to_owned(), text(ca_cert)),
        (USER_CERT_KEY.to_owned(), text(&certificate.cert)),
        (USER_KEY_KEY.to_owned(), text(&certificate.key)),
        (KEYSTORE_KEY.to_owned(), ByteString(p12)),
        (KEYSTORE_PASSWORD_KEY.to_owned(), text(&password)),
    ]))
}

/// A user Secret: named after the user, in its namespace, owned by it, labelled with its
/// cluster and user.
fn secret_of(
    user: &KafkaUser,
    cluster: &str,
    data: BTreeMap<String, ByteString>,
    annotations: Option<BTreeMap<String, String>>,
) -> Result<Secret> {
    let name = user
        .metadata
        .name
        .clone()
        .ok_or(Error::MissingField("metadata.name"))?;
    let namespace = user
        .metadata
        .namespace
        .clone()
        .ok_or(Error::MissingField("metadata.namespace"))?;
    let mut owner = user
        .controller_owner_ref(&())
        .ok_or(Error::MissingField("metadata.uid"))?;
    // NB: without blockOwnerDeletion, which would need `update` on kafkausers/finalizers where
    // the OwnerReferencesPermissionEnforcement admission plugin runs; garbage collection
    // deletes the Secret either way.
    owner.block_owner_deletion = None;
    let labels = BTreeMap::from([
        (LABEL_MANAGED_BY.to_owned(), FIELD_MANAGER.to_owned()),
        (LABEL_CLUSTER.to_owned(), cluster.to_owned()),
        (LABEL_USER.to_owned(), name.clone()),
    ]);
    Ok(Secret {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some(namespace),
            labels: Some(labels),
            annotations,
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        type_: Some("Opaque".to_owned()),
        data: Some(data),
        ..Secret::default()
    })
}

/// Whether `secret` is the user's (by its owner reference to the user's uid).
pub fn owned_by(secret: &Secret, uid: &str) -> bool {
    secret
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.uid == uid)
}

/// Whether `live` has every entry of `desired`.
fn contains<V: PartialEq>(
    live: Option<&BTreeMap<String, V>>,
    desired: Option<&BTreeMap<String, V>>,
) -> bool {
    desired
        .into_iter()
        .flatten()
        .all(|(k, v)| live.and_then(|l| l.get(k)) == Some(v))
}

/// The keys the operator writes into user Secrets that `live` has and `desired` has not: those
/// of the authentication type the user no longer has. Other keys are not the operator's and
/// stay.
pub fn stale_keys(live: &Secret, desired: &Secret) -> Vec<&'static str> {
    let has = |s: &Secret, key: &str| s.data.as_ref().is_some_and(|d| d.contains_key(key));
    SCRAM_KEYS
        .iter()
        .chain(&TLS_KEYS)
        .copied()
        .filter(|key| has(live, key) && !has(desired, key))
        .collect()
}

/// The annotations the operator writes on user Secrets that `live` has and `desired` has not:
/// a certificate's, on a Secret that holds no certificate any more.
pub fn stale_annotations(live: &Secret, desired: &Secret) -> Vec<&'static str> {
    let has = |s: &Secret, key: &str| {
        s.metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(key))
    };
    CERTIFICATE_ANNOTATIONS
        .into_iter()
        .filter(|key| has(live, key) && !has(desired, key))
        .collect()
}

/// Whether `live` already holds what `desired` says: its keys, labels, annotations and owner,
/// and none of the operator's keys or annotations that `desired` has not.
pub(super) fn secret_current(live: &Secret, desired: &Secret) -> bool {
    stale_keys(live, desired).is_empty()
        && stale_annotations(live, desired).is_empty()
        && contains(live.data.as_ref(), desired.data.as_ref())
        && contains(
            live.metadata.labels.as_ref(),
            desired.metadata.labels.as_ref(),
        )
        && contains(
            live.metadata.annotations.as_ref(),
            desired.metadata.annotations.as_ref(),
        )
        && desired
            .metadata
            .owner_references
            .iter()
            .flatten()
            .all(|o| owned_by(live, &o.uid))
}

/// The JSON merge patch that brings `live` to `desired`: `desired`'s keys, labels and
/// annotations set, and the operator's keys and annotations that `desired` has not removed. A
/// merge patch keeps what it does not name (and server-side apply keeps what another field
/// manager, such as the create, set), so those are named with null.
///
/// `live`'s resourceVersion rides along as a precondition: a Secret changed since it was read
/// (or deleted and made by someone else) is a conflict, retried with a fresh read, rather than
/// overwritten. The owner is `live`'s already (a Secret the user does not own is never
/// written), so the owner references are left as they are.
pub fn secret_patch(live: &Secret, desired: &Secret) -> Result<serde_json::Value> {
    let mut data = serde_json::Map::new();
    for (key, value) in desired.data.iter().flatten() {
        let value = serde_json::to_value(value).map_err(|source| Error::Serialize {
            what: "user Secret patch",
            source,
        })?;
        data.insert(key.clone(), value);
    }
    for key in stale_keys(live, desired) {
        data.insert(key.to_owned(), serde_json::Value::Null);
    }
    let mut annotations = serde_json::Map::new();
    for (key, value) in desired.metadata.annotations.iter().flatten() {
        annotations.insert(key.clone(), value.clone().into());
    }
    for key in stale_annotations(live, desired) {
        annotations.insert(key.to_owned(), serde_json::Value::Null);
    }
    let mut metadata = serde_json::Map::new();
    if let Some(labels) = &desired.metadata.labels {
        metadata.insert("labels".to_owned(), json!(labels));
    }
    if !annotations.is_empty() {
        metadata.insert("annotations".to_owned(), annotations.into());
    }
    if let Some(version) = &live.metadata.resource_version {
        metadata.insert("resourceVersion".to_owned(), version.clone().into());
    }
    Ok(json!({"metadata": metadata, "data": data}))
}

/// The text of a password kept in a Secret key, or why it cannot be one.
pub fn password_text(bytes: &[u8]) -> Result<String, &'static str> {
    match std::str::from_utf8(bytes) {
        Ok("") => Err("is empty"),
        Ok(text) => Ok(text.to_owned()),
        Err(_) => Err("is not UTF-8 text"),
    }
}
