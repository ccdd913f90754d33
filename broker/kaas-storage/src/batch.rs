//! The Kafka v2 record-batch format: header parsing, validation and in-place patching.
//!
//! ```text
//!  0 baseOffset i64 | 8 batchLength i32 | 12 partitionLeaderEpoch i32 | 16 magic i8 | 17 crc u32
//! 21 attributes i16 | 23 lastOffsetDelta i32 | 27 baseTimestamp i64 | 35 maxTimestamp i64
//! 43 producerId i64 | 51 producerEpoch i16 | 53 baseSequence i32 | 57 recordCount i32 | 61 records
//! ```
//! The CRC is CRC-32C (Castagnoli) over bytes 21.. to the end of the batch, so patching the base
//! offset and leader epoch leaves it valid; changing attributes or maxTimestamp needs a new CRC.

mod compression;
mod records;
#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod validation_tests;

pub use compression::Codec;
pub(crate) use compression::{compress, decompress};
pub(crate) use records::TimestampWindow;

use crate::error::RecordError;
use crate::{Error, Result};

/// Bytes before `batchLength`'s payload: baseOffset + batchLength.
pub(crate) const LOG_OVERHEAD: usize = 12;
/// Size of a v2 batch header (everything before the records).
pub(crate) const HEADER_LEN: usize = 61;
/// Bytes needed to learn a batch's offsets and size: up to and including lastOffsetDelta.
pub(crate) const OFFSETS_PREFIX_LEN: usize = 27;

const CRC_START: usize = 21;
const TIMESTAMP_TYPE_BIT: i16 = 0x08;
pub(crate) const TRANSACTIONAL_BIT: i16 = 0x10;
pub(crate) const CONTROL_BIT: i16 = 0x20;
const COMPRESSION_MASK: i16 = 0x07;

/// The fixed header of one v2 batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BatchHeader {
    pub(crate) base_offset: i64,
    /// Whole batch size including the 12-byte log overhead.
    pub(crate) size: usize,
    pub(crate) magic: i8,
    pub(crate) crc: u32,
    pub(crate) attributes: i16,
    pub(crate) last_offset_delta: i32,
    pub(crate) base_timestamp: i64,
    pub(crate) max_timestamp: i64,
    pub(crate) producer_id: i64,
    pub(crate) producer_epoch: i16,
    pub(crate) base_sequence: i32,
    pub(crate) record_count: i32,
}

impl BatchHeader {
    pub(crate) fn last_offset(&self) -> i64 {
        self.base_offset + i64::from(self.last_offset_delta)
    }
    pub(crate) fn is_compressed(&self) -> bool {
        self.attributes & COMPRESSION_MASK != 0
    }
    /// Part of a transaction (data or marker).
    pub(crate) fn is_transactional(&self) -> bool {
        self.attributes & TRANSACTIONAL_BIT != 0
    }
    /// A control batch (a transaction marker).
    pub(crate) fn is_control(&self) -> bool {
        self.attributes & CONTROL_BIT != 0
    }
    pub(crate) fn is_log_append_time(&self) -> bool {
        self.attributes & TIMESTAMP_TYPE_BIT != 0
    }
    /// Last sequence number, wrapping past `i32::MAX` to 0 as Kafka does.
    pub(crate) fn last_sequence(&self) -> i32 {
        increment_sequence(self.base_sequence, self.last_offset_delta)
    }
}

/// Kafka's sequence arithmetic: sequences wrap from `i32::MAX` to 0.
pub(crate) fn increment_sequence(seq: i32, by: i32) -> i32 {
    if seq > i32::MAX - by {
        by - (i32::MAX - seq) - 1
    } else {
        seq + by
    }
}

fn be_i64(b: &[u8], at: usize) -> i64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    i64::from_be_bytes(a)
}
fn be_i32(b: &[u8], at: usize) -> i32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    i32::from_be_bytes(a)
}
fn be_i16(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([b[at], b[at + 1]])
}

