//! Test helpers (feature `testing`): build valid uncompressed v2 record batches and decode
//! them again, so tests in this crate and the broker's can speak the format without a client.

use crate::Codec;

/// One decoded record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestRecord {
    /// Absolute offset (batch base offset + offset delta).
    pub offset: i64,
    /// Record timestamp (the batch's maxTimestamp for LogAppendTime batches).
    pub timestamp: i64,
    /// Key bytes (`None` for a null key).
    pub key: Option<Vec<u8>>,
    /// Value bytes (`None` for a null value).
    pub value: Option<Vec<u8>>,
    /// Headers in order.
    pub headers: Vec<(String, Option<Vec<u8>>)>,
}

/// Builds one v2 record batch, uncompressed unless [`BatchBuilder::compression`] says.
#[derive(Debug, Clone)]
pub struct BatchBuilder {
    base_offset: i64,
    base_timestamp: i64,
    producer: (i64, i16, i32),
    attributes: i16,
    codec: Codec,
    records: Vec<Record>,
}

/// (key, value, headers) of one record to build.
type Record = (
    Option<Vec<u8>>,
    Option<Vec<u8>>,
    Vec<(String, Option<Vec<u8>>)>,
);

impl Default for BatchBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl BatchBuilder {
    /// An empty batch: base offset 0, record `i` stamped `1_000 + i`, no producer id.
    pub fn new() -> Self {
        BatchBuilder {
            base_offset: 0,
            base_timestamp: 1_000,
            producer: (-1, -1, -1),
            attributes: 0,
            codec: Codec::None,
            records: Vec::new(),
        }
    }

    /// Record `i` gets timestamp `base + i`.
    pub fn timestamps(mut self, base: i64) -> Self {
        self.base_timestamp = base;
        self
    }

    /// Sets the batch's base offset (brokers overwrite it).
    pub fn base_offset(mut self, offset: i64) -> Self {
        self.base_offset = offset;
        self
    }

    /// Makes the batch idempotent: producer id, epoch and first sequence.
    pub fn producer(mut self, id: i64, epoch: i16, base_sequence: i32) -> Self {
        self.producer = (id, epoch, base_sequence);
        self
    }

    /// Raw attributes (for example a compression codec to exercise "stored as sent" paths).
    pub fn attributes(mut self, attributes: i16) -> Self {
        self.attributes = attributes;
        self
    }

    /// Compresses the records with `codec` (snappy in snappy-java's framing, as the Java
    /// client writes it) and sets the codec bits.
    pub fn compression(mut self, codec: Codec) -> Self {
        self.codec = codec;
        self
    }

    /// Appends a record.
    pub fn record(mut self, key: Option<&[u8]>, value: Option<&[u8]>) -> Self {
        self.records.push((
            key.map(<[u8]>::to_vec),
            value.map(<[u8]>::to_vec),
            Vec::new(),
        ));
        self
    }

    /// Appends `n` records with `size`-byte values.
    pub fn records(mut self, n: usize, size: usize) -> Self {
        for i in 0..n {
            self = self.record(None, Some(&vec![(i % 251) as u8; size]));
        }
        self
    }

    /// Adds a header to the last record.
    pub fn header(mut self, key: &str, value: Option<&[u8]>) -> Self {
        if let Some(last) = self.records.last_mut() {
            last.2.push((key.to_owned(), value.map(<[u8]>::to_vec)));
        }
        self
    }

    /// Encodes the batch.
    pub fn build(&self) -> Vec<u8> {
        let mut body = Vec::new();
        for (i, (key, value, headers)) in self.records.iter().enumerate() {
            let headers: Vec<_> = headers
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_deref()))
                .collect();
            body.extend(encode_record(
                i as i64,
                i as i64,
                key.as_deref(),
                value.as_deref(),
                &headers,
            ));
        }
        self.build_with_records(&body, self.records.len() as i32)
    }

    /// Encodes a batch around `records` as they are (compressed with the builder's codec),
    /// whose header counts `count` records: for batches whose records lie.
    pub fn build_with_records(&self, records: &[u8], count: i32) -> Vec<u8> {
        let body = compress(self.codec, records);
        let codec_bits = match self.codec {
            Codec::None => 0,
            Codec::Gzip => 1,
            Codec::Snappy => 2,
            Codec::Lz4 => 3,
            Codec::Zstd => 4,
        };
        let mut b = Vec::with_capacity(61 + body.len());
        b.extend_from_slice(&self.base_offset.to_be_bytes());
        b.extend_from_slice(&((49 + body.len()) as i32).to_be_bytes());
        b.extend_from_slice(&(-1i32).to_be_bytes()); // partition leader epoch
        b.push(2); // magic
        b.extend_from_slice(&[0; 4]); // crc, filled below
        b.extend_from_slice(&(self.attributes | codec_bits).to_be_bytes());
        b.extend_from_slice(&(count - 1).to_be_bytes());
        b.extend_from_slice(&self.base_timestamp.to_be_bytes());
        b.extend_from_slice(&(self.base_timestamp + i64::from(count.max(1) - 1)).to_be_bytes());
        b.extend_from_slice(&self.producer.0.to_be_bytes());
        b.extend_from_slice(&self.producer.1.to_be_bytes());
        b.extend_from_slice(&self.producer.2.to_be_bytes());
        b.extend_from_slice(&count.to_be_bytes());
        b.extend_from_slice(&body);
        reseal(&mut b);
        b
    }
}

