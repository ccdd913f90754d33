//! Malformed and hostile input: the broker answers with Kafka errors or closes that one
//! connection, never panics, never writes a byte of a rejected batch, and keeps serving.

mod common;

use std::time::Duration;

use common::wire::{Wire, batch, txn_batch};
use common::{Kaas, TestResult, wait_for};
use kaas_storage::Codec;
use kaas_storage::testing::{BatchBuilder, encode_record, put_varint};
use kafka_protocol::ResponseError;
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    AddPartitionsToTxnRequest, ApiVersionsRequest, CreateTopicsRequest, DescribeConfigsRequest, EndTxnRequest, InitProducerIdRequest,
    ListOffsetsRequest, ProduceRequest, ProducerId, TopicName, TransactionalId,
};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::protocol::StrBytes;

fn produce(topic: &str, records: bytes::Bytes) -> ProduceRequest {
    ProduceRequest::default().with_acks(-1).with_timeout_ms(10_000).with_topic_data(vec![
        TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partition_data(vec![PartitionProduceData::default().with_index(0).with_records(Some(records))]),
    ])
}

fn latest_offset(wire: &mut Wire, topic: &str) -> TestResult<i64> {
    stable_offset(wire, topic, 0)
}

/// ListOffsets "latest" at `isolation` (1: read_committed, which answers the last stable offset).
fn stable_offset(wire: &mut Wire, topic: &str, isolation: i8) -> TestResult<i64> {
    let request = ListOffsetsRequest::default().with_replica_id((-1).into()).with_isolation_level(isolation).with_topics(vec![
        ListOffsetsTopic::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partitions(vec![ListOffsetsPartition::default().with_partition_index(0).with_timestamp(-1)]),
    ]);
    let response = wire.call(7, &request)?;
    Ok(response.topics[0].partitions[0].offset)
}

/// The broker still answers a fresh connection.
fn still_serving(kaas: &Kaas) -> TestResult {
    let mut wire = Wire::connect(&kaas.bootstrap)?;
    let response = wire.call(3, &ApiVersionsRequest::default())?;
    assert_eq!(response.error_code, 0);
    Ok(())
}

#[test]
fn hostile_frames_close_only_their_connection() -> TestResult {
    let kaas = Kaas::start()?;
    let frames: Vec<Vec<u8>> = vec![
        (-1i32).to_be_bytes().to_vec(),                                // negative size
        (i32::MAX).to_be_bytes().to_vec(),                             // lying huge size
        [&4i32.to_be_bytes()[..], &[0, 0, 0, 1]].concat(),            // too short for a header
        [&8i32.to_be_bytes()[..], &[0x7f, 0x7f, 0, 0, 0, 0, 0, 1]].concat(), // unknown API key
        [&8i32.to_be_bytes()[..], &[0, 0, 0, 99, 0, 0, 0, 1]].concat(),      // Produce v99
        [&12i32.to_be_bytes()[..], &[0, 3, 0, 12, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0x7f]].concat(), // Metadata with a garbage body
    ];
    for frame in frames {
        let mut wire = Wire::connect(&kaas.bootstrap)?;
        wire.send_raw(&frame)?;
        assert!(wire.closed_by_broker(), "frame {frame:02x?} did not close the connection");
    }
    // Truncated frame: size says 100, the client sends 10 bytes and hangs up.
    let mut wire = Wire::connect(&kaas.bootstrap)?;
    wire.send_raw(&[&100i32.to_be_bytes()[..], &[0; 10]].concat())?;
    drop(wire);
    still_serving(&kaas)
}

#[test]
fn api_versions_at_an_unknown_version_gets_the_kip_511_answer() -> TestResult {
    let kaas = Kaas::start()?;
    let mut wire = Wire::connect(&kaas.bootstrap)?;
    // ApiVersions v99: header v2 layout, which the broker must not need to parse.
    let mut body = vec![0, 18, 0, 99, 0, 0, 0, 42, 0, 4, b't', b'e', b's', b't', 0];
    body.extend_from_slice(&[2, b'x', 2, b'1', 0]);
    wire.send_frame(&body)?;
    let frame = wire.read_frame()?.ok_or("no answer")?;
    assert_eq!(&frame[0..4], &42i32.to_be_bytes(), "correlation id");
    let error = i16::from_be_bytes([frame[4], frame[5]]);
    assert_eq!(error, ResponseError::UnsupportedVersion.code());
    Ok(())
}

