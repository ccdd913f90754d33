//! The log cleaner's pass over one partition (`cleanup.policy=compact`), on the leader only.
//!
//! A pass (Kafka's `LogCleaner` for one log): under the lock, plan — which closed segments are
//! dirty (from the in-memory cleaner checkpoint to the first uncleanable offset: the active
//! segment, the last stable offset, `min.compaction.lag.ms`) and whether the dirty ratio or an
//! expired delete horizon calls for a clean; after it, whether `max.compaction.lag.ms` does
//! (that reads batch headers). Outside the lock,
//! map the dirty section's keys (bounded by the dedupe buffer: a section that does not fit is
//! cleaned as far as it fits), then rewrite the closed segments from the log start in groups
//! (consecutive, one epoch, at most segment.bytes): each group becomes one cleaned segment
//! under a temp name, its index files under theirs (all fsynced), then, under the lock again
//! and fenced by epoch, the swap: renames, one directory fsync and unlinks.
//!
//! The swap, by rename order (no new kind of file: a directory stays readable by brokers that
//! predate compaction). Group `[s_a .. s_b]` becomes one segment named like `s_a` holding the
//! kept batches of all of them:
//! 1. remove `s_a`'s index files (a log without index is rebuilt on use);
//! 2. rename the fsynced temp file over `s_a`'s log, fsync the directory;
//! 3. rename the new index files into place;
//! 4. unlink `s_{a+1}` .. `s_b`, ascending.
//!
//! A reader of a segment stops at the next segment's base offset, so after step 2 the new `s_a`
//! serves only offsets below the first old segment still present: at every step the log is the
//! old one or the complete result of cleaning a prefix of the group (`s_a .. s_k` with the same
//! offset map), never a later range cleaned over an earlier one left old (which could resurrect
//! a deleted key). A crash or a leadership move at any step leaves such a log; the next
//! leader's take-over removes an unfinished temp file (it is garbage by name), and its first
//! pass re-cleans the rest (from the checkpoint persisted in manifest.json at the last
//! hand-over or take-over, or from the log start).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use kaas_shared::fs::{File, OpenMode};
use kaas_shared::names::{SegmentFileKind, segment_file_name, temp_file_name};

use super::{Partition, Role, State};
use crate::batch::{self, BatchHeader, HEADER_LEN};
use crate::cleaner::{FilterContext, Filtered, OffsetMap, TxnTracker};
use crate::config::LogConfig;
use crate::scan::{BIG_CHUNK, Scanner, Step};
use crate::segment::Segment;
use crate::throttle::IoThrottle;
use crate::txn_index::AbortedTxn;
use crate::{Error, Result};

/// What the cleaner has done for one partition, for `/metrics`. Cumulative values count from
/// when this process started leading the partition's current incarnation.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CleanerStats {
    /// The share of the closed segments' bytes not yet cleaned, as of the cleaner's last look
    /// (Kafka's `max-dirty-percent` / 100 for one log).
    pub dirty_ratio: f64,
    /// When the last pass finished (ms since the Unix epoch).
    pub last_clean_ms: Option<i64>,
    /// Bytes of segments the passes read and rewrote.
    pub bytes_cleaned: u64,
    /// Bytes the passes removed (read minus written).
    pub bytes_removed: u64,
    /// Passes completed.
    pub passes: u64,
}

/// The outcome of one pass that cleaned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CleanReport {
    /// Everything below this offset is clean now (the cleaner checkpoint).
    pub clean_up_to: i64,
    /// Segments rewritten.
    pub segments: usize,
    /// Their bytes before.
    pub bytes_read: u64,
    /// Their bytes after.
    pub bytes_written: u64,
    /// Keys in the offset map (at most what the dedupe buffer holds).
    pub keys: usize,
}

