//! [`Fs`] over the operating system's filesystem.

use std::fs::OpenOptions;
use std::io::{self, IoSlice};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use nix::fcntl::{AtFlags, OFlag, openat, renameat};
use nix::sys::stat::{Mode, SFlag, fstatat};
use nix::unistd::{UnlinkatFlags, unlinkat};

use super::{Dir, DirEntry, File, Fs, OpenMode};

/// The real filesystem (local disk, or an NFS mount).
#[derive(Debug, Default, Clone, Copy)]
pub struct RealFs;

impl Fs for RealFs {
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        std::fs::create_dir_all(path)
    }

    fn list_dir_sized(&self, path: &Path, sized: &dyn Fn(&str) -> bool) -> io::Result<Vec<DirEntry>> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(path)? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            // The kind comes with the name (d_type); only a filesystem that does not report it
            // costs a stat here.
            let listed = listed_entry(name, sized, || unless_gone(entry.file_type().map(|k| k.is_dir())), || unless_gone(entry.metadata().map(|m| m.len())))?;
            out.extend(listed);
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    fn stat(&self, path: &Path) -> io::Result<DirEntry> {
        let meta = std::fs::metadata(path)?;
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        Ok(DirEntry {
            name,
            len: meta.len(),
            is_dir: meta.is_dir(),
        })
    }

    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Arc<dyn File>> {
        let mut opts = OpenOptions::new();
        match mode {
            OpenMode::Read => opts.read(true),
            OpenMode::ReadWrite => opts.read(true).write(true),
            OpenMode::CreateNew => opts.read(true).write(true).create_new(true),
        };
        Ok(Arc::new(RealFile(opts.open(path)?)))
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }

    fn remove_dir(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_dir(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }

    fn hard_link(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::hard_link(from, to)
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        std::fs::File::open(path)?.sync_all()
    }

    fn open_dir(&self, path: &Path) -> io::Result<Box<dyn Dir + '_>> {
        Ok(Box::new(RealDir { dir: std::fs::File::open(path)?, path: path.to_owned() }))
    }
}

/// One listed name as a [`DirEntry`]: its kind, and its length if `sized` accepts it; `None` if
/// it was unlinked (by another host) between the listing and a stat.
fn listed_entry(
    name: String,
    sized: &dyn Fn(&str) -> bool,
    is_dir: impl FnOnce() -> io::Result<Option<bool>>,
    len: impl FnOnce() -> io::Result<Option<u64>>,
) -> io::Result<Option<DirEntry>> {
    let Some(is_dir) = is_dir()? else { return Ok(None) };
    let len = if !is_dir && sized(&name) {
        let Some(len) = len()? else { return Ok(None) };
        len
    } else {
        0
    };
    Ok(Some(DirEntry { name, len, is_dir }))
}

/// `None` for a file that is gone (NotFound), the value otherwise.
fn unless_gone<T>(result: io::Result<T>) -> io::Result<Option<T>> {
    match result {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// A directory descriptor; names resolve against it (`openat`, `renameat`, `unlinkat`).
#[derive(Debug)]
struct RealDir {
    dir: std::fs::File,
    path: PathBuf,
}

/// `name` as one path component: a name with a separator (or an absolute one, which `openat`
/// would resolve from the root) is refused.
fn component(name: &str) -> io::Result<&str> {
    if name.is_empty() || name.contains('/') || name == "." || name == ".." {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("not a file name: {name:?}")));
    }
    Ok(name)
}

impl Dir for RealDir {
    fn path(&self) -> &Path {
        &self.path
    }

