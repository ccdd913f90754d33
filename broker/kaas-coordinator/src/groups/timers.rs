//! The coordinator's clock: one task that, every [`TICK`], completes join phases whose time is
//! up, removes members whose session expired or who never synced, forgets unused member ids,
//! expires offsets and compacts shard logs. Everything it does is also a pure function of
//! `(group, now)`, so the unit tests drive it with chosen instants.

use std::sync::Weak;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::GroupError as E;
use crate::ShardLog;

use super::group::{Group, GroupState};
use super::{Coordinator, offsets};

pub(crate) const TICK: Duration = Duration::from_millis(100);

/// Runs until the coordinator is closed or dropped.
pub(crate) async fn run(coordinator: Weak<Coordinator>) {
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_expiry = Instant::now();
    loop {
        tick.tick().await;
        let Some(c) = coordinator.upgrade() else { return };
        if c.closed.load(Ordering::Acquire) {
            return;
        }
        let now = Instant::now();
        let now_ms = crate::clock::now_ms();
        let expire = now.duration_since(last_expiry) >= c.config.offsets_retention_check_interval;
        if expire {
            last_expiry = now;
        }
        let retention_ms = i64::try_from(c.config.offsets_retention.as_millis()).unwrap_or(i64::MAX);
        for shard in c.shards.iter().filter(|s| s.is_owned()) {
            for (id, group) in shard.all() {
                let dead = {
                    let mut g = group.lock();
                    tick_group(&mut g, &shard.log, now, now_ms);
                    expire && offsets::expire(&mut g, &shard.log, retention_ms, now_ms)
                };
                if dead {
                    shard.remove(&id, &group);
                }
            }
            if shard.log.needs_compaction() {
                let log = shard.log.clone();
                // Compaction writes and fsyncs a snapshot: keep it off the executor.
                let _ = tokio::task::spawn_blocking(move || log.compact()).await;
            }
        }
    }
}

/// One group's timers at `now`.
pub(crate) fn tick_group(g: &mut Group, log: &ShardLog, now: Instant, now_ms: i64) {
    let before = g.pending.len();
    g.pending.retain(|_, lapse| *lapse > now);
    if g.pending.len() != before {
        g.maybe_complete_join(now, now_ms, log);
    }
    match g.state {
        GroupState::PreparingRebalance => g.maybe_complete_join(now, now_ms, log),
        GroupState::CompletingRebalance if g.sync_deadline.is_some_and(|d| now >= d) => {
            // Members that never sent SyncGroup are gone; the others rebalance without them.
            let missing: Vec<String> = g.pending_sync.iter().cloned().collect();
            for id in missing {
                g.remove_member(&id, E::RebalanceInProgress, now, now_ms, log);
            }
            if g.is(GroupState::CompletingRebalance) {
                g.prepare_rebalance(now, now_ms);
            }
        }
        _ => {}
    }
    expire_consumer_members(g, log, now, now_ms);
    expire_share_members(g, log, now, now_ms);
    // A member waiting for its JoinGroup or SyncGroup answer is not expected to heartbeat.
    let expired: Vec<String> = g
        .members
        .values()
        .filter(|m| m.join_waiter.is_none() && m.sync_waiter.is_none() && m.deadline <= now)
        .map(|m| m.id.clone())
        .collect();
    for id in expired {
        tracing::info!(group = %g.id, member = %id, "member session expired");
        g.remove_member(&id, E::UnknownMemberId, now, now_ms, log);
    }
}

/// KIP-848 members whose session expired, or who did not revoke partitions within their
/// rebalance timeout, are fenced: removed, their partitions freed, the group epoch bumped. The
/// record is appended without waiting; if it cannot be written, the next heartbeat's record
/// (the whole group state) carries the removal.
fn expire_consumer_members(g: &mut Group, log: &ShardLog, now: Instant, now_ms: i64) {
    let Some(c) = g.consumer.as_mut() else { return };
    let expired = c.expired(now);
    if expired.is_empty() {
        return;
    }
    for id in &expired {
        tracing::info!(group = %g.id, member = %id, "consumer group member fenced: session or revocation timeout");
        c.remove_member(id);
    }
    g.sync_consumer_state(now_ms);
    if let Err(e) = g.persist(log) {
        tracing::warn!(group = %g.id, error = %e, "cannot record fenced members now; the next heartbeat records them");
    }
}

/// Share group members whose session expired leave the group; the others are reassigned
/// (record appended without waiting, as for consumer groups).
fn expire_share_members(g: &mut Group, log: &ShardLog, now: Instant, now_ms: i64) {
    let Some(s) = g.share.as_mut() else { return };
    let expired = s.expired(now);
    if expired.is_empty() {
        return;
    }
    for id in &expired {
        tracing::info!(group = %g.id, member = %id, "share group member removed: session timeout");
        s.remove_member(id, None);
    }
    g.sync_consumer_state(now_ms);
    if let Err(e) = g.persist(log) {
        tracing::warn!(group = %g.id, error = %e, "cannot record expired share members now; the next heartbeat records them");
    }
}
