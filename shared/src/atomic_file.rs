//! The two atomic primitives every durable change on the volume is built from (seed 001):
//! replace a file by renaming a fully written, fsynced temp file over it, and create a file by
//! exclusive create. Nothing is edited in place.

use std::io;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::fs::{Dir, File, Fs, OpenMode, read_optional, read_optional_in};
use crate::names::temp_file_name;
use crate::{Error, Result};

/// Replaces (or creates) `path` with `bytes` atomically: readers on any host see the old
/// content or the new, never a mix. Through one handle of the directory ([`Fs::open_dir`]).
pub fn write_atomic(fs: &dyn Fs, path: &Path, bytes: &[u8]) -> Result<()> {
    let (dir, name) = split(path)?;
    let d = fs.open_dir(&dir).map_err(|e| Error::io("open dir", &dir, e))?;
    replace_in(&*d, &name, bytes)?;
    // fsync the directory: without it a crash can forget the rename, and the previous version
    // of the file (or none) reappears after restart although the caller was told it is durable.
    d.sync().map_err(|e| Error::io("fsync dir", &dir, e))
}

/// [`write_atomic`] of the file `name` in a held directory, without the directory fsync: the
/// new content is in place for every reader, but a crash may still forget the rename until
/// the caller fsyncs the directory.
pub fn replace_in(dir: &dyn Dir, name: &str, bytes: &[u8]) -> Result<()> {
    let temp = stage_in(dir, name, bytes)?;
    dir.rename(&temp, name).map_err(|e| {
        let _ = dir.remove_file(&temp);
        Error::io("rename", dir.path().join(name), e)
    })
}

/// The first half of [`replace_in`]: writes `bytes` to `name`'s temp name in a held directory
/// (exclusive create, fsynced) and returns that temp name, for the caller to rename over `name`
/// when it is ready (a roll or a swap that renames several files in an order with one directory
/// fsync). Until then the file is garbage to every reader of the directory by its name.
pub fn stage_in(dir: &dyn Dir, name: &str, bytes: &[u8]) -> Result<String> {
    let temp = temp_file_name(name);
    let path = || dir.path().join(&temp);
    let file = dir
        .open(&temp, OpenMode::CreateNew)
        .map_err(|e| Error::io("create", path(), e))?;
    if let Err(e) = fill(&*file, bytes) {
        let _ = dir.remove_file(&temp);
        return Err(Error::io("write", path(), e));
    }
    Ok(temp)
}

/// [`stage_in`] for a value written as pretty JSON.
pub fn stage_json_in<T: Serialize>(dir: &dyn Dir, name: &str, value: &T) -> Result<String> {
    stage_in(dir, name, &to_json(&dir.path().join(name), value)?)
}

/// Creates `path` holding `bytes` by exclusive create. Returns `true` if this call created it,
/// `false` if the name already existed (its content is left untouched).
///
/// A non-empty file is written to a temp name, fsynced and hard-linked into place, so the name
/// never appears with partial content; a filesystem without hard links falls back to
/// `O_CREAT|O_EXCL` plus write.
pub fn create_exclusive(fs: &dyn Fs, path: &Path, bytes: &[u8]) -> Result<bool> {
    let (dir, name) = split(path)?;
    let d = fs.open_dir(&dir).map_err(|e| Error::io("open dir", &dir, e))?;
    let created = if bytes.is_empty() {
        match d.open(&name, OpenMode::CreateNew) {
            Ok(_) => true,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => false,
            Err(e) => return Err(Error::io("create", path, e)),
        }
    } else {
        let temp = stage_in(&*d, &name, bytes)?;
        let linked = fs.hard_link(&dir.join(&temp), path);
        let _ = d.remove_file(&temp);
        match linked {
            Ok(()) => true,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => false,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::Unsupported | io::ErrorKind::PermissionDenied
                ) =>
            {
                create_new_with(fs, path, bytes)?
            }
            Err(e) => return Err(Error::io("link", path, e)),
        }
    };
    // fsync the directory: the new name must survive a crash, or a second creator could win
    // the same name after restart and two parties would both believe they own it.
    d.sync().map_err(|e| Error::io("fsync dir", &dir, e))?;
    Ok(created)
}

/// Writes `value` as pretty JSON with [`write_atomic`].
pub fn write_json<T: Serialize>(fs: &dyn Fs, path: &Path, value: &T) -> Result<()> {
    write_atomic(fs, path, &to_json(path, value)?)
}

/// [`replace_in`] for a value written as pretty JSON.
pub fn replace_json_in<T: Serialize>(dir: &dyn Dir, name: &str, value: &T) -> Result<()> {
    replace_in(dir, name, &to_json(&dir.path().join(name), value)?)
}

