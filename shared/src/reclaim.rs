//! Reclamation of topic directories: the one implementation the broker (local mode) and the
//! operator (cluster mode) share.
//!
//! A topic directory that must go (its topic was deleted, or it carries the identity of an
//! earlier incarnation) is first renamed aside to `.reclaim-<identity>-<topic>` so that the
//! topic's path is free at once for a fresh incarnation, and then removed by [`sweep`], which
//! every housekeeping round re-drives until the renamed tree is gone.
//!
//! Seed 001's three questions, answered for this module:
//! 1. Atomic primitive? The rename aside is one same-directory rename (topic dir and reclaim
//!    dir are both entries of the volume root), fsynced through the root directory. The removal
//!    is not atomic: it is a sequence of unlinks.
//! 2. Idempotent and re-driven? Yes: [`remove_tree`] treats "already gone" as success and can be
//!    repeated after any failure; a failure (EBUSY unlinking a `.nfsXXXX` ghost, ENOTEMPTY
//!    removing the directory that holds one) is reported as pending and retried by the next
//!    sweep, never logged and forgotten.
//! 3. One writer? Topic directories have one writer of their metadata: the broker in local mode,
//!    the operator's volume agent of the cluster in cluster mode, never both on one volume.
//!    Renaming aside happens only when no broker leads the directory's partitions (the caller
//!    checks `assignment.json`), so no leader holds descriptors in it (seed 000).

use std::io;
use std::path::{Path, PathBuf};

use uuid::Uuid;

use crate::fs::Fs;
use crate::{Error, Result};

/// Prefix of a topic directory renamed aside for removal.
pub const RECLAIM_PREFIX: &str = ".reclaim-";

/// Builds the name a topic directory of incarnation `id` is renamed aside to.
pub fn reclaim_dir_name(id: Uuid, topic: &str) -> String {
    format!("{RECLAIM_PREFIX}{}-{topic}", id.hyphenated())
}

/// Whether a volume-root entry is a directory renamed aside (parse it with
/// [`parse_reclaim_dir_name`]).
pub fn is_reclaim_dir_name(name: &str) -> bool {
    name.starts_with(RECLAIM_PREFIX)
}

/// Parses a name built by [`reclaim_dir_name`] into (identity, topic).
pub fn parse_reclaim_dir_name(name: &str) -> Result<(Uuid, String)> {
    let bad = |reason| Error::BadName {
        name: name.to_owned(),
        reason,
    };
    let rest = name
        .strip_prefix(RECLAIM_PREFIX)
        .ok_or_else(|| bad("no .reclaim- prefix"))?;
    // A hyphenated UUID is 36 characters, then '-', then the topic (which may contain '-').
    let (id, topic) = (rest.get(..36), rest.get(37..));
    let (Some(id), Some(topic)) = (id, topic) else {
        return Err(bad("too short for <uuid>-<topic>"));
    };
    if rest.as_bytes().get(36) != Some(&b'-') || topic.is_empty() {
        return Err(bad("no '-' between identity and topic"));
    }
    let id = Uuid::try_parse(id).map_err(|_| bad("bad identity"))?;
    Ok((id, topic.to_owned()))
}

/// Renames `<root>/<topic>` aside as incarnation `id`'s reclaim directory. Returns `false` when
/// there was nothing to rename (already renamed by an earlier, interrupted attempt).
pub fn rename_aside(fs: &dyn Fs, root: &Path, topic: &str, id: Uuid) -> Result<bool> {
    let from = root.join(topic);
    let mut to = root.join(reclaim_dir_name(id, topic));
    // NB: rename onto an existing non-empty directory fails; that happens only if this
    // incarnation was renamed aside before and its leftovers are still being swept, so a second
    // name is as good as the first (the sweep removes every reclaim directory).
    if fs.stat(&to).is_ok() {
        to = root.join(reclaim_dir_name(Uuid::new_v4(), topic));
    }
    match fs.rename(&from, &to) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(Error::io("rename", &from, e)),
    }
    // Durability: without the directory fsync a crash could bring the old name back, and a
    // recreated topic would find the dead incarnation's directory at its path (the identity
    // check would still refuse it, but it would have to be reclaimed again).
    fs.sync_dir(root)
        .map_err(|e| Error::io("fsync dir", root, e))?;
    Ok(true)
}

