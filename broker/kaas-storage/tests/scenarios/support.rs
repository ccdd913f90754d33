//! Shared scaffolding: backends, a partition under test, append/read helpers, file surgery.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;

use kaas_shared::fs::OpenMode;
pub(crate) use kaas_storage::testing::read_all;
use kaas_storage::testing::{BatchBuilder, TestRecord};
use kaas_storage::{AppendOptions, AppendOutcome, Engine, Fs, LogConfig, MemFs, Partition};
use uuid::Uuid;

/// Runs a scenario against both backends.
macro_rules! scenario {
    ($name:ident) => {
        mod $name {
            #[test]
            fn in_memory() {
                super::$name(&$crate::scenarios::support::Volume::memory());
            }
            #[test]
            fn on_disk() {
                super::$name(&$crate::scenarios::support::Volume::disk());
            }
        }
    };
}
pub(crate) use scenario;

pub(crate) const TOPIC: &str = "orders";
pub(crate) const NOW: i64 = 1_700_000_000_000;

/// A volume that several engines ("brokers") can share.
#[derive(Debug)]
pub(crate) struct Volume {
    pub(crate) mem: Option<Arc<MemFs>>,
    root: PathBuf,
    _dir: Option<tempfile::TempDir>,
    pub(crate) topic_id: Uuid,
}

impl Volume {
    pub(crate) fn memory() -> Self {
        Volume {
            mem: Some(Arc::new(MemFs::new())),
            root: "/kaas".into(),
            _dir: None,
            topic_id: Uuid::new_v4(),
        }
    }

    pub(crate) fn disk() -> Self {
        let dir = tempfile::tempdir().unwrap();
        Volume {
            mem: None,
            root: dir.path().join("data"),
            _dir: Some(dir),
            topic_id: Uuid::new_v4(),
        }
    }

    /// A new engine on this volume (a broker starting, or another broker).
    pub(crate) fn engine(&self) -> Engine {
        match &self.mem {
            Some(fs) => Engine::in_memory_with(fs.clone()),
            None => Engine::on_disk(&self.root).unwrap(),
        }
    }

    /// Opens partition 0 on a new engine.
    pub(crate) fn partition(&self, config: LogConfig) -> Arc<Partition> {
        self.engine()
            .open_partition(TOPIC, self.topic_id, 0, config)
            .unwrap()
    }

    /// Opens partition 0 on a new engine and takes it over at `epoch`.
    pub(crate) fn leader(&self, epoch: i32, config: LogConfig) -> Arc<Partition> {
        let p = self.partition(config);
        p.take_over(epoch).unwrap();
        p
    }

    pub(crate) fn fs(&self) -> Arc<dyn Fs> {
        self.engine().fs().clone()
    }

    pub(crate) fn partition_dir(&self) -> PathBuf {
        self.engine().partition_dir(TOPIC, 0).unwrap()
    }

    /// Names in the partition directory.
    pub(crate) fn files(&self) -> Vec<String> {
        self.fs()
            .list_dir(&self.partition_dir())
            .unwrap()
            .into_iter()
            .map(|e| e.name)
            .collect()
    }

    /// Segment `.log` names, oldest first.
    pub(crate) fn logs(&self) -> Vec<String> {
        self.files()
            .into_iter()
            .filter(|n| n.ends_with(".log"))
            .collect()
    }

    pub(crate) fn file_len(&self, name: &str) -> u64 {
        self.fs()
            .stat(&self.partition_dir().join(name))
            .unwrap()
            .len
    }

    pub(crate) fn truncate(&self, name: &str, len: u64) {
        let f = self
            .fs()
            .open(&self.partition_dir().join(name), OpenMode::ReadWrite)
            .unwrap();
        f.set_len(len).unwrap();
    }

    pub(crate) fn write_at(&self, name: &str, at: u64, bytes: &[u8]) {
        let f = self
            .fs()
            .open(&self.partition_dir().join(name), OpenMode::ReadWrite)
            .unwrap();
        f.write_all_at(bytes, at).unwrap();
    }

    pub(crate) fn read_file(&self, name: &str) -> Vec<u8> {
        kaas_shared::fs::read_optional(&*self.fs(), &self.partition_dir().join(name))
            .unwrap()
            .unwrap()
    }
}

pub(crate) fn opts(epoch: i32) -> AppendOptions {
    AppendOptions {
        leader_epoch: epoch,
        now_ms: NOW,
    }
}

/// A batch of `n` records with values `"<tag>-<i>"`.
pub(crate) fn batch(tag: &str, n: usize) -> Vec<u8> {
    let mut b = BatchBuilder::new().timestamps(NOW);
    for i in 0..n {
        b = b.record(Some(tag.as_bytes()), Some(format!("{tag}-{i}").as_bytes()));
    }
    b.build()
}

/// Appends and waits until durable.
pub(crate) fn append(p: &Partition, epoch: i32, records: Vec<u8>) -> AppendOutcome {
    let out = p.append(&records, opts(epoch)).unwrap();
    block_on(p.wait_durable(out.last_offset)).unwrap();
    out
}

pub(crate) fn values(records: &[TestRecord]) -> Vec<String> {
    records
        .iter()
        .map(|r| String::from_utf8(r.value.clone().unwrap()).unwrap())
        .collect()
}

pub(crate) fn block_on<F: Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}
