//! Per-partition log configuration, with Kafka's names and defaults.

use std::collections::BTreeMap;

use crate::{Error, Result};

/// How record timestamps are set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TimestampType {
    /// The producer's timestamps are kept.
    #[default]
    CreateTime,
    /// The broker stamps each batch with its append time.
    LogAppendTime,
}

/// Log configuration (Kafka topic configs of the same names).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LogConfig {
    /// `cleanup.policy` contains `delete`: segments past retention.ms / retention.bytes are
    /// deleted. A `compact`-only topic keeps its segments whatever their age or size.
    pub cleanup_delete: bool,
    /// `cleanup.policy` contains `compact`: the log cleaner keeps the latest record per key.
    pub cleanup_compact: bool,
    /// `min.cleanable.dirty.ratio`: clean once the uncleaned share of the log reaches this.
    pub min_cleanable_dirty_ratio: f64,
    /// `min.compaction.lag.ms`: a record stays uncompacted at least this long.
    pub min_compaction_lag_ms: i64,
    /// `max.compaction.lag.ms`: a record is compacted at most this long after it was written,
    /// whatever the dirty ratio (it also caps segment.ms on compacted topics, so the active
    /// segment rolls and becomes cleanable).
    pub max_compaction_lag_ms: i64,
    /// `delete.retention.ms`: how long a tombstone (and an empty transaction's marker) stays
    /// after the clean that first saw it.
    pub delete_retention_ms: i64,
    /// `log.cleaner.dedupe.buffer.size` (a broker config in Kafka): the memory of the cleaner's
    /// offset map. A dirty section with more keys is cleaned in prefixes that fit.
    pub cleaner_dedupe_buffer_bytes: usize,
    /// `segment.bytes`: roll when the active segment would exceed this.
    pub segment_bytes: u64,
    /// `segment.ms`: roll when the active segment's first append is this old.
    pub segment_ms: i64,
    /// `retention.ms`: delete segments whose newest timestamp is older (-1 = forever).
    pub retention_ms: i64,
    /// `retention.bytes`: delete the oldest segments while the log is larger (-1 = unlimited).
    pub retention_bytes: i64,
    /// `max.message.bytes`: largest batch accepted.
    pub max_message_bytes: usize,
    /// `message.timestamp.type`.
    pub timestamp_type: TimestampType,
    /// `index.interval.bytes`: bytes between sparse index entries.
    pub index_interval_bytes: usize,
    /// `message.timestamp.before.max.ms`: how far in the past a CreateTime timestamp may be.
    pub message_timestamp_before_max_ms: i64,
    /// `message.timestamp.after.max.ms`: how far in the future a CreateTime timestamp may be.
    pub message_timestamp_after_max_ms: i64,
    /// `producer.id.expiration.ms` (a broker config in Kafka): idle producer state is dropped.
    pub producer_id_expiration_ms: i64,
    /// The most a compressed batch may inflate to when its records are checked; past it the
    /// batch is refused as a decompression bomb. Not a Kafka setting (Kafka has no limit): the
    /// broker sets it to `socket.request.max.bytes`, the most bytes it agreed to handle for one
    /// request. The walk streams, so this bounds the work, not the memory held.
    pub max_uncompressed_batch_bytes: usize,
}

/// Largest segment: sparse index positions are 32-bit.
const MAX_SEGMENT_BYTES: u64 = i32::MAX as u64;

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            cleanup_delete: true,
            cleanup_compact: false,
            min_cleanable_dirty_ratio: 0.5,
            min_compaction_lag_ms: 0,
            max_compaction_lag_ms: i64::MAX,
            delete_retention_ms: 24 * 3600 * 1000,
            cleaner_dedupe_buffer_bytes: 128 << 20,
            segment_bytes: 1 << 30,
            segment_ms: 7 * 24 * 3600 * 1000,
            retention_ms: 7 * 24 * 3600 * 1000,
            retention_bytes: -1,
            max_message_bytes: 1_048_588,
            timestamp_type: TimestampType::CreateTime,
            index_interval_bytes: 4096,
            message_timestamp_before_max_ms: i64::MAX,
            // Kafka 4.0's default (KIP-937): a clock an hour ahead is a broken clock, and one
            // far-future timestamp would pin time-based retention of its segment.
            message_timestamp_after_max_ms: 3600 * 1000,
            producer_id_expiration_ms: 24 * 3600 * 1000,
            max_uncompressed_batch_bytes: 100 * 1024 * 1024,
        }
    }
}

