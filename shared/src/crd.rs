//! The kaas custom resources (feature `crd`): the API both artifacts speak through Kubernetes.
//!
//! The operator reconciles [`KafkaCluster`], [`KafkaTopic`] and [`KafkaUser`]; brokers read KafkaTopics, create
//! and patch them for Kafka-API topic admin, and the controller broker mirrors each assignment it
//! writes into a [`KafkaClusterAssignments`] (a debug surface; brokers never read it back).
//! The types live here, not in the operator, because the broker links them too and neither
//! binary may link the other (DESIGN "Two artifacts, one contract").

// NB: the KubeSchema derive re-declares each struct inside a private module to build its schema,
// and `unreachable_pub` flags those copies; clippy reads repeated `type_ = ..` keys of separate
// `printcolumn(..)` entries as duplicated attributes.
#[allow(unreachable_pub, clippy::duplicated_attributes)]
pub mod assignments;
#[allow(unreachable_pub, clippy::duplicated_attributes)]
pub mod cluster;
#[allow(unreachable_pub, clippy::duplicated_attributes)]
pub mod topic;
#[allow(unreachable_pub, clippy::duplicated_attributes)]
pub mod user;

pub use assignments::{KafkaClusterAssignments, KafkaClusterAssignmentsSpec};
pub use cluster::{KafkaCluster, KafkaClusterSpec, KafkaClusterStatus};
pub use topic::{KafkaTopic, KafkaTopicSpec, KafkaTopicStatus};
pub use user::{KafkaUser, KafkaUserSpec, KafkaUserStatus};

/// The API group of every kaas resource.
pub const GROUP: &str = "kaas.dev";
/// The one served and stored version.
pub const VERSION: &str = "v1alpha1";

/// Standard condition types (the same three on KafkaCluster; KafkaTopic uses `Ready`).
pub mod conditions {
    /// Everything the spec asks for is in place and healthy.
    pub const READY: &str = "Ready";
    /// The operator is moving the world towards a changed spec.
    pub const PROGRESSING: &str = "Progressing";
    /// Something is wrong that the operator cannot fix by itself (bad spec, unsupported version).
    pub const DEGRADED: &str = "Degraded";
}
