//! ListGroups, with the state (v4+) and type (v5+) filters.

use std::sync::Arc;

use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::{GroupId, ListGroupsRequest, ListGroupsResponse};

use super::access::{Op, Resource, allowed, cluster_allowed};
use super::str_bytes;
use crate::broker::Broker;
use crate::router::{Reply, RequestContext};

pub async fn handle(broker: &Arc<Broker>, ctx: &RequestContext, request: ListGroupsRequest) -> Reply<ListGroupsResponse> {
    let states: Vec<String> = request.states_filter.iter().map(|s| s.to_string()).collect();
    let types: Vec<String> = request.types_filter.iter().map(|s| s.to_string()).collect();
    // Kafka: DESCRIBE on the cluster lists every group, else those the principal may describe.
    let all = cluster_allowed(broker, ctx, Op::Describe);
    let groups = broker
        .groups
        .list(&states, &types)
        .into_iter()
        .filter(|g| all || allowed(broker, ctx, Op::Describe, Resource::Group, &g.group_id))
        .map(|g| {
            let mut listed = ListedGroup::default().with_group_id(GroupId(str_bytes(g.group_id))).with_protocol_type(str_bytes(g.protocol_type));
            if ctx.version >= 4 {
                listed = listed.with_group_state(str_bytes(g.state));
            }
            if ctx.version >= 5 {
                listed = listed.with_group_type(str_bytes(g.group_type));
            }
            listed
        })
        .collect();
    Reply::Now(ListGroupsResponse::default().with_groups(groups))
}
