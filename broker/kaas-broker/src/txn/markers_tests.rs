//! A marker for a partition the coordinator's applied assignment does not place, held at that
//! moment: a partition the assignment places only in a newer version (which its leader applied
//! first) is retried until it is placed, and only a deleted one is skipped.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::Arc;

use kaas_shared::assignment::Assignment;
use kaas_storage::testing::BatchBuilder;
use kaas_storage::{AppendOptions, Marker, MarkerKind};
use kafka_protocol::ResponseError as E;

use super::deliver_marker;
use crate::api::leadership_tests::placed;
use crate::broker::{Broker, now_ms};
use crate::config::BrokerConfig;
use crate::control_plane::FixedControlPlane;
use crate::topics::NewTopic;

/// Assignment `version`, placing no partition.
fn unplaced(version: i64) -> Assignment {
    Assignment { assignment_version: version, ..Assignment::default() }
}

#[tokio::test]
async fn a_marker_waits_for_an_assignment_that_places_its_partition_and_skips_a_deleted_one() {
    let tmp = tempfile::tempdir().unwrap();
    let control = Arc::new(FixedControlPlane::default());
    let broker = Broker::open(BrokerConfig::cluster_for_tests(tmp.path(), control.clone())).unwrap();
    let topic = broker.topics.create(NewTopic { name: "t".into(), partitions: 1, configs: BTreeMap::new() }).unwrap();
    let cluster = broker.cluster.as_ref().unwrap();
    control.acknowledged_now();
    // The leader's side: the partition taken over and a transactional batch written to it.
    cluster.view.apply_if_new(placed(topic.id, 0, 1, 2)).unwrap();
    broker.topics.take_over("t", topic.id, 0, 1).unwrap();
    let p = broker.topics.partition("t", 0).unwrap();
    let batch = BatchBuilder::new().timestamps(now_ms()).producer(7, 0, 0).attributes(0x10).records(3, 8).build();
    let out = p.append(&batch, AppendOptions { leader_epoch: 1, now_ms: now_ms() }).unwrap();
    p.wait_durable(out.last_offset).await.unwrap();
    assert_eq!(p.last_stable_offset(), 0, "an open transaction holds the last stable offset");

    // This broker, as the coordinator, applies a later assignment that does not place it (as
    // one that lags the leader's does not yet).
    cluster.view.apply_if_new(unplaced(3)).unwrap();
    let marker = Marker { producer_id: 7, producer_epoch: 0, kind: MarkerKind::Commit, coordinator_epoch: 0 };
    assert_eq!(
        deliver_marker(&broker, "t", 0, &marker).await,
        Err(E::LeaderNotAvailable),
        "a marker for a partition the registry has but the applied assignment does not place is retried, not skipped"
    );
    assert_eq!(p.last_stable_offset(), 0);

    // Placed (here) once the assignment catches up: the marker lands and the transaction is visible.
    cluster.view.apply_if_new(placed(topic.id, 0, 1, 4)).unwrap();
    deliver_marker(&broker, "t", 0, &marker).await.unwrap();
    assert_eq!(p.last_stable_offset(), 4, "three records and the commit marker are stable");

    // A deleted topic's partition needs no marker.
    broker.topics.delete("t").unwrap();
    cluster.view.apply_if_new(unplaced(5)).unwrap();
    assert_eq!(deliver_marker(&broker, "t", 0, &marker).await, Ok(()));
}
