//! [`Fs`] held in memory: for unit tests and the broker's `--in-memory` mode.
//!
//! It keeps the semantics the engine relies on: parents must exist, exclusive create and hard
//! links fail on an existing name, an unlinked file stays readable through handles already open.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock};

use super::{DirEntry, File, Fs, OpenMode};

/// An in-memory filesystem.
#[derive(Debug, Default)]
pub struct MemFs {
    tree: Mutex<Tree>,
    /// Test hook: when set, every fsync/fdatasync fails with an I/O error.
    fail_syncs: Arc<AtomicBool>,
    /// Test hook: directory fsyncs wait while this is held.
    dir_sync_hold: DirSyncHold,
}

#[derive(Debug, Default)]
struct DirSyncHold {
    state: Mutex<HoldState>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct HoldState {
    held: bool,
    /// Directory fsyncs waiting for the hold to be released.
    waiting: usize,
}

#[derive(Debug, Default)]
struct Tree {
    dirs: BTreeSet<PathBuf>,
    files: BTreeMap<PathBuf, Arc<RwLock<Vec<u8>>>>,
}

impl MemFs {
    /// An empty filesystem holding only `/`.
    pub fn new() -> Self {
        let fs = MemFs::default();
        fs.tree().dirs.insert(PathBuf::from("/"));
        fs
    }

    /// Test hook (fault injection): make every following fsync fail (`true`) or succeed again.
    pub fn fail_syncs(&self, fail: bool) {
        self.fail_syncs.store(fail, Ordering::SeqCst);
    }

    /// Test hook (pausing a writer mid-operation): while held, every directory fsync waits; it
    /// resumes when the hold is released.
    pub fn hold_dir_syncs(&self, hold: bool) {
        let mut state = self.dir_sync_hold.state.lock().unwrap_or_else(|e| e.into_inner());
        state.held = hold;
        self.dir_sync_hold.changed.notify_all();
    }

    /// Test hook: blocks until `n` directory fsyncs are waiting on the hold.
    pub fn wait_for_held_dir_syncs(&self, n: usize) {
        let hold = &self.dir_sync_hold;
        let state = hold.state.lock().unwrap_or_else(|e| e.into_inner());
        drop(hold.changed.wait_while(state, |s| s.waiting < n).unwrap_or_else(|e| e.into_inner()));
    }

    fn tree(&self) -> MutexGuard<'_, Tree> {
        self.tree.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn sync_result(&self) -> io::Result<()> {
        sync_result(&self.fail_syncs)
    }
}

fn sync_result(fail: &AtomicBool) -> io::Result<()> {
    if fail.load(Ordering::SeqCst) {
        Err(io::Error::other("injected fsync failure"))
    } else {
        Ok(())
    }
}

fn not_found() -> io::Error {
    io::Error::from(io::ErrorKind::NotFound)
}

impl Tree {
    fn parent_exists(&self, path: &Path) -> bool {
        path.parent().is_some_and(|p| self.dirs.contains(p))
    }

    fn name_taken(&self, path: &Path) -> bool {
        self.dirs.contains(path) || self.files.contains_key(path)
    }

    /// Moves a directory and everything below it, as rename(2) does: the target may be
    /// missing or an empty directory, never a file or a non-empty directory.
    fn rename_dir(&mut self, from: &Path, to: &Path) -> io::Result<()> {
        if self.files.contains_key(to) {
            return Err(io::Error::from(io::ErrorKind::NotADirectory));
        }
        if to.starts_with(from) {
            return Err(io::Error::from(io::ErrorKind::InvalidInput));
        }
        let occupied = self.dirs.iter().any(|d| d != to && d.starts_with(to))
            || self.files.keys().any(|f| f.starts_with(to));
        if occupied {
            return Err(io::Error::from(io::ErrorKind::DirectoryNotEmpty));
        }
        let moved = |p: &Path| p.strip_prefix(from).map(|rest| to.join(rest)).ok();
        let dirs: Vec<PathBuf> = self.dirs.iter().filter(|d| d.starts_with(from)).cloned().collect();
        for d in dirs {
            self.dirs.remove(&d);
            if let Some(n) = moved(&d) {
                self.dirs.insert(n);
            }
        }
        let files: Vec<PathBuf> = self.files.keys().filter(|f| f.starts_with(from)).cloned().collect();
        for f in files {
            if let (Some(data), Some(n)) = (self.files.remove(&f), moved(&f)) {
                self.files.insert(n, data);
            }
        }
        Ok(())
    }
}

impl Fs for MemFs {
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        let mut tree = self.tree();
        for ancestor in path.ancestors() {
            if tree.files.contains_key(ancestor) {
                return Err(io::Error::from(io::ErrorKind::AlreadyExists));
            }
            tree.dirs.insert(ancestor.to_path_buf());
        }
        Ok(())
    }

