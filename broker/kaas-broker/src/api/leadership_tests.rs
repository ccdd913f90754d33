//! The one leadership check in a cluster: the applied assignment and the storage must agree.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::Arc;

use kaas_shared::assignment::{Assignment, PartitionAssignment};
use kaas_shared::names::partition_key;
use kafka_protocol::ResponseError;
use uuid::Uuid;

use super::led_partition;
use crate::broker::Broker;
use crate::config::BrokerConfig;
use crate::control_plane::FixedControlPlane;
use crate::topics::NewTopic;

/// Assignment `version`, placing partition t/0 (topic `topic_id`) on `leader` at `leader_epoch`.
pub(crate) fn placed(topic_id: Uuid, leader: i32, leader_epoch: i32, version: i64) -> Assignment {
    Assignment {
        assignment_version: version,
        partitions: BTreeMap::from([(partition_key("t", 0), PartitionAssignment { topic_id, leader, leader_epoch })]),
        ..Assignment::default()
    }
}

#[tokio::test]
async fn a_partition_is_led_only_where_and_at_the_epoch_the_assignment_says() {
    let tmp = tempfile::tempdir().unwrap();
    let control = Arc::new(FixedControlPlane::default());
    let broker = Broker::open(BrokerConfig::cluster_for_tests(tmp.path(), control.clone())).unwrap();
    let topic = broker.topics.create(NewTopic { name: "t".into(), partitions: 1, configs: BTreeMap::new() }).unwrap();
    let cluster = broker.cluster.as_ref().unwrap();
    control.acknowledged_now();
    let refused = |broker: &Broker| led_partition(broker, "t", 0).err();

    cluster.view.apply_if_new(placed(topic.id, 0, 3, 1)).unwrap();
    assert_eq!(refused(&broker), Some(ResponseError::NotLeaderOrFollower), "placed here but not taken over yet");
    broker.topics.take_over("t", topic.id, 0, 3).unwrap();
    assert_eq!(led_partition(&broker, "t", 0).unwrap().epoch, 3);

    // The controller moved it to broker 1; this broker's storage has not relinquished yet.
    cluster.view.apply_if_new(placed(topic.id, 1, 4, 2)).unwrap();
    assert!(broker.topics.partition("t", 0).unwrap().is_leader());
    assert_eq!(refused(&broker), Some(ResponseError::NotLeaderOrFollower), "answered for a partition the assignment moved away");

    // Placed back here at a newer epoch: refused until the take-over at that epoch, whose
    // epoch the appends then carry.
    cluster.view.apply_if_new(placed(topic.id, 0, 5, 3)).unwrap();
    assert_eq!(refused(&broker), Some(ResponseError::NotLeaderOrFollower), "answered at an epoch the assignment superseded");
    broker.topics.take_over("t", topic.id, 0, 5).unwrap();
    assert_eq!(led_partition(&broker, "t", 0).unwrap().epoch, 5);
}