#[test]
fn corrupt_batches_are_refused_and_nothing_is_written() -> TestResult {
    let kaas = Kaas::start()?;
    let mut wire = Wire::connect(&kaas.bootstrap)?;
    wire.create_topic("bad-input", 1)?;
    let good = batch(-1, -1, -1, &["a", "b"])?;
    let response = wire.call(9, &produce("bad-input", good.clone()))?;
    assert_eq!(response.responses[0].partition_responses[0].error_code, 0);
    assert_eq!(latest_offset(&mut wire, "bad-input")?, 2);

    // One flipped bit in the CRC-covered area.
    let mut flipped = good.to_vec();
    let last = flipped.len() - 1;
    flipped[last] ^= 0x01;
    // A batch whose length field claims more than is there.
    let mut lying = good.to_vec();
    lying[8..12].copy_from_slice(&(10_000i32).to_be_bytes());
    // Magic 1 (the v0/v1 message format Kafka 4 no longer takes).
    let mut old_magic = good.to_vec();
    old_magic[16] = 1;
    // A valid batch followed by garbage.
    let mut trailing = good.to_vec();
    trailing.extend_from_slice(&[1, 2, 3]);
    for (name, records) in [("crc", flipped), ("length", lying), ("magic", old_magic), ("trailing", trailing), ("empty", vec![])] {
        let response = wire.call(9, &produce("bad-input", records.into()))?;
        let code = response.responses[0].partition_responses[0].error_code;
        assert!(
            code == ResponseError::CorruptMessage.code() || code == ResponseError::InvalidRecord.code(),
            "{name}: error code {code}"
        );
    }
    assert_eq!(latest_offset(&mut wire, "bad-input")?, 2, "a rejected batch wrote something");
    let response = wire.call(9, &produce("bad-input", good))?;
    assert_eq!(response.responses[0].partition_responses[0].base_offset, 2);
    still_serving(&kaas)
}

#[test]
fn invalid_acks_and_unknown_partitions_get_kafka_errors() -> TestResult {
    let kaas = Kaas::start_with(&["--auto-create-topics", "false"])?;
    let mut wire = Wire::connect(&kaas.bootstrap)?;
    let good = batch(-1, -1, -1, &["a"])?;
    let response = wire.call(9, &produce("nope", good.clone()))?;
    assert_eq!(response.responses[0].partition_responses[0].error_code, ResponseError::UnknownTopicOrPartition.code());
    let response = wire.call(9, &produce("nope", good).with_acks(5))?;
    assert_eq!(response.responses[0].partition_responses[0].error_code, ResponseError::InvalidRequiredAcks.code());
    Ok(())
}

