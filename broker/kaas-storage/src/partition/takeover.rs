//! take_over: claim the epoch in the manifest, open descriptors, recover the newest segment,
//! restore producer state, roll to a fresh epoch-stamped segment and make the claim and the
//! segment's name durable with one directory fsync, all before the first write is accepted.

use kaas_shared::fs::{Dir, OpenMode};
use kaas_shared::names::{SegmentFileKind, segment_file_name};

use super::{Partition, Role, State, listing};
use crate::producer_state::ProducerStates;
use crate::scan::{BIG_CHUNK, Scanner, Step};
use crate::segment::Segment;
use crate::{Error, Result, control, manifest, producer_snapshot};

/// A take-over whose claim keeps being overwritten gives up after this many tries (and is
/// retried by its driver); each overwrite needs a deposed leader's DeleteRecords.
const CLAIM_ATTEMPTS: usize = 5;

/// What a take_over found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TakeoverReport {
    /// The epoch now led.
    pub leader_epoch: i32,
    /// The newest epoch found on the volume before (-1 for a new partition).
    pub previous_epoch: i32,
    /// Log start offset after recovery.
    pub log_start_offset: i64,
    /// Log end offset (= high watermark) after recovery.
    pub log_end_offset: i64,
    /// The manifest's high watermark before recovery (-1 if there was no manifest).
    pub manifest_high_watermark: i64,
    /// Bytes cut from a torn or scribbled tail of the newest segment.
    pub truncated_bytes: u64,
    /// Idempotent producers known after restoring the snapshot and replaying the log.
    pub producers: usize,
    /// Leftover names removed (temp files, a deposed leader's segments, orphan indexes).
    pub removed_files: usize,
}

impl Partition {
    /// Takes the partition over at `leader_epoch` (see the module docs). Fails with
    /// `FencedLeaderEpoch` if the volume already carries a newer epoch. Taking over again at the
    /// epoch already led is a no-op; a higher epoch while leading re-runs the whole procedure.
    pub fn take_over(&self, leader_epoch: i32) -> Result<TakeoverReport> {
        let mut st = self.lock();
        let unsynced_tail = st.unsynced_tail_after_failure();
        match st.role {
            Role::Abandoned => return Err(Error::Abandoned),
            Role::Leader if leader_epoch == st.leader_epoch && st.poisoned.is_none() => {
                return Ok(st.report(leader_epoch, leader_epoch, -1, 0, 0));
            }
            Role::Leader if leader_epoch < st.leader_epoch => {
                return Err(Error::FencedLeaderEpoch {
                    requested: leader_epoch,
                    current: st.leader_epoch,
                });
            }
            _ => st.release(Role::Follower),
        }
        let mut attempts = 0;
        let result = loop {
            attempts += 1;
            match self.recover_and_lead(&mut st, leader_epoch, unsynced_tail) {
                Err(Error::ClaimOverwritten { epoch, found }) if attempts < CLAIM_ATTEMPTS => {
                    tracing::info!(dir = %self.shared.dir.display(), epoch, found, "take-over claim overwritten by a deposed leader; claiming again");
                    st.release(Role::Follower);
                }
                result => break result,
            }
        };
        if let Err(e) = &result {
            st.release(Role::Follower);
            // Kept as the reason this partition is offline (storage_failure), until a
            // take-over succeeds.
            st.poisoned = Some(format!("take-over at epoch {leader_epoch} failed: {e}"));
        }
        st.publish_role();
        drop(st);
        self.wake();
        result
    }

