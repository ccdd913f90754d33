//! TxnOffsetCommit: offsets committed inside a transaction, pending until it ends.

use std::sync::Arc;

use kafka_protocol::ResponseError;
use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::{TxnOffsetCommitRequest, TxnOffsetCommitResponse};

use super::access::{self, Op, Resource};
use crate::broker::Broker;
use crate::groups::{CommitOffset, TxnCommitRequest};
use crate::txn::GROUP_OFFSETS_TOPIC;
use crate::router::{Reply, RequestContext};

pub async fn handle(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    request: TxnOffsetCommitRequest,
) -> Reply<TxnOffsetCommitResponse> {
    let max_metadata = broker.groups.config().offset_metadata_max_bytes;
    let mut answers: Vec<(String, i32, Option<ResponseError>)> = Vec::new();
    let mut offsets = Vec::new();
    // Kafka: WRITE on the transactional id and READ on the group (or every partition is
    // refused), and READ on each topic.
    let request_refused = access::check(broker, ctx, Op::Write, Resource::TransactionalId, &request.transactional_id)
        .and_then(|()| access::check(broker, ctx, Op::Read, Resource::Group, &request.group_id))
        .err();
    for topic in &request.topics {
        let name = topic.name.to_string();
        let refused = request_refused.or_else(|| access::check(broker, ctx, Op::Read, Resource::Topic, &name).err());
        for p in &topic.partitions {
            let metadata = p
                .committed_metadata
                .as_ref()
                .map(|m| m.to_string())
                .unwrap_or_default();
            let error = if refused.is_some() {
                refused
            } else if broker.topics.partition(&name, p.partition_index).is_none() {
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
    // Transactions v1: the producer must have added the group to its transaction
    // (AddOffsetsToTxn) first: the transaction coordinator, here or on another broker, says
    // whether the group's shard is in its Ongoing transaction (Kafka's check of the
    // `__consumer_offsets` partition). Transactions v2 (v5+): the producer sends no
    // AddOffsetsToTxn, the commit adds the group itself.
    let id = request.transactional_id.to_string();
    let group_id = request.group_id.to_string();
    let producer = (request.producer_id.0, request.producer_epoch);
    let included = if request_refused.is_some() {
        Ok(())
    } else if ctx.version >= 5 {
        crate::txn::add_group_to_transaction(broker, &id, producer, &group_id).await
    } else {
        let shard = i32::try_from(kaas_coordinator::shard_of(&group_id)).unwrap_or(i32::MAX);
        let check = [((GROUP_OFFSETS_TOPIC.to_owned(), shard), producer)];
        crate::txn::include_in_transaction(broker, &id, &check, crate::txn::Inclusion::Verify)
            .await
            .pop()
            .unwrap_or(Err(ResponseError::CoordinatorNotAvailable))
    };
    let precheck = match included {
        Ok(()) => None,
        Err(ResponseError::NetworkException) => Some(ResponseError::CoordinatorNotAvailable),
        Err(e) => Some(e),
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
        None => Some(broker.groups.txn_commit(req).map_err(crate::error::group_error)),
    };
    Reply::Later(Box::pin(async move {
        let outcome = match commit {
            None => Ok(()),
            Some(Ok(durable)) => durable.await.map_err(crate::error::group_error),
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
