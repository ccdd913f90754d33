//! Sparse per-segment indexes, in Kafka's entry formats (big-endian):
//! offset index `(relativeOffset u32, position u32)`, time index `(timestamp i64,
//! relativeOffset u32)`. Built in memory for the active segment, written to `.index` /
//! `.timeindex` when the segment is sealed, memory-mapped when read back. Indexes are hints:
//! every lookup is verified against the log, and an inconsistent file is rebuilt.

use bytes::Bytes;

#[derive(Debug, Clone)]
enum Storage {
    Growable(Vec<u8>),
    Frozen(Bytes),
}

/// Fixed-width entries in a byte buffer.
#[derive(Debug, Clone)]
struct Entries<const W: usize> {
    data: Storage,
}

impl<const W: usize> Entries<W> {
    fn new() -> Self {
        Entries {
            data: Storage::Growable(Vec::new()),
        }
    }

    fn bytes(&self) -> &[u8] {
        match &self.data {
            Storage::Growable(v) => v,
            Storage::Frozen(b) => b,
        }
    }

    fn len(&self) -> usize {
        self.bytes().len() / W
    }

    /// Wraps a file's bytes if they are whole entries and every entry is `ok` after the
    /// previous one.
    fn load<T: Copy>(
        bytes: Bytes,
        decode: impl Fn(&[u8]) -> T,
        ok: impl Fn(Option<T>, T) -> bool,
    ) -> Option<Self> {
        if !bytes.len().is_multiple_of(W) {
            return None;
        }
        let entries = Entries {
            data: Storage::Frozen(bytes),
        };
        let mut prev = None;
        for i in 0..entries.len() {
            let e = decode(entries.entry(i));
            if !ok(prev, e) {
                return None;
            }
            prev = Some(e);
        }
        Some(entries)
    }

    fn entry(&self, i: usize) -> &[u8] {
        &self.bytes()[i * W..(i + 1) * W]
    }

    fn push(&mut self, e: &[u8; W]) {
        if let Storage::Frozen(b) = &self.data {
            self.data = Storage::Growable(b.to_vec());
        }
        if let Storage::Growable(v) = &mut self.data {
            v.extend_from_slice(e);
        }
    }

    /// Number of leading entries for which `pred` holds (entries are sorted by it).
    fn partition_point(&self, pred: impl Fn(&[u8]) -> bool) -> usize {
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if pred(self.entry(mid)) {
                lo = mid + 1
            } else {
                hi = mid
            }
        }
        lo
    }

    fn freeze(&mut self) -> Bytes {
        let bytes = match std::mem::replace(&mut self.data, Storage::Frozen(Bytes::new())) {
            Storage::Growable(v) => Bytes::from(v),
            Storage::Frozen(b) => b,
        };
        self.data = Storage::Frozen(bytes.clone());
        bytes
    }
}

fn u32_at(e: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([e[at], e[at + 1], e[at + 2], e[at + 3]])
}

fn i64_at(e: &[u8], at: usize) -> i64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&e[at..at + 8]);
    i64::from_be_bytes(a)
}

/// Sparse offset index: relative offset → byte position of the batch starting there.
#[derive(Debug, Clone)]
pub(crate) struct OffsetIndex(Entries<8>);

impl OffsetIndex {
    pub(crate) fn new() -> Self {
        OffsetIndex(Entries::new())
    }

    /// Loads a file's bytes, or `None` if they are not a consistent index for a segment of
    /// `segment_len` bytes: offsets and positions strictly increasing, positions inside it.
    pub(crate) fn load(bytes: Bytes, segment_len: u64) -> Option<Self> {
        Entries::load(
            bytes,
            |e| (u32_at(e, 0), u32_at(e, 4)),
            |prev, e| u64::from(e.1) < segment_len && prev.is_none_or(|p| e.0 > p.0 && e.1 > p.1),
        )
        .map(OffsetIndex)
    }

    fn get(&self, i: usize) -> (u32, u32) {
        let e = self.0.entry(i);
        (u32_at(e, 0), u32_at(e, 4))
    }

    pub(crate) fn append(&mut self, relative_offset: u32, position: u32) {
        let mut e = [0u8; 8];
        e[..4].copy_from_slice(&relative_offset.to_be_bytes());
        e[4..].copy_from_slice(&position.to_be_bytes());
        self.0.push(&e);
    }

    /// The last entry whose relative offset is `<= target`.
    pub(crate) fn lookup(&self, target: u32) -> Option<(u32, u32)> {
        let n = self.0.partition_point(|e| u32_at(e, 0) <= target);
        n.checked_sub(1).map(|i| self.get(i))
    }

