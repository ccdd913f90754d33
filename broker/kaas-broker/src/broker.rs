//! The broker's state: configuration, storage engine, topics, fetch sessions.

use std::sync::Arc;
use std::time::Duration;

use kaas_storage::Engine;
use tracing::{info, warn};

use crate::config::{BrokerConfig, StorageMode};
use crate::error::Result;
use crate::fetch_session::FetchSessions;
use crate::groups::Coordinator;
use crate::leadership::LocalLease;
use crate::shard_owner::ShardOwner;
use crate::topic_store::TopicStore;
use crate::topics::{Leadership, TopicRegistry};
use crate::txn::TxnCoordinator;

/// One kaas broker.
#[derive(Debug)]
pub struct Broker {
    pub config: BrokerConfig,
    pub engine: Engine,
    pub topics: TopicRegistry,
    pub fetch_sessions: FetchSessions,
    /// The fetch path's blocking reads and its count of fetches in flight.
    pub fetches: crate::api::fetch::Fetches,
    pub lease: LocalLease,
    /// Cluster mode's parts; `None` in local mode.
    pub cluster: Option<crate::cluster::Cluster>,
    /// The group coordinator; in local mode it owns every group shard.
    pub groups: Arc<Coordinator>,
    /// The transaction coordinator; in local mode it owns every transaction shard, in a
    /// cluster those assignment.json places here.
    pub txns: TxnCoordinator,
    /// Connections to the other brokers (transaction markers and verification).
    pub interbroker: crate::interbroker::InterBroker,
    /// The Kafka listener's counters (refused and closed connections), shown on `/metrics`.
    pub listener_metrics: crate::connections::ListenerMetrics,
    /// The inter-broker listener's (cluster mode), counted apart from the clients'.
    pub interbroker_listener_metrics: crate::connections::ListenerMetrics,
    /// Room the requests being read may take before their bytes arrive, shared by all listeners.
    pub frame_read_ahead: crate::frame::ReadAhead,
    /// `auto.create.topics.per.minute`: the budget of topics auto-creation may make.
    pub auto_creates: crate::rate_limit::RateLimiter,
    /// Requests and bytes in and out, for `/metrics`.
    pub metrics: crate::metrics::TrafficMetrics,
    /// ACL authorization (`--authorizer standard`); `None` allows every request.
    pub authorizer: Option<crate::authz::Authorizer>,
    /// Client quotas (produce and fetch byte rates); with none configured nothing is counted.
    pub quotas: crate::quota::ClientQuotas,
    /// The external listener's addresses (`--external-listen`); `None` without one.
    pub external: Option<crate::external::External>,
    /// Group configs (`kafka-configs --entity-type groups`): share-group settings.
    pub group_configs: crate::group_configs::GroupConfigs,
    /// Share groups on the partition side: share sessions and share-partition state.
    pub shares: crate::share::Shares,
    /// The cluster's KafkaUsers (credentials, ACLs, quotas), as the volume agent wrote them.
    kafka_users: crate::kafka_users::KafkaUsers,
}

