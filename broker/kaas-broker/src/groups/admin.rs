//! DescribeGroups, ListGroups and DeleteGroups.

use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::ResponseError as E;
use kaas_groups::Entry;

use super::record::Key;
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
        // Only classic groups exist until KIP-848 lands.
        if !types.is_empty() && !types.iter().any(|t| t.eq_ignore_ascii_case("classic")) {
            return Vec::new();
        }
        let mut out = Vec::new();
        for shard in self.shards.iter().filter(|s| s.is_owned()) {
            for (id, group) in shard.all() {
                let g = group.lock();
                if g.is(GroupState::Dead) || (!states.is_empty() && !states.iter().any(|s| s.eq_ignore_ascii_case(g.state.name()))) {
                    continue;
                }
                out.push(ListedGroup { group_id: id, protocol_type: g.protocol_type.clone().unwrap_or_default(), state: g.state.name() });
            }
        }
        out.sort_by(|a, b| a.group_id.cmp(&b.group_id));
        out
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
            g.set_state(GroupState::Dead, crate::broker::now_ms());
            seq
        };
        shard.remove(group_id, &group);
        shard.log.wait_durable(seq).await.err().map(|e| super::storage_error(&e))
    }
}
