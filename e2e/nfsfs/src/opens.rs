//! One mount's open files and silly-renamed ghosts: what a Linux NFS client tracks to decide
//! that an unlink must become a rename to `.nfsXXXX`, and when that ghost may finally go.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::inodes::Key;

/// An open regular file.
#[derive(Debug)]
pub(crate) struct Handle {
    /// The backing file, opened with the caller's flags.
    pub(crate) file: File,
    /// Its identity.
    pub(crate) key: Key,
    /// The volume-relative path it was opened by (for path-scoped faults).
    pub(crate) path: PathBuf,
}

/// The table.
#[derive(Debug, Default)]
pub(crate) struct Opens {
    handles: HashMap<u64, Arc<Handle>>,
    /// Open handles per file: a silly rename is needed while this is non-zero.
    counts: HashMap<Key, usize>,
    /// Ghost names (volume-relative) per file, removed when its count drops to zero.
    ghosts: HashMap<Key, Vec<PathBuf>>,
    next_fh: u64,
}

impl Opens {
    pub(crate) fn insert(&mut self, handle: Handle) -> u64 {
        self.next_fh += 1;
        *self.counts.entry(handle.key).or_default() += 1;
        self.handles.insert(self.next_fh, Arc::new(handle));
        self.next_fh
    }

    pub(crate) fn get(&self, fh: u64) -> Option<Arc<Handle>> {
        self.handles.get(&fh).cloned()
    }

    /// Closes `fh`; returns the ghosts to unlink if it was the file's last handle.
    pub(crate) fn remove(&mut self, fh: u64) -> Option<(Arc<Handle>, Vec<PathBuf>)> {
        let handle = self.handles.remove(&fh)?;
        let count = self.counts.entry(handle.key).or_default();
        *count = count.saturating_sub(1);
        let ghosts = if *count == 0 {
            self.counts.remove(&handle.key);
            self.ghosts.remove(&handle.key).unwrap_or_default()
        } else {
            Vec::new()
        };
        Some((handle, ghosts))
    }

    pub(crate) fn is_open(&self, key: Key) -> bool {
        self.counts.get(&key).is_some_and(|&n| n > 0)
    }

    pub(crate) fn add_ghost(&mut self, key: Key, path: PathBuf) {
        self.ghosts.entry(key).or_default().push(path);
    }

    /// Whether `path` is a ghost this mount still holds open.
    pub(crate) fn is_ghost(&self, path: &Path) -> bool {
        self.ghosts.values().flatten().any(|g| g == path)
    }

    /// Every ghost this mount still holds (for shutdown logging).
    pub(crate) fn ghost_count(&self) -> usize {
        self.ghosts.values().map(Vec::len).sum()
    }
}
