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
        if g.consumer.is_some() {
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
                let members = g.members.len() + g.consumer.as_ref().map_or(0, |c| c.value.members.len());
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
