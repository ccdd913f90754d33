//! What the share-group offset APIs (DescribeShareGroupOffsets, AlterShareGroupOffsets,
//! DeleteShareGroupOffsets) share: the group check at its coordinator, and reaching the share
//! state of one partition of a topic named by name.

use std::sync::Arc;

use kafka_protocol::ResponseError;
use kaas_coordinator::share_partition::store::SharePartitionLog;

use super::access::{Op, Resource, check};
use crate::broker::Broker;
use crate::router::RequestContext;

/// A share group this broker coordinates: its topics with share state, and whether it is
/// empty. GROUP_ID_NOT_FOUND for an unknown group or one of another type.
pub(crate) fn share_group(broker: &Broker, group: &str) -> Result<(Vec<String>, bool), ResponseError> {
    match broker.groups.share_group_topics(group) {
        Ok(Some(found)) => Ok(found),
        Ok(None) => Err(ResponseError::GroupIdNotFound),
        Err(e) => Err(crate::error::group_error(e)),
    }
}

/// The share log of a partition this broker leads, by topic name, with the partition.
pub(crate) async fn led_share_log(broker: &Arc<Broker>, topic: &str, partition: i32) -> Result<(Arc<SharePartitionLog>, Arc<kaas_storage::Partition>), ResponseError> {
    let t = broker.topics.get(topic).ok_or(ResponseError::UnknownTopicOrPartition)?;
    let led = super::led_partition(broker, topic, partition)?;
    let log = broker.shares.partitions.log(broker.engine.fs(), (t.id, partition), &led.partition, led.epoch).await?;
    Ok((log, led.partition))
}

/// Kafka: DESCRIBE (or READ to change) on the group, and on each topic.
pub(crate) fn allowed(broker: &Broker, ctx: &RequestContext, op: Op, group: &str) -> Result<(), ResponseError> {
    check(broker, ctx, op, Resource::Group, group)
}

/// The group's share state in every partition of `topics` is forgotten (DeleteGroups,
/// DeleteShareGroupOffsets): here in the partitions this broker leads, and by the other
/// brokers that lead some (a DeleteShareGroupOffsets signed with the inter-broker key, which
/// they apply to their own partitions). The first error, if any.
pub(crate) async fn forget_everywhere(broker: &Arc<Broker>, group: &str, topics: &[String]) -> Result<(), ResponseError> {
    use kafka_protocol::messages::DeleteShareGroupOffsetsRequest;
    use kafka_protocol::messages::delete_share_group_offsets_request::DeleteShareGroupOffsetsRequestTopic;
    use crate::txn::route::{Route, partition_leader};
    let mut result = forget_group(broker, group, topics).await;
    let mut peers = std::collections::BTreeSet::new();
    for name in topics {
        let count = broker.topics.get(name).map_or(0, |t| t.partition_count());
        peers.extend((0..count).filter_map(|p| match partition_leader(broker, name, p) {
            Route::Peer(address) => Some(address),
            _ => None,
        }));
    }
    let request = DeleteShareGroupOffsetsRequest::default()
        .with_group_id(super::str_bytes(group).into())
        .with_topics(topics.iter().map(|t| DeleteShareGroupOffsetsRequestTopic::default().with_topic_name(super::str_bytes(t).into())).collect());
    for address in peers {
        let failed = match broker.interbroker.call(&address, 0, &request).await {
            Ok(r) => std::iter::once(r.error_code).chain(r.responses.iter().map(|t| t.error_code)).find(|c| *c != 0).and_then(ResponseError::try_from_code),
            Err(e) => {
                tracing::warn!(leader = %address, group, error = %e, "asking a partition leader to forget a share group's state failed");
                Some(ResponseError::LeaderNotAvailable)
            }
        };
        if let (Some(e), Ok(())) = (failed, &result) {
            result = Err(e);
        }
    }
    result
}

/// The group's share state in every partition of `topics` this broker leads is forgotten.
/// The first error, if any.
pub(crate) async fn forget_group(broker: &Arc<Broker>, group: &str, topics: &[String]) -> Result<(), ResponseError> {
    let mut first_error = None;
    for name in topics {
        let Some(topic) = broker.topics.get(name) else { continue };
        for p in 0..topic.partition_count() {
            let outcome = async {
                let (log, _) = led_share_log(broker, name, p).await?;
                if let Some(seq) = crate::share::partitions::forget(&log, group)? {
                    log.wait_durable(seq).await.map_err(|_| ResponseError::KafkaStorageError)?;
                }
                Ok::<(), ResponseError>(())
            }
            .await;
            match outcome {
                Err(ResponseError::NotLeaderOrFollower) | Ok(()) => {}
                Err(e) => first_error = first_error.or(Some(e)),
            }
        }
    }
    first_error.map_or(Ok(()), Err)
}
