//! Decompressing a produced batch's records, for the record walk only: batches are stored as
//! the producer compressed them.
//!
//! The output is streamed through a small buffer, never held whole, and counted: a batch that
//! inflates past a limit is refused as soon as it crosses it. kafka-protocol's decompressors
//! cannot be used for this: each inflates the whole payload into one buffer with no limit, so
//! a megabyte of zeros compressed to a kilobyte would cost a gigabyte of memory.

use std::io::{self, Read};

use crate::error::RecordError;

use super::records::Source;

/// A record batch's compression codec (attribute bits 0 to 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    /// Stored as is.
    None,
    /// gzip (RFC 1952), one or more members.
    Gzip,
    /// Snappy: raw, or in snappy-java's ("xerial") block framing.
    Snappy,
    /// The LZ4 frame format.
    Lz4,
    /// Zstandard frames.
    Zstd,
}

impl Codec {
    /// The codec of a batch's attributes.
    pub(crate) fn of(attributes: i16) -> Result<Codec, RecordError> {
        match attributes & 0x07 {
            0 => Ok(Codec::None),
            1 => Ok(Codec::Gzip),
            2 => Ok(Codec::Snappy),
            3 => Ok(Codec::Lz4),
            4 => Ok(Codec::Zstd),
            other => Err(RecordError::UnknownCodec(other)),
        }
    }
}

impl std::fmt::Display for Codec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Codec::None => "uncompressed",
            Codec::Gzip => "gzip",
            Codec::Snappy => "snappy",
            Codec::Lz4 => "lz4",
            Codec::Zstd => "zstd",
        })
    }
}

/// The largest zstd window a frame may ask for, as a power of two: zstd's own default limit,
/// which is also what Kafka's and librdkafka's decoders accept (a producer at level 22 uses
/// it). NB: the window is allocated up front but only touched as output is written, so what
/// a hostile frame really costs is bounded by the output limit.
const ZSTD_WINDOW_LOG_MAX: u32 = 27;

/// Output buffer of a decompressing walk.
const BUFFER_LEN: usize = 16 * 1024;

/// The decompressed records of one batch as a [`Source`], failing once more than `max` bytes
/// come out.
pub(super) struct Inflating<'a> {
    codec: Codec,
    reader: Box<dyn Read + 'a>,
    buf: Box<[u8]>,
    pos: usize,
    end: usize,
    produced: u64,
    max: usize,
}

impl std::fmt::Debug for Inflating<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inflating")
            .field("codec", &self.codec)
            .field("produced", &self.produced)
            .field("max", &self.max)
            .finish_non_exhaustive()
    }
}

impl<'a> Inflating<'a> {
    /// Starts decompressing `payload` (the bytes after the batch header). `codec` is not
    /// [`Codec::None`].
    pub(super) fn new(codec: Codec, payload: &'a [u8], max: usize) -> Result<Self, RecordError> {
        let failed = |e: io::Error| RecordError::Decompression {
            codec,
            reason: e.to_string(),
        };
        let reader: Box<dyn Read + 'a> = match codec {
            // No codec: the caller walks the batch itself; an empty reader keeps this total.
            Codec::None => Box::new(io::empty()),
            // Java's GZIPInputStream reads concatenated members too.
            Codec::Gzip => Box::new(flate2::bufread::MultiGzDecoder::new(payload)),
            Codec::Snappy => Box::new(SnappyBlocks::new(payload, max)),
            Codec::Lz4 => Box::new(lz4::Decoder::new(payload).map_err(failed)?),
            Codec::Zstd => {
                let mut decoder =
                    zstd::stream::read::Decoder::with_buffer(payload).map_err(failed)?;
                decoder
                    .window_log_max(ZSTD_WINDOW_LOG_MAX)
                    .map_err(failed)?;
                Box::new(decoder)
            }
        };
        Ok(Inflating {
            codec,
            reader,
            buf: vec![0; BUFFER_LEN].into_boxed_slice(),
            pos: 0,
            end: 0,
            produced: 0,
            max,
        })
    }

    /// Refills the buffer; `false` at the end of the output.
    fn fill(&mut self) -> Result<bool, RecordError> {
        let n = loop {
            match self.reader.read(&mut self.buf) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.get_ref().is_some_and(|inner| inner.is::<OverLimit>()) => {
                    return Err(self.too_large());
                }
                Err(e) => {
                    return Err(RecordError::Decompression {
                        codec: self.codec,
                        reason: e.to_string(),
                    });
                }
            }
        };
        self.produced += n as u64;
        if self.produced > self.max as u64 {
            return Err(self.too_large());
        }
        (self.pos, self.end) = (0, n);
        Ok(n > 0)
    }

    fn too_large(&self) -> RecordError {
        RecordError::TooLargeDecompressed {
            codec: self.codec,
            max: self.max,
        }
    }
}

impl Source for Inflating<'_> {
    fn next_byte(&mut self) -> Result<Option<u8>, RecordError> {
        if self.pos == self.end && !self.fill()? {
            return Ok(None);
        }
        let b = self.buf[self.pos];
        self.pos += 1;
        Ok(Some(b))
    }

    fn skip(&mut self, mut n: u64) -> Result<bool, RecordError> {
        loop {
            let available = (self.end - self.pos) as u64;
            if n <= available {
                self.pos += n as usize;
                return Ok(true);
            }
            n -= available;
            self.pos = self.end;
            if !self.fill()? {
                return Ok(false);
            }
        }
    }

    fn at_end(&mut self) -> Result<bool, RecordError> {
        Ok(self.pos == self.end && !self.fill()?)
    }
}

