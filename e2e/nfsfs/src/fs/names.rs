//! Namespace operations, where NFS differs from a local disk: unlink or rename-over of a file
//! this mount holds open becomes a silly rename to `.nfs<fileid><counter>`, that ghost cannot
//! be unlinked (EBUSY) and keeps its directory non-empty until the last handle on this mount
//! closes.

use std::ffi::{OsStr, OsString};
use std::fs::{self, Metadata, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use fuser::{Errno, FileAttr, RenameFlags};
use nix::fcntl::AT_FDCWD;

use super::{DirEnt, MountFs, Res, State};
use crate::attr;
use crate::inodes::{Key, ROOT};
use crate::opens::Handle;

/// Flags the kernel passes that the backing open must not see: creation is decided by the
/// operation (create vs open), and O_DIRECT would impose the backing disk's alignment.
const STRIP_FLAGS: i32 = libc::O_CREAT | libc::O_EXCL | libc::O_NOCTTY | libc::O_DIRECT;

impl MountFs {
    /// Records `name` in `parent` as a node and returns its attributes.
    fn entry(&self, parent: u64, name: &OsStr, meta: &Metadata) -> FileAttr {
        let ino = self
            .state
            .lock()
            .inodes
            .remember(parent, name, Key::of(meta));
        attr::of(ino, meta)
    }

    pub(super) fn do_lookup(&self, parent: u64, name: &OsStr) -> Res<FileAttr> {
        if name == "." || name == ".." {
            // Only asked for with export support; answer the directory itself or its parent.
            let ino = if name == "." {
                parent
            } else {
                self.state.lock().inodes.parent(parent).unwrap_or(ROOT)
            };
            let (_, meta) = self.resolve(ino)?;
            return Ok(attr::of(ino, &meta));
        }
        let rel = self.child(parent, name)?;
        let meta = fs::symlink_metadata(self.abs(&rel))?;
        Ok(self.entry(parent, name, &meta))
    }

    pub(super) fn do_forget(&self, ino: u64, n: u64) {
        self.state.lock().inodes.forget(ino, n);
    }

    /// Creates and opens a regular file. O_EXCL goes to the backing create, so exactly one of
    /// several racing hosts wins, as NFS's exclusive create promises.
    pub(super) fn do_create(
        &self,
        parent: u64,
        name: &OsStr,
        mode: u32,
        flags: i32,
        owner: (u32, u32),
    ) -> Res<(FileAttr, u64)> {
        let rel = self.child(parent, name)?;
        let abs = self.abs(&rel);
        // O_CREAT (and O_EXCL) as raw flags: std refuses `create` on a read-only open, which
        // POSIX allows.
        let mut opts = open_options(flags);
        opts.custom_flags(custom_flags(flags) | libc::O_CREAT | (flags & libc::O_EXCL))
            .mode(mode & 0o7777);
        let file = opts.open(&abs)?;
        chown_best_effort(&abs, owner);
        let meta = file.metadata()?;
        let key = Key::of(&meta);
        let mut st = self.state.lock();
        let ino = st.inodes.remember(parent, name, key);
        let fh = st.opens.insert(Handle {
            file,
            key,
            path: rel,
        });
        Ok((attr::of(ino, &meta), fh))
    }

    pub(super) fn do_mkdir(
        &self,
        parent: u64,
        name: &OsStr,
        mode: u32,
        owner: (u32, u32),
    ) -> Res<FileAttr> {
        let rel = self.child(parent, name)?;
        let abs = self.abs(&rel);
        fs::DirBuilder::new().mode(mode & 0o7777).create(&abs)?;
        chown_best_effort(&abs, owner);
        let meta = fs::symlink_metadata(&abs)?;
        Ok(self.entry(parent, name, &meta))
    }

    pub(super) fn do_symlink(
        &self,
        parent: u64,
        name: &OsStr,
        target: &Path,
        owner: (u32, u32),
    ) -> Res<FileAttr> {
        let rel = self.child(parent, name)?;
        let abs = self.abs(&rel);
        std::os::unix::fs::symlink(target, &abs)?;
        if let Err(e) = std::os::unix::fs::lchown(&abs, Some(owner.0), Some(owner.1)) {
            tracing::debug!(error = %e, "lchown of a new symlink");
        }
        let meta = fs::symlink_metadata(&abs)?;
        Ok(self.entry(parent, name, &meta))
    }

    pub(super) fn do_readlink(&self, ino: u64) -> Res<Vec<u8>> {
        let (rel, _) = self.resolve(ino)?;
        let target = fs::read_link(self.abs(&rel))?;
        Ok(target.into_os_string().into_encoded_bytes())
    }

    pub(super) fn do_link(&self, ino: u64, new_parent: u64, new_name: &OsStr) -> Res<FileAttr> {
        let (src, _) = self.resolve(ino)?;
        let rel = self.child(new_parent, new_name)?;
        fs::hard_link(self.abs(&src), self.abs(&rel))?;
        let meta = fs::symlink_metadata(self.abs(&rel))?;
        Ok(self.entry(new_parent, new_name, &meta))
    }

    pub(super) fn do_unlink(&self, parent: u64, name: &OsStr) -> Res<()> {
        let rel = self.child(parent, name)?;
        let abs = self.abs(&rel);
        let meta = fs::symlink_metadata(&abs)?;
        let mut st = self.state.lock();
        if st.opens.is_ghost(&rel) {
            // What nfs_sillyrename answers for a dentry it already renamed.
            return Err(Errno::EBUSY);
        }
        if needs_silly_rename(&st, &meta) {
            return self.silly_rename(&mut st, parent, &rel, &meta, Ghosting::Move);
        }
        fs::remove_file(&abs)?;
        Ok(())
    }

    pub(super) fn do_rmdir(&self, parent: u64, name: &OsStr) -> Res<()> {
        let rel = self.child(parent, name)?;
        // A ghost in it makes the backing rmdir fail with ENOTEMPTY, as on NFS.
        fs::remove_dir(self.abs(&rel))?;
        Ok(())
    }

    pub(super) fn do_rename(
        &self,
        parent: u64,
        name: &OsStr,
        new_parent: u64,
        new_name: &OsStr,
        flags: RenameFlags,
    ) -> Res<()> {
        let from = self.child(parent, name)?;
        let to = self.child(new_parent, new_name)?;
        let (abs_from, abs_to) = (self.abs(&from), self.abs(&to));
        let src = fs::symlink_metadata(&abs_from)?;
        let mut st = self.state.lock();
        if st.opens.is_ghost(&from) {
            return Err(Errno::EBUSY);
        }
        if flags.is_empty() {
            match fs::symlink_metadata(&abs_to) {
                // Renaming over an open file would destroy it on the server: ghost it first.
                // By a second link, not a move: the rename below then swaps the name in one
                // step, so no other host ever finds it missing.
                Ok(target)
                    if Key::of(&target) != Key::of(&src) && needs_silly_rename(&st, &target) =>
                {
                    self.silly_rename(&mut st, new_parent, &to, &target, Ghosting::Link)?;
                }
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e.into()),
            }
            fs::rename(&abs_from, &abs_to)?;
        } else {
            let flags = nix::fcntl::RenameFlags::from_bits(flags.bits()).ok_or(Errno::EINVAL)?;
            nix::fcntl::renameat2(AT_FDCWD, &abs_from, AT_FDCWD, &abs_to, flags)
                .map_err(|e| Errno::from_i32(e as i32))?;
        }
        st.inodes.moved(Key::of(&src), new_parent, new_name);
        Ok(())
    }

    /// Gives `rel` (a file this mount holds open) a `.nfs<fileid><counter>` ghost name in the
    /// same directory, as the Linux NFS client does, and remembers it for the last close.
    fn silly_rename(
        &self,
        st: &mut State,
        parent: u64,
        rel: &Path,
        meta: &Metadata,
        how: Ghosting,
    ) -> Res<()> {
        let key = Key::of(meta);
        let dir = rel.parent().unwrap_or(Path::new(""));
        loop {
            let ghost_name = OsString::from(format!(
                ".nfs{:016x}{:08x}",
                key.fileid(),
                self.next_ghost_seq()
            ));
            let ghost = dir.join(&ghost_name);
            // Never replacing: a name taken by another host's ghost must not be clobbered.
            let named = match how {
                Ghosting::Move => nix::fcntl::renameat2(
                    AT_FDCWD,
                    &self.abs(rel),
                    AT_FDCWD,
                    &self.abs(&ghost),
                    nix::fcntl::RenameFlags::RENAME_NOREPLACE,
                ),
                Ghosting::Link => nix::unistd::linkat(
                    AT_FDCWD,
                    &self.abs(rel),
                    AT_FDCWD,
                    &self.abs(&ghost),
                    nix::fcntl::AtFlags::empty(),
                ),
            };
            match named {
                Ok(()) => {
                    tracing::info!(mount = %self.name, path = %rel.display(), ghost = %ghost.display(), "silly rename");
                    st.inodes.moved(key, parent, &ghost_name);
                    st.opens.add_ghost(key, ghost);
                    return Ok(());
                }
                Err(nix::errno::Errno::EEXIST) => continue,
                Err(e) => return Err(Errno::from_i32(e as i32)),
            }
        }
    }

    /// Unlinks the ghosts of a file whose last handle on this mount just closed (only if the
    /// name still holds that file: another host may have removed it already).
    pub(super) fn remove_ghosts(&self, key: Key, ghosts: Vec<PathBuf>) {
        for ghost in ghosts {
            let abs = self.abs(&ghost);
            match fs::symlink_metadata(&abs) {
                Ok(meta) if Key::of(&meta) == key => match fs::remove_file(&abs) {
                    Ok(()) => {
                        tracing::info!(mount = %self.name, ghost = %ghost.display(), "ghost removed after last close");
                    }
                    Err(e) => {
                        tracing::warn!(mount = %self.name, ghost = %ghost.display(), error = %e, "cannot remove ghost");
                    }
                },
                Ok(_) => {}
                Err(e) => {
                    tracing::info!(mount = %self.name, ghost = %ghost.display(), error = %e, "ghost already gone");
                }
            }
        }
    }

    pub(super) fn do_opendir(&self, ino: u64) -> Res<u64> {
        let listing = self.list_dir(ino)?;
        let fh = self
            .next_dir
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.dirs.lock().insert(fh, Arc::new(listing));
        Ok(fh)
    }

    /// The entries of directory `fh` from `offset` on (a rewind to 0 re-reads the directory,
    /// as a fresh READDIR from an NFS client does).
    pub(super) fn dir_entries(&self, ino: u64, fh: u64, offset: u64) -> Res<Arc<Vec<DirEnt>>> {
        if offset == 0 {
            let fresh = Arc::new(self.list_dir(ino)?);
            self.dirs.lock().insert(fh, fresh.clone());
            return Ok(fresh);
        }
        self.dirs.lock().get(&fh).cloned().ok_or(Errno::EBADF)
    }

    pub(super) fn do_releasedir(&self, fh: u64) {
        self.dirs.lock().remove(&fh);
    }

    fn list_dir(&self, ino: u64) -> Res<Vec<DirEnt>> {
        let (rel, meta) = self.resolve(ino)?;
        if !meta.is_dir() {
            return Err(Errno::ENOTDIR);
        }
        let mut out = vec![
            DirEnt {
                name: ".".into(),
                ino: meta.ino(),
                kind: fuser::FileType::Directory,
            },
            DirEnt {
                name: "..".into(),
                ino: 1,
                kind: fuser::FileType::Directory,
            },
        ];
        for entry in fs::read_dir(self.abs(&rel))? {
            let entry = entry?;
            let kind = match entry.file_type() {
                Ok(t) => attr::kind(t),
                // Removed since the listing started: leave it out, as a later READDIR would.
                Err(_) => continue,
            };
            out.push(DirEnt {
                name: entry.file_name(),
                ino: std::os::unix::fs::DirEntryExt::ino(&entry),
                kind,
            });
        }
        Ok(out)
    }
}

