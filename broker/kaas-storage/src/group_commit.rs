//! Group commit, the one implementation behind every acknowledgement that waits for the disk:
//! partitions (produce) and coordinator shard logs (offset commits, group state, transaction
//! decisions) both use it.
//!
//! Appends only reach the page cache. A waiter asks for durability up to some point; at most one
//! round per log runs at a time, off the async executor, and covers everything appended before
//! it started. A round is fdatasync and then the fence: the newest epoch on the volume is read
//! again, because a new owner records its epoch before it reads the log, so an owner that finds
//! a newer epoch after its sync has been deposed — the new owner may have read the log before
//! these bytes landed — and must acknowledge nothing. An owner that finds no newer epoch knows
//! any new owner reads the log only after these bytes were durable.
//!
//! [`Outcome::Durable`] comes only from [`run_round`], after both steps, so no log can
//! acknowledge on the sync alone.

use std::sync::Arc;

/// A log that group-commits. [`GroupCommit::sync`] and [`GroupCommit::newer_epoch`] run without
/// the log's lock and off the executor; [`GroupCommit::settle`] takes the lock.
pub trait GroupCommit: Send + Sync + 'static {
    /// One round: the descriptors to sync, what becomes durable, the epoch it was written under.
    type Round: Send + 'static;
    /// Why the fence could not be read.
    type FenceError: std::fmt::Display;

    /// fdatasync everything the round covers.
    fn sync(&self, round: &Self::Round) -> std::io::Result<()>;

    /// The newest epoch on the volume if it is newer than the round's.
    fn newer_epoch(&self, round: &Self::Round) -> Result<Option<i32>, Self::FenceError>;

    /// Records the round's outcome (under the log's lock; a round that a role change or a
    /// rewrite has made moot changes nothing), wakes the waiters, and returns the next round
    /// if a waiter needs one.
    fn settle(&self, round: Self::Round, outcome: Outcome<Self::FenceError>)
    -> Option<Self::Round>;
}

/// How a round ended.
#[derive(Debug)]
pub enum Outcome<F> {
    /// Synced, and no newer owner: the round's appends may be acknowledged.
    Durable,
    /// Synced, but a newer owner has claimed the log: acknowledge nothing and give it up.
    Deposed { newer: i32 },
    /// fdatasync failed: the kernel may have dropped the dirty pages, so nothing written since
    /// the last good sync can be trusted until a take-over recovers the log.
    SyncFailed(std::io::Error),
    /// Synced, but the fence could not be read: nothing may be acknowledged.
    FenceUnreadable(F),
}

/// One round's two steps, sync then fence. Also for a synchronous flush under the log's lock
/// (a partition's relinquish), which must answer the same two questions.
pub fn run_round<G: GroupCommit + ?Sized>(log: &G, round: &G::Round) -> Outcome<G::FenceError> {
    if let Err(e) = log.sync(round) {
        return Outcome::SyncFailed(e);
    }
    match log.newer_epoch(round) {
        Ok(None) => Outcome::Durable,
        Ok(Some(newer)) => Outcome::Deposed { newer },
        Err(e) => Outcome::FenceUnreadable(e),
    }
}

/// Runs `round`, and every round its settlement asks for after it, on a blocking thread (the
/// runtime's pool when there is one, so fdatasync never stalls the executor).
pub fn spawn<G: GroupCommit>(log: Arc<G>, round: G::Round) {
    let drive = move || {
        let mut round = round;
        loop {
            let outcome = run_round(&*log, &round);
            match log.settle(round, outcome) {
                Some(next) => round = next,
                None => return,
            }
        }
    };
    match tokio::runtime::Handle::try_current() {
        Ok(handle) => {
            handle.spawn_blocking(drive);
        }
        Err(_) => {
            std::thread::spawn(drive);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};

    use parking_lot::Mutex;

    use super::*;

    /// A log whose sync and fence answers are scripted, recording what it was told.
    #[derive(Debug, Default)]
    struct Scripted {
        fail_sync: bool,
        on_volume: AtomicI32,
        unreadable: bool,
        synced: AtomicUsize,
        settled: Mutex<Vec<String>>,
        more_rounds: AtomicUsize,
    }

    impl GroupCommit for Scripted {
        type Round = i32;
        type FenceError = String;

        fn sync(&self, _: &i32) -> std::io::Result<()> {
            self.synced.fetch_add(1, Ordering::SeqCst);
            if self.fail_sync {
                Err(std::io::Error::other("EIO"))
            } else {
                Ok(())
            }
        }

        fn newer_epoch(&self, epoch: &i32) -> Result<Option<i32>, String> {
            if self.unreadable {
                return Err("ESTALE".into());
            }
            let on_volume = self.on_volume.load(Ordering::SeqCst);
            Ok((on_volume > *epoch).then_some(on_volume))
        }

        fn settle(&self, epoch: i32, outcome: Outcome<String>) -> Option<i32> {
            self.settled.lock().push(format!("{epoch}: {outcome:?}"));
            let more = self.more_rounds.load(Ordering::SeqCst);
            (more > 0).then(|| {
                self.more_rounds.store(more - 1, Ordering::SeqCst);
                epoch
            })
        }
    }

    #[test]
    fn durable_only_after_the_sync_and_the_fence() {
        let log = Scripted {
            on_volume: AtomicI32::new(3),
            ..Default::default()
        };
        assert!(matches!(run_round(&log, &3), Outcome::Durable));
        assert!(matches!(run_round(&log, &2), Outcome::Deposed { newer: 3 }));

        let failing = Scripted {
            fail_sync: true,
            ..Default::default()
        };
        assert!(matches!(run_round(&failing, &3), Outcome::SyncFailed(_)));

        let unreadable = Scripted {
            unreadable: true,
            ..Default::default()
        };
        assert!(matches!(run_round(&unreadable, &3), Outcome::FenceUnreadable(e) if e == "ESTALE"));
    }

    #[test]
    fn a_spawned_round_runs_the_rounds_its_settlement_asks_for() {
        let log = Arc::new(Scripted {
            more_rounds: AtomicUsize::new(2),
            ..Default::default()
        });
        spawn(log.clone(), 1);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while log.settled.lock().len() < 3 {
            assert!(
                std::time::Instant::now() < deadline,
                "rounds did not run: {:?}",
                log.settled.lock()
            );
            std::thread::yield_now();
        }
        assert_eq!(log.synced.load(Ordering::SeqCst), 3);
        assert_eq!(*log.settled.lock(), vec!["1: Durable"; 3]);
    }
}
