//! Committed offsets: commit validation (Kafka's `validateOffsetCommit`), durable commit and
//! in-memory apply, fetch, delete and expiry.

use std::collections::HashSet;
use std::sync::Arc;

use crate::GroupError as E;
use crate::{Entry, ShardLog};
use parking_lot::Mutex;

use super::group::{Committed, Group, GroupState};
use super::join::validate_member;
use super::record::{Key, OffsetValue, to_bytes};
use super::storage_error;

/// One partition of an OffsetCommit, already checked against the topic registry.
#[derive(Debug, Clone)]
pub struct CommitOffset {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: String,
}

/// A decoded OffsetCommit.
#[derive(Debug, Clone)]
pub struct CommitRequest {
    pub group_id: String,
    /// Generation (classic) or member epoch; -1 for a commit outside group management.
    pub generation: i32,
    pub member_id: String,
    pub instance_id: Option<String>,
    /// v2–v4 `retention_time_ms`; -1 for the broker's retention.
    pub retention_ms: i64,
    pub offsets: Vec<CommitOffset>,
}

/// Kafka's `ClassicGroup.validateOffsetCommit`.
pub(crate) fn validate_commit(g: &Group, req: &CommitRequest) -> Result<(), E> {
    if g.is(GroupState::Dead) {
        return Err(E::CoordinatorNotAvailable);
    }
    if req.generation < 0 && g.is(GroupState::Empty) {
        return Ok(()); // the admin client or a consumer without group management
    }
    if req.generation >= 0 || !req.member_id.is_empty() || req.instance_id.is_some() {
        validate_member(g, &req.member_id, req.instance_id.as_deref())?;
        if req.generation != g.generation {
            return Err(E::IllegalGeneration);
        }
    } else if !g.is(GroupState::Empty) {
        return Err(E::UnknownMemberId);
    }
    if g.is(GroupState::CompletingRebalance) {
        return Err(E::RebalanceInProgress);
    }
    Ok(())
}

/// A commit appended to the shard log, waiting for its fsync.
#[derive(Debug)]
pub(crate) struct PendingCommit {
    pub(crate) group: Arc<Mutex<Group>>,
    pub(crate) log: ShardLog,
    pub(crate) seq: u64,
    pub(crate) offsets: Vec<((String, i32), Option<OffsetValue>)>,
}

impl PendingCommit {
    /// Waits until durable, then makes the offsets visible (never over a newer commit).
    pub(crate) async fn wait(self) -> Result<(), E> {
        self.log.wait_durable(self.seq).await.map_err(|e| storage_error(&e))?;
        let mut g = self.group.lock();
        for (key, value) in self.offsets {
            apply(&mut g, key, value, self.seq);
        }
        Ok(())
    }
}

pub(crate) fn apply(g: &mut Group, key: (String, i32), value: Option<OffsetValue>, seq: u64) {
    let newer = g.offsets.get(&key).is_some_and(|c| c.seq > seq);
    if !newer {
        g.offsets.insert(key, Committed { value, seq });
    }
}

/// Appends the commit (one atomic log frame) while the group is locked, so validation and
/// log order agree.
pub(crate) fn append_commit(g: &Group, group: &Arc<Mutex<Group>>, log: &ShardLog, req: CommitRequest, now_ms: i64) -> Result<PendingCommit, E> {
    let expire_ms = (req.retention_ms > 0).then(|| now_ms.saturating_add(req.retention_ms));
    let offsets: Vec<((String, i32), Option<OffsetValue>)> = req
        .offsets
        .into_iter()
        .map(|o| {
            let value = OffsetValue { offset: o.offset, leader_epoch: o.leader_epoch, metadata: o.metadata, commit_ms: now_ms, expire_ms };
            ((o.topic, o.partition), Some(value))
        })
        .collect();
    let seq = append(g, log, &offsets)?;
    Ok(PendingCommit { group: group.clone(), log: log.clone(), seq, offsets })
}

fn append(g: &Group, log: &ShardLog, offsets: &[((String, i32), Option<OffsetValue>)]) -> Result<u64, E> {
    let entries: Vec<Entry> = offsets
        .iter()
        .map(|((t, p), v)| Entry { key: Key::offset(&g.id, t, *p), value: v.as_ref().map(to_bytes) })
        .collect();
    log.append(&entries).map_err(|e| storage_error(&e))
}

/// The committed offset of a partition.
pub(crate) fn committed(g: &Group, topic: &str, partition: i32) -> Option<OffsetValue> {
    g.offsets.get(&(topic.to_owned(), partition)).and_then(|c| c.value.clone())
}

/// Every committed offset, grouped by topic in name order.
pub(crate) fn all_committed(g: &Group) -> Vec<(String, Vec<(i32, OffsetValue)>)> {
    let mut by_topic: std::collections::BTreeMap<String, Vec<(i32, OffsetValue)>> = Default::default();
    for ((t, p), c) in &g.offsets {
        if let Some(v) = &c.value {
            by_topic.entry(t.clone()).or_default().push((*p, v.clone()));
        }
    }
    by_topic.into_iter().map(|(t, mut ps)| {
        ps.sort_by_key(|(p, _)| *p);
        (t, ps)
    }).collect()
}

