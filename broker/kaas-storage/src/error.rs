//! The storage engine's one error type. Each variant maps to one Kafka error code at the
//! protocol edge (noted on the variant).

use std::path::PathBuf;

use crate::batch::Codec;

/// Storage engine errors.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A batch is malformed: bad magic, length or CRC (Kafka `CORRUPT_MESSAGE`).
    #[error("corrupt record batch: {0}")]
    CorruptRecord(String),
    /// A batch exceeds `max.message.bytes` (Kafka `MESSAGE_TOO_LARGE`).
    #[error("record batch of {size} bytes exceeds max.message.bytes {max}")]
    RecordTooLarge {
        /// Batch size in bytes.
        size: usize,
        /// The configured limit.
        max: usize,
    },
    /// A batch whose CRC holds but whose contents may not be appended: a shape Kafka's produce
    /// validation refuses, or records consumers could not parse (Kafka `INVALID_RECORD`).
    #[error("invalid record batch: {0}")]
    InvalidRecord(#[from] RecordError),
    /// A CreateTime timestamp outside `message.timestamp.{before,after}.max.ms` around the
    /// broker's clock (Kafka `INVALID_TIMESTAMP`).
    #[error("record {index}: timestamp {timestamp} is out of range; it should be within [{earliest}, {latest}]")]
    InvalidTimestamp {
        /// The record's index in its batch.
        index: i32,
        /// The offending timestamp.
        timestamp: i64,
        /// The oldest timestamp accepted now.
        earliest: i64,
        /// The newest timestamp accepted now.
        latest: i64,
    },
    /// A client batch claims the LogAppendTime timestamp type, which only a broker sets
    /// (Kafka `INVALID_TIMESTAMP`).
    #[error("producers may not set the LogAppendTime timestamp type")]
    LogAppendTimeFromClient,
    /// This engine does not lead the partition (Kafka `NOT_LEADER_OR_FOLLOWER`).
    #[error("not the leader of this partition")]
    NotLeader,
    /// The caller's leader epoch is older than the partition's (Kafka `FENCED_LEADER_EPOCH`).
    #[error("leader epoch {requested} is fenced by epoch {current}")]
    FencedLeaderEpoch {
        /// The epoch the caller used.
        requested: i32,
        /// The partition's epoch.
        current: i32,
    },
    /// A take-over's epoch claim in manifest.json was overwritten before the take-over ended (a
    /// deposed leader's DeleteRecords); the take-over starts again.
    #[error("the claim of epoch {epoch} in manifest.json was overwritten (found epoch {found})")]
    ClaimOverwritten {
        /// The epoch being taken over.
        epoch: i32,
        /// The epoch the manifest carries instead.
        found: i32,
    },
    /// An offset outside `[logStartOffset, highWatermark]` (Kafka `OFFSET_OUT_OF_RANGE`).
    #[error("offset {offset} is outside [{log_start_offset}, {high_watermark}]")]
    OffsetOutOfRange {
        /// The requested offset.
        offset: i64,
        /// Log start offset.
        log_start_offset: i64,
        /// High watermark.
        high_watermark: i64,
    },
    /// A sequence gap (Kafka `OUT_OF_ORDER_SEQUENCE_NUMBER`).
    #[error("producer {producer_id}: sequence {found} does not follow {last}")]
    OutOfOrderSequence {
        /// The producer.
        producer_id: i64,
        /// Last sequence appended (-1 for none).
        last: i32,
        /// First sequence of the rejected batch.
        found: i32,
    },
    /// A producer epoch older than the one seen (Kafka `INVALID_PRODUCER_EPOCH`).
    #[error("producer {producer_id}: epoch {found} is older than {current}")]
    InvalidProducerEpoch {
        /// The producer.
        producer_id: i64,
        /// The epoch in the batch.
        found: i16,
        /// The newest epoch seen.
        current: i16,
    },
    /// A marker from a transaction coordinator older than one that already wrote a marker for
    /// the producer here (Kafka `TRANSACTION_COORDINATOR_FENCED`): a deposed coordinator.
    #[error("producer {producer_id}: marker from coordinator epoch {found}, {current} already wrote here")]
    CoordinatorFenced {
        /// The producer.
        producer_id: i64,
        /// The coordinator epoch of the marker.
        found: i32,
        /// The newest coordinator epoch seen for the producer.
        current: i32,
    },
    /// Kafka `UNKNOWN_PRODUCER_ID` (kept for the broker; the engine, like Kafka 4, accepts any
    /// first sequence from a producer it has no state for).
    #[error("unknown producer id {0}")]
    UnknownProducerId(i64),
    /// The log is poisoned after a failed write or fsync; only a new take_over recovers it
    /// (Kafka `KAFKA_STORAGE_ERROR`).
    #[error("partition storage failed and refuses writes until it is taken over again: {0}")]
    StorageFailure(String),
    /// The partition was abandoned (its topic was deleted) and may not be used again.
    #[error("partition was abandoned (topic deleted)")]
    Abandoned,
    /// A file operation failed (Kafka `KAFKA_STORAGE_ERROR`).
    #[error("{op} {path}: {source}")]
    Io {
        /// The operation.
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A topic configuration value cannot be used (Kafka `INVALID_CONFIG`).
    #[error("invalid value {value:?} for {key}")]
    InvalidConfig {
        /// Config name.
        key: String,
        /// The rejected value.
        value: String,
    },
    /// An on-volume contract error: layout version, names, stamps (Kafka `KAFKA_STORAGE_ERROR`).
    #[error(transparent)]
    Volume(#[from] kaas_shared::Error),
}

/// Why a batch's contents are refused ([`Error::InvalidRecord`]). Record indexes count from 0
/// within the batch, as Kafka's `RecordError.batchIndex` does.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// The partition's entry in the request holds no batch.
    #[error("the request holds no record batch for this partition")]
    NoBatch,
    /// Produce v3+ takes exactly one batch per partition (Kafka: "exactly one record batch").
    #[error("a produce request may hold exactly one record batch per partition; {extra} bytes follow the first")]
    MoreThanOneBatch {
        /// Bytes after the first batch.
        extra: usize,
    },
    /// Produce v3+ takes only the v2 batch format.
    #[error("magic {0}: only v2 record batches are accepted")]
    Magic(i8),
    /// The header's record count disagrees with its offset range.
    #[error("record count {count} does not match lastOffsetDelta {last_offset_delta}")]
    CountMismatch {
        /// The header's recordCount.
        count: i32,
        /// The header's lastOffsetDelta.
        last_offset_delta: i32,
    },
    /// Only the engine writes transaction markers.
    #[error("clients may not append control batches")]
    ControlBatch,
    /// A record without a key in a compacted topic: the cleaner keeps records by key, so
    /// Kafka refuses it at produce time.
    #[error("record {index} has no key; a compacted topic cannot accept a record without a key")]
    MissingKey {
        /// The record's index in its batch.
        index: i32,
    },
    /// A transactional batch without a producer id: no coordinator could ever end it.
    #[error("transactional batch without a producer id")]
    TransactionalWithoutProducer,
    /// An idempotent batch (producer id set) without a sequence or epoch.
    #[error("idempotent batch without sequence or producer epoch")]
    IdempotentWithoutSequence,
    /// Compression codec bits 5 to 7 name no codec.
    #[error("unknown compression codec {0}")]
    UnknownCodec(i16),
    /// A varint longer than its type allows, or cut off by the end of the records.
    #[error("record {index}: {field} is not a valid varint")]
    BadVarint {
        /// The record.
        index: i32,
        /// Which field.
        field: RecordField,
    },
    /// A length or count outside what its field may hold.
    #[error("record {index}: {field} {value} is out of range")]
    OutOfRange {
        /// The record.
        index: i32,
        /// Which field.
        field: RecordField,
        /// The value read.
        value: i64,
    },
    /// The records end inside a field: fewer records than the header counts, or a record
    /// whose length claims more bytes than the batch holds.
    #[error("record {index}: the records end inside its {field}")]
    Truncated {
        /// The record.
        index: i32,
        /// Which field.
        field: RecordField,
    },
    /// A field runs past its record's declared length (a lying key or value length).
    #[error("record {index}: {field} runs past the record's declared length")]
    Overrun {
        /// The record.
        index: i32,
        /// Which field.
        field: RecordField,
    },
    /// Record offset deltas must count 0, 1, 2, ... (the offsets consumers see).
    #[error("record {index}: offset delta {found} (expected {index})")]
    OffsetDelta {
        /// The record.
        index: i32,
        /// The delta read.
        found: i64,
    },
    /// A record's fields do not fill exactly its declared length.
    #[error("record {index}: declared {declared} bytes, its fields take {used}")]
    LengthMismatch {
        /// The record.
        index: i32,
        /// The record's length varint.
        declared: i64,
        /// Bytes its fields took.
        used: u64,
    },
    /// Bytes remain after the header's record count.
    #[error("bytes remain after the batch's {count} records")]
    TrailingBytes {
        /// The header's recordCount.
        count: i32,
    },
    /// A compressed batch inflates past the broker's limit (a decompression bomb).
    #[error("{codec} records inflate past {max} bytes")]
    TooLargeDecompressed {
        /// The batch's codec.
        codec: Codec,
        /// The limit.
        max: usize,
    },
    /// A compressed batch's payload is not valid for its codec.
    #[error("{codec} records cannot be decompressed: {reason}")]
    Decompression {
        /// The batch's codec.
        codec: Codec,
        /// The decoder's complaint.
        reason: String,
    },
}

/// A field of a v2 record, for [`RecordError`] messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordField {
    /// The record's length.
    Length,
    /// The attributes byte.
    Attributes,
    /// The timestamp delta (a varlong).
    TimestampDelta,
    /// The offset delta.
    OffsetDelta,
    /// The key's length.
    KeyLength,
    /// The key's bytes.
    Key,
    /// The value's length.
    ValueLength,
    /// The value's bytes.
    Value,
    /// The number of headers.
    HeaderCount,
    /// A header key's length.
    HeaderKeyLength,
    /// A header key's bytes.
    HeaderKey,
    /// A header value's length.
    HeaderValueLength,
    /// A header value's bytes.
    HeaderValue,
}

impl std::fmt::Display for RecordField {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RecordField::Length => "length",
            RecordField::Attributes => "attributes",
            RecordField::TimestampDelta => "timestamp delta",
            RecordField::OffsetDelta => "offset delta",
            RecordField::KeyLength => "key length",
            RecordField::Key => "key",
            RecordField::ValueLength => "value length",
            RecordField::Value => "value",
            RecordField::HeaderCount => "header count",
            RecordField::HeaderKeyLength => "header key length",
            RecordField::HeaderKey => "header key",
            RecordField::HeaderValueLength => "header value length",
            RecordField::HeaderValue => "header value",
        })
    }
}

/// Result with the engine's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            op,
            path: path.into(),
            source,
        }
    }
}
