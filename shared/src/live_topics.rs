//! Which topics exist by the cluster's source of truth (in Kubernetes the KafkaTopic resources).
//! The controller serves only those directories; the broker's topic catalog is one. Both sides
//! see the same narrow trait, so neither knows the other's types.

use std::collections::BTreeMap;

use uuid::Uuid;

/// The topics that exist by the cluster's source of truth, by name and identity. A topic
/// directory is served only while a live topic of that name carries its identity: a deleted
/// topic's directory, or an earlier incarnation's, is never taken over.
pub trait LiveTopics: Send + Sync + std::fmt::Debug {
    /// Name → topic id of every live topic; `None` until the first complete list is known (a
    /// half-synced list would look like a mass deletion).
    fn live(&self) -> Option<BTreeMap<String, Uuid>>;
}
