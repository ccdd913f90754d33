//! Share groups (KIP-932) on the wire, against the kaas binary: membership and assignment,
//! records handed to one member at a time, acknowledgements (accept, release, reject) made
//! durable before they are answered and kept across a kill -9, session epochs, records given
//! back when a member's connection goes or its lock expires, and the share-group offset APIs.
//! The Java client, the CLI tools and franz-go's share consumer run against kaas in the
//! conformance suite and franz-go's kgo suite.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::share::{ACCEPT, REJECT, RELEASE, acknowledge, acquired, heartbeat, produce, s, set_group_configs, share_fetch, share_offsets, topic_id};
use common::wire::Wire;
use common::{Kaas, TestResult, wait_for};
use kafka_protocol::ResponseError;
use kafka_protocol::messages::{AlterShareGroupOffsetsRequest, DeleteGroupsRequest, GroupId, ListGroupsRequest, ShareGroupDescribeRequest, TopicName};

#[test]
fn records_go_to_one_member_at_a_time_and_acknowledgements_survive_a_kill() -> TestResult {
    let mut kaas = Kaas::start()?;
    let mut admin = Wire::connect(&kaas.bootstrap)?;
    admin.create_topic("work", 1)?;
    let id = topic_id(&mut admin, "work")?;
    set_group_configs(&mut admin, "workers", &[("share.auto.offset.reset", "earliest")])?;
    produce(&mut admin, "work", &["0", "1", "2", "3", "4", "5", "6", "7", "8", "9"])?;

    let (mut a, mut b) = (Wire::connect(&kaas.bootstrap)?, Wire::connect(&kaas.bootstrap)?);
    let (error, epoch_a, assigned) = heartbeat(&mut a, "workers", "member-a", 0, Some("work"), id)?;
    assert_eq!((error, assigned), (0, Some(vec![0])));
    let (error, epoch_b, assigned) = heartbeat(&mut b, "workers", "member-b", 0, Some("work"), id)?;
    assert_eq!((error, assigned), (0, Some(vec![0])), "more members than partitions: they share it");
    assert!(epoch_b > epoch_a);
    let (error, _, _) = heartbeat(&mut a, "workers", "member-a", epoch_a + 7, None, id)?;
    assert_eq!(error, ResponseError::FencedMemberEpoch.code());

    // Each record goes to one member: a takes four, b the rest.
    assert_eq!(acquired(&share_fetch(&mut a, "workers", "member-a", 0, id, 4, vec![])?), vec![(0, 3, 1)]);
    assert_eq!(acquired(&share_fetch(&mut b, "workers", "member-b", 0, id, 100, vec![])?), vec![(4, 9, 1)]);
    // a accepts two, releases one, rejects one; b may not acknowledge a's records.
    assert_eq!(acknowledge(&mut a, "workers", "member-a", 1, id, &[(0, 1, ACCEPT), (2, 2, RELEASE), (3, 3, REJECT)])?, (0, vec![0]));
    assert_eq!(acknowledge(&mut b, "workers", "member-b", 1, id, &[(0, 0, ACCEPT)])?, (0, vec![ResponseError::InvalidRecordState.code()]));
    // The released record goes out again, counted; the rejected one never does.
    let again = share_fetch(&mut b, "workers", "member-b", 2, id, 100, vec![(4, 9, ACCEPT)])?;
    assert_eq!(acquired(&again), vec![(2, 2, 2)]);
    assert_eq!(again.responses[0].partitions[0].acknowledge_error_code, 0);
    // Owed still: 2 (delivered again), not 3 (rejected) nor 4-9 (accepted).
    assert_eq!(share_offsets(&mut admin, "workers", "work")?, (2, 1));
    // Session epochs order a member's requests.
    assert_eq!(share_fetch(&mut b, "workers", "member-b", 7, id, 100, vec![])?.error_code, ResponseError::InvalidShareSessionEpoch.code());
    assert_eq!(share_fetch(&mut b, "workers", "nobody", 1, id, 100, vec![])?.error_code, ResponseError::ShareSessionNotFound.code());
    assert_eq!(acknowledge(&mut b, "workers", "member-b", 3, id, &[(2, 2, ACCEPT)])?, (0, vec![0]));
    assert_eq!(share_offsets(&mut admin, "workers", "work")?, (10, 0), "everything acknowledged or rejected");

    // b takes the next records and dies with them; the broker is killed: acknowledged records
    // stay acknowledged, b's come back.
    produce(&mut admin, "work", &["10", "11", "12"])?;
    assert_eq!(acquired(&share_fetch(&mut b, "workers", "member-b", 4, id, 100, vec![])?), vec![(10, 12, 1)]);
    kaas.kill9()?;
    kaas.restart()?;
    let mut c = Wire::connect(&kaas.bootstrap)?;
    let (error, _, _) = heartbeat(&mut c, "workers", "member-c", 0, Some("work"), id)?;
    assert_eq!(error, 0);
    let mut got = Vec::new();
    let mut epoch = 0;
    assert!(wait_for(Duration::from_secs(20), || {
        let r = share_fetch(&mut c, "workers", "member-c", epoch, id, 100, vec![]).unwrap();
        epoch += 1;
        got.extend(acquired(&r));
        !got.is_empty()
    }));
    assert_eq!(got.iter().map(|a| (a.0, a.1)).collect::<Vec<_>>(), vec![(10, 12)], "only what nobody acknowledged before the kill");
    Ok(())
}

