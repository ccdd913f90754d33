//! Names and their directory fsyncs: a name created, renamed or removed is durable only once its
//! directory has been fsynced since. A filesystem that tracks which names are not yet durable
//! checks that a roll and a take-over leave none behind, and counts the fsyncs they take.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use kaas_shared::fs::{DirEntry, File, Fs, FsRef, OpenMode};
use kaas_storage::{Engine, LogConfig, Partition};

use super::support::*;

/// Forwards to another filesystem, remembering per directory the names changed since its last
/// fsync, and failing renames onto one chosen name when asked.
#[derive(Debug)]
struct NameTracking {
    inner: FsRef,
    state: Mutex<Tracked>,
}

#[derive(Debug, Default)]
struct Tracked {
    unsynced: BTreeMap<PathBuf, BTreeSet<String>>,
    dir_syncs: BTreeMap<PathBuf, usize>,
    fail_renames_onto: Option<String>,
    /// Opens by file name, and directories created (each `create_dir_all`'s path).
    opens: BTreeMap<String, usize>,
    created_dirs: Vec<PathBuf>,
}

impl NameTracking {
    fn over(inner: FsRef) -> Arc<NameTracking> {
        Arc::new(NameTracking { inner, state: Mutex::default() })
    }

    fn changed(&self, path: &Path) {
        if let (Some(dir), Some(name)) = (path.parent(), path.file_name()) {
            let name = name.to_string_lossy().into_owned();
            self.state.lock().unwrap().unsynced.entry(dir.to_owned()).or_default().insert(name);
        }
    }

    /// Names changed in `dir` since its last fsync.
    fn unsynced(&self, dir: &Path) -> BTreeSet<String> {
        self.state.lock().unwrap().unsynced.get(dir).cloned().unwrap_or_default()
    }

    fn dir_syncs(&self, dir: &Path) -> usize {
        self.state.lock().unwrap().dir_syncs.get(dir).copied().unwrap_or(0)
    }

    fn opens(&self, name: &str) -> usize {
        self.state.lock().unwrap().opens.get(name).copied().unwrap_or(0)
    }

    fn created_dirs(&self) -> Vec<PathBuf> {
        self.state.lock().unwrap().created_dirs.clone()
    }

    fn fail_renames_onto(&self, name: Option<&str>) {
        self.state.lock().unwrap().fail_renames_onto = name.map(str::to_owned);
    }
}

impl Fs for NameTracking {
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        let mut missing = Vec::new();
        let mut at = Some(path);
        while let Some(p) = at.filter(|p| self.inner.stat(p).is_err()) {
            missing.push(p.to_owned());
            at = p.parent();
        }
        self.inner.create_dir_all(path)?;
        missing.iter().for_each(|p| self.changed(p));
        self.state.lock().unwrap().created_dirs.push(path.to_owned());
        Ok(())
    }
    fn list_dir_sized(&self, path: &Path, sized: &dyn Fn(&str) -> bool) -> io::Result<Vec<DirEntry>> {
        self.inner.list_dir_sized(path, sized)
    }
    fn stat(&self, path: &Path) -> io::Result<DirEntry> {
        self.inner.stat(path)
    }
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Arc<dyn File>> {
        if let Some(name) = path.file_name() {
            *self.state.lock().unwrap().opens.entry(name.to_string_lossy().into_owned()).or_default() += 1;
        }
        let file = self.inner.open(path, mode)?;
        if mode == OpenMode::CreateNew {
            self.changed(path);
        }
        Ok(file)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.inner.remove_file(path)?;
        self.changed(path);
        Ok(())
    }
    fn remove_dir(&self, path: &Path) -> io::Result<()> {
        self.inner.remove_dir(path)?;
        self.changed(path);
        Ok(())
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let refused = self.state.lock().unwrap().fail_renames_onto.as_deref()
            == to.file_name().and_then(|n| n.to_str());
        if refused {
            return Err(io::Error::from_raw_os_error(5));
        }
        self.inner.rename(from, to)?;
        self.changed(from);
        self.changed(to);
        Ok(())
    }
    fn hard_link(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.inner.hard_link(from, to)?;
        self.changed(to);
        Ok(())
    }
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        self.inner.sync_dir(path)?;
        let mut state = self.state.lock().unwrap();
        state.unsynced.remove(path);
        *state.dir_syncs.entry(path.to_owned()).or_default() += 1;
        Ok(())
    }
}

