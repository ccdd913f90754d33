//! Broker settings that the binary collects from flags and the environment.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

/// Where partitions are stored.
#[derive(Debug, Clone)]
pub enum StorageMode {
    /// The file engine under this directory (the default, `./kaas-data`).
    Disk(PathBuf),
    /// The seed's in-memory dev loop: nothing survives a restart.
    InMemory,
}

/// What a broker in a cluster needs beyond the local settings (seed 003). The cluster runtime
/// (the `kaas` binary's `cluster` module) builds it; the broker sees the controller only
/// through [`ControlPlane`](crate::control_plane::ControlPlane).
#[derive(Debug, Clone)]
pub struct ClusterLink {
    /// The Lease epoch, the heartbeat's acknowledgements, the controller role.
    pub control: std::sync::Arc<dyn crate::control_plane::ControlPlane>,
    /// `fence.timeout`: unacknowledged this long, a broker stops acknowledging writes.
    pub fence_timeout: Duration,
    /// How long SIGTERM waits for the controller to move partitions away before relinquishing.
    pub drain_timeout: Duration,
    /// The topics' source of truth (KafkaTopic resources); `None`: the volume is (brokers
    /// create topic directories themselves, as in-process clusters do).
    pub catalog: Option<std::sync::Arc<dyn crate::catalog::TopicCatalog>>,
}

#[cfg(test)]
impl ClusterLink {
    /// A link for unit tests over a control plane set by hand.
    pub(crate) fn for_tests(control: std::sync::Arc<dyn crate::control_plane::ControlPlane>) -> ClusterLink {
        ClusterLink { control, fence_timeout: Duration::from_secs(2), drain_timeout: Duration::from_secs(10), catalog: None }
    }
}

#[cfg(test)]
impl BrokerConfig {
    /// Broker 0 of a cluster, for unit tests: its data in `dir`, its Lease and heartbeat from
    /// `control`.
    pub(crate) fn cluster_for_tests(dir: &std::path::Path, control: std::sync::Arc<dyn crate::control_plane::ControlPlane>) -> BrokerConfig {
        BrokerConfig {
            node_id: 0,
            storage: StorageMode::Disk(dir.to_path_buf()),
            cluster: Some(ClusterLink::for_tests(control)),
            ..BrokerConfig::local_in_memory()
        }
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
    /// A second Kafka listener for clients outside the network `advertise_host` is reached
    /// in (`--external-listen`), secured like the first; `None`: none.
    pub external: Option<crate::external::ExternalListenerConfig>,
    /// The cluster id reported in Metadata and DescribeCluster.
    pub cluster_id: String,
    pub storage: StorageMode,
    /// The filesystem a `Disk` volume is opened through; `None` is the operating system's.
    /// The fault campaign puts a fault-injecting one here (`kaas_shared::fs::FaultyFs`).
    pub volume_fs: Option<kaas_shared::fs::FsRef>,
    /// `auto.create.topics.enable`.
    pub auto_create_topics: bool,
    /// At most this many topics auto-created a minute (bursts up to as many): one Metadata
    /// request naming many unknown topics must not create them all.
    pub auto_create_topics_per_minute: u32,
    /// `num.partitions`: partitions of an auto-created topic or a CreateTopics with -1.
    pub default_partitions: i32,
    /// `socket.request.max.bytes`: the largest frame accepted before any allocation.
    pub max_request_bytes: usize,
    /// The Kafka listener's protection against idle, slow and too many connections.
    pub connections: ConnectionLimits,
    /// TLS and SASL on the Kafka listener (`security.protocol`); none by default.
    pub security: ListenerSecurity,
    /// How often retention and time-based rolls run.
    pub housekeeping_interval_ms: u64,
    /// Defaults for topic configs that a topic does not set (`log.*` broker settings).
    pub log_defaults: kaas_storage::LogConfig,
    /// The log cleaner's schedule (its dedupe buffer is in `log_defaults`).
    pub log_cleaner: LogCleanerSettings,
    /// Cluster mode; `None` is local mode (a lease shim leads every partition).
    pub cluster: Option<ClusterLink>,
    /// The group coordinator's settings (`group.*`, `offsets.*`).
    pub groups: crate::groups::GroupConfig,
    /// What one Fetch may cost: `fetch.max.bytes`, its wait, its partitions, fetch sessions.
    pub fetch: crate::api::fetch::FetchConfig,
    /// Export per-partition series (log offsets and sizes, group offsets and lag) on
    /// `/metrics`; off for brokers with more partitions than a Prometheus should hold.
    pub metrics_per_partition: bool,
    /// Requests whose own time (not a wait the client asked for) passes this are logged at
    /// WARN with their client, API and slow phase; `None` turns the log off.
    pub slow_request: Option<std::time::Duration>,
    /// The finalized `transaction.version` feature (1 or 2) ApiVersions announces: at 2,
    /// Kafka 4 clients use transactions v2 (KIP-890 part 2).
    pub transaction_version: i16,
    /// `group.share.partition.max.record.locks`: records of one partition a share group has
    /// in flight at most.
    pub share_max_record_locks: usize,
    /// `group.share.max.size`: members of one share group at most.
    pub share_max_group_size: usize,
}

/// `log.cleaner.enable`, `log.cleaner.backoff.ms`, `log.cleaner.threads` and
/// `log.cleaner.io.max.bytes.per.second`: whether compacted topics are cleaned, how long the
/// cleaner rests between rounds over the partitions this broker leads, how many it cleans at
/// once, and the bytes per second its threads may read and write together.
#[derive(Debug, Clone, Copy)]
pub struct LogCleanerSettings {
    pub enable: bool,
    pub backoff: Duration,
    pub threads: usize,
    /// Not finite: no limit (Kafka's default).
    pub io_max_bytes_per_second: f64,
}

impl Default for LogCleanerSettings {
    fn default() -> Self {
        LogCleanerSettings { enable: true, backoff: Duration::from_millis(15_000), threads: 1, io_max_bytes_per_second: f64::INFINITY }
    }
}

impl BrokerConfig {
    /// The advertised `host:port` as one string, an IPv6 host in brackets (`[fd00::5]:9092`),
    /// as Kafka writes `advertised.listeners`. (Metadata carries host and port apart, the host
    /// without brackets.)
    pub fn advertised_address(&self) -> String {
        if self.advertise_host.contains(':') {
            format!("[{}]:{}", self.advertise_host, self.advertise_port)
        } else {
            format!("{}:{}", self.advertise_host, self.advertise_port)
        }
    }

