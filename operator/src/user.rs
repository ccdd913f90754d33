//! The KafkaUser reconciler (Strimzi's User Operator), run by a cluster's volume agent: validate
//! the spec, keep a SCRAM user's password, or a `tls` user's certificate (issued from the
//! cluster's clients CA, [`crate::certificates`]), in a Secret named after the user, and set
//! the user's entry — salted credentials, ACLs, quotas — in `__cluster/kafka-users.json`, which the brokers
//! read every second ([`kafka_users`]). Deleted users are not seen here (there is no finalizer);
//! [`crate::sweep`] removes their entries, and their Secrets go with them by garbage collection.
//!
//! The agent may not list or watch Secrets (it reads only those it is named), so a changed
//! password Secret (or a lost user Secret) is picked up by a periodic reconcile, every
//! [`SCRAM_REQUEUE`].

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use kaas_shared::crd::conditions::READY;
use kaas_shared::crd::user::UserAuthenticationType;
use kaas_shared::crd::{KafkaUser, KafkaUserStatus};
use kaas_shared::fs::Fs;
use kaas_shared::kafka_users::{self, AclOperation, AclResourceType, KafkaUserEntry};
use kaas_shared::layout::Layout;
use kaas_shared::scram::ScramHash;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use serde_json::json;
use tracing::{info, warn};

use crate::certificates::{self, Ca, Held};
use crate::conditions::{Cond, RECONCILED, failed, merge};
use crate::resources::{LABEL_MANAGED_BY, Names};
use crate::topic::{AgentContext, is_news};
use crate::{Error, FIELD_MANAGER, Result, events};

/// The metric label of this controller.
pub const CONTROLLER: &str = "kafkauser";

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
/// Label of a user Secret: its cluster.
pub const LABEL_CLUSTER: &str = "kaas.dev/cluster";
/// Label of a user Secret: its KafkaUser.
pub const LABEL_USER: &str = "kaas.dev/user";

/// How often a SCRAM user is reconciled again: the agent cannot watch Secrets, so this is how
/// soon a changed password Secret (or a deleted user Secret) is noticed.
pub const SCRAM_REQUEUE: Duration = Duration::from_secs(60);
/// How soon a `tls` user of a cluster without a clients CA is tried again.
pub const MISSING_CA_REQUEUE: Duration = Duration::from_secs(30);
/// How soon a user whose password Secret is missing is tried again.
pub const MISSING_PASSWORD_REQUEUE: Duration = Duration::from_secs(30);
/// How often any other user is reconciled again (the file is re-driven from the spec).
pub const REQUEUE: Duration = Duration::from_secs(300);

/// The operations Kafka supports on each resource type (Kafka's `AclEntry.supportedOperations`).
pub fn supported_operations(kind: AclResourceType) -> &'static [AclOperation] {
    use AclOperation::*;
    match kind {
        AclResourceType::Topic => &[
            Read,
            Write,
            Create,
            Describe,
            Delete,
            Alter,
            DescribeConfigs,
            AlterConfigs,
            All,
        ],
        AclResourceType::Group => &[Read, Describe, Delete, DescribeConfigs, AlterConfigs, All],
        AclResourceType::Cluster => &[
            Create,
            ClusterAction,
            DescribeConfigs,
            AlterConfigs,
            IdempotentWrite,
            Alter,
            Describe,
            All,
        ],
        AclResourceType::TransactionalId => &[Describe, Write, All],
    }
}

/// A resource type as the KafkaUser spells it.
fn resource_type_name(kind: AclResourceType) -> &'static str {
    match kind {
        AclResourceType::Topic => "topic",
        AclResourceType::Group => "group",
        AclResourceType::TransactionalId => "transactionalId",
        AclResourceType::Cluster => "cluster",
    }
}

