//! The broker's state: configuration, storage engine, topics, fetch sessions.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kaas_storage::Engine;
use tracing::info;

use crate::config::{BrokerConfig, StorageMode};
use crate::error::Result;
use crate::fetch_session::FetchSessions;
use crate::leadership::LocalLease;
use crate::topic_store::TopicStore;
use crate::topics::TopicRegistry;

/// One kaas broker.
#[derive(Debug)]
pub struct Broker {
    pub config: BrokerConfig,
    pub engine: Engine,
    pub topics: TopicRegistry,
    pub fetch_sessions: FetchSessions,
    pub lease: LocalLease,
}

impl Broker {
    /// Opens storage and every topic on it; in local mode takes every partition over.
    pub fn open(config: BrokerConfig) -> Result<Arc<Broker>> {
        let engine = match &config.storage {
            StorageMode::Disk(root) => Engine::on_disk(root)?,
            StorageMode::InMemory => Engine::in_memory(),
        };
        let lease = LocalLease::new(config.node_id);
        let store = TopicStore::new(engine.fs().clone(), engine.root().to_path_buf());
        let topics = TopicRegistry::open(engine.clone(), Some(store), lease, config.log_defaults.clone())?;
        info!(node_id = config.node_id, storage = ?config.storage, topics = topics.list().len(), "broker opened");
        Ok(Arc::new(Broker { config, engine, topics, fetch_sessions: FetchSessions::default(), lease }))
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
            let _ = tokio::task::spawn_blocking(move || broker.topics.housekeeping(now_ms())).await;
        }
    }

    /// Relinquishes every partition: manifests and producer state persisted, handles closed.
    pub fn close(&self) {
        self.topics.close_all();
    }
}

/// Wall-clock milliseconds, as Kafka timestamps are.
pub fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}
