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

use crate::certificates::{self, Ca};
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
    let before = file.users.len();
    file.users
        .retain(|name, e| name.as_str() == username || e.uid != uid);
    let renamed = file.users.len() != before;
    if renamed {
        file.revision += 1;
    }
    if !(file.set(username, entry) || renamed) {
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
    match own {
        None => {
            let params = PostParams {
                field_manager: Some(FIELD_MANAGER.to_owned()),
                ..PostParams::default()
            };
            secrets.create(&params, &desired).await?;
            info!(user = %name, "user Secret created");
            events::publish(
                &ctx.recorder,
                &user.object_ref(&()),
                false,
                "SecretCreated",
                format!("Secret {name} holds {holds}"),
                "Write",
            )
            .await;
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
            info!(user = %name, "user Secret updated");
            events::publish(
                &ctx.recorder,
                &user.object_ref(&()),
                false,
                "SecretUpdated",
                format!("Secret {name} updated"),
                "Write",
            )
            .await;
        }
        Some(_) => {}
    }
    Ok(())
}

/// Why a `tls` user's certificate must be issued (again) into its Secret `own`, if it must:
/// missing, lost, from another clients CA than `ca_cert`, or within 30 days of its expiry.
pub fn certificate_reason(
    own: Option<&Secret>,
    ca_cert: &str,
    now: time::OffsetDateTime,
) -> Option<&'static str> {
    let Some(own) = own else {
        return Some("no user certificate yet");
    };
    if certificates::text_in(own, CA_CERT_KEY).as_deref() != Some(ca_cert) {
        return Some("the clients CA changed");
    }
    if certificates::pem_in(own, USER_CERT_KEY, USER_KEY_KEY).is_none() {
        return Some("the user Secret lost its certificate");
    }
    let annotations = own.metadata.annotations.clone().unwrap_or_default();
    certificates::expiry_reason(&annotations, now)
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
#[allow(clippy::unwrap_used)]
mod tests {
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
        let later = now + certificates::LEAF_VALIDITY - certificates::RENEW_BEFORE
            + time::Duration::hours(1);
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
}
