//! Topic metadata on the volume in local mode: identity stamp, topic.json, and reclamation of
//! deleted topics' directories.
//!
//! Review questions of seed 001, answered here once:
//! - stamp and topic.json are exclusive create and temp+fsync+rename (atomic primitives);
//! - reclamation (`kaas_shared::reclaim`, shared with the operator) renames a topic directory
//!   aside in one atomic rename, then removes the renamed tree by an idempotent sweep that every
//!   housekeeping round re-drives until it is gone;
//! - in local mode this broker is the only writer of topic metadata.

use std::collections::BTreeMap;
use std::path::PathBuf;

use kaas_shared::fs::FsRef;
use kaas_shared::layout::Layout;
use kaas_shared::topic_file::TopicFile;
use kaas_shared::{identity, reclaim, topic_file};
use tracing::{info, warn};
use uuid::Uuid;

use crate::error::Result;

/// Topic metadata files under one volume root.
#[derive(Debug, Clone)]
pub struct TopicStore {
    fs: FsRef,
    layout: Layout,
}

impl TopicStore {
    pub fn new(fs: FsRef, root: PathBuf) -> TopicStore {
        TopicStore { fs, layout: Layout::new(root) }
    }

    /// Every topic whose topic.json and identity stamp agree. A directory that disagrees is
    /// never opened as a topic; one without topic.json is a create that crashed before it was
    /// acknowledged and is reclaimed.
    pub fn load_all(&self) -> Result<Vec<TopicFile>> {
        let root = self.layout.root();
        let mut topics = Vec::new();
        for entry in self.fs.list_dir(root).map_err(|e| kaas_shared::Error::io("list", root, e))? {
            if !entry.is_dir || entry.name.starts_with('.') || entry.name.starts_with("__") {
                continue;
            }
            let dir = self.layout.topic_dir(&entry.name);
            let Some(file) = topic_file::read(&*self.fs, &dir)? else {
                warn!(dir = %dir.display(), "topic directory without topic.json: an unfinished create; reclaiming it");
                self.rename_aside(&entry.name, identity::read(&*self.fs, &dir).ok().flatten().unwrap_or_else(Uuid::new_v4))?;
                continue;
            };
            if file.name != entry.name {
                warn!(dir = %dir.display(), named = %file.name, "topic.json names another topic; not opening it");
                continue;
            }
            if let Err(e) = identity::verify(&*self.fs, &dir, file.topic_id) {
                warn!(dir = %dir.display(), error = %e, "identity stamp does not match topic.json; not opening it");
                continue;
            }
            topics.push(file);
        }
        Ok(topics)
    }

    /// Stamps a new topic directory with its identity and writes its topic.json. A directory
    /// of the same name left by an earlier incarnation is reclaimed first.
    pub fn create(&self, name: &str, id: Uuid, partitions: i32, configs: &BTreeMap<String, String>) -> Result<()> {
        let dir = self.layout.topic_dir(name);
        if let Some(old) = identity::read(&*self.fs, &dir)? {
            if old != id {
                info!(topic = name, old = %old, "reclaiming the directory of an earlier incarnation");
                self.rename_aside(name, old)?;
            }
        }
        identity::stamp(&*self.fs, &dir, id)?;
        self.write(name, id, partitions, configs)
    }

    /// Rewrites topic.json atomically, after checking the directory is still this incarnation's.
    pub fn write(&self, name: &str, id: Uuid, partitions: i32, configs: &BTreeMap<String, String>) -> Result<()> {
        let dir = self.layout.topic_dir(name);
        identity::verify(&*self.fs, &dir, id)?;
        let file = TopicFile { name: name.to_string(), topic_id: id, partitions, configs: configs.clone() };
        topic_file::write(&*self.fs, &dir, &file)?;
        Ok(())
    }

    /// Renames a deleted topic's directory aside (so a recreated topic gets a fresh directory at
    /// the same path), then tries to remove it.
    pub fn reclaim(&self, name: &str, id: Uuid) -> Result<()> {
        let dir = self.layout.topic_dir(name);
        match identity::read(&*self.fs, &dir) {
            Ok(Some(found)) if found == id => self.rename_aside(name, id)?,
            // Already renamed aside, or the directory is another incarnation's: leave it.
            Ok(_) | Err(_) => {}
        }
        self.sweep_reclaimed();
        Ok(())
    }

    /// Removes every directory renamed aside. Re-driven by housekeeping: whatever fails now
    /// (EBUSY from a `.nfs*` file, ENOTEMPTY) is retried on the next round.
    pub fn sweep_reclaimed(&self) {
        let root = self.layout.root();
        let report = match reclaim::sweep(&*self.fs, root) {
            Ok(report) => report,
            Err(e) => return warn!(error = %e, "reclamation sweep could not list the volume; retrying next round"),
        };
        for path in &report.removed {
            info!(dir = %path.display(), "reclaimed a deleted topic's directory");
        }
        for (path, e) in &report.pending {
            warn!(dir = %path.display(), error = %e, "reclamation incomplete; retrying next round");
        }
    }

    fn rename_aside(&self, name: &str, id: Uuid) -> Result<()> {
        reclaim::rename_aside(&*self.fs, self.layout.root(), name, id)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kaas_shared::fs::MemFs;
    use std::path::Path;
    use std::sync::Arc;

    fn store() -> TopicStore {
        let fs: FsRef = Arc::new(MemFs::new());
        let _ = fs.create_dir_all(Path::new("/data"));
        TopicStore::new(fs, PathBuf::from("/data"))
    }

    #[test]
    fn create_load_delete_recreate() -> Result<()> {
        let store = store();
        let first = Uuid::new_v4();
        store.create("orders", first, 3, &BTreeMap::new())?;
        let loaded = store.load_all()?;
        assert_eq!(loaded.len(), 1);
        assert_eq!(loaded[0].topic_id, first);

        store.reclaim("orders", first)?;
        assert!(store.load_all()?.is_empty());

        let second = Uuid::new_v4();
        store.create("orders", second, 1, &BTreeMap::new())?;
        let loaded = store.load_all()?;
        assert_eq!(loaded[0].topic_id, second);
        assert_eq!(loaded[0].partitions, 1);
        // Nothing of the first incarnation is left.
        let left = store.fs.list_dir(Path::new("/data")).map_err(crate::Error::Io)?;
        assert!(left.iter().all(|e| !reclaim::is_reclaim_dir_name(&e.name)), "{left:?}");
        Ok(())
    }

    #[test]
    fn a_directory_stamped_by_another_incarnation_is_not_written() -> Result<()> {
        let store = store();
        let id = Uuid::new_v4();
        store.create("t", id, 1, &BTreeMap::new())?;
        assert!(store.write("t", Uuid::new_v4(), 2, &BTreeMap::new()).is_err());
        assert_eq!(store.load_all()?[0].partitions, 1);
        Ok(())
    }
}