/// Reads baseOffset, total size and lastOffsetDelta from the first [`OFFSETS_PREFIX_LEN`] bytes.
/// `None` if the slice is too short or the length field is impossible.
pub(crate) fn peek_offsets(buf: &[u8]) -> Option<(i64, usize, i32)> {
    if buf.len() < OFFSETS_PREFIX_LEN {
        return None;
    }
    let len = be_i32(buf, 8);
    let size = usize::try_from(len).ok()?.checked_add(LOG_OVERHEAD)?;
    (size >= HEADER_LEN).then(|| (be_i64(buf, 0), size, be_i32(buf, 23)))
}

/// Parses a header: needs [`HEADER_LEN`] bytes, magic 2 and a plausible length. Does not check
/// the CRC (see [`verify_crc`]).
pub(crate) fn parse_header(buf: &[u8]) -> Result<BatchHeader> {
    if buf.len() < HEADER_LEN {
        return Err(Error::CorruptRecord(format!(
            "{} bytes is shorter than a batch header",
            buf.len()
        )));
    }
    let (base_offset, size, last_offset_delta) = peek_offsets(buf).ok_or_else(|| {
        Error::CorruptRecord(format!("batch length {} is invalid", be_i32(buf, 8)))
    })?;
    let magic = buf[16] as i8;
    if magic != 2 {
        return Err(Error::CorruptRecord(format!(
            "unsupported magic {magic} (only v2 batches)"
        )));
    }
    Ok(BatchHeader {
        base_offset,
        size,
        magic,
        crc: u32::from_be_bytes([buf[17], buf[18], buf[19], buf[20]]),
        attributes: be_i16(buf, 21),
        last_offset_delta,
        base_timestamp: be_i64(buf, 27),
        max_timestamp: be_i64(buf, 35),
        producer_id: be_i64(buf, 43),
        producer_epoch: be_i16(buf, 51),
        base_sequence: be_i32(buf, 53),
        record_count: be_i32(buf, 57),
    })
}

/// Checks the CRC-32C of a whole batch (`batch.len() == header.size`).
pub(crate) fn verify_crc(header: &BatchHeader, batch: &[u8]) -> Result<()> {
    let actual = crc32c::crc32c(&batch[CRC_START..]);
    if actual != header.crc {
        return Err(Error::CorruptRecord(format!(
            "batch at offset {} fails its CRC-32C (stored {:#010x}, computed {actual:#010x})",
            header.base_offset, header.crc
        )));
    }
    Ok(())
}

/// What a produced batch is checked against: the topic's limits and the broker's clock.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// `max.message.bytes`: the batch as sent (compressed or not).
    pub(crate) max_message_bytes: usize,
    /// The most a compressed batch may inflate to.
    pub(crate) max_uncompressed_bytes: usize,
    /// CreateTime topics: the timestamps accepted now; `None` for LogAppendTime topics.
    pub(crate) timestamps: Option<TimestampWindow>,
    /// A compacted topic: every record must carry a key (Kafka's `LogValidator.validateKey`).
    pub(crate) require_keys: bool,
}

#[cfg(test)]
impl Limits {
    /// 1 MiB batches inflating to at most 1 MiB, any timestamp.
    pub(crate) fn lenient() -> Limits {
        Limits {
            max_message_bytes: 1 << 20,
            max_uncompressed_bytes: 1 << 20,
            timestamps: None,
            require_keys: false,
        }
    }
}

/// A produced batch that passed validation.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Validated {
    pub(crate) header: BatchHeader,
    /// The newest record timestamp (-1 if none), which the header's maxTimestamp must equal.
    pub(crate) max_timestamp: i64,
}

/// Validates one partition's records of a produce request as Kafka's produce path does:
/// exactly one batch (Produce v3+), magic 2, the size limit, the CRC, the header's fields, and
/// every record inside it (decompressed, within `limits.max_uncompressed_bytes`), including
/// CreateTime timestamps. Refuses on the first fault; nothing is modified.
pub(crate) fn validate_request(records: &[u8], limits: &Limits) -> Result<Validated> {
    let header = sole_batch(records)?;
    check_batch(&header, records, limits.max_message_bytes)?;
    let max_timestamp = walk_records(&header, records, limits)?;
    Ok(Validated {
        header,
        max_timestamp,
    })
}

