//! The open-file limit. A broker holds a descriptor for every client connection and every
//! segment file in use, and container runtimes may start it with a soft limit of 1,024 while the
//! hard limit is far higher; a broker leading a few thousand partitions would then fail to open
//! files (EMFILE) long before the machine runs short. Like the JVM (`-XX:+MaxFDLimit`, on by
//! default) and Go's runtime, kaas raises its soft limit to the hard one at start.

use nix::sys::resource::{Resource, getrlimit, setrlimit};

/// Raises the soft RLIMIT_NOFILE to the hard limit, logging the change; a failure is logged
/// and the broker runs with the limit it was given (`kaas_max_fds` shows it).
pub(crate) fn raise() {
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) if soft < hard => match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
            Ok(()) => tracing::info!(from = soft, to = hard, "raised the open-file limit (RLIMIT_NOFILE) to its hard limit"),
            Err(e) => tracing::warn!(soft, hard, error = %e, "could not raise the open-file limit"),
        },
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "could not read the open-file limit"),
    }
}
