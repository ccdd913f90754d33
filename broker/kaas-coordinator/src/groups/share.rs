//! KIP-932 share groups: membership and assignment (ShareGroupHeartbeat). Records of a share
//! group are not owned by one member: the share-partition leaders hand them out record by
//! record (`crate::share_partition`), so the coordinator only decides which members fetch from
//! which partitions. There is no revocation step: a new assignment takes effect at once, and
//! a partition may be assigned to several members (more members than partitions).
//!
//! The whole share state of a group (epoch, members with their subscriptions and assignments)
//! is one value inside the group's shard record, made durable before the heartbeat that changed
//! it is answered, as for consumer groups.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use crate::GroupError as E;
use serde::{Deserialize, Serialize};

use super::consumer::{LEAVE_EPOCH, Partitions, TopicView};

/// The one assignor share groups have (Kafka's `SimpleAssignor`).
pub const SHARE_ASSIGNOR: &str = "simple";

/// A decoded ShareGroupHeartbeat, with the group's effective timing settings.
#[derive(Debug, Clone)]
pub struct ShareHeartbeat {
    pub group_id: String,
    pub member_id: String,
    pub member_epoch: i32,
    pub rack_id: Option<String>,
    /// `None`: unchanged since the last heartbeat.
    pub subscribed_topic_names: Option<Vec<String>>,
    pub client_id: String,
    pub client_host: String,
    /// `share.session.timeout.ms` of the group.
    pub session_timeout: Duration,
    /// `share.heartbeat.interval.ms` of the group.
    pub heartbeat_interval: Duration,
    /// `group.share.max.size`.
    pub max_size: usize,
}

/// A ShareGroupHeartbeat answer.
#[derive(Debug, Clone, Default)]
pub struct ShareHeartbeatAnswer {
    pub error: Option<E>,
    pub message: Option<String>,
    pub member_id: Option<String>,
    pub member_epoch: i32,
    pub heartbeat_interval_ms: i32,
    /// The member's assignment, when it changed or the member (re)joined.
    pub assignment: Option<Partitions>,
}

impl ShareHeartbeatAnswer {
    pub fn error(error: E, message: impl Into<String>) -> ShareHeartbeatAnswer {
        ShareHeartbeatAnswer { error: Some(error), message: Some(message.into()), ..ShareHeartbeatAnswer::default() }
    }
}

/// One member of a share group, as persisted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ShareMember {
    pub(crate) id: String,
    pub(crate) rack_id: Option<String>,
    pub(crate) client_id: String,
    pub(crate) client_host: String,
    pub(crate) subscribed_names: Vec<String>,
    /// The epoch the member was last told; it moves to the group epoch at its next heartbeat.
    pub(crate) member_epoch: i32,
    /// The epoch before that: a member whose answer was lost may still send it.
    #[serde(default)]
    pub(crate) previous_epoch: i32,
    pub(crate) assigned: Partitions,
}

/// A share group's persisted state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ShareValue {
    pub(crate) group_epoch: i32,
    /// Partition counts of the subscribed topics the assignment was computed from.
    pub(crate) topics: BTreeMap<String, i32>,
    pub(crate) members: BTreeMap<String, ShareMember>,
    /// Every topic the group was ever assigned: where share-partition state may exist
    /// (DeleteGroups and DescribeShareGroupOffsets look there).
    #[serde(default)]
    pub(crate) initialized: BTreeSet<String>,
}

/// A share group: its persisted value and its members' session deadlines.
#[derive(Debug, Clone, Default)]
pub(crate) struct ShareGroup {
    pub(crate) value: ShareValue,
    pub(crate) session: HashMap<String, (Instant, Duration)>,
}

type Refusal = (E, String);

impl ShareGroup {
    /// A group restored from its record: every member gets a fresh session.
    pub(crate) fn restore(value: ShareValue, now: Instant, session_timeout: Duration) -> ShareGroup {
        let session = value.members.keys().map(|m| (m.clone(), (now + session_timeout, session_timeout))).collect();
        ShareGroup { value, session }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.value.members.is_empty()
    }