/// Raised inside [`SnappyBlocks`] when a block declares more output than the limit allows,
/// before anything is allocated for it.
#[derive(Debug)]
struct OverLimit;

impl std::fmt::Display for OverLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("snappy block larger than the decompression limit")
    }
}

impl std::error::Error for OverLimit {}

/// snappy-java's stream header: magic, then version and compatible version (both 1).
const XERIAL_MAGIC: &[u8; 8] = b"\x82SNAPPY\x00";
const XERIAL_HEADER_LEN: usize = 16;
/// No valid raw snappy block inflates more than this many times.
const SNAPPY_MAX_RATIO: usize = 22;

/// Snappy as Kafka clients write it: snappy-java's framing (a 16-byte header, then blocks of
/// `[compressed length: u32 BE][raw snappy block]`), or without the header one raw snappy
/// block (librdkafka writes that, and Kafka's reader accepts both). A raw block can only be
/// decompressed whole, so each block is held in memory: its declared length is checked
/// against the limit before anything is allocated.
struct SnappyBlocks<'a> {
    input: &'a [u8],
    framed: bool,
    block: Vec<u8>,
    pos: usize,
    /// Output bytes still allowed.
    budget: usize,
}

impl<'a> SnappyBlocks<'a> {
    fn new(payload: &'a [u8], max: usize) -> Self {
        let framed = payload.len() >= XERIAL_HEADER_LEN && payload.starts_with(XERIAL_MAGIC);
        SnappyBlocks {
            input: if framed {
                &payload[XERIAL_HEADER_LEN..]
            } else {
                payload
            },
            framed,
            block: Vec::new(),
            pos: 0,
            budget: max,
        }
    }

    /// The next compressed block, `None` at the end of the input.
    fn next_compressed(&mut self) -> io::Result<Option<&'a [u8]>> {
        if self.input.is_empty() {
            return Ok(None);
        }
        if !self.framed {
            return Ok(Some(std::mem::take(&mut self.input)));
        }
        let truncated = || io::Error::new(io::ErrorKind::InvalidData, "truncated snappy block");
        let (len, rest) = self.input.split_first_chunk::<4>().ok_or_else(truncated)?;
        let len = u32::from_be_bytes(*len) as usize;
        let block = rest.get(..len).ok_or_else(truncated)?;
        self.input = &rest[len..];
        Ok(Some(block))
    }
}

impl Read for SnappyBlocks<'_> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        while self.pos == self.block.len() {
            let Some(compressed) = self.next_compressed()? else {
                return Ok(0);
            };
            let invalid = |e: snap::Error| io::Error::new(io::ErrorKind::InvalidData, e);
            let len = snap::raw::decompress_len(compressed).map_err(invalid)?;
            // NB: snappy's densest element (a 3-byte copy of 64 bytes) inflates 21.3 times, so
            // a block claiming more is lying; refusing it here spares zeroing the claim.
            if len > compressed.len().saturating_mul(SNAPPY_MAX_RATIO) {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "snappy block claims more than it can encode",
                ));
            }
            if len > self.budget {
                return Err(io::Error::other(OverLimit));
            }
            self.budget -= len;
            self.block.resize(len, 0);
            let n = snap::raw::Decoder::new()
                .decompress(compressed, &mut self.block)
                .map_err(invalid)?;
            self.block.truncate(n);
            self.pos = 0;
        }
        let n = out.len().min(self.block.len() - self.pos);
        out[..n].copy_from_slice(&self.block[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

/// Compresses `raw` records with `codec` as a producer would (snappy in snappy-java's
/// framing, which every client reads): the cleaner re-compresses a rewritten batch with the
/// codec it was produced with, as Kafka's cleaner does.
pub(crate) fn compress(codec: Codec, raw: &[u8]) -> io::Result<Vec<u8>> {
    use std::io::Write;
    Ok(match codec {
        Codec::None => raw.to_vec(),
        Codec::Gzip => {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            e.write_all(raw)?;
            e.finish()?
        }
        Codec::Snappy => {
            let mut out = b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01".to_vec();
            for block in raw.chunks(32 * 1024) {
                let compressed = snap::raw::Encoder::new().compress_vec(block).map_err(io::Error::other)?;
                let len = u32::try_from(compressed.len()).map_err(io::Error::other)?;
                out.extend_from_slice(&len.to_be_bytes());
                out.extend_from_slice(&compressed);
            }
            out
        }
        Codec::Lz4 => {
            let mut e = lz4::EncoderBuilder::new().build(Vec::new())?;
            e.write_all(raw)?;
            let (out, result) = e.finish();
            result?;
            out
        }
        Codec::Zstd => zstd::encode_all(raw, 3)?,
    })
}

/// Inflates a whole stored batch's records (at most `max` bytes), for the cleaner, which
/// filters them one by one.
pub(crate) fn decompress(codec: Codec, payload: &[u8], max: usize) -> Result<Vec<u8>, RecordError> {
    let mut inflating = Inflating::new(codec, payload, max)?;
    let mut out = Vec::new();
    while inflating.fill()? {
        out.extend_from_slice(&inflating.buf[..inflating.end]);
    }
    Ok(out)
}
