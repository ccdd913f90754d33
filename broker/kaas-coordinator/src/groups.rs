//! The group coordinator: Kafka's classic consumer-group protocol, the KIP-848 consumer protocol
//! (`consumer` module) and committed offsets, with group state kept in group shards on the shared
//! volume (`crate::shard_log`). A group is either kind; both live in the same shard records.
//!
//! Groups are spread over [`crate::SHARD_COUNT`] shards by a stable hash of the group
//! id; a shard is owned (written) by one broker at a time, taken over and relinquished like a
//! partition. In local mode this broker owns every shard; in a cluster the runtime calls
//! [`Coordinator::take_over`] / [`Coordinator::relinquish`] as assignment.json moves shards.
//!
//! Seed 001, for the code here that reaches the volume (all of it goes through
//! [`crate::ShardLog`], which answers the three questions in its module docs):
//! 1. every change is one appended frame (or a renamed snapshot), never an edit in place;
//! 2. a commit is acknowledged only after its fsync; group records that cannot be written now
//!    are rewritten by the next rebalance or retention check (the state they describe is
//!    re-derived from memory, so the re-drive converges);
//! 3. one writer per shard, fenced by the epoch stamped in every shard file name.

mod admin;
mod config;
mod consumer;
mod group;
mod join;
mod membership;
mod offsets;
mod record;
mod shard;
mod share;
mod timers;
mod txn_offsets;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use crate::GroupError as E;
use crate::{SHARD_COUNT, ShardLog, shard_of};
use kaas_shared::fs::FsRef;
use kaas_shared::layout::Layout;
use tokio::sync::oneshot;
use tracing::info;

pub use admin::{ConsumerDescribed, ConsumerMemberDescribed, DescribedGroup, ListedGroup, ShareDescribed, ShareMemberDescribed};
pub use config::GroupConfig;
pub use consumer::{ConsumerHeartbeat, HeartbeatAnswer, Partitions, TopicView};
pub use share::{SHARE_ASSIGNOR, ShareHeartbeat, ShareHeartbeatAnswer};
pub use group::{GroupState, JoinResult, SyncResult};
pub use join::JoinRequest;
pub use membership::{HeartbeatRequest, Leaving, SyncRequest};
pub use offsets::{CommitOffset, CommitRequest};
pub use txn_offsets::TxnCommitRequest;

use crate::clock::now_ms;
use crate::shard_owner::ShardOwner;
use shard::{CoordinatorShard, GroupRef};

/// An answer that is ready, or one that comes when the group moves on (a rebalance, an fsync).
#[derive(Debug)]
pub enum Answer<T> {
    Now(T),
    Wait(oneshot::Receiver<T>),
}

impl<T> Answer<T> {
    /// Resolves the answer; a waiter dropped without an answer (the shard was unloaded) becomes
    /// `lost`.
    pub async fn resolve(self, lost: impl FnOnce() -> T) -> T {
        match self {
            Answer::Now(t) => t,
            Answer::Wait(rx) => rx.await.unwrap_or_else(|_| lost()),
        }
    }
}

/// The answer a member gets for a failure of its group's shard log.
pub(crate) fn storage_error(e: &crate::shard_log::Error) -> E {
    match e {
        e if e.not_owner() => E::NotCoordinator,
        crate::shard_log::Error::TooLarge(_) => E::InvalidCommitOffsetSize,
        _ => E::CoordinatorNotAvailable,
    }
}

impl ShardOwner for Coordinator {
    const KIND: &'static str = "group";

    fn shard_log(&self, shard: u32) -> Option<&ShardLog> {
        Some(&self.shards.get(shard as usize)?.log)
    }

    fn take_over(&self, shard: u32, epoch: i32) -> crate::Result<()> {
        let groups = self.shard_at(shard)?.take_over(epoch)?;
        info!(shard, epoch, groups, "group shard taken over");
        Ok(())
    }

