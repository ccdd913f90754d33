//! The server-side assignors of KIP-848 consumer groups, named as in Kafka: `uniform` (the
//! default: balanced, and sticky to the previous target so a rebalance moves few partitions)
//! and `range` (per topic, contiguous ranges over the members sorted by id, so co-partitioned
//! topics line up). Both are pure functions of the members' subscriptions, the topics'
//! partition counts and the previous target assignment.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use super::Partitions;

pub(crate) const UNIFORM: &str = "uniform";
pub(crate) const RANGE: &str = "range";

/// Whether a client may name this assignor in `server_assignor`.
pub(crate) fn is_known(name: &str) -> bool {
    name == UNIFORM || name == RANGE
}

/// One member as the assignor sees it.
#[derive(Debug, Clone)]
pub(crate) struct Subscriber {
    pub(crate) id: String,
    pub(crate) topics: BTreeSet<String>,
}

/// The target assignment of every member (members without partitions get an empty map).
/// `members` must be sorted by id; `topics` maps each subscribed, existing topic to its
/// partition count.
pub(crate) fn assign(
    assignor: &str,
    members: &[Subscriber],
    topics: &BTreeMap<String, i32>,
    previous: &BTreeMap<String, Partitions>,
) -> BTreeMap<String, Partitions> {
    if assignor == RANGE {
        range(members, topics)
    } else {
        uniform(members, topics, previous)
    }
}

fn empty_target(members: &[Subscriber]) -> BTreeMap<String, Partitions> {
    members
        .iter()
        .map(|m| (m.id.clone(), Partitions::new()))
        .collect()
}

fn give(out: &mut BTreeMap<String, Partitions>, member: &str, topic: &str, partition: i32) {
    if let Some(a) = out.get_mut(member) {
        a.entry(topic.to_owned()).or_default().insert(partition);
    }
}

/// Balanced and sticky: members keep what they had in the previous target up to their fair
/// share (⌊n/m⌋, and ⌈n/m⌉ for n mod m of them); the rest go one by one to the least loaded
/// subscriber. With identical subscriptions the counts differ by at most one.
fn uniform(
    members: &[Subscriber],
    topics: &BTreeMap<String, i32>,
    previous: &BTreeMap<String, Partitions>,
) -> BTreeMap<String, Partitions> {
    let mut out = empty_target(members);
    let all: Vec<(&str, i32)> = topics
        .iter()
        .filter(|(t, _)| members.iter().any(|m| m.topics.contains(*t)))
        .flat_map(|(t, n)| (0..*n).map(move |p| (t.as_str(), p)))
        .collect();
    if members.is_empty() || all.is_empty() {
        return out;
    }
    let floor = all.len() / members.len();
    let mut ceil_slots = all.len() % members.len();
    let mut counts: BTreeMap<&str, usize> = members.iter().map(|m| (m.id.as_str(), 0)).collect();
    let mut taken: HashSet<(&str, i32)> = HashSet::new();
    for m in members {
        let Some(before) = previous.get(&m.id) else {
            continue;
        };
        for (topic, partitions) in before {
            let Some(n) = topics.get(topic) else { continue };
            if !m.topics.contains(topic) {
                continue;
            }
            for &p in partitions.iter().filter(|p| **p < *n) {
                let count = counts.get(m.id.as_str()).copied().unwrap_or(0);
                let fits = count < floor || (count == floor && ceil_slots > 0);
                if !fits || !taken.insert((topic.as_str(), p)) {
                    continue;
                }
                if count == floor {
                    ceil_slots -= 1;
                }
                counts.insert(m.id.as_str(), count + 1);
                give(&mut out, &m.id, topic, p);
            }
        }
    }
    for (topic, p) in all {
        if taken.contains(&(topic, p)) {
            continue;
        }
        let least = members
            .iter()
            .filter(|m| m.topics.contains(topic))
            .min_by_key(|m| counts.get(m.id.as_str()).copied().unwrap_or(0));
        if let Some(m) = least {
            *counts.entry(m.id.as_str()).or_default() += 1;
            give(&mut out, &m.id, topic, p);
        }
    }
    out
}

