//! Kafka's topic-level configs: their names, value kinds, defaults and the per-value checks.
//!
//! One table for both artifacts: the broker checks CreateTopics and Alter*Configs against it and
//! describes topics from it; the operator checks a KafkaTopic's `spec.config` against it before
//! it writes the topic file. A config Kafka defines but kaas has no use for (tiered storage,
//! replication throttles) is still accepted and described, as Kafka does, so that tools that
//! copy a topic's configs from an Apache Kafka cluster (MirrorMaker 2, Cruise Control, GitOps
//! exports) work unchanged.

use crate::config_value;

/// Kafka's largest `int` config value.
const INT_MAX: i64 = i32::MAX as i64;

/// The value kind of a config, with what it accepts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind {
    /// A whole number in `min..=max`.
    Long { min: i64, max: i64 },
    /// A whole number that is also a Java `int`, in `min..=max`.
    Int { min: i64, max: i64 },
    /// A number in `min..=max`.
    Double { min: f64, max: f64 },
    /// `true` or `false`, any case.
    Bool,
    /// One of the listed words.
    Choice(&'static [&'static str]),
    /// A comma-separated list of the listed words (any words when none are listed).
    List(&'static [&'static str]),
}

/// One topic config Kafka defines.
#[derive(Debug, Clone, Copy)]
pub struct ConfigDef {
    pub name: &'static str,
    pub kind: Kind,
    /// The default when the broker's own settings do not supply one.
    pub default: &'static str,
    /// What it does in kaas (DescribeConfigs' documentation).
    pub doc: &'static str,
}

const CLEANUP: &[&str] = &["delete", "compact"];
const COMPRESSION: &[&str] = &["uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"];
const TIMESTAMP: &[&str] = &["CreateTime", "LogAppendTime"];

const fn long(min: i64) -> Kind {
    Kind::Long { min, max: i64::MAX }
}

const fn int(min: i64) -> Kind {
    Kind::Int { min, max: INT_MAX }
}

