//! The shard log's side of the group commit (`kaas_storage::group_commit`): a waiter asks for
//! durability up to a sequence number; a round fdatasyncs the log and then lists the shard
//! directory. A new owner creates its log (named with its epoch) before it reads the shard, so
//! an owner that finds a newer epoch has been deposed and its last appends may be missing from
//! the state the new owner loaded: it acknowledges nothing and gives the shard up. A failed
//! fsync poisons the log (the kernel may have dropped the dirty pages) until the next
//! take-over reloads it.

use std::sync::Arc;

use kaas_shared::fs::File;
use kaas_storage::group_commit::{self, GroupCommit, Outcome};

use super::{Inner, ShardLog, State};
use crate::shard_log::{Error, Result};

#[derive(Debug)]
pub(super) struct SyncJob {
    generation: u64,
    file: Arc<dyn File>,
    /// The newest append when the job started: durable once it succeeds.
    upto: u64,
    /// The owner's epoch.
    epoch: i32,
}

impl ShardLog {
    /// Resolves once the append numbered `seq` (and every one before it) is on stable storage.
    /// Concurrent callers share one fdatasync.
    pub async fn wait_durable(&self, seq: u64) -> Result<()> {
        let mut rx = self.inner.synced.subscribe();
        loop {
            rx.borrow_and_update();
            let job = {
                let mut st = self.lock();
                let owner = st.writable()?;
                if owner.synced >= seq {
                    return Ok(());
                }
                if seq > owner.appended {
                    return Err(Error::NotOwner); // a sequence number of an earlier ownership
                }
                owner.sync_wanted = owner.sync_wanted.max(seq);
                st.plan_sync()
            };
            if let Some(job) = job {
                group_commit::spawn(self.inner.clone(), job);
            }
            if rx.changed().await.is_err() {
                return Err(Error::NotOwner);
            }
        }
    }
}

impl State {
    fn plan_sync(&mut self) -> Option<SyncJob> {
        let generation = self.generation;
        let owner = self.owner.as_mut()?;
        if owner.sync_in_flight || owner.poisoned.is_some() || owner.sync_wanted <= owner.synced {
            return None;
        }
        owner.sync_in_flight = true;
        Some(SyncJob { generation, file: owner.file.clone(), upto: owner.appended, epoch: owner.epoch })
    }
}

impl GroupCommit for Inner {
    type Round = SyncJob;
    type FenceError = Error;

    fn sync(&self, job: &SyncJob) -> std::io::Result<()> {
        // fdatasync the log: this is the durability point of OffsetCommit, SyncGroup and a
        // transaction's decision. Each is acknowledged only after this (and the fence)
        // returns, so neither a broker crash nor a power loss can take one back.
        job.file.sync_data()
    }

    fn newer_epoch(&self, job: &SyncJob) -> Result<Option<i32>> {
        super::newer_epoch(&*self.fs, &self.dir, job.epoch)
    }

    fn settle(&self, job: SyncJob, outcome: Outcome<Error>) -> Option<SyncJob> {
        let mut st = self.state.lock();
        if st.generation != job.generation {
            return None; // A compaction or role change made this round moot (and woke the waiters).
        }
        let failure = match outcome {
            Outcome::Durable => None,
            Outcome::Deposed { newer } => {
                st.depose(&self.dir, job.epoch, newer);
                self.synced.send_replace(0);
                return None;
            }
            Outcome::SyncFailed(e) => {
                tracing::error!(error = %e, "group log fdatasync failed; refusing commits until the next take-over");
                Some(format!("fdatasync failed: {e}"))
            }
            Outcome::FenceUnreadable(e) => {
                tracing::error!(error = %e, "listing the group shard after fdatasync failed; refusing commits until the next take-over");
                Some(format!("listing after fdatasync failed: {e}"))
            }
        };
        let owner = st.owner.as_mut()?;
        owner.sync_in_flight = false;
        match failure {
            None => owner.synced = owner.synced.max(job.upto),
            Some(reason) => owner.poisoned = Some(reason),
        }
        self.synced.send_replace(owner.synced);
        st.plan_sync()
    }
}
