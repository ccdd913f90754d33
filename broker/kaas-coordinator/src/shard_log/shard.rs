//! One group shard's log: stat-only open, take_over(epoch), append + group-committed fsync,
//! compaction into a snapshot, relinquish and abandon — the same role discipline as a
//! partition (see the crate docs for the seed-001 answers).

mod durability;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use kaas_shared::atomic_file::write_atomic;
use kaas_shared::fs::{File, FsRef, OpenMode, read_optional};
use kaas_shared::names::{GroupFileKind, group_file_name};
use parking_lot::MutexGuard;
use tokio::sync::watch;

use super::frame::{self, Entry};
use crate::counted_mutex::CountedMutex;
use super::listing::{self, Listing, Stamp};
use super::{Error, Result};

/// Compact when the log has grown past this and past [`COMPACT_RATIO`] × the live state.
const COMPACT_MIN_BYTES: u64 = 8 * 1024 * 1024;
const COMPACT_RATIO: u64 = 4;
/// Entries per snapshot frame, so a big shard is not one giant allocation.
const SNAPSHOT_FRAME_ENTRIES: usize = 4096;
/// A take-over that races a deposed owner's compaction (files vanish under the listing) is
/// re-driven this many times.
const LOAD_ATTEMPTS: usize = 5;

/// A group shard's storage. Cheap to clone.
#[derive(Debug, Clone)]
pub struct ShardLog {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    fs: FsRef,
    dir: PathBuf,
    state: CountedMutex<State>,
    /// The highest durable sequence number, re-sent on role changes and failures to wake waiters.
    synced: watch::Sender<u64>,
}

#[derive(Debug, Default)]
struct State {
    owner: Option<Owner>,
    abandoned: bool,
    /// The live key/value state (latest value per key).
    map: BTreeMap<String, Vec<u8>>,
    /// Bumped by every role change and compaction, so a sync started before changes nothing.
    generation: u64,
}

#[derive(Debug)]
struct Owner {
    epoch: i32,
    stamp: Stamp,
    file: Arc<dyn File>,
    len: u64,
    /// Sequence number of the newest append (appends are numbered from 1 per ownership).
    appended: u64,
    synced: u64,
    sync_in_flight: bool,
    sync_wanted: u64,
    /// Set after a failed write or fsync: nothing more is accepted until the next take-over.
    poisoned: Option<String>,
    /// Bytes of the live state when the last snapshot was written.
    snapshot_len: u64,
}

/// Sizes, for metrics and compaction decisions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardStats {
    pub epoch: Option<i32>,
    pub keys: usize,
    pub log_bytes: u64,
}

