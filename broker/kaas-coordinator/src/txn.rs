//! The transaction coordinator: transactional ids, their producer ids and epochs, and the
//! two-phase end of a transaction (Prepare → markers → Complete), with state kept in
//! transaction shards on the shared volume.
//!
//! Transactional ids are spread over [`kaas_coordinator::SHARD_COUNT`] shards by the same stable
//! hash as groups; each shard is a [`kaas_coordinator::ShardLog`] under
//! `__cluster/transactions/<shard>/` whose keys are transactional ids and whose values are
//! their [`TxnMetadata`] as JSON (the latest value wins, as in Kafka's compacted
//! `__transaction_state`). Local mode owns every shard.
//!
//! Seed 001, for this module:
//! 1. Atomic primitive: every transition is one appended, CRC-framed log entry (or part of a
//!    renamed snapshot); nothing is edited in place.
//! 2. Idempotent and re-driven: a transition is acknowledged only after its fsync. Ending a
//!    transaction is PrepareX (durable) → markers → CompleteX (durable); a take-over re-drives
//!    every transaction it finds in PrepareX, and writing a marker twice is harmless (the
//!    second finds no open transaction and changes no state).
//! 3. Single writer fenced by epoch: one owner per shard, the epoch in every shard file name;
//!    markers carry the shard epoch as coordinator epoch, and a completion driver stops as soon
//!    as its shard is no longer owned at the epoch it started under.
//!
//! The coordinator writes no marker itself: the broker it runs in does, through [`TxnHost`]
//! (its partitions, or WriteTxnMarkers to their leaders), and allocates its producer ids.

mod state;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::time::Duration;

use kaas_shared::fs::FsRef;
use kaas_shared::layout::Layout;
use parking_lot::{Mutex, MutexGuard};
use tracing::{info, warn};

pub use state::{
    EndOutcome, InitOutcome, MAX_TIMEOUT_MS, TxnError, TxnMetadata, TxnState, check_timeout,
};

use crate::clock::now_ms;
use crate::counted_mutex::CountedMutex;
use crate::shard_log::Error as ShardError;
use crate::shard_owner::ShardOwner;
use crate::{Entry, SHARD_COUNT, ShardLog, shard_of};

/// The topic a transaction names for a group shard (its partition is the shard), as Kafka's
/// transaction coordinator addresses group coordinators by `__consumer_offsets` partition.
pub const GROUP_OFFSETS_TOPIC: &str = "__consumer_offsets";

/// What the transaction coordinator needs from the broker it runs in.
pub trait TxnHost {
    /// A new producer id, unique in the cluster.
    fn allocate_producer_id(&self) -> Result<i64, String>;
    /// Starts the driver that writes `c`'s markers, settles its groups' offsets and then
    /// [`TxnCoordinator::finish`]es it — unless one runs for its transactional id already
    /// ([`TxnCoordinator::start_driver`] says); either way, that driver's completion.
    fn complete(&self, c: Completion) -> Completing;
}

/// A completion under way: the driver of one transactional id, started here or before.
#[derive(Debug)]
pub struct Completing(tokio::sync::watch::Receiver<()>);

impl Completing {
    /// Resolves when the driver is done (its sender dropped; nothing is ever sent).
    pub async fn done(mut self) {
        while self.0.changed().await.is_ok() {}
    }
}

/// How long EndTxn waits for the markers before answering anyway (the outcome is durable and
/// the completion continues in the background; the client sees CONCURRENT_TRANSACTIONS on its
/// next request until it is done).
const END_TXN_WAIT: Duration = Duration::from_secs(10);

/// One transaction shard: its log and the live metadata of its transactional ids.
///
/// The shard changes hands (take-over, relinquish, abandon) only while `txns` is locked, and
/// requests read the owned epoch under that lock: a request during a take-over waits for the
/// loaded state instead of finding an owned shard with nothing in it.
#[derive(Debug)]
struct TxnShard {
    log: ShardLog,
    txns: CountedMutex<HashMap<String, TxnMetadata>>,
}

type Txns<'a> = MutexGuard<'a, HashMap<String, TxnMetadata>>;

/// A transaction whose outcome is decided: what the completion driver writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion {
    pub transactional_id: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub commit: bool,
    pub partitions: Vec<(String, i32)>,
    pub groups: Vec<String>,
    /// The shard epoch the outcome was decided under (the markers' coordinator epoch).
    pub coordinator_epoch: i32,
}

impl ShardOwner for TxnCoordinator {
    const KIND: &'static str = "transaction";

