//! A catalog for unit tests: it records what was created, reports the live set it is given,
//! and can hold each creation until enough are under way at once.

use std::collections::BTreeMap;

use kaas_shared::live_topics::{LiveSet, LiveTopic, LiveTopics};
use parking_lot::Mutex;
use uuid::Uuid;

use super::{CatalogFuture, TopicCatalog};
use crate::topics::NewTopic;

#[derive(Debug, Default)]
pub(crate) struct FakeCatalog {
    pub live: Mutex<BTreeMap<String, Uuid>>,
    pub created: Mutex<Vec<String>>,
    /// When set, a creation returns only once this many are waiting together.
    pub together: Option<tokio::sync::Barrier>,
    pub changed: tokio::sync::Notify,
}

impl LiveTopics for FakeCatalog {
    fn live(&self) -> Option<LiveSet> {
        Some(self.live.lock().iter().map(|(name, id)| (name.clone(), LiveTopic { id: *id, revision: None })).collect())
    }
}

impl TopicCatalog for FakeCatalog {
    fn create<'a>(&'a self, topic: &'a NewTopic) -> CatalogFuture<'a, ()> {
        Box::pin(async move {
            self.created.lock().push(topic.name.clone());
            if let Some(together) = &self.together {
                together.wait().await;
            }
            Ok(())
        })
    }
    fn delete<'a>(&'a self, _name: &'a str) -> CatalogFuture<'a, ()> {
        Box::pin(async { Ok(()) })
    }
    fn set_partitions<'a>(&'a self, _name: &'a str, _partitions: i32) -> CatalogFuture<'a, ()> {
        Box::pin(async { Ok(()) })
    }
    fn set_configs<'a>(&'a self, _name: &'a str, _configs: &'a BTreeMap<String, String>) -> CatalogFuture<'a, ()> {
        Box::pin(async { Ok(()) })
    }
    fn changed(&self) -> &tokio::sync::Notify {
        &self.changed
    }
}
