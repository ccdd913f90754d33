//! ListOffsets: earliest, latest, by timestamp, max timestamp.

use std::sync::Arc;

use kafka_protocol::ResponseError;
use kafka_protocol::messages::list_offsets_response::{ListOffsetsPartitionResponse, ListOffsetsTopicResponse};
use kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse};
use kaas_storage::Partition;

use super::access::{Op, Resource, check};
use super::{check_leader_epoch, led_partition};
use crate::broker::Broker;
use crate::router::{Reply, RequestContext};

const LATEST: i64 = -1;
const EARLIEST: i64 = -2;
const MAX_TIMESTAMP: i64 = -3;
const EARLIEST_LOCAL: i64 = -4;
const LATEST_TIERED: i64 = -5;

pub async fn handle(broker: &Arc<Broker>, ctx: &RequestContext, request: ListOffsetsRequest) -> Reply<ListOffsetsResponse> {
    let read_committed = request.isolation_level == 1;
    // The codec refuses a leader epoch below v4, where the field does not exist.
    let epoch_field = |epoch: i32| if ctx.version >= 4 { epoch } else { -1 };
    let topics = request
        .topics
        .into_iter()
        .map(|topic| {
            // Kafka: DESCRIBE on the topic.
            let allowed = check(broker, ctx, Op::Describe, Resource::Topic, &topic.name);
            let partitions = topic
                .partitions
                .iter()
                .map(|p| {
                    let response = ListOffsetsPartitionResponse::default().with_partition_index(p.partition_index);
                    let found = allowed
                        .and_then(|()| led_partition(broker, &topic.name.0, p.partition_index))
                        .and_then(|led| {
                            check_leader_epoch(led.epoch, p.current_leader_epoch)?;
                            lookup(&led.partition, p.timestamp, read_committed).map(|f| (f, led.epoch))
                        });
                    match found {
                        Ok(((offset, timestamp), epoch)) => {
                            response.with_offset(offset).with_timestamp(timestamp).with_leader_epoch(epoch_field(epoch))
                        }
                        Err(e) => response.with_error_code(e.code()).with_offset(-1).with_timestamp(-1),
                    }
                })
                .collect();
            ListOffsetsTopicResponse::default().with_name(topic.name).with_partitions(partitions)
        })
        .collect();
    Reply::Now(ListOffsetsResponse::default().with_topics(topics))
}

/// (offset, timestamp) for one query; -1/-1 where Kafka answers "none".
fn lookup(partition: &Partition, timestamp: i64, read_committed: bool) -> Result<(i64, i64), ResponseError> {
    // read_committed consumers end at the last stable offset (the first open transaction).
    Ok(match timestamp {
        LATEST if read_committed => (partition.last_stable_offset(), -1),
        LATEST => (partition.high_watermark(), -1),
        EARLIEST | EARLIEST_LOCAL => (partition.log_start_offset(), -1),
        LATEST_TIERED => (-1, -1),
        MAX_TIMESTAMP => partition.max_timestamp().map_err(super::storage_error)?.map_or((-1, -1), |(o, t)| (o, t)),
        t if t >= 0 => partition.offset_for_timestamp(t).map_err(super::storage_error)?.map_or((-1, -1), |(o, t)| (o, t)),
        _ => return Err(ResponseError::InvalidRequest),
    })
}
