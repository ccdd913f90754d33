//! KIP-848 consumer groups (`group.protocol=consumer`): the state a consumer group adds to a
//! [`Group`](super::group::Group), its persisted form, and the group state names Kafka reports.
//!
//! The coordinator owns the assignment: the group epoch is bumped whenever membership,
//! subscriptions or the subscribed topics' partition counts change; the target assignment is
//! recomputed by the group's server-side assignor for the new epoch; each member is then moved
//! towards its target one heartbeat at a time ([`reconcile`]), so that no partition is given to
//! a new owner before its previous owner has revoked it.
//!
//! The whole consumer state of a group (epochs, members with their subscriptions, current and
//! target assignments) is one value inside the group's shard record, rewritten when it changes
//! and made durable before the heartbeat that changed it is answered, so a coordinator move
//! (take_over of the shard) resumes with the same epochs and owners.

mod assignor;
mod heartbeat;
mod reconcile;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::{Duration, Instant};

use crate::GroupError as E;
use serde::{Deserialize, Serialize};

use super::CommitRequest;

pub use heartbeat::{ConsumerHeartbeat, HeartbeatAnswer};
pub(crate) use heartbeat::{heartbeat, validate};

/// Partitions by topic name.
pub type Partitions = BTreeMap<String, BTreeSet<i32>>;

/// The epoch of a member that left (KIP-848 `LEAVE_GROUP_MEMBER_EPOCH`).
pub(crate) const LEAVE_EPOCH: i32 = -1;
/// The epoch of a static member that left temporarily and keeps its assignment.
pub(crate) const STATIC_LEAVE_EPOCH: i32 = -2;

/// What the coordinator needs to know about topics: partition counts, and every name for
/// regex subscriptions.
pub trait TopicView {
    /// Partition count of an existing, non-internal topic.
    fn partition_count(&self, topic: &str) -> Option<i32>;
    /// Every existing, non-internal topic name.
    fn topic_names(&self) -> Vec<String>;
}

/// Where a member is in its reconciliation (Kafka's `MemberState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum MemberState {
    Stable,
    /// Asked to revoke `pending_revocation`; keeps its epoch until it has.
    UnrevokedPartitions,
    /// At the target epoch, waiting for partitions other members still hold.
    UnreleasedPartitions,
}

/// One member of a consumer group, as persisted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ConsumerMember {
    pub(crate) id: String,
    pub(crate) instance_id: Option<String>,
    pub(crate) rack_id: Option<String>,
    pub(crate) client_id: String,
    pub(crate) client_host: String,
    pub(crate) subscribed_names: Vec<String>,
    pub(crate) subscribed_regex: Option<String>,
    pub(crate) server_assignor: Option<String>,
    pub(crate) rebalance_timeout_ms: i32,
    pub(crate) member_epoch: i32,
    pub(crate) previous_epoch: i32,
    pub(crate) state: MemberState,
    /// What the member owns now (what its heartbeat answers carry).
    pub(crate) assigned: Partitions,
    /// What it was asked to give up and has not yet.
    pub(crate) pending_revocation: Partitions,
}

impl ConsumerMember {
    pub(crate) fn new(id: &str) -> ConsumerMember {
        ConsumerMember {
            id: id.to_owned(),
            instance_id: None,
            rack_id: None,
            client_id: String::new(),
            client_host: String::new(),
            subscribed_names: Vec::new(),
            subscribed_regex: None,
            server_assignor: None,
            rebalance_timeout_ms: 300_000,
            member_epoch: 0,
            previous_epoch: 0,
            state: MemberState::Stable,
            assigned: Partitions::new(),
            pending_revocation: Partitions::new(),
        }
    }

    fn is_reconciled_to(&self, epoch: i32) -> bool {
        self.state == MemberState::Stable && self.member_epoch == epoch
    }
}

/// A consumer group's persisted state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ConsumerValue {
    pub(crate) group_epoch: i32,
    /// The group epoch the target assignment was computed for.
    pub(crate) assignment_epoch: i32,
    /// Partition counts of the subscribed topics the group epoch was computed from.
    pub(crate) topics: BTreeMap<String, i32>,
    pub(crate) members: BTreeMap<String, ConsumerMember>,
    /// Target assignment by member id.
    pub(crate) target: BTreeMap<String, Partitions>,
}

/// A consumer group: its persisted value and its timers.
#[derive(Debug, Clone, Default)]
pub(crate) struct ConsumerGroup {
    pub(crate) value: ConsumerValue,
    /// Session deadline of each member.
    pub(crate) session: HashMap<String, Instant>,
    /// Members asked to revoke partitions: fenced if they have not by then.
    pub(crate) revoke_by: HashMap<String, Instant>,
}

