//! OffsetDelete (KIP-496): drops committed offsets of partitions the group no longer consumes.

use std::sync::Arc;

use kafka_protocol::messages::offset_delete_response::{OffsetDeleteResponsePartition, OffsetDeleteResponseTopic};
use kafka_protocol::messages::{OffsetDeleteRequest, OffsetDeleteResponse};

use crate::error::GroupErrorCode;
use super::access::{Op, Resource, allowed, check};
use crate::broker::Broker;
use crate::router::{Reply, RequestContext};

pub async fn handle(broker: &Arc<Broker>, ctx: &RequestContext, request: OffsetDeleteRequest) -> Reply<OffsetDeleteResponse> {
    // Kafka: DELETE on the group, and READ on each topic (refused topics are not deleted).
    if let Err(e) = check(broker, ctx, Op::Delete, Resource::Group, &request.group_id) {
        return Reply::Now(OffsetDeleteResponse::default().with_error_code(e.code()));
    }
    let refused_topics: std::collections::HashSet<String> =
        request.topics.iter().map(|t| t.name.to_string()).filter(|t| !allowed(broker, ctx, Op::Read, Resource::Topic, t)).collect();
    let allowed_topics = request.topics.iter().filter(|t| !refused_topics.contains(t.name.as_str()));
    let partitions: Vec<(String, i32)> = allowed_topics.flat_map(|t| t.partitions.iter().map(move |p| (t.name.to_string(), p.partition_index))).collect();
    let groups = broker.groups.clone();
    let group_id = request.group_id.to_string();
    let refused_answer = refused_topics_answer(&request, &refused_topics);
    Reply::Later(Box::pin(async move {
        let errors = match groups.delete_offsets(&group_id, &partitions).await {
            Ok(errors) => errors,
            Err(e) => return OffsetDeleteResponse::default().with_error_code(e.code()),
        };
        let mut topics: Vec<OffsetDeleteResponseTopic> = refused_answer;
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

/// TOPIC_AUTHORIZATION_FAILED for every partition of the topics the principal may not read.
fn refused_topics_answer(request: &OffsetDeleteRequest, refused: &std::collections::HashSet<String>) -> Vec<OffsetDeleteResponseTopic> {
    request
        .topics
        .iter()
        .filter(|t| refused.contains(t.name.as_str()))
        .map(|t| {
            let code = kafka_protocol::ResponseError::TopicAuthorizationFailed.code();
            let partition = |p: &kafka_protocol::messages::offset_delete_request::OffsetDeleteRequestPartition| {
                OffsetDeleteResponsePartition::default().with_partition_index(p.partition_index).with_error_code(code)
            };
            let partitions = t.partitions.iter().map(partition).collect();
            OffsetDeleteResponseTopic::default().with_name(t.name.clone()).with_partitions(partitions)
        })
        .collect()
}
