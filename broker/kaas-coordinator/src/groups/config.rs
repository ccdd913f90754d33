//! Group coordinator settings, with Kafka's broker defaults.

use std::time::Duration;

/// Kafka's `group.*` and `offsets.*` broker settings that the coordinator honours.
#[derive(Debug, Clone)]
pub struct GroupConfig {
    /// `group.min.session.timeout.ms`.
    pub min_session_timeout: Duration,
    /// `group.max.session.timeout.ms`.
    pub max_session_timeout: Duration,
    /// `group.initial.rebalance.delay.ms`: how long the first rebalance of an empty group waits
    /// for more members, so a starting fleet does not rebalance once per member.
    pub initial_rebalance_delay: Duration,
    /// `offsets.retention.minutes`: offsets of an empty group expire this long after it emptied.
    pub offsets_retention: Duration,
    /// `offsets.retention.check.interval.ms`.
    pub offsets_retention_check_interval: Duration,
    /// `offset.metadata.max.bytes`.
    pub offset_metadata_max_bytes: usize,
    /// Largest protocol metadata of one member (Kafka bounds it only by the record size of
    /// `__consumer_offsets`; kaas refuses it at join so one member cannot poison the group).
    pub max_member_metadata_bytes: usize,
    /// `group.max.size` (and `group.consumer.max.size`).
    pub max_size: usize,
    /// `group.consumer.heartbeat.interval.ms`: how often KIP-848 members heartbeat.
    pub consumer_heartbeat_interval: Duration,
    /// `group.consumer.session.timeout.ms`: a KIP-848 member silent this long is fenced.
    pub consumer_session_timeout: Duration,
}

impl Default for GroupConfig {
    fn default() -> Self {
        GroupConfig {
            min_session_timeout: Duration::from_millis(6_000),
            max_session_timeout: Duration::from_millis(1_800_000),
            initial_rebalance_delay: Duration::from_millis(3_000),
            offsets_retention: Duration::from_secs(7 * 24 * 3600),
            offsets_retention_check_interval: Duration::from_secs(600),
            offset_metadata_max_bytes: 4096,
            max_member_metadata_bytes: 1024 * 1024,
            max_size: usize::MAX,
            consumer_heartbeat_interval: Duration::from_millis(5_000),
            consumer_session_timeout: Duration::from_millis(45_000),
        }
    }
}
