//! The fault table: what the control socket (or the in-process API) injected, and the
//! decisions the filesystem asks of it on every operation. Pure bookkeeping, no I/O, so it is
//! unit-tested without a mount.

use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

use crate::error::Error;

/// Which mounts a fault applies to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MountSel {
    /// Every mount.
    All,
    /// The mount (simulated host) of this name.
    Named(String),
}

impl MountSel {
    /// `*` is every mount, anything else a mount name.
    pub fn parse(s: &str) -> MountSel {
        if s == "*" {
            MountSel::All
        } else {
            MountSel::Named(s.to_string())
        }
    }

    fn matches(&self, mount: &str) -> bool {
        match self {
            MountSel::All => true,
            MountSel::Named(n) => n == mount,
        }
    }
}

/// The error an I/O fault returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum FaultErrno {
    /// EIO: a failing server or disk.
    Eio,
    /// ENOSPC: a full volume.
    Enospc,
}

impl FaultErrno {
    /// `EIO` or `ENOSPC` (case-insensitive).
    pub fn parse(s: &str) -> Result<FaultErrno, Error> {
        match s.to_ascii_uppercase().as_str() {
            "EIO" => Ok(FaultErrno::Eio),
            "ENOSPC" => Ok(FaultErrno::Enospc),
            _ => Err(Error::Command(format!(
                "unknown errno {s:?} (EIO or ENOSPC)"
            ))),
        }
    }

    /// The raw errno value.
    pub fn code(self) -> i32 {
        match self {
            FaultErrno::Eio => libc::EIO,
            FaultErrno::Enospc => libc::ENOSPC,
        }
    }
}

/// Which operation an I/O fault breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FaultOp {
    /// write(2): bytes past the budget fail (a write straddling it is short).
    Write,
    /// fsync/fdatasync: fails once the budget of written bytes is used up.
    Fsync,
}

/// An injected fault.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Fault {
    /// EIO/ENOSPC on writes or fsyncs after `after_bytes` more bytes written through the
    /// matching mount (and path prefix).
    Io {
        /// The mounts it applies to.
        mount: MountSel,
        /// Writes or fsyncs.
        op: FaultOp,
        /// The error returned.
        errno: FaultErrno,
        /// Bytes still allowed before the fault fires; counts down as matching writes land.
        after_bytes: u64,
        /// Only paths under this one (relative to the volume root); `None` = every path.
        prefix: Option<PathBuf>,
    },
    /// ESTALE on every operation on this path or under it, as a server that lost the file
    /// handle answers.
    Estale {
        /// The mounts it applies to.
        mount: MountSel,
        /// The path, relative to the volume root.
        path: PathBuf,
    },
    /// A delay before every operation, as a slow or distant server.
    Delay {
        /// The mounts it applies to.
        mount: MountSel,
        /// Milliseconds per operation.
        millis: u64,
    },
}

/// The faults in force.
#[derive(Debug, Default, Clone, Serialize)]
pub struct Faults {
    faults: Vec<Fault>,
}

/// What a write may do under the faults in force.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteVerdict {
    /// Write everything.
    Full,
    /// Write only this many bytes (a short write; the next one fails).
    Short(usize),
    /// Fail with this errno, writing nothing.
    Fail(i32),
}

impl Faults {
    /// Adds a fault (after normalising its paths).
    pub fn add(&mut self, mut fault: Fault) {
        match &mut fault {
            Fault::Io {
                prefix: Some(p), ..
            } => *p = normalize(p),
            Fault::Estale { path, .. } => *path = normalize(path),
            _ => {}
        }
        self.faults.push(fault);
    }

    /// Removes every fault, or those naming `mount` (a `*` fault is removed only by a full
    /// clear).
    pub fn clear(&mut self, mount: Option<&str>) {
        match mount {
            None => self.faults.clear(),
            Some(m) => self
                .faults
                .retain(|f| !matches!(mount_of(f), MountSel::Named(n) if n == m)),
        }
    }

    /// The faults in force.
    pub fn list(&self) -> &[Fault] {
        &self.faults
    }

    /// The per-operation delay for `mount` (the largest that applies).
    pub fn delay(&self, mount: &str) -> Option<Duration> {
        self.faults
            .iter()
            .filter_map(|f| match f {
                Fault::Delay { mount: sel, millis } if sel.matches(mount) => Some(*millis),
                _ => None,
            })
            .max()
            .map(Duration::from_millis)
    }

    /// Whether operations on `path` through `mount` must fail with ESTALE.
    pub fn stale(&self, mount: &str, path: &Path) -> bool {
        self.faults.iter().any(|f| match f {
            Fault::Estale {
                mount: sel,
                path: p,
            } => sel.matches(mount) && under(path, p),
            _ => false,
        })
    }

