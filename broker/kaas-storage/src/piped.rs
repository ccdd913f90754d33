//! Record sets that reach the socket without passing through user space.
//!
//! A read that asks for it ([`crate::partition::ReadBound::piped`]) splices the segment's pages
//! into pipes instead of copying them into a buffer: the pipes hold references to page-cache
//! pages, not copies. The splice runs where the read runs, on a thread that may block (on a
//! network volume a cold page is a round trip to the server, and a stalled server must not stall
//! a runtime thread); once the pages are in the pipes, the connection's writer splices them into
//! the socket whenever it is writable, which never waits for the volume.
//!
//! The Kafka response encoder takes record sets as [`Bytes`]. A piped set is therefore
//! represented by a stand-in: `Bytes` of the set's length over an anonymous mapping that nobody
//! writes or reads (the kernel backs it with no memory until touched), registered under its
//! address. The writer asks [`claim`] for each record set it is about to send and, for a
//! stand-in, gets the pipes to send in its place. Anything that *reads* a stand-in sees zeros,
//! so only a path that hands the records to the socket untouched may ask for one.
//!
//! Bounded: at most [`IN_FLIGHT_MAX_BYTES`] of record sets are held in pipes at once, in at most
//! [`PIPES_MAX`] pipes (each two descriptors and up to a MiB of pinned pages); past either, and
//! wherever splicing is not possible (the in-memory filesystem, a file system without splice),
//! the read copies as before.

use std::collections::BTreeMap;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use nix::errno::Errno;
use nix::fcntl::{FcntlArg, OFlag, SpliceFFlags, fcntl, splice};
use parking_lot::Mutex;

/// Record sets smaller than this are copied: two splices, a mapping and a registration cost
/// more than copying a few pages.
pub const MIN_PIPED: usize = 64 * 1024;
/// Record-set bytes held in pipes across the process at most.
pub const IN_FLIGHT_MAX_BYTES: usize = 64 * 1024 * 1024;
/// The capacity asked of each pipe (Linux's default `pipe-max-size`; a smaller grant is used as
/// given).
const PIPE_CAPACITY: i32 = 1 << 20;
/// Pipes kept for reuse once emptied.
const IDLE_PIPES_MAX: usize = 64;
/// Pipes open at once, idle ones included (two descriptors each): small record sets could
/// otherwise take thousands within the byte bound.
pub const PIPES_MAX: usize = 256;

static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);
static PIPES: AtomicUsize = AtomicUsize::new(0);
static IDLE: Mutex<Vec<Pipe>> = parking_lot::const_mutex(Vec::new());
static STAND_INS: Mutex<BTreeMap<usize, Piped>> = parking_lot::const_mutex(BTreeMap::new());

/// Bytes of record sets now held in pipes (for tests and metrics).
pub fn in_flight_bytes() -> usize {
    IN_FLIGHT.load(Ordering::Relaxed)
}

/// Pipes open now, idle ones included.
pub fn open_pipes() -> usize {
    PIPES.load(Ordering::Relaxed)
}

#[derive(Debug)]
struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
    /// Bytes in the pipe.
    holds: usize,
}

impl Pipe {
    fn take() -> io::Result<Pipe> {
        if let Some(pipe) = IDLE.lock().pop() {
            return Ok(pipe);
        }
        if PIPES.fetch_add(1, Ordering::Relaxed) >= PIPES_MAX {
            PIPES.fetch_sub(1, Ordering::Relaxed);
            return Err(io::Error::other("pipes at their bound"));
        }
        // NB: non-blocking on both ends: filling stops when the pipe is full instead of
        // waiting for a reader, and draining into a full socket returns instead of parking.
        let (read, write) = match nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK) {
            Ok(ends) => ends,
            Err(e) => {
                PIPES.fetch_sub(1, Ordering::Relaxed);
                return Err(e.into());
            }
        };
        // A smaller pipe still works, in more pieces.
        let _ = fcntl(&write, FcntlArg::F_SETPIPE_SZ(PIPE_CAPACITY));
        Ok(Pipe { read, write, holds: 0 })
    }

    fn give_back(self) {
        // A pipe that still holds pages is closed: its bytes belong to a response never sent.
        if self.holds == 0 {
            let mut idle = IDLE.lock();
            if idle.len() < IDLE_PIPES_MAX {
                idle.push(self);
            }
        }
    }
}

/// One record set's bytes, in pipes, in order.
#[derive(Debug)]
pub struct Piped {
    pipes: Vec<Pipe>,
    len: usize,
    /// Bytes not yet sent.
    left: usize,
}

