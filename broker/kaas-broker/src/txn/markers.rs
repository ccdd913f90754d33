//! The completion driver: writes a decided transaction's markers into each of its partitions
//! and settles its groups' pending offsets, retrying each until it lands, then moves the
//! transaction to CompleteCommit/CompleteAbort. Also the marker write that WriteTxnMarkers
//! (API 27) serves for other coordinators.
//!
//! In a cluster, a partition led by another broker gets its marker by WriteTxnMarkers to that
//! leader's Kafka listener, and a group shard coordinated elsewhere gets it as a marker for
//! `__consumer_offsets` partition <shard> (as Kafka addresses the group coordinator). Every step
//! is re-routed on each retry, so a partition or shard that moves mid-completion is followed.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use kaas_storage::{AppendOptions, Marker, MarkerKind};
use kafka_protocol::ResponseError as E;
use kafka_protocol::messages::write_txn_markers_request::{WritableTxnMarker, WritableTxnMarkerTopic};
use kafka_protocol::messages::{ProducerId, TopicName, WriteTxnMarkersRequest};
use kafka_protocol::protocol::StrBytes;
use tracing::{debug, info, warn};

use super::{Completing, Completion, GROUP_OFFSETS_TOPIC};
use super::route::{self, Route};
use crate::api::led_partition;
use crate::broker::{Broker, now_ms};

const BACKOFF_START: Duration = Duration::from_millis(50);
const BACKOFF_MAX: Duration = Duration::from_secs(2);

/// Writes one marker into a partition this broker leads and waits until it is durable.
pub async fn write_marker(
    broker: &Broker,
    topic: &str,
    partition: i32,
    marker: &Marker,
) -> Result<(), E> {
    let led = led_partition(broker, topic, partition)?;
    let p = led.partition;
    let options = AppendOptions {
        leader_epoch: led.epoch,
        now_ms: now_ms(),
    };
    let outcome = p
        .append_marker(marker, options)
        .map_err(crate::api::storage_error)?;
    p.wait_durable(outcome.last_offset)
        .await
        .map_err(crate::api::storage_error)
}

/// Writes one marker wherever its partition is led: here, or by WriteTxnMarkers to its leader.
async fn deliver_marker(broker: &Broker, topic: &str, partition: i32, marker: &Marker) -> Result<(), E> {
    match route::partition_leader(broker, topic, partition) {
        Route::Unplaced => unplaced(broker, topic, partition),
        Route::Here => match write_marker(broker, topic, partition, marker).await {
            // Local mode: the registry is the truth, and a topic not in it was deleted. In a
            // cluster the registry may lag the assignment: retried until it catches up.
            Err(E::UnknownTopicOrPartition) if broker.cluster.is_none() => Ok(()),
            written => written,
        },
        // A leader that does not know the partition yet (or any more) answers
        // UNKNOWN_TOPIC_OR_PARTITION: retried, re-routed, until the assignment says.
        Route::Peer(address) => send_marker(broker, &address, topic, partition, marker).await,
        Route::Unreachable => Err(E::LeaderNotAvailable),
    }
}

/// What a marker for a partition this broker's applied assignment does not place comes to. A
/// partition the topic registry still has (AddPartitionsToTxn checked it there) is not placed
/// *yet*: this broker's assignment can lag the one its leader took it over by, while the
/// producer has already written to it — retried until the assignment places it, or the marker
/// would be skipped and the partition's last stable offset held below the transaction for ever.
/// One the registry no longer has was deleted, and a deleted partition needs no marker.
fn unplaced(broker: &Broker, topic: &str, partition: i32) -> Result<(), E> {
    match broker.topics.partition(topic, partition) {
        Some(_) => Err(E::LeaderNotAvailable),
        None => Ok(()),
    }
}

/// Commits or drops the transaction's pending offsets in one group shard, wherever it is
/// coordinated.
async fn settle_offsets(broker: &Broker, shard: u32, marker: &Marker) -> Result<(), E> {
    let commit = marker.kind == MarkerKind::Commit;
    match route::group_coordinator(broker, shard) {
        Route::Here => broker.groups.complete_txn_in_shard(shard, marker.producer_id, commit).await.map_err(crate::error::group_error),
        Route::Peer(address) => {
            let partition = i32::try_from(shard).map_err(|_| E::InvalidRequest)?;
            send_marker(broker, &address, GROUP_OFFSETS_TOPIC, partition, marker).await
        }
        Route::Unreachable | Route::Unplaced => Err(E::CoordinatorNotAvailable),
    }
}

