//! DeleteGroups: empty groups only, each deletion durable before it is reported.

use std::sync::Arc;

use futures::future::join_all;
use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::{DeleteGroupsRequest, DeleteGroupsResponse};

use super::access::{Op, Resource, check};
use crate::broker::Broker;
use crate::error::group_error;
use crate::router::{Reply, RequestContext};

pub async fn handle(broker: &Arc<Broker>, ctx: &RequestContext, request: DeleteGroupsRequest) -> Reply<DeleteGroupsResponse> {
    let groups = broker.groups.clone();
    // Kafka: DELETE on each group.
    let wanted: Vec<_> =
        request.groups_names.into_iter().map(|id| (check(broker, ctx, Op::Delete, Resource::Group, &id).err(), id)).collect();
    Reply::Later(Box::pin(async move {
        let results = join_all(wanted.into_iter().map(|(refused, id)| {
            let groups = groups.clone();
            async move {
                let error = match refused {
                    Some(e) => Some(e),
                    None => groups.delete_group(&id).await.map(group_error),
                };
                DeletableGroupResult::default().with_group_id(id).with_error_code(error.map_or(0, |e| e.code()))
            }
        }))
        .await;
        DeleteGroupsResponse::default().with_results(results)
    }))
}
