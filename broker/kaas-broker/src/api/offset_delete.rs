//! OffsetDelete (KIP-496): drops committed offsets of partitions the group no longer consumes.

use std::sync::Arc;

use kafka_protocol::messages::offset_delete_response::{OffsetDeleteResponsePartition, OffsetDeleteResponseTopic};
use kafka_protocol::messages::{OffsetDeleteRequest, OffsetDeleteResponse};

use crate::broker::Broker;
use crate::router::{Reply, RequestContext};

pub async fn handle(broker: &Arc<Broker>, _ctx: &RequestContext, request: OffsetDeleteRequest) -> Reply<OffsetDeleteResponse> {
    let partitions: Vec<(String, i32)> = request.topics.iter().flat_map(|t| t.partitions.iter().map(move |p| (t.name.to_string(), p.partition_index))).collect();
    let groups = broker.groups.clone();
    let group_id = request.group_id.to_string();
    Reply::Later(Box::pin(async move {
        let errors = match groups.delete_offsets(&group_id, &partitions).await {
            Ok(errors) => errors,
            Err(e) => return OffsetDeleteResponse::default().with_error_code(e.code()),
        };
        let mut topics: Vec<OffsetDeleteResponseTopic> = Vec::new();
        for ((topic, partition), error) in partitions.into_iter().zip(errors) {
            let p = OffsetDeleteResponsePartition::default().with_partition_index(partition).with_error_code(error.map_or(0, |e| e.code()));
            match topics.last_mut() {
                Some(t) if t.name.0.as_str() == topic => t.partitions.push(p),
                _ => topics.push(OffsetDeleteResponseTopic::default().with_name(super::topic_name(topic)).with_partitions(vec![p])),
            }
        }
        OffsetDeleteResponse::default().with_topics(topics)
    }))
}