    fn shard_log(&self, shard: u32) -> Option<&ShardLog> {
        Some(&self.shards.get(shard as usize)?.log)
    }

    /// Takes one shard over at `epoch` and loads its transactional ids. Transactions left in
    /// PrepareCommit/PrepareAbort are completed by [`TxnCoordinator::pending_completions`]'s
    /// driver. A record this build cannot read is an error: the shard is left unowned.
    fn take_over(&self, shard: u32, epoch: i32) -> crate::Result<()> {
        let s = self.shard(shard)?;
        let mut live = s.txns.lock();
        live.clear();
        let entries = s.log.take_over(epoch)?;
        let mut txns = HashMap::new();
        for e in entries {
            let Some(value) = e.value else { continue };
            let Ok(meta) = serde_json::from_slice::<TxnMetadata>(&value) else {
                s.log.relinquish().ok();
                return Err(crate::Error::UnreadableRecord {
                    what: "transaction",
                    key: e.key,
                    dir: s.log.dir().display().to_string(),
                });
            };
            txns.insert(e.key, meta);
        }
        let completing = txns.values().filter(|m| m.state.is_completing()).count();
        info!(
            shard,
            epoch,
            transactional_ids = txns.len(),
            completing,
            "transaction shard taken over"
        );
        *live = txns;
        Ok(())
    }

    fn relinquish(&self, shard: u32) -> crate::Result<()> {
        let s = self.shard(shard)?;
        let mut live = s.txns.lock();
        live.clear();
        Ok(s.log.relinquish()?)
    }

    #[cfg(any(test, feature = "testing"))]
    fn waited_on_shard(&self, shard: u32) -> usize {
        self.shard(shard).map_or(0, |s| s.log.waited() + s.txns.waited())
    }
}

/// The transaction coordinator of this broker.
#[derive(Debug)]
pub struct TxnCoordinator {
    shards: Vec<TxnShard>,
    /// Transactional ids with a completion driver running, each with the receiver that sees
    /// the driver's sender dropped when it is done.
    in_flight: Mutex<HashMap<String, tokio::sync::watch::Receiver<()>>>,
    /// Outcomes decided here, for `/metrics`.
    pub outcomes: TxnOutcomes,
}

/// How the transactions this broker coordinated ended. Clones share the counters.
#[derive(Debug, Clone, Default)]
pub struct TxnOutcomes {
    pub committed: prometheus_client::metrics::counter::Counter,
    pub aborted: prometheus_client::metrics::counter::Counter,
    /// Aborted by the coordinator after transaction.timeout.ms (also counted in `aborted`).
    pub timed_out: prometheus_client::metrics::counter::Counter,
}

impl TxnCoordinator {
    /// Opens every shard stat-only (no descriptors, nothing loaded).
    pub fn open(fs: FsRef, layout: &Layout) -> crate::Result<TxnCoordinator> {
        let shards = (0..SHARD_COUNT)
            .map(|s| {
                Ok(TxnShard {
                    log: ShardLog::open(fs.clone(), layout.txn_shard_dir(s))?,
                    txns: CountedMutex::default(),
                })
            })
            .collect::<crate::Result<Vec<_>>>()?;
        Ok(TxnCoordinator {
            shards,
            in_flight: Mutex::new(HashMap::new()),
            outcomes: TxnOutcomes::default(),
        })
    }

    /// Drops one shard without persisting anything.
    pub fn abandon(&self, shard: u32) -> crate::Result<()> {
        let s = self.shard(shard)?;
        let mut live = s.txns.lock();
        live.clear();
        s.log.abandon();
        Ok(())
    }

    /// Shutdown: relinquishes every owned shard.
    pub fn close(&self) {
        for shard in 0..SHARD_COUNT {
            if let Err(e) = self.relinquish(shard) {
                tracing::error!(shard, error = %e, "relinquishing a transaction shard failed; the next owner replays its log");
            }
        }
    }

    fn shard(&self, shard: u32) -> crate::Result<&TxnShard> {
        self.shards.get(shard as usize).ok_or(crate::Error::NoSuchShard { kind: "transaction", shard })
    }

    /// Whether this broker coordinates `transactional_id` now (FindCoordinator).
    pub fn coordinates(&self, transactional_id: &str) -> bool {
        self.shards[shard_of(transactional_id) as usize]
            .log
            .epoch()
            .is_some()
    }

