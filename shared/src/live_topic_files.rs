//! The topic.json of every live topic, read from the volume only when the topic's record says
//! the file may have changed. With thousands of topics, the brokers and the controller
//! following the volume every second read two files per topic each time; through an NFS mount
//! that was most of a loaded cluster's work.
//!
//! What is kept is what was read at a revision of the topic's record ([`LiveTopic::revision`]),
//! and the revision is taken before the read: the operator writes topic.json and then reports it
//! in the status, so a file written after the revision was taken comes with a newer revision,
//! which reads the directory again. A file read once is read again after [`REREAD_AFTER`] in
//! any case, a bound for a change no revision announced.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::fs::Fs;
use crate::layout::Layout;
use crate::live_topics::LiveSet;
use crate::topic_file::TopicFile;
use crate::{Error, identity, topic_file};

/// How long a topic.json read is trusted without a revision change.
pub const REREAD_AFTER: Duration = Duration::from_secs(60);

/// The live topics' topic.json files as last read.
#[derive(Debug, Default)]
pub struct LiveTopicFiles {
    read: Mutex<HashMap<String, Kept>>,
}

#[derive(Debug)]
struct Kept {
    revision: String,
    file: TopicFile,
    at: Instant,
}

/// What [`LiveTopicFiles::read`] found.
#[derive(Debug, Default)]
pub struct Found {
    /// Every live topic whose directory's topic.json and identity stamp are that topic's.
    pub topics: Vec<TopicFile>,
    /// Live topics whose directory could not be read this time (I/O error, corrupt file): that
    /// says nothing about the topic, so a topic already open under the name is kept as it is.
    pub unreadable: Vec<(String, Error)>,
    /// Live topics whose directory's stamp disagrees with its topic.json: never opened.
    pub disagreeing: Vec<(String, Error)>,
}

impl LiveTopicFiles {
    /// The topic.json of every topic in `live` whose directory holds that topic: its file names
    /// it and its stamp is the topic's identity. A directory not created yet, or another
    /// incarnation's, is left out.
    pub fn read(&self, fs: &dyn Fs, layout: &Layout, live: &LiveSet) -> Found {
        let mut found = Found::default();
        let now = Instant::now();
        // One caller at a time (a broker's follow loop, the controller's recompute): the files
        // are read under the lock.
        let mut kept_files = self.kept();
        // Names the volume listing never offers as topics: directories renamed aside ('.') and
        // the cluster's own ('__').
        for (name, topic) in live.iter().filter(|(name, _)| !name.starts_with('.') && !name.starts_with("__")) {
            let kept = kept_files.get(name).and_then(|kept| {
                let fresh = Some(&kept.revision) == topic.revision.as_ref() && now.duration_since(kept.at) < REREAD_AFTER;
                (fresh && kept.file.topic_id == topic.id).then(|| kept.file.clone())
            });
            if let Some(file) = kept {
                found.topics.push(file);
                continue;
            }
            let dir = layout.topic_dir(name);
            let file = match topic_file::read(fs, &dir) {
                Ok(Some(file)) => file,
                // Stamped but not written yet: the operator is still creating it.
                Ok(None) => continue,
                Err(e) => {
                    found.unreadable.push((name.clone(), e));
                    continue;
                }
            };
            if file.name != *name || file.topic_id != topic.id {
                // Another incarnation's directory (the operator reclaims it) or a foreign file.
                continue;
            }
            match identity::verify(fs, &dir, file.topic_id) {
                Ok(()) => {}
                Err(e @ Error::IdentityMismatch { .. }) => {
                    found.disagreeing.push((name.clone(), e));
                    continue;
                }
                Err(e) => {
                    found.unreadable.push((name.clone(), e));
                    continue;
                }
            }
            if let Some(revision) = &topic.revision {
                kept_files.insert(name.clone(), Kept { revision: revision.clone(), file: file.clone(), at: now });
            }
            found.topics.push(file);
        }
        kept_files.retain(|name, _| live.contains_key(name));
        found
    }

    fn kept(&self) -> MutexGuard<'_, HashMap<String, Kept>> {
        // A panic elsewhere leaves whole entries: each is inserted in one call.
        self.read.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests;