    /// Kafka's share group state names.
    pub(crate) fn state_name(&self) -> &'static str {
        if self.is_empty() { "Empty" } else { "Stable" }
    }

    /// Members whose session has expired at `now`.
    pub(crate) fn expired(&self, now: Instant) -> Vec<String> {
        self.session.iter().filter(|(_, (d, _))| *d <= now).map(|(m, _)| m.clone()).collect()
    }

    /// Removes a member (left or expired) and reassigns the others; without a topic view (the
    /// clock's expiry), from the partition counts the group last saw.
    pub(crate) fn remove_member(&mut self, id: &str, topics: Option<&dyn TopicView>) -> bool {
        self.session.remove(id);
        if self.value.members.remove(id).is_none() {
            return false;
        }
        self.rebalance(topics);
        true
    }

    /// A new group epoch and a new assignment for every member (each takes it, and the new
    /// epoch, at its next heartbeat: there is nothing to revoke first).
    fn rebalance(&mut self, topics: Option<&dyn TopicView>) {
        let v = &mut self.value;
        v.group_epoch = v.group_epoch.wrapping_add(1).max(1);
        v.topics = match topics {
            Some(topics) => subscribed_partition_counts(v, topics),
            None => {
                let last = std::mem::take(&mut v.topics);
                subscribed_partition_counts(v, &last)
            }
        };
        let assignment = assign(v);
        v.initialized.extend(assignment.values().flat_map(|ps| ps.keys().cloned()));
        for (id, m) in v.members.iter_mut() {
            m.assigned = assignment.get(id).cloned().unwrap_or_default();
        }
    }
}

/// Kafka's `throwIfShareGroupHeartbeatRequestIsInvalid`.
pub(crate) fn validate(req: &ShareHeartbeat) -> Result<(), Refusal> {
    let invalid = |m: &str| Err((E::InvalidRequest, m.to_owned()));
    if req.group_id.is_empty() {
        return Err((E::InvalidGroupId, "GroupId can't be empty.".into()));
    }
    if req.member_id.is_empty() {
        return invalid("MemberId can't be empty.");
    }
    if req.rack_id.as_deref() == Some("") {
        return invalid("RackId can't be empty.");
    }
    match req.member_epoch {
        0 if req.subscribed_topic_names.as_ref().is_none_or(Vec::is_empty) => invalid("SubscribedTopicNames must be set in first request."),
        e if e >= 0 || e == LEAVE_EPOCH => Ok(()),
        _ => invalid("MemberEpoch is invalid."),
    }
}

/// Runs one heartbeat against the group. The caller persists the group if its value changed.
pub(crate) fn heartbeat(sg: &mut ShareGroup, req: ShareHeartbeat, topics: &dyn TopicView, now: Instant) -> ShareHeartbeatAnswer {
    let interval = i32::try_from(req.heartbeat_interval.as_millis()).unwrap_or(i32::MAX);
    let result = if req.member_epoch == LEAVE_EPOCH { leave(sg, &req, topics) } else { join_or_beat(sg, req, topics, now) };
    match result {
        Ok(mut answer) => {
            answer.heartbeat_interval_ms = interval;
            answer
        }
        Err((e, message)) => ShareHeartbeatAnswer::error(e, message),
    }
}

fn leave(sg: &mut ShareGroup, req: &ShareHeartbeat, topics: &dyn TopicView) -> Result<ShareHeartbeatAnswer, Refusal> {
    if !sg.remove_member(&req.member_id, Some(topics)) {
        return Err((E::UnknownMemberId, format!("Member {} is not a member of group {}.", req.member_id, req.group_id)));
    }
    Ok(ShareHeartbeatAnswer { member_id: Some(req.member_id.clone()), member_epoch: LEAVE_EPOCH, ..ShareHeartbeatAnswer::default() })
}

