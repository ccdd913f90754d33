//! take_over / relinquish / abandon, epoch fencing, zombie leaders and identity.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use kaas_shared::fs::{Dir, DirEntry, File, Fs, OpenMode, RealFs};
use kaas_storage::{Error, LogConfig, Manifest};
use uuid::Uuid;

use super::support::*;

fn take_over_after_relinquish_keeps_data(v: &Volume) {
    let p = v.leader(1, LogConfig::default());
    append(&p, 1, batch("a", 3));
    p.relinquish().unwrap();
    assert!(!p.is_leader());
    assert!(matches!(p.read(0, 100), Err(Error::NotLeader)));
    assert!(matches!(
        p.append(&batch("x", 1), opts(1)),
        Err(Error::NotLeader)
    ));
    let q = v.partition(LogConfig::default());
    assert!(q.size_bytes() > 0, "stat-only open sees the segments");
    let report = q.take_over(2).unwrap();
    assert_eq!(
        (
            report.previous_epoch,
            report.log_end_offset,
            report.manifest_high_watermark
        ),
        (1, 3, 3)
    );
    append(&q, 2, batch("b", 1));
    assert_eq!(values(&read_all(&q)), vec!["a-0", "a-1", "a-2", "b-0"]);
    assert_eq!(
        v.logs().len(),
        2,
        "the take-over rolled to a segment of epoch 2: {:?}",
        v.logs()
    );
    assert!(v.logs()[1].starts_with("0000000002-00000000000000000003"));
    let manifest: Manifest = serde_json::from_slice(&v.read_file("manifest.json")).unwrap();
    assert_eq!(
        manifest,
        Manifest {
            epoch: 2,
            high_watermark: 3,
            log_start_offset: 0,
            cleaned_up_to: None
        }
    );
    q.close().unwrap();
    let manifest: Manifest = serde_json::from_slice(&v.read_file("manifest.json")).unwrap();
    assert_eq!(manifest.high_watermark, 4);
}
scenario!(take_over_after_relinquish_keeps_data);

fn epochs_fence_old_leaders(v: &Volume) {
    let p = v.leader(5, LogConfig::default());
    append(&p, 5, batch("a", 1));
    assert!(matches!(
        p.append(&batch("x", 1), opts(4)),
        Err(Error::FencedLeaderEpoch {
            requested: 4,
            current: 5
        })
    ));
    p.relinquish().unwrap();
    let q = v.partition(LogConfig::default());
    assert!(matches!(
        q.take_over(3),
        Err(Error::FencedLeaderEpoch {
            requested: 3,
            current: 5
        })
    ));
    assert!(!q.is_leader());
    assert_eq!(
        q.take_over(5).unwrap().log_end_offset,
        1,
        "same epoch again is allowed (restart)"
    );
    assert_eq!(q.take_over(5).unwrap().leader_epoch, 5, "idempotent");
    assert_eq!(q.stored_epoch().unwrap(), 5);
}
scenario!(epochs_fence_old_leaders);

