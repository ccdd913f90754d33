//! The group coordinator's flags (Kafka's `group.*` / `offsets.*` broker settings), each with a
//! `KAAS_*` environment variable, collected into a [`GroupConfig`].

use std::time::Duration;

use clap::Args;
use kaas_broker::groups::GroupConfig;

#[derive(Debug, Clone, Args)]
pub(crate) struct GroupFlags {
    /// group.initial.rebalance.delay.ms: how long the first rebalance of an empty classic group
    /// waits for more members. Default: 0 in local mode (as Kafka's shipped
    /// config/server.properties gives a newcomer), 3000 in a cluster (Kafka's broker default).
    #[arg(long, env = "KAAS_GROUP_INITIAL_REBALANCE_DELAY_MS")]
    group_initial_rebalance_delay_ms: Option<u64>,
    /// group.min.session.timeout.ms (classic groups).
    #[arg(
        long,
        env = "KAAS_GROUP_MIN_SESSION_TIMEOUT_MS",
        default_value_t = 6_000
    )]
    group_min_session_timeout_ms: u64,
    /// group.max.session.timeout.ms (classic groups).
    #[arg(
        long,
        env = "KAAS_GROUP_MAX_SESSION_TIMEOUT_MS",
        default_value_t = 1_800_000
    )]
    group_max_session_timeout_ms: u64,
    /// group.consumer.heartbeat.interval.ms: how often KIP-848 consumers heartbeat.
    #[arg(
        long,
        env = "KAAS_GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS",
        default_value_t = 5_000
    )]
    group_consumer_heartbeat_interval_ms: u64,
    /// group.consumer.session.timeout.ms: a silent KIP-848 consumer is fenced after this.
    #[arg(
        long,
        env = "KAAS_GROUP_CONSUMER_SESSION_TIMEOUT_MS",
        default_value_t = 45_000
    )]
    group_consumer_session_timeout_ms: u64,
    /// offsets.retention.minutes: offsets of a group that has been empty this long expire.
    #[arg(long, env = "KAAS_OFFSETS_RETENTION_MINUTES", default_value_t = 7 * 24 * 60)]
    offsets_retention_minutes: u64,
    /// offsets.retention.check.interval.ms (at least 100).
    #[arg(
        long,
        env = "KAAS_OFFSETS_RETENTION_CHECK_INTERVAL_MS",
        default_value_t = 600_000
    )]
    offsets_retention_check_interval_ms: u64,
}

impl GroupFlags {
    /// The settings; `cluster` picks the defaults of cluster mode rather than local mode.
    pub(crate) fn config(&self, cluster: bool) -> GroupConfig {
        let initial_rebalance_delay_ms = self.group_initial_rebalance_delay_ms.unwrap_or(if cluster { 3_000 } else { 0 });
        GroupConfig {
            initial_rebalance_delay: Duration::from_millis(initial_rebalance_delay_ms),
            min_session_timeout: Duration::from_millis(self.group_min_session_timeout_ms),
            max_session_timeout: Duration::from_millis(self.group_max_session_timeout_ms),
            consumer_heartbeat_interval: Duration::from_millis(
                self.group_consumer_heartbeat_interval_ms.max(1),
            ),
            consumer_session_timeout: Duration::from_millis(self.group_consumer_session_timeout_ms),
            offsets_retention: Duration::from_secs(
                self.offsets_retention_minutes.saturating_mul(60),
            ),
            offsets_retention_check_interval: Duration::from_millis(
                self.offsets_retention_check_interval_ms.max(100),
            ),
            ..GroupConfig::default()
        }
    }
}