    /// A configuration for tests and local development: loopback, in-memory, ephemeral port.
    pub fn local_in_memory() -> BrokerConfig {
        BrokerConfig {
            node_id: 0,
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            advertise_host: "127.0.0.1".to_string(),
            advertise_port: 0,
            external: None,
            cluster_id: "kaas-local".to_string(),
            storage: StorageMode::InMemory,
            volume_fs: None,
            auto_create_topics: true,
            auto_create_topics_per_minute: 300,
            default_partitions: 1,
            max_request_bytes: 100 * 1024 * 1024,
            connections: ConnectionLimits::default(),
            security: ListenerSecurity::default(),
            housekeeping_interval_ms: 30_000,
            log_defaults: kaas_storage::LogConfig::default(),
            log_cleaner: LogCleanerSettings::default(),
            cluster: None,
            groups: crate::groups::GroupConfig::default(),
            fetch: crate::api::fetch::FetchConfig::default(),
            metrics_per_partition: true,
            slow_request: None,
            transaction_version: 2,
            share_max_record_locks: 2000,
            share_max_group_size: 200,
        }
    }
}

/// The listener's `security.protocol`: PLAINTEXT (neither), SSL (`tls`), SASL_PLAINTEXT
/// (`sasl`) or SASL_SSL (both); and whether requests are authorized (`authorizer.class.name`).
#[derive(Debug, Clone, Default)]
pub struct ListenerSecurity {
    pub tls: Option<std::sync::Arc<crate::tls::TlsReloader>>,
    pub sasl: Option<crate::sasl::SaslSettings>,
    /// ACL authorization; `None`: every request is allowed (the default).
    pub authorizer: Option<crate::authz::AuthzSettings>,
}

impl ListenerSecurity {
    /// Kafka's name for this combination.
    pub fn protocol(&self) -> &'static str {
        match (self.tls.is_some(), self.sasl.is_some()) {
            (false, false) => "PLAINTEXT",
            (true, false) => "SSL",
            (false, true) => "SASL_PLAINTEXT",
            (true, true) => "SASL_SSL",
        }
    }
}

/// How the Kafka listener bounds what connections can hold (issue #15: a client that connects
/// and sends nothing, or half a frame, must not pin a slot or a buffer forever).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// `connections.max.idle.ms`: a connection that has received no byte and had no request
    /// outstanding for this long is closed. A client that takes none of a response's bytes for
    /// this long is closed too (it holds its requests outstanding forever otherwise).
    pub max_idle: Duration,
    /// kaas-specific (Kafka has no such setting): once a frame's first byte arrived, the whole
    /// frame must arrive within this, or the connection is closed and its buffer freed.
    pub request_read_timeout: Duration,
    /// `max.connections`: open connections on the listener. At the cap a new connection evicts
    /// the least recently active connection with nothing outstanding, or is closed at once.
    pub max_connections: usize,
    /// `max.connections.per.ip`: a new connection from an address that already has this many
    /// is closed at once.
    pub max_connections_per_ip: usize,
    /// `max.connections.per.ip.overrides`: per-address caps that replace the one above.
    pub max_connections_per_ip_overrides: HashMap<IpAddr, usize>,
    /// `max.connection.creation.rate`: new connections per second on the listener (KIP-612),
    /// measured as client quotas are; over it the listener waits before it accepts more. `None`
    /// is unlimited (Kafka's default).
    pub max_connection_creation_rate: Option<u32>,
    /// `socket.send.buffer.bytes`: each client connection's SO_SNDBUF; `None` leaves it to the
    /// kernel's autotuning (Kafka's -1). Kafka's default, 100 KiB: with the kernel's autotuned
    /// megabytes, a loopback consumer's receive path ran in the broker's softirq and cost it
    /// more than the copies zero-copy fetch saves (docs/performance.md, "Consume: copies and zero
    /// copy").
    pub send_buffer_bytes: Option<usize>,
}

