//! Walks the records of one v2 batch the way a consumer will parse them, checking every
//! length, varint, offset delta and timestamp, without decoding anything into memory.
//!
//! NB: kafka-protocol's `RecordBatchDecoder` parses records too, but it allocates every key,
//! value and header map, and inflates a compressed batch whole with no limit. Produce
//! validation only needs to know that the bytes parse, so this walker reads varints and skips
//! payloads: no allocation for an uncompressed batch, one fixed buffer for a compressed one,
//! one pass over the bytes either way (a handful of varints per record on the hot path).
//!
//! ```text
//! record: length varint | attributes i8 | timestampDelta varlong | offsetDelta varint
//!         | keyLength varint | key | valueLength varint | value | headerCount varint
//!         | headers: (keyLength varint | key | valueLength varint | value)*
//! ```

use crate::error::{RecordError, RecordField};
use crate::{Error, Result};

/// Kafka's "no timestamp": exempt from the timestamp window, as in Kafka.
const NO_TIMESTAMP: i64 = -1;

/// The bytes a walk reads: the records of an uncompressed batch, or a decompressing stream.
pub(super) trait Source {
    /// The next byte, `None` past the end.
    fn next_byte(&mut self) -> Result<Option<u8>, RecordError>;
    /// Skips `n` bytes; `false` if fewer remain.
    fn skip(&mut self, n: u64) -> Result<bool, RecordError>;
    /// Whether every byte has been read.
    fn at_end(&mut self) -> Result<bool, RecordError>;
}

impl Source for &[u8] {
    fn next_byte(&mut self) -> Result<Option<u8>, RecordError> {
        Ok(self.split_first().map(|(b, rest)| {
            *self = rest;
            *b
        }))
    }

