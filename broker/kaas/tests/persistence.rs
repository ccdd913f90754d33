//! Data survives restarts; acknowledged records survive kill -9; torn and scribbled segment
//! tails are recovered at take-over.

mod common;

use std::collections::BTreeMap;
use std::io::{Seek, SeekFrom, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{Kaas, TestResult, payload};
use rdkafka::message::Message;
use rdkafka::producer::FutureRecord;
use rdkafka::topic_partition_list::Offset;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_survive_a_graceful_restart() -> TestResult {
    let mut kaas = Kaas::start()?;
    kaas.create_topic("persist", 2, &[]).await?;
    let producer = kaas.producer(&[])?;
    for i in 0..100 {
        producer
            .send(FutureRecord::<(), String>::to("persist").partition(i % 2).payload(&format!("v{i}")), Duration::from_secs(30))
            .await
            .map_err(|(e, _)| e)?;
    }
    drop(producer);
    kaas.stop()?;
    kaas.restart()?;
    for p in 0..2 {
        let got = kaas.consume("persist", p, Offset::Beginning, 50)?;
        let expected: Vec<Vec<u8>> = (0..100).filter(|i| i % 2 == p).map(|i| format!("v{i}").into_bytes()).collect();
        assert_eq!(got.iter().map(payload).collect::<Vec<_>>(), expected);
    }
    // New writes continue the offsets.
    let producer = kaas.producer(&[])?;
    let d = producer
        .send(FutureRecord::<(), str>::to("persist").partition(0).payload("after"), Duration::from_secs(30))
        .await
        .map_err(|(e, _)| e)?;
    assert_eq!(d.offset, 50);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_acks_all_produce_loses_no_acknowledged_record() -> TestResult {
    let mut kaas = Kaas::start()?;
    kaas.create_topic("crash", 1, &[]).await?;
    let producer = kaas.producer(&[("acks", "all"), ("linger.ms", "1"), ("message.timeout.ms", "5000")])?;
    let acked: Arc<parking_lot_free::Acked> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for writer in 0..4 {
        let producer = producer.clone();
        let acked = acked.clone();
        let stop = stop.clone();
        tasks.push(tokio::spawn(async move {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let value = format!("w{writer}-{i}-{}", "p".repeat(500));
                let sent = producer
                    .send(FutureRecord::<(), String>::to("crash").partition(0).payload(&value), Duration::from_secs(5))
                    .await;
                match sent {
                    Ok(d) => acked.insert(d.offset, value),
                    Err(_) => break,
                }
                i += 1;
            }
        }));
    }
    // Let it run, then crash the broker mid-stream.
    let enough = tokio::task::block_in_place(|| common::wait_for(Duration::from_secs(60), || acked.len() >= 2000));
    assert!(enough, "only {} records were acknowledged", acked.len());
    kaas.kill9()?;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = t.await;
    }
    drop(producer);
    let acked = acked.snapshot();
    kaas.restart()?;

    let max_acked = *acked.keys().next_back().ok_or("nothing acknowledged")?;
    let got = kaas.consume("crash", 0, Offset::Beginning, (max_acked + 1) as usize)?;
    for (i, m) in got.iter().enumerate() {
        assert_eq!(m.offset(), i as i64, "offsets are dense after recovery");
    }
    for (offset, value) in &acked {
        let m = &got[*offset as usize];
        assert_eq!(payload(m), value.as_bytes(), "acknowledged record at offset {offset} changed");
    }
    // The log ends on a batch boundary: a new write lands right after whatever survived.
    let producer = kaas.producer(&[])?;
    let (low, high) = rdkafka::consumer::Consumer::fetch_watermarks(
        &rdkafka::config::FromClientConfig::from_config(&kaas.config()).map(|c: rdkafka::consumer::BaseConsumer| c)?,
        "crash",
        0,
        Duration::from_secs(10),
    )?;
    assert_eq!(low, 0);
    let d = producer
        .send(FutureRecord::<(), str>::to("crash").partition(0).payload("after-crash"), Duration::from_secs(30))
        .await
        .map_err(|(e, _)| e)?;
    assert_eq!(d.offset, high);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn torn_and_scribbled_tails_are_truncated_at_take_over() -> TestResult {
    let mut kaas = Kaas::start()?;
    kaas.create_topic("torn", 1, &[]).await?;
    let producer = kaas.producer(&[("linger.ms", "0")])?;
    for i in 0..20 {
        producer
            .send(FutureRecord::<(), String>::to("torn").partition(0).payload(&format!("r{i}")), Duration::from_secs(30))
            .await
            .map_err(|(e, _)| e)?;
    }
    drop(producer);
    kaas.kill9()?;

    // Append garbage (a torn write) and flip a byte inside a half-written extra batch.
    let segment = newest_segment(&kaas.data_dir().join("torn").join("0"))?;
    let mut f = std::fs::OpenOptions::new().write(true).open(&segment)?;
    let len = f.seek(SeekFrom::End(0))?;
    f.write_all(&[0u8, 0, 0, 0, 0, 0, 0, 20, 0, 0, 1, 0, 0xde, 0xad, 0xbe, 0xef, 2])?;
    f.write_all(&[0x5a; 300])?;
    f.sync_all()?;
    drop(f);
    assert!(std::fs::metadata(&segment)?.len() > len);

    kaas.restart()?;
    let got = kaas.consume("torn", 0, Offset::Beginning, 20)?;
    assert_eq!(got.iter().map(payload).collect::<Vec<_>>(), (0..20).map(|i| format!("r{i}").into_bytes()).collect::<Vec<_>>());
    let producer = kaas.producer(&[])?;
    let d = producer
        .send(FutureRecord::<(), str>::to("torn").partition(0).payload("next"), Duration::from_secs(30))
        .await
        .map_err(|(e, _)| e)?;
    assert_eq!(d.offset, 20, "the garbage tail was truncated");
    Ok(())
}

/// The segment file with the highest (epoch, base offset) in a partition directory.
fn newest_segment(dir: &std::path::Path) -> TestResult<std::path::PathBuf> {
    let mut logs: Vec<_> = std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "log") && std::fs::metadata(p).map(|m| m.len() > 0).unwrap_or(false))
        .collect();
    logs.sort();
    logs.pop().ok_or_else(|| format!("no non-empty segment in {}", dir.display()).into())
}