/// WriteTxnMarkers for one partition to the broker at `address`.
async fn send_marker(broker: &Broker, address: &str, topic: &str, partition: i32, marker: &Marker) -> Result<(), E> {
    let request = WriteTxnMarkersRequest::default().with_markers(vec![
        WritableTxnMarker::default()
            .with_producer_id(ProducerId(marker.producer_id))
            .with_producer_epoch(marker.producer_epoch)
            .with_transaction_result(marker.kind == MarkerKind::Commit)
            .with_coordinator_epoch(marker.coordinator_epoch)
            .with_topics(vec![
                WritableTxnMarkerTopic::default()
                    .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
                    .with_partition_indexes(vec![partition]),
            ]),
    ]);
    let response = broker.interbroker.call(address, 1, &request).await.map_err(|e| {
        debug!(topic, partition, error = %e, "WriteTxnMarkers failed");
        E::NetworkException
    })?;
    let code = response
        .markers
        .iter()
        .flat_map(|m| &m.topics)
        .flat_map(|t| &t.partitions)
        .find(|p| p.partition_index == partition)
        .map(|p| p.error_code)
        .ok_or(E::UnknownServerError)?;
    E::try_from_code(code).map_or(Ok(()), Err)
}

/// Starts the driver for `c` unless one is running for its transactional id already; either
/// way, the driver's completion.
pub(crate) fn spawn_completion(broker: Arc<Broker>, c: Completion) -> Completing {
    match broker.txns.start_driver(&c.transactional_id) {
        Err(running) => running,
        Ok((done, completing)) => {
            tokio::spawn(async move {
                complete(&broker, &c).await;
                broker.txns.driver_done(&c.transactional_id);
                drop(done);
            });
            completing
        }
    }
}

async fn complete(broker: &Broker, c: &Completion) {
    let marker = Marker {
        producer_id: c.producer_id,
        producer_epoch: c.producer_epoch,
        kind: if c.commit {
            MarkerKind::Commit
        } else {
            MarkerKind::Abort
        },
        coordinator_epoch: c.coordinator_epoch,
    };
    // Every partition at once (each retried on its own): one slow leader delays the end of
    // the transaction, not the other markers.
    let markers = c.partitions.iter().map(|(topic, partition)| {
        retry(broker, c, format!("marker for {topic}-{partition}"), || {
            deliver_marker(broker, topic, *partition, &marker)
        })
    });
    if !join_all(markers).await.into_iter().all(|written| written) {
        return;
    }
    let shards: BTreeSet<u32> = c.groups.iter().map(|g| kaas_coordinator::shard_of(g)).collect();
    let marker = &marker;
    let settled = shards.into_iter().map(|shard| {
        retry(broker, c, format!("offsets in group shard {shard}"), move || {
            settle_offsets(broker, shard, marker)
        })
    });
    if !join_all(settled).await.into_iter().all(|done| done) {
        return;
    }
    let _ = retry(broker, c, "completion record".into(), || async {
        broker.txns.finish(c).map_err(|e| crate::error::txn_error(&e))
    })
    .await;
    info!(transactional_id = %c.transactional_id, producer_id = c.producer_id, epoch = c.producer_epoch, commit = c.commit, partitions = c.partitions.len(), coordinator_epoch = c.coordinator_epoch, "transaction completed");
}

/// Whether the applied assignment (cluster mode) places `c`'s shard elsewhere or at another
/// epoch: the shard is about to be relinquished, and the new owner re-drives the completion.
fn moved_away(broker: &Broker, c: &Completion) -> bool {
    let Some(cluster) = &broker.cluster else { return false };
    let shard = kaas_coordinator::shard_of(&c.transactional_id);
    let placed = cluster.view.current().transactions.get(&shard).copied();
    placed.is_none_or(|s| s.coordinator != broker.config.node_id || s.epoch != c.coordinator_epoch)
}

/// Retries `step` with backoff until it succeeds (`true`) or the shard is no longer owned at
/// the completion's epoch (`false`: the new owner re-drives it).
async fn retry<F, Fut>(broker: &Broker, c: &Completion, what: String, mut step: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), E>>,
{
    let mut backoff = BACKOFF_START;
    loop {
        if !broker.txns.still_owns(c) || moved_away(broker, c) {
            info!(transactional_id = %c.transactional_id, coordinator_epoch = c.coordinator_epoch, what, "transaction shard changed hands; leaving the completion to its new owner");
            return false;
        }
        if crate::api::fenced(broker) {
            // Cut off from the controller: maybe deposed already. Wait until it answers (and
            // the applied assignment says whether this broker still coordinates the shard).
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(BACKOFF_MAX);
            continue;
        }
        match step().await {
            Ok(()) => {
                debug!(transactional_id = %c.transactional_id, what, "written");
                return true;
            }
            Err(E::TransactionCoordinatorFenced) => {
                warn!(transactional_id = %c.transactional_id, coordinator_epoch = c.coordinator_epoch, what, "a newer transaction coordinator already wrote markers for this producer; this one is deposed and stops");
                return false;
            }
            Err(e) => {
                warn!(transactional_id = %c.transactional_id, producer_id = c.producer_id, coordinator_epoch = c.coordinator_epoch, what, error = ?e, "transaction completion step failed; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(BACKOFF_MAX);
            }
        }
    }
}

#[cfg(test)]
#[path = "markers_tests.rs"]
mod tests;
