//! The KafkaTopic resources as the brokers' topic catalog (seed 000): a watch keeps every
//! broker's view of the live topics current, so a `kubectl delete kafkatopic` abandons the
//! topic's partitions on its leader before the controller even recomputes; and a Kafka-API
//! CreateTopics / DeleteTopics / CreatePartitions / config change becomes a KafkaTopic create /
//! delete / patch, which the operator turns into the topic directory.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::StreamExt;
use kaas_broker::Error;
use kaas_broker::catalog::{CatalogFuture, TopicCatalog};
use kaas_broker::topics::NewTopic;
use kaas_controller::topics::LiveTopics;
use kaas_shared::live_topics::{LiveSet, LiveTopic};
use kaas_shared::crd::{KafkaTopic, KafkaTopicSpec};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use tokio::sync::Notify;
use tracing::{info, warn};
use uuid::Uuid;

use crate::kube_owner::ClusterOwner;

/// How long a CreateTopics waits for the owner's look-up (done long before, but for a request
/// racing the broker's start) before creating the topic without an owner.
const OWNER_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// The field manager of the brokers' KafkaTopic writes.
const FIELD_MANAGER: &str = "kaas-broker";

/// The KafkaTopics of one KafkaCluster.
pub(crate) struct KubeTopics {
    api: Api<KafkaTopic>,
    cluster: String,
    /// Topics created through the Kafka API are owned by the KafkaCluster (deleted with it).
    owner: Arc<ClusterOwner>,
    store: Store<KafkaTopic>,
    /// Set once the first complete list is in the store.
    synced: Arc<AtomicBool>,
    changed: Arc<Notify>,
}

impl std::fmt::Debug for KubeTopics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeTopics").field("cluster", &self.cluster).finish()
    }
}

impl KubeTopics {
    /// Starts the watch; the catalog reports no live set until its first complete list.
    pub(crate) fn start(client: kube::Client, namespace: &str, cluster: &str, owner: Arc<ClusterOwner>) -> Arc<KubeTopics> {
        let api: Api<KafkaTopic> = Api::namespaced(client, namespace);
        let (store, writer) = reflector::store();
        let changed = Arc::new(Notify::new());
        let events = changed.clone();
        let synced = Arc::new(AtomicBool::new(false));
        let synced_by_watch = synced.clone();
        // Every event (an apply, a delete, the end of a re-list) wakes the waiters: the
        // store already holds the change when the reflector passes the event on.
        let stream = reflector::reflector(writer, watcher(api.clone(), watcher::Config::default())).default_backoff();
        tokio::spawn(async move {
            futures::pin_mut!(stream);
            while let Some(event) = stream.next().await {
                match event {
                    Ok(watcher::Event::InitDone) => {
                        info!("KafkaTopic watch synced");
                        synced_by_watch.store(true, Ordering::Release);
                        events.notify_waiters();
                    }
                    Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => {}
                    Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_)) => events.notify_waiters(),
                    // The watcher re-lists on its own after an error, with backoff.
                    Err(e) => warn!(error = %e, "KafkaTopic watch error; re-listing"),
                }
            }
        });
        Arc::new(KubeTopics { api, cluster: cluster.to_string(), owner, store, synced, changed })
    }

    /// The resource of the Kafka topic `name` in this cluster, if any.
    fn find(&self, name: &str) -> Option<Arc<KafkaTopic>> {
        self.store.state().into_iter().find(|t| t.spec.cluster_ref == self.cluster && t.topic_name() == name)
    }

    /// The KafkaTopic resource's name of the Kafka topic `name` (they differ when the resource
    /// sets `spec.topicName`), if the resource exists.
    pub(crate) fn resource_name(&self, name: &str) -> Option<String> {
        self.find(name).map(|t| t.name_any())
    }

    async fn patch_spec(&self, name: &str, spec: serde_json::Value) -> Result<(), Error> {
        let topic = self.find(name).ok_or_else(|| Error::UnknownTopicOrPartition(name.to_string()))?;
        let patch = serde_json::json!({ "spec": spec });
        self.api.patch(&topic.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await.map_err(|e| api_error(name, e))?;
        Ok(())
    }
}

/// The live topics of `cluster`, each with its resource's `resourceVersion` as its revision.
fn live_set(topics: &[Arc<KafkaTopic>], cluster: &str) -> LiveSet {
    topics
        .iter()
        .filter(|t| t.spec.cluster_ref == cluster)
        .filter(|t| t.meta().deletion_timestamp.is_none())
        .filter_map(|t| {
            let id = Uuid::parse_str(t.meta().uid.as_deref()?).ok()?;
            Some((t.topic_name().to_string(), LiveTopic { id, revision: t.meta().resource_version.clone() }))
        })
        .collect()
}

impl LiveTopics for KubeTopics {
    fn live(&self) -> Option<LiveSet> {
        // Ready once the first list has been applied; an empty store before that is not
        // "every topic deleted".
        self.synced.load(Ordering::Acquire).then(|| live_set(&self.store.state(), &self.cluster))
    }
}

