//! One mount of the volume: the state a Linux NFS client keeps for one host (its inode table,
//! its open files, its silly-renamed ghosts) and the operations on it. The FUSE entry points
//! are in `dispatch`; namespace operations (where silly rename lives) in `names`; file data in
//! `data`.

mod data;
mod dispatch;
mod names;

use std::collections::HashMap;
use std::fs::Metadata;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use fuser::Errno;
use parking_lot::Mutex;

use crate::faults::Faults;
use crate::inodes::{Inodes, Key};
use crate::opens::{Handle, Opens};

/// How the mounts present the volume.
#[derive(Debug, Clone)]
pub struct Options {
    /// How long the kernel may cache attributes and names (0 = never: every access asks the
    /// filesystem, the strictest close-to-open behaviour). A positive value reproduces an NFS
    /// client's attribute cache (`actimeo`): another host's change shows up only after it.
    pub attr_ttl: Duration,
    /// Open regular files with FOPEN_DIRECT_IO so every read and write reaches the
    /// filesystem (and can fail with ESTALE or an injected fault) instead of the page cache.
    /// mmap keeps working where the kernel supports FUSE_DIRECT_IO_ALLOW_MMAP (Linux 6.6+).
    pub direct_io: bool,
    /// FUSE worker threads per mount (an injected delay blocks one of them per operation).
    pub threads: usize,
    /// Ask fusermount3 to unmount if the serving process dies (kill -9 leaves no mount).
    pub auto_unmount: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            attr_ttl: Duration::ZERO,
            direct_io: true,
            threads: 4,
            auto_unmount: true,
        }
    }
}

/// What every mount shares: the backing directory (the "server"), the faults, the options.
#[derive(Debug)]
pub struct Volume {
    backing: PathBuf,
    faults: Arc<Mutex<Faults>>,
    options: Options,
    /// Makes silly-rename names unique across mounts, as the counter in a Linux NFS client's
    /// `.nfs<fileid><counter>` does.
    ghost_seq: AtomicU32,
}

impl Volume {
    /// A volume over `backing` (already canonical).
    pub fn new(backing: PathBuf, faults: Arc<Mutex<Faults>>, options: Options) -> Volume {
        Volume {
            backing,
            faults,
            options,
            ghost_seq: AtomicU32::new(0),
        }
    }

    /// The backing directory.
    pub fn backing(&self) -> &Path {
        &self.backing
    }

    /// The mount options.
    pub fn options(&self) -> &Options {
        &self.options
    }
}

type Res<T> = Result<T, Errno>;

#[derive(Debug)]
struct State {
    inodes: Inodes,
    opens: Opens,
}

/// One mount (simulated host).
#[derive(Debug)]
pub(crate) struct MountFs {
    name: String,
    volume: Arc<Volume>,
    /// The inode table and the open files under one lock, so deciding "open here, so silly
    /// rename" and the rename itself cannot interleave with an open or a close.
    state: Mutex<State>,
    /// Directory listings, snapshotted at opendir (and on a rewind) so offsets stay stable.
    dirs: Mutex<HashMap<u64, Arc<Vec<DirEnt>>>>,
    next_dir: AtomicU64,
}

#[derive(Debug)]
struct DirEnt {
    name: std::ffi::OsString,
    ino: u64,
    kind: fuser::FileType,
}

impl MountFs {
    pub(crate) fn new(name: &str, volume: Arc<Volume>) -> io::Result<MountFs> {
        let root = std::fs::symlink_metadata(&volume.backing)?;
        Ok(MountFs {
            name: name.to_string(),
            state: Mutex::new(State {
                inodes: Inodes::new(Key::of(&root)),
                opens: Opens::default(),
            }),
            volume,
            dirs: Mutex::new(HashMap::new()),
            next_dir: AtomicU64::new(1),
        })
    }

    /// Applies the injected per-operation delay, if any.
    fn enter(&self) {
        let delay = self.volume.faults.lock().delay(&self.name);
        if let Some(d) = delay {
            std::thread::sleep(d);
        }
    }

    fn ttl(&self) -> Duration {
        self.volume.options.attr_ttl
    }

    fn abs(&self, rel: &Path) -> PathBuf {
        self.volume.backing.join(rel)
    }

    /// ESTALE if a fault covers `rel` on this mount.
    fn check_stale(&self, rel: &Path) -> Res<()> {
        if self.volume.faults.lock().stale(&self.name, rel) {
            Err(Errno::from_i32(libc::ESTALE))
        } else {
            Ok(())
        }
    }

    /// The path and current metadata of node `ino`. ESTALE when its last known name no longer
    /// names the same file: removed, or renamed by another host (the kernel then looks the path
    /// up again, as it does for NFS).
    fn resolve(&self, ino: u64) -> Res<(PathBuf, Metadata)> {
        let (rel, key) = {
            let st = self.state.lock();
            match (st.inodes.path(ino), st.inodes.key(ino)) {
                (Some(p), Some(k)) => (p, k),
                _ => return Err(Errno::from_i32(libc::ESTALE)),
            }
        };
        self.check_stale(&rel)?;
        match std::fs::symlink_metadata(self.abs(&rel)) {
            Ok(meta) if Key::of(&meta) == key => Ok((rel, meta)),
            Ok(_) => Err(Errno::from_i32(libc::ESTALE)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Err(Errno::from_i32(libc::ESTALE)),
            Err(e) => Err(e.into()),
        }
    }

    /// The volume-relative path of `name` in directory node `parent`.
    fn child(&self, parent: u64, name: &std::ffi::OsStr) -> Res<PathBuf> {
        if name.is_empty() || name == "." || name == ".." || name.as_encoded_bytes().contains(&b'/')
        {
            return Err(Errno::EINVAL);
        }
        let (dir, meta) = self.resolve(parent)?;
        if !meta.is_dir() {
            return Err(Errno::ENOTDIR);
        }
        let rel = dir.join(name);
        self.check_stale(&rel)?;
        Ok(rel)
    }

    /// An open handle, or EBADF.
    fn handle(&self, fh: u64) -> Res<Arc<Handle>> {
        self.state.lock().opens.get(fh).ok_or(Errno::EBADF)
    }

    /// The handle's current metadata, or ESTALE when the file is gone from the server: its
    /// last link was removed through another mount (a mount that holds it open silly-renames
    /// instead, so the link count only reaches zero when no host keeps a name for it), or a
    /// fault covers its path.
    fn live(&self, h: &Handle) -> Res<Metadata> {
        self.check_stale(&h.path)?;
        let meta = h.file.metadata()?;
        if meta.nlink() == 0 {
            return Err(Errno::from_i32(libc::ESTALE));
        }
        Ok(meta)
    }

    fn next_ghost_seq(&self) -> u32 {
        self.volume.ghost_seq.fetch_add(1, Ordering::Relaxed)
    }

    /// Ghosts this mount still holds (logged at unmount).
    pub(crate) fn ghost_count(&self) -> usize {
        self.state.lock().opens.ghost_count()
    }
}