/// Partition 0 of `v`'s topic, opened on an engine over a tracking view of `v`'s filesystem.
fn tracked(v: &Volume, config: LogConfig) -> (Arc<NameTracking>, Arc<Partition>) {
    let fs = NameTracking::over(v.fs());
    let root = v.engine().root().to_owned();
    let engine = Engine::with_fs(fs.clone(), &root).unwrap();
    let partition = engine.open_partition(TOPIC, v.topic_id, 0, config).unwrap();
    (fs, partition)
}

fn small_segments() -> LogConfig {
    LogConfig { segment_bytes: 1000, index_interval_bytes: 100, ..LogConfig::default() }
}

fn a_roll_makes_its_names_durable_with_one_directory_fsync(v: &Volume) {
    let (fs, p) = tracked(v, small_segments());
    p.take_over(1).unwrap();
    let dir = v.partition_dir();
    append(&p, 1, batch("a", 3));
    let (logs, syncs) = (v.logs().len(), fs.dir_syncs(&dir));
    let mut i = 0;
    while v.logs().len() == logs {
        append(&p, 1, batch(&format!("r{i}"), 3));
        i += 1;
    }
    // The roll: the sealed segment's index files and the snapshot renamed into place, the new
    // segment created, and one directory fsync for all of them.
    assert_eq!(fs.unsynced(&dir), BTreeSet::new(), "names a crash could take back");
    assert_eq!(fs.dir_syncs(&dir) - syncs, 1);
    let sealed = v.logs()[logs - 1].trim_end_matches(".log").to_owned();
    let files = v.files();
    for name in [format!("{sealed}.index"), format!("{sealed}.timeindex"), "producer-state.snapshot".into()] {
        assert!(files.contains(&name), "{name} missing from {files:?}");
    }
    assert!(!files.iter().any(|n| n.ends_with(".tmp")), "{files:?}");
}
scenario!(a_roll_makes_its_names_durable_with_one_directory_fsync);

fn a_failed_roll_leaves_no_temp_files_and_the_next_one_succeeds(v: &Volume) {
    let (fs, p) = tracked(v, small_segments());
    p.take_over(1).unwrap();
    append(&p, 1, batch("a", 3));
    let logs = v.logs().len();
    fs.fail_renames_onto(Some("producer-state.snapshot"));
    let mut i = 0;
    let failed = loop {
        match p.append(&batch(&format!("r{i}"), 3), opts(1)) {
            Ok(out) => block_on(p.wait_durable(out.last_offset)).unwrap(),
            Err(e) => break e,
        }
        i += 1;
        assert!(i < 100, "no roll was attempted");
    };
    assert!(failed.to_string().contains("rename"), "{failed}");
    assert_eq!(v.logs().len(), logs, "no new segment after a failed roll");
    assert!(!v.files().iter().any(|n| n.ends_with(".tmp")), "{:?}", v.files());
    fs.fail_renames_onto(None);
    append(&p, 1, batch("after", 3));
    assert_eq!(v.logs().len(), logs + 1);
    assert_eq!(fs.unsynced(&v.partition_dir()), BTreeSet::new());
    let got = values(&read_all(&p));
    assert_eq!(got.len(), 3 * (i + 2), "{got:?}");
    assert_eq!(got.last().map(String::as_str), Some("after-2"));
}
scenario!(a_failed_roll_leaves_no_temp_files_and_the_next_one_succeeds);

fn the_topic_directory_is_synced_for_a_new_partition_only(v: &Volume) {
    let (fs, p) = tracked(v, LogConfig::default());
    let topic_dir = v.partition_dir().parent().unwrap().to_owned();
    p.take_over(1).unwrap();
    // The partition directory's name is durable before anything can be acknowledged in it.
    assert!(!fs.unsynced(&topic_dir).contains("0"), "{:?}", fs.unsynced(&topic_dir));
    append(&p, 1, batch("a", 1));
    p.relinquish().unwrap();
    let syncs = fs.dir_syncs(&topic_dir);
    let (fs, q) = tracked(v, LogConfig::default());
    q.take_over(2).unwrap();
    assert_eq!(fs.dir_syncs(&topic_dir), 0, "a partition with segments was made durable by its first take-over");
    assert!(syncs >= 1);
    assert_eq!(values(&read_all(&q)), vec!["a-0"]);
}
scenario!(the_topic_directory_is_synced_for_a_new_partition_only);

