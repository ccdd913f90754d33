//! Length-prefixed framing and the fixed request-header prefix.
//!
//! The size field is checked against the limit before a byte of the body is allocated. A frame
//! whose whole size fits in the broker-wide [`ReadAhead`] is given it at once and read without
//! a reallocation; any other body buffer grows only as bytes actually arrive (a lying length
//! field costs nothing, a half-sent frame pins about twice what it sent). Once a frame has
//! started it must be complete within the request read timeout, so a client cannot hold a
//! buffer, or the read-ahead, by trickling bytes.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::{Buf, Bytes};
use tokio::io::{AsyncRead, AsyncReadExt};

/// Why a connection's byte stream cannot be read as Kafka frames; the connection is closed.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("frame size {0} is negative")]
    NegativeSize(i32),
    #[error("frame size {size} exceeds the limit of {limit} bytes (socket.request.max.bytes)")]
    TooLarge { size: usize, limit: usize },
    #[error("frame of {0} bytes is too short for a request header")]
    TooShort(usize),
    #[error("connection closed in the middle of a frame")]
    Truncated,
    #[error("frame not complete {0:?} after its first byte (request read timeout)")]
    ReadTimeout(Duration),
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
}

/// The bytes every request starts with, read by hand because the codec's header decoder
/// rejects API keys it does not know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderPrefix {
    pub api_key: i16,
    pub api_version: i16,
    pub correlation_id: i32,
}

impl HeaderPrefix {
    pub const LEN: usize = 8;

    pub fn parse(frame: &[u8]) -> Result<HeaderPrefix, FrameError> {
        if frame.len() < Self::LEN {
            return Err(FrameError::TooShort(frame.len()));
        }
        let mut b = &frame[..Self::LEN];
        Ok(HeaderPrefix { api_key: b.get_i16(), api_version: b.get_i16(), correlation_id: b.get_i32() })
    }
}

/// The body buffer's first reservation: small, because the size field is the client's word.
const FIRST_CHUNK: usize = 16 * 1024;

/// Largest chunk reserved at a time while a frame body arrives.
const GROWTH_CHUNK: usize = 1024 * 1024;

/// How many bytes of frames not yet arrived the broker reserves ahead of them, across all
/// connections: enough for dozens of producers' megabyte requests at once.
pub const READ_AHEAD_BYTES: usize = 32 * 1024 * 1024;

/// Room the frames being read may take before their bytes arrive, shared by every connection.
///
/// A frame grown as it arrives is reallocated (and its bytes copied) about every time its size
/// doubles: a megabyte produce request was copied once more in all on its way in. A frame that
/// takes its whole size from here is allocated once instead. What clients that lie about sizes
/// or trickle bytes can pin this way is bounded by the total (and by the read timeout); once it
/// is taken, frames grow as they arrive again.
#[derive(Debug)]
pub struct ReadAhead {
    free: AtomicUsize,
}

impl ReadAhead {
    pub fn new(bytes: usize) -> ReadAhead {
        ReadAhead { free: AtomicUsize::new(bytes) }
    }

    /// `size` bytes of room, if that much is free, until the grant is dropped.
    fn take(&self, size: usize) -> Option<Grant<'_>> {
        self.free.fetch_update(Ordering::AcqRel, Ordering::Acquire, |free| free.checked_sub(size)).ok()?;
        Some(Grant { ahead: self, size })
    }

    /// Bytes not taken now.
    pub fn free(&self) -> usize {
        self.free.load(Ordering::Acquire)
    }
}

impl Default for ReadAhead {
    fn default() -> ReadAhead {
        ReadAhead::new(READ_AHEAD_BYTES)
    }
}

/// Room taken from a [`ReadAhead`] for one frame; given back on drop.
struct Grant<'a> {
    ahead: &'a ReadAhead,
    size: usize,
}

impl Drop for Grant<'_> {
    fn drop(&mut self) {
        self.ahead.free.fetch_add(self.size, Ordering::AcqRel);
    }
}

