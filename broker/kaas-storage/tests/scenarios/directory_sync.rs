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
        Ok(())
    }
    fn list_dir_sized(&self, path: &Path, sized: &dyn Fn(&str) -> bool) -> io::Result<Vec<DirEntry>> {
        self.inner.list_dir_sized(path, sized)
    }
    fn stat(&self, path: &Path) -> io::Result<DirEntry> {
        self.inner.stat(path)
    }
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Arc<dyn File>> {
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
