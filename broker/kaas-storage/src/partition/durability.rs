//! The partition's side of the group commit (`crate::group_commit`): a waiter asks for
//! durability up to an offset; a round fdatasyncs every segment with unsynced bytes and then
//! re-reads the partition's manifest (a new leader writes its epoch there before it reads the
//! log, see `take_over`). Only then does the high watermark move to the log end captured when
//! the round started, waking every waiter at or below it. A failed fsync poisons the partition:
//! the page cache may have dropped the dirty pages, so nothing after the last good sync can be
//! trusted until take_over recovers the log.

use std::sync::Arc;

use kaas_shared::fs::File;
use tokio::sync::watch;

use super::{Partition, Role, Shared, State};
use crate::group_commit::{self, GroupCommit, Outcome};
use crate::{Error, Result};

/// One group-commit round.
#[derive(Debug)]
pub(super) struct SyncJob {
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
        Durable::unregistered(self, last_offset).wait().await
    }

    /// Starts a sync covering `last_offset` without waiting for it. An acks=0 produce has no
    /// waiter, and without this its records would stay invisible (the high watermark is the
    /// fsynced end) until some later acknowledged produce synced the log. Shares the group
    /// commit: a round in flight picks this up when it finishes. (An append registers its own
    /// sync already; this serves callers that appended by other means.)
    pub fn sync_soon(&self, last_offset: i64) {
        let round = {
            let mut st = self.lock();
            if st.high_watermark > last_offset || st.require_writable().is_err() {
                return;
            }
            st.want_durable(last_offset)
        };
        self.start_sync(round);
    }

    pub(super) fn start_sync(&self, round: Option<SyncJob>) {
        if let Some(round) = round {
            group_commit::spawn(self.shared.clone(), round);
        }
    }
}

/// A wait for records to become durable (see [`Partition::append_durable`]).
#[derive(Debug)]
pub struct Durable {
    partition: Partition,
    high_watermark: watch::Receiver<i64>,
    last_offset: i64,
    /// The role generation the records were written in, once known: a high watermark counts
    /// only within it (a deposed leader that leads again may hold other records at these
    /// offsets).
    generation: Option<u64>,
    /// Registered under the partition's lock (by the append, or by a first look here): the
    /// group commit will cover `last_offset` unless the role changes or the log is poisoned,
    /// so waiting needs no lock while neither happened.
    registered: bool,
}

impl Durable {
    /// Called by the append, under its lock, once the records are written.
    pub(super) fn register(partition: &Partition, st: &mut State, last_offset: i64) -> (Durable, Option<SyncJob>) {
        let round = st.want_durable(last_offset);
        let durable = Durable {
            partition: Partition { shared: partition.shared.clone() },
            high_watermark: partition.shared.hwm.subscribe(),
            last_offset,
            generation: Some(st.generation),
            registered: true,
        };
        (durable, round)
    }

    pub(super) fn unregistered(partition: &Partition, last_offset: i64) -> Durable {
        Durable {
            partition: Partition { shared: partition.shared.clone() },
            high_watermark: partition.shared.hwm.subscribe(),
            last_offset,
            generation: None,
            registered: false,
        }
    }

    /// Resolves once every offset up to and including the append's last is fsynced; fails when
    /// the partition can no longer make it durable (deposed, poisoned, released).
    pub async fn wait(self) -> Result<()> {
        let Durable { partition, high_watermark: mut rx, last_offset, mut generation, mut registered } = self;
        loop {
            let published = *rx.borrow_and_update();
            // Still the generation the wait registered in, and not poisoned: the round that
            // covers `last_offset` is running or queued (each settled round plans the next for
            // every registered offset), so no lock is needed. (The generation and poisoning
            // are published before any high watermark that follows them.)
            let undisturbed = registered && generation.is_some_and(|g| partition.shared.role.writable_in(g));
            if published > last_offset && undisturbed {
                return Ok(());
            }
            if !undisturbed {
                let round = {
                    let mut st = partition.lock();
                    if let Some(g) = generation.filter(|g| *g != st.generation) {
                        // Written under a role that has ended: durable only if that role's
                        // high watermark covered it before it ended.
                        return match st.ended {
                            Some((ended, hwm)) if ended == g && hwm > last_offset => Ok(()),
                            _ => Err(Error::NotLeader),
                        };
                    }
                    generation = Some(st.generation);
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
                    st.want_durable(last_offset)
                };
                partition.start_sync(round);
                registered = true;
            }
            if rx.changed().await.is_err() {
                return Err(Error::StorageFailure("partition dropped".into()));
            }
        }
    }
}

