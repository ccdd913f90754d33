//! Consumer lag of the groups this broker coordinates: committed offset against the high
//! watermark of the partition's leader. The leader is this broker (its own partition), or another
//! one whose high watermark the controller handed back on the heartbeat (as of that leader's
//! last beat, so up to about two beat intervals old). `/metrics` and the heartbeat's group
//! summaries both read lag from here.

use std::collections::BTreeMap;
use std::sync::Arc;

use kaas_storage::Partition;

use crate::broker::Broker;
use crate::groups::ListedGroup;

/// Partitions this broker leads, by topic and index.
pub type Led = BTreeMap<String, BTreeMap<i32, Arc<Partition>>>;

/// One committed partition of a group.
#[derive(Debug, Clone)]
pub struct PartitionLag {
    pub topic: String,
    pub partition: i32,
    pub committed: i64,
    /// High watermark minus committed offset; `None` when no high watermark is known.
    pub lag: Option<i64>,
    /// How old the oldest uncommitted record is (0 when caught up), only when asked for: from
    /// the batch header for led partitions, estimated from the handed-back high watermarks'
    /// history for the others (the control plane's `remote_lag_seconds`).
    pub seconds: Option<f64>,
    /// Whether the high watermark came from another broker (through the controller).
    pub remote: bool,
}

/// One coordinated group with its committed partitions.
#[derive(Debug, Clone)]
pub struct GroupLag {
    pub group: ListedGroup,
    pub partitions: Vec<PartitionLag>,
}

impl GroupLag {
    /// The lag summed over the partitions whose high watermark is known.
    pub fn total(&self) -> i64 {
        self.partitions.iter().filter_map(|p| p.lag).sum()
    }
}

/// The partitions this broker leads.
pub fn led(broker: &Broker) -> Led {
    let mut led = Led::new();
    for topic in broker.topics.list() {
        for (index, p) in topic.partitions().iter().enumerate() {
            if p.is_leader() {
                led.entry(topic.name.clone()).or_default().insert(index as i32, p.clone());
            }
        }
    }
    led
}

/// Every coordinated group with the lag of each partition it committed. Touches segment files
/// when `with_seconds` (lag in time reads batch headers): call it where blocking is fine.
pub fn groups(broker: &Broker, led: &Led, with_seconds: bool) -> Vec<GroupLag> {
    let now_ms = crate::broker::now_ms();
    let control = broker.cluster.as_ref().map(|c| &c.link.control);
    let mut out = Vec::new();
    for group in broker.groups.list(&[], &[]) {
        let Ok(offsets) = broker.groups.fetch_offsets(&group.group_id, None, None) else { continue };
        let mut partitions = Vec::new();
        for (topic, committed) in offsets {
            let leaders = led.get(&topic);
            for (partition, offset) in committed {
                let Some(offset) = offset.filter(|o| o.offset >= 0) else { continue };
                let leader = leaders.and_then(|ps| ps.get(&partition));
                let (high_watermark, remote) = match leader {
                    Some(p) => (Some(p.high_watermark()), false),
                    None => (control.and_then(|c| c.remote_high_watermark(&topic, partition)), true),
                };
                let seconds = match (with_seconds, leader) {
                    (false, _) => None,
                    (true, Some(p)) => lag_seconds(p, offset.offset, now_ms),
                    (true, None) => control.and_then(|c| c.remote_lag_seconds(&topic, partition, offset.offset, now_ms)),
                };
                partitions.push(PartitionLag {
                    topic: topic.clone(),
                    partition,
                    committed: offset.offset,
                    lag: high_watermark.map(|hw| (hw - offset.offset).max(0)),
                    seconds,
                    remote: remote && high_watermark.is_some(),
                });
            }
        }
        out.push(GroupLag { group, partitions });
    }
    out
}

/// How old the oldest record at or after `committed` is (0 when there is none: caught up);
/// `None` when it cannot be read (the partition moved away meanwhile).
fn lag_seconds(partition: &Partition, committed: i64, now_ms: i64) -> Option<f64> {
    match partition.first_timestamp_from(committed) {
        Ok(Some(ts)) => Some((now_ms - ts).max(0) as f64 / 1000.0),
        Ok(None) => Some(0.0),
        Err(_) => None,
    }
}
