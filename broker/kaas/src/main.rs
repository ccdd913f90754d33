//! The kaas broker.
//!
//! Without `MY_POD_NAME` it runs in local mode: the cluster runtime is off and a local lease
//! shim leads every partition, stored under `--data-dir` (or in memory with `--in-memory`).
//! With `MY_POD_NAME` (a StatefulSet pod `<name>-<ordinal>`) it joins the cluster on the shared
//! volume: the `kaas-controller` Lease, heartbeats, assignment.json (seed 003).

mod fetch_flags;
mod file_limit;
mod group_flags;
mod kube_endpoints;
mod kube_lease;
mod kube_mirror;
mod kube_owner;
mod kube_topics;
mod listen;
mod scram_cli;
mod security_flags;
#[cfg(test)]
mod settings_check;

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::{ArgAction, Parser, ValueEnum};
use kaas::cluster::{ClusterSettings, Runtime};
use kaas_broker::config::{ConnectionLimits, StorageMode};
use kaas_broker::{Broker, BrokerConfig, Server};
use tracing::info;

/// kaas: a Kafka-compatible broker whose partitions live on a shared volume.
///
/// Point any Kafka client at the listener. Every flag can also be set through the
/// environment variable named in its help.
#[derive(Debug, Parser)]
#[command(name = "kaas", version)]
struct Args {
    /// Address the Kafka listener binds (port 0 picks a free port).
    #[arg(long, env = "KAAS_LISTEN", default_value = "127.0.0.1:9092", value_parser = kaas_shared::listen_address::parse)]
    listen: SocketAddr,
    /// host:port clients are told to connect to [default: the listener's address].
    #[arg(long, env = "KAAS_ADVERTISE")]
    advertise: Option<String>,
    /// Address a second Kafka listener binds, for clients outside the network `--advertise`
    /// is reached in (Kafka's EXTERNAL listener); secured like the first. Needs
    /// `--external-advertise` or `--external-addresses`.
    #[arg(long, env = "KAAS_EXTERNAL_LISTEN", value_parser = kaas_shared::listen_address::parse)]
    external_listen: Option<SocketAddr>,
    /// host:port clients of the external listener are told to connect to (this broker's).
    #[arg(long, env = "KAAS_EXTERNAL_ADVERTISE", conflicts_with = "external_addresses", requires = "external_listen")]
    external_advertise: Option<String>,
    /// A JSON file of every broker's external host and port, read again every second (on
    /// Kubernetes the operator's ConfigMap `<cluster>-external-addresses`).
    #[arg(long, env = "KAAS_EXTERNAL_ADDRESSES", requires = "external_listen")]
    external_addresses: Option<PathBuf>,
    /// Directory of the on-disk storage (created if missing).
    #[arg(long, env = "KAAS_DATA_DIR", default_value = "./kaas-data")]
    data_dir: PathBuf,
    /// Keep everything in memory instead (nothing survives a restart).
    #[arg(long, env = "KAAS_IN_MEMORY")]
    in_memory: bool,
    /// This broker's Kafka node id.
    #[arg(long, env = "KAAS_NODE_ID", default_value_t = 0)]
    node_id: i32,
    /// Cluster id reported to clients.
    #[arg(long, env = "KAAS_CLUSTER_ID", default_value = "kaas-local")]
    cluster_id: String,
    /// Create a topic when a client asks for one that does not exist (auto.create.topics.enable)
    /// [default: true in local mode; false in cluster mode, where each one is a KafkaTopic].
    #[arg(long, env = "KAAS_AUTO_CREATE_TOPICS_ENABLE", action = ArgAction::Set)]
    auto_create_topics: Option<bool>,
    /// At most this many topics auto-created a minute, in bursts of as many; clients asking for
    /// more get LEADER_NOT_AVAILABLE and retry (auto.create.topics.per.minute, kaas-specific).
    #[arg(long, env = "KAAS_AUTO_CREATE_TOPICS_PER_MINUTE", default_value_t = 300)]
    auto_create_topics_per_minute: u32,
    /// Partitions of an auto-created topic, or of CreateTopics with -1 (num.partitions).
    #[arg(long, env = "KAAS_DEFAULT_PARTITIONS", default_value_t = 1)]
    default_partitions: i32,
    /// Largest request accepted, in bytes (socket.request.max.bytes).
    #[arg(long, env = "KAAS_MAX_REQUEST_BYTES", default_value_t = 100 * 1024 * 1024)]
    max_request_bytes: usize,
    /// Close a connection that has received nothing and had no request outstanding for this
    /// long, or whose client takes no response bytes for this long (connections.max.idle.ms).
    #[arg(long, env = "KAAS_CONNECTIONS_MAX_IDLE_MS", default_value_t = 600_000, value_parser = clap::value_parser!(u64).range(1..))]
    connections_max_idle_ms: u64,
    /// socket.send.buffer.bytes: the SO_SNDBUF of each Kafka client connection (Kafka's
    /// default, 100 KiB); -1 leaves it to the kernel's autotuning.
    #[arg(long, env = "KAAS_SOCKET_SEND_BUFFER_BYTES", default_value_t = 102_400, allow_negative_numbers = true, value_parser = clap::value_parser!(i64).range(-1..=i64::from(i32::MAX)))]
    socket_send_buffer_bytes: i64,
    /// Close a connection whose request frame is not complete this long after its first byte
    /// (kaas-specific; Kafka has no equivalent).
    #[arg(long, env = "KAAS_REQUEST_READ_TIMEOUT_MS", default_value_t = 30_000, value_parser = clap::value_parser!(u64).range(1..))]
    request_read_timeout_ms: u64,
    /// Open connections on the Kafka listener; at the cap a newcomer takes the place of the
    /// least recently active connection with nothing outstanding (max.connections; Kafka's
    /// default is unlimited).
    #[arg(long, env = "KAAS_MAX_CONNECTIONS", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    max_connections: u64,
    /// Connections from one IP address; more are closed at once (max.connections.per.ip;
    /// Kafka's default is unlimited).
    #[arg(long, env = "KAAS_MAX_CONNECTIONS_PER_IP", default_value_t = 1_000)]
    max_connections_per_ip: usize,
    /// Per-address caps replacing --max-connections-per-ip: `ip:count,ip:count`
    /// (max.connections.per.ip.overrides; IP addresses only).
    #[arg(long, env = "KAAS_MAX_CONNECTIONS_PER_IP_OVERRIDES", default_value = "", value_parser = kaas_broker::config::parse_per_ip_overrides)]
    max_connections_per_ip_overrides: std::collections::HashMap<std::net::IpAddr, usize>,
    /// New connections per second on the Kafka listener; over it the listener waits before
    /// accepting more, so a reconnect storm cannot starve the broker
    /// (max.connection.creation.rate; unlimited when unset, as in Kafka).
    #[arg(long, env = "KAAS_MAX_CONNECTION_CREATION_RATE", value_parser = clap::value_parser!(u32).range(1..))]
    max_connection_creation_rate: Option<u32>,
    /// Default segment size of topics that do not set segment.bytes (log.segment.bytes).
    #[arg(long, env = "KAAS_LOG_SEGMENT_BYTES")]
    log_segment_bytes: Option<u64>,
    /// Default retention of topics that do not set retention.ms (log.retention.ms; -1 keeps forever).
    #[arg(long, env = "KAAS_LOG_RETENTION_MS")]
    log_retention_ms: Option<i64>,
    /// Whether compacted topics are cleaned (log.cleaner.enable).
    #[arg(long, env = "KAAS_LOG_CLEANER_ENABLE", default_value_t = true, action = ArgAction::Set)]
    log_cleaner_enable: bool,
    /// How long the log cleaner rests between rounds over the compacted partitions this broker
    /// leads, in milliseconds (log.cleaner.backoff.ms).
    #[arg(long, env = "KAAS_LOG_CLEANER_BACKOFF_MS", default_value_t = 15_000, value_parser = clap::value_parser!(u64).range(1..))]
    log_cleaner_backoff_ms: u64,
    /// Memory of one partition's cleaner offset map, in bytes (log.cleaner.dedupe.buffer.size);
    /// a dirty section with more keys is cleaned in prefixes that fit.
    #[arg(long, env = "KAAS_LOG_CLEANER_DEDUPE_BUFFER_SIZE", default_value_t = 128 << 20, value_parser = clap::value_parser!(u64).range(1024..))]
    log_cleaner_dedupe_buffer_size: u64,
    /// Compacted partitions cleaned at once (log.cleaner.threads).
    #[arg(long, env = "KAAS_LOG_CLEANER_THREADS", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    log_cleaner_threads: u16,
    /// Bytes per second the cleaner threads may read and write together, on average
    /// (log.cleaner.io.max.bytes.per.second) [default: no limit].
    #[arg(long, env = "KAAS_LOG_CLEANER_IO_MAX_BYTES_PER_SECOND", default_value_t = f64::INFINITY, hide_default_value = true)]
    log_cleaner_io_max_bytes_per_second: f64,
    /// cleanup.policy of topics that do not set it: delete, compact or compact,delete
    /// (log.cleanup.policy).
    #[arg(long, env = "KAAS_LOG_CLEANUP_POLICY")]
    log_cleanup_policy: Option<String>,
    /// min.cleanable.dirty.ratio of topics that do not set it (log.cleaner.min.cleanable.ratio).
    #[arg(long, env = "KAAS_LOG_CLEANER_MIN_CLEANABLE_RATIO")]
    log_cleaner_min_cleanable_ratio: Option<f64>,
    /// min.compaction.lag.ms of topics that do not set it (log.cleaner.min.compaction.lag.ms).
    #[arg(long, env = "KAAS_LOG_CLEANER_MIN_COMPACTION_LAG_MS")]
    log_cleaner_min_compaction_lag_ms: Option<i64>,
    /// max.compaction.lag.ms of topics that do not set it (log.cleaner.max.compaction.lag.ms).
    #[arg(long, env = "KAAS_LOG_CLEANER_MAX_COMPACTION_LAG_MS")]
    log_cleaner_max_compaction_lag_ms: Option<i64>,
    /// delete.retention.ms of topics that do not set it: how long tombstones outlive the clean
    /// that first saw them (log.cleaner.delete.retention.ms).
    #[arg(long, env = "KAAS_LOG_CLEANER_DELETE_RETENTION_MS")]
    log_cleaner_delete_retention_ms: Option<i64>,
    /// segment.ms of topics that do not set it (log.roll.ms).
    #[arg(long, env = "KAAS_LOG_ROLL_MS")]
    log_roll_ms: Option<i64>,
    /// How often retention and time-based segment rolls run, in milliseconds.
    #[arg(long, env = "KAAS_HOUSEKEEPING_INTERVAL_MS", default_value_t = 30_000)]
    housekeeping_interval_ms: u64,
    /// Address of /healthz, /readyz and /metrics.
    #[arg(long, env = "KAAS_HTTP_LISTEN", default_value = "127.0.0.1:9095", value_parser = kaas_shared::listen_address::parse)]
    http_listen: SocketAddr,
    /// Export per-partition series on /metrics (log offsets and sizes, consumer-group offsets
    /// and lag); `false` keeps only per-topic and per-group sums, for brokers with many
    /// partitions.
    #[arg(long, env = "KAAS_METRICS_PER_PARTITION", default_value_t = true, action = ArgAction::Set)]
    metrics_per_partition: bool,
    /// Log a request at WARN (client, API, phase) when its own time — decode, handler, fsync
    /// wait, not a fetch's long poll or a rebalance's wait — passes this many milliseconds;
    /// 0 turns the log off.
    #[arg(long, env = "KAAS_SLOW_REQUEST_MS", default_value_t = 2000)]
    slow_request_ms: u64,
    /// The `transaction.version` feature clients are told is finalized: 2 is transactions v2
    /// (KIP-890 part 2: the epoch bumped at every transaction's end, partitions and groups
    /// added by the writes themselves), which Kafka 4 clients then use; 1 keeps every client
    /// on the older protocol (set it on every broker while a cluster still runs a kaas
    /// release without transactions v2).
    #[arg(long, env = "KAAS_TRANSACTION_VERSION", default_value_t = 2, value_parser = clap::value_parser!(i16).range(1..=2))]
    transaction_version: i16,
    /// `group.share.partition.max.record.locks`: records of one partition a share group may
    /// have in flight (delivered, not yet acknowledged) at most.
    #[arg(long, env = "KAAS_SHARE_MAX_RECORD_LOCKS", default_value_t = 2000, value_parser = clap::value_parser!(u32).range(100..=10_000))]
    share_max_record_locks: u32,
    /// `group.share.max.size`: members of one share group at most.
    #[arg(long, env = "KAAS_SHARE_MAX_GROUP_SIZE", default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..=1000))]
    share_max_group_size: u32,
    /// Cluster mode: this pod's name (`<statefulset>-<ordinal>`; the ordinal is the broker id).
    #[arg(long, env = "MY_POD_NAME")]
    pod_name: Option<String>,
    /// Cluster mode: the namespace of the Lease [default: the pod's service-account namespace].
    #[arg(long, env = "MY_POD_NAMESPACE")]
    namespace: Option<String>,
    /// Cluster mode: the controller Lease's name.
    #[arg(long, env = "KAAS_LEASE_NAME", default_value = "kaas-controller")]
    lease_name: String,
    /// Cluster mode: the KafkaCluster this broker belongs to. With it, the KafkaTopic resources
    /// of that cluster are the topics (Kafka-API topic admin creates, patches and deletes them)
    /// and the controller mirrors assignments into KafkaClusterAssignments `<name>`; without
    /// it, brokers manage topic directories on the volume themselves.
    #[arg(long, env = "KAAS_CLUSTER_NAME")]
    cluster_name: Option<String>,
    /// Cluster mode: the brokers' headless Service; its EndpointSlices' serving conditions
    /// narrow the controller's alive set (heartbeat-connected ∩ serving).
    #[arg(long, env = "KAAS_HEADLESS_SERVICE")]
    headless_service: Option<String>,
    /// Cluster mode: where the heartbeat gRPC server binds.
    #[arg(long, env = "KAAS_HEARTBEAT_LISTEN", default_value = "0.0.0.0:9094", value_parser = kaas_shared::listen_address::parse)]
    heartbeat_listen: SocketAddr,
    /// Cluster mode: host:port peers dial for the heartbeat [default: the bound address].
    #[arg(long, env = "KAAS_HEARTBEAT_ADVERTISE")]
    heartbeat_advertise: Option<String>,
    /// Cluster mode: where the inter-broker listener binds — the Kafka listener the other
    /// brokers send transaction markers and verification to, whatever the client listener's
    /// TLS and SASL (Kafka's `inter.broker.listener.name`).
    #[arg(long, env = "KAAS_INTERBROKER_LISTEN", default_value = "0.0.0.0:9091", value_parser = kaas_shared::listen_address::parse)]
    interbroker_listen: SocketAddr,
    /// Cluster mode: host:port peers dial for the inter-broker listener [default: the bound
    /// address; bound to every address, the advertised host at the bound port].
    #[arg(long, env = "KAAS_INTERBROKER_ADVERTISE")]
    interbroker_advertise: Option<String>,
    /// Cluster mode: stop acknowledging writes after this long without a heartbeat ack (fence.timeout).
    #[arg(long, env = "KAAS_FENCE_TIMEOUT_MS", default_value_t = 6_000)]
    fence_timeout_ms: u64,
    /// Cluster mode: move a silent broker's partitions after this long (session.timeout > fence.timeout + margin).
    #[arg(long, env = "KAAS_SESSION_TIMEOUT_MS", default_value_t = 10_000)]
    session_timeout_ms: u64,
    /// Cluster mode: the Lease duration.
    #[arg(long, env = "KAAS_LEASE_DURATION_MS", default_value_t = 15_000)]
    lease_duration_ms: u64,
    /// Cluster mode: how long SIGTERM waits for partitions to move away before relinquishing them.
    #[arg(long, env = "KAAS_DRAIN_TIMEOUT_MS", default_value_t = 30_000)]
    drain_timeout_ms: u64,
    /// Cluster mode: at most this many partitions move per step onto a broker that joined or
    /// came back (each is unavailable from its hand-over until the broker has taken it over);
    /// the next step waits until every broker leads what it was given, or 30 s.
    #[arg(long, env = "KAAS_LEADER_MOVES_PER_STEP", default_value_t = kaas::cluster::DEFAULT_LEADER_MOVES_PER_STEP, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1_000_000))]
    leader_moves_per_step: usize,
    /// Cluster mode: how often a broker reads the ACLs, client quotas, group configs and
    /// KafkaUsers on the volume again. The controller also tells every broker at once when it
    /// changed the first three.
    #[arg(long, env = "KAAS_CONTROLLER_FILES_REFRESH_MS", default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(100..=600_000))]
    controller_files_refresh_ms: u64,
    /// Log format.
    #[arg(long, env = "KAAS_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(flatten)]
    groups: group_flags::GroupFlags,
    #[command(flatten)]
    fetch: fetch_flags::FetchFlags,
    #[command(flatten)]
    security: security_flags::SecurityFlags,
    #[command(subcommand)]
    command: Option<Command>,
}

