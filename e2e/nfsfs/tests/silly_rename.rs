//! Silly rename: what happens on one host when it removes a file it holds open.
#![allow(clippy::unwrap_used)]

mod common;

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};

use common::*;

#[test]
fn unlink_of_an_open_file_leaves_a_ghost_until_the_last_close() {
    let vol = volume(&["a", "b"]);
    let a = vol.mount("a");
    fs::create_dir(a.join("d")).unwrap();
    fs::write(a.join("d/f"), b"hello").unwrap();
    let mut f1 = File::open(a.join("d/f")).unwrap();
    let f2 = File::open(a.join("d/f")).unwrap();

    fs::remove_file(a.join("d/f")).unwrap();
    assert!(!a.join("d/f").exists(), "the name is gone");
    let g = ghosts(&a.join("d"));
    assert_eq!(g.len(), 1, "one ghost: {g:?}");
    assert!(is_silly_name(&g[0]), "{g:?}");
    assert_eq!(
        ghosts(&vol.mount("b").join("d")),
        g,
        "other hosts see the ghost too"
    );
    assert_eq!(ghosts(&vol.backing().join("d")), g, "it is on the server");

    let mut s = String::new();
    f1.read_to_string(&mut s).unwrap();
    assert_eq!(s, "hello", "the open handle still reads the data");

    drop(f1);
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert_eq!(ghosts(&a.join("d")), g, "a second handle is still open");
    drop(f2);
    wait_until(
        "the ghost is removed after the last close",
        RELEASE_DEADLINE,
        || ghosts(&a.join("d")).is_empty(),
    );
    fs::remove_dir(a.join("d")).unwrap();
}

#[test]
fn unlinking_the_ghost_is_ebusy_and_its_directory_is_not_empty() {
    let vol = volume(&["a"]);
    let a = vol.mount("a");
    fs::create_dir(a.join("d")).unwrap();
    fs::write(a.join("d/f"), b"x").unwrap();
    let f = File::open(a.join("d/f")).unwrap();
    fs::remove_file(a.join("d/f")).unwrap();
    let ghost = a.join("d").join(&ghosts(&a.join("d"))[0]);

    assert_eq!(errno(fs::remove_file(&ghost)), libc::EBUSY);
    assert_eq!(errno(fs::remove_dir(a.join("d"))), libc::ENOTEMPTY);
    assert_eq!(errno(fs::rename(&ghost, a.join("d/back"))), libc::EBUSY);

    drop(f);
    wait_until("the ghost goes", RELEASE_DEADLINE, || !ghost.exists());
    fs::remove_dir(a.join("d")).unwrap();
}

#[test]
fn rename_over_an_open_file_ghosts_the_replaced_file() {
    let vol = volume(&["a", "b"]);
    let a = vol.mount("a");
    fs::write(a.join("manifest.json"), b"old").unwrap();
    let mut old = File::open(a.join("manifest.json")).unwrap();

    // The temp-then-rename update of the substrate contract, on the host holding it open.
    let mut tmp = File::create(a.join("manifest.json.tmp")).unwrap();
    tmp.write_all(b"new").unwrap();
    tmp.sync_all().unwrap();
    drop(tmp);
    fs::rename(a.join("manifest.json.tmp"), a.join("manifest.json")).unwrap();

    assert_eq!(ghosts(a).len(), 1, "the replaced file became a ghost");
    assert_eq!(fs::read(a.join("manifest.json")).unwrap(), b"new");
    assert_eq!(
        fs::read(vol.mount("b").join("manifest.json")).unwrap(),
        b"new"
    );
    let mut s = String::new();
    old.read_to_string(&mut s).unwrap();
    assert_eq!(s, "old", "the open handle keeps the replaced contents");

    drop(old);
    wait_until("the ghost goes", RELEASE_DEADLINE, || ghosts(a).is_empty());
}

#[test]
fn remove_dir_all_fails_with_a_ghost_present_and_succeeds_after_close() {
    let vol = volume(&["a"]);
    let a = vol.mount("a");
    fs::create_dir_all(a.join("topic/0")).unwrap();
    for name in ["00-0.log", "00-0.index", "manifest.json"] {
        fs::write(a.join("topic/0").join(name), b"data").unwrap();
    }
    let segment = File::open(a.join("topic/0/00-0.log")).unwrap();

    // First pass: every name but the ghost goes, the directory stays.
    let first = fs::remove_dir_all(a.join("topic"));
    assert_eq!(errno(first), libc::ENOTEMPTY);
    let left: Vec<_> = fs::read_dir(a.join("topic/0"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(is_silly_name(&left[0]), "{left:?}");
    // Second pass: now the ghost itself is in the listing, and refuses.
    assert_eq!(errno(fs::remove_dir_all(a.join("topic"))), libc::EBUSY);

    drop(segment);
    wait_until("the ghost goes", RELEASE_DEADLINE, || {
        ghosts(&a.join("topic/0")).is_empty()
    });
    fs::remove_dir_all(a.join("topic")).unwrap();
    assert!(!vol.backing().join("topic").exists());
}

#[test]
fn no_ghost_without_an_open_handle_or_with_another_link() {
    let vol = volume(&["a"]);
    let a = vol.mount("a");
    fs::write(a.join("closed"), b"x").unwrap();
    fs::remove_file(a.join("closed")).unwrap();
    // NB: FUSE delivers a close's RELEASE after close(2) has returned (the kernel drops the last
    // reference later), so the unlink can reach the server first and ghost the file for that
    // moment; the release then removes the ghost. (An NFS client's close is done before it
    // returns.) What must hold is that nothing stays.
    wait_until("a closed file leaves no ghost", RELEASE_DEADLINE, || ghosts(a).is_empty());

    fs::write(a.join("f"), b"linked").unwrap();
    fs::hard_link(a.join("f"), a.join("g")).unwrap();
    let mut held = OpenOptions::new().read(true).open(a.join("f")).unwrap();
    // Another link keeps the file alive on the server: a plain unlink, as on NFS.
    fs::remove_file(a.join("f")).unwrap();
    assert!(ghosts(a).is_empty());
    // The last link of an open file: now a ghost.
    fs::remove_file(a.join("g")).unwrap();
    assert_eq!(ghosts(a).len(), 1);
    held.seek(SeekFrom::Start(0)).unwrap();
    let mut s = String::new();
    held.read_to_string(&mut s).unwrap();
    assert_eq!(s, "linked");
    drop(held);
    wait_until("the ghost goes", RELEASE_DEADLINE, || ghosts(a).is_empty());
}

#[test]
fn another_host_may_remove_the_ghost_and_the_holder_gets_estale() {
    // Linux NFS refuses the unlink only on the host that made the ghost; from another host it
    // is a plain file on the server (how admins clean `.nfs*` files up), and the holder's
    // handle goes stale.
    let vol = volume(&["a", "b"]);
    fs::write(vol.mount("a").join("f"), b"x").unwrap();
    let mut held = File::open(vol.mount("a").join("f")).unwrap();
    fs::remove_file(vol.mount("a").join("f")).unwrap();
    let ghost = ghosts(vol.mount("a")).remove(0);
    fs::remove_file(vol.mount("b").join(&ghost)).unwrap();
    let mut buf = Vec::new();
    assert_eq!(errno(held.read_to_end(&mut buf)), libc::ESTALE);
    drop(held);
}