/// The error code and message of producing `records` to partition 0 of `topic`.
fn produce_answer(wire: &mut Wire, topic: &str, records: Vec<u8>) -> TestResult<(i16, Option<String>)> {
    let response = wire.call(9, &produce(topic, records.into()))?;
    let p = &response.responses[0].partition_responses[0];
    Ok((p.error_code, p.error_message.as_ref().map(|m| m.to_string())))
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// A record body (attributes onwards) behind its length prefix.
fn framed(body: &[u8]) -> Vec<u8> {
    let mut rec = Vec::new();
    put_varint(&mut rec, body.len() as i64);
    rec.extend_from_slice(body);
    rec
}

/// Batches whose CRC holds over records no consumer could parse, each with its name.
fn unparsable_batches() -> Vec<(&'static str, Vec<u8>)> {
    let now = now_ms();
    let builder = || BatchBuilder::new().timestamps(now);
    let record = |offset_delta: i64| encode_record(0, offset_delta, Some(b"k"), Some(b"v"), &[]);
    let two: Vec<u8> = [0, 1].into_iter().flat_map(record).collect();
    let mut truncated = two.clone();
    truncated.truncate(two.len() - 2);
    // Attributes, timestamp and offset deltas, then a key length of six continuation bytes.
    let mut bad_varint = vec![0u8, 0, 0];
    bad_varint.extend_from_slice(&[0xff; 6]);
    bad_varint.push(0);
    // A key length of 100 in a record of a dozen bytes.
    let mut lying_key = vec![0u8, 0, 0];
    put_varint(&mut lying_key, 100);
    lying_key.extend_from_slice(b"k");
    put_varint(&mut lying_key, -1);
    lying_key.push(0);
    // One record whose 8 MiB value compresses to a few kilobytes (the broker's limit: 2 MiB).
    let bomb = encode_record(0, 0, None, Some(&vec![0u8; 8 << 20]), &[]);
    let mut garbage_gzip = builder().compression(Codec::Gzip).records(3, 50).build();
    let end = garbage_gzip.len();
    for b in &mut garbage_gzip[61 + 10..end] {
        *b = b.wrapping_mul(31).wrapping_add(7);
    }
    kaas_storage::testing::reseal(&mut garbage_gzip);
    let mut two_batches = builder().records(1, 5).build();
    two_batches.extend(builder().records(1, 5).build());
    vec![
        ("more records counted than present", builder().build_with_records(&two, 3)),
        ("fewer records counted than present", builder().build_with_records(&two, 1)),
        ("a varint that never ends", builder().build_with_records(&framed(&bad_varint), 1)),
        ("offset deltas out of order", builder().build_with_records(&[0, 2].into_iter().flat_map(record).collect::<Vec<_>>(), 2)),
        ("a truncated record", builder().build_with_records(&truncated, 2)),
        ("a lying key length", builder().build_with_records(&framed(&lying_key), 1)),
        ("a control batch", builder().attributes(0x20).producer(1, 0, 0).records(1, 1).build()),
        ("a zstd bomb", builder().compression(Codec::Zstd).build_with_records(&bomb, 1)),
        ("a gzip bomb", builder().compression(Codec::Gzip).build_with_records(&bomb, 1)),
        ("records hidden in a compressed batch out of order", builder().compression(Codec::Lz4).build_with_records(&[0, 2].into_iter().flat_map(record).collect::<Vec<_>>(), 2)),
        ("gzip garbage", garbage_gzip),
        ("two batches", two_batches),
    ]
}

#[test]
fn records_consumers_could_not_parse_are_refused_and_nothing_is_written() -> TestResult {
    let kaas = Kaas::start_with(&["--max-request-bytes", "2097152"])?;
    let mut wire = Wire::connect(&kaas.bootstrap)?;
    wire.create_topic("unparsable", 1)?;
    let good = batch(-1, -1, -1, &["a", "b"])?;
    assert_eq!(produce_answer(&mut wire, "unparsable", good.to_vec())?, (0, None));
    for (name, records) in unparsable_batches() {
        assert!(records.len() < 2 << 20, "{name}: {} bytes", records.len());
        let (code, message) = produce_answer(&mut wire, "unparsable", records)?;
        assert_eq!(code, ResponseError::InvalidRecord.code(), "{name}: {message:?}");
        assert!(message.is_some(), "{name}: no error message");
        assert_eq!(latest_offset(&mut wire, "unparsable")?, 2, "{name} wrote something");
    }
    // A compressed batch within the limit, and the partition still takes good batches.
    let zstd = BatchBuilder::new().timestamps(now_ms()).compression(Codec::Zstd).records(100, 1000).build();
    assert_eq!(produce_answer(&mut wire, "unparsable", zstd)?.0, 0);
    let response = wire.call(9, &produce("unparsable", good))?;
    assert_eq!(response.responses[0].partition_responses[0].base_offset, 102);
    still_serving(&kaas)
}

fn create_topic_with(wire: &mut Wire, topic: &str, configs: &[(&str, &str)]) -> TestResult {
    let configs = configs
        .iter()
        .map(|(k, v)| CreatableTopicConfig::default().with_name(StrBytes::from_string(k.to_string())).with_value(Some(StrBytes::from_string(v.to_string()))))
        .collect();
    let request = CreateTopicsRequest::default().with_timeout_ms(10_000).with_topics(vec![
        CreatableTopic::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_string())))
            .with_num_partitions(1)
            .with_replication_factor(1)
            .with_configs(configs),
    ]);
    let response = wire.call(5, &request)?;
    assert_eq!(response.topics[0].error_code, 0, "{:?}", response.topics[0].error_message);
    Ok(())
}

/// The value DescribeConfigs gives for one config of `topic`.
fn topic_config(wire: &mut Wire, topic: &str, key: &str) -> TestResult<Option<String>> {
    let request = DescribeConfigsRequest::default().with_resources(vec![
        DescribeConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(StrBytes::from_string(topic.to_string()))
            .with_configuration_keys(Some(vec![StrBytes::from_string(key.to_string())])),
    ]);
    let response = wire.call(4, &request)?;
    Ok(response.results[0].configs.first().and_then(|c| c.value.as_ref()).map(|v| v.to_string()))
}

