//! What a Kafka operator watches first, on `/metrics` without a sidecar: requests and their
//! durations per API, bytes and records in and out per topic (counted as requests pass), and,
//! read at scrape time, each led partition's log and every coordinated consumer group's offsets
//! and lag. Names and meanings are listed in docs/monitoring.md.

use std::collections::{BTreeMap, HashSet};
use std::time::Instant;

use kafka_protocol::messages::ApiKey;
use parking_lot::RwLock;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::broker::Broker;
use crate::client_software::ClientSoftwareMetrics;
use crate::timed_fs::SyncMetrics;
use crate::error_codes::{ErrorCodes, error_name};
use crate::router::api_name;

// NB: API and phase labels are static names: these series are updated on every request, and
// owned strings would allocate on the produce and fetch paths.
type ApiLabel = [(&'static str, &'static str); 1];
type ApiErrorLabel = [(&'static str, String); 2];
type ApiPhaseLabel = [(&'static str, &'static str); 2];
type TopicLabel = [(&'static str, String); 1];
type PartitionLabel = [(&'static str, String); 2];
type GroupTopicLabel = [(&'static str, String); 2];
type GroupPartitionLabel = [(&'static str, String); 3];
type GroupStateLabel = [(&'static str, &'static str); 2];
type StateLabel = [(&'static str, &'static str); 1];
/// A gauge of a fractional value (seconds, ratios).
type SecondsGauge = Gauge<f64, std::sync::atomic::AtomicU64>;

fn request_histogram() -> Histogram {
    // 0.5 ms to ~16 s: an fsync-bound produce lands in the low buckets, a long poll up to its
    // max_wait_ms in the high ones (Kafka's request time also includes the wait).
    Histogram::new(exponential_buckets(0.0005, 2.0, 16))
}

fn phase_histogram() -> Histogram {
    // 50 µs to ~13 s: a phase can be much shorter than a whole request (a Metadata answer's
    // local time, a small response's send).
    Histogram::new(exponential_buckets(0.00005, 2.0, 19))
}

/// Where a request's time goes, as Kafka's RequestMetrics splits it. There is no request
/// queue phase: each connection's task dispatches its requests itself, in order, as it reads
/// them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Decode and handler, up to an answer or a deferred one (Kafka's LocalTimeMs).
    Local,
    /// A deferred answer's wait: fsync, long poll, a coordinator's write (Kafka's RemoteTimeMs).
    Wait,
    /// Ready, behind earlier answers of the same connection (Kafka's ResponseQueueTimeMs).
    ResponseQueue,
    /// Writing the answer to the socket (Kafka's ResponseSendTimeMs).
    Send,
}

impl Phase {
    fn label(self) -> &'static str {
        match self {
            Phase::Local => "local",
            Phase::Wait => "wait",
            Phase::ResponseQueue => "response_queue",
            Phase::Send => "send",
        }
    }
}

/// Counters that requests update as they pass. Clones share them.
#[derive(Debug, Clone)]
pub struct TrafficMetrics {
    requests: Family<ApiLabel, Counter>,
    request_seconds: Family<ApiLabel, Histogram, fn() -> Histogram>,
    phase_seconds: Family<ApiPhaseLabel, Histogram, fn() -> Histogram>,
    request_errors: Family<ApiErrorLabel, Counter>,
    /// Error codes by the client software that got them.
    client_errors: Family<ApiErrorLabel, Counter>,
    /// Responses that told the client to back off (client quotas), and for how long.
    throttled: Family<ApiLabel, Counter>,
    throttle_seconds: Family<ApiLabel, Counter<f64, std::sync::atomic::AtomicU64>>,
    /// Open connections by client software name and version.
    pub client_software: ClientSoftwareMetrics,
    /// Syncs on the volume (the broker's filesystem is wrapped with these).
    pub syncs: SyncMetrics,
    bytes_in: Family<TopicLabel, Counter>,
    messages_in: Family<TopicLabel, Counter>,
    bytes_out: Family<TopicLabel, Counter>,
    /// Topics with throughput series, so a deleted topic's series can be dropped.
    topics_seen: std::sync::Arc<RwLock<HashSet<String>>>,
    /// The same traffic over all topics since the start, never dropped (the heartbeat reports
    /// them; the controller publishes rates from them).
    totals: [Counter; 3],
    /// Segments retention (or DeleteRecords) unlinked, and their bytes.
    retention: [Counter; 2],
    spliced: Counter,
}

impl Default for TrafficMetrics {
    fn default() -> TrafficMetrics {
        TrafficMetrics {
            requests: Family::default(),
            request_seconds: Family::new_with_constructor(request_histogram as fn() -> Histogram),
            phase_seconds: Family::new_with_constructor(phase_histogram as fn() -> Histogram),
            request_errors: Family::default(),
            client_errors: Family::default(),
            throttled: Family::default(),
            throttle_seconds: Family::default(),
            client_software: ClientSoftwareMetrics::default(),
            syncs: SyncMetrics::default(),
            bytes_in: Family::default(),
            messages_in: Family::default(),
            bytes_out: Family::default(),
            topics_seen: Default::default(),
            totals: Default::default(),
            retention: Default::default(),
            spliced: Counter::default(),
        }
    }
}

impl TrafficMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register("requests", "Kafka requests answered, by API", self.requests.clone());
        registry.register(
            "request_duration_seconds",
            "Time from a request's arrival to its response being ready (fsync and long-poll waits included), by API",
            self.request_seconds.clone(),
        );
        registry.register(
            "request_phase_seconds",
            "Time a request spent in each phase (local, wait, response_queue, send), by API",
            self.phase_seconds.clone(),
        );
        registry.register(
            "request_errors",
            "Error codes in responses (one per failed partition, topic or group, as Kafka's ErrorsPerSec), by API and error",
            self.request_errors.clone(),
        );
        registry.register(
            "client_request_errors",
            "Error codes in responses by the client software that got them (KIP-511 name, `unknown` before ApiVersions v3) and error",
            self.client_errors.clone(),
        );
        registry.register("throttled_responses", "Responses with a throttle time (a client quota at work), by API", self.throttled.clone());
        registry.register("throttle_time_seconds", "Throttle time told to clients (client quotas), by API", self.throttle_seconds.clone());
        self.client_software.register(registry);
        self.syncs.register(registry);
        registry.register("topic_bytes_in", "Record batch bytes appended, by topic (Kafka's BytesInPerSec)", self.bytes_in.clone());
        registry.register("topic_messages_in", "Records appended, by topic (Kafka's MessagesInPerSec)", self.messages_in.clone());
        registry.register("topic_bytes_out", "Record bytes sent to fetchers, by topic (Kafka's BytesOutPerSec)", self.bytes_out.clone());
        let [segments, bytes] = &self.retention;
        registry.register(
            "retention_deleted_segments",
            "Segments housekeeping unlinked: past retention.ms or retention.bytes, or below a DeleteRecords start",
            segments.clone(),
        );
        registry.register("retention_deleted_bytes", "Bytes of the segments housekeeping unlinked", bytes.clone());
        registry.register(
            "fetch_spliced_bytes",
            "Record bytes sent from the page cache to sockets by splice, never copied through the broker (fetch.zero.copy)",
            self.spliced.clone(),
        );
    }

    /// Counts record bytes a writer spliced into a socket.
    pub fn spliced(&self, bytes: u64) {
        if bytes > 0 {
            self.spliced.inc_by(bytes);
        }
    }

    /// Counts what a housekeeping round unlinked.
    pub fn retention_removed(&self, removed: kaas_storage::Removed) {
        let [segments, bytes] = &self.retention;
        segments.inc_by(removed.segments);
        bytes.inc_by(removed.bytes);
    }

    /// A request of `api` dispatched at `started` whose answer `body` is ready now;
    /// `deferred_at` is when its handler handed the rest to a deferred wait, if it did.
    /// `client` names the client's software, asked only when the answer carries an error.
    pub fn answered(
        &self,
        api: ApiKey,
        started: Instant,
        deferred_at: Option<Instant>,
        body: &(impl ErrorCodes + crate::throttled::Throttled),
        client: impl Fn() -> String,
    ) {
        let name = api_name(api);
        self.count_request(name, started, deferred_at);
        let mut software = None;
        body.error_codes(&mut |code| {
            if code != 0 {
                let error = error_name(code);
                let software = software.get_or_insert_with(&client).clone();
                self.client_errors.get_or_create(&[("software", software), ("error", error.clone())]).inc();
                self.request_errors.get_or_create(&[("api", name.to_string()), ("error", error)]).inc();
            }
        });
        let throttle_ms = body.throttle_time_ms();
        if throttle_ms > 0 {
            let label = [("api", name)];
            self.throttled.get_or_create(&label).inc();
            self.throttle_seconds.get_or_create(&label).inc_by(f64::from(throttle_ms) / 1000.0);
        }
    }

    /// A request answered with nothing (produce with acks=0).
    pub fn answered_silently(&self, api: ApiKey, started: Instant) {
        self.count_request(api_name(api), started, None);
    }

    fn count_request(&self, api: &'static str, started: Instant, deferred_at: Option<Instant>) {
        let now = Instant::now();
        let label = [("api", api)];
        self.requests.get_or_create(&label).inc();
        self.request_seconds.get_or_create(&label).observe(now.duration_since(started).as_secs_f64());
        let local_end = deferred_at.unwrap_or(now);
        self.observe_phase(api, Phase::Local, local_end.duration_since(started));
        if let Some(deferred_at) = deferred_at {
            self.observe_phase(api, Phase::Wait, now.duration_since(deferred_at));
        }
    }

    /// A response the connection's writer took at `taken_at` and finished writing now.
    pub fn response_written(&self, api: ApiKey, ready_at: Instant, taken_at: Instant) {
        let api = api_name(api);
        self.observe_phase(api, Phase::ResponseQueue, taken_at.saturating_duration_since(ready_at));
        self.observe_phase(api, Phase::Send, taken_at.elapsed());
    }

    fn observe_phase(&self, api: &'static str, phase: Phase, took: std::time::Duration) {
        self.phase_seconds.get_or_create(&[("api", api), ("phase", phase.label())]).observe(took.as_secs_f64());
    }

    /// A batch appended to `topic` (idempotent duplicates are not counted: nothing was written).
    pub fn appended(&self, topic: &str, bytes: usize, records: i64) {
        self.see(topic);
        let label = [("topic", topic.to_string())];
        self.bytes_in.get_or_create(&label).inc_by(bytes as u64);
        self.messages_in.get_or_create(&label).inc_by(records.max(0) as u64);
        self.totals[0].inc_by(bytes as u64);
        self.totals[2].inc_by(records.max(0) as u64);
    }

    /// Bytes in, bytes out and messages in over all topics since the broker started.
    pub fn totals(&self) -> (u64, u64, u64) {
        (self.totals[0].get(), self.totals[1].get(), self.totals[2].get())
    }

    /// Record bytes of `topic` put in a fetch response.
    pub fn sent(&self, topic: &str, bytes: usize) {
        if bytes == 0 {
            return;
        }
        self.see(topic);
        self.bytes_out.get_or_create(&[("topic", topic.to_string())]).inc_by(bytes as u64);
        self.totals[1].inc_by(bytes as u64);
    }

    /// On the produce and fetch paths: a shared read lock, the exclusive one only for a topic's
    /// first series.
    fn see(&self, topic: &str) {
        if !self.topics_seen.read().contains(topic) {
            self.topics_seen.write().insert(topic.to_string());
        }
    }

    /// Drops the series of topics that no longer exist (bounded cardinality over topic churn).
    pub(crate) fn forget_deleted(&self, live: &HashSet<String>) {
        let mut seen = self.topics_seen.write();
        seen.retain(|topic| {
            if live.contains(topic) {
                return true;
            }
            let label = [("topic", topic.clone())];
            self.bytes_in.remove(&label);
            self.messages_in.remove(&label);
            self.bytes_out.remove(&label);
            false
        });
    }
}

/// Series read from the broker's state at each scrape; rebuilt every time, so deleted
/// partitions and groups disappear.
#[derive(Debug, Default)]
pub struct StateMetrics {
    /// Whether the per-partition series are exported (and so computed).
    per_partition: bool,
    log_size: Family<PartitionLabel, Gauge>,
    segments: Family<PartitionLabel, Gauge>,
    log_start: Family<PartitionLabel, Gauge>,
    log_end: Family<PartitionLabel, Gauge>,
    high_watermark: Family<PartitionLabel, Gauge>,
    cleaner_dirty_ratio: Family<PartitionLabel, SecondsGauge>,
    cleaner_last_clean: Family<PartitionLabel, SecondsGauge>,
    cleaner_bytes_cleaned: Family<PartitionLabel, Gauge>,
    cleaner_bytes_removed: Family<PartitionLabel, Gauge>,
    cleaner_passes: Family<PartitionLabel, Gauge>,
    committed: Family<GroupPartitionLabel, Gauge>,
    lag: Family<GroupPartitionLabel, Gauge>,
    lag_sum: Family<GroupTopicLabel, Gauge>,
    lag_seconds: Family<GroupPartitionLabel, SecondsGauge>,
    lag_seconds_max: Family<GroupTopicLabel, SecondsGauge>,
    groups: Family<GroupStateLabel, Gauge>,
    group_members: Family<[(&'static str, String); 1], Gauge>,
    transactions: Family<StateLabel, Gauge>,
}

impl StateMetrics {
    pub fn new(per_partition: bool) -> StateMetrics {
        StateMetrics { per_partition, ..StateMetrics::default() }
    }

    pub fn register(&self, registry: &mut Registry) {
        if self.per_partition {
            registry.register("partition_log_size_bytes", "Bytes in a led partition's segments", self.log_size.clone());
            registry.register("partition_segments", "Segments of a led partition, the active one included", self.segments.clone());
            registry.register("partition_log_start_offset", "A led partition's log start offset", self.log_start.clone());
            registry.register("partition_log_end_offset", "A led partition's log end offset", self.log_end.clone());
            registry.register("partition_high_watermark", "A led partition's high watermark (what consumers can read)", self.high_watermark.clone());
            registry.register("partition_cleaner_dirty_ratio", "A led compacted partition's share of closed-segment bytes not yet cleaned, as of the cleaner's last look", self.cleaner_dirty_ratio.clone());
            registry.register("partition_cleaner_last_clean_timestamp_seconds", "When the cleaner last finished a pass over a led compacted partition (Unix seconds)", self.cleaner_last_clean.clone());
            registry.register("partition_cleaner_cleaned_bytes", "Segment bytes the cleaner read and rewrote since this broker took the partition over", self.cleaner_bytes_cleaned.clone());
            registry.register("partition_cleaner_removed_bytes", "Bytes the cleaner removed (read minus written) since this broker took the partition over", self.cleaner_bytes_removed.clone());
            registry.register("partition_cleaner_passes", "Cleaner passes over the partition since this broker took it over", self.cleaner_passes.clone());
            registry.register(
                "consumer_group_committed_offset",
                "A coordinated group's committed offset, by group, topic and partition",
                self.committed.clone(),
            );
            registry.register(
                "consumer_group_lag",
                "High watermark minus committed offset (the leader's, handed back by the controller when another broker leads the partition)",
                self.lag.clone(),
            );
        }
        if self.per_partition {
            registry.register(
                "consumer_group_lag_seconds",
                "Age of the oldest record a group has not committed (now minus its timestamp; 0 when caught up), for partitions this broker also leads",
                self.lag_seconds.clone(),
            );
        }
        registry.register("consumer_group_lag_sum", "consumer_group_lag summed over a topic's partitions, by group and topic", self.lag_sum.clone());
        registry.register("consumer_group_lag_seconds_max", "consumer_group_lag_seconds, the largest over a topic's partitions, by group and topic", self.lag_seconds_max.clone());
        registry.register("consumer_groups", "Groups this broker coordinates, by state and type (classic or consumer)", self.groups.clone());
        registry.register("consumer_group_members", "Members of a group this broker coordinates (either protocol)", self.group_members.clone());
        registry.register("transactions", "Transactional ids this broker coordinates, by state (Ongoing, PrepareCommit, CompleteAbort, ...)", self.transactions.clone());
    }

    /// Reads the broker's state. Touches segment files (lag in time reads batch headers): call
    /// it where blocking is fine.
    pub fn refresh(&self, broker: &Broker) {
        for family in [&self.log_size, &self.segments, &self.log_start, &self.log_end, &self.high_watermark, &self.cleaner_bytes_cleaned, &self.cleaner_bytes_removed, &self.cleaner_passes] {
            family.clear();
        }
        self.cleaner_dirty_ratio.clear();
        self.cleaner_last_clean.clear();
        let led = crate::lag::led(broker);
        let live: HashSet<String> = broker.topics.list().into_iter().map(|t| t.name.clone()).collect();
        for (topic, partitions) in led.iter().filter(|_| self.per_partition) {
            for (index, p) in partitions {
                let label = [("topic", topic.clone()), ("partition", index.to_string())];
                self.log_size.get_or_create(&label).set(i64::try_from(p.size_bytes()).unwrap_or(i64::MAX));
                self.segments.get_or_create(&label).set(i64::try_from(p.segment_count()).unwrap_or(i64::MAX));
                self.log_start.get_or_create(&label).set(p.log_start_offset());
                self.log_end.get_or_create(&label).set(p.log_end_offset());
                self.high_watermark.get_or_create(&label).set(p.high_watermark());
                if p.config().cleanup_compact {
                    let stats = p.cleaner_stats();
                    self.cleaner_dirty_ratio.get_or_create(&label).set(stats.dirty_ratio);
                    if let Some(ms) = stats.last_clean_ms {
                        self.cleaner_last_clean.get_or_create(&label).set(ms as f64 / 1000.0);
                    }
                    self.cleaner_bytes_cleaned.get_or_create(&label).set(i64::try_from(stats.bytes_cleaned).unwrap_or(i64::MAX));
                    self.cleaner_bytes_removed.get_or_create(&label).set(i64::try_from(stats.bytes_removed).unwrap_or(i64::MAX));
                    self.cleaner_passes.get_or_create(&label).set(i64::try_from(stats.passes).unwrap_or(i64::MAX));
                }
            }
        }
        broker.metrics.forget_deleted(&live);

        for family in [&self.committed, &self.lag] {
            family.clear();
        }
        self.lag_seconds.clear();
        self.lag_seconds_max.clear();
        self.transactions.clear();
        for (_, txn) in broker.txns.list() {
            self.transactions.get_or_create(&[("state", txn.state.name())]).inc();
        }
        self.lag_sum.clear();
        self.groups.clear();
        self.group_members.clear();
        for group in crate::lag::groups(broker, &led, true) {
            self.groups.get_or_create(&[("state", group.group.state), ("type", group.group.group_type)]).inc();
            let members = i64::try_from(group.group.members).unwrap_or(i64::MAX);
            self.group_members.get_or_create(&[("group", group.group.group_id.clone())]).set(members);
            // Per topic: the lag summed and the oldest uncommitted record, over its partitions.
            let mut per_topic: BTreeMap<&str, (Option<i64>, Option<f64>)> = BTreeMap::new();
            for p in &group.partitions {
                let (sum, oldest) = per_topic.entry(&p.topic).or_default();
                if let Some(lag) = p.lag {
                    *sum.get_or_insert(0) += lag;
                }
                if let Some(age) = p.seconds {
                    *oldest = Some(oldest.map_or(age, |o| o.max(age)));
                }
                if !self.per_partition {
                    continue;
                }
                let label = [("group", group.group.group_id.clone()), ("topic", p.topic.clone()), ("partition", p.partition.to_string())];
                self.committed.get_or_create(&label).set(p.committed);
                if let Some(lag) = p.lag {
                    self.lag.get_or_create(&label).set(lag);
                }
                if let Some(age) = p.seconds {
                    self.lag_seconds.get_or_create(&label).set(age);
                }
            }
            for (topic, (sum, oldest)) in per_topic {
                let label = [("group", group.group.group_id.clone()), ("topic", topic.to_string())];
                if let Some(oldest) = oldest {
                    self.lag_seconds_max.get_or_create(&label).set(oldest);
                }
                if let Some(sum) = sum {
                    self.lag_sum.get_or_create(&label).set(sum);
                }
            }
        }
    }
}
