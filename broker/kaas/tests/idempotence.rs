//! The idempotent producer: sequence and epoch checks on the wire, and librdkafka's
//! `enable.idempotence=true` end to end.

mod common;

use common::wire::{Wire, batch};
use common::{Kaas, TestResult, payload};
use kafka_protocol::ResponseError;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{InitProducerIdRequest, ProduceRequest, ProduceResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use rdkafka::producer::FutureRecord;
use rdkafka::topic_partition_list::Offset;

fn produce(wire: &mut Wire, records: bytes::Bytes) -> TestResult<(i16, i64)> {
    let request = ProduceRequest::default().with_acks(-1).with_timeout_ms(10_000).with_topic_data(vec![
        TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_static_str("idem")))
            .with_partition_data(vec![PartitionProduceData::default().with_index(0).with_records(Some(records))]),
    ]);
    let response: ProduceResponse = wire.call(9, &request)?;
    let p = &response.responses[0].partition_responses[0];
    Ok((p.error_code, p.base_offset))
}

#[test]
fn duplicates_are_acknowledged_with_their_original_offsets() -> TestResult {
    let kaas = Kaas::start()?;
    let mut wire = Wire::connect(&kaas.bootstrap)?;
    wire.create_topic("idem", 1)?;
    let init = wire.call(4, &InitProducerIdRequest::default().with_transactional_id(None).with_transaction_timeout_ms(60_000))?;
    assert_eq!(init.error_code, 0);
    let (pid, epoch) = (init.producer_id.0, init.producer_epoch);
    assert!(pid >= 0);
    let second = wire.call(4, &InitProducerIdRequest::default().with_transactional_id(None).with_transaction_timeout_ms(60_000))?;
    assert_ne!(second.producer_id.0, pid, "producer ids are unique");

    assert_eq!(produce(&mut wire, batch(pid, epoch, 0, &["a", "b", "c"])?)?, (0, 0));
    assert_eq!(produce(&mut wire, batch(pid, epoch, 3, &["d"])?)?, (0, 3));
    // A retry of the first batch: success, original offset, nothing appended.
    assert_eq!(produce(&mut wire, batch(pid, epoch, 0, &["a", "b", "c"])?)?, (0, 0));
    // A gap in the sequence.
    let (code, _) = produce(&mut wire, batch(pid, epoch, 10, &["x"])?)?;
    assert_eq!(code, ResponseError::OutOfOrderSequenceNumber.code());
    // A newer epoch must start at sequence 0; then the old epoch is fenced.
    let (code, _) = produce(&mut wire, batch(pid, epoch + 1, 5, &["y"])?)?;
    assert_eq!(code, ResponseError::OutOfOrderSequenceNumber.code());
    assert_eq!(produce(&mut wire, batch(pid, epoch + 1, 0, &["e"])?)?, (0, 4));
    let (code, _) = produce(&mut wire, batch(pid, epoch, 4, &["z"])?)?;
    assert_eq!(code, ResponseError::InvalidProducerEpoch.code());

    let got = kaas.consume("idem", 0, Offset::Beginning, 5)?;
    assert_eq!(got.iter().map(payload).collect::<Vec<_>>(), vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec(), b"d".to_vec(), b"e".to_vec()]);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producer_state_survives_a_restart() -> TestResult {
    let mut kaas = Kaas::start()?;
    let (pid, epoch) = {
        let mut wire = Wire::connect(&kaas.bootstrap)?;
        wire.create_topic("idem", 1)?;
        let init = wire.call(4, &InitProducerIdRequest::default().with_transactional_id(None))?;
        let (pid, epoch) = (init.producer_id.0, init.producer_epoch);
        assert_eq!(produce(&mut wire, batch(pid, epoch, 0, &["a", "b"])?)?, (0, 0));
        (pid, epoch)
    };
    kaas.stop()?;
    kaas.restart()?;
    let mut wire = Wire::connect(&kaas.bootstrap)?;
    // The retry after the restart is still recognised as a duplicate.
    assert_eq!(produce(&mut wire, batch(pid, epoch, 0, &["a", "b"])?)?, (0, 0));
    assert_eq!(produce(&mut wire, batch(pid, epoch, 2, &["c"])?)?, (0, 2));
    // And producer ids are never handed out twice, across restarts too.
    let init = wire.call(4, &InitProducerIdRequest::default().with_transactional_id(None))?;
    assert_ne!(init.producer_id.0, pid);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn librdkafka_idempotent_producer_works_unchanged() -> TestResult {
    let kaas = Kaas::start()?;
    kaas.create_topic("idem-rd", 3, &[]).await?;
    let producer = kaas.producer(&[("enable.idempotence", "true"), ("linger.ms", "2")])?;
    let mut pending = Vec::new();
    for i in 0..3000 {
        let value = format!("m{i}");
        pending.push(producer.send_result(FutureRecord::<(), String>::to("idem-rd").partition(i % 3).payload(&value)).map_err(|(e, _)| e)?);
    }
    for p in pending {
        p.await?.map_err(|(e, _)| e)?;
    }
    for p in 0..3 {
        let got = kaas.consume("idem-rd", p, Offset::Beginning, 1000)?;
        let expected: Vec<Vec<u8>> = (0..3000).filter(|i| i % 3 == p).map(|i| format!("m{i}").into_bytes()).collect();
        assert_eq!(got.iter().map(payload).collect::<Vec<_>>(), expected, "partition {p}: exactly once, in order");
    }
    Ok(())
}