fn operation_names<'a>(operations: impl IntoIterator<Item = &'a AclOperation>) -> String {
    operations
        .into_iter()
        .map(|op| format!("{op:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Why a user's spec is refused, if it is: what the CRD's schema cannot say (Kafka's
/// operations per resource type, ACL hosts), in words a user can act on.
pub fn refusal(user: &KafkaUser) -> Option<String> {
    let mut problems = Vec::new();
    for (i, rule) in user
        .spec
        .authorization
        .iter()
        .flat_map(|a| a.acls.iter())
        .enumerate()
    {
        let supported = supported_operations(rule.resource.kind);
        let unsupported: Vec<&AclOperation> = rule
            .operations
            .iter()
            .filter(|op| !supported.contains(op))
            .collect();
        if !unsupported.is_empty() {
            problems.push(format!(
                "authorization.acls[{i}]: Kafka does not support {} on a {} resource (only {})",
                operation_names(unsupported),
                resource_type_name(rule.resource.kind),
                operation_names(supported)
            ));
        }
        if rule.host != "*" && rule.host.parse::<IpAddr>().is_err() {
            problems.push(format!(
                "authorization.acls[{i}]: host {:?} is neither \"*\" nor an IP address",
                rule.host
            ));
        }
    }
    if let Some(source) = password_source(user)
        && source.name == user.name_any()
    {
        problems.push(format!(
            "authentication.password: Secret {:?} is the user's own Secret, which the operator writes; keep the password in another Secret",
            source.name
        ));
    }
    if problems.is_empty() {
        None
    } else {
        Some(problems.join("; "))
    }
}

/// Whether the user authenticates with SCRAM (and so has a password and a Secret).
pub fn is_scram(user: &KafkaUser) -> bool {
    user.spec
        .authentication
        .as_ref()
        .is_some_and(|a| a.kind == UserAuthenticationType::ScramSha512)
}

/// Whether the user authenticates with a certificate the operator issues (and so has a
/// Secret).
pub fn is_tls(user: &KafkaUser) -> bool {
    user.spec
        .authentication
        .as_ref()
        .is_some_and(|a| a.kind == UserAuthenticationType::Tls)
}

fn password_source(user: &KafkaUser) -> Option<&kaas_shared::crd::user::SecretKeyRef> {
    let authentication = user.spec.authentication.as_ref()?;
    Some(&authentication.password.as_ref()?.value_from.secret_key_ref)
}

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
/// clients CA's `ca.crt`, `user.crt`, `user.key`, and the certificate's expiry annotated.
pub fn certificate_secret(
    user: &KafkaUser,
    cluster: &str,
    ca_cert: &str,
    certificate: &certificates::Pem,
    not_after: time::OffsetDateTime,
) -> Result<Secret> {
    let data = [
        (CA_CERT_KEY, ca_cert),
        (USER_CERT_KEY, &certificate.cert),
        (USER_KEY_KEY, &certificate.key),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), ByteString(v.as_bytes().to_vec())))
    .collect();
    let annotations = certificates::user_annotations(not_after);
    secret_of(user, cluster, data, Some(annotations))
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

/// Whether `live` already holds what `desired` says: its keys, labels, annotations and owner.
fn secret_current(live: &Secret, desired: &Secret) -> bool {
    contains(live.data.as_ref(), desired.data.as_ref())
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

/// The text of a password kept in a Secret key, or why it cannot be one.
pub fn password_text(bytes: &[u8]) -> Result<String, &'static str> {
    match std::str::from_utf8(bytes) {
        Ok("") => Err("is empty"),
        Ok(text) => Ok(text.to_owned()),
        Err(_) => Err("is not UTF-8 text"),
    }
}

/// The user's entry in `kafka-users.json`: salted credentials of `password` for both SCRAM
/// mechanisms (a listener may offer either; the salts of `existing` are kept while the password
/// matches), the spec's ACLs and quotas.
pub fn entry(
    user: &KafkaUser,
    uid: &str,
    password: Option<&str>,
    existing: Option<&KafkaUserEntry>,
) -> KafkaUserEntry {
    let scram = password
        .map(|password| {
            [ScramHash::Sha512, ScramHash::Sha256]
                .into_iter()
                .map(|hash| {
                    let current = existing.and_then(|e| e.scram.get(&hash));
                    let credential =
                        kafka_users::scram_credential(current, hash, password.as_bytes());
                    (hash, credential)
                })
                .collect()
        })
        .unwrap_or_default();
    KafkaUserEntry {
        uid: uid.to_owned(),
        revision: 0,
        scram,
        acls: user
            .spec
            .authorization
            .as_ref()
            .map(|a| a.acls.clone())
            .unwrap_or_default(),
        quotas: user.spec.quotas.clone().unwrap_or_default(),
    }
}

/// What setting a user's entry did to the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    /// The file already said so; nothing was written.
    Unchanged,
    /// The user had no entry (or one of an earlier incarnation of its name).
    Created,
    /// The user's entry changed.
    Updated,
}

/// Sets `username`'s entry (built from the entry the file has for it) and removes any other
/// entry of the same user (`uid`): a user whose authentication type changed has a new name to
/// Kafka. Writes the file only if that changed it.
pub fn set_entry(
    fs: &dyn Fs,
    layout: &Layout,
    username: &str,
    uid: &str,
    build: impl FnOnce(Option<&KafkaUserEntry>) -> KafkaUserEntry,
) -> Result<Written> {
    let mut file = kafka_users::read(fs, layout)?;
    let existed = file.users.get(username).is_some_and(|e| e.uid == uid);
    let entry = build(file.users.get(username));
    if !file.set(username, entry) {
        return Ok(Written::Unchanged);
    }
    // The agent may run before any broker made `__cluster`. NB: the new directory's own entry
    // is not synced; after a crash the next reconcile writes the file again.
    let dir = layout.cluster_dir();
    fs.create_dir_all(&dir)
        .map_err(|e| kaas_shared::Error::io("mkdir", &dir, e))?;
    kafka_users::write(fs, layout, &file)?;
    Ok(if existed {
        Written::Updated
    } else {
        Written::Created
    })
}

/// The `Ready=True` message: what the brokers now enforce for the user.
pub fn ready_message(username: &str, entry: &KafkaUserEntry) -> String {
    let authentication = if entry.scram.is_empty() && username.starts_with("CN=") {
        "a client certificate".to_owned()
    } else if entry.scram.is_empty() {
        "no SCRAM credentials".to_owned()
    } else {
        let mechanisms: Vec<&str> = entry.scram.keys().rev().map(|h| h.mechanism()).collect();
        format!("{} credentials", mechanisms.join(" and "))
    };
    format!(
        "user {username:?}: {authentication}, {} ACL rules, {} quotas",
        entry.acls.len(),
        entry.quotas.by_kafka_name().len()
    )
}

/// A user whose password or certificate cannot be had yet: not ready, tried again after
/// `retry`; a Secret of someone else's under the user's name is named nowhere in the status.
async fn credential_missing(
    ctx: &AgentContext,
    user: &KafkaUser,
    base: KafkaUserStatus,
    cond: Cond,
    retry: Duration,
) -> Result<Action> {
    let (base, action) = match cond.reason {
        "SecretConflict" => (
            KafkaUserStatus {
                secret: None,
                ..base
            },
            Action::requeue(SCRAM_REQUEUE),
        ),
        _ => (base, Action::requeue(retry)),
    };
    not_ready(ctx, user, base, cond, action).await
}

async fn patch_status(ctx: &AgentContext, user: &KafkaUser, status: KafkaUserStatus) -> Result<()> {
    if user.status.as_ref() == Some(&status) {
        return Ok(());
    }
    let api: Api<KafkaUser> = Api::namespaced(ctx.client.clone(), &ctx.namespace);
    let patch = json!({"apiVersion": "kaas.dev/v1alpha1", "kind": "KafkaUser", "status": status});
    api.patch_status(
        &user.name_any(),
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&patch),
    )
    .await?;
    Ok(())
}

