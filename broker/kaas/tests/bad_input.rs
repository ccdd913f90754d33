//! Malformed and hostile input: the broker answers with Kafka errors or closes that one
//! connection, never panics, never writes a byte of a rejected batch, and keeps serving.

mod common;

use common::wire::{Wire, batch};
use common::{Kaas, TestResult};
use kafka_protocol::ResponseError;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{ApiVersionsRequest, ListOffsetsRequest, ProduceRequest, TopicName};
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
    let request = ListOffsetsRequest::default().with_replica_id((-1).into()).with_topics(vec![
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
