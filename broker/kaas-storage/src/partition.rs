//! One partition's log: the public API the broker drives. The work is split by concern into
//! `partition/` modules (take-over and recovery, append and roll, group commit, reads,
//! retention); this file holds the shared state and the role transitions.

mod append;
mod compaction;
mod durability;
mod listing;
mod read;
mod retention;
mod takeover;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use kaas_shared::fs::FsRef;
use parking_lot::{Mutex, MutexGuard, RwLock};
use tokio::sync::watch;
use uuid::Uuid;

use crate::config::LogConfig;
use crate::producer_state::ProducerStates;
use crate::segment::Segment;
use crate::{Error, Result, manifest, producer_snapshot};

pub use append::{AppendOptions, AppendOutcome};
pub use durability::Durable;
#[cfg(any(test, feature = "testing"))]
pub use compaction::CleanHook;
pub use compaction::{CleanReport, CleanStep, CleanerStats};
pub use read::{ReadBound, ReadOutcome};
pub use retention::Removed;
pub use takeover::TakeoverReport;

/// A partition of a topic. Only the leader (after [`Partition::take_over`]) holds descriptors,
/// writes and serves reads; otherwise the partition is known from file names and stats only.
#[derive(Debug)]
pub struct Partition {
    shared: Arc<Shared>,
}

impl Shared {
    /// Seed 000: a deleted and recreated topic gets a fresh directory at the same path, and a
    /// partition of the dead incarnation (a leader that has not yet heard of the delete) must
    /// never write into it. Every write by path (the take-over claim, a roll, DeleteRecords,
    /// the hand-over's manifest and producer snapshot) checks the topic directory's identity
    /// stamp first; writes through open descriptors land in the old incarnation's files.
    fn check_incarnation(&self) -> Result<()> {
        let topic_dir = self.dir.parent().unwrap_or(&self.dir);
        Ok(kaas_shared::identity::verify(&*self.fs, topic_dir, self.topic_id)?)
    }

    /// The partition directory held open, checked to be in this topic's incarnation through
    /// the topic directory it is in now: every name used through it is of this incarnation
    /// (a check by path, then an open by path, could open a recreated topic's directory).
    fn open_checked_dir(&self) -> Result<Box<dyn kaas_shared::fs::Dir + '_>> {
        let d = self.fs.open_dir(&self.dir).map_err(|e| Error::io("open dir", &self.dir, e))?;
        {
            let topic_dir = d.parent().map_err(|e| Error::io("open dir", self.dir.join(".."), e))?;
            kaas_shared::identity::verify_in(&*topic_dir, self.topic_id)?;
        }
        Ok(d)
    }
}

#[derive(Debug)]
struct Shared {
    fs: FsRef,
    dir: PathBuf,
    topic_id: Uuid,
    config: RwLock<LogConfig>,
    state: Mutex<State>,
    /// The high watermark, published to long-polling fetches and durability waiters. Also
    /// re-sent unchanged to wake waiters on poison and role changes.
    hwm: watch::Sender<i64>,
    /// The role and epoch, readable without the state lock (the same as `State::published`).
    role: Arc<PublishedRole>,
    /// Held by the cleaner pass running on this partition (one at a time).
    cleaning: Mutex<()>,
    faults: compaction::Faults,
}

/// Whether this engine leads the partition, and at which epoch, as of the last role change.
/// Every request's leadership check reads it without taking the state lock; what it says may
/// be a moment old, which is safe because every write re-checks under the lock
/// (`State::require_writable_at`) and a read of a log just handed over only serves bytes that
/// were durable.
#[derive(Debug, Default)]
struct PublishedRole {
    /// Leading (bit 32), poisoned (bit 33) and the epoch (the low 32 bits), in one word so
    /// they always agree.
    role: AtomicU64,
    /// `State::generation`: a durability wait accepts a high watermark of its own generation
    /// only (after a role change the offsets it waits for may hold other records).
    generation: AtomicU64,
}

impl PublishedRole {
    fn set(&self, leading: bool, poisoned: bool, epoch: i32, generation: u64) {
        self.generation.store(generation, Ordering::Release);
        let flags = u64::from(leading) | (u64::from(poisoned) << 1);
        self.role.store((flags << 32) | u64::from(epoch as u32), Ordering::Release);
    }