fn key(user: &KafkaUser) -> String {
    // The backoff is shared with the topic controller: prefixed, as a topic may have a user's name.
    format!(
        "{CONTROLLER}/{}/{}",
        user.metadata.namespace.as_deref().unwrap_or_default(),
        user.name_any()
    )
}

/// Reconciles one KafkaUser of this agent's cluster: counts and times it, and on failure says
/// so in an event and in the `Reconciled` condition.
pub async fn reconcile(user: Arc<KafkaUser>, ctx: Arc<AgentContext>) -> Result<Action> {
    let namespace = user.metadata.namespace.as_deref().unwrap_or_default();
    let _running = ctx.metrics.running(CONTROLLER, namespace, &user.name_any());
    if user.spec.cluster_ref != ctx.cluster {
        return Ok(Action::await_change());
    }
    let started = std::time::Instant::now();
    let result = converge(&user, &ctx).await;
    ctx.metrics.observe(CONTROLLER, started.elapsed(), &result);
    match &result {
        Ok(_) => ctx.backoff.succeeded(&key(&user)),
        // A standby says nothing: not leading is not the user's problem.
        Err(Error::NotLeader) => {}
        Err(e) => {
            events::reconcile_failed(&ctx.recorder, &user.object_ref(&()), e).await;
            let previous = user.status.clone().unwrap_or_default();
            let status = KafkaUserStatus {
                conditions: failed(&previous.conditions, e, user.metadata.generation),
                ..previous
            };
            if let Err(e) = patch_status(&ctx, &user, status).await {
                warn!(error = %e, "cannot write the reconcile error to status");
            }
        }
    }
    result
}

