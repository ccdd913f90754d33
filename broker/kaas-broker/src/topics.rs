//! The topics this broker knows, with their partitions opened in the storage engine.
//!
//! In local mode the broker is the only writer of topic metadata: it stamps each topic
//! directory with its identity, writes topic.json atomically, and reclaims deleted topics'
//! directories itself (in a cluster the operator does all three).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use kaas_shared::live_topics::{LiveSet, is_live};
use kaas_storage::{Engine, IoThrottle, Partition};
use parking_lot::{Mutex, RwLock};
use tracing::{error, info, warn};
use uuid::Uuid;

use crate::error::{Error, Result};
use crate::leadership::LocalLease;
use crate::topic_config;
use crate::topic_store::TopicStore;

/// Kafka's longest legal topic name.
const MAX_TOPIC_NAME_LEN: usize = 249;
/// More partitions than this in one topic is a typo, not a plan.
pub const MAX_PARTITIONS: i32 = 100_000;

/// A topic and its opened partitions.
#[derive(Debug)]
pub struct Topic {
    pub name: String,
    /// The topic's identity: its Kafka topic ID and the stamp in its directory.
    pub id: Uuid,
    state: RwLock<TopicState>,
}

#[derive(Debug)]
struct TopicState {
    configs: BTreeMap<String, String>,
    partitions: Vec<Arc<Partition>>,
}

impl Topic {
    pub fn partition(&self, index: i32) -> Option<Arc<Partition>> {
        let index = usize::try_from(index).ok()?;
        self.state.read().partitions.get(index).cloned()
    }

    pub fn partitions(&self) -> Vec<Arc<Partition>> {
        self.state.read().partitions.clone()
    }

    pub fn partition_count(&self) -> i32 {
        self.state.read().partitions.len() as i32
    }

    /// The configs set on this topic (not the defaults).
    pub fn configs(&self) -> BTreeMap<String, String> {
        self.state.read().configs.clone()
    }

    /// Whether the topic is internal to Kafka's own protocol (none are in kaas).
    pub fn is_internal(&self) -> bool {
        false
    }
}

/// What a CreateTopics entry asks for, after defaults are applied.
#[derive(Debug, Clone)]
pub struct NewTopic {
    pub name: String,
    pub partitions: i32,
    pub configs: BTreeMap<String, String>,
}

/// Who decides which partitions this broker leads.
#[derive(Debug, Clone, Copy)]
pub enum Leadership {
    /// Local mode: the lease shim leads every partition as soon as it is opened.
    Local(LocalLease),
    /// Cluster mode: partitions are opened stat-only; the takeover driver follows
    /// assignment.json.
    Cluster,
}

/// All topics, by name and by id.
#[derive(Debug)]
pub struct TopicRegistry {
    engine: Engine,
    store: Option<TopicStore>,
    leadership: Leadership,
    log_defaults: kaas_storage::LogConfig,
    topics: RwLock<Topics>,
    /// Serialises topic admin so two CreateTopics of one name cannot both win.
    admin: Mutex<()>,
}

/// Topics opened at once at start.
const OPEN_THREADS: usize = 8;

#[derive(Debug, Default)]
struct Topics {
    by_name: HashMap<String, Arc<Topic>>,
    by_id: HashMap<Uuid, Arc<Topic>>,
}

impl TopicRegistry {
    /// Opens every topic found on the volume (none in memory mode) and takes its partitions over.
    pub fn open(engine: Engine, store: Option<TopicStore>, leadership: Leadership, log_defaults: kaas_storage::LogConfig) -> Result<TopicRegistry> {
        let registry = TopicRegistry {
            engine,
            store,
            leadership,
            log_defaults,
            topics: RwLock::new(Topics::default()),
            admin: Mutex::new(()),
        };
        if let Some(store) = &registry.store {
            store.sweep_reclaimed();
            let files = store.load_all()?.topics;
            // Side by side: each partition's open reads its directory, and a broker restarted
            // over 2,000 topics on the e2e cluster's volume took 19 s to open them one after
            // another, longer than its session (README "Scale").
            for opened in crate::side_by_side::map(&files, OPEN_THREADS, |file| registry.open_topic(file)) {
                registry.insert(Arc::new(opened?));
            }
        }
        Ok(registry)
    }

