//! DeleteRecords: advance a partition's log start offset (durably) and unlink what lies below.

use std::sync::Arc;

use kafka_protocol::messages::delete_records_response::{DeleteRecordsPartitionResult, DeleteRecordsTopicResult};
use kafka_protocol::messages::{DeleteRecordsRequest, DeleteRecordsResponse};

use super::access::{Op, Resource, check};
use super::led_partition;
use crate::broker::Broker;
use crate::router::{Reply, RequestContext};

pub async fn handle(broker: &Arc<Broker>, ctx: &RequestContext, request: DeleteRecordsRequest) -> Reply<DeleteRecordsResponse> {
    let topics = request
        .topics
        .into_iter()
        .map(|topic| {
            // Kafka: DELETE on the topic.
            let allowed = check(broker, ctx, Op::Delete, Resource::Topic, &topic.name);
            let partitions = topic
                .partitions
                .iter()
                .map(|p| {
                    let result = DeleteRecordsPartitionResult::default().with_partition_index(p.partition_index);
                    let deleted = allowed.and_then(|()| led_partition(broker, &topic.name.0, p.partition_index)).and_then(|led| {
                        led.partition.delete_records(p.offset).map_err(super::storage_error)
                    });
                    match deleted {
                        Ok(low_watermark) => result.with_low_watermark(low_watermark),
                        Err(e) => result.with_error_code(e.code()).with_low_watermark(-1),
                    }
                })
                .collect();
            DeleteRecordsTopicResult::default().with_name(topic.name).with_partitions(partitions)
        })
        .collect();
    Reply::Now(DeleteRecordsResponse::default().with_topics(topics))
}