/// How a silly rename gives an open file its ghost name.
#[derive(Debug, Clone, Copy)]
enum Ghosting {
    /// The name moves to the ghost (an unlink: the name is meant to go).
    Move,
    /// The ghost is a second link and the caller's rename replaces the name (a rename over
    /// the file: the name must stay present throughout).
    Link,
}

/// A regular file whose last link this mount would remove while holding it open.
fn needs_silly_rename(st: &State, meta: &Metadata) -> bool {
    meta.is_file() && meta.nlink() == 1 && st.opens.is_open(Key::of(meta))
}

/// Backing open options for the kernel's open flags.
pub(super) fn open_options(flags: i32) -> OpenOptions {
    let mut opts = OpenOptions::new();
    match flags & libc::O_ACCMODE {
        libc::O_WRONLY => opts.write(true),
        libc::O_RDWR => opts.read(true).write(true),
        _ => opts.read(true),
    };
    opts.custom_flags(custom_flags(flags));
    opts
}

/// The kernel's open flags less the access mode and [`STRIP_FLAGS`].
fn custom_flags(flags: i32) -> i32 {
    flags & !(libc::O_ACCMODE | STRIP_FLAGS)
}

/// New files belong to the caller, not to the serving process (which is usually root).
fn chown_best_effort(path: &Path, (uid, gid): (u32, u32)) {
    if let Err(e) = std::os::unix::fs::chown(path, Some(uid), Some(gid)) {
        tracing::debug!(path = %path.display(), error = %e, "chown of a new file");
    }
}
