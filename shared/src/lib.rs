//! The on-volume contract shared by the kaas broker and operator.
//!
//! Everything that touches the shared volume goes through the [`fs::Fs`] trait (a real
//! filesystem or an in-memory one), builds its names with [`names`], and makes durable changes
//! only with the primitives of [`atomic_file`]: a same-directory rename of a fully written and
//! fsynced temp file, or an exclusive create.

pub mod assignment;
pub mod atomic_file;
pub mod broker_settings;
pub mod config_value;
#[cfg(feature = "crd")]
pub mod crd;
pub mod brokers;
pub mod epochs;
pub mod external_addresses;
pub mod fs;
pub mod identity;
pub mod interbroker_key;
pub mod kafka_users;
pub mod layout;
pub mod listen_address;
pub mod live_topic_files;
pub mod live_topics;
pub mod names;
pub mod producer_ids;
pub mod reclaim;
pub mod scram;
pub mod topic_configs;
pub mod topic_file;

use std::path::PathBuf;

/// Errors of the on-volume contract.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A filesystem call failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done ("open", "rename", ...).
        op: &'static str,
        /// The path it was done to.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A file on the volume is not valid JSON of the expected schema.
    #[error("{path} is not a valid {what}: {source}")]
    Json {
        /// Which schema was expected.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The decode error.
        #[source]
        source: serde_json::Error,
    },
    /// A name in a kaas directory does not follow the naming scheme.
    #[error("unrecognised name {name:?}: {reason}")]
    BadName {
        /// The offending name.
        name: String,
        /// What was wrong with it.
        reason: &'static str,
    },
    /// A value cannot be put into an on-volume name (for example a negative epoch).
    #[error("cannot build a name from {what} = {value}: must not be negative")]
    NegativeInName {
        /// The field.
        what: &'static str,
        /// Its value.
        value: i64,
    },
    /// The volume was stamped by a layout this binary does not understand.
    #[error(
        "the volume at {root} has layout version {found_major}.{found_minor}, but this binary \
         understands only major version {supported_major}; upgrade the binary (or point it at \
         another volume)"
    )]
    UnsupportedLayout {
        /// Volume root.
        root: PathBuf,
        /// Major version found on the volume.
        found_major: u32,
        /// Minor version found on the volume.
        found_minor: u32,
        /// The one major version this binary supports.
        supported_major: u32,
    },
    /// A directory carries the identity of another topic incarnation.
    #[error("{dir} belongs to topic id {found}, not {expected}")]
    IdentityMismatch {
        /// The topic directory.
        dir: PathBuf,
        /// The identity stamped in it.
        found: uuid::Uuid,
        /// The identity the caller expected.
        expected: uuid::Uuid,
    },
    /// A stamp file exists but is not complete (its creator died between create and write).
    #[error("{path} is incomplete or unreadable: {reason}")]
    BadStamp {
        /// The stamp file.
        path: PathBuf,
        /// Why it cannot be used.
        reason: String,
    },
    /// A controller tried to write an assignment older than the one on the volume.
    #[error("assignment.json was written by controller epoch {found}; epoch {ours} is stale")]
    StaleController {
        /// The epoch on the volume.
        found: i64,
        /// The writer's epoch.
        ours: i64,
    },
    /// The producer-id space is exhausted.
    #[error("no producer-id block left to claim in {dir}")]
    ProducerIdsExhausted {
        /// The block directory.
        dir: PathBuf,
    },
}

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Wraps an I/O error with the operation and path it belongs to.
    pub fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            op,
            path: path.into(),
            source,
        }
    }
}
