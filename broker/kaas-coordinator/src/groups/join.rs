//! JoinGroup: the MEMBER_ID_REQUIRED handshake, static membership, and entry into (or a quick
//! answer outside of) the join phase. Mirrors Kafka's classic `GroupCoordinator.handleJoinGroup`.

use std::time::{Duration, Instant};

use bytes::Bytes;
use crate::GroupError as E;
use crate::ShardLog;
use tokio::sync::oneshot;

use super::config::GroupConfig;
use super::group::{Group, GroupState, JoinResult, Member};
use super::{Answer, storage_error};

/// A decoded, version-normalised JoinGroup.
#[derive(Debug, Clone)]
pub struct JoinRequest {
    pub group_id: String,
    pub member_id: String,
    pub instance_id: Option<String>,
    pub session_timeout_ms: i32,
    /// -1 (v0) means "the session timeout".
    pub rebalance_timeout_ms: i32,
    pub protocol_type: String,
    pub protocols: Vec<(String, Bytes)>,
    pub client_id: String,
    pub client_host: String,
    /// v4+: a dynamic member must first ask for its member id (KIP-394).
    pub require_known_member_id: bool,
    /// v9+: a static leader rejoining a stable group can skip the assignment (KIP-814).
    pub supports_skip_assignment: bool,
}

impl JoinRequest {
    fn session_timeout(&self) -> Duration {
        Duration::from_millis(u64::try_from(self.session_timeout_ms).unwrap_or(0))
    }

    fn rebalance_timeout(&self) -> Duration {
        match u64::try_from(self.rebalance_timeout_ms) {
            Ok(ms) if ms > 0 => Duration::from_millis(ms),
            _ => self.session_timeout(),
        }
    }

    /// Checks that do not need the group.
    pub(crate) fn validate(&self, config: &GroupConfig) -> Result<(), E> {
        if self.group_id.is_empty() {
            return Err(E::InvalidGroupId);
        }
        let session = self.session_timeout();
        if self.session_timeout_ms < 0 || session < config.min_session_timeout || session > config.max_session_timeout {
            return Err(E::InvalidSessionTimeout);
        }
        if self.protocols.iter().map(|(n, m)| n.len() + m.len()).sum::<usize>() > config.max_member_metadata_bytes {
            tracing::info!(group = %self.group_id, client = %self.client_id, "JoinGroup refused: member metadata too large");
            return Err(E::InvalidRequest);
        }
        Ok(())
    }
}

/// Kafka's member id: the client id (or instance id) and a random UUID.
fn new_member_id(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::new_v4())
}

/// Runs a JoinGroup against a locked group.
pub(crate) fn join(g: &mut Group, req: JoinRequest, config: &GroupConfig, log: &ShardLog, now: Instant, now_ms: i64) -> Answer<JoinResult> {
    let fail = |e| Answer::Now(JoinResult::error(e, &req.member_id));
    if g.is(GroupState::Dead) {
        return fail(E::CoordinatorNotAvailable);
    }
    if g.share.is_some() {
        return fail(E::InconsistentGroupProtocol); // Kafka: a share group takes no classic members
    }
    if let Some(c) = &g.consumer {
        // A classic member may take over an empty consumer group (Kafka deletes the empty
        // group and creates a classic one; offsets stay). Kafka 4 would also let it join a
        // consumer group with members (KIP-848 migration); kaas does not, and answers as
        // Kafka does for protocols the group cannot take.
        if !c.is_empty() {
            return fail(E::InconsistentGroupProtocol);
        }
        g.consumer = None;
        g.protocol_type = None;
    }
    if !g.supports(&req.protocol_type, &req.protocols) {
        return fail(E::InconsistentGroupProtocol);
    }
    if req.member_id.is_empty() {
        join_new(g, req, config, log, now, now_ms)
    } else {
        join_known(g, req, log, now, now_ms)
    }
}

fn join_new(g: &mut Group, req: JoinRequest, config: &GroupConfig, log: &ShardLog, now: Instant, now_ms: i64) -> Answer<JoinResult> {
    if let Some(iid) = req.instance_id.clone()
        && let Some(old_id) = g.static_members.get(&iid).cloned()
    {
        return replace_static(g, req, &old_id, log, now, now_ms);
    }
    if g.members.len() + g.pending.len() >= config.max_size {
        return Answer::Now(JoinResult::error(E::GroupMaxSizeReached, ""));
    }
    if req.instance_id.is_none() && req.require_known_member_id {
        // KIP-394: hand out the id first, so a client that times out and retries does not
        // leave a ghost member behind for a whole session timeout.
        let id = new_member_id(&req.client_id);
        g.pending.insert(id.clone(), now + req.session_timeout());
        return Answer::Now(JoinResult { member_id: id, ..JoinResult::error(E::MemberIdRequired, "") });
    }
    let id = new_member_id(req.instance_id.as_deref().unwrap_or(&req.client_id));
    add_and_rebalance(g, req, id, log, now, now_ms)
}

