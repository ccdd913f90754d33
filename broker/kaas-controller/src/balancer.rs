//! Placement of partition leaders and group- and transaction-shard coordinators on alive brokers.
//!
//! Sticky (a leader on an eligible broker keeps its partitions), even (loads differ by at most
//! one), minimal (only as many moves as evening out needs), and every move raises the
//! partition's leader epoch, so epochs only grow. Draining brokers are not eligible.

use std::collections::{BTreeMap, BTreeSet};

use kaas_shared::assignment::{PartitionAssignment, ShardAssignment};
use kaas_shared::names;
use uuid::Uuid;

/// One topic incarnation the cluster should serve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicInfo {
    pub name: String,
    pub id: Uuid,
    pub partitions: i32,
}

/// The placement part of an assignment.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Placement {
    pub partitions: BTreeMap<String, PartitionAssignment>,
    pub consumer_groups: BTreeMap<u32, ShardAssignment>,
    pub transactions: BTreeMap<u32, ShardAssignment>,
}

/// How many shards of each kind there are to place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardCounts {
    pub groups: u32,
    pub transactions: u32,
}

/// Places every partition of `topics`, every group shard and every transaction shard on
/// `alive` minus `draining` (or on the draining ones, if nothing else is alive), starting from
/// `previous`.
pub fn balance(previous: &Placement, topics: &[TopicInfo], alive: &BTreeSet<i32>, draining: &BTreeSet<i32>, shards: ShardCounts) -> Placement {
    let mut eligible: BTreeSet<i32> = alive.difference(draining).copied().collect();
    if eligible.is_empty() {
        eligible = alive.clone();
    }
    if eligible.is_empty() {
        // Nobody to place anything on: keep what was, never an empty assignment.
        return previous.clone();
    }
    let mut wanted: Vec<(String, Uuid)> = Vec::new();
    for topic in topics {
        for p in 0..topic.partitions {
            wanted.push((names::partition_key(&topic.name, p), topic.id));
        }
    }
    let partitions = place(
        &eligible,
        wanted.into_iter().map(|(key, id)| {
            let prev = previous.partitions.get(&key).filter(|p| p.topic_id == id).map(|p| (p.leader, p.leader_epoch));
            (key, prev, id)
        }),
    )
    .into_iter()
    .map(|(key, (leader, epoch, id))| (key, PartitionAssignment { topic_id: id, leader, leader_epoch: epoch }))
    .collect();
    let consumer_groups = place_shards(&eligible, &previous.consumer_groups, shards.groups);
    let transactions = place_shards(&eligible, &previous.transactions, shards.transactions);
    Placement { partitions, consumer_groups, transactions }
}

/// Shards `0..count`, each on its previous coordinator when eligible.
fn place_shards(eligible: &BTreeSet<i32>, previous: &BTreeMap<u32, ShardAssignment>, count: u32) -> BTreeMap<u32, ShardAssignment> {
    place(eligible, (0..count).map(|shard| (shard, previous.get(&shard).map(|s| (s.coordinator, s.epoch)), ())))
        .into_iter()
        .map(|(shard, (coordinator, epoch, ()))| (shard, ShardAssignment { coordinator, epoch }))
        .collect()
}

/// The generic sticky, even placement: items with their previous (owner, epoch).
fn place<K: Ord + Clone, X: Clone>(
    eligible: &BTreeSet<i32>,
    items: impl Iterator<Item = (K, Option<(i32, i32)>, X)>,
) -> BTreeMap<K, (i32, i32, X)> {
    let mut load: BTreeMap<i32, usize> = eligible.iter().map(|b| (*b, 0)).collect();
    let mut placed: BTreeMap<K, (i32, i32, X)> = BTreeMap::new();
    let mut homeless = Vec::new();
    for (key, prev, extra) in items {
        match prev {
            Some((owner, epoch)) if eligible.contains(&owner) => {
                *load.entry(owner).or_default() += 1;
                placed.insert(key, (owner, epoch, extra));
            }
            Some((_, epoch)) => homeless.push((key, epoch.saturating_add(1), extra)),
            None => homeless.push((key, 0, extra)),
        }
    }
    for (key, epoch, extra) in homeless {
        let owner = least_loaded(&load);
        *load.entry(owner).or_default() += 1;
        placed.insert(key, (owner, epoch, extra));
    }
    // Even out: move from the most to the least loaded until loads differ by at most one.
    loop {
        let (max_b, max_l) = load.iter().max_by_key(|(b, l)| (**l, std::cmp::Reverse(**b))).map(|(b, l)| (*b, *l)).unwrap_or((0, 0));
        let min_b = least_loaded(&load);
        let min_l = load.get(&min_b).copied().unwrap_or(0);
        if max_l <= min_l + 1 {
            break;
        }
        let Some(key) = placed.iter().rev().find(|(_, (owner, _, _))| *owner == max_b).map(|(k, _)| k.clone()) else { break };
        if let Some(entry) = placed.get_mut(&key) {
            entry.0 = min_b;
            entry.1 = entry.1.saturating_add(1);
        }
        *load.entry(max_b).or_default() -= 1;
        *load.entry(min_b).or_default() += 1;
    }
    placed
}

