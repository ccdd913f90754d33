//! `manifest.json`: a partition's (epoch, highWatermark, logStartOffset). Written atomically on
//! take_over, relinquish/close and delete_records, never per append; the log is authoritative
//! and the manifest may lag it.

use std::path::Path;

use kaas_shared::atomic_file::{read_json, write_json};
use kaas_shared::fs::Fs;
use kaas_shared::names::MANIFEST_FILE;
use serde::{Deserialize, Serialize};

use crate::Result;

/// The manifest's schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    /// Leader epoch of the last writer.
    pub epoch: i32,
    /// High watermark when written (may lag the log).
    pub high_watermark: i64,
    /// First offset consumers may read (raised by DeleteRecords and retention).
    pub log_start_offset: i64,
}

/// Reads a partition directory's manifest, if any.
pub(crate) fn read(fs: &dyn Fs, dir: &Path) -> Result<Option<Manifest>> {
    Ok(read_json(fs, &dir.join(MANIFEST_FILE), "manifest.json")?)
}

/// Writes it atomically (temp + fsync + rename + directory fsync).
pub(crate) fn write(fs: &dyn Fs, dir: &Path, manifest: &Manifest) -> Result<()> {
    Ok(write_json(fs, &dir.join(MANIFEST_FILE), manifest)?)
}
