//! One classic group's in-memory state and the transitions shared by every API: member
//! removal, preparing a rebalance, completing the join phase, protocol selection, persistence.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use bytes::Bytes;
use indexmap::IndexMap;
use crate::GroupError;
use crate::{Entry, ShardLog};
use tokio::sync::oneshot;

use super::consumer::ConsumerGroup;
use super::share::ShareGroup;
use super::record::{GroupValue, Key, MemberValue, OffsetValue, to_bytes};

/// Kafka's classic group states, with the names DescribeGroups and ListGroups use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupState {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
    Dead,
}

impl GroupState {
    pub fn name(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
            GroupState::Dead => "Dead",
        }
    }
}

/// A JoinGroup answer.
#[derive(Debug, Clone, Default)]
pub struct JoinResult {
    pub error: Option<GroupError>,
    pub generation: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader: String,
    pub member_id: String,
    pub skip_assignment: bool,
    /// Only the leader gets the members (id, instance id, metadata of the chosen protocol).
    pub members: Vec<(String, Option<String>, Bytes)>,
}

impl JoinResult {
    pub fn error(error: GroupError, member_id: &str) -> JoinResult {
        JoinResult { error: Some(error), generation: -1, member_id: member_id.to_owned(), ..JoinResult::default() }
    }
}

/// A SyncGroup answer.
#[derive(Debug, Clone, Default)]
pub struct SyncResult {
    pub error: Option<GroupError>,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub assignment: Bytes,
}

impl SyncResult {
    pub fn error(error: GroupError) -> SyncResult {
        SyncResult { error: Some(error), ..SyncResult::default() }
    }
}

/// A member of a classic group.
#[derive(Debug)]
pub(crate) struct Member {
    pub(crate) id: String,
    pub(crate) instance_id: Option<String>,
    pub(crate) client_id: String,
    pub(crate) client_host: String,
    pub(crate) session_timeout: Duration,
    pub(crate) rebalance_timeout: Duration,
    /// Supported protocols in preference order, with their metadata.
    pub(crate) protocols: Vec<(String, Bytes)>,
    pub(crate) assignment: Bytes,
    pub(crate) join_waiter: Option<oneshot::Sender<JoinResult>>,
    pub(crate) sync_waiter: Option<oneshot::Sender<SyncResult>>,
    /// When the session expires unless a heartbeat (or join/sync) arrives.
    pub(crate) deadline: Instant,
}

impl Member {
    pub(crate) fn metadata(&self, protocol: &str) -> Bytes {
        self.protocols.iter().find(|(n, _)| n == protocol).map(|(_, m)| m.clone()).unwrap_or_default()
    }

    pub(crate) fn touch(&mut self, now: Instant) {
        self.deadline = now + self.session_timeout;
    }

    fn fail(&mut self, error: GroupError) {
        if let Some(w) = self.join_waiter.take() {
            let _ = w.send(JoinResult::error(error, &self.id));
        }
        if let Some(w) = self.sync_waiter.take() {
            let _ = w.send(SyncResult::error(error));
        }
    }
}

/// A committed offset with the log sequence number that made it durable: a commit is applied
/// in memory only after its fsync, and never over a newer one.
#[derive(Debug, Clone)]
pub(crate) struct Committed {
    /// `None`: deleted (kept so an older commit that becomes durable later cannot resurrect it).
    pub(crate) value: Option<OffsetValue>,
    pub(crate) seq: u64,
}

/// One group.
#[derive(Debug)]
pub(crate) struct Group {
    pub(crate) id: String,
    pub(crate) state: GroupState,
    /// Wall-clock ms of the last state change.
    pub(crate) state_ms: i64,
    pub(crate) protocol_type: Option<String>,
    pub(crate) protocol: Option<String>,
    pub(crate) generation: i32,
    pub(crate) leader: Option<String>,
    pub(crate) members: IndexMap<String, Member>,
    /// group.instance.id → member id of static members.
    pub(crate) static_members: HashMap<String, String>,
    /// Member ids handed out with MEMBER_ID_REQUIRED, with when they lapse if never used.
    pub(crate) pending: HashMap<String, Instant>,
    /// Members that have not sent SyncGroup for the current generation.
    pub(crate) pending_sync: HashSet<String>,
    /// PreparingRebalance: the join phase completes at this point even if members are missing.
    pub(crate) join_deadline: Option<Instant>,
    /// PreparingRebalance of a group that was empty: wait at least until here for more members.
    pub(crate) join_not_before: Option<Instant>,
    /// CompletingRebalance: members that have not synced by then are removed.
    pub(crate) sync_deadline: Option<Instant>,
    pub(crate) offsets: HashMap<(String, i32), Committed>,
    /// `group.initial.rebalance.delay.ms`.
    pub(crate) initial_delay: Duration,
    /// Set when this is a KIP-848 consumer group. Its classic fields then stay empty, its
    /// `state` is only Empty (no members) or Stable (members), which is what offset expiry,
    /// deletion and the classic APIs look at; [`Group::state_name`] gives Kafka's name.
    pub(crate) consumer: Option<ConsumerGroup>,
    /// Set when this is a KIP-932 share group (its `state` follows membership as for a
    /// consumer group).
    pub(crate) share: Option<ShareGroup>,
}