/// The header of the one v2 batch a produce request's partition entry must hold.
fn sole_batch(records: &[u8]) -> Result<BatchHeader> {
    if records.is_empty() {
        return Err(RecordError::NoBatch.into());
    }
    // Kafka answers an old message format in a v3+ request with INVALID_RECORD; the
    // header parser would call it corruption (which is what it is on the volume).
    if let Some(&magic) = records.get(16).filter(|m| **m != 2) {
        return Err(RecordError::Magic(magic as i8).into());
    }
    let header = parse_header(records)?;
    if header.size > records.len() {
        return Err(Error::CorruptRecord(format!(
            "batch claims {} bytes but only {} remain",
            header.size,
            records.len()
        )));
    }
    // NB: one batch, as Kafka requires since Produce v3. Verification with the transaction
    // coordinator and the idempotence checks look at one producer per partition entry; a
    // second batch (perhaps another producer's) would slip past both.
    if header.size < records.len() {
        return Err(RecordError::MoreThanOneBatch {
            extra: records.len() - header.size,
        }
        .into());
    }
    Ok(header)
}

/// The (producer id, epoch) of a produce request's partition entry when it is one
/// transactional batch; `None` otherwise (an entry the append refuses needs no verification).
/// Reads the header only: the append validates the rest.
pub fn transactional_producer(records: &[u8]) -> Option<(i64, i16)> {
    let header = sole_batch(records).ok()?;
    header
        .is_transactional()
        .then_some((header.producer_id, header.producer_epoch))
}

/// Checks everything about one batch's header that does not depend on partition state.
fn check_batch(header: &BatchHeader, batch: &[u8], max_message_bytes: usize) -> Result<()> {
    if header.size > max_message_bytes {
        return Err(Error::RecordTooLarge {
            size: header.size,
            max: max_message_bytes,
        });
    }
    verify_crc(header, batch)?;
    if header.record_count <= 0 || header.last_offset_delta != header.record_count - 1 {
        return Err(RecordError::CountMismatch {
            count: header.record_count,
            last_offset_delta: header.last_offset_delta,
        }
        .into());
    }
    if header.is_control() {
        return Err(RecordError::ControlBatch.into());
    }
    if header.is_transactional() && header.producer_id < 0 {
        return Err(RecordError::TransactionalWithoutProducer.into());
    }
    if header.producer_id >= 0 && (header.base_sequence < 0 || header.producer_epoch < 0) {
        return Err(RecordError::IdempotentWithoutSequence.into());
    }
    // Only a broker stamps LogAppendTime; Kafka refuses a producer that claims it (or, on a
    // CreateTime topic, silently turns the batch's timestamps into others).
    if header.is_log_append_time() {
        return Err(Error::LogAppendTimeFromClient);
    }
    Ok(())
}

/// Walks the records of a whole batch, decompressing them if need be; returns the newest
/// record timestamp.
fn walk_records(header: &BatchHeader, batch: &[u8], limits: &Limits) -> Result<i64> {
    let payload = &batch[HEADER_LEN..];
    let window = limits.timestamps.as_ref();
    let (count, base) = (header.record_count, header.base_timestamp);
    match Codec::of(header.attributes)? {
        Codec::None => records::walk(payload, count, base, window, limits.require_keys),
        codec => {
            let inflating =
                compression::Inflating::new(codec, payload, limits.max_uncompressed_bytes)?;
            records::walk(inflating, count, base, window, limits.require_keys)
        }
    }
}

/// Overwrites baseOffset and partitionLeaderEpoch (outside the CRC).
pub(crate) fn patch_offsets(batch: &mut [u8], base_offset: i64, leader_epoch: i32) {
    batch[0..8].copy_from_slice(&base_offset.to_be_bytes());
    batch[12..16].copy_from_slice(&leader_epoch.to_be_bytes());
}

