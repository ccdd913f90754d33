//! ShareFetch (key 78) and ShareAcknowledge (key 79) v2 (KIP-1222, Apache Kafka 4.2+): the fields
//! v2 adds, checked against the bytes Apache Kafka 4.4's own generated classes write
//! (`org.apache.kafka.common.message.*Data`, `MessageUtil.toByteBufferAccessor(message, version)`),
//! plus round trips at v1 and v2 and the version bounds.
//!
//! v2 adds, in wire order:
//! - ShareFetchRequest: `ShareAcquireMode` int8 (ignorable, default 0) then `IsRenewAck` bool
//!   (default false, refused below v2), both right after `BatchSize`.
//! - ShareAcknowledgeRequest: `IsRenewAck` bool (default false, refused below v2) right after
//!   `ShareSessionEpoch`.
//! - ShareAcknowledgeResponse: `AcquisitionLockTimeoutMs` int32 (ignorable, default 0) right
//!   after `ErrorMessage`.
//! - ShareFetchResponse: no new field; v2 is byte-for-byte v1.
//!
//! And DescribeShareGroupOffsets v1 (KIP-1226, Kafka 4.2+), from the same patch:
//! - DescribeShareGroupOffsetsResponse: `Lag` int64 (ignorable, default -1) right after each
//!   partition's `LeaderEpoch`.
//! - DescribeShareGroupOffsetsRequest: no new field (null topics, "all", already at v0).

#![allow(clippy::unwrap_used)]

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{
    share_acknowledge_request, share_acknowledge_response, share_fetch_request,
    describe_share_group_offsets_request, describe_share_group_offsets_response,
    share_fetch_response, ApiKey,
    DescribeShareGroupOffsetsResponse, GroupId, ShareAcknowledgeRequest, ShareAcknowledgeResponse,
    ShareFetchRequest, ShareFetchResponse,
};
use kafka_protocol::protocol::{Decodable, Encodable, Message, StrBytes};
use uuid::Uuid;

/// Written by Apache Kafka 4.4.0's kafka-clients for the messages built below.
const SHARE_FETCH_REQUEST_V2: &str = "04677270046d656d00000003000001f400000001001000000000000a000000050101020102030405060708090a0b0c0d0e0f1002000000000200000000000000640000000000000065030401000000020102030405060708090a0b0c0d0e0f1002000000070000";
/// ShareAcquireMode 0 and IsRenewAck true: pins the order of the two adjacent new bytes (00 01).
const SHARE_FETCH_REQUEST_V2_RENEW_ONLY: &str = "04677270046d656d00000003000001f400000001001000000000000a000000050001020102030405060708090a0b0c0d0e0f1002000000000200000000000000640000000000000065030401000000020102030405060708090a0b0c0d0e0f1002000000070000";
const SHARE_FETCH_REQUEST_V1: &str = "04677270046d656d00000003000001f400000001001000000000000a00000005020102030405060708090a0b0c0d0e0f1002000000000200000000000000640000000000000065030401000000020102030405060708090a0b0c0d0e0f1002000000070000";
const SHARE_ACK_REQUEST_V2: &str = "04677270046d656d0000000401020102030405060708090a0b0c0d0e0f1002000000020200000000000000050000000000000009020400000000";
const SHARE_ACK_REQUEST_V1: &str = "04677270046d656d00000004020102030405060708090a0b0c0d0e0f1002000000020200000000000000050000000000000009020400000000";
const SHARE_ACK_RESPONSE_V2: &str = "0000000000000000007530020102030405060708090a0b0c0d0e0f10020000000200000000000001000000050000000200000001026800002384000000";
const SHARE_ACK_RESPONSE_V1: &str = "00000000000000020102030405060708090a0b0c0d0e0f10020000000200000000000001000000050000000200000001026800002384000000";
const SHARE_FETCH_RESPONSE_V1_V2: &str = "0000000000000000007530020102030405060708090a0b0c0d0e0f10020000000000000000000000000001000000050001020000000000000064000000000000006500010000000100";
const DESCRIBE_OFFSETS_RESPONSE_V1: &str = "0000000002046772700202740102030405060708090a0b0c0d0e0f100200000002000000000000006400000005000000000000002a00000000000000000000";
const DESCRIBE_OFFSETS_RESPONSE_V0: &str = "0000000002046772700202740102030405060708090a0b0c0d0e0f10020000000200000000000000640000000500000000000000000000";
/// One group, topics null (every topic with state): the same bytes at v0 and v1.
const DESCRIBE_OFFSETS_REQUEST_ALL: &str = "0204677270000000";

const TOPIC: Uuid = Uuid::from_u128(0x0102030405060708_090a0b0c0d0e0f10);

