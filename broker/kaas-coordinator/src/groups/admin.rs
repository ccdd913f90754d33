//! DescribeGroups, ListGroups and DeleteGroups.

use std::sync::Arc;

use bytes::Bytes;
use crate::GroupError as E;
use crate::Entry;

use super::record::Key;
use super::consumer::Partitions;
use super::{Coordinator, GroupState};

/// A group as DescribeGroups reports it.
#[derive(Debug, Clone)]
pub struct DescribedGroup {
    pub group_id: String,
    pub error: Option<E>,
    pub state: &'static str,
    pub protocol_type: String,
    pub protocol: String,
    /// (member id, instance id, client id, client host, metadata, assignment)
    pub members: Vec<(String, Option<String>, String, String, Bytes, Bytes)>,
}

/// A group as ListGroups reports it.
#[derive(Debug, Clone)]
pub struct ListedGroup {
    pub group_id: String,
    pub protocol_type: String,
    pub state: &'static str,
    /// `classic` or `consumer`.
    pub group_type: &'static str,
    /// Members of either protocol.
    pub members: usize,
}

/// A consumer group as ConsumerGroupDescribe reports it.
#[derive(Debug, Clone, Default)]
pub struct ConsumerDescribed {
    pub error: Option<E>,
    pub message: Option<String>,
    pub state: &'static str,
    pub group_epoch: i32,
    pub assignment_epoch: i32,
    pub assignor: &'static str,
    pub members: Vec<ConsumerMemberDescribed>,
}

/// One member of a described consumer group; partitions by topic name.
#[derive(Debug, Clone)]
pub struct ConsumerMemberDescribed {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub member_epoch: i32,
    pub client_id: String,
    pub client_host: String,
    pub subscribed_names: Vec<String>,
    pub subscribed_regex: Option<String>,
    pub assigned: Partitions,
    pub target: Partitions,
}

/// A share group as ShareGroupDescribe reports it.
#[derive(Debug, Clone, Default)]
pub struct ShareDescribed {
    pub error: Option<E>,
    pub message: Option<String>,
    pub state: &'static str,
    pub group_epoch: i32,
    pub members: Vec<ShareMemberDescribed>,
}

/// One member of a described share group; partitions by topic name.
#[derive(Debug, Clone)]
pub struct ShareMemberDescribed {
    pub member_id: String,
    pub rack_id: Option<String>,
    pub member_epoch: i32,
    pub client_id: String,
    pub client_host: String,
    pub subscribed_names: Vec<String>,
    pub assigned: Partitions,
}

impl Coordinator {
    /// Describes one group. An unknown group is reported as Dead (v6+: GROUP_ID_NOT_FOUND).
    pub fn describe(self: &Arc<Self>, group_id: &str, v6: bool) -> DescribedGroup {
        let mut out = DescribedGroup {
            group_id: group_id.to_owned(),
            error: None,
            state: GroupState::Dead.name(),
            protocol_type: String::new(),
            protocol: String::new(),
            members: Vec::new(),
        };
        let shard = match self.shard(group_id) {
            Ok(s) => s,
            Err(e) => return DescribedGroup { error: Some(e), ..out },
        };
        let Some(group) = shard.get(group_id) else {
            return DescribedGroup { error: v6.then_some(E::GroupIdNotFound), ..out };
        };
        let g = group.lock();
        if g.consumer.is_some() || g.share.is_some() {
            // As Kafka: DescribeGroups only knows classic groups ("is not a classic group").
            return DescribedGroup { error: v6.then_some(E::GroupIdNotFound), ..out };
        }
        out.state = g.state.name();
        out.protocol_type = g.protocol_type.clone().unwrap_or_default();
        // As in Kafka: the protocol and member metadata/assignment only of a settled group.
        let stable = g.is(GroupState::Stable);
        if stable {
            out.protocol = g.protocol.clone().unwrap_or_default();
        }
        out.members = g
            .members
            .values()
            .map(|m| {
                let (meta, assignment) = if stable { (m.metadata(&out.protocol), m.assignment.clone()) } else { (Bytes::new(), Bytes::new()) };
                (m.id.clone(), m.instance_id.clone(), m.client_id.clone(), m.client_host.clone(), meta, assignment)
            })
            .collect();
        out
    }