impl Broker {
    /// Opens storage and every topic on it; in local mode takes every partition over.
    pub fn open(config: BrokerConfig) -> Result<Arc<Broker>> {
        let metrics = crate::metrics::TrafficMetrics::default();
        let engine = match &config.storage {
            // Every sync on the volume is timed for /metrics (fsync latency, bytes per commit).
            StorageMode::Disk(root) => {
                let fs = crate::timed_fs::TimedFs::wrap(config.volume_fs.clone().unwrap_or_else(|| Arc::new(kaas_shared::fs::RealFs)), root, metrics.syncs.clone());
                Engine::with_fs(fs, root)?
            }
            StorageMode::InMemory => Engine::in_memory(),
        };
        let lease = LocalLease::new(config.node_id);
        let (fs, root) = (engine.fs().clone(), engine.root().to_path_buf());
        let store = if config.cluster.is_some() { TopicStore::cluster(fs, root) } else { TopicStore::local(fs, root) };
        let leadership = if config.cluster.is_some() { Leadership::Cluster } else { Leadership::Local(lease) };
        // A compressed batch may inflate to at most socket.request.max.bytes when its records
        // are checked: the most this broker agreed to handle for one request.
        let log_defaults = kaas_storage::LogConfig { max_uncompressed_batch_bytes: config.max_request_bytes, ..config.log_defaults };
        let topics = TopicRegistry::open(engine.clone(), Some(store), leadership, log_defaults)?;
        let groups = Coordinator::open(engine.fs().clone(), engine.layout(), config.groups.clone())?;
        // Local mode owns every group and transaction shard; in a cluster the runtime takes
        // shards over as assignment.json places them (`takeover_driver::reconcile_shards`).
        let txns = TxnCoordinator::open(engine.fs().clone(), engine.layout())?;
        if config.cluster.is_none() {
            groups.take_over_all(|stored| lease.takeover_epoch(stored));
            txns.take_over_all(|stored| lease.takeover_epoch(stored));
        }
        info!(node_id = config.node_id, storage = ?config.storage, topics = topics.list().len(), "broker opened");
        let cluster = config.cluster.clone().map(|link| crate::cluster::Cluster::new(link, config.node_id));
        // Cluster mode: the brokers of the cluster prove themselves to each other with the
        // volume's inter-broker key (made by the first broker to start).
        let interbroker = match &config.cluster {
            Some(_) => crate::interbroker::InterBroker::signed(crate::interbroker::Signer {
                key: kaas_shared::interbroker_key::InterBrokerKey::load_or_create(&**engine.fs(), engine.layout())?,
                broker_id: config.node_id,
            }),
            None => Default::default(),
        };
        let auto_creates = crate::rate_limit::RateLimiter::per_minute(config.auto_create_topics_per_minute);
        let authorizer = match config.security.authorizer.clone() {
            Some(settings) => Some(crate::authz::Authorizer::open(engine.fs().clone(), engine.layout(), settings)?),
            None => None,
        };
        let quotas = crate::quota::ClientQuotas::open(engine.fs().clone(), engine.layout())?;
        let group_configs = crate::group_configs::GroupConfigs::open(engine.fs().clone(), engine.layout(), config.share_max_record_locks)?;
        let kafka_users = crate::kafka_users::KafkaUsers::new(engine.fs().clone(), engine.layout());
        let external = config.external.clone().map(|e| crate::external::External::new(e, config.node_id));
        let broker = Arc::new(Broker {
            config,
            engine,
            topics,
            fetch_sessions: FetchSessions::default(),
            fetches: Default::default(),
            lease,
            cluster,
            groups,
            txns,
            interbroker,
            auto_creates,
            listener_metrics: Default::default(),
            interbroker_listener_metrics: Default::default(),
            frame_read_ahead: Default::default(),
            metrics,
            authorizer,
            quotas,
            external,
            group_configs,
            shares: Default::default(),
            kafka_users,
        });
        if let Some(Err(e)) = broker.external.as_ref().map(crate::external::External::refresh) {
            warn!(error = %e, "reading the external listener's addresses failed; they are read again every second");
        }
        if broker.cluster.is_some() {
            // The KafkaUsers are served from the start, not a second later.
            if let Err(e) = broker.refresh_kafka_users() {
                warn!(error = %e, "reading the KafkaUsers failed; they are read again every second");
            }
        }
        Ok(broker)
    }

