//! What one host sees of another's changes: ESTALE, exclusive create, atomic rename, hard
//! links, close-to-open consistency, and an attribute cache when one is configured.
#![allow(clippy::unwrap_used)]

mod common;

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use common::*;
use kaas_nfsfs::Options;

#[test]
fn a_file_removed_by_one_host_is_stale_for_another_that_holds_it_open() {
    let vol = volume(&["a", "b"]);
    fs::write(vol.mount("a").join("seg"), b"0123456789").unwrap();
    let mut held = OpenOptions::new()
        .read(true)
        .write(true)
        .open(vol.mount("b").join("seg"))
        .unwrap();
    let mut first = [0u8; 4];
    held.read_exact(&mut first).unwrap();

    fs::remove_file(vol.mount("a").join("seg")).unwrap();
    assert!(
        ghosts(vol.mount("a")).is_empty(),
        "a did not hold it: a real unlink"
    );

    let mut buf = [0u8; 4];
    assert_eq!(errno(held.read(&mut buf)), libc::ESTALE, "read");
    assert_eq!(errno(held.write(b"x")), libc::ESTALE, "write");
    assert_eq!(errno(held.sync_all()), libc::ESTALE, "fsync");
    assert_eq!(errno(held.sync_data()), libc::ESTALE, "fdatasync");
    assert_eq!(errno(held.metadata()), libc::ESTALE, "fstat");
}

#[test]
fn rename_over_by_another_host_makes_the_old_file_stale() {
    let vol = volume(&["a", "b"]);
    fs::write(vol.mount("a").join("assignment.json"), b"v1").unwrap();
    let mut old = File::open(vol.mount("b").join("assignment.json")).unwrap();
    fs::write(vol.mount("a").join("assignment.json.tmp"), b"v2").unwrap();
    fs::rename(
        vol.mount("a").join("assignment.json.tmp"),
        vol.mount("a").join("assignment.json"),
    )
    .unwrap();
    let mut s = String::new();
    assert_eq!(errno(old.read_to_string(&mut s)), libc::ESTALE);
    // A fresh open (close-to-open) sees the new version.
    assert_eq!(
        fs::read(vol.mount("b").join("assignment.json")).unwrap(),
        b"v2"
    );
}

#[test]
fn exclusive_create_has_exactly_one_winner_across_hosts() {
    let vol = volume(&["a", "b"]);
    let rounds = 40;
    let barrier = Arc::new(Barrier::new(2));
    let wins = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = ["a", "b"]
        .into_iter()
        .map(|host| {
            let dir = vol.mount(host).to_path_buf();
            let (barrier, wins) = (barrier.clone(), wins.clone());
            std::thread::spawn(move || {
                let mut mine = Vec::new();
                for i in 0..rounds {
                    barrier.wait();
                    match OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .open(dir.join(format!("lock-{i}")))
                    {
                        Ok(mut f) => {
                            f.write_all(host.as_bytes()).unwrap();
                            wins.fetch_add(1, Ordering::SeqCst);
                            mine.push(i);
                        }
                        Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EEXIST), "{e}"),
                    }
                }
                (host, mine)
            })
        })
        .collect();
    let results: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    assert_eq!(
        wins.load(Ordering::SeqCst),
        rounds,
        "exactly one winner per round"
    );
    for (host, mine) in results {
        for i in mine {
            let owner = fs::read(vol.backing().join(format!("lock-{i}"))).unwrap();
            assert_eq!(owner, host.as_bytes(), "the winner's contents");
        }
    }
}