    /// The shard of `transactional_id`, locked, and the epoch it is owned at; the ownership
    /// holds for as long as the guard.
    ///
    /// A shard whose write or fsync failed answers nothing (a retriable error) until a new
    /// take-over reloads it from the volume: its live state may hold a transition that never
    /// became durable — a PrepareCommit whose fsync failed — and acting on it (a marker, a
    /// verified produce) could commit what the volume will not remember.
    fn owned(&self, transactional_id: &str) -> Result<(&TxnShard, Txns<'_>, i32), TxnError> {
        let s = &self.shards[shard_of(transactional_id) as usize];
        let txns = s.txns.lock();
        let epoch = s.log.epoch().ok_or(TxnError::NotCoordinator)?;
        if let Some(reason) = s.log.storage_failure() {
            return Err(TxnError::Storage(reason));
        }
        Ok((s, txns, epoch))
    }

    /// Appends `meta` as the new value of `id`; returns the durability ticket.
    fn persist(shard: &TxnShard, id: &str, meta: &TxnMetadata) -> Result<u64, TxnError> {
        let value = serde_json::to_vec(meta).map_err(|e| TxnError::Storage(e.to_string()))?;
        shard
            .log
            .append(&[Entry::put(id, value)])
            .map_err(|e| shard_error(&e))
    }

    async fn durable(shard: &TxnShard, seq: u64) -> Result<(), TxnError> {
        shard
            .log
            .wait_durable(seq)
            .await
            .map_err(|e| shard_error(&e))
    }

    /// InitProducerId with a transactional id: `(producer id, epoch)` once durable.
    pub async fn init_producer_id(
        &self,
        host: &impl TxnHost,
        id: &str,
        timeout_ms: i32,
        expected: Option<(i64, i16)>,
    ) -> Result<(i64, i16), TxnError> {
        let timeout_ms = check_timeout(timeout_ms)?;
        let now = now_ms();
        let allocate = || host.allocate_producer_id().map_err(TxnError::ProducerIds);
        let (shard, seq, meta, outcome, epoch) = {
            let (shard, mut txns, epoch) = self.owned(id)?;
            let (meta, outcome) = match txns.get_mut(id) {
                None => (
                    TxnMetadata::new(allocate()?, timeout_ms, now),
                    InitOutcome::Ready,
                ),
                Some(m) => {
                    let mut next = m.clone();
                    let outcome = next.init(expected, timeout_ms, now)?;
                    if outcome == InitOutcome::NeedsNewProducerId {
                        next.rebind(allocate()?);
                    }
                    (next, outcome)
                }
            };
            let seq = Self::persist(shard, id, &meta)?;
            txns.insert(id.to_owned(), meta.clone());
            (shard, seq, meta, outcome, epoch)
        };
        Self::durable(shard, seq).await?;
        if outcome == InitOutcome::AbortFirst {
            info!(
                transactional_id = id,
                producer_id = meta.producer_id,
                epoch = meta.producer_epoch,
                "aborting the open transaction of a re-initialised producer"
            );
            drop(host.complete(completion(id, &meta, epoch)));
            return Err(TxnError::Concurrent("PrepareAbort"));
        }
        Ok((meta.producer_id, meta.producer_epoch))
    }

    /// AddPartitionsToTxn / AddOffsetsToTxn (groups): adds to the transaction, durably.
    pub async fn add(
        &self,
        id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partitions: &[(String, i32)],
        groups: &[String],
    ) -> Result<(), TxnError> {
        let (shard, seq) = {
            let (shard, mut txns, _) = self.owned(id)?;
            let meta = producer_txn(&mut txns, id, producer_id, producer_epoch)?;
            let mut next = meta.clone();
            if !next.add(partitions, groups, now_ms())? {
                return Ok(());
            }
            let seq = Self::persist(shard, id, &next)?;
            *meta = next;
            (shard, seq)
        };
        Self::durable(shard, seq).await
    }

    /// AddPartitionsToTxn v4 `verify_only`, the produce check and the TxnOffsetCommit check:
    /// every partition must be in the producer's Ongoing transaction. A partition of
    /// [`GROUP_OFFSETS_TOPIC`] stands for a group shard: some group of that shard must have been
    /// added (AddOffsetsToTxn).
    pub fn verify(
        &self,
        id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partition: &(String, i32),
    ) -> Result<(), TxnError> {
        let (_, mut txns, _) = self.owned(id)?;
        let meta = producer_txn(&mut txns, id, producer_id, producer_epoch)?;
        let included = if partition.0 == GROUP_OFFSETS_TOPIC {
            meta.groups.iter().any(|g| i32::try_from(shard_of(g)) == Ok(partition.1))
        } else {
            meta.partitions.contains(partition)
        };
        if meta.state != TxnState::Ongoing || !included {
            return Err(TxnError::InvalidState {
                request: "a transactional write to a partition not in the transaction",
                state: meta.state.name(),
            });
        }
        Ok(())
    }

