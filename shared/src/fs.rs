//! The narrow filesystem interface every on-volume access goes through.
//!
//! Two implementations: [`RealFs`] over the operating system (local disk or an NFS mount) and
//! [`MemFs`], an in-memory tree for unit tests and `--in-memory` mode. The interface holds only
//! what the contract needs: positioned reads/writes, fdatasync/fsync, directory fsync, rename,
//! hard link and exclusive create.

// Fault injection is for tests only (STYLE): the broker binary does not carry it.
#[cfg(any(test, feature = "testing"))]
mod faulty;
mod mem;
mod real;

use std::fmt::Debug;
use std::io;
use std::path::Path;
use std::sync::Arc;

#[cfg(any(test, feature = "testing"))]
pub use faulty::{FaultSwitch, FaultyFs, MountFault};
pub use mem::MemFs;
pub use real::RealFs;

/// A shared handle to a filesystem implementation.
pub type FsRef = Arc<dyn Fs>;

/// One entry of a directory listing or a `stat`, no descriptor opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    /// File name (no directory part).
    pub name: String,
    /// Length in bytes: from `stat`, and from a listing only for the names it was asked to size
    /// (0 otherwise, and for directories).
    pub len: u64,
    /// Whether the entry is a directory.
    pub is_dir: bool,
}

/// How to open a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenMode {
    /// Read only; the file must exist.
    Read,
    /// Read and write; the file must exist.
    ReadWrite,
    /// Read and write, created by exclusive create (`O_CREAT|O_EXCL`): fails with
    /// `AlreadyExists` if the name is taken.
    CreateNew,
}

/// A filesystem.
pub trait Fs: Send + Sync + Debug {
    /// `mkdir -p`; succeeds if the directory exists.
    fn create_dir_all(&self, path: &Path) -> io::Result<()>;
    /// Lists a directory: names and kinds (no descriptors on the entries, and no stat but of
    /// the files whose names `sized` accepts, whose `len` is filled in). Over NFS every stat is
    /// a round trip to the server, so a listing sizes only what its caller reads.
    fn list_dir_sized(&self, path: &Path, sized: &dyn Fn(&str) -> bool) -> io::Result<Vec<DirEntry>>;
    /// Lists a directory: names and kinds, every `len` 0 (see [`Fs::list_dir_sized`]).
    fn list_dir(&self, path: &Path) -> io::Result<Vec<DirEntry>> {
        self.list_dir_sized(path, &|_| false)
    }
    /// Stats one path.
    fn stat(&self, path: &Path) -> io::Result<DirEntry>;
    /// Opens a file.
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Arc<dyn File>>;
    /// Unlinks a file.
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// Removes an empty directory.
    fn remove_dir(&self, path: &Path) -> io::Result<()>;
    /// Renames, replacing the target. Atomic within one directory.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Hard-links `to` to `from`; fails with `AlreadyExists` if `to` exists (an atomic exclusive
    /// create of a fully written file).
    fn hard_link(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// fsyncs a directory, making the names created, renamed or removed in it durable.
    fn sync_dir(&self, path: &Path) -> io::Result<()>;
    /// Opens a directory for several operations on names in it (see [`Dir`]). By default each
    /// of them goes by path through this filesystem.
    fn open_dir(&self, path: &Path) -> io::Result<Box<dyn Dir + '_>> {
        Ok(Box::new(PathDir { fs: self, dir: path.to_owned() }))
    }
}

/// A directory held open for a sequence of operations on the names in it (a segment roll's
/// renames, creation and fsync). Every name resolves against the directory opened, not its
/// path: on an NFS or FUSE mount that is one lookup per name instead of one per path
/// component, and the fsync is of the very directory the names changed in. The sequence acts
/// on one directory even if that directory is renamed meanwhile (a deleted topic's directory
/// renamed aside, a recreated one at its path): as if it had run just before the rename.
pub trait Dir: Send + Sync + Debug {
    /// The directory's path when it was opened (for messages).
    fn path(&self) -> &Path;
    /// Opens the file `name` in this directory.
    fn open(&self, name: &str, mode: OpenMode) -> io::Result<Arc<dyn File>>;
    /// Renames `from` to `to`, both in this directory, replacing `to`.
    fn rename(&self, from: &str, to: &str) -> io::Result<()>;
    /// Unlinks the file `name`.
    fn remove_file(&self, name: &str) -> io::Result<()>;
    /// fsyncs the directory, making the names created, renamed or removed in it durable.
    fn sync(&self) -> io::Result<()>;
    /// Lists this directory as [`Fs::list_dir_sized`] does, sorted by name.
    fn list_sized(&self, sized: &dyn Fn(&str) -> bool) -> io::Result<Vec<DirEntry>>;
    /// The directory this one is in now (a partition's topic directory, also after the topic
    /// directory was renamed aside): what is read there describes the directory held.
    fn parent(&self) -> io::Result<Box<dyn Dir + '_>>;
}