/// Tools beside the broker; without one, `kaas` runs the broker.
#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Add, replace or delete a user's SCRAM credential in a --sasl-credentials file.
    ScramCredential(scram_cli::ScramCredentialArgs),
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

/// jemalloc, not the C library's allocator: a produce request's frame (a megabyte from
/// librdkafka) grows as its bytes arrive and is freed once answered, and glibc's heuristics
/// gave such buffers fresh pages each time — at 1 KiB × 1 partition flat out about 70,000 page
/// faults a second (the pages zeroed, faulted in by the socket read, unmapped again), a sixth
/// of the broker's CPU per byte. jemalloc keeps freed pages for reuse (returned to the system
/// after seconds idle).
#[cfg(all(target_os = "linux", not(target_env = "musl")))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if let Some(Command::ScramCredential(scram)) = &args.command {
        return scram_cli::run(scram);
    }
    init_logging(args.log_format);
    file_limit::raise();
    if let Some(pod) = &args.pod_name {
        if ClusterSettings::broker_id_of(pod).is_none() {
            bail!("MY_POD_NAME={pod:?} does not end in -<ordinal>; cluster mode needs a StatefulSet pod name (unset MY_POD_NAME for local mode)");
        }
        if args.in_memory {
            bail!("cluster mode keeps partitions on the shared volume: --in-memory is for local mode only (unset MY_POD_NAME)");
        }
        if args.session_timeout_ms <= args.fence_timeout_ms + 1_000 {
            bail!("session timeout ({} ms) must exceed the fence timeout ({} ms) by at least a second, or a zombie could acknowledge writes after its partitions moved", args.session_timeout_ms, args.fence_timeout_ms);
        }
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("starting the runtime")?;
    runtime.block_on(run(args))
}