/// The cleaner's bookkeeping in the partition state.
#[derive(Debug, Default)]
pub(super) struct CleanerState {
    /// Kafka's cleaner checkpoint: offsets below are clean. Persisted in manifest.json when
    /// the leader writes it (hand-over, take-over; not a new file: a new name in the partition
    /// directory is one older brokers refuse), so a leadership move by drain resumes where the
    /// last pass stopped; after a crash the next leader resumes from the last persisted one,
    /// or from the log start. Too low only costs work: a pass removes a record only for a
    /// newer one of its key, so re-cleaning a clean section changes nothing.
    first_dirty: Option<i64>,
    /// The earliest delete horizon of a tombstone or marker the last pass kept: a pass is due
    /// then even if the dirty ratio is low.
    next_horizon: Option<i64>,
    stats: CleanerStats,
}

impl CleanerState {
    /// A take-over: the log may have been cleaned (or grown) by another leader meanwhile; it
    /// resumes from the checkpoint that leader persisted (`None`: from the log start). The
    /// next delete horizon is not persisted: the first pass finds it again.
    pub(super) fn resume_from(&mut self, checkpoint: Option<i64>) {
        self.first_dirty = checkpoint;
        self.next_horizon = None;
    }

    /// The checkpoint to persist.
    pub(super) fn checkpoint(&self) -> Option<i64> {
        self.first_dirty
    }
}

/// A point of a clean's swap where a test may stop it as a crash would (see
/// [`Partition::set_clean_hook`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CleanStep {
    /// The cleaned segment and its index files are written and fsynced under temp names.
    TempWritten,
    /// The first old segment's index files are gone.
    OldIndexesRemoved,
    /// The cleaned segment has the first old segment's name (directory fsynced).
    Renamed,
    /// Its index files are renamed into place.
    IndexesWritten,
    /// One more old segment of the group is unlinked.
    Unlinked,
}

/// A test hook: returns `true` to stop the clean at that step, as a crash would.
#[cfg(any(test, feature = "testing"))]
pub type CleanHook = Arc<dyn Fn(CleanStep) -> bool + Send + Sync>;

/// Fault injection points of the cleaner, compiled in only for tests (STYLE: fault injection
/// only under a feature).
#[derive(Default)]
pub(super) struct Faults {
    #[cfg(any(test, feature = "testing"))]
    hook: parking_lot::Mutex<Option<CleanHook>>,
}

impl std::fmt::Debug for Faults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Faults").finish_non_exhaustive()
    }
}

impl Faults {
    #[cfg_attr(not(any(test, feature = "testing")), allow(clippy::unused_self))]
    fn crash_at(&self, step: CleanStep) -> Result<()> {
        #[cfg(any(test, feature = "testing"))]
        if self.hook.lock().clone().is_some_and(|hook| hook(step)) {
            return Err(Error::StorageFailure(format!("injected crash at {step:?}")));
        }
        let _ = step;
        Ok(())
    }
}

/// A closed segment as a pass reads it.
#[derive(Debug, Clone)]
struct Source {
    epoch: i32,
    base: i64,
    /// The next segment's base offset: batches at or past it are not this segment's.
    next_base: i64,
    /// Readable bytes (bounded, fsynced).
    size: u64,
    file: Arc<dyn File>,
}

/// What bounds a pass's I/O: the caller's stop flag and the broker's cleaner budget.
#[derive(Clone, Copy)]
struct Limits<'a> {
    stop: &'a dyn Fn() -> bool,
    throttle: &'a IoThrottle,
}

/// What a pass decided under the lock.
#[derive(Debug)]
struct Plan {
    generation: u64,
    first_dirty: i64,
    first_uncleanable: i64,
    /// An expired delete horizon calls for rewriting every cleanable segment.
    horizon_due: bool,
    /// Every closed segment, oldest first.
    sources: Vec<Source>,
    aborted: Vec<AbortedTxn>,
    last_of_producer: HashMap<i64, (Option<i64>, i16)>,
}

