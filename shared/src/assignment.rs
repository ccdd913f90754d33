//! `__cluster/assignment.json`: who leads every partition and coordinates every group shard.
//!
//! One writer, the controller (the holder of the `kaas-controller` Lease), writes it by
//! temp + fsync + rename; every broker reads it. The controller epoch (the Lease's
//! `leaseTransitions`) fences a deposed controller: readers refuse an assignment whose epoch is
//! below the Lease's, so a controller back from a pause cannot roll the cluster backwards.

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use serde::de::{IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::atomic_file::{read_json, write_json};
use crate::fs::{File, Fs, OpenMode};
use crate::layout::Layout;
use crate::names;
use crate::{Error, Result};

/// The schema of assignment.json.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Assignment {
    /// The writer's controller epoch (the Lease's leaseTransitions when it won).
    pub controller_epoch: i64,
    /// Grows by one with every assignment a controller writes; restarts nowhere.
    pub assignment_version: i64,
    /// The broker id of the controller that wrote this.
    pub controller_id: i32,
    /// The brokers this assignment places work on, with the addresses clients use.
    #[serde(default)]
    pub brokers: BTreeMap<i32, BrokerEndpoint>,
    /// Partition leadership, keyed by [`names::partition_key`].
    #[serde(default)]
    pub partitions: BTreeMap<String, PartitionAssignment>,
    /// Consumer-group shard coordinators, keyed by shard number.
    #[serde(default)]
    pub consumer_groups: BTreeMap<u32, ShardAssignment>,
    /// Transaction shard coordinators, keyed by shard number.
    #[serde(default)]
    pub transactions: BTreeMap<u32, ShardAssignment>,
}

/// Which write an assignment.json is: its three leading fields. A controller writes each
/// (epoch, version) once, so two files with one stamp hold the same assignment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Stamp {
    pub controller_epoch: i64,
    pub assignment_version: i64,
    pub controller_id: i32,
}

/// Where a broker's Kafka listener is, and its inter-broker listener.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BrokerEndpoint {
    /// The Kafka listener clients are told about.
    pub host: String,
    pub port: u16,
    /// `host:port` of the listener the other brokers call (markers, verification); `None`:
    /// they call the Kafka listener.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interbroker: Option<String>,
}

impl BrokerEndpoint {
    /// Whether clients are told the same address by both (the inter-broker one aside).
    pub fn same_client_address(&self, other: &BrokerEndpoint) -> bool {
        (&self.host, self.port) == (&other.host, other.port)
    }
}

/// One partition's leader.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PartitionAssignment {
    /// The topic incarnation this placement is for; a directory with another identity is never
    /// taken over for it.
    pub topic_id: Uuid,
    pub leader: i32,
    /// Only ever grows for a partition; the leader stamps its segments with it.
    pub leader_epoch: i32,
}

/// One consumer-group or transaction shard's coordinator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ShardAssignment {
    pub coordinator: i32,
    /// Only ever grows for a shard; fences the previous coordinator's writes.
    pub epoch: i32,
}

impl Assignment {
    /// Whether `self` is newer than `other`: a higher controller epoch, or the same epoch and a
    /// higher version.
    pub fn is_newer_than(&self, other: &Assignment) -> bool {
        (self.controller_epoch, self.assignment_version) > (other.controller_epoch, other.assignment_version)
    }

    /// Which write this is.
    pub fn stamp(&self) -> Stamp {
        Stamp { controller_epoch: self.controller_epoch, assignment_version: self.assignment_version, controller_id: self.controller_id }
    }

    /// The partitions `broker` leads, as (topic, partition, assignment).
    pub fn led_by(&self, broker: i32) -> impl Iterator<Item = (&str, i32, &PartitionAssignment)> {
        self.partitions.iter().filter(move |(_, p)| p.leader == broker).filter_map(|(key, p)| {
            names::parse_partition_key(key).ok().map(|(topic, partition)| (topic, partition, p))
        })
    }

    /// The leader of one partition.
    pub fn partition(&self, topic: &str, partition: i32) -> Option<&PartitionAssignment> {
        self.partitions.get(&names::partition_key(topic, partition))
    }

    /// The listener of `broker`, if this assignment places work on it.
    pub fn endpoint(&self, broker: i32) -> Option<&BrokerEndpoint> {
        self.brokers.get(&broker)
    }
}

/// Reads assignment.json; `Ok(None)` before the first controller wrote one.
pub fn read(fs: &dyn Fs, layout: &Layout) -> Result<Option<Assignment>> {
    read_json(fs, &layout.assignment_file(), "assignment.json")
}

/// What [`read_unless`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Read {
    /// No controller wrote one yet.
    Absent,
    /// The file is the write the caller named: its content was not read.
    Unchanged,
    Changed(Assignment),
}

