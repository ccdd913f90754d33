//! OffsetCommit: partitions are checked against the topic registry, the rest is committed as
//! one durable log frame and answered after its fsync.

use std::sync::Arc;

use kafka_protocol::ResponseError;
use kafka_protocol::messages::offset_commit_response::{OffsetCommitResponsePartition, OffsetCommitResponseTopic};
use kafka_protocol::messages::{OffsetCommitRequest, OffsetCommitResponse};

use super::access::{Op, Resource, check};
use crate::broker::Broker;
use crate::error::group_error;
use crate::groups::{CommitOffset, CommitRequest};
use crate::router::{Reply, RequestContext};

pub async fn handle(broker: &Arc<Broker>, ctx: &RequestContext, request: OffsetCommitRequest) -> Reply<OffsetCommitResponse> {
    let max_metadata = broker.groups.config().offset_metadata_max_bytes;
    // (topic, partition, error decided up front)
    let mut answers: Vec<(String, i32, Option<ResponseError>)> = Vec::new();
    let mut offsets = Vec::new();
    // Kafka: READ on the group (or every partition is refused), and READ on each topic.
    let group_refused = check(broker, ctx, Op::Read, Resource::Group, &request.group_id).err();
    for topic in &request.topics {
        let name = topic.name.to_string();
        let refused = group_refused.or_else(|| check(broker, ctx, Op::Read, Resource::Topic, &name).err());
        for p in &topic.partitions {
            let metadata = p.committed_metadata.as_ref().map(|m| m.to_string()).unwrap_or_default();
            let error = if refused.is_some() {
                refused
            } else if broker.topics.partition(&name, p.partition_index).is_none() {
                Some(ResponseError::UnknownTopicOrPartition)
            } else if metadata.len() > max_metadata {
                Some(ResponseError::OffsetMetadataTooLarge)
            } else {
                offsets.push(CommitOffset { topic: name.clone(), partition: p.partition_index, offset: p.committed_offset, leader_epoch: p.committed_leader_epoch, metadata });
                None
            };
            answers.push((name.clone(), p.partition_index, error));
        }
    }
    let req = CommitRequest {
        group_id: request.group_id.to_string(),
        generation: request.generation_id_or_member_epoch,
        member_id: request.member_id.to_string(),
        instance_id: request.group_instance_id.map(|s| s.to_string()),
        retention_ms: if ctx.version <= 4 { request.retention_time_ms } else { -1 },
        offsets,
    };
    let commit = if req.offsets.is_empty() { None } else { Some(broker.groups.commit(req, ctx.version >= 9)) };
    Reply::Later(Box::pin(async move {
        let outcome = match commit {
            None => Ok(()),
            Some(Ok(durable)) => durable.await.map_err(group_error),
            Some(Err(e)) => Err(group_error(e)),
        };
        let partitions = answers.into_iter().map(|(topic, partition, error)| {
            let error = error.or(outcome.err());
            (topic, OffsetCommitResponsePartition::default().with_partition_index(partition).with_error_code(error.map_or(0, |e| e.code())))
        });
        let topics = super::by_topic(partitions).into_iter().map(|(t, ps)| OffsetCommitResponseTopic::default().with_name(super::topic_name(t)).with_partitions(ps)).collect();
        OffsetCommitResponse::default().with_topics(topics)
    }))
}