#[test]
fn a_members_records_come_back_when_its_connection_goes_or_its_lock_expires() -> TestResult {
    let kaas = Kaas::start()?;
    let mut admin = Wire::connect(&kaas.bootstrap)?;
    admin.create_topic("jobs", 1)?;
    let id = topic_id(&mut admin, "jobs")?;
    // The lock (30 s by default) is far longer than the waits below.
    set_group_configs(&mut admin, "crew", &[("share.auto.offset.reset", "earliest")])?;
    produce(&mut admin, "jobs", &["a", "b", "c"])?;
    let mut a = Wire::connect(&kaas.bootstrap)?;
    let mut b = Wire::connect(&kaas.bootstrap)?;
    heartbeat(&mut a, "crew", "a", 0, Some("jobs"), id)?;
    heartbeat(&mut b, "crew", "b", 0, Some("jobs"), id)?;
    assert_eq!(acquired(&share_fetch(&mut a, "crew", "a", 0, id, 100, vec![])?), vec![(0, 2, 1)]);
    assert_eq!(acquired(&share_fetch(&mut b, "crew", "b", 0, id, 100, vec![])?), vec![], "a holds them all");
    drop(a);
    let mut epoch = 1;
    let mut got = Vec::new();
    assert!(wait_for(Duration::from_secs(10), || {
        let r = share_fetch(&mut b, "crew", "b", epoch, id, 100, vec![]).unwrap();
        epoch += 1;
        got = acquired(&r);
        !got.is_empty()
    }), "a's records go back when its connection closes, long before their lock would expire");
    assert_eq!(got, vec![(0, 2, 2)]);

    // With a short lock, what b holds and never acknowledges goes to c once the lock expires.
    set_group_configs(&mut admin, "crew", &[("share.record.lock.duration.ms", "1000")])?;
    produce(&mut admin, "jobs", &["d"])?;
    // b accepts what it holds in the same request that takes the new record.
    let took = share_fetch(&mut b, "crew", "b", epoch, id, 100, vec![(0, 2, ACCEPT)])?;
    assert_eq!((acquired(&took), took.responses[0].partitions[0].acknowledge_error_code), (vec![(3, 3, 1)], 0));
    let mut c = Wire::connect(&kaas.bootstrap)?;
    heartbeat(&mut c, "crew", "c", 0, Some("jobs"), id)?;
    let mut epoch_c = 0;
    let mut got = Vec::new();
    assert!(wait_for(Duration::from_secs(10), || {
        let r = share_fetch(&mut c, "crew", "c", epoch_c, id, 100, vec![]).unwrap();
        epoch_c += 1;
        got = acquired(&r);
        !got.is_empty()
    }));
    assert_eq!(got, vec![(3, 3, 2)], "b's lock expired");
    // b's late acknowledgement is refused: the records are c's now.
    assert_eq!(acknowledge(&mut b, "crew", "b", epoch + 1, id, &[(3, 3, ACCEPT)])?, (0, vec![ResponseError::InvalidRecordState.code()]));
    Ok(())
}