    /// Lists groups, filtered by state and type names (case-insensitive; empty = all).
    pub fn list(self: &Arc<Self>, states: &[String], types: &[String]) -> Vec<ListedGroup> {
        let mut out = Vec::new();
        for shard in self.shards.iter().filter(|s| s.is_owned()) {
            for (id, group) in shard.all() {
                let g = group.lock();
                let wanted = |filter: &[String], value: &str| filter.is_empty() || filter.iter().any(|f| f.eq_ignore_ascii_case(value));
                if g.is(GroupState::Dead) || !wanted(states, g.state_name()) || !wanted(types, g.group_type()) {
                    continue;
                }
                let members = g.members.len() + g.consumer.as_ref().map_or(0, |c| c.value.members.len()) + g.share.as_ref().map_or(0, |s| s.value.members.len());
                out.push(ListedGroup { group_id: id, protocol_type: g.protocol_type.clone().unwrap_or_default(), state: g.state_name(), group_type: g.group_type(), members });
            }
        }
        out.sort_by(|a, b| a.group_id.cmp(&b.group_id));
        out
    }

    /// ConsumerGroupDescribe of one group: GROUP_ID_NOT_FOUND for an unknown or classic group.
    pub fn describe_consumer(self: &Arc<Self>, group_id: &str) -> ConsumerDescribed {
        let fail = |e: E, message: String| ConsumerDescribed { error: Some(e), message: Some(message), state: GroupState::Dead.name(), ..ConsumerDescribed::default() };
        let shard = match self.shard(group_id) {
            Ok(s) => s,
            Err(e) => return fail(e, "This broker does not coordinate the group.".into()),
        };
        let Some(group) = shard.get(group_id) else { return fail(E::GroupIdNotFound, format!("Group {group_id} not found.")) };
        let g = group.lock();
        let Some(c) = g.consumer.as_ref().filter(|_| !g.is(GroupState::Dead)) else {
            return fail(E::GroupIdNotFound, format!("Group {group_id} is not a consumer group."));
        };
        let members = c
            .value
            .members
            .values()
            .map(|m| ConsumerMemberDescribed {
                member_id: m.id.clone(),
                instance_id: m.instance_id.clone(),
                rack_id: m.rack_id.clone(),
                member_epoch: m.member_epoch,
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                subscribed_names: m.subscribed_names.clone(),
                subscribed_regex: m.subscribed_regex.clone(),
                assigned: m.assigned.clone(),
                target: c.value.target.get(&m.id).cloned().unwrap_or_default(),
            })
            .collect();
        ConsumerDescribed {
            error: None,
            message: None,
            state: g.state_name(),
            group_epoch: c.value.group_epoch,
            assignment_epoch: c.value.assignment_epoch,
            assignor: c.assignor(),
            members,
        }
    }

    /// ShareGroupDescribe of one group: GROUP_ID_NOT_FOUND for an unknown or other group.
    pub fn describe_share(self: &Arc<Self>, group_id: &str) -> ShareDescribed {
        let fail = |e: E, message: String| ShareDescribed { error: Some(e), message: Some(message), state: GroupState::Dead.name(), ..ShareDescribed::default() };
        let shard = match self.shard(group_id) {
            Ok(s) => s,
            Err(e) => return fail(e, "This broker does not coordinate the group.".into()),
        };
        let Some(group) = shard.get(group_id) else { return fail(E::GroupIdNotFound, format!("Group {group_id} not found.")) };
        let g = group.lock();
        let Some(sg) = g.share.as_ref().filter(|_| !g.is(GroupState::Dead)) else {
            return fail(E::GroupIdNotFound, format!("Group {group_id} is not a share group."));
        };
        let members = sg
            .value
            .members
            .values()
            .map(|m| ShareMemberDescribed {
                member_id: m.id.clone(),
                rack_id: m.rack_id.clone(),
                member_epoch: m.member_epoch,
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                subscribed_names: m.subscribed_names.clone(),
                assigned: m.assigned.clone(),
            })
            .collect();
        ShareDescribed { error: None, message: None, state: g.state_name(), group_epoch: sg.value.group_epoch, members }
    }

