//! Broker settings that the binary collects from flags and the environment.

use std::net::SocketAddr;
use std::path::PathBuf;

/// Where partitions are stored.
#[derive(Debug, Clone)]
pub enum StorageMode {
    /// The file engine under this directory (the default, `./kaas-data`).
    Disk(PathBuf),
    /// The seed's in-memory dev loop: nothing survives a restart.
    InMemory,
}

/// Everything the protocol server needs to know about itself.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    /// This broker's Kafka node id.
    pub node_id: i32,
    /// The address the Kafka listener binds.
    pub listen: SocketAddr,
    /// The `host:port` clients are told to connect to (Metadata, FindCoordinator).
    pub advertise_host: String,
    pub advertise_port: u16,
    /// The cluster id reported in Metadata and DescribeCluster.
    pub cluster_id: String,
    pub storage: StorageMode,
    /// `auto.create.topics.enable`.
    pub auto_create_topics: bool,
    /// `num.partitions`: partitions of an auto-created topic or a CreateTopics with -1.
    pub default_partitions: i32,
    /// `socket.request.max.bytes`: the largest frame accepted before any allocation.
    pub max_request_bytes: usize,
    /// `max.connections`: connections beyond this wait for a free slot.
    pub max_connections: usize,
    /// How often retention and time-based rolls run.
    pub housekeeping_interval_ms: u64,
    /// Defaults for topic configs that a topic does not set (`log.*` broker settings).
    pub log_defaults: kaas_storage::LogConfig,
}

impl BrokerConfig {
    /// A configuration for tests and local development: loopback, in-memory, ephemeral port.
    pub fn local_in_memory() -> BrokerConfig {
        BrokerConfig {
            node_id: 0,
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            advertise_host: "127.0.0.1".to_string(),
            advertise_port: 0,
            cluster_id: "kaas-local".to_string(),
            storage: StorageMode::InMemory,
            auto_create_topics: true,
            default_partitions: 1,
            max_request_bytes: 100 * 1024 * 1024,
            max_connections: 10_000,
            housekeeping_interval_ms: 30_000,
            log_defaults: kaas_storage::LogConfig::default(),
        }
    }
}
