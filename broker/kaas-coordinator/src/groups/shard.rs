//! A coordinator shard: the groups whose id hashes to it, over its [`ShardLog`].

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::GroupError;
use crate::ShardLog;
use crate::counted_mutex::CountedMutex;
use parking_lot::Mutex;

use super::group::{Committed, Group};
use super::record::{GroupValue, Key, OffsetValue};

pub(crate) type GroupRef = Arc<Mutex<Group>>;

/// Offsets committed in open transactions: (group, producer id) → partition → offset.
pub(crate) type PendingTxnOffsets = HashMap<(String, i64), BTreeMap<(String, i32), OffsetValue>>;

#[derive(Debug)]
pub(crate) struct CoordinatorShard {
    pub(crate) log: ShardLog,
    groups: CountedMutex<HashMap<String, GroupRef>>,
    /// Transactional offsets waiting for their transaction's outcome (durable in the log).
    pub(crate) pending_txn: Mutex<PendingTxnOffsets>,
    initial_delay: Duration,
    /// A restored consumer group's members get this long to heartbeat again.
    consumer_session: Duration,
}

impl CoordinatorShard {
    pub(crate) fn new(log: ShardLog, initial_delay: Duration, consumer_session: Duration) -> CoordinatorShard {
        CoordinatorShard { log, groups: CountedMutex::default(), pending_txn: Mutex::new(HashMap::new()), initial_delay, consumer_session }
    }

    pub(crate) fn is_owned(&self) -> bool {
        self.log.epoch().is_some()
    }

    /// Loads the shard at `epoch` and rebuilds its groups from the live records. A record this
    /// build cannot read is an error, not a skip: the shard is left unowned.
    ///
    /// The groups and pending offsets stay locked from before the shard is owned until they
    /// are loaded: a request that finds the shard owned waits for them rather than finding
    /// no group (and no committed offsets) where the log has one.
    pub(crate) fn take_over(&self, epoch: i32) -> Result<usize, crate::Error> {
        let mut live_groups = self.groups.lock();
        let mut live_pending = self.pending_txn.lock();
        live_groups.clear();
        live_pending.clear();
        let entries = self.log.take_over(epoch)?;
        let now = Instant::now();
        let mut groups: HashMap<String, Group> = HashMap::new();
        let mut offsets = Vec::new();
        let mut pending = PendingTxnOffsets::new();
        let bad = |what: &'static str, key: &str| crate::Error::UnreadableRecord { what, key: key.to_owned(), dir: self.log.dir().display().to_string() };
        for e in entries {
            let Some(value) = e.value else { continue };
            match Key::parse(&e.key) {
                Some(Key::Group { g }) => {
                    let v: GroupValue = serde_json::from_slice(&value).map_err(|_| bad("group", &e.key))?;
                    groups.insert(g.clone(), Group::restore(&g, v, now, self.initial_delay, self.consumer_session));
                }
                Some(Key::Offset { g, t, p }) => {
                    let v: OffsetValue = serde_json::from_slice(&value).map_err(|_| bad("offset", &e.key))?;
                    offsets.push((g, t, p, v));
                }
                Some(Key::TxnOffset { g, pid, t, p }) => {
                    let v: OffsetValue = serde_json::from_slice(&value).map_err(|_| bad("transactional offset", &e.key))?;
                    pending.entry((g, pid)).or_default().insert((t, p), v);
                }
                None => {
                    self.log.relinquish().ok();
                    return Err(bad("unknown", &e.key));
                }
            }
        }
        for (g, t, p, v) in offsets {
            let state_ms = v.commit_ms;
            let group = groups.entry(g.clone()).or_insert_with(|| Group::new(&g, state_ms, self.initial_delay));
            group.offsets.insert((t, p), Committed { value: Some(v), seq: 0 });
        }
        let count = groups.len();
        *live_pending = pending;
        *live_groups = groups.into_iter().map(|(k, g)| (k, Arc::new(Mutex::new(g)))).collect();
        Ok(count)
    }

    /// Hands the shard over: waiters are told to find the new coordinator, the state is
    /// persisted as a snapshot and dropped.
    pub(crate) fn relinquish(&self) -> Result<(), crate::Error> {
        self.unload(GroupError::NotCoordinator);
        Ok(self.log.relinquish()?)
    }

    /// Deletion or forced move: nothing is written.
    pub(crate) fn abandon(&self) {
        self.unload(GroupError::NotCoordinator);
        self.log.abandon();
    }

    fn unload(&self, error: GroupError) {
        self.pending_txn.lock().clear();
        for (_, g) in self.groups.lock().drain() {
            let mut g = g.lock();
            g.fail_all(error);
            g.set_state(super::GroupState::Dead, crate::clock::now_ms());
        }
    }

    pub(crate) fn get(&self, id: &str) -> Option<GroupRef> {
        self.groups.lock().get(id).cloned()
    }

    pub(crate) fn get_or_create(&self, id: &str) -> GroupRef {
        self.groups.lock().entry(id.to_owned()).or_insert_with(|| Arc::new(Mutex::new(Group::new(id, crate::clock::now_ms(), self.initial_delay)))).clone()
    }

    /// Drops a group that is Dead (deleted or expired), unless it was already replaced.
    pub(crate) fn remove(&self, id: &str, group: &GroupRef) {
        let mut groups = self.groups.lock();
        if groups.get(id).is_some_and(|g| Arc::ptr_eq(g, group)) {
            groups.remove(id);
        }
    }

    pub(crate) fn all(&self) -> Vec<(String, GroupRef)> {
        self.groups.lock().iter().map(|(k, g)| (k.clone(), g.clone())).collect()
    }

    /// How many requests have found the groups held (by a take-over, say).
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn waited_for_groups(&self) -> usize {
        self.groups.waited()
    }
}
