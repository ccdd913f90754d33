//! The `kaas-nfsfs` process: mount every host, serve the control socket, and unmount cleanly
//! on SIGTERM/SIGINT, on the `shutdown` command, or once every mount was unmounted from
//! outside (`fusermount3 -u`).

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::time::Duration;

use nix::sys::signal::{SigSet, Signal};
use parking_lot::Mutex;

use crate::control;
use crate::error::Error;
use crate::faults::Faults;
use crate::fs::Options;
use crate::mounts::{MountSpec, Mounts};

/// The line printed on stdout once every mount and the control socket are up.
pub const READY: &str = "kaas-nfsfs ready";

/// What the process serves.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// The backing directory.
    pub backing: PathBuf,
    /// One mount per simulated host.
    pub mounts: Vec<MountSpec>,
    /// Where to listen for control commands.
    pub control: Option<PathBuf>,
    /// Mount options.
    pub options: Options,
}

/// The signals that stop the process.
fn stop_signals() -> SigSet {
    let mut set = SigSet::empty();
    set.add(Signal::SIGTERM);
    set.add(Signal::SIGINT);
    set.add(Signal::SIGHUP);
    set
}

/// Blocks the stop signals in the calling thread, so that every thread spawned afterwards
/// inherits the mask and only [`run`]'s waiter receives them. Call first thing in `main`.
pub fn block_stop_signals() -> Result<(), Error> {
    stop_signals()
        .thread_block()
        .map_err(|e| Error::io("block signals", "", e.into()))
}

/// Serves until told to stop, then unmounts everything.
pub fn run(config: ServeConfig) -> Result<(), Error> {
    let (stop_tx, stop_rx) = mpsc::channel();
    spawn_signal_waiter(stop_tx.clone())?;
    let faults = Arc::new(Mutex::new(Faults::default()));
    let mounts = Mounts::mount(
        &config.backing,
        &config.mounts,
        config.options,
        faults.clone(),
    )?;
    if let Some(sock) = &config.control {
        control::serve(sock, faults, stop_tx)?;
    }
    let mut out = std::io::stdout();
    writeln!(out, "{READY}")
        .and_then(|()| out.flush())
        .map_err(|e| Error::io("write", "stdout", e))?;
    tracing::info!(backing = %config.backing.display(), "serving");
    loop {
        match stop_rx.recv_timeout(Duration::from_millis(500)) {
            Ok(()) | Err(RecvTimeoutError::Disconnected) => break,
            Err(RecvTimeoutError::Timeout) if mounts.all_ended() => {
                tracing::info!("every mount was unmounted from outside");
                break;
            }
            Err(RecvTimeoutError::Timeout) => {}
        }
    }
    let lingering = mounts.unmount();
    if let Some(sock) = &config.control
        && let Err(e) = std::fs::remove_file(sock)
    {
        tracing::debug!(error = %e, "remove control socket");
    }
    if !lingering.is_empty() {
        // Exiting closes /dev/fuse, which ends the detached sessions (open files then fail).
        tracing::warn!(?lingering, "exiting with busy mounts detached");
    }
    Ok(())
}

fn spawn_signal_waiter(stop: Sender<()>) -> Result<(), Error> {
    std::thread::Builder::new()
        .name("nfsfs-signals".into())
        .spawn(move || {
            match stop_signals().wait() {
                Ok(sig) => tracing::info!(signal = %sig, "stopping"),
                Err(e) => tracing::warn!(error = %e, "waiting for signals"),
            }
            // The receiver is gone only if the process is already stopping.
            let _ = stop.send(());
        })
        .map(|_| ())
        .map_err(|e| Error::io("spawn signal thread", "", e))
}