impl Partition {
    /// The cleaner statistics of this partition (see [`CleanerStats`]).
    pub fn cleaner_stats(&self) -> CleanerStats {
        self.lock().cleaner.stats
    }

    /// Test hook: stops the next cleans at the steps `hook` returns `true` for, as a crash
    /// would (nothing after that step runs, nothing is undone).
    #[cfg(any(test, feature = "testing"))]
    pub fn set_clean_hook(&self, hook: Option<CleanHook>) {
        *self.shared.faults.hook.lock() = hook;
    }

    /// One cleaner pass (see the module docs) if the topic is compacted, this engine leads the
    /// partition and a clean is due at `now_ms`. Returns what it cleaned, `None` if nothing was
    /// due. Blocking file I/O: call it off the async executor. A pass that races a role change
    /// or retention discards its work.
    pub fn clean(&self, now_ms: i64) -> Result<Option<CleanReport>> {
        self.clean_until(now_ms, &|| false)
    }

    /// [`Partition::clean`], given up (its unfinished segment discarded, `None` returned) as
    /// soon as `stop` says so: a broker shutting down does not wait for a long pass.
    pub fn clean_until(&self, now_ms: i64, stop: &dyn Fn() -> bool) -> Result<Option<CleanReport>> {
        static UNLIMITED: std::sync::LazyLock<IoThrottle> = std::sync::LazyLock::new(IoThrottle::unlimited);
        self.clean_throttled(now_ms, stop, &UNLIMITED)
    }

    /// [`Partition::clean_until`] within an I/O budget: every byte the pass reads or writes is
    /// taken from `throttle` (shared by all the broker's cleaner threads).
    pub fn clean_throttled(&self, now_ms: i64, stop: &dyn Fn() -> bool, throttle: &IoThrottle) -> Result<Option<CleanReport>> {
        let config = self.config();
        if !config.cleanup_compact {
            return Ok(None);
        }
        // One pass per partition at a time; a second caller has nothing to add.
        let Some(_pass) = self.shared.cleaning.try_lock() else { return Ok(None) };
        let Some(plan) = self.plan_clean(&config, now_ms)? else { return Ok(None) };
        let mut map = OffsetMap::new(config.cleaner_dedupe_buffer_bytes);
        let limits = Limits { stop, throttle };
        build_map(&plan, &mut map, limits)?;
        if stop() {
            return Ok(None);
        }
        let mapped_end = if map.latest_offset >= plan.first_dirty { map.latest_offset + 1 } else { plan.first_dirty };
        let limit = if plan.horizon_due { mapped_end.max(plan.first_uncleanable) } else { mapped_end };
        let ctx =
            FilterContext { map: &map, now_ms, delete_retention_ms: config.delete_retention_ms, last_of_producer: &plan.last_of_producer };
        let mut txns = TxnTracker::new(plan.aborted.clone());
        let mut report = CleanReport { clean_up_to: mapped_end, segments: 0, bytes_read: 0, bytes_written: 0, keys: map.len() };
        let mut next_horizon: Option<i64> = None;
        let cleanable: Vec<Source> = plan.sources.iter().filter(|s| s.base < limit).cloned().collect();
        for group in groups(&cleanable, config.effective_segment_bytes()) {
            let (written, horizon) = self.clean_group(&plan, group, &ctx, &mut txns, config.index_interval_bytes, limits)?;
            let Some(written) = written else {
                return Ok(None); // Stopped, or the log moved under the pass (role change, retention).
            };
            next_horizon = match (next_horizon, horizon) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            report.segments += group.len();
            report.bytes_read += group.iter().map(|s| s.size).sum::<u64>();
            report.bytes_written += written;
        }
        let mut st = self.lock();
        if st.generation == plan.generation {
            let cleaner = &mut st.cleaner;
            cleaner.first_dirty = Some(mapped_end);
            cleaner.next_horizon = next_horizon;
            cleaner.stats.last_clean_ms = Some(now_ms);
            cleaner.stats.bytes_cleaned += report.bytes_read;
            cleaner.stats.bytes_removed += report.bytes_read.saturating_sub(report.bytes_written);
            cleaner.stats.passes += 1;
        }
        drop(st);
        tracing::info!(dir = %self.shared.dir.display(), ?report, "cleaned");
        Ok(Some(report))
    }

