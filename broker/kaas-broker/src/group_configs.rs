//! Group configs (KIP-932's and KIP-848's per-group settings, `kafka-configs --entity-type
//! groups`): the consumer- and share-group settings a group may override, validated against
//! Kafka's bounds.
//!
//! They live in one file on the volume, `__cluster/group-configs.json`, written as
//! [`crate::controller_file`] says (the broker in local mode, the controller broker in a
//! cluster; others forward the change), and every broker reads it again every second: a
//! share partition's leader, which may be any broker, needs its group's lock duration,
//! delivery limit, isolation level and start-offset rule.

use std::collections::BTreeMap;
use std::time::Duration;

use kaas_coordinator::share_partition::ShareSettings;
use kaas_shared::fs::FsRef;
use kaas_shared::layout::Layout;
use parking_lot::RwLock;
use serde::{Deserialize, Serialize};

use crate::controller_file::{ControllerFile, WriteError};

/// The file's name in `__cluster/`.
pub const GROUP_CONFIGS_FILE: &str = "group-configs.json";
/// Groups with overrides at most (an alter adding more is refused).
pub const MAX_GROUPS: usize = 10_000;

/// A group config's definition: name, Kafka's default, and its check.
#[derive(Debug, Clone, Copy)]
pub struct GroupConfigDef {
    pub name: &'static str,
    pub default: &'static str,
    /// The broker-wide setting it overrides (DescribeConfigs' synonym).
    pub broker_name: &'static str,
    pub check: Check,
    pub doc: &'static str,
}

#[derive(Debug, Clone, Copy)]
pub enum Check {
    Int { min: i64, max: i64 },
    OneOf(&'static [&'static str]),
    /// `latest`, `earliest` or `by_duration:<ISO-8601 duration>`.
    OffsetReset,
}

/// The overridable group configs, with Kafka 4.4's defaults and bounds. The consumer-group
/// ones default to the broker's settings (`--group-consumer-*`), shown for their `default`.
pub const GROUP_CONFIGS: &[GroupConfigDef] = &[
    GroupConfigDef { name: "consumer.session.timeout.ms", default: "45000", broker_name: "group.consumer.session.timeout.ms", check: Check::Int { min: 1000, max: 3_600_000 }, doc: "A consumer group member (KIP-848) silent this long is fenced." },
    GroupConfigDef { name: "consumer.heartbeat.interval.ms", default: "5000", broker_name: "group.consumer.heartbeat.interval.ms", check: Check::Int { min: 500, max: 3_600_000 }, doc: "How often consumer group members (KIP-848) heartbeat." },
    GroupConfigDef { name: "share.auto.offset.reset", default: "latest", broker_name: "", check: Check::OffsetReset, doc: "Where a share group starts in a partition it has no state for: latest, earliest or by_duration:<duration>." },
    GroupConfigDef { name: "share.record.lock.duration.ms", default: "30000", broker_name: "group.share.record.lock.duration.ms", check: Check::Int { min: 1000, max: 3_600_000 }, doc: "How long a delivered record stays with the member it was delivered to." },
    GroupConfigDef { name: "share.delivery.count.limit", default: "5", broker_name: "group.share.delivery.count.limit", check: Check::Int { min: 2, max: 10 }, doc: "Deliveries of a record after which it is archived instead of delivered again." },
    GroupConfigDef { name: "share.isolation.level", default: "read_uncommitted", broker_name: "", check: Check::OneOf(&["read_uncommitted", "read_committed"]), doc: "Whether a share group sees records of transactions not yet committed." },
    GroupConfigDef { name: "share.session.timeout.ms", default: "45000", broker_name: "group.share.session.timeout.ms", check: Check::Int { min: 1000, max: 3_600_000 }, doc: "A share group member silent this long leaves the group." },
    GroupConfigDef { name: "share.heartbeat.interval.ms", default: "5000", broker_name: "group.share.heartbeat.interval.ms", check: Check::Int { min: 500, max: 3_600_000 }, doc: "How often share group members heartbeat." },
];

/// Why a group config change was refused.
#[derive(Debug, Clone, thiserror::Error)]
pub enum GroupConfigError {
    #[error("{0}")]
    Invalid(String),
    #[error("at most {MAX_GROUPS} groups may have configs")]
    TooMany,
    #[error("the group configs were not changed: {0}")]
    File(#[from] WriteError),
}

/// One change: each name set to a value or reset (`None`).
pub type GroupConfigChange = Vec<(String, Option<String>)>;

#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
struct GroupConfigFile {
    groups: BTreeMap<String, BTreeMap<String, String>>,
}

/// Where a share group starts in a partition it has no state for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetReset {
    Earliest,
    Latest,
    /// The first record at or after now minus this.
    ByDuration(Duration),
}