fn to_json<T: Serialize>(path: &Path, value: &T) -> Result<Vec<u8>> {
    serde_json::to_vec_pretty(value).map_err(|source| Error::Json {
        what: "value to encode",
        path: path.to_owned(),
        source,
    })
}

/// Reads a JSON file; `Ok(None)` if it does not exist.
pub fn read_json<T: DeserializeOwned>(
    fs: &dyn Fs,
    path: &Path,
    what: &'static str,
) -> Result<Option<T>> {
    parse_json(read_optional(fs, path), path, what)
}

/// [`read_json`] of the file `name` in a held directory.
pub fn read_json_in<T: DeserializeOwned>(dir: &dyn Dir, name: &str, what: &'static str) -> Result<Option<T>> {
    parse_json(read_optional_in(dir, name), &dir.path().join(name), what)
}

fn parse_json<T: DeserializeOwned>(bytes: io::Result<Option<Vec<u8>>>, path: &Path, what: &'static str) -> Result<Option<T>> {
    let Some(bytes) = bytes.map_err(|e| Error::io("read", path, e))? else {
        return Ok(None);
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|source| Error::Json {
            what,
            path: path.to_owned(),
            source,
        })
}

/// (directory, file name) of `path`.
fn split(path: &Path) -> Result<(PathBuf, String)> {
    let bad = || Error::io("name", path, io::Error::from(io::ErrorKind::InvalidInput));
    let dir = path.parent().ok_or_else(bad)?.to_path_buf();
    let name = path.file_name().ok_or_else(bad)?.to_str().ok_or_else(bad)?.to_owned();
    Ok((dir, name))
}

/// Writes a new temp file's bytes and fsyncs it: before it gets its real name, or a crash can
/// persist the rename/link but not the data, leaving an empty or torn file under the real name.
fn fill(file: &dyn File, bytes: &[u8]) -> std::io::Result<()> {
    file.write_all_at(bytes, 0)?;
    file.sync_all()
}

fn create_new_with(fs: &dyn Fs, path: &Path, bytes: &[u8]) -> Result<bool> {
    let file = match fs.open(path, OpenMode::CreateNew) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Ok(false),
        Err(e) => return Err(Error::io("create", path, e)),
    };
    // fsync: the stamp must be complete on disk before anyone acts on its existence.
    file.write_all_at(bytes, 0)
        .and_then(|()| file.sync_all())
        .map_err(|e| Error::io("write", path, e))?;
    Ok(true)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::fs::{MemFs, RealFs};

    fn both(check: impl Fn(&dyn Fs, &Path)) {
        let mem = MemFs::new();
        mem.create_dir_all(Path::new("/v")).unwrap();
        check(&mem, Path::new("/v"));
        let dir = tempfile::tempdir().unwrap();
        check(&RealFs, dir.path());
    }

    #[test]
    fn stage_writes_a_temp_file_and_leaves_the_target_alone() {
        both(|fs, dir| {
            let p = dir.join("x.json");
            write_atomic(fs, &p, b"old").unwrap();
            let d = fs.open_dir(dir).unwrap();
            let name = stage_in(&*d, "x.json", b"new").unwrap();
            let temp = dir.join(&name);
            assert!(crate::names::parse_temp_file_name(&name).is_ok(), "{name} is a temp name, garbage to a take-over");
            assert_eq!(read_optional(fs, &p).unwrap().unwrap(), b"old");
            assert_eq!(read_optional(fs, &temp).unwrap().unwrap(), b"new");
            fs.rename(&temp, &p).unwrap();
            assert_eq!(read_optional(fs, &p).unwrap().unwrap(), b"new");
        });
    }

    #[test]
    fn write_atomic_replaces_and_leaves_no_temp() {
        both(|fs, dir| {
            let p = dir.join("x.json");
            write_atomic(fs, &p, b"one").unwrap();
            write_atomic(fs, &p, b"two").unwrap();
            assert_eq!(read_optional(fs, &p).unwrap().unwrap(), b"two");
            let names: Vec<_> = fs
                .list_dir(dir)
                .unwrap()
                .into_iter()
                .map(|e| e.name)
                .collect();
            assert_eq!(names, vec!["x.json".to_owned()]);
        });
    }

    #[test]
    fn create_exclusive_has_one_winner() {
        both(|fs, dir| {
            let p = dir.join("stamp");
            assert!(create_exclusive(fs, &p, b"first").unwrap());
            assert!(!create_exclusive(fs, &p, b"second").unwrap());
            assert_eq!(read_optional(fs, &p).unwrap().unwrap(), b"first");
            let e = dir.join("empty");
            assert!(create_exclusive(fs, &e, b"").unwrap());
            assert!(!create_exclusive(fs, &e, b"").unwrap());
            assert_eq!(fs.list_dir(dir).unwrap().len(), 2);
        });
    }
}
