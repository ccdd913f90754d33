//! Test support: an NFS-like volume over a temp backing directory with one mount per host,
//! fault injection, and unmount on drop. Two flavours with the same fault API
//! ([`FaultControl`]):
//!
//! - [`NfsVolume`]: served by threads of the test process itself (nothing to build first;
//!   what tests of other crates normally want);
//! - [`NfsProcess`]: the `kaas-nfsfs` binary as a child process, driven through its control
//!   socket (for tests that kill or signal the server, or that need its logs).
//!
//! ```no_run
//! use kaas_nfsfs::testing::{FaultControl, NfsVolume};
//! use kaas_nfsfs::faults::{FaultErrno, FaultOp};
//!
//! let vol = NfsVolume::start(&["a", "b"]).expect("FUSE must be available");
//! std::fs::write(vol.mount("a").join("f"), b"x").unwrap();
//! vol.fail(FaultOp::Write, "b", FaultErrno::Enospc, 0, None).unwrap();
//! assert!(std::fs::write(vol.mount("b").join("g"), b"y").is_err());
//! vol.clear().unwrap();
//! ```

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tempfile::TempDir;

use crate::control::{self, Command};
use crate::error::Error;
use crate::faults::{Fault, FaultErrno, FaultOp, Faults, MountSel};
use crate::fs::Options;
use crate::mounts::{self, MountSpec, Mounts};
use crate::server::READY;

/// Fault injection, whichever way the filesystem is served. Paths are volume-relative.
pub trait FaultControl {
    /// Executes one control command; returns the answer's payload.
    fn command(&self, cmd: Command) -> Result<String, Error>;

    /// Adds a fault.
    fn inject(&self, fault: Fault) -> Result<(), Error> {
        self.command(Command::Inject(fault)).map(drop)
    }

    /// `op` (writes, or fsync/fdatasync) through `host` (`*` = every host) under `prefix` fail
    /// with `errno` once `after_bytes` more bytes were written. A write straddling the limit
    /// is short; an fsync fault with 0 fails the next fsync.
    fn fail(
        &self,
        op: FaultOp,
        host: &str,
        errno: FaultErrno,
        after_bytes: u64,
        prefix: Option<&str>,
    ) -> Result<(), Error> {
        self.inject(Fault::Io {
            mount: MountSel::parse(host),
            op,
            errno,
            after_bytes,
            prefix: prefix.map(PathBuf::from),
        })
    }

    /// Every operation on `path` (or under it) through `host` fails with ESTALE.
    fn estale(&self, host: &str, path: &str) -> Result<(), Error> {
        self.inject(Fault::Estale {
            mount: MountSel::parse(host),
            path: PathBuf::from(path),
        })
    }

    /// Every operation through `host` first sleeps `millis`.
    fn delay(&self, host: &str, millis: u64) -> Result<(), Error> {
        self.inject(Fault::Delay {
            mount: MountSel::parse(host),
            millis,
        })
    }

    /// Removes every fault.
    fn clear(&self) -> Result<(), Error> {
        self.command(Command::Clear(None)).map(drop)
    }

    /// Removes the faults naming `host`.
    fn clear_host(&self, host: &str) -> Result<(), Error> {
        self.command(Command::Clear(Some(host.to_string())))
            .map(drop)
    }
}

/// The temp layout both flavours use: `<tmp>/backing` and `<tmp>/mnt/<host>`.
#[derive(Debug)]
struct Layout {
    // Dropped last: removing the temp tree needs the mounts gone first.
    dir: TempDir,
    backing: PathBuf,
    hosts: Vec<MountSpec>,
}

impl Layout {
    fn new(hosts: &[&str]) -> Result<Layout, Error> {
        let dir = tempfile::Builder::new()
            .prefix("kaas-nfsfs-")
            .tempdir()
            .map_err(|e| Error::io("create temp dir", std::env::temp_dir(), e))?;
        let backing = dir.path().join("backing");
        std::fs::create_dir(&backing).map_err(|e| Error::io("mkdir", &backing, e))?;
        let hosts = hosts
            .iter()
            .map(|h| format!("{h}={}", dir.path().join("mnt").join(h).display()).parse())
            .collect::<Result<Vec<MountSpec>, Error>>()?;
        Ok(Layout {
            dir,
            backing,
            hosts,
        })
    }

    /// The mount point of `host`. Panics on a host the volume was not started with (a bug in
    /// the calling test).
    fn mount(&self, host: &str) -> &Path {
        match self.hosts.iter().find(|s| s.name == host) {
            Some(s) => &s.path,
            None => panic!("no host {host:?} (hosts: {:?})", self.hosts),
        }
    }
}

/// An NFS-like volume served in process. Unmounts on drop (lazily if files are still open).
#[derive(Debug)]
pub struct NfsVolume {
    mounts: Option<Mounts>,
    faults: Arc<Mutex<Faults>>,
    layout: Layout,
}

impl NfsVolume {
    /// Mounts a fresh temp volume once per host, with the default [`Options`] (no caching,
    /// direct I/O). Fails with a message naming the cause where FUSE cannot be mounted.
    pub fn start(hosts: &[&str]) -> Result<NfsVolume, Error> {
        NfsVolume::start_with(hosts, Options::default())
    }

    /// As [`NfsVolume::start`], with explicit options.
    pub fn start_with(hosts: &[&str], options: Options) -> Result<NfsVolume, Error> {
        let layout = Layout::new(hosts)?;
        let faults = Arc::new(Mutex::new(Faults::default()));
        let mounts = Mounts::mount(&layout.backing, &layout.hosts, options, faults.clone())?;
        Ok(NfsVolume {
            mounts: Some(mounts),
            faults,
            layout,
        })
    }

