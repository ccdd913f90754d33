//! Append validation, offset assignment and reads.

use kaas_storage::testing::{BatchBuilder, decode_records, encode_record, reseal};
use kaas_storage::{Codec, Error, LogConfig, RecordError, TimestampType};

use super::support::*;

fn round_trip(v: &Volume) {
    let p = v.leader(
        1,
        LogConfig {
            max_message_bytes: 2 << 20,
            ..LogConfig::default()
        },
    );
    let b = BatchBuilder::new()
        .timestamps(NOW)
        .record(Some(b"k1"), Some(b"v1"))
        .header("h", Some(b"x"))
        .record(None, Some(b""))
        .record(Some(b"k3"), None)
        .record(None, Some(&vec![7u8; 1 << 20]))
        .build();
    let out = append(&p, 1, b);
    assert_eq!(
        (out.base_offset, out.last_offset, out.duplicate),
        (0, 3, false)
    );
    assert_eq!(out.log_append_time_ms, -1);
    let records = read_all(&p);
    assert_eq!(records.len(), 4);
    assert_eq!(records[0].key.as_deref(), Some(&b"k1"[..]));
    assert_eq!(
        records[0].headers,
        vec![("h".to_owned(), Some(b"x".to_vec()))]
    );
    assert_eq!(records[1].key, None);
    assert_eq!(records[1].value.as_deref(), Some(&b""[..]));
    assert_eq!(records[2].value, None);
    assert_eq!(records[3].value.as_ref().unwrap().len(), 1 << 20);
    assert_eq!(
        records.iter().map(|r| r.timestamp).collect::<Vec<_>>(),
        vec![NOW, NOW + 1, NOW + 2, NOW + 3]
    );
}
scenario!(round_trip);

fn offsets_are_assigned_in_order(v: &Volume) {
    let p = v.leader(1, LogConfig::default());
    let out = append(&p, 1, batch("a", 3));
    assert_eq!((out.base_offset, out.last_offset), (0, 2));
    let out = append(&p, 1, batch("b", 2));
    assert_eq!((out.base_offset, out.last_offset), (3, 4));
    let out = append(&p, 1, batch("c", 1));
    assert_eq!((out.base_offset, out.last_offset), (5, 5));
    assert_eq!(p.log_end_offset(), 6);
    assert_eq!(p.high_watermark(), 6);
    let offsets: Vec<_> = read_all(&p).iter().map(|r| r.offset).collect();
    assert_eq!(offsets, (0..6).collect::<Vec<_>>());
    assert_eq!(values(&read_all(&p))[3], "b-0");
    // A read from the middle of a batch returns that whole batch.
    let r = p.read(4, 1 << 20).unwrap();
    assert_eq!(decode_records(&r.records)[0].offset, 3);
    // max_bytes smaller than a batch still returns one whole batch.
    let r = p.read(0, 1).unwrap();
    assert_eq!(decode_records(&r.records).len(), 3);
    assert!(matches!(
        p.read(7, 100),
        Err(Error::OffsetOutOfRange { .. })
    ));
    assert!(p.read(6, 100).unwrap().records.is_empty());
}
scenario!(offsets_are_assigned_in_order);

/// Reads hand out pooled buffers (kaas_storage::buffers): a buffer still referenced is never
/// reused, and a reused one never shows its previous, longer contents.
fn pooled_read_buffers_neither_alias_nor_leak(v: &Volume) {
    let p = v.leader(1, LogConfig::default());
    let big = BatchBuilder::new()
        .timestamps(NOW)
        .records(4, 64 * 1024)
        .build();
    append(&p, 1, big.clone());
    let small = batch("s", 2);
    append(&p, 1, small.clone());
    let first = p.read(0, 1 << 20).unwrap().records;
    assert_eq!(first.len(), big.len() + small.len());
    let again = p.read(0, 1 << 20).unwrap().records;
    assert_eq!(again, first);
    assert_ne!(
        again.as_ptr(),
        first.as_ptr(),
        "a held buffer is not handed out"
    );
    drop((first, again));
    let tail = p.read(4, 1 << 20).unwrap().records;
    assert_eq!(
        tail.len(),
        small.len(),
        "only the batch read, no stale bytes"
    );
    assert_eq!(values(&decode_records(&tail)), vec!["s-0", "s-1"]);
    let head = p.read(0, big.len()).unwrap().records;
    assert_eq!(
        decode_records(&head).len(),
        4,
        "whole batches within max_bytes"
    );
    assert_eq!(head.len(), big.len());
}
scenario!(pooled_read_buffers_neither_alias_nor_leak);

