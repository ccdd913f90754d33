//! The storage engine's one error type. Each variant maps to one Kafka error code at the
//! protocol edge (noted on the variant).

use std::path::PathBuf;

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
    /// A well-formed batch that may not be appended (Kafka `INVALID_RECORD`).
    #[error("invalid record batch: {0}")]
    InvalidRecord(String),
    /// A CreateTime timestamp outside the allowed window (Kafka `INVALID_TIMESTAMP`).
    #[error("timestamp {timestamp} is outside the allowed range around now ({now})")]
    InvalidTimestamp {
        /// The offending timestamp.
        timestamp: i64,
        /// The broker's clock.
        now: i64,
    },
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