/// Reads one frame body. `Ok(None)` is a clean end of stream between frames.
///
/// Waiting for a frame's first byte has no deadline here (that is the connection's idle
/// timeout); from the first byte on, the rest must arrive within `read_timeout`.
pub async fn read_frame<R: AsyncRead + Unpin>(
    reader: &mut R,
    limit: usize,
    read_timeout: Duration,
    ahead: &ReadAhead,
) -> Result<Option<Bytes>, FrameError> {
    let first = match reader.read_u8().await {
        Ok(byte) => byte,
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    match tokio::time::timeout(read_timeout, read_rest(reader, first, limit, ahead)).await {
        Ok(frame) => frame.map(Some),
        Err(_) => Err(FrameError::ReadTimeout(read_timeout)),
    }
}

/// The rest of a frame whose first size byte is `first`.
async fn read_rest<R: AsyncRead + Unpin>(reader: &mut R, first: u8, limit: usize, ahead: &ReadAhead) -> Result<Bytes, FrameError> {
    let mut size_bytes = [first, 0, 0, 0];
    reader.read_exact(&mut size_bytes[1..]).await.map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => FrameError::Truncated,
        _ => FrameError::Io(e),
    })?;
    let size = checked_size(i32::from_be_bytes(size_bytes), limit)?;
    read_body(reader, size, ahead).await
}

fn checked_size(size: i32, limit: usize) -> Result<usize, FrameError> {
    let size = usize::try_from(size).map_err(|_| FrameError::NegativeSize(size))?;
    if size > limit {
        return Err(FrameError::TooLarge { size, limit });
    }
    if size < HeaderPrefix::LEN {
        return Err(FrameError::TooShort(size));
    }
    Ok(size)
}

/// How much more buffer to reserve for a body of `size` bytes of which `arrived` are in:
/// at most as much again as arrived (so the buffer stays within about twice the bytes received
/// plus [`FIRST_CHUNK`]), never past the frame's end, and never more than [`GROWTH_CHUNK`].
fn next_reservation(arrived: usize, size: usize) -> usize {
    (size - arrived).min(arrived.max(FIRST_CHUNK)).min(GROWTH_CHUNK)
}

async fn read_body<R: AsyncRead + Unpin>(reader: &mut R, size: usize, ahead: &ReadAhead) -> Result<Bytes, FrameError> {
    let mut body = Vec::new();
    // NB: held until the frame is complete (or abandoned): from then on its bytes are real.
    let grant = ahead.take(size);
    if grant.is_some() {
        body.reserve_exact(size);
    }
    read_body_into(reader, size, &mut body).await?;
    drop(grant);
    Ok(Bytes::from(body))
}

