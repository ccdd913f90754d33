//! What one Fetch may cost the broker (issue #15), over the wire against the real binary: a
//! request naming a huge topic name for many partitions, one naming too many partitions, and
//! one asking for 2 GiB.

mod common;

use common::wire::{Wire, batch};
use common::{Kaas, TestResult};
use kafka_protocol::ResponseError;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{ApiVersionsRequest, FetchRequest, FetchResponse, ProduceRequest, TopicName};
use kafka_protocol::protocol::StrBytes;

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

fn fetch(topic: &str, partitions: std::ops::Range<i32>) -> FetchRequest {
    let partitions = partitions.map(|p| FetchPartition::default().with_partition(p).with_partition_max_bytes(1 << 20)).collect();
    FetchRequest::default().with_max_wait_ms(0).with_min_bytes(0).with_topics(vec![FetchTopic::default().with_topic(name(topic)).with_partitions(partitions)])
}

fn record_bytes(response: &FetchResponse) -> usize {
    response.responses.iter().flat_map(|t| &t.partitions).map(|p| p.records.as_ref().map_or(0, |r| r.len())).sum()
}

/// The most memory the broker process has held (VmHWM), in bytes.
fn peak_rss(kaas: &Kaas) -> TestResult<u64> {
    let status = std::fs::read_to_string(format!("/proc/{}/status", kaas.pid()))?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).ok_or("no VmHWM")?;
    let kib: u64 = line.split_whitespace().nth(1).ok_or("no VmHWM value")?.parse()?;
    Ok(kib * 1024)
}

fn still_serving(kaas: &Kaas) -> TestResult {
    let mut wire = Wire::connect(&kaas.bootstrap)?;
    assert_eq!(wire.call(3, &ApiVersionsRequest::default())?.error_code, 0);
    Ok(())
}

/// 1,000 partitions of a 1 MiB topic name: a 1 MiB request. Before names were checked and
/// shared, each partition key copied the name (and a new session kept the copies): gigabytes.
#[test]
fn a_huge_topic_name_for_many_partitions_costs_no_copies() -> TestResult {
    let kaas = Kaas::start()?;
    let mut wire = Wire::connect(&kaas.bootstrap)?;
    still_serving(&kaas)?;
    let before = peak_rss(&kaas)?;
    let huge = "x".repeat(1 << 20);
    // Epoch 0 asks for a session too: the keys would be kept in it.
    let response = wire.call(12, &fetch(&huge, 0..1000).with_session_epoch(0))?;
    let topic = response.responses.iter().find(|t| t.topic.0.len() == huge.len()).ok_or("the huge name was not answered")?;
    assert_eq!(topic.partitions.len(), 1000);
    let unknown = ResponseError::UnknownTopicOrPartition.code();
    assert!(topic.partitions.iter().all(|p| p.error_code == unknown), "every partition answered UNKNOWN_TOPIC_OR_PARTITION");
    let grown = peak_rss(&kaas)?.saturating_sub(before);
    assert!(grown < 128 << 20, "the broker's peak memory grew by {} MiB for a 1 MiB request", grown >> 20);
    still_serving(&kaas)
}

#[test]
fn a_fetch_over_the_partition_bound_is_refused() -> TestResult {
    let kaas = Kaas::start_with(&["--fetch-max-partitions", "100"])?;
    let mut wire = Wire::connect(&kaas.bootstrap)?;
    wire.create_topic("many", 1)?;
    let response = wire.call(12, &fetch("many", 0..101))?;
    assert_eq!(response.error_code, ResponseError::InvalidRequest.code());
    assert!(response.responses.is_empty());
    let response = wire.call(12, &fetch("many", 0..100))?;
    assert_eq!(response.error_code, 0);
    assert_eq!(response.responses[0].partitions.len(), 100);
    still_serving(&kaas)
}

#[test]
fn a_fetch_asking_for_2_gib_gets_at_most_fetch_max_bytes() -> TestResult {
    let kaas = Kaas::start_with(&["--fetch-max-bytes", "65536"])?;
    let mut wire = Wire::connect(&kaas.bootstrap)?;
    wire.create_topic("big", 3)?;
    let value = "v".repeat(5000);
    let values = [value.as_str()];
    for partition in 0..3 {
        for _ in 0..20 {
            let produce = ProduceRequest::default().with_acks(-1).with_timeout_ms(10_000).with_topic_data(vec![
                TopicProduceData::default()
                    .with_name(name("big"))
                    .with_partition_data(vec![PartitionProduceData::default().with_index(partition).with_records(Some(batch(-1, -1, -1, &values)?))]),
            ]);
            let response = wire.call(9, &produce)?;
            let answer = &response.responses[0].partition_responses[0];
            assert_eq!(answer.error_code, 0, "{:?}", answer.error_message);
        }
    }
    // 300 KB stored; the client asks for everything (max_bytes 2 GiB, 1 MiB per partition).
    let response = wire.call(12, &fetch("big", 0..3).with_max_bytes(i32::MAX))?;
    let bytes = record_bytes(&response);
    assert!(bytes > 0 && bytes <= 65536, "{bytes} record bytes answered with fetch.max.bytes 65536");
    still_serving(&kaas)
}
