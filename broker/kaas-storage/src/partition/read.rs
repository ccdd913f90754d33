//! Reads: whole batches by offset (up to the high watermark), lookups by timestamp, and
//! leader-epoch end offsets.

use std::sync::Arc;

use bytes::Bytes;
use kaas_shared::fs::File;

use super::takeover::relative;
use super::{Partition, State};
use crate::batch::{self, BatchHeader};
use crate::{buffers, piped};
use crate::scan::{SMALL_CHUNK, Scanner, Step};
use crate::txn_index::AbortedTxn;
use crate::{Error, Result};

/// The result of a read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadOutcome {
    /// Whole record batches, as stored.
    pub records: Bytes,
    /// High watermark at the time of the read.
    pub high_watermark: i64,
    /// Log start offset at the time of the read.
    pub log_start_offset: i64,
    /// Last stable offset: the first offset of the earliest open transaction, or the high
    /// watermark.
    pub last_stable_offset: i64,
    /// read_committed only: the aborted transactions overlapping the returned batches.
    pub aborted_transactions: Vec<AbortedTxn>,
}

/// How much one read may return.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadBound {
    /// Bytes of whole batches to return at most.
    pub max_bytes: usize,
    /// KIP-74: return the first batch even if it alone is larger than `max_bytes`, so a
    /// consumer always makes progress (Kafka does so for the first partition with data in a
    /// fetch). Still at most the larger of `max_bytes` and the topic's `max.message.bytes`: a
    /// bigger batch (a corrupt length, or a topic whose limit was lowered below its data) is
    /// refused with [`Error::RecordTooLarge`] rather than loaded whatever its size.
    pub first_batch_whole: bool,
    /// Hand record sets of [`piped::MIN_PIPED`] bytes or more over in pipes rather than copied
    /// (see [`crate::piped`]): `records` is then a stand-in whose bytes are not the records,
    /// for a caller that passes them to the socket untouched. Copied where splicing is not
    /// possible.
    pub piped: bool,
}

/// Where in one segment a read looks, captured under the lock and executed outside it.
#[derive(Debug)]
struct Window {
    file: Arc<dyn File>,
    /// The segment's base offset (which segment this is, once the lock is let go).
    base_offset: i64,
    /// A position at or before the wanted batch (from the sparse index; 0 if none).
    hint: u64,
    /// The offset the hint was looked up for: the batch at the hint must not start after it.
    anchor: i64,
    /// Readable bytes (bounded and fsynced).
    limit: u64,
}

impl Window {
    /// The first batch (position, header) whose last offset is `>= offset` and that satisfies
    /// `accept`, scanning from the hint (or from 0 if the hint turns out wrong).
    fn find(
        &self,
        offset: i64,
        accept: impl Fn(&BatchHeader) -> bool,
    ) -> Result<Option<(u64, BatchHeader)>> {
        let mut start = self.hint;
        loop {
            let mut scan = Scanner::new(&*self.file, start, self.limit, false, SMALL_CHUNK);
            let mut first = true;
            loop {
                match scan
                    .next_step()
                    .map_err(|e| Error::io("read", "segment", e))?
                {
                    Step::Batch { header, .. }
                        if first && start > 0 && header.base_offset > self.anchor =>
                    {
                        break;
                    }
                    Step::Batch { pos, header }
                        if header.last_offset() >= offset && accept(&header) =>
                    {
                        return Ok(Some((pos, header)));
                    }
                    Step::Batch { .. } => first = false,
                    Step::End | Step::Invalid { .. } if first && start > 0 => break,
                    Step::End | Step::Invalid { .. } => return Ok(None),
                }
            }
            start = 0; // The index hint did not hold: scan the segment from its start.
        }
    }

    fn read_at(&self, pos: u64, len: usize) -> Result<Vec<u8>> {
        let mut buf = vec![0u8; len];
        self.file
            .read_exact_at(&mut buf, pos)
            .map_err(|e| Error::io("read", "segment", e))?;
        Ok(buf)
    }
}

impl ReadBound {
    /// At most `max_bytes`, or the first batch whole.
    pub fn whole_first(max_bytes: usize) -> ReadBound {
        ReadBound {
            max_bytes,
            first_batch_whole: true,
            piped: false,
        }
    }
}

impl Partition {
    /// Whole batches from `fetch_offset` up to the high watermark, at most `max_bytes` unless
    /// the first batch alone is larger (then that one batch, as Kafka does, up to
    /// `max.message.bytes`: see [`ReadBound`]). Data comes from one segment per call.
    /// `OffsetOutOfRange` outside `[logStartOffset, highWatermark]`.
    pub fn read(&self, fetch_offset: i64, max_bytes: usize) -> Result<ReadOutcome> {
        self.read_bounded(fetch_offset, ReadBound::whole_first(max_bytes), false)
    }

