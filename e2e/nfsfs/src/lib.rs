//! kaas-nfsfs: a FUSE filesystem that serves one backing directory (the "NFS server") through
//! several mount points, one per simulated client host, with the behaviour of Linux NFS
//! clients that a local disk hides (see the NFS substrate contract):
//!
//! - unlink or rename-over of a file open on the same mount silly-renames it to
//!   `.nfs<fileid><counter>`, which cannot be unlinked (EBUSY), keeps its directory non-empty
//!   (ENOTEMPTY) and disappears when the mount's last handle on it closes;
//! - a file removed through one mount gives ESTALE to the handles other mounts hold;
//! - same-directory rename, exclusive create, hard links and fsync go to the backing
//!   filesystem, whose atomicity is NFS's; nothing is cached by default (close-to-open holds),
//!   or attributes are cached for a configurable time;
//! - faults are injected through a control socket ([`control`]) or in process ([`testing`]).
//!
//! The binary `kaas-nfsfs` serves it; [`testing`] is the API for tests of other crates.

mod attr;
pub mod control;
mod error;
pub mod faults;
mod fs;
mod inodes;
mod mounts;
mod opens;
pub mod server;
pub mod testing;

pub use error::Error;
pub use fs::{Options, Volume};
pub use mounts::{MountSpec, Mounts, detach, is_mounted};