fn unhex(s: &str) -> Bytes {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect::<Vec<u8>>()
        .into()
}

fn encode<T: Encodable>(m: &T, version: i16) -> anyhow::Result<Bytes> {
    let mut buf = BytesMut::new();
    m.encode(&mut buf, version)?;
    assert_eq!(
        m.compute_size(version)?,
        buf.len(),
        "compute_size at v{version}"
    );
    Ok(buf.freeze())
}

fn decode<T: Decodable>(bytes: &Bytes, version: i16) -> anyhow::Result<T> {
    let mut buf = bytes.clone();
    let m = T::decode(&mut buf, version)?;
    assert!(
        buf.is_empty(),
        "{} bytes left after decoding at v{version}",
        buf.len()
    );
    Ok(m)
}

fn fetch_request(mode: i8, renew: bool) -> ShareFetchRequest {
    use share_fetch_request::*;
    ShareFetchRequest::default()
        .with_group_id(Some(GroupId(StrBytes::from_static_str("grp"))))
        .with_member_id(Some(StrBytes::from_static_str("mem")))
        .with_share_session_epoch(3)
        .with_max_wait_ms(500)
        .with_min_bytes(1)
        .with_max_bytes(1048576)
        .with_max_records(10)
        .with_batch_size(5)
        .with_share_acquire_mode(mode)
        .with_is_renew_ack(renew)
        .with_topics(vec![FetchTopic::default()
            .with_topic_id(TOPIC)
            .with_partitions(vec![FetchPartition::default()
                .with_partition_index(0)
                .with_acknowledgement_batches(vec![
                    AcknowledgementBatch::default()
                        .with_first_offset(100)
                        .with_last_offset(101)
                        .with_acknowledge_types(vec![4, 1]),
                ])])])
        .with_forgotten_topics_data(vec![ForgottenTopic::default()
            .with_topic_id(TOPIC)
            .with_partitions(vec![7])])
}

fn ack_request(renew: bool) -> ShareAcknowledgeRequest {
    use share_acknowledge_request::*;
    ShareAcknowledgeRequest::default()
        .with_group_id(Some(GroupId(StrBytes::from_static_str("grp"))))
        .with_member_id(Some(StrBytes::from_static_str("mem")))
        .with_share_session_epoch(4)
        .with_is_renew_ack(renew)
        .with_topics(vec![AcknowledgeTopic::default()
            .with_topic_id(TOPIC)
            .with_partitions(vec![AcknowledgePartition::default()
                .with_partition_index(2)
                .with_acknowledgement_batches(vec![
                    AcknowledgementBatch::default()
                        .with_first_offset(5)
                        .with_last_offset(9)
                        .with_acknowledge_types(vec![4]),
                ])])])
}

fn ack_response(lock_timeout_ms: i32) -> ShareAcknowledgeResponse {
    use share_acknowledge_response::*;
    ShareAcknowledgeResponse::default()
        .with_acquisition_lock_timeout_ms(lock_timeout_ms)
        .with_responses(vec![ShareAcknowledgeTopicResponse::default()
            .with_topic_id(TOPIC)
            .with_partitions(vec![PartitionData::default()
                .with_partition_index(2)
                .with_current_leader(
                    LeaderIdAndEpoch::default()
                        .with_leader_id(1)
                        .with_leader_epoch(5),
                )])])
        .with_node_endpoints(vec![NodeEndpoint::default()
            .with_node_id(1.into())
            .with_host(StrBytes::from_static_str("h"))
            .with_port(9092)])
}

fn fetch_response() -> ShareFetchResponse {
    use share_fetch_response::*;
    ShareFetchResponse::default()
        .with_acquisition_lock_timeout_ms(30000)
        .with_responses(vec![ShareFetchableTopicResponse::default()
            .with_topic_id(TOPIC)
            .with_partitions(vec![PartitionData::default()
                .with_partition_index(0)
                .with_current_leader(
                    LeaderIdAndEpoch::default()
                        .with_leader_id(1)
                        .with_leader_epoch(5),
                )
                .with_records(Some(Bytes::new()))
                .with_acquired_records(vec![AcquiredRecords::default()
                    .with_first_offset(100)
                    .with_last_offset(101)
                    .with_delivery_count(1)])])])
}