    /// [`Partition::read`] for a read_committed consumer: batches only below the last stable
    /// offset, plus the aborted transactions overlapping what is returned.
    pub fn read_committed(&self, fetch_offset: i64, max_bytes: usize) -> Result<ReadOutcome> {
        self.read_bounded(fetch_offset, ReadBound::whole_first(max_bytes), true)
    }

    /// [`Partition::read`] (or with `committed`, [`Partition::read_committed`]) within `limit`.
    /// Touches segment files: on a network volume, call it where blocking is fine.
    pub fn read_bounded(
        &self,
        fetch_offset: i64,
        limit: ReadBound,
        committed: bool,
    ) -> Result<ReadOutcome> {
        let max_bytes = limit.max_bytes;
        let mut after_segment = None;
        loop {
            let (window, outcome, bound) = {
                let mut st = self.lock();
                st.require_leader()?;
                let lso = st.last_stable_offset();
                let outcome = ReadOutcome {
                    records: Bytes::new(),
                    high_watermark: st.high_watermark,
                    log_start_offset: st.log_start_offset,
                    last_stable_offset: lso,
                    aborted_transactions: Vec::new(),
                };
                if fetch_offset < st.log_start_offset || fetch_offset > st.high_watermark {
                    return Err(st.out_of_range(fetch_offset));
                }
                let bound = if committed { lso } else { st.high_watermark };
                if fetch_offset >= bound {
                    return Ok(outcome);
                }
                let Some(i) = st.segment_index(fetch_offset, after_segment) else {
                    return Ok(outcome);
                };
                after_segment = Some(st.segments[i].base_offset);
                (self.window(&mut st, i, fetch_offset)?, outcome, bound)
            };
            let Some((pos, first)) = window.find(fetch_offset, |_| true)? else {
                continue;
            };
            if first.base_offset >= bound {
                return Ok(outcome);
            }
            if first.size > max_bytes {
                if !limit.first_batch_whole {
                    return Ok(outcome);
                }
                let allowed = max_bytes.max(self.config().max_message_bytes);
                if first.size > allowed {
                    return Err(Error::RecordTooLarge {
                        size: first.size,
                        max: allowed,
                    });
                }
            }
            let available = usize::try_from(window.limit - pos).unwrap_or(usize::MAX);
            let len = available.min(max_bytes).max(first.size);
            if limit.piped
                && len >= piped::MIN_PIPED
                && let Some((records, next_offset)) = self.read_piped(&window, pos, len, bound)?
            {
                return Ok(ReadOutcome {
                    records,
                    aborted_transactions: self.aborted_if(committed, fetch_offset, next_offset),
                    ..outcome
                });
            }
            // NB: a pooled buffer, not a fresh one: fetches of up to a MiB per partition
            // otherwise fault in (and zero) every page of every read (see `buffers`).
            let mut buf = buffers::pool().take(len);
            if buf.len() < len {
                buf.resize(len, 0);
            }
            window
                .file
                .read_exact_at(&mut buf[..len], pos)
                .map_err(|e| Error::io("read", "segment", e))?;
            let (end, next_offset) = whole_batches_below(&buf[..len], bound);
            return Ok(ReadOutcome {
                records: buffers::freeze(buf, end),
                aborted_transactions: self.aborted_if(committed, fetch_offset, next_offset),
                ..outcome
            });
        }
    }

    /// read_committed: the aborted transactions overlapping `[from, to)`.
    fn aborted_if(&self, committed: bool, from: i64, to: i64) -> Vec<AbortedTxn> {
        match committed {
            true => self.lock().producers.txns.aborted_between(from, to),
            false => Vec::new(),
        }
    }

    /// The whole batches below `bound` in `[pos, pos + len)` of the window, spliced into pipes
    /// (see [`crate::piped`]), and the offset after the last. Finds where the batches end from
    /// their headers alone: from the last offset-index entry in the range (verified against the
    /// header found there), a header read per batch after it. `None` when the file cannot be
    /// spliced or the pipes are at their bound: the caller copies.
    fn read_piped(&self, window: &Window, pos: u64, len: usize, bound: i64) -> Result<Option<(Bytes, i64)>> {
        let Some(file) = window.file.as_std() else {
            return Ok(None);
        };
        let stop = pos + len as u64;
        let skip_to = {
            let st = self.lock();
            st.segments
                .binary_search_by_key(&window.base_offset, |s| s.base_offset)
                .ok()
                .and_then(|i| st.segments[i].index.as_ref())
                .and_then(|ix| ix.last_within(relative(window.base_offset, bound), pos, stop))
        };
        let read = |e| Error::io("read", "segment", e);
        let mut found = skip_to
            .map(|(rel, at)| headers_below(window, u64::from(at), stop, bound, Some(window.base_offset + i64::from(rel))))
            .transpose()
            .map_err(read)?
            .flatten();
        if found.is_none() {
            found = headers_below(window, pos, stop, bound, None).map_err(read)?;
        }
        // NB: the whole batches may be fewer bytes than the read was given; a set below
        // MIN_PIPED (none at all included) is copied like any small one, since the encoder
        // copies small record sets into the response, and a stand-in copied there would be sent
        // as its zeros.
        let Some((len, next_offset)) = found
            .map(|(end, next)| (usize::try_from(end.saturating_sub(pos)).unwrap_or(usize::MAX), next))
            .filter(|&(len, _)| len >= piped::MIN_PIPED)
        else {
            return Ok(None);
        };
        let Some(piped) = piped::Piped::fill(file, pos, len) else {
            return Ok(None);
        };
        Ok(piped.into_stand_in().ok().map(|records| (records, next_offset)))
    }

