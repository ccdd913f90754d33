//! AlterUserScramCredentials: needs ALTER on the cluster; adds, replaces or deletes users'
//! SCRAM credentials in the file SASL authenticates against. Clients send the salted password
//! (never the password), from which only StoredKey and ServerKey are kept. A user's change is
//! answered once the file holding it is fsynced, and new logins use it at once.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use kafka_protocol::ResponseError;
use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use kafka_protocol::messages::{AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse};

use super::access::{Op, cluster_allowed};
use super::str_bytes;
use crate::broker::Broker;
use crate::router::{Reply, RequestContext};
use crate::sasl::scram::{ScramCredential, ScramHash};

/// One requested change of one user's credential.
enum Change {
    Delete(ScramHash),
    Upsert(ScramHash, ScramCredential),
}

type Refusal = (ResponseError, String);

pub async fn handle(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    request: AlterUserScramCredentialsRequest,
) -> Reply<AlterUserScramCredentialsResponse> {
    // Per user, in request order: its changes, or why they are all refused.
    let mut per_user: BTreeMap<String, Result<Vec<Change>, Refusal>> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    let mut mechanisms: HashMap<(String, i8), usize> = HashMap::new();
    let deletions = request.deletions.iter().map(|d| (d.name.to_string(), d.mechanism, None));
    let upsertions = request.upsertions.iter().map(|u| (u.name.to_string(), u.mechanism, Some(u)));
    for (user, mechanism, upsert) in deletions.chain(upsertions) {
        if !per_user.contains_key(&user) {
            order.push(user.clone());
        }
        *mechanisms.entry((user.clone(), mechanism)).or_default() += 1;
        let change = change(&user, mechanism, upsert);
        let entry = per_user.entry(user).or_insert(Ok(Vec::new()));
        match (entry.as_mut(), change) {
            (Ok(changes), Ok(c)) => changes.push(c),
            (Ok(_), Err(refusal)) => *entry = Err(refusal),
            (Err(_), _) => {}
        }
    }
    for ((user, _), count) in mechanisms {
        if count > 1 {
            per_user.insert(
                user,
                Err((ResponseError::DuplicateResource, "a user credential cannot be altered twice in the same request".into())),
            );
        }
    }
    let respond = |outcomes: Vec<(String, Result<(), Refusal>)>| {
        let results = outcomes
            .into_iter()
            .map(|(user, outcome)| {
                let result = AlterUserScramCredentialsResult::default().with_user(str_bytes(user));
                match outcome {
                    Ok(()) => result,
                    Err((e, message)) => result.with_error_code(e.code()).with_error_message(Some(str_bytes(message))),
                }
            })
            .collect();
        AlterUserScramCredentialsResponse::default().with_results(results)
    };
    let refuse_all =
        |e: ResponseError, message: &str| Reply::Now(respond(order.iter().map(|u| (u.clone(), Err((e, message.to_string())))).collect()));
    if !cluster_allowed(broker, ctx, Op::Alter) {
        return refuse_all(ResponseError::ClusterAuthorizationFailed, "AlterUserScramCredentials needs ALTER on the cluster");
    }
    let Some(credentials) = broker.config.security.sasl.as_ref().and_then(|s| s.credentials.clone()) else {
        return refuse_all(ResponseError::SecurityDisabled, "the broker has no SCRAM credentials (--sasl-credentials)");
    };
    if broker.cluster.is_some() {
        // NB: a cluster's users are its KafkaUsers (written by the volume agent) and the Secret
        // each broker mounts a copy of: a change one broker wrote would reach none of the others.
        return refuse_all(
            ResponseError::InvalidRequest,
            "a cluster's SCRAM users are KafkaUser resources (or the Secret its brokers mount), not changed through the brokers",
        );
    }
    Reply::Later(Box::pin(async move {
        let users = order.clone();
        // File I/O: off the executor.
        let applied = tokio::task::spawn_blocking(move || {
            credentials.edit(|file| {
                order
                    .into_iter()
                    .map(|user| {
                        let outcome = match per_user.remove(&user) {
                            Some(Ok(changes)) => apply(file, &user, changes),
                            Some(Err(refusal)) => Err(refusal),
                            None => Ok(()),
                        };
                        (user, outcome)
                    })
                    .collect::<Vec<_>>()
            })
        })
        .await;
        match applied {
            Ok(Ok(outcomes)) => respond(outcomes),
            Ok(Err(message)) => respond(users.into_iter().map(|u| (u, Err((ResponseError::KafkaStorageError, message.clone())))).collect()),
            Err(e) => respond(users.into_iter().map(|u| (u, Err((ResponseError::UnknownServerError, e.to_string())))).collect()),
        }
    }))
}

/// Checks one requested change as Kafka does.
fn change(
    user: &str,
    mechanism: i8,
    upsert: Option<&kafka_protocol::messages::alter_user_scram_credentials_request::ScramCredentialUpsertion>,
) -> Result<Change, Refusal> {
    if user.is_empty() {
        return Err((ResponseError::UnacceptableCredential, "username must not be empty".into()));
    }
    let hash = ScramHash::from_kafka_code(mechanism)
        .ok_or((ResponseError::UnsupportedSaslMechanism, format!("unknown SCRAM mechanism {mechanism}")))?;
    let Some(u) = upsert else { return Ok(Change::Delete(hash)) };
    let iterations = u32::try_from(u.iterations).unwrap_or(0);
    if !hash.iterations_allowed(iterations) {
        return Err((
            ResponseError::UnacceptableCredential,
            format!("{} iterations must be within 4096..=16384, not {}", hash.mechanism(), u.iterations),
        ));
    }
    if u.salt.is_empty() || u.salted_password.is_empty() {
        return Err((ResponseError::UnacceptableCredential, "salt and salted password must not be empty".into()));
    }
    Ok(Change::Upsert(hash, ScramCredential::from_salted_password(hash, &u.salted_password, &u.salt, iterations)))
}

/// One user's changes, all or none: a deletion of a credential that does not exist refuses
/// the user's other changes too.
fn apply(file: &mut crate::sasl::credentials::Users, user: &str, changes: Vec<Change>) -> Result<(), Refusal> {
    let missing = changes.iter().any(|c| matches!(c, Change::Delete(hash) if file.credential(user, *hash).is_none()));
    if missing {
        return Err((ResponseError::ResourceNotFound, "attempt to delete a user credential that does not exist".into()));
    }
    for c in changes {
        match c {
            Change::Delete(hash) => {
                file.remove(user, hash);
            }
            Change::Upsert(hash, credential) => file.set(user, hash, credential),
        }
    }
    Ok(())
}