    /// Decides whether a pass is due, and captures what it needs: under the lock, except the
    /// `max.compaction.lag.ms` check, which reads the first batch header of each dirty segment
    /// (a network round trip each on NFS) after the lock is released, so that appends never
    /// wait for it. The plan stays valid without the lock: the swap re-checks its generation.
    fn plan_clean(&self, config: &LogConfig, now_ms: i64) -> Result<Option<Plan>> {
        let Some((plan, due)) = self.plan_under_lock(config, now_ms)? else { return Ok(None) };
        if due || max_lag_exceeded(&plan.sources, plan.first_dirty, plan.first_uncleanable, config, now_ms)? {
            return Ok(Some(plan));
        }
        Ok(None)
    }

    /// The part of [`Partition::plan_clean`] that needs the lock (segments loaded a hold each, then
    /// one hold for the rest): the plan, and whether the dirty
    /// ratio or a delete horizon already calls for it (`None` when nothing can: no dirty bytes,
    /// or neither those nor a maximum compaction lag).
    fn plan_under_lock(&self, config: &LogConfig, now_ms: i64) -> Result<Option<(Plan, bool)>> {
        // Every closed segment is opened and its indexes read (housekeeping releases those
        // nobody touched, so a round may find hundreds unloaded, each a round trip or more on
        // NFS): one lock hold per segment, so that appends interleave with the loads. The
        // list may change between holds; the hold below loads whatever is still unloaded.
        let mut i = 0;
        loop {
            let mut st = self.lock();
            if st.role != Role::Leader || st.poisoned.is_some() {
                return Ok(None);
            }
            if i + 1 >= st.segments.len() {
                break;
            }
            st.ensure_loaded(&self.shared, i, config.index_interval_bytes)?;
            i += 1;
        }
        let mut st = self.lock();
        if st.role != Role::Leader || st.poisoned.is_some() {
            return Ok(None);
        }
        let closed = st.segments.len().saturating_sub(1);
        for i in 0..closed {
            st.ensure_loaded(&self.shared, i, config.index_interval_bytes)?;
        }
        let log_start = st.log_start_offset;
        let active_base = st.segments.last().map_or(st.log_end_offset, |s| s.base_offset);
        let first_dirty = st.cleaner.first_dirty.filter(|d| (log_start..=active_base).contains(d)).unwrap_or(log_start);
        let mut sources = Vec::with_capacity(closed);
        for i in 0..closed {
            let (s, next_base) = (&st.segments[i], st.segments[i + 1].base_offset);
            let file = s.file.clone().ok_or(Error::NotLeader)?;
            sources.push(Source { epoch: s.epoch, base: s.base_offset, next_base, size: s.readable(), file });
        }
        // The first uncleanable offset (Kafka's `firstUncleanableDirtyOffset`): never the
        // active segment, nothing a transaction may still abort, nothing younger than
        // min.compaction.lag.ms.
        let first_unstable = st.producers.txns.first_unstable_offset().unwrap_or(i64::MAX);
        let mut first_uncleanable = active_base.min(first_unstable).min(st.high_watermark);
        let dirty = |s: &&Source| s.next_base > first_dirty;
        if config.min_compaction_lag_ms > 0 {
            let cutoff = now_ms.saturating_sub(config.min_compaction_lag_ms);
            let young = sources
                .iter()
                .zip(&st.segments)
                .filter(|(s, _)| dirty(s))
                .find(|(_, seg)| seg.max_timestamp.is_some_and(|(ts, _)| ts > cutoff));
            if let Some((s, _)) = young {
                first_uncleanable = first_uncleanable.min(s.base);
            }
        }
        let clean_bytes: u64 = sources.iter().filter(|s| s.next_base <= first_dirty).map(|s| s.size).sum();
        let dirty_bytes: u64 = sources.iter().filter(dirty).filter(|s| s.next_base <= first_uncleanable).map(|s| s.size).sum();
        let total = clean_bytes + dirty_bytes;
        let ratio = if total == 0 { 0.0 } else { dirty_bytes as f64 / total as f64 };
        st.cleaner.stats.dirty_ratio = ratio;
        let horizon_due = st.cleaner.next_horizon.is_some_and(|h| h <= now_ms);
        let ratio_due = dirty_bytes > 0 && ratio >= config.min_cleanable_dirty_ratio;
        let lag_may_be_due = dirty_bytes > 0 && config.max_compaction_lag_ms != i64::MAX;
        if !(ratio_due || horizon_due || lag_may_be_due) {
            return Ok(None);
        }
        self.shared.check_incarnation()?;
        let last_of_producer =
            st.producers.entries().into_iter().map(|e| (e.producer_id, (e.batches.back().map(|b| b.last_offset), e.epoch))).collect();
        let plan = Plan {
            generation: st.generation,
            first_dirty,
            first_uncleanable,
            horizon_due,
            sources,
            aborted: st.producers.txns.aborted_between(log_start, i64::MAX),
            last_of_producer,
        };
        Ok(Some((plan, ratio_due || horizon_due)))
    }

