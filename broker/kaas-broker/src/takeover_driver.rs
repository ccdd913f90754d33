//! The TakeoverDriver and GroupTakeoverDriver (seed 003): makes this broker lead exactly the
//! partitions, and own exactly the group and transaction shards, the applied assignment gives
//! it, at the epochs it gives. Idempotent and re-driven every round, so a
//! take-over that failed (topic directory not there yet, a transient I/O error) is retried
//! until it holds — seed 001's rule 2.

use std::collections::BTreeMap;

use kaas_shared::assignment::{Assignment, ShardAssignment};
use kaas_shared::names;
use tracing::{info, warn};
use uuid::Uuid;

use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

use crate::shard_owner::ShardOwner;
use crate::topics::TopicRegistry;

/// Converges the registry's leadership to `assignment` for broker `me`.
///
/// Each take-over's duration (recovery scan included) is observed in `durations`. Once
/// `superseded` says a newer assignment is out, the take-overs not started yet are left to the
/// round that applies it: a broker taking over thousands of partitions would otherwise go on
/// leading ones the controller has already given back to a restarted broker.
pub fn reconcile(registry: &TopicRegistry, assignment: &Assignment, me: i32, durations: &TakeoverDurations, superseded: &(dyn Fn() -> bool + Sync)) {
    let desired: BTreeMap<String, (Uuid, i32)> = assignment
        .led_by(me)
        .map(|(topic, partition, a)| (names::partition_key(topic, partition), (a.topic_id, a.leader_epoch)))
        .collect();
    let version = assignment.assignment_version;
    for (topic, id, partition, epoch) in registry.led() {
        let key = names::partition_key(&topic, partition);
        let keep = desired.get(&key).is_some_and(|(want_id, want_epoch)| *want_id == id && *want_epoch == epoch);
        if keep {
            continue;
        }
        let Some(p) = registry.get(&topic).and_then(|t| t.partition(partition)) else { continue };
        let reason = match assignment.partitions.get(&key) {
            Some(a) if a.leader != me => format!("assignment v{version} moved it to broker {}", a.leader),
            Some(a) => format!("assignment v{version} re-assigned it at epoch {}", a.leader_epoch),
            None => format!("assignment v{version} no longer places it"),
        };
        match p.relinquish() {
            Ok(()) => info!(partition = %key, epoch, %reason, "relinquished partition"),
            Err(e) => warn!(partition = %key, epoch, %reason, error = %e, "relinquish failed; handles closed, the next leader recovers"),
        }
    }
    let wanted: Vec<Wanted<'_>> = desired
        .iter()
        .filter_map(|(key, (id, epoch))| {
            let (topic, partition) = names::parse_partition_key(key).ok()?;
            let held = registry.get(topic).filter(|t| t.id == *id).and_then(|t| t.partition(partition));
            let led_now = held.as_ref().is_some_and(|p| p.led_epoch() == Some(*epoch));
            // The flag first: the reason takes the partition's lock, which the partition's
            // own volume I/O may hold.
            let failure = held.as_ref().filter(|p| p.has_storage_failure()).and_then(|p| p.storage_failure());
            if led_now && failure.is_none() {
                return None;
            }
            if let Some(failure) = &failure {
                // A failed write or fsync poisoned the log: re-running the take-over recovers it
                // from the volume once the volume works again (retried every round until then).
                info!(partition = %key, epoch, %failure, "re-taking over partition after a storage failure");
            }
            Some(Wanted { key, topic, partition, id: *id, epoch: *epoch })
        })
        .collect();
    // Each take-over is its own fenced sequence of writes and fsyncs on one partition, so they
    // run side by side: one after another, a broker taking over thousands of partitions waits
    // thousands of fsyncs in turn (make bench-scale), while the volume syncs many files at once.
    let left = std::sync::atomic::AtomicUsize::new(0);
    crate::side_by_side::map(&wanted, TAKEOVER_THREADS, |w| {
        if superseded() {
            left.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        } else {
            take_over(registry, assignment, w, durations);
        }
    });
    let left = left.into_inner();
    if left > 0 {
        info!(version, left, "a newer assignment was announced; the take-overs not started are left to the round that applies it");
    }
}

