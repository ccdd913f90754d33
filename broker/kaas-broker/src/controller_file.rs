//! A file under `__cluster/` that brokers serve from memory and that has one writer: the broker
//! in local mode, the controller broker in a cluster (the ACLs, the client quotas). Seed 001's
//! questions, answered once here for each such file:
//! - atomic primitive: the whole file is replaced by temp + fsync + rename + directory fsync
//!   (`kaas_shared::atomic_file::write_json`); a change is acknowledged only after that;
//! - idempotent and re-driven: a change is a function of what the file holds (add what is
//!   missing, remove what matches, set values), so a client's retry leaves the same file, and a
//!   change that leaves the content as it was writes nothing;
//! - single writer: each write is stamped with the writer's epoch (the controller's Lease
//!   epoch, at least 1) and is refused over a file a newer controller stamped. In local mode
//!   ([`LOCAL_MODE`]) the broker is the volume's only process: it writes over any stamp and
//!   leaves the stamp as it found it, so a volume a cluster used can be opened locally (and
//!   the cluster's next controller still writes over it). Writes on
//!   one broker are serialised by one mutex, each starting from what is on disk (a previous
//!   controller may have written since this broker last read it). Every broker of a cluster
//!   reads the file again when the controller says it changed it and every
//!   `--controller-files-refresh-ms` ([`ControllerFile::refresh`]). Two controllers overlap
//!   only within the Lease's window, as for the assignment.
//!
//! Its read half (`read`, `refresh`) also follows `kafka-users.json`, whose one writer is the
//! volume agent ([`crate::kafka_users`]); brokers never `update` that file.

use std::path::PathBuf;

use kaas_shared::atomic_file;
use kaas_shared::fs::FsRef;
use parking_lot::Mutex;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// The writer epoch of the broker in local mode (a controller's Lease epoch is at least 1).
pub const LOCAL_MODE: i64 = 0;

/// Why a change of the file was not made.
#[derive(Debug, Clone, thiserror::Error)]
pub enum WriteError {
    /// A newer controller wrote the file: this broker is no longer its writer.
    #[error("written by a newer controller (epoch {found}, this broker's {ours})")]
    NotController { found: i64, ours: i64 },
    /// The file could not be read or written; nothing was changed.
    #[error("{0}")]
    Storage(String),
}

/// The file's content with the epoch of the writer that wrote it (on disk: the content's
/// fields and `controller_epoch`, absent when 0).
#[derive(Debug, Default, Serialize, Deserialize)]
struct Stamped<T> {
    #[serde(flatten)]
    content: T,
    #[serde(default, skip_serializing_if = "is_zero")]
    controller_epoch: i64,
}

fn is_zero(epoch: &i64) -> bool {
    *epoch == 0
}

/// The length and hash of a file's bytes (a missing file: no bytes).
fn fingerprint(bytes: Option<&[u8]>) -> (usize, u64) {
    use std::hash::{Hash, Hasher};
    let bytes = bytes.unwrap_or_default();
    let mut hasher = std::hash::DefaultHasher::new();
    bytes.hash(&mut hasher);
    (bytes.len(), hasher.finish())
}

/// One controller-written file.
#[derive(Debug)]
pub struct ControllerFile {
    fs: FsRef,
    path: PathBuf,
    /// What the file holds, for error messages ("ACL file").
    what: &'static str,
    /// Serialises read-modify-write, and refreshes beside it; holds what the last refresh
    /// served (its bytes' length and hash; `None`: nothing yet, or a change made here since), so
    /// an unchanged file is not parsed again every second.
    writing: Mutex<Option<(usize, u64)>>,
}

impl ControllerFile {
    pub fn new(fs: FsRef, path: PathBuf, what: &'static str) -> ControllerFile {
        ControllerFile { fs, path, what, writing: Mutex::new(None) }
    }