    /// Writes one group's cleaned segment under a temp name and swaps it in. Returns the bytes
    /// written (`None` if the pass was stopped or the log changed under it, and the work was
    /// discarded) and the earliest delete horizon it kept.
    fn clean_group(
        &self,
        plan: &Plan,
        group: &[Source],
        ctx: &FilterContext<'_>,
        txns: &mut TxnTracker,
        interval: usize,
        limits: Limits<'_>,
    ) -> Result<(Option<u64>, Option<i64>)> {
        let Limits { stop, throttle } = limits;
        let (fs, dir) = (&*self.shared.fs, &*self.shared.dir);
        let first = &group[0];
        let target = segment_file_name(first.epoch, first.base, SegmentFileKind::Log)?;
        let temp = dir.join(temp_file_name(&target));
        // Q1: exclusive create of a temp name no one else uses; Q3: only this leader writes
        // it (its name is garbage to any take-over, which removes it).
        let file = fs.open(&temp, OpenMode::CreateNew).map_err(|e| Error::io("create", &temp, e))?;
        let mut cleaned = Segment::new_active(first.epoch, first.base, file.clone());
        let mut horizon: Option<i64> = None;
        let written = (|| -> Result<bool> {
            for source in group {
                let whole = for_each_batch(source, limits, |header, bytes| {
                    if stop() {
                        return Ok(false);
                    }
                    let (outcome, kept_horizon) = ctx.filter(header, bytes, txns)?;
                    if let Some(h) = kept_horizon {
                        horizon = Some(horizon.map_or(h, |x| x.min(h)));
                    }
                    let out: &[u8] = match &outcome {
                        Filtered::Drop => return Ok(true),
                        Filtered::Keep => bytes,
                        Filtered::Rewrite(b) => b,
                    };
                    let header = batch::parse_header(out)?;
                    let at = cleaned.size;
                    file.write_all_at(out, at).map_err(|e| Error::io("write", &temp, e))?;
                    throttle.take(out.len() as u64, stop);
                    cleaned.on_batch(at, &header, interval);
                    Ok(true)
                })?;
                if !whole {
                    return Ok(false);
                }
            }
            // fdatasync before the cleaned segment takes the old one's name: once renamed,
            // the old bytes are gone, and a crash must find every cleaned byte in their place.
            file.sync_data().map_err(|e| Error::io("fdatasync", &temp, e))?;
            Ok(true)
        })();
        match written {
            Ok(true) => {}
            Ok(false) => {
                discard(fs, &temp);
                return Ok((None, None));
            }
            Err(e) => {
                discard(fs, &temp);
                return Err(e);
            }
        }
        cleaned.synced = cleaned.size;
        // The index files too, under temp names, fsynced: the swap only renames them, so the
        // partition lock it holds covers no fsync of theirs.
        let indexes = fs
            .open_dir(dir)
            .map_err(|e| Error::io("open dir", dir, e))
            .and_then(|d| cleaned.stage_index_files(&*d));
        let staged = match indexes {
            Ok(staged) => {
                let indexes = staged.into_iter().map(|(temp, name)| (dir.join(temp), dir.join(name))).collect();
                Staged { log: temp, indexes }
            }
            Err(e) => {
                discard(fs, &temp);
                return Err(e);
            }
        };
        self.shared.faults.crash_at(CleanStep::TempWritten)?;
        let size = cleaned.size;
        Ok((self.swap(plan, group, cleaned, &staged)?.then_some(size), horizon))
    }