impl ShardLog {
    /// Stat-only open: creates the directory if needed, opens no descriptor.
    pub fn open(fs: FsRef, dir: impl Into<PathBuf>) -> Result<ShardLog> {
        let dir = dir.into();
        fs.create_dir_all(&dir).map_err(|e| Error::io("mkdir", &dir, e))?;
        let (synced, _) = watch::channel(0);
        Ok(ShardLog {
            inner: Arc::new(Inner {
                fs,
                dir,
                state: CountedMutex::default(),
                synced,
            }),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.inner.state.lock()
    }

    /// How many callers have found the log's state held (by a take-over, say).
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn waited(&self) -> usize {
        self.inner.state.waited()
    }

    /// The shard directory.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// The newest epoch recorded on the volume (-1 for a fresh shard).
    pub fn stored_epoch(&self) -> Result<i32> {
        Ok(kaas_shared::epochs::stored_shard_epoch(&*self.inner.fs, &self.inner.dir)?)
    }

    /// The epoch this broker owns the shard at, if it does.
    pub fn epoch(&self) -> Option<i32> {
        self.lock().owner.as_ref().map(|o| o.epoch)
    }

    /// Why the owned log refuses writes (a failed write or fsync), if it does: only a new
    /// take-over, once the volume works again, recovers it.
    pub fn storage_failure(&self) -> Option<String> {
        self.lock().owner.as_ref().and_then(|o| o.poisoned.clone())
    }

    pub fn stats(&self) -> ShardStats {
        let st = self.lock();
        ShardStats {
            epoch: st.owner.as_ref().map(|o| o.epoch),
            keys: st.map.len(),
            log_bytes: st.owner.as_ref().map_or(0, |o| o.len),
        }
    }

    /// Takes the shard over at `epoch`: loads the newest snapshot and every later log (a torn
    /// tail is cut at the last whole frame), writes the loaded state as a fresh snapshot stamped
    /// with `epoch`, opens a fresh log after it, and only then accepts appends. Returns the live
    /// entries. Fails with [`Error::Fenced`] if the volume carries a newer epoch. Taking over
    /// again at the epoch already owned returns the current state.
    pub fn take_over(&self, epoch: i32) -> Result<Vec<Entry>> {
        let mut st = self.lock();
        if st.abandoned {
            return Err(Error::NotOwner);
        }
        if let Some(o) = &st.owner
            && o.epoch == epoch
            && o.poisoned.is_none()
        {
            return Ok(entries(&st.map));
        }
        st.release();
        let result = self.load_and_own(&mut st, epoch);
        if result.is_err() {
            st.release();
        }
        drop(st);
        self.wake();
        result
    }

    fn load_and_own(&self, st: &mut State, epoch: i32) -> Result<Vec<Entry>> {
        let (fs, dir) = (&*self.inner.fs, &*self.inner.dir);
        let fenced = |current| Error::Fenced { path: dir.to_owned(), requested: epoch, current };
        let before = listing::list(fs, dir)?;
        if epoch < before.max_epoch {
            return Err(fenced(before.max_epoch));
        }
        let stamp = before.next_stamp(epoch);
        // Claim the shard before reading it: the new log's name carries our epoch, and a
        // deposed owner lists the directory after each fdatasync (see `durability`). Either it
        // finds this name and acknowledges nothing more, or its bytes were durable before this
        // name existed, and so before the load below reads them.
        let file = create_log(fs, dir, stamp)?;
        let mut attempt = 0;
        let (listing, map) = loop {
            attempt += 1;
            let listing = listing::list(fs, dir)?;
            if epoch < listing.max_epoch {
                return Err(fenced(listing.max_epoch));
            }
            match load(fs, dir, &listing) {
                Ok(map) => break (listing, map),
                // A deposed owner compacted between our listing and our read: list again.
                Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound && attempt < LOAD_ATTEMPTS => {}
                Err(e) => return Err(e),
            }
        };
        if let Some(groups_dir) = dir.parent() {
            // fsync the parent: the shard directory may be new, and its name must survive a
            // power loss before acknowledged commits live inside it.
            fs.sync_dir(groups_dir).map_err(|e| Error::io("fsync dir", groups_dir, e))?;
        }
        st.map = map;
        // The snapshot sorts before the (empty) log of the same stamp, so a later load replays
        // the snapshot and then everything appended to our log.
        let snapshot_len = write_snapshot(fs, dir, stamp, &st.map)?;
        remove_superseded(fs, dir, &listing, stamp);
        st.owner = Some(Owner {
            epoch,
            stamp,
            file,
            len: 0,
            appended: 0,
            synced: 0,
            sync_in_flight: false,
            sync_wanted: 0,
            poisoned: None,
            snapshot_len,
        });
        self.inner.synced.send_replace(0);
        Ok(entries(&st.map))
    }

    /// Reads the shard's live state without owning it (another broker may be writing it): what
    /// is durable there, or a little more — a torn tail is ignored, files a compaction removes
    /// under the read are listed again. For reports only; never a basis for a write.
    pub fn peek(fs: &dyn kaas_shared::fs::Fs, dir: &Path) -> Result<BTreeMap<String, Vec<u8>>> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let listing = listing::list(fs, dir)?;
            match load(fs, dir, &listing) {
                Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound && attempt < LOAD_ATTEMPTS => {}
                other => return other,
            }
        }
    }

    /// Appends one atomic change (all entries or, after a crash, none) to the log's page cache
    /// and applies it to the live state. Returns its sequence number: it is durable once
    /// [`ShardLog::wait_durable`] of that number resolves.
    pub fn append(&self, changes: &[Entry]) -> Result<u64> {
        let bytes = frame::encode(changes).ok_or_else(|| Error::TooLarge(changes.iter().map(|e| e.key.len() + e.value.as_ref().map_or(0, Vec::len)).sum()))?;
        let mut st = self.lock();
        let owner = st.writable()?;
        if let Err(e) = owner.file.write_all_at(&bytes, owner.len) {
            let reason = format!("group log write failed: {e}");
            owner.poisoned = Some(reason.clone());
            drop(st);
            self.wake();
            return Err(Error::Poisoned(reason));
        }
        owner.len += bytes.len() as u64;
        owner.appended += 1;
        let seq = owner.appended;
        for change in changes {
            match &change.value {
                Some(v) => st.map.insert(change.key.clone(), v.clone()),
                None => st.map.remove(&change.key),
            };
        }
        Ok(seq)
    }

    /// The live value of `key`.
    pub fn get(&self, key: &str) -> Option<Vec<u8>> {
        self.lock().map.get(key).cloned()
    }

    /// Whether the log has grown enough that a snapshot would shrink the shard.
    pub fn needs_compaction(&self) -> bool {
        let st = self.lock();
        st.owner.as_ref().is_some_and(|o| o.poisoned.is_none() && o.len > COMPACT_MIN_BYTES && o.len > COMPACT_RATIO * o.snapshot_len.max(1))
    }

