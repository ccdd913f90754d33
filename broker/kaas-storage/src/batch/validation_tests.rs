//! The produce validator against each malformed shape a broken or hostile client can send.

use super::*;
use crate::error::{RecordError, RecordField};
use crate::testing::{BatchBuilder, encode_record, put_varint, reseal};

const NOW: i64 = 1_700_000_000_000;

/// A CreateTime topic with Kafka 4's defaults around `NOW` and a 1 MiB inflation limit.
fn limits() -> Limits {
    Limits {
        max_message_bytes: 1 << 20,
        max_uncompressed_bytes: 1 << 20,
        timestamps: Some(TimestampWindow::around(NOW, i64::MAX, 3_600_000)),
        require_keys: false,
    }
}

fn refusal(batch: &[u8]) -> RecordError {
    match validate_request(batch, &limits()) {
        Err(Error::InvalidRecord(e)) => e,
        other => panic!("expected INVALID_RECORD, got {other:?}"),
    }
}

fn good(n: usize) -> BatchBuilder {
    BatchBuilder::new().timestamps(NOW).records(n, 10)
}

/// `records` (already encoded) in a batch whose header counts `count`.
fn with_records(records: &[u8], count: i32) -> Vec<u8> {
    BatchBuilder::new()
        .timestamps(NOW)
        .build_with_records(records, count)
}

fn record(offset_delta: i64) -> Vec<u8> {
    encode_record(0, offset_delta, Some(b"k"), Some(b"v"), &[])
}

/// A record body (attributes onwards) behind a length prefix of `length`.
fn prefixed(length: usize, body: &[u8]) -> Vec<u8> {
    let mut rec = Vec::new();
    put_varint(&mut rec, length as i64);
    rec.extend_from_slice(body);
    rec
}

/// A record body behind its true length.
fn framed(body: &[u8]) -> Vec<u8> {
    prefixed(body.len(), body)
}

const CODECS: [Codec; 4] = [Codec::Gzip, Codec::Snappy, Codec::Lz4, Codec::Zstd];

#[test]
fn well_formed_batches_pass_with_every_codec() {
    for codec in [Codec::None].into_iter().chain(CODECS) {
        let b = BatchBuilder::new()
            .timestamps(NOW)
            .compression(codec)
            .record(Some(b"k"), None)
            .header("h", None)
            .header("i", Some(b"x"))
            .records(50, 300)
            .build();
        let v = validate_request(&b, &limits()).unwrap_or_else(|e| panic!("{codec}: {e}"));
        assert_eq!(
            (v.header.record_count, v.max_timestamp),
            (51, NOW + 50),
            "{codec}"
        );
    }
}

#[test]
fn raw_snappy_as_librdkafka_writes_it_passes() {
    let raw: Vec<u8> = (0..3).flat_map(record).collect();
    let mut b = with_records(&snap::raw::Encoder::new().compress_vec(&raw).unwrap(), 3);
    b[22] |= 2; // snappy
    reseal(&mut b);
    assert!(validate_request(&b, &limits()).is_ok());
}

#[test]
fn exactly_one_batch_per_request() {
    let mut two = good(2).build();
    two.extend(good(1).build());
    assert_eq!(
        refusal(&two),
        RecordError::MoreThanOneBatch {
            extra: good(1).build().len()
        }
    );
    // Even a second batch of another producer that is itself valid.
    let mut txn = BatchBuilder::new()
        .timestamps(NOW)
        .attributes(TRANSACTIONAL_BIT)
        .producer(7, 0, 0)
        .records(1, 1)
        .build();
    txn.extend(
        BatchBuilder::new()
            .timestamps(NOW)
            .attributes(TRANSACTIONAL_BIT)
            .producer(8, 0, 0)
            .records(1, 1)
            .build(),
    );
    assert!(matches!(
        refusal(&txn),
        RecordError::MoreThanOneBatch { .. }
    ));
    assert_eq!(refusal(&[]), RecordError::NoBatch);
}

#[test]
fn only_magic_2() {
    let mut b = good(1).build();
    b[16] = 1;
    assert_eq!(refusal(&b), RecordError::Magic(1));
}

#[test]
fn header_counts_must_agree() {
    let mut b = good(3).build();
    b[23..27].copy_from_slice(&5i32.to_be_bytes()); // lastOffsetDelta
    reseal(&mut b);
    assert_eq!(
        refusal(&b),
        RecordError::CountMismatch {
            count: 3,
            last_offset_delta: 5
        }
    );
}