    /// The swap (see the module docs), under the lock. `false` if the group is no longer what
    /// the pass planned on (the temp file is then removed and nothing else changes).
    fn swap(&self, plan: &Plan, group: &[Source], cleaned: Segment, staged: &Staged) -> Result<bool> {
        let (fs, dir) = (&*self.shared.fs, &*self.shared.dir);
        let mut st = self.lock();
        let Some(at) = still_in_place(&st, plan, group) else {
            staged.discard(fs);
            return Ok(false);
        };
        // Q3: only this epoch's leader swaps, in this incarnation's directory.
        if let Err(e) = self.shared.check_incarnation().and_then(|()| self.fence(&mut st)) {
            staged.discard(fs);
            return Err(e);
        }
        // Our own descriptor and index mappings of the segment being replaced go first, so
        // the rename leaves no `.nfs` ghost behind (a read in flight keeps its handle, and
        // the ghost, until it finishes).
        st.segments[at].close();
        // Q1: unlinks, not atomic together; Q2: each is idempotent, and a log without its
        // index files is rebuilt on use, so a crash here leaves the old log, whole.
        for kind in [SegmentFileKind::Index, SegmentFileKind::TimeIndex] {
            let path = st.segments[at].path(dir, kind)?;
            match fs.remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    staged.discard(fs);
                    return Err(Error::io("unlink", path, e));
                }
            }
        }
        self.shared.faults.crash_at(CleanStep::OldIndexesRemoved)?;
        // Q1: one same-directory rename replaces the first segment's log: readers see the old
        // bytes or the cleaned ones, never a mix.
        let log = st.segments[at].path(dir, SegmentFileKind::Log)?;
        // NB: a failed rename may still have happened (a lost reply on NFS), and a failed
        // directory fsync leaves its durability unknown: either way the segment list no longer
        // says what the file holds, so the partition is poisoned (nothing served or written)
        // until a take-over reads the directory again, as after a failed fdatasync.
        if let Err(e) = fs.rename(&staged.log, &log) {
            staged.discard(fs);
            return Err(st.poison(format!("renaming a cleaned segment over {} failed: {e}", log.display())));
        }
        // fsync the directory before any old segment of the group is unlinked: a crash that
        // kept those unlinks but forgot the rename would lose their records.
        if let Err(e) = fs.sync_dir(dir) {
            staged.discard_indexes(fs);
            return Err(st.poison(format!("fsync of {} after a clean's rename failed: {e}", dir.display())));
        }
        // Until the rest of the group is gone, the segment is known by its stat only: loading
        // it bounds it by the next segment still present.
        st.segments[at] = Segment::from_stat(cleaned.epoch, cleaned.base_offset, cleaned.size);
        self.shared.faults.crash_at(CleanStep::Renamed)?;
        // Q1: each index file, written and fsynced under a temp name before the lock, is renamed
        // into place. Not followed by a directory fsync: index files are hints, and a crash that
        // forgets these renames leaves a log without index (rebuilt on use); the old index
        // files cannot come back, as their unlinks came before the fsync above.
        for (i, (temp, path)) in staged.indexes.iter().enumerate() {
            if let Err(e) = fs.rename(temp, path) {
                staged.indexes[i..].iter().for_each(|(temp, _)| discard(fs, temp));
                return Err(Error::io("rename", path, e));
            }
        }
        self.shared.faults.crash_at(CleanStep::IndexesWritten)?;
        // Q2: ascending unlinks; after each the log is a complete clean of a longer prefix of
        // the group, and an interrupted run is re-driven by the next pass.
        for _ in 1..group.len() {
            // Q3 again before each unlink: a new leader may have opened this file since.
            self.fence(&mut st)?;
            // Out of the list only once its files are gone: a failed unlink leaves a segment
            // the next pass cleans again, never a file this process no longer knows of.
            let old = &mut st.segments[at + 1];
            old.close();
            old.unlink(fs, dir)?;
            st.segments.remove(at + 1);
            self.shared.faults.crash_at(CleanStep::Unlinked)?;
        }
        st.segments[at] = cleaned;
        Ok(true)
    }
}

