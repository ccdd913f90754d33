//! State-machine tests of the coordinator over the in-memory filesystem.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use crate::GroupError as E;
use kaas_shared::fs::{FsRef, MemFs};
use kaas_shared::layout::Layout;

use super::*;

fn coordinator(fs: &FsRef) -> Arc<Coordinator> {
    let config = GroupConfig { initial_rebalance_delay: Duration::ZERO, ..GroupConfig::default() };
    let c = Coordinator::open(fs.clone(), &Layout::new("/data"), config).unwrap();
    assert_eq!(c.take_over_all(|stored| stored + 1), 0, "every shard taken over");
    c
}

fn join_req(member: &str, instance: Option<&str>) -> JoinRequest {
    JoinRequest {
        group_id: "g".into(),
        member_id: member.into(),
        instance_id: instance.map(str::to_owned),
        session_timeout_ms: 10_000,
        rebalance_timeout_ms: 60_000,
        protocol_type: "consumer".into(),
        protocols: vec![("range".into(), Bytes::from_static(b"sub"))],
        client_id: "c".into(),
        client_host: "/127.0.0.1".into(),
        require_known_member_id: true,
        supports_skip_assignment: false,
    }
}

fn sync_req(member: &str, generation: i32, assignments: Vec<(String, Bytes)>) -> SyncRequest {
    SyncRequest { group_id: "g".into(), generation, member_id: member.into(), instance_id: None, protocol_type: None, protocol_name: None, assignments }
}

async fn get<T>(a: Answer<T>) -> T {
    match a {
        Answer::Now(t) => t,
        Answer::Wait(rx) => tokio::time::timeout(Duration::from_secs(5), rx).await.unwrap().unwrap(),
    }
}

/// Joins one dynamic member through the MEMBER_ID_REQUIRED handshake.
async fn join_one(c: &Arc<Coordinator>) -> JoinResult {
    let first = get(c.join(join_req("", None))).await;
    assert_eq!(first.error, Some(E::MemberIdRequired));
    get(c.join(join_req(&first.member_id, None))).await
}

#[tokio::test]
async fn join_sync_rebalance_and_fencing() {
    let fs: FsRef = Arc::new(MemFs::new());
    let c = coordinator(&fs);
    let a = join_one(&c).await;
    assert_eq!((a.error, a.generation, a.leader.as_str()), (None, 1, a.member_id.as_str()));
    assert_eq!(a.members.len(), 1, "the leader gets the members");
    let s = get(c.sync(sync_req(&a.member_id, 1, vec![(a.member_id.clone(), Bytes::from_static(b"all"))]))).await;
    assert_eq!((s.error, &s.assignment[..]), (None, &b"all"[..]));

    // A second member: the first learns of the rebalance by heartbeat and rejoins.
    let first = get(c.join(join_req("", None))).await;
    let b_join = c.join(join_req(&first.member_id, None));
    let hb = |m: &str, generation| c.heartbeat(&HeartbeatRequest { group_id: "g".into(), generation, member_id: m.into(), instance_id: None });
    assert_eq!(hb(&a.member_id, 1), Some(E::RebalanceInProgress));
    let (a2, b) = tokio::join!(get(c.join(join_req(&a.member_id, None))), get(b_join));
    assert_eq!((a2.generation, b.generation), (2, 2));
    assert_eq!(a2.leader, a.member_id, "the leader stays the leader");
    assert!(b.members.is_empty());
    // The old generation is fenced everywhere.
    assert_eq!(hb(&a.member_id, 1), Some(E::IllegalGeneration));
    assert_eq!(hb("stranger", 2), Some(E::UnknownMemberId));
    let stale = CommitRequest { group_id: "g".into(), generation: 1, member_id: a.member_id.clone(), instance_id: None, retention_ms: -1, offsets: vec![] };
    assert!(matches!(c.commit(stale, false), Err(E::IllegalGeneration)));
    let early = CommitRequest { generation: 2, ..CommitRequest { group_id: "g".into(), generation: 1, member_id: b.member_id.clone(), instance_id: None, retention_ms: -1, offsets: vec![] } };
    assert!(matches!(c.commit(early, false), Err(E::RebalanceInProgress)), "no commits before the assignment is synced");

    let b_sync = c.sync(sync_req(&b.member_id, 2, vec![]));
    let a_sync = get(c.sync(sync_req(&a.member_id, 2, vec![(a.member_id.clone(), Bytes::from_static(b"A")), (b.member_id.clone(), Bytes::from_static(b"B"))]))).await;
    assert_eq!(&a_sync.assignment[..], b"A");
    assert_eq!(&get(b_sync).await.assignment[..], b"B");
    assert_eq!(hb(&b.member_id, 2), None);

    // b leaves; a is told to rejoin and ends up alone in generation 3.
    assert_eq!(c.leave("g", &[Leaving { member_id: b.member_id.clone(), instance_id: None }]).unwrap(), vec![None]);
    assert_eq!(hb(&a.member_id, 2), Some(E::RebalanceInProgress));
    assert_eq!(get(c.join(join_req(&a.member_id, None))).await.generation, 3);
}

