//! Placement of partition leaders and group- and transaction-shard coordinators on alive brokers.
//!
//! Sticky (a leader on an eligible broker keeps its partitions), even (loads differ by at most
//! one), minimal (only as many moves as evening out needs), and every move raises the
//! partition's leader epoch, so epochs only grow. Draining brokers are not eligible. An item
//! the previous placement does not have (a new topic, a lost assignment, a topic that dropped
//! out of one assignment) starts one above the newest epoch stored on the volume for it.

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

/// The newest epoch on the volume of an item the previous placement does not have (-1 for
/// none). `None` when it cannot be read now: the item is left out of this placement and
/// placed by a later one, never at an epoch its take-over would refuse.
pub trait StoredEpochs {
    fn partition(&self, topic: &str, partition: i32) -> Option<i32>;
    fn group_shard(&self, shard: u32) -> Option<i32>;
    fn txn_shard(&self, shard: u32) -> Option<i32>;
}

/// A volume with nothing on it yet.
#[derive(Debug, Clone, Copy)]
pub struct NothingStored;

impl StoredEpochs for NothingStored {
    fn partition(&self, _: &str, _: i32) -> Option<i32> {
        Some(-1)
    }
    fn group_shard(&self, _: u32) -> Option<i32> {
        Some(-1)
    }
    fn txn_shard(&self, _: u32) -> Option<i32> {
        Some(-1)
    }
}

/// Where an item was before this placement.
#[derive(Debug, Clone, Copy)]
enum Previous {
    Placed { owner: i32, epoch: i32 },
    /// Not in the previous placement; the newest epoch stored for it.
    Unplaced { stored_epoch: i32 },
}

/// Places every partition of `topics`, every group shard and every transaction shard on
/// `alive` minus `draining` (or on the draining ones, if nothing else is alive), starting from
/// `previous`; `stored` gives the epoch floor of items `previous` does not place. Brokers in
/// `readdressed` came back at a new address: they keep or get no coordinator shard this round
/// (unless nobody else can take it), because a client that keeps a coordinator's address by
/// its broker id (librdkafka) looks the coordinator up again only when that id changes.
pub fn balance(
    previous: &Placement,
    topics: &[TopicInfo],
    alive: &BTreeSet<i32>,
    draining: &BTreeSet<i32>,
    readdressed: &BTreeSet<i32>,
    shards: ShardCounts,
    stored: &dyn StoredEpochs,
) -> Placement {
    let eligible = eligible(alive, draining);
    if eligible.is_empty() {
        // Nobody to place anything on: keep what was, never an empty assignment.
        return previous.clone();
    }
    let mut wanted = Vec::new();
    for topic in topics {
        for p in 0..topic.partitions {
            let key = names::partition_key(&topic.name, p);
            let prev = match previous.partitions.get(&key).filter(|a| a.topic_id == topic.id) {
                Some(a) => Previous::Placed { owner: a.leader, epoch: a.leader_epoch },
                None => match stored.partition(&topic.name, p) {
                    Some(stored_epoch) => Previous::Unplaced { stored_epoch },
                    None => continue,
                },
            };
            wanted.push((key, prev, topic.id));
        }
    }
    let partitions = place(&eligible, wanted.into_iter())
        .into_iter()
        .map(|(key, (leader, epoch, id))| (key, PartitionAssignment { topic_id: id, leader, leader_epoch: epoch }))
        .collect();
    let mut coordinators: BTreeSet<i32> = eligible.difference(readdressed).copied().collect();
    if coordinators.is_empty() {
        coordinators = eligible.clone();
    }
    let consumer_groups = place_shards(&coordinators, &previous.consumer_groups, shards.groups, |s| stored.group_shard(s));
    let transactions = place_shards(&coordinators, &previous.transactions, shards.transactions, |s| stored.txn_shard(s));
    Placement { partitions, consumer_groups, transactions }
}

/// The brokers that take work: the alive ones not draining, or all alive ones if every one is
/// draining (they keep leading rather than nobody).
pub fn eligible(alive: &BTreeSet<i32>, draining: &BTreeSet<i32>) -> BTreeSet<i32> {
    let eligible: BTreeSet<i32> = alive.difference(draining).copied().collect();
    if eligible.is_empty() { alive.clone() } else { eligible }
}

