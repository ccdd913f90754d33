//! Stat-only listing of a group shard directory: names say everything (epoch, generation, kind).

use std::path::Path;

use kaas_shared::fs::Fs;
use kaas_shared::names::{GroupFileKind, GroupFileName, GroupShardEntry, parse_group_shard_entry};

use super::{Error, Result};

/// A file's place in the shard's history: files sort by `(epoch, generation)`.
pub(crate) type Stamp = (i32, i64);

/// What a shard directory holds.
#[derive(Debug, Default)]
pub(crate) struct Listing {
    /// Logs and snapshots, sorted by stamp (a snapshot before the log of the same stamp).
    pub(crate) files: Vec<GroupFileName>,
    /// Leftover temp files of interrupted atomic writes.
    pub(crate) temps: Vec<String>,
    /// The newest epoch any file carries (-1 for an empty shard).
    pub(crate) max_epoch: i32,
}

impl Listing {
    /// The newest snapshot's stamp.
    pub(crate) fn newest_snapshot(&self) -> Option<Stamp> {
        self.files
            .iter()
            .filter(|f| f.kind == GroupFileKind::Snapshot)
            .map(stamp)
            .max()
    }

    /// The stamp a new owner at `epoch` (or a compaction) writes next: after everything listed.
    pub(crate) fn next_stamp(&self, epoch: i32) -> Stamp {
        let newest_here = self
            .files
            .iter()
            .filter(|f| f.epoch == epoch)
            .map(|f| f.generation)
            .max();
        (epoch, newest_here.map_or(0, |g| g + 1))
    }
}

pub(crate) fn stamp(f: &GroupFileName) -> Stamp {
    (f.epoch, f.generation)
}

/// Lists `dir`. An unknown name is an error (never skipped): something else writes here.
pub(crate) fn list(fs: &dyn Fs, dir: &Path) -> Result<Listing> {
    let entries = match fs.list_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Listing { max_epoch: -1, ..Listing::default() }),
        Err(e) => return Err(Error::io("list", dir, e)),
    };
    let mut listing = Listing {
        max_epoch: -1,
        ..Listing::default()
    };
    for entry in entries {
        match parse_group_shard_entry(&entry.name)? {
            GroupShardEntry::File(f) => {
                listing.max_epoch = listing.max_epoch.max(f.epoch);
                listing.files.push(f);
            }
            GroupShardEntry::Temp(_) => listing.temps.push(entry.name),
            GroupShardEntry::NfsGhost => {}
        }
    }
    listing
        .files
        .sort_by_key(|f| (f.epoch, f.generation, f.kind == GroupFileKind::Log));
    Ok(listing)
}
