//! The append path: validate, check idempotent producers, assign offsets in place, write to the
//! active segment's page cache. No fsync here (see `durability`).

use kaas_shared::fs::{Dir, OpenMode};
use parking_lot::MutexGuard;
use kaas_shared::names::{SegmentFileKind, segment_file_name};

use super::durability::Durable;
use super::{Partition, Shared, State};
use crate::batch::{self, BatchHeader, HEADER_LEN, Head, TimestampWindow};
use crate::config::{LogConfig, TimestampType};
use crate::control::{self, Marker};
use crate::producer_state::Checked;
use crate::segment::Segment;
use crate::{Error, Result, producer_snapshot};

/// Per-append parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendOptions {
    /// The epoch the caller believes it leads at; older than the partition's is fenced.
    pub leader_epoch: i32,
    /// The broker's clock (ms since the epoch): LogAppendTime, timestamp checks, segment.ms.
    pub now_ms: i64,
}

/// The result of an append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendOutcome {
    /// Offset of the first record.
    pub base_offset: i64,
    /// Offset of the last record (pass it to `wait_durable`).
    pub last_offset: i64,
    /// The append time for LogAppendTime topics, -1 for CreateTime.
    pub log_append_time_ms: i64,
    /// The log start offset after the append.
    pub log_start_offset: i64,
    /// An idempotent retry of an appended batch: nothing was written and the original
    /// offsets are returned.
    pub duplicate: bool,
}

impl Partition {
    /// Validates the one batch of `records` (see `batch::validate_request`: magic 2, sizes,
    /// CRC-32C, header fields, every record, timestamps, max.message.bytes), applies
    /// idempotent-producer checks, assigns offsets in a copy of its header and writes that
    /// header and the rest of `records` to the active segment. A rejected request writes
    /// nothing. Does not fsync: await [`Partition::wait_durable`] before acknowledging.
    pub fn append(&self, records: &[u8], opts: AppendOptions) -> Result<AppendOutcome> {
        self.write_batch(records, opts).map(|(outcome, _)| outcome)
    }

    /// [`Partition::append`], registering the wait for its durability in the same critical
    /// section: the group commit that will cover the records starts (or is queued behind the
    /// round in flight) before the lock is released, and the returned [`Durable`] resolves
    /// without taking the lock again unless something else happened to the partition first.
    /// The produce path: one lock per append, however many produces share the fdatasync.
    pub fn append_durable(&self, records: &[u8], opts: AppendOptions) -> Result<(AppendOutcome, Durable)> {
        let (outcome, mut st) = self.write_batch(records, opts)?;
        if outcome.duplicate {
            // The original may not be durable yet: this waiter checks under the lock.
            return Ok((outcome, Durable::unregistered(self, outcome.last_offset)));
        }
        let (durable, round) = Durable::register(self, &mut st, outcome.last_offset);
        drop(st);
        self.start_sync(round);
        Ok((outcome, durable))
    }

    /// The append itself; the lock is still held on return.
    fn write_batch(&self, records: &[u8], opts: AppendOptions) -> Result<(AppendOutcome, MutexGuard<'_, State>)> {
        let config = self.config();
        // NB: validation (which may decompress) runs before the partition lock is taken.
        let validated = batch::validate_request(records, &limits(&config, opts.now_ms))?;
        let mut header = validated.header;
        // What the broker changes lives in the header: the records after it are written as
        // the client sent them (validation read them whole).
        let (mut head, body) = (Head::of(records)?, &records[HEADER_LEN..]);
        let log_append_time = match config.timestamp_type {
            TimestampType::CreateTime => {
                if header.max_timestamp != validated.max_timestamp {
                    head.set_max_timestamp(validated.max_timestamp, body);
                    header.max_timestamp = validated.max_timestamp;
                }
                -1
            }
            TimestampType::LogAppendTime => {
                head.set_log_append_time(opts.now_ms, body);
                header.max_timestamp = opts.now_ms;
                opts.now_ms
            }
        };
        let mut st = self.lock();
        st.require_writable_at(opts.leader_epoch)?;
        if let Checked::Duplicate(m) = st.producers.check(std::iter::once(&header))? {
            let log_append_time_ms = if log_append_time >= 0 {
                m.timestamp
            } else {
                -1
            };
            let outcome = AppendOutcome {
                base_offset: m.base_offset,
                last_offset: m.last_offset,
                log_append_time_ms,
                log_start_offset: st.log_start_offset,
                duplicate: true,
            };
            return Ok((outcome, st));
        }
        let records_count = i64::from(header.last_offset_delta) + 1;
        st.maybe_roll(
            &self.shared,
            &config,
            records.len() as u64,
            records_count,
            opts.now_ms,
        )?;
        let base_offset = st.log_end_offset;
        head.set_offsets(base_offset, st.leader_epoch);
        header.base_offset = base_offset;
        let next = header.last_offset() + 1;
        st.write_active(
            &self.shared,
            &[head.bytes(), body],
            &[(0, header)],
            config.index_interval_bytes,
            opts.now_ms,
        )?;
        st.log_end_offset = next;
        let outcome = AppendOutcome {
            base_offset,
            last_offset: next - 1,
            log_append_time_ms: log_append_time,
            log_start_offset: st.log_start_offset,
            duplicate: false,
        };
        Ok((outcome, st))
    }
}

