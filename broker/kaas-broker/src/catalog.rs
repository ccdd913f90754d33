//! The topic catalog of cluster mode: in Kubernetes the KafkaTopic resources are the topics'
//! source of truth (the operator turns each into a stamped directory on the volume), so a
//! Kafka-API CreateTopics, DeleteTopics, CreatePartitions or config change becomes a KafkaTopic
//! create, delete or patch, and every broker serves only directories whose identity is that of
//! a live KafkaTopic. The `kube` implementation lives in the `kaas` binary; without a catalog
//! (local mode, in-process clusters) brokers write topic directories themselves.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;

use kaas_shared::live_topics::LiveTopics;

use crate::error::Result;
use crate::topics::NewTopic;

/// A boxed future, so the trait stays object-safe.
pub type CatalogFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T>> + Send + 'a>>;

/// Topic administration against the source of truth. Each call returns once the change is
/// accepted there; the volume follows when the operator has acted on it.
pub trait TopicCatalog: LiveTopics {
    /// Creates the topic (`Error::TopicExists` when the name is taken).
    fn create<'a>(&'a self, topic: &'a NewTopic) -> CatalogFuture<'a, ()>;
    /// Deletes the topic (`Error::UnknownTopicOrPartition` when there is none).
    fn delete<'a>(&'a self, name: &'a str) -> CatalogFuture<'a, ()>;
    /// Grows the topic to `partitions`.
    fn set_partitions<'a>(&'a self, name: &'a str, partitions: i32) -> CatalogFuture<'a, ()>;
    /// Replaces the topic's configs.
    fn set_configs<'a>(&'a self, name: &'a str, configs: &'a BTreeMap<String, String>) -> CatalogFuture<'a, ()>;
    /// Wakes whoever waits for the live set to change (a watch event arrived).
    fn changed(&self) -> &tokio::sync::Notify;
}

#[cfg(test)]
pub(crate) mod fake;
