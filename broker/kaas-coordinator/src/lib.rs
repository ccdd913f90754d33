//! kaas-coordinator: the group and transaction coordinators and the shard logs they keep their
//! state in on the shared volume. It knows no Kafka wire types: requests arrive as plain
//! structs, answers leave as plain results with a [`GroupError`] or a [`txn::TxnError`], which
//! the broker's protocol edge maps to Kafka error codes.
//!
//! - [`shard_log`]: an epoch-fenced, group-committed key/value log with snapshots, one per
//!   coordinator shard (groups and transactions alike); its module docs answer seed 001's
//!   three questions for everything here that touches the volume.
//! - [`shard_owner`]: what sharded coordinators share: owning shards at an epoch, taking them
//!   over and handing them over as the assignment says.
//! - [`groups`]: Kafka's classic group protocol, the KIP-848 consumer protocol and committed
//!   offsets.
//! - [`share_partition`]: KIP-932 share-partition state (which records of a partition a share
//!   group delivered, to whom, how often), kept by the partition's leader in a shard log in the
//!   partition's directory.
//! - [`txn`]: the transaction coordinator (transactional ids, producer epochs, the two-phase end
//!   of a transaction); the broker writes its markers.

pub mod clock;
mod counted_mutex;
mod error;
pub mod groups;
pub mod shard_log;
pub mod shard_owner;
pub mod share_partition;
pub mod txn;

pub use error::{Error, GroupError, Result};
pub use shard_log::{Entry, SHARD_COUNT, ShardLog, ShardStats, shard_of};