/// Topics the group's consumers subscribe to (from their ConsumerProtocol subscriptions), so
/// OffsetDelete can refuse offsets still in use.
pub(crate) fn subscribed_topics(g: &Group) -> HashSet<String> {
    if let Some(c) = &g.consumer {
        let names = c.value.members.values().flat_map(|m| m.subscribed_names.iter().cloned());
        return names.chain(c.value.topics.keys().cloned()).collect();
    }
    let protocol = g.protocol.clone().unwrap_or_default();
    g.members.values().flat_map(|m| parse_subscription(&m.metadata(&protocol))).collect()
}

/// The topic list of a ConsumerProtocolSubscription (`version: i16, topics: [string]`).
fn parse_subscription(bytes: &[u8]) -> Vec<String> {
    let mut topics = Vec::new();
    let read_i16 = |b: &[u8], at: usize| b.get(at..at + 2).map(|s| i16::from_be_bytes([s[0], s[1]]));
    let Some(count) = bytes.get(2..6).map(|s| i32::from_be_bytes([s[0], s[1], s[2], s[3]])) else { return topics };
    let mut at = 6;
    for _ in 0..count.max(0) {
        let Some(len) = read_i16(bytes, at).and_then(|l| usize::try_from(l).ok()) else { break };
        let Some(name) = bytes.get(at + 2..at + 2 + len) else { break };
        topics.push(String::from_utf8_lossy(name).into_owned());
        at += 2 + len;
    }
    topics
}

/// OffsetDelete for one group: per-partition errors, and the log sequence to wait for.
pub(crate) fn delete_offsets(g: &mut Group, log: &ShardLog, partitions: &[(String, i32)]) -> Result<(Vec<Option<E>>, Option<u64>), E> {
    if g.is(GroupState::Dead) {
        return Err(E::GroupIdNotFound);
    }
    let consumer = g.protocol_type.as_deref() == Some("consumer");
    if !g.is(GroupState::Empty) && !consumer {
        return Err(E::NonEmptyGroup);
    }
    let subscribed = if g.is(GroupState::Empty) { HashSet::new() } else { subscribed_topics(g) };
    let errors: Vec<Option<E>> = partitions.iter().map(|(t, _)| subscribed.contains(t).then_some(E::GroupSubscribedToTopic)).collect();
    let doomed: Vec<((String, i32), Option<OffsetValue>)> = partitions
        .iter()
        .zip(&errors)
        .filter(|((t, p), e)| e.is_none() && committed(g, t, *p).is_some())
        .map(|((t, p), _)| ((t.clone(), *p), None))
        .collect();
    if doomed.is_empty() {
        return Ok((errors, None));
    }
    let seq = append(g, log, &doomed)?;
    for (key, value) in doomed {
        apply(g, key, value, seq);
    }
    Ok((errors, Some(seq)))
}

/// Expires offsets (Kafka 2.1+ rules): a consumer group's offsets once it has been empty for
/// the retention period; a simple (commit-only) group's offsets by commit time; an explicit
/// v2–v4 expiry at that time. Returns whether the group is now empty of everything and can be
/// dropped (its record is tombstoned here).
pub(crate) fn expire(g: &mut Group, log: &ShardLog, retention_ms: i64, now_ms: i64) -> bool {
    let group_expired = g.protocol_type.is_some() && g.is(GroupState::Empty) && g.state_ms.saturating_add(retention_ms) <= now_ms;
    let simple = g.protocol_type.is_none();
    let doomed: Vec<((String, i32), Option<OffsetValue>)> = g
        .offsets
        .iter()
        .filter_map(|(k, c)| c.value.as_ref().map(|v| (k, v)))
        .filter(|(_, v)| match v.expire_ms {
            Some(at) => at <= now_ms,
            None => group_expired || (simple && v.commit_ms.saturating_add(retention_ms) <= now_ms),
        })
        .map(|(k, _)| (k.clone(), None))
        .collect();
    if !doomed.is_empty() {
        match append(g, log, &doomed) {
            Ok(seq) => doomed.into_iter().for_each(|(k, v)| apply(g, k, v, seq)),
            Err(e) => {
                tracing::warn!(group = %g.id, error = ?e, "cannot expire offsets now; the next retention check retries");
                return false;
            }
        }
        tracing::info!(group = %g.id, "expired committed offsets");
    }
    let empty = g.is(GroupState::Empty) && g.offsets.values().all(|c| c.value.is_none());
    if empty && (group_expired || simple) && log.append(&[Entry::delete(Key::group(&g.id))]).is_ok() {
        g.set_state(GroupState::Dead, now_ms);
        return true;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consumer_subscriptions_parse_and_garbage_does_not_panic() {
        let mut b = vec![0, 1, 0, 0, 0, 2];
        for t in ["a", "bc"] {
            b.extend((t.len() as i16).to_be_bytes());
            b.extend(t.as_bytes());
        }
        b.extend([0, 0, 0, 0]); // user data
        assert_eq!(parse_subscription(&b), ["a", "bc"]);
        assert!(parse_subscription(&[0, 1, 0x7f, 0xff, 0xff, 0xff, 0, 9]).is_empty());
        assert!(parse_subscription(&[]).is_empty());
    }
}