/// A share group's effective settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShareGroupSettings {
    pub partition: ShareSettings,
    pub reset: OffsetReset,
    pub read_committed: bool,
    pub session_timeout: Duration,
    pub heartbeat_interval: Duration,
}

/// The served group configs.
#[derive(Debug)]
pub struct GroupConfigs {
    file: ControllerFile,
    served: RwLock<BTreeMap<String, BTreeMap<String, String>>>,
    max_locks: usize,
}

impl GroupConfigs {
    pub fn open(fs: FsRef, layout: &Layout, max_locks: usize) -> Result<GroupConfigs, kaas_shared::Error> {
        let configs = GroupConfigs {
            file: ControllerFile::new(fs, layout.cluster_dir().join(GROUP_CONFIGS_FILE), "group config file"),
            served: RwLock::new(BTreeMap::new()),
            max_locks,
        };
        configs.refresh()?;
        Ok(configs)
    }

    /// Reads the file again (every second in a cluster). Blocking.
    pub fn refresh(&self) -> Result<(), kaas_shared::Error> {
        self.file.refresh(|f: GroupConfigFile| *self.served.write() = f.groups)
    }

    /// The groups with overrides.
    pub fn groups(&self) -> Vec<String> {
        self.served.read().keys().cloned().collect()
    }

    /// A group's overrides.
    pub fn of(&self, group: &str) -> BTreeMap<String, String> {
        self.served.read().get(group).cloned().unwrap_or_default()
    }

    /// A share group's settings: its overrides over Kafka's defaults.
    pub fn share_settings(&self, group: &str) -> ShareGroupSettings {
        let set = self.of(group);
        let int = |name: &str, default: i64| set.get(name).and_then(|v| v.parse::<i64>().ok()).unwrap_or(default);
        let ms = |name: &str, default: i64| Duration::from_millis(u64::try_from(int(name, default)).unwrap_or(0));
        ShareGroupSettings {
            partition: ShareSettings {
                lock_duration: ms("share.record.lock.duration.ms", 30_000),
                delivery_limit: i16::try_from(int("share.delivery.count.limit", 5)).unwrap_or(5),
                max_locks: self.max_locks,
            },
            reset: set.get("share.auto.offset.reset").and_then(|v| parse_reset(v)).unwrap_or(OffsetReset::Latest),
            read_committed: set.get("share.isolation.level").is_some_and(|v| v == "read_committed"),
            session_timeout: ms("share.session.timeout.ms", 45_000),
            heartbeat_interval: ms("share.heartbeat.interval.ms", 5_000),
        }
    }

    /// A consumer group's `consumer.session.timeout.ms` and `consumer.heartbeat.interval.ms`
    /// overrides, if it sets them.
    pub fn consumer_overrides(&self, group: &str) -> (Option<Duration>, Option<Duration>) {
        let set = self.of(group);
        let ms = |name: &str| set.get(name).and_then(|v| v.parse::<u64>().ok()).map(Duration::from_millis);
        (ms("consumer.session.timeout.ms"), ms("consumer.heartbeat.interval.ms"))
    }

    /// Applies each group's change (all of one group's or none), once the file is fsynced;
    /// `validate_only` checks without writing. Blocking.
    pub fn alter(&self, changes: Vec<(String, GroupConfigChange)>, validate_only: bool, epoch: i64) -> Vec<Result<(), GroupConfigError>> {
        let checked: Vec<Result<(), GroupConfigError>> = changes.iter().map(|(_, c)| validate(c)).collect();
        let altered = self.file.update(epoch, |f: &GroupConfigFile| self.serve(f), |file: &mut GroupConfigFile| {
            let mut groups = file.groups.clone();
            let results: Vec<Result<(), GroupConfigError>> = changes
                .iter()
                .zip(&checked)
                .map(|((group, change), ok)| {
                    ok.clone()?;
                    let mut set = groups.get(group).cloned().unwrap_or_default();
                    for (name, value) in change {
                        match value {
                            Some(v) => set.insert(name.clone(), v.clone()),
                            None => set.remove(name),
                        };
                    }
                    if set.is_empty() {
                        groups.remove(group);
                    } else {
                        if !groups.contains_key(group) && groups.len() >= MAX_GROUPS {
                            return Err(GroupConfigError::TooMany);
                        }
                        groups.insert(group.clone(), set);
                    }
                    Ok(())
                })
                .collect();
            if !validate_only {
                file.groups = groups;
            }
            results
        });
        match altered {
            Ok(results) => results,
            Err(e) => checked.into_iter().map(|c| c.and(Err(GroupConfigError::File(e.clone())))).collect(),
        }
    }

    /// Serves what the file holds.
    fn serve(&self, file: &GroupConfigFile) {
        *self.served.write() = file.groups.clone();
    }

