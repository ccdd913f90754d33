//! DescribeUserScramCredentials: needs DESCRIBE on the cluster; each user's SCRAM mechanisms
//! and iteration counts (never the credential itself).

use std::collections::HashSet;
use std::sync::Arc;

use kafka_protocol::ResponseError;
use kafka_protocol::messages::describe_user_scram_credentials_response::{CredentialInfo, DescribeUserScramCredentialsResult};
use kafka_protocol::messages::{DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse};

use super::access::{Op, cluster_allowed};
use super::str_bytes;
use crate::broker::Broker;
use crate::router::{Reply, RequestContext};
use crate::sasl::credentials::Users;

pub async fn handle(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    request: DescribeUserScramCredentialsRequest,
) -> Reply<DescribeUserScramCredentialsResponse> {
    let refuse = |error: ResponseError, message: &str| {
        Reply::Now(
            DescribeUserScramCredentialsResponse::default().with_error_code(error.code()).with_error_message(Some(str_bytes(message))),
        )
    };
    if !cluster_allowed(broker, ctx, Op::Describe) {
        return refuse(ResponseError::ClusterAuthorizationFailed, "DescribeUserScramCredentials needs DESCRIBE on the cluster");
    }
    let Some(credentials) = broker.config.security.sasl.as_ref().and_then(|s| s.credentials.as_ref()) else {
        return refuse(ResponseError::SecurityDisabled, "the broker has no SCRAM credentials (--sasl-credentials)");
    };
    let users = credentials.users();
    let wanted: Vec<String> = match request.users.filter(|u| !u.is_empty()) {
        None => users.users.keys().cloned().collect(),
        Some(names) => names.into_iter().map(|u| u.name.to_string()).collect(),
    };
    let mut seen = HashSet::new();
    let duplicates: HashSet<&String> = wanted.iter().filter(|u| !seen.insert(*u)).collect();
    let mut reported = HashSet::new();
    let results = wanted.iter().filter(|u| reported.insert(*u)).map(|user| describe(&users, user, duplicates.contains(user))).collect();
    Reply::Now(DescribeUserScramCredentialsResponse::default().with_results(results))
}

fn describe(users: &Users, user: &str, duplicate: bool) -> DescribeUserScramCredentialsResult {
    let result = DescribeUserScramCredentialsResult::default().with_user(str_bytes(user));
    let error = |e: ResponseError, message: String| result.clone().with_error_code(e.code()).with_error_message(Some(str_bytes(message)));
    if duplicate {
        return error(ResponseError::DuplicateResource, format!("cannot describe user {user:?} twice in one request"));
    }
    match users.users.get(user) {
        None => error(ResponseError::ResourceNotFound, format!("attempt to describe a user credential that does not exist: {user}")),
        Some(credentials) => result.clone().with_credential_infos(
            credentials
                .iter()
                .map(|(hash, c)| {
                    CredentialInfo::default()
                        .with_mechanism(hash.kafka_code())
                        .with_iterations(i32::try_from(c.iterations).unwrap_or(i32::MAX))
                })
                .collect(),
        ),
    }
}