    fn open(&self, name: &str, mode: OpenMode) -> io::Result<Arc<dyn File>> {
        let flags = OFlag::O_CLOEXEC
            | match mode {
                OpenMode::Read => OFlag::O_RDONLY,
                OpenMode::ReadWrite => OFlag::O_RDWR,
                OpenMode::CreateNew => OFlag::O_RDWR | OFlag::O_CREAT | OFlag::O_EXCL,
            };
        let fd = openat(&self.dir, component(name)?, flags, Mode::from_bits_truncate(0o666))?;
        Ok(Arc::new(RealFile(std::fs::File::from(fd))))
    }

    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        Ok(renameat(&self.dir, component(from)?, &self.dir, component(to)?)?)
    }

    fn remove_file(&self, name: &str) -> io::Result<()> {
        Ok(unlinkat(&self.dir, component(name)?, UnlinkatFlags::NoRemoveDir)?)
    }

    fn sync(&self) -> io::Result<()> {
        self.dir.sync_all()
    }

    fn list_sized(&self, sized: &dyn Fn(&str) -> bool) -> io::Result<Vec<DirEntry>> {
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
        let mut listing = nix::dir::Dir::openat(&self.dir, ".", flags, Mode::empty())?;
        let mut out = Vec::new();
        for entry in listing.iter() {
            let entry = entry?;
            // As by path: a name that is not UTF-8 is listed lossily, and refused by whoever
            // parses it (naming it); the stat goes by the name as it is.
            let raw = entry.file_name();
            let name = raw.to_string_lossy();
            if name == "." || name == ".." {
                continue;
            }
            // The kind comes with the name where the filesystem reports it.
            let stat = || unless_gone(fstatat(&self.dir, raw, AtFlags::AT_SYMLINK_NOFOLLOW).map_err(io::Error::from));
            let is_dir = || match entry.file_type() {
                Some(kind) => Ok(Some(kind == nix::dir::Type::Directory)),
                None => Ok(stat()?.map(|st| SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFDIR)),
            };
            let len = || Ok(stat()?.map(|st| u64::try_from(st.st_size).unwrap_or(0)));
            out.extend(listed_entry(name.into_owned(), sized, is_dir, len)?);
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    fn parent(&self) -> io::Result<Box<dyn Dir + '_>> {
        let fd = openat(&self.dir, "..", OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, Mode::empty())?;
        let path = self.path.parent().unwrap_or(&self.path).to_owned();
        Ok(Box::new(RealDir { dir: std::fs::File::from(fd), path }))
    }
}

#[derive(Debug)]
struct RealFile(std::fs::File);