    /// A topic found on the volume at start, with its partitions opened.
    fn open_topic(&self, file: &kaas_shared::topic_file::TopicFile) -> Result<Topic> {
        let partitions =
            self.open_partitions(&file.name, file.topic_id, 0..file.partitions, &file.configs)?;
        info!(topic = %file.name, id = %file.topic_id, partitions = partitions.len(), "topic opened");
        Ok(Topic { name: file.name.clone(), id: file.topic_id, state: RwLock::new(TopicState { configs: file.configs.clone(), partitions }) })
    }

    pub fn get(&self, name: &str) -> Option<Arc<Topic>> {
        self.topics.read().by_name.get(name).cloned()
    }

    pub fn get_by_id(&self, id: &Uuid) -> Option<Arc<Topic>> {
        self.topics.read().by_id.get(id).cloned()
    }

    /// The partition `index` of `topic`, if both exist.
    pub fn partition(&self, topic: &str, index: i32) -> Option<Arc<Partition>> {
        self.get(topic)?.partition(index)
    }

    /// Every topic, sorted by name.
    pub fn list(&self) -> Vec<Arc<Topic>> {
        let mut all: Vec<_> = self.topics.read().by_name.values().cloned().collect();
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all
    }

    /// Defaults every topic falls back to.
    pub fn log_defaults(&self) -> &kaas_storage::LogConfig {
        &self.log_defaults
    }

    /// Checks a CreateTopics entry without creating anything.
    pub fn validate_new(&self, new: &NewTopic) -> Result<()> {
        validate_topic_name(&new.name)?;
        if new.partitions < 1 || new.partitions > MAX_PARTITIONS {
            return Err(Error::InvalidPartitions(format!(
                "number of partitions must be between 1 and {MAX_PARTITIONS}, got {}",
                new.partitions
            )));
        }
        topic_config::validate_all(&new.configs, &self.log_defaults)?;
        if self.get(&new.name).is_some() {
            return Err(Error::TopicExists(new.name.clone()));
        }
        Ok(())
    }

    /// Creates a topic: identity stamp, topic.json, partitions taken over.
    pub fn create(&self, new: NewTopic) -> Result<Arc<Topic>> {
        let _admin = self.admin.lock();
        self.validate_new(&new)?;
        let id = Uuid::new_v4();
        if let Some(store) = &self.store {
            store.create(&new.name, id, new.partitions, &new.configs)?;
        }
        let partitions = self.open_partitions(&new.name, id, 0..new.partitions, &new.configs)?;
        // NB: in cluster mode the new partitions are led only once the controller places them.
        let topic = Arc::new(Topic {
            name: new.name,
            id,
            state: RwLock::new(TopicState { configs: new.configs, partitions }),
        });
        info!(topic = %topic.name, %id, partitions = topic.partition_count(), "topic created");
        self.insert(topic.clone());
        Ok(topic)
    }

    /// Deletes a topic: its partitions are abandoned (closed, nothing persisted, seed 000) and
    /// its directory is renamed aside for reclamation.
    pub fn delete(&self, name: &str) -> Result<Arc<Topic>> {
        let _admin = self.admin.lock();
        let topic = {
            let mut topics = self.topics.write();
            let topic = topics.by_name.remove(name).ok_or_else(|| Error::UnknownTopicOrPartition(name.to_string()))?;
            topics.by_id.remove(&topic.id);
            topic
        };
        for partition in topic.partitions() {
            partition.abandon();
        }
        info!(topic = %name, id = %topic.id, reason = "topic deleted", "partitions abandoned");
        if let Some(store) = &self.store {
            store.reclaim(name, topic.id)?;
        }
        Ok(topic)
    }

    /// Grows a topic to `total` partitions.
    pub fn add_partitions(&self, name: &str, total: i32, validate_only: bool) -> Result<()> {
        let _admin = self.admin.lock();
        let topic = self.validate_growth(name, total)?;
        let current = topic.partition_count();
        if validate_only {
            return Ok(());
        }
        let configs = topic.configs();
        if let Some(store) = &self.store {
            store.write(name, topic.id, total, &configs)?;
        }
        let added = self.open_partitions(name, topic.id, current..total, &configs)?;
        topic.state.write().partitions.extend(added);
        info!(topic = %name, from = current, to = total, "partitions added");
        Ok(())
    }

    /// Checks that `name` exists and may grow to `total` partitions.
    pub fn validate_growth(&self, name: &str, total: i32) -> Result<Arc<Topic>> {
        let topic = self.get(name).ok_or_else(|| Error::UnknownTopicOrPartition(name.to_string()))?;
        let current = topic.partition_count();
        if total <= current {
            return Err(Error::InvalidPartitions(format!(
                "topic currently has {current} partitions, which is higher than or equal to the requested {total}"
            )));
        }
        if total > MAX_PARTITIONS {
            return Err(Error::InvalidPartitions(format!("at most {MAX_PARTITIONS} partitions")));
        }
        Ok(topic)
    }

