//! Kafka's rules for topic names and topic configs, with messages meant for `kubectl describe`.
//!
//! The CRD schema already rejects what a schema can express (name characters, length, shrinking
//! partitions); these checks add what it cannot (every config key and value) and protect
//! objects stored before a schema tightened.

use std::collections::BTreeMap;

use kaas_shared::broker_settings::{self, ValueKind};
use kaas_shared::config_value::{boolean, one_of, whole};
use kaas_shared::topic_configs;

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

/// Checks every key and value of a topic config against Kafka's topic configs
/// ([`topic_configs::TOPIC_CONFIGS`], the table the broker checks too); returns one message per
/// problem.
pub fn topic_configs(configs: &BTreeMap<String, String>) -> Result<(), Vec<String>> {
    let problems: Vec<String> = configs
        .iter()
        .filter_map(|(key, value)| topic_configs::check(key, value).err())
        .map(|e| e.to_string())
        .collect();
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}

/// Checks a KafkaCluster's `config`: every key must be a broker setting kaas knows
/// ([`broker_settings::SETTINGS`], by Kafka's name) with a value of its kind; keys the operator
/// sets itself, Kafka settings kaas does not take and unknown keys are refused, each with a
/// message that says why (never passed on and silently ignored).
pub fn broker_configs(configs: &BTreeMap<String, String>) -> Result<(), Vec<String>> {
    let problems: Vec<String> = configs
        .iter()
        .filter_map(|(key, value)| {
            let setting = match broker_settings::lookup(key) {
                Ok(setting) => setting,
                Err(why) => return Some(why),
            };
            let checked = match setting.kind {
                ValueKind::Whole { min, max } => whole(value, min, max),
                ValueKind::Bool => boolean(value),
                ValueKind::OneOf(allowed) => one_of(value, allowed),
                ValueKind::Text => Ok(()),
            };
            checked
                .err()
                .map(|what| format!("broker config {key:?}: value {value:?} {what}"))
        })
        .collect();
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}

/// The environment variable of a broker setting's flag, for a key [`broker_configs`] accepts.
pub fn broker_env_name(key: &str) -> Option<&'static str> {
    broker_settings::lookup(key).ok().map(|s| s.env)
}

/// Whether an environment variable name is one the operator sets on brokers (or may set in a
/// later version): every broker flag reads a `KAAS_*` variable, and `MY_POD_*` carry the
/// downward API.
pub fn is_operator_env(name: &str) -> bool {
    name.starts_with("KAAS_") || name.starts_with("MY_POD_")
}

/// Checks `podTemplate.env`: names the operator sets are refused (the CRD's rule does the same
/// for new objects; this catches objects stored before it).
pub fn pod_env(env: &[k8s_openapi::api::core::v1::EnvVar]) -> Result<(), String> {
    let refused: Vec<&str> = env
        .iter()
        .map(|e| e.name.as_str())
        .filter(|name| is_operator_env(name))
        .collect();
    if refused.is_empty() {
        return Ok(());
    }
    Err(format!(
        "podTemplate.env sets {}: names starting with KAAS_ or MY_POD_ are set by the operator; broker settings go in spec.config",
        refused.join(", ")
    ))
}

/// The broker's `--drain-timeout-ms` default (`drain.timeout.ms`), which the operator cannot
/// read from the broker: keep it equal to the flag's.
pub const DEFAULT_DRAIN_TIMEOUT_MS: i64 = 30_000;

/// Checks that a broker's termination grace period outlasts its drain: the kubelet kills the
/// broker when the grace period ends, and a broker killed mid-drain leaves its partitions to be
/// recovered instead of handed over. `drain_timeout` is the `drain.timeout.ms` config value.
pub fn grace_period(grace_seconds: i64, drain_timeout: Option<&str>) -> Result<(), String> {
    let drain_ms = drain_timeout
        .and_then(|v| v.trim().parse::<i64>().ok())
        .unwrap_or(DEFAULT_DRAIN_TIMEOUT_MS);
    if grace_seconds.saturating_mul(1000) > drain_ms {
        return Ok(());
    }
    Err(format!(
        "the termination grace period ({grace_seconds} s) must exceed drain.timeout.ms ({drain_ms} ms): the kubelet would kill brokers before they hand their partitions over"
    ))
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
            r#"config "retention.ms": value "soon""#,
            "true or false",
        ] {
            assert!(all.contains(says), "missing {says:?} in {all}");
        }
    }

    #[test]
    fn broker_config_keys() {
        assert!(
            broker_configs(&configs(&[
                ("log.retention.ms", "-1"),
                ("auto.create.topics.enable", "TRUE"),
                ("num.partitions", "3"),
                ("log.format", "json"),
            ]))
            .is_ok()
        );
        let problems = broker_configs(&configs(&[
            ("Log.Retention", "1"),
            ("listen", "x"),
            ("advertised.listeners", "PLAINTEXT://x:9092"),
            ("log.retention.hours", "1"),
            ("num.partitions", "0"),
            ("log.cleaner.enable", "yes"),
            ("log.format", "xml"),
        ]))
        .unwrap_err();
        assert_eq!(problems.len(), 7, "{problems:?}");
        let all = problems.join("\n");
        for says in [
            r#""Log.Retention" is not a broker setting kaas knows"#,
            r#""listen" is set by the operator from spec.listener"#,
            r#""advertised.listeners" is set by the operator from spec.listener"#,
            r#""log.retention.hours" is not supported by kaas: set log.retention.ms"#,
            r#""num.partitions": value "0" must be at least 1"#,
            r#""log.cleaner.enable": value "yes" must be true or false"#,
            r#""log.format": value "xml" must be one of text, json"#,
        ] {
            assert!(all.contains(says), "missing {says:?} in {all}");
        }
        assert_eq!(
            broker_env_name("log.retention.ms"),
            Some("KAAS_LOG_RETENTION_MS")
        );
        assert_eq!(
            broker_env_name("num.partitions"),
            Some("KAAS_DEFAULT_PARTITIONS")
        );
        assert_eq!(broker_env_name("listen"), None);
    }

    #[test]
    fn the_grace_period_outlasts_the_drain() {
        assert!(grace_period(60, None).is_ok());
        assert!(grace_period(31, Some("30000")).is_ok());
        let e = grace_period(30, None).unwrap_err();
        assert!(
            e.contains("(30 s) must exceed drain.timeout.ms (30000 ms)"),
            "{e}"
        );
        assert!(grace_period(60, Some("120000")).is_err());
    }

    #[test]
    fn pod_env_cannot_set_what_the_operator_sets() {
        let var = |name: &str| k8s_openapi::api::core::v1::EnvVar {
            name: name.into(),
            value: Some("x".into()),
            ..Default::default()
        };
        assert!(pod_env(&[var("RUST_BACKTRACE"), var("HTTPS_PROXY")]).is_ok());
        let e = pod_env(&[var("KAAS_LISTEN"), var("TZ"), var("MY_POD_IP")]).unwrap_err();
        assert!(
            e.contains("sets KAAS_LISTEN, MY_POD_IP: names starting with KAAS_"),
            "{e}"
        );
    }
}