#[test]
fn version_ranges_are_1_to_2() {
    for key in [ApiKey::ShareFetch, ApiKey::ShareAcknowledge] {
        let v = key.valid_versions();
        assert_eq!((v.min, v.max), (1, 2), "{key:?}");
    }
    for v in [
        ShareFetchRequest::VERSIONS,
        ShareFetchResponse::VERSIONS,
        ShareAcknowledgeRequest::VERSIONS,
        ShareAcknowledgeResponse::VERSIONS,
        share_fetch_request::FetchTopic::VERSIONS,
        share_fetch_request::FetchPartition::VERSIONS,
        share_fetch_request::AcknowledgementBatch::VERSIONS,
        share_fetch_request::ForgottenTopic::VERSIONS,
        share_fetch_response::ShareFetchableTopicResponse::VERSIONS,
        share_fetch_response::PartitionData::VERSIONS,
        share_fetch_response::AcquiredRecords::VERSIONS,
        share_fetch_response::LeaderIdAndEpoch::VERSIONS,
        share_fetch_response::NodeEndpoint::VERSIONS,
        share_acknowledge_request::AcknowledgeTopic::VERSIONS,
        share_acknowledge_request::AcknowledgePartition::VERSIONS,
        share_acknowledge_request::AcknowledgementBatch::VERSIONS,
        share_acknowledge_response::ShareAcknowledgeTopicResponse::VERSIONS,
        share_acknowledge_response::PartitionData::VERSIONS,
        share_acknowledge_response::LeaderIdAndEpoch::VERSIONS,
        share_acknowledge_response::NodeEndpoint::VERSIONS,
    ] {
        assert_eq!((v.min, v.max), (1, 2));
    }
}

#[test]
fn defaults_of_the_new_fields() {
    let req = ShareFetchRequest::default();
    assert_eq!((req.share_acquire_mode, req.is_renew_ack), (0, false));
    assert!(!ShareAcknowledgeRequest::default().is_renew_ack);
    assert_eq!(
        ShareAcknowledgeResponse::default().acquisition_lock_timeout_ms,
        0
    );
}

#[test]
fn share_fetch_request_v2_matches_kafka() {
    let req = fetch_request(1, true);
    let bytes = encode(&req, 2).unwrap();
    assert_eq!(bytes, unhex(SHARE_FETCH_REQUEST_V2));
    assert_eq!(decode::<ShareFetchRequest>(&bytes, 2).unwrap(), req);
    // The two new bytes sit right after BatchSize: 2 × (1 + 3) string bytes, 6 × int32.
    assert_eq!(&bytes[8 + 24..8 + 24 + 2], &[1, 1]);

    let req = fetch_request(0, true);
    let bytes = encode(&req, 2).unwrap();
    assert_eq!(bytes, unhex(SHARE_FETCH_REQUEST_V2_RENEW_ONLY));
    assert_eq!(decode::<ShareFetchRequest>(&bytes, 2).unwrap(), req);
    assert_eq!(&bytes[8 + 24..8 + 24 + 2], &[0, 1]);
}

#[test]
fn share_fetch_request_v1_still_works() {
    let req = fetch_request(0, false);
    let bytes = encode(&req, 1).unwrap();
    assert_eq!(bytes, unhex(SHARE_FETCH_REQUEST_V1));
    assert_eq!(decode::<ShareFetchRequest>(&bytes, 1).unwrap(), req);
    // ShareAcquireMode is ignorable: dropped below v2, as Kafka does.
    assert_eq!(
        encode(&fetch_request(1, false), 1).unwrap(),
        unhex(SHARE_FETCH_REQUEST_V1)
    );
    // IsRenewAck is not: Kafka throws "Attempted to write a non-default isRenewAck at version 1".
    assert!(encode(&fetch_request(0, true), 1).is_err());
    assert!(fetch_request(0, true).compute_size(1).is_err());
}

#[test]
fn share_acknowledge_request_v2_matches_kafka() {
    let req = ack_request(true);
    let bytes = encode(&req, 2).unwrap();
    assert_eq!(bytes, unhex(SHARE_ACK_REQUEST_V2));
    assert_eq!(decode::<ShareAcknowledgeRequest>(&bytes, 2).unwrap(), req);
    // IsRenewAck follows ShareSessionEpoch: 2 × (1 + 3) string bytes, one int32.
    assert_eq!(bytes[8 + 4], 1);
}

#[test]
fn share_acknowledge_request_v1_still_works() {
    let req = ack_request(false);
    let bytes = encode(&req, 1).unwrap();
    assert_eq!(bytes, unhex(SHARE_ACK_REQUEST_V1));
    assert_eq!(decode::<ShareAcknowledgeRequest>(&bytes, 1).unwrap(), req);
    assert!(encode(&ack_request(true), 1).is_err());
    assert!(ack_request(true).compute_size(1).is_err());
}

