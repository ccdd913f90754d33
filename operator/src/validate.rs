//! Kafka's rules for topic names and topic configs, with messages meant for `kubectl describe`.
//!
//! The CRD schema already rejects what a schema can express (name characters, length, shrinking
//! partitions); these checks add what it cannot (every config key and value) and protect
//! objects stored before a schema tightened.

use std::collections::BTreeMap;

/// Kafka's maximum topic name length.
pub const MAX_TOPIC_NAME_LEN: usize = 249;

/// Checks a topic name the way Kafka's `Topic.validate` does, plus kaas's reserved prefix.
pub fn topic_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("topic name is empty".into());
    }
    if name == "." || name == ".." {
        return Err(format!("topic name {name:?} is not allowed"));
    }
    if name.len() > MAX_TOPIC_NAME_LEN {
        return Err(format!(
            "topic name is {} characters long; Kafka allows at most {MAX_TOPIC_NAME_LEN}",
            name.len()
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(format!(
            "topic name {name:?} contains {c:?}; Kafka allows only ASCII letters, digits, '.', '_' and '-'"
        ));
    }
    if name.starts_with("__") {
        return Err(format!(
            "topic name {name:?} starts with '__', which is reserved for kaas's internal state"
        ));
    }
    Ok(())
}

/// Kafka refuses two topics whose names differ only in '.' versus '_' (their metric names
/// collide).
pub fn collides(a: &str, b: &str) -> bool {
    a != b && a.replace('.', "_") == b.replace('.', "_")
}

enum Kind {
    Long { min: i64 },
    Int { min: i64 },
    Ratio,
    Bool,
    OneOf(&'static [&'static str]),
    ListOf(&'static [&'static str]),
    Text,
}

/// Every topic config kaas accepts, with Kafka's type and lower bound.
const TOPIC_CONFIGS: &[(&str, Kind)] = &[
    ("cleanup.policy", Kind::ListOf(&["delete", "compact"])),
    (
        "compression.type",
        Kind::OneOf(&["uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"]),
    ),
    ("delete.retention.ms", Kind::Long { min: 0 }),
    ("file.delete.delay.ms", Kind::Long { min: 0 }),
    ("flush.messages", Kind::Long { min: 1 }),
    ("flush.ms", Kind::Long { min: 0 }),
    ("follower.replication.throttled.replicas", Kind::Text),
    ("index.interval.bytes", Kind::Int { min: 0 }),
    ("leader.replication.throttled.replicas", Kind::Text),
    ("max.compaction.lag.ms", Kind::Long { min: 1 }),
    ("max.message.bytes", Kind::Int { min: 0 }),
    ("message.timestamp.after.max.ms", Kind::Long { min: 0 }),
    ("message.timestamp.before.max.ms", Kind::Long { min: 0 }),
    (
        "message.timestamp.type",
        Kind::OneOf(&["CreateTime", "LogAppendTime"]),
    ),
    ("min.cleanable.dirty.ratio", Kind::Ratio),
    ("min.compaction.lag.ms", Kind::Long { min: 0 }),
    ("min.insync.replicas", Kind::Int { min: 1 }),
    ("preallocate", Kind::Bool),
    ("retention.bytes", Kind::Long { min: -1 }),
    ("retention.ms", Kind::Long { min: -1 }),
    ("segment.bytes", Kind::Int { min: 1024 * 1024 }),
    ("segment.index.bytes", Kind::Int { min: 4 }),
    ("segment.jitter.ms", Kind::Long { min: 0 }),
    ("segment.ms", Kind::Long { min: 1 }),
    ("unclean.leader.election.enable", Kind::Bool),
];

/// Checks every key and value of a topic config; returns one message per problem.
pub fn topic_configs(configs: &BTreeMap<String, String>) -> Result<(), Vec<String>> {
    let problems: Vec<String> = configs
        .iter()
        .filter_map(|(key, value)| topic_config(key, value).err())
        .collect();
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}

fn topic_config(key: &str, value: &str) -> Result<(), String> {
    let Some((_, kind)) = TOPIC_CONFIGS.iter().find(|(k, _)| *k == key) else {
        return Err(format!(
            "config {key:?} is not a Kafka topic config kaas supports"
        ));
    };
    let bad = |what: String| format!("config {key:?}: value {value:?} {what}");
    match kind {
        Kind::Long { min } | Kind::Int { min } => {
            let max = if matches!(kind, Kind::Int { .. }) {
                i64::from(i32::MAX)
            } else {
                i64::MAX
            };
            let n: i64 = value
                .trim()
                .parse()
                .map_err(|_| bad("is not a whole number".into()))?;
            if n < *min {
                return Err(bad(format!("must be at least {min}")));
            }
            if n > max {
                return Err(bad(format!("must be at most {max}")));
            }
        }
        Kind::Ratio => {
            let r: f64 = value
                .trim()
                .parse()
                .map_err(|_| bad("is not a number".into()))?;
            if !(0.0..=1.0).contains(&r) {
                return Err(bad("must be between 0 and 1".into()));
            }
        }
        Kind::Bool => {
            if !value.eq_ignore_ascii_case("true") && !value.eq_ignore_ascii_case("false") {
                return Err(bad("must be true or false".into()));
            }
        }
        Kind::OneOf(allowed) => {
            if !allowed.contains(&value) {
                return Err(bad(format!("must be one of {}", allowed.join(", "))));
            }
        }
        Kind::ListOf(allowed) => {
            let items: Vec<&str> = value.split(',').map(str::trim).collect();
            if items.is_empty() || items.iter().any(|i| !allowed.contains(i)) {
                return Err(bad(format!(
                    "must be a comma-separated list of {}",
                    allowed.join(", ")
                )));
            }
        }
        Kind::Text => {}
    }
    Ok(())
}