/// A produced batch's header, copied out of the request: the offsets and timestamps the broker
/// sets are patched here, and the records behind it are written from the request's own bytes,
/// so no record byte is copied on the way to the page cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Head([u8; HEADER_LEN]);

impl Head {
    /// The header of `batch`; `CorruptRecord` if it is shorter than one.
    pub(crate) fn of(batch: &[u8]) -> Result<Head> {
        let bytes = batch.get(..HEADER_LEN).and_then(|b| b.try_into().ok());
        bytes.map(Head).ok_or_else(|| {
            Error::CorruptRecord(format!("{} bytes is shorter than a batch header", batch.len()))
        })
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        &self.0
    }

    /// See [`patch_offsets`].
    pub(crate) fn set_offsets(&mut self, base_offset: i64, leader_epoch: i32) {
        patch_offsets(&mut self.0, base_offset, leader_epoch);
    }

    /// Marks the batch LogAppendTime with `now` as maxTimestamp; `body` is the rest of the
    /// batch (after the header), which the CRC covers.
    pub(crate) fn set_log_append_time(&mut self, now_ms: i64, body: &[u8]) {
        let attributes = be_i16(&self.0, 21) | TIMESTAMP_TYPE_BIT;
        self.0[21..23].copy_from_slice(&attributes.to_be_bytes());
        self.set_max_timestamp(now_ms, body);
    }

    /// Overwrites maxTimestamp and recomputes the CRC over this header and `body`. Kafka does
    /// the same to a produced batch whose maxTimestamp is not its newest record's: the time
    /// index and ListOffsets trust it.
    pub(crate) fn set_max_timestamp(&mut self, max_timestamp: i64, body: &[u8]) {
        self.0[35..43].copy_from_slice(&max_timestamp.to_be_bytes());
        let crc = crc32c::crc32c_append(crc32c::crc32c(&self.0[CRC_START..]), body);
        self.0[17..21].copy_from_slice(&crc.to_be_bytes());
    }
}

/// The offset and timestamp of the first record whose timestamp is `>= target` in a whole
/// batch. For compressed batches the records are not decoded: the answer is the batch's first
/// offset and its max timestamp (a consumer seeking there sees at most one batch too early).
pub(crate) fn first_record_at_or_after(
    header: &BatchHeader,
    batch: &[u8],
    target: i64,
) -> Option<(i64, i64)> {
    if header.max_timestamp < target {
        return None;
    }
    if header.is_log_append_time() || header.is_compressed() {
        return Some((header.base_offset, header.max_timestamp));
    }
    let mut pos = HEADER_LEN;
    for _ in 0..header.record_count {
        let (len, n) = read_varint(batch.get(pos..)?)?;
        let start = pos + n;
        let body = batch.get(start..start.checked_add(usize::try_from(len).ok()?)?)?;
        let (ts_delta, n1) = read_varint(body.get(1..)?)?;
        let (offset_delta, _) = read_varint(body.get(1 + n1..)?)?;
        let ts = header.base_timestamp.saturating_add(ts_delta);
        if ts >= target {
            return Some((header.base_offset + offset_delta, ts));
        }
        pos = start + body.len();
    }
    // Timestamps inside disagree with maxTimestamp: fall back to the batch boundary.
    Some((header.base_offset, header.max_timestamp))
}

