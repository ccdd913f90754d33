//! The kaas Kafka protocol server.
//!
//! Requests are framed and parsed in [`connection`], routed by the one handler table in
//! [`router`] (which also computes the ApiVersions answer), and executed by one module per
//! Kafka API in [`api`] against the broker's state: the [`topics`] registry over the storage
//! engine, and the [`leadership`] view that says which partitions this broker leads.

pub mod api;
pub mod assignment_view;
pub mod authz;
pub mod broker;
pub mod catalog;
pub mod client_software;
pub mod cluster;
pub mod config;
pub mod connection;
pub mod connections;
pub mod control_plane;
pub mod controller_file;
pub mod error;
pub mod error_codes;
pub mod external;
pub mod fetch_session;
pub mod frame;
pub mod group_configs;
pub mod http;
pub mod interbroker;
pub mod kafka_users;
pub mod lag;
pub mod leadership;
pub mod metrics;
pub mod quota;
pub mod rate_limit;
pub mod reload;
pub mod router;
pub mod sasl;
pub mod server;
pub mod share;
mod side_by_side;
pub mod slow_requests;
pub mod takeover_driver;
pub mod topic_admin;
pub mod topic_config;
pub mod topic_store;
pub mod timed_fs;
pub mod throttled;
pub mod tls;
pub mod topics;
pub mod txn;

/// The group coordinator and shard ownership live in `kaas-coordinator`; their paths here are
/// kept for the protocol edge.
pub use kaas_coordinator::{groups, shard_owner};

pub use broker::Broker;
pub use config::BrokerConfig;
pub use error::{Error, Result};
pub use server::{ListenerRole, Server};
