//! File data and attributes: open/read/write/fsync/release, getattr/setattr, statfs. Every
//! operation through a handle first checks that the file still exists on the "server"
//! (ESTALE otherwise) and consults the injected faults.

use std::fs::{File, OpenOptions, Permissions};
use std::os::unix::fs::{FileExt, PermissionsExt};

use fuser::{Errno, FileAttr, TimeOrNow};

use super::names::open_options;
use super::{MountFs, Res};
use crate::attr;
use crate::faults::WriteVerdict;
use crate::inodes::Key;
use crate::opens::Handle;

/// The attribute changes of a SETATTR.
#[derive(Debug, Default)]
pub(super) struct SetAttr {
    pub(super) mode: Option<u32>,
    pub(super) uid: Option<u32>,
    pub(super) gid: Option<u32>,
    pub(super) size: Option<u64>,
    pub(super) atime: Option<TimeOrNow>,
    pub(super) mtime: Option<TimeOrNow>,
}

/// Filesystem totals for STATFS.
#[derive(Debug)]
pub(super) struct StatFs {
    pub(super) blocks: u64,
    pub(super) bfree: u64,
    pub(super) bavail: u64,
    pub(super) files: u64,
    pub(super) ffree: u64,
    pub(super) bsize: u32,
    pub(super) namelen: u32,
    pub(super) frsize: u32,
}

impl MountFs {
    pub(super) fn do_open(&self, ino: u64, flags: i32) -> Res<u64> {
        let (rel, meta) = self.resolve(ino)?;
        if meta.is_dir() {
            return Err(Errno::EISDIR);
        }
        let file = open_options(flags).open(self.abs(&rel))?;
        let key = Key::of(&file.metadata()?);
        if key != Key::of(&meta) {
            // Replaced between the stat and the open (another host renamed over it).
            return Err(Errno::from_i32(libc::ESTALE));
        }
        Ok(self.state.lock().opens.insert(Handle {
            file,
            key,
            path: rel,
        }))
    }