fn zombie_writes_are_never_served(v: &Volume) {
    let config = LogConfig::default();
    let zombie = v.leader(1, config);
    append(&zombie, 1, batch("old", 2));
    // Another broker takes over while the old leader still believes it leads.
    let leader = v.leader(2, config);
    assert_eq!(leader.log_end_offset(), 2);
    let late = zombie.append(&batch("zombie", 3), opts(1)).unwrap();
    assert_eq!(
        late.base_offset, 2,
        "the zombie appends into its own, now dead, segment"
    );
    // ...but never acknowledges it: after its fdatasync it finds the newer epoch in the
    // manifest, and steps down instead of moving its high watermark.
    assert!(matches!(
        block_on(zombie.wait_durable(late.last_offset)),
        Err(Error::NotLeader)
    ));
    assert!(!zombie.is_leader());
    append(&leader, 2, batch("new", 1));
    assert_eq!(values(&read_all(&leader)), vec!["old-0", "old-1", "new-0"]);
    assert!(matches!(
        zombie.append(&batch("z", 1), opts(1)),
        Err(Error::NotLeader)
    ));
    zombie.relinquish().unwrap();
    let manifest: Manifest = serde_json::from_slice(&v.read_file("manifest.json")).unwrap();
    assert_eq!(manifest.epoch, 2, "a superseded leader persists nothing");
    // A segment a zombie created past the new epoch's start is not part of the log.
    let ghost = "0000000001-00000000000000000005.log";
    v.fs()
        .open(
            &v.partition_dir().join(ghost),
            kaas_shared::fs::OpenMode::CreateNew,
        )
        .unwrap();
    v.write_at(ghost, 0, &batch("ghost", 1));
    leader.relinquish().unwrap();
    // A third leader still serves exactly the real log, and removes the zombie's segment.
    let third = v.leader(3, config);
    assert_eq!(values(&read_all(&third)), vec!["old-0", "old-1", "new-0"]);
    assert!(!v.logs().contains(&ghost.to_owned()), "{:?}", v.logs());
    append(&third, 3, batch("third", 1));
    assert_eq!(read_all(&third).last().unwrap().offset, 3);
}
scenario!(zombie_writes_are_never_served);

fn abandon_persists_nothing(v: &Volume) {
    let p = v.leader(1, LogConfig::default());
    append(&p, 1, batch("a", 2));
    let manifest_before = v.read_file("manifest.json");
    let snapshot_before = v.read_file("producer-state.snapshot");
    p.abandon();
    assert!(matches!(p.read(0, 10), Err(Error::Abandoned)));
    assert!(matches!(p.take_over(2), Err(Error::Abandoned)));
    p.relinquish().unwrap();
    assert_eq!(v.read_file("manifest.json"), manifest_before);
    assert_eq!(v.read_file("producer-state.snapshot"), snapshot_before);
}
scenario!(abandon_persists_nothing);

fn identity_guards_the_directory(v: &Volume) {
    v.partition(LogConfig::default());
    let other = uuid::Uuid::new_v4();
    let err = v
        .engine()
        .open_partition(TOPIC, other, 0, LogConfig::default())
        .unwrap_err();
    assert!(matches!(
        err,
        Error::Volume(kaas_shared::Error::IdentityMismatch { .. })
    ));
    assert!(matches!(
        v.engine()
            .open_partition("__x", other, 0, LogConfig::default()),
        Err(Error::InvalidConfig { .. })
    ));
}
scenario!(identity_guards_the_directory);

fn unknown_files_cost_only_their_partition(v: &Volume) {
    let p = v.leader(1, LogConfig::default());
    append(&p, 1, batch("a", 2));
    p.relinquish().unwrap();
    let stray = v.partition_dir().join("stray.txt");
    v.fs().open(&stray, kaas_shared::fs::OpenMode::CreateNew).unwrap();
    // The open (a broker starting) succeeds: the partition is offline, with the file named.
    let q = v.engine().open_partition(TOPIC, v.topic_id, 0, LogConfig::default()).unwrap();
    assert!(q.storage_failure().is_some_and(|why| why.contains("stray.txt")), "{:?}", q.storage_failure());
    assert!(matches!(q.take_over(2), Err(Error::Volume(kaas_shared::Error::BadName { .. }))));
    assert!(!q.is_leader());
    assert!(q.storage_failure().is_some_and(|why| why.contains("stray.txt")));
    assert!(q.has_storage_failure());
    // Once the file is gone, a take-over serves the log again.
    v.fs().remove_file(&stray).unwrap();
    q.take_over(2).unwrap();
    assert!(q.storage_failure().is_none());
    assert!(!q.has_storage_failure());
    assert_eq!(values(&read_all(&q)), vec!["a-0", "a-1"]);
}
scenario!(unknown_files_cost_only_their_partition);

