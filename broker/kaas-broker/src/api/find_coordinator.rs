//! FindCoordinator: in local mode this broker answers for every group and transactional id;
//! in cluster mode the coordinator is whoever assignment.json places the key's shard on.

use std::collections::BTreeMap;
use std::sync::Arc;

use kaas_shared::assignment::{Assignment, ShardAssignment};

use kafka_protocol::ResponseError;
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::{BrokerId, FindCoordinatorRequest, FindCoordinatorResponse};

use super::access::{Op, Resource, check};
use super::metadata::{BrokerEndpoint, announced};
use super::str_bytes;
use crate::broker::Broker;
use crate::router::{Reply, RequestContext};

const KEY_TYPE_GROUP: i8 = 0;
const KEY_TYPE_TRANSACTION: i8 = 1;

pub async fn handle(broker: &Arc<Broker>, ctx: &RequestContext, request: FindCoordinatorRequest) -> Reply<FindCoordinatorResponse> {
    // v0–3 ask for one key; v4+ batch them (KIP-699).
    let keys: Vec<String> = if ctx.version >= 4 { request.coordinator_keys.iter().map(|k| k.to_string()).collect() } else { vec![request.key.to_string()] };
    let answers: Vec<Coordinator> = keys.into_iter().map(|key| find(broker, ctx, request.key_type, key)).collect();
    let mut response = FindCoordinatorResponse::default();
    if ctx.version >= 4 {
        response.coordinators = answers;
    } else if let Some(a) = answers.into_iter().next() {
        response.error_code = a.error_code;
        response.error_message = if ctx.version >= 1 { a.error_message } else { None };
        response.node_id = a.node_id;
        response.host = a.host;
        response.port = a.port;
    }
    Reply::Now(response)
}

fn find(broker: &Broker, ctx: &RequestContext, key_type: i8, key: String) -> Coordinator {
    let answer = Coordinator::default().with_key(str_bytes(key.clone())).with_node_id(BrokerId(-1)).with_host(str_bytes("")).with_port(-1);
    // Kafka: DESCRIBE on the group or the transactional id.
    let resource = match key_type {
        KEY_TYPE_GROUP => Some(Resource::Group),
        KEY_TYPE_TRANSACTION => Some(Resource::TransactionalId),
        _ => None,
    };
    if let Some(Err(e)) = resource.map(|r| check(broker, ctx, Op::Describe, r, &key)) {
        return answer.with_error_code(e.code());
    }
    let error = match key_type {
        KEY_TYPE_GROUP if key.is_empty() => Some((ResponseError::InvalidRequest, "the group id is empty")),
        KEY_TYPE_GROUP if broker.cluster.is_some() => return in_cluster(broker, ctx, answer, &key, |a| &a.consumer_groups),
        KEY_TYPE_GROUP if !broker.groups.coordinates(&key) => Some((ResponseError::CoordinatorNotAvailable, "the group's shard is not loaded here")),
        KEY_TYPE_GROUP => None,
        KEY_TYPE_TRANSACTION if key.is_empty() => Some((ResponseError::InvalidRequest, "the transactional id is empty")),
        KEY_TYPE_TRANSACTION if broker.cluster.is_some() => return in_cluster(broker, ctx, answer, &key, |a| &a.transactions),
        KEY_TYPE_TRANSACTION if !broker.txns.coordinates(&key) => Some((ResponseError::CoordinatorNotAvailable, "the transactional id's shard is not loaded here")),
        KEY_TYPE_TRANSACTION => None,
        _ => Some((ResponseError::InvalidRequest, "unknown key type")),
    };
    match error {
        Some((e, message)) => answer.with_error_code(e.code()).with_error_message(Some(str_bytes(message))),
        None => at(broker, ctx, answer, BrokerEndpoint::this(broker)),
    }
}

/// `answer` naming `coordinator` as `ctx`'s listener announces it; on the external listener a
/// coordinator without an external address yet is not available (the client asks again).
fn at(broker: &Broker, ctx: &RequestContext, answer: Coordinator, coordinator: BrokerEndpoint) -> Coordinator {
    match announced(broker, ctx.listener, coordinator) {
        Some(e) => answer.with_node_id(BrokerId(e.id)).with_host(str_bytes(e.host)).with_port(i32::from(e.port)),
        None => answer
            .with_error_code(ResponseError::CoordinatorNotAvailable.code())
            .with_error_message(Some(str_bytes("the coordinator has no external address yet"))),
    }
}

/// Cluster mode: the coordinator is whoever assignment.json places the key's shard on
/// (`shards` picks the group or the transaction shards).
fn in_cluster(
    broker: &Broker,
    ctx: &RequestContext,
    answer: Coordinator,
    key: &str,
    shards: fn(&Assignment) -> &BTreeMap<u32, ShardAssignment>,
) -> Coordinator {
    let Some(cluster) = &broker.cluster else { return answer };
    let assignment = cluster.view.current();
    let shard = kaas_coordinator::shard_of(key);
    let placed = shards(&assignment).get(&shard).and_then(|s| assignment.endpoint(s.coordinator).map(|e| (s.coordinator, e)));
    match placed {
        Some((id, endpoint)) => at(broker, ctx, answer, BrokerEndpoint { id, host: endpoint.host.clone(), port: endpoint.port }),
        None => answer
            .with_error_code(ResponseError::CoordinatorNotAvailable.code())
            .with_error_message(Some(str_bytes("the key's shard is not placed yet"))),
    }
}