fn add_and_rebalance(g: &mut Group, req: JoinRequest, id: String, log: &ShardLog, now: Instant, now_ms: i64) -> Answer<JoinResult> {
    let (tx, rx) = oneshot::channel();
    let (session_timeout, rebalance_timeout) = (req.session_timeout(), req.rebalance_timeout());
    g.pending.remove(&id);
    if g.members.is_empty() {
        g.protocol_type = Some(req.protocol_type.clone());
    }
    if let Some(iid) = &req.instance_id {
        g.static_members.insert(iid.clone(), id.clone());
    }
    let member = Member {
        id: id.clone(),
        instance_id: req.instance_id.clone(),
        client_id: req.client_id.clone(),
        client_host: req.client_host.clone(),
        session_timeout,
        rebalance_timeout,
        protocols: req.protocols,
        assignment: Bytes::new(),
        join_waiter: Some(tx),
        sync_waiter: None,
        deadline: now + session_timeout,
    };
    g.members.insert(id, member);
    match g.state {
        GroupState::PreparingRebalance => {
            // A newcomer during an empty group's initial delay extends it (up to the deadline).
            if let (Some(_), Some(deadline)) = (g.join_not_before, g.join_deadline) {
                g.join_not_before = Some((now + g.initial_delay).min(deadline));
            }
            let deadline = now + g.max_rebalance_timeout();
            g.join_deadline = Some(g.join_deadline.map_or(deadline, |d| d.max(deadline)));
        }
        _ => g.prepare_rebalance(now, now_ms),
    }
    g.maybe_complete_join(now, now_ms, log);
    Answer::Wait(rx)
}

fn join_known(g: &mut Group, req: JoinRequest, log: &ShardLog, now: Instant, now_ms: i64) -> Answer<JoinResult> {
    let fail = |e| Answer::Now(JoinResult::error(e, &req.member_id));
    if g.pending.contains_key(&req.member_id) {
        let id = req.member_id.clone();
        return add_and_rebalance(g, req, id, log, now, now_ms);
    }
    if let Err(e) = validate_member(g, &req.member_id, req.instance_id.as_deref()) {
        return fail(e);
    }
    let generation = g.generation;
    let leader = g.leader.clone().unwrap_or_default();
    let is_leader = leader == req.member_id;
    let stable = g.is(GroupState::Stable);
    let (session_timeout, rebalance_timeout) = (req.session_timeout(), req.rebalance_timeout());
    let Some(member) = g.members.get_mut(&req.member_id) else { return fail(E::UnknownMemberId) };
    member.touch(now);
    let unchanged = member.protocols == req.protocols;
    match g.state {
        GroupState::Empty | GroupState::Dead => fail(E::UnknownMemberId),
        GroupState::CompletingRebalance | GroupState::Stable if unchanged && !(stable && is_leader) => {
            // Nothing changed: answer with the current generation (the leader gets the members
            // again while the assignment is still pending).
            let protocol = g.protocol.clone().unwrap_or_default();
            let members = if is_leader && g.is(GroupState::CompletingRebalance) {
                g.members.values().map(|m| (m.id.clone(), m.instance_id.clone(), m.metadata(&protocol))).collect()
            } else {
                Vec::new()
            };
            Answer::Now(JoinResult {
                error: None,
                generation,
                protocol_type: g.protocol_type.clone(),
                protocol_name: g.protocol.clone(),
                leader,
                member_id: req.member_id,
                skip_assignment: false,
                members,
            })
        }
        _ => {
            let (tx, rx) = oneshot::channel();
            member.protocols = req.protocols;
            member.session_timeout = session_timeout;
            member.rebalance_timeout = rebalance_timeout;
            if let Some(old) = member.join_waiter.replace(tx) {
                // The client gave up on its previous JoinGroup and sent another.
                let _ = old.send(JoinResult::error(E::RebalanceInProgress, &req.member_id));
            }
            if !g.is(GroupState::PreparingRebalance) {
                g.prepare_rebalance(now, now_ms);
            }
            g.maybe_complete_join(now, now_ms, log);
            Answer::Wait(rx)
        }
    }
}

