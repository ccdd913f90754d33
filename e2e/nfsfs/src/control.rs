//! The control protocol: one command per line on a Unix socket, one answer line per command.
//! Text rather than JSON so that a shell (`socat`, `nc -U`) or the Go e2e harness can drive it.
//!
//! ```text
//! write-error <mount|*> <EIO|ENOSPC> <after-bytes> [path-prefix]
//! fsync-error <mount|*> <EIO|ENOSPC> <after-bytes> [path-prefix]
//! estale <mount|*> <path>
//! delay <mount|*> <millis>
//! clear [mount]
//! list                      -> ok [<faults as JSON>]
//! ping
//! shutdown                  -> unmounts everything and exits
//! ```
//! Answers are `ok`, `ok <json>` or `err <message>`. Paths are relative to the volume root (a
//! leading `/` is ignored) and cannot contain whitespace.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::Sender;
use std::thread;

use parking_lot::Mutex;

use crate::error::Error;
use crate::faults::{Fault, FaultErrno, FaultOp, Faults, MountSel};

/// A parsed control command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Add a fault.
    Inject(Fault),
    /// Remove the faults of one mount, or all.
    Clear(Option<String>),
    /// Answer the faults in force.
    List,
    /// Answer `ok`.
    Ping,
    /// Unmount everything and exit.
    Shutdown,
}

impl Command {
    /// Parses one command line.
    pub fn parse(line: &str) -> Result<Command, Error> {
        let words: Vec<&str> = line.split_whitespace().collect();
        let bad = || Error::Command(format!("cannot parse {line:?}"));
        let number = |s: &str| s.parse::<u64>().map_err(|_| bad());
        match words.as_slice() {
            [
                op @ ("write-error" | "fsync-error"),
                mount,
                errno,
                after,
                rest @ ..,
            ] if rest.len() <= 1 => Ok(Command::Inject(Fault::Io {
                mount: MountSel::parse(mount),
                op: if *op == "write-error" {
                    FaultOp::Write
                } else {
                    FaultOp::Fsync
                },
                errno: FaultErrno::parse(errno)?,
                after_bytes: number(after)?,
                prefix: rest.first().map(PathBuf::from),
            })),
            ["estale", mount, path] => Ok(Command::Inject(Fault::Estale {
                mount: MountSel::parse(mount),
                path: PathBuf::from(path),
            })),
            ["delay", mount, millis] => Ok(Command::Inject(Fault::Delay {
                mount: MountSel::parse(mount),
                millis: number(millis)?,
            })),
            ["clear"] => Ok(Command::Clear(None)),
            ["clear", mount] => Ok(Command::Clear(Some((*mount).to_string()))),
            ["list"] => Ok(Command::List),
            ["ping"] => Ok(Command::Ping),
            ["shutdown"] => Ok(Command::Shutdown),
            _ => Err(bad()),
        }
    }

    /// The line [`Command::parse`] reads back as this command.
    pub fn to_line(&self) -> String {
        let sel = |m: &MountSel| match m {
            MountSel::All => "*".to_string(),
            MountSel::Named(n) => n.clone(),
        };
        match self {
            Command::Inject(Fault::Io {
                mount,
                op,
                errno,
                after_bytes,
                prefix,
            }) => {
                let op = match op {
                    FaultOp::Write => "write-error",
                    FaultOp::Fsync => "fsync-error",
                };
                let errno = match errno {
                    FaultErrno::Eio => "EIO",
                    FaultErrno::Enospc => "ENOSPC",
                };
                let mut line = format!("{op} {} {errno} {after_bytes}", sel(mount));
                if let Some(p) = prefix {
                    line.push(' ');
                    line.push_str(&p.to_string_lossy());
                }
                line
            }
            Command::Inject(Fault::Estale { mount, path }) => {
                format!("estale {} {}", sel(mount), path.to_string_lossy())
            }
            Command::Inject(Fault::Delay { mount, millis }) => {
                format!("delay {} {millis}", sel(mount))
            }
            Command::Clear(None) => "clear".into(),
            Command::Clear(Some(m)) => format!("clear {m}"),
            Command::List => "list".into(),
            Command::Ping => "ping".into(),
            Command::Shutdown => "shutdown".into(),
        }
    }
}

/// Applies one command line to the fault table and returns the answer line.
pub fn apply(faults: &Mutex<Faults>, line: &str, shutdown: &Sender<()>) -> String {
    match Command::parse(line).and_then(|cmd| execute(faults, cmd, shutdown)) {
        Ok(answer) if answer.is_empty() => "ok".into(),
        Ok(answer) => format!("ok {answer}"),
        Err(e) => format!("err {e}"),
    }
}

