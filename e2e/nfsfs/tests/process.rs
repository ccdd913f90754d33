//! The `kaas-nfsfs` binary: control socket, `rm -rf` against a ghost, clean unmount on
//! SIGTERM/SIGINT, and no mount left behind even when it is killed.
#![allow(clippy::unwrap_used)]

mod common;

use std::fs::{self, File};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::*;
use kaas_nfsfs::control::{self, Command as Ctl};
use kaas_nfsfs::faults::{FaultErrno, FaultOp};
use kaas_nfsfs::is_mounted;
use kaas_nfsfs::testing::{FaultControl, NfsProcess};

fn spawn(hosts: &[&str]) -> NfsProcess {
    NfsProcess::spawn(Path::new(env!("CARGO_BIN_EXE_kaas-nfsfs")), hosts, &[]).unwrap_or_else(|e| {
        panic!("these tests need a working FUSE mount (/dev/fuse, root or fusermount3): {e}")
    })
}

fn rm_rf(path: &Path) -> std::process::Output {
    Command::new("rm").arg("-rf").arg(path).output().unwrap()
}

fn signal(pid: u32, sig: nix::sys::signal::Signal) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap()), sig).unwrap();
}

#[test]
fn rm_rf_fails_with_a_ghost_present_as_on_nfs() {
    let mut p = spawn(&["a", "b"]);
    let a = p.mount("a").to_path_buf();
    fs::create_dir_all(a.join("orders/0")).unwrap();
    fs::write(a.join("orders/0/00000001-0.log"), b"records").unwrap();
    fs::write(a.join("orders/0/manifest.json"), b"{}").unwrap();
    let held = File::open(a.join("orders/0/00000001-0.log")).unwrap();

    let out = rm_rf(&a.join("orders"));
    assert!(
        !out.status.success(),
        "rm -rf must fail while a ghost pins the directory"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("Directory not empty"), "{stderr}");
    let out = rm_rf(&a.join("orders"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("Device or resource busy"),
        "{stderr}"
    );

    drop(held);
    wait_until("the ghost goes", RELEASE_DEADLINE, || {
        ghosts(&a.join("orders/0")).is_empty()
    });
    let out = rm_rf(&a.join("orders"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(p.logs().contains("silly rename"), "{}", p.logs());
    p.stop().unwrap();
}

#[test]
fn the_control_socket_injects_and_clears_faults() {
    let p = spawn(&["a", "b"]);
    assert_eq!(control::send(p.socket(), &Ctl::Ping).unwrap(), "");
    p.fail(FaultOp::Write, "b", FaultErrno::Enospc, 0, Some("full"))
        .unwrap();
    fs::create_dir(p.mount("a").join("full")).unwrap();
    assert_eq!(
        errno(fs::write(p.mount("b").join("full/f"), b"x")),
        libc::ENOSPC
    );
    fs::write(p.mount("a").join("full/f"), b"x").unwrap();
    p.estale("a", "full").unwrap();
    assert_eq!(errno(fs::read(p.mount("a").join("full/f"))), libc::ESTALE);
    let listed = control::send(p.socket(), &Ctl::List).unwrap();
    assert!(listed.contains("estale"), "{listed}");
    assert!(control::send(p.socket(), &Ctl::Clear(None)).is_ok());
    fs::write(p.mount("b").join("full/f"), b"y").unwrap();
    assert_eq!(fs::read(p.mount("a").join("full/f")).unwrap(), b"y");
    let bad = Ctl::parse("delay");
    assert!(bad.is_err());
}

#[test]
fn sigterm_unmounts_every_host_even_with_files_open() {
    let mut p = spawn(&["a", "b"]);
    let (a, b) = (p.mount("a").to_path_buf(), p.mount("b").to_path_buf());
    assert!(is_mounted(&a) && is_mounted(&b));
    fs::write(a.join("f"), b"x").unwrap();
    let held = File::open(b.join("f")).unwrap();
    let status = p.stop().unwrap();
    assert!(status.success(), "exit status {status}\n{}", p.logs());
    assert!(
        !is_mounted(&a) && !is_mounted(&b),
        "no mount left\n{}",
        p.logs()
    );
    drop(held);
    assert_eq!(fs::read(p.backing().join("f")).unwrap(), b"x");
}

#[test]
fn sigint_and_shutdown_command_also_unmount() {
    let p = spawn(&["a"]);
    let a = p.mount("a").to_path_buf();
    signal(p.pid(), nix::sys::signal::Signal::SIGINT);
    wait_until("SIGINT unmounts", Duration::from_secs(15), || {
        !is_mounted(&a)
    });

    let p = spawn(&["a"]);
    let a = p.mount("a").to_path_buf();
    control::send(p.socket(), &Ctl::Shutdown).unwrap();
    wait_until("shutdown unmounts", Duration::from_secs(15), || {
        !is_mounted(&a)
    });
}

#[test]
fn kill_9_leaves_no_mount_behind_once_the_test_support_stops_it() {
    let mut p = spawn(&["a", "b"]);
    let (a, b) = (p.mount("a").to_path_buf(), p.mount("b").to_path_buf());
    signal(p.pid(), nix::sys::signal::Signal::SIGKILL);
    // fusermount3's auto_unmount helper usually unmounts by itself, but it races the kernel's
    // abort of the connection (its check of the mount point can see ECONNABORTED and give up),
    // so stop() detaches whatever is left.
    let status = p.stop().unwrap();
    assert!(!status.success());
    assert!(!is_mounted(&a) && !is_mounted(&b), "no mount left behind");
}

#[test]
fn fusermount_u_from_outside_ends_the_process() {
    let mut p = spawn(&["a"]);
    let a = p.mount("a").to_path_buf();
    let out = Command::new("fusermount3")
        .arg("-u")
        .arg(&a)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!is_mounted(&a));
    // The process notices its only mount is gone and exits on its own.
    let pid = p.pid();
    wait_until("the process exits", Duration::from_secs(15), || {
        !Path::new(&format!("/proc/{pid}")).exists()
            || fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| s.contains(") Z "))
    });
    let status = p.stop();
    assert!(
        matches!(status, Ok(s) if s.success()),
        "{status:?}\n{}",
        p.logs()
    );
}
