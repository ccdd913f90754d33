//! AlterShareGroupOffsets: moves an empty share group's start in the named partitions
//! (`kafka-share-groups --reset-offsets`; a group that does not exist yet is created, as Kafka
//! does). The group's coordinator checks the group and moves the start in the partitions it
//! leads; the others' leaders get the same request, signed, on their inter-broker listener
//! (share state has one writer: the partition's leader). Durable before it is answered.

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::ResponseError;
use kafka_protocol::messages::alter_share_group_offsets_request::{AlterShareGroupOffsetsRequestPartition, AlterShareGroupOffsetsRequestTopic};
use kafka_protocol::messages::alter_share_group_offsets_response::{AlterShareGroupOffsetsResponsePartition, AlterShareGroupOffsetsResponseTopic};
use kafka_protocol::messages::{AlterShareGroupOffsetsRequest, AlterShareGroupOffsetsResponse, TopicName};

use super::access::Op;
use super::share_group_offsets::{allowed, led_share_log};
use super::str_bytes;
use crate::broker::Broker;
use crate::router::{Reply, RequestContext};
use crate::txn::route::{Route, partition_leader};

pub async fn handle(broker: &Arc<Broker>, ctx: &RequestContext, request: AlterShareGroupOffsetsRequest) -> Reply<AlterShareGroupOffsetsResponse> {
    let top = |e: ResponseError, message: String| Reply::Now(AlterShareGroupOffsetsResponse::default().with_error_code(e.code()).with_error_message(Some(str_bytes(message))));
    // From the group's coordinator: the group was checked there; move the partitions led here.
    let from_coordinator = broker.cluster.is_some() && crate::interbroker::from_a_broker(broker, ctx, &request);
    // Kafka: READ on the group.
    if !from_coordinator && let Err(e) = allowed(broker, ctx, Op::Read, &request.group_id) {
        return top(e, "not authorized to read the group".into());
    }
    let (broker, version) = (broker.clone(), ctx.version);
    Reply::Later(Box::pin(async move {
        let group = request.group_id.to_string();
        if !from_coordinator {
            let refuse = |e: ResponseError, message: String| AlterShareGroupOffsetsResponse::default().with_error_code(e.code()).with_error_message(Some(str_bytes(message)));
            match broker.groups.ensure_share_group(&group).await {
                Ok(true) => {}
                Ok(false) => return refuse(ResponseError::NonEmptyGroup, format!("share group {group} has members; offsets can be reset only while it is empty")),
                Err(e) => return refuse(crate::error::group_error(e), e.to_string()),
            }
            let names: Vec<String> = request.topics.iter().map(|t| t.topic_name.to_string()).collect();
            broker.groups.note_share_topics(&group, &names);
        }
        // (topic, partition) → the answer, and the partitions other brokers lead.
        let mut rows: BTreeMap<(String, i32), Result<(), ResponseError>> = BTreeMap::new();
        let mut elsewhere: BTreeMap<String, Vec<(String, AlterShareGroupOffsetsRequestPartition)>> = BTreeMap::new();
        for t in &request.topics {
            for p in &t.partitions {
                let key = (t.topic_name.to_string(), p.partition_index);
                match partition_leader(&broker, &t.topic_name, p.partition_index) {
                    Route::Peer(address) if !from_coordinator => elsewhere.entry(address).or_default().push((key.0.clone(), p.clone())),
                    Route::Unreachable | Route::Unplaced => drop(rows.insert(key, Err(ResponseError::LeaderNotAvailable))),
                    _ => drop(rows.insert(key, reset_here(&broker, &group, &t.topic_name, p).await)),
                }
            }
        }
        for (address, partitions) in elsewhere {
            rows.extend(forward(&broker, &address, version, &group, partitions).await);
        }
        let mut responses = Vec::with_capacity(request.topics.len());
        for t in request.topics {
            let topic_id = broker.topics.get(&t.topic_name).map_or(uuid::Uuid::nil(), |topic| topic.id);
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let row = AlterShareGroupOffsetsResponsePartition::default().with_partition_index(p.partition_index);
                    match rows.get(&(t.topic_name.to_string(), p.partition_index)).copied().unwrap_or(Err(ResponseError::UnknownServerError)) {
                        Ok(()) => row,
                        Err(e) => row.with_error_code(e.code()).with_error_message(Some(str_bytes(e.to_string()))),
                    }
                })
                .collect();
            responses.push(AlterShareGroupOffsetsResponseTopic::default().with_topic_name(t.topic_name).with_topic_id(topic_id).with_partitions(partitions));
        }
        AlterShareGroupOffsetsResponse::default().with_responses(responses)
    }))
}

/// Moves the group's start in a partition this broker leads, durably.
async fn reset_here(broker: &Arc<Broker>, group: &str, topic: &str, p: &AlterShareGroupOffsetsRequestPartition) -> Result<(), ResponseError> {
    let (log, partition) = led_share_log(broker, topic, p.partition_index).await?;
    let seq = crate::share::partitions::reset(&log, &partition, group, p.start_offset).await?;
    log.wait_durable(seq).await.map_err(|_| ResponseError::KafkaStorageError)
}

/// Asks the leader at `address` to move the start in its partitions.
async fn forward(broker: &Arc<Broker>, address: &str, version: i16, group: &str, partitions: Vec<(String, AlterShareGroupOffsetsRequestPartition)>) -> Vec<((String, i32), Result<(), ResponseError>)> {
    let mut by_topic: BTreeMap<String, Vec<AlterShareGroupOffsetsRequestPartition>> = BTreeMap::new();
    for (topic, p) in &partitions {
        by_topic.entry(topic.clone()).or_default().push(p.clone());
    }
    let topics = by_topic.into_iter().map(|(t, ps)| AlterShareGroupOffsetsRequestTopic::default().with_topic_name(TopicName(str_bytes(t))).with_partitions(ps)).collect();
    let request = AlterShareGroupOffsetsRequest::default().with_group_id(str_bytes(group).into()).with_topics(topics);
    match broker.interbroker.call(address, version, &request).await {
        Ok(response) => response
            .responses
            .iter()
            .flat_map(|t| t.partitions.iter().map(move |p| ((t.topic_name.to_string(), p.partition_index), if p.error_code == 0 { Ok(()) } else { Err(ResponseError::try_from_code(p.error_code).unwrap_or(ResponseError::UnknownServerError)) })))
            .collect(),
        Err(e) => {
            tracing::warn!(leader = address, error = %e, "asking a partition leader to move a share group's start failed");
            partitions.into_iter().map(|(t, p)| ((t, p.partition_index), Err(ResponseError::LeaderNotAvailable))).collect()
        }
    }
}