fn a_recreated_topic_directory_is_never_written_by_the_old_incarnation(v: &Volume) {
    let old = v.leader(1, LogConfig { segment_bytes: 1024, ..LogConfig::default() });
    append(&old, 1, batch("a", 2));
    // The topic is deleted (its directory renamed aside) and recreated at the same path while
    // the old leader has not heard of it yet.
    let fs = v.fs();
    let topic_dir = v.partition_dir().parent().unwrap().to_path_buf();
    kaas_shared::reclaim::rename_aside(&*fs, topic_dir.parent().unwrap(), TOPIC, v.topic_id).unwrap();
    let new_id = uuid::Uuid::new_v4();
    let fresh = v.engine().open_partition(TOPIC, new_id, 0, LogConfig::default()).unwrap();
    let before = v.files();
    // Nothing the old leader does writes into the new directory by path.
    assert!(old.delete_records(1).is_err());
    for _ in 0..50 {
        // Until the segment is full and a roll (a new file by path) refuses.
        if old.append(&batch("big", 20), opts(1)).is_err() {
            break;
        }
    }
    assert!(old.housekeeping(NOW + 10 * 86_400_000).is_err() || v.files() == before);
    let _ = old.relinquish();
    assert_eq!(v.files(), before, "the dead incarnation wrote into the recreated directory");
    fresh.take_over(0).unwrap();
    assert_eq!(fresh.log_end_offset(), 0);
}
scenario!(a_recreated_topic_directory_is_never_written_by_the_old_incarnation);

/// An idle leader's active segment descriptor is released by housekeeping; the next append
/// opens the file again by path, which must not be the recreated topic's file of the same name.
fn a_released_active_segment_is_reopened_only_in_its_incarnation(v: &Volume) {
    let old = v.leader(1, LogConfig::default());
    append(&old, 1, batch("a", 2));
    old.housekeeping(NOW).unwrap();
    old.housekeeping(NOW).unwrap();
    assert_eq!(old.open_descriptors(), 0, "an idle partition holds no descriptor");
    let fs = v.fs();
    let topic_dir = v.partition_dir().parent().unwrap().to_path_buf();
    kaas_shared::reclaim::rename_aside(&*fs, topic_dir.parent().unwrap(), TOPIC, v.topic_id).unwrap();
    let fresh = v.engine().open_partition(TOPIC, uuid::Uuid::new_v4(), 0, LogConfig::default()).unwrap();
    // At the same epoch its active segment has the old one's name.
    fresh.take_over(1).unwrap();
    append(&fresh, 1, batch("fresh", 1));
    assert!(old.append(&batch("stale", 1), opts(1)).is_err());
    assert!(old.read(0, 1 << 20).is_err(), "nor does a read open the recreated topic's file");
    assert_eq!(values(&read_all(&fresh)), vec!["fresh-0"]);
}
scenario!(a_released_active_segment_is_reopened_only_in_its_incarnation);


/// Descriptors this process holds on files in `dir` (Linux).
fn open_descriptors_in(dir: &std::path::Path) -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|target| target.starts_with(dir))
        .count()
}

#[test]
fn only_the_leader_holds_descriptors() {
    let v = Volume::disk();
    let config = LogConfig {
        segment_bytes: 300,
        ..LogConfig::default()
    };
    let p = v.leader(1, config);
    for i in 0..10 {
        append(&p, 1, batch(&format!("f{i}"), 2));
    }
    assert_eq!(read_all(&p).len(), 20);
    p.relinquish().unwrap();
    let dir = v.partition_dir();
    assert_eq!(open_descriptors_in(&dir), 0, "relinquish closes everything");
    let q = v.partition(config);
    assert!(q.size_bytes() > 0);
    assert_eq!(
        open_descriptors_in(&dir),
        0,
        "a stat-only open holds nothing"
    );
    q.take_over(2).unwrap();
    assert_eq!((q.open_descriptors(), open_descriptors_in(&dir)), (2, 2), "the recovered segment and the new active one");
    q.housekeeping(NOW).unwrap();
    // One remains: the oldest segment, which the round's retention check opened to learn its
    // newest timestamp (the next round releases it).
    assert_eq!(
        (q.open_descriptors(), open_descriptors_in(&dir)),
        (1, 1),
        "the recovered segment's descriptor goes at housekeeping's first round, not its second"
    );
    q.housekeeping(NOW).unwrap();
    assert_eq!((q.open_descriptors(), open_descriptors_in(&dir)), (0, 0), "an idle partition holds nothing");
    assert_eq!(read_all(&q).len(), 20);
    assert!(open_descriptors_in(&dir) > 1, "a read opens the sealed segments again");
    q.abandon();
    assert_eq!(open_descriptors_in(&dir), 0, "abandon closes everything");
}