/// A take-over's claim (the manifest with its epoch) and its new segment become durable with
/// one fsync of the partition directory, the roll's, before the first write is accepted; the
/// claim is the manifest the take-over leaves (it is not written a second time).
fn a_take_over_makes_its_claim_durable_with_the_rolls_directory_fsync(v: &Volume) {
    let p = v.leader(1, LogConfig::default());
    append(&p, 1, batch("a", 3));
    p.relinquish().unwrap();
    let dir = v.partition_dir();
    let (fs, q) = tracked(v, LogConfig::default());
    let report = q.take_over(2).unwrap();
    assert_eq!((report.previous_epoch, report.log_end_offset), (1, 3));
    assert_eq!(fs.unsynced(&dir), BTreeSet::new(), "names a crash could take back");
    assert_eq!(fs.dir_syncs(&dir), 1, "one directory fsync for the claim and the roll");
    let manifest: kaas_shared::epochs::Manifest = serde_json::from_slice(&v.read_file("manifest.json")).unwrap();
    assert_eq!((manifest.epoch, manifest.high_watermark), (2, 3));
    append(&q, 2, batch("b", 1));
    assert_eq!(values(&read_all(&q)), vec!["a-0", "a-1", "a-2", "b-0"]);
}
scenario!(a_take_over_makes_its_claim_durable_with_the_rolls_directory_fsync);

/// When the newest segment is already an empty one of the epoch being taken over (a take-over
/// at that epoch rolled, and its claim was then lost or overwritten), nothing is rolled, and the
/// claim gets a directory fsync of its own.
fn a_claim_without_a_roll_gets_its_own_directory_fsync(v: &Volume) {
    let p = v.leader(2, LogConfig::default());
    p.relinquish().unwrap();
    let logs = v.logs();
    assert_eq!(logs.len(), 1, "{logs:?}");
    // The claim gone: the manifest says epoch 1 again.
    let dir = v.partition_dir();
    let old = kaas_shared::epochs::Manifest { epoch: 1, high_watermark: 0, log_start_offset: 0, cleaned_up_to: None };
    kaas_shared::atomic_file::write_json(&*v.fs(), &dir.join("manifest.json"), &old).unwrap();
    let (fs, q) = tracked(v, LogConfig::default());
    q.take_over(2).unwrap();
    assert_eq!(v.logs(), logs, "the empty segment of epoch 2 is kept, not rolled");
    assert_eq!(fs.unsynced(&dir), BTreeSet::new(), "names a crash could take back");
    let manifest: kaas_shared::epochs::Manifest = serde_json::from_slice(&v.read_file("manifest.json")).unwrap();
    assert_eq!(manifest.epoch, 2);
    append(&q, 2, batch("b", 1));
    assert_eq!(values(&read_all(&q)), vec!["b-0"]);
}
scenario!(a_claim_without_a_roll_gets_its_own_directory_fsync);

/// A broker opens every partition of every topic at start, on the shared volume: one read of the
/// topic's identity stamp serves all its partitions, and a partition directory that exists is
/// listed, not created again.
fn opening_a_topics_partitions_reads_its_stamp_once_and_creates_only_missing_directories(v: &Volume) {
    let p = v.leader(1, LogConfig::default());
    append(&p, 1, batch("a", 2));
    p.relinquish().unwrap();
    let fs = NameTracking::over(v.fs());
    let root = v.engine().root().to_owned();
    let engine = Engine::with_fs(fs.clone(), &root).unwrap();
    let (opens, created) = (fs.opens("topic.id"), fs.created_dirs().len());
    let opened = engine.open_partitions(TOPIC, v.topic_id, 0..3, LogConfig::default()).unwrap();
    assert_eq!(opened.len(), 3);
    assert_eq!(fs.opens("topic.id") - opens, 1, "one read of the stamp for three partitions");
    let topic_dir = v.partition_dir().parent().unwrap().to_owned();
    assert_eq!(fs.created_dirs()[created..], [topic_dir.join("1"), topic_dir.join("2")], "only the missing partition directories are created");
    assert!(opened[0].size_bytes() > 0, "partition 0 is listed: its segments are known");
    for q in &opened[1..] {
        q.take_over(1).unwrap();
    }
    assert!(fs.stat(&topic_dir.join("2")).is_ok());
    // Another incarnation's stamp refuses them all.
    assert!(engine.open_partitions(TOPIC, uuid::Uuid::new_v4(), 0..3, LogConfig::default()).is_err());
}
scenario!(opening_a_topics_partitions_reads_its_stamp_once_and_creates_only_missing_directories);
