//! A value built from files (mounted Secrets: certificates, credentials) that is built again
//! when the files change, so a renewed Secret takes effect without a restart.
//!
//! At most once a second a reader compares the files' stamps (modification time, size, inode;
//! a Secret volume update swaps a symlink, which changes the inode) with those the value was
//! built from. A change that cannot be loaded (a half-updated Secret, a key that does not match
//! its certificate) keeps the previous value and is logged; the next check tries again.

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use parking_lot::Mutex;
use tokio::time::Instant;
use tracing::{info, warn};

/// How often the files are looked at again, at most.
pub const RECHECK: Duration = Duration::from_secs(1);

type Loader<T> = Box<dyn Fn() -> Result<T, String> + Send + Sync>;

/// `T` as built from `paths` the last time they changed.
pub struct Reloading<T> {
    what: &'static str,
    paths: Vec<PathBuf>,
    load: Loader<T>,
    current: Mutex<Current<T>>,
}

struct Current<T> {
    stamp: Stamp,
    value: T,
    checked: Instant,
}

impl<T> std::fmt::Debug for Reloading<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reloading").field("what", &self.what).field("paths", &self.paths).finish_non_exhaustive()
    }
}

/// The stamps of a set of files; a missing file has none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stamp(Vec<Option<(SystemTime, u64, u64)>>);

impl Stamp {
    pub fn of(paths: &[PathBuf]) -> Stamp {
        use std::os::unix::fs::MetadataExt;
        Stamp(paths.iter().map(|p| std::fs::metadata(p).ok().and_then(|m| Some((m.modified().ok()?, m.len(), m.ino())))).collect())
    }
}

impl<T: Clone> Reloading<T> {
    /// Starts from `first`, which the caller built from the files with `load` (or the same
    /// code), so a broker that cannot load its files at start reports a typed error and does
    /// not start; the stamps are taken before `first` was built, or a change in between would
    /// be missed.
    pub fn new(what: &'static str, paths: Vec<PathBuf>, stamped_before: Stamp, first: T, load: impl Fn() -> Result<T, String> + Send + Sync + 'static) -> Reloading<T> {
        Reloading { what, paths, load: Box::new(load), current: Mutex::new(Current { stamp: stamped_before, value: first, checked: Instant::now() }) }
    }

    /// Uses `value`, which the caller just wrote to the files: readers see it at once, not
    /// at the next check.
    pub fn replace(&self, value: T) {
        let mut current = self.current.lock();
        current.stamp = Stamp::of(&self.paths);
        current.value = value;
        current.checked = Instant::now();
    }

    /// The value of the files as they are now (checked at most once per [`RECHECK`]).
    pub fn get(&self) -> T {
        let mut current = self.current.lock();
        if current.checked.elapsed() < RECHECK {
            return current.value.clone();
        }
        current.checked = Instant::now();
        let stamp = Stamp::of(&self.paths);
        if stamp != current.stamp {
            match (self.load)() {
                Ok(value) => {
                    info!(what = self.what, files = ?self.paths, "files changed; using the new ones");
                    current.value = value;
                    current.stamp = stamp;
                }
                // The stamp stays as it was, so the next check tries again.
                Err(e) => warn!(what = self.what, files = ?self.paths, error = %e, "files changed but cannot be loaded; still using the previous ones"),
            }
        }
        current.value.clone()
    }
}
