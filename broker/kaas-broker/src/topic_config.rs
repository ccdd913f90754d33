//! Kafka's topic-level configs: their names, types, defaults, validation, and how they become
//! the storage engine's [`LogConfig`].
//!
//! A topic stores only the configs that were set on it; everything else falls back to the
//! broker's defaults, exactly as Kafka reports them (`DEFAULT_CONFIG` vs `DYNAMIC_TOPIC_CONFIG`).

use std::collections::BTreeMap;

use kaas_storage::{LogConfig, TimestampType};

use crate::error::{Error, Result};

/// The value type of a config, with what it accepts. Also the DescribeConfigs `config_type`.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    Long { min: i64 },
    Int { min: i64 },
    Double { min: f64, max: f64 },
    Bool,
    /// One of the listed words.
    Choice(&'static [&'static str]),
    /// A comma-separated list of the listed words (any word when empty).
    List(&'static [&'static str]),
}

impl Kind {
    /// Kafka's `ConfigType` code as DescribeConfigs v3+ reports it.
    pub fn wire_type(&self) -> i8 {
        match self {
            Kind::Bool => 1,
            Kind::Choice(_) => 2,
            Kind::Int { .. } => 3,
            Kind::Long { .. } => 5,
            Kind::Double { .. } => 6,
            Kind::List(_) => 7,
        }
    }
}

/// One topic config Kafka defines.
#[derive(Debug, Clone, Copy)]
pub struct ConfigDef {
    pub name: &'static str,
    pub kind: Kind,
    /// The default when the broker's own settings do not supply one.
    pub default: &'static str,
    pub doc: &'static str,
}

const CLEANUP: &[&str] = &["delete", "compact"];
const COMPRESSION: &[&str] = &["uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"];
const TIMESTAMP: &[&str] = &["CreateTime", "LogAppendTime"];