/// Holds back all but `budget` of the partitions `next` moves between two brokers that both
/// stay in `eligible` (evening out onto a broker that joined or came back): those stay with
/// their previous leader at its epoch this round, and the balancer moves them in later rounds.
/// A hand-over makes a partition unavailable until its new leader has taken it over, and one
/// broker takes a few hundred partitions a second at most, so handing a restarted broker its
/// whole share at once would leave the last of thousands unavailable for that long. Partitions
/// whose leader left `eligible` (gone or draining) and new ones are never held back: nobody
/// serves them. Returns the placement and how many moves it held back.
pub fn pace(previous: &Placement, mut next: Placement, eligible: &BTreeSet<i32>, budget: usize) -> (Placement, usize) {
    let mut allowed = budget;
    let mut held = 0;
    for (key, p) in next.partitions.iter_mut() {
        let Some(before) = previous.partitions.get(key).filter(|b| b.topic_id == p.topic_id) else { continue };
        if before.leader == p.leader || !eligible.contains(&before.leader) {
            continue;
        }
        if allowed > 0 {
            allowed -= 1;
        } else {
            *p = *before;
            held += 1;
        }
    }
    (next, held)
}

/// Shards `0..count`, each on its previous coordinator when eligible.
fn place_shards(
    eligible: &BTreeSet<i32>,
    previous: &BTreeMap<u32, ShardAssignment>,
    count: u32,
    stored: impl Fn(u32) -> Option<i32>,
) -> BTreeMap<u32, ShardAssignment> {
    let items = (0..count).filter_map(|shard| {
        let prev = match previous.get(&shard) {
            Some(s) => Previous::Placed { owner: s.coordinator, epoch: s.epoch },
            None => Previous::Unplaced { stored_epoch: stored(shard)? },
        };
        Some((shard, prev, ()))
    });
    place(eligible, items)
        .into_iter()
        .map(|(shard, (coordinator, epoch, ()))| (shard, ShardAssignment { coordinator, epoch }))
        .collect()
}

