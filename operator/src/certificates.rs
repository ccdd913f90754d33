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
//! How each CA is kept is the cluster's `clusterCa`/`clientsCa` ([`CertificateAuthority`]):
//! generated (the default) and renewed `renewalDays` before it expires, or when its Secret is
//! annotated [`FORCE_RENEW_ANNOTATION`] — a new certificate for the same key and subject, so
//! what it signed before still chains to it and clients that trust the old certificate keep
//! working — or provided by the user (Strimzi's Secrets: `ca.crt` in the `-cert` one, `ca.key`
//! in the other), which the operator only reads.
//!
//! A certificate a CA signs lives [`LEAF_VALIDITY`] at most and never past the CA's expiry. It
//! is issued again, under the same Secret name, when its renewal time comes ([`RENEW_BEFORE`]
//! before its expiry, halfway for a shorter one), the CA changed, or (a listener's) the names
//! it must carry changed; brokers read the mounted files again when the kubelet updates them,
//! so a renewal restarts none.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kaas_shared::crd::KafkaCluster;
use kaas_shared::crd::cluster::CertificateAuthority;
use kube::{Client, ResourceExt};
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, PublicKeyData, SerialNumber,
};
use time::OffsetDateTime;
use tracing::{info, warn};

use crate::resources::{self, Names};
use crate::{Error, FIELD_MANAGER, Result};

/// How long a listener or user certificate is valid at most (never past its CA's expiry).
pub const LEAF_VALIDITY: Duration = Duration::from_secs(365 * 24 * 3600);
/// A listener or user certificate is issued again this long before it expires (halfway
/// through its life if that is shorter).
pub const RENEW_BEFORE: time::Duration = time::Duration::days(30);

/// The annotation that holds a listener or user certificate's expiry (Unix seconds).
pub const NOT_AFTER_ANNOTATION: &str = "kaas.dev/not-after";
/// The annotation that holds when a listener or user certificate is issued again (Unix
/// seconds).
pub const RENEW_AT_ANNOTATION: &str = "kaas.dev/renew-at";
/// The annotation that holds the names a listener certificate carries.
pub const NAMES_ANNOTATION: &str = "kaas.dev/names";
/// The annotation on a generated CA's Secret that asks for its renewal now (Strimzi's
/// `force-renew`); the operator removes it once the CA is renewed.
pub const FORCE_RENEW_ANNOTATION: &str = "kaas.dev/force-renew";

/// Why a certificate could not be made.
#[derive(Debug, thiserror::Error)]
pub enum CertificateError {
    /// rcgen refused (or a stored key or certificate did not parse).
    #[error("cannot issue the {what}: {source}")]
    Issue {
        what: &'static str,
        #[source]
        source: rcgen::Error,
    },
    /// A CA the user provides (`generateCertificateAuthority: false`) is not there yet.
    #[error("the {what} is provided by the user (generateCertificateAuthority: false), but Secret {secret:?} has no {key:?}")]
    NotProvided {
        what: &'static str,
        secret: String,
        key: &'static str,
    },
    /// A CA's Secrets hold something the operator cannot sign with.
    #[error("the {what} in Secrets {secrets:?} cannot sign: {problem}")]
    Unusable {
        what: &'static str,
        secrets: String,
        problem: String,
    },
}

impl CertificateError {
    /// The condition and event reason.
    pub fn reason(&self) -> &'static str {
        match self {
            CertificateError::Issue { .. } => "CertificateError",
            CertificateError::NotProvided { .. } => "CertificateAuthorityNotFound",
            CertificateError::Unusable { .. } => "CertificateAuthorityInvalid",
        }
    }
}

fn failed(what: &'static str) -> impl FnOnce(rcgen::Error) -> CertificateError {
    move |source| CertificateError::Issue { what, source }
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

    /// How the cluster `kc` keeps this CA (its spec, or the defaults).
    pub fn policy(self, kc: &KafkaCluster) -> CertificateAuthority {
        match self {
            Ca::Cluster => kc.spec.cluster_ca.clone(),
            Ca::Clients => kc.spec.clients_ca.clone(),
        }
        .unwrap_or_default()
    }
}

