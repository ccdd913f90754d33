//! Mounting the volume once per simulated host, and unmounting every mount again.

use std::io;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use fuser::{Config, MountOption, Session, SessionACL, SessionUnmounter};
use parking_lot::Mutex;

use crate::error::Error;
use crate::faults::Faults;
use crate::fs::{MountFs, Options, Volume};

/// `name=path`: a simulated host and where it mounts the volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountSpec {
    /// The host name (used by faults).
    pub name: String,
    /// The mount point (created if missing).
    pub path: PathBuf,
}

impl FromStr for MountSpec {
    type Err = Error;

    fn from_str(s: &str) -> Result<MountSpec, Error> {
        let bad = |reason: &str| Error::MountSpec {
            spec: s.to_string(),
            reason: reason.to_string(),
        };
        let (name, path) = s.split_once('=').ok_or_else(|| bad("expected NAME=PATH"))?;
        if name.is_empty() || name == "*" || name.contains(char::is_whitespace) {
            return Err(bad("the name must be non-empty, not `*`, without spaces"));
        }
        if path.is_empty() {
            return Err(bad("empty path"));
        }
        Ok(MountSpec {
            name: name.to_string(),
            path: PathBuf::from(path),
        })
    }
}

/// A mounted session.
#[derive(Debug)]
struct Mounted {
    spec: MountSpec,
    unmounter: SessionUnmounter,
    thread: JoinHandle<io::Result<()>>,
}

/// Every mount of one volume. Dropping it unmounts them.
#[derive(Debug)]
pub struct Mounts {
    volume: Arc<Volume>,
    mounted: Vec<Mounted>,
}

/// Serialises mounts within a process (see `mount_one`).
static MOUNT_LOCK: Mutex<()> = Mutex::new(());

/// How long an unmount waits for a session to wind down before leaving it detached (a
/// process still holding a file open on a lazily unmounted FUSE mount keeps it alive).
const UNMOUNT_GRACE: Duration = Duration::from_secs(5);

impl Mounts {
    /// Mounts `backing` at every spec, sharing `faults`. On an error, the mounts made so far
    /// are unmounted again.
    pub fn mount(
        backing: &Path,
        specs: &[MountSpec],
        options: Options,
        faults: Arc<Mutex<Faults>>,
    ) -> Result<Mounts, Error> {
        check_names(specs)?;
        preflight()?;
        let backing = backing
            .canonicalize()
            .map_err(|e| Error::io("backing directory", backing, e))?;
        let volume = Arc::new(Volume::new(backing, faults, options));
        let mut mounts = Mounts {
            volume,
            mounted: Vec::new(),
        };
        for spec in specs {
            let m = mounts.mount_one(spec)?;
            mounts.mounted.push(m);
        }
        Ok(mounts)
    }

    fn mount_one(&self, spec: &MountSpec) -> Result<Mounted, Error> {
        std::fs::create_dir_all(&spec.path)
            .map_err(|e| Error::io("create mount point", &spec.path, e))?;
        let fs = MountFs::new(&spec.name, self.volume.clone())
            .map_err(|e| Error::io("stat backing directory", self.volume.backing(), e))?;
        let options = self.volume.options();
        let mut config = Config::default();
        config.mount_options = vec![
            MountOption::FSName(format!("kaas-nfsfs:{}", spec.name)),
            MountOption::Subtype("kaas-nfsfs".into()),
            MountOption::DefaultPermissions,
        ];
        if options.auto_unmount {
            config.mount_options.push(MountOption::AutoUnmount);
        }
        // allow_other: the simulated hosts' processes need not run as the serving user.
        config.acl = SessionACL::All;
        config.n_threads = Some(options.threads.max(1));
        let mut session = {
            // fuser receives the /dev/fuse descriptor from fusermount3 without CLOEXEC and sets
            // it just after; a mount on another thread spawning its own fusermount3 in between
            // would leak it into that long-lived helper and keep this connection alive after
            // unmount. One mount at a time per process closes that window for our own spawns.
            let _one_at_a_time = MOUNT_LOCK.lock();
            Session::new(fs, &spec.path, &config).map_err(|e| Error::Mount {
                path: spec.path.clone(),
                source: e,
            })?
        };
        let unmounter = session.unmount_callable();
        let name = spec.name.clone();
        let thread = thread::Builder::new()
            .name(format!("nfsfs-{name}"))
            .spawn(move || {
                let result = session.run();
                if let Err(e) = &result {
                    tracing::warn!(mount = %name, error = %e, "session ended with an error");
                }
                result
            })
            .map_err(|e| Error::io("spawn session thread", &spec.path, e))?;
        tracing::info!(mount = %spec.name, path = %spec.path.display(), "mounted");
        Ok(Mounted {
            spec: spec.clone(),
            unmounter,
            thread,
        })
    }

    /// The shared volume.
    pub fn volume(&self) -> &Arc<Volume> {
        &self.volume
    }

