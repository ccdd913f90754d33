//! Transactional offset commits (TxnOffsetCommit): the offsets are durable at once but held
//! pending under the producer id, invisible to OffsetFetch, until the transaction coordinator
//! settles them with the transaction's outcome — committed (one frame: pending keys deleted,
//! offset keys written) or dropped (pending keys deleted). Settling is idempotent: a second
//! call finds nothing pending.

use std::sync::Arc;

use crate::Entry;
use crate::GroupError as E;

use super::offsets::{self, CommitOffset, CommitRequest};
use super::record::{Key, OffsetValue, to_bytes};
use super::{Coordinator, storage_error};
use crate::clock::now_ms;

/// A decoded TxnOffsetCommit.
#[derive(Debug, Clone)]
pub struct TxnCommitRequest {
    pub group_id: String,
    pub producer_id: i64,
    /// Generation (-1 from clients before KIP-447).
    pub generation: i32,
    pub member_id: String,
    pub instance_id: Option<String>,
    pub offsets: Vec<CommitOffset>,
}

impl Coordinator {
    /// TxnOffsetCommit: validates against the group (Kafka skips the member check for a
    /// commit without generation and member id), appends the pending offsets and returns the
    /// durability wait.
    pub fn txn_commit(
        self: &Arc<Self>,
        req: TxnCommitRequest,
    ) -> Result<impl Future<Output = Result<(), E>> + Send + 'static, E> {
        let shard = self.shard(&req.group_id)?;
        if req.group_id.is_empty() {
            return Err(E::InvalidGroupId);
        }
        let group = shard.get_or_create(&req.group_id);
        {
            let g = group.lock();
            if req.generation >= 0 || !req.member_id.is_empty() {
                let check = CommitRequest {
                    group_id: req.group_id.clone(),
                    generation: req.generation,
                    member_id: req.member_id.clone(),
                    instance_id: req.instance_id.clone(),
                    retention_ms: -1,
                    offsets: Vec::new(),
                };
                // Kafka checks a transactional commit against the group's own protocol: a
                // KIP-848 member commits at its member epoch (any TxnOffsetCommit version).
                match &g.consumer {
                    Some(c) => super::consumer::validate_commit(c, &check, true)?,
                    None => offsets::validate_commit(&g, &check)?,
                }
            }
        }
        let now = now_ms();
        let values: Vec<((String, i32), OffsetValue)> = req
            .offsets
            .into_iter()
            .map(|o| {
                (
                    (o.topic, o.partition),
                    OffsetValue {
                        offset: o.offset,
                        leader_epoch: o.leader_epoch,
                        metadata: o.metadata,
                        commit_ms: now,
                        expire_ms: None,
                    },
                )
            })
            .collect();
        let entries: Vec<Entry> = values
            .iter()
            .map(|((t, p), v)| {
                Entry::put(
                    Key::txn_offset(&req.group_id, req.producer_id, t, *p),
                    to_bytes(v),
                )
            })
            .collect();
        let seq = shard.log.append(&entries).map_err(|e| storage_error(&e))?;
        let log = shard.log.clone();
        let coordinator = self.clone();
        let key = (req.group_id, req.producer_id);
        Ok(async move {
            log.wait_durable(seq).await.map_err(|e| storage_error(&e))?;
            let shard = coordinator.shard(&key.0)?;
            shard
                .pending_txn
                .lock()
                .entry(key)
                .or_default()
                .extend(values);
            Ok(())
        })
    }

    /// The transaction of `producer_id` ended: its pending offsets in `group_id` become
    /// committed offsets (`commit`) or are dropped, durably.
    pub async fn complete_txn(
        self: &Arc<Self>,
        group_id: &str,
        producer_id: i64,
        commit: bool,
    ) -> Result<(), E> {
        let shard = self.shard(group_id)?;
        let key = (group_id.to_owned(), producer_id);
        let Some(pending) = shard.pending_txn.lock().get(&key).cloned() else {
            return Ok(());
        };
        let group = shard.get_or_create(group_id);
        let seq = {
            let _g = group.lock();
            let mut entries: Vec<Entry> = pending
                .keys()
                .map(|(t, p)| Entry::delete(Key::txn_offset(group_id, producer_id, t, *p)))
                .collect();
            if commit {
                entries.extend(
                    pending
                        .iter()
                        .map(|((t, p), v)| Entry::put(Key::offset(group_id, t, *p), to_bytes(v))),
                );
            }
            shard.log.append(&entries).map_err(|e| storage_error(&e))?
        };
        shard
            .log
            .wait_durable(seq)
            .await
            .map_err(|e| storage_error(&e))?;
        shard.pending_txn.lock().remove(&key);
        if commit {
            let mut g = group.lock();
            for (partition, value) in pending {
                offsets::apply(&mut g, partition, Some(value), seq);
            }
        }
        Ok(())
    }

    /// The transaction of `producer_id` ended: settles its pending offsets in every group of
    /// group shard `shard` (what a marker for that shard means).
    pub async fn complete_txn_in_shard(
        self: &Arc<Self>,
        shard: u32,
        producer_id: i64,
        commit: bool,
    ) -> Result<(), E> {
        let s = self.shards.get(shard as usize).ok_or(E::UnknownTopicOrPartition)?;
        if !s.is_owned() {
            return Err(E::NotCoordinator);
        }
        let groups: Vec<String> = s
            .pending_txn
            .lock()
            .keys()
            .filter(|(_, p)| *p == producer_id)
            .map(|(g, _)| g.clone())
            .collect();
        for group in groups {
            self.complete_txn(&group, producer_id, commit).await?;
        }
        Ok(())
    }

    /// Whether `group_id` has transactional offsets pending for `topic`/`partition`
    /// (OffsetFetch `require_stable` answers UNSTABLE_OFFSET_COMMIT then).
    pub fn has_pending_txn_offset(
        self: &Arc<Self>,
        group_id: &str,
        topic: &str,
        partition: i32,
    ) -> bool {
        let Ok(shard) = self.shard(group_id) else {
            return false;
        };
        let key = (topic.to_owned(), partition);
        shard
            .pending_txn
            .lock()
            .iter()
            .any(|((g, _), offsets)| g == group_id && offsets.contains_key(&key))
    }
}