impl Partition {
    /// Appends a transaction marker for `marker.producer_id` (commit or abort), ending its
    /// transaction in this partition: the last stable offset moves past it once durable, and an
    /// abort is indexed for read_committed fetches. Idempotent in effect: a repeated marker for
    /// a transaction that is no longer open appends a harmless marker and changes no state
    /// (consumers skip control batches). Does not fsync: await [`Partition::wait_durable`].
    pub fn append_marker(&self, marker: &Marker, opts: AppendOptions) -> Result<AppendOutcome> {
        let mut records = control::build(marker, opts.now_ms);
        let mut header = batch::parse_header(&records)?;
        let config = self.config();
        let mut st = self.lock();
        st.require_writable_at(opts.leader_epoch)?;
        st.producers
            .check_marker(marker.producer_id, marker.producer_epoch, marker.coordinator_epoch)?;
        st.maybe_roll(&self.shared, &config, records.len() as u64, 1, opts.now_ms)?;
        let offset = st.log_end_offset;
        batch::patch_offsets(&mut records, offset, st.leader_epoch);
        header.base_offset = offset;
        st.write_active(
            &self.shared,
            &[&records],
            &[(0, header)],
            config.index_interval_bytes,
            opts.now_ms,
        )?;
        st.producers.end_txn(&header, marker.kind, marker.coordinator_epoch);
        st.log_end_offset = offset + 1;
        Ok(AppendOutcome {
            base_offset: offset,
            last_offset: offset,
            log_append_time_ms: -1,
            log_start_offset: st.log_start_offset,
            duplicate: false,
        })
    }
}

/// What a produced batch is checked against now.
fn limits(config: &LogConfig, now: i64) -> batch::Limits {
    let timestamps = match config.timestamp_type {
        TimestampType::CreateTime => Some(TimestampWindow::around(
            now,
            config.message_timestamp_before_max_ms,
            config.message_timestamp_after_max_ms,
        )),
        // Kafka checks producer timestamps only where they are kept.
        TimestampType::LogAppendTime => None,
    };
    batch::Limits {
        max_message_bytes: config.max_message_bytes,
        max_uncompressed_bytes: config.max_uncompressed_batch_bytes,
        timestamps,
        require_keys: config.cleanup_compact,
    }
}

impl State {
    /// Checks that this engine may write the partition for a caller at `leader_epoch`.
    fn require_writable_at(&self, leader_epoch: i32) -> Result<()> {
        self.require_writable()?;
        if leader_epoch < self.leader_epoch {
            return Err(Error::FencedLeaderEpoch {
                requested: leader_epoch,
                current: self.leader_epoch,
            });
        }
        Ok(())
    }

    /// One positioned write of the whole request (`pieces`, one after another) to the page
    /// cache, then index bookkeeping.
    fn write_active(
        &mut self,
        shared: &Shared,
        pieces: &[&[u8]],
        batches: &[(usize, BatchHeader)],
        interval: usize,
        now: i64,
    ) -> Result<()> {
        let last = self.segments.len().checked_sub(1).ok_or(Error::NotLeader)?;
        // Opens the descriptor again if housekeeping released it while idle.
        self.ensure_loaded(shared, last, interval)?;
        let active = &mut self.segments[last];
        let file = active.file.clone().ok_or(Error::NotLeader)?;
        let start = active.size;
        if let Err(e) = file.write_all_vectored_at(pieces, start) {
            // A failed write may have left part of the request in the file; the offsets are
            // not advanced, and poisoning makes the next take_over recover the tail.
            return Err(self.poison(format!("write to the active segment failed: {e}")));
        }
        active.first_append_ms.get_or_insert(now);
        for (pos, h) in batches {
            active.on_batch(start + *pos as u64, h, interval);
            self.producers.record(h);
        }
        Ok(())
    }