    fn relinquish(&self, shard: u32) -> crate::Result<()> {
        self.shard_at(shard)?.relinquish()
    }

    #[cfg(any(test, feature = "testing"))]
    fn waited_on_shard(&self, shard: u32) -> usize {
        self.shard_at(shard).map_or(0, |s| s.log.waited() + s.waited_for_groups())
    }
}

/// The group coordinator of this broker.
#[derive(Debug)]
pub struct Coordinator {
    config: GroupConfig,
    shards: Vec<CoordinatorShard>,
    ticker_started: AtomicBool,
    closed: AtomicBool,
}

impl Coordinator {
    /// Opens every shard stat-only (no descriptors, nothing loaded).
    pub fn open(fs: FsRef, layout: &Layout, config: GroupConfig) -> crate::Result<Arc<Coordinator>> {
        let shards = (0..SHARD_COUNT)
            .map(|s| Ok(CoordinatorShard::new(ShardLog::open(fs.clone(), layout.group_shard_dir(s))?, config.initial_rebalance_delay, config.consumer_session_timeout)))
            .collect::<crate::Result<Vec<_>>>()?;
        Ok(Arc::new(Coordinator { config, shards, ticker_started: AtomicBool::new(false), closed: AtomicBool::new(false) }))
    }

    pub fn config(&self) -> &GroupConfig {
        &self.config
    }

    /// Drops one shard without persisting anything.
    pub fn abandon(&self, shard: u32) -> crate::Result<()> {
        self.shard_at(shard)?.abandon();
        Ok(())
    }

    fn shard_at(&self, shard: u32) -> crate::Result<&CoordinatorShard> {
        self.shards.get(shard as usize).ok_or(crate::Error::NoSuchShard { kind: "group", shard })
    }