/// Take-overs of one reconcile that run at once (sixteen measured slower than eight on the
/// 2-core e2e cluster, whose volume is served from the same cores: README "Scale").
const TAKEOVER_THREADS: usize = 8;

/// A partition the assignment gives this broker and it does not lead (healthy) yet.
struct Wanted<'a> {
    key: &'a str,
    topic: &'a str,
    partition: i32,
    id: Uuid,
    epoch: i32,
}

fn take_over(registry: &TopicRegistry, assignment: &Assignment, w: &Wanted<'_>, durations: &TakeoverDurations) {
    let Wanted { key, topic, partition, id, epoch } = *w;
    let started = std::time::Instant::now();
    let outcome = registry.take_over(topic, id, partition, epoch);
    durations.partitions.observe(started.elapsed().as_secs_f64());
    match outcome {
        Ok(report) => info!(
            partition = %key,
            epoch,
            reason = %format!("assigned by controller epoch {} (assignment v{})", assignment.controller_epoch, assignment.assignment_version),
            log_end_offset = report.log_end_offset,
            truncated_bytes = report.truncated_bytes,
            "took over partition"
        ),
        Err(e) => warn!(partition = %key, epoch, error = %e, "take-over failed; retrying next round"),
    }
}

/// The GroupTakeoverDriver (and the same for transaction shards): owns exactly the shards
/// `placed` gives this broker, at their epochs; shards placed elsewhere are relinquished
/// (persisted, then unloaded).
pub fn reconcile_shards<O: ShardOwner>(owner: &O, placed: &BTreeMap<u32, ShardAssignment>, assignment: &Assignment, me: i32, durations: &Histogram) {
    let kind = O::KIND;
    let version = assignment.assignment_version;
    for shard in 0..kaas_coordinator::SHARD_COUNT {
        let desired = placed.get(&shard).filter(|s| s.coordinator == me).map(|s| s.epoch);
        let owned = owner.owned_epoch(shard);
        let failure = owner.storage_failure(shard);
        if owned == desired && failure.is_none() {
            continue;
        }
        if let Some(epoch) = owned
            && owned != desired
        {
            let reason = match placed.get(&shard) {
                Some(s) if s.coordinator != me => format!("assignment v{version} moved it to broker {}", s.coordinator),
                Some(s) => format!("assignment v{version} re-assigned it at epoch {}", s.epoch),
                None => format!("assignment v{version} no longer places it"),
            };
            match owner.relinquish(shard) {
                Ok(()) => info!(kind, shard, epoch, %reason, "relinquished shard"),
                Err(e) => warn!(kind, shard, epoch, %reason, error = %e, "shard relinquish failed; the next owner replays its log"),
            }
        }
        if let Some(epoch) = desired {
            if let Some(failure) = failure.filter(|_| owned == desired) {
                // A failed write or fsync poisoned the log: re-running the take-over recovers it
                // from the volume once the volume works again (retried every round until then).
                info!(kind, shard, epoch, %failure, "re-taking over shard after a storage failure");
            }
            let started = std::time::Instant::now();
            let outcome = owner.take_over(shard, epoch);
            durations.observe(started.elapsed().as_secs_f64());
            match outcome {
                Ok(()) => info!(kind, shard, epoch, reason = %format!("assigned by controller epoch {} (assignment v{version})", assignment.controller_epoch), "took over shard"),
                Err(e) => warn!(kind, shard, epoch, error = %e, "shard take-over failed; retrying next round"),
            }
        }
    }
}

/// How long take-overs take, for `/metrics`: the partition's recovery scan is most of it.
#[derive(Debug, Clone)]
pub struct TakeoverDurations {
    pub partitions: Histogram,
    pub group_shards: Histogram,
    pub transaction_shards: Histogram,
}

