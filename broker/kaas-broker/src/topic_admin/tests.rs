//! Cluster-mode topic admin against a catalog whose changes reach this broker late: the race
//! between another broker answering CreateTopics and this one following the volume is held
//! open by hand (nothing follows the volume here unless the test does it), on paused time.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kaas_shared::assignment::{Assignment, PartitionAssignment};
use kaas_shared::names::partition_key;
use uuid::Uuid;

use super::{create, followed};
use crate::broker::Broker;
use crate::catalog::fake::FakeCatalog;
use crate::config::{BrokerConfig, ClusterLink, StorageMode};
use crate::control_plane::FixedControlPlane;
use crate::error::Error;
use crate::topics::NewTopic;

fn cluster_broker(dir: &tempfile::TempDir, catalog: Arc<FakeCatalog>) -> Arc<Broker> {
    let link = ClusterLink { catalog: Some(catalog), ..ClusterLink::for_tests(Arc::new(FixedControlPlane::default())) };
    let config = BrokerConfig { storage: StorageMode::Disk(dir.path().to_path_buf()), cluster: Some(link), ..BrokerConfig::local_in_memory() };
    Broker::open(config).unwrap()
}

fn new_topic(name: &str, partitions: i32) -> NewTopic {
    NewTopic { name: name.into(), partitions, configs: BTreeMap::new() }
}

#[tokio::test(start_paused = true)]
async fn a_topic_the_catalog_has_is_waited_for_not_reported_unknown() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = Arc::new(FakeCatalog::default());
    let broker = cluster_broker(&dir, catalog.clone());
    catalog.live.lock().insert("late".into(), Uuid::new_v4());
    catalog.live.lock().insert("lost".into(), Uuid::new_v4());

    // Not in the catalog either: unknown at once.
    assert!(matches!(followed(&broker, "never", Duration::from_secs(3)).await, Err(Error::UnknownTopicOrPartition(_))));

    // In the catalog, not yet served here: the call waits, and returns once this broker follows.
    let waiting = tokio::spawn({
        let broker = broker.clone();
        async move { followed(&broker, "late", Duration::from_secs(3)).await }
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!waiting.is_finished(), "answered before this broker served the topic");
    broker.topics.create(new_topic("late", 1)).unwrap();
    catalog.changed.notify_waiters();
    assert!(waiting.await.unwrap().is_ok());

    // Never followed: a timeout (Metadata turns it into LEADER_NOT_AVAILABLE), not UNKNOWN.
    assert!(matches!(followed(&broker, "lost", Duration::from_secs(3)).await, Err(Error::Timeout(_))));
}

#[tokio::test(start_paused = true)]
async fn create_answers_once_every_partition_has_a_leader() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = Arc::new(FakeCatalog::default());
    let broker = cluster_broker(&dir, catalog.clone());
    let creating = tokio::spawn({
        let broker = broker.clone();
        async move { create(&broker, new_topic("orders", 2), Duration::from_secs(30)).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(*catalog.created.lock(), vec!["orders".to_string()]);

    // The operator wrote the volume and this broker follows it, but no leader is placed yet.
    let topic = broker.topics.create(new_topic("orders", 2)).unwrap();
    let placed = |partitions: &[i32], version: i64| Assignment {
        assignment_version: version,
        partitions: partitions
            .iter()
            .map(|p| (partition_key("orders", *p), PartitionAssignment { topic_id: topic.id, leader: 1, leader_epoch: 0 }))
            .collect(),
        ..Assignment::default()
    };
    let view = &broker.cluster.as_ref().unwrap().view;
    view.apply_if_new(placed(&[0], 1)).unwrap();
    catalog.changed.notify_waiters();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!creating.is_finished(), "CreateTopics answered before partition 1 had a leader");

    view.apply_if_new(placed(&[0, 1], 2)).unwrap();
    catalog.changed.notify_waiters();
    assert_eq!(creating.await.unwrap().unwrap(), topic.id);
}
