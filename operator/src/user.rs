//! The KafkaUser reconciler (Strimzi's User Operator), run by a cluster's volume agent: validate
//! the spec, keep a SCRAM user's password, or a `tls` user's certificate (issued from the
//! cluster's clients CA, [`crate::certificates`], with a PKCS#12 keystore of it, [`keystore`]),
//! in a Secret named after the user, and set the user's entry — salted credentials, ACLs,
//! quotas — in `__cluster/kafka-users.json`, which the brokers read every second
//! ([`kafka_users`]). The Secret holds only what the user's authentication type needs: the
//! other type's keys are removed when the type changes, and a user whose type needs no Secret
//! (`tls-external`, or none) loses its own. Deleted users are not seen here (there is no
//! finalizer); [`crate::sweep`] removes their entries, and their Secrets go with them by garbage
//! collection.
//!
//! The agent may not list or watch Secrets (it reads only those it is named), so a changed
//! password Secret (or a lost user Secret) is picked up by a periodic reconcile, every
//! [`SCRAM_REQUEUE`].

pub mod keystore;
mod secret;
mod spec;

pub use secret::*;
pub use spec::*;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::jiff::Timestamp;
use kaas_shared::crd::conditions::READY;
use kaas_shared::crd::user::UserAuthenticationType;
use kaas_shared::crd::{KafkaUser, KafkaUserStatus};
use kaas_shared::fs::Fs;
use kaas_shared::kafka_users::{self, KafkaUserEntry};
use kaas_shared::layout::Layout;
use kaas_shared::scram::ScramHash;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use serde_json::json;
use tracing::{info, warn};

use crate::certificates::{self, Ca, Held};
use crate::conditions::{Cond, RECONCILED, failed, merge};
use crate::resources::Names;
use crate::topic::{AgentContext, is_news};
use crate::{Error, FIELD_MANAGER, Result, events};

/// The metric label of this controller.
pub const CONTROLLER: &str = "kafkauser";

/// How often a user with a Secret (SCRAM or `tls`) is reconciled again: the agent cannot watch
/// Secrets, so this is how soon a changed password Secret, a lost user Secret or a renewed
/// clients CA is noticed.
pub const SCRAM_REQUEUE: Duration = Duration::from_secs(60);
/// How soon a `tls` user of a cluster without a clients CA is tried again.
pub const MISSING_CA_REQUEUE: Duration = Duration::from_secs(30);
/// How soon a user whose password Secret is missing is tried again.
pub const MISSING_PASSWORD_REQUEUE: Duration = Duration::from_secs(30);
/// How often any other user is reconciled again (the file is re-driven from the spec).
pub const REQUEUE: Duration = Duration::from_secs(300);

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
            let params = PatchParams {
                field_manager: Some(FIELD_MANAGER.to_owned()),
                ..PatchParams::default()
            };
            let patch = secret_patch(live, &desired)?;
            secrets.patch(&name, &params, &Patch::Merge(&patch)).await?;
            let stale = stale_keys(live, &desired);
            let note = if stale.is_empty() {
                format!("Secret {name} updated")
            } else {
                format!(
                    "Secret {name} updated: it holds {holds}, no longer {}",
                    stale.join(", ")
                )
            };
            ("SecretUpdated", note)
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

/// Deletes the user's Secret if it has one of its own, as Strimzi does: a user whose
/// authentication type (`tls-external`, or none) needs no password or certificate from the
/// operator keeps no credentials of a type it no longer has. A Secret of that name that the
/// user does not own is someone else's and stays.
async fn remove_secret(ctx: &AgentContext, user: &KafkaUser, uid: &str) -> Result<()> {
    let name = user.name_any();
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &ctx.namespace);
    let Some(own) = secrets.get_opt(&name).await? else {
        return Ok(());
    };
    if !owned_by(&own, uid) {
        return Ok(());
    }
    // Only the Secret read: one replaced meanwhile (another uid, or a changed one) is a
    // conflict, retried with a fresh read, rather than deleted unseen.
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: own.metadata.uid.clone(),
            resource_version: own.metadata.resource_version.clone(),
        }),
        ..DeleteParams::default()
    };
    match secrets.delete(&name, &params).await {
        Ok(_) => {}
        // Gone meanwhile (garbage collection, or a person): nothing left to do or say.
        Err(kube::Error::Api(e)) if e.code == 404 => return Ok(()),
        Err(e) => return Err(e.into()),
    }
    let authentication = match &user.spec.authentication {
        Some(a) => format!("authentication type {}", authentication_name(a.kind)),
        None => "no authentication".to_owned(),
    };
    info!(user = %name, %authentication, "user Secret deleted");
    events::publish(
        &ctx.recorder,
        &user.object_ref(&()),
        false,
        "SecretDeleted",
        format!("Secret {name} deleted: a user with {authentication} has no password or certificate to keep"),
        "Delete",
    )
    .await;
    Ok(())
}

/// An authentication type as the KafkaUser spells it.
fn authentication_name(kind: UserAuthenticationType) -> &'static str {
    match kind {
        UserAuthenticationType::ScramSha512 => "scram-sha-512",
        UserAuthenticationType::Tls => "tls",
        UserAuthenticationType::TlsExternal => "tls-external",
    }
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
    let certificates::LoadedCa::Ready(ca) = certificates::load_ca(&secrets, &names, Ca::Clients).await? else {
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
    let desired = match certificate_reason(own.as_ref(), &ca.pem.cert, now) {
        Some(reason) => {
            let (certificate, expiry) = certificates::issue_user(&ca, &name, now)?;
            info!(user = %name, reason, "user certificate issued");
            certificate_secret(user, &ctx.cluster, &ca.pem.cert, &certificate, expiry)?
        }
        // The certificate kept: the labels and owner brought up to date, a keystore made if
        // the Secret predates them, the other type's keys dropped.
        None => kept_certificate_secret(user, &ctx.cluster, own.as_ref())?,
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
    if !scram && !tls {
        remove_secret(ctx, user, &uid).await?;
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