/// Reads a zigzag varint/varlong; returns (value, bytes used).
pub(crate) fn read_varint(buf: &[u8]) -> Option<(i64, usize)> {
    let mut raw: u64 = 0;
    for (i, b) in buf.iter().take(10).enumerate() {
        raw |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some((((raw >> 1) as i64) ^ -((raw & 1) as i64), i + 1));
        }
    }
    None
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::testing::BatchBuilder;

    #[test]
    fn validates_and_patches_a_built_batch() {
        let mut b = BatchBuilder::new()
            .record(Some(b"k"), Some(b"v"))
            .record(None, Some(b"w"))
            .build();
        let v = validate_request(&b, &Limits::lenient()).unwrap();
        assert_eq!(v.header.record_count, 2);
        let mut head = Head::of(&b).unwrap();
        head.set_offsets(77, 3);
        head.set_log_append_time(1234, &b[HEADER_LEN..]);
        b[..HEADER_LEN].copy_from_slice(head.bytes());
        let h = parse_header(&b).unwrap();
        assert_eq!(
            (h.base_offset, h.max_timestamp, h.last_offset()),
            (77, 1234, 78)
        );
        assert!(h.is_log_append_time());
        verify_crc(&h, &b).unwrap();
    }

    #[test]
    fn a_new_max_timestamp_gets_the_crc_of_the_whole_batch() {
        let mut b = BatchBuilder::new().timestamps(100).record(None, Some(b"a")).record(None, Some(b"b")).build();
        let mut head = Head::of(&b).unwrap();
        head.set_max_timestamp(5_000, &b[HEADER_LEN..]);
        b[..HEADER_LEN].copy_from_slice(head.bytes());
        let h = parse_header(&b).unwrap();
        assert_eq!(h.max_timestamp, 5_000);
        verify_crc(&h, &b).unwrap();
        assert!(Head::of(&b[..HEADER_LEN - 1]).is_err());
    }

    #[test]
    fn finds_first_record_by_timestamp() {
        let b = BatchBuilder::new()
            .timestamps(100)
            .record(None, Some(b"a"))
            .record(None, Some(b"b"))
            .record(None, Some(b"c"))
            .build();
        let h = parse_header(&b).unwrap();
        assert_eq!(h.max_timestamp, 102);
        assert_eq!(first_record_at_or_after(&h, &b, 101), Some((1, 101)));
        assert_eq!(first_record_at_or_after(&h, &b, 0), Some((0, 100)));
        assert_eq!(first_record_at_or_after(&h, &b, 103), None);
    }

    #[test]
    fn sequence_wraps() {
        assert_eq!(increment_sequence(5, 3), 8);
        assert_eq!(increment_sequence(i32::MAX, 1), 0);
        assert_eq!(increment_sequence(i32::MAX - 1, 3), 1);
    }

    mod property {
        use proptest::prelude::*;

        use super::super::*;
        use crate::scan::{Scanner, Step};
        use crate::testing::BatchBuilder;
        use kaas_shared::fs::{Fs, MemFs, OpenMode};

        proptest! {
            /// Arbitrary bytes never make the parser, validator, record walker or scanner panic.
            #[test]
            fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512), max in 0usize..2048) {
                let _ = validate_request(&bytes, &Limits { max_message_bytes: max, ..Limits::lenient() });
                if let Ok(h) = parse_header(&bytes) {
                    let _ = first_record_at_or_after(&h, &bytes, 0);
                    let _ = verify_crc(&h, &bytes[..h.size.min(bytes.len())]);
                }
                let _ = peek_offsets(&bytes);
                let fs = MemFs::new();
                let path = std::path::Path::new("/seg");
                let file = fs.open(path, OpenMode::CreateNew).unwrap();
                file.write_all_at(&bytes, 0).unwrap();
                let mut scan = Scanner::new(&*file, 0, bytes.len() as u64, true, 64);
                while let Step::Batch { .. } = scan.next_step().unwrap() {}
            }

            /// Flipping any single byte a batch's CRC covers is detected.
            #[test]
            fn any_flipped_byte_is_rejected(at in 21usize..200, bit in 0u8..8) {
                let mut b = BatchBuilder::new().records(3, 40).build();
                let at = at.min(b.len() - 1);
                b[at] ^= 1 << bit;
                prop_assert!(validate_request(&b, &Limits::lenient()).is_err());
            }

            /// Records with timestamps inside a batch are found exactly.
            #[test]
            fn record_walk_matches_the_builder(n in 1usize..20, target in 0i64..30) {
                let b = BatchBuilder::new().timestamps(0).records(n, 3).build();
                let h = parse_header(&b).unwrap();
                let expected = (target < n as i64).then_some((target, target));
                prop_assert_eq!(first_record_at_or_after(&h, &b, target), expected);
            }
        }
    }
}