impl Group {
    pub(crate) fn new(id: &str, now_ms: i64, initial_delay: Duration) -> Group {
        Group {
            id: id.to_owned(),
            state: GroupState::Empty,
            state_ms: now_ms,
            protocol_type: None,
            protocol: None,
            generation: 0,
            leader: None,
            members: IndexMap::new(),
            static_members: HashMap::new(),
            pending: HashMap::new(),
            pending_sync: HashSet::new(),
            join_deadline: None,
            join_not_before: None,
            sync_deadline: None,
            offsets: HashMap::new(),
            initial_delay,
            consumer: None,
            share: None,
        }
    }

    /// Rebuilds a group from its persisted record: members come back Stable with fresh
    /// sessions (they heartbeat, or expire and trigger a rebalance), as in Kafka's load.
    pub(crate) fn restore(id: &str, value: GroupValue, now: Instant, initial_delay: Duration, consumer_session: Duration) -> Group {
        let mut g = Group::new(id, value.state_ms, initial_delay);
        g.consumer = value.consumer.map(|c| ConsumerGroup::restore(c, now, consumer_session));
        g.share = value.share.map(|s| ShareGroup::restore(s, now, consumer_session));
        g.protocol_type = value.protocol_type;
        g.protocol = value.protocol;
        g.generation = value.generation;
        g.leader = value.leader;
        let protocol = g.protocol.clone().unwrap_or_default();
        for m in value.members {
            if let Some(iid) = &m.instance_id {
                g.static_members.insert(iid.clone(), m.id.clone());
            }
            let session_timeout = Duration::from_millis(m.session_timeout_ms);
            let member = Member {
                id: m.id.clone(),
                instance_id: m.instance_id,
                client_id: m.client_id,
                client_host: m.client_host,
                session_timeout,
                rebalance_timeout: Duration::from_millis(m.rebalance_timeout_ms),
                protocols: vec![(protocol.clone(), m.subscription)],
                assignment: m.assignment,
                join_waiter: None,
                sync_waiter: None,
                deadline: now + session_timeout,
            };
            g.members.insert(m.id, member);
        }
        let empty = g.members.is_empty() && g.consumer.as_ref().is_none_or(ConsumerGroup::is_empty) && g.share.as_ref().is_none_or(ShareGroup::is_empty);
        g.state = if empty { GroupState::Empty } else { GroupState::Stable };
        g
    }

    /// A classic group with nobody in it and nobody joining: it may become a consumer group.
    pub(crate) fn is_idle_classic(&self) -> bool {
        self.consumer.is_none() && self.share.is_none() && self.is(GroupState::Empty) && self.members.is_empty() && self.pending.is_empty()
    }

    /// Turns an idle classic group (or a new one) into a consumer group; offsets stay.
    pub(crate) fn become_consumer(&mut self) {
        self.consumer = Some(ConsumerGroup::default());
        self.protocol_type = Some("consumer".to_owned());
        self.protocol = None;
        self.leader = None;
    }

    /// Turns a new group (or an idle classic one without offsets) into a share group.
    pub(crate) fn become_share(&mut self) {
        self.share = Some(ShareGroup::default());
        self.protocol_type = Some("share".to_owned());
        self.protocol = None;
        self.leader = None;
    }

    /// Keeps `state` in step with a consumer or share group's membership (see
    /// [`Group::consumer`]).
    pub(crate) fn sync_consumer_state(&mut self, now_ms: i64) {
        let empty = match (&self.consumer, &self.share) {
            (Some(c), _) => c.is_empty(),
            (None, Some(s)) => s.is_empty(),
            (None, None) => return,
        };
        let want = if empty { GroupState::Empty } else { GroupState::Stable };
        if !self.is(GroupState::Dead) && self.state != want {
            self.set_state(want, now_ms);
        }
    }

