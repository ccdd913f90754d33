//! A topic directory's identity stamp (`topic.id`): the UUID of the topic incarnation the
//! directory belongs to, written once by exclusive create. A directory whose stamp differs from
//! the live topic's identity is never opened as that topic.

use std::path::Path;

use uuid::Uuid;

use crate::atomic_file::create_exclusive;
use crate::fs::{Dir, Fs, read_optional, read_optional_in};
use crate::names::TOPIC_ID_FILE;
use crate::{Error, Result};

/// Creates `topic_dir` if needed and stamps it with `id`, or checks an existing stamp equals
/// `id`. Idempotent; of several racing creators exactly one stamp wins.
pub fn stamp(fs: &dyn Fs, topic_dir: &Path, id: Uuid) -> Result<()> {
    fs.create_dir_all(topic_dir)
        .map_err(|e| Error::io("mkdir", topic_dir, e))?;
    let text = format!("{}\n", id.hyphenated());
    create_exclusive(fs, &topic_dir.join(TOPIC_ID_FILE), text.as_bytes())?;
    verify(fs, topic_dir, id)
}

/// Reads the stamp; `Ok(None)` if the directory has none.
pub fn read(fs: &dyn Fs, topic_dir: &Path) -> Result<Option<Uuid>> {
    let path = topic_dir.join(TOPIC_ID_FILE);
    parse(read_optional(fs, &path), path)
}

fn parse(bytes: std::io::Result<Option<Vec<u8>>>, path: std::path::PathBuf) -> Result<Option<Uuid>> {
    let Some(bytes) = bytes.map_err(|e| Error::io("read", &path, e))? else {
        return Ok(None);
    };
    let text = std::str::from_utf8(&bytes).map_err(|e| Error::BadStamp {
        path: path.clone(),
        reason: e.to_string(),
    })?;
    Uuid::parse_str(text.trim())
        .map(Some)
        .map_err(|e| Error::BadStamp {
            path: path.clone(),
            reason: e.to_string(),
        })
}

/// Checks that `topic_dir` is stamped with `expected`.
pub fn verify(fs: &dyn Fs, topic_dir: &Path, expected: Uuid) -> Result<()> {
    check(read(fs, topic_dir)?, topic_dir, expected)
}

/// [`verify`] of a held topic directory: the directory held, wherever it is now, is the one
/// checked (a partition directory's [`Dir::parent`]).
pub fn verify_in(topic_dir: &dyn Dir, expected: Uuid) -> Result<()> {
    let path = topic_dir.path().join(TOPIC_ID_FILE);
    check(parse(read_optional_in(topic_dir, TOPIC_ID_FILE), path)?, topic_dir.path(), expected)
}

fn check(found: Option<Uuid>, topic_dir: &Path, expected: Uuid) -> Result<()> {
    match found {
        Some(found) if found == expected => Ok(()),
        Some(found) => Err(Error::IdentityMismatch {
            dir: topic_dir.to_owned(),
            found,
            expected,
        }),
        None => Err(Error::BadStamp {
            path: topic_dir.join(TOPIC_ID_FILE),
            reason: "missing".into(),
        }),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::fs::MemFs;

    #[test]
    fn stamp_is_idempotent_and_guards_identity() {
        let fs = MemFs::new();
        let dir = Path::new("/data/orders");
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        assert_eq!(read(&fs, dir).unwrap_or(None), None);
        stamp(&fs, dir, a).unwrap();
        stamp(&fs, dir, a).unwrap();
        assert_eq!(read(&fs, dir).unwrap(), Some(a));
        assert!(matches!(
            stamp(&fs, dir, b),
            Err(Error::IdentityMismatch { .. })
        ));
        assert!(matches!(
            verify(&fs, dir, b),
            Err(Error::IdentityMismatch { .. })
        ));
    }
}