/// A static member rejoining with an empty member id: it gets a new id, its previous
/// incarnation is fenced, and a stable group is not rebalanced if nothing changed (KIP-345).
fn replace_static(g: &mut Group, req: JoinRequest, old_id: &str, log: &ShardLog, now: Instant, now_ms: i64) -> Answer<JoinResult> {
    let iid = req.instance_id.clone().unwrap_or_default();
    let new_id = new_member_id(&iid);
    let Some(mut member) = g.members.shift_remove(old_id) else {
        g.static_members.remove(&iid);
        return add_and_rebalance(g, req, new_id, log, now, now_ms);
    };
    if let Some(w) = member.join_waiter.take() {
        let _ = w.send(JoinResult::error(E::FencedInstanceId, old_id));
    }
    if let Some(w) = member.sync_waiter.take() {
        let _ = w.send(super::group::SyncResult::error(E::FencedInstanceId));
    }
    member.id = new_id.clone();
    member.session_timeout = req.session_timeout();
    member.rebalance_timeout = req.rebalance_timeout();
    member.protocols = req.protocols;
    member.client_id = req.client_id;
    member.client_host = req.client_host;
    member.touch(now);
    g.members.insert(new_id.clone(), member);
    g.static_members.insert(iid, new_id.clone());
    if g.pending_sync.remove(old_id) {
        g.pending_sync.insert(new_id.clone());
    }
    let old_leader = g.leader.clone().unwrap_or_default();
    if old_leader == old_id {
        g.leader = Some(new_id.clone());
    }
    if g.is(GroupState::Stable) && g.select_protocol() == g.protocol {
        // The new member id must survive a coordinator move before the member learns it:
        // otherwise the next coordinator would fence the member it just answered.
        let seq = match g.persist(log) {
            Ok(seq) => seq,
            Err(e) => return Answer::Now(JoinResult::error(storage_error(&e), "")),
        };
        let is_leader = g.leader.as_deref() == Some(new_id.as_str());
        let protocol = g.protocol.clone().unwrap_or_default();
        let (leader, skip, members) = if req.supports_skip_assignment {
            let members = if is_leader { g.members.values().map(|m| (m.id.clone(), m.instance_id.clone(), m.metadata(&protocol))).collect() } else { Vec::new() };
            (g.leader.clone().unwrap_or_default(), is_leader, members)
        } else {
            // Older clients would reassign if told they lead: name the previous leader id, so
            // the member simply syncs and gets its assignment back.
            (old_leader, false, Vec::new())
        };
        let answer = JoinResult {
            error: None,
            generation: g.generation,
            protocol_type: g.protocol_type.clone(),
            protocol_name: g.protocol.clone(),
            leader,
            member_id: new_id,
            skip_assignment: skip,
            members,
        };
        return answer_when_durable(answer, log, seq);
    }
    let (tx, rx) = oneshot::channel();
    if let Some(m) = g.members.get_mut(&new_id) {
        m.join_waiter = Some(tx);
    }
    if !g.is(GroupState::PreparingRebalance) {
        g.prepare_rebalance(now, now_ms);
    }
    g.maybe_complete_join(now, now_ms, log);
    Answer::Wait(rx)
}

/// Sends `answer` once the shard log is durable up to `seq` (the error instead if it cannot be).
fn answer_when_durable(answer: JoinResult, log: &ShardLog, seq: u64) -> Answer<JoinResult> {
    let (tx, rx) = oneshot::channel();
    let log = log.clone();
    tokio::spawn(async move {
        let result = match log.wait_durable(seq).await {
            Ok(()) => answer,
            Err(e) => JoinResult::error(storage_error(&e), ""),
        };
        let _ = tx.send(result);
    });
    Answer::Wait(rx)
}

/// Kafka's `validateMember`: a static member must present its current member id.
pub(crate) fn validate_member(g: &Group, member_id: &str, instance_id: Option<&str>) -> Result<(), E> {
    match instance_id {
        Some(iid) => match g.static_members.get(iid) {
            None => Err(E::UnknownMemberId),
            Some(current) if current != member_id => Err(E::FencedInstanceId),
            Some(_) => Ok(()),
        },
        None if g.members.contains_key(member_id) => Ok(()),
        None => Err(E::UnknownMemberId),
    }
}
