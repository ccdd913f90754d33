//! Certificates the operator issues for a cluster whose listener asks for TLS without naming a
//! Secret (`listener.tls: {}`), as Strimzi's cluster and clients CAs do: a self-signed cluster
//! CA, and a listener certificate it signs for the names clients connect to; and, when the
//! listener also authenticates clients by certificate (`authentication: {type: tls}`), a
//! self-signed clients CA, which signs the certificates of KafkaUsers of type `tls` (issued by
//! the volume agent, [`crate::user`]) and which the brokers trust for client certificates.
//!
//! Secrets owned by the KafkaCluster (deleted with it):
//! - `<cluster>-cluster-ca`: the CA's `ca.crt` and `ca.key` (only the operator reads it);
//! - `<cluster>-cluster-ca-cert`: `ca.crt` alone, what clients trust (grant them this one);
//! - `<cluster>-listener-tls`: `tls.crt`, `tls.key` and `ca.crt`, mounted by the brokers;
//! - `<cluster>-clients-ca` and `<cluster>-clients-ca-cert`: the same for the clients CA
//!   (the brokers mount the second as their truststore).
//!
//! The listener certificate is issued again, by the same CA and under the same Secret name,
//! when fewer than [`RENEW_BEFORE`] of its life remain or the names it must carry change;
//! brokers read the mounted files again when the kubelet updates them, so a renewal restarts
//! none. The CAs live [`CA_VALIDITY`] and are not renewed by the operator yet.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kaas_shared::crd::KafkaCluster;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use time::OffsetDateTime;
use tracing::info;

use crate::resources::{self, Names};
use crate::{Error, FIELD_MANAGER, Result};

/// How long a CA is valid.
pub const CA_VALIDITY: Duration = Duration::from_secs(5 * 365 * 24 * 3600);
/// How long a listener or user certificate is valid.
pub const LEAF_VALIDITY: Duration = Duration::from_secs(365 * 24 * 3600);
/// A listener or user certificate with less than this left is issued again.
pub const RENEW_BEFORE: Duration = Duration::from_secs(30 * 24 * 3600);

/// The annotation that holds a listener or user certificate's expiry (Unix seconds).
pub const NOT_AFTER_ANNOTATION: &str = "kaas.dev/not-after";
/// The annotation that holds the names a listener certificate carries.
pub const NAMES_ANNOTATION: &str = "kaas.dev/names";

/// Why a certificate could not be made (an rcgen refusal, or a stored key that does not parse).
#[derive(Debug, thiserror::Error)]
#[error("cannot issue the {what}: {source}")]
pub struct CertificateError {
    what: &'static str,
    #[source]
    source: rcgen::Error,
}

fn failed(what: &'static str) -> impl FnOnce(rcgen::Error) -> CertificateError {
    move |source| CertificateError { what, source }
}

/// One of the CAs the operator keeps for a cluster; they differ only in names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ca {
    /// Signs the listener certificate; clients trust it.
    Cluster,
    /// Signs the certificates of KafkaUsers of type `tls`; the brokers trust it.
    Clients,
}

impl Ca {
    /// `cluster-ca` or `clients-ca`: the Secrets' suffix and the subject's prefix.
    fn id(self) -> &'static str {
        match self {
            Ca::Cluster => "cluster-ca",
            Ca::Clients => "clients-ca",
        }
    }

    fn what(self) -> &'static str {
        match self {
            Ca::Cluster => "cluster CA",
            Ca::Clients => "clients CA",
        }
    }

    /// The Secret the CA and its key are kept in (only the operator reads it).
    pub fn secret_name(self, names: &Names) -> String {
        format!("{}-{}", names.cluster, self.id())
    }

    /// The Secret with the CA certificate alone (`ca.crt`).
    pub fn cert_secret_name(self, names: &Names) -> String {
        format!("{}-{}-cert", names.cluster, self.id())
    }
}

/// The Secret the brokers mount when the listener's TLS names none.
pub fn listener_secret_name(names: &Names) -> String {
    format!("{}-listener-tls", names.cluster)
}

/// The DNS names the listener certificate carries: every broker's pod DNS name (through the
/// headless Service) and the bootstrap Service, short and fully qualified.
pub fn listener_names(names: &Names) -> Vec<String> {
    let (cluster, ns) = (&names.cluster, &names.namespace);
    let mut out = Vec::new();
    for service in [
        format!("{cluster}-bootstrap"),
        format!("*.{cluster}-brokers"),
    ] {
        out.push(format!("{service}.{ns}.svc"));
        out.push(format!("{service}.{ns}.svc.cluster.local"));
    }
    out.push(format!("{cluster}-bootstrap.{ns}"));
    out.push(format!("{cluster}-bootstrap"));
    out
}