fn join_or_beat(sg: &mut ShareGroup, req: ShareHeartbeat, topics: &dyn TopicView, now: Instant) -> Result<ShareHeartbeatAnswer, Refusal> {
    let joining = req.member_epoch == 0;
    let known = sg.value.members.get(&req.member_id);
    match known {
        None if !joining => return Err((E::UnknownMemberId, format!("Member {} is not a member of group {}.", req.member_id, req.group_id))),
        None if sg.value.members.len() >= req.max_size => {
            return Err((E::GroupMaxSizeReached, format!("The share group has reached its maximum capacity of {} members.", req.max_size)));
        }
        Some(m) if !joining && m.member_epoch != req.member_epoch && (m.previous_epoch == 0 || m.previous_epoch != req.member_epoch) => {
            return Err((E::FencedMemberEpoch, format!("The share group member has a different epoch ({}) than the one received ({}).", m.member_epoch, req.member_epoch)));
        }
        _ => {}
    }
    let previous_epoch = known.map_or(0, |m| m.member_epoch);
    let member = sg.value.members.entry(req.member_id.clone()).or_insert_with(|| ShareMember {
        id: req.member_id.clone(),
        rack_id: None,
        client_id: String::new(),
        client_host: String::new(),
        subscribed_names: Vec::new(),
        member_epoch: 0,
        previous_epoch: 0,
        assigned: Partitions::new(),
    });
    member.rack_id = req.rack_id.clone();
    member.client_id = req.client_id.clone();
    member.client_host = req.client_host.clone();
    let mut changed = joining && previous_epoch == 0;
    if let Some(mut names) = req.subscribed_topic_names.clone() {
        names.sort();
        names.dedup();
        if names != member.subscribed_names {
            member.subscribed_names = names;
            changed = true;
        }
    }
    sg.session.insert(req.member_id.clone(), (now + req.session_timeout, req.session_timeout));
    // A topic created, deleted or grown under the group also moves it to a new epoch.
    if changed || subscribed_partition_counts(&sg.value, topics) != sg.value.topics {
        sg.rebalance(Some(topics));
    }
    let group_epoch = sg.value.group_epoch;
    let Some(member) = sg.value.members.get_mut(&req.member_id) else {
        return Err((E::UnknownServerError, "member vanished".into()));
    };
    if member.member_epoch != group_epoch {
        member.previous_epoch = member.member_epoch;
        member.member_epoch = group_epoch;
    }
    let send_assignment = joining || member.member_epoch != req.member_epoch || req.subscribed_topic_names.is_some();
    Ok(ShareHeartbeatAnswer {
        member_id: Some(member.id.clone()),
        member_epoch: member.member_epoch,
        assignment: send_assignment.then(|| member.assigned.clone()),
        ..ShareHeartbeatAnswer::default()
    })
}

/// Partition counts of every topic some member subscribes to and that exists.
fn subscribed_partition_counts(v: &ShareValue, topics: &dyn TopicView) -> BTreeMap<String, i32> {
    v.members
        .values()
        .flat_map(|m| m.subscribed_names.iter())
        .filter_map(|t| topics.partition_count(t).map(|n| (t.clone(), n)))
        .collect()
}

impl TopicView for BTreeMap<String, i32> {
    fn partition_count(&self, topic: &str) -> Option<i32> {
        self.get(topic).copied()
    }
    fn topic_names(&self) -> Vec<String> {
        self.keys().cloned().collect()
    }
}

