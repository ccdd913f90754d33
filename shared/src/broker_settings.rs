//! The broker settings a KafkaCluster's `config` may set, by their Kafka names, and the
//! environment variable of the broker flag each one becomes; and the keys it may not set, with
//! why. The operator validates and renders `config` from this table; the broker's own tests
//! check that every variable here is one of its flags, so a key accepted here always reaches a
//! setting (an unknown environment variable would be silently ignored).

/// What a setting's value must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueKind {
    /// A whole number in `min..=max`.
    Whole {
        /// Smallest value accepted.
        min: i64,
        /// Largest value accepted.
        max: i64,
    },
    /// `true` or `false`.
    Bool,
    /// One of these words.
    OneOf(&'static [&'static str]),
    /// Checked by the broker.
    Text,
}

/// A broker setting `config` may set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BrokerSetting {
    /// The key in `config`: Kafka's broker config name, or a kaas-specific one where Kafka
    /// has none.
    pub key: &'static str,
    /// The broker flag's environment variable.
    pub env: &'static str,
    /// What its value must be.
    pub kind: ValueKind,
}

const fn at_least(min: i64) -> ValueKind {
    ValueKind::Whole { min, max: i64::MAX }
}

const fn setting(key: &'static str, env: &'static str, kind: ValueKind) -> BrokerSetting {
    BrokerSetting { key, env, kind }
}