/// Every topic config of Kafka 4.4 that a client may set or read (Kafka's `LogConfig`, without
/// its internal ones).
#[rustfmt::skip]
pub const TOPIC_CONFIGS: &[ConfigDef] = &[
    ConfigDef { name: "cleanup.policy", kind: Kind::List(CLEANUP), default: "delete", doc: "delete: retention.ms/retention.bytes delete old segments; compact: the log cleaner keeps the latest record of each key." },
    ConfigDef { name: "compression.type", kind: Kind::Choice(COMPRESSION), default: "producer", doc: "Batches are stored as the producer sent them." },
    ConfigDef { name: "compression.gzip.level", kind: int(-1), default: "-1", doc: "Unused: batches are stored as sent." },
    ConfigDef { name: "compression.lz4.level", kind: int(1), default: "9", doc: "Unused: batches are stored as sent." },
    ConfigDef { name: "compression.zstd.level", kind: int(-131072), default: "3", doc: "Unused: batches are stored as sent." },
    ConfigDef { name: "delete.retention.ms", kind: long(0), default: "86400000", doc: "How long a tombstone stays after the clean that first saw it." },
    ConfigDef { name: "errors.deadletterqueue.group.enable", kind: Kind::Bool, default: "false", doc: "Accepted for share groups' dead-letter queues (KIP-1191); kaas has no share groups yet." },
    ConfigDef { name: "file.delete.delay.ms", kind: long(0), default: "60000", doc: "Delay before a deleted segment is unlinked." },
    ConfigDef { name: "flush.messages", kind: long(1), default: "1", doc: "kaas fsyncs before every acknowledgement." },
    ConfigDef { name: "flush.ms", kind: long(0), default: "0", doc: "kaas fsyncs before every acknowledgement." },
    ConfigDef { name: "follower.replication.throttled.replicas", kind: Kind::List(&[]), default: "", doc: "No followers in kaas." },
    ConfigDef { name: "index.interval.bytes", kind: int(0), default: "4096", doc: "Bytes between offset index entries." },
    ConfigDef { name: "leader.replication.throttled.replicas", kind: Kind::List(&[]), default: "", doc: "No followers in kaas." },
    ConfigDef { name: "local.retention.bytes", kind: long(-2), default: "-2", doc: "Tiered storage is not used." },
    ConfigDef { name: "local.retention.ms", kind: long(-2), default: "-2", doc: "Tiered storage is not used." },
    ConfigDef { name: "max.compaction.lag.ms", kind: long(1), default: "9223372036854775807", doc: "Longest a record stays uncompacted (also caps segment.ms on compacted topics)." },
    ConfigDef { name: "max.decompressed.message.bytes", kind: Kind::Int { min: 1, max: 2_147_483_639 }, default: "2147483639", doc: "Accepted; kaas stores batches as sent and does not decompress them on produce." },
    ConfigDef { name: "max.message.bytes", kind: int(0), default: "1048588", doc: "Largest record batch accepted." },
    ConfigDef { name: "message.timestamp.after.max.ms", kind: long(0), default: "3600000", doc: "How far in the future a record's CreateTime may be; later ones are refused with INVALID_TIMESTAMP." },
    ConfigDef { name: "message.timestamp.before.max.ms", kind: long(0), default: "9223372036854775807", doc: "How far in the past a record's CreateTime may be; older ones are refused with INVALID_TIMESTAMP." },
    ConfigDef { name: "message.timestamp.type", kind: Kind::Choice(TIMESTAMP), default: "CreateTime", doc: "CreateTime or LogAppendTime." },
    ConfigDef { name: "min.cleanable.dirty.ratio", kind: Kind::Double { min: 0.0, max: 1.0 }, default: "0.5", doc: "Share of the log not yet cleaned that starts a clean." },
    ConfigDef { name: "min.compaction.lag.ms", kind: long(0), default: "0", doc: "Shortest time a record stays uncompacted." },
    ConfigDef { name: "min.insync.replicas", kind: int(1), default: "1", doc: "The shared volume is the only copy." },
    ConfigDef { name: "preallocate", kind: Kind::Bool, default: "false", doc: "Segments are not preallocated." },
    ConfigDef { name: "remote.copy.lag.bytes", kind: long(-1), default: "-1", doc: "Tiered storage is not used." },
    ConfigDef { name: "remote.copy.lag.ms", kind: long(-1), default: "0", doc: "Tiered storage is not used." },
    ConfigDef { name: "remote.log.copy.disable", kind: Kind::Bool, default: "false", doc: "Tiered storage is not used." },
    ConfigDef { name: "remote.log.delete.on.disable", kind: Kind::Bool, default: "false", doc: "Tiered storage is not used." },
    ConfigDef { name: "remote.storage.enable", kind: Kind::Bool, default: "false", doc: "kaas has no tiered storage: true is refused." },
    ConfigDef { name: "retention.bytes", kind: long(-1), default: "-1", doc: "Largest partition size before old segments are deleted." },
    ConfigDef { name: "retention.ms", kind: long(-1), default: "604800000", doc: "Age after which segments are deleted." },
    ConfigDef { name: "segment.bytes", kind: int(1024 * 1024), default: "1073741824", doc: "Segment size before a roll." },
    ConfigDef { name: "segment.index.bytes", kind: int(4), default: "10485760", doc: "Largest offset index." },
    ConfigDef { name: "segment.jitter.ms", kind: long(0), default: "0", doc: "Random jitter subtracted from segment.ms." },
    ConfigDef { name: "segment.ms", kind: long(1), default: "604800000", doc: "Segment age before a roll." },
    ConfigDef { name: "unclean.leader.election.enable", kind: Kind::Bool, default: "false", doc: "No replicas to elect from." },
];

/// The definition of a topic config, if Kafka has one of that name.
pub fn definition(name: &str) -> Option<&'static ConfigDef> {
    TOPIC_CONFIGS.iter().find(|d| d.name == name)
}