impl ConsumerGroup {
    /// A group restored from its record: every member gets a fresh session.
    pub(crate) fn restore(
        value: ConsumerValue,
        now: Instant,
        session_timeout: Duration,
    ) -> ConsumerGroup {
        let session = value
            .members
            .keys()
            .map(|m| (m.clone(), now + session_timeout))
            .collect();
        ConsumerGroup {
            value,
            session,
            revoke_by: HashMap::new(),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.value.members.is_empty()
    }

    /// Kafka's consumer group state names.
    pub(crate) fn state_name(&self) -> &'static str {
        let v = &self.value;
        if v.members.is_empty() {
            "Empty"
        } else if v.group_epoch > v.assignment_epoch {
            "Assigning"
        } else if v
            .members
            .values()
            .any(|m| !m.is_reconciled_to(v.assignment_epoch))
        {
            "Reconciling"
        } else {
            "Stable"
        }
    }

    /// The assignor the group uses: the one most members ask for, else `uniform` (Kafka's
    /// `computePreferredServerAssignor`).
    pub(crate) fn assignor(&self) -> &'static str {
        let mut votes: BTreeMap<&'static str, usize> = BTreeMap::new();
        for m in self.value.members.values() {
            if let Some(a) = m.server_assignor.as_deref() {
                let name = if a == assignor::RANGE {
                    assignor::RANGE
                } else {
                    assignor::UNIFORM
                };
                *votes.entry(name).or_default() += 1;
            }
        }
        votes
            .into_iter()
            .max_by_key(|(name, n)| (*n, *name == assignor::UNIFORM))
            .map_or(assignor::UNIFORM, |(name, _)| name)
    }

    pub(crate) fn static_member(&self, instance_id: &str) -> Option<&ConsumerMember> {
        self.value
            .members
            .values()
            .find(|m| m.instance_id.as_deref() == Some(instance_id))
    }

    /// Removes a member (left, fenced, expired): its partitions are free at once and the group
    /// moves to a new epoch.
    pub(crate) fn remove_member(&mut self, id: &str) -> bool {
        let removed = self.value.members.remove(id).is_some();
        self.value.target.remove(id);
        self.session.remove(id);
        self.revoke_by.remove(id);
        if removed {
            self.value.group_epoch += 1;
        }
        removed
    }

    /// Partitions held (assigned or pending revocation) by members other than `except`.
    pub(crate) fn held_by_others(&self, except: &str) -> HashSet<(String, i32)> {
        self.value
            .members
            .values()
            .filter(|m| m.id != except)
            .flat_map(|m| m.assigned.iter().chain(m.pending_revocation.iter()))
            .flat_map(|(t, ps)| ps.iter().map(move |p| (t.clone(), *p)))
            .collect()
    }

    /// Members whose session or revocation deadline has passed, at `now`.
    pub(crate) fn expired(&self, now: Instant) -> Vec<String> {
        let mut out: BTreeSet<String> = self
            .session
            .iter()
            .filter(|(_, d)| **d <= now)
            .map(|(m, _)| m.clone())
            .collect();
        out.extend(
            self.revoke_by
                .iter()
                .filter(|(_, d)| **d <= now)
                .map(|(m, _)| m.clone()),
        );
        out.into_iter().collect()
    }
}

/// Kafka's `ConsumerGroup.validateOffsetCommit`: a commit outside group management (epoch < 0)
/// only while the group is empty; otherwise from a member, at its current epoch, with
/// OffsetCommit v9+ (the version that carries member epochs).
pub(crate) fn validate_commit(c: &ConsumerGroup, req: &CommitRequest, v9: bool) -> Result<(), E> {
    if req.generation < 0 && c.is_empty() {
        return Ok(());
    }
    let member = c
        .value
        .members
        .get(&req.member_id)
        .ok_or(E::UnknownMemberId)?;
    if !v9 {
        return Err(E::UnsupportedVersion);
    }
    if req.generation != member.member_epoch {
        return Err(E::StaleMemberEpoch);
    }
    Ok(())
}

/// Kafka's `ConsumerGroup.validateOffsetFetch` (OffsetFetch v9 with a member epoch).
pub(crate) fn validate_fetch(c: &ConsumerGroup, member_id: &str, epoch: i32) -> Result<(), E> {
    if epoch < 0 && member_id.is_empty() {
        return Ok(());
    }
    let member = c.value.members.get(member_id).ok_or(E::UnknownMemberId)?;
    if epoch != member.member_epoch {
        return Err(E::StaleMemberEpoch);
    }
    Ok(())
}