fn bad_crc_writes_nothing(v: &Volume) {
    let p = v.leader(1, LogConfig::default());
    append(&p, 1, batch("ok", 1));
    let size = p.size_bytes();
    let mut bad = batch("bad", 2);
    let last = bad.len() - 1;
    bad[last] ^= 0xff;
    assert!(matches!(
        p.append(&bad.clone(), opts(1)),
        Err(Error::CorruptRecord(_))
    ));
    // A good batch followed by another: one batch per request, the whole request is refused.
    let mut request = batch("good", 1);
    request.extend(batch("second", 1));
    assert!(matches!(
        p.append(&request, opts(1)),
        Err(Error::InvalidRecord(RecordError::MoreThanOneBatch { .. }))
    ));
    let mut truncated = batch("short", 1);
    truncated.truncate(truncated.len() - 3);
    assert!(matches!(
        p.append(&truncated, opts(1)),
        Err(Error::CorruptRecord(_))
    ));
    let mut magic1 = batch("m", 1);
    magic1[16] = 1;
    assert!(matches!(
        p.append(&magic1, opts(1)),
        Err(Error::InvalidRecord(RecordError::Magic(1)))
    ));
    assert!(matches!(
        p.append(&[], opts(1)),
        Err(Error::InvalidRecord(RecordError::NoBatch))
    ));
    // A valid CRC over records consumers could not parse (one record counted, two present).
    let two = [
        encode_record(0, 0, None, Some(b"x"), &[]),
        encode_record(0, 1, None, Some(b"y"), &[]),
    ]
    .concat();
    let unparsable = BatchBuilder::new()
        .timestamps(NOW)
        .build_with_records(&two, 1);
    assert!(matches!(
        p.append(&unparsable, opts(1)),
        Err(Error::InvalidRecord(RecordError::TrailingBytes {
            count: 1
        }))
    ));
    assert_eq!(p.size_bytes(), size);
    assert_eq!(p.log_end_offset(), 1);
    assert_eq!(values(&read_all(&p)), vec!["ok-0"]);
}
scenario!(bad_crc_writes_nothing);

fn max_message_bytes_is_enforced(v: &Volume) {
    let config = LogConfig {
        max_message_bytes: 1000,
        ..LogConfig::default()
    };
    let p = v.leader(1, config);
    let big = BatchBuilder::new().records(1, 2000).build();
    assert!(matches!(
        p.append(&big, opts(1)),
        Err(Error::RecordTooLarge { max: 1000, .. })
    ));
    append(&p, 1, BatchBuilder::new().records(1, 500).build());
    assert_eq!(p.log_end_offset(), 1);
}
scenario!(max_message_bytes_is_enforced);

fn log_append_time_stamps_batches(v: &Volume) {
    let config = LogConfig {
        timestamp_type: TimestampType::LogAppendTime,
        ..LogConfig::default()
    };
    let p = v.leader(1, config);
    let out = append(
        &p,
        1,
        BatchBuilder::new().timestamps(5).records(3, 10).build(),
    );
    assert_eq!(out.log_append_time_ms, NOW);
    let records = read_all(&p);
    assert!(records.iter().all(|r| r.timestamp == NOW));
    // The stored batch still passes its CRC: a fresh engine's recovery keeps it.
    p.relinquish().unwrap();
    let report = v.partition(config).take_over(2).unwrap();
    assert_eq!((report.log_end_offset, report.truncated_bytes), (3, 0));
}
scenario!(log_append_time_stamps_batches);

fn compressed_batches_are_stored_as_sent(v: &Volume) {
    let p = v.leader(1, LogConfig::default());
    for codec in [Codec::Gzip, Codec::Snappy, Codec::Lz4, Codec::Zstd] {
        let sent = BatchBuilder::new()
            .timestamps(NOW)
            .compression(codec)
            .records(20, 100)
            .build();
        let out = append(&p, 1, sent.clone());
        let stored = p.read(out.base_offset, 1 << 20).unwrap().records;
        // Only the base offset and leader epoch differ (both outside the CRC).
        assert_eq!(stored[16..], sent[16..], "{codec}");
    }
    assert_eq!(p.log_end_offset(), 80);
}
scenario!(compressed_batches_are_stored_as_sent);