    fn maybe_roll(
        &mut self,
        shared: &Shared,
        config: &LogConfig,
        bytes: u64,
        records: i64,
        now: i64,
    ) -> Result<()> {
        let Some(active) = self.segments.last() else {
            return self.roll(shared);
        };
        if active.size == 0 {
            return Ok(());
        }
        let too_big = active.size + bytes > config.effective_segment_bytes();
        let too_old = active
            .first_append_ms
            .is_some_and(|t| now.saturating_sub(t) >= config.effective_segment_ms());
        // Relative offsets in the sparse index are 32-bit.
        let too_many = self.log_end_offset + records - active.base_offset > i64::from(i32::MAX);
        if too_big || too_old || too_many {
            self.roll(shared)
        } else {
            Ok(())
        }
    }

    /// Seals the active segment and starts a new one at the log end offset, named with the
    /// current epoch. Also writes the producer snapshot (its offset is the new base).
    pub(super) fn roll(&mut self, shared: &Shared) -> Result<()> {
        // Every name below is in the partition directory, held open for the roll: one lookup
        // per name on an NFS mount instead of one per path component, and the fsync is of the
        // directory the names changed in.
        let d = shared.open_checked_dir()?;
        self.roll_in(shared, &*d)
    }

    /// [`State::roll`] through `d`, the partition directory held open and checked to be in
    /// this topic's incarnation (`Shared::open_checked_dir`).
    pub(super) fn roll_in(&mut self, shared: &Shared, d: &dyn Dir) -> Result<()> {
        let dir = &*shared.dir;
        let base = self.log_end_offset;
        // A deposed leader learns it here at the latest: rolling would write a producer
        // snapshot over the new leader's.
        if let Some(current) = super::durability::newer_epoch_in(d, self.leader_epoch, self.rewrote_manifest)? {
            return Err(Error::FencedLeaderEpoch {
                requested: self.leader_epoch,
                current,
            });
        }
        // (temp, final) names of the sealed segment's index files and the new snapshot, each
        // written and fsynced under its temp name, renamed below.
        let mut staged = Vec::new();
        if let Some(active) = self.segments.last_mut() {
            if let (Some(file), true) = (&active.file, active.synced < active.size) {
                // fdatasync before sealing: recovery scans only the newest segment, so a
                // sealed segment must be durable before a newer one exists; otherwise a crash
                // could leave a torn tail in the middle of the log.
                if let Err(e) = file.sync_data() {
                    return Err(self.poison(format!("fdatasync at segment roll failed: {e}")));
                }
                active.synced = active.size;
            }
            staged = active.stage_index_files(d)?;
        }
        let name = segment_file_name(self.leader_epoch, base, SegmentFileKind::Log)?;
        let renamed = producer_snapshot::stage(d, self.leader_epoch, base, &self.producers)
            .and_then(|snapshot| {
                staged.push(snapshot);
                staged.iter().try_for_each(|(temp, name)| {
                    d.rename(temp, name).map_err(|e| Error::io("rename", dir.join(name), e))
                })
            });
        if let Err(e) = renamed {
            // NB: a temp left here (the removal failed) is garbage the next take-over removes.
            for (temp, _) in &staged {
                let _ = d.remove_file(temp);
            }
            return Err(e);
        }
        let file = d
            .open(&name, OpenMode::CreateNew)
            .map_err(|e| Error::io("create", dir.join(&name), e))?;
        // One fsync of the directory for every name above: the new segment's must survive a
        // crash before any acknowledged record lives in it, or recovery would not find those
        // records. The others may be lost with it without harm: index files are hints (rebuilt
        // when missing), and the previous snapshot stays valid (its offset is at or below this
        // epoch's end; a restore replays the log after it).
        if let Err(e) = d.sync() {
            // The new segment is empty and this epoch's alone: removed, a later roll can create
            // it again. NB: if the removal fails too, that roll fails on the name until a
            // take-over adopts the empty segment (same epoch) or replaces it (a newer one).
            let _ = d.remove_file(&name);
            return Err(Error::io("fsync dir", dir, e));
        }
        self.segments
            .push(Segment::new_active(self.leader_epoch, base, file));
        if base > self.high_watermark {
            // Everything below `base` was fsynced above.
            self.high_watermark = base;
            shared.hwm.send_replace(base);
        }
        Ok(())
    }
}