    /// Where `host` sees the volume.
    pub fn mount(&self, host: &str) -> &Path {
        self.layout.mount(host)
    }

    /// The backing directory (the "server's" view, bypassing every NFS rule).
    pub fn backing(&self) -> &Path {
        &self.layout.backing
    }

    /// The temp directory holding the backing directory and the mount points.
    pub fn root(&self) -> &Path {
        self.layout.dir.path()
    }

    /// Unmounts every host; returns the hosts whose mount was still busy (detached lazily).
    pub fn unmount(mut self) -> Vec<String> {
        self.mounts.take().map(Mounts::unmount).unwrap_or_default()
    }
}

impl FaultControl for NfsVolume {
    fn command(&self, cmd: Command) -> Result<String, Error> {
        // No process to shut down: a `shutdown` command is accepted and ignored.
        let (tx, _rx) = mpsc::channel();
        control::execute(&self.faults, cmd, &tx)
    }
}

/// How long the process gets to mount everything.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long it gets to unmount after SIGTERM before it is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(15);

/// The `kaas-nfsfs` binary serving a temp volume, one mount per host. Stopped with SIGTERM
/// on drop; a mount left behind (process killed) is detached.
#[derive(Debug)]
pub struct NfsProcess {
    child: Option<Child>,
    socket: PathBuf,
    log: PathBuf,
    layout: Layout,
}

impl NfsProcess {
    /// The binary to run: `$KAAS_NFSFS_BIN`, else `kaas-nfsfs` in the cargo target directory
    /// of the running test (build it first: `cargo build -p kaas-nfsfs`).
    pub fn default_binary() -> PathBuf {
        if let Some(bin) = std::env::var_os("KAAS_NFSFS_BIN") {
            return PathBuf::from(bin);
        }
        // A test executable lives in target/<profile>/deps/.
        std::env::current_exe()
            .ok()
            .and_then(|exe| Some(exe.parent()?.parent()?.join("kaas-nfsfs")))
            .unwrap_or_else(|| PathBuf::from("kaas-nfsfs"))
    }

    /// Starts `bin` over a fresh temp volume with one mount per host and waits until it
    /// reports ready. `extra_args` go to the command line (e.g. `--attr-timeout-ms 500`).
    pub fn spawn(bin: &Path, hosts: &[&str], extra_args: &[&str]) -> Result<NfsProcess, Error> {
        let layout = Layout::new(hosts)?;
        let socket = layout.dir.path().join("control.sock");
        let log = layout.dir.path().join("kaas-nfsfs.log");
        let log_file = std::fs::File::create(&log).map_err(|e| Error::io("create", &log, e))?;
        let mut cmd = std::process::Command::new(bin);
        cmd.arg("--backing")
            .arg(&layout.backing)
            .arg("--control")
            .arg(&socket);
        for h in &layout.hosts {
            cmd.arg("--mount")
                .arg(format!("{}={}", h.name, h.path.display()));
        }
        cmd.args(extra_args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log_file);
        let mut child = cmd.spawn().map_err(|e| Error::io("spawn", bin, e))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| Error::Process("no stdout pipe".into()))?;
        let mut proc = NfsProcess {
            child: Some(child),
            socket,
            log,
            layout,
        };
        proc.wait_ready(stdout)?;
        Ok(proc)
    }

    fn wait_ready(&mut self, stdout: std::process::ChildStdout) -> Result<(), Error> {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) if line.trim() == READY => return Ok(()),
                Ok(_) => {}
                Err(_) => {
                    return Err(Error::Process(format!(
                        "not ready within {READY_TIMEOUT:?} (exited: {:?}); its log:\n{}",
                        self.child
                            .as_mut()
                            .and_then(|c| c.try_wait().ok().flatten()),
                        self.logs()
                    )));
                }
            }
        }
    }

    /// Where `host` sees the volume.
    pub fn mount(&self, host: &str) -> &Path {
        self.layout.mount(host)
    }

    /// The backing directory.
    pub fn backing(&self) -> &Path {
        &self.layout.backing
    }

    /// The control socket.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The process id (0 once stopped).
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Everything the process logged so far.
    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Sends SIGTERM and waits for a clean exit (SIGKILL after a timeout). Detaches any mount
    /// the process left behind, so nothing stays mounted either way.
    pub fn stop(&mut self) -> Result<ExitStatus, Error> {
        let Some(mut child) = self.child.take() else {
            return Err(Error::Process("already stopped".into()));
        };
        let status = terminate(&mut child);
        for h in &self.layout.hosts {
            mounts::detach(&h.path);
        }
        status
    }
}

fn terminate(child: &mut Child) -> Result<ExitStatus, Error> {
    let pid = i32::try_from(child.id())
        .map(nix::unistd::Pid::from_raw)
        .map_err(|_| Error::Process("pid out of range".into()))?;
    // ESRCH: it already exited; try_wait below reaps it.
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
    let deadline = Instant::now() + STOP_TIMEOUT;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Ok(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Ok(None) => {
                let _ = child.kill();
                return child
                    .wait()
                    .map_err(|e| Error::io("wait", "kaas-nfsfs", e))
                    .and_then(|s| {
                        Err(Error::Process(format!(
                            "killed after no exit on SIGTERM: {s}"
                        )))
                    });
            }
            Err(e) => return Err(Error::io("wait", "kaas-nfsfs", e)),
        }
    }
}

impl FaultControl for NfsProcess {
    fn command(&self, cmd: Command) -> Result<String, Error> {
        control::send(&self.socket, &cmd)
    }
}

impl Drop for NfsProcess {
    fn drop(&mut self) {
        if self.child.is_some()
            && let Err(e) = self.stop()
        {
            tracing::warn!(error = %e, "stopping kaas-nfsfs");
        }
    }
}
