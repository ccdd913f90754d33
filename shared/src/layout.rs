//! Where things live on the volume, and the layout-version stamp.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::atomic_file::{create_exclusive, read_json};
use crate::fs::Fs;
use crate::names::{self, CLUSTER_DIR, GROUPS_DIR, LAYOUT_FILE, PRODUCER_IDS_DIR};
use crate::{Error, Result};

/// The major layout version this binary reads and writes. A volume stamped with another major
/// version is refused.
pub const LAYOUT_MAJOR: u32 = 1;
/// The minor layout version this binary writes (minor changes are backwards compatible).
pub const LAYOUT_MINOR: u32 = 0;

/// The content of `__cluster/layout.json`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LayoutVersion {
    /// Incompatible changes bump this.
    pub major: u32,
    /// Compatible additions bump this.
    pub minor: u32,
}

/// Paths under a volume root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    root: PathBuf,
}

impl Layout {
    /// The layout of the volume mounted at `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Layout { root: root.into() }
    }

    /// The volume root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `<root>/__cluster/`.
    pub fn cluster_dir(&self) -> PathBuf {
        self.root.join(CLUSTER_DIR)
    }

    /// `<root>/__cluster/layout.json`.
    pub fn layout_file(&self) -> PathBuf {
        self.cluster_dir().join(LAYOUT_FILE)
    }

    /// `<root>/__cluster/assignment.json`.
    pub fn assignment_file(&self) -> PathBuf {
        self.cluster_dir().join(names::ASSIGNMENT_FILE)
    }

    /// `<root>/__cluster/interbroker.key`.
    pub fn interbroker_key_file(&self) -> PathBuf {
        self.cluster_dir().join(names::INTERBROKER_KEY_FILE)
    }

    /// `<root>/__cluster/kafka-users.json`.
    pub fn kafka_users_file(&self) -> PathBuf {
        self.cluster_dir().join(names::KAFKA_USERS_FILE)
    }

    /// `<root>/__cluster/brokers/`.
    pub fn brokers_dir(&self) -> PathBuf {
        self.cluster_dir().join(names::BROKERS_DIR)
    }

    /// `<root>/__cluster/producer-ids/`.
    pub fn producer_ids_dir(&self) -> PathBuf {
        self.cluster_dir().join(PRODUCER_IDS_DIR)
    }

    /// `<root>/__cluster/groups/`.
    pub fn groups_dir(&self) -> PathBuf {
        self.cluster_dir().join(GROUPS_DIR)
    }

    /// `<root>/__cluster/groups/<shard:04>/`.
    pub fn group_shard_dir(&self, shard: u32) -> PathBuf {
        self.groups_dir().join(names::group_shard_dir_name(shard))
    }

    /// `<root>/__cluster/transactions/<shard:04>/`.
    pub fn txn_shard_dir(&self, shard: u32) -> PathBuf {
        self.cluster_dir()
            .join(names::TRANSACTIONS_DIR)
            .join(names::group_shard_dir_name(shard))
    }

    /// `<root>/<topic>/`.
    pub fn topic_dir(&self, topic: &str) -> PathBuf {
        self.root.join(topic)
    }

    /// `<root>/<topic>/<partition>/`.
    pub fn partition_dir(&self, topic: &str, partition: i32) -> Result<PathBuf> {
        Ok(self
            .topic_dir(topic)
            .join(names::partition_dir_name(partition)?))
    }

    /// Creates the root and `__cluster/`, stamps the layout version by exclusive create if the
    /// volume has none, and refuses a volume stamped with an unknown major version.
    /// Idempotent: safe to re-drive, and safe for several brokers racing on a fresh volume.
    pub fn ensure(&self, fs: &dyn Fs) -> Result<LayoutVersion> {
        let cluster = self.cluster_dir();
        fs.create_dir_all(&cluster)
            .map_err(|e| Error::io("mkdir", &cluster, e))?;
        let ours = LayoutVersion {
            major: LAYOUT_MAJOR,
            minor: LAYOUT_MINOR,
        };
        let bytes = serde_json::to_vec_pretty(&ours).map_err(|source| Error::Json {
            what: "layout version",
            path: self.layout_file(),
            source,
        })?;
        create_exclusive(fs, &self.layout_file(), &bytes)?;
        self.check(fs)
    }

    /// Reads the stamp and checks its major version.
    pub fn check(&self, fs: &dyn Fs) -> Result<LayoutVersion> {
        let path = self.layout_file();
        let found: LayoutVersion =
            read_json(fs, &path, "layout version")?.ok_or_else(|| Error::BadStamp {
                path: path.clone(),
                reason: "missing".into(),
            })?;
        if found.major != LAYOUT_MAJOR {
            return Err(Error::UnsupportedLayout {
                root: self.root.clone(),
                found_major: found.major,
                found_minor: found.minor,
                supported_major: LAYOUT_MAJOR,
            });
        }
        Ok(found)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::atomic_file::write_json;
    use crate::fs::MemFs;

    #[test]
    fn ensure_stamps_once_and_refuses_unknown_major() {
        let fs = MemFs::new();
        let layout = Layout::new("/data");
        assert_eq!(
            layout.ensure(&fs).unwrap(),
            LayoutVersion { major: 1, minor: 0 }
        );
        assert_eq!(layout.ensure(&fs).unwrap().major, 1);
        write_json(
            &fs,
            &layout.layout_file(),
            &LayoutVersion { major: 2, minor: 3 },
        )
        .unwrap();
        let err = layout.ensure(&fs).unwrap_err();
        assert!(matches!(
            err,
            Error::UnsupportedLayout { found_major: 2, .. }
        ));
        assert!(err.to_string().contains("layout version 2.3"));
        assert_eq!(
            layout.partition_dir("t", 3).unwrap(),
            PathBuf::from("/data/t/3")
        );
    }
}