    /// Replaces a topic's configs (validated) and applies them to its partitions.
    pub fn set_configs(&self, name: &str, configs: BTreeMap<String, String>, validate_only: bool) -> Result<()> {
        let _admin = self.admin.lock();
        let topic = self.get(name).ok_or_else(|| Error::UnknownTopicOrPartition(name.to_string()))?;
        topic_config::validate_all(&configs, &self.log_defaults)?;
        if validate_only {
            return Ok(());
        }
        if let Some(store) = &self.store {
            store.write(name, topic.id, topic.partition_count(), &configs)?;
        }
        let log_config = topic_config::log_config(&configs, &self.log_defaults);
        let mut state = topic.state.write();
        for partition in &state.partitions {
            partition.set_config(log_config);
        }
        state.configs = configs;
        info!(topic = %name, "topic configs changed");
        Ok(())
    }

    /// Closes every partition, persisting manifests and producer state (shutdown).
    pub fn close_all(&self) {
        for topic in self.list() {
            for (index, partition) in topic.partitions().iter().enumerate() {
                if let Err(e) = partition.close() {
                    warn!(topic = %topic.name, partition = index, error = %e, "close failed; recovery will run at the next take-over");
                }
            }
        }
    }

    /// Runs retention and time-based rolls on every partition; returns the segments unlinked.
    pub fn housekeeping(&self, now_ms: i64) -> kaas_storage::Removed {
        let mut removed = kaas_storage::Removed::default();
        for topic in self.list() {
            for (index, partition) in topic.partitions().iter().enumerate() {
                if let Leadership::Local(lease) = self.leadership
                    && (!partition.is_leader() || partition.has_storage_failure())
                {
                    self.take_over_locally(&lease, &topic.name, index as i32, partition);
                }
                match partition.housekeeping(now_ms) {
                    Ok(unlinked) => removed += unlinked,
                    Err(e) => warn!(topic = %topic.name, partition = index, error = %e, "housekeeping failed; retrying next round"),
                }
            }
        }
        if let Some(store) = &self.store {
            store.sweep_reclaimed();
        }
        removed
    }

    /// One log-cleaner round: a pass on every compacted partition this broker leads, until
    /// `stopping` says the broker is shutting down. A failed pass is retried next round (the
    /// swap is re-drivable, see `kaas_storage`'s compaction).
    pub fn clean(&self, now_ms: impl Fn() -> i64 + Sync, stopping: impl Fn() -> bool + Sync, threads: usize, throttle: &IoThrottle) {
        let work: Vec<(Arc<str>, usize, Arc<Partition>)> = self
            .list()
            .iter()
            .flat_map(|topic| {
                let name: Arc<str> = Arc::from(topic.name.as_str());
                topic.partitions().into_iter().enumerate().map(move |(index, p)| (name.clone(), index, p))
            })
            .filter(|(_, _, p)| p.is_leader() && p.config().cleanup_compact)
            .collect();
        // `threads` workers (this one and the others) take partitions in turn: one pass per
        // partition at a time, several partitions at once.
        let next = AtomicUsize::new(0);
        let worker = || {
            while let Some((topic, index, partition)) = work.get(next.fetch_add(1, Ordering::Relaxed)) {
                if stopping() {
                    return;
                }
                if let Err(e) = partition.clean_throttled(now_ms(), &stopping, throttle) {
                    warn!(%topic, partition = index, error = %e, "log cleaning failed; retrying next round");
                }
            }
        };
        std::thread::scope(|scope| {
            for _ in 1..threads.clamp(1, work.len().max(1)) {
                scope.spawn(worker);
            }
            worker();
        });
    }

    fn open_partitions(&self, topic: &str, id: Uuid, indexes: std::ops::Range<i32>, configs: &BTreeMap<String, String>) -> Result<Vec<Arc<Partition>>> {
        let config = topic_config::log_config(configs, &self.log_defaults);
        let first = indexes.start;
        let partitions = self.engine.open_partitions(topic, id, indexes, config)?;
        if let Leadership::Local(lease) = self.leadership {
            for (index, partition) in (first..).zip(&partitions) {
                self.take_over_locally(&lease, topic, index, partition);
            }
        }
        Ok(partitions)
    }