    fn recover_and_lead(&self, st: &mut State, epoch: i32, unsynced_tail: Option<UnsyncedTail>) -> Result<TakeoverReport> {
        let dir = &*self.shared.dir;
        let config = self.config();
        // Every name below is in the partition directory, held open for the whole take-over and
        // checked to be in this topic's incarnation: one lookup per name on an NFS mount instead
        // of one per path component, and the claim, the roll and their fsync all land in the
        // directory whose log was read.
        let d = self.shared.open_checked_dir()?;
        let d = &*d;
        let manifest = manifest::read_in(d)?;
        let listing = listing::list_in(d)?;
        let previous_epoch = listing.max_epoch.max(manifest.map_or(-1, |m| m.epoch));
        if epoch < previous_epoch {
            return Err(Error::FencedLeaderEpoch {
                requested: epoch,
                current: previous_epoch,
            });
        }
        // Claim the epoch before reading the log: the deposed leader re-reads the manifest
        // after each fdatasync and acknowledges only while no newer epoch is there, so every
        // byte it acknowledged was durable before this rename, and is in the log read below.
        // Atomic (temp + fsync + rename), idempotent (the same epoch again), fenced (only an
        // epoch at or above every epoch on the volume gets here). This is the manifest the
        // take-over persists: it carries the old high watermark, which may lag the log (the
        // log is authoritative; the next hand-over writes the recovered one).
        // NB: the rename is made durable by the directory fsync of the roll below (or the one
        // after it when there is nothing to roll). A crash of the volume before then can forget
        // it, and the deposed leader, reading its own epoch again, may acknowledge more; the
        // claim check after the roll then finds the claim gone and the take-over starts over,
        // reading those records.
        let claimed = manifest.map(|m| m.epoch) != Some(epoch);
        if claimed {
            let claim = manifest::Manifest {
                epoch,
                high_watermark: manifest.map_or(0, |m| m.high_watermark),
                log_start_offset: manifest.map_or(0, |m| m.log_start_offset),
                cleaned_up_to: manifest.and_then(|m| m.cleaned_up_to),
            };
            manifest::replace_unsynced(d, &claim)?;
        }
        if let Some(tail) = unsynced_tail {
            tail.drop_from(d)?;
        }
        // Listed again: the deposed leader may have rolled a segment since the first look.
        let listing = listing::list_in(d)?;
        for name in &listing.garbage {
            match d.remove_file(name) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io("unlink", dir.join(name), e)),
            }
        }
        if listing.segments.is_empty() {
            // fsync the topic directory: the partition directory may have just been created, and
            // its name must survive a power loss before acknowledged records live inside it.
            // Once a segment is there, the take-over that created it (every leader's first
            // segment comes from its take-over's roll, below) made that name durable already.
            let topic_dir = dir.join("..");
            d.parent()
                .and_then(|t| t.sync())
                .map_err(|e| Error::io("fsync dir", topic_dir, e))?;
        }
        st.segments = listing.segments;
        st.poisoned = None;
        let manifest_start = manifest.map_or(0, |m| m.log_start_offset);
        let truncated = match st.segments.last_mut() {
            Some(newest) => recover_newest(d, newest, config.index_interval_bytes)?,
            None => 0,
        };
        let log_end = st
            .segments
            .last()
            .and_then(|s| s.end_offset)
            .unwrap_or(manifest_start.max(0));
        let first_base = st.segments.first().map_or(log_end, |s| s.base_offset);
        st.log_end_offset = log_end;
        st.high_watermark = log_end;
        st.log_start_offset = manifest_start.max(first_base).min(log_end);
        st.leader_epoch = epoch;
        st.role = Role::Leader;
        st.cleaner.resume_from(manifest.and_then(|m| m.cleaned_up_to));
        st.restore_producers(&self.shared, d)?;
        let rolled = st.roll_for_epoch(&self.shared, d, epoch)?;
        if claimed && !rolled {
            d.sync().map_err(|e| Error::io("fsync dir", dir, e))?;
        }
        // A deposed leader's DeleteRecords may have renamed its manifest over our claim while
        // we read the log (or a crash of the volume forgot the claim before the fsync above),
        // and then acknowledged appends we did not read. Our new segment's
        // name now carries the epoch for good (that leader checks segment names once it has
        // rewritten the manifest); if the claim is gone, start over from the claim, with the
        // empty segment removed so the next read sees every byte it acknowledged.
        let found = manifest::read_in(d)?.map_or(-1, |m| m.epoch);
        if found != epoch {
            if st.segments.last().is_some_and(|s| s.epoch == epoch && s.size == 0)
                && let Some(mut newest) = st.segments.pop()
            {
                newest.unlink_in(d)?;
            }
            return Err(Error::ClaimOverwritten { epoch, found });
        }
        st.rewrote_manifest = false;
        // The recovered segment is sealed now (the roll made a new active one): its descriptor
        // was for the recovery scan, so the next housekeeping round releases it rather than the
        // one after (its close is a round trip to the volume: not here, while the partition is
        // unavailable). A consumer catching up opens it again.
        let sealed = st.segments.len().saturating_sub(1);
        for seg in &mut st.segments[..sealed] {
            seg.mark_unused();
        }
        let removed = listing.garbage.len();
        Ok(st.report(
            epoch,
            previous_epoch,
            manifest.map_or(-1, |m| m.high_watermark),
            truncated,
            removed,
        ))
    }
}

/// The part of this leader's newest segment written after its last good fdatasync, when a
/// write or fdatasync has failed since (the partition is poisoned).
#[derive(Debug, Clone, Copy)]
pub(super) struct UnsyncedTail {
    epoch: i32,
    base_offset: i64,
    synced: u64,
    size: u64,
}