    /// Writes the live state as a snapshot and starts a fresh log after it; everything
    /// appended so far becomes durable with the snapshot. Blocking I/O: call off the executor.
    pub fn compact(&self) -> Result<()> {
        let mut st = self.lock();
        st.writable()?;
        let (fs, dir) = (&*self.inner.fs, &*self.inner.dir);
        let listing = listing::list(fs, dir)?;
        let Some(owner) = st.owner.as_ref() else { return Err(Error::NotOwner) };
        let epoch = owner.epoch;
        if listing.max_epoch > epoch {
            return Err(Error::Fenced { path: dir.to_owned(), requested: epoch, current: listing.max_epoch });
        }
        let stamp = listing.next_stamp(epoch);
        let snapshot_len = write_snapshot(fs, dir, stamp, &st.map)?;
        let file = create_log(fs, dir, stamp)?;
        // The snapshot makes every append durable, but a new owner may have claimed the shard
        // while we wrote it and loaded the state without it: check, as after every fdatasync.
        if let Some(newer) = newer_epoch(fs, dir, epoch)? {
            st.depose(dir, epoch, newer);
            drop(st);
            self.wake();
            return Err(Error::Fenced { path: dir.to_owned(), requested: epoch, current: newer });
        }
        remove_superseded(fs, dir, &listing, stamp);
        st.generation += 1;
        let Some(owner) = st.owner.as_mut() else { return Err(Error::NotOwner) };
        owner.stamp = stamp;
        owner.file = file;
        owner.len = 0;
        owner.snapshot_len = snapshot_len;
        owner.synced = owner.appended;
        owner.sync_in_flight = false;
        drop(st);
        self.wake();
        Ok(())
    }

    /// Ownership handover: persists the live state as a snapshot (so the next owner loads one
    /// file) and closes the log. If the volume already carries a newer epoch, a new owner has
    /// taken over: nothing is written, the descriptor is still closed. Idempotent.
    pub fn relinquish(&self) -> Result<()> {
        let mut st = self.lock();
        let Some(owner) = st.owner.as_ref() else { return Ok(()) };
        let (fs, dir) = (&*self.inner.fs, &*self.inner.dir);
        let result = (|| {
            if let Some(reason) = &owner.poisoned {
                return Err(Error::Poisoned(reason.clone()));
            }
            let listing = listing::list(fs, dir)?;
            if listing.max_epoch > owner.epoch {
                tracing::info!(dir = %dir.display(), epoch = owner.epoch, "group shard superseded; relinquishing without persisting");
                return Ok(());
            }
            let stamp = listing.next_stamp(owner.epoch);
            write_snapshot(fs, dir, stamp, &st.map)?;
            remove_superseded(fs, dir, &listing, stamp);
            Ok(())
        })();
        st.release();
        drop(st);
        self.wake();
        result
    }

    /// The shard is being deleted or moved without a handover: closes the log, writes nothing.
    /// The log is unusable afterwards; open a new one.
    pub fn abandon(&self) {
        let mut st = self.lock();
        st.release();
        st.abandoned = true;
        drop(st);
        self.wake();
    }

    /// Wakes durability waiters so they re-check the state.
    fn wake(&self) {
        let synced = self.lock().owner.as_ref().map_or(0, |o| o.synced);
        self.inner.synced.send_replace(synced);
    }
}

impl State {
    fn writable(&mut self) -> Result<&mut Owner> {
        let owner = self.owner.as_mut().ok_or(Error::NotOwner)?;
        match &owner.poisoned {
            Some(reason) => Err(Error::Poisoned(reason.clone())),
            None => Ok(owner),
        }
    }

    /// A newer owner's files are on the volume: nothing appended since the last check may be
    /// acknowledged, and nothing more is accepted.
    fn depose(&mut self, dir: &Path, epoch: i32, newer: i32) {
        tracing::info!(dir = %dir.display(), epoch, newer, reason = "a newer owner took the shard over", "shard deposed: not acknowledging the last appends");
        self.release();
    }

    /// Drops the descriptor and the state; the shard is known by name only afterwards.
    fn release(&mut self) {
        self.owner = None;
        self.map.clear();
        self.generation += 1;
    }
}

/// The newest epoch on the volume when it is newer than `epoch` (this owner was deposed).
fn newer_epoch(fs: &dyn kaas_shared::fs::Fs, dir: &Path, epoch: i32) -> Result<Option<i32>> {
    let max = kaas_shared::epochs::stored_shard_epoch(fs, dir)?;
    Ok((max > epoch).then_some(max))
}

