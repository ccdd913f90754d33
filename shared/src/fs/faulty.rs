//! A filesystem whose calls fail the way a sick mount's do, switched on and off at run time: the
//! fault campaign wraps each broker's volume in one to give that broker alone EIO, ENOSPC,
//! ESTALE or a slow fsync while the others stay healthy. A decorator over [`Fs`], so nothing
//! above it knows it is there; switched off it passes every call through.

use std::io;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::{DirEntry, File, Fs, FsRef, OpenMode};

/// What a sick mount does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MountFault {
    /// Writes, syncs and namespace changes fail with EIO (a failed writeback, a dead disk);
    /// reads still work, as they do from the page cache.
    Eio,
    /// Writes, extensions and creates fail with ENOSPC; syncs of what was written succeed.
    Enospc,
    /// Every call fails with ESTALE (an NFS server that lost its file handles).
    Estale,
    /// Every fdatasync, fsync and directory fsync takes this long first (a stalled server).
    SlowSync(Duration),
    /// Writes land (in the page cache) but every fdatasync, fsync and directory fsync fails
    /// with EIO: a failed writeback, after which what was written may or may not be on disk.
    SyncEio,
}

const OFF: u64 = 0;
const EIO: u64 = 1;
const ENOSPC: u64 = 2;
const ESTALE: u64 = 3;
const SYNC_EIO: u64 = 4;
/// Slow syncs are encoded as `SLOW + milliseconds`.
const SLOW: u64 = 5;

/// The switch of one [`FaultyFs`]; clones share it.
#[derive(Debug, Clone, Default)]
pub struct FaultSwitch(Arc<AtomicU64>);

impl FaultSwitch {
    /// Makes every later call behave as `fault` says.
    pub fn set(&self, fault: MountFault) {
        let encoded = match fault {
            MountFault::Eio => EIO,
            MountFault::Enospc => ENOSPC,
            MountFault::Estale => ESTALE,
            MountFault::SyncEio => SYNC_EIO,
            MountFault::SlowSync(d) => {
                SLOW + u64::try_from(d.as_millis()).unwrap_or(u64::MAX - SLOW)
            }
        };
        self.0.store(encoded, Ordering::SeqCst);
    }

    /// Heals the mount: every later call passes through.
    pub fn clear(&self) {
        self.0.store(OFF, Ordering::SeqCst);
    }

    /// The fault in force, if any.
    pub fn current(&self) -> Option<MountFault> {
        match self.0.load(Ordering::SeqCst) {
            OFF => None,
            EIO => Some(MountFault::Eio),
            ENOSPC => Some(MountFault::Enospc),
            ESTALE => Some(MountFault::Estale),
            SYNC_EIO => Some(MountFault::SyncEio),
            ms => Some(MountFault::SlowSync(Duration::from_millis(ms - SLOW))),
        }
    }
}

/// What kind of call is being made, for deciding whether the fault in force hits it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Call {
    Read,
    Write,
    Sync,
    Namespace,
}

fn errno(code: i32) -> io::Error {
    io::Error::from_raw_os_error(code)
}

/// Whether `call` fails under the fault in force, and how; sleeps first for a slow sync.
fn check(switch: &FaultSwitch, call: Call) -> io::Result<()> {
    match (switch.current(), call) {
        (None, _) => Ok(()),
        (Some(MountFault::Estale), _) => Err(errno(libc_codes::ESTALE)),
        (Some(MountFault::Eio), Call::Read) => Ok(()),
        (Some(MountFault::Eio), _) => Err(errno(libc_codes::EIO)),
        (Some(MountFault::Enospc), Call::Write | Call::Namespace) => Err(errno(libc_codes::ENOSPC)),
        (Some(MountFault::Enospc), _) => Ok(()),
        (Some(MountFault::SyncEio), Call::Sync) => Err(errno(libc_codes::EIO)),
        (Some(MountFault::SyncEio), _) => Ok(()),
        (Some(MountFault::SlowSync(d)), Call::Sync) => {
            std::thread::sleep(d);
            Ok(())
        }
        (Some(MountFault::SlowSync(_)), _) => Ok(()),
    }
}

/// Linux's numbers (the only platform the broker runs on).
mod libc_codes {
    pub(super) const EIO: i32 = 5;
    pub(super) const ENOSPC: i32 = 28;
    pub(super) const ESTALE: i32 = 116;
}

/// `inner` behind a [`FaultSwitch`].
#[derive(Debug)]
pub struct FaultyFs {
    inner: FsRef,
    switch: FaultSwitch,
}