/// The broker's defaults of Kafka's topic configs (`log.cleanup.policy`, `log.cleaner.*`,
/// `log.roll.ms`), checked and applied as a topic's own configs would be, so that a value a
/// topic could not have is refused at start with the topic config's message.
fn topic_defaults(args: &Args, defaults: kaas_storage::LogConfig) -> anyhow::Result<kaas_storage::LogConfig> {
    let mut configs = std::collections::BTreeMap::new();
    let mut set = |name: &str, value: Option<String>| {
        if let Some(value) = value {
            configs.insert(name.to_string(), value);
        }
    };
    set("cleanup.policy", args.log_cleanup_policy.clone());
    set("min.cleanable.dirty.ratio", args.log_cleaner_min_cleanable_ratio.map(|v| v.to_string()));
    set("min.compaction.lag.ms", args.log_cleaner_min_compaction_lag_ms.map(|v| v.to_string()));
    set("max.compaction.lag.ms", args.log_cleaner_max_compaction_lag_ms.map(|v| v.to_string()));
    set("delete.retention.ms", args.log_cleaner_delete_retention_ms.map(|v| v.to_string()));
    set("segment.ms", args.log_roll_ms.map(|v| v.to_string()));
    kaas_broker::topic_config::validate_all(&configs, &defaults).context("broker defaults of topic configs")?;
    Ok(kaas_broker::topic_config::log_config(&configs, &defaults))
}