impl Partition {
    /// Fails (and leaves the leader role) if a newer leader has claimed the partition. Its
    /// claim is in the manifest (and its segment names) before it reads the log, so a step
    /// taken after this check finds no newer leader reading yet, or only one that lists the
    /// directory between the check and the step; every step leaves a valid log, so that
    /// leader reads a valid log. NB: the residual window (between a check and its step) is
    /// the one retention has: a new leader that opened a file the step then replaces or
    /// unlinks gets ESTALE reading it on NFS.
    fn fence(&self, st: &mut State) -> Result<()> {
        let Some(current) = super::durability::newer_epoch_on_disk(&self.shared, st.leader_epoch, true)? else {
            return Ok(());
        };
        let requested = st.leader_epoch;
        tracing::info!(dir = %self.shared.dir.display(), epoch = requested, newer = current, reason = "a newer leader took over", "deposed: stopping a clean");
        st.release(Role::Follower);
        Err(Error::FencedLeaderEpoch { requested, current })
    }
}

/// Where the group starts in the segment list, if every segment of it is still there, in
/// order, none of them active, and the partition is still led as when the pass was planned.
fn still_in_place(st: &State, plan: &Plan, group: &[Source]) -> Option<usize> {
    if st.generation != plan.generation || st.role != Role::Leader || st.poisoned.is_some() {
        return None;
    }
    let at = st.segments.iter().position(|s| s.base_offset == group[0].base && s.epoch == group[0].epoch)?;
    let same =
        group.iter().enumerate().all(|(k, g)| st.segments.get(at + k).is_some_and(|s| s.base_offset == g.base && s.epoch == g.epoch));
    (same && at + group.len() < st.segments.len()).then_some(at)
}

/// A cleaned segment's files under their temp names, fsynced, waiting for the swap.
struct Staged {
    log: std::path::PathBuf,
    /// (temp, final) of the index files.
    indexes: Vec<(std::path::PathBuf, std::path::PathBuf)>,
}

impl Staged {
    fn discard(&self, fs: &dyn kaas_shared::fs::Fs) {
        discard(fs, &self.log);
        self.discard_indexes(fs);
    }

    fn discard_indexes(&self, fs: &dyn kaas_shared::fs::Fs) {
        self.indexes.iter().for_each(|(temp, _)| discard(fs, temp));
    }
}

/// Removes a temp file of a discarded clean. NB: if this fails the file stays until the next
/// take-over, which removes every temp name it lists; nothing reads it meanwhile.
fn discard(fs: &dyn kaas_shared::fs::Fs, temp: &Path) {
    if let Err(e) = fs.remove_file(temp) {
        tracing::warn!(path = %temp.display(), error = %e, "cannot remove a discarded clean's temp file; the next take-over removes it");
    }
}

