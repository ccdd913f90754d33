//! One module per Kafka API. Each `handle` takes the decoded request and answers it against the
//! broker's state; shared lookups live here.

pub mod alter_configs;
pub mod api_versions;
pub mod create_partitions;
pub mod create_topics;
pub mod delete_records;
pub mod delete_topics;
pub mod describe_cluster;
pub mod describe_configs;
pub mod fetch;
pub mod incremental_alter_configs;
pub mod init_producer_id;
pub mod list_offsets;
pub mod metadata;
pub mod offset_for_leader_epoch;
pub mod produce;

use std::sync::Arc;

use kafka_protocol::ResponseError;
use kafka_protocol::messages::TopicName;
use kafka_protocol::protocol::StrBytes;
use kaas_storage::Partition;

use crate::broker::Broker;

/// A `StrBytes` from any string.
pub(crate) fn str_bytes(s: impl Into<String>) -> StrBytes {
    StrBytes::from_string(s.into())
}

/// A `TopicName` from any string.
pub(crate) fn topic_name(s: impl Into<String>) -> TopicName {
    TopicName(str_bytes(s))
}

/// The partition a request names, if this broker has and leads it.
pub(crate) fn led_partition(broker: &Broker, topic: &str, partition: i32) -> Result<Arc<Partition>, ResponseError> {
    let p = broker.topics.partition(topic, partition).ok_or(ResponseError::UnknownTopicOrPartition)?;
    if !p.is_leader() {
        return Err(ResponseError::NotLeaderOrFollower);
    }
    Ok(p)
}

/// Kafka's `current_leader_epoch` check (-1 means the client does not know an epoch).
pub(crate) fn check_leader_epoch(partition: &Partition, requested: i32) -> Result<(), ResponseError> {
    let current = partition.leader_epoch();
    match requested {
        -1 => Ok(()),
        e if e < current => Err(ResponseError::FencedLeaderEpoch),
        e if e > current => Err(ResponseError::UnknownLeaderEpoch),
        _ => Ok(()),
    }
}

/// The Kafka error of a storage error.
pub(crate) fn storage_error(e: kaas_storage::Error) -> ResponseError {
    crate::Error::from(e).response_error()
}
