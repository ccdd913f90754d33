//! LeaveGroup: one member (v0–2) or a batch with instance ids (v3+, KIP-345).

use std::sync::Arc;

use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::{LeaveGroupRequest, LeaveGroupResponse};

use crate::error::GroupErrorCode;
use super::access::{Op, Resource, check};
use super::str_bytes;
use crate::broker::Broker;
use crate::groups::Leaving;
use crate::router::{Reply, RequestContext};

pub async fn handle(broker: &Arc<Broker>, ctx: &RequestContext, request: LeaveGroupRequest) -> Reply<LeaveGroupResponse> {
    let leaving: Vec<Leaving> = if ctx.version >= 3 {
        request.members.iter().map(|m| Leaving { member_id: m.member_id.to_string(), instance_id: m.group_instance_id.as_ref().map(|s| s.to_string()) }).collect()
    } else {
        vec![Leaving { member_id: request.member_id.to_string(), instance_id: None }]
    };
    let response = LeaveGroupResponse::default();
    // Kafka: READ on the group.
    if let Err(e) = check(broker, ctx, Op::Read, Resource::Group, &request.group_id) {
        return Reply::Now(response.with_error_code(e.code()));
    }
    let errors = match broker.groups.leave(&request.group_id, &leaving) {
        Ok(errors) => errors,
        Err(e) => return Reply::Now(response.with_error_code(e.code())),
    };
    if ctx.version < 3 {
        let code = errors.first().copied().flatten().map_or(0, |e| e.code());
        return Reply::Now(response.with_error_code(code));
    }
    let members = leaving
        .into_iter()
        .zip(errors)
        .map(|(l, e)| MemberResponse::default().with_member_id(str_bytes(l.member_id)).with_group_instance_id(l.instance_id.map(str_bytes)).with_error_code(e.map_or(0, |e| e.code())))
        .collect();
    Reply::Now(response.with_members(members))
}
