//! The engine: a filesystem, a volume layout, partitions and the producer-id allocator.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use kaas_shared::fs::{FsRef, MemFs, RealFs};
use kaas_shared::identity;
use kaas_shared::layout::Layout;
use kaas_shared::producer_ids::{DEFAULT_BLOCK_SIZE, ProducerIdAllocator};
use uuid::Uuid;

use crate::config::LogConfig;
use crate::partition::Partition;
use crate::{Error, Result};

/// The storage engine over one volume. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    fs: FsRef,
    layout: Layout,
    producer_ids: ProducerIdAllocator,
}

/// Root path used by [`Engine::in_memory`].
const IN_MEMORY_ROOT: &str = "/kaas";

impl Engine {
    /// The real filesystem under `root`: creates it, then checks (or stamps) the layout version.
    pub fn on_disk(root: &Path) -> Result<Engine> {
        Engine::with_fs(Arc::new(RealFs), root)
    }

    /// The same engine over an in-memory filesystem.
    pub fn in_memory() -> Engine {
        Engine::in_memory_with(Arc::new(MemFs::new()))
    }

    /// Over a given in-memory filesystem (tests keep the handle for fault injection).
    pub fn in_memory_with(fs: Arc<MemFs>) -> Engine {
        let layout = Layout::new(IN_MEMORY_ROOT);
        if let Err(e) = layout.ensure(&*fs) {
            tracing::error!(error = %e, "cannot stamp the in-memory volume");
        }
        let fs: FsRef = fs;
        let producer_ids = ProducerIdAllocator::new(fs.clone(), &layout, DEFAULT_BLOCK_SIZE);
        Engine {
            inner: Arc::new(Inner {
                fs,
                layout,
                producer_ids,
            }),
        }
    }

    /// Over any filesystem implementation (for example a test filesystem with NFS semantics).
    pub fn with_fs(fs: FsRef, root: &Path) -> Result<Engine> {
        let layout = Layout::new(root);
        layout.ensure(&*fs)?;
        let producer_ids = ProducerIdAllocator::new(fs.clone(), &layout, DEFAULT_BLOCK_SIZE);
        Ok(Engine {
            inner: Arc::new(Inner {
                fs,
                layout,
                producer_ids,
            }),
        })
    }

    /// The volume root.
    pub fn root(&self) -> &Path {
        self.inner.layout.root()
    }

    /// The volume layout (paths of topics, partitions, cluster files).
    pub fn layout(&self) -> &Layout {
        &self.inner.layout
    }

    /// The filesystem, for other on-volume files (topic.json, group offsets, ...).
    pub fn fs(&self) -> &FsRef {
        &self.inner.fs
    }

    /// The partition directory of `topic`/`partition`.
    pub fn partition_dir(&self, topic: &str, partition: i32) -> Result<PathBuf> {
        Ok(self.inner.layout.partition_dir(topic, partition)?)
    }

    /// Opens a partition stat-only: stamps (or verifies) the topic directory's identity, creates
    /// the partition directory if needed, lists and stats its segment files. No descriptor is
    /// held until [`Partition::take_over`]. Fails with an identity mismatch if the directory
    /// belongs to another incarnation of the topic.
    pub fn open_partition(
        &self,
        topic: &str,
        topic_id: Uuid,
        partition: i32,
        config: LogConfig,
    ) -> Result<Arc<Partition>> {
        self.check_topic_dir(topic, topic_id)?;
        self.open_checked(topic, topic_id, partition, config)
    }

    /// [`Engine::open_partition`] of each partition in `partitions`, with one identity check
    /// for all of them (a broker opens every partition of every topic at start, and on an NFS
    /// volume each read of the stamp is round trips).
    pub fn open_partitions(
        &self,
        topic: &str,
        topic_id: Uuid,
        partitions: std::ops::Range<i32>,
        config: LogConfig,
    ) -> Result<Vec<Arc<Partition>>> {
        self.check_topic_dir(topic, topic_id)?;
        partitions.map(|p| self.open_checked(topic, topic_id, p, config)).collect()
    }

    /// Checks the topic name and stamps (or verifies) its directory's identity.
    fn check_topic_dir(&self, topic: &str, topic_id: Uuid) -> Result<()> {
        if topic.is_empty()
            || topic.contains('/')
            || topic == "."
            || topic == ".."
            || topic.starts_with("__")
        {
            return Err(Error::InvalidConfig {
                key: "topic".into(),
                value: topic.into(),
            });
        }
        let fs = &*self.inner.fs;
        let topic_dir = self.inner.layout.topic_dir(topic);
        // Stamped already (every partition of a topic that exists): one read instead of the
        // stamp's exclusive create, which writes and fsyncs a temporary file and the directory
        // — at every start, on the shared volume. A missing stamp is made; a mismatch fails in
        // the stamp's own check.
        if identity::read(fs, &topic_dir)? != Some(topic_id) {
            identity::stamp(fs, &topic_dir, topic_id)?;
        }
        Ok(())
    }

    /// Opens a partition of a topic whose directory [`Engine::check_topic_dir`] has checked.
    fn open_checked(&self, topic: &str, topic_id: Uuid, partition: i32, config: LogConfig) -> Result<Arc<Partition>> {
        let dir = self.partition_dir(topic, partition)?;
        Ok(Arc::new(Partition::open(self.inner.fs.clone(), dir, topic_id, config)?))
    }

    /// The producer-id allocator (blocks claimed on the volume; one block at a time per engine).
    pub fn producer_ids(&self) -> &ProducerIdAllocator {
        &self.inner.producer_ids
    }
}