/// A certificate and its key, in PEM.
#[derive(Debug, Clone, PartialEq)]
pub struct Pem {
    pub cert: String,
    pub key: String,
}

/// The subject `O=kaas, CN=<common_name>` of the operator's CAs and listener certificates.
fn kaas_subject(common_name: String) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, "kaas");
    dn.push(DnType::CommonName, common_name);
    dn
}

/// A certificate's parameters: `sans`, `subject`, valid from an hour ago (clock skew) for
/// `validity`.
fn params(
    what: &'static str,
    sans: Vec<String>,
    subject: DistinguishedName,
    validity: Duration,
    now: OffsetDateTime,
) -> Result<CertificateParams, CertificateError> {
    let mut params = CertificateParams::new(sans).map_err(failed(what))?;
    params.distinguished_name = subject;
    params.not_before = now - time::Duration::hours(1);
    params.not_after = now + validity;
    Ok(params)
}

/// The CA's, the same subject each time it is rebuilt to sign (so its certificates chain to
/// the one stored).
fn ca_params(
    ca: Ca,
    names: &Names,
    now: OffsetDateTime,
) -> Result<CertificateParams, CertificateError> {
    let common_name = format!("{} {}/{}", ca.id(), names.namespace, names.cluster);
    let subject = kaas_subject(common_name);
    let mut params = params(ca.what(), Vec::new(), subject, CA_VALIDITY, now)?;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    Ok(params)
}

/// A new self-signed CA.
pub fn issue_ca(ca: Ca, names: &Names, now: OffsetDateTime) -> Result<Pem, CertificateError> {
    let key = KeyPair::generate().map_err(failed("CA key"))?;
    let cert = ca_params(ca, names, now)?
        .self_signed(&key)
        .map_err(failed(ca.what()))?;
    Ok(Pem {
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}

/// The CA whose key is `ca_key` (PEM, as stored), rebuilt to sign: the same subject as the
/// stored certificate, so what it signs chains to that one.
fn issuer(
    ca: Ca,
    names: &Names,
    ca_key: &str,
    now: OffsetDateTime,
) -> Result<Issuer<'static, KeyPair>, CertificateError> {
    let key = KeyPair::from_pem(ca_key).map_err(failed("stored CA key"))?;
    Ok(Issuer::new(ca_params(ca, names, now)?, key))
}

/// A listener certificate for `dns_names`, signed by the CA whose key is `ca_key`; its expiry.
pub fn issue_listener(
    names: &Names,
    ca_key: &str,
    dns_names: &[String],
    now: OffsetDateTime,
) -> Result<(Pem, OffsetDateTime), CertificateError> {
    let issuer = issuer(Ca::Cluster, names, ca_key, now)?;
    let key = KeyPair::generate().map_err(failed("listener key"))?;
    let common_name = format!("{}-bootstrap.{}.svc", names.cluster, names.namespace);
    let subject = kaas_subject(common_name);
    let mut params = params("listener", dns_names.to_vec(), subject, LEAF_VALIDITY, now)?;
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let cert = params
        .signed_by(&key, &issuer)
        .map_err(failed("listener"))?;
    let pem = Pem {
        cert: cert.pem(),
        key: key.serialize_pem(),
    };
    Ok((pem, params.not_after))
}

/// A client certificate for the KafkaUser `user_name`, signed by the clients CA whose key is
/// `ca_key`; its expiry. Its subject is exactly `CN=<user_name>`: the broker's principal is
/// the whole subject (RFC 2253), which must be the user's name to Kafka.
pub fn issue_user(
    names: &Names,
    ca_key: &str,
    user_name: &str,
    now: OffsetDateTime,
) -> Result<(Pem, OffsetDateTime), CertificateError> {
    let issuer = issuer(Ca::Clients, names, ca_key, now)?;
    let key = KeyPair::generate().map_err(failed("user key"))?;
    let mut subject = DistinguishedName::new();
    subject.push(DnType::CommonName, user_name);
    let mut params = params("user certificate", Vec::new(), subject, LEAF_VALIDITY, now)?;
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let cert = params
        .signed_by(&key, &issuer)
        .map_err(failed("user certificate"))?;
    let pem = Pem {
        cert: cert.pem(),
        // PKCS#8 (`BEGIN PRIVATE KEY`), as Strimzi's `user.key`.
        key: key.serialize_pem(),
    };
    Ok((pem, params.not_after))
}

/// A Secret an issued certificate is kept in: the keys of the certificate and its key, and how
/// each reason to issue it again is said.
#[derive(Debug, Clone, Copy)]
pub struct Held {
    pub cert_key: &'static str,
    pub key_key: &'static str,
    pub missing: &'static str,
    pub ca_changed: &'static str,
    pub lost: &'static str,
}

/// The listener certificate's Secret.
pub const LISTENER_HELD: Held = Held {
    cert_key: "tls.crt",
    key_key: "tls.key",
    missing: "no listener certificate yet",
    ca_changed: "the cluster CA changed",
    lost: "the listener Secret lost its certificate",
};

/// Why the certificate in `own` must be issued again whatever its expiry, if it must: no
/// Secret, another CA than `ca_cert` (its `ca.crt`), or the certificate or key gone.
pub fn held_reason(own: Option<&Secret>, ca_cert: &str, held: &Held) -> Option<&'static str> {
    let Some(own) = own else {
        return Some(held.missing);
    };
    if text_in(own, "ca.crt").as_deref() != Some(ca_cert) {
        return Some(held.ca_changed);
    }
    if pem_in(own, held.cert_key, held.key_key).is_none() {
        return Some(held.lost);
    }
    None
}

