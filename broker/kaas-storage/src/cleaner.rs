//! The log cleaner's record-level logic, with Apache Kafka's semantics (`LogCleaner.Cleaner`,
//! `CleanedTransactionMetadata`, `MemoryRecords.filterTo`): the bounded offset map of the dirty
//! section, and the filter that rewrites one stored batch. No file I/O here: the partition's
//! `compaction` module plans a pass, feeds batches through this and swaps the result in.
//!
//! What a rewritten batch keeps, as Kafka's does: its base offset and lastOffsetDelta (so the
//! producer's sequence range and the offsets of the kept records stay as they were; a fetch
//! sees gaps), producer id, epoch and base sequence, the partition leader epoch, the
//! transactional and control bits, the codec, every kept record's offset delta, timestamp,
//! attributes, key, value and headers. The base timestamp becomes the delete horizon once one
//! is set (KIP-534: attribute bit 6), and record timestamp deltas are re-based on it.

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::{BuildHasher, Hasher};

use crate::batch::{self, BatchHeader, Codec, HEADER_LEN, read_varint};
use crate::control::{self, MarkerKind, put_varint};
use crate::txn_index::AbortedTxn;
use crate::{Error, Result};

/// KIP-534: the batch's base timestamp is the delete horizon of its tombstones and markers.
pub(crate) const DELETE_HORIZON_BIT: i16 = 0x40;
const TIMESTAMP_TYPE_BIT: i16 = 0x08;
const COMPRESSION_MASK: i16 = 0x07;

/// Bytes of one bucket of the map's hash table (hashbrown): a 16-byte key hash, an 8-byte
/// offset and a control byte.
const BUCKET_BYTES: usize = 25;
/// Kafka's `log.cleaner.io.buffer.load.factor`.
const LOAD_FACTOR: f64 = 0.9;

/// The latest offset of every key in the dirty section (Kafka's SkimpyOffsetMap): keys are
/// held as 128-bit hashes, and the number of entries is bounded by the dedupe buffer.
#[derive(Debug)]
pub(crate) struct OffsetMap {
    entries: HashMap<u128, i64>,
    capacity: usize,
    /// The last offset whose batch was fully mapped (-1 before any).
    pub(crate) latest_offset: i64,
}

impl OffsetMap {
    /// A map whose table never outgrows `dedupe_buffer_bytes`: the table doubles its buckets
    /// as it fills to 7/8, so the entries allowed are those of the largest power-of-two table
    /// that fits, times Kafka's load factor.
    pub(crate) fn new(dedupe_buffer_bytes: usize) -> Self {
        let fitting = dedupe_buffer_bytes / BUCKET_BYTES;
        let buckets = if fitting == 0 { 0 } else { 1usize << (usize::BITS - 1 - fitting.leading_zeros()) };
        let capacity = ((buckets / 8 * 7) as f64 * LOAD_FACTOR) as usize;
        OffsetMap { entries: HashMap::new(), capacity: capacity.max(1), latest_offset: -1 }
    }

    fn is_full(&self) -> bool {
        self.entries.len() >= self.capacity
    }

    fn put(&mut self, key: &[u8], offset: i64) {
        self.entries.insert(hash(key), offset);
    }