    fn list_dir_sized(&self, path: &Path, sized: &dyn Fn(&str) -> bool) -> io::Result<Vec<DirEntry>> {
        let tree = self.tree();
        if !tree.dirs.contains(path) {
            return Err(not_found());
        }
        let name_of = |p: &Path| p.file_name().map(|n| n.to_string_lossy().into_owned());
        let mut out = Vec::new();
        for d in tree.dirs.iter().filter(|d| d.parent() == Some(path)) {
            out.extend(name_of(d).map(|name| DirEntry {
                name,
                len: 0,
                is_dir: true,
            }));
        }
        for (f, data) in tree.files.iter().filter(|(f, _)| f.parent() == Some(path)) {
            out.extend(name_of(f).map(|name| DirEntry {
                len: if sized(&name) { data.read().unwrap_or_else(|e| e.into_inner()).len() as u64 } else { 0 },
                name,
                is_dir: false,
            }));
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    fn stat(&self, path: &Path) -> io::Result<DirEntry> {
        let tree = self.tree();
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if tree.dirs.contains(path) {
            return Ok(DirEntry {
                name,
                len: 0,
                is_dir: true,
            });
        }
        let data = tree.files.get(path).ok_or_else(not_found)?;
        let len = data.read().unwrap_or_else(|e| e.into_inner()).len() as u64;
        Ok(DirEntry {
            name,
            len,
            is_dir: false,
        })
    }

    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Arc<dyn File>> {
        let mut tree = self.tree();
        let data = match (mode, tree.files.get(path)) {
            (OpenMode::CreateNew, Some(_)) => {
                return Err(io::Error::from(io::ErrorKind::AlreadyExists));
            }
            (OpenMode::CreateNew, None) => {
                if tree.dirs.contains(path) {
                    return Err(io::Error::from(io::ErrorKind::AlreadyExists));
                }
                if !tree.parent_exists(path) {
                    return Err(not_found());
                }
                let data = Arc::new(RwLock::new(Vec::new()));
                tree.files.insert(path.to_path_buf(), data.clone());
                data
            }
            (_, Some(data)) => data.clone(),
            (_, None) => return Err(not_found()),
        };
        let writable = mode != OpenMode::Read;
        Ok(Arc::new(MemFile {
            data,
            writable,
            fail_syncs: self.fail_syncs.clone(),
        }))
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.tree()
            .files
            .remove(path)
            .map(|_| ())
            .ok_or_else(not_found)
    }

    fn remove_dir(&self, path: &Path) -> io::Result<()> {
        let mut tree = self.tree();
        if !tree.dirs.contains(path) {
            return Err(not_found());
        }
        let busy = tree.dirs.iter().any(|d| d.parent() == Some(path))
            || tree.files.keys().any(|f| f.parent() == Some(path));
        if busy {
            return Err(io::Error::from(io::ErrorKind::DirectoryNotEmpty));
        }
        tree.dirs.remove(path);
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut tree = self.tree();
        if !tree.parent_exists(to) {
            return Err(not_found());
        }
        if tree.dirs.contains(from) {
            return tree.rename_dir(from, to);
        }
        if tree.dirs.contains(to) {
            return Err(io::Error::from(io::ErrorKind::IsADirectory));
        }
        let data = tree.files.remove(from).ok_or_else(not_found)?;
        tree.files.insert(to.to_path_buf(), data);
        Ok(())
    }

    fn hard_link(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut tree = self.tree();
        if tree.name_taken(to) {
            return Err(io::Error::from(io::ErrorKind::AlreadyExists));
        }
        if !tree.parent_exists(to) {
            return Err(not_found());
        }
        let data = tree.files.get(from).cloned().ok_or_else(not_found)?;
        tree.files.insert(to.to_path_buf(), data);
        Ok(())
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        if !self.tree().dirs.contains(path) {
            return Err(not_found());
        }
        let hold = &self.dir_sync_hold;
        let mut state = hold.state.lock().unwrap_or_else(|e| e.into_inner());
        if state.held {
            state.waiting += 1;
            hold.changed.notify_all();
            state = hold.changed.wait_while(state, |s| s.held).unwrap_or_else(|e| e.into_inner());
            state.waiting -= 1;
        }
        drop(state);
        self.sync_result()
    }
}

#[derive(Debug)]
struct MemFile {
    data: Arc<RwLock<Vec<u8>>>,
    writable: bool,
    fail_syncs: Arc<AtomicBool>,
}

impl MemFile {
    fn check_writable(&self) -> io::Result<()> {
        if self.writable {
            Ok(())
        } else {
            Err(io::Error::from(io::ErrorKind::PermissionDenied))
        }
    }
}

impl File for MemFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let data = self.data.read().unwrap_or_else(|e| e.into_inner());
        let start = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(data.len());
        let n = buf.len().min(data.len() - start);
        buf[..n].copy_from_slice(&data[start..start + n]);
        Ok(n)
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.check_writable()?;
        let start = usize::try_from(offset).map_err(|_| io::Error::other("offset too large"))?;
        let mut data = self.data.write().unwrap_or_else(|e| e.into_inner());
        if data.len() < start + buf.len() {
            data.resize(start + buf.len(), 0);
        }
        data[start..start + buf.len()].copy_from_slice(buf);
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        sync_result(&self.fail_syncs)
    }

    fn sync_all(&self) -> io::Result<()> {
        sync_result(&self.fail_syncs)
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.data.read().unwrap_or_else(|e| e.into_inner()).len() as u64)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.check_writable()?;
        let len = usize::try_from(len).map_err(|_| io::Error::other("length too large"))?;
        self.data
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .resize(len, 0);
        Ok(())
    }

    fn as_std(&self) -> Option<&std::fs::File> {
        None
    }
}
