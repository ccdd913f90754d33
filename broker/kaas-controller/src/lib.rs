//! The kaas controller: whichever broker holds the `kaas-controller` Lease (seed 003).
//!
//! - [`lease`]: the election, a pure decision function over a narrow Lease store;
//! - [`balancer`]: partition leaders and group-shard coordinators, even, sticky, minimal moves;
//! - [`controller`]: the loop that recomputes and writes assignment.json while holding the Lease;
//! - [`readdress`]: which brokers came back at an address their clients do not know yet;
//! - [`heartbeat_server`] / [`heartbeat_client`]: the gRPC stream every broker keeps open to the
//!   controller, which is both the alive set and the ASSIGNMENT_CHANGED push;
//! - [`stats`]: partition statistics on the heartbeat (log ends, sizes, handed-back high watermarks);
//! - [`status`]: what the controller publishes of them for `kubectl get` (paced);
//! - [`topics`], [`endpoints`] and [`mirror`]: the narrow traits behind which the Kubernetes API sits.

pub mod balancer;
pub mod controller;
pub mod endpoints;
pub mod error;
pub mod heartbeat_client;
pub mod heartbeat_server;
pub mod lease;
pub mod mirror;
pub mod readdress;
pub mod stats;
pub mod status;
pub mod stored_epochs;
pub mod topics;

/// Code generated from proto/heartbeat.proto.
#[allow(missing_debug_implementations, unreachable_pub, clippy::all)]
pub mod proto {
    tonic::include_proto!("kaas.heartbeat.v1");
}

pub use error::{Error, Result};