/// Why the listener certificate whose Secret has `annotations` must be issued again, if it
/// must: missing, naming other names, or within [`RENEW_BEFORE`] of its expiry.
pub fn renewal_reason(
    annotations: Option<&BTreeMap<String, String>>,
    dns_names: &[String],
    now: OffsetDateTime,
) -> Option<&'static str> {
    let Some(annotations) = annotations else {
        return Some("no listener certificate yet");
    };
    if annotations.get(NAMES_ANNOTATION) != Some(&dns_names.join(",")) {
        return Some("the names clients connect to changed");
    }
    expiry_reason(annotations, now)
}

/// Why a certificate whose Secret has `annotations` must be issued again for its expiry, if it
/// must: within [`RENEW_BEFORE`] of it, or no expiry recorded.
pub fn expiry_reason(
    annotations: &BTreeMap<String, String>,
    now: OffsetDateTime,
) -> Option<&'static str> {
    let not_after = annotations
        .get(NOT_AFTER_ANNOTATION)
        .and_then(|s| s.parse::<i64>().ok())
        .and_then(|secs| OffsetDateTime::from_unix_timestamp(secs).ok());
    match not_after {
        Some(not_after) if not_after - now > RENEW_BEFORE => None,
        Some(_) => Some("the certificate expires within 30 days"),
        None => Some("the certificate's expiry is unknown"),
    }
}

/// The annotation a user certificate's Secret carries: its expiry.
pub fn user_annotations(not_after: OffsetDateTime) -> BTreeMap<String, String> {
    BTreeMap::from([(
        NOT_AFTER_ANNOTATION.to_string(),
        not_after.unix_timestamp().to_string(),
    )])
}

/// The annotations a listener certificate's Secret carries.
pub fn listener_annotations(
    dns_names: &[String],
    not_after: OffsetDateTime,
) -> BTreeMap<String, String> {
    BTreeMap::from([
        (
            NOT_AFTER_ANNOTATION.to_string(),
            not_after.unix_timestamp().to_string(),
        ),
        (NAMES_ANNOTATION.to_string(), dns_names.join(",")),
    ])
}

/// Makes sure the cluster CA and a current listener certificate exist in their Secrets, and
/// the clients CA when `clients_ca` (the listener authenticates clients by certificate); says
/// why the listener certificate was issued, if it was.
pub async fn ensure(
    client: &Client,
    kc: &KafkaCluster,
    names: &Names,
    clients_ca: bool,
) -> Result<Option<&'static str>> {
    let api: Api<Secret> = Api::namespaced(client.clone(), &names.namespace);
    let now = OffsetDateTime::now_utc();
    let ca = ensure_ca(&api, kc, names, Ca::Cluster, now).await?;
    if clients_ca {
        ensure_ca(&api, kc, names, Ca::Clients, now).await?;
    }

    let dns_names = listener_names(names);
    let listener = api.get_opt(&listener_secret_name(names)).await?;
    let reason = held_reason(listener.as_ref(), &ca.cert, &LISTENER_HELD).or_else(|| {
        let annotations = listener.as_ref().and_then(|s| s.metadata.annotations.as_ref());
        renewal_reason(annotations, &dns_names, now)
    });
    if reason.is_some() {
        let (leaf, not_after) = issue_listener(names, &ca.key, &dns_names, now)?;
        let data = [
            ("tls.crt", &leaf.cert),
            ("tls.key", &leaf.key),
            ("ca.crt", &ca.cert),
        ];
        let annotations = listener_annotations(&dns_names, not_after);
        let name = listener_secret_name(names);
        apply(
            &api,
            kc,
            names,
            &name,
            "kubernetes.io/tls",
            &data,
            Some(annotations),
        )
        .await?;
    }
    Ok(reason)
}

