//! The broker's side of transactions: the coordinator itself lives in `kaas-coordinator`
//! (re-exported here); this module writes its markers (`markers`: into partitions this broker
//! leads, or by WriteTxnMarkers to their leaders), routes requests about a transaction's parts
//! to the brokers the assignment places them on (`route`), asks a remote coordinator whether a
//! write is in a transaction or to add it (`verification`), and runs the loop that re-drives decided and
//! timed-out transactions.

mod markers;
pub(crate) mod route;
mod verification;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

pub use kaas_coordinator::txn::*;
use kaas_coordinator::shard_of;
pub use markers::write_marker;
use route::Route;

use crate::broker::{Broker, now_ms};

/// The broker as the transaction coordinator's host: its producer-id blocks and its marker
/// writer.
#[derive(Debug, Clone)]
pub struct Host(pub Arc<Broker>);

impl TxnHost for Host {
    fn allocate_producer_id(&self) -> Result<i64, String> {
        self.0.engine.producer_ids().allocate().map_err(|e| e.to_string())
    }

    fn complete(&self, c: Completion) -> Completing {
        markers::spawn_completion(self.0.clone(), c)
    }
}

/// A partition and the (producer id, epoch) of a transactional write to it.
pub(crate) type TxnWrite = ((String, i32), (i64, i16));

/// What a transactional write needs from its transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Inclusion {
    /// The partition must be in the Ongoing transaction already (transactions v1: the client
    /// added it with AddPartitionsToTxn; KIP-890 part 1's verification).
    Verify,
    /// The write adds it (transactions v2, Produce v12+: KIP-890 part 2's implicit add).
    Add,
}

/// Checks each of `partitions` (with the producer id and epoch writing to it) is in the
/// Ongoing transaction of `transactional_id`, or adds it (`Inclusion::Add`), asking its
/// coordinator wherever it is: here, or by AddPartitionsToTxn (`verify_only` for a check) to
/// its broker. Verdicts in order.
pub(crate) async fn include_in_transaction(
    broker: &Broker,
    transactional_id: &str,
    partitions: &[TxnWrite],
    inclusion: Inclusion,
) -> Vec<Result<(), kafka_protocol::ResponseError>> {
    match route::txn_coordinator(broker, shard_of(transactional_id)) {
        Route::Here if inclusion == Inclusion::Add => {
            let Some((_, producer)) = partitions.first() else { return Vec::new() };
            // One producer per request (see `verification::include_remotely`).
            let added: Vec<(String, i32)> = partitions.iter().filter(|(_, p)| p == producer).map(|(tp, _)| tp.clone()).collect();
            let outcome = broker.txns.add(transactional_id, producer.0, producer.1, &added, &[]).await.map_err(|e| crate::error::txn_error(&e));
            partitions
                .iter()
                .map(|(_, p)| if p == producer { outcome } else { Err(kafka_protocol::ResponseError::InvalidProducerIdMapping) })
                .collect()
        }
        Route::Here => partitions
            .iter()
            .map(|(partition, (producer_id, epoch))| {
                broker
                    .txns
                    .verify(transactional_id, *producer_id, *epoch, partition)
                    .map_err(|e| crate::error::txn_error(&e))
            })
            .collect(),
        Route::Peer(address) => {
            verification::include_remotely(broker, &address, transactional_id, partitions, inclusion).await
        }
        Route::Unreachable | Route::Unplaced => {
            vec![Err(kafka_protocol::ResponseError::CoordinatorNotAvailable); partitions.len()]
        }
    }
}

/// TxnOffsetCommit v5 (transactions v2): adds `group` to the producer's transaction, as
/// AddOffsetsToTxn did for v1 clients — here, or by AddOffsetsToTxn from this broker to the
/// coordinator's.
pub(crate) async fn add_group_to_transaction(
    broker: &Broker,
    transactional_id: &str,
    producer: (i64, i16),
    group: &str,
) -> Result<(), kafka_protocol::ResponseError> {
    match route::txn_coordinator(broker, shard_of(transactional_id)) {
        Route::Here => broker
            .txns
            .add(transactional_id, producer.0, producer.1, &[], &[group.to_owned()])
            .await
            .map_err(|e| crate::error::txn_error(&e)),
        Route::Peer(address) => verification::add_group_remotely(broker, &address, transactional_id, producer, group).await,
        Route::Unreachable | Route::Unplaced => Err(kafka_protocol::ResponseError::CoordinatorNotAvailable),
    }
}

impl Broker {
    /// Until `stop` fires: aborts timed-out transactions and completes every decided one that
    /// has no driver (found at startup or take-over, or whose driver gave up).
    pub async fn transactions_loop(self: Arc<Self>, mut stop: tokio::sync::watch::Receiver<bool>) {
        let mut tick = tokio::time::interval(Duration::from_millis(500));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = stop.changed() => return,
            }
            // Drivers in flight are not started twice (see `markers::spawn_completion`), so
            // this re-drives exactly the decided transactions nobody is completing.
            for c in self.txns.pending_completions(now_ms()).await {
                drop(markers::spawn_completion(self.clone(), c));
            }
        }
    }
}