/// Broker settings the operator renders itself; an override would break the pod.
const OPERATOR_OWNED_BROKER_KEYS: &[&str] = &[
    "listen",
    "advertise",
    "data.dir",
    "in.memory",
    "http.listen",
    "heartbeat.listen",
    "fence.timeout.ms",
    "session.timeout.ms",
];

/// Checks a KafkaCluster's broker config overrides: flag-shaped keys the operator does not own.
pub fn broker_configs(configs: &BTreeMap<String, String>) -> Result<(), Vec<String>> {
    let problems: Vec<String> = configs
        .keys()
        .filter_map(|key| {
            let shaped = !key.is_empty()
                && key.split('.').all(|part| {
                    !part.is_empty() && part.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
                });
            if !shaped {
                Some(format!(
                    "broker config {key:?} is not a broker setting name (lower-case words separated by '.')"
                ))
            } else if OPERATOR_OWNED_BROKER_KEYS.contains(&key.as_str()) {
                Some(format!("broker config {key:?} is set by the operator and cannot be overridden"))
            } else {
                None
            }
        })
        .collect();
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}

/// The environment variable a broker setting is passed in (`log.retention.ms` →
/// `KAAS_LOG_RETENTION_MS`); every broker flag has one.
pub fn broker_env_name(key: &str) -> String {
    format!("KAAS_{}", key.replace(['.', '-'], "_").to_ascii_uppercase())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn configs(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn topic_names_follow_kafka() {
        for ok in ["orders", "Orders_v2", "a.b-c", &"x".repeat(249)] {
            assert!(topic_name(ok).is_ok(), "{ok}");
        }
        for (bad, says) in [
            ("", "empty"),
            (".", "not allowed"),
            ("..", "not allowed"),
            ("a/b", "'/'"),
            ("é", "'é'"),
            ("__consumer_offsets", "reserved"),
        ] {
            let e = topic_name(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
        assert!(
            topic_name(&"x".repeat(250))
                .unwrap_err()
                .contains("at most 249")
        );
    }

    #[test]
    fn dot_underscore_collisions() {
        assert!(collides("a.b", "a_b"));
        assert!(!collides("a.b", "a.b"));
        assert!(!collides("a.b", "a-b"));
    }

    #[test]
    fn topic_configs_follow_kafka() {
        assert!(
            topic_configs(&configs(&[
                ("retention.ms", "-1"),
                ("cleanup.policy", "compact,delete"),
                ("compression.type", "zstd"),
                ("min.cleanable.dirty.ratio", "0.5"),
                ("preallocate", "TRUE"),
                ("segment.bytes", "1048576"),
            ]))
            .is_ok()
        );
        let problems = topic_configs(&configs(&[
            ("retention.ms", "soon"),
            ("retention.bytes", "-2"),
            ("cleanup.policy", "forever"),
            ("segment.bytes", "100"),
            ("max.message.bytes", "3000000000"),
            ("no.such.thing", "1"),
            ("preallocate", "yes"),
        ]))
        .unwrap_err();
        assert_eq!(problems.len(), 7, "{problems:?}");
        let all = problems.join("\n");
        for says in [
            r#""retention.ms": value "soon" is not a whole number"#,
            "must be at least -1",
            "comma-separated list of delete, compact",
            "must be at least 1048576",
            "must be at most 2147483647",
            r#""no.such.thing" is not a Kafka topic config"#,
            "true or false",
        ] {
            assert!(all.contains(says), "missing {says:?} in {all}");
        }
    }

    #[test]
    fn broker_config_keys() {
        assert!(broker_configs(&configs(&[("log.retention.ms", "1000")])).is_ok());
        let problems = broker_configs(&configs(&[
            ("Log.Retention", "1"),
            ("listen", "x"),
            ("a..b", "1"),
        ]))
        .unwrap_err();
        assert_eq!(problems.len(), 3, "{problems:?}");
        assert_eq!(broker_env_name("log.retention.ms"), "KAAS_LOG_RETENTION_MS");
    }
}
