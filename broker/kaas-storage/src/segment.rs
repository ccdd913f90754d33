//! One segment: its name-derived identity, what is known of its extent, its descriptor (leader
//! only) and its sparse indexes.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use kaas_shared::fs::{Dir, File, Fs, OpenMode, read_optional};
use kaas_shared::names::{SegmentFileKind, segment_file_name};

use crate::batch::BatchHeader;
use crate::index::{OffsetIndex, TimeIndex};
use crate::scan::{Scanner, Step};
use crate::{Error, Result};

/// A segment of a partition's log.
#[derive(Debug)]
pub(crate) struct Segment {
    /// Epoch of the leader that created it (from its name).
    pub(crate) epoch: i32,
    /// First offset (from its name).
    pub(crate) base_offset: i64,
    /// Bytes that belong to the log. Until `bounded`, this is only the stat size: a deposed
    /// leader may have appended past the point where the next segment took over.
    pub(crate) size: u64,
    /// Whether `size` is known to end on the last batch below the next segment's base offset.
    pub(crate) bounded: bool,
    /// Bytes known to be fsynced; reads never go past this.
    pub(crate) synced: u64,
    /// The offset after the last batch, once known.
    pub(crate) end_offset: Option<i64>,
    /// Open descriptor (leader only). Released when idle (see [`Segment::release_if_idle`])
    /// and opened again on the next read or append.
    pub(crate) file: Option<Arc<dyn File>>,
    /// Whether the descriptor was wanted since housekeeping last looked: its second chance
    /// before an idle release.
    pub(crate) used: bool,
    pub(crate) index: Option<OffsetIndex>,
    pub(crate) time_index: Option<TimeIndex>,
    /// Largest batch maxTimestamp and the base offset of that batch, once known.
    pub(crate) max_timestamp: Option<(i64, i64)>,
    /// Wall-clock time of the first append (active segment; drives segment.ms).
    pub(crate) first_append_ms: Option<i64>,
    bytes_since_index: usize,
}

impl Segment {
    /// A segment known from a directory listing only.
    pub(crate) fn from_stat(epoch: i32, base_offset: i64, len: u64) -> Self {
        Segment {
            epoch,
            base_offset,
            size: len,
            bounded: false,
            synced: 0,
            end_offset: None,
            file: None,
            used: false,
            index: None,
            time_index: None,
            max_timestamp: None,
            first_append_ms: None,
            bytes_since_index: 0,
        }
    }

    /// A brand-new, empty active segment.
    pub(crate) fn new_active(epoch: i32, base_offset: i64, file: Arc<dyn File>) -> Self {
        let mut s = Segment::from_stat(epoch, base_offset, 0);
        s.bounded = true;
        s.end_offset = Some(base_offset);
        s.file = Some(file);
        s.index = Some(OffsetIndex::new());
        s.time_index = Some(TimeIndex::new());
        s
    }

    pub(crate) fn path(&self, dir: &Path, kind: SegmentFileKind) -> Result<PathBuf> {
        Ok(dir.join(segment_file_name(self.epoch, self.base_offset, kind)?))
    }

    /// Opens the log file if it is not open yet.
    pub(crate) fn open(
        &mut self,
        fs: &dyn Fs,
        dir: &Path,
        mode: OpenMode,
    ) -> Result<Arc<dyn File>> {
        self.open_by(dir, |name| fs.open(&dir.join(name), mode))
    }

    /// [`Segment::open`] in a held partition directory.
    pub(crate) fn open_in(&mut self, d: &dyn Dir, mode: OpenMode) -> Result<Arc<dyn File>> {
        self.open_by(d.path(), |name| d.open(name, mode))
    }

    fn open_by(&mut self, dir: &Path, open: impl FnOnce(&str) -> std::io::Result<Arc<dyn File>>) -> Result<Arc<dyn File>> {
        self.used = true;
        if let Some(f) = &self.file {
            return Ok(f.clone());
        }
        let name = segment_file_name(self.epoch, self.base_offset, SegmentFileKind::Log)?;
        let file = open(&name).map_err(|e| Error::io("open", dir.join(&name), e))?;
        self.file = Some(file.clone());
        Ok(file)
    }

