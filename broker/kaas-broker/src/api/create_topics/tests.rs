//! A cluster's CreateTopics creates a request's topics together: each waits for the operator
//! and the controller, so one after another a request of many topics would take many times as
//! long.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::{ApiKey, CreateTopicsRequest, RequestHeader, TopicName};
use kafka_protocol::protocol::StrBytes;

use super::handle;
use crate::broker::Broker;
use crate::catalog::fake::FakeCatalog;
use crate::config::{BrokerConfig, ClusterLink, StorageMode};
use crate::control_plane::FixedControlPlane;
use crate::router::{Reply, RequestContext};

fn context() -> RequestContext {
    RequestContext::for_tests(ApiKey::CreateTopics, 7, RequestHeader::default())
}

#[tokio::test(start_paused = true)]
async fn a_request_s_topics_are_created_together() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = Arc::new(FakeCatalog { together: Some(tokio::sync::Barrier::new(3)), ..FakeCatalog::default() });
    let link = ClusterLink { catalog: Some(catalog.clone()), ..ClusterLink::for_tests(Arc::new(FixedControlPlane::default())) };
    let config = BrokerConfig { storage: StorageMode::Disk(dir.path().to_path_buf()), cluster: Some(link), ..BrokerConfig::local_in_memory() };
    let broker = Broker::open(config).unwrap();
    let topic = |name: &'static str| {
        CreatableTopic::default().with_name(TopicName(StrBytes::from_static_str(name))).with_num_partitions(1).with_replication_factor(-1)
    };
    // Nothing follows the volume here, so each creation ends in its timeout; what matters is
    // that all three reached the catalog at once (one after another, the first would wait at
    // the barrier for ever).
    let request = CreateTopicsRequest::default().with_timeout_ms(1_000).with_topics(vec![topic("a"), topic("b"), topic("c")]);
    let reply = tokio::time::timeout(Duration::from_secs(60), handle(&broker, &context(), request)).await;
    let Ok(Reply::Now(response)) = reply else { panic!("the creations did not run together") };
    assert_eq!(response.topics.len(), 3);
    let mut created = catalog.created.lock().clone();
    created.sort();
    assert_eq!(created, ["a", "b", "c"]);
    let names: Vec<&str> = response.topics.iter().map(|t| t.name.0.as_str()).collect();
    assert_eq!(names, ["a", "b", "c"], "answered in the request's order");
}