/// When the last member leaves, the group is Empty at once (as in Kafka, whose delayed join
/// completes immediately with nobody left), so a DeleteGroups right after succeeds.
#[tokio::test]
async fn the_last_leave_empties_the_group_at_once() {
    let fs: FsRef = Arc::new(MemFs::new());
    let c = coordinator(&fs);
    let a = join_one(&c).await;
    get(c.sync(sync_req(&a.member_id, 1, vec![(a.member_id.clone(), Bytes::from_static(b"all"))]))).await;
    assert_eq!(c.leave("g", &[Leaving { member_id: a.member_id.clone(), instance_id: None }]).unwrap(), vec![None]);
    assert_eq!(c.delete_group("g").await, None, "the group was not empty after its last member left");
}

#[tokio::test]
async fn sessions_expire_and_static_members_are_replaced_without_rebalance() {
    let fs: FsRef = Arc::new(MemFs::new());
    let c = coordinator(&fs);
    let a = get(c.join(join_req("", Some("i1")))).await;
    assert_eq!(a.generation, 1, "static members skip the member-id handshake");
    get(c.sync(SyncRequest { instance_id: Some("i1".into()), ..sync_req(&a.member_id, 1, vec![(a.member_id.clone(), Bytes::from_static(b"x"))]) })).await;

    // The same instance restarts: new member id, same generation, old id fenced.
    let again = get(c.join(join_req("", Some("i1")))).await;
    assert_eq!((again.error, again.generation), (None, 1));
    assert_ne!(again.member_id, a.member_id);
    let old = HeartbeatRequest { group_id: "g".into(), generation: 1, member_id: a.member_id.clone(), instance_id: Some("i1".into()) };
    assert_eq!(c.heartbeat(&old), Some(E::FencedInstanceId));
    let s = get(c.sync(SyncRequest { instance_id: Some("i1".into()), ..sync_req(&again.member_id, 1, vec![]) })).await;
    assert_eq!(&s.assignment[..], b"x", "the assignment survives the restart");

    // Its session lapses: the clock removes it and the group empties.
    let shard = c.shard("g").unwrap();
    let group = shard.get("g").unwrap();
    let later = Instant::now() + Duration::from_secs(11);
    timers::tick_group(&mut group.lock(), &shard.log, later, now_ms());
    timers::tick_group(&mut group.lock(), &shard.log, later, now_ms());
    assert!(group.lock().is(GroupState::Empty));
}

#[tokio::test]
async fn offsets_are_durable_across_coordinators_and_deletable() {
    let fs: FsRef = Arc::new(MemFs::new());
    let c = coordinator(&fs);
    let offset = |p, o| CommitOffset { topic: "t".into(), partition: p, offset: o, leader_epoch: 3, metadata: "m".into() };
    let simple = CommitRequest { group_id: "g".into(), generation: -1, member_id: String::new(), instance_id: None, retention_ms: -1, offsets: vec![offset(0, 10), offset(1, 20)] };
    c.commit(simple.clone(), false).unwrap().await.unwrap();
    c.close();

    let c2 = coordinator(&fs);
    let got = c2.fetch_offsets("g", None, Some(vec![("t".into(), vec![0, 1, 2])])).unwrap();
    let offsets: Vec<Option<i64>> = got[0].1.iter().map(|(_, v)| v.as_ref().map(|v| v.offset)).collect();
    assert_eq!(offsets, [Some(10), Some(20), None]);
    assert_eq!(c2.list(&[], &[]).len(), 1);
    assert_eq!(c2.delete_offsets("g", &[("t".into(), 0)]).await.unwrap(), vec![None]);
    assert_eq!(c2.fetch_offsets("g", None, None).unwrap()[0].1.len(), 1);
    assert_eq!(c2.delete_group("g").await, None);
    assert_eq!(c2.delete_group("g").await, Some(E::GroupIdNotFound));
    drop(c2); // a crash: no relinquish

    let c3 = coordinator(&fs);
    assert!(c3.fetch_offsets("g", None, None).unwrap().is_empty());
    assert!(c3.list(&[], &[]).is_empty());
}