    fn get(&self, key: &[u8]) -> Option<i64> {
        self.entries.get(&hash(key)).copied()
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Maps the keyed records of one stored batch (skipping aborted transactions' batches and
    /// markers, as Kafka's `buildOffsetMapForSegment`); records below `start` are the clean
    /// section and are not mapped. Returns `false` without mapping the batch when it would not
    /// fit: the pass then cleans only the prefix mapped so far.
    pub(crate) fn map_batch(&mut self, header: &BatchHeader, batch: &[u8], start: i64, txns: &mut TxnTracker) -> Result<bool> {
        if header.is_control() {
            txns.on_control(header, batch);
        } else if !txns.on_data(header) {
            let raw = records_of(header, batch)?;
            let records = parse_records(header, &raw)?;
            let keyed = records.iter().filter(|r| r.key.is_some() && header.base_offset + i64::from(r.offset_delta) >= start).count();
            if self.entries.len() + keyed > self.capacity && !self.entries.is_empty() {
                return Ok(false);
            }
            for r in &records {
                let offset = header.base_offset + i64::from(r.offset_delta);
                if let Some(key) = r.key
                    && offset >= start
                {
                    self.put(key, offset);
                }
            }
        }
        self.latest_offset = self.latest_offset.max(header.last_offset());
        Ok(!self.is_full())
    }
}

/// A 128-bit hash of a key from two independently seeded SipHash runs (Kafka uses MD5): two
/// keys colliding would lose the older one's latest value, so 64 bits are not enough for a
/// log with billions of keys over its life.
fn hash(key: &[u8]) -> u128 {
    let one = |seed: u64| {
        let mut h = std::hash::BuildHasherDefault::<std::hash::DefaultHasher>::default().build_hasher();
        h.write_u64(seed);
        h.write(key);
        h.finish()
    };
    (u128::from(one(0x6b61_6173)) << 64) | u128::from(one(0x0063_6c65_616e_6572))
}

/// Kafka's `CleanedTransactionMetadata`: walks batches in offset order and says which belong to
/// an aborted transaction (dropped) and which markers no longer guard any data.
#[derive(Debug, Default)]
pub(crate) struct TxnTracker {
    /// Aborted transactions not yet reached, by first offset.
    aborted: VecDeque<AbortedTxn>,
    /// Producer → (its current aborted transaction's marker offset, whether a batch of that
    /// transaction was seen in this pass).
    ongoing_aborted: HashMap<i64, (i64, bool)>,
    /// Producers whose current committed transaction had a batch in this pass.
    ongoing_committed: HashSet<i64>,
}

impl TxnTracker {
    pub(crate) fn new(mut aborted: Vec<AbortedTxn>) -> Self {
        aborted.sort_by_key(|a| a.first_offset);
        TxnTracker { aborted: aborted.into(), ..TxnTracker::default() }
    }

    fn consume_aborted_up_to(&mut self, offset: i64) {
        while self.aborted.front().is_some_and(|a| a.first_offset <= offset) {
            if let Some(a) = self.aborted.pop_front() {
                self.ongoing_aborted.entry(a.producer_id).or_insert((a.last_offset, false));
            }
        }
    }

    /// A data batch: `true` if it belongs to an aborted transaction.
    fn on_data(&mut self, header: &BatchHeader) -> bool {
        self.consume_aborted_up_to(header.last_offset());
        if !header.is_transactional() {
            return false;
        }
        // NB: bounded by the abort marker's offset: once a pass has removed the marker, the
        // aborted-transaction index still names the transaction, and the producer's later
        // (committed) transactions must not be taken for it.
        if self.ongoing_aborted.get(&header.producer_id).is_some_and(|(marker, _)| header.base_offset > *marker) {
            self.ongoing_aborted.remove(&header.producer_id);
        }
        match self.ongoing_aborted.get_mut(&header.producer_id) {
            Some((_, seen)) => {
                *seen = true;
                true
            }
            None => {
                self.ongoing_committed.insert(header.producer_id);
                false
            }
        }
    }

    /// A marker: `true` if it may go, because none of its transaction's data was seen in this
    /// pass (a marker stays until the data it ends is gone from the log).
    fn on_control(&mut self, header: &BatchHeader, batch: &[u8]) -> bool {
        self.consume_aborted_up_to(header.last_offset());
        if header.record_count == 0 {
            return true; // An emptied marker was already cleaned.
        }
        let pid = header.producer_id;
        match control::marker_of(header, batch) {
            Some((MarkerKind::Abort, _)) => !self.ongoing_aborted.remove(&pid).is_some_and(|(_, seen)| seen),
            Some((MarkerKind::Commit, _)) => !self.ongoing_committed.remove(&pid),
            None => false,
        }
    }
}

/// What a pass knows when it filters a batch.
#[derive(Debug)]
pub(crate) struct FilterContext<'a> {
    pub(crate) map: &'a OffsetMap,
    pub(crate) now_ms: i64,
    pub(crate) delete_retention_ms: i64,
    /// Producer → (last offset of its last data batch, its epoch), from the producer state:
    /// that batch is kept, emptied if need be, so the producer's sequence survives a rebuild
    /// of the state from the log.
    pub(crate) last_of_producer: &'a HashMap<i64, (Option<i64>, i16)>,
}

/// What becomes of one stored batch.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Filtered {
    /// Kept byte for byte.
    Keep,
    /// Dropped whole.
    Drop,
    /// Replaced by these bytes (fewer records, or a delete horizon stamped).
    Rewrite(Vec<u8>),
}