    /// The (offset, timestamp) of the first record with a timestamp `>= target`, below the
    /// high watermark, using the time index. Compressed batches are not decoded: their first
    /// offset is returned.
    pub fn offset_for_timestamp(&self, target: i64) -> Result<Option<(i64, i64)>> {
        let count = {
            let st = self.lock();
            st.require_leader()?;
            st.segments.len()
        };
        for i in 0..count {
            let (window, log_start) = {
                let mut st = self.lock();
                st.require_leader()?;
                if i >= st.segments.len() {
                    break;
                }
                self.load(&mut st, i)?;
                let seg = &st.segments[i];
                if seg.max_timestamp.is_none_or(|(ts, _)| ts < target) {
                    continue;
                }
                let from = seg
                    .time_index
                    .as_ref()
                    .and_then(|t| t.lookup_before(target));
                let from_offset =
                    from.map_or(seg.base_offset, |(_, rel)| seg.base_offset + i64::from(rel));
                (self.window(&mut st, i, from_offset)?, st.log_start_offset)
            };
            if let Some(found) = find_timestamp(&window, log_start, target)? {
                return Ok(Some(found));
            }
        }
        Ok(None)
    }

    /// The timestamp of the first batch holding an offset at or after `offset` (from `max(offset,
    /// log start)`) below the high watermark: its first record's, or with LogAppendTime the
    /// batch's. Batch headers only, nothing decoded. `None` when nothing is there. How old the
    /// oldest record a consumer has not yet committed is (lag in time).
    pub fn first_timestamp_from(&self, offset: i64) -> Result<Option<i64>> {
        let mut after_segment = None;
        loop {
            let window = {
                let mut st = self.lock();
                st.require_leader()?;
                let offset = offset.max(st.log_start_offset);
                if offset >= st.high_watermark {
                    return Ok(None);
                }
                let Some(i) = st.segment_index(offset, after_segment) else {
                    return Ok(None);
                };
                after_segment = Some(st.segments[i].base_offset);
                self.window(&mut st, i, offset)?
            };
            // A segment whose readable part ends before `offset` (a cleaned tail): the next one.
            if let Some((_, header)) = window.find(offset, |_| true)? {
                return Ok(Some(if header.is_log_append_time() {
                    header.max_timestamp
                } else {
                    header.base_timestamp
                }));
            }
        }
    }

    /// ListOffsets MAX_TIMESTAMP: the (offset, timestamp) of the record with the largest
    /// timestamp, `None` for an empty log.
    pub fn max_timestamp(&self) -> Result<Option<(i64, i64)>> {
        let mut best: Option<(i64, i64)> = None;
        {
            let mut st = self.lock();
            st.require_leader()?;
            for i in 0..st.segments.len() {
                self.load(&mut st, i)?;
                if let Some((ts, offset)) = st.segments[i].max_timestamp
                    && best.is_none_or(|(b, _)| ts > b)
                    && offset >= st.log_start_offset
                {
                    best = Some((ts, offset));
                }
            }
        }
        let Some((ts, offset)) = best else {
            return Ok(None);
        };
        // Refine the batch-level answer to the record inside the batch.
        let refined = self.offset_for_timestamp(ts)?;
        Ok(Some(refined.map_or((offset, ts), |(o, t)| (o, t))))
    }

    /// OffsetForLeaderEpoch, from the epochs in segment names: `(epoch, end offset)` where the
    /// epoch is the largest known epoch `<= requested` and the end offset is the start of the
    /// next epoch (the log end offset for the current one); `(-1, -1)` for an epoch newer than
    /// the current one.
    pub fn end_offset_for_epoch(&self, requested: i32) -> Result<(i32, i64)> {
        let st = self.lock();
        st.require_leader()?;
        if requested == st.leader_epoch {
            return Ok((requested, st.log_end_offset));
        }
        let next_start = st
            .segments
            .iter()
            .find(|s| s.epoch > requested)
            .map(|s| s.base_offset);
        let Some(next_start) = next_start else {
            return Ok((-1, -1));
        };
        let floor = st
            .segments
            .iter()
            .rev()
            .find(|s| s.epoch <= requested)
            .map(|s| s.epoch);
        Ok((floor.unwrap_or(requested), next_start))
    }

