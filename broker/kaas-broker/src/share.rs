//! KIP-932 share groups on the partition side: ShareFetch and ShareAcknowledge reach the leader
//! of each partition, which hands records out to share-group members and takes their
//! acknowledgements (`kaas_coordinator::share_partition` holds the rules; this module connects
//! them to partitions, sessions and the protocol).
//!
//! - [`sessions`]: share sessions (one per group member and broker), their epochs and the
//!   partitions they name; a session's connection closing gives its records back.
//! - [`partitions`]: the share state of the partitions this broker leads, taken over at each
//!   partition's leader epoch, and the acquire / acknowledge steps of one partition.

pub mod partitions;
pub mod sessions;

pub use partitions::SharePartitions;
pub use sessions::ShareSessions;

/// The share-group side of a broker.
#[derive(Debug, Default)]
pub struct Shares {
    pub sessions: ShareSessions,
    pub partitions: SharePartitions,
    /// Notified when records become available again (released, or their member's session
    /// ended): share fetches waiting for records look again.
    pub released: tokio::sync::Notify,
}
