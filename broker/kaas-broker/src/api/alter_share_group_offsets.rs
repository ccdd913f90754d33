//! AlterShareGroupOffsets: moves an empty share group's start in partitions this broker leads
//! (`kafka-share-groups --reset-offsets`; a group that does not exist yet is created, as Kafka
//! does); durable before it is answered.

use std::sync::Arc;

use kafka_protocol::ResponseError;
use kafka_protocol::messages::alter_share_group_offsets_response::{AlterShareGroupOffsetsResponsePartition, AlterShareGroupOffsetsResponseTopic};
use kafka_protocol::messages::{AlterShareGroupOffsetsRequest, AlterShareGroupOffsetsResponse};

use super::access::Op;
use super::share_group_offsets::{allowed, led_share_log};
use super::str_bytes;
use crate::broker::Broker;
use crate::router::{Reply, RequestContext};

pub async fn handle(broker: &Arc<Broker>, ctx: &RequestContext, request: AlterShareGroupOffsetsRequest) -> Reply<AlterShareGroupOffsetsResponse> {
    let top = |e: ResponseError, message: String| Reply::Now(AlterShareGroupOffsetsResponse::default().with_error_code(e.code()).with_error_message(Some(str_bytes(message))));
    // Kafka: READ on the group.
    if let Err(e) = allowed(broker, ctx, Op::Read, &request.group_id) {
        return top(e, "not authorized to read the group".into());
    }
    let broker = broker.clone();
    Reply::Later(Box::pin(async move {
        let group = request.group_id.to_string();
        let refuse = |e: ResponseError, message: String| AlterShareGroupOffsetsResponse::default().with_error_code(e.code()).with_error_message(Some(str_bytes(message)));
        match broker.groups.ensure_share_group(&group).await {
            Ok(true) => {}
            Ok(false) => return refuse(ResponseError::NonEmptyGroup, format!("share group {group} has members; offsets can be reset only while it is empty")),
            Err(e) => return refuse(crate::error::group_error(e), e.to_string()),
        }
        let mut responses = Vec::with_capacity(request.topics.len());
        for t in request.topics {
            let topic_id = broker.topics.get(&t.topic_name).map_or(uuid::Uuid::nil(), |topic| topic.id);
            let mut partitions = Vec::with_capacity(t.partitions.len());
            for p in t.partitions {
                let result = async {
                    let (log, partition) = led_share_log(&broker, &t.topic_name, p.partition_index).await?;
                    let seq = crate::share::partitions::reset(&log, &partition, &group, p.start_offset).await?;
                    log.wait_durable(seq).await.map_err(|_| ResponseError::KafkaStorageError)
                }
                .await;
                let row = AlterShareGroupOffsetsResponsePartition::default().with_partition_index(p.partition_index);
                partitions.push(match result {
                    Ok(()) => row,
                    Err(e) => row.with_error_code(e.code()).with_error_message(Some(str_bytes(e.to_string()))),
                });
            }
            broker.groups.note_share_topics(&group, std::slice::from_ref(&t.topic_name.to_string()));
            responses.push(AlterShareGroupOffsetsResponseTopic::default().with_topic_name(t.topic_name).with_topic_id(topic_id).with_partitions(partitions));
        }
        AlterShareGroupOffsetsResponse::default().with_responses(responses)
    }))
}
