//! TxnOffsetCommit: offsets committed inside a transaction, pending until it ends.

use std::sync::Arc;

use kafka_protocol::ResponseError;
use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::{TxnOffsetCommitRequest, TxnOffsetCommitResponse};

use crate::broker::Broker;
use crate::groups::{CommitOffset, TxnCommitRequest};
use crate::router::{Reply, RequestContext};

pub async fn handle(
    broker: &Arc<Broker>,
    _ctx: &RequestContext,
    request: TxnOffsetCommitRequest,
) -> Reply<TxnOffsetCommitResponse> {
    let max_metadata = broker.groups.config().offset_metadata_max_bytes;
    let mut answers: Vec<(String, i32, Option<ResponseError>)> = Vec::new();
    let mut offsets = Vec::new();
    for topic in &request.topics {
        let name = topic.name.to_string();
        for p in &topic.partitions {
            let metadata = p
                .committed_metadata
                .as_ref()
                .map(|m| m.to_string())
                .unwrap_or_default();
            let error = if broker.topics.partition(&name, p.partition_index).is_none() {
                Some(ResponseError::UnknownTopicOrPartition)
            } else if metadata.len() > max_metadata {
                Some(ResponseError::OffsetMetadataTooLarge)
            } else {
                offsets.push(CommitOffset {
                    topic: name.clone(),
                    partition: p.partition_index,
                    offset: p.committed_offset,
                    leader_epoch: p.committed_leader_epoch,
                    metadata,
                });
                None
            };
            answers.push((name.clone(), p.partition_index, error));
        }
    }
    // The producer must have added the group to its transaction (AddOffsetsToTxn) first.
    let id = request.transactional_id.to_string();
    let group_id = request.group_id.to_string();
    let in_txn = broker
        .txns
        .describe(&id)
        .ok()
        .flatten()
        .filter(|m| m.producer_id == request.producer_id.0);
    let precheck = match in_txn {
        None => Some(ResponseError::InvalidProducerIdMapping),
        Some(m) if m.producer_epoch != request.producer_epoch => {
            Some(ResponseError::ProducerFenced)
        }
        Some(m) if !m.groups.contains(&group_id) => Some(ResponseError::InvalidTxnState),
        Some(_) => None,
    };
    let req = TxnCommitRequest {
        group_id,
        producer_id: request.producer_id.0,
        generation: request.generation_id,
        member_id: request.member_id.to_string(),
        instance_id: request.group_instance_id.map(|s| s.to_string()),
        offsets,
    };
    let commit = match precheck {
        Some(e) => Some(Err(e)),
        None if req.offsets.is_empty() => None,
        None => Some(broker.groups.txn_commit(req)),
    };
    Reply::Later(Box::pin(async move {
        let outcome = match commit {
            None => Ok(()),
            Some(Ok(durable)) => durable.await,
            Some(Err(e)) => Err(e),
        };
        let partitions = answers.into_iter().map(|(topic, partition, error)| {
            let error = error.or(outcome.err());
            (
                topic,
                TxnOffsetCommitResponsePartition::default()
                    .with_partition_index(partition)
                    .with_error_code(error.map_or(0, |e| e.code())),
            )
        });
        let topics = super::by_topic(partitions)
            .into_iter()
            .map(|(t, ps)| {
                TxnOffsetCommitResponseTopic::default()
                    .with_name(super::topic_name(t))
                    .with_partitions(ps)
            })
            .collect();
        TxnOffsetCommitResponse::default().with_topics(topics)
    }))
}