    /// Records a batch written (or found) at `pos`: sparse index entries, max timestamp, extent.
    pub(crate) fn on_batch(&mut self, pos: u64, header: &BatchHeader, index_interval: usize) {
        let relative = u32::try_from(header.base_offset - self.base_offset).unwrap_or(u32::MAX);
        if self
            .max_timestamp
            .is_none_or(|(ts, _)| header.max_timestamp > ts)
        {
            self.max_timestamp = Some((header.max_timestamp, header.base_offset));
        }
        if self.bytes_since_index >= index_interval && pos > 0 {
            let position = u32::try_from(pos).unwrap_or(u32::MAX);
            self.index
                .get_or_insert_with(OffsetIndex::new)
                .append(relative, position);
            if let Some((ts, _)) = self.max_timestamp {
                self.time_index
                    .get_or_insert_with(TimeIndex::new)
                    .maybe_append(ts, relative);
            }
            self.bytes_since_index = 0;
        }
        self.bytes_since_index += header.size;
        self.size = pos + header.size as u64;
        self.end_offset = Some(header.last_offset() + 1);
    }

    /// Rebuilds indexes, extent and max timestamp by scanning the log up to `stop_offset` (the
    /// next segment's base offset) or the first invalid byte, without CRC checks.
    pub(crate) fn rebuild(
        &mut self,
        stop_offset: Option<i64>,
        index_interval: usize,
    ) -> Result<()> {
        let file = self.file.clone().ok_or(Error::NotLeader)?;
        let len = file.len().map_err(|e| Error::io("stat", "segment", e))?;
        self.index = Some(OffsetIndex::new());
        self.time_index = Some(TimeIndex::new());
        self.max_timestamp = None;
        self.bytes_since_index = 0;
        self.size = 0;
        self.end_offset = Some(self.base_offset);
        let mut scan = Scanner::new(&*file, 0, len, false, crate::scan::BIG_CHUNK);
        while let Step::Batch { pos, header } = scan
            .next_step()
            .map_err(|e| Error::io("read", "segment", e))?
        {
            if stop_offset.is_some_and(|stop| header.base_offset >= stop) {
                break;
            }
            self.on_batch(pos, &header, index_interval);
        }
        self.bounded = true;
        self.synced = self.size;
        Ok(())
    }

    /// Loads a sealed segment's index files (mapped on the real filesystem) and bounds its
    /// extent by `stop_offset`, rebuilding everything from the log if the files are missing or
    /// inconsistent.
    pub(crate) fn load_sealed(
        &mut self,
        fs: &dyn Fs,
        dir: &Path,
        stop_offset: Option<i64>,
        index_interval: usize,
    ) -> Result<()> {
        self.open(fs, dir, OpenMode::Read)?;
        let stat_len = self.size;
        let index = read_index(fs, &self.path(dir, SegmentFileKind::Index)?)?
            .and_then(|b| OffsetIndex::load(b, stat_len));
        let time_index =
            read_index(fs, &self.path(dir, SegmentFileKind::TimeIndex)?)?.and_then(TimeIndex::load);
        let (Some(index), Some(time_index)) = (index, time_index) else {
            return self.rebuild(stop_offset, index_interval);
        };
        let (start_rel, start) = index
            .last()
            .map_or((0, 0), |(rel, pos)| (rel, u64::from(pos)));
        self.max_timestamp = time_index
            .last()
            .map(|(ts, rel)| (ts, self.base_offset + i64::from(rel)));
        self.index = Some(index);
        self.time_index = Some(time_index);
        // Walk from the last index entry to find where this segment's log really ends.
        let file = self.open(fs, dir, OpenMode::Read)?;
        let mut scan = Scanner::new(&*file, start, stat_len, false, crate::scan::SMALL_CHUNK);
        self.size = start;
        loop {
            match scan
                .next_step()
                .map_err(|e| Error::io("read", "segment", e))?
            {
                Step::Batch { pos, header }
                    if pos == start
                        && header.base_offset != self.base_offset + i64::from(start_rel) =>
                {
                    // The last index entry does not point at the batch it names.
                    return self.rebuild(stop_offset, index_interval);
                }
                Step::Batch { header, .. }
                    if stop_offset.is_none_or(|s| header.base_offset < s) =>
                {
                    if self
                        .max_timestamp
                        .is_none_or(|(ts, _)| header.max_timestamp > ts)
                    {
                        self.max_timestamp = Some((header.max_timestamp, header.base_offset));
                    }
                    self.size = scan.position();
                    self.end_offset = Some(header.last_offset() + 1);
                }
                _ => break,
            }
        }
        if self.end_offset.is_none() {
            // The index points past every batch we could read: do not trust it.
            return self.rebuild(stop_offset, index_interval);
        }
        self.bounded = true;
        self.synced = self.size;
        Ok(())
    }