    /// The topics a share group may have share-partition state in (every topic it was ever
    /// assigned), and whether it is empty; `None` if `group_id` is not a share group here.
    pub fn share_group_topics(self: &Arc<Self>, group_id: &str) -> Result<Option<(Vec<String>, bool)>, E> {
        let shard = self.shard(group_id)?;
        let Some(group) = shard.get(group_id) else { return Ok(None) };
        let g = group.lock();
        Ok(g.share.as_ref().filter(|_| !g.is(GroupState::Dead)).map(|s| (s.value.initialized.iter().cloned().collect(), s.is_empty())))
    }

    /// A share group for AlterShareGroupOffsets: the existing one, or a new empty one (as Kafka
    /// creates it), durable before the answer. `Ok(false)`: it has members.
    pub async fn ensure_share_group(self: &Arc<Self>, group_id: &str) -> Result<bool, E> {
        let shard = self.shard(group_id)?;
        let group = shard.get_or_create(group_id);
        let seq = {
            let mut g = group.lock();
            if g.is(GroupState::Dead) {
                return Err(E::CoordinatorNotAvailable);
            }
            if let Some(sg) = &g.share {
                return Ok(sg.is_empty());
            }
            if !g.is_idle_classic() || !g.offsets.is_empty() {
                return Err(E::GroupIdNotFound);
            }
            g.become_share();
            match g.persist(&shard.log) {
                Ok(seq) => seq,
                Err(e) => {
                    g.share = None;
                    return Err(super::storage_error(&e));
                }
            }
        };
        shard.log.wait_durable(seq).await.map_err(|e| super::storage_error(&e))?;
        Ok(true)
    }

    /// Records that a share group has state in `topics` (an AlterShareGroupOffsets made some),
    /// so a later DeleteGroups forgets it there too. Appended without waiting: the state it
    /// points at is durable already, and the next change of the group carries it again.
    pub fn note_share_topics(self: &Arc<Self>, group_id: &str, topics: &[String]) {
        let Ok(shard) = self.shard(group_id) else { return };
        let Some(group) = shard.get(group_id) else { return };
        let mut g = group.lock();
        let Some(sg) = g.share.as_mut() else { return };
        let before = sg.value.initialized.len();
        sg.value.initialized.extend(topics.iter().cloned());
        if sg.value.initialized.len() != before
            && let Err(e) = g.persist(&shard.log)
        {
            tracing::warn!(group = group_id, error = %e, "recording the share group's topics failed; its next change records them");
        }
    }

    /// Deletes an empty group and its offsets, durably.
    pub async fn delete_group(self: &Arc<Self>, group_id: &str) -> Option<E> {
        let shard = match self.shard(group_id) {
            Ok(s) => s,
            Err(e) => return Some(e),
        };
        let Some(group) = shard.get(group_id) else { return Some(E::GroupIdNotFound) };
        let seq = {
            let mut g = group.lock();
            match g.state {
                GroupState::Dead => return Some(E::GroupIdNotFound),
                GroupState::Empty => {}
                _ => return Some(E::NonEmptyGroup),
            }
            let mut tombstones: Vec<Entry> = g.offsets.iter().filter(|(_, c)| c.value.is_some()).map(|((t, p), _)| Entry::delete(Key::offset(group_id, t, *p))).collect();
            tombstones.push(Entry::delete(Key::group(group_id)));
            let seq = match shard.log.append(&tombstones) {
                Ok(seq) => seq,
                Err(e) => return Some(super::storage_error(&e)),
            };
            g.set_state(GroupState::Dead, crate::clock::now_ms());
            seq
        };
        shard.remove(group_id, &group);
        shard.log.wait_durable(seq).await.err().map(|e| super::storage_error(&e))
    }
}