    pub(super) fn do_read(&self, fh: u64, offset: u64, size: u32) -> Res<Vec<u8>> {
        let h = self.handle(fh)?;
        self.live(&h)?;
        let mut buf = vec![0; size as usize];
        let mut filled = 0;
        while filled < buf.len() {
            match h.file.read_at(&mut buf[filled..], offset + filled as u64) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
        buf.truncate(filled);
        Ok(buf)
    }

    pub(super) fn do_write(&self, fh: u64, offset: u64, data: &[u8]) -> Res<u32> {
        let h = self.handle(fh)?;
        self.live(&h)?;
        let verdict = self
            .volume
            .faults
            .lock()
            .on_write(&self.name, &h.path, data.len());
        let data = match verdict {
            WriteVerdict::Full => data,
            WriteVerdict::Short(n) => &data[..n],
            WriteVerdict::Fail(code) => return Err(Errno::from_i32(code)),
        };
        h.file.write_all_at(data, offset)?;
        // The kernel caps a FUSE write at max_write (far below 4 GiB).
        u32::try_from(data.len()).map_err(|_| Errno::EINVAL)
    }

    pub(super) fn do_fsync(&self, fh: u64, datasync: bool) -> Res<()> {
        let h = self.handle(fh)?;
        self.live(&h)?;
        if let Some(code) = self.volume.faults.lock().on_fsync(&self.name, &h.path) {
            return Err(Errno::from_i32(code));
        }
        if datasync {
            h.file.sync_data()?;
        } else {
            h.file.sync_all()?;
        }
        Ok(())
    }

    /// Closes a handle; on the file's last handle on this mount, its ghosts go.
    pub(super) fn do_release(&self, fh: u64) {
        let mut st = self.state.lock();
        if let Some((handle, ghosts)) = st.opens.remove(fh)
            && !ghosts.is_empty()
        {
            // Under the lock: a concurrent unlink of the ghost name must still see it as one.
            self.remove_ghosts(handle.key, ghosts);
        }
    }

    pub(super) fn do_fallocate(&self, fh: u64, offset: u64, len: u64, mode: i32) -> Res<()> {
        let h = self.handle(fh)?;
        self.live(&h)?;
        let flags = nix::fcntl::FallocateFlags::from_bits_truncate(mode);
        let (offset, len) = (
            i64::try_from(offset).map_err(|_| Errno::EINVAL)?,
            i64::try_from(len).map_err(|_| Errno::EINVAL)?,
        );
        nix::fcntl::fallocate(&h.file, flags, offset, len).map_err(|e| Errno::from_i32(e as i32))
    }

    pub(super) fn do_getattr(&self, ino: u64, fh: Option<u64>) -> Res<FileAttr> {
        if let Some(fh) = fh
            && let Ok(h) = self.handle(fh)
        {
            let meta = self.live(&h)?;
            return Ok(attr::of(ino, &meta));
        }
        let (_, meta) = self.resolve(ino)?;
        Ok(attr::of(ino, &meta))
    }

    pub(super) fn do_setattr(&self, ino: u64, fh: Option<u64>, set: SetAttr) -> Res<FileAttr> {
        // Through the caller's handle when there is one: like an NFS file handle it works
        // whatever became of the name (silly-renamed, renamed by another host).
        if let Some(h) = fh.and_then(|fh| self.handle(fh).ok()) {
            self.live(&h)?;
            let file = &h.file;
            if let Some(mode) = set.mode {
                file.set_permissions(Permissions::from_mode(mode & 0o7777))?;
            }
            if set.uid.is_some() || set.gid.is_some() {
                std::os::unix::fs::fchown(file, set.uid, set.gid)?;
            }
            if let Some(size) = set.size {
                file.set_len(size)?;
            }
            if set.atime.is_some() || set.mtime.is_some() {
                nix::sys::stat::futimens(file, &timespec(set.atime), &timespec(set.mtime))
                    .map_err(|e| Errno::from_i32(e as i32))?;
            }
            return Ok(attr::of(ino, &file.metadata()?));
        }
        // By path, without opening the file (opening a FIFO would block).
        let (rel, meta) = self.resolve(ino)?;
        let abs = self.abs(&rel);
        if let Some(mode) = set.mode
            && !meta.file_type().is_symlink()
        {
            std::fs::set_permissions(&abs, Permissions::from_mode(mode & 0o7777))?;
        }
        if set.uid.is_some() || set.gid.is_some() {
            std::os::unix::fs::lchown(&abs, set.uid, set.gid)?;
        }
        if let Some(size) = set.size {
            OpenOptions::new().write(true).open(&abs)?.set_len(size)?;
        }
        if set.atime.is_some() || set.mtime.is_some() {
            nix::sys::stat::utimensat(
                nix::fcntl::AT_FDCWD,
                &abs,
                &timespec(set.atime),
                &timespec(set.mtime),
                nix::sys::stat::UtimensatFlags::NoFollowSymlink,
            )
            .map_err(|e| Errno::from_i32(e as i32))?;
        }
        self.do_getattr(ino, None)
    }

    pub(super) fn do_fsyncdir(&self, ino: u64) -> Res<()> {
        let (rel, _) = self.resolve(ino)?;
        File::open(self.abs(&rel))?.sync_all()?;
        Ok(())
    }

    pub(super) fn do_statfs(&self) -> Res<StatFs> {
        let s = nix::sys::statvfs::statvfs(self.volume.backing.as_path())
            .map_err(|e| Errno::from_i32(e as i32))?;
        let narrow = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
        Ok(StatFs {
            blocks: s.blocks(),
            bfree: s.blocks_free(),
            bavail: s.blocks_available(),
            files: s.files(),
            ffree: s.files_free(),
            bsize: narrow(s.block_size()),
            namelen: narrow(s.name_max()),
            frsize: narrow(s.fragment_size()),
        })
    }
}

/// A SETATTR time as utimensat wants it (unset: leave alone).
fn timespec(t: Option<TimeOrNow>) -> nix::sys::time::TimeSpec {
    use nix::sys::time::TimeSpec;
    match t {
        None => TimeSpec::UTIME_OMIT,
        Some(TimeOrNow::Now) => TimeSpec::UTIME_NOW,
        Some(TimeOrNow::SpecificTime(t)) => match t.duration_since(std::time::UNIX_EPOCH) {
            Ok(d) => TimeSpec::from_duration(d),
            // Before 1970: clamp rather than fail a touch of an odd timestamp.
            Err(_) => TimeSpec::new(0, 0),
        },
    }
}
