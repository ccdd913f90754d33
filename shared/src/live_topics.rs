//! Which topics exist by the cluster's source of truth (in Kubernetes the KafkaTopic resources).
//! The controller serves only those directories; the broker's topic catalog is one. Both sides
//! see the same narrow trait, so neither knows the other's types.

use std::collections::BTreeMap;

use uuid::Uuid;

/// One live topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveTopic {
    /// The identity its directory must carry.
    pub id: Uuid,
    /// Changes whenever the topic's record changes (a resource's `resourceVersion`), which it
    /// does after every write of the topic's topic.json: the operator reports each write in the
    /// status. What was read of the directory at one revision need not be read again at the same
    /// one. `None`: unknown, the directory is read every time.
    pub revision: Option<String>,
}

/// Name → live topic.
pub type LiveSet = BTreeMap<String, LiveTopic>;

/// The topics that exist by the cluster's source of truth, by name and identity. A topic
/// directory is served only while a live topic of that name carries its identity: a deleted
/// topic's directory, or an earlier incarnation's, is never taken over.
pub trait LiveTopics: Send + Sync + std::fmt::Debug {
    /// Every live topic by name; `None` until the first complete list is known (a half-synced
    /// list would look like a mass deletion).
    fn live(&self) -> Option<LiveSet>;
}

/// Whether `live` has a topic `name` of identity `id`.
pub fn is_live(live: &LiveSet, name: &str, id: Uuid) -> bool {
    live.get(name).is_some_and(|t| t.id == id)
}
