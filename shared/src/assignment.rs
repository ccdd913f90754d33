//! `__cluster/assignment.json`: who leads every partition and coordinates every group shard.
//!
//! One writer, the controller (the holder of the `kaas-controller` Lease), writes it by
//! temp + fsync + rename; every broker reads it. The controller epoch (the Lease's
//! `leaseTransitions`) fences a deposed controller: readers refuse an assignment whose epoch is
//! below the Lease's, so a controller back from a pause cannot roll the cluster backwards.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::atomic_file::{read_json, write_json};
use crate::fs::Fs;
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

/// Writes assignment.json atomically (temp + fsync + rename + directory fsync).
///
/// NB: the check against the assignment on disk is check-then-act and so only an early stop;
/// the fence that holds is on the readers' side (they refuse epochs below the Lease's).
pub fn write(fs: &dyn Fs, layout: &Layout, assignment: &Assignment) -> Result<()> {
    if let Some(current) = read(fs, layout)?
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
    fn newer_orders_by_epoch_then_version() {
        assert!(sample(2, 1).is_newer_than(&sample(1, 50)));
        assert!(sample(2, 3).is_newer_than(&sample(2, 2)));
        assert!(!sample(2, 2).is_newer_than(&sample(2, 2)));
    }
}