/// How many leading bytes are read for the stamp: the three fields take about 70 (pretty).
const STAMP_PREFIX: usize = 256;

/// Reads assignment.json unless it is the write `known`: then only its first bytes are read.
/// At 10,000 partitions the file is over a megabyte, and every broker follows it every second.
pub fn read_unless(fs: &dyn Fs, layout: &Layout, known: Option<Stamp>) -> Result<Read> {
    let Some(opened) = Opened::at(fs, layout)? else { return Ok(Read::Absent) };
    if known.is_some() && opened.stamp() == known {
        return Ok(Read::Unchanged);
    }
    Ok(Read::Changed(opened.whole()?))
}

/// The stamp of assignment.json, from its first bytes when they hold it (a whole read when
/// they do not); `None` before the first write.
pub fn read_stamp(fs: &dyn Fs, layout: &Layout) -> Result<Option<Stamp>> {
    let Some(opened) = Opened::at(fs, layout)? else { return Ok(None) };
    match opened.stamp() {
        Some(stamp) => Ok(Some(stamp)),
        None => Ok(Some(opened.whole()?.stamp())),
    }
}

/// assignment.json opened, with its first bytes read. One open serves the stamp and the whole
/// file: the file is replaced by rename, never edited, so what is read later from the same
/// descriptor belongs to the stamp (and close-to-open makes the open see the newest write).
struct Opened {
    path: PathBuf,
    file: Arc<dyn File>,
    len: usize,
    prefix: Vec<u8>,
}

impl Opened {
    fn at(fs: &dyn Fs, layout: &Layout) -> Result<Option<Opened>> {
        let path = layout.assignment_file();
        let file = match fs.open(&path, OpenMode::Read) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::io("open", &path, e)),
        };
        let len = file.len().map_err(|e| Error::io("stat", &path, e))?;
        let len = usize::try_from(len).map_err(|_| Error::io("stat", &path, io::Error::other("file too large")))?;
        let mut prefix = vec![0; len.min(STAMP_PREFIX)];
        file.read_exact_at(&mut prefix, 0).map_err(|e| Error::io("read", &path, e))?;
        Ok(Some(Opened { path, file, len, prefix }))
    }

    fn stamp(&self) -> Option<Stamp> {
        stamp_in(&self.prefix)
    }

    fn whole(self) -> Result<Assignment> {
        let start = self.prefix.len();
        let mut bytes = self.prefix;
        bytes.resize(self.len, 0);
        self.file.read_exact_at(&mut bytes[start..], start as u64).map_err(|e| Error::io("read", &self.path, e))?;
        serde_json::from_slice(&bytes).map_err(|source| Error::Json { what: "assignment.json", path: self.path, source })
    }
}

/// The stamp in the first bytes of an assignment.json, if they hold it whole. serde writes the
/// fields in declaration order, so the stamp's three come first; any other order, or a prefix
/// that ends inside them, gives `None` and the caller reads the whole file.
fn stamp_in(prefix: &[u8]) -> Option<Stamp> {
    let mut found = None;
    let mut decoder = serde_json::Deserializer::from_slice(prefix);
    // NB: the prefix ends inside the object, so serde_json reports an error after the visitor
    // returns (the object is unfinished); what the visitor found before that is whole.
    let _ = serde::Deserializer::deserialize_map(&mut decoder, StampVisitor(&mut found));
    found
}

/// Takes the stamp's three fields from the front of the object.
struct StampVisitor<'a>(&'a mut Option<Stamp>);

impl<'de> Visitor<'de> for StampVisitor<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an assignment.json object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<(), A::Error> {
        let (mut epoch, mut version, mut controller) = (None, None, None);
        while epoch.is_none() || version.is_none() || controller.is_none() {
            match map.next_key::<String>()?.as_deref() {
                Some("controllerEpoch") => epoch = Some(map.next_value::<i64>()?),
                Some("assignmentVersion") => version = Some(map.next_value::<i64>()?),
                Some("controllerId") => controller = Some(map.next_value::<i32>()?),
                _ => return Ok(()),
            }
        }
        // A number the prefix cut short reads as a smaller one: the last field counts only if
        // the next key (or the object's end) follows it whole.
        map.next_key::<IgnoredAny>()?;
        if let (Some(controller_epoch), Some(assignment_version), Some(controller_id)) = (epoch, version, controller) {
            *self.0 = Some(Stamp { controller_epoch, assignment_version, controller_id });
        }
        Ok(())
    }
}