/// Every topic config of Kafka 4.x that a client may set or read.
pub const TOPIC_CONFIGS: &[ConfigDef] = &[
    ConfigDef { name: "cleanup.policy", kind: Kind::List(CLEANUP), default: "delete", doc: "delete: retention.ms/retention.bytes delete old segments; compact: the log cleaner keeps the latest record of each key." },
    ConfigDef { name: "compression.type", kind: Kind::Choice(COMPRESSION), default: "producer", doc: "Batches are stored as the producer sent them." },
    ConfigDef { name: "compression.gzip.level", kind: Kind::Int { min: -1 }, default: "-1", doc: "Unused: batches are stored as sent." },
    ConfigDef { name: "compression.lz4.level", kind: Kind::Int { min: 1 }, default: "9", doc: "Unused: batches are stored as sent." },
    ConfigDef { name: "compression.zstd.level", kind: Kind::Int { min: -131072 }, default: "3", doc: "Unused: batches are stored as sent." },
    ConfigDef { name: "delete.retention.ms", kind: Kind::Long { min: 0 }, default: "86400000", doc: "How long a tombstone stays after the clean that first saw it." },
    ConfigDef { name: "file.delete.delay.ms", kind: Kind::Long { min: 0 }, default: "60000", doc: "Delay before a deleted segment is unlinked." },
    ConfigDef { name: "flush.messages", kind: Kind::Long { min: 1 }, default: "1", doc: "kaas fsyncs before every acknowledgement." },
    ConfigDef { name: "flush.ms", kind: Kind::Long { min: 0 }, default: "0", doc: "kaas fsyncs before every acknowledgement." },
    ConfigDef { name: "follower.replication.throttled.replicas", kind: Kind::List(&[]), default: "", doc: "No followers in kaas." },
    ConfigDef { name: "index.interval.bytes", kind: Kind::Int { min: 0 }, default: "4096", doc: "Bytes between offset index entries." },
    ConfigDef { name: "leader.replication.throttled.replicas", kind: Kind::List(&[]), default: "", doc: "No followers in kaas." },
    ConfigDef { name: "local.retention.bytes", kind: Kind::Long { min: -2 }, default: "-2", doc: "Tiered storage is not used." },
    ConfigDef { name: "local.retention.ms", kind: Kind::Long { min: -2 }, default: "-2", doc: "Tiered storage is not used." },
    ConfigDef { name: "max.compaction.lag.ms", kind: Kind::Long { min: 1 }, default: "9223372036854775807", doc: "Longest a record stays uncompacted (also caps segment.ms on compacted topics)." },
    ConfigDef { name: "max.message.bytes", kind: Kind::Int { min: 0 }, default: "1048588", doc: "Largest record batch accepted." },
    ConfigDef { name: "message.timestamp.after.max.ms", kind: Kind::Long { min: 0 }, default: "3600000", doc: "How far in the future a record's CreateTime may be; later ones are refused with INVALID_TIMESTAMP." },
    ConfigDef { name: "message.timestamp.before.max.ms", kind: Kind::Long { min: 0 }, default: "9223372036854775807", doc: "How far in the past a record's CreateTime may be; older ones are refused with INVALID_TIMESTAMP." },
    ConfigDef { name: "message.timestamp.type", kind: Kind::Choice(TIMESTAMP), default: "CreateTime", doc: "CreateTime or LogAppendTime." },
    ConfigDef { name: "min.cleanable.dirty.ratio", kind: Kind::Double { min: 0.0, max: 1.0 }, default: "0.5", doc: "Share of the log not yet cleaned that starts a clean." },
    ConfigDef { name: "min.compaction.lag.ms", kind: Kind::Long { min: 0 }, default: "0", doc: "Shortest time a record stays uncompacted." },
    ConfigDef { name: "min.insync.replicas", kind: Kind::Int { min: 1 }, default: "1", doc: "The shared volume is the only copy." },
    ConfigDef { name: "preallocate", kind: Kind::Bool, default: "false", doc: "Segments are not preallocated." },
    ConfigDef { name: "remote.storage.enable", kind: Kind::Bool, default: "false", doc: "Tiered storage is not used." },
    ConfigDef { name: "retention.bytes", kind: Kind::Long { min: -1 }, default: "-1", doc: "Largest partition size before old segments are deleted." },
    ConfigDef { name: "retention.ms", kind: Kind::Long { min: -1 }, default: "604800000", doc: "Age after which segments are deleted." },
    ConfigDef { name: "segment.bytes", kind: Kind::Int { min: 1024 * 1024 }, default: "1073741824", doc: "Segment size before a roll." },
    ConfigDef { name: "segment.index.bytes", kind: Kind::Int { min: 4 }, default: "10485760", doc: "Largest offset index." },
    ConfigDef { name: "segment.jitter.ms", kind: Kind::Long { min: 0 }, default: "0", doc: "Random jitter subtracted from segment.ms." },
    ConfigDef { name: "segment.ms", kind: Kind::Long { min: 1 }, default: "604800000", doc: "Segment age before a roll." },
    ConfigDef { name: "unclean.leader.election.enable", kind: Kind::Bool, default: "false", doc: "No replicas to elect from." },
];

/// The definition of a topic config, if Kafka has one of that name.
pub fn definition(name: &str) -> Option<&'static ConfigDef> {
    TOPIC_CONFIGS.iter().find(|d| d.name == name)
}

/// Checks one `name=value` the way Kafka's topic config validation does.
pub fn validate(name: &str, value: &str) -> Result<()> {
    let def = definition(name).ok_or_else(|| Error::InvalidConfig(format!("unknown topic config name: {name}")))?;
    let bad = |why: String| Error::InvalidConfig(format!("invalid value {value:?} for configuration {name}: {why}"));
    match def.kind {
        Kind::Long { min } | Kind::Int { min } => {
            let v: i64 = value.trim().parse().map_err(|_| bad("not a number".into()))?;
            if matches!(def.kind, Kind::Int { .. }) && i32::try_from(v).is_err() {
                return Err(bad("out of range for an int".into()));
            }
            if v < min {
                return Err(bad(format!("value must be at least {min}")));
            }
        }
        Kind::Double { min, max } => {
            let v: f64 = value.trim().parse().map_err(|_| bad("not a number".into()))?;
            if !(min..=max).contains(&v) {
                return Err(bad(format!("value must be between {min} and {max}")));
            }
        }
        Kind::Bool => {
            if !value.trim().eq_ignore_ascii_case("true") && !value.trim().eq_ignore_ascii_case("false") {
                return Err(bad("expected true or false".into()));
            }
        }
        Kind::Choice(words) => {
            if !words.contains(&value.trim()) {
                return Err(bad(format!("string must be one of: {}", words.join(", "))));
            }
        }
        Kind::List(words) => {
            for item in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                if !words.is_empty() && !words.contains(&item) {
                    return Err(bad(format!("list items must be among: {}", words.join(", "))));
                }
            }
        }
    }
    Ok(())
}