#[test]
fn record_count_must_match_the_records() {
    let two: Vec<u8> = (0..2).flat_map(record).collect();
    // Three counted, two present.
    assert_eq!(
        refusal(&with_records(&two, 3)),
        RecordError::Truncated {
            index: 2,
            field: RecordField::Length
        }
    );
    // One counted, two present.
    assert_eq!(
        refusal(&with_records(&two, 1)),
        RecordError::TrailingBytes { count: 1 }
    );
    // The same lies inside a compressed batch.
    for codec in CODECS {
        let b = BatchBuilder::new()
            .timestamps(NOW)
            .compression(codec)
            .build_with_records(&two, 3);
        assert_eq!(
            refusal(&b),
            RecordError::Truncated {
                index: 2,
                field: RecordField::Length
            },
            "{codec}"
        );
        let b = BatchBuilder::new()
            .timestamps(NOW)
            .compression(codec)
            .build_with_records(&two, 1);
        assert_eq!(
            refusal(&b),
            RecordError::TrailingBytes { count: 1 },
            "{codec}"
        );
    }
}

#[test]
fn varints_must_end_and_fit() {
    // A key length of six continuation bytes.
    let mut r = vec![0u8];
    put_varint(&mut r, 0);
    put_varint(&mut r, 0);
    r.extend_from_slice(&[0xff; 6]);
    r.push(0);
    let rec = framed(&r);
    assert_eq!(
        refusal(&with_records(&rec, 1)),
        RecordError::BadVarint {
            index: 0,
            field: RecordField::KeyLength
        }
    );
    // A 5-byte varint holding more than 32 bits.
    let mut r = vec![0u8, 0, 0];
    r.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x7f]);
    r.extend_from_slice(&[1, 0]);
    let rec = framed(&r);
    assert_eq!(
        refusal(&with_records(&rec, 1)),
        RecordError::BadVarint {
            index: 0,
            field: RecordField::KeyLength
        }
    );
    // A timestamp delta varlong of eleven bytes.
    let mut r = vec![0u8];
    r.extend_from_slice(&[0x80; 10]);
    r.extend_from_slice(&[0, 0, 1, 1, 0]);
    let rec = framed(&r);
    assert_eq!(
        refusal(&with_records(&rec, 1)),
        RecordError::BadVarint {
            index: 0,
            field: RecordField::TimestampDelta
        }
    );
}

#[test]
fn offset_deltas_count_from_zero() {
    let out_of_order: Vec<u8> = [0, 2, 1].into_iter().flat_map(record).collect();
    assert_eq!(
        refusal(&with_records(&out_of_order, 3)),
        RecordError::OffsetDelta { index: 1, found: 2 }
    );
    let from_one: Vec<u8> = [1, 2].into_iter().flat_map(record).collect();
    assert_eq!(
        refusal(&with_records(&from_one, 2)),
        RecordError::OffsetDelta { index: 0, found: 1 }
    );
    let compressed = BatchBuilder::new()
        .timestamps(NOW)
        .compression(Codec::Zstd)
        .build_with_records(&out_of_order, 3);
    assert_eq!(
        refusal(&compressed),
        RecordError::OffsetDelta { index: 1, found: 2 }
    );
}

#[test]
fn truncated_record_is_refused() {
    let mut recs: Vec<u8> = (0..2).flat_map(record).collect();
    recs.truncate(recs.len() - 2);
    assert!(matches!(
        refusal(&with_records(&recs, 2)),
        RecordError::Truncated { index: 1, .. }
    ));
}

#[test]
fn lengths_must_stay_inside_their_record() {
    // A key length of 100 in a record of a dozen bytes.
    let mut r = vec![0u8, 0, 0];
    put_varint(&mut r, 100);
    r.extend_from_slice(b"k");
    put_varint(&mut r, 1);
    r.extend_from_slice(b"v");
    r.push(0);
    let rec = framed(&r);
    assert_eq!(
        refusal(&with_records(&rec, 1)),
        RecordError::Overrun {
            index: 0,
            field: RecordField::Key
        }
    );
    // A record length larger than its fields (and padding after them to make it fit).
    let body = &record(0)[1..];
    let mut padded = body.to_vec();
    padded.push(0);
    let rec = prefixed(body.len() + 1, &padded);
    assert_eq!(
        refusal(&with_records(&rec, 1)),
        RecordError::LengthMismatch {
            index: 0,
            declared: body.len() as i64 + 1,
            used: body.len() as u64
        }
    );
    // A record length smaller than its fields.
    let rec = prefixed(body.len() - 1, body);
    assert_eq!(
        refusal(&with_records(&rec, 1)),
        RecordError::Overrun {
            index: 0,
            field: RecordField::HeaderCount
        }
    );
    // A negative key length other than -1 (null).
    let mut r = vec![0u8, 0, 0];
    put_varint(&mut r, -2);
    put_varint(&mut r, -1);
    r.push(0);
    let rec = framed(&r);
    assert_eq!(
        refusal(&with_records(&rec, 1)),
        RecordError::OutOfRange {
            index: 0,
            field: RecordField::KeyLength,
            value: -2
        }
    );
}

