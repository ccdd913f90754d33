//! ListOffsets (earliest, latest, by timestamp, max timestamp) and DeleteRecords.

mod common;

use std::time::Duration;

use common::{Kaas, TestResult, payload};
use rdkafka::admin::AdminOptions;
use rdkafka::config::FromClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::FutureRecord;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_offsets_by_time_and_delete_records() -> TestResult {
    let kaas = Kaas::start()?;
    kaas.create_topic("times", 1, &[]).await?;
    let producer = kaas.producer(&[("linger.ms", "0")])?;
    // Ten records, timestamps 1000, 2000, ... 10000.
    for i in 0..10i64 {
        producer
            .send(
                FutureRecord::<(), String>::to("times").partition(0).payload(&format!("m{i}")).timestamp((i + 1) * 1000),
                Duration::from_secs(30),
            )
            .await
            .map_err(|(e, _)| e)?;
    }
    let consumer = BaseConsumer::from_config(&kaas.config())?;
    assert_eq!(consumer.fetch_watermarks("times", 0, Duration::from_secs(10))?, (0, 10));

    let lookup = |ts: i64| -> TestResult<Offset> {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset("times", 0, Offset::Offset(ts))?;
        let found = consumer.offsets_for_times(tpl, Duration::from_secs(10))?;
        let elem = found.find_partition("times", 0).ok_or("partition missing")?;
        Ok(elem.offset())
    };
    assert_eq!(lookup(1000)?, Offset::Offset(0));
    assert_eq!(lookup(1500)?, Offset::Offset(1), "first record at or after the timestamp");
    assert_eq!(lookup(10_000)?, Offset::Offset(9));
    assert_eq!(lookup(10_001)?, Offset::End, "no record that late");

    // DeleteRecords before offset 4: the log now starts at 4 and reading from 0 resets there.
    let admin = kaas.admin()?;
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset("times", 0, Offset::Offset(4))?;
    let result = admin.delete_records(&tpl, &AdminOptions::new()).await?;
    let elem = result.find_partition("times", 0).ok_or("partition missing")?;
    assert!(elem.error().is_ok(), "{:?}", elem.error());
    assert_eq!(consumer.fetch_watermarks("times", 0, Duration::from_secs(10))?, (4, 10));
    let got = kaas.consume("times", 0, Offset::Beginning, 6)?;
    assert_eq!(got[0].offset(), 4);
    assert_eq!(payload(&got[0]), b"m4");

    // Deleting past the end is refused.
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset("times", 0, Offset::Offset(50))?;
    let result = admin.delete_records(&tpl, &AdminOptions::new()).await?;
    let elem = result.find_partition("times", 0).ok_or("partition missing")?;
    assert!(elem.error().is_err());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_bytes_deletes_old_segments() -> TestResult {
    let kaas = Kaas::start_with(&["--housekeeping-interval-ms", "100"])?;
    // Smallest segments Kafka allows (1 MiB), and keep at most ~2 MiB.
    kaas.create_topic("retained", 1, &[("segment.bytes", "1048576"), ("retention.bytes", "2097152")]).await?;
    let producer = kaas.producer(&[("linger.ms", "5")])?;
    let value = vec![7u8; 16 * 1024];
    let mut pending = Vec::new();
    for _ in 0..400 {
        pending.push(
            producer
                .send_result(FutureRecord::<(), [u8]>::to("retained").partition(0).payload(&value[..]))
                .map_err(|(e, _)| e)?,
        );
    }
    for p in pending {
        p.await?.map_err(|(e, _)| e)?;
    }
    let consumer = BaseConsumer::from_config(&kaas.config())?;
    let trimmed = tokio::task::block_in_place(|| {
        common::wait_for(Duration::from_secs(30), || {
            consumer.fetch_watermarks("retained", 0, Duration::from_secs(5)).is_ok_and(|(low, _)| low > 0)
        })
    });
    let (low, high) = consumer.fetch_watermarks("retained", 0, Duration::from_secs(5))?;
    assert!(trimmed, "retention never advanced the log start ({low}, {high})");
    assert_eq!(high, 400);
    // Whole segments went away on disk too, and what is left is readable from the new start.
    // (Retention may have run mid-produce; poll until a later round has caught up.)
    let dir = kaas.data_dir().join("retained").join("0");
    let size = || -> u64 {
        std::fs::read_dir(&dir).map(|d| d.filter_map(Result::ok).filter_map(|e| e.metadata().ok()).map(|m| m.len()).sum()).unwrap_or(u64::MAX)
    };
    let shrunk = tokio::task::block_in_place(|| common::wait_for(Duration::from_secs(30), || size() < 5 * 1024 * 1024));
    assert!(shrunk, "{} bytes still on disk", size());
    // Retention may move the start on between these reads; what is read is never below it.
    let got = kaas.consume("retained", 0, Offset::Beginning, 1)?;
    assert!(got[0].offset() >= low, "read {} below the log start {low}", got[0].offset());
    Ok(())
}
