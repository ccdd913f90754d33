//! Topic metadata on the volume: identity stamp, topic.json, and (in local mode) reclamation of
//! deleted topics' directories. In cluster mode reclamation is the operator's job — one writer
//! per job — so a broker's store never renames a directory aside on its own and never sweeps.
//!
//! Review questions of seed 001, answered here once:
//! - stamp and topic.json are exclusive create and temp+fsync+rename (atomic primitives);
//! - reclamation (`kaas_shared::reclaim`, shared with the operator) renames a topic directory
//!   aside in one atomic rename, then removes the renamed tree by an idempotent sweep that every
//!   housekeeping round re-drives until it is gone;
//! - in local mode this broker is the only writer of topic metadata.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use kaas_shared::fs::FsRef;
use kaas_shared::layout::Layout;
use kaas_shared::live_topic_files::LiveTopicFiles;
use kaas_shared::live_topics::LiveSet;
use kaas_shared::topic_file::TopicFile;
use kaas_shared::{identity, reclaim, topic_file};
use tracing::{info, warn};
use uuid::Uuid;

use crate::error::{Error, Result};

/// Topic metadata files under one volume root.
#[derive(Debug, Clone)]
pub struct TopicStore {
    fs: FsRef,
    layout: Layout,
    /// Whether this store reclaims directories (local mode: the broker is the only writer).
    reclaims: bool,
    /// The live topics' files as last read (cluster mode, see [`LiveTopicFiles`]).
    live_files: Arc<LiveTopicFiles>,
}

/// What [`TopicStore::load_all`] found.
#[derive(Debug, Default)]
pub struct Loaded {
    /// Every topic whose topic.json and identity stamp agree.
    pub topics: Vec<TopicFile>,
    /// Directories that could not be read this time (I/O error, corrupt topic.json): not
    /// opened, and a topic already open under that name is kept as it is.
    pub unreadable: Vec<String>,
}

impl TopicStore {
    /// A store that reclaims deleted and unfinished topic directories (local mode).
    pub fn local(fs: FsRef, root: PathBuf) -> TopicStore {
        TopicStore { fs, layout: Layout::new(root), reclaims: true, live_files: Default::default() }
    }

    /// A store that leaves reclamation to the operator (cluster mode).
    pub fn cluster(fs: FsRef, root: PathBuf) -> TopicStore {
        TopicStore { fs, layout: Layout::new(root), reclaims: false, live_files: Default::default() }
    }

    /// Every topic whose topic.json and identity stamp agree. A directory that disagrees is
    /// never opened as a topic. One without topic.json is, in local mode, a create that
    /// crashed before it was acknowledged and is reclaimed; in cluster mode, a topic the
    /// operator is still creating (it stamps the directory, then writes topic.json). One
    /// directory that cannot be read costs that topic, never the others.
    pub fn load_all(&self) -> Result<Loaded> {
        let root = self.layout.root();
        let mut loaded = Loaded::default();
        for entry in self.fs.list_dir(root).map_err(|e| kaas_shared::Error::io("list", root, e))? {
            if !entry.is_dir || entry.name.starts_with('.') || entry.name.starts_with("__") {
                continue;
            }
            let dir = self.layout.topic_dir(&entry.name);
            let file = match topic_file::read(&*self.fs, &dir) {
                Ok(file) => file,
                Err(e) => {
                    warn!(dir = %dir.display(), error = %e, "cannot read topic.json; not opening this topic now");
                    loaded.unreadable.push(entry.name);
                    continue;
                }
            };
            let Some(file) = file else {
                if self.reclaims {
                    warn!(dir = %dir.display(), "topic directory without topic.json: an unfinished create; reclaiming it");
                    let id = identity::read(&*self.fs, &dir).ok().flatten().unwrap_or_else(Uuid::new_v4);
                    if let Err(e) = self.rename_aside(&entry.name, id) {
                        warn!(dir = %dir.display(), error = %e, "cannot reclaim an unfinished create yet; retrying at the next start");
                    }
                }
                continue;
            };
            if file.name != entry.name {
                warn!(dir = %dir.display(), named = %file.name, "topic.json names another topic; not opening it");
                continue;
            }
            if let Err(e) = identity::verify(&*self.fs, &dir, file.topic_id) {
                warn!(dir = %dir.display(), error = %e, "identity stamp does not match topic.json; not opening it");
                if !matches!(e, kaas_shared::Error::IdentityMismatch { .. }) {
                    loaded.unreadable.push(entry.name);
                }
                continue;
            }
            loaded.topics.push(file);
        }
        Ok(loaded)
    }