impl GroupCommit for Shared {
    type Round = SyncJob;
    type FenceError = Error;

    fn sync(&self, job: &SyncJob) -> std::io::Result<()> {
        // fdatasync every segment with unsynced bytes (normally just the active one): this is
        // the durability point of the produce path. A record is acknowledged and becomes
        // visible to consumers only after this (and the fence) returns, so a crash or power
        // loss can never take back an acknowledged or consumed record.
        job.files.iter().try_for_each(|(_, f, _)| f.sync_data())
    }

    fn newer_epoch(&self, job: &SyncJob) -> Result<Option<i32>> {
        newer_epoch_on_disk(self, job.epoch, job.list_segments)
    }

    fn settle(&self, job: SyncJob, outcome: Outcome<Error>) -> Option<SyncJob> {
        let mut st = self.state.lock();
        if st.generation != job.generation {
            // The role changed while we synced: nothing here belongs to it. Its waiters are
            // woken to find that out (not every role change wakes them itself).
            self.hwm.send_replace(st.high_watermark);
            return None;
        }
        st.sync_in_flight = false;
        match outcome {
            Outcome::Durable => st.mark_synced(&job.files, job.end_offset),
            Outcome::Deposed { newer } => {
                tracing::info!(dir = %self.dir.display(), epoch = job.epoch, newer, reason = "a newer leader took over", "deposed: not acknowledging the last writes");
                st.release(Role::Follower);
            }
            Outcome::SyncFailed(e) => {
                st.poison(format!("fdatasync failed: {e}"));
            }
            Outcome::FenceUnreadable(e) => {
                st.poison(format!("reading the manifest after fdatasync failed: {e}"));
            }
        }
        self.hwm.send_replace(st.high_watermark);
        st.plan_sync()
    }
}

impl State {
    /// A waiter needs everything up to `last_offset` durable: the round to start for it, if
    /// none is running (a running round starts the next when it settles).
    fn want_durable(&mut self, last_offset: i64) -> Option<SyncJob> {
        self.sync_wanted = self.sync_wanted.max(last_offset);
        self.plan_sync()
    }

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

    /// The round's bytes are durable and unfenced: the high watermark moves to its end.
    fn mark_synced(&mut self, files: &[(i64, Arc<dyn File>, u64)], end_offset: i64) {
        for (base, _, size) in files {
            if let Some(seg) = self.segments.iter_mut().find(|s| s.base_offset == *base) {
                seg.synced = seg.synced.max(*size);
            }
        }
        self.high_watermark = self.high_watermark.max(end_offset);
    }

    /// Synchronous flush of everything (relinquish), as one group-commit round under the lock:
    /// the manifest about to be written records this high watermark, which must not claim
    /// bytes a crash could still lose or a newer leader never saw.
    pub(super) fn sync_all_now(&mut self, shared: &Shared) -> Result<()> {
        let job = SyncJob {
            generation: self.generation,
            files: self.unsynced_files(),
            end_offset: self.log_end_offset,
            epoch: self.leader_epoch,
            list_segments: self.rewrote_manifest,
        };
        match group_commit::run_round(shared, &job) {
            Outcome::Durable => {}
            Outcome::Deposed { newer } => {
                return Err(Error::FencedLeaderEpoch { requested: self.leader_epoch, current: newer });
            }
            Outcome::SyncFailed(e) => return Err(self.poison(format!("fdatasync at relinquish failed: {e}"))),
            Outcome::FenceUnreadable(e) => return Err(e),
        }
        self.mark_synced(&job.files, job.end_offset);
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

/// [`newer_epoch_on_disk`] of the held partition directory `d`.
pub(super) fn newer_epoch_in(d: &dyn kaas_shared::fs::Dir, epoch: i32, list_segments: bool) -> Result<Option<i32>> {
    let on_disk = if list_segments {
        kaas_shared::epochs::stored_partition_epoch_in(d)?
    } else {
        crate::manifest::read_in(d)?.map_or(-1, |m| m.epoch)
    };
    Ok((on_disk > epoch).then_some(on_disk))
}
