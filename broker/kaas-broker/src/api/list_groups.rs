//! ListGroups, with the state (v4+) and type (v5+) filters.

use std::sync::Arc;

use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::{GroupId, ListGroupsRequest, ListGroupsResponse};

use super::str_bytes;
use crate::broker::Broker;
use crate::router::{Reply, RequestContext};

pub async fn handle(broker: &Arc<Broker>, ctx: &RequestContext, request: ListGroupsRequest) -> Reply<ListGroupsResponse> {
    let states: Vec<String> = request.states_filter.iter().map(|s| s.to_string()).collect();
    let types: Vec<String> = request.types_filter.iter().map(|s| s.to_string()).collect();
    let groups = broker
        .groups
        .list(&states, &types)
        .into_iter()
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
