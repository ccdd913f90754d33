//! The share state of the partitions this broker leads: one [`SharePartitionLog`] per
//! partition, taken over at the partition's leader epoch the first time a share group uses the
//! partition under that epoch, and the two steps of ShareFetch and ShareAcknowledge on one
//! partition: [`deliver`] and [`acknowledge`].

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::ResponseError;
use kaas_coordinator::share_partition::store::{GroupStateRef, SharePartitionLog};
use kaas_coordinator::share_partition::{AckBatch, AckError, Acquired};
use kaas_shared::fs::FsRef;
use kaas_storage::{AbortedTxn, Partition, ReadBound};
use parking_lot::Mutex;

use super::sessions::SharePartitionKey;
use crate::group_configs::{OffsetReset, ShareGroupSettings};

/// The share logs of led partitions.
#[derive(Debug, Default)]
pub struct SharePartitions {
    logs: Mutex<HashMap<SharePartitionKey, Arc<SharePartitionLog>>>,
    /// One take-over at a time: two logs of one partition at one epoch would be two writers.
    opening: tokio::sync::Mutex<()>,
}

impl SharePartitions {
    /// The partition's share log at `epoch` (the epoch this broker leads it at), taken over if
    /// this broker has none at that epoch yet.
    pub async fn log(&self, fs: &FsRef, key: SharePartitionKey, partition: &Arc<Partition>, epoch: i32) -> Result<Arc<SharePartitionLog>, ResponseError> {
        if let Some(log) = self.current(&key, epoch) {
            return Ok(log);
        }
        let _opening = self.opening.lock().await;
        if let Some(log) = self.current(&key, epoch) {
            return Ok(log);
        }
        let (fs, dir) = (fs.clone(), partition.dir().to_path_buf());
        let taken = tokio::task::spawn_blocking(move || SharePartitionLog::take_over(fs, &dir, epoch)).await;
        let log = match taken {
            Ok(Ok(log)) => Arc::new(log),
            Ok(Err(e)) => {
                tracing::warn!(topic_id = %key.0, partition = key.1, epoch, error = %e, "taking over the partition's share-group state failed");
                return Err(match e {
                    kaas_coordinator::Error::Shard(s) if s.not_owner() => ResponseError::NotLeaderOrFollower,
                    _ => ResponseError::KafkaStorageError,
                });
            }
            Err(_) => return Err(ResponseError::UnknownServerError),
        };
        tracing::info!(topic_id = %key.0, partition = key.1, epoch, groups = log.group_ids().len(), "share-group state of the partition taken over");
        if let Some(old) = self.logs.lock().insert(key, log.clone()) {
            old.abandon();
        }
        Ok(log)
    }

    fn current(&self, key: &SharePartitionKey, epoch: i32) -> Option<Arc<SharePartitionLog>> {
        self.logs.lock().get(key).filter(|l| l.epoch() == epoch && l.is_owned()).cloned()
    }

    /// The partition's share log, whatever its epoch (to give a closed session's records back).
    pub fn existing(&self, key: &SharePartitionKey) -> Option<Arc<SharePartitionLog>> {
        self.logs.lock().get(key).cloned()
    }

    /// Drops the logs of partitions this broker no longer leads at their epoch (the new leader
    /// has taken them over, or will); nothing is written.
    pub fn retain(&self, led_at: impl Fn(&SharePartitionKey) -> Option<i32>) {
        let gone: Vec<Arc<SharePartitionLog>> = {
            let mut logs = self.logs.lock();
            let stale: Vec<SharePartitionKey> = logs.iter().filter(|(k, l)| led_at(k) != Some(l.epoch()) || !l.is_owned()).map(|(k, _)| *k).collect();
            stale.into_iter().filter_map(|k| logs.remove(&k)).collect()
        };
        for log in gone {
            log.abandon();
        }
    }

    /// Every share log (compaction).
    pub fn all(&self) -> Vec<Arc<SharePartitionLog>> {
        self.logs.lock().values().cloned().collect()
    }
}

/// What one partition delivered to a member.
#[derive(Debug, Default)]
pub struct Delivered {
    pub records: Bytes,
    pub acquired: Vec<Acquired>,
}

/// How much one partition may deliver.
#[derive(Debug, Clone, Copy)]
pub struct DeliveryBound {
    pub max_records: usize,
    pub max_bytes: usize,
    /// KIP-74: the first partition with data returns its first batch whole.
    pub first: bool,
    /// Reads touch files: run them on a blocking thread.
    pub blocking: bool,
}

