//! Reusable large byte buffers for the fetch path: the segment bytes a read returns and the
//! encoded fetch response.
//!
//! Why: a fetch of 8 partitions at the default 1 MiB per partition allocated 8 fresh 1 MiB
//! read buffers and a ~8 MB response buffer per request, and freed them all once the response
//! was written. glibc's malloc gives the freed top of a thread's heap back to the kernel
//! (`madvise(MADV_DONTNEED)`), so the next fetch page-faulted every 4 KiB page in again and the
//! kernel zeroed it. In a profile of a 16 KiB-message, 8-partition consume, page faults and
//! unmapping were three quarters of the broker's CPU (docs/performance.md, "Consume: copies and zero
//! copy"). Buffers taken from here keep their pages: after the first fetch a
//! read and an encode touch memory that is already mapped.
//!
//! The pool is bounded ([`POOL_MAX_BYTES`] in all); buffers below [`MIN_POOLED`] are left to
//! the allocator, which serves small sizes without returning pages to the kernel anyway.

use bytes::Bytes;
use parking_lot::Mutex;

/// Buffers smaller than this are not worth pooling.
pub const MIN_POOLED: usize = 64 * 1024;
/// A buffer larger than this is freed instead of kept (a single huge response must not pin
/// its memory for good).
pub const MAX_POOLED: usize = 16 * 1024 * 1024;
/// Total capacity the process-wide pool keeps while idle.
pub const POOL_MAX_BYTES: usize = 32 * 1024 * 1024;

/// A bounded free list of byte buffers.
#[derive(Debug)]
pub struct BufferPool {
    free: Mutex<Free>,
    max_bytes: usize,
}

#[derive(Debug)]
struct Free {
    buffers: Vec<Vec<u8>>,
    /// Sum of the capacities in `buffers`.
    bytes: usize,
}

static POOL: BufferPool = BufferPool::new(POOL_MAX_BYTES);

/// The process-wide pool the read path and the response encoder share.
pub fn pool() -> &'static BufferPool {
    &POOL
}

impl BufferPool {
    /// An empty pool that keeps at most `max_bytes` of idle capacity.
    pub const fn new(max_bytes: usize) -> BufferPool {
        BufferPool {
            free: parking_lot::const_mutex(Free {
                buffers: Vec::new(),
                bytes: 0,
            }),
            max_bytes,
        }
    }

    /// A buffer with room for `capacity` bytes. Its length is whatever was initialised by an
    /// earlier user (the contents are stale): callers overwrite what they expose.
    pub fn take(&self, capacity: usize) -> Vec<u8> {
        if capacity >= MIN_POOLED {
            let mut free = self.free.lock();
            // The smallest buffer that is big enough, so that a 1 MiB read does not take the
            // buffer a multi-MB response needs next; otherwise the largest, which then grows
            // once and is big enough from then on.
            let fits = (0..free.buffers.len())
                .filter(|&i| free.buffers[i].capacity() >= capacity)
                .min_by_key(|&i| free.buffers[i].capacity());
            let pick = fits
                .or_else(|| (0..free.buffers.len()).max_by_key(|&i| free.buffers[i].capacity()));
            if let Some(i) = pick {
                let mut buf = free.buffers.swap_remove(i);
                free.bytes -= buf.capacity();
                drop(free);
                if buf.capacity() < capacity {
                    // Growing moves the buffer: its stale contents are not worth copying.
                    buf.clear();
                    buf.reserve(capacity);
                }
                return buf;
            }
        }
        Vec::with_capacity(capacity)
    }

    /// The idle buffers the pool keeps, and their capacity in bytes.
    pub fn idle(&self) -> (usize, usize) {
        let free = self.free.lock();
        (free.buffers.len(), free.bytes)
    }

    /// Returns a buffer for reuse, or frees it when it is too small, too large or the pool is
    /// full.
    pub fn give(&self, buf: Vec<u8>) {
        let cap = buf.capacity();
        if !(MIN_POOLED..=MAX_POOLED).contains(&cap) {
            return;
        }
        let mut free = self.free.lock();
        if free.bytes + cap <= self.max_bytes {
            free.bytes += cap;
            free.buffers.push(buf);
        }
    }