/// Every setting `config` may set.
pub const SETTINGS: &[BrokerSetting] = &[
    setting(
        "auto.create.topics.enable",
        "KAAS_AUTO_CREATE_TOPICS_ENABLE",
        ValueKind::Bool,
    ),
    setting(
        "auto.create.topics.per.minute",
        "KAAS_AUTO_CREATE_TOPICS_PER_MINUTE",
        ValueKind::Whole {
            min: 0,
            max: u32::MAX as i64,
        },
    ),
    setting(
        "num.partitions",
        "KAAS_DEFAULT_PARTITIONS",
        ValueKind::Whole {
            min: 1,
            max: i32::MAX as i64,
        },
    ),
    setting(
        "socket.request.max.bytes",
        "KAAS_MAX_REQUEST_BYTES",
        at_least(1),
    ),
    setting(
        "connections.max.idle.ms",
        "KAAS_CONNECTIONS_MAX_IDLE_MS",
        at_least(1),
    ),
    setting(
        "allow.everyone.if.no.acl.found",
        "KAAS_ALLOW_EVERYONE_IF_NO_ACL_FOUND",
        ValueKind::Bool,
    ),
    setting("max.acls", "KAAS_MAX_ACLS", at_least(1)),
    setting(
        "ssl.principal.mapping.rules",
        "KAAS_SSL_PRINCIPAL_MAPPING_RULES",
        ValueKind::Text,
    ),
    setting(
        "connections.max.reauth.ms",
        "KAAS_CONNECTIONS_MAX_REAUTH_MS",
        at_least(0),
    ),
    setting(
        "request.read.timeout.ms",
        "KAAS_REQUEST_READ_TIMEOUT_MS",
        at_least(1),
    ),
    setting("max.connections", "KAAS_MAX_CONNECTIONS", at_least(1)),
    setting(
        "max.connections.per.ip",
        "KAAS_MAX_CONNECTIONS_PER_IP",
        at_least(0),
    ),
    setting(
        "max.connections.per.ip.overrides",
        "KAAS_MAX_CONNECTIONS_PER_IP_OVERRIDES",
        ValueKind::Text,
    ),
    setting(
        "max.connection.creation.rate",
        "KAAS_MAX_CONNECTION_CREATION_RATE",
        ValueKind::Whole {
            min: 1,
            max: i32::MAX as i64,
        },
    ),
    setting("log.segment.bytes", "KAAS_LOG_SEGMENT_BYTES", at_least(1)),
    setting("log.retention.ms", "KAAS_LOG_RETENTION_MS", at_least(-1)),
    setting(
        "log.cleaner.enable",
        "KAAS_LOG_CLEANER_ENABLE",
        ValueKind::Bool,
    ),
    setting(
        "log.cleaner.backoff.ms",
        "KAAS_LOG_CLEANER_BACKOFF_MS",
        at_least(1),
    ),
    setting(
        "log.cleaner.dedupe.buffer.size",
        "KAAS_LOG_CLEANER_DEDUPE_BUFFER_SIZE",
        at_least(1024),
    ),
    setting(
        "housekeeping.interval.ms",
        "KAAS_HOUSEKEEPING_INTERVAL_MS",
        at_least(1),
    ),
    setting(
        "metrics.per.partition",
        "KAAS_METRICS_PER_PARTITION",
        ValueKind::Bool,
    ),
    setting("slow.request.ms", "KAAS_SLOW_REQUEST_MS", at_least(0)),
    setting(
        "log.format",
        "KAAS_LOG_FORMAT",
        ValueKind::OneOf(&["text", "json"]),
    ),
    setting(
        "fetch.max.bytes",
        "KAAS_FETCH_MAX_BYTES",
        ValueKind::Whole {
            min: 1024,
            max: i32::MAX as i64,
        },
    ),
    setting("fetch.max.wait.ms", "KAAS_FETCH_MAX_WAIT_MS", at_least(0)),
    setting(
        "fetch.max.partitions",
        "KAAS_FETCH_MAX_PARTITIONS",
        at_least(1),
    ),
    setting(
        "fetch.sessions.per.client",
        "KAAS_FETCH_SESSIONS_PER_CLIENT",
        at_least(0),
    ),
    setting("fetch.zero.copy", "KAAS_FETCH_ZERO_COPY", ValueKind::Bool),
    setting(
        "socket.send.buffer.bytes",
        "KAAS_SOCKET_SEND_BUFFER_BYTES",
        ValueKind::Whole {
            min: -1,
            max: i32::MAX as i64,
        },
    ),
    setting(
        "max.incremental.fetch.session.cache.slots",
        "KAAS_MAX_INCREMENTAL_FETCH_SESSION_CACHE_SLOTS",
        at_least(0),
    ),
    setting(
        "min.incremental.fetch.session.eviction.ms",
        "KAAS_MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS",
        at_least(0),
    ),
    setting(
        "group.initial.rebalance.delay.ms",
        "KAAS_GROUP_INITIAL_REBALANCE_DELAY_MS",
        at_least(0),
    ),
    setting(
        "group.min.session.timeout.ms",
        "KAAS_GROUP_MIN_SESSION_TIMEOUT_MS",
        at_least(0),
    ),
    setting(
        "group.max.session.timeout.ms",
        "KAAS_GROUP_MAX_SESSION_TIMEOUT_MS",
        at_least(0),
    ),
    setting(
        "group.consumer.heartbeat.interval.ms",
        "KAAS_GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS",
        at_least(0),
    ),
    setting(
        "group.consumer.session.timeout.ms",
        "KAAS_GROUP_CONSUMER_SESSION_TIMEOUT_MS",
        at_least(0),
    ),
    setting(
        "offsets.retention.minutes",
        "KAAS_OFFSETS_RETENTION_MINUTES",
        at_least(1),
    ),
    setting(
        "offsets.retention.check.interval.ms",
        "KAAS_OFFSETS_RETENTION_CHECK_INTERVAL_MS",
        at_least(100),
    ),
    setting(
        "log.cleaner.threads",
        "KAAS_LOG_CLEANER_THREADS",
        ValueKind::Whole { min: 1, max: 64 },
    ),
    setting(
        "log.cleaner.io.max.bytes.per.second",
        "KAAS_LOG_CLEANER_IO_MAX_BYTES_PER_SECOND",
        ValueKind::Text,
    ),
    setting(
        "log.cleanup.policy",
        "KAAS_LOG_CLEANUP_POLICY",
        ValueKind::Text,
    ),
    setting(
        "log.cleaner.min.cleanable.ratio",
        "KAAS_LOG_CLEANER_MIN_CLEANABLE_RATIO",
        ValueKind::Text,
    ),
    setting(
        "log.cleaner.min.compaction.lag.ms",
        "KAAS_LOG_CLEANER_MIN_COMPACTION_LAG_MS",
        at_least(0),
    ),
    setting(
        "log.cleaner.max.compaction.lag.ms",
        "KAAS_LOG_CLEANER_MAX_COMPACTION_LAG_MS",
        at_least(1),
    ),
    setting(
        "log.cleaner.delete.retention.ms",
        "KAAS_LOG_CLEANER_DELETE_RETENTION_MS",
        at_least(0),
    ),
    setting("log.roll.ms", "KAAS_LOG_ROLL_MS", at_least(1)),
    // All brokers of a cluster get the same value, as the controller Lease needs.
    setting(
        "lease.duration.ms",
        "KAAS_LEASE_DURATION_MS",
        at_least(1000),
    ),
    // Keep it below the pod's termination grace period (derived from spec.timeouts).
    setting("drain.timeout.ms", "KAAS_DRAIN_TIMEOUT_MS", at_least(0)),
    // How many partitions the controller moves at a time onto a broker that joined or came
    // back (each step once the last is led); read by whichever broker holds the Lease.
    setting(
        "leader.moves.per.step",
        "KAAS_LEADER_MOVES_PER_STEP",
        ValueKind::Whole {
            min: 1,
            max: 1_000_000,
        },
    ),
];