/// Makes sure `ca` exists: created once (kept while its Secret holds a certificate and key),
/// its certificate published alone in a second Secret.
async fn ensure_ca(
    api: &Api<Secret>,
    kc: &KafkaCluster,
    names: &Names,
    ca: Ca,
    now: OffsetDateTime,
) -> Result<Pem> {
    let stored = api.get_opt(&ca.secret_name(names)).await?;
    let pem = match stored.as_ref().and_then(|s| pem_in(s, "ca.crt", "ca.key")) {
        Some(pem) => pem,
        None => {
            let pem = issue_ca(ca, names, now)?;
            let data = [("ca.crt", &pem.cert), ("ca.key", &pem.key)];
            apply(
                api,
                kc,
                names,
                &ca.secret_name(names),
                "Opaque",
                &data,
                None,
            )
            .await?;
            info!(secret = %ca.secret_name(names), "{} created", ca.what());
            pem
        }
    };
    let published = api.get_opt(&ca.cert_secret_name(names)).await?;
    if published.as_ref().and_then(|s| text_in(s, "ca.crt")) != Some(pem.cert.clone()) {
        let data = [("ca.crt", &pem.cert)];
        let name = ca.cert_secret_name(names);
        apply(api, kc, names, &name, "Opaque", &data, None).await?;
    }
    Ok(pem)
}

/// The text of a Secret's key, if it has it and it is UTF-8.
pub fn text_in(secret: &Secret, key: &str) -> Option<String> {
    let bytes = secret.data.as_ref()?.get(key)?;
    String::from_utf8(bytes.0.clone()).ok()
}

/// The certificate and key of a Secret's keys `cert` and `key`, if it has both.
pub fn pem_in(secret: &Secret, cert: &str, key: &str) -> Option<Pem> {
    Some(Pem {
        cert: text_in(secret, cert)?,
        key: text_in(secret, key)?,
    })
}

async fn apply(
    api: &Api<Secret>,
    kc: &KafkaCluster,
    names: &Names,
    name: &str,
    kind: &str,
    data: &[(&str, &String)],
    annotations: Option<BTreeMap<String, String>>,
) -> Result<()> {
    let mut metadata = resources::meta(kc, names, name, "certificates");
    if let Some(annotations) = annotations {
        metadata["annotations"] = json!(annotations);
    }
    let data: BTreeMap<String, ByteString> = data
        .iter()
        .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
        .collect();
    let secret: Secret = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret", "metadata": metadata, "type": kind, "data": data,
    }))
    .map_err(|source| Error::Serialize {
        what: "certificate Secret",
        source,
    })?;
    api.patch(
        name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&secret),
    )
    .await?;
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
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
        let ca = issue_ca(Ca::Cluster, &names(), now).unwrap();
        // Signed later, by a CA rebuilt from its stored key only.
        let (leaf, not_after) =
            issue_listener(&names(), &ca.key, &listener_names(&names()), now).unwrap();
        assert!(not_after - now > LEAF_VALIDITY - time::Duration::minutes(1));

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
        let clients = issue_ca(Ca::Clients, &names(), now).unwrap();
        let cluster = issue_ca(Ca::Cluster, &names(), now).unwrap();
        // Signed later, by a CA rebuilt from its stored key only.
        let (user, not_after) = issue_user(&names(), &clients.key, "alice", now).unwrap();
        assert!(not_after - now > LEAF_VALIDITY - time::Duration::minutes(1));
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
        let fresh = listener_annotations(&wanted, now + LEAF_VALIDITY);
        assert_eq!(renewal_reason(Some(&fresh), &wanted, now), None);
        // Eleven months later: 30 days or less left.
        let later = now + LEAF_VALIDITY - RENEW_BEFORE + time::Duration::hours(1);
        assert_eq!(
            renewal_reason(Some(&fresh), &wanted, later),
            Some("the certificate expires within 30 days")
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
}
