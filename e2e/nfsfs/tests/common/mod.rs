//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kaas_nfsfs::Options;
use kaas_nfsfs::testing::NfsVolume;

/// RELEASE reaches the filesystem asynchronously after close(2); ghosts go within this.
pub(crate) const RELEASE_DEADLINE: Duration = Duration::from_secs(10);

/// The filesystem's log (silly renames, ghost removals, unmounts) in the test's output.
fn trace() {
    let _ = tracing_subscriber::fmt()
        .with_test_writer()
        .with_env_filter("kaas_nfsfs=info,fuser=warn")
        .try_init();
}

/// A volume with one mount per host. FUSE is required: no mount is a test failure.
pub(crate) fn volume(hosts: &[&str]) -> NfsVolume {
    trace();
    NfsVolume::start(hosts).unwrap_or_else(|e| {
        panic!("these tests need a working FUSE mount (/dev/fuse, root or fusermount3): {e}")
    })
}

/// As [`volume`], with options.
pub(crate) fn volume_with(hosts: &[&str], options: Options) -> NfsVolume {
    trace();
    NfsVolume::start_with(hosts, options).unwrap_or_else(|e| {
        panic!("these tests need a working FUSE mount (/dev/fuse, root or fusermount3): {e}")
    })
}

/// The errno of a failed operation; panics if it succeeded.
#[track_caller]
pub(crate) fn errno<T: std::fmt::Debug>(r: io::Result<T>) -> i32 {
    match r {
        Ok(v) => panic!("expected an error, got Ok({v:?})"),
        Err(e) => e
            .raw_os_error()
            .unwrap_or_else(|| panic!("error without errno: {e}")),
    }
}

/// `.nfs*` names in `dir`.
pub(crate) fn ghosts(dir: &Path) -> Vec<String> {
    fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read_dir {}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".nfs"))
        .collect()
}

/// Every `.nfs*` file below `root`, recursively.
pub(crate) fn ghosts_under(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let path = e.path();
            if e.file_name().to_string_lossy().starts_with(".nfs") {
                out.push(path);
            } else if e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(path);
            }
        }
    }
    out
}

/// Polls `cond` until it holds; panics with `what` after `timeout`.
#[track_caller]
pub(crate) fn wait_until(what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !cond() {
        if Instant::now() > deadline {
            panic!("timed out after {timeout:?} waiting until {what}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether `name` has the Linux NFS client's silly-rename form `.nfs<16 hex><8 hex>`.
pub(crate) fn is_silly_name(name: &str) -> bool {
    name.strip_prefix(".nfs")
        .is_some_and(|h| h.len() == 24 && h.bytes().all(|b| b.is_ascii_hexdigit()))
}