    /// Runs retention, time-based rolls and reclamation until `stop` fires.
    pub async fn housekeeping_loop(self: Arc<Self>, mut stop: tokio::sync::watch::Receiver<bool>) {
        let mut tick = tokio::time::interval(Duration::from_millis(self.config.housekeeping_interval_ms.max(10)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = stop.changed() => return,
            }
            let broker = self.clone();
            // Retention unlinks files and may fsync manifests: keep it off the executor.
            let _ = tokio::task::spawn_blocking(move || {
                let removed = broker.topics.housekeeping(now_ms());
                broker.metrics.retention_removed(removed);
                // Share state of partitions led elsewhere now is dropped (nothing written: the
                // new leader owns it); the rest is compacted when its log has grown.
                broker.shares.partitions.retain(|(id, p)| {
                    let topic = broker.topics.get_by_id(id)?;
                    crate::api::led_partition(&broker, &topic.name, *p).ok().map(|led| led.epoch)
                });
                for log in broker.shares.partitions.all() {
                    if let Err(e) = log.compact_if_needed() {
                        tracing::warn!(error = %e, "compacting a partition's share-group state failed; retried at the next housekeeping");
                    }
                }
                if broker.cluster.is_none() {
                    // Local mode: shards that could not be taken over are retried here.
                    broker.groups.take_over_all(|stored| broker.lease.takeover_epoch(stored));
                    broker.txns.take_over_all(|stored| broker.lease.takeover_epoch(stored));
                }
            })
            .await;
        }
    }

    /// Runs the log cleaner over the compacted partitions this broker leads, one round every
    /// `log.cleaner.backoff.ms`, until `stop` fires (a round in progress finishes its current
    /// partition first).
    pub async fn cleaner_loop(self: Arc<Self>, mut stop: tokio::sync::watch::Receiver<bool>) {
        let settings = self.config.log_cleaner;
        if !settings.enable {
            return;
        }
        // One budget for every round and thread, as Kafka's cleaner throttler.
        let throttle = Arc::new(kaas_storage::IoThrottle::new(settings.io_max_bytes_per_second));
        loop {
            tokio::select! {
                _ = tokio::time::sleep(settings.backoff) => {}
                _ = stop.changed() => return,
            }
            let broker = self.clone();
            let stopping = stop.clone();
            let throttle = throttle.clone();
            // Cleaning reads and rewrites segment files: off the executor.
            let _ = tokio::task::spawn_blocking(move || broker.topics.clean(now_ms, || *stopping.borrow(), settings.threads, &throttle)).await;
        }
    }

    /// This broker (the controller, or a local-mode broker) changed a file it writes for every
    /// broker (the ACLs, client quotas, group configs): in a cluster the other brokers are told
    /// to read them again now, not at their next periodic read.
    pub(crate) fn controller_files_written(&self) {
        if let Some(cluster) = &self.cluster {
            cluster.link.control.controller_files_written();
        }
    }

    /// Reads the files the controller writes (the ACLs, the client quotas) again and serves what
    /// they hold; an error names the file that could not be read, and keeps it served as before.
    /// Blocking (file I/O).
    pub fn refresh_controller_files(&self) -> std::result::Result<(), String> {
        if let Some(authorizer) = &self.authorizer {
            authorizer.refresh().map_err(|e| e.to_string())?;
        }
        self.quotas.refresh().map_err(|e| e.to_string())?;
        self.group_configs.refresh().map_err(|e| e.to_string())?;
        self.refresh_kafka_users()
    }

    /// Reads the KafkaUsers file again (its writer is the cluster's volume agent) and serves
    /// what it says to the authorizer, the quotas and SASL, credentials last: a user logs in
    /// only once its ACLs and quotas are served, and once it can no longer log in, its ACLs no
    /// longer authorize its open sessions either. Blocking (file I/O).
    fn refresh_kafka_users(&self) -> std::result::Result<(), String> {
        self.kafka_users
            .refresh(|users| {
                if let Some(authorizer) = &self.authorizer {
                    authorizer.serve_kafka_users(users.acls);
                }
                self.quotas.serve_kafka_users(users.quotas);
                if let Some(credentials) = self.config.security.sasl.as_ref().and_then(|s| s.credentials.as_ref()) {
                    credentials.serve_managed(users.credentials);
                }
            })
            .map_err(|e| e.to_string())
    }

    /// Relinquishes every partition, group and transaction shard: manifests, producer state
    /// and shard snapshots persisted, handles closed.
    pub fn close(&self) {
        self.txns.close();
        self.groups.close();
        self.topics.close_all();
    }
}

pub use kaas_coordinator::clock::now_ms;