fn max_timestamp_is_the_newest_record(v: &Volume) {
    let p = v.leader(1, LogConfig::default());
    let mut lying = BatchBuilder::new().timestamps(NOW).records(3, 1).build();
    lying[35..43].copy_from_slice(&(NOW + 999_000).to_be_bytes());
    reseal(&mut lying);
    append(&p, 1, lying);
    assert_eq!(p.max_timestamp().unwrap().map(|(_, ts)| ts), Some(NOW + 2));
    // The corrected batch keeps a valid CRC: a fresh engine's recovery keeps it.
    p.relinquish().unwrap();
    let report = v.partition(LogConfig::default()).take_over(2).unwrap();
    assert_eq!((report.log_end_offset, report.truncated_bytes), (3, 0));
}
scenario!(max_timestamp_is_the_newest_record);

fn create_time_window_is_enforced(v: &Volume) {
    let config = LogConfig {
        message_timestamp_before_max_ms: 1000,
        message_timestamp_after_max_ms: 1000,
        ..LogConfig::default()
    };
    let p = v.leader(1, config);
    let old = BatchBuilder::new()
        .timestamps(NOW - 5000)
        .records(1, 1)
        .build();
    assert!(matches!(
        p.append(&old, opts(1)),
        Err(Error::InvalidTimestamp { .. })
    ));
    let future = BatchBuilder::new()
        .timestamps(NOW + 5000)
        .records(1, 1)
        .build();
    assert!(matches!(
        p.append(&future, opts(1)),
        Err(Error::InvalidTimestamp { .. })
    ));
    append(
        &p,
        1,
        BatchBuilder::new().timestamps(NOW).records(1, 1).build(),
    );
}
scenario!(create_time_window_is_enforced);

fn rolls_by_size_and_reads_across_segments(v: &Volume) {
    let config = LogConfig {
        segment_bytes: 1000,
        index_interval_bytes: 100,
        ..LogConfig::default()
    };
    let p = v.leader(1, config);
    for i in 0..40 {
        append(&p, 1, batch(&format!("r{i}"), 3));
    }
    assert!(v.logs().len() >= 5, "{:?}", v.logs());
    assert!(v.files().iter().any(|n| n.ends_with(".index")));
    let records = read_all(&p);
    assert_eq!(records.len(), 120);
    assert_eq!(
        records.iter().map(|r| r.offset).collect::<Vec<_>>(),
        (0..120).collect::<Vec<_>>()
    );
    // Random access through the indexes, then again from a fresh leader (index files mapped).
    for offset in [0, 1, 59, 60, 61, 119] {
        let r = p.read(offset, 1).unwrap();
        let got = decode_records(&r.records);
        assert!(
            got.iter().any(|rec| rec.offset == offset),
            "offset {offset}"
        );
    }
    p.relinquish().unwrap();
    let q = v.leader(2, config);
    for offset in [0, 33, 60, 99, 119] {
        let got = decode_records(&q.read(offset, 1).unwrap().records);
        assert!(
            got.iter().any(|rec| rec.offset == offset),
            "offset {offset}"
        );
    }
    assert_eq!(read_all(&q).len(), 120);
}
scenario!(rolls_by_size_and_reads_across_segments);

fn segment_ms_rolls_in_housekeeping(v: &Volume) {
    let config = LogConfig {
        segment_ms: 1000,
        ..LogConfig::default()
    };
    let p = v.leader(1, config);
    append(&p, 1, batch("a", 1));
    let before = v.logs().len();
    p.housekeeping(NOW + 500).unwrap();
    assert_eq!(v.logs().len(), before);
    p.housekeeping(NOW + 1000).unwrap();
    assert_eq!(v.logs().len(), before + 1);
    append(&p, 1, batch("b", 1));
    assert_eq!(values(&read_all(&p)), vec!["a-0", "b-0"]);
}
scenario!(segment_ms_rolls_in_housekeeping);