    /// Local mode: the lease leads the partition at one past the newest epoch on the volume. A
    /// partition that cannot be taken over (a stray file in its directory, an I/O error) stays
    /// offline with the reason, and housekeeping retries it; the broker serves the rest.
    fn take_over_locally(&self, lease: &LocalLease, topic: &str, index: i32, partition: &Partition) {
        let outcome = partition.stored_epoch().map(|stored| lease.takeover_epoch(stored)).and_then(|epoch| {
            partition.take_over(epoch).map(|report| (epoch, report))
        });
        match outcome {
            Ok((epoch, report)) => info!(topic, partition = index, epoch, reason = "local lease leads every partition", ?report, "took over partition"),
            Err(e) => error!(topic, partition = index, error = %e, "cannot take the partition over; it stays offline and is retried every housekeeping round"),
        }
    }

    /// Cluster mode: opens topics that appeared on the volume and abandons topics whose
    /// directory no longer carries their identity (deleted, or deleted and recreated). A
    /// recreated topic is opened afresh under its new identity.
    ///
    /// With `live` (the catalog's name → id of live topics), a directory is a topic only while
    /// a live topic carries its identity: a deleted topic is abandoned as soon as the catalog
    /// says so, before any reassignment, and a stale directory is never opened.
    pub fn refresh_from_volume(&self, live: Option<&LiveSet>) -> Result<()> {
        let Some(store) = &self.store else { return Ok(()) };
        let loaded = match live {
            Some(live) => store.load_live(live),
            None => store.load_all()?,
        };
        let on_disk = loaded.topics;
        let _admin = self.admin.lock();
        for known in self.list() {
            // NB: a directory that could not be read this time says nothing about its topic.
            let unreadable = loaded.unreadable.contains(&known.name) && live.is_none_or(|live| is_live(live, &known.name, known.id));
            if !unreadable && !on_disk.iter().any(|f| f.name == known.name && f.topic_id == known.id) {
                self.forget(&known, "topic directory deleted or replaced");
            }
        }
        for file in on_disk {
            match self.get(&file.name) {
                Some(known) if known.id == file.topic_id => {
                    let current = known.partition_count();
                    if file.partitions > current {
                        let added = self.open_partitions(&file.name, file.topic_id, current..file.partitions, &file.configs)?;
                        known.state.write().partitions.extend(added);
                    }
                    if known.configs() != file.configs {
                        let log_config = topic_config::log_config(&file.configs, &self.log_defaults);
                        let mut state = known.state.write();
                        for p in &state.partitions {
                            p.set_config(log_config);
                        }
                        state.configs = file.configs;
                    }
                }
                _ => {
                    let partitions = self.open_partitions(&file.name, file.topic_id, 0..file.partitions, &file.configs)?;
                    info!(topic = %file.name, id = %file.topic_id, partitions = partitions.len(), "topic found on the volume");
                    self.insert(Arc::new(Topic {
                        name: file.name,
                        id: file.topic_id,
                        state: RwLock::new(TopicState { configs: file.configs, partitions }),
                    }));
                }
            }
        }
        Ok(())
    }

    /// Drops a topic whose incarnation is gone: abandon, never relinquish (seed 000, gh #219) —
    /// a relinquish could write the dead incarnation's state into a recreated directory.
    fn forget(&self, topic: &Topic, reason: &str) {
        {
            let mut topics = self.topics.write();
            if topics.by_id.get(&topic.id).is_some_and(|t| t.name == topic.name) {
                topics.by_id.remove(&topic.id);
            }
            if topics.by_name.get(&topic.name).is_some_and(|t| t.id == topic.id) {
                topics.by_name.remove(&topic.name);
            }
        }
        for (index, partition) in topic.partitions().iter().enumerate() {
            let epoch = partition.leader_epoch();
            partition.abandon();
            info!(topic = %topic.name, partition = index, epoch, reason, "partition abandoned");
        }
    }

    /// Takes a partition over at `epoch` (cluster mode, driven by assignment.json).
    pub fn take_over(&self, topic: &str, id: Uuid, index: i32, epoch: i32) -> Result<kaas_storage::TakeoverReport> {
        let t = self.get(topic).filter(|t| t.id == id).ok_or_else(|| Error::UnknownTopicOrPartition(format!("{topic} ({id})")))?;
        let p = t.partition(index).ok_or_else(|| Error::UnknownTopicOrPartition(format!("{topic}/{index}")))?;
        Ok(p.take_over(epoch)?)
    }