    /// Seals the segment (final time-index entry) and writes both index files to their temp
    /// names in `dir` (fsynced, not renamed), for the caller to rename into place: a roll renames
    /// them with the new segment's creation under one directory fsync; the cleaner renames them
    /// under the partition lock, after the log, having written them before it took the lock.
    /// Index files are hints (verified on use, rebuilt if inconsistent), but the rename keeps
    /// them whole so a mapped file never changes under a reader. Returns (temp, final) names.
    pub(crate) fn stage_index_files(&mut self, dir: &dyn Dir) -> Result<Vec<(String, String)>> {
        let mut staged = Vec::new();
        for (kind, bytes) in self.sealed_indexes() {
            let name = segment_file_name(self.epoch, self.base_offset, kind)?;
            match kaas_shared::atomic_file::stage_in(dir, &name, &bytes) {
                Ok(temp) => staged.push((temp, name)),
                Err(e) => {
                    for (temp, _) in &staged {
                        let _ = dir.remove_file(temp);
                    }
                    return Err(e.into());
                }
            }
        }
        Ok(staged)
    }

    /// The final time-index entry, then both indexes' bytes.
    fn sealed_indexes(&mut self) -> [(SegmentFileKind, bytes::Bytes); 2] {
        if let Some((ts, offset)) = self.max_timestamp {
            let rel = u32::try_from(offset - self.base_offset).unwrap_or(u32::MAX);
            self.time_index
                .get_or_insert_with(TimeIndex::new)
                .maybe_append(ts, rel);
        }
        let index = self.index.get_or_insert_with(OffsetIndex::new).freeze();
        let time_index = self.time_index.get_or_insert_with(TimeIndex::new).freeze();
        [(SegmentFileKind::Index, index), (SegmentFileKind::TimeIndex, time_index)]
    }

    /// Unlinks the segment's files, indexes first so a crash halfway leaves a log without
    /// index (rebuilt on use) rather than an index without log. Missing files are fine
    /// (idempotent, re-driven by the next housekeeping).
    pub(crate) fn unlink(&mut self, fs: &dyn Fs, dir: &Path) -> Result<()> {
        self.unlink_by(dir, |name| fs.remove_file(&dir.join(name)))
    }

    /// [`Segment::unlink`] in a held partition directory.
    pub(crate) fn unlink_in(&mut self, d: &dyn Dir) -> Result<()> {
        self.unlink_by(d.path(), |name| d.remove_file(name))
    }

    fn unlink_by(&mut self, dir: &Path, remove: impl Fn(&str) -> std::io::Result<()>) -> Result<()> {
        self.file = None;
        for kind in SegmentFileKind::ALL {
            let name = segment_file_name(self.epoch, self.base_offset, kind)?;
            match remove(&name) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io("unlink", dir.join(&name), e)),
            }
        }
        Ok(())
    }

    /// Releases the descriptor of a segment nobody used since the last call (the first call
    /// only clears the mark), keeping its indexes and extent so the next read or append just
    /// opens the file again. A broker leading thousands of
    /// partitions would otherwise hold a descriptor for every led partition and every segment
    /// ever read until it stops leading. Never while bytes await their fsync: the group commit
    /// syncs through this descriptor (and a round in flight holds its own clone of it).
    pub(crate) fn release_if_idle(&mut self) {
        if self.file.is_some() && self.synced >= self.size && !std::mem::take(&mut self.used) {
            self.file = None;
        }
    }

    /// Clears the mark of a descriptor opened for a job that is done (a take-over's recovery),
    /// not for a reader or writer, so the next housekeeping round releases it rather than the
    /// one after.
    pub(crate) fn mark_unused(&mut self) {
        self.used = false;
    }

    /// Drops the descriptor and in-memory indexes (relinquish).
    pub(crate) fn close(&mut self) {
        self.file = None;
        self.index = None;
        self.time_index = None;
        self.bounded = false;
    }

    /// Readable bytes for the leader: bounded and fsynced.
    pub(crate) fn readable(&self) -> u64 {
        self.size.min(self.synced)
    }
}

fn read_index(fs: &dyn Fs, path: &Path) -> Result<Option<bytes::Bytes>> {
    let file = match fs.open(path, OpenMode::Read) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io("open", path, e)),
    };
    if let Some(mapped) = crate::mmap::map(&*file).map_err(|e| Error::io("mmap", path, e))? {
        return Ok(Some(mapped));
    }
    Ok(read_optional(fs, path)
        .map_err(|e| Error::io("read", path, e))?
        .map(bytes::Bytes::from))
}