impl Default for TakeoverDurations {
    fn default() -> TakeoverDurations {
        // 1 ms .. ~65 s.
        let buckets = || Histogram::new(exponential_buckets(0.001, 2.0, 17));
        TakeoverDurations { partitions: buckets(), group_shards: buckets(), transaction_shards: buckets() }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use kaas_coordinator::{Entry, ShardLog};
    use kaas_shared::fs::{FaultSwitch, FaultyFs, MemFs, MountFault};

    use super::*;

    /// One shard log on a mount that can fail.
    struct OneShard(ShardLog);

    impl ShardOwner for OneShard {
        const KIND: &'static str = "test";

        fn shard_log(&self, shard: u32) -> Option<&ShardLog> {
            (shard == 0).then_some(&self.0)
        }
        fn take_over(&self, _: u32, epoch: i32) -> kaas_coordinator::Result<()> {
            self.0.take_over(epoch)?;
            Ok(())
        }
        fn relinquish(&self, _: u32) -> kaas_coordinator::Result<()> {
            Ok(self.0.relinquish()?)
        }
    }

    /// Once a newer assignment is announced, the take-overs not started are left to the round
    /// that applies it; the round after that takes the rest over.
    #[test]
    fn take_overs_not_started_when_a_newer_assignment_is_announced_wait_for_the_next_round() -> crate::Result<()> {
        use kaas_shared::assignment::PartitionAssignment;
        use std::sync::atomic::{AtomicUsize, Ordering};

        let registry = TopicRegistry::open(kaas_storage::Engine::in_memory(), None, crate::topics::Leadership::Cluster, kaas_storage::LogConfig::default())?;
        let topic = registry.create(crate::topics::NewTopic { name: "t".into(), partitions: 40, configs: BTreeMap::new() })?;
        let mut assignment = Assignment { controller_epoch: 1, assignment_version: 7, ..Assignment::default() };
        for p in 0..40 {
            assignment.partitions.insert(names::partition_key("t", p), PartitionAssignment { topic_id: topic.id, leader: 1, leader_epoch: 2 });
        }
        let durations = TakeoverDurations::default();
        // The announcement arrives after the third take-over has been asked about.
        let asked = AtomicUsize::new(0);
        let announced_after_three = || asked.fetch_add(1, Ordering::SeqCst) >= 3;
        reconcile(&registry, &assignment, 1, &durations, &announced_after_three);
        assert_eq!(registry.led().len(), 3, "only the take-overs started before the announcement");
        reconcile(&registry, &assignment, 1, &durations, &|| false);
        assert_eq!(registry.led().len(), 40);
        Ok(())
    }

    fn entry(key: &str) -> Vec<Entry> {
        vec![Entry { key: key.into(), value: Some(b"v".to_vec()) }]
    }

    #[tokio::test]
    async fn a_shard_poisoned_by_a_failed_write_is_taken_over_again_once_the_volume_works() -> crate::Result<()> {
        let mount = FaultSwitch::default();
        let owner = OneShard(ShardLog::open(FaultyFs::wrap(Arc::new(MemFs::new()), mount.clone()), "/data/__cluster/groups/0000")?);
        let mut assignment = Assignment::default();
        assignment.consumer_groups.insert(0, ShardAssignment { coordinator: 1, epoch: 3 });
        let reconcile =
            || reconcile_shards(&owner, &assignment.consumer_groups, &assignment, 1, &Histogram::new(exponential_buckets(0.001, 2.0, 4)));
        reconcile();
        owner.0.wait_durable(owner.0.append(&entry("before"))?).await?;

        mount.set(MountFault::Eio);
        assert!(owner.0.append(&entry("during")).is_err(), "a write on a failing mount fails");
        reconcile(); // still failing: the take-over fails and is retried
        mount.clear();
        reconcile();

        assert_eq!(owner.0.epoch(), Some(3));
        assert_eq!(owner.0.storage_failure(), None, "the shard was recovered by a new take-over");
        owner.0.wait_durable(owner.0.append(&entry("after"))?).await?;
        Ok(())
    }
}
