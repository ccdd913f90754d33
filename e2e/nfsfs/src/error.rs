//! Errors of the filesystem process, its control protocol and the test-support API.

use std::io;
use std::path::PathBuf;

/// What can go wrong outside a FUSE operation (those answer with an errno instead).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A `--mount` argument or mount list that cannot be used.
    #[error("bad mount spec {spec:?}: {reason}")]
    MountSpec {
        /// The argument as given.
        spec: String,
        /// Why it is refused.
        reason: String,
    },
    /// The kernel refused a FUSE mount (no /dev/fuse, no permission, no fusermount3).
    #[error(
        "cannot mount FUSE at {path}: {source} (needs /dev/fuse, root or fusermount3, \
         see scripts/install-deps.sh)"
    )]
    Mount {
        /// The mount point.
        path: PathBuf,
        /// The kernel's or fusermount's error.
        source: io::Error,
    },
    /// A file or socket operation of the process itself.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// On what.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// A control command that cannot be parsed or applied.
    #[error("control command: {0}")]
    Command(String),
    /// The filesystem process did not come up or answered something unexpected.
    #[error("filesystem process: {0}")]
    Process(String),
}

impl Error {
    /// An [`Error::Io`] about `path`.
    pub fn io(what: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Error {
        Error::Io {
            what,
            path: path.into(),
            source,
        }
    }
}