/// Executes a command on the fault table; returns the answer's payload (empty but for
/// `list`). `Shutdown` is passed on through `shutdown` (the owner of the mounts unmounts).
pub fn execute(
    faults: &Mutex<Faults>,
    cmd: Command,
    shutdown: &Sender<()>,
) -> Result<String, Error> {
    match cmd {
        Command::Inject(fault) => {
            tracing::info!(?fault, "fault injected");
            faults.lock().add(fault);
        }
        Command::Clear(mount) => {
            tracing::info!(?mount, "faults cleared");
            faults.lock().clear(mount.as_deref());
        }
        Command::List => {
            return serde_json::to_string(&*faults.lock())
                .map_err(|e| Error::Command(e.to_string()));
        }
        Command::Ping => {}
        Command::Shutdown => {
            // The receiver is gone only when shutdown is already under way.
            let _ = shutdown.send(());
        }
    }
    Ok(String::new())
}

/// Serves the control socket at `path` on a background thread until the process exits.
pub fn serve(path: &Path, faults: Arc<Mutex<Faults>>, shutdown: Sender<()>) -> Result<(), Error> {
    // A socket left by a killed run would make bind fail with EADDRINUSE.
    if path.exists() {
        std::fs::remove_file(path).map_err(|e| Error::io("remove stale socket", path, e))?;
    }
    let listener = UnixListener::bind(path).map_err(|e| Error::io("bind", path, e))?;
    thread::Builder::new()
        .name("nfsfs-control".into())
        .spawn(move || {
            for conn in listener.incoming() {
                match conn {
                    Ok(stream) => {
                        let (faults, shutdown) = (faults.clone(), shutdown.clone());
                        // One thread per client: a harness may keep a connection open.
                        let spawned = thread::Builder::new()
                            .name("nfsfs-control-conn".into())
                            .spawn(move || serve_conn(stream, &faults, &shutdown));
                        if let Err(e) = spawned {
                            tracing::warn!(error = %e, "cannot serve a control connection");
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "control accept"),
                }
            }
        })
        .map_err(|e| Error::io("spawn control thread", path, e))?;
    Ok(())
}

fn serve_conn(stream: UnixStream, faults: &Mutex<Faults>, shutdown: &Sender<()>) {
    let mut writer = match stream.try_clone() {
        Ok(w) => w,
        Err(e) => {
            tracing::warn!(error = %e, "control connection");
            return;
        }
    };
    for line in BufReader::new(stream).lines() {
        let Ok(line) = line else { return };
        if line.trim().is_empty() {
            continue;
        }
        let answer = apply(faults, &line, shutdown);
        if writeln!(writer, "{answer}").is_err() {
            return;
        }
    }
}

/// Sends one command to the control socket at `socket` and returns the text after `ok`.
pub fn send(socket: &Path, command: &Command) -> Result<String, Error> {
    let mut stream = UnixStream::connect(socket).map_err(|e| Error::io("connect", socket, e))?;
    writeln!(stream, "{}", command.to_line()).map_err(|e| Error::io("write", socket, e))?;
    let mut answer = String::new();
    BufReader::new(stream)
        .read_line(&mut answer)
        .map_err(|e| Error::io("read", socket, e))?;
    let answer = answer.trim_end();
    match answer.strip_prefix("ok") {
        Some(rest) => Ok(rest.trim_start().to_string()),
        None => Err(Error::Command(answer.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_command_round_trips_through_its_line() {
        for line in [
            "write-error a EIO 100",
            "fsync-error * ENOSPC 0 t/0",
            "estale b d/f",
            "delay * 5",
            "clear",
            "clear a",
            "list",
            "ping",
            "shutdown",
        ] {
            let cmd = Command::parse(line).expect(line);
            assert_eq!(cmd.to_line(), line);
            assert_eq!(Command::parse(&cmd.to_line()).expect(line), cmd);
        }
    }

    #[test]
    fn bad_commands_are_refused() {
        for line in [
            "",
            "delay a",
            "write-error a EFOO 1",
            "estale",
            "write-error a EIO x",
        ] {
            assert!(Command::parse(line).is_err(), "{line:?}");
        }
    }

    #[test]
    fn apply_updates_the_table() {
        let faults = Mutex::new(Faults::default());
        let (tx, rx) = std::sync::mpsc::channel();
        assert_eq!(apply(&faults, "delay a 3", &tx), "ok");
        assert!(apply(&faults, "list", &tx).contains("\"millis\":3"));
        assert!(apply(&faults, "nonsense", &tx).starts_with("err "));
        assert_eq!(apply(&faults, "shutdown", &tx), "ok");
        assert!(rx.try_recv().is_ok());
    }
}
