//! Sequential batch scanning over a segment file through a read buffer: used by recovery (with
//! CRC checks), index rebuilds, producer-state rebuilds and read-position lookups.

use std::io;

use kaas_shared::fs::File;

use crate::batch::{self, BatchHeader, HEADER_LEN};

/// One step of a scan.
#[derive(Debug)]
pub(crate) enum Step {
    /// A batch starting at `pos`.
    Batch { pos: u64, header: BatchHeader },
    /// The scan reached its limit exactly on a batch boundary.
    End,
    /// The bytes at `pos` are not a valid batch (torn or scribbled).
    Invalid { pos: u64, reason: String },
}

/// Scans batches from a start position up to a limit.
#[derive(Debug)]
pub(crate) struct Scanner<'a> {
    file: &'a dyn File,
    pos: u64,
    limit: u64,
    verify: bool,
    chunk: usize,
    buf: Vec<u8>,
    buf_pos: u64,
}

/// Read size for whole-segment scans.
pub(crate) const BIG_CHUNK: usize = 1 << 20;
/// Read size for short hops from an index entry.
pub(crate) const SMALL_CHUNK: usize = 16 << 10;

impl<'a> Scanner<'a> {
    /// Scans `[start, limit)`. With `verify`, each batch is read whole and its CRC and record
    /// count checked.
    pub(crate) fn new(
        file: &'a dyn File,
        start: u64,
        limit: u64,
        verify: bool,
        chunk: usize,
    ) -> Self {
        Scanner {
            file,
            pos: start,
            limit,
            verify,
            chunk,
            buf: Vec::new(),
            buf_pos: start,
        }
    }

    /// Where the next batch would start.
    pub(crate) fn position(&self) -> u64 {
        self.pos
    }

    /// Makes `[pos, pos + need)` available in the buffer; `false` if it crosses the limit.
    fn ensure(&mut self, need: usize) -> io::Result<bool> {
        let end = self.pos + need as u64;
        if end > self.limit {
            return Ok(false);
        }
        if self.pos >= self.buf_pos && end <= self.buf_pos + self.buf.len() as u64 {
            return Ok(true);
        }
        let want = need.max(self.chunk) as u64;
        let len = want.min(self.limit - self.pos) as usize;
        self.buf.resize(len, 0);
        self.buf_pos = self.pos;
        self.file.read_exact_at(&mut self.buf, self.pos)?;
        Ok(true)
    }

    fn window(&self, len: usize) -> &[u8] {
        let at = (self.pos - self.buf_pos) as usize;
        &self.buf[at..at + len]
    }

    /// The next batch, the clean end, or the first invalid position.
    pub(crate) fn next_step(&mut self) -> io::Result<Step> {
        let pos = self.pos;
        if pos == self.limit {
            return Ok(Step::End);
        }
        let invalid = |reason: String| Ok(Step::Invalid { pos, reason });
        if !self.ensure(HEADER_LEN)? {
            return invalid(format!(
                "{} trailing bytes are not a whole batch header",
                self.limit - pos
            ));
        }
        let header = match batch::parse_header(self.window(HEADER_LEN)) {
            Ok(h) => h,
            Err(e) => return invalid(e.to_string()),
        };
        if pos + header.size as u64 > self.limit {
            return invalid(format!("batch of {} bytes runs past the end", header.size));
        }
        if self.verify {
            self.ensure(header.size)?;
            let whole = self.window(header.size);
            if let Err(e) = batch::verify_crc(&header, whole) {
                return invalid(e.to_string());
            }
            if header.record_count <= 0 || header.last_offset_delta != header.record_count - 1 {
                return invalid("record count disagrees with lastOffsetDelta".into());
            }
        }
        self.pos += header.size as u64;
        Ok(Step::Batch { pos, header })
    }
}
