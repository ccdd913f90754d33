//! Fault injection: EIO/ENOSPC after N bytes on writes or fsync, per host and path prefix;
//! ESTALE on a path; a delay on every operation; and recovery once cleared.
#![allow(clippy::unwrap_used)]

mod common;

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::time::{Duration, Instant};

use common::*;
use kaas_nfsfs::faults::{FaultErrno, FaultOp};
use kaas_nfsfs::testing::FaultControl;

#[test]
fn enospc_on_writes_after_n_bytes_then_recovery() {
    let vol = volume(&["a", "b"]);
    vol.fail(FaultOp::Write, "a", FaultErrno::Enospc, 10, None)
        .unwrap();
    let mut f = File::create(vol.mount("a").join("f")).unwrap();
    f.write_all(b"12345678").unwrap();
    // 2 bytes fit, then the volume is "full".
    assert_eq!(errno(f.write_all(b"abcdefgh")), libc::ENOSPC);
    assert_eq!(errno(f.write(b"z")), libc::ENOSPC);
    assert_eq!(fs::read(vol.backing().join("f")).unwrap(), b"12345678ab");
    // Another host is not affected.
    fs::write(vol.mount("b").join("g"), b"fine").unwrap();

    vol.clear().unwrap();
    f.write_all(b"more").unwrap();
    f.sync_all().unwrap();
    assert_eq!(
        fs::read(vol.mount("b").join("f")).unwrap(),
        b"12345678abmore"
    );
}

#[test]
fn eio_on_writes_at_once_only_under_the_prefix() {
    let vol = volume(&["a", "b"]);
    for d in ["t/0", "t/1", "t/01"] {
        fs::create_dir_all(vol.mount("a").join(d)).unwrap();
    }
    vol.fail(FaultOp::Write, "*", FaultErrno::Eio, 0, Some("/t/0"))
        .unwrap();
    for host in ["a", "b"] {
        let r = fs::write(vol.mount(host).join("t/0/seg"), b"x");
        assert_eq!(errno(r), libc::EIO, "{host}");
    }
    fs::write(vol.mount("a").join("t/1/seg"), b"x").unwrap();
    fs::write(vol.mount("a").join("t/01/seg"), b"x").unwrap();
    vol.clear_host("a").unwrap();
    assert_eq!(
        errno(fs::write(vol.mount("a").join("t/0/seg"), b"x")),
        libc::EIO,
        "a `*` fault survives a per-host clear"
    );
    vol.clear().unwrap();
    fs::write(vol.mount("a").join("t/0/seg"), b"x").unwrap();
}

#[test]
fn fsync_fails_at_once_or_after_n_more_bytes() {
    let vol = volume(&["a"]);
    let mut f = File::create(vol.mount("a").join("f")).unwrap();
    f.write_all(b"abc").unwrap();
    vol.fail(FaultOp::Fsync, "a", FaultErrno::Eio, 0, None)
        .unwrap();
    assert_eq!(errno(f.sync_all()), libc::EIO);
    assert_eq!(errno(f.sync_data()), libc::EIO);
    f.write_all(b"writes still work").unwrap();
    vol.clear().unwrap();
    f.sync_all().unwrap();

    vol.fail(FaultOp::Fsync, "a", FaultErrno::Enospc, 100, None)
        .unwrap();
    f.write_all(&[0; 60]).unwrap();
    f.sync_data().unwrap();
    f.write_all(&[0; 60]).unwrap();
    assert_eq!(errno(f.sync_data()), libc::ENOSPC);
    vol.clear().unwrap();
    f.sync_data().unwrap();
}

#[test]
fn estale_on_a_path_for_one_host_until_cleared() {
    let vol = volume(&["a", "b"]);
    fs::create_dir(vol.mount("a").join("d")).unwrap();
    fs::write(vol.mount("a").join("d/f"), b"data").unwrap();
    let mut held = File::open(vol.mount("a").join("d/f")).unwrap();
    vol.estale("a", "d/f").unwrap();

    assert_eq!(
        errno(fs::metadata(vol.mount("a").join("d/f"))),
        libc::ESTALE
    );
    assert_eq!(errno(File::open(vol.mount("a").join("d/f"))), libc::ESTALE);
    let mut buf = Vec::new();
    assert_eq!(errno(held.read_to_end(&mut buf)), libc::ESTALE);
    assert_eq!(
        fs::read(vol.mount("b").join("d/f")).unwrap(),
        b"data",
        "b is not affected"
    );
    fs::write(vol.mount("a").join("d/g"), b"other").unwrap();

    vol.clear().unwrap();
    held.read_to_end(&mut buf).unwrap();
    assert_eq!(buf, b"data");
}

#[test]
fn a_delay_slows_every_operation_of_one_host() {
    let vol = volume(&["a", "b"]);
    fs::write(vol.mount("a").join("f"), b"x").unwrap();
    vol.delay("b", 150).unwrap();
    let t = Instant::now();
    fs::metadata(vol.mount("b").join("f")).unwrap();
    assert!(
        t.elapsed() >= Duration::from_millis(150),
        "{:?}",
        t.elapsed()
    );
    vol.clear().unwrap();
    fs::metadata(vol.mount("b").join("f")).unwrap();
}

#[test]
fn faults_are_listed_and_bad_commands_refused() {
    let vol = volume(&["a"]);
    vol.fail(FaultOp::Write, "a", FaultErrno::Eio, 5, Some("x"))
        .unwrap();
    let listed = vol.command(kaas_nfsfs::control::Command::List).unwrap();
    assert!(listed.contains("\"after_bytes\":5"), "{listed}");
    let mut f = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(vol.mount("a").join("x"))
        .unwrap();
    f.write_all(b"123").unwrap();
    let listed = vol.command(kaas_nfsfs::control::Command::List).unwrap();
    assert!(
        listed.contains("\"after_bytes\":2"),
        "the budget counts down: {listed}"
    );
}
