//! OffsetForLeaderEpoch: where a leader epoch ended, for clients validating their position
//! after a leadership change (KIP-320).

use std::sync::Arc;

use kafka_protocol::messages::offset_for_leader_epoch_response::{EpochEndOffset, OffsetForLeaderTopicResult};
use kafka_protocol::messages::{OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse};

use super::access::{Op, Resource, check};
use super::{check_leader_epoch, led_partition};
use crate::broker::Broker;
use crate::router::{Reply, RequestContext};

pub async fn handle(broker: &Arc<Broker>, ctx: &RequestContext, request: OffsetForLeaderEpochRequest) -> Reply<OffsetForLeaderEpochResponse> {
    let topics = request
        .topics
        .into_iter()
        .map(|topic| {
            // Kafka: DESCRIBE on the topic.
            let allowed = check(broker, ctx, Op::Describe, Resource::Topic, &topic.topic);
            let partitions = topic
                .partitions
                .iter()
                .map(|p| {
                    let response = EpochEndOffset::default().with_partition(p.partition);
                    let found = allowed.and_then(|()| led_partition(broker, &topic.topic.0, p.partition)).and_then(|led| {
                        check_leader_epoch(led.epoch, p.current_leader_epoch)?;
                        led.partition
                            .end_offset_for_epoch(p.leader_epoch)
                            .map_err(super::storage_error)
                    });
                    match found {
                        Ok((epoch, end_offset)) => response.with_leader_epoch(epoch).with_end_offset(end_offset),
                        Err(e) => response.with_error_code(e.code()).with_leader_epoch(-1).with_end_offset(-1),
                    }
                })
                .collect();
            OffsetForLeaderTopicResult::default().with_topic(topic.topic).with_partitions(partitions)
        })
        .collect();
    Reply::Now(OffsetForLeaderEpochResponse::default().with_topics(topics))
}