/// Why a topic config was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    /// Kafka has no topic config of that name.
    #[error("{name:?} is not a Kafka topic config")]
    Unknown { name: String },
    /// The value is not one the config takes; `why` completes "the value ...".
    #[error("config {name:?}: value {value:?} {why}")]
    Invalid {
        name: String,
        value: String,
        why: String,
    },
}

/// Checks one `name=value` the way Kafka's `LogConfig` validation does.
pub fn check(name: &str, value: &str) -> Result<&'static ConfigDef, ConfigError> {
    let def = definition(name).ok_or_else(|| ConfigError::Unknown {
        name: name.to_owned(),
    })?;
    check_value(def.kind, value)
        .and_then(|()| check_supported(name, value))
        .map_err(|why| ConfigError::Invalid {
            name: name.to_owned(),
            value: value.to_owned(),
            why,
        })?;
    Ok(def)
}

/// What kaas refuses although the value is of the right kind: tiered storage turned on (a
/// Kafka broker without `remote.log.storage.system.enable` refuses it the same way, rather
/// than let a user believe old segments go to object storage).
fn check_supported(name: &str, value: &str) -> Result<(), String> {
    if name == "remote.storage.enable" && value.trim().eq_ignore_ascii_case("true") {
        return Err("is not supported: kaas has no tiered storage".into());
    }
    Ok(())
}

/// What is wrong with `value` for a config of `kind`, as words that complete "the value ...".
fn check_value(kind: Kind, value: &str) -> Result<(), String> {
    match kind {
        Kind::Long { min, max } | Kind::Int { min, max } => config_value::whole(value, min, max),
        Kind::Double { min, max } => config_value::number(value, min, max),
        Kind::Bool => config_value::boolean(value),
        Kind::Choice(words) => config_value::one_of(value, words),
        Kind::List(words) => config_value::list_of(value, words),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn values_are_checked_as_kafka_does() {
        for (name, value) in [
            ("retention.ms", "-1"),
            ("cleanup.policy", "compact,delete"),
            ("cleanup.policy", ""),
            ("compression.type", "zstd"),
            ("min.cleanable.dirty.ratio", "0.5"),
            ("preallocate", "TRUE"),
            ("segment.bytes", "1048576"),
            ("max.decompressed.message.bytes", "2147483639"),
            ("errors.deadletterqueue.group.enable", "true"),
            ("remote.storage.enable", "false"),
            ("leader.replication.throttled.replicas", "0:1,1:2"),
        ] {
            assert!(check(name, value).is_ok(), "{name}={value}");
        }
        for (name, value, says) in [
            ("retention.ms", "soon", "is not a whole number"),
            ("retention.bytes", "-2", "must be at least -1"),
            (
                "cleanup.policy",
                "forever",
                "comma-separated list of delete, compact",
            ),
            ("segment.bytes", "100", "must be at least 1048576"),
            (
                "max.message.bytes",
                "3000000000",
                "must be at most 2147483647",
            ),
            (
                "max.decompressed.message.bytes",
                "2147483640",
                "must be at most 2147483639",
            ),
            ("min.cleanable.dirty.ratio", "2", "must be between 0 and 1"),
            ("preallocate", "yes", "true or false"),
            (
                "message.timestamp.type",
                "Now",
                "must be one of CreateTime, LogAppendTime",
            ),
            (
                "remote.storage.enable",
                "TRUE",
                "kaas has no tiered storage",
            ),
        ] {
            let e = check(name, value).unwrap_err().to_string();
            assert!(e.contains(says), "{name}={value}: {e}");
            assert!(e.contains(&format!("{value:?}")), "{e}");
        }
        assert_eq!(
            check("no.such.thing", "1").unwrap_err(),
            ConfigError::Unknown {
                name: "no.such.thing".into()
            }
        );
    }

    #[test]
    fn every_default_passes_its_own_check() {
        for def in TOPIC_CONFIGS {
            assert!(check(def.name, def.default).is_ok(), "{}", def.name);
        }
        let mut names: Vec<&str> = TOPIC_CONFIGS.iter().map(|d| d.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), TOPIC_CONFIGS.len(), "a config is listed twice");
    }
}