fn entries(map: &BTreeMap<String, Vec<u8>>) -> Vec<Entry> {
    map.iter().map(|(k, v)| Entry::put(k.clone(), v.clone())).collect()
}

fn path_of(dir: &Path, stamp: Stamp, kind: GroupFileKind) -> Result<PathBuf> {
    Ok(dir.join(group_file_name(stamp.0, stamp.1, kind)?))
}

/// Replays the newest snapshot and every log at or after it.
fn load(fs: &dyn kaas_shared::fs::Fs, dir: &Path, listing: &Listing) -> Result<BTreeMap<String, Vec<u8>>> {
    let mut map = BTreeMap::new();
    let from = listing.newest_snapshot();
    if let Some(stamp) = from {
        let path = path_of(dir, stamp, GroupFileKind::Snapshot)?;
        let bytes = read_optional(fs, &path).map_err(|e| Error::io("read", &path, e))?.ok_or_else(|| Error::io("read", &path, std::io::ErrorKind::NotFound.into()))?;
        let decoded = frame::decode(&bytes);
        // A snapshot was fsynced before it got its name: it is whole, or something is wrong.
        if decoded.valid_len != bytes.len() {
            return Err(Error::CorruptSnapshot { path, reason: format!("{} of {} bytes decode", decoded.valid_len, bytes.len()) });
        }
        apply(&mut map, decoded.entries);
    }
    for f in listing.files.iter().filter(|f| f.kind == GroupFileKind::Log) {
        let stamp = listing::stamp(f);
        // Logs before the newest snapshot are folded into it, including a deposed owner's
        // appends made after the new owner's take-over: those are discarded by design.
        if from.is_some_and(|s| stamp < s) {
            continue;
        }
        let path = path_of(dir, stamp, GroupFileKind::Log)?;
        let bytes = read_optional(fs, &path).map_err(|e| Error::io("read", &path, e))?.ok_or_else(|| Error::io("read", &path, std::io::ErrorKind::NotFound.into()))?;
        let decoded = frame::decode(&bytes);
        if decoded.valid_len != bytes.len() {
            tracing::info!(path = %path.display(), kept = decoded.valid_len, len = bytes.len(), "group log has a torn tail; ignoring it");
        }
        apply(&mut map, decoded.entries);
    }
    Ok(map)
}

fn apply(map: &mut BTreeMap<String, Vec<u8>>, entries: Vec<Entry>) {
    for e in entries {
        match e.value {
            Some(v) => map.insert(e.key, v),
            None => map.remove(&e.key),
        };
    }
}

/// Writes the snapshot by temp + fsync + rename + directory fsync; returns its size.
fn write_snapshot(fs: &dyn kaas_shared::fs::Fs, dir: &Path, stamp: Stamp, map: &BTreeMap<String, Vec<u8>>) -> Result<u64> {
    let all: Vec<Entry> = entries(map);
    let mut bytes = Vec::new();
    for chunk in all.chunks(SNAPSHOT_FRAME_ENTRIES) {
        bytes.extend(frame::encode(chunk).ok_or(Error::TooLarge(frame::MAX_FRAME))?);
    }
    write_atomic(fs, &path_of(dir, stamp, GroupFileKind::Snapshot)?, &bytes)?;
    Ok(bytes.len() as u64)
}

/// Creates the log that follows the snapshot of the same stamp, by exclusive create.
fn create_log(fs: &dyn kaas_shared::fs::Fs, dir: &Path, stamp: Stamp) -> Result<Arc<dyn File>> {
    let path = path_of(dir, stamp, GroupFileKind::Log)?;
    let file = fs.open(&path, OpenMode::CreateNew).map_err(|e| Error::io("create", &path, e))?;
    // fsync the directory: a commit acknowledged from this log must not lose the log's name.
    fs.sync_dir(dir).map_err(|e| Error::io("fsync dir", dir, e))?;
    Ok(file)
}

/// Removes files the snapshot at `stamp` supersedes, and leftover temp files. Failure is not
/// fatal: a load ignores superseded files, and every later take-over and compaction re-drives
/// this same removal until it succeeds (an NFS `.nfsXXXX` ghost pins nothing we need).
fn remove_superseded(fs: &dyn kaas_shared::fs::Fs, dir: &Path, listing: &Listing, stamp: Stamp) {
    let old = listing.files.iter().filter(|f| listing::stamp(f) < stamp).filter_map(|f| group_file_name(f.epoch, f.generation, f.kind).ok());
    for name in old.chain(listing.temps.iter().cloned()) {
        let path = dir.join(&name);
        match fs.remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => tracing::info!(path = %path.display(), error = %e, "cannot remove a superseded group file yet; the next compaction retries"),
        }
    }
}

#[cfg(test)]
mod tests;
