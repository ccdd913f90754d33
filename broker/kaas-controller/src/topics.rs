//! Where the controller learns which topics exist.

use std::sync::Arc;

use kaas_shared::fs::FsRef;
use kaas_shared::layout::Layout;
use kaas_shared::live_topic_files::LiveTopicFiles;
use kaas_shared::{identity, topic_file};
pub use kaas_shared::live_topics::LiveTopics;
use tracing::warn;

use crate::{Error, Result};
use crate::balancer::TopicInfo;

/// The topics the cluster should serve. In Kubernetes these are the KafkaTopic resources; the
/// volume implementation reads the topic.json files their reconciler writes.
pub trait TopicSource: Send + Sync + std::fmt::Debug {
    fn list(&self) -> Result<Vec<TopicInfo>>;
}

/// Topics as the topic directories on the volume describe them: topic.json whose identity
/// stamp agrees, and, when a [`LiveTopics`] is given, whose identity is that of a live topic.
/// Directories being reclaimed (names starting with '.') are not topics.
#[derive(Debug, Clone)]
pub struct VolumeTopics {
    fs: FsRef,
    layout: Layout,
    live: Option<Arc<dyn LiveTopics>>,
    /// The live topics' files as last read (see [`LiveTopicFiles`]).
    files: Arc<LiveTopicFiles>,
}

impl VolumeTopics {
    /// Every stamped topic directory is a topic (in-process clusters without Kubernetes).
    pub fn new(fs: FsRef, layout: Layout) -> VolumeTopics {
        VolumeTopics { fs, layout, live: None, files: Default::default() }
    }

    /// Only directories whose identity is that of a live topic are topics.
    pub fn filtered_by(fs: FsRef, layout: Layout, live: Arc<dyn LiveTopics>) -> VolumeTopics {
        VolumeTopics { fs, layout, live: Some(live), files: Default::default() }
    }
}

impl TopicSource for VolumeTopics {
    fn list(&self) -> Result<Vec<TopicInfo>> {
        if let Some(source) = &self.live {
            // Only live topics are placed: a deleted (or replaced) topic's directory never is
            // again, so its leader abandons it and reclamation can proceed.
            let live = source.live().ok_or(Error::TopicsNotSynced)?;
            let mut found = self.files.read(&*self.fs, &self.layout, &live);
            // A directory that cannot be read says nothing about its topic: no placement
            // without it (the round is retried), or its partitions would be dropped.
            if let Some((_, error)) = found.unreadable.pop() {
                return Err(error.into());
            }
            for (name, error) in &found.disagreeing {
                warn!(topic = %name, %error, "topic.json and identity stamp disagree; not placing this topic");
            }
            // NB: in name order, as the live set is.
            return Ok(found.topics.into_iter().map(|file| TopicInfo { name: file.name, id: file.topic_id, partitions: file.partitions }).collect());
        }
        let root = self.layout.root();
        let entries = self.fs.list_dir(root).map_err(|e| kaas_shared::Error::io("list", root, e))?;
        let mut topics = Vec::new();
        for entry in entries.iter().filter(|e| e.is_dir && !e.name.starts_with('.') && !e.name.starts_with("__")) {
            let dir = self.layout.topic_dir(&entry.name);
            let Some(file) = topic_file::read(&*self.fs, &dir)? else { continue };
            if file.name != entry.name || identity::verify(&*self.fs, &dir, file.topic_id).is_err() {
                warn!(dir = %dir.display(), "topic.json and identity stamp disagree; not placing this topic");
                continue;
            }
            topics.push(TopicInfo { name: file.name, id: file.topic_id, partitions: file.partitions });
        }
        topics.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(topics)
    }
}
