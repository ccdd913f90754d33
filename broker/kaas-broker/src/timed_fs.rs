//! The volume's filesystem with its syncs timed: every fdatasync, fsync and directory fsync the
//! broker makes is observed (duration, and bytes written since the file's last sync), by the
//! kind of file, so `/metrics` shows whether the disk keeps up with the group commit. A
//! decorator over [`Fs`], so storage and coordinators stay unaware of metrics.

use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use kaas_shared::fs::{Dir, DirEntry, File, Fs, FsRef, OpenMode};
use kaas_shared::names;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

type SyncLabel = [(&'static str, &'static str); 2];

fn seconds_histogram() -> Histogram {
    // 50 µs (a page-cache-only sync) to ~26 s (a stalled NFS server).
    Histogram::new(exponential_buckets(0.00005, 2.0, 20))
}

fn bytes_histogram() -> Histogram {
    // 512 B to 2 GiB.
    Histogram::new(exponential_buckets(512.0, 4.0, 12))
}

/// The sync histograms. Clones share them.
#[derive(Debug, Clone)]
pub struct SyncMetrics {
    seconds: Family<SyncLabel, Histogram, fn() -> Histogram>,
    bytes: Family<SyncLabel, Histogram, fn() -> Histogram>,
}

impl Default for SyncMetrics {
    fn default() -> SyncMetrics {
        SyncMetrics {
            seconds: Family::new_with_constructor(seconds_histogram as fn() -> Histogram),
            bytes: Family::new_with_constructor(bytes_histogram as fn() -> Histogram),
        }
    }
}

impl SyncMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "fsync_seconds",
            "Duration of each fdatasync/fsync/directory fsync on the volume, by file kind (segment, partition_metadata, groups, transactions, cluster) and call",
            self.seconds.clone(),
        );
        registry.register(
            "fsync_bytes",
            "Bytes written to a file since its previous sync, observed at each sync (for segments: the bytes one group commit made durable)",
            self.bytes.clone(),
        );
    }

    fn observe(&self, kind: &'static str, call: &'static str, started: Instant, bytes: Option<u64>) {
        let label = [("file", kind), ("call", call)];
        self.seconds.get_or_create(&label).observe(started.elapsed().as_secs_f64());
        if let Some(bytes) = bytes {
            self.bytes.get_or_create(&label).observe(bytes as f64);
        }
    }

    /// Syncs observed for `kind`/`call` (tests).
    #[cfg(test)]
    pub fn count(&self, kind: &'static str, call: &'static str) -> u64 {
        let mut text = String::new();
        let mut registry = Registry::default();
        registry.register("s", "", self.seconds.clone());
        if prometheus_client::encoding::text::encode(&mut text, &registry).is_err() {
            return 0;
        }
        let prefix = format!("s_count{{file=\"{kind}\",call=\"{call}\"}} ");
        text.lines().find_map(|l| l.strip_prefix(&prefix)).and_then(|v| v.trim().parse().ok()).unwrap_or(0)
    }
}

/// `inner` with its syncs observed; paths are classified relative to `root`.
#[derive(Debug)]
pub struct TimedFs {
    inner: FsRef,
    root: PathBuf,
    metrics: SyncMetrics,
}

impl TimedFs {
    pub fn wrap(inner: FsRef, root: &Path, metrics: SyncMetrics) -> FsRef {
        Arc::new(TimedFs { inner, root: root.to_path_buf(), metrics })
    }

    /// What a path holds, from where it sits in the volume layout.
    fn kind(&self, path: &Path) -> &'static str {
        let relative = path.strip_prefix(&self.root).unwrap_or(path);
        let mut parts = relative.components().filter_map(|c| match c {
            Component::Normal(s) => s.to_str(),
            _ => None,
        });
        match (parts.next(), parts.next()) {
            (Some(names::CLUSTER_DIR), Some(names::GROUPS_DIR)) => "groups",
            (Some(names::CLUSTER_DIR), Some(names::TRANSACTIONS_DIR)) => "transactions",
            (Some(names::CLUSTER_DIR), _) => "cluster",
            _ if path.extension().is_some_and(|e| e == "log") => "segment",
            _ => "partition_metadata",
        }
    }
}

impl Fs for TimedFs {
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        self.inner.create_dir_all(path)
    }
    fn list_dir_sized(&self, path: &Path, sized: &dyn Fn(&str) -> bool) -> io::Result<Vec<DirEntry>> {
        self.inner.list_dir_sized(path, sized)
    }
    fn stat(&self, path: &Path) -> io::Result<DirEntry> {
        self.inner.stat(path)
    }
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Arc<dyn File>> {
        let inner = self.inner.open(path, mode)?;
        Ok(self.timed(inner, path, mode))
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.inner.remove_file(path)
    }
    fn remove_dir(&self, path: &Path) -> io::Result<()> {
        self.inner.remove_dir(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.inner.rename(from, to)
    }
    fn hard_link(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.inner.hard_link(from, to)
    }
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        self.timed_dir_sync(path, || self.inner.sync_dir(path))
    }
    fn open_dir(&self, path: &Path) -> io::Result<Box<dyn Dir + '_>> {
        Ok(Box::new(TimedDir { fs: self, inner: self.inner.open_dir(path)? }))
    }
}