impl TopicCatalog for KubeTopics {
    fn create<'a>(&'a self, topic: &'a NewTopic) -> CatalogFuture<'a, ()> {
        Box::pin(async move {
            let resource_name = resource_name(&topic.name);
            let mut object = KafkaTopic::new(
                &resource_name,
                KafkaTopicSpec {
                    cluster_ref: self.cluster.clone(),
                    topic_name: (resource_name != topic.name).then(|| topic.name.clone()),
                    partitions: topic.partitions,
                    config: topic.configs.clone(),
                },
            );
            object.meta_mut().labels = Some(BTreeMap::from([("app.kubernetes.io/managed-by".to_string(), FIELD_MANAGER.to_string())]));
            object.meta_mut().owner_references = self.owner.wait(OWNER_WAIT).await.map(|o| vec![o]);
            match self.api.create(&PostParams { field_manager: Some(FIELD_MANAGER.to_string()), ..PostParams::default() }, &object).await {
                Ok(_) => {
                    info!(topic = %topic.name, resource = %resource_name, partitions = topic.partitions, "KafkaTopic created for a Kafka-API request");
                    Ok(())
                }
                Err(kube::Error::Api(e)) if e.code == 409 => Err(Error::TopicExists(topic.name.clone())),
                Err(e) => Err(api_error(&topic.name, e)),
            }
        })
    }

    fn delete<'a>(&'a self, name: &'a str) -> CatalogFuture<'a, ()> {
        Box::pin(async move {
            let topic = self.find(name).ok_or_else(|| Error::UnknownTopicOrPartition(name.to_string()))?;
            match self.api.delete(&topic.name_any(), &DeleteParams::default()).await {
                Ok(_) => {
                    info!(topic = %name, resource = %topic.name_any(), "KafkaTopic deleted for a Kafka-API request");
                    Ok(())
                }
                Err(kube::Error::Api(e)) if e.code == 404 => Err(Error::UnknownTopicOrPartition(name.to_string())),
                Err(e) => Err(api_error(name, e)),
            }
        })
    }

    fn set_partitions<'a>(&'a self, name: &'a str, partitions: i32) -> CatalogFuture<'a, ()> {
        Box::pin(self.patch_spec(name, serde_json::json!({ "partitions": partitions })))
    }

    fn set_configs<'a>(&'a self, name: &'a str, configs: &'a BTreeMap<String, String>) -> CatalogFuture<'a, ()> {
        Box::pin(async move {
            // A merge patch merges maps: null out the keys being removed.
            let current = self.find(name).map(|t| t.spec.config.clone()).unwrap_or_default();
            let mut config = serde_json::Map::new();
            for key in current.keys().filter(|k| !configs.contains_key(*k)) {
                config.insert(key.clone(), serde_json::Value::Null);
            }
            for (key, value) in configs {
                config.insert(key.clone(), serde_json::Value::String(value.clone()));
            }
            self.patch_spec(name, serde_json::json!({ "config": config })).await
        })
    }

    fn changed(&self) -> &Notify {
        &self.changed
    }
}

/// The KafkaTopic name for a Kafka topic name: itself when it is a valid Kubernetes name, else
/// a lower-cased, sanitised form plus a hash of the original (Kafka allows `_` and capitals,
/// Kubernetes does not), with the real name in `spec.topicName`.
fn resource_name(topic: &str) -> String {
    let valid = |s: &str| {
        !s.is_empty()
            && s.len() <= 253
            && s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
            && s.starts_with(|c: char| c.is_ascii_alphanumeric())
            && s.ends_with(|c: char| c.is_ascii_alphanumeric())
    };
    if valid(topic) {
        return topic.to_string();
    }
    let mut base: String = topic.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else if c == '.' { '.' } else { '-' }).collect();
    base.truncate(200);
    let base = base.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    let hash = topic.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
    if base.is_empty() { format!("topic-{hash:016x}") } else { format!("{base}-{hash:016x}") }
}

fn api_error(topic: &str, e: kube::Error) -> Error {
    match &e {
        kube::Error::Api(status) if status.code == 422 || status.code == 400 => {
            Error::InvalidRequest(format!("KafkaTopic for {topic} refused: {}", status.message))
        }
        kube::Error::Api(status) if status.code == 403 => {
            Error::Catalog(format!("the broker may not change KafkaTopic {topic}: {}", status.message))
        }
        _ => Error::Catalog(format!("KafkaTopic {topic}: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::resource_name;

    #[test]
    fn kafka_names_map_to_valid_distinct_resource_names() {
        assert_eq!(resource_name("orders"), "orders");
        assert_eq!(resource_name("orders.v1"), "orders.v1");
        let upper = resource_name("Orders");
        let underscore = resource_name("my_topic");
        assert!(upper.starts_with("orders-") && upper != "orders", "{upper}");
        assert!(underscore.starts_with("my-topic-"), "{underscore}");
        assert_ne!(resource_name("my_topic"), resource_name("my-topic"));
        assert_ne!(resource_name("a_b"), resource_name("a.b"));
        assert!(resource_name("_x_").starts_with("x-"));
        assert!(resource_name("___").starts_with("topic-"));
        assert!(resource_name(&"A".repeat(249)).len() <= 253);
    }
}