    /// What the file holds (none yet: the default). Blocking (file I/O).
    pub fn read<T: DeserializeOwned + Default>(&self) -> Result<T, kaas_shared::Error> {
        Ok(self.read_stamped()?.content)
    }

    fn read_stamped<T: DeserializeOwned + Default>(&self) -> Result<Stamped<T>, kaas_shared::Error> {
        self.parse(self.bytes()?.as_deref())
    }

    fn bytes(&self) -> Result<Option<Vec<u8>>, kaas_shared::Error> {
        kaas_shared::fs::read_optional(&*self.fs, &self.path).map_err(|e| kaas_shared::Error::io("read", &self.path, e))
    }

    /// The file's content from its bytes (`None`: no file yet, the default).
    fn parse<T: DeserializeOwned + Default>(&self, bytes: Option<&[u8]>) -> Result<Stamped<T>, kaas_shared::Error> {
        let Some(bytes) = bytes else { return Ok(Stamped::default()) };
        serde_json::from_slice(bytes).map_err(|source| kaas_shared::Error::Json { what: self.what, path: self.path.clone(), source })
    }

    /// Reads the file again and hands it to `serve`, unless its bytes are those the last refresh
    /// served: in a cluster another broker (the controller) may have changed it. Blocking (file
    /// I/O).
    pub fn refresh<T: DeserializeOwned + Default>(&self, serve: impl FnOnce(T)) -> Result<(), kaas_shared::Error> {
        // NB: not beside a change of this broker's, which would be served for a moment and then
        // replaced by the older file read before it.
        let mut served = self.writing.lock();
        let bytes = self.bytes()?;
        let stamp = fingerprint(bytes.as_deref());
        if *served == Some(stamp) {
            return Ok(());
        }
        serve(self.parse::<T>(bytes.as_deref())?.content);
        *served = Some(stamp);
        Ok(())
    }

    /// Changes the file as `change` changes its content, stamped with `epoch`, and answers what
    /// `change` answered once the new file is fsynced. `serve` is handed what is on disk before
    /// the change and, if it changed anything, what is on disk after. Blocking (file I/O).
    pub fn update<T, R>(&self, epoch: i64, serve: impl Fn(&T), change: impl FnOnce(&mut T) -> R) -> Result<R, WriteError>
    where
        T: Serialize + DeserializeOwned + Default + Clone + PartialEq,
    {
        let mut served = self.writing.lock();
        // What is served from now on is what this change reads and writes, not what a refresh
        // last parsed.
        *served = None;
        let Stamped { mut content, controller_epoch: found } = self.read_stamped::<T>().map_err(|e| WriteError::Storage(e.to_string()))?;
        if epoch != LOCAL_MODE && found > epoch {
            return Err(WriteError::NotController { found, ours: epoch });
        }
        serve(&content);
        let before = content.clone();
        let answer = change(&mut content);
        if content == before {
            return Ok(answer);
        }
        let controller_epoch = if epoch == LOCAL_MODE { found } else { epoch };
        let stamped = Stamped { content, controller_epoch };
        self.write(&stamped).map_err(|e| WriteError::Storage(e.to_string()))?;
        serve(&stamped.content);
        Ok(answer)
    }