/// Writes assignment.json atomically (temp + fsync + rename + directory fsync).
///
/// NB: the check against the assignment on disk is check-then-act and so only an early stop;
/// the fence that holds is on the readers' side (they refuse epochs below the Lease's).
pub fn write(fs: &dyn Fs, layout: &Layout, assignment: &Assignment) -> Result<()> {
    if let Some(current) = read_stamp(fs, layout)?
        && current.controller_epoch > assignment.controller_epoch
    {
        return Err(Error::StaleController { found: current.controller_epoch, ours: assignment.controller_epoch });
    }
    fs.create_dir_all(&layout.cluster_dir()).map_err(|e| Error::io("mkdir", layout.cluster_dir(), e))?;
    write_json(fs, &layout.assignment_file(), assignment)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::MemFs;

    fn sample(epoch: i64, version: i64) -> Assignment {
        let mut a = Assignment { controller_epoch: epoch, assignment_version: version, controller_id: 1, ..Default::default() };
        a.partitions.insert(
            names::partition_key("orders/eu", 2),
            PartitionAssignment { topic_id: Uuid::nil(), leader: 1, leader_epoch: 4 },
        );
        a.consumer_groups.insert(3, ShardAssignment { coordinator: 1, epoch: 2 });
        a.transactions.insert(7, ShardAssignment { coordinator: 1, epoch: 0 });
        a
    }

    #[test]
    fn round_trip_and_stale_writer_stopped() -> Result<()> {
        let fs = MemFs::new();
        let layout = Layout::new("/data");
        assert_eq!(read(&fs, &layout)?, None);
        write(&fs, &layout, &sample(5, 1))?;
        assert_eq!(read(&fs, &layout)?, Some(sample(5, 1)));
        assert!(matches!(write(&fs, &layout, &sample(4, 9)), Err(Error::StaleController { found: 5, ours: 4 })));
        assert_eq!(read(&fs, &layout)?.map(|a| a.controller_epoch), Some(5));
        let led: Vec<_> = sample(5, 1).led_by(1).map(|(t, p, a)| (t.to_string(), p, a.leader_epoch)).collect();
        assert_eq!(led, vec![("orders/eu".to_string(), 2, 4)]);
        Ok(())
    }

    #[test]
    fn the_stamp_is_read_from_the_first_bytes_and_the_rest_only_when_it_changed() -> Result<()> {
        let fs = MemFs::new();
        let layout = Layout::new("/data");
        assert_eq!(read_unless(&fs, &layout, None)?, Read::Absent);
        let mut big = sample(5, 1);
        for p in 0..2_000 {
            big.partitions.insert(names::partition_key("t", p), PartitionAssignment { topic_id: Uuid::nil(), leader: 2, leader_epoch: 1 });
        }
        write(&fs, &layout, &big)?;
        assert_eq!(read_stamp(&fs, &layout)?, Some(big.stamp()));
        assert_eq!(read_unless(&fs, &layout, Some(big.stamp()))?, Read::Unchanged);
        assert_eq!(read_unless(&fs, &layout, None)?, Read::Changed(big.clone()));
        assert_eq!(read_unless(&fs, &layout, Some(sample(5, 0).stamp()))?, Read::Changed(big.clone()));
        write(&fs, &layout, &sample(5, 2))?;
        assert_eq!(read_unless(&fs, &layout, Some(big.stamp()))?, Read::Changed(sample(5, 2)));
        Ok(())
    }

    #[test]
    fn a_stamp_is_taken_only_when_the_prefix_holds_it_whole() {
        let whole = Stamp { controller_epoch: 12, assignment_version: 345, controller_id: 17 };
        let compact = br#"{"controllerEpoch":12,"assignmentVersion":345,"controllerId":17,"brokers":{}}"#;
        assert_eq!(stamp_in(compact), Some(whole));
        let pretty = b"{\n  \"controllerEpoch\": 12,\n  \"assignmentVersion\": 345,\n  \"controllerId\": 17\n}";
        assert_eq!(stamp_in(pretty), Some(whole));
        // Cut inside the controller id: "1" must not pass for 17; cut after it but before the
        // next key is just as unsure.
        let cut = compact.iter().position(|b| *b == b'7').unwrap_or(0);
        assert_eq!(stamp_in(&compact[..cut]), None);
        assert_eq!(stamp_in(&compact[..cut + 2]), None);
        assert_eq!(stamp_in(br#"{"brokers":{},"controllerEpoch":12,"assignmentVersion":345,"controllerId":17}"#), None);
        assert_eq!(stamp_in(b"not json"), None);
    }

    #[test]
    fn newer_orders_by_epoch_then_version() {
        assert!(sample(2, 1).is_newer_than(&sample(1, 50)));
        assert!(sample(2, 3).is_newer_than(&sample(2, 2)));
        assert!(!sample(2, 2).is_newer_than(&sample(2, 2)));
    }
}
