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
    let broker = broker.clone();
    // Kafka: DELETE on each group.
    let wanted: Vec<_> =
        request.groups_names.into_iter().map(|id| (check(&broker, ctx, Op::Delete, Resource::Group, &id).err(), id)).collect();
    Reply::Later(Box::pin(async move {
        let results = join_all(wanted.into_iter().map(|(refused, id)| {
            let broker = broker.clone();
            async move {
                let error = match refused {
                    Some(e) => Some(e),
                    None => delete(&broker, &id).await,
                };
                DeletableGroupResult::default().with_group_id(id).with_error_code(error.map_or(0, |e| e.code()))
            }
        }))
        .await;
        DeleteGroupsResponse::default().with_results(results)
    }))
}

/// Deletes one group; a share group also forgets its share-partition state (in every
/// partition, asking the brokers that lead them) and, where this broker writes the file (local
/// mode, the controller), its group configs.
async fn delete(broker: &Arc<Broker>, id: &str) -> Option<kafka_protocol::ResponseError> {
    let share_topics = broker.groups.share_group_topics(id).ok().flatten().map(|(topics, _)| topics);
    if let Some(e) = broker.groups.delete_group(id).await {
        return Some(group_error(e));
    }
    if let Some(topics) = share_topics {
        if let Err(e) = super::share_group_offsets::forget_everywhere(broker, id, &topics).await {
            tracing::warn!(group = id, error = %e, "forgetting a deleted share group's partition state failed");
        }
        if let super::access::ClusterWriter::Here(epoch) = super::access::local_writer(broker) {
            let (b, group) = (broker.clone(), id.to_owned());
            let _ = tokio::task::spawn_blocking(move || b.group_configs.forget(&group, epoch)).await;
            broker.controller_files_written();
        }
    }
    None
}