    fn write<T: Serialize>(&self, stamped: &Stamped<T>) -> Result<(), kaas_shared::Error> {
        if let Some(dir) = self.path.parent() {
            self.fs.create_dir_all(dir).map_err(|e| kaas_shared::Error::io("mkdir", dir, e))?;
        }
        atomic_file::write_json(&*self.fs, &self.path, stamped)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use kaas_shared::fs::MemFs;

    use super::*;

    #[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
    struct Names {
        names: Vec<String>,
    }

    fn file(fs: &Arc<MemFs>) -> ControllerFile {
        ControllerFile::new(fs.clone(), PathBuf::from("/v/__cluster/names.json"), "name file")
    }

    fn add(file: &ControllerFile, name: &str, epoch: i64) -> Result<(), WriteError> {
        file.update(epoch, |_: &Names| {}, |n| n.names.push(name.to_string()))
    }

    #[test]
    fn a_write_is_stamped_and_a_deposed_writer_is_refused() {
        let fs = Arc::new(MemFs::new());
        let (old, new) = (file(&fs), file(&fs));
        assert!(add(&old, "a", 3).is_ok());
        assert!(add(&new, "b", 4).is_ok(), "a newer epoch writes over an older one");
        assert!(matches!(add(&old, "c", 3), Err(WriteError::NotController { found: 4, ours: 3 })));
        let names: Names = new.read().unwrap_or_else(|e| panic!("read: {e}"));
        assert_eq!(names.names, ["a", "b"], "the new writer started from the old one's change");
        let text = String::from_utf8(
            kaas_shared::fs::read_optional(&*fs, &PathBuf::from("/v/__cluster/names.json")).ok().flatten().unwrap_or_default(),
        );
        assert!(text.is_ok_and(|t| t.contains("\"controller_epoch\": 4")), "stamped on disk");
    }

    #[test]
    fn a_refresh_serves_a_file_only_when_its_bytes_changed() {
        let fs = Arc::new(MemFs::new());
        let (writer, reader) = (file(&fs), file(&fs));
        let served = std::cell::RefCell::new(Vec::new());
        let refresh = || reader.refresh(|n: Names| served.borrow_mut().push(n.names)).unwrap_or_else(|e| panic!("refresh: {e}"));
        refresh();
        refresh();
        assert_eq!(*served.borrow(), [Vec::<String>::new()], "no file: served empty, once");
        assert!(add(&writer, "a", 1).is_ok());
        refresh();
        refresh();
        assert!(add(&writer, "b", 1).is_ok());
        refresh();
        assert_eq!(served.borrow().len(), 3, "{:?}", served.borrow());
        assert_eq!(served.borrow()[2], ["a", "b"]);
        // A change made through this file handle is followed by a full read.
        assert!(add(&reader, "c", 1).is_ok());
        refresh();
        assert_eq!(served.borrow().len(), 4);
    }

    #[test]
    fn an_unchanged_content_is_not_written_and_serve_sees_the_disk() {
        let fs = Arc::new(MemFs::new());
        let writer = file(&fs);
        assert!(add(&writer, "a", 0).is_ok());
        let served = std::cell::RefCell::new(Vec::new());
        let answer = writer.update(7, |n: &Names| served.borrow_mut().push(n.names.clone()), |n| n.names.len());
        assert_eq!(answer.ok(), Some(1));
        assert_eq!(*served.borrow(), [vec!["a".to_string()]], "served once: nothing changed");
        // Not restamped: a local-mode epoch-0 writer may still write.
        assert!(add(&writer, "b", 0).is_ok());
    }

    /// A volume a cluster's controller wrote, opened in local mode: the local broker changes
    /// the file and leaves the controller's stamp, so the cluster's controller still writes
    /// over it and an older one is still refused.
    #[test]
    fn local_mode_writes_over_a_clusters_file_and_keeps_its_stamp() {
        let fs = Arc::new(MemFs::new());
        let file = file(&fs);
        assert!(add(&file, "from-the-cluster", 5).is_ok());
        assert!(add(&file, "local", LOCAL_MODE).is_ok(), "local mode is refused over a cluster's stamp");
        let bytes = kaas_shared::fs::read_optional(&*fs, &PathBuf::from("/v/__cluster/names.json")).ok().flatten().unwrap_or_default();
        let text = String::from_utf8_lossy(&bytes);
        assert!(text.contains("\"controller_epoch\": 5") && text.contains("local"), "{text}");
        assert!(add(&file, "cluster-again", 5).is_ok());
        assert!(matches!(add(&file, "deposed", 4), Err(WriteError::NotController { found: 5, ours: 4 })));
    }
}