    /// Every partition this broker leads right now: (topic, id, partition, epoch).
    pub fn led(&self) -> Vec<(String, Uuid, i32, i32)> {
        let mut out = Vec::new();
        for topic in self.list() {
            for (index, p) in topic.partitions().iter().enumerate() {
                if p.is_leader() {
                    out.push((topic.name.clone(), topic.id, index as i32, p.leader_epoch()));
                }
            }
        }
        out
    }

    fn insert(&self, topic: Arc<Topic>) {
        let mut topics = self.topics.write();
        topics.by_id.insert(topic.id, topic.clone());
        topics.by_name.insert(topic.name.clone(), topic);
    }
}

/// Kafka's topic name rules, plus kaas's reservation of names that start with `__`.
pub fn validate_topic_name(name: &str) -> Result<()> {
    let invalid = |reason: &str| Err(Error::InvalidTopic { name: name.to_string(), reason: reason.to_string() });
    if name.is_empty() {
        return invalid("topic name is empty");
    }
    if name == "." || name == ".." {
        return invalid("topic name cannot be \".\" or \"..\"");
    }
    if name.len() > MAX_TOPIC_NAME_LEN {
        return invalid("topic name is longer than 249 characters");
    }
    if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '_' || c == '-') {
        return invalid("topic names may only contain ASCII alphanumerics, '.', '_' and '-'");
    }
    if name.starts_with("__") {
        return invalid("topic names starting with \"__\" are reserved for kaas");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::{Condvar, Mutex as StdMutex};
    use std::time::Duration;

    use kaas_storage::testing::BatchBuilder;
    use kaas_storage::{AppendOptions, CleanStep};

    use super::*;

    /// A compacted topic of one partition whose closed segments hold superseded values.
    fn dirty_compacted_topic(registry: &TopicRegistry, name: &str) -> Arc<Partition> {
        let configs = [("cleanup.policy", "compact"), ("min.cleanable.dirty.ratio", "0")];
        let configs = configs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let topic = registry.create(NewTopic { name: name.to_string(), partitions: 1, configs }).expect("create");
        let partition = topic.partitions()[0].clone();
        for i in 0..40 {
            let batch = BatchBuilder::new().record(Some(format!("k{}", i % 5).as_bytes()), Some(b"value")).build();
            let epoch = partition.leader_epoch();
            let out = partition.append(&batch, AppendOptions { leader_epoch: epoch, now_ms: crate::broker::now_ms() }).expect("append");
            futures::executor::block_on(partition.wait_durable(out.last_offset)).expect("durable");
        }
        partition
    }

    /// With two cleaner threads, two partitions are cleaned at the same time: each pass is held
    /// at its first swap step until the other reaches its own (a single thread would hold the
    /// first for ever, so the test gives up waiting after a while and fails).
    #[test]
    fn cleaner_threads_clean_partitions_at_once() {
        // Small segments (below what a topic may set): several closed ones to clean.
        let defaults = kaas_storage::LogConfig { segment_bytes: 300, ..kaas_storage::LogConfig::default() };
        let registry = TopicRegistry::open(Engine::in_memory(), None, Leadership::Local(LocalLease::new(0)), defaults).expect("registry");
        let met = Arc::new((StdMutex::new(0usize), Condvar::new()));
        let partitions = [dirty_compacted_topic(&registry, "table-a"), dirty_compacted_topic(&registry, "table-b")];
        for p in &partitions {
            let met = met.clone();
            p.set_clean_hook(Some(Arc::new(move |step| {
                if step == CleanStep::TempWritten {
                    let (arrived, cv) = &*met;
                    let mut n = arrived.lock().expect("lock");
                    *n += 1;
                    cv.notify_all();
                    let (n, _) = cv.wait_timeout_while(n, Duration::from_secs(20), |n| *n < 2).expect("lock");
                    assert!(*n >= 2, "the other partition's pass never ran beside this one");
                }
                false
            })));
        }
        registry.clean(crate::broker::now_ms, || false, 2, &IoThrottle::unlimited());
        assert!(*met.0.lock().expect("lock") >= 2);
        for p in &partitions {
            assert_eq!(p.cleaner_stats().passes, 1, "each partition cleaned once");
        }
    }

    #[test]
    fn topic_names_follow_kafka_rules() {
        assert!(validate_topic_name("orders.v1_x-y").is_ok());
        for bad in ["", ".", "..", "a b", "a/b", "ü", "__cluster", &"x".repeat(250)] {
            assert!(matches!(validate_topic_name(bad), Err(Error::InvalidTopic { .. })), "{bad:?} accepted");
        }
    }
}