#[test]
fn timestamps_over_an_hour_ahead_are_refused_unless_the_topic_allows_them() -> TestResult {
    let kaas = Kaas::start()?;
    let mut wire = Wire::connect(&kaas.bootstrap)?;
    create_topic_with(&mut wire, "ts-default", &[])?;
    create_topic_with(&mut wire, "ts-lenient", &[("message.timestamp.after.max.ms", "10800000")])?;
    assert_eq!(topic_config(&mut wire, "ts-default", "message.timestamp.after.max.ms")?.as_deref(), Some("3600000"), "Kafka 4's default");
    assert_eq!(topic_config(&mut wire, "ts-lenient", "message.timestamp.after.max.ms")?.as_deref(), Some("10800000"));
    let two_hours_ahead = || BatchBuilder::new().timestamps(now_ms() + 2 * 3_600_000).records(2, 10).build();
    let (code, message) = produce_answer(&mut wire, "ts-default", two_hours_ahead())?;
    assert_eq!(code, ResponseError::InvalidTimestamp.code(), "{message:?}");
    assert_eq!(latest_offset(&mut wire, "ts-default")?, 0);
    assert_eq!(produce_answer(&mut wire, "ts-lenient", two_hours_ahead())?.0, 0);
    assert_eq!(latest_offset(&mut wire, "ts-lenient")?, 2);
    Ok(())
}

#[test]
fn a_second_batch_in_a_partition_entry_is_refused_whoever_wrote_it() -> TestResult {
    let kaas = Kaas::start()?;
    let mut wire = Wire::connect(&kaas.bootstrap)?;
    wire.create_topic("two", 1)?;
    let s = |v: &str| StrBytes::from_string(v.to_owned());
    let mut init = |id: &str| -> TestResult<(i64, i16)> {
        let request = InitProducerIdRequest::default().with_transactional_id(Some(TransactionalId(s(id)))).with_transaction_timeout_ms(60_000);
        let response = wire.call(4, &request)?;
        assert_eq!(response.error_code, 0);
        Ok((response.producer_id.0, response.producer_epoch))
    };
    let (pid, epoch) = init("two-txn")?;
    // Another producer whose transaction never includes this partition.
    let (other, other_epoch) = init("other-txn")?;
    let add = AddPartitionsToTxnRequest::default()
        .with_v3_and_below_transactional_id(TransactionalId(s("two-txn")))
        .with_v3_and_below_producer_id(ProducerId(pid))
        .with_v3_and_below_producer_epoch(epoch)
        .with_v3_and_below_topics(vec![AddPartitionsToTxnTopic::default().with_name(TopicName(s("two"))).with_partitions(vec![0])]);
    assert_eq!(wire.call(3, &add)?.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code, 0);

    let plain = [batch(-1, -1, -1, &["a"])?, batch(-1, -1, -1, &["b"])?].concat();
    assert_eq!(produce_answer(&mut wire, "two", plain)?.0, ResponseError::InvalidRecord.code());
    // The first batch belongs to the verified transaction, the second to a producer no
    // coordinator has this partition for: written, it would hold the last stable offset back
    // for ever.
    let smuggled = [txn_batch(pid, epoch, 0, &["mine"])?, txn_batch(other, other_epoch, 0, &["smuggled"])?].concat();
    let request = produce("two", smuggled.into()).with_transactional_id(Some(TransactionalId(s("two-txn"))));
    let answer = &wire.call(9, &request)?.responses[0].partition_responses[0];
    assert_eq!(answer.error_code, ResponseError::InvalidRecord.code(), "{:?}", answer.error_message);
    assert_eq!(latest_offset(&mut wire, "two")?, 0, "a refused entry wrote something");

    let end = EndTxnRequest::default().with_transactional_id(TransactionalId(s("two-txn"))).with_producer_id(ProducerId(pid)).with_producer_epoch(epoch).with_committed(true);
    assert_eq!(wire.call(3, &end)?.error_code, 0);
    let settled = wait_for(Duration::from_secs(10), || {
        let lso = stable_offset(&mut wire, "two", 1);
        let leo = latest_offset(&mut wire, "two");
        matches!((lso, leo), (Ok(lso), Ok(leo)) if lso == leo)
    });
    assert!(settled, "the last stable offset is held back");
    still_serving(&kaas)
}
