//! SyncGroup, Heartbeat and LeaveGroup against a group.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use crate::GroupError as E;
use crate::ShardLog;
use parking_lot::Mutex;
use tokio::sync::oneshot;

use super::group::{Group, GroupState, SyncResult};
use super::join::validate_member;
use super::{Answer, storage_error};

/// A decoded SyncGroup.
#[derive(Debug, Clone)]
pub struct SyncRequest {
    pub group_id: String,
    pub generation: i32,
    pub member_id: String,
    pub instance_id: Option<String>,
    /// v5+: checked against the group's.
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    /// The leader's assignment, member id → bytes.
    pub assignments: Vec<(String, Bytes)>,
}

/// Runs a SyncGroup. The leader's assignment is made durable before anyone is answered, so a
/// coordinator crash never hands out an assignment it then forgets.
pub(crate) fn sync(group: &Arc<Mutex<Group>>, req: SyncRequest, log: &ShardLog, max_bytes: usize, now: Instant) -> Answer<SyncResult> {
    let mut g = group.lock();
    let fail = |e| Answer::Now(SyncResult::error(e));
    if g.is(GroupState::Dead) {
        return fail(E::CoordinatorNotAvailable);
    }
    if let Err(e) = validate_member(&g, &req.member_id, req.instance_id.as_deref()) {
        return fail(e);
    }
    if req.generation != g.generation {
        return fail(E::IllegalGeneration);
    }
    if req.protocol_type.as_ref().is_some_and(|t| Some(t) != g.protocol_type.as_ref()) || req.protocol_name.as_ref().is_some_and(|p| Some(p) != g.protocol.as_ref()) {
        return fail(E::InconsistentGroupProtocol);
    }
    match g.state {
        GroupState::Empty | GroupState::Dead => fail(E::UnknownMemberId),
        GroupState::PreparingRebalance => fail(E::RebalanceInProgress),
        GroupState::Stable => {
            g.pending_sync.remove(&req.member_id);
            let Some(m) = g.members.get_mut(&req.member_id) else { return fail(E::UnknownMemberId) };
            m.touch(now);
            let assignment = m.assignment.clone();
            Answer::Now(SyncResult { error: None, protocol_type: g.protocol_type.clone(), protocol_name: g.protocol.clone(), assignment })
        }
        GroupState::CompletingRebalance => {
            let (tx, rx) = oneshot::channel();
            g.pending_sync.remove(&req.member_id);
            let is_leader = g.leader.as_deref() == Some(req.member_id.as_str());
            let Some(m) = g.members.get_mut(&req.member_id) else { return fail(E::UnknownMemberId) };
            m.touch(now);
            m.sync_waiter = Some(tx);
            if is_leader {
                store_assignment(&mut g, group, req.assignments, log, max_bytes, now);
            }
            Answer::Wait(rx)
        }
    }
}

/// Records the leader's assignment, then (once durable) settles the group and answers every
/// member waiting in SyncGroup.
fn store_assignment(g: &mut Group, group: &Arc<Mutex<Group>>, assignments: Vec<(String, Bytes)>, log: &ShardLog, max_bytes: usize, now: Instant) {
    let total: usize = assignments.iter().map(|(_, a)| a.len()).sum();
    let generation = g.generation;
    for m in g.members.values_mut() {
        // Members the leader left out get an empty assignment, as in Kafka.
        m.assignment = assignments.iter().find(|(id, _)| *id == m.id).map(|(_, a)| a.clone()).unwrap_or_default();
    }
    let appended = if total > max_bytes {
        // Kafka fails a group record beyond the log's record size the same way.
        Err(E::UnknownServerError)
    } else {
        g.persist(log).map_err(|e| storage_error(&e))
    };
    let seq = match appended {
        Ok(seq) => seq,
        Err(e) => return fail_sync(g, e, now),
    };
    let (group, log) = (group.clone(), log.clone());
    tokio::spawn(async move {
        let durable = log.wait_durable(seq).await;
        let mut g = group.lock();
        if g.generation != generation || !g.is(GroupState::CompletingRebalance) {
            return; // A newer rebalance took over; its waiters were answered by it.
        }
        match durable {
            Ok(()) => {
                g.set_state(GroupState::Stable, crate::clock::now_ms());
                g.sync_deadline = None;
                let (pt, pn) = (g.protocol_type.clone(), g.protocol.clone());
                for m in g.members.values_mut() {
                    if let Some(w) = m.sync_waiter.take() {
                        let _ = w.send(SyncResult { error: None, protocol_type: pt.clone(), protocol_name: pn.clone(), assignment: m.assignment.clone() });
                    }
                }
            }
            Err(e) => fail_sync(&mut g, storage_error(&e), Instant::now()),
        }
    });
}

/// The assignment could not be stored: every syncing member gets the error and the group
/// rebalances, as Kafka does.
fn fail_sync(g: &mut Group, error: E, now: Instant) {
    for m in g.members.values_mut() {
        m.assignment = Bytes::new();
        if let Some(w) = m.sync_waiter.take() {
            let _ = w.send(SyncResult::error(error));
        }
    }
    g.prepare_rebalance(now, crate::clock::now_ms());
}

/// A decoded Heartbeat.
#[derive(Debug, Clone)]
pub struct HeartbeatRequest {
    pub group_id: String,
    pub generation: i32,
    pub member_id: String,
    pub instance_id: Option<String>,
}

pub(crate) fn heartbeat(g: &mut Group, req: &HeartbeatRequest, now: Instant) -> Option<E> {
    if g.is(GroupState::Dead) {
        return Some(E::CoordinatorNotAvailable);
    }
    if g.is(GroupState::Empty) {
        return Some(E::UnknownMemberId);
    }
    if let Err(e) = validate_member(g, &req.member_id, req.instance_id.as_deref()) {
        return Some(e);
    }
    if req.generation != g.generation {
        return Some(E::IllegalGeneration);
    }
    if let Some(m) = g.members.get_mut(&req.member_id) {
        m.touch(now);
    }
    // A member that has its JoinGroup answer may heartbeat before its SyncGroup: that is fine.
    g.is(GroupState::PreparingRebalance).then_some(E::RebalanceInProgress)
}

/// One member of a LeaveGroup (v3+ batches them; older versions send one member id).
#[derive(Debug, Clone)]
pub struct Leaving {
    pub member_id: String,
    pub instance_id: Option<String>,
}

/// Removes the leaving members; returns each one's error.
pub(crate) fn leave(g: &mut Group, leaving: &[Leaving], log: &ShardLog, now: Instant, now_ms: i64) -> Vec<Option<E>> {
    leaving
        .iter()
        .map(|l| {
            let id = match &l.instance_id {
                // KIP-345: an admin may remove a static member by instance id alone.
                Some(iid) => match g.static_members.get(iid) {
                    None => return Some(E::UnknownMemberId),
                    Some(current) if !l.member_id.is_empty() && *current != l.member_id => return Some(E::FencedInstanceId),
                    Some(current) => current.clone(),
                },
                None => l.member_id.clone(),
            };
            if g.pending.remove(&id).is_some() {
                g.maybe_complete_join(now, now_ms, log);
                return None;
            }
            if !g.members.contains_key(&id) {
                return Some(E::UnknownMemberId);
            }
            g.remove_member(&id, E::UnknownMemberId, now, now_ms, log);
            None
        })
        .collect()
}
