//! Housekeeping on the leader: segment.ms rolls, retention by time and size, DeleteRecords,
//! producer expiration. Only the leader unlinks: it is the only holder of descriptors, so on
//! NFS an unlink really frees space instead of leaving a `.nfsXXXX` ghost.

use super::{Partition, Role, State};
use crate::{Result, manifest};

/// Segments a housekeeping round unlinked (retention by time or size, or below a log start
/// offset DeleteRecords raised), for the broker's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Removed {
    pub segments: u64,
    pub bytes: u64,
}

impl std::ops::AddAssign for Removed {
    fn add_assign(&mut self, other: Removed) {
        self.segments += other.segments;
        self.bytes += other.bytes;
    }
}

impl Partition {
    /// DeleteRecords: raises the log start offset to `before_offset` (-1 = the high
    /// watermark), persists it in the manifest, then unlinks every segment wholly below it.
    /// Returns the new log start offset.
    pub fn delete_records(&self, before_offset: i64) -> Result<i64> {
        let mut st = self.lock();
        st.require_writable()?;
        let target = if before_offset == -1 {
            st.high_watermark
        } else {
            before_offset
        };
        if target < 0 || target > st.high_watermark {
            return Err(st.out_of_range(before_offset));
        }
        // Unlinks and the manifest write below go by path.
        self.shared.check_incarnation()?;
        if target > st.log_start_offset {
            // A deposed leader must not acknowledge a DeleteRecords, nor overwrite a newer
            // leader's claim when it can still see it. (When the claim lands between this
            // check and the rename below, the rename overwrites it: `rewrote_manifest` makes
            // this leader check segment names from now on, and the new leader re-checks its
            // claim before it accepts writes.)
            if let Some(current) = super::durability::newer_epoch_on_disk(&self.shared, st.leader_epoch, true)? {
                let requested = st.leader_epoch;
                tracing::info!(dir = %self.shared.dir.display(), epoch = requested, newer = current, reason = "a newer leader took over", "deposed: refusing DeleteRecords");
                st.release(Role::Follower);
                return Err(crate::Error::FencedLeaderEpoch { requested, current });
            }
            st.rewrote_manifest = true;
            st.log_start_offset = target;
            // Persist before unlinking: after a crash in between, the manifest still says
            // where the log starts and the next housekeeping re-drives the unlinks.
            manifest::write(&*self.shared.fs, &self.shared.dir, &st.manifest())?;
        }
        self.delete_segments_while(&mut st, |st, _| {
            st.segments[1].base_offset <= st.log_start_offset
        })?;
        Ok(st.log_start_offset)
    }

    /// Periodic work (leader only; a no-op otherwise): roll an active segment older than
    /// segment.ms, delete segments past retention.ms / retention.bytes, expire idle producers.
    /// Segments are deleted oldest first, never the active one, and only below the high
    /// watermark. Returns what was unlinked.
    pub fn housekeeping(&self, now_ms: i64) -> Result<Removed> {
        let config = self.config();
        let mut st = self.lock();
        let mut removed = Removed::default();
        if st.role != Role::Leader || st.poisoned.is_some() {
            return Ok(removed);
        }
        // Retention unlinks by path: never in a recreated topic's directory.
        self.shared.check_incarnation()?;
        let stale_active = st.segments.last().is_some_and(|a| {
            a.size > 0
                && a.first_append_ms
                    .is_some_and(|t| now_ms.saturating_sub(t) >= config.effective_segment_ms())
        });
        if stale_active && st.high_watermark == st.log_end_offset {
            st.roll(&self.shared)?;
        }
        let interval = config.index_interval_bytes;
        removed += self.delete_segments_while(&mut st, |st, _| {
            st.segments[1].base_offset <= st.log_start_offset
        })?;
        // cleanup.policy=compact alone keeps every segment whatever its age or size: the
        // cleaner, not retention, bounds such a log (Kafka's LogConfig.delete).
        if config.cleanup_delete && config.retention_ms >= 0 {
            let cutoff = now_ms.saturating_sub(config.retention_ms);
            let shared = &self.shared;
            removed += self.delete_segments_while(&mut st, |st, _| {
                // A loaded segment knows its max timestamp: asking does not reopen a
                // released descriptor (nor keep one open).
                (st.segments[0].bounded || st.ensure_loaded(shared, 0, interval).is_ok())
                    && st.segments[0]
                        .max_timestamp
                        .is_none_or(|(ts, _)| ts < cutoff)
            })?;
        }
        if config.cleanup_delete && config.retention_bytes >= 0 {
            let mut total: u64 = st.segments.iter().map(|s| s.size).sum();
            let limit = config.retention_bytes as u64;
            removed += self.delete_segments_while(&mut st, |st, _| {
                let oldest = st.segments[0].size;
                let delete = total.saturating_sub(oldest) >= limit && total > limit;
                if delete {
                    total -= oldest;
                }
                delete
            })?;
        }
        st.producers
            .expire(now_ms.saturating_sub(config.producer_id_expiration_ms));
        let log_start = st.log_start_offset;
        st.producers.txns.trim(log_start);
        // Descriptors nobody used since the last round go: a broker's open files follow what
        // is read and written, not every segment touched since the take-over.
        for seg in &mut st.segments {
            seg.release_if_idle();
        }
        Ok(removed)
    }

    /// Segment files this partition holds open: those read or written since the last
    /// housekeeping round but one.
    pub fn open_descriptors(&self) -> usize {
        self.lock().segments.iter().filter(|s| s.file.is_some()).count()
    }

    /// Unlinks the oldest segment while `condition` holds, never the active segment and never
    /// one that reaches past the high watermark; raises the log start offset past them.
    fn delete_segments_while(
        &self,
        st: &mut State,
        mut condition: impl FnMut(&mut State, usize) -> bool,
    ) -> Result<Removed> {
        let mut removed = Removed::default();
        while st.segments.len() > 1
            && st.segments[1].base_offset <= st.high_watermark
            && condition(st, 0)
        {
            let mut oldest = st.segments.remove(0);
            oldest.unlink(&*self.shared.fs, &self.shared.dir)?;
            removed += Removed {
                segments: 1,
                bytes: oldest.size,
            };
            st.log_start_offset = st.log_start_offset.max(st.segments[0].base_offset);
        }
        Ok(removed)
    }
}