impl FilterContext<'_> {
    fn is_last_of_producer(&self, header: &BatchHeader) -> bool {
        match self.last_of_producer.get(&header.producer_id) {
            Some((Some(last), _)) => header.last_offset() == *last,
            Some((None, epoch)) => header.is_control() && header.producer_epoch == *epoch,
            None => false,
        }
    }

    /// Filters one whole stored batch (Kafka's `filterTo` with the cleaner's `RecordFilter`).
    /// Also returns the delete horizon the batch carries afterwards, if any.
    pub(crate) fn filter(&self, header: &BatchHeader, batch: &[u8], txns: &mut TxnTracker) -> Result<(Filtered, Option<i64>)> {
        let horizon = (header.attributes & DELETE_HORIZON_BIT != 0).then_some(header.base_timestamp);
        let can_discard = if header.is_control() { txns.on_control(header, batch) } else { txns.on_data(header) };
        // A marker that guards nothing still waits out delete.retention.ms, so a consumer
        // reading slowly sees the end of a transaction whose data it has read.
        let discard_records = if header.is_control() { can_discard && horizon.is_some_and(|h| h <= self.now_ms) } else { can_discard };
        let retain_empty = header.producer_id >= 0 && self.is_last_of_producer(header);
        if discard_records && !retain_empty {
            return Ok((Filtered::Drop, None));
        }
        let raw = records_of(header, batch)?;
        let records = parse_records(header, &raw)?;
        let kept: Vec<&Record<'_>> = if discard_records {
            Vec::new()
        } else if header.is_control() {
            records.iter().collect()
        } else {
            records.iter().filter(|r| self.retain(header, r, horizon)).collect()
        };
        let tombstones = !header.is_control() && kept.iter().any(|r| !r.has_value);
        let empty_txn_marker = can_discard && header.is_control();
        let new_horizon = match horizon {
            None if tombstones || empty_txn_marker => Some(self.now_ms.saturating_add(self.delete_retention_ms)),
            h => h,
        };
        if kept.len() == records.len() && new_horizon == horizon {
            return Ok((Filtered::Keep, horizon));
        }
        if kept.is_empty() && !retain_empty {
            return Ok((Filtered::Drop, None));
        }
        let horizon = if kept.is_empty() { None } else { new_horizon };
        Ok((Filtered::Rewrite(rebuild(header, batch, &kept, horizon)?), horizon))
    }

    /// Kafka's `shouldRetainRecord`: the latest record of its key, and a tombstone only until
    /// its batch's delete horizon. Records without a key cannot be compacted and are dropped
    /// (a compacted topic refuses them at produce time).
    fn retain(&self, header: &BatchHeader, r: &Record<'_>, horizon: Option<i64>) -> bool {
        let Some(key) = r.key else { return false };
        let offset = header.base_offset + i64::from(r.offset_delta);
        let latest = self.map.get(key).is_none_or(|found| offset >= found);
        latest && (r.has_value || horizon.is_none_or(|h| self.now_ms < h))
    }
}

/// One record of a batch, as stored.
#[derive(Debug)]
struct Record<'a> {
    attributes: u8,
    timestamp_delta: i64,
    offset_delta: i32,
    key: Option<&'a [u8]>,
    has_value: bool,
    /// Everything from the key length on (key, value, headers), copied verbatim when kept.
    tail: &'a [u8],
}

/// The records of a stored batch, inflated if it is compressed.
fn records_of<'a>(header: &BatchHeader, batch: &'a [u8]) -> Result<std::borrow::Cow<'a, [u8]>> {
    let payload = batch.get(HEADER_LEN..header.size).ok_or_else(|| corrupt(header, "shorter than its header"))?;
    match Codec::of(header.attributes)? {
        Codec::None => Ok(std::borrow::Cow::Borrowed(payload)),
        // A stored batch passed produce validation, which bounded its inflated size by the
        // largest request; the cleaner allows as much as a segment can hold.
        codec => Ok(std::borrow::Cow::Owned(batch::decompress(codec, payload, i32::MAX as usize)?)),
    }
}

fn corrupt(header: &BatchHeader, what: &str) -> Error {
    Error::CorruptRecord(format!("batch at offset {} {what}", header.base_offset))
}

fn parse_records<'a>(header: &BatchHeader, mut raw: &'a [u8]) -> Result<Vec<Record<'a>>> {
    let bad = || corrupt(header, "has a malformed record");
    let mut out = Vec::with_capacity(usize::try_from(header.record_count).unwrap_or(0).min(1 << 16));
    for _ in 0..header.record_count {
        let (len, n) = read_varint(raw).ok_or_else(bad)?;
        let len = usize::try_from(len).map_err(|_| bad())?;
        let body = raw.get(n..n.checked_add(len).ok_or_else(bad)?).ok_or_else(bad)?;
        raw = &raw[n + len..];
        let attributes = *body.first().ok_or_else(bad)?;
        let (timestamp_delta, a) = read_varint(&body[1..]).ok_or_else(bad)?;
        let (offset_delta, b) = read_varint(&body[1 + a..]).ok_or_else(bad)?;
        let tail = &body[1 + a + b..];
        let (key_len, c) = read_varint(tail).ok_or_else(bad)?;
        let (key, rest) = match usize::try_from(key_len) {
            Ok(k) => (Some(tail.get(c..c + k).ok_or_else(bad)?), tail.get(c + k..).ok_or_else(bad)?),
            Err(_) => (None, &tail[c..]),
        };
        let (value_len, _) = read_varint(rest).ok_or_else(bad)?;
        let offset_delta = i32::try_from(offset_delta).map_err(|_| bad())?;
        out.push(Record { attributes, timestamp_delta, offset_delta, key, has_value: value_len >= 0, tail });
    }
    Ok(out)
}