/// [`Fs::open_dir`]'s default: each operation by path.
#[derive(Debug)]
struct PathDir<'a, F: Fs + ?Sized> {
    fs: &'a F,
    dir: std::path::PathBuf,
}

impl<F: Fs + ?Sized> Dir for PathDir<'_, F> {
    fn path(&self) -> &Path {
        &self.dir
    }
    fn open(&self, name: &str, mode: OpenMode) -> io::Result<Arc<dyn File>> {
        self.fs.open(&self.dir.join(name), mode)
    }
    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        self.fs.rename(&self.dir.join(from), &self.dir.join(to))
    }
    fn remove_file(&self, name: &str) -> io::Result<()> {
        self.fs.remove_file(&self.dir.join(name))
    }
    fn sync(&self) -> io::Result<()> {
        self.fs.sync_dir(&self.dir)
    }
    fn list_sized(&self, sized: &dyn Fn(&str) -> bool) -> io::Result<Vec<DirEntry>> {
        self.fs.list_dir_sized(&self.dir, sized)
    }
    fn parent(&self) -> io::Result<Box<dyn Dir + '_>> {
        let parent = self.dir.parent().ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "the root has no parent"))?;
        Ok(Box::new(PathDir { fs: self.fs, dir: parent.to_owned() }))
    }
}

/// An open file. All I/O is positioned, so one handle is shared by writers, readers and the
/// syncing thread without a seek position to fight over.
pub trait File: Send + Sync + Debug {
    /// Reads at `offset`; returns the number of bytes read (0 at end of file).
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
    /// Writes all of `buf` at `offset`.
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// Writes `bufs` one after another from `offset`, as one write of their concatenation
    /// would (a file backed by the OS does it in one system call where it can).
    fn write_all_vectored_at(&self, bufs: &[&[u8]], mut offset: u64) -> io::Result<()> {
        for buf in bufs {
            self.write_all_at(buf, offset)?;
            offset += buf.len() as u64;
        }
        Ok(())
    }
    /// fdatasync.
    fn sync_data(&self) -> io::Result<()>;
    /// fsync.
    fn sync_all(&self) -> io::Result<()>;
    /// Current length.
    fn len(&self) -> io::Result<u64>;
    /// Whether the file is empty.
    fn is_empty(&self) -> io::Result<bool> {
        Ok(self.len()? == 0)
    }
    /// Truncates or extends.
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// The OS file behind this handle, if any (used to memory-map index files).
    fn as_std(&self) -> Option<&std::fs::File>;

