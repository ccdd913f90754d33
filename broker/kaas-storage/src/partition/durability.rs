//! Group commit. Appends only write() to the page cache; a waiter asks for durability up to an
//! offset, and at most one fdatasync per partition runs at a time, off the async executor,
//! covering everything written before it started. When it returns, the high watermark moves to
//! the log end offset captured when it started, and every waiter at or below it is woken. A
//! failed fsync poisons the partition: the page cache may have dropped the dirty pages, so
//! nothing after the last good sync can be trusted until take_over recovers the log.
//!
//! Before the high watermark moves, the leader re-reads the partition's manifest: a new
//! leader writes its epoch there before it reads the log (see `take_over`), so a leader that
//! finds a newer epoch after its fdatasync has been deposed and must not acknowledge — the new
//! leader may have computed its log end before these bytes landed, and its new-epoch segment
//! would shadow them. A leader that finds no newer epoch knows the new leader (if any) will
//! read the log only after these bytes were durable, so they are part of the log it continues.

use std::sync::Arc;

use kaas_shared::fs::File;

use super::{Partition, Role, Shared, State};
use crate::{Error, Result};

/// One fdatasync round.
#[derive(Debug)]
struct SyncJob {
    generation: u64,
    /// (segment base offset, descriptor, bytes written when the job started)
    files: Vec<(i64, Arc<dyn File>, u64)>,
    /// Log end offset when the job started: the high watermark once it succeeds.
    end_offset: i64,
    /// The leader epoch the bytes were written under.
    epoch: i32,
    /// Whether deposition must also be checked by segment names (see `State::rewrote_manifest`).
    list_segments: bool,
}

impl Partition {
    /// Resolves once every offset up to and including `last_offset` is fsynced (the high
    /// watermark is past it). Concurrent callers share one fdatasync.
    pub async fn wait_durable(&self, last_offset: i64) -> Result<()> {
        let mut rx = self.shared.hwm.subscribe();
        loop {
            rx.borrow_and_update();
            let job = {
                let mut st = self.lock();
                if st.high_watermark > last_offset {
                    return Ok(());
                }
                st.require_writable()?;
                if last_offset >= st.log_end_offset {
                    return Err(Error::OffsetOutOfRange {
                        offset: last_offset,
                        log_start_offset: st.log_start_offset,
                        high_watermark: st.high_watermark,
                    });
                }
                st.sync_wanted = st.sync_wanted.max(last_offset);
                st.plan_sync()
            };
            if let Some(job) = job {
                spawn_sync(self.shared.clone(), job);
            }
            if rx.changed().await.is_err() {
                return Err(Error::StorageFailure("partition dropped".into()));
            }
        }
    }
}

impl Partition {
    /// Starts a sync covering `last_offset` without waiting for it. An acks=0 produce has no
    /// waiter, and without this its records would stay invisible (the high watermark is the
    /// fsynced end) until some later acknowledged produce synced the log. Shares the group
    /// commit: a round in flight picks this up when it finishes.
    pub fn sync_soon(&self, last_offset: i64) {
        let job = {
            let mut st = self.lock();
            if st.high_watermark > last_offset || st.require_writable().is_err() {
                return;
            }
            st.sync_wanted = st.sync_wanted.max(last_offset);
            st.plan_sync()
        };
        if let Some(job) = job {
            spawn_sync(self.shared.clone(), job);
        }
    }
}

fn spawn_sync(shared: Arc<Shared>, job: SyncJob) {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) => {
            handle.spawn_blocking(move || run_sync(&shared, job));
        }
        Err(_) => {
            std::thread::spawn(move || run_sync(&shared, job));
        }
    }
}