/// A CA ready to sign: its certificate and key (checked to belong together) and its expiry.
#[derive(Debug, Clone, PartialEq)]
pub struct SigningCa {
    pub pem: Pem,
    pub not_after: OffsetDateTime,
}

impl SigningCa {
    /// The CA of certificate `cert` and key `key` (PEM; the first certificate of a chain is
    /// the signing one), or what is wrong with them.
    pub fn parse(cert: &str, key: &str) -> Result<Self, String> {
        let (_, pem) = x509_parser::pem::parse_x509_pem(cert.as_bytes())
            .map_err(|e| format!("ca.crt is not a PEM certificate: {e}"))?;
        let parsed = pem
            .parse_x509()
            .map_err(|e| format!("ca.crt does not parse: {e}"))?;
        let key_pair =
            KeyPair::from_pem(key).map_err(|e| format!("ca.key is not a usable private key: {e}"))?;
        if key_pair.subject_public_key_info() != parsed.public_key().raw {
            return Err("ca.key is not the key of the certificate in ca.crt".into());
        }
        if !parsed.is_ca() {
            return Err("ca.crt is not a CA certificate (basicConstraints CA:TRUE)".into());
        }
        let not_after = parsed.validity().not_after.to_datetime();
        Ok(Self {
            pem: Pem {
                cert: cert.to_owned(),
                key: key.to_owned(),
            },
            not_after,
        })
    }

    /// The CA as rcgen signs with it: its own subject and key identifier, from its certificate.
    fn issuer(&self) -> Result<Issuer<'static, KeyPair>, CertificateError> {
        let key = KeyPair::from_pem(&self.pem.key).map_err(failed("stored CA key"))?;
        Issuer::from_ca_cert_pem(&self.pem.cert, key).map_err(failed("stored CA certificate"))
    }

    /// When a certificate it signs at `now` expires: [`LEAF_VALIDITY`] later, or with the CA.
    fn leaf_not_after(&self, now: OffsetDateTime) -> OffsetDateTime {
        (now + LEAF_VALIDITY).min(self.not_after)
    }
}

/// When a signed certificate expires, and when it is issued again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expiry {
    pub not_after: OffsetDateTime,
    pub renew_at: OffsetDateTime,
}

impl Expiry {
    /// A certificate issued at `now` until `not_after`: renewed [`RENEW_BEFORE`] before that,
    /// or halfway for one that lives less than twice as long (a CA about to be renewed).
    pub fn of(now: OffsetDateTime, not_after: OffsetDateTime) -> Self {
        let ahead: time::Duration = (not_after - now).max(time::Duration::ZERO) / 2;
        Self {
            not_after,
            renew_at: not_after - ahead.min(RENEW_BEFORE),
        }
    }