/// Reads the group configs again and answers the group's `share.auto.offset.reset` (blocking).
pub type FreshReset = Box<dyn FnOnce() -> OffsetReset + Send>;

/// The group's state in the partition, started where `share.auto.offset.reset` says if it
/// has none. That setting is read afresh (`fresh_reset`): in a cluster the group configs are
/// the controller's file, which other brokers read again only every second, and a group's first
/// fetch commonly follows its `kafka-configs --alter` at once.
async fn group_state(log: &SharePartitionLog, partition: &Arc<Partition>, group: &str, fresh_reset: FreshReset) -> Result<GroupStateRef, ResponseError> {
    if let Some(state) = log.group(group) {
        return Ok(state);
    }
    let reset = tokio::task::spawn_blocking(fresh_reset).await.map_err(|_| ResponseError::UnknownServerError)?;
    let start = match reset {
        OffsetReset::Earliest => partition.log_start_offset(),
        OffsetReset::Latest => partition.high_watermark(),
        OffsetReset::ByDuration(d) => {
            let target = kaas_coordinator::clock::now_ms().saturating_sub(i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
            let p = partition.clone();
            match tokio::task::spawn_blocking(move || p.offset_for_timestamp(target)).await {
                Ok(Ok(Some((offset, _)))) => offset,
                Ok(Ok(None)) => partition.high_watermark(),
                _ => return Err(ResponseError::KafkaStorageError),
            }
        }
    };
    log.group_or_start(group, || start).ok_or(ResponseError::GroupMaxSizeReached)
}

/// Hands `member` the next records of the partition it may have: released or timed-out ones
/// first, then new ones, within the bound.
pub async fn deliver(log: &SharePartitionLog, partition: &Arc<Partition>, group: &str, member: &str, settings: &ShareGroupSettings, bound: DeliveryBound, fresh_reset: FreshReset) -> Result<Delivered, ResponseError> {
    let state = group_state(log, partition, group, fresh_reset).await?;
    // Held across the read: one delivery of this group's partition at a time, so what the read
    // finds is still what the state says when it is handed out.
    let mut st = state.lock().await;
    let now = std::time::Instant::now();
    st.follow_log_start(partition.log_start_offset());
    st.expire_locks(now, &settings.partition);
    let Some(from) = st.next_to_read(&settings.partition) else { return Ok(Delivered::default()) };
    let committed = settings.read_committed;
    let limit = if committed { partition.last_stable_offset() } else { partition.high_watermark() };
    if from >= limit {
        return Ok(Delivered::default());
    }
    let read_bound = ReadBound { max_bytes: bound.max_bytes, first_batch_whole: bound.first, piped: false };
    let read = if bound.blocking {
        let p = partition.clone();
        tokio::task::spawn_blocking(move || p.read_bounded(from, read_bound, committed)).await.map_err(|_| ResponseError::UnknownServerError)?
    } else {
        partition.read_bounded(from, read_bound, committed)
    };
    let read = match read {
        Ok(read) => read,
        // Retention moved the log start under us: the next fetch starts above it.
        Err(kaas_storage::Error::OffsetOutOfRange { .. }) => return Ok(Delivered::default()),
        Err(e) => return Err(crate::api::storage_error(e)),
    };
    let batches = Batches::of(&read.records, committed.then_some(&read.aborted_transactions[..]));
    let Some(covered) = batches.last_offset else { return Ok(Delivered::default()) };
    let acquired = st.acquire(member, from, covered, limit, bound.max_records, now, &settings.partition, &|o| batches.skipped(o));
    if acquired.is_empty() {
        return Ok(Delivered::default());
    }
    Ok(Delivered { records: read.records, acquired })
}

/// Applies a member's acknowledgements to the partition and appends the new state; the
/// answer is due once the returned sequence number is durable.
pub async fn acknowledge(log: &SharePartitionLog, group: &str, member: &str, batches: &[AckBatch], settings: &ShareGroupSettings) -> Result<u64, ResponseError> {
    let state = log.group(group).ok_or(ResponseError::InvalidRecordState)?;
    let mut st = state.lock().await;
    st.expire_locks(std::time::Instant::now(), &settings.partition);
    st.acknowledge(member, batches, std::time::Instant::now(), &settings.partition).map_err(|e| match e {
        AckError::InvalidRecordState => ResponseError::InvalidRecordState,
        AckError::InvalidRequest => ResponseError::InvalidRequest,
    })?;
    log.persist(group, &st).map_err(|e| if e.not_owner() { ResponseError::NotLeaderOrFollower } else { ResponseError::KafkaStorageError })
}

/// Gives back what `member` holds in the partition (its session ended); the new state is
/// appended without waiting (the next acknowledgement's fsync carries it).
pub async fn release(log: &SharePartitionLog, group: &str, member: &str, settings: &ShareGroupSettings) {
    let Some(state) = log.group(group) else { return };
    let mut st = state.lock().await;
    if st.release_member(member, &settings.partition)
        && let Err(e) = log.persist(group, &st)
    {
        tracing::debug!(group, error = %e, "recording released share records failed; the next acknowledgement records them");
    }
}

/// The batches a read returned: where they end, and which offsets nobody is to receive.
struct Batches {
    last_offset: Option<i64>,
    /// `(first, last)` offsets of control batches and aborted transactional batches.
    skipped: Vec<(i64, i64)>,
}

impl Batches {
    /// Walks the v2 batch headers (base offset @0, length @8, attributes @21, last offset
    /// delta @23, producer id @43).
    fn of(records: &[u8], aborted: Option<&[AbortedTxn]>) -> Batches {
        let mut out = Batches { last_offset: None, skipped: Vec::new() };
        let mut at = 0usize;
        let i64_at = |b: &[u8], i: usize| b.get(i..i + 8).and_then(|s| s.try_into().ok()).map(i64::from_be_bytes);
        let i32_at = |b: &[u8], i: usize| b.get(i..i + 4).and_then(|s| s.try_into().ok()).map(i32::from_be_bytes);
        let i16_at = |b: &[u8], i: usize| b.get(i..i + 2).and_then(|s| s.try_into().ok()).map(i16::from_be_bytes);
        while let (Some(base), Some(len)) = (i64_at(records, at), i32_at(records, at + 8)) {
            let Some(size) = usize::try_from(len).ok().map(|l| l + 12).filter(|s| at + s <= records.len() && *s >= 61) else { break };
            let (Some(attributes), Some(delta), Some(producer)) = (i16_at(records, at + 21), i32_at(records, at + 23), i64_at(records, at + 43)) else { break };
            let last = base + i64::from(delta);
            let control = attributes & 0x20 != 0;
            let transactional = attributes & 0x10 != 0;
            let is_aborted = transactional && aborted.is_some_and(|a| a.iter().any(|t| t.producer_id == producer && t.first_offset <= base && base <= t.last_offset));
            if control || is_aborted {
                out.skipped.push((base, last));
            }
            out.last_offset = Some(last);
            at += size;
        }
        out
    }

    fn skipped(&self, offset: i64) -> bool {
        self.skipped.iter().any(|&(first, last)| first <= offset && offset <= last)
    }
}

/// Moves the group's start in the partition to `offset` (clamped to the log), forgetting what
/// it had in flight (AlterShareGroupOffsets on an empty group); appends the new state.
pub async fn reset(log: &SharePartitionLog, partition: &Arc<Partition>, group: &str, offset: i64) -> Result<u64, ResponseError> {
    let start = offset.clamp(partition.log_start_offset(), partition.high_watermark());
    let state = log.group_or_start(group, || start).ok_or(ResponseError::GroupMaxSizeReached)?;
    let mut st = state.lock().await;
    st.reset(start);
    log.persist(group, &st).map_err(|e| if e.not_owner() { ResponseError::NotLeaderOrFollower } else { ResponseError::KafkaStorageError })
}

/// Forgets the group's state in the partition (DeleteShareGroupOffsets, DeleteGroups); the
/// sequence number to wait for, if there was any.
pub fn forget(log: &SharePartitionLog, group: &str) -> Result<Option<u64>, ResponseError> {
    if log.group(group).is_none() {
        return Ok(None);
    }
    log.delete(group).map(Some).map_err(|e| if e.not_owner() { ResponseError::NotLeaderOrFollower } else { ResponseError::KafkaStorageError })
}

/// The group's start offset in the partition (SPSO) and its lag, if it has state there. The
/// lag (KIP-1226) is what the group still owes of the log up to `end`: the offsets from the
/// start on, less those in flight whose delivery is complete.
pub async fn progress(log: &SharePartitionLog, group: &str, end: i64) -> Option<(i64, i64)> {
    let state = log.group(group)?;
    let state = state.lock().await;
    let start = state.start_offset();
    Some((start, (end - start - state.delivery_complete()).max(0)))
}
