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
    /// `group.max.size`.
    pub max_size: usize,
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
        }
    }
}

impl GroupConfig {
    /// The defaults, overridden by `KAAS_GROUP_INITIAL_REBALANCE_DELAY_MS`,
    /// `KAAS_GROUP_MIN_SESSION_TIMEOUT_MS`, `KAAS_OFFSETS_RETENTION_MINUTES` and
    /// `KAAS_OFFSETS_RETENTION_CHECK_INTERVAL_MS` when set (the binary has no flags for them yet).
    pub fn from_env() -> GroupConfig {
        let ms = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok());
        let mut c = GroupConfig::default();
        if let Some(v) = ms("KAAS_GROUP_INITIAL_REBALANCE_DELAY_MS") {
            c.initial_rebalance_delay = Duration::from_millis(v);
        }
        if let Some(v) = ms("KAAS_GROUP_MIN_SESSION_TIMEOUT_MS") {
            c.min_session_timeout = Duration::from_millis(v);
        }
        if let Some(v) = ms("KAAS_OFFSETS_RETENTION_MINUTES") {
            c.offsets_retention = Duration::from_secs(v.saturating_mul(60));
        }
        if let Some(v) = ms("KAAS_OFFSETS_RETENTION_CHECK_INTERVAL_MS") {
            c.offsets_retention_check_interval = Duration::from_millis(v.max(100));
        }
        c
    }
}