    /// The topics of `live` whose directory holds them (cluster mode): only those directories
    /// are read, and each only when its topic's record changed since (see [`LiveTopicFiles`]).
    pub fn load_live(&self, live: &LiveSet) -> Loaded {
        let found = self.live_files.read(&*self.fs, &self.layout, live);
        for (name, error) in &found.unreadable {
            warn!(topic = %name, %error, "cannot read topic.json; not opening this topic now");
        }
        for (name, error) in &found.disagreeing {
            warn!(topic = %name, %error, "identity stamp does not match topic.json; not opening it");
        }
        Loaded { topics: found.topics, unreadable: found.unreadable.into_iter().map(|(name, _)| name).collect() }
    }

    /// Stamps a new topic directory with its identity and writes its topic.json. A directory
    /// of the same name left by a creation that never finished is reclaimed first.
    pub fn create(&self, name: &str, id: Uuid, partitions: i32, configs: &BTreeMap<String, String>) -> Result<()> {
        let dir = self.layout.topic_dir(name);
        if let Some(old) = identity::read(&*self.fs, &dir)?
            && old != id
        {
            // NB: a directory with a topic.json is a live topic — deletion renames the whole
            // directory aside — that another broker created and this one has not followed yet
            // (two brokers auto-creating one name at once). Reclaiming it would delete it.
            if topic_file::read(&*self.fs, &dir)?.is_some() {
                return Err(Error::TopicExists(name.to_string()));
            }
            info!(topic = name, old = %old, "reclaiming the directory of an earlier incarnation");
            self.rename_aside(name, old)?;
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
        if !self.reclaims {
            return;
        }
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
    use kaas_shared::fs::{MemFs, OpenMode};
    use std::path::Path;
    use std::sync::Arc;

    fn fs() -> FsRef {
        let fs: FsRef = Arc::new(MemFs::new());
        let _ = fs.create_dir_all(Path::new("/data"));
        fs
    }

    fn store() -> TopicStore {
        TopicStore::local(fs(), PathBuf::from("/data"))
    }

    fn names(store: &TopicStore) -> Vec<String> {
        store.load_all().map(|l| l.topics.into_iter().map(|t| t.name).collect()).unwrap_or_default()
    }

    #[test]
    fn create_load_delete_recreate() -> Result<()> {
        let store = store();
        let first = Uuid::new_v4();
        store.create("orders", first, 3, &BTreeMap::new())?;
        let loaded = store.load_all()?.topics;
        assert_eq!(loaded.len(), 1);
        assert_eq!(loaded[0].topic_id, first);

        store.reclaim("orders", first)?;
        assert!(store.load_all()?.topics.is_empty());

        let second = Uuid::new_v4();
        store.create("orders", second, 1, &BTreeMap::new())?;
        let loaded = store.load_all()?.topics;
        assert_eq!(loaded[0].topic_id, second);
        assert_eq!(loaded[0].partitions, 1);
        // Nothing of the first incarnation is left.
        let left = store.fs.list_dir(Path::new("/data")).map_err(crate::Error::Io)?;
        assert!(left.iter().all(|e| !reclaim::is_reclaim_dir_name(&e.name)), "{left:?}");
        Ok(())
    }

    /// Two brokers that have not followed each other create one name: the second finds the
    /// first's topic and says so, leaving it whole.
    #[test]
    fn a_live_topic_another_broker_created_is_not_reclaimed() -> Result<()> {
        let store = store();
        let first = Uuid::new_v4();
        store.create("orders", first, 6, &BTreeMap::new())?;
        let second = store.create("orders", Uuid::new_v4(), 1, &BTreeMap::new());
        assert!(matches!(second, Err(Error::TopicExists(_))), "{second:?}");
        let loaded = store.load_all()?.topics;
        assert_eq!((loaded[0].topic_id, loaded[0].partitions), (first, 6));
        // A stamp without topic.json is a creation that never finished: reclaimed.
        identity::stamp(&*store.fs, Path::new("/data/unfinished"), Uuid::new_v4())?;
        let third = Uuid::new_v4();
        store.create("unfinished", third, 1, &BTreeMap::new())?;
        assert_eq!(identity::read(&*store.fs, Path::new("/data/unfinished"))?, Some(third));
        Ok(())
    }

    #[test]
    fn a_directory_stamped_by_another_incarnation_is_not_written() -> Result<()> {
        let store = store();
        let id = Uuid::new_v4();
        store.create("t", id, 1, &BTreeMap::new())?;
        assert!(store.write("t", Uuid::new_v4(), 2, &BTreeMap::new()).is_err());
        assert_eq!(store.load_all()?.topics[0].partitions, 1);
        Ok(())
    }

    /// The operator stamps a topic directory, then writes its topic.json: a broker that lists
    /// the volume in between must leave the directory alone (reclamation is the operator's).
    #[test]
    fn in_cluster_mode_an_unfinished_create_is_left_to_the_operator() -> Result<()> {
        let fs = fs();
        let store = TopicStore::cluster(fs.clone(), PathBuf::from("/data"));
        let id = Uuid::new_v4();
        identity::stamp(&*fs, Path::new("/data/orders"), id)?;
        assert!(store.load_all()?.topics.is_empty());
        store.sweep_reclaimed();
        assert_eq!(identity::read(&*fs, Path::new("/data/orders"))?, Some(id), "the directory was renamed aside");
        // The operator finishes the create; the broker now finds the topic.
        topic_file::write(&*fs, Path::new("/data/orders"), &TopicFile { name: "orders".into(), topic_id: id, partitions: 2, configs: BTreeMap::new() })?;
        assert_eq!(names(&store), ["orders"]);

        // A directory renamed aside by the operator is swept by the operator, not by brokers.
        reclaim::rename_aside(&*fs, Path::new("/data"), "orders", id)?;
        store.sweep_reclaimed();
        let left = fs.list_dir(Path::new("/data")).map_err(crate::Error::Io)?;
        assert!(left.iter().any(|e| reclaim::is_reclaim_dir_name(&e.name)), "a broker swept: {left:?}");
        Ok(())
    }

    /// In local mode the broker is the only writer: an unfinished create is reclaimed.
    #[test]
    fn in_local_mode_an_unfinished_create_is_reclaimed() -> Result<()> {
        let store = store();
        identity::stamp(&*store.fs, Path::new("/data/orders"), Uuid::new_v4())?;
        assert!(store.load_all()?.topics.is_empty());
        assert!(identity::read(&*store.fs, Path::new("/data/orders"))?.is_none());
        Ok(())
    }

    /// One unreadable topic.json costs that topic, not the listing.
    #[test]
    fn a_corrupt_topic_file_costs_only_its_topic() -> Result<()> {
        let store = store();
        store.create("good", Uuid::new_v4(), 1, &BTreeMap::new())?;
        store.create("bad", Uuid::new_v4(), 1, &BTreeMap::new())?;
        let f = store.fs.open(Path::new("/data/bad/topic.json"), OpenMode::ReadWrite).map_err(crate::Error::Io)?;
        f.write_all_at(b"{ not json", 0).map_err(crate::Error::Io)?;
        let loaded = store.load_all()?;
        assert_eq!(loaded.topics.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(), ["good"]);
        assert_eq!(loaded.unreadable, ["bad"]);
        Ok(())
    }
}
