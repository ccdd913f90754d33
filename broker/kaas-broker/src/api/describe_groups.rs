//! DescribeGroups.

use std::sync::Arc;

use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::{DescribeGroupsRequest, DescribeGroupsResponse};

use crate::error::GroupErrorCode;
use super::access::{Op, Resource, authorized_operations, check};
use super::str_bytes;
use crate::broker::Broker;
use crate::router::{Reply, RequestContext};

pub async fn handle(broker: &Arc<Broker>, ctx: &RequestContext, request: DescribeGroupsRequest) -> Reply<DescribeGroupsResponse> {
    let groups = request
        .groups
        .into_iter()
        .map(|id| {
            // Kafka: DESCRIBE on the group.
            if let Err(e) = check(broker, ctx, Op::Describe, Resource::Group, &id) {
                return DescribedGroup::default().with_group_id(id).with_error_code(e.code()).with_authorized_operations(i32::MIN);
            }
            let d = broker.groups.describe(&id, ctx.version >= 6);
            let ops = authorized_operations(broker, ctx, request.include_authorized_operations, Resource::Group, &id);
            let members = d
                .members
                .into_iter()
                .map(|(member_id, iid, client_id, host, metadata, assignment)| {
                    DescribedGroupMember::default()
                        .with_member_id(str_bytes(member_id))
                        .with_group_instance_id(if ctx.version >= 4 { iid.map(str_bytes) } else { None })
                        .with_client_id(str_bytes(client_id))
                        .with_client_host(str_bytes(host))
                        .with_member_metadata(metadata)
                        .with_member_assignment(assignment)
                })
                .collect();
            DescribedGroup::default()
                .with_group_id(id)
                .with_error_code(d.error.map_or(0, |e| e.code()))
                .with_group_state(str_bytes(d.state))
                .with_protocol_type(str_bytes(d.protocol_type))
                .with_protocol_data(str_bytes(d.protocol))
                .with_members(members)
                .with_authorized_operations(ops)
        })
        .collect();
    Reply::Now(DescribeGroupsResponse::default().with_groups(groups))
}