    /// Shutdown: stops the clock and relinquishes every owned shard.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        for (i, shard) in self.shards.iter().enumerate() {
            if let Err(e) = shard.relinquish() {
                tracing::error!(shard = i, error = %e, "relinquishing a group shard failed; the next owner replays its log");
            }
        }
    }

    /// Whether this broker coordinates `group_id` now (FindCoordinator).
    pub fn coordinates(&self, group_id: &str) -> bool {
        self.shards[shard_of(group_id) as usize].is_owned()
    }

    /// The owned shard of a group, starting the clock on first use (it needs a runtime, which
    /// the broker's handlers always have).
    fn shard(self: &Arc<Self>, group_id: &str) -> Result<&CoordinatorShard, E> {
        if !self.ticker_started.swap(true, Ordering::AcqRel) {
            match tokio::runtime::Handle::try_current() {
                Ok(h) => drop(h.spawn(timers::run(Arc::downgrade(self)))),
                Err(_) => self.ticker_started.store(false, Ordering::Release),
            }
        }
        let shard = &self.shards[shard_of(group_id) as usize];
        if shard.is_owned() { Ok(shard) } else { Err(E::NotCoordinator) }
    }

    pub fn join(self: &Arc<Self>, req: JoinRequest) -> Answer<JoinResult> {
        let shard = match self.shard(&req.group_id) {
            Ok(s) => s,
            Err(e) => return Answer::Now(JoinResult::error(e, &req.member_id)),
        };
        if let Err(e) = req.validate(&self.config) {
            return Answer::Now(JoinResult::error(e, &req.member_id));
        }
        let group = if req.member_id.is_empty() {
            shard.get_or_create(&req.group_id)
        } else {
            match shard.get(&req.group_id) {
                Some(g) => g,
                None => return Answer::Now(JoinResult::error(E::UnknownMemberId, &req.member_id)),
            }
        };
        let mut g = group.lock();
        join::join(&mut g, req, &self.config, &shard.log, Instant::now(), now_ms())
    }

    pub fn sync(self: &Arc<Self>, req: SyncRequest) -> Answer<SyncResult> {
        let group = match self.existing(&req.group_id) {
            Ok((_, g)) => g,
            Err(e) => return Answer::Now(SyncResult::error(e)),
        };
        let Ok(shard) = self.shard(&req.group_id) else { return Answer::Now(SyncResult::error(E::NotCoordinator)) };
        membership::sync(&group, req, &shard.log, self.config.max_member_metadata_bytes.saturating_mul(64), Instant::now())
    }

    pub fn heartbeat(self: &Arc<Self>, req: &HeartbeatRequest) -> Option<E> {
        match self.existing(&req.group_id) {
            Ok((_, group)) => membership::heartbeat(&mut group.lock(), req, Instant::now()),
            Err(e) => Some(e),
        }
    }

    /// LeaveGroup: the top-level error, and each member's.
    pub fn leave(self: &Arc<Self>, group_id: &str, leaving: &[Leaving]) -> Result<Vec<Option<E>>, E> {
        let (shard, group) = match self.existing(group_id) {
            Ok(found) => found,
            Err(E::UnknownMemberId) => return Ok(vec![Some(E::UnknownMemberId); leaving.len()]),
            Err(e) => return Err(e),
        };
        let mut g = group.lock();
        if g.is(GroupState::Dead) {
            return Err(E::CoordinatorNotAvailable);
        }
        Ok(membership::leave(&mut g, leaving, &shard.log, Instant::now(), now_ms()))
    }

    /// OffsetCommit: validates against the group, appends, and returns the durability wait.
    /// `v9_errors`: from OffsetCommit v9 an unknown group is GROUP_ID_NOT_FOUND.
    pub fn commit(self: &Arc<Self>, req: CommitRequest, v9_errors: bool) -> Result<impl Future<Output = Result<(), E>> + Send + 'static, E> {
        let shard = self.shard(&req.group_id)?;
        if req.group_id.is_empty() {
            return Err(E::InvalidGroupId);
        }
        let group = match shard.get(&req.group_id) {
            Some(g) => g,
            None if req.generation < 0 => shard.get_or_create(&req.group_id),
            None if v9_errors => return Err(E::GroupIdNotFound),
            None => return Err(E::IllegalGeneration),
        };
        let pending = {
            let mut g = group.lock();
            match &g.consumer {
                Some(c) => consumer::validate_commit(c, &req, v9_errors)?,
                None => offsets::validate_commit(&g, &req)?,
            }
            if let Some(m) = g.members.get_mut(&req.member_id) {
                m.touch(Instant::now()); // a commit counts as a heartbeat, as in Kafka
            }
            offsets::append_commit(&g, &group, &shard.log, req, now_ms())?
        };
        Ok(pending.wait())
    }

    /// OffsetFetch of one group: `None` topics means every committed offset. An unknown group
    /// has no offsets (Kafka answers -1, not an error). `member`: OffsetFetch v9's member id and
    /// epoch, checked against a consumer group (STALE_MEMBER_EPOCH).
    #[allow(clippy::type_complexity)]
    pub fn fetch_offsets(self: &Arc<Self>, group_id: &str, member: Option<(&str, i32)>, topics: Option<Vec<(String, Vec<i32>)>>) -> Result<Vec<(String, Vec<(i32, Option<OffsetView>)>)>, E> {
        let shard = self.shard(group_id)?;
        let group = shard.get(group_id);
        let view = |v: record::OffsetValue| OffsetView { offset: v.offset, leader_epoch: v.leader_epoch, metadata: v.metadata };
        let Some(group) = group else {
            return Ok(topics.unwrap_or_default().into_iter().map(|(t, ps)| (t, ps.into_iter().map(|p| (p, None)).collect())).collect());
        };
        let g = group.lock();
        if let (Some(c), Some((member_id, epoch))) = (&g.consumer, member) {
            consumer::validate_fetch(c, member_id, epoch)?;
        }
        Ok(match topics {
            Some(topics) => topics.into_iter().map(|(t, ps)| {
                let parts = ps.into_iter().map(|p| (p, offsets::committed(&g, &t, p).map(view))).collect();
                (t, parts)
            }).collect(),
            None => offsets::all_committed(&g).into_iter().map(|(t, ps)| (t, ps.into_iter().map(|(p, v)| (p, Some(view(v)))).collect())).collect(),
        })
    }

    /// ConsumerGroupHeartbeat: runs the heartbeat against the group and, if it changed the
    /// group, answers only once the new state is durable (a coordinator that moves must not
    /// forget an epoch or an assignment it handed out).
    pub fn consumer_heartbeat(self: &Arc<Self>, req: ConsumerHeartbeat, topics: &dyn TopicView) -> Durable<HeartbeatAnswer> {
        if let Err((e, message)) = consumer::validate(&req) {
            return Durable::now(HeartbeatAnswer::error(e, message));
        }
        let (shard, group) = match self.heartbeat_group(&req.group_id, req.member_epoch == 0, "Consumer") {
            Ok(found) => found,
            Err((e, message)) => return Durable::now(HeartbeatAnswer::error(e, message)),
        };
        let mut g = group.lock();
        if let Err((e, message)) = dead_group(&g) {
            return Durable::now(HeartbeatAnswer::error(e, message));
        }
        if g.consumer.is_none() {
            // Kafka replaces an empty classic group; one with members stays classic.
            if req.member_epoch != 0 || !g.is_idle_classic() {
                return Durable::now(HeartbeatAnswer::error(E::GroupIdNotFound, format!("Group {} is not a consumer group.", req.group_id)));
            }
            g.become_consumer();
        }
        let Some(c) = g.consumer.as_mut() else { return Durable::now(HeartbeatAnswer::error(E::UnknownServerError, "not a consumer group")) };
        let before = c.value.clone();
        let answer = consumer::heartbeat(c, req, topics, &self.config, Instant::now());
        if c.value == before {
            return Durable::now(answer);
        }
        let undo = |g: &mut group::Group| {
            if let Some(c) = g.consumer.as_mut() {
                c.value = before;
            }
        };
        persist_heartbeat(&mut g, &shard.log, answer, undo, HeartbeatAnswer::error)
    }

    /// ShareGroupHeartbeat: as [`Coordinator::consumer_heartbeat`], for a share group.
    pub fn share_heartbeat(self: &Arc<Self>, req: ShareHeartbeat, topics: &dyn TopicView) -> Durable<ShareHeartbeatAnswer> {
        if let Err((e, message)) = share::validate(&req) {
            return Durable::now(ShareHeartbeatAnswer::error(e, message));
        }
        let (shard, group) = match self.heartbeat_group(&req.group_id, req.member_epoch == 0, "Share") {
            Ok(found) => found,
            Err((e, message)) => return Durable::now(ShareHeartbeatAnswer::error(e, message)),
        };
        let mut g = group.lock();
        if let Err((e, message)) = dead_group(&g) {
            return Durable::now(ShareHeartbeatAnswer::error(e, message));
        }
        if g.share.is_none() {
            // Only a group id nobody uses yet becomes a share group (Kafka: group ids are
            // unique across group types).
            if req.member_epoch != 0 || !g.is_idle_classic() || !g.offsets.is_empty() {
                return Durable::now(ShareHeartbeatAnswer::error(E::GroupIdNotFound, format!("Group {} is not a share group.", req.group_id)));
            }
            g.become_share();
        }
        let Some(sg) = g.share.as_mut() else { return Durable::now(ShareHeartbeatAnswer::error(E::UnknownServerError, "not a share group")) };
        let before = sg.value.clone();
        let answer = share::heartbeat(sg, req, topics, Instant::now());
        if sg.value == before {
            return Durable::now(answer);
        }
        let undo = |g: &mut group::Group| {
            if let Some(sg) = g.share.as_mut() {
                sg.value = before;
            }
        };
        persist_heartbeat(&mut g, &shard.log, answer, undo, ShareHeartbeatAnswer::error)
    }

    /// The owned shard and the group a KIP-848 or KIP-932 heartbeat runs against: created by a
    /// join (`joining`), else it must exist. The caller checks, under the group's lock, that it
    /// is not being unloaded or deleted ([`dead_group`]).
    fn heartbeat_group(self: &Arc<Self>, group_id: &str, joining: bool, kind: &str) -> Result<(&CoordinatorShard, GroupRef), (E, String)> {
        let shard = self.shard(group_id).map_err(|e| (e, "This broker does not coordinate the group.".to_owned()))?;
        let group = match joining {
            true => shard.get_or_create(group_id),
            false => shard.get(group_id).ok_or_else(|| (E::GroupIdNotFound, format!("{kind} group {group_id} not found.")))?,
        };
        Ok((shard, group))
    }

    /// OffsetDelete: per-partition errors once the deletion is durable.
    pub async fn delete_offsets(self: &Arc<Self>, group_id: &str, partitions: &[(String, i32)]) -> Result<Vec<Option<E>>, E> {
        let (shard, group) = self.existing(group_id).map_err(|e| if e == E::UnknownMemberId { E::GroupIdNotFound } else { e })?;
        let (errors, seq) = offsets::delete_offsets(&mut group.lock(), &shard.log, partitions)?;
        if let Some(seq) = seq {
            shard.log.wait_durable(seq).await.map_err(|e| storage_error(&e))?;
        }
        Ok(errors)
    }

    /// The owned shard and an existing group; UNKNOWN_MEMBER_ID if there is no such group.
    fn existing(self: &Arc<Self>, group_id: &str) -> Result<(&CoordinatorShard, GroupRef), E> {
        let shard = self.shard(group_id)?;
        shard.get(group_id).map(|g| (shard, g)).ok_or(E::UnknownMemberId)
    }
}