    /// Forgets a deleted group's configs (as Kafka does on DeleteGroups). Blocking.
    pub fn forget(&self, group: &str, epoch: i64) -> Result<(), WriteError> {
        self.file.update(epoch, |f: &GroupConfigFile| self.serve(f), |file| {
            file.groups.remove(group);
        })
    }
}

pub fn definition(name: &str) -> Option<&'static GroupConfigDef> {
    GROUP_CONFIGS.iter().find(|d| d.name == name)
}

fn validate(change: &GroupConfigChange) -> Result<(), GroupConfigError> {
    for (name, value) in change {
        let def = definition(name).ok_or_else(|| GroupConfigError::Invalid(format!("unknown group config {name}")))?;
        let Some(value) = value else { continue };
        let ok = match def.check {
            Check::Int { min, max } => value.trim().parse::<i64>().is_ok_and(|v| (min..=max).contains(&v)),
            Check::OneOf(values) => values.contains(&value.as_str()),
            Check::OffsetReset => parse_reset(value).is_some(),
        };
        if !ok {
            let expected = match def.check {
                Check::Int { min, max } => format!("an integer in [{min}, {max}]"),
                Check::OneOf(values) => values.join(", "),
                Check::OffsetReset => "latest, earliest or by_duration:<ISO-8601 duration>".into(),
            };
            return Err(GroupConfigError::Invalid(format!("invalid value {value:?} for {name}: expected {expected}")));
        }
    }
    Ok(())
}

/// `latest`, `earliest`, or `by_duration:` and an ISO-8601 duration of days, hours, minutes and
/// seconds (`P1DT2H`, `PT30M`, `PT0.5S`), as Java's `Duration.parse`.
fn parse_reset(value: &str) -> Option<OffsetReset> {
    match value {
        "latest" => Some(OffsetReset::Latest),
        "earliest" => Some(OffsetReset::Earliest),
        _ => value.strip_prefix("by_duration:").and_then(parse_iso_duration).map(OffsetReset::ByDuration),
    }
}

fn parse_iso_duration(s: &str) -> Option<Duration> {
    let rest = s.trim().strip_prefix('P').or_else(|| s.trim().strip_prefix('p'))?;
    let (days, time) = match rest.split_once(['T', 't']) {
        Some((d, t)) => (d, t),
        None => (rest, ""),
    };
    let mut total = 0f64;
    if !days.is_empty() {
        total += days.strip_suffix(['D', 'd'])?.parse::<f64>().ok()? * 86_400.0;
    }
    let mut number = String::new();
    for c in time.chars() {
        let unit = match c.to_ascii_uppercase() {
            'H' => 3600.0,
            'M' => 60.0,
            'S' => 1.0,
            _ => {
                number.push(c);
                continue;
            }
        };
        total += number.parse::<f64>().ok()? * unit;
        number.clear();
    }
    (number.is_empty() && total.is_finite() && total >= 0.0 && (days.len() + time.len()) > 0).then(|| Duration::from_secs_f64(total))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn offset_reset_values() {
        assert_eq!(parse_reset("earliest"), Some(OffsetReset::Earliest));
        assert_eq!(parse_reset("by_duration:PT1H30M"), Some(OffsetReset::ByDuration(Duration::from_secs(5400))));
        assert_eq!(parse_reset("by_duration:P1DT0.5S"), Some(OffsetReset::ByDuration(Duration::from_millis(86_400_500))));
        assert_eq!(parse_reset("by_duration:P"), None);
        assert_eq!(parse_reset("by_duration:PT5X"), None);
        assert_eq!(parse_reset("none"), None);
    }

    #[test]
    fn alter_validates_and_serves() {
        let fs: FsRef = std::sync::Arc::new(kaas_shared::fs::MemFs::new());
        let layout = Layout::new("/v");
        let configs = GroupConfigs::open(fs, &layout, 2000).unwrap();
        let set = |name: &str, value: &str| (name.to_string(), Some(value.to_string()));
        let results = configs.alter(
            vec![
                ("g".into(), vec![set("share.auto.offset.reset", "earliest"), set("share.record.lock.duration.ms", "15000")]),
                ("h".into(), vec![set("share.delivery.count.limit", "11")]),
                ("i".into(), vec![set("bogus", "1")]),
            ],
            false,
            crate::controller_file::LOCAL_MODE,
        );
        assert!(results[0].is_ok() && results[1].is_err() && results[2].is_err());
        let s = configs.share_settings("g");
        assert_eq!((s.reset, s.partition.lock_duration), (OffsetReset::Earliest, Duration::from_millis(15_000)));
        assert_eq!(configs.share_settings("h").partition.delivery_limit, 5);
        configs.alter(vec![("g".into(), vec![("share.auto.offset.reset".into(), None)])], false, 0);
        assert_eq!(configs.share_settings("g").reset, OffsetReset::Latest);
        configs.forget("g", 0).unwrap();
        assert!(configs.of("g").is_empty());
    }
}