/// An OffsetFetch that arrives while its shard is being taken over waits for the shard's
/// groups to load: finding the shard owned but empty, it would answer "no committed offset"
/// and send the consumer to its reset policy.
#[test]
fn an_offset_fetch_during_a_take_over_sees_the_loaded_offsets() {
    let mem = Arc::new(MemFs::new());
    let fs: FsRef = mem.clone();
    let c = coordinator(&fs);
    let offset = CommitOffset { topic: "t".into(), partition: 0, offset: 10, leader_epoch: 3, metadata: String::new() };
    let commit = CommitRequest { group_id: "g".into(), generation: -1, member_id: String::new(), instance_id: None, retention_ms: -1, offsets: vec![offset] };
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async { c.commit(commit, false).unwrap().await.unwrap() });
    c.close();

    let config = GroupConfig { initial_rebalance_delay: Duration::ZERO, ..GroupConfig::default() };
    let c2 = Coordinator::open(fs, &Layout::new("/data"), config).unwrap();
    let fetched = crate::shard_owner::request_during_take_over(&mem, &*c2, shard_of("g"), 1, || {
        c2.fetch_offsets("g", None, None).map(|got| got.iter().flat_map(|(_, offsets)| offsets.iter().map(|(_, v)| v.as_ref().map(|v| v.offset))).collect::<Vec<_>>())
    });
    assert_eq!(fetched, Ok(vec![Some(10)]));
}

/// One topic "t" with four partitions.
struct FourPartitions;

impl TopicView for FourPartitions {
    fn partition_count(&self, topic: &str) -> Option<i32> {
        (topic == "t").then_some(4)
    }
    fn topic_names(&self) -> Vec<String> {
        vec!["t".into()]
    }
}

fn consumer_hb(member: &str, epoch: i32) -> ConsumerHeartbeat {
    ConsumerHeartbeat {
        group_id: "g".into(),
        member_id: member.into(),
        member_epoch: epoch,
        instance_id: None,
        rack_id: None,
        rebalance_timeout_ms: if epoch == 0 { 30_000 } else { -1 },
        subscribed_topic_names: (epoch == 0).then(|| vec!["t".into()]),
        subscribed_topic_regex: None,
        server_assignor: None,
        owned: (epoch == 0).then(Default::default),
        client_id: "c".into(),
        client_host: "/127.0.0.1".into(),
        member_id_required: true,
        session_timeout: None,
        heartbeat_interval: None,
    }
}

#[tokio::test]
async fn consumer_groups_are_durable_fence_stale_commits_and_refuse_classic_members() {
    let fs: FsRef = Arc::new(MemFs::new());
    let c = coordinator(&fs);
    let a = c.consumer_heartbeat(consumer_hb("a", 0), &FourPartitions).resolve(HeartbeatAnswer::error).await;
    assert_eq!((a.error, a.member_epoch), (None, 1));
    assert_eq!(a.assignment.as_ref().map(|p| p["t"].len()), Some(4));
    assert_eq!(get(c.join(join_req("", None))).await.error, Some(E::InconsistentGroupProtocol));
    assert_eq!(c.list(&[], &["consumer".into()]).first().map(|g| g.state), Some("Stable"));
    assert!(c.list(&[], &["classic".into()]).is_empty());

    let commit = |generation, offset| CommitRequest {
        group_id: "g".into(),
        generation,
        member_id: "a".into(),
        instance_id: None,
        retention_ms: -1,
        offsets: vec![CommitOffset { topic: "t".into(), partition: 0, offset, leader_epoch: -1, metadata: String::new() }],
    };
    assert!(matches!(c.commit(commit(0, 5), true), Err(E::StaleMemberEpoch)));
    assert!(matches!(c.commit(commit(1, 5), false), Err(E::UnsupportedVersion)), "member epochs need OffsetCommit v9");
    c.commit(commit(1, 5), true).unwrap().await.unwrap();
    assert!(matches!(c.fetch_offsets("g", Some(("a", 0)), None), Err(E::StaleMemberEpoch)));
    c.close();

    // The next coordinator knows the member, its epoch and its partitions.
    let c2 = coordinator(&fs);
    let d = c2.describe_consumer("g");
    assert_eq!((d.error, d.group_epoch, d.assignment_epoch, d.state), (None, 1, 1, "Stable"));
    assert_eq!(d.members.first().map(|m| (m.member_epoch, m.assigned["t"].len())), Some((1, 4)));
    let again = c2.consumer_heartbeat(consumer_hb("a", 1), &FourPartitions).resolve(HeartbeatAnswer::error).await;
    assert_eq!((again.error, again.member_epoch), (None, 1));
    assert_eq!(c2.fetch_offsets("g", Some(("a", 1)), None).unwrap()[0].1[0].1.as_ref().map(|v| v.offset), Some(5));
    // Leaving empties the group; then a classic member may take it over, offsets kept.
    let left = c2.consumer_heartbeat(consumer_hb("a", -1), &FourPartitions).resolve(HeartbeatAnswer::error).await;
    assert_eq!((left.error, left.member_epoch), (None, -1));
    assert_eq!(c2.describe_consumer("g").state, "Empty");
    assert_eq!(get(c2.join(join_req("", None))).await.error, Some(E::MemberIdRequired));
    assert_eq!(c2.describe_consumer("g").error, Some(E::GroupIdNotFound), "now a classic group");
    assert_eq!(c2.fetch_offsets("g", None, None).unwrap()[0].1.len(), 1);
}