/// Says why the user is not ready: in status, and in a Warning event when that is news.
async fn not_ready(
    ctx: &AgentContext,
    user: &KafkaUser,
    base: KafkaUserStatus,
    cond: Cond,
    action: Action,
) -> Result<Action> {
    let previous = user.status.clone().unwrap_or_default();
    if is_news(&previous.conditions, &cond) {
        let action_name = if cond.reason == "InvalidSpec" {
            "Validate"
        } else {
            "Write"
        };
        events::publish(
            &ctx.recorder,
            &user.object_ref(&()),
            true,
            cond.reason,
            cond.message.clone(),
            action_name,
        )
        .await;
    }
    let generation = user.metadata.generation;
    let status = KafkaUserStatus {
        conditions: merge(
            &previous.conditions,
            &[cond, Cond::new(RECONCILED, true, "Success", "")],
            generation,
            Timestamp::now(),
        ),
        ..base
    };
    patch_status(ctx, user, status).await?;
    Ok(action)
}

/// The password of a SCRAM user, its Secret made or brought up to date; or the condition that
/// says why there is none.
async fn scram_password(
    ctx: &AgentContext,
    user: &KafkaUser,
    uid: &str,
) -> Result<Result<String, Cond>> {
    let name = user.name_any();
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &ctx.namespace);
    let own = secrets.get_opt(&name).await?;
    if let Some(secret) = &own
        && !owned_by(secret, uid)
    {
        return Ok(Err(secret_conflict(&name)));
    }
    let password = match password_source(user) {
        Some(source) => {
            let not_found =
                |what: String| Err(Cond::new(READY, false, "PasswordSecretNotFound", what));
            let Some(secret) = secrets.get_opt(&source.name).await? else {
                return Ok(not_found(format!(
                    "the password Secret {:?} does not exist",
                    source.name
                )));
            };
            let Some(bytes) = secret.data.as_ref().and_then(|d| d.get(&source.key)) else {
                return Ok(not_found(format!(
                    "the password Secret {:?} has no key {:?}",
                    source.name, source.key
                )));
            };
            match password_text(&bytes.0) {
                Ok(password) => password,
                Err(why) => {
                    return Ok(Err(Cond::new(
                        READY,
                        false,
                        "InvalidPassword",
                        format!(
                            "key {:?} of the password Secret {:?} {why}",
                            source.key, source.name
                        ),
                    )));
                }
            }
        }
        // Generated once, then kept: the Secret's password is the user's from then on.
        None => match own
            .as_ref()
            .and_then(|s| s.data.as_ref()?.get(PASSWORD_KEY))
            .and_then(|b| password_text(&b.0).ok())
        {
            Some(password) => password,
            None => generate_password()?,
        },
    };
    let desired = user_secret(user, &ctx.cluster, &password)?;
    write_secret(
        ctx,
        user,
        &secrets,
        own.as_ref(),
        desired,
        "the user's password",
    )
    .await?;
    Ok(Ok(password))
}

