//! Attributes and the rest of the POSIX surface a broker touches: truncate, chmod, times,
//! symlinks, directories, read-only create, statfs-backed free space.
#![allow(clippy::unwrap_used)]

mod common;

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::time::{Duration, SystemTime};

use common::*;

#[test]
fn truncate_chmod_and_times_are_seen_by_every_host() {
    let vol = volume(&["a", "b"]);
    let (a, b) = (vol.mount("a"), vol.mount("b"));
    fs::write(a.join("f"), b"0123456789").unwrap();
    // truncate(2) by path and ftruncate(2) through a handle.
    OpenOptions::new()
        .write(true)
        .open(b.join("f"))
        .unwrap()
        .set_len(4)
        .unwrap();
    assert_eq!(fs::metadata(a.join("f")).unwrap().len(), 4);
    fs::set_permissions(a.join("f"), fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(
        fs::metadata(b.join("f")).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let when = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    File::options()
        .write(true)
        .open(b.join("f"))
        .unwrap()
        .set_modified(when)
        .unwrap();
    assert_eq!(fs::metadata(a.join("f")).unwrap().modified().unwrap(), when);
}

#[test]
fn a_handle_keeps_working_after_its_name_was_silly_renamed() {
    let vol = volume(&["a"]);
    let a = vol.mount("a");
    fs::write(a.join("seg"), b"0123456789").unwrap();
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(a.join("seg"))
        .unwrap();
    fs::remove_file(a.join("seg")).unwrap();
    f.set_len(3).unwrap();
    assert_eq!(f.metadata().unwrap().len(), 3);
    f.seek(SeekFrom::Start(0)).unwrap();
    let mut s = String::new();
    f.read_to_string(&mut s).unwrap();
    assert_eq!(s, "012");
    f.sync_all().unwrap();
    drop(f);
    wait_until("the ghost goes", RELEASE_DEADLINE, || ghosts(a).is_empty());
}

#[test]
fn symlinks_directories_and_odd_opens_work() {
    let vol = volume(&["a", "b"]);
    let (a, b) = (vol.mount("a"), vol.mount("b"));
    fs::create_dir_all(a.join("x/y/z")).unwrap();
    std::os::unix::fs::symlink("y/z", a.join("x/link")).unwrap();
    assert_eq!(
        fs::read_link(b.join("x/link")).unwrap().to_str(),
        Some("y/z")
    );
    assert!(b.join("x/link").is_dir());
    // O_RDONLY|O_CREAT is valid POSIX.
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_CREAT)
        .open(a.join("x/created"))
        .unwrap();
    assert!(b.join("x/created").is_file());
    fs::rename(a.join("x/y"), a.join("x/w")).unwrap();
    assert!(b.join("x/w/z").is_dir());
    assert_eq!(errno(fs::remove_dir(b.join("x"))), libc::ENOTEMPTY);
    let names: Vec<_> = fs::read_dir(b.join("x"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 3, "{names:?}");
    fs::remove_dir_all(b.join("x")).unwrap();
    assert!(!a.join("x").exists());
}