impl TimedFs {
    /// A file opened for writing, with its syncs observed.
    fn timed(&self, inner: Arc<dyn File>, path: &Path, mode: OpenMode) -> Arc<dyn File> {
        if mode == OpenMode::Read {
            return inner; // Never synced: no wrapper on the read path.
        }
        Arc::new(TimedFile { inner, kind: self.kind(path), metrics: self.metrics.clone(), unsynced: AtomicU64::new(0) })
    }

    fn timed_dir_sync(&self, path: &Path, sync: impl FnOnce() -> io::Result<()>) -> io::Result<()> {
        let started = Instant::now();
        let synced = sync();
        self.metrics.observe(self.kind(path), "dir", started, None);
        synced
    }
}

/// A held directory of a [`TimedFs`]: the same observations as by path.
#[derive(Debug)]
struct TimedDir<'a> {
    fs: &'a TimedFs,
    inner: Box<dyn Dir + 'a>,
}

impl Dir for TimedDir<'_> {
    fn path(&self) -> &Path {
        self.inner.path()
    }
    fn open(&self, name: &str, mode: OpenMode) -> io::Result<Arc<dyn File>> {
        let inner = self.inner.open(name, mode)?;
        Ok(self.fs.timed(inner, &self.inner.path().join(name), mode))
    }
    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        self.inner.rename(from, to)
    }
    fn remove_file(&self, name: &str) -> io::Result<()> {
        self.inner.remove_file(name)
    }
    fn sync(&self) -> io::Result<()> {
        self.fs.timed_dir_sync(self.inner.path(), || self.inner.sync())
    }
    fn list_sized(&self, sized: &dyn Fn(&str) -> bool) -> io::Result<Vec<DirEntry>> {
        self.inner.list_sized(sized)
    }
    fn parent(&self) -> io::Result<Box<dyn Dir + '_>> {
        Ok(Box::new(TimedDir { fs: self.fs, inner: self.inner.parent()? }))
    }
}

#[derive(Debug)]
struct TimedFile {
    inner: Arc<dyn File>,
    kind: &'static str,
    metrics: SyncMetrics,
    /// Bytes written since the last sync began.
    unsynced: AtomicU64,
}

impl TimedFile {
    fn timed(&self, call: &'static str, sync: impl FnOnce() -> io::Result<()>) -> io::Result<()> {
        let bytes = self.unsynced.swap(0, Ordering::Relaxed);
        let started = Instant::now();
        let synced = sync();
        self.metrics.observe(self.kind, call, started, Some(bytes));
        synced
    }
}

impl File for TimedFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.inner.read_at(buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.inner.write_all_at(buf, offset)?;
        self.unsynced.fetch_add(buf.len() as u64, Ordering::Relaxed);
        Ok(())
    }
    fn write_all_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> io::Result<()> {
        self.inner.write_all_vectored_at(bufs, offset)?;
        let len: usize = bufs.iter().map(|b| b.len()).sum();
        self.unsynced.fetch_add(len as u64, Ordering::Relaxed);
        Ok(())
    }
    fn sync_data(&self) -> io::Result<()> {
        self.timed("fdatasync", || self.inner.sync_data())
    }
    fn sync_all(&self) -> io::Result<()> {
        self.timed("fsync", || self.inner.sync_all())
    }
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.inner.set_len(len)
    }
    fn as_std(&self) -> Option<&std::fs::File> {
        self.inner.as_std()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kaas_shared::fs::MemFs;

    #[test]
    fn syncs_are_observed_by_file_kind() -> io::Result<()> {
        let metrics = SyncMetrics::default();
        let root = Path::new("/volume");
        let fs = TimedFs::wrap(Arc::new(MemFs::new()), root, metrics.clone());
        fs.create_dir_all(&root.join("orders/0"))?;
        let segment = fs.open(&root.join("orders/0/0000000000-00000000000000000000.log"), OpenMode::CreateNew)?;
        segment.write_all_at(&[1; 4096], 0)?;
        segment.sync_data()?;
        segment.sync_data()?;
        fs.sync_dir(&root.join("orders/0"))?;
        fs.create_dir_all(&root.join("__cluster/groups/0000"))?;
        let group_log = fs.open(&root.join("__cluster/groups/0000/log"), OpenMode::CreateNew)?;
        group_log.sync_all()?;
        assert_eq!(metrics.count("segment", "fdatasync"), 2);
        assert_eq!(metrics.count("partition_metadata", "dir"), 1);
        assert_eq!(metrics.count("groups", "fsync"), 1);
        assert_eq!(metrics.count("cluster", "fsync"), 0);
        Ok(())
    }
}