/// DeleteRecords on a deposed leader: refused, and the new leader's claim is not overwritten.
fn a_deposed_leader_refuses_delete_records(v: &Volume) {
    let old = v.leader(1, LogConfig::default());
    append(&old, 1, batch("a", 3));
    let new = v.leader(2, LogConfig::default());
    assert!(matches!(old.delete_records(2), Err(Error::FencedLeaderEpoch { requested: 1, current: 2 })));
    let manifest: Manifest = serde_json::from_slice(&v.read_file("manifest.json")).unwrap();
    assert_eq!(manifest.epoch, 2, "the deposed leader overwrote the new leader's claim");
    // It acknowledges nothing more.
    let late = old.append(&batch("late", 1), opts(1));
    assert!(late.is_err() || block_on(old.wait_durable(late.unwrap().last_offset)).is_err());
    append(&new, 2, batch("b", 1));
    assert_eq!(values(&read_all(&new)), vec!["a-0", "a-1", "a-2", "b-0"]);
}
scenario!(a_deposed_leader_refuses_delete_records);

/// A leader that rewrote its manifest (DeleteRecords) may have overwritten a newer leader's
/// claim in the same instant; from then on it finds deposition by the newer leader's segment
/// name, which no rename can take away.
fn a_leader_that_rewrote_its_manifest_is_deposed_by_segment_names(v: &Volume) {
    let old = v.leader(1, LogConfig::default());
    append(&old, 1, batch("a", 3));
    assert_eq!(old.delete_records(1).unwrap(), 1);
    let claimed_by_old = v.read_file("manifest.json");
    let new = v.leader(2, LogConfig::default());
    // The old leader's DeleteRecords rename lands over the new leader's manifest.
    let fs = v.fs();
    let f = fs.open(&v.partition_dir().join("manifest.json"), kaas_shared::fs::OpenMode::ReadWrite).unwrap();
    f.set_len(0).unwrap();
    f.write_all_at(&claimed_by_old, 0).unwrap();
    // The old leader appends after the new leader read the log: it must not acknowledge.
    let late = old.append(&batch("late", 1), opts(1)).unwrap();
    assert!(block_on(old.wait_durable(late.last_offset)).is_err(), "a deposed leader acknowledged a record the new leader's segment shadows");
    append(&new, 2, batch("b", 1));
    assert_eq!(values(&read_all(&new)), vec!["a-1", "a-2", "b-0"]);
}
scenario!(a_leader_that_rewrote_its_manifest_is_deposed_by_segment_names);

/// The real filesystem, recreating the topic (its directory renamed aside, a new incarnation
/// stamped at its path) right after the topic's identity stamp is next read once armed: the
/// worst moment for a take-over, whose check passed for the old incarnation.
#[derive(Debug)]
struct RecreatedAfterStampRead {
    root: PathBuf,
    old: Uuid,
    new: Uuid,
    armed: AtomicBool,
}

impl RecreatedAfterStampRead {
    fn read(&self, name: Option<&str>) {
        if name == Some(kaas_shared::names::TOPIC_ID_FILE) && self.armed.swap(false, Ordering::SeqCst) {
            let fs = RealFs;
            kaas_shared::reclaim::rename_aside(&fs, &self.root, TOPIC, self.old).unwrap();
            kaas_shared::identity::stamp(&fs, &self.root.join(TOPIC), self.new).unwrap();
            fs.create_dir_all(&self.root.join(TOPIC).join("0")).unwrap();
        }
    }
}

