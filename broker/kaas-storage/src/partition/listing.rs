//! Stat-only discovery of a partition directory: which segments form the log, and which names
//! are leftovers a leader should remove.

use std::collections::BTreeMap;
use std::path::Path;

use kaas_shared::fs::{Dir, DirEntry, Fs};
use kaas_shared::names::{PartitionEntry, SegmentFileKind, parse_partition_entry};

use crate::segment::Segment;
use crate::{Error, Result};

/// What a directory listing says about a partition.
#[derive(Debug)]
pub(super) struct Listing {
    /// The valid chain, ascending base offsets.
    pub(super) segments: Vec<Segment>,
    /// Names only a leader may remove: temp files of interrupted writes, segments a deposed
    /// leader created after a newer epoch took over, index files without their log.
    pub(super) garbage: Vec<String>,
    /// Newest epoch in any segment name (-1 if none).
    pub(super) max_epoch: i32,
}

impl Listing {
    /// No log at all (a directory that could not be listed).
    pub(super) fn empty() -> Listing {
        Listing { segments: Vec::new(), garbage: Vec::new(), max_epoch: -1 }
    }
}

/// Lists a held partition directory (no descriptors opened on its files). A name that is not
/// part of the layout is an error.
pub(super) fn list_in(d: &dyn Dir) -> Result<Listing> {
    let entries = d.list_sized(&is_log).map_err(|e| Error::io("list", d.path(), e))?;
    of_entries(entries)
}

/// Lists `dir` by path, or `None` if it does not exist (see [`list_in`]).
pub(super) fn list_existing(fs: &dyn Fs, dir: &Path) -> Result<Option<Listing>> {
    match fs.list_dir_sized(dir, &is_log) {
        Ok(entries) => of_entries(entries).map(Some),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io("list", dir, e)),
    }
}

/// Only a log's length is read (its extent before the indexes are loaded).
fn is_log(name: &str) -> bool {
    matches!(parse_partition_entry(name), Ok(PartitionEntry::Segment(n)) if n.kind == SegmentFileKind::Log)
}

fn of_entries(entries: Vec<DirEntry>) -> Result<Listing> {
    // (base offset, epoch) → (log length, name)
    let mut logs = BTreeMap::new();
    let mut indexes = Vec::new();
    let mut garbage = Vec::new();
    for entry in entries {
        match parse_partition_entry(&entry.name)? {
            PartitionEntry::Segment(n) if n.kind == SegmentFileKind::Log => {
                logs.insert((n.base_offset, n.epoch), entry.len);
            }
            PartitionEntry::Segment(n) => indexes.push((n.base_offset, n.epoch, entry.name)),
            PartitionEntry::Temp(_) => garbage.push(entry.name),
            PartitionEntry::Manifest
            | PartitionEntry::ProducerSnapshot
            | PartitionEntry::ShareState
            | PartitionEntry::NfsGhost => {}
        }
    }
    let max_epoch = logs.keys().map(|&(_, e)| e).max().unwrap_or(-1);
    // Walk by base offset, highest epoch first at equal bases. Epochs never go down along a
    // real log; a segment whose epoch is below one already seen was created by a deposed
    // leader after a newer leader rolled, and is not part of the log.
    let mut ordered: Vec<_> = logs.into_iter().collect();
    ordered.sort_by(|((b1, e1), _), ((b2, e2), _)| b1.cmp(b2).then(e2.cmp(e1)));
    let mut segments: Vec<Segment> = Vec::new();
    let mut epoch_floor = i32::MIN;
    for ((base, epoch), len) in ordered {
        if epoch < epoch_floor {
            for kind in SegmentFileKind::ALL {
                garbage.push(kaas_shared::names::segment_file_name(epoch, base, kind)?);
            }
            continue;
        }
        epoch_floor = epoch;
        segments.push(Segment::from_stat(epoch, base, len));
    }
    for (base, epoch, name) in indexes {
        if !segments
            .iter()
            .any(|s| s.base_offset == base && s.epoch == epoch)
            && !garbage.contains(&name)
        {
            garbage.push(name);
        }
    }
    Ok(Listing {
        segments,
        garbage,
        max_epoch,
    })
}