/// Encodes the kept records of `header`'s batch as a new batch with the same base offset,
/// lastOffsetDelta, producer fields, leader epoch and codec (none when nothing is kept, as
/// Kafka's empty header), timestamps preserved, `horizon` stamped if given.
fn rebuild(header: &BatchHeader, original: &[u8], kept: &[&Record<'_>], horizon: Option<i64>) -> Result<Vec<u8>> {
    let timestamp = |r: &Record<'_>| header.base_timestamp.saturating_add(r.timestamp_delta);
    let log_append_time = header.attributes & TIMESTAMP_TYPE_BIT != 0;
    let base_timestamp = horizon.or_else(|| kept.first().map(|r| timestamp(r))).unwrap_or(header.max_timestamp);
    let max_timestamp = match kept.iter().map(|r| timestamp(r)).max() {
        Some(ts) if !log_append_time => ts,
        _ => header.max_timestamp,
    };
    let mut records = Vec::new();
    for r in kept {
        let mut body = vec![r.attributes];
        put_varint(&mut body, timestamp(r).saturating_sub(base_timestamp));
        put_varint(&mut body, i64::from(r.offset_delta));
        body.extend_from_slice(r.tail);
        put_varint(&mut records, body.len() as i64);
        records.extend_from_slice(&body);
    }
    let codec = if kept.is_empty() { Codec::None } else { Codec::of(header.attributes)? };
    let payload = batch::compress(codec, &records).map_err(|e| corrupt(header, &format!("cannot be re-compressed: {e}")))?;
    let mut attributes = header.attributes & !DELETE_HORIZON_BIT;
    if kept.is_empty() {
        attributes &= !COMPRESSION_MASK;
    }
    if horizon.is_some() {
        attributes |= DELETE_HORIZON_BIT;
    }
    let length = i32::try_from(HEADER_LEN - batch::LOG_OVERHEAD + payload.len()).map_err(|_| corrupt(header, "grew too large"))?;
    let count = i32::try_from(kept.len()).map_err(|_| corrupt(header, "has too many records"))?;
    let mut b = Vec::with_capacity(HEADER_LEN + payload.len());
    b.extend_from_slice(&header.base_offset.to_be_bytes());
    b.extend_from_slice(&length.to_be_bytes());
    b.extend_from_slice(&original[12..16]); // partition leader epoch
    b.push(2);
    b.extend_from_slice(&[0; 4]); // CRC, below
    b.extend_from_slice(&attributes.to_be_bytes());
    b.extend_from_slice(&header.last_offset_delta.to_be_bytes());
    b.extend_from_slice(&base_timestamp.to_be_bytes());
    b.extend_from_slice(&max_timestamp.to_be_bytes());
    b.extend_from_slice(&header.producer_id.to_be_bytes());
    b.extend_from_slice(&header.producer_epoch.to_be_bytes());
    b.extend_from_slice(&header.base_sequence.to_be_bytes());
    b.extend_from_slice(&count.to_be_bytes());
    b.extend_from_slice(&payload);
    let crc = crc32c::crc32c(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    Ok(b)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::batch::{parse_header, verify_crc};
    use crate::testing::{BatchBuilder, decode_records};

    fn ctx<'a>(map: &'a OffsetMap, last: &'a HashMap<i64, (Option<i64>, i16)>, now_ms: i64) -> FilterContext<'a> {
        FilterContext { map, now_ms, delete_retention_ms: 100, last_of_producer: last }
    }

    #[test]
    fn keeps_latest_per_key_with_offsets_timestamps_and_headers() {
        for codec in [Codec::None, Codec::Zstd, Codec::Snappy] {
            let b = BatchBuilder::new()
                .timestamps(500)
                .compression(codec)
                .record(Some(b"a"), Some(b"a0"))
                .record(Some(b"b"), Some(b"b0"))
                .header("h", Some(b"v"))
                .record(Some(b"a"), Some(b"a1"))
                .record(None, Some(b"keyless"))
                .base_offset(10)
                .build();
            let h = parse_header(&b).unwrap();
            let mut map = OffsetMap::new(1 << 20);
            assert!(map.map_batch(&h, &b, 0, &mut TxnTracker::default()).unwrap());
            assert_eq!((map.len(), map.latest_offset), (2, 13));
            let last = HashMap::new();
            let (out, horizon) = ctx(&map, &last, 0).filter(&h, &b, &mut TxnTracker::default()).unwrap();
            assert_eq!(horizon, None);
            let Filtered::Rewrite(nb) = out else { panic!("expected a rewrite") };
            let nh = parse_header(&nb).unwrap();
            verify_crc(&nh, &nb).unwrap();
            assert_eq!((nh.base_offset, nh.last_offset(), nh.record_count), (10, 13, 2));
            if codec == Codec::None {
                let got = decode_records(&nb);
                assert_eq!(got.iter().map(|r| (r.offset, r.timestamp)).collect::<Vec<_>>(), vec![(11, 501), (12, 502)]);
                assert_eq!(got[0].headers, vec![("h".to_owned(), Some(b"v".to_vec()))]);
            }
        }
    }

    #[test]
    fn tombstones_get_a_horizon_then_go() {
        let b = BatchBuilder::new().record(Some(b"a"), None).build();
        let h = parse_header(&b).unwrap();
        let mut map = OffsetMap::new(1 << 20);
        map.map_batch(&h, &b, 0, &mut TxnTracker::default()).unwrap();
        let last = HashMap::new();
        let (out, horizon) = ctx(&map, &last, 1_000).filter(&h, &b, &mut TxnTracker::default()).unwrap();
        assert_eq!(horizon, Some(1_100));
        let Filtered::Rewrite(nb) = out else { panic!("expected a rewrite") };
        let nh = parse_header(&nb).unwrap();
        assert_eq!(decode_records(&nb)[0].timestamp, 1_000, "the record's timestamp survives the re-basing");
        let (again, _) = ctx(&map, &last, 1_099).filter(&nh, &nb, &mut TxnTracker::default()).unwrap();
        assert_eq!(again, Filtered::Keep);
        let (gone, _) = ctx(&map, &last, 1_100).filter(&nh, &nb, &mut TxnTracker::default()).unwrap();
        assert_eq!(gone, Filtered::Drop);
    }

    #[test]
    fn the_last_batch_of_a_producer_stays_empty() {
        let b = BatchBuilder::new().producer(7, 0, 3).record(Some(b"a"), Some(b"old")).build();
        let h = parse_header(&b).unwrap();
        let mut map = OffsetMap::new(1 << 20);
        map.put(b"a", 5);
        let last = HashMap::from([(7, (Some(0), 0))]);
        let (out, _) = ctx(&map, &last, 0).filter(&h, &b, &mut TxnTracker::default()).unwrap();
        let Filtered::Rewrite(nb) = out else { panic!("expected an empty batch") };
        let nh = parse_header(&nb).unwrap();
        assert_eq!((nh.record_count, nh.producer_id, nh.base_sequence, nh.last_offset()), (0, 7, 3, 0));
        let none = HashMap::new();
        assert_eq!(ctx(&map, &none, 0).filter(&h, &b, &mut TxnTracker::default()).unwrap().0, Filtered::Drop);
    }

    #[test]
    fn a_full_map_stops_before_the_batch_that_does_not_fit() {
        let mut map = OffsetMap::new(BUCKET_BYTES * 8 + 3);
        assert_eq!(map.capacity, 6, "a table of 8 buckets holds 7 entries, 90 % of which is 6.3");
        let four = |base: i64, keys: [&[u8]; 4]| {
            keys.iter().fold(BatchBuilder::new().base_offset(base), |b, k| b.record(Some(k), Some(b"1"))).build()
        };
        let (one, two) = (four(0, [b"a", b"b", b"c", b"d"]), four(4, [b"e", b"f", b"g", b"h"]));
        let mut txns = TxnTracker::default();
        let h1 = parse_header(&one).unwrap();
        assert!(map.map_batch(&h1, &one, 0, &mut txns).unwrap(), "four of six");
        let h2 = parse_header(&two).unwrap();
        assert!(!map.map_batch(&h2, &two, 0, &mut txns).unwrap(), "eight do not fit");
        assert_eq!((map.len(), map.latest_offset), (4, 3), "the clean stops after the first batch");
    }
}
