//! Length-prefixed framing and the fixed request-header prefix.
//!
//! The size field is checked against the limit before a byte of the body is allocated, and the
//! body buffer grows as bytes actually arrive, so a lying length field costs nothing.

use bytes::{Buf, BytesMut};
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

/// Largest chunk reserved at a time while a frame body arrives.
const GROWTH_CHUNK: usize = 1024 * 1024;

/// Reads one frame body. `Ok(None)` is a clean end of stream between frames.
pub async fn read_frame<R: AsyncRead + Unpin>(
    reader: &mut R,
    limit: usize,
) -> Result<Option<BytesMut>, FrameError> {
    let mut size_bytes = [0u8; 4];
    match reader.read_exact(&mut size_bytes).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    let size = i32::from_be_bytes(size_bytes);
    if size < 0 {
        return Err(FrameError::NegativeSize(size));
    }
    let size = size as usize;
    if size > limit {
        return Err(FrameError::TooLarge { size, limit });
    }
    if size < HeaderPrefix::LEN {
        return Err(FrameError::TooShort(size));
    }
    let mut body = BytesMut::with_capacity(size.min(GROWTH_CHUNK));
    while body.len() < size {
        let want = (size - body.len()).min(GROWTH_CHUNK);
        body.reserve(want);
        let mut limited = (&mut *reader).take(want as u64);
        let n = limited.read_buf(&mut body).await?;
        if n == 0 {
            return Err(FrameError::Truncated);
        }
    }
    Ok(Some(body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn rejects_oversized_frame_before_reading_body() {
        let bytes = (1_000_000i32).to_be_bytes();
        let mut r: &[u8] = &bytes;
        let err = read_frame(&mut r, 1000).await.err();
        assert!(matches!(err, Some(FrameError::TooLarge { size: 1_000_000, limit: 1000 })));
    }

    #[tokio::test]
    async fn rejects_negative_and_short_frames() {
        let mut r: &[u8] = &(-5i32).to_be_bytes();
        assert!(matches!(read_frame(&mut r, 1000).await, Err(FrameError::NegativeSize(-5))));
        let mut data = 3i32.to_be_bytes().to_vec();
        data.extend_from_slice(&[0, 0, 0]);
        let mut r: &[u8] = &data;
        assert!(matches!(read_frame(&mut r, 1000).await, Err(FrameError::TooShort(3))));
    }

    #[tokio::test]
    async fn truncated_body_is_an_error_and_clean_eof_is_not() {
        let mut data = 20i32.to_be_bytes().to_vec();
        data.extend_from_slice(&[1; 10]);
        let mut r: &[u8] = &data;
        assert!(matches!(read_frame(&mut r, 1000).await, Err(FrameError::Truncated)));
        let mut empty: &[u8] = &[];
        assert!(matches!(read_frame(&mut empty, 1000).await, Ok(None)));
    }

    #[tokio::test]
    async fn reads_whole_frame() {
        let mut data = 8i32.to_be_bytes().to_vec();
        data.extend_from_slice(&[0, 18, 0, 3, 0, 0, 0, 7]);
        let mut r: &[u8] = &data;
        let body = read_frame(&mut r, 1000).await.ok().flatten();
        let body = body.map(|b| b.to_vec()).unwrap_or_default();
        let prefix = HeaderPrefix::parse(&body).ok();
        assert_eq!(prefix, Some(HeaderPrefix { api_key: 18, api_version: 3, correlation_id: 7 }));
    }
}