#[test]
fn share_group_admin_describe_list_reset_and_delete() -> TestResult {
    let kaas = Kaas::start()?;
    let mut admin = Wire::connect(&kaas.bootstrap)?;
    admin.create_topic("feed", 1)?;
    let id = topic_id(&mut admin, "feed")?;
    produce(&mut admin, "feed", &["x", "y", "z"])?;
    // AlterShareGroupOffsets creates the group (empty) and its start.
    use kafka_protocol::messages::alter_share_group_offsets_request::{AlterShareGroupOffsetsRequestPartition, AlterShareGroupOffsetsRequestTopic};
    let alter = AlterShareGroupOffsetsRequest::default().with_group_id(GroupId(s("readers"))).with_topics(vec![
        AlterShareGroupOffsetsRequestTopic::default().with_topic_name(TopicName(s("feed"))).with_partitions(vec![AlterShareGroupOffsetsRequestPartition::default().with_partition_index(0).with_start_offset(1)]),
    ]);
    let altered = admin.call(0, &alter)?;
    assert_eq!((altered.error_code, altered.responses[0].partitions[0].error_code), (0, 0));
    assert_eq!(share_offsets(&mut admin, "readers", "feed")?, (1, 2));

    let mut m = Wire::connect(&kaas.bootstrap)?;
    let (_, epoch, _) = heartbeat(&mut m, "readers", "m1", 0, Some("feed"), id)?;
    assert_eq!(acquired(&share_fetch(&mut m, "readers", "m1", 0, id, 100, vec![])?), vec![(1, 2, 1)], "from the start it was set to");
    let listed = admin.call(5, &ListGroupsRequest::default().with_types_filter(vec![s("share")]))?;
    let groups: Vec<(String, String, String)> = listed.groups.iter().map(|g| (g.group_id.to_string(), g.group_type.to_string(), g.group_state.to_string())).collect();
    assert_eq!(groups, vec![("readers".into(), "share".into(), "Stable".into())]);
    let described = admin.call(1, &ShareGroupDescribeRequest::default().with_group_ids(vec![GroupId(s("readers"))]))?;
    let g = &described.groups[0];
    assert_eq!((g.error_code, g.group_state.to_string(), g.assignor_name.to_string(), g.members.len()), (0, "Stable".into(), "simple".into(), 1));
    assert_eq!(g.members[0].assignment.topic_partitions[0].partitions, vec![0]);
    // A group with members can be neither reset nor deleted.
    assert_eq!(admin.call(0, &alter)?.error_code, ResponseError::NonEmptyGroup.code());
    let delete = DeleteGroupsRequest::default().with_groups_names(vec![GroupId(s("readers"))]);
    assert_eq!(admin.call(2, &delete)?.results[0].error_code, ResponseError::NonEmptyGroup.code());
    // Once its member leaves, it can.
    let (error, left, _) = heartbeat(&mut m, "readers", "m1", -1, None, id)?;
    assert_eq!((error, left), (0, -1));
    let _ = epoch;
    assert_eq!(admin.call(2, &delete)?.results[0].error_code, 0);
    let gone = admin.call(1, &ShareGroupDescribeRequest::default().with_group_ids(vec![GroupId(s("readers"))]))?;
    assert_eq!(gone.groups[0].error_code, ResponseError::GroupIdNotFound.code());
    // A new group of the same name starts afresh (latest by default: nothing to deliver).
    let mut n = Wire::connect(&kaas.bootstrap)?;
    heartbeat(&mut n, "readers", "n1", 0, Some("feed"), id)?;
    assert_eq!(acquired(&share_fetch(&mut n, "readers", "n1", 0, id, 100, vec![])?), vec![]);
    Ok(())
}