/// A tiny thread-safe offset → value map.
#[allow(unreachable_pub)]
mod parking_lot_free {
    use super::BTreeMap;
    use std::sync::Mutex;

    #[derive(Default)]
    pub struct Acked(Mutex<BTreeMap<i64, String>>);

    impl Acked {
        pub fn insert(&self, offset: i64, value: String) {
            if let Ok(mut m) = self.0.lock() {
                m.insert(offset, value);
            }
        }
        pub fn len(&self) -> usize {
            self.0.lock().map(|m| m.len()).unwrap_or(0)
        }
        pub fn snapshot(&self) -> BTreeMap<i64, String> {
            self.0.lock().map(|m| m.clone()).unwrap_or_default()
        }
    }
}

/// A stray file in one partition's directory (left by a person or a tool) costs that partition,
/// never the broker: the broker starts, serves the other partitions, answers the bad one with
/// KAFKA_STORAGE_ERROR, and serves it again, with its records, once the file is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stray_file_takes_only_its_partition_offline() -> TestResult {
    let mut kaas = Kaas::start_with(&["--housekeeping-interval-ms", "200"])?;
    kaas.create_topic("stray", 2, &[]).await?;
    let producer = kaas.producer(&[])?;
    for i in 0..10 {
        producer
            .send(FutureRecord::<(), String>::to("stray").partition(i % 2).payload(&format!("v{i}")), Duration::from_secs(30))
            .await
            .map_err(|(e, _)| e)?;
    }
    drop(producer);
    kaas.stop()?;
    let stray = kaas.data_dir().join("stray").join("1").join("notes.txt");
    std::fs::write(&stray, b"left here by hand")?;
    kaas.restart()?;

    let producer = kaas.producer(&[("message.timeout.ms", "3000")])?;
    let ok = producer.send(FutureRecord::<(), str>::to("stray").partition(0).payload("p0"), Duration::from_secs(10)).await;
    assert_eq!(ok.map_err(|(e, _)| e)?.offset, 5, "the healthy partition serves");
    let refused = producer.send(FutureRecord::<(), str>::to("stray").partition(1).payload("p1"), Duration::from_secs(10)).await;
    assert!(refused.is_err(), "the partition with a stray file acknowledged a write: {refused:?}");

    std::fs::remove_file(&stray)?;
    let mut delivered = None;
    for _ in 0..20 {
        if let Ok(d) = producer.send(FutureRecord::<(), str>::to("stray").partition(1).payload("p1"), Duration::from_secs(10)).await {
            delivered = Some(d);
            break;
        }
    }
    assert_eq!(delivered.ok_or("partition 1 never came back")?.offset, 5);
    let got = kaas.consume("stray", 1, Offset::Beginning, 6)?;
    let expected: Vec<Vec<u8>> = ["v1", "v3", "v5", "v7", "v9", "p1"].iter().map(|v| v.as_bytes().to_vec()).collect();
    assert_eq!(got.iter().map(payload).collect::<Vec<_>>(), expected);
    Ok(())
}