/// A held directory of [`RecreatedAfterStampRead`] (and its parent).
#[derive(Debug)]
struct HookedDir<'a> {
    inner: Box<dyn Dir + 'a>,
    hook: &'a RecreatedAfterStampRead,
}

impl Dir for HookedDir<'_> {
    fn path(&self) -> &Path {
        self.inner.path()
    }
    fn open(&self, name: &str, mode: OpenMode) -> io::Result<Arc<dyn File>> {
        let file = self.inner.open(name, mode)?;
        self.hook.read(Some(name));
        Ok(file)
    }
    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        self.inner.rename(from, to)
    }
    fn remove_file(&self, name: &str) -> io::Result<()> {
        self.inner.remove_file(name)
    }
    fn sync(&self) -> io::Result<()> {
        self.inner.sync()
    }
    fn list_sized(&self, sized: &dyn Fn(&str) -> bool) -> io::Result<Vec<DirEntry>> {
        self.inner.list_sized(sized)
    }
    fn parent(&self) -> io::Result<Box<dyn Dir + '_>> {
        Ok(Box::new(HookedDir { inner: self.inner.parent()?, hook: self.hook }))
    }
}

impl Fs for RecreatedAfterStampRead {
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        RealFs.create_dir_all(path)
    }
    fn list_dir_sized(&self, path: &Path, sized: &dyn Fn(&str) -> bool) -> io::Result<Vec<DirEntry>> {
        RealFs.list_dir_sized(path, sized)
    }
    fn stat(&self, path: &Path) -> io::Result<DirEntry> {
        RealFs.stat(path)
    }
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Arc<dyn File>> {
        let file = RealFs.open(path, mode)?;
        self.read(path.file_name().and_then(|n| n.to_str()));
        Ok(file)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        RealFs.remove_file(path)
    }
    fn remove_dir(&self, path: &Path) -> io::Result<()> {
        RealFs.remove_dir(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        RealFs.rename(from, to)
    }
    fn hard_link(&self, from: &Path, to: &Path) -> io::Result<()> {
        RealFs.hard_link(from, to)
    }
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        RealFs.sync_dir(path)
    }
    fn open_dir(&self, path: &Path) -> io::Result<Box<dyn Dir + '_>> {
        Ok(Box::new(HookedDir { inner: RealFs.open_dir(path)?, hook: self }))
    }
}

/// On disk only: that a held directory stays the directory opened is the operating system's
/// doing (an in-memory volume goes by path).
#[test]
fn a_take_over_racing_a_recreated_topic_claims_nothing_in_the_new_incarnation() {
    let v = Volume::disk();
    let p = v.leader(1, LogConfig::default());
    append(&p, 1, batch("a", 2));
    p.relinquish().unwrap();
    let root = v.engine().root().to_owned();
    let fs = Arc::new(RecreatedAfterStampRead { root: root.clone(), old: v.topic_id, new: Uuid::new_v4(), armed: AtomicBool::new(false) });
    let engine = kaas_storage::Engine::with_fs(fs.clone(), &root).unwrap();
    let q = engine.open_partitions(TOPIC, v.topic_id, 0..1, LogConfig::default()).unwrap().remove(0);
    // The take-over reads the stamp (the old incarnation's: it passes), then the topic is
    // recreated; whatever it does next lands in the directory it checked.
    fs.armed.store(true, Ordering::SeqCst);
    let _ = q.take_over(2);
    assert!(!fs.armed.load(Ordering::SeqCst), "the take-over never read the stamp");
    let fresh = RealFs.list_dir(&root.join(TOPIC).join("0")).unwrap();
    assert!(fresh.is_empty(), "the take-over wrote into the recreated topic's directory: {fresh:?}");
}