    /// Whether every session has ended (all mounts were unmounted from outside).
    pub fn all_ended(&self) -> bool {
        self.mounted.iter().all(|m| m.thread.is_finished())
    }

    /// Unmounts every mount. A busy mount (files still open on it) is detached lazily, so the
    /// mount point is free at once; its session ends when the last file closes (or when the
    /// process exits). Returns the mounts whose session had not ended after a grace period.
    pub fn unmount(mut self) -> Vec<String> {
        self.unmount_all()
    }

    fn unmount_all(&mut self) -> Vec<String> {
        for m in &mut self.mounted {
            if let Err(e) = m.unmounter.unmount() {
                tracing::info!(mount = %m.spec.name, error = %e, "unmount refused; detaching lazily");
            }
            // Also covers the auto-unmount helper, which unmounts asynchronously: a detach of
            // what is already gone fails harmlessly.
            detach(&m.spec.path);
        }
        let deadline = Instant::now() + UNMOUNT_GRACE;
        let mut lingering = Vec::new();
        for m in self.mounted.drain(..) {
            while !m.thread.is_finished() && Instant::now() < deadline {
                thread::sleep(Duration::from_millis(20));
            }
            if m.thread.is_finished() {
                // The session already logged its error, if any.
                let _ = m.thread.join();
                tracing::info!(mount = %m.spec.name, "unmounted");
            } else {
                tracing::warn!(mount = %m.spec.name, "session still busy after unmount (files open)");
                lingering.push(m.spec.name);
            }
        }
        lingering
    }
}

impl Drop for Mounts {
    fn drop(&mut self) {
        if !self.mounted.is_empty() {
            self.unmount_all();
        }
    }
}

/// Lazily detaches whatever is mounted at `path`, if it is still a FUSE mount of ours.
pub fn detach(path: &Path) {
    if is_mounted(path) {
        match nix::mount::umount2(path, nix::mount::MntFlags::MNT_DETACH) {
            Ok(()) => tracing::info!(path = %path.display(), "detached"),
            Err(e) => tracing::warn!(path = %path.display(), error = %e, "cannot detach"),
        }
    }
}

/// Whether a kaas-nfsfs mount is at `path` (per /proc/self/mountinfo).
pub fn is_mounted(path: &Path) -> bool {
    // Canonicalize the parent only: stat-ing the mount point itself would ask the (maybe
    // busy, maybe dead) FUSE server.
    let path = match (path.parent().map(Path::canonicalize), path.file_name()) {
        (Some(Ok(parent)), Some(name)) => parent.join(name),
        _ => path.to_path_buf(),
    };
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let wanted = path.to_string_lossy();
    info.lines().any(|line| {
        let fields: Vec<&str> = line.split(' ').collect();
        fields.get(4).is_some_and(|mp| unescape(mp) == wanted) && line.contains("kaas-nfsfs")
    })
}

/// mountinfo escapes space, tab, newline and backslash as octal.
fn unescape(s: &str) -> String {
    s.replace("\\040", " ")
        .replace("\\011", "\t")
        .replace("\\012", "\n")
        .replace("\\134", "\\")
}

fn check_names(specs: &[MountSpec]) -> Result<(), Error> {
    for (i, s) in specs.iter().enumerate() {
        if specs[..i]
            .iter()
            .any(|o| o.name == s.name || o.path == s.path)
        {
            return Err(Error::MountSpec {
                spec: format!("{}={}", s.name, s.path.display()),
                reason: "duplicate name or mount point".into(),
            });
        }
    }
    if specs.is_empty() {
        return Err(Error::MountSpec {
            spec: String::new(),
            reason: "at least one --mount is needed".into(),
        });
    }
    Ok(())
}

/// Fails early, with a message that says what to install, where FUSE cannot work.
fn preflight() -> Result<(), Error> {
    let dev = Path::new("/dev/fuse");
    if let Err(e) = std::fs::OpenOptions::new().read(true).write(true).open(dev) {
        return Err(Error::Mount {
            path: dev.to_path_buf(),
            source: e,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_specs_parse_and_refuse_bad_names() {
        let s: MountSpec = "host-a=/mnt/a".parse().expect("valid");
        assert_eq!(s.name, "host-a");
        assert_eq!(s.path, PathBuf::from("/mnt/a"));
        assert!("=/mnt/a".parse::<MountSpec>().is_err());
        assert!("*=/mnt/a".parse::<MountSpec>().is_err());
        assert!("a".parse::<MountSpec>().is_err());
        let dup = [
            "a=/x".parse().expect("valid"),
            "a=/y".parse().expect("valid"),
        ];
        assert!(check_names(&dup).is_err());
    }

    #[test]
    fn mountinfo_escapes_are_undone() {
        assert_eq!(unescape("/tmp/a\\040b"), "/tmp/a b");
    }
}
