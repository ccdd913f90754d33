//! What the group coordinator and the transaction coordinator have in common: sharded state on
//! the volume, each shard owned by one broker at an epoch, taken over and handed over as the
//! assignment (or, in local mode, the broker's start) says.

use crate::ShardLog;

/// A coordinator whose state lives in numbered shards of [`crate::ShardLog`]s.
pub trait ShardOwner {
    /// What kind of shard, for logs and errors ("group", "transaction").
    const KIND: &'static str;

    /// The log of `shard`, `None` past the last shard.
    fn shard_log(&self, shard: u32) -> Option<&ShardLog>;
    /// Takes `shard` over at `epoch`, loading its state. The shard's live state stays locked
    /// from before its log is owned until it is loaded, so a request that finds the shard owned
    /// never sees it empty.
    fn take_over(&self, shard: u32, epoch: i32) -> crate::Result<()>;
    /// Hands `shard` over: persisted, then unloaded.
    fn relinquish(&self, shard: u32) -> crate::Result<()>;

    /// Test builds: how many requests have found `shard` held, its log or its live state
    /// (the log's alone for an owner that does not count its live state).
    #[cfg(any(test, feature = "testing"))]
    fn waited_on_shard(&self, shard: u32) -> usize {
        self.shard_log(shard).map_or(0, ShardLog::waited)
    }

    /// The newest epoch on the volume for `shard` (-1 if it was never owned).
    fn stored_epoch(&self, shard: u32) -> crate::Result<i32> {
        let log = self.shard_log(shard).ok_or(crate::Error::NoSuchShard { kind: Self::KIND, shard })?;
        Ok(log.stored_epoch()?)
    }

    /// The epoch this broker owns `shard` at, if it owns it.
    fn owned_epoch(&self, shard: u32) -> Option<i32> {
        self.shard_log(shard)?.epoch()
    }

    /// Why the owned `shard` refuses writes (a failed write or fsync poisoned its log), if it
    /// does. Owned at the right epoch is not enough: such a shard needs a new take-over.
    fn storage_failure(&self, shard: u32) -> Option<String> {
        self.shard_log(shard)?.storage_failure()
    }

    /// Local mode: takes every shard not owned yet, or whose storage failed, over at the epoch
    /// `takeover_epoch` gives for the newest epoch on the volume (one past it). A shard that cannot be taken over (a stray file in its
    /// directory, an I/O error) costs that shard, not the broker: it is logged and left for the
    /// next call (housekeeping re-drives this). Returns how many shards are still not owned.
    fn take_over_all(&self, takeover_epoch: impl Fn(i32) -> i32) -> usize {
        let mut missing = 0;
        for shard in (0..crate::SHARD_COUNT).filter(|s| self.owned_epoch(*s).is_none() || self.storage_failure(*s).is_some()) {
            let taken = self.stored_epoch(shard).and_then(|stored| self.take_over(shard, takeover_epoch(stored)));
            if let Err(e) = taken {
                tracing::error!(kind = Self::KIND, shard, error = %e, "cannot take the shard over; its groups or transactions are unavailable until it is fixed (retried every housekeeping round)");
                missing += 1;
            }
        }
        missing
    }
}

/// Test support: takes `shard` of `owner` over at `epoch`, pausing the take-over inside the shard
/// log's (on a directory fsync `mem` holds) until `request`, run meanwhile, waits for the shard's
/// log or live state, or has answered; then lets the take-over finish. The request's answer.
#[cfg(any(test, feature = "testing"))]
pub fn request_during_take_over<O: ShardOwner + Sync, T: Send>(
    mem: &kaas_shared::fs::MemFs,
    owner: &O,
    shard: u32,
    epoch: i32,
    request: impl FnOnce() -> T + Send,
) -> T {
    mem.hold_dir_syncs(true);
    std::thread::scope(|s| {
        let taking_over = s.spawn(|| owner.take_over(shard, epoch));
        mem.wait_for_held_dir_syncs(1);
        let waited = owner.waited_on_shard(shard);
        let asking = s.spawn(request);
        // A request that answers without waiting answered from a shard not loaded yet; the
        // caller's assertion on the answer says so.
        while owner.waited_on_shard(shard) == waited && !asking.is_finished() {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        mem.hold_dir_syncs(false);
        let taken = taking_over.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
        assert!(taken.is_ok(), "take-over failed: {taken:?}");
        asking.join().unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
}
