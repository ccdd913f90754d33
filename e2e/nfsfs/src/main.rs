//! `kaas-nfsfs --backing DIR --mount host-a=/mnt/a --mount host-b=/mnt/b [--control SOCK]`
//!
//! Serves DIR through one FUSE mount per simulated NFS client host until SIGTERM/SIGINT or a
//! `shutdown` control command; prints `kaas-nfsfs ready` on stdout once everything is mounted.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use kaas_nfsfs::server::{self, ServeConfig};
use kaas_nfsfs::{MountSpec, Options};

#[derive(Debug, Parser)]
#[command(
    name = "kaas-nfsfs",
    about = "A FUSE filesystem with NFS client semantics, one mount per simulated host"
)]
struct Args {
    /// The directory served (the NFS server's export).
    #[arg(long, env = "KAAS_NFSFS_BACKING")]
    backing: PathBuf,
    /// A simulated host: NAME=MOUNTPOINT (repeat for each host).
    #[arg(long = "mount", required = true)]
    mounts: Vec<MountSpec>,
    /// A Unix socket for fault-injection commands (see the `control` module docs).
    #[arg(long, env = "KAAS_NFSFS_CONTROL")]
    control: Option<PathBuf>,
    /// Attribute and name cache time in milliseconds (0: no caching; NFS's actimeo otherwise).
    #[arg(long, default_value_t = 0)]
    attr_timeout_ms: u64,
    /// Let reads and writes go through the kernel page cache (then a cached read does not see
    /// ESTALE or faults).
    #[arg(long)]
    no_direct_io: bool,
    /// FUSE worker threads per mount.
    #[arg(long, default_value_t = 4)]
    threads: usize,
    /// Do not ask fusermount3 to unmount if this process dies.
    #[arg(long)]
    no_auto_unmount: bool,
}

fn main() -> ExitCode {
    // Before any thread exists, so every thread inherits the mask (see block_stop_signals).
    if let Err(e) = server::block_stop_signals() {
        eprintln!("kaas-nfsfs: {e}");
        return ExitCode::FAILURE;
    }
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "kaas_nfsfs=info,fuser=warn".into()),
        )
        .init();
    let args = Args::parse();
    let config = ServeConfig {
        backing: args.backing,
        mounts: args.mounts,
        control: args.control,
        options: Options {
            attr_ttl: Duration::from_millis(args.attr_timeout_ms),
            direct_io: !args.no_direct_io,
            threads: args.threads,
            auto_unmount: !args.no_auto_unmount,
        },
    };
    match server::run(config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "kaas-nfsfs failed");
            eprintln!("kaas-nfsfs: {e}");
            ExitCode::FAILURE
        }
    }
}
