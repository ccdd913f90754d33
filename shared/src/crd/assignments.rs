//! `KafkaClusterAssignments`: the controller broker's mirror of `assignment.json`, for humans
//! (`kubectl get kafkaclusterassignments`). Brokers never read it; the file stays the authority.

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// One cluster's current assignment, named after the KafkaCluster.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
#[kube(
    group = "kaas.dev",
    version = "v1alpha1",
    kind = "KafkaClusterAssignments",
    plural = "kafkaclusterassignments",
    namespaced,
    shortname = "kca",
    category = "kaas",
    printcolumn(
        name = "Controller",
        type_ = "integer",
        json_path = ".spec.controllerId"
    ),
    printcolumn(name = "Epoch", type_ = "integer", json_path = ".spec.controllerEpoch"),
    printcolumn(
        name = "Version",
        type_ = "integer",
        json_path = ".spec.assignmentVersion"
    ),
    printcolumn(
        name = "Partitions",
        type_ = "integer",
        json_path = ".spec.partitionCount"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct KafkaClusterAssignmentsSpec {
    /// The broker id of the controller that wrote the assignment.
    pub controller_id: i32,
    /// The controller epoch (the Lease's `leaseTransitions`).
    pub controller_epoch: i64,
    /// Monotonic version of the assignment within the epoch.
    pub assignment_version: i64,
    /// Number of entries in `partitions` (a printer column cannot count).
    #[serde(default)]
    pub partition_count: i32,
    /// Partition leaders.
    #[serde(default)]
    pub partitions: Vec<PartitionAssignment>,
    /// Consumer-group coordinators.
    #[serde(default)]
    pub consumer_groups: Vec<GroupAssignment>,
    /// Transaction coordinators.
    #[serde(default)]
    pub transaction_coordinators: Vec<GroupAssignment>,
}

/// Who leads one partition.
#[derive(KubeSchema, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PartitionAssignment {
    /// Topic name.
    pub topic: String,
    /// Partition index.
    pub partition: i32,
    /// The topic incarnation (its identity) the placement is for.
    pub topic_id: String,
    /// Leading broker id.
    pub leader: i32,
    /// Leader epoch.
    pub leader_epoch: i32,
}

/// Who coordinates one consumer-group or transaction shard.
#[derive(KubeSchema, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct GroupAssignment {
    /// Shard number.
    pub shard: i32,
    /// Coordinating broker id.
    pub coordinator: i32,
}

impl KafkaClusterAssignmentsSpec {
    /// The mirror of one assignment.json, partitions and shards in key order.
    pub fn of(assignment: &crate::assignment::Assignment) -> KafkaClusterAssignmentsSpec {
        let partitions: Vec<PartitionAssignment> = assignment
            .partitions
            .iter()
            .filter_map(|(key, p)| {
                let (topic, partition) = crate::names::parse_partition_key(key).ok()?;
                Some(PartitionAssignment {
                    topic: topic.to_string(),
                    partition,
                    topic_id: p.topic_id.to_string(),
                    leader: p.leader,
                    leader_epoch: p.leader_epoch,
                })
            })
            .collect();
        KafkaClusterAssignmentsSpec {
            controller_id: assignment.controller_id,
            controller_epoch: assignment.controller_epoch,
            assignment_version: assignment.assignment_version,
            partition_count: i32::try_from(partitions.len()).unwrap_or(i32::MAX),
            partitions,
            consumer_groups: shards(&assignment.consumer_groups),
            transaction_coordinators: shards(&assignment.transactions),
        }
    }
}

fn shards(placed: &std::collections::BTreeMap<u32, crate::assignment::ShardAssignment>) -> Vec<GroupAssignment> {
    placed
        .iter()
        .map(|(shard, s)| GroupAssignment { shard: i32::try_from(*shard).unwrap_or(i32::MAX), coordinator: s.coordinator })
        .collect()
}