/// Encodes one record, its length prefix included.
pub fn encode_record(
    timestamp_delta: i64,
    offset_delta: i64,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    headers: &[(&str, Option<&[u8]>)],
) -> Vec<u8> {
    let mut rec = vec![0u8]; // attributes
    put_varint(&mut rec, timestamp_delta);
    put_varint(&mut rec, offset_delta);
    put_bytes(&mut rec, key);
    put_bytes(&mut rec, value);
    put_varint(&mut rec, headers.len() as i64);
    for (k, v) in headers {
        put_bytes(&mut rec, Some(k.as_bytes()));
        put_bytes(&mut rec, *v);
    }
    let mut out = Vec::with_capacity(rec.len() + 5);
    put_varint(&mut out, rec.len() as i64);
    out.extend_from_slice(&rec);
    out
}

/// Rewrites a batch's length field and CRC after surgery on its bytes.
pub fn reseal(batch: &mut [u8]) {
    let len = (batch.len() - 12) as i32;
    batch[8..12].copy_from_slice(&len.to_be_bytes());
    let crc = crc32c::crc32c(&batch[21..]);
    batch[17..21].copy_from_slice(&crc.to_be_bytes());
}

/// Compresses `raw` as a producer would for `codec` (snappy in snappy-java's framing).
pub fn compress(codec: Codec, raw: &[u8]) -> Vec<u8> {
    crate::batch::compress(codec, raw).expect("compress")
}

/// Decodes every record of a run of uncompressed v2 batches (as returned by a read).
/// Panics on malformed input: it is a test helper.
pub fn decode_records(mut buf: &[u8]) -> Vec<TestRecord> {
    let mut out = Vec::new();
    while !buf.is_empty() {
        let h = crate::batch::parse_header(buf).expect("batch header");
        let batch = &buf[..h.size];
        let mut pos = crate::batch::HEADER_LEN;
        for _ in 0..h.record_count {
            let len = get_varint(batch, &mut pos) as usize;
            let end = pos + len;
            pos += 1; // attributes
            let ts_delta = get_varint(batch, &mut pos);
            let offset_delta = get_varint(batch, &mut pos);
            let key = get_bytes(batch, &mut pos);
            let value = get_bytes(batch, &mut pos);
            let mut headers = Vec::new();
            for _ in 0..get_varint(batch, &mut pos) {
                let k = get_bytes(batch, &mut pos).expect("header key");
                headers.push((
                    String::from_utf8(k).expect("utf-8 header key"),
                    get_bytes(batch, &mut pos),
                ));
            }
            assert_eq!(pos, end, "record length");
            let timestamp = if h.is_log_append_time() {
                h.max_timestamp
            } else {
                h.base_timestamp + ts_delta
            };
            out.push(TestRecord {
                offset: h.base_offset + offset_delta,
                timestamp,
                key,
                value,
                headers,
            });
        }
        buf = &buf[h.size..];
    }
    out
}

/// A compacted log that cleans whatever is dirty: 300-byte segments (a few small records each),
/// no dirty-ratio threshold, tombstones kept 1 s after their first clean.
pub fn compacted_config() -> crate::LogConfig {
    crate::LogConfig {
        segment_bytes: 300,
        cleanup_compact: true,
        cleanup_delete: false,
        min_cleanable_dirty_ratio: 0.0,
        delete_retention_ms: 1_000,
        ..crate::LogConfig::default()
    }
}

/// Every record of `p` from its log start to its high watermark, read batch by batch (by
/// batch, not by record: a compacted log has batches whose last records, or all of them, were
/// cleaned away). Panics on a failed read: it is a test helper.
pub fn read_all(p: &crate::Partition) -> Vec<TestRecord> {
    let mut out = Vec::new();
    let mut next = p.log_start_offset();
    while next < p.high_watermark() {
        let read = p.read(next, 1 << 20).expect("read");
        let Some(end) = end_of_batches(&read.records) else {
            break;
        };
        next = end;
        let start = p.log_start_offset();
        out.extend(decode_records(&read.records).into_iter().filter(|r| r.offset >= start));
    }
    out
}

/// The offset after the last batch of a run of batches (`None` if there is none).
fn end_of_batches(mut buf: &[u8]) -> Option<i64> {
    let mut end = None;
    while let Some((base, size, last_delta)) = crate::batch::peek_offsets(buf) {
        end = Some(base + i64::from(last_delta) + 1);
        buf = &buf[size.min(buf.len())..];
    }
    end
}

/// The base offsets of a run of batches.
pub fn batch_base_offsets(mut buf: &[u8]) -> Vec<i64> {
    let mut out = Vec::new();
    while let Some((base, size, _)) = crate::batch::peek_offsets(buf) {
        out.push(base);
        buf = &buf[size.min(buf.len())..];
    }
    out
}

/// Appends a zigzag varint (or varlong).
pub fn put_varint(out: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.push((z as u8) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

fn put_bytes(out: &mut Vec<u8>, b: Option<&[u8]>) {
    match b {
        None => put_varint(out, -1),
        Some(b) => {
            put_varint(out, b.len() as i64);
            out.extend_from_slice(b);
        }
    }
}

fn get_varint(buf: &[u8], pos: &mut usize) -> i64 {
    let mut raw = 0u64;
    let mut shift = 0;
    loop {
        let b = buf[*pos];
        *pos += 1;
        raw |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return ((raw >> 1) as i64) ^ -((raw & 1) as i64);
        }
        shift += 7;
    }
}

fn get_bytes(buf: &[u8], pos: &mut usize) -> Option<Vec<u8>> {
    let len = get_varint(buf, pos);
    if len < 0 {
        return None;
    }
    let v = buf[*pos..*pos + len as usize].to_vec();
    *pos += len as usize;
    Some(v)
}