impl Piped {
    /// Splices `[pos, pos + len)` of `file` into pipes. `None` when the in-flight bound is
    /// reached or the file cannot be spliced (the caller copies instead); errors of the file
    /// itself are the caller's to report.
    pub(crate) fn fill(file: &std::fs::File, pos: u64, len: usize) -> Option<Piped> {
        let reserved = IN_FLIGHT.fetch_add(len, Ordering::Relaxed);
        let mut piped = Piped { pipes: Vec::new(), len, left: len };
        if reserved + len > IN_FLIGHT_MAX_BYTES {
            return None; // Drop gives the reservation back.
        }
        let mut offset = i64::try_from(pos).ok()?;
        let mut left = len;
        while left > 0 {
            let mut pipe = Pipe::take().ok()?;
            loop {
                let flags = SpliceFFlags::SPLICE_F_NONBLOCK | SpliceFFlags::SPLICE_F_MOVE;
                match splice(file.as_fd(), Some(&mut offset), &pipe.write, None, left, flags) {
                    Ok(0) => {
                        // The file ends before the set does: someone truncated it. The
                        // caller's copy reports it as the read error it is.
                        piped.pipes.push(pipe);
                        return None;
                    }
                    Ok(n) => {
                        pipe.holds += n;
                        left -= n;
                        if left == 0 {
                            break;
                        }
                    }
                    Err(Errno::EAGAIN) if pipe.holds > 0 => break, // full: the next pipe
                    Err(Errno::EINTR) => {}
                    Err(_) => {
                        piped.pipes.push(pipe);
                        return None;
                    }
                }
            }
            piped.pipes.push(pipe);
        }
        Some(piped)
    }

    /// The record set's length.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the set is empty (never: sets below [`MIN_PIPED`] are copied).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether every byte was sent.
    pub fn is_sent(&self) -> bool {
        self.left == 0
    }

    /// Splices what the socket takes now into `socket` (non-blocking: `WouldBlock` when it is
    /// full). Returns the bytes sent.
    pub fn send_to(&mut self, socket: BorrowedFd<'_>) -> io::Result<usize> {
        let Some(pipe) = self.pipes.iter_mut().find(|p| p.holds > 0) else {
            return Ok(0);
        };
        let flags = SpliceFFlags::SPLICE_F_NONBLOCK | SpliceFFlags::SPLICE_F_MOVE | SpliceFFlags::SPLICE_F_MORE;
        let n = splice(&pipe.read, None, socket, None, pipe.holds, flags).map_err(io::Error::from)?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        pipe.holds -= n;
        self.left -= n;
        Ok(n)
    }

    /// Reads the set into memory (for a writer that cannot splice, and for tests): the pipes
    /// are drained.
    pub fn drain_into(&mut self, out: &mut Vec<u8>) -> io::Result<()> {
        for pipe in &mut self.pipes {
            let mut buf = vec![0u8; pipe.holds];
            let mut at = 0;
            while at < buf.len() {
                match nix::unistd::read(&pipe.read, &mut buf[at..]) {
                    Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                    Ok(n) => at += n,
                    Err(Errno::EINTR) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            pipe.holds = 0;
            self.left -= buf.len();
            out.extend_from_slice(&buf);
        }
        Ok(())
    }

    /// The stand-in the response encoder carries in the set's place; see the module docs.
    pub(crate) fn into_stand_in(self) -> io::Result<Bytes> {
        let zeros = memmap2::MmapOptions::new().len(self.len).map_anon()?;
        let key = zeros.as_ptr() as usize;
        STAND_INS.lock().insert(key, self);
        Ok(Bytes::from_owner(StandIn { zeros, key }))
    }
}

impl Drop for Pipe {
    fn drop(&mut self) {
        PIPES.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Drop for Piped {
    fn drop(&mut self) {
        IN_FLIGHT.fetch_sub(self.len, Ordering::Relaxed);
        for pipe in self.pipes.drain(..) {
            pipe.give_back();
        }
    }
}

/// The owner of a stand-in's bytes: an untouched anonymous mapping. Dropping the last `Bytes`
/// of a stand-in that was never claimed drops its pipes.
struct StandIn {
    zeros: memmap2::MmapMut,
    key: usize,
}

impl AsRef<[u8]> for StandIn {
    fn as_ref(&self) -> &[u8] {
        &self.zeros
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        let unclaimed = STAND_INS.lock().remove(&self.key);
        drop(unclaimed);
    }
}

/// The pipes of a stand-in, taken by the one writer that sends it; `None` for ordinary bytes.
/// `Err` for a piece that is part of a stand-in but not all of it (it cannot be sent in part,
/// and its bytes are not the records).
pub fn claim(piece: &Bytes) -> io::Result<Option<Piped>> {
    let start = piece.as_ptr() as usize;
    let mut stand_ins = STAND_INS.lock();
    let Some((&key, piped)) = stand_ins.range(..=start).next_back() else {
        return Ok(None);
    };
    if start >= key + piped.len {
        return Ok(None);
    }
    if start != key || piece.len() != piped.len {
        return Err(io::Error::other(format!(
            "{} bytes at {} of a piped record set of {} bytes cannot be sent",
            piece.len(),
            start - key,
            piped.len
        )));
    }
    Ok(stand_ins.remove(&key))
}

#[cfg(test)]
mod tests;