/// A group being unloaded or deleted takes no heartbeat.
fn dead_group(g: &group::Group) -> Result<(), (E, &'static str)> {
    if g.is(GroupState::Dead) { Err((E::CoordinatorNotAvailable, "The group is being unloaded or deleted.")) } else { Ok(()) }
}

/// Appends a heartbeat's change of `g`: the answer waits for its fsync. A change that cannot be
/// written did not happen: `undo` takes it back and the member gets the storage error.
fn persist_heartbeat<T>(g: &mut group::Group, log: &ShardLog, answer: T, undo: impl FnOnce(&mut group::Group), failed: impl FnOnce(E, String) -> T) -> Durable<T> {
    g.sync_consumer_state(now_ms());
    match g.persist(log) {
        Ok(seq) => Durable { value: answer, wait: Some((log.clone(), seq)) },
        Err(e) => {
            undo(g);
            g.sync_consumer_state(now_ms());
            Durable::now(failed(storage_error(&e), e.to_string()))
        }
    }
}

/// An answer that may have to wait for a shard-log fsync.
#[derive(Debug)]
pub struct Durable<T> {
    value: T,
    wait: Option<(ShardLog, u64)>,
}

impl<T> Durable<T> {
    fn now(value: T) -> Durable<T> {
        Durable { value, wait: None }
    }

    /// The answer once durable, or what `failed` makes of the storage error.
    pub async fn resolve(self, failed: impl FnOnce(E, String) -> T) -> T {
        match self.wait {
            None => self.value,
            Some((log, seq)) => match log.wait_durable(seq).await {
                Ok(()) => self.value,
                Err(e) => failed(storage_error(&e), e.to_string()),
            },
        }
    }
}

/// A committed offset as OffsetFetch reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetView {
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: String,
}

#[cfg(test)]
mod tests;