impl ConnectionLimits {
    /// The cap for connections from `ip`.
    pub fn per_ip_cap(&self, ip: IpAddr) -> usize {
        self.max_connections_per_ip_overrides.get(&ip).copied().unwrap_or(self.max_connections_per_ip)
    }
}

impl Default for ConnectionLimits {
    /// Kafka's `connections.max.idle.ms` (10 minutes). Kafka leaves both connection caps
    /// unlimited; kaas caps them because every connection costs a task, two buffers and a file
    /// descriptor: 10,000 in all fits a container's usual hard file limit (which the `kaas`
    /// binary raises its soft limit to) with room for segment files, and 1,000 per address stops one client from taking the listener while leaving
    /// room for many clients behind one NAT address.
    fn default() -> ConnectionLimits {
        ConnectionLimits {
            max_idle: Duration::from_secs(600),
            request_read_timeout: Duration::from_secs(30),
            max_connections: 10_000,
            max_connections_per_ip: 1_000,
            max_connections_per_ip_overrides: HashMap::new(),
            max_connection_creation_rate: None,
            send_buffer_bytes: Some(102_400),
        }
    }
}

/// Parses `max.connections.per.ip.overrides` as Kafka spells it: `host:count,host:count`, here
/// with IP addresses only (an IPv6 address in brackets or bare: the count follows the last `:`).
pub fn parse_per_ip_overrides(text: &str) -> Result<HashMap<IpAddr, usize>, String> {
    let mut overrides = HashMap::new();
    for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (host, count) = entry.rsplit_once(':').ok_or_else(|| format!("{entry:?} is not host:count"))?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let ip: IpAddr = host.parse().map_err(|_| format!("{host:?} in {entry:?} is not an IP address (host names are not resolved)"))?;
        let count: usize = count.parse().map_err(|_| format!("{count:?} in {entry:?} is not a connection count"))?;
        if overrides.insert(ip, count).is_some() {
            return Err(format!("{ip} appears twice"));
        }
    }
    Ok(overrides)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_advertised_ipv6_host_is_bracketed_in_host_port() {
        let with = |host: &str| BrokerConfig { advertise_host: host.to_string(), advertise_port: 9092, ..BrokerConfig::local_in_memory() };
        assert_eq!(with("fd00::5").advertised_address(), "[fd00::5]:9092");
        assert_eq!(with("10.0.0.5").advertised_address(), "10.0.0.5:9092");
        assert_eq!(with("kc-0.kc-brokers.demo.svc").advertised_address(), "kc-0.kc-brokers.demo.svc:9092");
    }

    #[test]
    fn per_ip_overrides_parse_as_kafka_spells_them() {
        let parsed = parse_per_ip_overrides("127.0.0.1:5, 10.0.0.7:0,[::1]:3,::2:4");
        let expected: HashMap<IpAddr, usize> = [
            ("127.0.0.1".parse().ok(), 5),
            ("10.0.0.7".parse().ok(), 0),
            ("::1".parse().ok(), 3),
            ("::2".parse().ok(), 4),
        ]
        .into_iter()
        .filter_map(|(ip, n)| ip.map(|ip| (ip, n)))
        .collect();
        assert_eq!(parsed, Ok(expected));
        assert_eq!(parse_per_ip_overrides(""), Ok(HashMap::new()));
    }

    #[test]
    fn per_ip_overrides_refuse_what_they_cannot_mean() {
        for bad in ["127.0.0.1", "broker-0:5", "127.0.0.1:-1", "127.0.0.1:x", "127.0.0.1:1,127.0.0.1:2"] {
            assert!(parse_per_ip_overrides(bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn an_override_replaces_the_per_ip_cap() {
        let limits = ConnectionLimits {
            max_connections_per_ip_overrides: parse_per_ip_overrides("127.0.0.2:2").unwrap_or_default(),
            ..ConnectionLimits::default()
        };
        assert_eq!(limits.per_ip_cap([127, 0, 0, 2].into()), 2);
        assert_eq!(limits.per_ip_cap([127, 0, 0, 1].into()), 1_000);
    }
}