impl LogConfig {
    /// Applies Kafka topic configs over `self`. Names this engine does not use (for example
    /// `compression.type`) are ignored; a bad value for a name it uses is an error.
    pub fn with_topic_configs(mut self, configs: &BTreeMap<String, String>) -> Result<Self> {
        for (key, value) in configs {
            let bad = || Error::InvalidConfig {
                key: key.clone(),
                value: value.clone(),
            };
            let int = || value.trim().parse::<i64>().map_err(|_| bad());
            match key.as_str() {
                "segment.bytes" => {
                    self.segment_bytes = u64::try_from(int()?)
                        .ok()
                        .filter(|v| *v >= 14)
                        .ok_or_else(bad)?
                }
                "segment.ms" => self.segment_ms = int()?.max(1),
                "cleanup.policy" => {
                    let words: Vec<&str> = value.split(',').map(str::trim).filter(|w| !w.is_empty()).collect();
                    if words.iter().any(|w| !matches!(*w, "delete" | "compact")) {
                        return Err(bad());
                    }
                    self.cleanup_delete = words.contains(&"delete");
                    self.cleanup_compact = words.contains(&"compact");
                }
                "min.cleanable.dirty.ratio" => {
                    self.min_cleanable_dirty_ratio =
                        value.trim().parse::<f64>().ok().filter(|r| (0.0..=1.0).contains(r)).ok_or_else(bad)?
                }
                "min.compaction.lag.ms" => self.min_compaction_lag_ms = int()?.max(0),
                "max.compaction.lag.ms" => self.max_compaction_lag_ms = int()?.max(1),
                "delete.retention.ms" => self.delete_retention_ms = int()?.max(0),
                "retention.ms" => self.retention_ms = int()?,
                "retention.bytes" => self.retention_bytes = int()?,
                "max.message.bytes" => {
                    self.max_message_bytes = usize::try_from(int()?).map_err(|_| bad())?
                }
                "index.interval.bytes" => {
                    self.index_interval_bytes = usize::try_from(int()?).map_err(|_| bad())?
                }
                "message.timestamp.before.max.ms" => self.message_timestamp_before_max_ms = int()?,
                "message.timestamp.after.max.ms" => self.message_timestamp_after_max_ms = int()?,
                "message.timestamp.type" => {
                    self.timestamp_type = match value.as_str() {
                        "CreateTime" => TimestampType::CreateTime,
                        "LogAppendTime" => TimestampType::LogAppendTime,
                        _ => return Err(bad()),
                    }
                }
                _ => {}
            }
        }
        Ok(self)
    }

    pub(crate) fn effective_segment_bytes(&self) -> u64 {
        self.segment_bytes.clamp(1, MAX_SEGMENT_BYTES)
    }

    /// segment.ms, capped by max.compaction.lag.ms on compacted topics as in Kafka: the active
    /// segment is never cleaned, so it must roll for its records to meet the lag.
    pub(crate) fn effective_segment_ms(&self) -> i64 {
        if self.cleanup_compact { self.segment_ms.min(self.max_compaction_lag_ms) } else { self.segment_ms }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn topic_configs_override_defaults() {
        let configs = BTreeMap::from([
            ("retention.ms".to_owned(), "-1".to_owned()),
            (
                "message.timestamp.type".to_owned(),
                "LogAppendTime".to_owned(),
            ),
            ("cleanup.policy".to_owned(), "compact,delete".to_owned()),
            ("min.cleanable.dirty.ratio".to_owned(), "0.25".to_owned()),
        ]);
        let c = LogConfig::default().with_topic_configs(&configs).unwrap();
        assert_eq!(c.retention_ms, -1);
        assert!(c.cleanup_compact && c.cleanup_delete);
        assert_eq!(c.min_cleanable_dirty_ratio, 0.25);
        assert_eq!(c.timestamp_type, TimestampType::LogAppendTime);
        let compact = BTreeMap::from([("cleanup.policy".to_owned(), "compact".to_owned())]);
        let c = LogConfig::default().with_topic_configs(&compact).unwrap();
        assert!(c.cleanup_compact && !c.cleanup_delete);
        let bad = BTreeMap::from([("segment.bytes".to_owned(), "lots".to_owned())]);
        assert!(matches!(
            LogConfig::default().with_topic_configs(&bad),
            Err(Error::InvalidConfig { .. })
        ));
    }
}