/// Checks every entry of a topic's config map, then what Kafka's `LogConfig.validateValues`
/// checks across entries, on the topic's configs over the broker's defaults.
pub fn validate_all(configs: &BTreeMap<String, String>, broker: &LogConfig) -> Result<()> {
    configs.iter().try_for_each(|(k, v)| validate(k, v))?;
    let merged = broker.with_topic_configs(configs).map_err(|e| Error::InvalidConfig(e.to_string()))?;
    if merged.min_compaction_lag_ms > merged.max_compaction_lag_ms {
        return Err(Error::InvalidConfig(format!(
            "conflict topic config setting min.compaction.lag.ms ({}) > max.compaction.lag.ms ({})",
            merged.min_compaction_lag_ms, merged.max_compaction_lag_ms
        )));
    }
    Ok(())
}

/// The value a topic sees for `def` when it does not set it: the broker's setting where the
/// broker has one, Kafka's default otherwise.
pub fn default_value(def: &ConfigDef, broker: &LogConfig) -> String {
    match def.name {
        "segment.bytes" => broker.segment_bytes.to_string(),
        "segment.ms" => broker.segment_ms.to_string(),
        "retention.ms" => broker.retention_ms.to_string(),
        "retention.bytes" => broker.retention_bytes.to_string(),
        "max.message.bytes" => broker.max_message_bytes.to_string(),
        "index.interval.bytes" => broker.index_interval_bytes.to_string(),
        "message.timestamp.type" => timestamp_type_name(broker.timestamp_type).to_string(),
        "message.timestamp.before.max.ms" => broker.message_timestamp_before_max_ms.to_string(),
        "message.timestamp.after.max.ms" => broker.message_timestamp_after_max_ms.to_string(),
        "cleanup.policy" => cleanup_policy_name(broker).to_string(),
        "min.cleanable.dirty.ratio" => broker.min_cleanable_dirty_ratio.to_string(),
        "min.compaction.lag.ms" => broker.min_compaction_lag_ms.to_string(),
        "max.compaction.lag.ms" => broker.max_compaction_lag_ms.to_string(),
        "delete.retention.ms" => broker.delete_retention_ms.to_string(),
        _ => def.default.to_string(),
    }
}

/// The default a topic sees for the config `name`, if Kafka defines one.
pub fn default_value_of(name: &str, broker: &LogConfig) -> Option<String> {
    definition(name).map(|def| default_value(def, broker))
}

fn cleanup_policy_name(broker: &LogConfig) -> &'static str {
    match (broker.cleanup_delete, broker.cleanup_compact) {
        (true, true) => "compact,delete",
        (false, true) => "compact",
        (true, false) => "delete",
        (false, false) => "",
    }
}

fn timestamp_type_name(t: TimestampType) -> &'static str {
    match t {
        TimestampType::CreateTime => "CreateTime",
        TimestampType::LogAppendTime => "LogAppendTime",
    }
}