impl File for RealFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.0.read_at(buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.0.write_all_at(buf, offset)
    }
    fn write_all_vectored_at(&self, bufs: &[&[u8]], mut offset: u64) -> io::Result<()> {
        let mut slices: Vec<IoSlice<'_>> = bufs.iter().map(|b| IoSlice::new(b)).collect();
        let mut rest = &mut slices[..];
        // NB: drops leading empty pieces (and, below, each written one): a write of nothing
        // but empty pieces is done, not a zero-length pwritev taken for a failed write.
        IoSlice::advance_slices(&mut rest, 0);
        while !rest.is_empty() {
            let at = i64::try_from(offset).map_err(|_| io::Error::other("file offset past i64"))?;
            match nix::sys::uio::pwritev(&self.0, rest, at) {
                Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
                Ok(n) => {
                    offset += n as u64;
                    IoSlice::advance_slices(&mut rest, n);
                }
                Err(nix::errno::Errno::EINTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }
    fn sync_data(&self) -> io::Result<()> {
        self.0.sync_data()
    }
    fn sync_all(&self) -> io::Result<()> {
        self.0.sync_all()
    }
    fn len(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }
    fn as_std(&self) -> Option<&std::fs::File> {
        Some(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::ffi::OsStrExt;

    use super::*;

    /// Pieces land one after another, empty ones anywhere are nothing, and a write of only empty
    /// pieces succeeds without writing.
    #[test]
    fn vectored_writes_place_pieces_one_after_another() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("f");
        let file = RealFs.open(&path, OpenMode::CreateNew)?;
        file.write_all_vectored_at(&[b"", b"ab", b"", b"cde", b""], 2)?;
        file.write_all_vectored_at(&[b"", b""], 7)?;
        file.write_all_vectored_at(&[b"xy"], 0)?;
        assert_eq!(std::fs::read(&path)?, b"xyabcde");
        Ok(())
    }

    /// A held directory's operations act on the directory opened, also once it has been
    /// renamed and another one made at its path; names are single components.
    #[test]
    fn a_held_directory_acts_on_the_directory_opened() -> io::Result<()> {
        let root = tempfile::tempdir()?;
        let (live, aside) = (root.path().join("d"), root.path().join("d.aside"));
        std::fs::create_dir(&live)?;
        let dir = RealFs.open_dir(&live)?;
        dir.open("a.tmp", OpenMode::CreateNew)?.write_all_at(b"x", 0)?;
        dir.rename("a.tmp", "a")?;
        assert_eq!(std::fs::read(live.join("a"))?, b"x");
        std::fs::rename(&live, &aside)?;
        std::fs::create_dir(&live)?;
        dir.open("b", OpenMode::CreateNew)?;
        dir.rename("a", "c")?;
        dir.remove_file("b")?;
        dir.sync()?;
        let names = |d: &Path| -> io::Result<Vec<String>> {
            let mut n: Vec<String> = std::fs::read_dir(d)?.map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned())).collect::<io::Result<_>>()?;
            n.sort();
            Ok(n)
        };
        assert_eq!(names(&aside)?, ["c"]);
        assert!(names(&live)?.is_empty());
        assert_eq!(dir.open("c", OpenMode::CreateNew).err().map(|e| e.kind()), Some(io::ErrorKind::AlreadyExists));
        for bad in ["", ".", "..", "x/y", "/etc/passwd"] {
            assert_eq!(dir.open(bad, OpenMode::Read).err().map(|e| e.kind()), Some(io::ErrorKind::InvalidInput), "{bad:?}");
        }
        Ok(())
    }

    #[test]
    fn a_held_directory_lists_itself_and_reaches_the_parent_it_is_in_now() -> io::Result<()> {
        // A partition directory held while its topic directory is renamed aside and recreated:
        // its listing and its parent are those of the directory held, not of the path.
        let root = tempfile::tempdir()?;
        let (topic, aside) = (root.path().join("t"), root.path().join("t.aside"));
        std::fs::create_dir_all(topic.join("p"))?;
        std::fs::write(topic.join("stamp"), b"old")?;
        std::fs::write(topic.join("p/a.log"), b"12345")?;
        std::fs::write(topic.join("p/a.index"), b"123")?;
        std::fs::create_dir(topic.join("p/sub"))?;
        let held = RealFs.open_dir(&topic.join("p"))?;
        std::fs::rename(&topic, &aside)?;
        std::fs::create_dir_all(topic.join("p"))?;
        std::fs::write(topic.join("stamp"), b"new")?;
        std::fs::write(topic.join("p/b.log"), b"1")?;
        let listed = held.list_sized(&|name| name.ends_with(".log"))?;
        let seen: Vec<(&str, u64, bool)> = listed.iter().map(|e| (e.name.as_str(), e.len, e.is_dir)).collect();
        assert_eq!(seen, [("a.index", 0, false), ("a.log", 5, false), ("sub", 0, true)]);
        assert_eq!(seen, RealFs.list_dir_sized(&aside.join("p"), &|name| name.ends_with(".log"))?.iter().map(|e| (e.name.as_str(), e.len, e.is_dir)).collect::<Vec<_>>(), "as the listing by path");
        // A name that is not UTF-8 is listed as by path (lossily), sized by its real name.
        let odd = aside.join("p").join(std::ffi::OsStr::from_bytes(b"x\xff.log"));
        std::fs::write(&odd, b"123456")?;
        let by_path = RealFs.list_dir_sized(&aside.join("p"), &|name| name.ends_with(".log"))?;
        let held_listing = held.list_sized(&|name| name.ends_with(".log"))?;
        let as_tuples = |l: &[DirEntry]| l.iter().map(|e| (e.name.clone(), e.len, e.is_dir)).collect::<Vec<_>>();
        assert_eq!(as_tuples(&held_listing), as_tuples(&by_path));
        assert!(held_listing.iter().any(|e| e.name == "x\u{fffd}.log" && e.len == 6), "{held_listing:?}");
        let parent = held.parent()?;
        assert_eq!(crate::fs::read_optional_in(&*parent, "stamp")?, Some(b"old".to_vec()));
        assert_eq!(crate::fs::read_optional_in(&*parent, "missing")?, None);
        Ok(())
    }
}