    /// EndTxn: PrepareCommit/PrepareAbort made durable, then the markers; answers once they are
    /// written (or after [`END_TXN_WAIT`], the outcome being durable anyway). With `v2`
    /// (transactions v2, EndTxn v5+) the end bumps the producer's epoch
    /// ([`TxnMetadata::end_v2`]); the answer is the producer id and epoch the producer goes on
    /// with.
    pub async fn end_txn(
        &self,
        host: &impl TxnHost,
        id: &str,
        producer: (i64, i16),
        commit: bool,
        v2: bool,
    ) -> Result<(i64, i16), TxnError> {
        let (decided, continues_as) = self.prepare_end(host, id, producer, commit, v2).await?;
        let Some(decided) = decided else {
            return Ok(continues_as);
        };
        // NB: the transactions loop may have started this decision's driver already (it
        // re-drives every decided transaction): then this waits for that one.
        let completing = host.complete(decided);
        if tokio::time::timeout(END_TXN_WAIT, completing.done()).await.is_err() {
            warn!(
                transactional_id = id,
                producer_id = producer.0,
                commit,
                "markers not all written yet; answering EndTxn, the completion continues"
            );
        }
        Ok(continues_as)
    }

    /// EndTxn's first phase: the outcome, durable (`None` for a retry of a completed EndTxn),
    /// and the producer id and epoch the producer continues with.
    pub async fn prepare_end(
        &self,
        host: &impl TxnHost,
        id: &str,
        (producer_id, producer_epoch): (i64, i16),
        commit: bool,
        v2: bool,
    ) -> Result<(Option<Completion>, (i64, i16)), TxnError> {
        let (shard, seq, meta, epoch) = {
            let (shard, mut txns, epoch) = self.owned(id)?;
            let mut next = if v2 {
                // The epoch is checked by `end_v2`: a retry names the one before the bump.
                txns.get(id).ok_or(TxnError::ProducerIdMapping { found: producer_id, current: -1 })?.clone()
            } else {
                producer_txn(&mut txns, id, producer_id, producer_epoch)?.clone()
            };
            let outcome = if v2 {
                let allocate = || host.allocate_producer_id().map_err(TxnError::ProducerIds);
                next.end_v2(producer_id, producer_epoch, commit, now_ms(), allocate)?
            } else {
                next.end(commit, now_ms())?
            };
            if outcome == EndOutcome::AlreadyDone {
                return Ok((None, next.producer_after_end()));
            }
            let seq = Self::persist(shard, id, &next)?;
            txns.insert(id.to_owned(), next.clone());
            (shard, seq, next, epoch)
        };
        Self::durable(shard, seq).await?;
        if commit { &self.outcomes.committed } else { &self.outcomes.aborted }.inc();
        Ok((Some(completion(id, &meta, epoch)), meta.producer_after_end()))
    }

    /// The driver's last step: PrepareX → CompleteX. Nothing happens if the transaction moved
    /// on (another driver completed it) or the shard changed hands.
    ///
    /// NB: CompleteX is appended but not waited for. It needs no fsync of its own: if a crash
    /// loses it, the take-over finds PrepareX and writes the markers again (harmless), and any
    /// later transition of this id is fsynced after it in the same log. This saves one fsync
    /// per transaction on the commit path.
    pub fn finish(&self, c: &Completion) -> Result<(), TxnError> {
        let (shard, mut txns, epoch) = self.owned(&c.transactional_id)?;
        if epoch != c.coordinator_epoch {
            return Err(TxnError::NotCoordinator);
        }
        let Some(meta) = txns.get_mut(&c.transactional_id) else {
            return Ok(());
        };
        if (meta.producer_id, meta.producer_epoch) != (c.producer_id, c.producer_epoch) {
            return Ok(());
        }
        let mut next = meta.clone();
        if !next.complete(now_ms()) {
            return Ok(());
        }
        Self::persist(shard, &c.transactional_id, &next)?;
        *meta = next;
        Ok(())
    }

    /// Marks a driver for `id` as running and hands it the sender to drop when it is done,
    /// with its completion; if one already runs, `Err` with that driver's completion.
    pub fn start_driver(&self, id: &str) -> Result<(tokio::sync::watch::Sender<()>, Completing), Completing> {
        let mut in_flight = self.in_flight.lock();
        if let Some(running) = in_flight.get(id) {
            return Err(Completing(running.clone()));
        }
        let (done, watching) = tokio::sync::watch::channel(());
        in_flight.insert(id.to_owned(), watching.clone());
        Ok((done, Completing(watching)))
    }