    /// Decides a write of `len` bytes to `path` through `mount`, and charges the bytes it
    /// allows against every matching budget (write and fsync faults alike: an fsync fault
    /// fires once enough bytes have been written after it was injected).
    pub fn on_write(&mut self, mount: &str, path: &Path, len: usize) -> WriteVerdict {
        let mut allowed = len as u64;
        let mut errno = None;
        for f in &self.faults {
            if let Fault::Io {
                mount: sel,
                op: FaultOp::Write,
                errno: e,
                after_bytes,
                prefix,
            } = f
                && sel.matches(mount)
                && prefix.as_deref().is_none_or(|p| under(path, p))
                && *after_bytes < allowed
            {
                allowed = *after_bytes;
                errno = Some(e.code());
            }
        }
        if allowed == 0
            && let Some(code) = errno
        {
            return WriteVerdict::Fail(code);
        }
        for f in &mut self.faults {
            if let Fault::Io {
                mount: sel,
                after_bytes,
                prefix,
                ..
            } = f
                && sel.matches(mount)
                && prefix.as_deref().is_none_or(|p| under(path, p))
            {
                *after_bytes = after_bytes.saturating_sub(allowed);
            }
        }
        if allowed < len as u64 {
            // `allowed` < `len`, so it fits in usize.
            WriteVerdict::Short(allowed as usize)
        } else {
            WriteVerdict::Full
        }
    }

    /// The errno an fsync of `path` through `mount` must fail with, if any: an fsync fault
    /// whose byte budget is used up.
    pub fn on_fsync(&self, mount: &str, path: &Path) -> Option<i32> {
        self.faults.iter().find_map(|f| match f {
            Fault::Io {
                mount: sel,
                op: FaultOp::Fsync,
                errno,
                after_bytes: 0,
                prefix,
            } if sel.matches(mount) && prefix.as_deref().is_none_or(|p| under(path, p)) => {
                Some(errno.code())
            }
            _ => None,
        })
    }
}

fn mount_of(f: &Fault) -> &MountSel {
    match f {
        Fault::Io { mount, .. } | Fault::Estale { mount, .. } | Fault::Delay { mount, .. } => mount,
    }
}

/// A volume-relative path without a leading `/`, `.` components or a trailing slash, so
/// `/t/0/`, `t/0` and `./t/0` name the same thing.
pub fn normalize(p: &Path) -> PathBuf {
    p.components()
        .filter(|c| matches!(c, Component::Normal(_) | Component::ParentDir))
        .collect()
}

/// Whether `path` is `prefix` or below it, component-wise (`t/01` is not under `t/0`). The
/// empty prefix covers everything.
fn under(path: &Path, prefix: &Path) -> bool {
    path.starts_with(prefix)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io(op: FaultOp, after: u64, prefix: Option<&str>) -> Fault {
        Fault::Io {
            mount: MountSel::Named("a".into()),
            op,
            errno: FaultErrno::Enospc,
            after_bytes: after,
            prefix: prefix.map(PathBuf::from),
        }
    }

    #[test]
    fn write_budget_gives_a_short_write_then_fails() {
        let mut f = Faults::default();
        f.add(io(FaultOp::Write, 10, None));
        let p = Path::new("x");
        assert_eq!(f.on_write("a", p, 4), WriteVerdict::Full);
        assert_eq!(f.on_write("b", p, 100), WriteVerdict::Full, "other mount");
        assert_eq!(f.on_write("a", p, 8), WriteVerdict::Short(6));
        assert_eq!(f.on_write("a", p, 1), WriteVerdict::Fail(libc::ENOSPC));
        f.clear(Some("a"));
        assert_eq!(f.on_write("a", p, 1), WriteVerdict::Full);
    }

    #[test]
    fn fsync_fault_fires_after_the_budget() {
        let mut f = Faults::default();
        f.add(io(FaultOp::Fsync, 5, Some("/t/0/")));
        let inside = Path::new("t/0/00-0.log");
        assert_eq!(f.on_fsync("a", inside), None);
        assert_eq!(f.on_write("a", Path::new("t/01/x"), 50), WriteVerdict::Full);
        assert_eq!(
            f.on_fsync("a", inside),
            None,
            "bytes elsewhere do not count"
        );
        assert_eq!(f.on_write("a", inside, 5), WriteVerdict::Full);
        assert_eq!(f.on_fsync("a", inside), Some(libc::ENOSPC));
        assert_eq!(f.on_fsync("a", Path::new("t/1/x")), None);
    }

    #[test]
    fn estale_and_delay_match_mounts_and_subtrees() {
        let mut f = Faults::default();
        f.add(Fault::Estale {
            mount: MountSel::All,
            path: "./d/f".into(),
        });
        f.add(Fault::Delay {
            mount: MountSel::parse("b"),
            millis: 7,
        });
        assert!(f.stale("a", Path::new("d/f")));
        assert!(f.stale("b", Path::new("d/f/g")));
        assert!(!f.stale("a", Path::new("d/ff")));
        assert_eq!(f.delay("b"), Some(Duration::from_millis(7)));
        assert_eq!(f.delay("a"), None);
        f.clear(Some("b"));
        assert_eq!(f.delay("b"), None);
        assert!(
            f.stale("b", Path::new("d/f")),
            "a `*` fault survives a per-mount clear"
        );
        f.clear(None);
        assert!(f.list().is_empty());
    }
}