    /// The state name DescribeGroups / ListGroups / ConsumerGroupDescribe report.
    pub(crate) fn state_name(&self) -> &'static str {
        match (&self.consumer, &self.share) {
            (Some(c), _) if !self.is(GroupState::Dead) => c.state_name(),
            (_, Some(s)) if !self.is(GroupState::Dead) => s.state_name(),
            _ => self.state.name(),
        }
    }

    /// `consumer` (KIP-848), `share` (KIP-932) or `classic`, as ListGroups v5 names group types.
    pub(crate) fn group_type(&self) -> &'static str {
        match (&self.consumer, &self.share) {
            (Some(_), _) => "consumer",
            (None, Some(_)) => "share",
            (None, None) => "classic",
        }
    }

    pub(crate) fn value(&self) -> GroupValue {
        let protocol = self.protocol.clone().unwrap_or_default();
        GroupValue {
            protocol_type: self.protocol_type.clone(),
            generation: self.generation,
            protocol: self.protocol.clone(),
            leader: self.leader.clone(),
            state_ms: self.state_ms,
            members: self
                .members
                .values()
                .map(|m| MemberValue {
                    id: m.id.clone(),
                    instance_id: m.instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    session_timeout_ms: m.session_timeout.as_millis() as u64,
                    rebalance_timeout_ms: m.rebalance_timeout.as_millis() as u64,
                    subscription: m.metadata(&protocol),
                    assignment: m.assignment.clone(),
                })
                .collect(),
            consumer: self.consumer.as_ref().map(|c| c.value.clone()),
            share: self.share.as_ref().map(|s| s.value.clone()),
        }
    }

    /// Appends the group's record to the shard log; returns the sequence number to wait for.
    pub(crate) fn persist(&self, log: &ShardLog) -> Result<u64, crate::shard_log::Error> {
        log.append(&[Entry::put(Key::group(&self.id), to_bytes(&self.value()))])
    }

    pub(crate) fn set_state(&mut self, state: GroupState, now_ms: i64) {
        self.state = state;
        self.state_ms = now_ms;
    }

    pub(crate) fn is(&self, state: GroupState) -> bool {
        self.state == state
    }

    pub(crate) fn max_rebalance_timeout(&self) -> Duration {
        self.members.values().map(|m| m.rebalance_timeout).max().unwrap_or_default()
    }

    /// Protocol names every member supports.
    fn common_protocols(&self) -> Vec<String> {
        let mut members = self.members.values();
        let Some(first) = members.next() else { return Vec::new() };
        let mut common: Vec<String> = first.protocols.iter().map(|(n, _)| n.clone()).collect();
        for m in members {
            common.retain(|n| m.protocols.iter().any(|(p, _)| p == n));
        }
        common
    }

    /// Whether a member with these protocols may join (Kafka's `supportsProtocols`).
    pub(crate) fn supports(&self, protocol_type: &str, protocols: &[(String, Bytes)]) -> bool {
        if protocol_type.is_empty() || protocols.is_empty() {
            return false;
        }
        if self.members.is_empty() {
            return true;
        }
        self.protocol_type.as_deref() == Some(protocol_type) && {
            let common = self.common_protocols();
            protocols.iter().any(|(n, _)| common.contains(n))
        }
    }

    /// Each member votes for its most preferred protocol among those all support; ties go to
    /// the earlier member's preference.
    pub(crate) fn select_protocol(&self) -> Option<String> {
        let common = self.common_protocols();
        let mut votes: IndexMap<&str, usize> = IndexMap::new();
        for m in self.members.values() {
            if let Some((name, _)) = m.protocols.iter().find(|(n, _)| common.contains(n)) {
                *votes.entry(name.as_str()).or_default() += 1;
            }
        }
        let max = votes.values().copied().max()?;
        votes.into_iter().find(|(_, v)| *v == max).map(|(n, _)| n.to_owned())
    }

    pub(crate) fn all_joined(&self) -> bool {
        self.pending.is_empty() && self.members.values().all(|m| m.join_waiter.is_some())
    }

    /// Removes a member (session expiry, leave, fencing) and moves the group on: a rebalance
    /// if it was settled, completion of the join phase if that now has everyone.
    pub(crate) fn remove_member(&mut self, id: &str, error: GroupError, now: Instant, now_ms: i64, log: &ShardLog) {
        self.drop_member(id, error);
        match self.state {
            GroupState::Stable | GroupState::CompletingRebalance => {
                self.prepare_rebalance(now, now_ms);
                // As Kafka's delayed join, which is tried at once: when nobody is left the
                // group is Empty now (a DeleteGroups right after the last leave succeeds).
                self.maybe_complete_join(now, now_ms, log);
            }
            GroupState::PreparingRebalance => self.maybe_complete_join(now, now_ms, log),
            GroupState::Empty | GroupState::Dead => {}
        }
    }

    fn drop_member(&mut self, id: &str, error: GroupError) {
        let Some(mut m) = self.members.shift_remove(id) else { return };
        m.fail(error);
        if let Some(iid) = &m.instance_id
            && self.static_members.get(iid).is_some_and(|mid| mid == id)
        {
            self.static_members.remove(iid);
        }
        self.pending_sync.remove(id);
        if self.leader.as_deref() == Some(id) {
            self.leader = self.members.keys().next().cloned();
        }
    }

    /// Starts (or restarts) the join phase.
    pub(crate) fn prepare_rebalance(&mut self, now: Instant, now_ms: i64) {
        if self.is(GroupState::CompletingRebalance) {
            for m in self.members.values_mut() {
                m.assignment = Bytes::new();
                if let Some(w) = m.sync_waiter.take() {
                    let _ = w.send(SyncResult::error(GroupError::RebalanceInProgress));
                }
            }
        }
        let timeout = self.max_rebalance_timeout();
        if self.is(GroupState::Empty) {
            self.join_not_before = Some(now + timeout.min(self.initial_delay));
        }
        self.join_deadline = Some(now + timeout);
        self.sync_deadline = None;
        self.pending_sync.clear();
        self.set_state(GroupState::PreparingRebalance, now_ms);
    }

    /// Completes the join phase if every member has rejoined (and an empty group's initial
    /// delay has passed), or the rebalance timeout is up.
    pub(crate) fn maybe_complete_join(&mut self, now: Instant, now_ms: i64, log: &ShardLog) {
        if !self.is(GroupState::PreparingRebalance) {
            return;
        }
        let delayed = self.join_not_before.is_some_and(|t| now < t);
        let timed_out = self.join_deadline.is_some_and(|t| now >= t);
        if (self.all_joined() && !delayed) || timed_out {
            self.complete_join(now, now_ms, log);
        }
    }

    /// Ends the join phase: dynamic members that did not rejoin are dropped, the generation is
    /// bumped, a protocol and (if needed) a leader are chosen and every waiting member answered.
    fn complete_join(&mut self, now: Instant, now_ms: i64, log: &ShardLog) {
        let missing: Vec<String> = self.members.values().filter(|m| m.join_waiter.is_none() && m.instance_id.is_none()).map(|m| m.id.clone()).collect();
        for id in missing {
            self.drop_member(&id, GroupError::UnknownMemberId);
        }
        self.pending.clear();
        self.join_deadline = None;
        self.join_not_before = None;
        self.generation = self.generation.wrapping_add(1).max(1);
        if self.members.is_empty() {
            self.protocol = None;
            self.leader = None;
            self.set_state(GroupState::Empty, now_ms);
            if let Err(e) = self.persist(log) {
                tracing::warn!(group = %self.id, error = %e, "cannot record that the group is empty; its next rebalance records it");
            }
            return;
        }
        self.protocol = self.select_protocol();
        let leader_waiting = self.leader.as_ref().and_then(|l| self.members.get(l)).is_some_and(|m| m.join_waiter.is_some());
        if !leader_waiting {
            self.leader = self.members.values().find(|m| m.join_waiter.is_some()).or_else(|| self.members.values().next()).map(|m| m.id.clone());
        }
        self.set_state(GroupState::CompletingRebalance, now_ms);
        self.sync_deadline = Some(now + self.max_rebalance_timeout());
        self.pending_sync = self.members.keys().cloned().collect();
        let protocol = self.protocol.clone().unwrap_or_default();
        let all: Vec<(String, Option<String>, Bytes)> = self.members.values().map(|m| (m.id.clone(), m.instance_id.clone(), m.metadata(&protocol))).collect();
        let leader = self.leader.clone().unwrap_or_default();
        for m in self.members.values_mut() {
            m.touch(now);
            if let Some(w) = m.join_waiter.take() {
                let _ = w.send(JoinResult {
                    error: None,
                    generation: self.generation,
                    protocol_type: self.protocol_type.clone(),
                    protocol_name: self.protocol.clone(),
                    leader: leader.clone(),
                    member_id: m.id.clone(),
                    skip_assignment: false,
                    members: if m.id == leader { all.clone() } else { Vec::new() },
                });
            }
        }
    }

    /// The group is being unloaded or deleted: every waiter learns it must look again.
    pub(crate) fn fail_all(&mut self, error: GroupError) {
        for m in self.members.values_mut() {
            m.fail(error);
        }
    }
}
