//! Heartbeat: keeps a member's session alive and tells it when to rejoin.

use std::sync::Arc;

use kafka_protocol::messages::{HeartbeatRequest, HeartbeatResponse};

use crate::error::GroupErrorCode;
use super::access::{Op, Resource, check};
use crate::broker::Broker;
use crate::groups;
use crate::router::{Reply, RequestContext};

pub async fn handle(broker: &Arc<Broker>, ctx: &RequestContext, request: HeartbeatRequest) -> Reply<HeartbeatResponse> {
    // Kafka: READ on the group.
    if let Err(e) = check(broker, ctx, Op::Read, Resource::Group, &request.group_id) {
        return Reply::Now(HeartbeatResponse::default().with_error_code(e.code()));
    }
    let req = groups::HeartbeatRequest {
        group_id: request.group_id.to_string(),
        generation: request.generation_id,
        member_id: request.member_id.to_string(),
        instance_id: request.group_instance_id.map(|s| s.to_string()),
    };
    let error = broker.groups.heartbeat(&req);
    Reply::Now(HeartbeatResponse::default().with_error_code(error.map_or(0, |e| e.code())))
}