    pub fn driver_done(&self, id: &str) {
        self.in_flight.lock().remove(id);
    }

    /// Whether `c`'s shard is still owned at the epoch its outcome was decided under, with a
    /// working log (see `owned`).
    pub fn still_owns(&self, c: &Completion) -> bool {
        self.owned(&c.transactional_id)
            .is_ok_and(|(_, _, epoch)| epoch == c.coordinator_epoch)
    }

    /// Every decided transaction of the owned shards (to re-drive after a take-over), and
    /// every Ongoing one past its timeout, moved to PrepareAbort with a bumped epoch (durable
    /// before returned).
    pub async fn pending_completions(&self, now: i64) -> Vec<Completion> {
        let mut out = Vec::new();
        for shard in &self.shards {
            let mut expired = Vec::new();
            let last_seq = {
                let mut txns = shard.txns.lock();
                let Some(epoch) = shard.log.epoch() else {
                    continue;
                };
                // Not from a failed log: see `owned`. The take-over that recovers it re-drives
                // whatever the volume says was decided.
                if shard.log.storage_failure().is_some() {
                    continue;
                }
                let mut last_seq = None;
                for (id, meta) in txns.iter_mut() {
                    if meta.expired(now) {
                        let mut next = meta.clone();
                        next.fence_and_abort(now);
                        match Self::persist(shard, id, &next) {
                            Ok(seq) => {
                                warn!(transactional_id = %id, producer_id = next.producer_id, epoch = next.producer_epoch, timeout_ms = next.timeout_ms, "transaction timed out; aborting it");
                                *meta = next;
                                last_seq = Some(seq);
                                expired.push(id.clone());
                            }
                            Err(e) => {
                                warn!(transactional_id = %id, error = %e, "cannot persist the abort of a timed-out transaction; retrying on the next tick")
                            }
                        }
                    }
                }
                let decided = txns.iter().filter(|(_, m)| m.state.is_completing());
                out.extend(decided.map(|(id, m)| completion(id, m, epoch)));
                last_seq
            };
            if let Some(seq) = last_seq {
                match Self::durable(shard, seq).await {
                    Ok(()) => {
                        self.outcomes.aborted.inc_by(expired.len() as u64);
                        self.outcomes.timed_out.inc_by(expired.len() as u64);
                    }
                    Err(e) => {
                        warn!(dir = %shard.log.dir().display(), error = %e, "aborts of timed-out transactions are not durable; not writing their markers");
                        out.retain(|c| !expired.contains(&c.transactional_id));
                    }
                }
            }
        }
        out
    }

    /// One transactional id's metadata (DescribeTransactions).
    pub fn describe(&self, id: &str) -> Result<Option<TxnMetadata>, TxnError> {
        let (_, txns, _) = self.owned(id)?;
        Ok(txns.get(id).cloned())
    }

    /// Every transactional id of the owned shards (ListTransactions).
    pub fn list(&self) -> Vec<(String, TxnMetadata)> {
        let mut out = Vec::new();
        for shard in &self.shards {
            out.extend(
                shard
                    .txns
                    .lock()
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone())),
            );
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }
}

/// The metadata of `id`, if the request's producer id and epoch are its current ones.
fn producer_txn<'a>(
    txns: &'a mut Txns<'_>,
    id: &str,
    producer_id: i64,
    producer_epoch: i16,
) -> Result<&'a mut TxnMetadata, TxnError> {
    let meta = txns.get_mut(id).ok_or(TxnError::ProducerIdMapping {
        found: producer_id,
        current: -1,
    })?;
    meta.check_producer(producer_id, producer_epoch)?;
    Ok(meta)
}

fn completion(id: &str, meta: &TxnMetadata, coordinator_epoch: i32) -> Completion {
    Completion {
        transactional_id: id.to_owned(),
        producer_id: meta.producer_id,
        producer_epoch: meta.producer_epoch,
        commit: meta.state == TxnState::PrepareCommit,
        partitions: meta.partitions.iter().cloned().collect(),
        groups: meta.groups.iter().cloned().collect(),
        coordinator_epoch,
    }
}

/// A shard log error as the transaction coordinator reports it: a shard this broker no longer
/// owns (handed over, or deposed by a newer owner) sends the client to the new coordinator.
fn shard_error(e: &ShardError) -> TxnError {
    match e {
        e if e.not_owner() => TxnError::NotCoordinator,
        other => TxnError::Storage(other.to_string()),
    }
}