impl State {
    /// fsyncgate: after a failed fdatasync the kernel may have marked the dirty pages clean
    /// without writing them, so this process's page cache can hold bytes the disk (or the NFS
    /// server) never got. Re-reading them at take-over would serve records that can vanish
    /// later. Nothing written since the last good fdatasync was acknowledged, so it is dropped.
    fn unsynced_tail_after_failure(&self) -> Option<UnsyncedTail> {
        if self.role != Role::Leader || self.poisoned.is_none() {
            return None;
        }
        let newest = self.segments.last()?;
        (newest.epoch == self.leader_epoch && newest.synced < newest.size).then_some(UnsyncedTail {
            epoch: newest.epoch,
            base_offset: newest.base_offset,
            synced: newest.synced,
            size: newest.size,
        })
    }
}

impl UnsyncedTail {
    /// Truncates the segment to its last synced length. Called only after this take-over has
    /// claimed its epoch (at or above the one that wrote the segment, which was this broker's):
    /// no other leader writes the segment, and the bytes cut were never acknowledged (the high
    /// watermark is the fsynced end). Idempotent.
    fn drop_from(&self, d: &dyn Dir) -> Result<()> {
        let dir = d.path();
        let name = segment_file_name(self.epoch, self.base_offset, SegmentFileKind::Log)?;
        let path = dir.join(&name);
        let file = match d.open(&name, OpenMode::ReadWrite) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(Error::io("open", path, e)),
        };
        let len = file.len().map_err(|e| Error::io("stat", &path, e))?;
        if len > self.synced {
            file.set_len(self.synced).map_err(|e| Error::io("truncate", &path, e))?;
            // fdatasync the truncation: a crash must not bring the dropped bytes back.
            file.sync_data().map_err(|e| Error::io("fdatasync", &path, e))?;
            tracing::warn!(dir = %dir.display(), epoch = self.epoch, segment = self.base_offset, kept = self.synced, dropped = len - self.synced, written = self.size, reason = "a write or fdatasync failed", "dropping what was written after the last good fdatasync");
        }
        Ok(())
    }
}

/// Recovery of the newest segment: scan it forward verifying every batch's CRC and offset
/// continuity, truncate a torn or scribbled tail at the last valid byte, rebuild its indexes,
/// and make what remains durable. Returns the bytes cut.
fn recover_newest(d: &dyn Dir, seg: &mut Segment, index_interval: usize) -> Result<u64> {
    let dir = d.path();
    let path = seg.path(dir, SegmentFileKind::Log)?;
    let file = seg.open_in(d, OpenMode::ReadWrite)?;
    let io = |op| {
        let path = path.clone();
        move |e| Error::io(op, path, e)
    };
    let len = file.len().map_err(io("stat"))?;
    let base = seg.base_offset;
    *seg = Segment::new_active(seg.epoch, base, file.clone());
    let mut scan = Scanner::new(&*file, 0, len, true, BIG_CHUNK);
    let valid_end = loop {
        match scan.next_step().map_err(io("read"))? {
            Step::Batch { pos, header } if Some(header.base_offset) == seg.end_offset => {
                seg.on_batch(pos, &header, index_interval);
            }
            Step::Batch { pos, header } => {
                tracing::warn!(path = %dir.display(), pos, base = header.base_offset, "batch breaks offset continuity; truncating");
                break pos;
            }
            Step::End => break len,
            Step::Invalid { pos, reason } => {
                tracing::warn!(path = %dir.display(), pos, %reason, "invalid tail; truncating");
                break pos;
            }
        }
    };
    if valid_end < len {
        file.set_len(valid_end).map_err(io("truncate"))?;
    }
    // fdatasync the recovered segment: the previous leader may have died before its group
    // commit, so these bytes may still be only in a page cache. Everything up to here becomes
    // the high watermark; without this a power loss could take back records we now serve.
    file.sync_data().map_err(io("fdatasync"))?;
    seg.synced = seg.size;
    Ok(len - valid_end)
}

impl State {
    fn report(
        &self,
        epoch: i32,
        previous: i32,
        manifest_hwm: i64,
        truncated: u64,
        removed: usize,
    ) -> TakeoverReport {
        TakeoverReport {
            leader_epoch: epoch,
            previous_epoch: previous,
            log_start_offset: self.log_start_offset,
            log_end_offset: self.log_end_offset,
            manifest_high_watermark: manifest_hwm,
            truncated_bytes: truncated,
            producers: self.producers.len(),
            removed_files: removed,
        }
    }

