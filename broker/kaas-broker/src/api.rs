//! One module per Kafka API. Each `handle` takes the decoded request and answers it against the
//! broker's state; shared lookups live here.

pub(crate) mod access;
pub(crate) mod acl_codes;
pub mod add_offsets_to_txn;
pub mod add_partitions_to_txn;
pub mod alter_client_quotas;
pub mod alter_configs;
pub mod alter_share_group_offsets;
pub mod alter_user_scram_credentials;
pub mod api_versions;
pub mod consumer_group_describe;
pub mod consumer_group_heartbeat;
pub mod create_acls;
pub mod create_partitions;
pub mod create_topics;
pub mod delete_acls;
pub mod delete_groups;
pub mod delete_records;
pub mod delete_share_group_offsets;
pub mod delete_topics;
pub mod describe_acls;
pub mod describe_client_quotas;
pub mod describe_cluster;
pub mod describe_configs;
pub mod describe_groups;
pub mod describe_log_dirs;
pub mod describe_producers;
pub mod describe_share_group_offsets;
pub mod describe_topic_partitions;
pub mod describe_transactions;
pub mod describe_user_scram_credentials;
pub mod end_txn;
pub mod fetch;
pub mod find_coordinator;
pub mod heartbeat;
pub mod incremental_alter_configs;
pub mod init_producer_id;
pub mod join_group;
pub mod leave_group;
pub mod list_config_resources;
pub mod list_groups;
pub mod list_offsets;
pub mod list_transactions;
pub mod metadata;
pub mod offset_commit;
pub mod offset_delete;
pub mod offset_fetch;
pub mod offset_for_leader_epoch;
pub mod produce;
pub(crate) mod quota_use;
pub mod sasl_authenticate;
pub mod sasl_handshake;
pub mod share_acknowledge;
pub mod share_fetch;
pub mod share_group_describe;
pub mod share_group_heartbeat;
pub(crate) mod share_group_offsets;
pub mod sync_group;
pub mod txn_offset_commit;
pub mod write_txn_markers;

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

/// Groups `(topic, item)` pairs into one entry per run of the same topic, keeping the order
/// (responses list each request topic once, with its partitions).
pub(crate) fn by_topic<P>(items: impl IntoIterator<Item = (String, P)>) -> Vec<(String, Vec<P>)> {
    let mut out: Vec<(String, Vec<P>)> = Vec::new();
    for (topic, item) in items {
        match out.last_mut() {
            Some((t, items)) if *t == topic => items.push(item),
            _ => out.push((topic, vec![item])),
        }
    }
    out
}

/// A partition this broker leads, and the epoch it leads it at.
#[derive(Debug, Clone)]
pub(crate) struct Led {
    pub partition: Arc<Partition>,
    /// The leadership epoch by the authority: the assignment in a cluster, the local lease (the
    /// storage's own epoch) in local mode. Appends are made at this epoch, so a take-over at a
    /// newer one between this check and the append refuses them.
    pub epoch: i32,
}

/// The one leadership check (Produce, Fetch, ListOffsets, OffsetForLeaderEpoch, DeleteRecords,
/// DescribeProducers, transaction markers). In a cluster the applied assignment must name this
/// broker, and the storage must have been taken over at the assignment's epoch — a partition the
/// assignment moved away but not yet relinquished is refused, as is one not yet taken over. A
/// partition this broker should lead but cannot (its directory is not a readable log, its
/// take-over failed) answers KAFKA_STORAGE_ERROR, Kafka's answer for an offline log directory.
pub(crate) fn led_partition(broker: &Broker, topic: &str, partition: i32) -> Result<Led, ResponseError> {
    let p = broker.topics.partition(topic, partition).ok_or(ResponseError::UnknownTopicOrPartition)?;
    if fenced(broker) {
        return Err(ResponseError::NotLeaderOrFollower);
    }
    let epoch = match &broker.cluster {
        None => p.leader_epoch(),
        Some(cluster) => {
            let placed = cluster.view.current().partition(topic, partition).copied();
            match placed {
                Some(a) if a.leader == broker.config.node_id && a.topic_id == p.topic_id() => a.leader_epoch,
                _ => return Err(ResponseError::NotLeaderOrFollower),
            }
        }
    };
    if p.led_epoch() != Some(epoch) {
        return Err(if p.has_storage_failure() { ResponseError::KafkaStorageError } else { ResponseError::NotLeaderOrFollower });
    }
    Ok(Led { partition: p, epoch })
}

/// What the leadership check says of every partition this broker knows: (served, offline). A
/// partition is offline when this broker should lead it and cannot (KAFKA_STORAGE_ERROR).
pub(crate) fn leadership_counts(broker: &Broker) -> (usize, usize) {
    let (mut served, mut offline) = (0, 0);
    for topic in broker.topics.list() {
        for index in 0..topic.partition_count() {
            match led_partition(broker, &topic.name, index) {
                Ok(_) => served += 1,
                Err(ResponseError::KafkaStorageError) => offline += 1,
                Err(_) => {}
            }
        }
    }
    (served, offline)
}

#[cfg(test)]
pub(crate) mod leadership_tests;

/// A fenced broker (its heartbeat unacknowledged past the fence timeout) cannot know whether
/// it still leads: it neither acknowledges writes nor serves reads until the controller
/// answers again — by the time the controller moves its partitions it is already fenced.
pub(crate) fn fenced(broker: &Broker) -> bool {
    broker.cluster.as_ref().is_some_and(|c| c.view.write_fenced())
}

/// Kafka's `current_leader_epoch` check (-1 means the client does not know an epoch).
pub(crate) fn check_leader_epoch(current: i32, requested: i32) -> Result<(), ResponseError> {
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

/// How long a topic admin request may wait for its change to be served: the request's own
/// `timeout_ms` when positive, else the default.
pub(crate) fn admin_timeout(timeout_ms: i32) -> std::time::Duration {
    u64::try_from(timeout_ms)
        .ok()
        .filter(|ms| *ms > 0)
        .map_or(crate::topic_admin::DEFAULT_TIMEOUT, std::time::Duration::from_millis)
}
