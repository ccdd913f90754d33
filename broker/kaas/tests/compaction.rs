//! A compacted topic through a real client: the broker's cleaner keeps the latest value of
//! each key at its offset, a fetch from an offset cleaned away gets the next record, and a
//! record without a key is refused.

mod common;

use std::time::Duration;

use common::{Kaas, TestResult, payload, wait_for};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::FutureRecord;
use rdkafka::topic_partition_list::Offset;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compacted_topic_keeps_the_latest_value_per_key() -> TestResult {
    let kaas = Kaas::start_with(&["--housekeeping-interval-ms", "100", "--log-cleaner-backoff-ms", "100"])?;
    // segment.ms makes housekeeping roll the active segment, so the cleaner may clean it.
    kaas.create_topic("table", 1, &[("cleanup.policy", "compact"), ("segment.ms", "200"), ("min.cleanable.dirty.ratio", "0.01")]).await?;
    let producer = kaas.producer(&[("linger.ms", "0")])?;
    for round in 0..4 {
        for k in 0..5 {
            let (key, value) = (format!("k{k}"), format!("r{round}-k{k}"));
            producer
                .send(FutureRecord::to("table").partition(0).key(&key).payload(&value), Duration::from_secs(30))
                .await
                .map_err(|(e, _)| e)?;
        }
    }
    let refused = producer.send(FutureRecord::<(), str>::to("table").partition(0).payload("no key"), Duration::from_secs(30)).await;
    assert!(
        matches!(refused, Err((KafkaError::MessageProduction(RDKafkaErrorCode::InvalidRecord), _))),
        "a compacted topic refuses a record without a key: {refused:?}"
    );
    // Offsets 0..=14 hold older values of the keys of 15..=19: once cleaned, a read from the
    // beginning starts at 15, with the latest values.
    let mut seen = Vec::new();
    let cleaned = wait_for(Duration::from_secs(30), || {
        seen = kaas.consume("table", 0, Offset::Beginning, 5).unwrap_or_default();
        seen.first().is_some_and(|m| m.offset() == 15)
    });
    assert!(cleaned, "not cleaned: first offset {:?}", seen.first().map(Message::offset));
    let got: Vec<(i64, String, String)> = seen
        .iter()
        .map(|m| {
            (
                m.offset(),
                String::from_utf8_lossy(m.key().unwrap_or_default()).into_owned(),
                String::from_utf8_lossy(&payload(m)).into_owned(),
            )
        })
        .collect();
    let want: Vec<(i64, String, String)> = (0..5).map(|k| (15 + k, format!("k{k}"), format!("r3-k{k}"))).collect();
    assert_eq!(got, want);
    let from_gap = kaas.consume("table", 0, Offset::Offset(3), 1)?;
    assert_eq!(from_gap[0].offset(), 15, "a fetch from a cleaned-away offset returns the next record");

    // The cleaner's work shows on /metrics.
    let text = kaas.metrics()?;
    let value = |name: &str| {
        let prefix = format!("{name}{{topic=\"table\",partition=\"0\"}} ");
        text.lines().find_map(|l| l.strip_prefix(&prefix)).and_then(|v| v.trim().parse::<f64>().ok())
    };
    assert!(value("kaas_partition_cleaner_passes").is_some_and(|n| n >= 1.0), "no cleaner pass counted:\n{text}");
    assert!(value("kaas_partition_cleaner_removed_bytes").is_some_and(|n| n > 0.0), "no removed bytes counted");
    assert!(value("kaas_partition_cleaner_last_clean_timestamp_seconds").is_some_and(|t| t > 1.6e9), "no last clean time");
    assert!(value("kaas_partition_cleaner_dirty_ratio").is_some_and(|r| (0.0..=1.0).contains(&r)), "dirty ratio out of range");

    // An idempotent producer's superseded last batch is kept emptied (its sequence must
    // survive); librdkafka reads past it.
    let idempotent = kaas.producer(&[("linger.ms", "0"), ("enable.idempotence", "true")])?;
    idempotent.send(FutureRecord::to("table").partition(0).key("k9").payload("a"), Duration::from_secs(30)).await.map_err(|(e, _)| e)?;
    for (key, value) in [("k9", "b"), ("k0", "r4-k0")] {
        producer.send(FutureRecord::to("table").partition(0).key(key).payload(value), Duration::from_secs(30)).await.map_err(|(e, _)| e)?;
    }
    let mut after = Vec::new();
    let cleaned = wait_for(Duration::from_secs(30), || {
        after = kaas.consume("table", 0, Offset::Offset(20), 1).unwrap_or_default();
        after.first().is_some_and(|m| m.offset() == 21)
    });
    assert!(cleaned, "not cleaned past the emptied batch: {:?}", after.first().map(Message::offset));
    assert_eq!(payload(&after[0]), b"b");

    // kafka-python reads the same log, gaps and emptied batch included, to its end (the
    // script checks it got there); librdkafka reads the same records.
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients/kafka_python_compacted.py");
    let output = std::process::Command::new(std::env::var("PYTHON").unwrap_or_else(|_| "python3".into()))
        .args([script, &kaas.bootstrap, "table"])
        .output()?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "kafka-python failed:\n{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    let python: Vec<&str> = stdout.lines().collect();
    let rdkafka: Vec<String> = kaas
        .consume("table", 0, Offset::Beginning, python.len())?
        .iter()
        .map(|m| format!("{} {} {}", m.offset(), String::from_utf8_lossy(m.key().unwrap_or_default()), String::from_utf8_lossy(&payload(m))))
        .collect();
    assert_eq!(python, rdkafka);
    assert!(python.iter().any(|l| l.starts_with("21 k9 b")), "{python:?}");
    Ok(())
}
