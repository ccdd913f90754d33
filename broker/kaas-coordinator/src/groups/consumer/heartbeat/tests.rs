//! The heartbeat state machine, driven directly with chosen instants.

use super::*;

struct Topics(BTreeMap<String, i32>);

impl TopicView for Topics {
    fn partition_count(&self, topic: &str) -> Option<i32> {
        self.0.get(topic).copied()
    }
    fn topic_names(&self) -> Vec<String> {
        self.0.keys().cloned().collect()
    }
}

fn join(member: &str, topics: &[&str]) -> ConsumerHeartbeat {
    ConsumerHeartbeat {
        group_id: "g".into(),
        member_id: member.into(),
        member_epoch: 0,
        instance_id: None,
        rack_id: None,
        rebalance_timeout_ms: 30_000,
        subscribed_topic_names: Some(topics.iter().map(|t| (*t).to_string()).collect()),
        subscribed_topic_regex: None,
        server_assignor: None,
        owned: Some(BTreeMap::new()),
        client_id: "c".into(),
        client_host: "/127.0.0.1".into(),
        member_id_required: true,
        session_timeout: None,
        heartbeat_interval: None,
    }
}

fn beat(member: &str, epoch: i32, owned: Option<Partitions>) -> ConsumerHeartbeat {
    ConsumerHeartbeat {
        member_epoch: epoch,
        rebalance_timeout_ms: -1,
        subscribed_topic_names: None,
        owned,
        ..join(member, &[])
    }
}

/// The request as static member "i".
fn as_static(r: ConsumerHeartbeat) -> ConsumerHeartbeat {
    ConsumerHeartbeat {
        instance_id: Some("i".into()),
        ..r
    }
}

fn count(p: &Partitions) -> usize {
    p.values().map(BTreeSet::len).sum()
}

#[test]
fn a_partition_moves_only_after_its_owner_revoked_it() {
    let topics = Topics([("t".to_string(), 4)].into());
    let config = GroupConfig::default();
    let now = Instant::now();
    let mut cg = ConsumerGroup::default();
    let a = heartbeat(&mut cg, join("a", &["t"]), &topics, &config, now);
    assert_eq!((a.error, a.member_epoch), (None, 1));
    let owned_a = a.assignment.clone().unwrap_or_default();
    assert_eq!(count(&owned_a), 4, "a alone owns everything");

    let b = heartbeat(&mut cg, join("b", &["t"]), &topics, &config, now);
    assert_eq!(b.member_epoch, 2);
    assert_eq!(
        b.assignment.as_ref().map(count),
        Some(0),
        "nothing for b while a holds it all"
    );
    // a is asked to revoke half, at its old epoch.
    let a2 = heartbeat(
        &mut cg,
        beat("a", 1, Some(owned_a.clone())),
        &topics,
        &config,
        now,
    );
    assert_eq!(a2.member_epoch, 1);
    let kept = a2.assignment.clone().unwrap_or_default();
    assert_eq!(count(&kept), 2);
    // b still gets nothing: a has not confirmed.
    let b2 = heartbeat(
        &mut cg,
        beat("b", 2, Some(Partitions::new())),
        &topics,
        &config,
        now,
    );
    assert_eq!(b2.assignment, None);
    assert_eq!(cg.state_name(), "Reconciling");
    // a reports only what it kept: it moves to epoch 2, and b gets the rest.
    let a3 = heartbeat(
        &mut cg,
        beat("a", 1, Some(kept.clone())),
        &topics,
        &config,
        now,
    );
    assert_eq!(a3.member_epoch, 2);
    let b3 = heartbeat(
        &mut cg,
        beat("b", 2, Some(Partitions::new())),
        &topics,
        &config,
        now,
    );
    let got = b3.assignment.unwrap_or_default();
    assert_eq!(count(&got), 2);
    assert!(got["t"].is_disjoint(&kept["t"]));
    assert_eq!(cg.state_name(), "Stable");
}

#[test]
fn fencing_leave_and_static_rejoin() {
    let topics = Topics([("t".to_string(), 2)].into());
    let config = GroupConfig::default();
    let now = Instant::now();
    let mut cg = ConsumerGroup::default();
    let a = heartbeat(&mut cg, join("a", &["t"]), &topics, &config, now);
    assert_eq!(
        heartbeat(&mut cg, beat("a", 7, None), &topics, &config, now).error,
        Some(E::FencedMemberEpoch)
    );
    assert_eq!(
        heartbeat(&mut cg, beat("zz", 1, None), &topics, &config, now).error,
        Some(E::UnknownMemberId)
    );
    let left = heartbeat(&mut cg, beat("a", LEAVE_EPOCH, None), &topics, &config, now);
    assert_eq!((left.error, left.member_epoch), (None, LEAVE_EPOCH));
    assert!(cg.is_empty());
    assert!(a.member_epoch < cg.value.group_epoch);

    let s1 = heartbeat(
        &mut cg,
        as_static(join("s1", &["t"])),
        &topics,
        &config,
        now,
    );
    let epoch = cg.value.group_epoch;
    let other = heartbeat(
        &mut cg,
        as_static(join("s2", &["t"])),
        &topics,
        &config,
        now,
    );
    assert_eq!(other.error, Some(E::UnreleasedInstanceId));
    let gone = heartbeat(
        &mut cg,
        as_static(beat("s1", STATIC_LEAVE_EPOCH, None)),
        &topics,
        &config,
        now,
    );
    assert_eq!(gone.member_epoch, STATIC_LEAVE_EPOCH);
    let back = heartbeat(
        &mut cg,
        as_static(join("s2", &["t"])),
        &topics,
        &config,
        now,
    );
    assert_eq!(back.error, None);
    assert_eq!(
        back.assignment, s1.assignment,
        "the new incarnation gets the old assignment back"
    );
    assert_eq!(
        cg.value.group_epoch, epoch,
        "a static rejoin is not a rebalance"
    );
}

#[test]
fn bad_requests_are_refused() {
    let mut r = join("", &["t"]);
    assert!(matches!(validate(&r), Err((E::InvalidRequest, _))));
    r = join("m", &[]);
    assert!(matches!(validate(&r), Err((E::InvalidRequest, _))));
    r = ConsumerHeartbeat {
        server_assignor: Some("sticky".into()),
        ..join("m", &["t"])
    };
    assert!(matches!(validate(&r), Err((E::UnsupportedAssignor, _))));
    r = ConsumerHeartbeat {
        subscribed_topic_regex: Some("(".into()),
        ..join("m", &[])
    };
    assert!(matches!(
        validate(&r),
        Err((E::InvalidRegularExpression, _))
    ));
    r = ConsumerHeartbeat {
        member_epoch: -3,
        ..join("m", &["t"])
    };
    assert!(matches!(validate(&r), Err((E::InvalidRequest, _))));
    assert!(
        validate(&ConsumerHeartbeat {
            subscribed_topic_regex: Some("t.*".into()),
            ..join("m", &[])
        })
        .is_ok()
    );
}

#[test]
fn more_partitions_mean_a_new_epoch() {
    let mut topics = Topics([("t".to_string(), 1)].into());
    let config = GroupConfig::default();
    let now = Instant::now();
    let mut cg = ConsumerGroup::default();
    let a = heartbeat(&mut cg, join("a", &["t"]), &topics, &config, now);
    topics.0.insert("t".into(), 3);
    let a2 = heartbeat(
        &mut cg,
        beat("a", a.member_epoch, None),
        &topics,
        &config,
        now,
    );
    assert_eq!(a2.member_epoch, a.member_epoch + 1);
    assert_eq!(a2.assignment.as_ref().map(count), Some(3));
}
