//! Topic metadata on the volume in local mode: identity stamp, topic.json, and reclamation of
//! deleted topics' directories.
//!
//! Review questions of seed 001, answered here once:
//! - stamp and topic.json are exclusive create and temp+fsync+rename (atomic primitives);
//! - reclamation renames a topic directory aside in one atomic rename, then removes the renamed
//!   tree by an idempotent sweep that every housekeeping round re-drives until it is gone;
//! - in local mode this broker is the only writer of topic metadata.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use kaas_shared::fs::FsRef;
use kaas_shared::layout::Layout;
use kaas_shared::topic_file::TopicFile;
use kaas_shared::{identity, topic_file};
use tracing::{info, warn};
use uuid::Uuid;

use crate::error::Result;

/// Prefix of a topic directory renamed aside for removal.
const RECLAIM_PREFIX: &str = ".reclaim-";

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
        let Ok(entries) = self.fs.list_dir(root) else { return };
        for entry in entries.iter().filter(|e| e.is_dir && e.name.starts_with(RECLAIM_PREFIX)) {
            let path = root.join(&entry.name);
            match remove_tree(&*self.fs, &path) {
                Ok(()) => info!(dir = %path.display(), "reclaimed a deleted topic's directory"),
                Err(e) => warn!(dir = %path.display(), error = %e, "reclamation incomplete; retrying next round"),
            }
        }
    }

    fn rename_aside(&self, name: &str, id: Uuid) -> Result<()> {
        let root = self.layout.root();
        let from = self.layout.topic_dir(name);
        let to = root.join(format!("{RECLAIM_PREFIX}{}-{name}", id.hyphenated()));
        match self.fs.rename(&from, &to) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(kaas_shared::Error::io("rename", &from, e).into()),
        }
        self.fs.sync_dir(root).map_err(|e| kaas_shared::Error::io("fsync dir", root, e))?;
        Ok(())
    }
}

/// `rm -r`, one unlink at a time; safe to repeat after any failure.
fn remove_tree(fs: &dyn kaas_shared::fs::Fs, path: &Path) -> io::Result<()> {
    let entries = match fs.list_dir(path) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let child = path.join(&entry.name);
        if entry.is_dir {
            remove_tree(fs, &child)?;
        } else {
            match fs.remove_file(&child) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
    }
    match fs.remove_dir(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kaas_shared::fs::MemFs;
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
        assert!(left.iter().all(|e| !e.name.starts_with(RECLAIM_PREFIX)), "{left:?}");
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