    /// Loads segment `i` (descriptor, indexes, extent) if it is not yet.
    fn load(&self, st: &mut State, i: usize) -> Result<()> {
        let interval = self.config().index_interval_bytes;
        st.ensure_loaded(&self.shared, i, interval)
    }

    fn window(&self, st: &mut State, i: usize, offset: i64) -> Result<Window> {
        self.load(st, i)?;
        let seg = &st.segments[i];
        let hint = seg
            .index
            .as_ref()
            .and_then(|ix| ix.lookup(relative(seg.base_offset, offset)));
        let hint = match hint {
            Some((_, pos)) if offset > seg.base_offset => u64::from(pos),
            _ => 0,
        };
        let file = seg.file.clone().ok_or(Error::NotLeader)?;
        Ok(Window {
            file,
            base_offset: seg.base_offset,
            hint: hint.min(seg.readable()),
            anchor: offset,
            limit: seg.readable(),
        })
    }
}

fn find_timestamp(window: &Window, log_start: i64, target: i64) -> Result<Option<(i64, i64)>> {
    // NB: a batch the cleaner emptied (kept only for its producer's sequence) keeps its
    // maxTimestamp but has no record to point at.
    let Some((pos, header)) = window.find(log_start, |h| h.max_timestamp >= target && h.record_count > 0)? else {
        return Ok(None);
    };
    let batch = window.read_at(pos, header.size)?;
    Ok(batch::first_record_at_or_after(&header, &batch, target)
        .map(|(o, ts)| (o.max(log_start), ts)))
}

/// Batch headers a piped read reads at most to find where its whole batches end (one small
/// read each; from the last offset-index entry in range there are a few dozen at most with
/// the default `index.interval.bytes`).
const MAX_HEADER_HOPS: usize = 256;

/// Scans batch headers from `start` (a batch boundary in the window) while whole batches end by `stop` and
/// start below `bound`: the position after the last and the offset after it. With `expect`,
/// the batch at `start` must begin at that offset (an index entry is a hint) or `None` is
/// returned, and it is the offset after the batches before `start`. `None` too after
/// [`MAX_HEADER_HOPS`] batches: so many small batches are cheaper to copy than to hop over.
fn headers_below(window: &Window, start: u64, stop: u64, bound: i64, expect: Option<i64>) -> std::io::Result<Option<(u64, i64)>> {
    // NB: scanned up to the window's end, not `stop`: the batch that crosses `stop` is read
    // too (its header tells that it does, and at an index entry whether the entry holds).
    let mut scan = Scanner::new(&*window.file, start, window.limit, false, batch::HEADER_LEN);
    let (mut end, mut next) = (start, expect.unwrap_or(i64::MIN));
    let mut first = true;
    let mut hops = 0;
    while let Step::Batch { pos, header } = scan.next_step()? {
        if first && expect.is_some_and(|o| o != header.base_offset) {
            return Ok(None);
        }
        first = false;
        hops += 1;
        if hops > MAX_HEADER_HOPS {
            return Ok(None);
        }
        if header.base_offset >= bound || pos + header.size as u64 > stop {
            break;
        }
        end = pos + header.size as u64;
        next = header.last_offset() + 1;
    }
    if expect.is_some() && first {
        return Ok(None);
    }
    Ok(Some((end, next)))
}

/// The length of the prefix of `buf` made of whole batches that start below `bound`, and the
/// offset after its last batch.
fn whole_batches_below(buf: &[u8], bound: i64) -> (usize, i64) {
    let (mut end, mut next) = (0, i64::MIN);
    while let Some((base, size, delta)) = batch::peek_offsets(&buf[end..]) {
        if end + size > buf.len() || base >= bound {
            break;
        }
        end += size;
        next = base + i64::from(delta) + 1;
    }
    (end, next)
}

impl State {
    /// The segment holding `offset`: the last one with base `<= offset`, or the first after
    /// `after` (when the previous one had nothing at or past `offset`).
    fn segment_index(&self, offset: i64, after: Option<i64>) -> Option<usize> {
        match after {
            None => self
                .segments
                .partition_point(|s| s.base_offset <= offset)
                .checked_sub(1)
                .or(Some(0)),
            Some(base) => Some(self.segments.partition_point(|s| s.base_offset <= base)),
        }
        .filter(|&i| i < self.segments.len())
    }

    pub(super) fn out_of_range(&self, offset: i64) -> Error {
        Error::OffsetOutOfRange {
            offset,
            log_start_offset: self.log_start_offset,
            high_watermark: self.high_watermark,
        }
    }
}
