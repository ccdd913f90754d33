//! JoinGroup: decode, normalise by version, and let the coordinator answer (often later, when
//! the join phase completes).

use std::sync::Arc;

use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::{JoinGroupRequest, JoinGroupResponse};

use crate::error::GroupErrorCode;
use super::access::{Op, Resource, check};
use super::str_bytes;
use crate::broker::Broker;
use crate::groups::{JoinRequest, JoinResult};
use kaas_coordinator::GroupError;
use crate::router::{Reply, RequestContext};

pub async fn handle(broker: &Arc<Broker>, ctx: &RequestContext, request: JoinGroupRequest) -> Reply<JoinGroupResponse> {
    let version = ctx.version;
    // Kafka: READ on the group.
    if check(broker, ctx, Op::Read, Resource::Group, &request.group_id).is_err() {
        return Reply::Now(response(JoinResult::error(GroupError::GroupAuthorizationFailed, &request.member_id), version));
    }
    let req = JoinRequest {
        group_id: request.group_id.to_string(),
        member_id: request.member_id.to_string(),
        instance_id: request.group_instance_id.map(|s| s.to_string()),
        session_timeout_ms: request.session_timeout_ms,
        rebalance_timeout_ms: request.rebalance_timeout_ms,
        protocol_type: request.protocol_type.to_string(),
        protocols: request.protocols.into_iter().map(|p| (p.name.to_string(), p.metadata)).collect(),
        client_id: client_id(ctx),
        client_host: client_host(ctx),
        require_known_member_id: version >= 4,
        supports_skip_assignment: version >= 9,
    };
    let member_id = req.member_id.clone();
    let answer = broker.groups.join(req);
    Reply::Later(Box::pin(async move {
        let result = answer.resolve(|| JoinResult::error(GroupError::CoordinatorNotAvailable, &member_id)).await;
        response(result, version)
    }))
}

fn response(r: JoinResult, version: i16) -> JoinGroupResponse {
    // NB: protocol_name is non-nullable before v7; encode "" there instead of null.
    let protocol_name = match r.protocol_name {
        Some(p) => Some(str_bytes(p)),
        None if version < 7 => Some(str_bytes("")),
        None => None,
    };
    JoinGroupResponse::default()
        .with_error_code(r.error.map_or(0, |e| e.code()))
        .with_generation_id(r.generation)
        .with_protocol_type(if version >= 7 { r.protocol_type.map(str_bytes) } else { None })
        .with_protocol_name(protocol_name)
        .with_leader(str_bytes(r.leader))
        .with_skip_assignment(version >= 9 && r.skip_assignment)
        .with_member_id(str_bytes(r.member_id))
        .with_members(
            r.members
                .into_iter()
                .map(|(id, iid, metadata)| {
                    JoinGroupResponseMember::default()
                        .with_member_id(str_bytes(id))
                        .with_group_instance_id(if version >= 5 { iid.map(str_bytes) } else { None })
                        .with_metadata(metadata)
                })
                .collect(),
        )
}

/// The client id from the request header.
pub(crate) fn client_id(ctx: &RequestContext) -> String {
    ctx.header.client_id.as_ref().map(|s| s.to_string()).unwrap_or_default()
}

/// The client host as Kafka prints it (`/127.0.0.1`).
pub(crate) fn client_host(ctx: &RequestContext) -> String {
    format!("/{}", ctx.peer.ip())
}
