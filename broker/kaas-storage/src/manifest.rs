//! `manifest.json`: a partition's (epoch, highWatermark, logStartOffset). Written atomically on
//! take_over, relinquish/close and delete_records, never per append; the log is authoritative
//! and the manifest may lag it.

use std::path::Path;

use kaas_shared::atomic_file::write_json;
use kaas_shared::fs::Fs;
use kaas_shared::names::MANIFEST_FILE;

use crate::Result;

pub use kaas_shared::epochs::Manifest;

/// Reads a partition directory's manifest, if any.
pub(crate) fn read(fs: &dyn Fs, dir: &Path) -> Result<Option<Manifest>> {
    Ok(kaas_shared::epochs::read_manifest(fs, dir)?)
}

/// Writes it atomically (temp + fsync + rename + directory fsync).
pub(crate) fn write(fs: &dyn Fs, dir: &Path, manifest: &Manifest) -> Result<()> {
    Ok(write_json(fs, &dir.join(MANIFEST_FILE), manifest)?)
}
