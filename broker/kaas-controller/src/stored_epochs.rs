//! The balancer's epoch floors read from the shared volume.

use kaas_shared::epochs;
use kaas_shared::fs::FsRef;
use kaas_shared::layout::Layout;
use tracing::warn;

use crate::balancer::StoredEpochs;

/// Reads the newest stored epoch of a partition or shard from the volume. A read that fails
/// leaves the item unplaced this round (logged with the path); the next recompute retries.
#[derive(Debug)]
pub struct VolumeEpochs<'a> {
    pub fs: &'a FsRef,
    pub layout: &'a Layout,
}

impl VolumeEpochs<'_> {
    fn read(&self, what: &str, path: std::path::PathBuf, read: impl Fn(&std::path::Path) -> kaas_shared::Result<i32>) -> Option<i32> {
        match read(&path) {
            Ok(epoch) => Some(epoch),
            Err(e) => {
                warn!(what, path = %path.display(), error = %e, "cannot read the stored epoch; not placing it this round");
                None
            }
        }
    }
}

impl StoredEpochs for VolumeEpochs<'_> {
    fn partition(&self, topic: &str, partition: i32) -> Option<i32> {
        let dir = match self.layout.partition_dir(topic, partition) {
            Ok(dir) => dir,
            Err(e) => {
                warn!(topic, partition, error = %e, "no partition directory name; not placing it");
                return None;
            }
        };
        self.read("partition", dir, |d| epochs::stored_partition_epoch(&**self.fs, d))
    }

    fn group_shard(&self, shard: u32) -> Option<i32> {
        self.read("group shard", self.layout.group_shard_dir(shard), |d| epochs::stored_shard_epoch(&**self.fs, d))
    }

    fn txn_shard(&self, shard: u32) -> Option<i32> {
        self.read("transaction shard", self.layout.txn_shard_dir(shard), |d| epochs::stored_shard_epoch(&**self.fs, d))
    }
}
