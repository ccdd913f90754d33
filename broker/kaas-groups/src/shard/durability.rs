//! Group commit for a shard log: appends only reach the page cache; a waiter asks for
//! durability up to a sequence number, and at most one fdatasync per shard runs at a time, off
//! the executor, covering every append made before it started. A failed fsync poisons the log
//! (the kernel may have dropped the dirty pages) until the next take-over reloads it.
//!
//! After each fdatasync the owner lists the shard directory before it acknowledges: a new
//! owner creates its log (named with its epoch) before it reads the shard, so an owner that
//! finds a newer epoch has been deposed and its last appends may be missing from the state the
//! new owner loaded. It acknowledges nothing and gives the shard up. An owner that finds no
//! newer epoch knows any new owner will read the shard after these bytes were durable.

use std::sync::Arc;

use kaas_shared::fs::File;

use super::{Inner, ShardLog, State};
use crate::{Error, Result};

#[derive(Debug)]
struct SyncJob {
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
                spawn_sync(self.inner.clone(), job);
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

fn spawn_sync(inner: Arc<Inner>, job: SyncJob) {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) => {
            handle.spawn_blocking(move || run_sync(&inner, job));
        }
        Err(_) => {
            std::thread::spawn(move || run_sync(&inner, job));
        }
    }
}

fn run_sync(inner: &Inner, mut job: SyncJob) {
    loop {
        // fdatasync the log: this is the durability point of OffsetCommit and SyncGroup. A
        // commit is acknowledged only after this returns, so neither a broker crash nor a power
        // loss can take back an acknowledged offset.
        let result = job.file.sync_data();
        let newer = result.as_ref().ok().map(|()| super::newer_epoch(&*inner.fs, &inner.dir, job.epoch));
        let mut st = inner.state.lock();
        if st.generation != job.generation {
            return; // A compaction or role change made this job moot (and woke the waiters).
        }
        if let Some(Ok(Some(newer))) = newer {
            st.depose(&inner.dir, job.epoch, newer);
            inner.synced.send_replace(0);
            return;
        }
        let Some(owner) = st.owner.as_mut() else { return };
        owner.sync_in_flight = false;
        match (result, newer) {
            (Ok(()), Some(Err(e))) => {
                tracing::error!(error = %e, "listing the group shard after fdatasync failed; refusing commits until the next take-over");
                owner.poisoned = Some(format!("listing after fdatasync failed: {e}"));
            }
            (Ok(()), _) => owner.synced = owner.synced.max(job.upto),
            (Err(e), _) => {
                tracing::error!(error = %e, "group log fdatasync failed; refusing commits until the next take-over");
                owner.poisoned = Some(format!("fdatasync failed: {e}"));
            }
        }
        inner.synced.send_replace(owner.synced);
        match st.plan_sync() {
            Some(next) => job = next,
            None => return,
        }
    }
}