/// The condition of a user whose Secret's name is taken by a Secret not its own.
fn secret_conflict(name: &str) -> Cond {
    Cond::new(
        READY,
        false,
        "SecretConflict",
        format!(
            "Secret {name:?} exists and is not this KafkaUser's (it has no owner reference to it), so the operator leaves it alone; delete it, or name the user otherwise"
        ),
    )
}

/// Creates the user's Secret, or brings `own` (the live one) up to `desired`.
async fn write_secret(
    ctx: &AgentContext,
    user: &KafkaUser,
    secrets: &Api<Secret>,
    own: Option<&Secret>,
    desired: Secret,
    holds: &str,
) -> Result<()> {
    let name = user.name_any();
    let (reason, note) = match own {
        None => {
            let params = PostParams {
                field_manager: Some(FIELD_MANAGER.to_owned()),
                ..PostParams::default()
            };
            secrets.create(&params, &desired).await?;
            ("SecretCreated", format!("Secret {name} holds {holds}"))
        }
        Some(live) if !secret_current(live, &desired) => {
            // The version read: a Secret changed since (or deleted and made by someone else) is
            // a conflict, retried with a fresh read, rather than overwritten.
            let mut patch = desired;
            patch.metadata.resource_version = live.metadata.resource_version.clone();
            secrets
                .patch(
                    &name,
                    &PatchParams::apply(FIELD_MANAGER).force(),
                    &Patch::Apply(&patch),
                )
                .await?;
            ("SecretUpdated", format!("Secret {name} updated"))
        }
        Some(_) => return Ok(()),
    };
    info!(user = %name, reason, "user Secret written");
    events::publish(
        &ctx.recorder,
        &user.object_ref(&()),
        false,
        reason,
        note,
        "Write",
    )
    .await;
    Ok(())
}

/// Why a `tls` user's certificate must be issued (again) into its Secret `own`, if it must:
/// missing, lost, from another clients CA than `ca_cert`, or within 30 days of its expiry.
pub fn certificate_reason(
    own: Option<&Secret>,
    ca_cert: &str,
    now: time::OffsetDateTime,
) -> Option<&'static str> {
    const USER_HELD: Held = Held {
        cert_key: USER_CERT_KEY,
        key_key: USER_KEY_KEY,
        missing: "no user certificate yet",
        ca_changed: "the clients CA changed",
        lost: "the user Secret lost its certificate",
    };
    certificates::held_reason(own, ca_cert, &USER_HELD).or_else(|| {
        let annotations = own.and_then(|s| s.metadata.annotations.clone()).unwrap_or_default();
        certificates::expiry_reason(&annotations, now)
    })
}

/// Makes sure a `tls` user has a current certificate from the cluster's clients CA in its
/// Secret; or the condition that says why it cannot.
async fn tls_certificate(ctx: &AgentContext, user: &KafkaUser, uid: &str) -> Result<Option<Cond>> {
    let name = user.name_any();
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &ctx.namespace);
    let names = Names {
        cluster: ctx.cluster.clone(),
        namespace: ctx.namespace.clone(),
    };
    let ca_secret = Ca::Clients.secret_name(&names);
    let Some(ca) = secrets
        .get_opt(&ca_secret)
        .await?
        .as_ref()
        .and_then(|s| certificates::pem_in(s, "ca.crt", "ca.key"))
    else {
        return Ok(Some(Cond::new(
            READY,
            false,
            "ClientsCaNotFound",
            format!(
                "cluster {:?} has no clients CA (Secret {ca_secret:?}) to issue the user's certificate: its listener must have tls: {{}} (no secretName) and authentication: {{type: tls}}; for certificates from another CA use authentication type tls-external",
                ctx.cluster
            ),
        )));
    };
    let own = secrets.get_opt(&name).await?;
    if let Some(secret) = &own
        && !owned_by(secret, uid)
    {
        return Ok(Some(secret_conflict(&name)));
    }
    let now = time::OffsetDateTime::now_utc();
    let desired = match certificate_reason(own.as_ref(), &ca.cert, now) {
        Some(reason) => {
            let (certificate, not_after) = certificates::issue_user(&names, &ca.key, &name, now)?;
            info!(user = %name, reason, "user certificate issued");
            certificate_secret(user, &ctx.cluster, &ca.cert, &certificate, not_after)?
        }
        // The certificate kept: only the labels and owner are brought up to date.
        None => {
            let mut desired = secret_of(user, &ctx.cluster, BTreeMap::new(), None)?;
            if let Some(own) = &own {
                desired.data = own.data.clone();
                desired.metadata.annotations = own.metadata.annotations.clone();
            }
            desired
        }
    };
    write_secret(
        ctx,
        user,
        &secrets,
        own.as_ref(),
        desired,
        "the user's certificate",
    )
    .await?;
    Ok(None)
}