    pub(crate) fn last(&self) -> Option<(u32, u32)> {
        self.0.len().checked_sub(1).map(|i| self.get(i))
    }

    /// The last entry with a relative offset below `below` and a position in `(after, upto]`:
    /// where a reader that must find the last whole batch before `upto` can start reading
    /// headers. (Offsets and positions grow together, so both bounds cut the same prefix.)
    pub(crate) fn last_within(&self, below: u32, after: u64, upto: u64) -> Option<(u32, u32)> {
        let by_offset = self.0.partition_point(|e| u32_at(e, 0) < below);
        let by_position = self.0.partition_point(|e| u64::from(u32_at(e, 4)) <= upto);
        let i = by_offset.min(by_position).checked_sub(1)?;
        let entry = self.get(i);
        (u64::from(entry.1) > after).then_some(entry)
    }

    pub(crate) fn freeze(&mut self) -> Bytes {
        self.0.freeze()
    }
}

/// Sparse time index: the largest timestamp seen up to and including the batch at a relative
/// offset. Entries only ever grow in timestamp.
#[derive(Debug, Clone)]
pub(crate) struct TimeIndex(Entries<12>);

impl TimeIndex {
    pub(crate) fn new() -> Self {
        TimeIndex(Entries::new())
    }

    /// Loads a file's bytes, or `None` if they are not a consistent time index: timestamps
    /// strictly and offsets weakly increasing.
    pub(crate) fn load(bytes: Bytes) -> Option<Self> {
        Entries::load(
            bytes,
            |e| (i64_at(e, 0), u32_at(e, 8)),
            |prev, e| prev.is_none_or(|p| e.0 > p.0 && e.1 >= p.1),
        )
        .map(TimeIndex)
    }

    fn get(&self, i: usize) -> (i64, u32) {
        let e = self.0.entry(i);
        (i64_at(e, 0), u32_at(e, 8))
    }

    /// Appends `(timestamp, relative offset)` if the timestamp is newer than the last entry.
    pub(crate) fn maybe_append(&mut self, timestamp: i64, relative_offset: u32) {
        if self.last().is_some_and(|(ts, _)| ts >= timestamp) {
            return;
        }
        let mut e = [0u8; 12];
        e[..8].copy_from_slice(&timestamp.to_be_bytes());
        e[8..].copy_from_slice(&relative_offset.to_be_bytes());
        self.0.push(&e);
    }

    /// The last entry whose timestamp is `< target`: every record up to and including that
    /// entry's batch is older than `target`, so a search may start at that batch.
    pub(crate) fn lookup_before(&self, target: i64) -> Option<(i64, u32)> {
        let n = self.0.partition_point(|e| i64_at(e, 0) < target);
        n.checked_sub(1).map(|i| self.get(i))
    }

    pub(crate) fn last(&self) -> Option<(i64, u32)> {
        self.0.len().checked_sub(1).map(|i| self.get(i))
    }

    pub(crate) fn freeze(&mut self) -> Bytes {
        self.0.freeze()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn offset_index_lookup_and_consistency() {
        let mut idx = OffsetIndex::new();
        assert_eq!(idx.lookup(5), None);
        idx.append(0, 0);
        idx.append(10, 4096);
        idx.append(20, 8192);
        assert_eq!(idx.lookup(9), Some((0, 0)));
        assert_eq!(idx.lookup(10), Some((10, 4096)));
        assert_eq!(idx.lookup(1000), Some((20, 8192)));
        let bytes = idx.freeze();
        assert!(OffsetIndex::load(bytes.clone(), 9000).is_some());
        assert!(
            OffsetIndex::load(bytes.clone(), 8192).is_none(),
            "position past the end"
        );
        assert!(
            OffsetIndex::load(bytes.slice(..7), 9000).is_none(),
            "torn entry"
        );
        let mut swapped = bytes.to_vec();
        swapped.swap(3, 11);
        assert!(
            OffsetIndex::load(Bytes::from(swapped), 9000).is_none(),
            "not increasing"
        );
        idx.append(30, 9000);
        assert_eq!(idx.last(), Some((30, 9000)));
    }

    #[test]
    fn time_index_keeps_only_newer_timestamps() {
        let mut idx = TimeIndex::new();
        idx.maybe_append(100, 0);
        idx.maybe_append(90, 5);
        idx.maybe_append(200, 10);
        assert_eq!(idx.last(), Some((200, 10)));
        assert_eq!(idx.lookup_before(100), None);
        assert_eq!(idx.lookup_before(150), Some((100, 0)));
        assert_eq!(idx.lookup_before(201), Some((200, 10)));
        assert!(TimeIndex::load(idx.freeze()).is_some());
    }
}
