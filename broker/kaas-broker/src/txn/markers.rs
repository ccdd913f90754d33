//! The completion driver: writes a decided transaction's markers into each of its partitions
//! and settles its groups' pending offsets, retrying each until it lands, then moves the
//! transaction to CompleteCommit/CompleteAbort. Also the marker write that WriteTxnMarkers
//! (API 27) serves for other coordinators.
//!
//! NB: in cluster mode a partition led by another broker would need WriteTxnMarkers sent to
//! its leader; transactions are not offered in cluster mode yet (FindCoordinator says so), so
//! every partition of a transaction is led here or its write is retried until it is.

use std::sync::Arc;
use std::time::Duration;

use kaas_storage::{AppendOptions, Marker, MarkerKind};
use kafka_protocol::ResponseError as E;
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

use super::Completion;
use crate::api::led_partition;
use crate::broker::{Broker, now_ms};

const BACKOFF_START: Duration = Duration::from_millis(50);
const BACKOFF_MAX: Duration = Duration::from_secs(2);

/// Writes one marker into a partition this broker leads and waits until it is durable.
/// A deleted topic needs no marker (`Ok`).
pub async fn write_marker(
    broker: &Broker,
    topic: &str,
    partition: i32,
    marker: &Marker,
) -> Result<(), E> {
    let p = match led_partition(broker, topic, partition) {
        Ok(p) => p,
        Err(E::UnknownTopicOrPartition) => return Ok(()),
        Err(e) => return Err(e),
    };
    let options = AppendOptions {
        leader_epoch: p.leader_epoch(),
        now_ms: now_ms(),
    };
    let outcome = p
        .append_marker(marker, options)
        .map_err(crate::api::storage_error)?;
    p.wait_durable(outcome.last_offset)
        .await
        .map_err(crate::api::storage_error)
}

/// Starts the driver for `c` unless one is running for its transactional id already.
pub(crate) fn spawn_completion(broker: Arc<Broker>, c: Completion) -> Option<JoinHandle<()>> {
    if !broker.txns.start_driver(&c.transactional_id) {
        return None;
    }
    Some(tokio::spawn(async move {
        complete(&broker, &c).await;
        broker.txns.driver_done(&c.transactional_id);
    }))
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
    for (topic, partition) in &c.partitions {
        let written = retry(
            broker,
            c,
            &format!("marker for {topic}-{partition}"),
            || write_marker(broker, topic, *partition, &marker),
        )
        .await;
        if !written {
            return;
        }
    }
    for group in &c.groups {
        let settled = retry(broker, c, &format!("offsets of group {group}"), || {
            broker.groups.complete_txn(group, c.producer_id, c.commit)
        })
        .await;
        if !settled {
            return;
        }
    }
    let _ = retry(broker, c, "completion record", || async {
        broker.txns.finish(c).map_err(|e| e.response_error())
    })
    .await;
    info!(transactional_id = %c.transactional_id, producer_id = c.producer_id, epoch = c.producer_epoch, commit = c.commit, partitions = c.partitions.len(), coordinator_epoch = c.coordinator_epoch, "transaction completed");
}

/// Retries `step` with backoff until it succeeds (`true`) or the shard is no longer owned at
/// the completion's epoch (`false`: the new owner re-drives it).
async fn retry<F, Fut>(broker: &Broker, c: &Completion, what: &str, mut step: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), E>>,
{
    let mut backoff = BACKOFF_START;
    loop {
        if !broker.txns.still_owns(c) {
            info!(transactional_id = %c.transactional_id, coordinator_epoch = c.coordinator_epoch, what, "transaction shard changed hands; leaving the completion to its new owner");
            return false;
        }
        match step().await {
            Ok(()) => {
                debug!(transactional_id = %c.transactional_id, what, "written");
                return true;
            }
            Err(e) => {
                warn!(transactional_id = %c.transactional_id, producer_id = c.producer_id, coordinator_epoch = c.coordinator_epoch, what, error = ?e, "transaction completion step failed; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(BACKOFF_MAX);
            }
        }
    }
}