/// Per topic: its subscribers sorted by member id share the partitions in contiguous ranges,
/// the first `n mod k` getting one more.
fn range(members: &[Subscriber], topics: &BTreeMap<String, i32>) -> BTreeMap<String, Partitions> {
    let mut out = empty_target(members);
    for (topic, &n) in topics {
        let subscribers: Vec<&Subscriber> = members
            .iter()
            .filter(|m| m.topics.contains(topic))
            .collect();
        let Ok(k) = i32::try_from(subscribers.len()) else {
            continue;
        };
        if k == 0 {
            continue;
        }
        let (base, extra) = (n / k, n % k);
        let mut start = 0;
        for (i, m) in (0..).zip(&subscribers) {
            let len = base + i32::from(i < extra);
            for p in start..start + len {
                give(&mut out, &m.id, topic, p);
            }
            start += len;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members(ids: &[&str], topics: &[&str]) -> Vec<Subscriber> {
        ids.iter()
            .map(|id| Subscriber {
                id: (*id).into(),
                topics: topics.iter().map(|t| (*t).to_string()).collect(),
            })
            .collect()
    }

    fn count(a: &Partitions) -> usize {
        a.values().map(BTreeSet::len).sum()
    }

    fn owners(target: &BTreeMap<String, Partitions>) -> Vec<(String, i32)> {
        let mut all: Vec<(String, i32)> = target
            .values()
            .flat_map(|a| {
                a.iter()
                    .flat_map(|(t, ps)| ps.iter().map(move |p| (t.clone(), *p)))
            })
            .collect();
        all.sort();
        all
    }

    #[test]
    fn uniform_is_balanced_complete_and_sticky() {
        let topics: BTreeMap<String, i32> = [("a".to_string(), 6), ("b".to_string(), 1)].into();
        let three = members(&["m1", "m2", "m3"], &["a", "b"]);
        let first = assign(UNIFORM, &three, &topics, &BTreeMap::new());
        assert_eq!(
            owners(&first).len(),
            7,
            "every partition exactly once: {first:?}"
        );
        let counts: Vec<usize> = first.values().map(count).collect();
        assert!(
            counts.iter().max().unwrap_or(&0) - counts.iter().min().unwrap_or(&0) <= 1,
            "{counts:?}"
        );
        // m2 leaves: m1 and m3 keep everything they had.
        let two = members(&["m1", "m3"], &["a", "b"]);
        let second = assign(UNIFORM, &two, &topics, &first);
        assert_eq!(owners(&second).len(), 7);
        for id in ["m1", "m3"] {
            for (t, ps) in &first[id] {
                assert!(
                    ps.is_subset(&second[id][t]),
                    "{id} lost partitions of {t}: {first:?} -> {second:?}"
                );
            }
        }
        let counts: Vec<usize> = second.values().map(count).collect();
        assert!(
            counts.iter().max().unwrap_or(&0) - counts.iter().min().unwrap_or(&0) <= 1,
            "{counts:?}"
        );
    }

    #[test]
    fn uniform_only_gives_subscribed_topics() {
        let topics: BTreeMap<String, i32> = [("a".to_string(), 2), ("b".to_string(), 2)].into();
        let mut ms = members(&["m1"], &["a"]);
        ms.extend(members(&["m2"], &["b"]));
        let t = assign(UNIFORM, &ms, &topics, &BTreeMap::new());
        assert_eq!(t["m1"].keys().collect::<Vec<_>>(), ["a"]);
        assert_eq!(t["m2"].keys().collect::<Vec<_>>(), ["b"]);
    }

    #[test]
    fn range_gives_contiguous_ranges_in_member_order() {
        let topics: BTreeMap<String, i32> = [("a".to_string(), 7)].into();
        let t = assign(
            RANGE,
            &members(&["x", "y", "z"], &["a"]),
            &topics,
            &BTreeMap::new(),
        );
        assert_eq!(t["x"]["a"], [0, 1, 2].into());
        assert_eq!(t["y"]["a"], [3, 4].into());
        assert_eq!(t["z"]["a"], [5, 6].into());
    }
}