/// The storage settings of a topic: its own configs over the broker's defaults.
/// Configs are validated before they are stored, so a value the engine refuses here was written
/// by hand into topic.json; the topic then runs on the broker defaults, with a warning.
pub fn log_config(configs: &BTreeMap<String, String>, broker: &LogConfig) -> LogConfig {
    broker.with_topic_configs(configs).unwrap_or_else(|e| {
        tracing::warn!(error = %e, "ignoring unparsable topic configs");
        *broker
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validates_like_kafka() {
        assert!(validate("retention.ms", "1000").is_ok());
        assert!(validate("retention.ms", "-1").is_ok());
        assert!(matches!(validate("retention.ms", "-5"), Err(Error::InvalidConfig(_))));
        assert!(matches!(validate("retention.ms", "soon"), Err(Error::InvalidConfig(_))));
        assert!(matches!(validate("no.such.config", "1"), Err(Error::InvalidConfig(_))));
        assert!(validate("cleanup.policy", "compact,delete").is_ok());
        assert!(matches!(validate("cleanup.policy", "shred"), Err(Error::InvalidConfig(_))));
        assert!(validate("message.timestamp.type", "LogAppendTime").is_ok());
        assert!(matches!(validate("segment.bytes", "10"), Err(Error::InvalidConfig(_))));
        assert!(matches!(validate("max.message.bytes", "99999999999"), Err(Error::InvalidConfig(_))));
        assert!(matches!(validate("preallocate", "yes"), Err(Error::InvalidConfig(_))));
    }

    fn configs(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn a_minimum_compaction_lag_above_the_maximum_is_refused_as_kafka_refuses_it() {
        let broker = LogConfig::default();
        assert!(validate_all(&configs(&[("min.compaction.lag.ms", "5000"), ("max.compaction.lag.ms", "5000")]), &broker).is_ok());
        let err = validate_all(&configs(&[("min.compaction.lag.ms", "5001"), ("max.compaction.lag.ms", "5000")]), &broker);
        assert!(
            matches!(&err, Err(Error::InvalidConfig(m)) if m.contains("min.compaction.lag.ms (5001) > max.compaction.lag.ms (5000)")),
            "{err:?}"
        );
        // Against the broker's default when the topic sets only one side.
        let broker = LogConfig { max_compaction_lag_ms: 60_000, ..LogConfig::default() };
        assert!(validate_all(&configs(&[("min.compaction.lag.ms", "60000")]), &broker).is_ok());
        assert!(matches!(validate_all(&configs(&[("min.compaction.lag.ms", "60001")]), &broker), Err(Error::InvalidConfig(_))));
    }

    #[test]
    fn the_broker_cleaner_defaults_are_what_topics_that_set_nothing_report() {
        let broker = LogConfig {
            cleanup_delete: false,
            cleanup_compact: true,
            min_cleanable_dirty_ratio: 0.1,
            min_compaction_lag_ms: 1000,
            max_compaction_lag_ms: 3_600_000,
            delete_retention_ms: 2000,
            ..LogConfig::default()
        };
        let reported = |name| default_value_of(name, &broker);
        assert_eq!(reported("cleanup.policy").as_deref(), Some("compact"));
        assert_eq!(reported("min.cleanable.dirty.ratio").as_deref(), Some("0.1"));
        assert_eq!(reported("min.compaction.lag.ms").as_deref(), Some("1000"));
        assert_eq!(reported("max.compaction.lag.ms").as_deref(), Some("3600000"));
        assert_eq!(reported("delete.retention.ms").as_deref(), Some("2000"));
        let kafka = LogConfig::default();
        assert_eq!(default_value_of("cleanup.policy", &kafka).as_deref(), Some("delete"));
        assert_eq!(default_value_of("max.compaction.lag.ms", &kafka).as_deref(), Some("9223372036854775807"));
    }

    #[test]
    fn topic_configs_override_broker_defaults() {
        let broker = LogConfig::default();
        let mut configs = BTreeMap::new();
        configs.insert("retention.ms".to_string(), "1234".to_string());
        configs.insert("message.timestamp.type".to_string(), "LogAppendTime".to_string());
        let c = log_config(&configs, &broker);
        assert_eq!(c.retention_ms, 1234);
        assert_eq!(c.timestamp_type, TimestampType::LogAppendTime);
        assert_eq!(c.segment_bytes, broker.segment_bytes);
    }

    #[test]
    fn every_default_is_valid() {
        let broker = LogConfig::default();
        for def in TOPIC_CONFIGS {
            let value = default_value(def, &broker);
            assert!(validate(def.name, &value).is_ok(), "{} default {value:?} is invalid", def.name);
        }
    }
}
