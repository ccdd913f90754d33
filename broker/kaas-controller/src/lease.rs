//! Controller election on the `kaas-controller` Lease.
//!
//! The decision is a pure function of the Lease as read, so every case is unit-tested; the
//! store is a narrow trait with a Kubernetes implementation (in the binary) and an in-memory
//! one for in-process clusters. Writes carry the version they were decided on (optimistic
//! concurrency), so of two brokers racing for an expired Lease exactly one wins.
//!
//! `leaseTransitions` is the controller epoch: it grows exactly when the holder changes, and a
//! controller that releases the Lease keeps it, so the epoch never rewinds.

use std::time::{Duration, SystemTime};

use futures::future::BoxFuture;
use parking_lot::Mutex;

use crate::Result;

/// The Lease fields the election uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseState {
    /// The pod name of the holder; `None` when released.
    pub holder: Option<String>,
    pub renew_time: SystemTime,
    pub duration: Duration,
    /// `leaseTransitions`: the controller epoch.
    pub transitions: i64,
}

/// A Lease as read, with the version a conditional write must match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionedLease {
    pub state: LeaseState,
    pub version: String,
}

/// Where the Lease lives.
pub trait LeaseStore: Send + Sync + std::fmt::Debug {
    /// The Lease, or `None` if it was never created.
    fn get(&self) -> BoxFuture<'_, Result<Option<VersionedLease>>>;
    /// Writes `state` if the Lease is still at `expected` (`None`: must not exist yet).
    /// `Ok(false)` means someone else wrote first.
    fn put(&self, state: LeaseState, expected: Option<String>) -> BoxFuture<'_, Result<bool>>;
}

/// What a broker does about the Lease this round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseAction {
    /// Take it: nobody holds it, or the holder let it expire. `transitions` is the new epoch.
    Acquire { transitions: i64 },
    /// We hold it: renew.
    Renew,
    /// Someone else holds a live Lease.
    Follow { holder: String, transitions: i64 },
}

/// The election decision. `floor` is the highest controller epoch seen on the volume: a new
/// epoch is always above it, even if the Lease object was deleted and recreated. `holding`
/// says whether this process won the Lease it sees: a Lease in our name that this process
/// never won belongs to an earlier incarnation of this pod (killed, or a paused zombie), and is
/// taken over at a new epoch that fences whatever that incarnation still writes.
pub fn decide(me: &str, holding: bool, now: SystemTime, current: Option<&LeaseState>, floor: i64) -> LeaseAction {
    let next = |t: i64| t.max(floor).saturating_add(1);
    match current {
        None => LeaseAction::Acquire { transitions: next(0) },
        Some(s) => match &s.holder {
            Some(holder) if holder == me && holding => LeaseAction::Renew,
            Some(holder) if holder == me => LeaseAction::Acquire { transitions: next(s.transitions) },
            Some(holder) if !expired(s, now) => LeaseAction::Follow { holder: holder.clone(), transitions: s.transitions },
            _ => LeaseAction::Acquire { transitions: next(s.transitions) },
        },
    }
}

fn expired(s: &LeaseState, now: SystemTime) -> bool {
    s.renew_time.checked_add(s.duration).is_none_or(|deadline| deadline < now)
}

/// An in-memory Lease shared by the brokers of one process (tests, in-process clusters).
#[derive(Debug, Default)]
pub struct MemoryLease {
    lease: Mutex<Option<(LeaseState, u64)>>,
}

impl MemoryLease {
    pub fn new() -> MemoryLease {
        MemoryLease::default()
    }

    /// The state as stored (tests).
    pub fn snapshot(&self) -> Option<LeaseState> {
        self.lease.lock().as_ref().map(|(s, _)| s.clone())
    }
}

impl LeaseStore for MemoryLease {
    fn get(&self) -> BoxFuture<'_, Result<Option<VersionedLease>>> {
        let current = self.lease.lock().as_ref().map(|(s, v)| VersionedLease { state: s.clone(), version: v.to_string() });
        Box::pin(async move { Ok(current) })
    }

    fn put(&self, state: LeaseState, expected: Option<String>) -> BoxFuture<'_, Result<bool>> {
        let mut lease = self.lease.lock();
        let current = lease.as_ref().map(|(_, v)| v.to_string());
        let ok = current == expected;
        if ok {
            let version = lease.as_ref().map_or(1, |(_, v)| v + 1);
            *lease = Some((state, version));
        }
        Box::pin(async move { Ok(ok) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(by: &str, renewed_ago: u64, transitions: i64) -> LeaseState {
        LeaseState {
            holder: Some(by.into()),
            renew_time: SystemTime::UNIX_EPOCH + Duration::from_secs(1000 - renewed_ago),
            duration: Duration::from_secs(10),
            transitions,
        }
    }

    const NOW: SystemTime = SystemTime::UNIX_EPOCH;

    fn now() -> SystemTime {
        NOW + Duration::from_secs(1000)
    }

    #[test]
    fn decisions() {
        assert_eq!(decide("kaas-0", true, now(), None, 0), LeaseAction::Acquire { transitions: 1 });
        assert_eq!(decide("kaas-0", true, now(), Some(&held("kaas-0", 3, 4)), 0), LeaseAction::Renew);
        assert_eq!(
            decide("kaas-1", false, now(), Some(&held("kaas-0", 3, 4)), 0),
            LeaseAction::Follow { holder: "kaas-0".into(), transitions: 4 }
        );
        assert_eq!(decide("kaas-1", false, now(), Some(&held("kaas-0", 30, 4)), 0), LeaseAction::Acquire { transitions: 5 });
        let released = LeaseState { holder: None, ..held("x", 0, 7) };
        assert_eq!(decide("kaas-1", false, now(), Some(&released), 0), LeaseAction::Acquire { transitions: 8 });
        // A recreated Lease never rewinds below the epoch already on the volume.
        assert_eq!(decide("kaas-1", false, now(), None, 12), LeaseAction::Acquire { transitions: 13 });
        // A restarted pod finds the Lease still in its name: a new epoch, not a renewal.
        assert_eq!(decide("kaas-0", false, now(), Some(&held("kaas-0", 3, 4)), 0), LeaseAction::Acquire { transitions: 5 });
    }

    #[tokio::test]
    async fn conditional_writes_let_exactly_one_racer_win() -> Result<()> {
        let store = MemoryLease::new();
        assert!(store.put(held("a", 0, 1), None).await?);
        assert!(!store.put(held("b", 0, 1), None).await?, "create must not overwrite");
        let v = store.get().await?.map(|l| l.version);
        assert!(store.put(held("b", 0, 2), v.clone()).await?);
        assert!(!store.put(held("c", 0, 2), v).await?, "a stale version loses");
        assert_eq!(store.snapshot().and_then(|s| s.holder), Some("b".to_string()));
        Ok(())
    }
}
