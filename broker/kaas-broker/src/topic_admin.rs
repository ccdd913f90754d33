//! Topic administration as the Kafka APIs ask for it (CreateTopics, DeleteTopics,
//! CreatePartitions, config changes, auto-creation), against whoever owns the topics: the
//! broker's own registry in local mode, the [`TopicCatalog`] (KafkaTopic resources) in a
//! Kubernetes cluster. In the latter case the call returns once the broker serves the change,
//! i.e. once the operator has written the volume and this broker has followed it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use uuid::Uuid;

use crate::broker::Broker;
use crate::catalog::TopicCatalog;
use crate::error::{Error, Result};
use crate::topic_config;
use crate::topics::NewTopic;

/// How long an admin call waits for the volume to follow the catalog when the request names
/// no timeout of its own.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// Creates a topic; returns its id.
pub async fn create(broker: &Arc<Broker>, new: NewTopic, timeout: Duration) -> Result<Uuid> {
    let Some(catalog) = catalog(broker) else { return Ok(broker.topics.create(new)?.id) };
    broker.topics.validate_new(&new)?;
    catalog.create(&new).await?;
    let partitions = new.partitions;
    wait(catalog, timeout, &format!("topic {} to be created", new.name), || {
        let topic = broker.topics.get(&new.name).filter(|t| t.partition_count() >= partitions)?;
        placed(broker, &new.name, partitions).then_some(topic.id)
    })
    .await
}

/// Auto-creation (a Metadata or Produce request naming an unknown topic): local mode creates
/// it at once and returns it; a cluster asks the catalog and returns `None` (the client
/// retries on LEADER_NOT_AVAILABLE until the topic is served, as with Kafka's auto-create).
pub async fn auto_create(broker: &Arc<Broker>, new: NewTopic) -> Result<Option<Arc<crate::topics::Topic>>> {
    broker.topics.validate_new(&new)?;
    if !broker.auto_creates.try_acquire() {
        return Err(Error::AutoCreateThrottled(new.name));
    }
    let Some(catalog) = catalog(broker) else {
        return match broker.topics.create(new) {
            Ok(topic) => Ok(Some(topic)),
            // Another broker of a cluster without a catalog created it a moment ago: this one
            // serves it once it has followed the volume.
            Err(Error::TopicExists(_)) => Ok(None),
            Err(e) => Err(e),
        };
    };
    match catalog.create(&new).await {
        Ok(()) | Err(Error::TopicExists(_)) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Deletes a topic; returns the id it had.
pub async fn delete(broker: &Arc<Broker>, name: &str, timeout: Duration) -> Result<Uuid> {
    let Some(catalog) = catalog(broker) else { return Ok(broker.topics.delete(name)?.id) };
    let id = broker.topics.get(name).map(|t| t.id);
    catalog.delete(name).await?;
    wait(catalog, timeout, &format!("topic {name} to be deleted"), || {
        let current = broker.topics.get(name).map(|t| t.id);
        (current.is_none() || current != id).then_some(())
    })
    .await?;
    Ok(id.unwrap_or_default())
}

/// Grows a topic to `total` partitions.
pub async fn add_partitions(broker: &Arc<Broker>, name: &str, total: i32, validate_only: bool, timeout: Duration) -> Result<()> {
    let Some(catalog) = catalog(broker) else { return broker.topics.add_partitions(name, total, validate_only) };
    followed(broker, name, timeout).await?;
    broker.topics.validate_growth(name, total)?;
    if validate_only {
        return Ok(());
    }
    catalog.set_partitions(name, total).await?;
    wait(catalog, timeout, &format!("topic {name} to grow to {total} partitions"), || {
        let grown = broker.topics.get(name).is_some_and(|t| t.partition_count() >= total);
        (grown && placed(broker, name, total)).then_some(())
    })
    .await
}

/// Replaces a topic's configs.
pub async fn set_configs(broker: &Arc<Broker>, name: &str, configs: BTreeMap<String, String>, validate_only: bool) -> Result<()> {
    let Some(catalog) = catalog(broker) else { return broker.topics.set_configs(name, configs, validate_only) };
    followed(broker, name, DEFAULT_TIMEOUT).await?;
    topic_config::validate_all(&configs, broker.topics.log_defaults())?;
    if validate_only {
        return Ok(());
    }
    catalog.set_configs(name, &configs).await?;
    wait(catalog, DEFAULT_TIMEOUT, &format!("configs of topic {name} to change"), || {
        broker.topics.get(name).filter(|t| t.configs() == configs).map(|_| ())
    })
    .await
}

/// Whether the applied assignment names a leader for each of the topic's first `partitions`:
/// as with Kafka, whose controller elects leaders before CreateTopics or CreatePartitions
/// answers, a client may produce as soon as the call returns.
fn placed(broker: &Broker, name: &str, partitions: i32) -> bool {
    let Some(cluster) = &broker.cluster else { return true };
    let assignment = cluster.view.current();
    (0..partitions).all(|i| assignment.partition(name, i).is_some())
}

/// Waits until this broker serves a topic the catalog has: another broker may have answered its
/// CreateTopics a moment before this one followed the volume, and a client that creates a topic
/// and then grows or reconfigures it through another broker must not be told it does not exist.
/// A topic the catalog does not have either (or any topic, without a catalog) is unknown at once.
pub(crate) async fn followed(broker: &Broker, name: &str, timeout: Duration) -> Result<()> {
    if broker.topics.get(name).is_some() {
        return Ok(());
    }
    let Some(catalog) = catalog(broker) else { return Err(Error::UnknownTopicOrPartition(name.to_string())) };
    if !catalog.live().is_some_and(|live| live.contains_key(name)) {
        return Err(Error::UnknownTopicOrPartition(name.to_string()));
    }
    wait(catalog, timeout, &format!("topic {name} to be served here"), || broker.topics.get(name).map(|_| ())).await
}

fn catalog(broker: &Broker) -> Option<&Arc<dyn TopicCatalog>> {
    broker.cluster.as_ref()?.link.catalog.as_ref()
}

/// Polls `done` until it yields, waking on catalog events and at least every 50 ms. The
/// registry itself follows the volume in the cluster loop (each second and on catalog events).
async fn wait<T>(catalog: &Arc<dyn TopicCatalog>, timeout: Duration, what: &str, done: impl Fn() -> Option<T>) -> Result<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = done() {
            return Ok(value);
        }
        if Instant::now() >= deadline {
            return Err(Error::Timeout(format!("the change was accepted, but waiting for {what} timed out after {timeout:?}")));
        }
        tokio::select! {
            _ = catalog.changed().notified() => {}
            _ = tokio::time::sleep(Duration::from_millis(50)) => {}
        }
    }
}

#[cfg(test)]
mod tests;
