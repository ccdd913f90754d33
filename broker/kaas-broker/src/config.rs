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

/// What a broker in a cluster needs beyond the local settings (seed 003).
#[derive(Debug, Clone)]
pub struct ClusterSettings {
    /// The pod name: the Lease holder identity. Ends in `-<broker id>` (the StatefulSet ordinal).
    pub identity: String,
    /// Where the heartbeat gRPC server binds.
    pub heartbeat_listen: SocketAddr,
    /// `host:port` other brokers dial for this broker's heartbeat server.
    pub heartbeat_advertise: String,
    /// The `kaas-controller` Lease.
    pub lease: std::sync::Arc<dyn kaas_controller::lease::LeaseStore>,
    pub lease_duration: std::time::Duration,
    pub renew_interval: std::time::Duration,
    /// `fence.timeout`: unacknowledged this long, a broker stops acknowledging writes.
    pub fence_timeout: std::time::Duration,
    /// `session.timeout`: silent this long, a broker's partitions are moved (> fence + margin).
    pub session_timeout: std::time::Duration,
    /// How long SIGTERM waits for the controller to move partitions away before relinquishing.
    pub drain_timeout: std::time::Duration,
    /// The topics' source of truth (KafkaTopic resources); `None`: the volume is (brokers
    /// create topic directories themselves, as in-process clusters do).
    pub catalog: Option<std::sync::Arc<dyn crate::catalog::TopicCatalog>>,
    /// Where the controller mirrors each assignment for humans (KafkaClusterAssignments).
    pub mirror: Option<std::sync::Arc<dyn kaas_controller::mirror::AssignmentMirror>>,
    /// Which brokers Kubernetes sees serving (EndpointSlices); `None`: heartbeats alone.
    pub ready_brokers: Option<std::sync::Arc<dyn kaas_controller::endpoints::ReadyBrokers>>,
}

impl ClusterSettings {
    /// Settings for in-process clusters and tests: fast timings over the given Lease.
    pub fn for_tests(identity: &str, lease: std::sync::Arc<dyn kaas_controller::lease::LeaseStore>) -> ClusterSettings {
        use std::time::Duration;
        ClusterSettings {
            identity: identity.to_string(),
            heartbeat_listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            heartbeat_advertise: String::new(),
            lease,
            lease_duration: Duration::from_secs(3),
            renew_interval: Duration::from_millis(300),
            fence_timeout: Duration::from_secs(2),
            session_timeout: Duration::from_secs(4),
            drain_timeout: Duration::from_secs(10),
            catalog: None,
            mirror: None,
            ready_brokers: None,
        }
    }

    /// The broker id the identity's ordinal names (`kaas-2` is broker 2).
    pub fn broker_id_of(identity: &str) -> Option<i32> {
        identity.rsplit_once('-').and_then(|(_, n)| n.parse().ok()).filter(|id: &i32| *id >= 0)
    }
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
    /// Cluster mode; `None` is local mode (a lease shim leads every partition).
    pub cluster: Option<ClusterSettings>,
    /// The group coordinator's settings (`group.*`, `offsets.*`).
    pub groups: crate::groups::GroupConfig,
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
            cluster: None,
            groups: crate::groups::GroupConfig::default(),
        }
    }
}