    /// Idle capacity held, in bytes.
    pub fn idle_bytes(&self) -> usize {
        self.free.lock().bytes
    }
}

/// The first `len` bytes of `buf` as [`Bytes`]; `buf` goes back to the process-wide pool when
/// the last clone is dropped.
pub fn freeze(buf: Vec<u8>, len: usize) -> Bytes {
    if buf.capacity() < MIN_POOLED {
        let mut buf = buf;
        buf.truncate(len);
        return Bytes::from(buf);
    }
    Bytes::from_owner(Pooled { buf, len })
}

/// Owner of a pooled buffer behind a [`Bytes`].
struct Pooled {
    buf: Vec<u8>,
    len: usize,
}

impl AsRef<[u8]> for Pooled {
    fn as_ref(&self) -> &[u8] {
        &self.buf[..self.len.min(self.buf.len())]
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        pool().give(std::mem::take(&mut self.buf));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_returned_buffer_is_reused_with_its_memory() {
        let pool = BufferPool::new(POOL_MAX_BYTES);
        let mut a = pool.take(MIN_POOLED * 2);
        a.resize(MIN_POOLED * 2, 7);
        let ptr = a.as_ptr();
        pool.give(a);
        assert_eq!(pool.idle_bytes(), MIN_POOLED * 2);
        let b = pool.take(MIN_POOLED);
        assert_eq!(b.as_ptr(), ptr, "the same allocation comes back");
        assert_eq!(
            b.len(),
            MIN_POOLED * 2,
            "initialised length is kept for reuse"
        );
        assert_eq!(pool.idle_bytes(), 0);
    }

    #[test]
    fn the_smallest_fitting_buffer_is_taken() {
        let pool = BufferPool::new(POOL_MAX_BYTES);
        pool.give(Vec::with_capacity(MIN_POOLED * 8));
        pool.give(Vec::with_capacity(MIN_POOLED * 2));
        pool.give(Vec::with_capacity(MIN_POOLED * 4));
        assert_eq!(pool.take(MIN_POOLED * 3).capacity(), MIN_POOLED * 4);
        assert_eq!(pool.take(MIN_POOLED).capacity(), MIN_POOLED * 2);
        assert_eq!(pool.take(MIN_POOLED).capacity(), MIN_POOLED * 8);
    }

    #[test]
    fn a_too_small_buffer_grows_to_the_request() {
        let pool = BufferPool::new(POOL_MAX_BYTES);
        pool.give(Vec::with_capacity(MIN_POOLED));
        let b = pool.take(MIN_POOLED * 4);
        assert!(b.capacity() >= MIN_POOLED * 4);
    }

    #[test]
    fn small_large_and_excess_buffers_are_not_kept() {
        let pool = BufferPool::new(MIN_POOLED * 3);
        pool.give(Vec::with_capacity(MIN_POOLED - 1));
        pool.give(Vec::with_capacity(MAX_POOLED + 1));
        assert_eq!(pool.idle_bytes(), 0);
        pool.give(Vec::with_capacity(MIN_POOLED * 2));
        pool.give(Vec::with_capacity(MIN_POOLED * 2));
        assert_eq!(
            pool.idle_bytes(),
            MIN_POOLED * 2,
            "the second would pass the limit"
        );
        // Small requests never take a pooled buffer.
        assert!(pool.take(100).capacity() < MIN_POOLED);
        assert_eq!(pool.idle_bytes(), MIN_POOLED * 2);
    }

    #[test]
    fn frozen_bytes_show_only_the_prefix() {
        let mut buf = pool().take(MIN_POOLED);
        buf.clear();
        buf.extend(std::iter::repeat_n(3u8, MIN_POOLED));
        let bytes = freeze(buf, 10);
        assert_eq!(&bytes[..], &[3u8; 10]);
        let small = freeze(vec![1, 2, 3, 4], 2);
        assert_eq!(&small[..], &[1, 2]);
    }
}