fn least_loaded(load: &BTreeMap<i32, usize>) -> i32 {
    load.iter().min_by_key(|(b, l)| (**l, **b)).map(|(b, _)| *b).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topic(name: &str, partitions: i32) -> TopicInfo {
        TopicInfo { name: name.into(), id: Uuid::from_u128(name.len() as u128 + 1), partitions }
    }

    fn counts(shards: u32) -> ShardCounts {
        ShardCounts { groups: shards, transactions: shards }
    }

    fn brokers(ids: &[i32]) -> BTreeSet<i32> {
        ids.iter().copied().collect()
    }

    fn loads(p: &Placement) -> BTreeMap<i32, usize> {
        let mut l = BTreeMap::new();
        for a in p.partitions.values() {
            *l.entry(a.leader).or_default() += 1;
        }
        l
    }

    #[test]
    fn even_across_alive_brokers() {
        let p = balance(&Placement::default(), &[topic("a", 7), topic("bb", 5)], &brokers(&[0, 1, 2]), &BTreeSet::new(), counts(16));
        assert_eq!(p.partitions.len(), 12);
        assert!(loads(&p).values().all(|l| *l == 4), "{:?}", loads(&p));
        assert!(p.partitions.values().all(|a| a.leader_epoch == 0));
        let shard_loads: Vec<usize> = (0..3).map(|b| p.consumer_groups.values().filter(|s| s.coordinator == b).count()).collect();
        assert!(shard_loads.iter().all(|l| (5..=6).contains(l)), "{shard_loads:?}");
        let txn_loads: Vec<usize> = (0..3).map(|b| p.transactions.values().filter(|s| s.coordinator == b).count()).collect();
        assert!(txn_loads.iter().all(|l| (5..=6).contains(l)), "{txn_loads:?}");
    }

    #[test]
    fn sticky_and_minimal_when_a_broker_joins() {
        let before = balance(&Placement::default(), &[topic("a", 6)], &brokers(&[0, 1]), &BTreeSet::new(), counts(0));
        let after = balance(&before, &[topic("a", 6)], &brokers(&[0, 1, 2]), &BTreeSet::new(), counts(0));
        let moved: Vec<_> = before.partitions.iter().filter(|(k, a)| after.partitions[*k].leader != a.leader).collect();
        assert_eq!(moved.len(), 2, "exactly the moves that even 3/3 out to 2/2/2");
        for (k, a) in &moved {
            assert_eq!(after.partitions[*k].leader_epoch, a.leader_epoch + 1, "a move raises the epoch");
        }
        for (k, a) in before.partitions.iter().filter(|(k, _)| !moved.iter().any(|(m, _)| m == k)) {
            assert_eq!(after.partitions[k], *a, "unmoved partitions keep leader and epoch");
        }
    }

    #[test]
    fn dead_and_draining_brokers_lose_everything_and_epochs_grow() {
        let before = balance(&Placement::default(), &[topic("a", 6)], &brokers(&[0, 1, 2]), &BTreeSet::new(), counts(4));
        let after = balance(&before, &[topic("a", 6)], &brokers(&[0, 1, 2]), &brokers(&[1]), counts(4));
        assert!(after.partitions.values().all(|a| a.leader != 1));
        assert!(after.consumer_groups.values().all(|s| s.coordinator != 1));
        assert!(after.transactions.values().all(|s| s.coordinator != 1));
        for (shard, s) in &after.transactions {
            let was = before.transactions[shard];
            assert!(s.epoch == was.epoch || (s.epoch > was.epoch && was.coordinator == 1), "only moved shards change epoch");
        }
        let dead = balance(&after, &[topic("a", 6)], &brokers(&[0]), &BTreeSet::new(), counts(4));
        assert!(dead.partitions.values().all(|a| a.leader == 0));
        for (k, a) in &dead.partitions {
            assert!(a.leader_epoch >= before.partitions[k].leader_epoch);
        }
    }

    #[test]
    fn never_empty_and_new_incarnations_start_over() {
        let before = balance(&Placement::default(), &[topic("a", 2)], &brokers(&[0]), &BTreeSet::new(), counts(1));
        assert_eq!(balance(&before, &[topic("a", 2)], &BTreeSet::new(), &BTreeSet::new(), counts(1)), before);
        // Everyone draining: they keep leading rather than nobody.
        let all_draining = balance(&before, &[topic("a", 2)], &brokers(&[0]), &brokers(&[0]), counts(1));
        assert_eq!(all_draining, before);
        // A recreated topic (new id) is placed afresh at epoch 0; a deleted one disappears.
        let recreated = TopicInfo { id: Uuid::from_u128(99), ..topic("a", 2) };
        let p = balance(&before, &[recreated], &brokers(&[0]), &BTreeSet::new(), counts(1));
        assert!(p.partitions.values().all(|a| a.topic_id == Uuid::from_u128(99) && a.leader_epoch == 0));
        assert!(balance(&before, &[], &brokers(&[0]), &BTreeSet::new(), counts(1)).partitions.is_empty());
    }
}
