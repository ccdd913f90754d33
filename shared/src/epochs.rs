//! The newest epoch stored on the volume for a partition or a coordinator shard: the floor below
//! which no new owner can take it over. Every writer stamps its epoch into what it writes
//! (segment names, `manifest.json`, shard file names) before its first write, so these
//! stat-and-read functions see every epoch that ever wrote there.
//!
//! The controller reads them before it places an item the previous assignment did not place
//! (a lost or recreated `assignment.json`, a topic that dropped out of one assignment): a new
//! placement's epoch must be above every epoch already on the volume, whatever the controller
//! remembers, or the take-over would be refused for ever.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::atomic_file::{read_json, read_json_in};
use crate::fs::{Dir, Fs};
use crate::names::{self, GroupShardEntry, MANIFEST_FILE, PartitionEntry};
use crate::{Error, Result};

/// A partition's `manifest.json`: (epoch, highWatermark, logStartOffset). Written atomically by
/// the partition's leader on take-over, hand-over and DeleteRecords, never per append.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    /// Leader epoch of the last writer.
    pub epoch: i32,
    /// High watermark when written (may lag the log).
    pub high_watermark: i64,
    /// First offset consumers may read (raised by DeleteRecords and retention).
    pub log_start_offset: i64,
    /// The log cleaner's checkpoint (compacted topics): offsets below it were cleaned, so the
    /// next leader's first pass maps only the keys above it. Written with the rest at
    /// hand-over and take-over; absent in manifests written before it existed, and ignored by
    /// brokers from before it (serde skips unknown fields), which then clean from the log start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cleaned_up_to: Option<i64>,
}

/// Reads a partition directory's manifest, if any.
pub fn read_manifest(fs: &dyn Fs, partition_dir: &Path) -> Result<Option<Manifest>> {
    read_json(fs, &partition_dir.join(MANIFEST_FILE), "manifest.json")
}

/// [`read_manifest`] of a held partition directory.
pub fn read_manifest_in(partition_dir: &dyn Dir) -> Result<Option<Manifest>> {
    read_json_in(partition_dir, MANIFEST_FILE, "manifest.json")
}

/// The newest epoch in a partition directory (segment names and the manifest); -1 if it has
/// none or does not exist. Names that are not segments carry no epoch and are passed over.
pub fn stored_partition_epoch(fs: &dyn Fs, partition_dir: &Path) -> Result<i32> {
    let Some(entries) = list_optional(fs, partition_dir)? else { return Ok(-1) };
    let in_manifest = read_manifest(fs, partition_dir)?.map_or(-1, |m| m.epoch);
    Ok(newest_segment_epoch(&entries).max(in_manifest))
}

/// [`stored_partition_epoch`] of a held partition directory.
pub fn stored_partition_epoch_in(partition_dir: &dyn Dir) -> Result<i32> {
    let entries = partition_dir.list_sized(&|_| false).map_err(|e| Error::io("list", partition_dir.path(), e))?;
    let names: Vec<String> = entries.into_iter().map(|e| e.name).collect();
    let in_manifest = read_manifest_in(partition_dir)?.map_or(-1, |m| m.epoch);
    Ok(newest_segment_epoch(&names).max(in_manifest))
}

fn newest_segment_epoch(names: &[String]) -> i32 {
    names
        .iter()
        .filter_map(|name| match names::parse_partition_entry(name) {
            Ok(PartitionEntry::Segment(s)) => Some(s.epoch),
            _ => None,
        })
        .max()
        .unwrap_or(-1)
}

/// The newest epoch in a group or transaction shard directory; -1 if it has none or does not
/// exist. Names that are not shard files carry no epoch and are passed over.
pub fn stored_shard_epoch(fs: &dyn Fs, shard_dir: &Path) -> Result<i32> {
    let Some(entries) = list_optional(fs, shard_dir)? else { return Ok(-1) };
    Ok(entries
        .iter()
        .filter_map(|name| match names::parse_group_shard_entry(name) {
            Ok(GroupShardEntry::File(f)) => Some(f.epoch),
            _ => None,
        })
        .max()
        .unwrap_or(-1))
}

fn list_optional(fs: &dyn Fs, dir: &Path) -> Result<Option<Vec<String>>> {
    match fs.list_dir(dir) {
        Ok(entries) => Ok(Some(entries.into_iter().map(|e| e.name).collect())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io("list", dir, e)),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::atomic_file::write_json;
    use crate::fs::{MemFs, OpenMode};
    use crate::names::{GroupFileKind, SegmentFileKind, group_file_name, segment_file_name};

    #[test]
    fn partition_epochs_come_from_segment_names_and_the_manifest() {
        let fs = MemFs::new();
        let dir = Path::new("/v/t/0");
        assert_eq!(stored_partition_epoch(&fs, dir).unwrap(), -1);
        fs.create_dir_all(dir).unwrap();
        fs.open(&dir.join(segment_file_name(3, 0, SegmentFileKind::Log).unwrap()), OpenMode::CreateNew).unwrap();
        fs.open(&dir.join("stray.txt"), OpenMode::CreateNew).unwrap();
        assert_eq!(stored_partition_epoch(&fs, dir).unwrap(), 3);
        // A take-over claims its epoch in the manifest before it rolls a segment.
        write_json(&fs, &dir.join(MANIFEST_FILE), &Manifest { epoch: 5, high_watermark: 0, log_start_offset: 0, cleaned_up_to: None }).unwrap();
        assert_eq!(stored_partition_epoch(&fs, dir).unwrap(), 5);
    }

    #[test]
    fn shard_epochs_come_from_file_names() {
        let fs = MemFs::new();
        let dir = Path::new("/v/__cluster/groups/0001");
        assert_eq!(stored_shard_epoch(&fs, dir).unwrap(), -1);
        fs.create_dir_all(dir).unwrap();
        fs.open(&dir.join(group_file_name(7, 2, GroupFileKind::Log).unwrap()), OpenMode::CreateNew).unwrap();
        fs.open(&dir.join(group_file_name(4, 9, GroupFileKind::Snapshot).unwrap()), OpenMode::CreateNew).unwrap();
        assert_eq!(stored_shard_epoch(&fs, dir).unwrap(), 7);
    }
}
