//! One mount's inode table: the FUSE node ids the kernel holds, each mapped to the backing
//! file's identity and the (parent, name) it was last seen under.
//!
//! Nodes are keyed by the backing file's identity rather than by path, like an NFS file
//! handle: a node whose name has gone (removed or renamed through another mount) no longer
//! resolves, and the operation answers ESTALE, on which the kernel's VFS looks the path up
//! again (`LOOKUP_REVAL`) just as it does on NFS.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::fs::Metadata;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::time::UNIX_EPOCH;

/// The FUSE root node id.
pub(crate) const ROOT: u64 = 1;

/// A backing file's identity: device and inode number, plus the birth time where the backing
/// filesystem reports one, so a recycled inode number is not mistaken for the file it
/// replaced (a server's file-handle generation plays this part on NFS).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Key {
    dev: u64,
    ino: u64,
    birth_nanos: Option<u128>,
}

impl Key {
    pub(crate) fn of(meta: &Metadata) -> Key {
        Key {
            dev: meta.dev(),
            ino: meta.ino(),
            birth_nanos: meta
                .created()
                .ok()
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .map(|d| d.as_nanos()),
        }
    }

    /// The backing inode number (the "fileid" in a silly-rename name).
    pub(crate) fn fileid(&self) -> u64 {
        self.ino
    }
}

#[derive(Debug)]
struct Node {
    key: Key,
    parent: u64,
    name: OsString,
    /// Lookups the kernel holds (FORGET gives them back).
    lookups: u64,
}

/// The table.
#[derive(Debug)]
pub(crate) struct Inodes {
    nodes: HashMap<u64, Node>,
    by_key: HashMap<Key, u64>,
    next: u64,
}

/// Deeper than any real tree; stops a walk if a bug ever made a parent cycle.
const MAX_DEPTH: usize = 4096;

impl Inodes {
    pub(crate) fn new(root: Key) -> Inodes {
        let mut nodes = HashMap::new();
        nodes.insert(
            ROOT,
            Node {
                key: root,
                parent: ROOT,
                name: OsString::new(),
                lookups: 1,
            },
        );
        Inodes {
            nodes,
            by_key: HashMap::from([(root, ROOT)]),
            next: ROOT + 1,
        }
    }

    /// The volume-relative path of a node as last seen, `None` for an unknown node.
    pub(crate) fn path(&self, ino: u64) -> Option<PathBuf> {
        let mut names = Vec::new();
        let mut cur = ino;
        while cur != ROOT {
            let node = self.nodes.get(&cur)?;
            names.push(node.name.as_os_str());
            cur = node.parent;
            if names.len() > MAX_DEPTH {
                return None;
            }
        }
        Some(names.iter().rev().collect())
    }

    pub(crate) fn key(&self, ino: u64) -> Option<Key> {
        self.nodes.get(&ino).map(|n| n.key)
    }

    pub(crate) fn parent(&self, ino: u64) -> Option<u64> {
        self.nodes.get(&ino).map(|n| n.parent)
    }

    /// Records a lookup of `key` as `name` in `parent` and returns its node id (the same one
    /// for every name of a hard-linked file).
    pub(crate) fn remember(&mut self, parent: u64, name: &OsStr, key: Key) -> u64 {
        if let Some(&ino) = self.by_key.get(&key)
            && let Some(node) = self.nodes.get_mut(&ino)
        {
            node.lookups += 1;
            if ino != ROOT {
                node.parent = parent;
                node.name = name.to_os_string();
            }
            return ino;
        }
        let ino = self.next;
        self.next += 1;
        self.nodes.insert(
            ino,
            Node {
                key,
                parent,
                name: name.to_os_string(),
                lookups: 1,
            },
        );
        self.by_key.insert(key, ino);
        ino
    }

    /// Moves the node of `key` (if known) to `name` in `parent`: after a rename or a silly
    /// rename through this mount, so operations by node id keep finding it.
    pub(crate) fn moved(&mut self, key: Key, parent: u64, name: &OsStr) {
        if let Some(&ino) = self.by_key.get(&key)
            && ino != ROOT
            && let Some(node) = self.nodes.get_mut(&ino)
        {
            node.parent = parent;
            node.name = name.to_os_string();
        }
    }

    /// The kernel dropped `n` lookups of `ino`.
    pub(crate) fn forget(&mut self, ino: u64, n: u64) {
        if ino == ROOT {
            return;
        }
        let Some(node) = self.nodes.get_mut(&ino) else {
            return;
        };
        node.lookups = node.lookups.saturating_sub(n);
        if node.lookups == 0 {
            let key = node.key;
            self.nodes.remove(&ino);
            if self.by_key.get(&key) == Some(&ino) {
                self.by_key.remove(&key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(ino: u64) -> Key {
        Key {
            dev: 1,
            ino,
            birth_nanos: None,
        }
    }

    #[test]
    fn paths_follow_renames_and_forgets_drop_nodes() {
        let mut t = Inodes::new(key(2));
        let d = t.remember(ROOT, OsStr::new("d"), key(10));
        let f = t.remember(d, OsStr::new("f"), key(11));
        assert_eq!(t.path(f), Some(PathBuf::from("d/f")));
        assert_eq!(
            t.remember(d, OsStr::new("g"), key(11)),
            f,
            "hard link: same node"
        );
        assert_eq!(t.path(f), Some(PathBuf::from("d/g")));
        t.moved(key(10), ROOT, OsStr::new("e"));
        assert_eq!(t.path(f), Some(PathBuf::from("e/g")));
        t.forget(f, 1);
        assert!(t.path(f).is_some(), "still one lookup");
        t.forget(f, 1);
        assert_eq!(t.path(f), None);
        assert_eq!(t.path(ROOT), Some(PathBuf::new()));
    }
}