/// Maps the dirty section `[first_dirty, first_uncleanable)` until the map is full.
fn build_map(plan: &Plan, map: &mut OffsetMap, limits: Limits<'_>) -> Result<()> {
    // The aborted transactions the dirty section overlaps (Kafka's collectAbortedTransactions).
    let aborted = plan.aborted.iter().filter(|a| a.last_offset >= plan.first_dirty).copied().collect();
    let mut txns = TxnTracker::new(aborted);
    for source in plan.sources.iter().filter(|s| s.next_base > plan.first_dirty) {
        let more = for_each_batch(source, limits, |header, bytes| {
            if header.last_offset() >= plan.first_uncleanable || (limits.stop)() {
                return Ok(false);
            }
            map.map_batch(header, bytes, plan.first_dirty, &mut txns)
        })?;
        if !more {
            break;
        }
    }
    Ok(())
}

/// Calls `f` with every batch of a closed segment (header and whole bytes), in order, while it
/// returns `true`; returns whether it always did. Each batch read is taken from the budget.
fn for_each_batch(source: &Source, limits: Limits<'_>, mut f: impl FnMut(&BatchHeader, &[u8]) -> Result<bool>) -> Result<bool> {
    let mut scan = Scanner::new(&*source.file, 0, source.size, false, BIG_CHUNK);
    let mut bytes = Vec::new();
    loop {
        match scan.next_step().map_err(|e| Error::io("read", "segment", e))? {
            Step::Batch { pos, header } if header.base_offset < source.next_base => {
                bytes.resize(header.size, 0);
                source.file.read_exact_at(&mut bytes, pos).map_err(|e| Error::io("read", "segment", e))?;
                limits.throttle.take(bytes.len() as u64, limits.stop);
                if !f(&header, &bytes)? {
                    return Ok(false);
                }
            }
            _ => return Ok(true),
        }
    }
}

/// Whether a dirty segment's first batch is older than max.compaction.lag.ms (Kafka's
/// `maxCompactionDelay`): its records must be cleaned now, whatever the dirty ratio.
fn max_lag_exceeded(sources: &[Source], first_dirty: i64, first_uncleanable: i64, config: &LogConfig, now_ms: i64) -> Result<bool> {
    if config.max_compaction_lag_ms == i64::MAX {
        return Ok(false);
    }
    let clean_until = now_ms.saturating_sub(config.max_compaction_lag_ms);
    for s in sources.iter().filter(|s| s.next_base > first_dirty && s.next_base <= first_uncleanable && s.size >= HEADER_LEN as u64) {
        let mut head = [0u8; HEADER_LEN];
        s.file.read_exact_at(&mut head, 0).map_err(|e| Error::io("read", "segment", e))?;
        let first = batch::parse_header(&head)?;
        if first.max_timestamp > 0 && first.max_timestamp < clean_until {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Kafka's `groupSegmentsBySize`: consecutive segments of one epoch (the epoch in a segment's
/// name is where OffsetForLeaderEpoch looks), at most `max_bytes` together, offsets within
/// the 32-bit relative range of one segment's index.
fn groups(sources: &[Source], max_bytes: u64) -> Vec<&[Source]> {
    let mut out = Vec::new();
    let mut start = 0;
    while start < sources.len() {
        let first = &sources[start];
        let mut end = start + 1;
        let mut bytes = first.size;
        while let Some(next) = sources.get(end) {
            let fits = next.epoch == first.epoch && bytes + next.size <= max_bytes && next.next_base - first.base <= i64::from(i32::MAX);
            if !fits {
                break;
            }
            bytes += next.size;
            end += 1;
        }
        out.push(&sources[start..end]);
        start = end;
    }
    out
}