async fn converge(user: &Arc<KafkaUser>, ctx: &AgentContext) -> Result<Action> {
    let uid = user.uid().ok_or(Error::MissingField("metadata.uid"))?;
    let name = user.name_any();
    let username = user.username();
    let generation = user.metadata.generation;
    let previous = user.status.clone().unwrap_or_default();
    let scram = is_scram(user);
    let tls = is_tls(user);
    let base = KafkaUserStatus {
        observed_generation: generation,
        username: Some(username.clone()),
        secret: (scram || tls).then(|| name.clone()),
        ..previous.clone()
    };

    if let Some(message) = refusal(user) {
        // The brokers keep the user's last valid entry.
        let cond = Cond::new(READY, false, "InvalidSpec", message);
        return not_ready(ctx, user, base, cond, Action::await_change()).await;
    }
    let password = if scram {
        match scram_password(ctx, user, &uid).await? {
            Ok(password) => Some(password),
            Err(cond) => {
                return credential_missing(ctx, user, base, cond, MISSING_PASSWORD_REQUEUE).await;
            }
        }
    } else {
        None
    };
    if tls && let Some(cond) = tls_certificate(ctx, user, &uid).await? {
        return credential_missing(ctx, user, base, cond, MISSING_CA_REQUEUE).await;
    }

    let (written, entry) = {
        let (user, username, uid) = (user.clone(), username.clone(), uid.clone());
        ctx.with_volume(move |fs, root| {
            let layout = Layout::new(root.to_owned());
            let mut built = None;
            let written = set_entry(fs, &layout, &username, &uid, |existing| {
                let e = entry(&user, &uid, password.as_deref(), existing);
                built = Some(e.clone());
                e
            })?;
            Ok((written, built.unwrap_or_default()))
        })
        .await?
    };
    let message = ready_message(&username, &entry);
    if written != Written::Unchanged {
        info!(user = %name, %username, ?written, "kafka-users.json written");
        let reason = if written == Written::Created {
            "UserCreated"
        } else {
            "UserUpdated"
        };
        events::publish(
            &ctx.recorder,
            &user.object_ref(&()),
            false,
            reason,
            format!("kafka-users.json: {message}"),
            "Write",
        )
        .await;
    }
    let status = KafkaUserStatus {
        conditions: merge(
            &previous.conditions,
            &[
                Cond::new(READY, true, "Ready", message),
                Cond::new(RECONCILED, true, "Success", ""),
            ],
            generation,
            Timestamp::now(),
        ),
        ..base
    };
    patch_status(ctx, user, status).await?;
    let has_secret = scram || tls;
    Ok(Action::requeue(if has_secret {
        SCRAM_REQUEUE
    } else {
        REQUEUE
    }))
}

/// Requeues after an error, later after each failure in a row ([`crate::backoff`]).
pub fn error_policy(user: Arc<KafkaUser>, error: &Error, ctx: Arc<AgentContext>) -> Action {
    let delay = ctx.backoff.failed(&key(&user));
    warn!(user = %user.name_any(), reason = error.reason(), %error, retry_in = ?delay, "reconcile failed");
    Action::requeue(delay)
}

#[cfg(test)]
mod tests;