async fn run(args: Args) -> anyhow::Result<()> {
    let listener = listen::bind(args.listen).await?;
    let bound = listener.local_addr()?;
    let (advertise_host, advertise_port) = listen::advertised(args.advertise.as_deref(), bound)?;
    let external = external_listener(&args)?;
    let mut log_defaults = kaas_storage::LogConfig::default();
    if let Some(bytes) = args.log_segment_bytes {
        log_defaults.segment_bytes = bytes;
    }
    if let Some(ms) = args.log_retention_ms {
        log_defaults.retention_ms = ms;
    }
    log_defaults.cleaner_dedupe_buffer_bytes = usize::try_from(args.log_cleaner_dedupe_buffer_size).unwrap_or(usize::MAX);
    let log_defaults = topic_defaults(&args, log_defaults)?;
    let storage = if args.in_memory { StorageMode::InMemory } else { StorageMode::Disk(args.data_dir.clone()) };
    let node_id = args.pod_name.as_deref().and_then(ClusterSettings::broker_id_of).unwrap_or(args.node_id);
    // Cluster mode: the runtime (controller role, heartbeat) over the volume the broker opens.
    let cluster = match &args.pod_name {
        None => None,
        Some(pod) => {
            let settings = cluster_settings(&args, pod).await?;
            let volume: kaas_shared::fs::FsRef = std::sync::Arc::new(kaas_shared::fs::RealFs);
            Some(Runtime::new(settings, node_id, volume, kaas_shared::layout::Layout::new(&args.data_dir)))
        }
    };
    let config = BrokerConfig {
        node_id,
        cluster: cluster.as_ref().map(Runtime::link),
        listen: bound,
        advertise_host,
        advertise_port,
        external,
        cluster_id: args.cluster_id,
        storage,
        auto_create_topics: args.auto_create_topics.unwrap_or(args.pod_name.is_none()),
        volume_fs: None,
        auto_create_topics_per_minute: args.auto_create_topics_per_minute,
        default_partitions: args.default_partitions,
        max_request_bytes: args.max_request_bytes,
        connections: ConnectionLimits {
            max_idle: std::time::Duration::from_millis(args.connections_max_idle_ms),
            request_read_timeout: std::time::Duration::from_millis(args.request_read_timeout_ms),
            max_connections: usize::try_from(args.max_connections).unwrap_or(usize::MAX),
            max_connections_per_ip: args.max_connections_per_ip,
            max_connections_per_ip_overrides: args.max_connections_per_ip_overrides,
            max_connection_creation_rate: args.max_connection_creation_rate,
            send_buffer_bytes: usize::try_from(args.socket_send_buffer_bytes).ok().filter(|&n| n > 0),
        },
        housekeeping_interval_ms: args.housekeeping_interval_ms,
        log_defaults,
        log_cleaner: kaas_broker::config::LogCleanerSettings {
            enable: args.log_cleaner_enable,
            backoff: std::time::Duration::from_millis(args.log_cleaner_backoff_ms),
            threads: usize::from(args.log_cleaner_threads),
            io_max_bytes_per_second: args.log_cleaner_io_max_bytes_per_second,
        },
        groups: args.groups.config(args.pod_name.is_some()),
        fetch: args.fetch.config(),
        metrics_per_partition: args.metrics_per_partition,
        slow_request: (args.slow_request_ms > 0).then(|| std::time::Duration::from_millis(args.slow_request_ms)),
        transaction_version: args.transaction_version,
        share_max_record_locks: args.share_max_record_locks as usize,
        share_max_group_size: args.share_max_group_size as usize,
        security: args.security.listener_security(args.pod_name.is_some())?,
    };
    let broker = {
        let config = config.clone();
        tokio::task::spawn_blocking(move || Broker::open(config)).await?.context("opening the broker")?
    };
    let broker_for_http = broker.clone();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let housekeeping = tokio::spawn(broker.clone().housekeeping_loop(stop_rx.clone()));
    let cleaner = tokio::spawn(broker.clone().cleaner_loop(stop_rx.clone()));
    let transactions = tokio::spawn(broker.clone().transactions_loop(stop_rx.clone()));
    let mut cluster_tasks = match &cluster {
        Some(runtime) => runtime.spawn(broker.clone(), stop_rx.clone()).await.context("starting the cluster runtime")?,
        None => tokio::task::JoinSet::new(),
    };
    let http = listen::bind(args.http_listen).await?;
    let http_bound = http.local_addr()?;
    let mut http_stop = stop_rx.clone();
    let http_task = tokio::spawn(async move {
        let app = kaas_broker::http::router(broker_for_http);
        let _ = axum::serve(http, app).with_graceful_shutdown(async move {
            let _ = http_stop.wait_for(|s| *s).await;
        }).await;
    });
    println!("kaas probes and metrics on http://{http_bound} (/healthz, /readyz, /metrics)");
    let external_task = match &broker.external {
        Some(external) => {
            let listener = listen::bind(external.listen()).await.context("binding the external listener (--external-listen)")?;
            println!("kaas external listener on {}", listener.local_addr()?);
            let follow = tokio::spawn(kaas_broker::external::follow(broker.clone(), stop_rx.clone()));
            let mut stop = stop_rx.clone();
            let serve = tokio::spawn(Server::external(listener, broker.clone()).run(async move {
                let _ = stop.wait_for(|s| *s).await;
            }));
            Some((follow, serve))
        }
        None => None,
    };
    // Tests and scripts wait for this line.
    println!("kaas listening on {bound} (advertised as {}; storage: {}; security: {})", config.advertised_address(), describe(&config.storage), config.security.protocol());
    let draining = broker.clone();
    // SIGTERM drains first (partitions move away while this broker still serves), then the
    // listener stops.
    Server::new(listener, broker.clone())
        .run(async move {
            shutdown_signal().await;
            kaas_broker::cluster::drain(&draining).await;
        })
        .await;
    let _ = stop_tx.send(true);
    let _ = housekeeping.await;
    let _ = cleaner.await;
    let _ = transactions.await;
    while cluster_tasks.join_next().await.is_some() {}
    let _ = http_task.await;
    if let Some((follow, serve)) = external_task {
        let _ = follow.await;
        let _ = serve.await;
    }
    let closing = broker.clone();
    tokio::task::spawn_blocking(move || closing.close()).await?;
    info!("kaas stopped");
    Ok(())
}