#[test]
fn share_acknowledge_response_v2_matches_kafka() {
    let resp = ack_response(30000);
    let bytes = encode(&resp, 2).unwrap();
    assert_eq!(bytes, unhex(SHARE_ACK_RESPONSE_V2));
    assert_eq!(decode::<ShareAcknowledgeResponse>(&bytes, 2).unwrap(), resp);
    // AcquisitionLockTimeoutMs follows ErrorMessage (null: one byte) after int32 + int16.
    assert_eq!(&bytes[7..11], &30000i32.to_be_bytes());
}

#[test]
fn share_acknowledge_response_v1_still_works() {
    // AcquisitionLockTimeoutMs is ignorable: Kafka drops it below v2 rather than failing.
    let bytes = encode(&ack_response(30000), 1).unwrap();
    assert_eq!(bytes, unhex(SHARE_ACK_RESPONSE_V1));
    assert_eq!(
        decode::<ShareAcknowledgeResponse>(&bytes, 1).unwrap(),
        ack_response(0)
    );
}

#[test]
fn share_fetch_response_v2_is_v1() {
    let resp = fetch_response();
    for version in [1, 2] {
        let bytes = encode(&resp, version).unwrap();
        assert_eq!(bytes, unhex(SHARE_FETCH_RESPONSE_V1_V2), "v{version}");
        assert_eq!(decode::<ShareFetchResponse>(&bytes, version).unwrap(), resp);
    }
}

#[test]
fn versions_outside_1_to_2_are_refused() {
    for version in [0, 3] {
        assert!(encode(&fetch_request(0, false), version).is_err());
        assert!(encode(&ack_request(false), version).is_err());
        assert!(encode(&ack_response(0), version).is_err());
        assert!(encode(&fetch_response(), version).is_err());
        assert!(decode::<ShareFetchRequest>(&unhex(SHARE_FETCH_REQUEST_V2), version).is_err());
        assert!(decode::<ShareAcknowledgeRequest>(&unhex(SHARE_ACK_REQUEST_V2), version).is_err());
        assert!(
            decode::<ShareAcknowledgeResponse>(&unhex(SHARE_ACK_RESPONSE_V2), version).is_err()
        );
        assert!(decode::<ShareFetchResponse>(&unhex(SHARE_FETCH_RESPONSE_V1_V2), version).is_err());
    }
}

fn describe_offsets_response(lag: i64) -> DescribeShareGroupOffsetsResponse {
    use describe_share_group_offsets_response::*;
    let partition = DescribeShareGroupOffsetsResponsePartition::default()
        .with_partition_index(2)
        .with_start_offset(100)
        .with_leader_epoch(5)
        .with_lag(lag);
    let topic = DescribeShareGroupOffsetsResponseTopic::default()
        .with_topic_name(StrBytes::from_static_str("t").into())
        .with_topic_id(TOPIC)
        .with_partitions(vec![partition]);
    DescribeShareGroupOffsetsResponse::default().with_groups(vec![
        DescribeShareGroupOffsetsResponseGroup::default()
            .with_group_id(StrBytes::from_static_str("grp").into())
            .with_topics(vec![topic]),
    ])
}

#[test]
fn describe_share_group_offsets_v1_carries_the_lag_as_kafka_does() {
    let resp = describe_offsets_response(42);
    let bytes = encode(&resp, 1).unwrap();
    assert_eq!(bytes, unhex(DESCRIBE_OFFSETS_RESPONSE_V1));
    assert_eq!(decode::<DescribeShareGroupOffsetsResponse>(&bytes, 1).unwrap(), resp);
    // Lag is ignorable: dropped at v0, read back as its default, -1.
    let bytes = encode(&resp, 0).unwrap();
    assert_eq!(bytes, unhex(DESCRIBE_OFFSETS_RESPONSE_V0));
    assert_eq!(
        decode::<DescribeShareGroupOffsetsResponse>(&bytes, 0).unwrap(),
        describe_offsets_response(-1)
    );
    assert_eq!(
        ApiKey::DescribeShareGroupOffsets.valid_versions().max,
        1
    );
}

#[test]
fn describe_share_group_offsets_request_null_topics_means_all() {
    use describe_share_group_offsets_request::*;
    let all = DescribeShareGroupOffsetsRequest::default().with_groups(vec![
        DescribeShareGroupOffsetsRequestGroup::default()
            .with_group_id(StrBytes::from_static_str("grp").into())
            .with_topics(None),
    ]);
    for version in [0, 1] {
        let bytes = encode(&all, version).unwrap();
        assert_eq!(bytes, unhex(DESCRIBE_OFFSETS_REQUEST_ALL), "v{version}");
        assert_eq!(decode::<DescribeShareGroupOffsetsRequest>(&bytes, version).unwrap(), all);
    }
    assert!(encode(&all, 2).is_err());
    assert!(encode(&describe_offsets_response(0), 2).is_err());
}