#[test]
fn header_counts_must_be_sane() {
    let mut r = vec![0u8, 0, 0];
    put_varint(&mut r, -1);
    put_varint(&mut r, -1);
    put_varint(&mut r, -3); // header count
    let rec = framed(&r);
    assert_eq!(
        refusal(&with_records(&rec, 1)),
        RecordError::OutOfRange {
            index: 0,
            field: RecordField::HeaderCount,
            value: -3
        }
    );
    // A million headers claimed in a few bytes.
    let mut r = vec![0u8, 0, 0];
    put_varint(&mut r, -1);
    put_varint(&mut r, -1);
    put_varint(&mut r, 1_000_000);
    let rec = framed(&r);
    assert!(matches!(
        refusal(&with_records(&rec, 1)),
        RecordError::Overrun { index: 0, .. }
    ));
    // A null header key.
    let rec = encode_record(0, 0, None, None, &[]);
    let mut r = rec[1..rec.len() - 1].to_vec();
    put_varint(&mut r, 1);
    put_varint(&mut r, -1);
    put_varint(&mut r, -1);
    let rec = framed(&r);
    assert_eq!(
        refusal(&with_records(&rec, 1)),
        RecordError::OutOfRange {
            index: 0,
            field: RecordField::HeaderKeyLength,
            value: -1
        }
    );
}

#[test]
fn clients_may_not_write_control_batches() {
    let b = BatchBuilder::new()
        .timestamps(NOW)
        .attributes(CONTROL_BIT | TRANSACTIONAL_BIT)
        .producer(1, 0, 0)
        .records(1, 1)
        .build();
    assert_eq!(refusal(&b), RecordError::ControlBatch);
}

#[test]
fn unknown_codecs_and_garbage_payloads_are_refused() {
    let b = good(1).attributes(5).build();
    assert_eq!(refusal(&b), RecordError::UnknownCodec(5));
    for codec in CODECS {
        let mut b = good(1).compression(codec).build();
        let payload_end = b.len();
        for byte in &mut b[HEADER_LEN + 4..payload_end] {
            *byte = byte.wrapping_mul(31).wrapping_add(7);
        }
        reseal(&mut b);
        assert!(validate_request(&b, &limits()).is_err(), "{codec}");
    }
}

#[test]
fn compression_bombs_stop_at_the_limit() {
    // One record whose 8 MiB value compresses to a few kilobytes: over the 1 MiB limit.
    let zeros = vec![0u8; 8 << 20];
    let bomb = encode_record(0, 0, None, Some(&zeros), &[]);
    for codec in CODECS {
        let b = BatchBuilder::new()
            .timestamps(NOW)
            .compression(codec)
            .build_with_records(&bomb, 1);
        assert!(
            b.len() < 1 << 20,
            "{codec}: the bomb is {} bytes compressed",
            b.len()
        );
        assert_eq!(
            refusal(&b),
            RecordError::TooLargeDecompressed {
                codec,
                max: 1 << 20
            },
            "{codec}"
        );
    }
    // Raw snappy (one block) declares its size: refused before anything is allocated.
    let mut b = with_records(&snap::raw::Encoder::new().compress_vec(&bomb).unwrap(), 1);
    b[22] |= 2;
    reseal(&mut b);
    assert_eq!(
        refusal(&b),
        RecordError::TooLargeDecompressed {
            codec: Codec::Snappy,
            max: 1 << 20
        }
    );
    // A raw snappy block that claims far more than its bytes can encode.
    // (Its preamble is an unsigned varint: 900,000 in three bytes.)
    let mut claim = vec![0xa0, 0xf7, 0x36];
    claim.extend_from_slice(&[0; 8]);
    let mut b = with_records(&claim, 1);
    b[22] |= 2;
    reseal(&mut b);
    assert!(matches!(
        refusal(&b),
        RecordError::Decompression {
            codec: Codec::Snappy,
            ..
        }
    ));
}

