//! `manifest.json`: a partition's (epoch, highWatermark, logStartOffset). Written atomically on
//! take_over, relinquish/close and delete_records, never per append; the log is authoritative
//! and the manifest may lag it.

use std::path::Path;

use kaas_shared::atomic_file::{replace_json_in, write_json};
use kaas_shared::fs::{Dir, Fs};
use kaas_shared::names::MANIFEST_FILE;

use crate::Result;

pub use kaas_shared::epochs::Manifest;

/// Reads a partition directory's manifest, if any.
pub(crate) fn read(fs: &dyn Fs, dir: &Path) -> Result<Option<Manifest>> {
    Ok(kaas_shared::epochs::read_manifest(fs, dir)?)
}

/// [`read`] of a held partition directory.
pub(crate) fn read_in(d: &dyn Dir) -> Result<Option<Manifest>> {
    Ok(kaas_shared::epochs::read_manifest_in(d)?)
}

/// Writes it atomically (temp + fsync + rename + directory fsync).
pub(crate) fn write(fs: &dyn Fs, dir: &Path, manifest: &Manifest) -> Result<()> {
    Ok(write_json(fs, &dir.join(MANIFEST_FILE), manifest)?)
}

/// [`write`] without its directory fsync: the new manifest is in place (every reader of the
/// directory sees it at once) but a crash may still forget the rename. For a take-over's claim,
/// whose roll fsyncs the same directory before the first write is accepted: nothing is
/// acknowledged at the new epoch until then, and a claim lost to a crash is claimed again by the
/// take-over that follows it.
pub(crate) fn replace_unsynced(d: &dyn Dir, manifest: &Manifest) -> Result<()> {
    Ok(replace_json_in(d, MANIFEST_FILE, manifest)?)
}
