//! Produce/consume round trips through real librdkafka clients.

mod common;

use std::time::Duration;

use common::{Kaas, TestResult, payload, series};
use rdkafka::Timestamp;
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::FutureRecord;
use rdkafka::topic_partition_list::Offset;

/// A record's key and value, either of which may be null.
type KeyValue<'a> = (Option<&'a [u8]>, Option<&'a [u8]>);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_headers_nulls_and_large_values_round_trip() -> TestResult {
    let kaas = Kaas::start()?;
    kaas.create_topic("rt", 1, &[("max.message.bytes", "3000000")]).await?;
    let producer = kaas.producer(&[("message.max.bytes", "3000000"), ("acks", "all")])?;
    let big = vec![0xABu8; 1024 * 1024];
    let headers = OwnedHeaders::new()
        .insert(Header { key: "h1", value: Some("v1") })
        .insert(Header { key: "h2", value: None::<&[u8]> });
    let sends: Vec<KeyValue<'_>> = vec![
        (Some(b"k1"), Some(b"hello")),
        (None, Some(b"null key")),
        (Some(b"k3"), Some(b"")),
        (Some(b"k4"), None),
        (Some(b"big"), Some(&big)),
    ];
    let mut offsets = Vec::new();
    for (i, (key, value)) in sends.iter().enumerate() {
        let mut record = FutureRecord::<[u8], [u8]>::to("rt").partition(0).timestamp(1_700_000_000_000 + i as i64);
        if let Some(k) = key {
            record = record.key(*k);
        }
        if let Some(v) = value {
            record = record.payload(*v);
        }
        if i == 0 {
            record = record.headers(headers.clone());
        }
        let delivered = producer.send(record, Duration::from_secs(30)).await.map_err(|(e, _)| e)?;
        offsets.push(delivered.offset);
    }
    assert_eq!(offsets, vec![0, 1, 2, 3, 4], "offsets are assigned densely from 0");

    let got = kaas.consume("rt", 0, Offset::Beginning, sends.len())?;
    for (i, (m, (key, value))) in got.iter().zip(&sends).enumerate() {
        assert_eq!(m.offset(), i as i64);
        assert_eq!(m.key(), *key);
        assert_eq!(m.payload(), *value, "value of message {i}");
        assert_eq!(m.timestamp(), Timestamp::CreateTime(1_700_000_000_000 + i as i64));
    }
    let h = got[0].headers().ok_or("headers lost")?;
    assert_eq!(h.count(), 2);
    assert_eq!(h.get(0).key, "h1");
    assert_eq!(h.get(0).value, Some(&b"v1"[..]));
    assert_eq!(h.get(1).value, None);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_codec_round_trips() -> TestResult {
    let kaas = Kaas::start()?;
    kaas.create_topic("codecs", 1, &[]).await?;
    let mut expected = Vec::new();
    for codec in ["none", "gzip", "snappy", "lz4", "zstd"] {
        let producer = kaas.producer(&[("compression.type", codec), ("linger.ms", "5")])?;
        let futures: Vec<_> = (0..50)
            .map(|i| {
                let value = format!("{codec}-{i}-{}", "x".repeat(200));
                expected.push(value.clone());
                producer
                    .send_result(FutureRecord::<(), String>::to("codecs").partition(0).payload(&value))
                    .map_err(|(e, _)| e)
            })
            .collect::<Result<_, _>>()?;
        for f in futures {
            f.await?.map_err(|(e, _)| e)?;
        }
    }
    let got = kaas.consume("codecs", 0, Offset::Beginning, expected.len())?;
    let values: Vec<String> = got.iter().map(|m| String::from_utf8_lossy(&payload(m)).into_owned()).collect();
    assert_eq!(values, expected);
    let offsets: Vec<i64> = got.iter().map(|m| m.offset()).collect();
    assert_eq!(offsets, (0..expected.len() as i64).collect::<Vec<_>>());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_append_time_topics_stamp_the_broker_clock() -> TestResult {
    let kaas = Kaas::start()?;
    kaas.create_topic("lat", 1, &[("message.timestamp.type", "LogAppendTime")]).await?;
    let producer = kaas.producer(&[])?;
    let before = now_ms();
    producer
        .send(FutureRecord::<(), str>::to("lat").payload("x").timestamp(1000), Duration::from_secs(30))
        .await
        .map_err(|(e, _)| e)?;
    let after = now_ms();
    let got = kaas.consume("lat", 0, Offset::Beginning, 1)?;
    match got[0].timestamp() {
        Timestamp::LogAppendTime(t) => assert!(t >= before && t <= after, "{t} not in [{before}, {after}]"),
        other => panic!("expected LogAppendTime, got {other:?}"),
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_created_topics_and_partitioned_produce() -> TestResult {
    let kaas = Kaas::start_with(&["--default-partitions", "3"])?;
    let producer = kaas.producer(&[])?;
    // The topic does not exist: the producer's metadata request creates it.
    for p in 0..3 {
        for i in 0..10 {
            producer
                .send(FutureRecord::<(), String>::to("auto").partition(p).payload(&format!("{p}-{i}")), Duration::from_secs(30))
                .await
                .map_err(|(e, _)| e)?;
        }
    }
    for p in 0..3 {
        let got = kaas.consume("auto", p, Offset::Beginning, 10)?;
        assert!(got.iter().enumerate().all(|(i, m)| payload(m) == format!("{p}-{i}").into_bytes()));
    }
    Ok(())
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_over_max_message_bytes_are_refused() -> TestResult {
    let kaas = Kaas::start()?;
    kaas.create_topic("small", 1, &[("max.message.bytes", "10000")]).await?;
    let producer = kaas.producer(&[("message.max.bytes", "3000000"), ("compression.type", "none"), ("retries", "0")])?;
    let big = vec![1u8; 20_000];
    let result = producer.send(FutureRecord::<(), [u8]>::to("small").partition(0).payload(&big[..]), Duration::from_secs(30)).await;
    match result {
        Err((rdkafka::error::KafkaError::MessageProduction(code), _)) => {
            assert_eq!(code, rdkafka::types::RDKafkaErrorCode::MessageSizeTooLarge)
        }
        other => panic!("expected MESSAGE_TOO_LARGE, got {other:?}"),
    }
    // Nothing was written; a small record gets offset 0.
    let d = producer.send(FutureRecord::<(), str>::to("small").partition(0).payload("ok"), Duration::from_secs(30)).await.map_err(|(e, _)| e)?;
    assert_eq!(d.offset, 0);
    Ok(())
}

/// acks=0 records get no answer, but they must still become readable: the broker starts their
/// fsync itself (the high watermark is the fsynced end of the log). No later acknowledged
/// produce comes along here to sync them by chance.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acks_zero_records_become_visible_without_a_later_produce() -> TestResult {
    let kaas = Kaas::start()?;
    kaas.create_topic("fire-and-forget", 1, &[]).await?;
    let producer = kaas.producer(&[("acks", "0"), ("linger.ms", "0")])?;
    for i in 0..20 {
        let value = format!("v{i}");
        let record = FutureRecord::<(), str>::to("fire-and-forget").partition(0).payload(&value);
        producer.send(record, Duration::from_secs(10)).await.map_err(|(e, _)| e)?;
    }
    let read = kaas.consume("fire-and-forget", 0, Offset::Beginning, 20)?;
    let values: Vec<String> = read.iter().map(|m| String::from_utf8_lossy(&payload(m)).into_owned()).collect();
    assert_eq!(values, (0..20).map(|i| format!("v{i}")).collect::<Vec<_>>());
    Ok(())
}

/// Record sets of 64 KiB and more go from the segment to the socket by splice
/// (`kaas_storage::piped`): a consumer reading batches of many sizes gets every payload byte
/// for byte, and the broker counts the bytes it spliced; with `--fetch-zero-copy false` the
/// same read is copied and nothing is spliced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_record_sets_are_spliced_byte_for_byte_and_copied_when_zero_copy_is_off() -> TestResult {
    // Payloads from 10 B to 200 KiB, each byte telling its record and position apart.
    let payload_of = |i: usize| -> Vec<u8> {
        let len = [10, 3_000, 70_000, 200_000, 900, 40_000][i % 6] + i;
        (0..len).map(|j| (i * 31 + j * 7) as u8).collect()
    };
    const RECORDS: usize = 120;
    for zero_copy in [true, false] {
        let kaas = Kaas::start_with(&["--fetch-zero-copy", &zero_copy.to_string()])?;
        kaas.create_topic("piped", 1, &[]).await?;
        // Lingering producers make batches of several records, some well over 64 KiB.
        let producer = kaas.producer(&[("acks", "all"), ("linger.ms", "20")])?;
        let sends = (0..RECORDS).map(|i| {
            let payload = payload_of(i);
            let producer = producer.clone();
            async move {
                producer
                    .send(FutureRecord::<(), [u8]>::to("piped").partition(0).payload(&payload), Duration::from_secs(30))
                    .await
                    .map_err(|(e, _)| e)
            }
        });
        for sent in futures::future::join_all(sends).await {
            sent?;
        }
        let got = kaas.consume("piped", 0, Offset::Beginning, RECORDS)?;
        let mut offsets: Vec<i64> = got.iter().map(Message::offset).collect();
        offsets.dedup();
        assert_eq!(offsets, (0..RECORDS as i64).collect::<Vec<_>>(), "every record once, in order");
        let mut payloads: Vec<Vec<u8>> = got.iter().map(payload).collect();
        let mut want: Vec<Vec<u8>> = (0..RECORDS).map(payload_of).collect();
        // NB: concurrent sends may be appended in any order; each payload is unique.
        payloads.sort();
        want.sort();
        assert!(payloads == want, "zero copy {zero_copy}: the payloads read are not the ones produced");
        let spliced = series(&kaas.metrics()?, "kaas_fetch_spliced_bytes_total", &[]).ok_or("no kaas_fetch_spliced_bytes_total")?;
        let produced: usize = want.iter().map(Vec::len).sum();
        match zero_copy {
            true => assert!(spliced >= produced as f64 / 2.0, "{spliced} bytes spliced of {produced} read"),
            false => assert_eq!(spliced, 0.0, "nothing spliced with zero copy off"),
        }
    }
    Ok(())
}