#[test]
fn create_time_must_be_within_the_window() {
    // An hour and a second ahead.
    let b = BatchBuilder::new()
        .timestamps(NOW + 3_601_000)
        .records(1, 1)
        .build();
    assert!(matches!(
        validate_request(&b, &limits()),
        Err(Error::InvalidTimestamp { index: 0, timestamp, .. }) if timestamp == NOW + 3_601_000
    ));
    // The third record alone in the future, inside a compressed batch.
    let recs: Vec<u8> = [0, 1, 4_000_000]
        .into_iter()
        .enumerate()
        .flat_map(|(i, ts)| encode_record(ts, i as i64, None, Some(b"v"), &[]))
        .collect();
    let b = BatchBuilder::new()
        .timestamps(NOW)
        .compression(Codec::Lz4)
        .build_with_records(&recs, 3);
    assert!(matches!(
        validate_request(&b, &limits()),
        Err(Error::InvalidTimestamp { index: 2, .. })
    ));
    // Exactly at the edge passes; so does "no timestamp" (-1), as in Kafka.
    let b = BatchBuilder::new()
        .timestamps(NOW + 3_600_000)
        .records(1, 1)
        .build();
    assert!(validate_request(&b, &limits()).is_ok());
    let b = BatchBuilder::new().timestamps(-1).records(1, 1).build();
    assert_eq!(validate_request(&b, &limits()).unwrap().max_timestamp, -1);
    // Far past with a before limit.
    let past = Limits {
        timestamps: Some(TimestampWindow::around(NOW, 1_000, 1_000)),
        ..limits()
    };
    let b = BatchBuilder::new()
        .timestamps(NOW - 5_000)
        .records(1, 1)
        .build();
    assert!(matches!(
        validate_request(&b, &past),
        Err(Error::InvalidTimestamp { .. })
    ));
    // LogAppendTime topics do not look at producer timestamps.
    let b = BatchBuilder::new()
        .timestamps(NOW + (1 << 40))
        .records(1, 1)
        .build();
    assert!(
        validate_request(
            &b,
            &Limits {
                timestamps: None,
                ..limits()
            }
        )
        .is_ok()
    );
    // An overflowing delta.
    let rec = encode_record(i64::MAX, 0, None, None, &[]);
    let b = with_records(&rec, 1);
    assert!(matches!(
        refusal(&b),
        RecordError::OutOfRange {
            field: RecordField::TimestampDelta,
            ..
        }
    ));
}

#[test]
fn producers_may_not_claim_log_append_time() {
    let b = good(1).attributes(0x08).build();
    assert!(matches!(
        validate_request(&b, &limits()),
        Err(Error::LogAppendTimeFromClient)
    ));
}

#[test]
fn the_newest_record_gives_the_max_timestamp() {
    let recs: Vec<u8> = [5, 100, 7]
        .into_iter()
        .enumerate()
        .flat_map(|(i, ts)| encode_record(ts, i as i64, None, None, &[]))
        .collect();
    let b = with_records(&recs, 3);
    assert_eq!(
        validate_request(&b, &limits()).unwrap().max_timestamp,
        NOW + 100
    );
}

mod property {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// Arbitrary record bytes behind a valid header never panic the walker or a
        /// decompressor, whatever the codec.
        #[test]
        fn arbitrary_records_never_panic(records in proptest::collection::vec(any::<u8>(), 0..400), count in 1i32..20, codec in 0i16..5) {
            let mut b = with_records(&records, count);
            b[22] |= codec as u8;
            reseal(&mut b);
            let _ = validate_request(&b, &limits());
        }

        /// Any well-formed batch, compressed or not, passes.
        #[test]
        fn built_batches_pass(n in 1usize..30, size in 0usize..200, codec in 0usize..5) {
            let codec = [Codec::None, Codec::Gzip, Codec::Snappy, Codec::Lz4, Codec::Zstd][codec];
            let b = BatchBuilder::new().timestamps(NOW).compression(codec).records(n, size).build();
            prop_assert!(validate_request(&b, &limits()).is_ok());
        }

        /// Compressing arbitrary record bytes never panics either.
        #[test]
        fn compressed_garbage_never_panics(records in proptest::collection::vec(any::<u8>(), 0..400), count in 1i32..20, codec in 0usize..4) {
            let b = BatchBuilder::new().timestamps(NOW).compression(CODECS[codec]).build_with_records(&records, count);
            let _ = validate_request(&b, &limits());
        }
    }
}