/// What one [`sweep`] did.
#[derive(Debug, Default)]
pub struct SweepReport {
    /// Reclaim directories removed completely.
    pub removed: Vec<PathBuf>,
    /// Reclaim directories still there, with the error that stopped their removal this round.
    pub pending: Vec<(PathBuf, io::Error)>,
}

/// Removes every reclaim directory under `root`, as far as it can. Whatever fails now is in
/// [`SweepReport::pending`] and must be retried by the caller's next round.
pub fn sweep(fs: &dyn Fs, root: &Path) -> Result<SweepReport> {
    let entries = fs.list_dir(root).map_err(|e| Error::io("list", root, e))?;
    let mut report = SweepReport::default();
    for entry in entries
        .iter()
        .filter(|e| e.is_dir && is_reclaim_dir_name(&e.name))
    {
        let path = root.join(&entry.name);
        match remove_tree(fs, &path) {
            Ok(()) => report.removed.push(path),
            Err(e) => report.pending.push((path, e)),
        }
    }
    if !report.removed.is_empty() {
        fs.sync_dir(root)
            .map_err(|e| Error::io("fsync dir", root, e))?;
    }
    Ok(report)
}

/// Whether a removal error means "something still holds a file here, try again later" (EBUSY
/// from a `.nfsXXXX` ghost, ENOTEMPTY from the directory holding one) rather than a fault.
pub fn is_retry_later(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ResourceBusy | io::ErrorKind::DirectoryNotEmpty
    )
}