fn run_sync(shared: &Shared, mut job: SyncJob) {
    loop {
        // fdatasync every segment with unsynced bytes (normally just the active one): this is
        // the durability point of the produce path. A record is acknowledged and becomes
        // visible to consumers only after this returns, so a crash or power loss can never
        // take back an acknowledged or consumed record.
        let result = job.files.iter().try_for_each(|(_, f, _)| f.sync_data());
        let newer = result.as_ref().ok().map(|()| newer_epoch_on_disk(shared, job.epoch, job.list_segments));
        let mut st = shared.state.lock();
        if st.generation != job.generation {
            return; // The role changed while we synced: nothing here belongs to it.
        }
        st.sync_in_flight = false;
        match (result, newer) {
            (Ok(()), Some(Err(e))) => {
                st.poison(format!("reading the manifest after fdatasync failed: {e}"));
            }
            (Ok(()), Some(Ok(Some(newer)))) => {
                tracing::info!(dir = %shared.dir.display(), epoch = job.epoch, newer, reason = "a newer leader took over", "deposed: not acknowledging the last writes");
                st.release(Role::Follower);
            }
            (Ok(()), _) => {
                for (base, _, size) in &job.files {
                    if let Some(seg) = st.segments.iter_mut().find(|s| s.base_offset == *base) {
                        seg.synced = seg.synced.max(*size);
                    }
                }
                st.high_watermark = st.high_watermark.max(job.end_offset);
            }
            (Err(e), _) => {
                st.poison(format!("fdatasync failed: {e}"));
            }
        }
        shared.hwm.send_replace(st.high_watermark);
        match st.plan_sync() {
            Some(next) => job = next,
            None => return,
        }
    }
}

impl State {
    /// Starts a sync round if a waiter needs one and none is running.
    fn plan_sync(&mut self) -> Option<SyncJob> {
        let wanted =
            self.sync_wanted >= self.high_watermark && self.log_end_offset > self.high_watermark;
        if self.sync_in_flight || self.role != Role::Leader || self.poisoned.is_some() || !wanted {
            return None;
        }
        self.sync_in_flight = true;
        Some(SyncJob {
            generation: self.generation,
            files: self.unsynced_files(),
            end_offset: self.log_end_offset,
            epoch: self.leader_epoch,
            list_segments: self.rewrote_manifest,
        })
    }

    fn unsynced_files(&self) -> Vec<(i64, Arc<dyn File>, u64)> {
        self.segments
            .iter()
            .filter(|s| s.synced < s.size)
            .filter_map(|s| s.file.clone().map(|f| (s.base_offset, f, s.size)))
            .collect()
    }

    /// Synchronous flush of everything (relinquish): the high watermark becomes the log end.
    pub(super) fn sync_all_now(&mut self, shared: &Shared) -> Result<()> {
        for (base, file, size) in self.unsynced_files() {
            // fdatasync before handing over: the manifest we are about to write records this
            // high watermark, which must not claim bytes a crash could still lose.
            if let Err(e) = file.sync_data() {
                return Err(self.poison(format!("fdatasync at relinquish failed: {e}")));
            }
            if let Some(seg) = self.segments.iter_mut().find(|s| s.base_offset == base) {
                seg.synced = seg.synced.max(size);
            }
        }
        if let Some(newer) = newer_epoch_on_disk(shared, self.leader_epoch, self.rewrote_manifest)? {
            return Err(Error::FencedLeaderEpoch { requested: self.leader_epoch, current: newer });
        }
        self.high_watermark = self.log_end_offset;
        shared.hwm.send_replace(self.high_watermark);
        Ok(())
    }
}

/// The newest epoch on the volume when it is newer than `epoch` (we were deposed): the
/// manifest's, and with `list_segments` also the newest in segment names.
pub(super) fn newer_epoch_on_disk(shared: &Shared, epoch: i32, list_segments: bool) -> Result<Option<i32>> {
    let on_disk = if list_segments {
        kaas_shared::epochs::stored_partition_epoch(&*shared.fs, &shared.dir)?
    } else {
        crate::manifest::read(&*shared.fs, &shared.dir)?.map_or(-1, |m| m.epoch)
    };
    Ok((on_disk > epoch).then_some(on_disk))
}
