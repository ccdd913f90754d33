//! Moving one member towards its target assignment (Kafka's `CurrentAssignmentBuilder`).
//!
//! The rule that keeps a partition from having two owners: a partition is handed to a member
//! only once no other member holds it, either as assigned or as pending revocation; a member
//! asked to revoke keeps its epoch until a heartbeat no longer reports the revoked partitions.

use std::collections::HashSet;

use super::{ConsumerMember, MemberState, Partitions};

/// Next state of `member` given the target (`target_epoch`, `target`), the partitions the
/// client says it owns (`None`: not sent in this heartbeat) and the partitions held by other
/// members.
pub(crate) fn reconcile(
    member: &mut ConsumerMember,
    target_epoch: i32,
    target: &Partitions,
    owned: Option<&Partitions>,
    held_by_others: &HashSet<(String, i32)>,
) {
    let epoch = match member.state {
        MemberState::Stable if member.member_epoch != target_epoch => member.member_epoch,
        MemberState::Stable => return,
        // Still waiting for the client to give them up.
        MemberState::UnrevokedPartitions if owns_any(owned, &member.pending_revocation) => return,
        MemberState::UnrevokedPartitions => member.member_epoch + 1,
        MemberState::UnreleasedPartitions => member.member_epoch,
    };
    next(member, epoch, target_epoch, target, owned, held_by_others);
}

/// Kafka's `ownsRevokedPartitions`: a heartbeat without the owned list proves nothing.
fn owns_any(owned: Option<&Partitions>, pending: &Partitions) -> bool {
    let Some(owned) = owned else { return true };
    owned.iter().any(|(t, ps)| {
        pending
            .get(t)
            .is_some_and(|pending| ps.iter().any(|p| pending.contains(p)))
    })
}

fn set_epoch(member: &mut ConsumerMember, epoch: i32) {
    if member.member_epoch != epoch {
        member.previous_epoch = member.member_epoch;
        member.member_epoch = epoch;
    }
}

/// Kafka's `computeNextAssignment`.
fn next(
    member: &mut ConsumerMember,
    epoch: i32,
    target_epoch: i32,
    target: &Partitions,
    owned: Option<&Partitions>,
    held_by_others: &HashSet<(String, i32)>,
) {
    let mut kept = Partitions::new();
    let mut revoke = Partitions::new();
    let mut add = Partitions::new();
    let mut unreleased = false;
    let assigned = member.assigned.clone();
    let topics: std::collections::BTreeSet<&String> =
        target.keys().chain(assigned.keys()).collect();
    for topic in topics {
        let empty = Default::default();
        let want = target.get(topic).unwrap_or(&empty);
        let have = assigned.get(topic).unwrap_or(&empty);
        let k: std::collections::BTreeSet<i32> = have.intersection(want).copied().collect();
        let r: std::collections::BTreeSet<i32> = have.difference(&k).copied().collect();
        let mut a: std::collections::BTreeSet<i32> = want.difference(&k).copied().collect();
        let before = a.len();
        a.retain(|p| !held_by_others.contains(&(topic.clone(), *p)));
        unreleased |= a.len() != before;
        for (map, set) in [(&mut kept, k), (&mut revoke, r), (&mut add, a)] {
            if !set.is_empty() {
                map.insert(topic.clone(), set);
            }
        }
    }
    if !revoke.is_empty() && owns_any(owned, &revoke) {
        member.state = MemberState::UnrevokedPartitions;
        set_epoch(member, epoch);
        member.assigned = kept;
        member.pending_revocation = revoke;
        return;
    }
    for (topic, ps) in add {
        kept.entry(topic).or_default().extend(ps);
    }
    member.state = if unreleased {
        MemberState::UnreleasedPartitions
    } else {
        MemberState::Stable
    };
    set_epoch(member, target_epoch);
    member.assigned = kept;
    member.pending_revocation = Partitions::new();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(list: &[(&str, &[i32])]) -> Partitions {
        list.iter()
            .map(|(t, ps)| ((*t).to_string(), ps.iter().copied().collect()))
            .collect()
    }

    fn member(epoch: i32, assigned: Partitions) -> ConsumerMember {
        ConsumerMember {
            member_epoch: epoch,
            previous_epoch: epoch - 1,
            assigned,
            ..ConsumerMember::new("m")
        }
    }

    #[test]
    fn revocation_comes_before_the_new_epoch() {
        let mut m = member(1, parts(&[("t", &[0, 1, 2])]));
        let target = parts(&[("t", &[0])]);
        reconcile(&mut m, 2, &target, None, &HashSet::new());
        assert_eq!(m.state, MemberState::UnrevokedPartitions);
        assert_eq!(m.member_epoch, 1, "the epoch waits for the revocation");
        assert_eq!(m.assigned, parts(&[("t", &[0])]));
        assert_eq!(m.pending_revocation, parts(&[("t", &[1, 2])]));
        // Still reporting partition 2: nothing moves.
        reconcile(
            &mut m,
            2,
            &target,
            Some(&parts(&[("t", &[0, 2])])),
            &HashSet::new(),
        );
        assert_eq!(m.state, MemberState::UnrevokedPartitions);
        reconcile(
            &mut m,
            2,
            &target,
            Some(&parts(&[("t", &[0])])),
            &HashSet::new(),
        );
        assert_eq!((m.state, m.member_epoch), (MemberState::Stable, 2));
        assert!(m.pending_revocation.is_empty());
    }

    #[test]
    fn a_partition_still_held_elsewhere_is_not_handed_out() {
        let mut m = member(1, Partitions::new());
        let target = parts(&[("t", &[3, 4])]);
        let held: HashSet<(String, i32)> = [("t".to_string(), 4)].into();
        reconcile(&mut m, 2, &target, Some(&Partitions::new()), &held);
        assert_eq!(
            (m.state, m.member_epoch),
            (MemberState::UnreleasedPartitions, 2)
        );
        assert_eq!(m.assigned, parts(&[("t", &[3])]));
        reconcile(&mut m, 2, &target, None, &HashSet::new());
        assert_eq!((m.state, m.member_epoch), (MemberState::Stable, 2));
        assert_eq!(m.assigned, target);
    }
}