#[test]
fn same_directory_rename_is_atomic_for_a_reader_on_another_host() {
    let vol = volume(&["a", "b"]);
    const LEN: usize = 64 * 1024;
    let writer_dir = vol.mount("a").to_path_buf();
    fs::write(writer_dir.join("current"), vec![0u8; LEN]).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut version: u8 = 1;
            // The writer holds the version it replaces open (as FUSE's asynchronous RELEASE
            // makes any just-closed file look): its own mount must keep that file for it, and
            // doing so must not open a window in which the name is missing for other hosts.
            let mut previous = File::open(writer_dir.join("current")).unwrap();
            while !stop.load(Ordering::SeqCst) {
                let tmp = writer_dir.join("current.tmp");
                let mut f = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .open(&tmp)
                    .unwrap();
                // Written in pieces, so a non-atomic publish would be visible half-done.
                for _ in 0..4 {
                    f.write_all(&vec![version; LEN / 4]).unwrap();
                }
                f.sync_all().unwrap();
                fs::rename(&tmp, writer_dir.join("current")).unwrap();
                let mut replaced = vec![0u8; LEN];
                previous.read_exact_at(&mut replaced, 0).unwrap();
                assert!(
                    replaced.iter().all(|&b| b == replaced[0]),
                    "the replaced version stays readable here"
                );
                previous = f;
                version = version.wrapping_add(1).max(1);
            }
        })
    };
    let reader_path = vol.mount("b").join("current");
    let (mut complete, mut stale) = (0, 0);
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline || complete < 20 {
        let mut buf = Vec::new();
        // A read racing a replace may go stale (the old file is gone from the server): NFS
        // readers retry. What must never happen is a torn or mixed version.
        let result = File::open(&reader_path).and_then(|mut f| f.read_to_end(&mut buf));
        match result {
            Ok(_) => {
                assert_eq!(buf.len(), LEN, "a complete version");
                assert!(buf.iter().all(|&b| b == buf[0]), "one version, never a mix");
                complete += 1;
            }
            Err(e) if e.raw_os_error() == Some(libc::ESTALE) => stale += 1,
            Err(e) => panic!("reader: {e}"),
        }
        assert!(
            Instant::now() < deadline + Duration::from_secs(30),
            "too few complete reads: {complete} ({stale} stale)"
        );
    }
    stop.store(true, Ordering::SeqCst);
    writer.join().unwrap();
    println!("{complete} complete reads, {stale} stale retries");
}

#[test]
fn hard_links_are_visible_from_every_host() {
    let vol = volume(&["a", "b"]);
    fs::write(vol.mount("a").join("f"), b"linked").unwrap();
    fs::hard_link(vol.mount("a").join("f"), vol.mount("a").join("g")).unwrap();
    let g = vol.mount("b").join("g");
    assert_eq!(fs::read(&g).unwrap(), b"linked");
    assert_eq!(fs::metadata(&g).unwrap().nlink(), 2);
    assert_eq!(
        fs::metadata(vol.mount("b").join("f")).unwrap().ino(),
        fs::metadata(&g).unwrap().ino(),
        "one file, two names"
    );
    let mut held = File::open(&g).unwrap();
    fs::remove_file(vol.mount("a").join("f")).unwrap();
    let mut s = String::new();
    held.read_to_string(&mut s).unwrap();
    assert_eq!(s, "linked", "the other link keeps it alive");
    assert_eq!(errno(fs::hard_link(&g, &g)), libc::EEXIST);
}

#[test]
fn close_to_open_another_host_sees_everything_written_before_close() {
    let vol = volume(&["a", "b"]);
    let mut w = File::create(vol.mount("a").join("log")).unwrap();
    let mut r = File::open(vol.mount("b").join("log")).unwrap();
    for i in 0..50u32 {
        w.write_all(&i.to_le_bytes()).unwrap();
    }
    w.sync_data().unwrap();
    drop(w);
    let fresh = fs::read(vol.mount("b").join("log")).unwrap();
    assert_eq!(fresh.len(), 200);
    // Nothing is cached by default, so even the handle opened earlier reads it all.
    let mut buf = Vec::new();
    r.read_to_end(&mut buf).unwrap();
    assert_eq!(buf, fresh);
    assert_eq!(fs::metadata(vol.mount("b").join("log")).unwrap().len(), 200);
}

#[test]
fn a_configured_attribute_cache_shows_stale_sizes_until_it_expires() {
    let ttl = Duration::from_secs(3);
    let vol = volume_with(
        &["a", "b"],
        Options {
            attr_ttl: ttl,
            ..Options::default()
        },
    );
    fs::write(vol.mount("a").join("f"), b"1").unwrap();
    let cached_at = Instant::now();
    assert_eq!(fs::metadata(vol.mount("b").join("f")).unwrap().len(), 1);
    let mut f = OpenOptions::new()
        .append(true)
        .open(vol.mount("a").join("f"))
        .unwrap();
    f.write_all(b"23").unwrap();
    drop(f);
    let seen = fs::metadata(vol.mount("b").join("f")).unwrap().len();
    // Only meaningful if the cache cannot have expired on a slow machine in between.
    if cached_at.elapsed() < ttl / 2 {
        assert_eq!(seen, 1, "b still sees the cached size");
    }
    wait_until("b sees the new size", ttl * 4, || {
        fs::metadata(vol.mount("b").join("f")).unwrap().len() == 3
    });
}