/// Kafka's `SimpleAssignor` in spirit: each topic's partitions are spread evenly over the
/// members subscribed to it; with more members than partitions, each member still gets one
/// partition (partitions are then shared: the share-partition leader hands each record to
/// one member at a time). Deterministic: members in id order.
fn assign(v: &ShareValue) -> BTreeMap<String, Partitions> {
    let mut out: BTreeMap<String, Partitions> = BTreeMap::new();
    for (topic, &count) in &v.topics {
        let members: Vec<&String> = v.members.values().filter(|m| m.subscribed_names.contains(topic)).map(|m| &m.id).collect();
        if members.is_empty() || count <= 0 {
            continue;
        }
        let n = members.len();
        let partitions = usize::try_from(count).unwrap_or(0);
        for p in 0..partitions.max(n) {
            let (member, partition) = (members[p % n], p % partitions);
            out.entry(member.clone()).or_default().entry(topic.clone()).or_default().insert(partition as i32);
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn beat(member: &str, epoch: i32, topics: Option<&[&str]>) -> ShareHeartbeat {
        ShareHeartbeat {
            group_id: "g".into(),
            member_id: member.into(),
            member_epoch: epoch,
            rack_id: None,
            subscribed_topic_names: topics.map(|t| t.iter().map(|s| s.to_string()).collect()),
            client_id: "c".into(),
            client_host: "/127.0.0.1".into(),
            session_timeout: Duration::from_secs(45),
            heartbeat_interval: Duration::from_secs(5),
            max_size: 3,
        }
    }

    fn partitions(a: &ShareHeartbeatAnswer, topic: &str) -> Vec<i32> {
        a.assignment.as_ref().and_then(|p| p.get(topic)).map(|s| s.iter().copied().collect()).unwrap_or_default()
    }

    #[test]
    fn members_split_partitions_and_share_them_when_outnumbering() {
        let topics = BTreeMap::from([("t".to_string(), 3)]);
        let mut sg = ShareGroup::default();
        let now = Instant::now();
        let a = heartbeat(&mut sg, beat("a", 0, Some(&["t"])), &topics, now);
        assert_eq!((a.error, a.member_epoch, partitions(&a, "t")), (None, 1, vec![0, 1, 2]));
        let b = heartbeat(&mut sg, beat("b", 0, Some(&["t"])), &topics, now);
        assert_eq!((b.member_epoch, partitions(&b, "t")), (2, vec![1]));
        // a is told its new assignment at its next heartbeat, and moves to the new epoch.
        let a = heartbeat(&mut sg, beat("a", 1, None), &topics, now);
        assert_eq!((a.member_epoch, partitions(&a, "t")), (2, vec![0, 2]));
        let a = heartbeat(&mut sg, beat("a", 2, None), &topics, now);
        assert_eq!((a.member_epoch, a.assignment.is_none()), (2, true));
        // Four members on three partitions: everyone fetches from some partition.
        let c = heartbeat(&mut sg, beat("c", 0, Some(&["t"])), &topics, now);
        assert_eq!(partitions(&c, "t"), vec![2]);
        let d = heartbeat(&mut sg, beat("d", 0, Some(&["t"])), &topics, now);
        assert_eq!(d.error, Some(E::GroupMaxSizeReached));
    }

    #[test]
    fn fencing_leaving_and_expiry() {
        let topics = BTreeMap::from([("t".to_string(), 2)]);
        let mut sg = ShareGroup::default();
        let now = Instant::now();
        heartbeat(&mut sg, beat("a", 0, Some(&["t"])), &topics, now);
        assert_eq!(heartbeat(&mut sg, beat("a", 7, None), &topics, now).error, Some(E::FencedMemberEpoch));
        assert_eq!(heartbeat(&mut sg, beat("x", 1, None), &topics, now).error, Some(E::UnknownMemberId));
        heartbeat(&mut sg, beat("b", 0, Some(&["t"])), &topics, now);
        let left = heartbeat(&mut sg, beat("b", LEAVE_EPOCH, None), &topics, now);
        assert_eq!((left.error, left.member_epoch), (None, LEAVE_EPOCH));
        assert_eq!(sg.value.group_epoch, 3);
        assert!(sg.expired(now + Duration::from_secs(44)).is_empty());
        assert_eq!(sg.expired(now + Duration::from_secs(45)), vec!["a".to_string()]);
        assert!(sg.remove_member("a", None));
        assert_eq!(sg.state_name(), "Empty");
        assert_eq!(sg.value.initialized, BTreeSet::from(["t".to_string()]));
    }

    #[test]
    fn a_new_partition_moves_the_group_to_a_new_epoch() {
        let mut topics = BTreeMap::from([("t".to_string(), 1)]);
        let mut sg = ShareGroup::default();
        let now = Instant::now();
        heartbeat(&mut sg, beat("a", 0, Some(&["t", "missing"])), &topics, now);
        topics.insert("t".into(), 2);
        let a = heartbeat(&mut sg, beat("a", 1, None), &topics, now);
        assert_eq!((a.member_epoch, partitions(&a, "t")), (2, vec![0, 1]));
        assert!(validate(&beat("a", 0, None)).is_err());
        assert!(validate(&beat("", 1, None)).is_err());
        assert!(validate(&beat("a", -2, None)).is_err());
    }
}