/// `rm -r`, one unlink at a time; "already gone" is success, so it is safe to repeat after any
/// failure or crash.
pub fn remove_tree(fs: &dyn Fs, path: &Path) -> io::Result<()> {
    let entries = match fs.list_dir(path) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let child = path.join(&entry.name);
        if entry.is_dir {
            remove_tree(fs, &child)?;
        } else {
            match fs.remove_file(&child) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
    }
    match fs.remove_dir(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::fs::{MemFs, OpenMode, RealFs};
    use crate::identity;

    fn touch(fs: &dyn Fs, path: &Path) {
        fs.open(path, OpenMode::CreateNew).unwrap();
    }

    #[test]
    fn names_round_trip_with_dashes_in_topics() {
        let id = Uuid::new_v4();
        for topic in ["t", "a-b-c", "x.y_z"] {
            let name = reclaim_dir_name(id, topic);
            assert!(is_reclaim_dir_name(&name));
            assert_eq!(
                parse_reclaim_dir_name(&name).unwrap(),
                (id, topic.to_owned())
            );
        }
        for bad in [
            ".reclaim-",
            ".reclaim-nope-t",
            "orders",
            &format!(".reclaim-{id}"),
        ] {
            assert!(
                matches!(parse_reclaim_dir_name(bad), Err(Error::BadName { .. })),
                "{bad}"
            );
        }
    }

    fn rename_then_sweep(fs: &dyn Fs, root: &Path) {
        fs.create_dir_all(root).unwrap();
        let id = Uuid::new_v4();
        let dir = root.join("orders");
        identity::stamp(fs, &dir, id).unwrap();
        fs.create_dir_all(&dir.join("0")).unwrap();
        touch(fs, &dir.join("0").join("seg.log"));

        assert!(rename_aside(fs, root, "orders", id).unwrap());
        // The path is free at once for a new incarnation.
        assert!(fs.stat(&dir).is_err());
        // Re-driving after an interrupted attempt is harmless.
        assert!(!rename_aside(fs, root, "orders", id).unwrap());

        let report = sweep(fs, root).unwrap();
        assert_eq!(report.removed.len(), 1);
        assert!(report.pending.is_empty());
        assert!(fs.list_dir(root).unwrap().is_empty());
        // Nothing left: a sweep is a no-op.
        let report = sweep(fs, root).unwrap();
        assert!(report.removed.is_empty() && report.pending.is_empty());
    }

    #[test]
    fn rename_aside_then_sweep_mem() {
        rename_then_sweep(&MemFs::new(), Path::new("/data"));
    }

    #[test]
    fn rename_aside_then_sweep_real() {
        let tmp = tempfile::tempdir().unwrap();
        rename_then_sweep(&RealFs, &tmp.path().join("data"));
    }

    #[test]
    fn a_second_rename_of_the_same_incarnation_gets_its_own_name() {
        let fs = MemFs::new();
        let root = Path::new("/data");
        let id = Uuid::new_v4();
        for _ in 0..2 {
            identity::stamp(&fs, &root.join("t"), id).unwrap();
            touch(&fs, &root.join("t").join("x"));
            assert!(rename_aside(&fs, root, "t", id).unwrap());
        }
        let names: Vec<_> = fs
            .list_dir(root)
            .unwrap()
            .into_iter()
            .map(|e| e.name)
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
        assert!(
            names
                .iter()
                .all(|n| parse_reclaim_dir_name(n).unwrap().1 == "t")
        );
    }

    /// MemFs with NFS's one extra rule: a `.nfsXXXX` ghost cannot be unlinked while `held`.
    #[derive(Debug, Default)]
    struct GhostFs {
        inner: MemFs,
        held: std::sync::atomic::AtomicBool,
    }

    impl Fs for GhostFs {
        fn create_dir_all(&self, p: &Path) -> io::Result<()> {
            self.inner.create_dir_all(p)
        }
        fn list_dir_sized(&self, p: &Path, sized: &dyn Fn(&str) -> bool) -> io::Result<Vec<crate::fs::DirEntry>> {
            self.inner.list_dir_sized(p, sized)
        }
        fn stat(&self, p: &Path) -> io::Result<crate::fs::DirEntry> {
            self.inner.stat(p)
        }
        fn open(&self, p: &Path, m: OpenMode) -> io::Result<std::sync::Arc<dyn crate::fs::File>> {
            self.inner.open(p, m)
        }
        fn remove_file(&self, p: &Path) -> io::Result<()> {
            let ghost = p
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(".nfs"));
            if ghost && self.held.load(std::sync::atomic::Ordering::SeqCst) {
                return Err(io::Error::from(io::ErrorKind::ResourceBusy));
            }
            self.inner.remove_file(p)
        }
        fn remove_dir(&self, p: &Path) -> io::Result<()> {
            self.inner.remove_dir(p)
        }
        fn rename(&self, f: &Path, t: &Path) -> io::Result<()> {
            self.inner.rename(f, t)
        }
        fn hard_link(&self, f: &Path, t: &Path) -> io::Result<()> {
            self.inner.hard_link(f, t)
        }
        fn sync_dir(&self, p: &Path) -> io::Result<()> {
            self.inner.sync_dir(p)
        }
    }

    #[test]
    fn a_ghost_leaves_the_sweep_pending_until_its_holder_lets_go() {
        let fs = GhostFs::default();
        let root = Path::new("/data");
        let id = Uuid::new_v4();
        identity::stamp(&fs, &root.join("t"), id).unwrap();
        fs.create_dir_all(&root.join("t").join("0")).unwrap();
        touch(&fs, &root.join("t").join("0").join(".nfs0000beef"));
        fs.held.store(true, std::sync::atomic::Ordering::SeqCst);
        assert!(rename_aside(&fs, root, "t", id).unwrap());
        for _ in 0..3 {
            let report = sweep(&fs, root).unwrap();
            assert!(report.removed.is_empty());
            assert_eq!(report.pending.len(), 1);
            assert!(is_retry_later(&report.pending[0].1));
        }
        fs.held.store(false, std::sync::atomic::Ordering::SeqCst);
        let report = sweep(&fs, root).unwrap();
        assert_eq!(report.removed.len(), 1);
        assert!(fs.list_dir(root).unwrap().is_empty());
    }

    #[test]
    fn retry_later_errors() {
        assert!(is_retry_later(&io::Error::from(
            io::ErrorKind::ResourceBusy
        )));
        assert!(is_retry_later(&io::Error::from(
            io::ErrorKind::DirectoryNotEmpty
        )));
        assert!(!is_retry_later(&io::Error::from(
            io::ErrorKind::PermissionDenied
        )));
    }
}