/// Reads `size` bytes into `body`, reserving room only as bytes arrive unless it has room
/// for all of them already.
async fn read_body_into<R: AsyncRead + Unpin>(reader: &mut R, size: usize, body: &mut Vec<u8>) -> Result<(), FrameError> {
    // NB: a Vec, not a BytesMut: `reserve_exact` allocates what `next_reservation` asks for,
    // where BytesMut's `reserve` may double the capacity on top of it.
    let reserved = body.capacity() >= size;
    while body.len() < size {
        // NB: a read into room already reserved asks for all of it: a buffered reader passes
        // reads of its buffer's size or more straight to the socket.
        let want = if reserved { size - body.len() } else { next_reservation(body.len(), size) };
        body.reserve_exact(want);
        let n = (&mut *reader).take(want as u64).read_buf(body).await?;
        if n == 0 {
            return Err(FrameError::Truncated);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_secs(30);

    #[tokio::test]
    async fn rejects_oversized_frame_before_reading_body() {
        let bytes = (1_000_000i32).to_be_bytes();
        let mut r: &[u8] = &bytes;
        let err = read_frame(&mut r, 1000, T, &ReadAhead::default()).await.err();
        assert!(matches!(err, Some(FrameError::TooLarge { size: 1_000_000, limit: 1000 })));
    }

    #[tokio::test]
    async fn rejects_negative_and_short_frames() {
        let mut r: &[u8] = &(-5i32).to_be_bytes();
        assert!(matches!(read_frame(&mut r, 1000, T, &ReadAhead::default()).await, Err(FrameError::NegativeSize(-5))));
        let mut data = 3i32.to_be_bytes().to_vec();
        data.extend_from_slice(&[0, 0, 0]);
        let mut r: &[u8] = &data;
        assert!(matches!(read_frame(&mut r, 1000, T, &ReadAhead::default()).await, Err(FrameError::TooShort(3))));
    }

    #[tokio::test]
    async fn truncated_body_is_an_error_and_clean_eof_is_not() {
        let mut data = 20i32.to_be_bytes().to_vec();
        data.extend_from_slice(&[1; 10]);
        let mut r: &[u8] = &data;
        assert!(matches!(read_frame(&mut r, 1000, T, &ReadAhead::default()).await, Err(FrameError::Truncated)));
        let mut empty: &[u8] = &[];
        assert!(matches!(read_frame(&mut empty, 1000, T, &ReadAhead::default()).await, Ok(None)));
    }

    #[tokio::test]
    async fn reads_whole_frame() {
        let mut data = 8i32.to_be_bytes().to_vec();
        data.extend_from_slice(&[0, 18, 0, 3, 0, 0, 0, 7]);
        let mut r: &[u8] = &data;
        let body = read_frame(&mut r, 1000, T, &ReadAhead::default()).await.ok().flatten();
        let body = body.map(|b| b.to_vec()).unwrap_or_default();
        let prefix = HeaderPrefix::parse(&body).ok();
        assert_eq!(prefix, Some(HeaderPrefix { api_key: 18, api_version: 3, correlation_id: 7 }));
    }

    #[tokio::test]
    async fn eof_inside_the_size_field_is_truncation() {
        let mut r: &[u8] = &[0, 0];
        assert!(matches!(read_frame(&mut r, 1000, T, &ReadAhead::default()).await, Err(FrameError::Truncated)));
    }

    /// A client that sent the size and part of the body and then nothing: the read gives up
    /// at the deadline, counted from the frame's first byte.
    #[tokio::test(start_paused = true)]
    async fn a_half_sent_frame_times_out_at_the_deadline() {
        let (mut client, mut server) = tokio::io::duplex(1024);
        let sent = [&100i32.to_be_bytes()[..], &[1; 10]].concat();
        assert!(tokio::io::AsyncWriteExt::write_all(&mut client, &sent).await.is_ok());
        let started = tokio::time::Instant::now();
        let result = read_frame(&mut server, 1000, T, &ReadAhead::default()).await;
        assert!(matches!(result, Err(FrameError::ReadTimeout(t)) if t == T), "{result:?}");
        assert_eq!(started.elapsed(), T);
        drop(client);
    }

    /// Waiting for the first byte of a frame is not bounded by the read timeout (the idle
    /// timeout covers it): a frame that starts an hour later is read.
    #[tokio::test(start_paused = true)]
    async fn waiting_for_a_frame_to_start_has_no_read_deadline() {
        let (mut client, mut server) = tokio::io::duplex(1024);
        let late = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            let frame = [&8i32.to_be_bytes()[..], &[0, 18, 0, 3, 0, 0, 0, 7]].concat();
            let _ = tokio::io::AsyncWriteExt::write_all(&mut client, &frame).await;
            client
        });
        let result = read_frame(&mut server, 1000, T, &ReadAhead::default()).await;
        assert!(matches!(result, Ok(Some(ref body)) if body.len() == 8), "{result:?}");
        assert!(late.await.is_ok());
    }

    /// A frame that claims 100 MiB and sends less pins about twice what it sent, not the claim
    /// (nor a fixed chunk of it).
    #[tokio::test]
    async fn a_half_sent_frame_pins_about_what_it_sent() {
        let claimed = 100 * 1024 * 1024;
        for arrived in [10, 5_000, 300 * 1024, 3 * 1024 * 1024 + 17] {
            let sent = vec![1u8; arrived];
            let mut r: &[u8] = &sent;
            let mut body = Vec::new();
            let result = read_body_into(&mut r, claimed, &mut body).await;
            assert!(matches!(result, Err(FrameError::Truncated)));
            assert_eq!(body.len(), arrived);
            assert!(body.capacity() <= 2 * arrived + FIRST_CHUNK, "{arrived} bytes arrived, {} reserved", body.capacity());
        }
    }

    /// Delivers `data` a few bytes per read and records, for each read, where the buffer being
    /// filled starts in memory and how much of the frame it could hold.
    struct Trickle {
        data: Vec<u8>,
        at: usize,
        buffer_starts: Vec<usize>,
        rooms: Vec<usize>,
    }

    impl AsyncRead for Trickle {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            let n = (self.data.len() - self.at).min(buf.remaining()).min(4096);
            let start = buf.initialize_unfilled().as_ptr() as usize - self.at;
            self.buffer_starts.push(start);
            let room = self.at + buf.remaining();
            self.rooms.push(room);
            let at = self.at;
            buf.put_slice(&self.data[at..at + n]);
            self.at += n;
            std::task::Poll::Ready(Ok(()))
        }
    }

    fn trickle(size: usize) -> Trickle {
        Trickle { data: (0..size).map(|i| i as u8).collect(), at: 0, buffer_starts: Vec::new(), rooms: Vec::new() }
    }

    /// A frame the read-ahead covers fills one buffer, allocated at its size; the room is
    /// taken while it arrives and given back once it is complete.
    #[tokio::test]
    async fn a_frame_within_the_read_ahead_is_read_into_one_allocation() {
        let size = 300 * 1024;
        let ahead = ReadAhead::new(size);
        let mut r = trickle(size);
        let body = read_body(&mut r, size, &ahead).await.map(|b| b.to_vec()).unwrap_or_default();
        assert_eq!(body, r.data);
        assert!(r.buffer_starts.len() > 1);
        assert!(r.buffer_starts.iter().all(|s| *s == r.buffer_starts[0]), "the buffer moved: {:?}", r.buffer_starts);
        assert!(r.rooms.iter().all(|room| *room == size), "{:?}", r.rooms);
        assert_eq!(ahead.free(), size);
    }

    /// Past the read-ahead's room a frame is read as before, growing as it arrives, and takes
    /// nothing from it.
    #[tokio::test]
    async fn a_frame_larger_than_the_free_read_ahead_grows_as_it_arrives() {
        let size = 300 * 1024;
        let ahead = ReadAhead::new(size - 1);
        let mut r = trickle(size);
        let body = read_body(&mut r, size, &ahead).await.map(|b| b.to_vec()).unwrap_or_default();
        assert_eq!(body, r.data);
        assert_eq!(r.rooms.first(), Some(&FIRST_CHUNK), "room for the whole frame from the start");
        assert_eq!(ahead.free(), size - 1);
    }

    /// A frame that stops half way holds its room only until the read gives up.
    #[tokio::test(start_paused = true)]
    async fn a_half_sent_frame_gives_the_read_ahead_back_at_its_deadline() {
        let ahead = ReadAhead::new(1000);
        let (mut client, mut server) = tokio::io::duplex(1024);
        let sent = [&100i32.to_be_bytes()[..], &[1; 10]].concat();
        assert!(tokio::io::AsyncWriteExt::write_all(&mut client, &sent).await.is_ok());
        let read = read_frame(&mut server, 1000, T, &ahead);
        tokio::pin!(read);
        assert!(tokio::time::timeout(T / 2, &mut read).await.is_err());
        assert_eq!(ahead.free(), 900, "the frame's 100 bytes are taken while it arrives");
        assert!(matches!(read.await, Err(FrameError::ReadTimeout(_))));
        assert_eq!(ahead.free(), 1000);
        drop(client);
    }

    #[test]
    fn reservations_never_pass_the_frame_end() {
        let size = 100 * 1024 * 1024;
        assert_eq!(next_reservation(0, size), FIRST_CHUNK);
        assert_eq!(next_reservation(10, 20), 10);
        for arrived in [0, 1, FIRST_CHUNK, 300 * 1024, 5 * 1024 * 1024, size - 1] {
            let want = next_reservation(arrived, size);
            assert!(want > 0 && want <= GROWTH_CHUNK && arrived + want <= size, "{arrived}: {want}");
        }
    }
}
