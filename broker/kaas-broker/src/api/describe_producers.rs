//! DescribeProducers: per partition, the producers with an open transaction there and where it
//! started (what `kafka-transactions.sh describe-producers` and `find-hanging` read).

use std::sync::Arc;

use kafka_protocol::messages::describe_producers_response::{
    PartitionResponse, ProducerState, TopicResponse,
};
use kafka_protocol::messages::{DescribeProducersRequest, DescribeProducersResponse, ProducerId};

use super::access::{Op, Resource, check};
use super::{led_partition, str_bytes};
use crate::broker::Broker;
use crate::router::{Reply, RequestContext};

pub async fn handle(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    request: DescribeProducersRequest,
) -> Reply<DescribeProducersResponse> {
    let topics = request
        .topics
        .into_iter()
        .map(|t| {
            // Kafka: READ on the topic.
            let allowed = check(broker, ctx, Op::Read, Resource::Topic, &t.name);
            let partitions = t
                .partition_indexes
                .iter()
                .map(|&index| {
                    let answer = PartitionResponse::default().with_partition_index(index);
                    match allowed.and_then(|()| led_partition(broker, &t.name.0, index)) {
                        Err(e) => answer
                            .with_error_code(e.code())
                            .with_error_message(Some(str_bytes(e.to_string()))),
                        Ok(led) => answer.with_active_producers(
                            led.partition.producers()
                                .into_iter()
                                .map(|s| {
                                    ProducerState::default()
                                        .with_producer_id(ProducerId(s.producer_id))
                                        .with_producer_epoch(i32::from(s.epoch))
                                        .with_last_sequence(s.last_sequence)
                                        .with_last_timestamp(s.last_timestamp)
                                        .with_coordinator_epoch(s.coordinator_epoch)
                                        .with_current_txn_start_offset(
                                            s.txn_start_offset.unwrap_or(-1),
                                        )
                                })
                                .collect(),
                        ),
                    }
                })
                .collect();
            TopicResponse::default()
                .with_name(t.name)
                .with_partitions(partitions)
        })
        .collect();
    Reply::Now(DescribeProducersResponse::default().with_topics(topics))
}
