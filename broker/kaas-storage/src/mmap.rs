//! Memory-mapping sealed index files on the real filesystem. The one place this crate needs
//! `unsafe`.

use bytes::Bytes;
use kaas_shared::fs::File;

/// Maps the whole file read-only, or returns `None` where mapping is not possible (the
/// in-memory filesystem, an empty file) so the caller reads it instead.
#[allow(unsafe_code)]
pub(crate) fn map(file: &dyn File) -> std::io::Result<Option<Bytes>> {
    let Some(std_file) = file.as_std() else {
        return Ok(None);
    };
    if std_file.metadata()?.len() == 0 {
        return Ok(None);
    }
    // SAFETY: index files are written once under a temp name, fsynced and renamed into place
    // (see segment sealing); nothing writes to or truncates an index file after its rename, so
    // the mapping cannot change under us. An unlink only drops the name; the mapping stays valid.
    let mapped = unsafe { memmap2::Mmap::map(std_file)? };
    Ok(Some(Bytes::from_owner(mapped)))
}
