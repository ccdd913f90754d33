//! Errors of the coordinator shard storage (group and transaction shards alike).

use std::path::PathBuf;

/// What can go wrong storing a coordinator's state.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("volume: {0}")]
    Volume(#[from] kaas_shared::Error),
    #[error("coordinator shard {path} is owned at epoch {current}; take-over at {requested} refused")]
    Fenced {
        path: PathBuf,
        requested: i32,
        current: i32,
    },
    #[error("this broker does not own the coordinator shard")]
    NotOwner,
    #[error("coordinator shard storage failed earlier ({0}); refusing writes until the next take-over")]
    Poisoned(String),
    #[error("corrupt coordinator shard snapshot {path}: {reason}")]
    CorruptSnapshot { path: PathBuf, reason: String },
    #[error("coordinator shard entry too large: {0} bytes")]
    TooLarge(usize),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Whether the shard is not (or no longer) this broker's: handed over, or deposed by a newer
    /// owner. A client is then sent to the new coordinator; every other failure is this one's.
    pub fn not_owner(&self) -> bool {
        matches!(self, Error::NotOwner | Error::Fenced { .. })
    }

    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Error {
        Error::Io {
            op,
            path: path.into(),
            source,
        }
    }
}