/// Keys the operator sets itself (Kafka's name and kaas's flag name), with the KafkaCluster
/// field or mechanism that sets them: an override would break the pod or the cluster.
pub const OPERATOR_OWNED: &[(&str, &str)] = &[
    ("listeners", "spec.listener"),
    ("listen", "spec.listener"),
    ("advertised.listeners", "spec.listener"),
    ("advertise", "spec.listener"),
    ("port", "spec.listener"),
    ("log.dirs", "spec.storage"),
    ("log.dir", "spec.storage"),
    ("data.dir", "spec.storage"),
    ("in.memory", "spec.storage"),
    ("node.id", "the broker pod's ordinal"),
    ("broker.id", "the broker pod's ordinal"),
    ("cluster.id", "the operator"),
    ("cluster.name", "the operator"),
    ("lease.name", "the operator"),
    ("headless.service", "the operator"),
    ("heartbeat.listen", "the operator"),
    ("heartbeat.advertise", "the operator"),
    ("http.listen", "the operator"),
    ("interbroker.listen", "the operator"),
    ("interbroker.advertise", "the operator"),
    ("inter.broker.listener.name", "the operator"),
    (
        "security.protocol",
        "spec.listener.tls and spec.listener.authentication",
    ),
    ("ssl.certificate", "spec.listener.tls"),
    ("ssl.key", "spec.listener.tls"),
    ("ssl.truststore", "spec.listener.tls"),
    ("ssl.keystore.location", "spec.listener.tls"),
    ("ssl.truststore.location", "spec.listener.tls"),
    ("ssl.client.auth", "spec.listener.authentication"),
    ("sasl.enabled.mechanisms", "spec.listener.authentication"),
    ("sasl.credentials", "spec.listener.authentication"),
    ("authorizer.class.name", "spec.authorization"),
    ("authorizer", "spec.authorization"),
    ("super.users", "spec.authorization.superUsers"),
    ("fence.timeout.ms", "spec.timeouts.fenceTimeoutMs"),
    ("session.timeout.ms", "spec.timeouts.sessionTimeoutMs"),
    (
        "broker.session.timeout.ms",
        "spec.timeouts.sessionTimeoutMs",
    ),
];

/// Kafka broker configs people reach for that kaas does not take, and what to do instead.
pub const UNSUPPORTED: &[(&str, &str)] = &[
    ("log.retention.hours", "set log.retention.ms"),
    ("log.retention.minutes", "set log.retention.ms"),
    (
        "log.retention.bytes",
        "set retention.bytes on each KafkaTopic",
    ),
    (
        "default.replication.factor",
        "the shared volume replaces replication; kaas keeps one copy per partition",
    ),
    (
        "min.insync.replicas",
        "the shared volume replaces replication; kaas keeps one copy per partition",
    ),
    (
        "offsets.topic.replication.factor",
        "the shared volume replaces replication; kaas keeps one copy per partition",
    ),
    (
        "transaction.state.log.replication.factor",
        "the shared volume replaces replication; kaas keeps one copy per partition",
    ),
];

/// Why a key cannot be set, in a sentence for `kubectl describe`; `Ok` with the setting when
/// it can.
pub fn lookup(key: &str) -> Result<&'static BrokerSetting, String> {
    if let Some(setting) = SETTINGS.iter().find(|s| s.key == key) {
        return Ok(setting);
    }
    if let Some((_, by)) = OPERATOR_OWNED.iter().find(|(k, _)| *k == key) {
        return Err(format!(
            "broker config {key:?} is set by the operator from {by} and cannot be overridden"
        ));
    }
    if let Some((_, instead)) = UNSUPPORTED.iter().find(|(k, _)| *k == key) {
        return Err(format!(
            "broker config {key:?} is not supported by kaas: {instead}"
        ));
    }
    Err(format!(
        "broker config {key:?} is not a broker setting kaas knows (docs/operator.md lists them)"
    ))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_unique_and_in_one_list_only() {
        let mut all: Vec<&str> = SETTINGS.iter().map(|s| s.key).collect();
        all.extend(OPERATOR_OWNED.iter().map(|(k, _)| *k));
        all.extend(UNSUPPORTED.iter().map(|(k, _)| *k));
        let mut sorted = all.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), all.len(), "a key is listed twice");
        let mut envs: Vec<&str> = SETTINGS.iter().map(|s| s.env).collect();
        envs.sort_unstable();
        envs.dedup();
        assert_eq!(envs.len(), SETTINGS.len(), "two keys set one flag");
    }

    #[test]
    fn lookups_say_why() {
        assert_eq!(
            lookup("num.partitions").map(|s| s.env),
            Ok("KAAS_DEFAULT_PARTITIONS")
        );
        let owned = lookup("advertised.listeners").unwrap_err();
        assert!(
            owned.contains("set by the operator from spec.listener"),
            "{owned}"
        );
        let unsupported = lookup("log.retention.hours").unwrap_err();
        assert!(
            unsupported.contains("set log.retention.ms"),
            "{unsupported}"
        );
        let unknown = lookup("log.retention.msec").unwrap_err();
        assert!(
            unknown.contains("not a broker setting kaas knows"),
            "{unknown}"
        );
    }
}