impl FaultyFs {
    /// `inner` with its faults driven by `switch`.
    pub fn wrap(inner: FsRef, switch: FaultSwitch) -> FsRef {
        Arc::new(FaultyFs { inner, switch })
    }
}

impl Fs for FaultyFs {
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        check(&self.switch, Call::Namespace)?;
        self.inner.create_dir_all(path)
    }
    fn list_dir_sized(&self, path: &Path, sized: &dyn Fn(&str) -> bool) -> io::Result<Vec<DirEntry>> {
        check(&self.switch, Call::Read)?;
        self.inner.list_dir_sized(path, sized)
    }
    fn stat(&self, path: &Path) -> io::Result<DirEntry> {
        check(&self.switch, Call::Read)?;
        self.inner.stat(path)
    }
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Arc<dyn File>> {
        check(
            &self.switch,
            if mode == OpenMode::CreateNew {
                Call::Namespace
            } else {
                Call::Read
            },
        )?;
        let inner = self.inner.open(path, mode)?;
        Ok(Arc::new(FaultyFile {
            inner,
            switch: self.switch.clone(),
        }))
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        check(&self.switch, Call::Namespace)?;
        self.inner.remove_file(path)
    }
    fn remove_dir(&self, path: &Path) -> io::Result<()> {
        check(&self.switch, Call::Namespace)?;
        self.inner.remove_dir(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        check(&self.switch, Call::Namespace)?;
        self.inner.rename(from, to)
    }
    fn hard_link(&self, from: &Path, to: &Path) -> io::Result<()> {
        check(&self.switch, Call::Namespace)?;
        self.inner.hard_link(from, to)
    }
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        check(&self.switch, Call::Sync)?;
        self.inner.sync_dir(path)
    }
}

#[derive(Debug)]
struct FaultyFile {
    inner: Arc<dyn File>,
    switch: FaultSwitch,
}

impl File for FaultyFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        check(&self.switch, Call::Read)?;
        self.inner.read_at(buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        check(&self.switch, Call::Write)?;
        self.inner.write_all_at(buf, offset)
    }
    fn sync_data(&self) -> io::Result<()> {
        check(&self.switch, Call::Sync)?;
        self.inner.sync_data()
    }
    fn sync_all(&self) -> io::Result<()> {
        check(&self.switch, Call::Sync)?;
        self.inner.sync_all()
    }
    fn len(&self) -> io::Result<u64> {
        check(&self.switch, Call::Read)?;
        self.inner.len()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        check(&self.switch, Call::Write)?;
        self.inner.set_len(len)
    }
    fn as_std(&self) -> Option<&std::fs::File> {
        self.inner.as_std()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::MemFs;

    #[test]
    fn a_switched_fault_hits_the_calls_it_names_until_cleared() -> io::Result<()> {
        let switch = FaultSwitch::default();
        let fs = FaultyFs::wrap(Arc::new(MemFs::new()), switch.clone());
        let dir = Path::new("/v/t-0");
        fs.create_dir_all(dir)?;
        let file = fs.open(&dir.join("a"), OpenMode::CreateNew)?;
        file.write_all_at(b"abc", 0)?;

        switch.set(MountFault::Eio);
        assert_eq!(file.sync_data().map_err(|e| e.raw_os_error()), Err(Some(5)));
        assert_eq!(file.len()?, 3, "EIO leaves reads working");
        switch.set(MountFault::Enospc);
        assert_eq!(
            file.write_all_at(b"d", 3).map_err(|e| e.raw_os_error()),
            Err(Some(28))
        );
        file.sync_data()?;
        switch.set(MountFault::SyncEio);
        file.write_all_at(b"e", 3)?;
        assert_eq!(file.sync_data().map_err(|e| e.raw_os_error()), Err(Some(5)));
        assert_eq!(
            file.len()?,
            4,
            "the write of a failed writeback is readable"
        );
        switch.set(MountFault::Estale);
        assert_eq!(
            fs.list_dir(dir).map_err(|e| e.raw_os_error()),
            Err(Some(116))
        );
        switch.set(MountFault::SlowSync(Duration::from_millis(1)));
        assert_eq!(
            switch.current(),
            Some(MountFault::SlowSync(Duration::from_millis(1)))
        );
        file.sync_data()?;

        switch.clear();
        file.write_all_at(b"d", 3)?;
        file.sync_data()?;
        assert_eq!(fs.stat(&dir.join("a"))?.len, 4);
        Ok(())
    }
}