    /// Whether a storage failure keeps the log from taking writes.
    fn poisoned(&self) -> bool {
        (self.role.load(Ordering::Acquire) >> 33) & 1 == 1
    }

    /// (leading, epoch)
    fn get(&self) -> (bool, i32) {
        let packed = self.role.load(Ordering::Acquire);
        ((packed >> 32) & 1 == 1, packed as u32 as i32)
    }

    /// Whether `generation` is still the current one and the log takes writes: a durability
    /// waiter of it can count on the group commit it registered with.
    fn writable_in(&self, generation: u64) -> bool {
        let packed = self.role.load(Ordering::Acquire);
        (packed >> 32) & 3 == 1 && self.generation.load(Ordering::Acquire) == generation
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Follower,
    Leader,
    Abandoned,
}

#[derive(Debug)]
struct State {
    role: Role,
    leader_epoch: i32,
    /// `role` and `leader_epoch` for readers without the lock: published once a role change
    /// is complete (`State::publish_role`).
    published: Arc<PublishedRole>,
    /// The valid segment chain, ascending base offsets; the last one is active.
    segments: Vec<Segment>,
    log_start_offset: i64,
    log_end_offset: i64,
    high_watermark: i64,
    /// Set after a failed write or fsync: the log refuses writes until the next take_over.
    poisoned: Option<String>,
    /// This leader rewrote manifest.json after its take-over claim (DeleteRecords). A newer
    /// leader's claim may have been overwritten by that rename, so deposition is then also
    /// checked by the segment names (a new leader's segment carries its epoch and cannot be
    /// overwritten).
    rewrote_manifest: bool,
    producers: ProducerStates,
    /// Bumped by every role change, so a sync started under an older role changes nothing.
    generation: u64,
    /// The last generation that ended, and its high watermark then: what a durability waiter
    /// of that generation may still count on (a hand-over syncs everything before it ends).
    ended: Option<(u64, i64)>,
    sync_in_flight: bool,
    /// Highest offset a durability waiter needs.
    sync_wanted: i64,
    cleaner: compaction::CleanerState,
}

impl Partition {
    /// Stat-only open (see [`crate::Engine::open_partition`]).
    pub(crate) fn open(
        fs: FsRef,
        dir: PathBuf,
        topic_id: Uuid,
        config: LogConfig,
    ) -> Result<Partition> {
        // NB: a directory that cannot be listed as a log (a stray file, an I/O error) costs
        // this partition, never the broker: it opens unusable, with the reason, and every
        // take-over re-lists it, so it serves again once the directory is fixed.
        // Listed first and created only when missing: a broker opens every partition of every
        // topic at start, and on an NFS volume each path operation is round trips.
        let (listing, unusable) = match listing::list_existing(&*fs, &dir) {
            Ok(Some(listing)) => (listing, None),
            Ok(None) => {
                fs.create_dir_all(&dir)
                    .map_err(|e| Error::io("mkdir", &dir, e))?;
                (listing::Listing::empty(), None)
            }
            Err(e) => {
                tracing::error!(dir = %dir.display(), error = %e, "partition directory is not a readable log; the partition stays offline until it is fixed");
                (listing::Listing::empty(), Some(format!("unusable partition directory: {e}")))
            }
        };
        let first = listing.segments.first().map_or(0, |s| s.base_offset);
        let last = listing.segments.last().map_or(0, |s| s.base_offset);
        let published = Arc::new(PublishedRole::default());
        published.set(false, unusable.is_some(), listing.max_epoch, 0);
        let state = State {
            role: Role::Follower,
            leader_epoch: listing.max_epoch,
            published: published.clone(),
            segments: listing.segments,
            log_start_offset: first,
            log_end_offset: last,
            high_watermark: last,
            poisoned: unusable,
            rewrote_manifest: false,
            producers: ProducerStates::default(),
            generation: 0,
            ended: None,
            sync_in_flight: false,
            sync_wanted: -1,
            cleaner: compaction::CleanerState::default(),
        };
        let (hwm, _) = watch::channel(last);
        let shared = Shared {
            fs,
            dir,
            topic_id,
            config: RwLock::new(config),
            state: Mutex::new(state),
            hwm,
            role: published,
            cleaning: Mutex::new(()),
            faults: compaction::Faults::default(),
        };
        Ok(Partition {
            shared: Arc::new(shared),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.shared.state.lock()
    }

    /// The partition directory.
    pub fn dir(&self) -> &Path {
        &self.shared.dir
    }

    /// The topic identity this partition was opened for.
    pub fn topic_id(&self) -> Uuid {
        self.shared.topic_id
    }

    /// Why this partition refuses writes (a failed write or fsync, a directory that is not a
    /// readable log, a failed take-over), if it does; a new take_over (at the same epoch)
    /// re-runs recovery and clears it once the volume works.
    pub fn storage_failure(&self) -> Option<String> {
        self.lock().poisoned.clone()
    }

    /// Whether [`Partition::storage_failure`] has a reason, without the state lock: a take-over
    /// holds that lock across the volume's I/O, and the leadership check of every request and
    /// probe asks this of partitions that may be in the middle of one.
    pub fn has_storage_failure(&self) -> bool {
        self.shared.role.poisoned()
    }

    /// Whether this engine currently leads the partition (without the state lock: see
    /// `PublishedRole`).
    pub fn is_leader(&self) -> bool {
        self.shared.role.get().0
    }

    /// The current leader epoch (while following: the newest epoch seen in segment names);
    /// without the state lock.
    pub fn leader_epoch(&self) -> i32 {
        self.shared.role.get().1
    }

    /// The epoch this engine leads the partition at, if it leads it: one read, so the two
    /// always belong together.
    pub fn led_epoch(&self) -> Option<i32> {
        match self.shared.role.get() {
            (true, epoch) => Some(epoch),
            (false, _) => None,
        }
    }

    /// The fsynced end of the log: consumers see offsets below it.
    pub fn high_watermark(&self) -> i64 {
        self.lock().high_watermark
    }

    /// The last stable offset: the high watermark, or the first offset of the earliest
    /// transaction still open here if that is lower. read_committed consumers stop at it.
    pub fn last_stable_offset(&self) -> i64 {
        self.lock().last_stable_offset()
    }

    /// Every producer known to this partition, with its open transaction if any
    /// (DescribeProducers).
    pub fn producers(&self) -> Vec<crate::ProducerSummary> {
        self.lock().producers.summaries()
    }

    /// Whether `producer_id` at `epoch` has a transaction open here: its next transactional
    /// batch belongs to that transaction and needs no check with the coordinator.
    pub fn in_open_transaction(&self, producer_id: i64, epoch: i16) -> bool {
        self.lock().producers.in_open_txn(producer_id, epoch)
    }

    /// First readable offset.
    pub fn log_start_offset(&self) -> i64 {
        self.lock().log_start_offset
    }

    /// The offset the next append gets.
    pub fn log_end_offset(&self) -> i64 {
        self.lock().log_end_offset
    }

    /// A receiver that changes whenever the high watermark moves (and on role changes and
    /// storage failures): long-poll fetches wait on it.
    pub fn watch_high_watermark(&self) -> watch::Receiver<i64> {
        self.shared.hwm.subscribe()
    }

    /// Replaces the log configuration (takes effect for the next append / housekeeping).
    pub fn set_config(&self, config: LogConfig) {
        *self.shared.config.write() = config;
    }

    /// The current configuration.
    pub fn config(&self) -> LogConfig {
        *self.shared.config.read()
    }

    /// Bytes in the log's segments (stat sizes while following).
    pub fn size_bytes(&self) -> u64 {
        self.lock().segments.iter().map(|s| s.size).sum()
    }

    /// The log's segments, the active one included.
    pub fn segment_count(&self) -> usize {
        self.lock().segments.len()
    }

    /// The newest epoch recorded on the volume (manifest or segment names): a local lease shim
    /// takes over with one more than this.
    pub fn stored_epoch(&self) -> Result<i32> {
        Ok(kaas_shared::epochs::stored_partition_epoch(&*self.shared.fs, &self.shared.dir)?)
    }

    /// Leadership handover: fsyncs what was appended, persists the manifest and producer
    /// snapshot, and closes every descriptor. If the manifest on the volume already carries a
    /// higher epoch, a newer leader owns the partition: nothing is persisted, descriptors are
    /// still closed. Idempotent.
    pub fn relinquish(&self) -> Result<()> {
        let mut st = self.lock();
        if st.role != Role::Leader {
            return Ok(());
        }
        let result = self.persist_for_handover(&mut st);
        st.release(Role::Follower);
        drop(st);
        self.wake();
        result
    }

    /// Shutdown: the same as [`Partition::relinquish`].
    pub fn close(&self) -> Result<()> {
        self.relinquish()
    }

    /// Topic deleted: closes every descriptor and persists nothing (a late write would land the
    /// dead incarnation's state in a recreated topic's directory). The partition is unusable
    /// afterwards; open a new one.
    pub fn abandon(&self) {
        self.lock().release(Role::Abandoned);
        self.wake();
    }

    fn persist_for_handover(&self, st: &mut State) -> Result<()> {
        let (fs, dir) = (&*self.shared.fs, &*self.shared.dir);
        self.shared.check_incarnation()?;
        let on_disk = manifest::read(fs, dir)?;
        if on_disk.is_some_and(|m| m.epoch > st.leader_epoch) {
            tracing::info!(dir = %dir.display(), epoch = st.leader_epoch, "superseded by a newer leader; relinquishing without persisting");
            return Ok(());
        }
        if let Some(reason) = &st.poisoned {
            return Err(Error::StorageFailure(reason.clone()));
        }
        match st.sync_all_now(&self.shared) {
            Err(Error::FencedLeaderEpoch { current, .. }) => {
                tracing::info!(dir = %dir.display(), epoch = st.leader_epoch, newer = current, "superseded while relinquishing; the last writes are not acknowledged");
                return Ok(());
            }
            result => result?,
        }
        producer_snapshot::write(fs, dir, st.leader_epoch, st.log_end_offset, &st.producers)?;
        manifest::write(fs, dir, &st.manifest())
    }

    /// Wakes everything waiting on the watch channel so it re-checks the state.
    fn wake(&self) {
        let hwm = self.lock().high_watermark;
        self.shared.hwm.send_replace(hwm);
    }
}

impl State {
    fn last_stable_offset(&self) -> i64 {
        self.producers
            .txns
            .first_unstable_offset()
            .map_or(self.high_watermark, |f| f.min(self.high_watermark))
    }

    fn manifest(&self) -> manifest::Manifest {
        manifest::Manifest {
            epoch: self.leader_epoch,
            high_watermark: self.high_watermark,
            log_start_offset: self.log_start_offset,
            cleaned_up_to: self.cleaner.checkpoint(),
        }
    }

    /// Checks that this engine may serve the partition.
    fn require_leader(&self) -> Result<()> {
        match self.role {
            Role::Leader => Ok(()),
            Role::Follower => Err(Error::NotLeader),
            Role::Abandoned => Err(Error::Abandoned),
        }
    }

    /// Checks that this engine may write the partition.
    fn require_writable(&self) -> Result<()> {
        self.require_leader()?;
        match &self.poisoned {
            Some(reason) => Err(Error::StorageFailure(reason.clone())),
            None => Ok(()),
        }
    }

    fn poison(&mut self, reason: String) -> Error {
        tracing::error!(%reason, "partition storage failed; refusing writes until the next take_over");
        self.poisoned = Some(reason.clone());
        self.publish_role();
        Error::StorageFailure(reason)
    }

    /// Drops every descriptor and leaves the leader role.
    fn release(&mut self, role: Role) {
        for s in &mut self.segments {
            s.close();
        }
        self.role = role;
        self.ended = Some((self.generation, self.high_watermark));
        self.generation += 1;
        self.sync_in_flight = false;
        self.sync_wanted = -1;
        self.publish_role();
    }

    /// Makes the role, epoch and poisoning visible to lock-free readers; called once a change
    /// is complete (a take-over publishes only when it has succeeded).
    fn publish_role(&self) {
        self.published.set(self.role == Role::Leader, self.poisoned.is_some(), self.leader_epoch, self.generation);
    }
}
