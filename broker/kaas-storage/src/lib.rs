//! kaas-storage: the storage engine for one writer per partition on a shared volume.
//!
//! A partition is a chain of segment files named `<leaderEpoch>-<baseOffset>.log` (with sparse
//! `.index` / `.timeindex` siblings), plus `manifest.json` and `producer-state.snapshot`. Only
//! the leader holds descriptors ([`Partition::take_over`] opens them, [`Partition::relinquish`]
//! and [`Partition::abandon`] close them). Appends write to the page cache; durability is a
//! group-commit fdatasync, and the high watermark is the fsynced end of the log. Compacted
//! topics (`cleanup.policy=compact`) are cleaned on the leader by [`Partition::clean`].
//!
//! The engine knows the Kafka v2 record-batch format and nothing else of the wire protocol,
//! and nothing of Kubernetes.

mod batch;
pub mod buffers;
mod cleaner;
mod config;
mod control;
mod engine;
mod error;
pub mod group_commit;
mod index;
mod manifest;
mod mmap;
mod partition;
pub mod piped;
mod producer_snapshot;
mod producer_state;
mod scan;
mod segment;
mod throttle;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
mod txn_index;

pub use batch::{Codec, transactional_producer};
pub use config::{LogConfig, TimestampType};
pub use control::{Marker, MarkerKind};
pub use engine::Engine;
pub use error::{Error, RecordError, RecordField, Result};
pub use manifest::Manifest;
#[cfg(any(test, feature = "testing"))]
pub use partition::CleanHook;
pub use partition::{
    AppendOptions, AppendOutcome, CleanReport, CleanStep, CleanerStats, Durable, Partition, ReadBound, ReadOutcome, Removed, TakeoverReport,
};
pub use producer_state::ProducerSummary;
pub use throttle::{IoThrottle, ThrottleClock};
pub use txn_index::AbortedTxn;

/// Re-exported so callers can name the filesystem types without depending on kaas-shared.
pub use kaas_shared::fs::{Fs, FsRef, MemFs, RealFs};
pub use kaas_shared::producer_ids::ProducerIdAllocator;
