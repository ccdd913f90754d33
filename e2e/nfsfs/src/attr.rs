//! Backing-file metadata as FUSE attributes.

use std::fs::Metadata;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{FileAttr, FileType, INodeNo};

/// The attributes of `meta`, reported under the FUSE node id `ino`.
pub(crate) fn of(ino: u64, meta: &Metadata) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino),
        size: meta.size(),
        blocks: meta.blocks(),
        atime: time(meta.atime(), meta.atime_nsec()),
        mtime: time(meta.mtime(), meta.mtime_nsec()),
        ctime: time(meta.ctime(), meta.ctime_nsec()),
        crtime: meta.created().unwrap_or(UNIX_EPOCH),
        kind: kind(meta.file_type()),
        // The mask keeps the permission bits only, so the value fits.
        perm: (meta.mode() & 0o7777) as u16,
        nlink: u32::try_from(meta.nlink()).unwrap_or(u32::MAX),
        uid: meta.uid(),
        gid: meta.gid(),
        rdev: u32::try_from(meta.rdev()).unwrap_or(0),
        blksize: u32::try_from(meta.blksize()).unwrap_or(4096),
        flags: 0,
    }
}

/// The FUSE file type of a backing file type.
pub(crate) fn kind(t: std::fs::FileType) -> FileType {
    if t.is_dir() {
        FileType::Directory
    } else if t.is_symlink() {
        FileType::Symlink
    } else if t.is_fifo() {
        FileType::NamedPipe
    } else if t.is_socket() {
        FileType::Socket
    } else if t.is_block_device() {
        FileType::BlockDevice
    } else if t.is_char_device() {
        FileType::CharDevice
    } else {
        FileType::RegularFile
    }
}

fn time(secs: i64, nanos: i64) -> SystemTime {
    let nanos = u32::try_from(nanos).unwrap_or(0);
    if secs >= 0 {
        UNIX_EPOCH + Duration::new(secs.unsigned_abs(), nanos)
    } else {
        UNIX_EPOCH - Duration::from_secs(secs.unsigned_abs()) + Duration::from_nanos(nanos.into())
    }
}