    /// Restores the producer snapshot and replays the log after its offset; without a usable
    /// snapshot (missing, or ahead of a truncated log) the whole log is replayed.
    fn restore_producers(&mut self, shared: &super::Shared, d: &dyn Dir) -> Result<()> {
        let dir = &*shared.dir;
        // A snapshot is usable only if its writer's epoch really reached its offset: a deposed
        // leader's snapshot claims offsets the log gave to the next epoch.
        let (from, states) = match producer_snapshot::read(d) {
            Some((epoch, offset, states)) if offset <= self.epoch_end(epoch) => (offset, states),
            _ => (i64::MIN, ProducerStates::default()),
        };
        self.producers = states;
        let interval = shared.config.read().index_interval_bytes;
        for i in 0..self.segments.len() {
            let next_base = self.segments.get(i + 1).map(|s| s.base_offset);
            if next_base.is_some_and(|n| n <= from) {
                continue;
            }
            self.ensure_loaded(shared, i, interval)?;
            let seg = &self.segments[i];
            let start = match seg
                .index
                .as_ref()
                .and_then(|ix| ix.lookup(relative(seg.base_offset, from)))
            {
                Some((_, pos)) if from > seg.base_offset => u64::from(pos),
                _ => 0,
            };
            let file = seg.file.clone().ok_or(Error::NotLeader)?;
            let mut scan = Scanner::new(&*file, start, seg.size, false, BIG_CHUNK);
            while let Step::Batch { header, pos } =
                scan.next_step().map_err(|e| Error::io("read", dir, e))?
            {
                if header.base_offset >= from {
                    self.producers.record(&header);
                    if header.is_control() {
                        // Markers are tiny: read the whole batch to learn commit or abort.
                        let mut batch = vec![0u8; header.size];
                        file.read_exact_at(&mut batch, pos)
                            .map_err(|e| Error::io("read", dir, e))?;
                        if let Some((kind, coordinator_epoch)) = control::marker_of(&header, &batch) {
                            self.producers.end_txn(&header, kind, coordinator_epoch);
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Where `epoch` ends in the log: the first segment of a later epoch, or the log end.
    fn epoch_end(&self, epoch: i32) -> i64 {
        let next = self
            .segments
            .iter()
            .find(|s| s.epoch > epoch)
            .map(|s| s.base_offset);
        next.unwrap_or(self.log_end_offset).min(self.log_end_offset)
    }

    /// Makes sure segment `i` has its descriptor, indexes and true extent: a sealed segment is
    /// loaded on first use; a segment whose idle descriptor housekeeping released keeps its
    /// indexes and extent and only opens its file again.
    pub(super) fn ensure_loaded(
        &mut self,
        shared: &super::Shared,
        i: usize,
        interval: usize,
    ) -> Result<()> {
        let (fs, dir) = (&*shared.fs, &*shared.dir);
        let next_base = self.segments.get(i + 1).map(|s| s.base_offset);
        let seg = &mut self.segments[i];
        if !seg.bounded {
            return seg.load_sealed(fs, dir, next_base, interval);
        }
        if seg.file.is_none() && next_base.is_none() {
            // The active segment: appends write through this descriptor, so it is opened by
            // path only in this topic's incarnation (a deleted and recreated topic reuses the
            // directory and may have a file of the same name).
            shared.check_incarnation()?;
            seg.open(fs, dir, OpenMode::ReadWrite)?;
        } else {
            seg.open(fs, dir, OpenMode::Read)?;
        }
        Ok(())
    }

    /// The take-over roll: the new epoch writes to a fresh segment named with it, so a deposed
    /// leader still appending to the old one can never interleave with us. Returns whether it
    /// rolled (and so fsynced the directory): not when the newest segment is already an empty
    /// one of this epoch.
    fn roll_for_epoch(&mut self, shared: &super::Shared, d: &dyn Dir, epoch: i32) -> Result<bool> {
        if let Some(newest) = self.segments.last_mut() {
            if newest.size == 0 && newest.epoch == epoch {
                return Ok(false);
            }
            if newest.size == 0 {
                // An empty segment of an older epoch at the same base: replace it.
                newest.unlink_in(d)?;
                self.segments.pop();
            }
        }
        self.roll_in(shared, d)?;
        Ok(true)
    }
}

/// `offset - base` as a relative index offset (saturating).
pub(super) fn relative(base: i64, offset: i64) -> u32 {
    u32::try_from(offset.saturating_sub(base).max(0)).unwrap_or(u32::MAX)
}
