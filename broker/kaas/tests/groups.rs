//! Consumer groups with real clients: rdkafka consumers in classic groups (eager and
//! cooperative), static membership, committed offsets across restarts and crashes, admin
//! operations, and the error codes of stale or bad requests on the wire; then the same for
//! KIP-848 groups (`group.protocol=consumer`): assignors, leave, commits with member epochs,
//! restart, fencing of a silent member, new partitions, regex subscriptions, static members, and
//! classic and KIP-848 members refused in each other's groups.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::time::{Duration, Instant};

use common::wire::Wire;
use common::{Kaas, TestResult};
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::offset_commit_request::{OffsetCommitRequestPartition, OffsetCommitRequestTopic};
use kafka_protocol::messages::{GroupId, HeartbeatRequest, JoinGroupRequest, OffsetCommitRequest, SyncGroupRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use rdkafka::admin::AdminOptions;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::FutureRecord;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

fn consumer(kaas: &Kaas, group: &str, extra: &[(&str, &str)]) -> TestResult<BaseConsumer> {
    let mut c = kaas.config();
    c.set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("session.timeout.ms", "6000")
        .set("heartbeat.interval.ms", "300");
    for (k, v) in extra {
        c.set(*k, *v);
    }
    Ok(c.create()?)
}

fn assigned(c: &BaseConsumer) -> Vec<i32> {
    c.assignment().map(|tpl| tpl.elements().iter().map(|e| e.partition()).collect()).unwrap_or_default()
}

/// Polls every consumer until `done` holds for their assignments, or fails at the deadline.
fn poll_until(consumers: &[&BaseConsumer], timeout: Duration, what: &str, mut done: impl FnMut(&[Vec<i32>]) -> bool) -> TestResult<Vec<Vec<i32>>> {
    let deadline = Instant::now() + timeout;
    loop {
        for c in consumers {
            if let Some(Err(e)) = c.poll(Duration::from_millis(20)) {
                eprintln!("poll: {e}");
            }
        }
        let now: Vec<Vec<i32>> = consumers.iter().map(|c| assigned(c)).collect();
        if done(&now) {
            return Ok(now);
        }
        if Instant::now() > deadline {
            return Err(format!("{what}: assignments {now:?} at the deadline").into());
        }
    }
}

/// Every partition in `0..n` owned exactly once, and every consumer owns at least one.
fn covers_exactly_once(n: i32) -> impl FnMut(&[Vec<i32>]) -> bool {
    move |a: &[Vec<i32>]| {
        let all: Vec<i32> = a.iter().flatten().copied().collect();
        let set: BTreeSet<i32> = all.iter().copied().collect();
        all.len() == n as usize && set == (0..n).collect() && a.iter().all(|p| !p.is_empty())
    }
}

/// Reads `n` messages (partition, offset) as a subscribed consumer, committing each
/// synchronously if `commit`.
fn read_messages(c: &BaseConsumer, n: usize, commit: bool) -> TestResult<Vec<(i32, i64)>> {
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while seen.len() < n {
        if Instant::now() > deadline {
            return Err(format!("read {} of {n}", seen.len()).into());
        }
        if let Some(m) = c.poll(Duration::from_millis(100)) {
            let m = m?;
            seen.push((m.partition(), m.offset()));
            if commit {
                c.commit_message(&m, CommitMode::Sync)?;
            }
        }
    }
    Ok(seen)
}

async fn produce(kaas: &Kaas, topic: &str, partitions: i32, per_partition: usize) -> TestResult {
    let producer = kaas.producer(&[("linger.ms", "0")])?;
    for p in 0..partitions {
        for i in 0..per_partition {
            producer
                .send(FutureRecord::<(), String>::to(topic).partition(p).payload(&format!("p{p}-m{i}")), Duration::from_secs(30))
                .await
                .map_err(|(e, _)| e)?;
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_consumers_share_six_partitions_and_rebalance_on_leave_and_death() -> TestResult {
    let kaas = Kaas::start()?;
    kaas.create_topic("six", 6, &[]).await?;
    let (a, b, c) = (consumer(&kaas, "g3", &[])?, consumer(&kaas, "g3", &[])?, consumer(&kaas, "g3", &[])?);
    for x in [&a, &b, &c] {
        x.subscribe(&["six"])?;
    }
    let split = poll_until(&[&a, &b, &c], Duration::from_secs(60), "three-way split", covers_exactly_once(6))?;
    assert!(split.iter().all(|p| p.len() == 2), "range gives two each: {split:?}");

    // A member leaving (close sends LeaveGroup) hands its partitions to the others.
    drop(c);
    poll_until(&[&a, &b], Duration::from_secs(60), "after a leave", covers_exactly_once(6))?;

    // A member that dies (joins on the raw wire, then goes silent) is expired after its
    // session timeout and the survivors cover everything again.
    let bootstrap = kaas.bootstrap.clone();
    let ghost = std::thread::spawn(move || -> TestResult<i32> {
        let mut wire = Wire::connect(&bootstrap)?;
        let join = |member: &str| classic_join("g3", member, "six");
        let first = wire.call(5, &join(""))?;
        assert_eq!(first.error_code, ResponseError::MemberIdRequired.code());
        let joined = wire.call(5, &join(&first.member_id))?;
        assert_eq!(joined.error_code, 0);
        let sync = SyncGroupRequest::default()
            .with_group_id(GroupId(StrBytes::from_static_str("g3")))
            .with_generation_id(joined.generation_id)
            .with_member_id(joined.member_id.clone());
        let synced = wire.call(3, &sync)?;
        assert_eq!(synced.error_code, 0);
        Ok(joined.generation_id)
    });
    // The real members are polled all along: they must revoke and rejoin for the ghost's join
    // and sync to complete (an eager revoke alone already empties their assignment).
    poll_until(&[&a, &b], Duration::from_secs(60), "the ghost's join and sync", |_| ghost.is_finished())?;
    let ghost_generation = ghost.join().map_err(|_| "ghost thread panicked")??;
    poll_until(&[&a, &b], Duration::from_secs(60), "the ghost joined", |s| s.iter().flatten().count() == 4)?;
    assert!(ghost_generation > 1);
    poll_until(&[&a, &b], Duration::from_secs(60), "after the ghost's session expired", covers_exactly_once(6))?;
    // Close both at once: closing one while the other is not polled can leave a rebalance
    // waiting for the silent one until its max.poll.interval (as it would with Kafka).
    let closing = [a, b].map(|consumer| std::thread::spawn(move || drop(consumer)));
    for thread in closing {
        thread.join().map_err(|_| "closing a consumer panicked")?;
    }
    Ok(())
}

/// A classic JoinGroup of a consumer (range protocol) subscribing to `topic`.
fn classic_join(group: &str, member: &str, topic: &str) -> JoinGroupRequest {
    JoinGroupRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(group.to_string())))
        .with_session_timeout_ms(6000)
        .with_rebalance_timeout_ms(30_000)
        .with_member_id(StrBytes::from_string(member.to_string()))
        .with_protocol_type(StrBytes::from_static_str("consumer"))
        .with_protocols(vec![JoinGroupRequestProtocol::default().with_name(StrBytes::from_static_str("range")).with_metadata(subscription(topic))])
}

/// A ConsumerProtocol subscription (v0) to one topic.
fn subscription(topic: &str) -> bytes::Bytes {
    let mut b = vec![0, 0, 0, 0, 0, 1];
    b.extend((topic.len() as i16).to_be_bytes());
    b.extend(topic.as_bytes());
    b.extend((-1i32).to_be_bytes());
    bytes::Bytes::from(b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cooperative_sticky_and_roundrobin_assignors() -> TestResult {
    let kaas = Kaas::start()?;
    kaas.create_topic("coop", 4, &[]).await?;
    for (group, strategy) in [("coop-g", "cooperative-sticky"), ("rr-g", "roundrobin")] {
        let extra = [("partition.assignment.strategy", strategy)];
        let a = consumer(&kaas, group, &extra)?;
        a.subscribe(&["coop"])?;
        poll_until(&[&a], Duration::from_secs(60), strategy, covers_exactly_once(4))?;
        let b = consumer(&kaas, group, &extra)?;
        b.subscribe(&["coop"])?;
        let split = poll_until(&[&a, &b], Duration::from_secs(60), strategy, covers_exactly_once(4))?;
        assert!(split.iter().all(|p| p.len() == 2), "{strategy}: {split:?}");
        drop(b);
        poll_until(&[&a], Duration::from_secs(60), strategy, covers_exactly_once(4))?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_member_rejoins_without_a_rebalance() -> TestResult {
    let kaas = Kaas::start()?;
    kaas.create_topic("static", 4, &[]).await?;
    let a = consumer(&kaas, "static-g", &[("group.instance.id", "a")])?;
    let b = consumer(&kaas, "static-g", &[("group.instance.id", "b")])?;
    a.subscribe(&["static"])?;
    b.subscribe(&["static"])?;
    let before = poll_until(&[&a, &b], Duration::from_secs(60), "static split", covers_exactly_once(4))?;
    let generation = describe_generation(&kaas, "static-g")?;
    // A static member closing does not leave the group; its replacement takes its place.
    drop(b);
    let b2 = consumer(&kaas, "static-g", &[("group.instance.id", "b")])?;
    b2.subscribe(&["static"])?;
    let after = poll_until(&[&a, &b2], Duration::from_secs(60), "static rejoin", covers_exactly_once(4))?;
    assert_eq!(before, after, "the same partitions come back to the same instances");
    // a kept its partitions throughout and no new generation was started.
    assert_eq!(describe_generation(&kaas, "static-g")?, generation);
    Ok(())
}

/// The group's current generation. DescribeGroups does not report it, so probe it with
/// heartbeats of a described member: only the current generation is answered without error.
fn describe_generation(kaas: &Kaas, group: &str) -> TestResult<i32> {
    use kafka_protocol::messages::DescribeGroupsRequest;
    let mut wire = Wire::connect(&kaas.bootstrap)?;
    let d = wire.call(5, &DescribeGroupsRequest::default().with_groups(vec![GroupId(StrBytes::from_string(group.to_string()))]))?;
    let g = d.groups.first().ok_or("no group described")?;
    assert_eq!(g.group_state.as_str(), "Stable");
    let m = g.members.first().ok_or("no members")?;
    for generation in 1..50 {
        let hb = HeartbeatRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(group.to_string())))
            .with_generation_id(generation)
            .with_member_id(m.member_id.clone())
            .with_group_instance_id(m.group_instance_id.clone());
        if wire.call(3, &hb)?.error_code == 0 {
            return Ok(generation);
        }
    }
    Err("no generation accepted".into())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn committed_offsets_survive_stop_restart_and_kill9() -> TestResult {
    let mut kaas = Kaas::start()?;
    kaas.create_topic("resume", 2, &[]).await?;
    produce(&kaas, "resume", 2, 10).await?;

    let read_and_commit = |kaas: &Kaas, n: usize| -> TestResult<Vec<(i32, i64)>> {
        let c = consumer(kaas, "resume-g", &[])?;
        c.subscribe(&["resume"])?;
        read_messages(&c, n, true)
    };
    let first = read_and_commit(&kaas, 6)?;
    // Per partition: the next offset to read, if anything of it was read and committed.
    let next_expected = |seen: &[(i32, i64)]| -> Vec<(i32, Option<i64>)> {
        (0..2).map(|p| (p, seen.iter().filter(|(q, _)| *q == p).map(|(_, o)| o + 1).max())).collect()
    };
    let committed = next_expected(&first);

    for crash in [false, true] {
        if crash { kaas.kill9()? } else { kaas.stop()? }
        kaas.restart()?;
        let c = consumer(&kaas, "resume-g", &[])?;
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition("resume", 0);
        tpl.add_partition("resume", 1);
        let fetched = c.committed_offsets(tpl, Duration::from_secs(20))?;
        for (p, o) in &committed {
            let e = fetched.find_partition("resume", *p).ok_or("partition missing")?;
            assert_eq!(e.offset(), o.map_or(Offset::Invalid, Offset::Offset), "partition {p} after {}", if crash { "kill -9" } else { "restart" });
        }
    }
    // Resuming reads exactly from the committed offsets: nothing skipped, nothing repeated.
    let resumed = read_and_commit(&kaas, 20 - 6)?;
    for (p, o) in committed {
        let first_read = resumed.iter().filter(|(q, _)| *q == p).map(|(_, off)| *off).min();
        assert_eq!(first_read, Some(o.unwrap_or(0)).filter(|o| *o < 10), "partition {p} resumes at its commit");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_lists_describes_deletes_groups_and_offsets() -> TestResult {
    let kaas = Kaas::start()?;
    kaas.create_topic("adm", 2, &[]).await?;
    produce(&kaas, "adm", 2, 2).await?;
    {
        let c = consumer(&kaas, "adm-g", &[])?;
        c.subscribe(&["adm"])?;
        poll_until(&[&c], Duration::from_secs(60), "adm", covers_exactly_once(2))?;
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset("adm", 0, Offset::Offset(1))?;
        tpl.add_partition_offset("adm", 1, Offset::Offset(2))?;
        c.commit(&tpl, CommitMode::Sync)?;
        // A non-empty group cannot be deleted.
        let admin = kaas.admin()?;
        let r = admin.delete_groups(&["adm-g"], &AdminOptions::new()).await?;
        assert!(matches!(r[0], Err((_, rdkafka::types::RDKafkaErrorCode::NonEmptyGroup))), "{r:?}");
    }
    // kafka-python's admin client lists (with state filters) and describes.
    let script = r#"
import sys
from kafka import KafkaAdminClient
a = KafkaAdminClient(bootstrap_servers=sys.argv[1])
assert "adm-g" in repr(a.list_groups()), a.list_groups()
assert "adm-g" in repr(a.list_groups(states_filter=["Empty"]))
assert "adm-g" not in repr(a.list_groups(states_filter=["Stable"]))
d = a.describe_groups(["adm-g"])
assert "Empty" in repr(d), d
print("ok")
"#;
    let out = Command::new(std::env::var("PYTHON").unwrap_or_else(|_| "python3".into())).args(["-c", script, &kaas.bootstrap]).output()?;
    assert!(out.status.success(), "kafka-python admin failed:\n{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));

    // OffsetDelete on the wire, then the group itself through rdkafka's AdminClient.
    use kafka_protocol::messages::OffsetDeleteRequest;
    use kafka_protocol::messages::offset_delete_request::{OffsetDeleteRequestPartition, OffsetDeleteRequestTopic};
    let mut wire = Wire::connect(&kaas.bootstrap)?;
    let del = wire.call(0, &OffsetDeleteRequest::default().with_group_id(GroupId(StrBytes::from_static_str("adm-g"))).with_topics(vec![
        OffsetDeleteRequestTopic::default().with_name(TopicName(StrBytes::from_static_str("adm"))).with_partitions(vec![OffsetDeleteRequestPartition::default().with_partition_index(0)]),
    ]))?;
    assert_eq!(del.error_code, 0);
    assert_eq!(del.topics[0].partitions[0].error_code, 0);
    let c = consumer(&kaas, "adm-g", &[])?;
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition("adm", 0);
    tpl.add_partition("adm", 1);
    let fetched = c.committed_offsets(tpl, Duration::from_secs(20))?;
    assert_eq!(fetched.find_partition("adm", 0).ok_or("p0")?.offset(), Offset::Invalid);
    assert_eq!(fetched.find_partition("adm", 1).ok_or("p1")?.offset(), Offset::Offset(2));
    drop(c);

    let admin = kaas.admin()?;
    let r = admin.delete_groups(&["adm-g", "no-such-group"], &AdminOptions::new()).await?;
    assert!(r[0].is_ok(), "{r:?}");
    assert!(matches!(r[1], Err((_, rdkafka::types::RDKafkaErrorCode::GroupIdNotFound))), "{r:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_generations_unknown_members_and_unknown_partitions_are_refused() -> TestResult {
    let kaas = Kaas::start()?;
    kaas.create_topic("bad", 1, &[]).await?;
    let a = consumer(&kaas, "bad-g", &[])?;
    a.subscribe(&["bad"])?;
    poll_until(&[&a], Duration::from_secs(60), "bad", covers_exactly_once(1))?;

    let mut wire = Wire::connect(&kaas.bootstrap)?;
    let group = || GroupId(StrBytes::from_static_str("bad-g"));
    let commit = |generation: i32, member: &str, topic: &'static str, partition: i32| {
        OffsetCommitRequest::default().with_group_id(group()).with_generation_id_or_member_epoch(generation).with_member_id(StrBytes::from_string(member.to_string())).with_topics(vec![
            OffsetCommitRequestTopic::default().with_name(TopicName(StrBytes::from_static_str(topic))).with_partitions(vec![OffsetCommitRequestPartition::default().with_partition_index(partition).with_committed_offset(1)]),
        ])
    };
    let code = |r: &kafka_protocol::messages::OffsetCommitResponse| r.topics[0].partitions[0].error_code;
    assert_eq!(code(&wire.call(8, &commit(5, "nobody", "bad", 0))?), ResponseError::UnknownMemberId.code());
    assert_eq!(code(&wire.call(8, &commit(-1, "", "bad", 0))?), ResponseError::UnknownMemberId.code(), "a simple commit to an active group");
    assert_eq!(code(&wire.call(8, &commit(-1, "", "bad", 7))?), ResponseError::UnknownTopicOrPartition.code());
    assert_eq!(code(&wire.call(8, &commit(-1, "", "nope", 0))?), ResponseError::UnknownTopicOrPartition.code());
    // A group that does not exist: ILLEGAL_GENERATION before v9, GROUP_ID_NOT_FOUND from v9.
    let other = |v: i16| -> TestResult<i16> {
        let mut w = Wire::connect(&kaas.bootstrap)?;
        let r = w.call(v, &commit(3, "m", "bad", 0).with_group_id(GroupId(StrBytes::from_static_str("ghost-g"))))?;
        Ok(code(&r))
    };
    assert_eq!(other(8)?, ResponseError::IllegalGeneration.code());
    assert_eq!(other(9)?, ResponseError::GroupIdNotFound.code());
    let hb = HeartbeatRequest::default().with_group_id(group()).with_generation_id(1).with_member_id(StrBytes::from_static_str("nobody"));
    assert_eq!(wire.call(3, &hb)?.error_code, ResponseError::UnknownMemberId.code());
    // Oversized member metadata is refused without disturbing the group.
    let huge = JoinGroupRequest::default()
        .with_group_id(group())
        .with_session_timeout_ms(6000)
        .with_rebalance_timeout_ms(6000)
        .with_protocol_type(StrBytes::from_static_str("consumer"))
        .with_protocols(vec![JoinGroupRequestProtocol::default().with_name(StrBytes::from_static_str("range")).with_metadata(bytes::Bytes::from(vec![0u8; 2 * 1024 * 1024]))]);
    assert_eq!(wire.call(5, &huge)?.error_code, ResponseError::InvalidRequest.code());
    let bad_session = huge.clone().with_session_timeout_ms(10).with_protocols(vec![JoinGroupRequestProtocol::default().with_name(StrBytes::from_static_str("range"))]);
    assert_eq!(wire.call(5, &bad_session)?.error_code, ResponseError::InvalidSessionTimeout.code());
    // The group is still stable with its one member, who can still commit.
    poll_until(&[&a], Duration::from_secs(5), "still assigned", covers_exactly_once(1))?;
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset("bad", 0, Offset::Offset(0))?;
    a.commit(&tpl, CommitMode::Sync)?;
    Ok(())
}

// ---- KIP-848: `group.protocol=consumer` ----------------------------------------------------

/// A broker whose KIP-848 members heartbeat every 500 ms (Kafka's default is 5 s), so
/// rebalances in these tests settle in seconds.
fn kip848_broker() -> TestResult<Kaas> {
    Kaas::start_with(&["--group-consumer-heartbeat-interval-ms", "500", "--group-consumer-session-timeout-ms", "10000"])
}

/// An rdkafka consumer speaking the KIP-848 protocol (no session/heartbeat settings: the
/// broker owns them in this protocol).
fn kip848_consumer(kaas: &Kaas, group: &str, extra: &[(&str, &str)]) -> TestResult<BaseConsumer> {
    let mut c = kaas.config();
    c.set("group.id", group).set("group.protocol", "consumer").set("enable.auto.commit", "false").set("auto.offset.reset", "earliest");
    for (k, v) in extra {
        c.set(*k, *v);
    }
    Ok(c.create()?)
}

/// ListGroups v5 filtered by type: (group id, state, type) of every listed group.
fn list_groups_of_type(kaas: &Kaas, group_type: &str) -> TestResult<Vec<(String, String, String)>> {
    use kafka_protocol::messages::ListGroupsRequest;
    let mut wire = Wire::connect(&kaas.bootstrap)?;
    let listed = wire.call(5, &ListGroupsRequest::default().with_types_filter(vec![StrBytes::from_string(group_type.to_string())]))?;
    Ok(listed.groups.iter().map(|g| (g.group_id.to_string(), g.group_state.to_string(), g.group_type.to_string())).collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kip848_three_consumers_share_six_partitions_and_a_leave_rebalances() -> TestResult {
    let kaas = kip848_broker()?;
    kaas.create_topic("six848", 6, &[]).await?;
    let (a, b, c) = (kip848_consumer(&kaas, "g848", &[])?, kip848_consumer(&kaas, "g848", &[])?, kip848_consumer(&kaas, "g848", &[])?);
    for x in [&a, &b, &c] {
        x.subscribe(&["six848"])?;
    }
    let split = poll_until(&[&a, &b, &c], Duration::from_secs(60), "three-way split", covers_exactly_once(6))?;
    assert!(split.iter().all(|p| p.len() == 2), "uniform gives two each: {split:?}");
    let listed = list_groups_of_type(&kaas, "consumer")?;
    assert!(listed.iter().any(|(g, _, t)| g == "g848" && t == "consumer"), "{listed:?}");
    assert!(list_groups_of_type(&kaas, "classic")?.iter().all(|(g, _, _)| g != "g848"));

    // Closing a member sends the leave heartbeat (epoch -1): the others take its partitions.
    drop(c);
    let after = poll_until(&[&a, &b], Duration::from_secs(60), "after a leave", covers_exactly_once(6))?;
    assert!(after.iter().all(|p| p.len() == 3), "{after:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kip848_range_assignor_gives_contiguous_ranges() -> TestResult {
    let kaas = kip848_broker()?;
    kaas.create_topic("range848", 4, &[]).await?;
    let extra = [("group.remote.assignor", "range")];
    let (a, b) = (kip848_consumer(&kaas, "range-g", &extra)?, kip848_consumer(&kaas, "range-g", &extra)?);
    a.subscribe(&["range848"])?;
    b.subscribe(&["range848"])?;
    let split = poll_until(&[&a, &b], Duration::from_secs(60), "range split", covers_exactly_once(4))?;
    let mut sorted: Vec<Vec<i32>> = split.into_iter().map(|mut p| {
        p.sort();
        p
    }).collect();
    sorted.sort();
    assert_eq!(sorted, vec![vec![0, 1], vec![2, 3]]);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kip848_commit_stop_and_resume_at_the_committed_offset() -> TestResult {
    let kaas = kip848_broker()?;
    kaas.create_topic("resume848", 2, &[]).await?;
    produce(&kaas, "resume848", 2, 10).await?;
    let read = |n: usize, commit: bool| -> TestResult<Vec<(i32, i64)>> {
        let c = kip848_consumer(&kaas, "resume848-g", &[])?;
        c.subscribe(&["resume848"])?;
        // Commits are OffsetCommit v9 with the member id and epoch.
        read_messages(&c, n, commit)
    };
    let first = read(6, true)?;
    let next: Vec<(i32, i64)> = (0..2).map(|p| (p, first.iter().filter(|(q, _)| *q == p).map(|(_, o)| o + 1).max().unwrap_or(0))).collect();
    // A new member of the same group starts exactly where the commits left off.
    let resumed = read(20 - 6, false)?;
    for (p, o) in next {
        let first_read = resumed.iter().filter(|(q, _)| *q == p).map(|(_, off)| *off).min();
        assert_eq!(first_read, Some(o).filter(|o| *o < 10), "partition {p} resumes at its commit");
    }
    assert_eq!(resumed.len(), 14, "nothing read twice: {resumed:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kip848_and_classic_members_cannot_share_a_group() -> TestResult {
    use kafka_protocol::messages::ConsumerGroupHeartbeatRequest;
    let kaas = kip848_broker()?;
    kaas.create_topic("mixed", 2, &[]).await?;
    let modern = kip848_consumer(&kaas, "mixed-848", &[])?;
    modern.subscribe(&["mixed"])?;
    poll_until(&[&modern], Duration::from_secs(60), "the KIP-848 member", covers_exactly_once(2))?;
    // A classic JoinGroup to a consumer group with members: Kafka's "protocol not supported".
    let mut wire = Wire::connect(&kaas.bootstrap)?;
    assert_eq!(wire.call(5, &classic_join("mixed-848", "", "mixed"))?.error_code, ResponseError::InconsistentGroupProtocol.code());

    // And the other way round: a KIP-848 heartbeat to a classic group with members.
    let classic = consumer(&kaas, "mixed-classic", &[])?;
    classic.subscribe(&["mixed"])?;
    poll_until(&[&classic], Duration::from_secs(60), "the classic member", covers_exactly_once(2))?;
    let hb = ConsumerGroupHeartbeatRequest::default()
        .with_group_id(GroupId(StrBytes::from_static_str("mixed-classic")))
        .with_member_id(StrBytes::from_static_str("intruder"))
        .with_member_epoch(0)
        .with_rebalance_timeout_ms(30_000)
        .with_subscribed_topic_names(Some(vec![TopicName(StrBytes::from_static_str("mixed"))]))
        .with_topic_partitions(Some(vec![]));
    let answer = wire.call(1, &hb)?;
    assert_eq!(answer.error_code, ResponseError::GroupIdNotFound.code(), "{:?}", answer.error_message);
    // Bad input on the new API is refused with an error code, not a dropped connection.
    let bad = hb.clone().with_group_id(GroupId(StrBytes::from_static_str("fresh"))).with_member_epoch(-7);
    assert_eq!(wire.call(1, &bad)?.error_code, ResponseError::InvalidRequest.code());
    let bad_assignor = hb.with_group_id(GroupId(StrBytes::from_static_str("fresh"))).with_server_assignor(Some(StrBytes::from_static_str("sticky")));
    assert_eq!(wire.call(1, &bad_assignor)?.error_code, ResponseError::UnsupportedAssignor.code());
    Ok(())
}

/// A described consumer group: its epoch, and member id → (member epoch, assigned partitions).
type Described = (i32, BTreeMap<String, (i32, Vec<i32>)>);

/// ConsumerGroupDescribe of one group.
fn describe_consumer_group(kaas: &Kaas, group: &str) -> TestResult<Described> {
    use kafka_protocol::messages::ConsumerGroupDescribeRequest;
    let mut wire = Wire::connect(&kaas.bootstrap)?;
    let d = wire.call(1, &ConsumerGroupDescribeRequest::default().with_group_ids(vec![GroupId(StrBytes::from_string(group.to_string()))]))?;
    let g = d.groups.first().ok_or("no group described")?;
    assert_eq!(g.error_code, 0, "{:?}", g.error_message);
    let members = g
        .members
        .iter()
        .map(|m| {
            let mut parts: Vec<i32> = m.assignment.topic_partitions.iter().flat_map(|t| t.partitions.iter().copied()).collect();
            parts.sort();
            (m.member_id.to_string(), (m.member_epoch, parts))
        })
        .collect();
    Ok((g.group_epoch, members))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kip848_group_survives_a_restart_and_a_silent_member_is_fenced() -> TestResult {
    use kafka_protocol::messages::ConsumerGroupHeartbeatRequest;
    let mut kaas = kip848_broker()?;
    kaas.create_topic("durable848", 4, &[]).await?;
    let a = kip848_consumer(&kaas, "durable848-g", &[])?;
    a.subscribe(&["durable848"])?;
    poll_until(&[&a], Duration::from_secs(60), "one member", covers_exactly_once(4))?;
    let before = describe_consumer_group(&kaas, "durable848-g")?;

    // A coordinator restart loads the same epochs and assignment from the shard log.
    kaas.stop()?;
    kaas.restart()?;
    assert_eq!(describe_consumer_group(&kaas, "durable848-g")?, before);
    poll_until(&[&a], Duration::from_secs(60), "after the restart", covers_exactly_once(4))?;

    // A member that joins on the raw wire and then goes silent gets a target but never the
    // partitions (a still owns them until it revokes); once its session times out it is fenced
    // and a owns everything again.
    let mut wire = Wire::connect(&kaas.bootstrap)?;
    let join = ConsumerGroupHeartbeatRequest::default()
        .with_group_id(GroupId(StrBytes::from_static_str("durable848-g")))
        .with_member_id(StrBytes::from_static_str("ghost"))
        .with_member_epoch(0)
        .with_rebalance_timeout_ms(30_000)
        .with_subscribed_topic_names(Some(vec![TopicName(StrBytes::from_static_str("durable848"))]))
        .with_topic_partitions(Some(vec![]));
    let joined = wire.call(1, &join)?;
    assert_eq!(joined.error_code, 0, "{:?}", joined.error_message);
    assert!(joined.member_epoch > before.0);
    let ahead = join.clone().with_member_epoch(joined.member_epoch + 5).with_rebalance_timeout_ms(-1).with_subscribed_topic_names(None).with_topic_partitions(None);
    assert_eq!(wire.call(1, &ahead)?.error_code, ResponseError::FencedMemberEpoch.code());
    poll_until(&[&a], Duration::from_secs(60), "a revokes the ghost's share", |s| s[0].len() == 2)?;
    poll_until(&[&a], Duration::from_secs(60), "the ghost is fenced", covers_exactly_once(4))?;
    let (_, members) = describe_consumer_group(&kaas, "durable848-g")?;
    assert!(!members.contains_key("ghost"), "{members:?}");
    let late = wire.call(1, &join.with_member_epoch(joined.member_epoch).with_rebalance_timeout_ms(-1).with_subscribed_topic_names(None).with_topic_partitions(None))?;
    assert_eq!(late.error_code, ResponseError::UnknownMemberId.code());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kip848_more_partitions_are_assigned_without_a_rejoin() -> TestResult {
    use rdkafka::admin::NewPartitions;
    let kaas = kip848_broker()?;
    kaas.create_topic("grow848", 2, &[]).await?;
    let (a, b) = (kip848_consumer(&kaas, "grow848-g", &[])?, kip848_consumer(&kaas, "grow848-g", &[])?);
    a.subscribe(&["grow848"])?;
    b.subscribe(&["grow848"])?;
    poll_until(&[&a, &b], Duration::from_secs(60), "two partitions", covers_exactly_once(2))?;
    let (epoch, _) = describe_consumer_group(&kaas, "grow848-g")?;
    for r in kaas.admin()?.create_partitions(&[NewPartitions::new("grow848", 6)], &AdminOptions::new()).await? {
        r.map_err(|(t, e)| format!("growing {t}: {e}"))?;
    }
    // The coordinator notices the new partition count at the next heartbeat: a new group epoch.
    let grown = poll_until(&[&a, &b], Duration::from_secs(60), "six partitions", covers_exactly_once(6))?;
    assert!(grown.iter().all(|p| p.len() == 3), "{grown:?}");
    assert!(describe_consumer_group(&kaas, "grow848-g")?.0 > epoch);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kip848_regex_subscription_follows_new_topics() -> TestResult {
    let kaas = kip848_broker()?;
    kaas.create_topic("rx848-a", 2, &[]).await?;
    kaas.create_topic("other848", 1, &[]).await?;
    let c = kip848_consumer(&kaas, "rx848-g", &[])?;
    c.subscribe(&["^rx848-.*"])?;
    let owned = |c: &BaseConsumer| -> Vec<(String, i32)> {
        let mut v: Vec<(String, i32)> = c.assignment().map(|a| a.elements().iter().map(|e| (e.topic().to_string(), e.partition())).collect()).unwrap_or_default();
        v.sort();
        v
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let want_a = vec![("rx848-a".to_string(), 0), ("rx848-a".to_string(), 1)];
    while owned(&c) != want_a {
        assert!(Instant::now() < deadline, "regex assignment {:?}", owned(&c));
        c.poll(Duration::from_millis(50));
    }
    // A topic created later that matches joins the subscription (a new group epoch).
    kaas.create_topic("rx848-b", 1, &[]).await?;
    let deadline = Instant::now() + Duration::from_secs(60);
    while owned(&c).len() != 3 {
        assert!(Instant::now() < deadline, "after rx848-b: {:?}", owned(&c));
        c.poll(Duration::from_millis(50));
    }
    assert!(owned(&c).iter().all(|(t, _)| t.starts_with("rx848-")));
    // librdkafka sends the pattern (KIP-848 `subscribed_topic_regex`); the broker matches it.
    use kafka_protocol::messages::ConsumerGroupDescribeRequest;
    let mut wire = Wire::connect(&kaas.bootstrap)?;
    let d = wire.call(1, &ConsumerGroupDescribeRequest::default().with_group_ids(vec![GroupId(StrBytes::from_static_str("rx848-g"))]))?;
    let regex: Vec<String> = d.groups.iter().flat_map(|g| g.members.iter().filter_map(|m| m.subscribed_topic_regex.as_ref().map(|r| r.to_string()))).collect();
    assert!(regex.len() == 1 && regex[0].contains("^rx848-.*"), "{regex:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kip848_static_member_rejoins_without_a_new_group_epoch() -> TestResult {
    let kaas = kip848_broker()?;
    kaas.create_topic("static848", 4, &[]).await?;
    let a = kip848_consumer(&kaas, "static848-g", &[("group.instance.id", "a")])?;
    let b = kip848_consumer(&kaas, "static848-g", &[("group.instance.id", "b")])?;
    a.subscribe(&["static848"])?;
    b.subscribe(&["static848"])?;
    let before = poll_until(&[&a, &b], Duration::from_secs(60), "static split", covers_exactly_once(4))?;
    let (epoch, _) = describe_consumer_group(&kaas, "static848-g")?;
    // Closing a static member is a temporary leave (epoch -2): its partitions wait for it.
    drop(b);
    let b2 = kip848_consumer(&kaas, "static848-g", &[("group.instance.id", "b")])?;
    b2.subscribe(&["static848"])?;
    let after = poll_until(&[&a, &b2], Duration::from_secs(60), "static rejoin", covers_exactly_once(4))?;
    assert_eq!(before, after, "the same partitions come back to the same instances");
    assert_eq!(describe_consumer_group(&kaas, "static848-g")?.0, epoch, "no new group epoch");
    Ok(())
}