/// The external listener the flags ask for: a bind address and where its addresses come from.
fn external_listener(args: &Args) -> anyhow::Result<Option<kaas_broker::external::ExternalListenerConfig>> {
    use kaas_broker::external::{ExternalAdvertised, ExternalListenerConfig};
    let Some(listen) = args.external_listen else { return Ok(None) };
    let advertised = match (&args.external_advertise, &args.external_addresses) {
        (Some(value), _) => {
            let (host, port) = listen::advertised(Some(value), listen).context("--external-advertise")?;
            ExternalAdvertised::This(kaas_shared::external_addresses::ExternalAddress { host, port })
        }
        (None, Some(file)) => ExternalAdvertised::File(file.clone()),
        (None, None) => anyhow::bail!("--external-listen needs --external-advertise (host:port) or --external-addresses (a file)"),
    };
    Ok(Some(ExternalListenerConfig { listen, advertised }))
}

/// Cluster settings from the flags, with the Lease in the pod's namespace.
async fn cluster_settings(args: &Args, pod: &str) -> anyhow::Result<ClusterSettings> {
    let client = kube::Client::try_default().await.context("connecting to the Kubernetes API (in-cluster config or KUBECONFIG)")?;
    let namespace = match &args.namespace {
        Some(ns) => ns.clone(),
        None => client.default_namespace().to_string(),
    };
    let ms = std::time::Duration::from_millis;
    let (catalog, mirror, owner, status_sink) = match &args.cluster_name {
        Some(cluster) => {
            let owner = kube_owner::ClusterOwner::start(client.clone(), &namespace, cluster);
            let topics = kube_topics::KubeTopics::start(client.clone(), &namespace, cluster, owner.clone());
            let status: std::sync::Arc<dyn kaas_controller::status::StatusSink> =
                std::sync::Arc::new(kube_mirror::KubeStatus::new(client.clone(), &namespace, cluster, topics.clone()));
            let catalog: std::sync::Arc<dyn kaas_broker::catalog::TopicCatalog> = topics;
            let mirror: std::sync::Arc<dyn kaas_controller::mirror::AssignmentMirror> =
                std::sync::Arc::new(kube_mirror::KubeMirror::start(client.clone(), &namespace, cluster, owner.clone()));
            (Some(catalog), Some(mirror), Some(owner), Some(status))
        }
        None => (None, None, None, None),
    };
    Ok(ClusterSettings {
        identity: pod.to_string(),
        heartbeat_listen: args.heartbeat_listen,
        heartbeat_advertise: args.heartbeat_advertise.clone().unwrap_or_default(),
        interbroker_listen: args.interbroker_listen,
        interbroker_advertise: args.interbroker_advertise.clone().unwrap_or_default(),
        lease: std::sync::Arc::new(kube_lease::KubeLease::new(client.clone(), &namespace, &args.lease_name, owner)),
        lease_duration: ms(args.lease_duration_ms),
        renew_interval: ms((args.lease_duration_ms / 5).clamp(200, 2_000)),
        fence_timeout: ms(args.fence_timeout_ms),
        session_timeout: ms(args.session_timeout_ms),
        drain_timeout: ms(args.drain_timeout_ms),
        leader_moves_per_step: args.leader_moves_per_step,
        catalog,
        mirror,
        ready_brokers: args.headless_service.as_deref().map(|service| {
            std::sync::Arc::new(kube_endpoints::KubeEndpoints::start(client.clone(), &namespace, service)) as std::sync::Arc<dyn kaas_controller::endpoints::ReadyBrokers>
        }),
        status_sink,
        status_pacing: kaas_controller::status::Pacing::default(),
        controller_files_refresh: ms(args.controller_files_refresh_ms),
    })
}

fn describe(storage: &StorageMode) -> String {
    match storage {
        StorageMode::Disk(dir) => dir.display().to_string(),
        StorageMode::InMemory => "in memory".to_string(),
    }
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
        // Without signal handlers the broker still serves; it just cannot drain on a signal.
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => info!(signal = "SIGTERM", "shutting down"),
        _ = int.recv() => info!(signal = "SIGINT", "shutting down"),
    }
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colours only for a terminal: pod logs and test output get plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}