    /// Fills `buf` from `offset`; `UnexpectedEof` if the file ends first.
    fn read_exact_at(&self, mut buf: &mut [u8], mut offset: u64) -> io::Result<()> {
        while !buf.is_empty() {
            match self.read_at(buf, offset) {
                Ok(0) => return Err(io::Error::from(io::ErrorKind::UnexpectedEof)),
                Ok(n) => {
                    buf = &mut buf[n..];
                    offset += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// Reads a whole file; `Ok(None)` if it does not exist.
pub fn read_optional(fs: &dyn Fs, path: &Path) -> io::Result<Option<Vec<u8>>> {
    read_fresh(|| fs.open(path, OpenMode::Read))
}

/// [`read_optional`] of the file `name` in a held directory.
pub fn read_optional_in(dir: &dyn Dir, name: &str) -> io::Result<Option<Vec<u8>>> {
    read_fresh(|| dir.open(name, OpenMode::Read))
}

/// How many times a whole-file read opens the name again after ESTALE.
const STALE_REOPENS: usize = 3;

/// Opens and reads a whole file. Over NFS a file another host replaces by rename between the
/// open and the read answers ESTALE (the handle names the file replaced); opening the name again
/// gets the new one, the close-to-open freshness the volume promises, so that is retried a few
/// times before the error is returned (a take-over reading a manifest the previous leader is
/// just rewriting would otherwise wait for its next round).
fn read_fresh(open: impl Fn() -> io::Result<Arc<dyn File>>) -> io::Result<Option<Vec<u8>>> {
    let mut reopens = 0;
    loop {
        match read_whole(open()) {
            Err(e) if is_stale(&e) && reopens < STALE_REOPENS => reopens += 1,
            read => return read,
        }
    }
}

/// ESTALE: a file handle the NFS server no longer knows.
fn is_stale(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::StaleNetworkFileHandle
}

fn read_whole(opened: io::Result<Arc<dyn File>>) -> io::Result<Option<Vec<u8>>> {
    let file = match opened {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let len = usize::try_from(file.len()?).map_err(|_| io::Error::other("file too large"))?;
    let mut buf = vec![0; len];
    file.read_exact_at(&mut buf, 0)?;
    Ok(Some(buf))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// A handle to a file another host has since replaced by rename: NFS answers ESTALE.
    #[derive(Debug)]
    struct Replaced;

    fn stale() -> io::Error {
        io::Error::from_raw_os_error(116)
    }

    impl File for Replaced {
        fn read_at(&self, _: &mut [u8], _: u64) -> io::Result<usize> {
            Err(stale())
        }
        fn write_all_at(&self, _: &[u8], _: u64) -> io::Result<()> {
            Err(stale())
        }
        fn sync_data(&self) -> io::Result<()> {
            Err(stale())
        }
        fn sync_all(&self) -> io::Result<()> {
            Err(stale())
        }
        fn len(&self) -> io::Result<u64> {
            Ok(3)
        }
        fn set_len(&self, _: u64) -> io::Result<()> {
            Err(stale())
        }
        fn as_std(&self) -> Option<&std::fs::File> {
            None
        }
    }

    /// A directory whose first `stale` opens of a name give handles to replaced files, then the
    /// name's current file.
    #[derive(Debug)]
    struct BeingReplaced {
        fs: MemFs,
        stale: usize,
        opens: AtomicUsize,
    }

    impl Dir for BeingReplaced {
        fn path(&self) -> &Path {
            Path::new("/d")
        }
        fn open(&self, name: &str, mode: OpenMode) -> io::Result<Arc<dyn File>> {
            if self.opens.fetch_add(1, Ordering::SeqCst) < self.stale {
                return Ok(Arc::new(Replaced));
            }
            self.fs.open(&self.path().join(name), mode)
        }
        fn rename(&self, _: &str, _: &str) -> io::Result<()> {
            Err(io::Error::other("not in this test"))
        }
        fn remove_file(&self, _: &str) -> io::Result<()> {
            Err(io::Error::other("not in this test"))
        }
        fn sync(&self) -> io::Result<()> {
            Ok(())
        }
        fn list_sized(&self, _: &dyn Fn(&str) -> bool) -> io::Result<Vec<DirEntry>> {
            Err(io::Error::other("not in this test"))
        }
        fn parent(&self) -> io::Result<Box<dyn Dir + '_>> {
            Err(io::Error::other("not in this test"))
        }
    }

    fn being_replaced(stale: usize) -> BeingReplaced {
        let fs = MemFs::new();
        fs.create_dir_all(Path::new("/d")).unwrap();
        fs.open(Path::new("/d/m"), OpenMode::CreateNew).unwrap().write_all_at(b"new", 0).unwrap();
        BeingReplaced { fs, stale, opens: AtomicUsize::new(0) }
    }

    #[test]
    fn a_whole_file_read_opens_the_name_again_after_estale() {
        // Replaced twice while being read: the third open reads the current file.
        let dir = being_replaced(2);
        assert_eq!(read_optional_in(&dir, "m").unwrap(), Some(b"new".to_vec()));
        assert_eq!(dir.opens.load(Ordering::SeqCst), 3);
        // A handle that stays stale (a server that lost its handles) is an error, after a bound.
        let dir = being_replaced(usize::MAX);
        assert_eq!(read_optional_in(&dir, "m").unwrap_err().raw_os_error(), Some(116));
        assert_eq!(dir.opens.load(Ordering::SeqCst), 1 + STALE_REOPENS);
    }
}