/// The generic sticky, even placement: items with where they were before.
fn place<K: Ord + Clone, X: Clone>(
    eligible: &BTreeSet<i32>,
    items: impl Iterator<Item = (K, Previous, X)>,
) -> BTreeMap<K, (i32, i32, X)> {
    let mut load: BTreeMap<i32, usize> = eligible.iter().map(|b| (*b, 0)).collect();
    let mut placed: BTreeMap<K, (i32, i32, X)> = BTreeMap::new();
    let mut homeless = Vec::new();
    for (key, prev, extra) in items {
        match prev {
            Previous::Placed { owner, epoch } if eligible.contains(&owner) => {
                *load.entry(owner).or_default() += 1;
                placed.insert(key, (owner, epoch, extra));
            }
            Previous::Placed { epoch, .. } => homeless.push((key, epoch.saturating_add(1), extra)),
            Previous::Unplaced { stored_epoch } => homeless.push((key, stored_epoch.saturating_add(1).max(0), extra)),
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
        let p = balance(&Placement::default(), &[topic("a", 7), topic("bb", 5)], &brokers(&[0, 1, 2]), &BTreeSet::new(), &BTreeSet::new(), counts(16), &NothingStored);
        assert_eq!(p.partitions.len(), 12);
        assert!(loads(&p).values().all(|l| *l == 4), "{:?}", loads(&p));
        assert!(p.partitions.values().all(|a| a.leader_epoch == 0));
        let shard_loads: Vec<usize> = (0..3).map(|b| p.consumer_groups.values().filter(|s| s.coordinator == b).count()).collect();
        assert!(shard_loads.iter().all(|l| (5..=6).contains(l)), "{shard_loads:?}");
        let txn_loads: Vec<usize> = (0..3).map(|b| p.transactions.values().filter(|s| s.coordinator == b).count()).collect();
        assert!(txn_loads.iter().all(|l| (5..=6).contains(l)), "{txn_loads:?}");
    }

    #[test]
    fn a_broker_back_at_a_new_address_hands_its_coordinator_shards_over_for_a_round() {
        let before = balance(&Placement::default(), &[topic("a", 6)], &brokers(&[0, 1, 2]), &BTreeSet::new(), &BTreeSet::new(), counts(6), &NothingStored);
        let moved = balance(&before, &[topic("a", 6)], &brokers(&[0, 1, 2]), &BTreeSet::new(), &brokers(&[1]), counts(6), &NothingStored);
        assert_eq!(moved.partitions, before.partitions, "partitions stay: clients follow a leader's new address by its id");
        for (shard, s) in moved.consumer_groups.iter().chain(&moved.transactions) {
            assert_ne!(s.coordinator, 1, "shard {shard} still on the readdressed broker");
        }
        assert!(before.consumer_groups.values().any(|s| s.coordinator == 1), "broker 1 coordinated something to begin with");
        let back = balance(&moved, &[topic("a", 6)], &brokers(&[0, 1, 2]), &BTreeSet::new(), &BTreeSet::new(), counts(6), &NothingStored);
        assert!(back.consumer_groups.values().any(|s| s.coordinator == 1), "the next round evens the shards out again");
        let alone = balance(&before, &[topic("a", 6)], &brokers(&[1]), &BTreeSet::new(), &brokers(&[1]), counts(6), &NothingStored);
        assert!(alone.consumer_groups.values().all(|s| s.coordinator == 1), "with nobody else, it keeps them");
    }

    #[test]
    fn sticky_and_minimal_when_a_broker_joins() {
        let before = balance(&Placement::default(), &[topic("a", 6)], &brokers(&[0, 1]), &BTreeSet::new(), &BTreeSet::new(), counts(0), &NothingStored);
        let after = balance(&before, &[topic("a", 6)], &brokers(&[0, 1, 2]), &BTreeSet::new(), &BTreeSet::new(), counts(0), &NothingStored);
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
        let before = balance(&Placement::default(), &[topic("a", 6)], &brokers(&[0, 1, 2]), &BTreeSet::new(), &BTreeSet::new(), counts(4), &NothingStored);
        let after = balance(&before, &[topic("a", 6)], &brokers(&[0, 1, 2]), &brokers(&[1]), &BTreeSet::new(), counts(4), &NothingStored);
        assert!(after.partitions.values().all(|a| a.leader != 1));
        assert!(after.consumer_groups.values().all(|s| s.coordinator != 1));
        assert!(after.transactions.values().all(|s| s.coordinator != 1));
        for (shard, s) in &after.transactions {
            let was = before.transactions[shard];
            assert!(s.epoch == was.epoch || (s.epoch > was.epoch && was.coordinator == 1), "only moved shards change epoch");
        }
        let dead = balance(&after, &[topic("a", 6)], &brokers(&[0]), &BTreeSet::new(), &BTreeSet::new(), counts(4), &NothingStored);
        assert!(dead.partitions.values().all(|a| a.leader == 0));
        for (k, a) in &dead.partitions {
            assert!(a.leader_epoch >= before.partitions[k].leader_epoch);
        }
    }

    #[test]
    fn never_empty_and_new_incarnations_start_over() {
        let before = balance(&Placement::default(), &[topic("a", 2)], &brokers(&[0]), &BTreeSet::new(), &BTreeSet::new(), counts(1), &NothingStored);
        assert_eq!(balance(&before, &[topic("a", 2)], &BTreeSet::new(), &BTreeSet::new(), &BTreeSet::new(), counts(1), &NothingStored), before);
        // Everyone draining: they keep leading rather than nobody.
        let all_draining = balance(&before, &[topic("a", 2)], &brokers(&[0]), &brokers(&[0]), &BTreeSet::new(), counts(1), &NothingStored);
        assert_eq!(all_draining, before);
        // A recreated topic (new id) is placed afresh at epoch 0; a deleted one disappears.
        let recreated = TopicInfo { id: Uuid::from_u128(99), ..topic("a", 2) };
        let p = balance(&before, &[recreated], &brokers(&[0]), &BTreeSet::new(), &BTreeSet::new(), counts(1), &NothingStored);
        assert!(p.partitions.values().all(|a| a.topic_id == Uuid::from_u128(99) && a.leader_epoch == 0));
        assert!(balance(&before, &[], &brokers(&[0]), &BTreeSet::new(), &BTreeSet::new(), counts(1), &NothingStored).partitions.is_empty());
    }

    #[test]
    fn a_broker_that_comes_back_gets_its_share_in_paced_steps() {
        let all = brokers(&[0, 1, 2]);
        let t = [topic("a", 60)];
        let full = balance(&Placement::default(), &t, &all, &BTreeSet::new(), &BTreeSet::new(), counts(0), &NothingStored);
        // Broker 2 dies: its 20 partitions have nobody, and move at once whatever the budget.
        let survivors = brokers(&[0, 1]);
        let (without, held) = pace(&full, balance(&full, &t, &survivors, &BTreeSet::new(), &BTreeSet::new(), counts(0), &NothingStored), &survivors, 5);
        assert_eq!(held, 0);
        assert_eq!(loads(&without), BTreeMap::from([(0, 30), (1, 30)]));
        // It comes back: five partitions a step.
        let mut current = without;
        let mut steps = 0;
        loop {
            let (next, held) = pace(&current, balance(&current, &t, &all, &BTreeSet::new(), &BTreeSet::new(), counts(0), &NothingStored), &all, 5);
            let moved = next.partitions.iter().filter(|(k, a)| current.partitions[*k].leader != a.leader).count();
            for (k, a) in &next.partitions {
                let was = current.partitions[k];
                if a.leader == was.leader {
                    assert_eq!(a.leader_epoch, was.leader_epoch, "{k} stayed, at its epoch");
                } else {
                    assert_eq!((a.leader, a.leader_epoch), (2, was.leader_epoch + 1), "{k} moved to the broker that came back");
                }
            }
            current = next;
            if moved == 0 {
                assert_eq!(held, 0);
                break;
            }
            steps += 1;
            assert_eq!(moved, 5, "step {steps}");
            assert_eq!(held, 20 - 5 * steps, "step {steps}");
        }
        assert_eq!(steps, 4);
        assert_eq!(loads(&current), BTreeMap::from([(0, 20), (1, 20), (2, 20)]));
        // A draining broker's partitions are never held back.
        let draining = brokers(&[1]);
        let (drained, held) = pace(&current, balance(&current, &t, &all, &draining, &BTreeSet::new(), counts(0), &NothingStored), &eligible(&all, &draining), 0);
        assert_eq!(held, 0);
        assert!(drained.partitions.values().all(|a| a.leader != 1));
    }

    /// Epochs on the volume from an earlier life of the cluster; partition 1 cannot be read.
    #[derive(Debug)]
    struct Stored;

    impl StoredEpochs for Stored {
        fn partition(&self, _: &str, partition: i32) -> Option<i32> {
            (partition != 1).then_some(4)
        }
        fn group_shard(&self, shard: u32) -> Option<i32> {
            Some(shard as i32)
        }
        fn txn_shard(&self, _: u32) -> Option<i32> {
            Some(-1)
        }
    }

    #[test]
    fn an_unplaced_item_starts_above_the_epoch_on_the_volume() {
        // A lost assignment.json (or a topic that dropped out of one): nothing previous.
        let p = balance(&Placement::default(), &[topic("a", 3)], &brokers(&[0, 1]), &BTreeSet::new(), &BTreeSet::new(), counts(3), &Stored);
        let epochs: Vec<(String, i32)> = p.partitions.iter().map(|(k, a)| (k.clone(), a.leader_epoch)).collect();
        assert_eq!(epochs, [(names::partition_key("a", 0), 5), (names::partition_key("a", 2), 5)], "partition 1 waits for a readable volume");
        assert_eq!(p.consumer_groups.values().map(|s| s.epoch).collect::<Vec<_>>(), [1, 2, 3]);
        assert!(p.transactions.values().all(|s| s.epoch == 0));
        // Once placed, the previous placement is the authority: no volume read, no epoch change.
        let again = balance(&p, &[topic("a", 3)], &brokers(&[0, 1]), &BTreeSet::new(), &BTreeSet::new(), counts(3), &NothingStored);
        for (k, a) in &p.partitions {
            assert_eq!(again.partitions[k], *a);
        }
        assert_eq!(again.partitions[&names::partition_key("a", 1)].leader_epoch, 0);
    }
}
