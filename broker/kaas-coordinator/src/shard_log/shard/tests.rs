#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::sync::Arc;

use kaas_shared::fs::{Fs, FsRef, MemFs, OpenMode, RealFs};

use super::*;

/// Runs a scenario against the in-memory filesystem and a real temp directory.
fn both(check: impl Fn(FsRef, &Path)) {
    let mem: FsRef = Arc::new(MemFs::new());
    check(mem, Path::new("/v/__cluster/groups/0003"));
    let tmp = tempfile::tempdir().unwrap();
    check(Arc::new(RealFs), &tmp.path().join("0003"));
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

fn names(fs: &dyn Fs, dir: &Path) -> Vec<String> {
    let mut n: Vec<String> = fs.list_dir(dir).unwrap().into_iter().map(|e| e.name).collect();
    n.sort();
    n
}

fn map(entries: Vec<Entry>) -> BTreeMap<String, Vec<u8>> {
    entries.into_iter().map(|e| (e.key, e.value.unwrap())).collect()
}

#[test]
fn appended_state_survives_relinquish_and_crash() {
    both(|fs, dir| {
        let rt = runtime();
        let log = ShardLog::open(fs.clone(), dir).unwrap();
        assert_eq!(log.stored_epoch().unwrap(), -1);
        assert!(log.take_over(0).unwrap().is_empty());
        let a = log.append(&[Entry::put("a", b"1".to_vec()), Entry::put("b", b"2".to_vec())]).unwrap();
        let b = log.append(&[Entry::delete("a"), Entry::put("c", b"3".to_vec())]).unwrap();
        rt.block_on(async { tokio::join!(log.wait_durable(a), log.wait_durable(b)) }).0.unwrap();
        rt.block_on(log.wait_durable(b)).unwrap();
        log.relinquish().unwrap();
        assert!(matches!(log.append(&[Entry::put("x", vec![])]), Err(Error::NotOwner)));

        // A new owner (another broker: a fresh ShardLog) sees the state...
        let next = ShardLog::open(fs.clone(), dir).unwrap();
        assert_eq!(next.stored_epoch().unwrap(), 0);
        let loaded = map(next.take_over(1).unwrap());
        assert_eq!(loaded.keys().collect::<Vec<_>>(), ["b", "c"]);
        let d = next.append(&[Entry::put("d", b"4".to_vec())]).unwrap();
        rt.block_on(next.wait_durable(d)).unwrap();
        // ...and a crash (no relinquish) keeps every durable append.
        drop(next);
        let after_crash = ShardLog::open(fs.clone(), dir).unwrap();
        let loaded = map(after_crash.take_over(2).unwrap());
        assert_eq!(loaded.keys().collect::<Vec<_>>(), ["b", "c", "d"]);
        // Only the newest snapshot and its log remain.
        assert_eq!(names(&*fs, dir), ["0000000002-00000000000000000000.log", "0000000002-00000000000000000000.snapshot"]);
    });
}

#[test]
fn lower_epochs_are_fenced_and_a_zombie_cannot_leak_in() {
    both(|fs, dir| {
        let rt = runtime();
        let old = ShardLog::open(fs.clone(), dir).unwrap();
        old.take_over(1).unwrap();
        let s = old.append(&[Entry::put("k", b"old".to_vec())]).unwrap();
        rt.block_on(old.wait_durable(s)).unwrap();

        let new = ShardLog::open(fs.clone(), dir).unwrap();
        assert!(matches!(new.take_over(0), Err(Error::Fenced { current: 1, .. })));
        assert_eq!(map(new.take_over(2).unwrap())["k"], b"old");

        // The deposed owner does not know yet and keeps appending to its own (dead) log. Its
        // fdatasync succeeds, but the new owner's files are on the volume: it must not
        // acknowledge (the new owner may have loaded the shard before these bytes landed).
        let late = old.append(&[Entry::put("k", b"zombie".to_vec())]).unwrap();
        assert!(rt.block_on(old.wait_durable(late)).is_err(), "a deposed owner acknowledged an append");
        assert_eq!(old.epoch(), None, "a deposed owner gives the shard up");
        assert!(matches!(old.append(&[Entry::put("k", vec![])]), Err(Error::NotOwner)));
        let s = new.append(&[Entry::put("k", b"new".to_vec())]).unwrap();
        rt.block_on(new.wait_durable(s)).unwrap();
        // Its relinquish sees the newer epoch and persists nothing.
        old.relinquish().unwrap();

        let third = ShardLog::open(fs.clone(), dir).unwrap();
        assert_eq!(map(third.take_over(3).unwrap())["k"], b"new");
    });
}

#[test]
fn a_deposed_owners_compaction_acknowledges_nothing() {
    let mem = Arc::new(MemFs::new());
    let fs: FsRef = mem.clone();
    let dir = Path::new("/v/__cluster/groups/0003");
    let rt = runtime();
    let old = ShardLog::open(fs.clone(), dir).unwrap();
    old.take_over(1).unwrap();
    let late = old.append(&[Entry::put("k", b"zombie".to_vec())]).unwrap();
    // The compaction passes its epoch check and is held writing its snapshot; meanwhile a new
    // owner claims the shard (its log, named with epoch 2, is what a take-over creates first).
    mem.hold_dir_syncs(true);
    std::thread::scope(|s| {
        let compacting = s.spawn(|| old.compact());
        mem.wait_for_held_dir_syncs(1);
        fs.open(&dir.join(group_file_name(2, 0, GroupFileKind::Log).unwrap()), OpenMode::CreateNew).unwrap();
        mem.hold_dir_syncs(false);
        let compacted = compacting.join().unwrap();
        assert!(matches!(compacted, Err(Error::Fenced { requested: 1, current: 2, .. })), "{compacted:?}");
    });
    // The snapshot would have made `late` durable; it is not acknowledged.
    assert!(rt.block_on(old.wait_durable(late)).is_err(), "a deposed owner acknowledged an append");
    assert_eq!(old.epoch(), None);
}

#[test]
fn a_torn_tail_is_ignored() {
    both(|fs, dir| {
        let rt = runtime();
        let log = ShardLog::open(fs.clone(), dir).unwrap();
        log.take_over(0).unwrap();
        let s = log.append(&[Entry::put("kept", b"1".to_vec())]).unwrap();
        rt.block_on(log.wait_durable(s)).unwrap();
        let log_path = dir.join(group_file_name(0, 0, GroupFileKind::Log).unwrap());
        drop(log);
        // A crash mid-append: half a frame after the last whole one.
        let f = fs.open(&log_path, OpenMode::ReadWrite).unwrap();
        let len = f.len().unwrap();
        let half = frame::encode(&[Entry::put("torn", vec![7; 100])]).unwrap();
        f.write_all_at(&half[..50], len).unwrap();
        drop(f);
        let next = ShardLog::open(fs.clone(), dir).unwrap();
        let loaded = map(next.take_over(1).unwrap());
        assert_eq!(loaded.keys().collect::<Vec<_>>(), ["kept"]);
    });
}

#[test]
fn compaction_keeps_state_and_wakes_waiters() {
    both(|fs, dir| {
        let rt = runtime();
        let log = ShardLog::open(fs.clone(), dir).unwrap();
        log.take_over(4).unwrap();
        for i in 0..100 {
            log.append(&[Entry::put(format!("k{}", i % 10), vec![i as u8])]).unwrap();
        }
        let last = log.append(&[Entry::delete("k0")]).unwrap();
        log.compact().unwrap();
        // The snapshot made everything durable.
        rt.block_on(log.wait_durable(last)).unwrap();
        let s = log.append(&[Entry::put("after", vec![])]).unwrap();
        rt.block_on(log.wait_durable(s)).unwrap();
        assert_eq!(names(&*fs, dir), ["0000000004-00000000000000000001.log", "0000000004-00000000000000000001.snapshot"]);
        drop(log);
        let next = ShardLog::open(fs.clone(), dir).unwrap();
        let loaded = map(next.take_over(5).unwrap());
        assert_eq!(loaded.len(), 10);
        assert_eq!(loaded["k9"], vec![99]);
        assert!(!loaded.contains_key("k0"));
    });
}

#[test]
fn abandon_writes_nothing() {
    both(|fs, dir| {
        let log = ShardLog::open(fs.clone(), dir).unwrap();
        log.take_over(0).unwrap();
        log.append(&[Entry::put("k", vec![])]).unwrap();
        let before = names(&*fs, dir);
        log.abandon();
        assert_eq!(names(&*fs, dir), before);
        assert!(matches!(log.take_over(1), Err(Error::NotOwner)));
    });
}