    fn skip(&mut self, n: u64) -> Result<bool, RecordError> {
        match usize::try_from(n).ok().and_then(|n| self.get(n..)) {
            Some(rest) => {
                *self = rest;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn at_end(&mut self) -> Result<bool, RecordError> {
        Ok(self.is_empty())
    }
}

/// The CreateTime timestamps a topic accepts now: `message.timestamp.before.max.ms` and
/// `message.timestamp.after.max.ms` around the broker's clock, both ends included (Kafka's
/// `LogValidator`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TimestampWindow {
    earliest: i64,
    latest: i64,
}

impl TimestampWindow {
    pub(crate) fn around(now: i64, before_max_ms: i64, after_max_ms: i64) -> Self {
        TimestampWindow {
            earliest: now.saturating_sub(before_max_ms),
            latest: now.saturating_add(after_max_ms),
        }
    }

    fn check(&self, index: i32, timestamp: i64) -> Result<()> {
        if timestamp == NO_TIMESTAMP || (self.earliest..=self.latest).contains(&timestamp) {
            return Ok(());
        }
        Err(Error::InvalidTimestamp {
            index,
            timestamp,
            earliest: self.earliest,
            latest: self.latest,
        })
    }
}

/// Walks `count` records from `source` and checks nothing follows them. Returns the newest
/// record timestamp (Kafka's maxTimestamp: -1 when no record has one). Each timestamp is
/// checked against `window` when the topic keeps CreateTime.
pub(super) fn walk<S: Source>(
    source: S,
    count: i32,
    base_timestamp: i64,
    window: Option<&TimestampWindow>,
    require_keys: bool,
) -> Result<i64> {
    let mut walker = Walker {
        source,
        index: 0,
        left: 0,
    };
    let mut max_timestamp = NO_TIMESTAMP;
    for index in 0..count {
        walker.index = index;
        let (delta, has_key) = walker.record()?;
        if require_keys && !has_key {
            return Err(RecordError::MissingKey { index }.into());
        }
        let timestamp = base_timestamp
            .checked_add(delta)
            .ok_or(RecordError::OutOfRange {
                index,
                field: RecordField::TimestampDelta,
                value: delta,
            })?;
        if let Some(window) = window {
            window.check(index, timestamp)?;
        }
        max_timestamp = max_timestamp.max(timestamp);
    }
    if !walker.source.at_end()? {
        return Err(RecordError::TrailingBytes { count }.into());
    }
    Ok(max_timestamp)
}

/// A cursor over records: which record, and how many of its declared bytes are left.
struct Walker<S> {
    source: S,
    index: i32,
    left: u64,
}

impl<S: Source> Walker<S> {
    /// One record; returns its timestamp delta and whether it has a key.
    fn record(&mut self) -> Result<(i64, bool), RecordError> {
        // The length prefix is outside the record it measures.
        self.left = u64::MAX;
        let length = self.varint(RecordField::Length)?;
        self.left = self.non_negative(RecordField::Length, length)?;
        // NB: v2 record attributes are unused; Kafka ignores them, so any value passes.
        self.byte(RecordField::Attributes)?;
        let timestamp_delta = self.varlong(RecordField::TimestampDelta)?;
        let offset_delta = self.varint(RecordField::OffsetDelta)?;
        // NB: stricter than Kafka, which re-compresses a compressed batch whose inner offsets
        // are not 0, 1, 2, ... and does not look at them at all in an uncompressed one. kaas
        // stores batches as sent, and consumers take base offset + delta as each record's
        // offset, so anything else would hand them offsets the log never assigned.
        if offset_delta != i64::from(self.index) {
            return Err(RecordError::OffsetDelta {
                index: self.index,
                found: offset_delta,
            });
        }
        let has_key = self.bytes(RecordField::KeyLength, RecordField::Key, true)?;
        self.bytes(RecordField::ValueLength, RecordField::Value, true)?;
        let headers = self.varint(RecordField::HeaderCount)?;
        // Each header takes at least two bytes of the record, so `left` bounds this loop.
        for _ in 0..self.non_negative(RecordField::HeaderCount, headers)? {
            self.bytes(RecordField::HeaderKeyLength, RecordField::HeaderKey, false)?;
            self.bytes(
                RecordField::HeaderValueLength,
                RecordField::HeaderValue,
                true,
            )?;
        }
        if self.left != 0 {
            return Err(RecordError::LengthMismatch {
                index: self.index,
                declared: length,
                used: length.unsigned_abs() - self.left,
            });
        }
        Ok((timestamp_delta, has_key))
    }

    /// A length-prefixed byte string: -1 is null where `nullable`, anything else negative is
    /// refused (Kafka reads any negative length as null; no client writes one). Returns
    /// whether it is present (not null).
    fn bytes(
        &mut self,
        length_field: RecordField,
        field: RecordField,
        nullable: bool,
    ) -> Result<bool, RecordError> {
        let length = self.varint(length_field)?;
        if nullable && length == -1 {
            return Ok(false);
        }
        let length = self.non_negative(length_field, length)?;
        if length > self.left {
            return Err(RecordError::Overrun {
                index: self.index,
                field,
            });
        }
        if !self.source.skip(length)? {
            return Err(self.truncated(field));
        }
        self.left -= length;
        Ok(true)
    }

    fn byte(&mut self, field: RecordField) -> Result<u8, RecordError> {
        if self.left == 0 {
            return Err(RecordError::Overrun {
                index: self.index,
                field,
            });
        }
        let b = self
            .source
            .next_byte()?
            .ok_or_else(|| self.truncated(field))?;
        self.left -= 1;
        Ok(b)
    }

    /// A zigzag varint that must fit an i32 (at most 5 bytes).
    fn varint(&mut self, field: RecordField) -> Result<i64, RecordError> {
        let raw = self.unsigned_varint(field, 5)?;
        if raw > u64::from(u32::MAX) {
            return Err(self.bad_varint(field));
        }
        Ok(zigzag(raw))
    }

    /// A zigzag varlong (at most 10 bytes, the tenth carrying only bit 63).
    fn varlong(&mut self, field: RecordField) -> Result<i64, RecordError> {
        let raw = self.unsigned_varint(field, 10)?;
        Ok(zigzag(raw))
    }

    fn unsigned_varint(&mut self, field: RecordField, max_len: u32) -> Result<u64, RecordError> {
        let mut raw = 0u64;
        for i in 0..max_len {
            let b = self.byte(field)?;
            let bits = u64::from(b & 0x7f);
            if i == 9 && bits > 1 {
                return Err(self.bad_varint(field));
            }
            raw |= bits << (7 * i);
            if b & 0x80 == 0 {
                return Ok(raw);
            }
        }
        Err(self.bad_varint(field))
    }

    fn non_negative(&self, field: RecordField, value: i64) -> Result<u64, RecordError> {
        u64::try_from(value).map_err(|_| RecordError::OutOfRange {
            index: self.index,
            field,
            value,
        })
    }

    fn truncated(&self, field: RecordField) -> RecordError {
        RecordError::Truncated {
            index: self.index,
            field,
        }
    }

    fn bad_varint(&self, field: RecordField) -> RecordError {
        RecordError::BadVarint {
            index: self.index,
            field,
        }
    }
}

fn zigzag(raw: u64) -> i64 {
    ((raw >> 1) as i64) ^ -((raw & 1) as i64)
}