    fn annotations(self) -> BTreeMap<String, String> {
        BTreeMap::from([
            (
                NOT_AFTER_ANNOTATION.to_string(),
                self.not_after.unix_timestamp().to_string(),
            ),
            (
                RENEW_AT_ANNOTATION.to_string(),
                self.renew_at.unix_timestamp().to_string(),
            ),
        ])
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

/// A certificate's parameters: `sans`, `subject`, valid from an hour ago (clock skew) until
/// `not_after`, with a random serial number (rcgen's default derives it from the key, which a
/// renewed CA keeps, and two certificates of one issuer must not share a serial).
fn params(
    what: &'static str,
    sans: Vec<String>,
    subject: DistinguishedName,
    not_after: OffsetDateTime,
    now: OffsetDateTime,
) -> Result<CertificateParams, CertificateError> {
    let mut params = CertificateParams::new(sans).map_err(failed(what))?;
    params.distinguished_name = subject;
    params.not_before = now - time::Duration::hours(1);
    params.not_after = not_after;
    let mut serial = kaas_shared::scram::random_bytes::<16>();
    // Positive, and never zero.
    serial[0] = (serial[0] & 0x7f) | 0x01;
    params.serial_number = Some(SerialNumber::from_slice(&serial));
    Ok(params)
}

/// A generated CA's certificate for `key`, valid `validity_days` from `now`: the same subject
/// each time, so a renewed certificate (same key) is the issuer of what the old one signed.
fn ca_certificate(
    ca: Ca,
    names: &Names,
    key: &KeyPair,
    validity_days: u32,
    now: OffsetDateTime,
) -> Result<String, CertificateError> {
    let common_name = format!("{} {}/{}", ca.id(), names.namespace, names.cluster);
    let subject = kaas_subject(common_name);
    let not_after = now + time::Duration::days(i64::from(validity_days));
    let mut params = params(ca.what(), Vec::new(), subject, not_after, now)?;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let cert = params.self_signed(key).map_err(failed(ca.what()))?;
    Ok(cert.pem())
}

/// A new self-signed CA with a new key, valid `validity_days`.
pub fn issue_ca(
    ca: Ca,
    names: &Names,
    validity_days: u32,
    now: OffsetDateTime,
) -> Result<Pem, CertificateError> {
    let key = KeyPair::generate().map_err(failed("CA key"))?;
    Ok(Pem {
        cert: ca_certificate(ca, names, &key, validity_days, now)?,
        key: key.serialize_pem(),
    })
}

/// The generated CA `stored` renewed: a new certificate for the same key, valid
/// `validity_days` from `now`.
pub fn renew_ca(
    ca: Ca,
    names: &Names,
    stored: &Pem,
    validity_days: u32,
    now: OffsetDateTime,
) -> Result<Pem, CertificateError> {
    let key = KeyPair::from_pem(&stored.key).map_err(failed("stored CA key"))?;
    Ok(Pem {
        cert: ca_certificate(ca, names, &key, validity_days, now)?,
        key: stored.key.clone(),
    })
}

/// A listener certificate for `dns_names`, signed by `ca`; when it expires and is renewed.
pub fn issue_listener(
    names: &Names,
    ca: &SigningCa,
    dns_names: &[String],
    now: OffsetDateTime,
) -> Result<(Pem, Expiry), CertificateError> {
    let issuer = ca.issuer()?;
    let key = KeyPair::generate().map_err(failed("listener key"))?;
    let common_name = format!("{}-bootstrap.{}.svc", names.cluster, names.namespace);
    let subject = kaas_subject(common_name);
    let not_after = ca.leaf_not_after(now);
    let mut params = params("listener", dns_names.to_vec(), subject, not_after, now)?;
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
    Ok((pem, Expiry::of(now, not_after)))
}

/// A client certificate for the KafkaUser `user_name`, signed by the clients CA `ca`; when it
/// expires and is renewed. Its subject is exactly `CN=<user_name>`: the broker's principal is
/// the whole subject (RFC 2253), which must be the user's name to Kafka.
pub fn issue_user(
    ca: &SigningCa,
    user_name: &str,
    now: OffsetDateTime,
) -> Result<(Pem, Expiry), CertificateError> {
    let issuer = ca.issuer()?;
    let key = KeyPair::generate().map_err(failed("user key"))?;
    let mut subject = DistinguishedName::new();
    subject.push(DnType::CommonName, user_name);
    let not_after = ca.leaf_not_after(now);
    let mut params = params("user certificate", Vec::new(), subject, not_after, now)?;
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
    Ok((pem, Expiry::of(now, not_after)))
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
/// must: its renewal time has come, or no expiry is recorded. (A Secret written before renewal
/// times were recorded is renewed [`RENEW_BEFORE`] before its expiry.)
pub fn expiry_reason(
    annotations: &BTreeMap<String, String>,
    now: OffsetDateTime,
) -> Option<&'static str> {
    let time = |key: &str| {
        annotations
            .get(key)
            .and_then(|s| s.parse::<i64>().ok())
            .and_then(|secs| OffsetDateTime::from_unix_timestamp(secs).ok())
    };
    let renew_at = time(RENEW_AT_ANNOTATION).or_else(|| {
        time(NOT_AFTER_ANNOTATION).map(|not_after| not_after - RENEW_BEFORE)
    });
    match renew_at {
        Some(renew_at) if now < renew_at => None,
        Some(_) => Some("the certificate is due for renewal"),
        None => Some("the certificate's expiry is unknown"),
    }
}

/// The annotations a user certificate's Secret carries: its expiry and renewal time.
pub fn user_annotations(expiry: Expiry) -> BTreeMap<String, String> {
    expiry.annotations()
}

/// The annotations a listener certificate's Secret carries: its expiry, renewal time and names.
pub fn listener_annotations(dns_names: &[String], expiry: Expiry) -> BTreeMap<String, String> {
    let mut annotations = expiry.annotations();
    annotations.insert(NAMES_ANNOTATION.to_string(), dns_names.join(","));
    annotations
}

/// Makes sure the cluster CA and a current listener certificate exist in their Secrets, and
/// the clients CA when `clients_ca` (the listener authenticates clients by certificate); says
/// why the listener certificate was issued, if it was.
pub async fn ensure(
    client: &Client,
    kc: &KafkaCluster,
    names: &Names,
    clients_ca: bool,
    external_hosts: &[String],
) -> Result<Option<&'static str>> {
    let api: Api<Secret> = Api::namespaced(client.clone(), &names.namespace);
    let now = OffsetDateTime::now_utc();
    let ca = ensure_ca(&api, kc, names, Ca::Cluster, now).await?;
    if clients_ca {
        ensure_ca(&api, kc, names, Ca::Clients, now).await?;
    }

    // The external listener's hosts (node addresses, load balancers, overrides) too: a new one
    // re-issues the certificate, which brokers load without a restart.
    let mut dns_names = listener_names(names);
    dns_names.extend(external_hosts.iter().filter(|h| !dns_names.contains(h)).cloned().collect::<Vec<_>>());
    let listener = api.get_opt(&listener_secret_name(names)).await?;
    let reason = held_reason(listener.as_ref(), &ca.pem.cert, &LISTENER_HELD).or_else(|| {
        let annotations = listener.as_ref().and_then(|s| s.metadata.annotations.as_ref());
        renewal_reason(annotations, &dns_names, now)
    });
    if reason.is_some() {
        let (leaf, expiry) = issue_listener(names, &ca, &dns_names, now)?;
        let data = [
            ("tls.crt", &leaf.cert),
            ("tls.key", &leaf.key),
            ("ca.crt", &ca.pem.cert),
        ];
        let annotations = listener_annotations(&dns_names, expiry);
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

/// A cluster's CA as read from its two Secrets.
#[derive(Debug)]
pub enum LoadedCa {
    /// Ready to sign.
    Ready(SigningCa),
    /// The first part of it that is not there yet: a Secret and its key.
    Missing { secret: String, key: &'static str },
}

/// Reads the CA `ca` of a cluster to sign with: its certificate from the `-cert` Secret (what
/// clients and brokers trust), its key from the other; an error when they do not make a CA.
pub async fn load_ca(api: &Api<Secret>, names: &Names, ca: Ca) -> Result<LoadedCa> {
    let (key_secret, cert_secret) = (ca.secret_name(names), ca.cert_secret_name(names));
    let read = async |secret: &String, key| {
        let text = api.get_opt(secret).await?.as_ref().and_then(|s| text_in(s, key));
        Ok::<_, Error>(text)
    };
    let Some(cert) = read(&cert_secret, "ca.crt").await? else {
        return Ok(LoadedCa::Missing { secret: cert_secret, key: "ca.crt" });
    };
    let Some(key) = read(&key_secret, "ca.key").await? else {
        return Ok(LoadedCa::Missing { secret: key_secret, key: "ca.key" });
    };
    SigningCa::parse(&cert, &key)
        .map(LoadedCa::Ready)
        .map_err(|problem| unusable(ca, format!("{cert_secret}, {key_secret}"), problem))
}

fn unusable(ca: Ca, secrets: String, problem: String) -> Error {
    Error::Certificate(CertificateError::Unusable {
        what: ca.what(),
        secrets,
        problem,
    })
}

/// Makes sure `ca` can sign, as its policy says: a generated CA is created once (kept while its
/// Secret holds a certificate and key), renewed when due or asked to, and its certificate
/// published alone in the `-cert` Secret; a provided one is read and checked.
async fn ensure_ca(
    api: &Api<Secret>,
    kc: &KafkaCluster,
    names: &Names,
    ca: Ca,
    now: OffsetDateTime,
) -> Result<SigningCa> {
    let policy = ca.policy(kc);
    if !policy.generate_certificate_authority {
        return provided_ca(api, names, ca, now).await;
    }
    let secret = ca.secret_name(names);
    let stored = api.get_opt(&secret).await?;
    let forced = stored
        .as_ref()
        .is_some_and(|s| s.annotations().contains_key(FORCE_RENEW_ANNOTATION));
    let renew_before = time::Duration::days(i64::from(policy.renewal_days));
    let (pem, why) = match stored.as_ref().and_then(|s| pem_in(s, "ca.crt", "ca.key")) {
        None => (issue_ca(ca, names, policy.validity_days, now)?, "created"),
        Some(kept) => match SigningCa::parse(&kept.cert, &kept.key) {
            Ok(signing) if !forced && signing.not_after - now > renew_before => {
                publish_ca(api, kc, names, ca, &signing.pem.cert).await?;
                return Ok(signing);
            }
            Ok(_) => {
                let why = if forced {
                    "renewed: its Secret is annotated kaas.dev/force-renew"
                } else {
                    "renewed: it expires within renewalDays"
                };
                (renew_ca(ca, names, &kept, policy.validity_days, now)?, why)
            }
            // A certificate or key that does not parse cannot be renewed: a new CA.
            Err(_) => (
                issue_ca(ca, names, policy.validity_days, now)?,
                "created again: its stored certificate or key does not parse",
            ),
        },
    };
    let data = [("ca.crt", &pem.cert), ("ca.key", &pem.key)];
    apply(api, kc, names, &secret, "Opaque", &data, None).await?;
    if forced {
        let unannotate = json!({"metadata": {"annotations": {FORCE_RENEW_ANNOTATION: null}}});
        api.patch(&secret, &PatchParams::default(), &Patch::Merge(&unannotate))
            .await?;
    }
    info!(%secret, "{} {why}", ca.what());
    publish_ca(api, kc, names, ca, &pem.cert).await?;
    SigningCa::parse(&pem.cert, &pem.key).map_err(|problem| unusable(ca, secret, problem))
}

/// Publishes a generated CA's certificate alone in its `-cert` Secret, if it is not there.
async fn publish_ca(
    api: &Api<Secret>,
    kc: &KafkaCluster,
    names: &Names,
    ca: Ca,
    cert: &String,
) -> Result<()> {
    let name = ca.cert_secret_name(names);
    let published = api.get_opt(&name).await?;
    if published.as_ref().and_then(|s| text_in(s, "ca.crt")).as_ref() != Some(cert) {
        apply(api, kc, names, &name, "Opaque", &[("ca.crt", cert)], None).await?;
    }
    Ok(())
}

/// A CA the user provides: read, never written; one that expires soon is logged (renewing it
/// is the user's).
async fn provided_ca(
    api: &Api<Secret>,
    names: &Names,
    ca: Ca,
    now: OffsetDateTime,
) -> Result<SigningCa> {
    let signing = match load_ca(api, names, ca).await? {
        LoadedCa::Ready(signing) => signing,
        LoadedCa::Missing { secret, key } => {
            return Err(Error::Certificate(CertificateError::NotProvided {
                what: ca.what(),
                secret,
                key,
            }));
        }
    };
    if signing.not_after - now <= RENEW_BEFORE {
        warn!(secret = %ca.cert_secret_name(names), not_after = %signing.not_after, "the user-provided {} expires within 30 days: renew it", ca.what());
    }
    Ok(signing)
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
mod tests;
