//! SyncGroup: the leader hands in the assignment; everyone gets theirs once it is durable.

use std::sync::Arc;

use kaas_coordinator::GroupError;
use kafka_protocol::messages::{SyncGroupRequest, SyncGroupResponse};

use crate::error::GroupErrorCode;
use super::access::{Op, Resource, check};
use super::str_bytes;
use crate::broker::Broker;
use crate::groups::{SyncRequest, SyncResult};
use crate::router::{Reply, RequestContext};

pub async fn handle(broker: &Arc<Broker>, ctx: &RequestContext, request: SyncGroupRequest) -> Reply<SyncGroupResponse> {
    let version = ctx.version;
    // Kafka: READ on the group.
    if let Err(e) = check(broker, ctx, Op::Read, Resource::Group, &request.group_id) {
        return Reply::Now(SyncGroupResponse::default().with_error_code(e.code()));
    }
    let req = SyncRequest {
        group_id: request.group_id.to_string(),
        generation: request.generation_id,
        member_id: request.member_id.to_string(),
        instance_id: request.group_instance_id.map(|s| s.to_string()),
        protocol_type: request.protocol_type.map(|s| s.to_string()),
        protocol_name: request.protocol_name.map(|s| s.to_string()),
        assignments: request.assignments.into_iter().map(|a| (a.member_id.to_string(), a.assignment)).collect(),
    };
    let answer = broker.groups.sync(req);
    Reply::Later(Box::pin(async move {
        let r = answer.resolve(|| SyncResult::error(GroupError::CoordinatorNotAvailable)).await;
        let v5 = version >= 5;
        SyncGroupResponse::default()
            .with_error_code(r.error.map_or(0, |e| e.code()))
            .with_protocol_type(if v5 { r.protocol_type.map(str_bytes) } else { None })
            .with_protocol_name(if v5 { r.protocol_name.map(str_bytes) } else { None })
            .with_assignment(r.assignment)
    }))
}
