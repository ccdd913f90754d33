//! Kafka's topic-level configs: their names, types, defaults, validation, and how they become
//! the storage engine's [`LogConfig`].
//!
//! A topic stores only the configs that were set on it; everything else falls back to the
//! broker's defaults, exactly as Kafka reports them (`DEFAULT_CONFIG` vs `DYNAMIC_TOPIC_CONFIG`).

use std::collections::BTreeMap;

use kaas_storage::{LogConfig, TimestampType};

use crate::error::{Error, Result};

pub use kaas_shared::topic_configs::{ConfigDef, Kind, TOPIC_CONFIGS, definition};

/// Kafka's `ConfigType` code of a config kind, as DescribeConfigs v3+ reports it.
pub fn wire_type(kind: Kind) -> i8 {
    match kind {
        Kind::Bool => 1,
        Kind::Choice(_) => 2,
        Kind::Int { .. } => 3,
        Kind::Long { .. } => 5,
        Kind::Double { .. } => 6,
        Kind::List(_) => 7,
    }
}

/// The definition of a topic config, or INVALID_CONFIG when Kafka has none of that name.
pub fn known(name: &str) -> Result<&'static ConfigDef> {
    definition(name)
        .ok_or_else(|| Error::InvalidConfig(kaas_shared::topic_configs::ConfigError::Unknown { name: name.to_owned() }.to_string()))
}

/// Checks one `name=value` the way Kafka's topic config validation does.
pub fn validate(name: &str, value: &str) -> Result<&'static ConfigDef> {
    kaas_shared::topic_configs::check(name, value).map_err(|e| Error::InvalidConfig(e.to_string()))
}

/// Checks every entry of a topic's config map, then what Kafka's `LogConfig.validateValues`
/// checks across entries, on the topic's configs over the broker's defaults.
pub fn validate_all(configs: &BTreeMap<String, String>, broker: &LogConfig) -> Result<()> {
    configs.iter().try_for_each(|(k, v)| validate(k, v).map(drop))?;
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
