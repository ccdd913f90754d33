//! `/healthz`, `/readyz` and `/metrics` for Kubernetes probes and Prometheus.
//!
//! - `/healthz`: the process serves (200), with what it leads (`partitions_led`) and what it
//!   should lead but cannot (`partitions_offline`), both by the one leadership check
//!   (`api::led_partition`: the applied assignment in a cluster, the local lease otherwise).
//! - `/readyz`: 200 once the broker can do its job: in local mode at once; in a cluster once it
//!   has applied an assignment and the controller acknowledges its heartbeat (not fenced).
//! - `/metrics`: Prometheus text.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::broker::Broker;

/// The gauges `/metrics` reports, refreshed at every scrape.
#[derive(Debug, Default)]
struct Gauges {
    partitions_led: Gauge,
    partitions_offline: Gauge,
    topics: Gauge,
    assignment_version: Gauge,
    controller_epoch: Gauge,
    is_controller: Gauge,
    fenced: Gauge,
    draining: Gauge,
    fetch_requests_in_flight: Gauge,
    fetch_sessions: Gauge,
    alive_brokers: Gauge,
    open_fds: Gauge,
    max_fds: Gauge,
    buffer_pool_bytes: Gauge,
    buffer_pool_buffers: Gauge,
}

#[derive(Debug)]
struct Metrics {
    registry: Registry,
    gauges: Gauges,
    state: crate::metrics::StateMetrics,
}

impl Metrics {
    fn new(broker: &Broker) -> Metrics {
        let mut registry = Registry::with_prefix("kaas");
        let gauges = Gauges::default();
        registry.register("partitions_led", "Partitions this broker leads", gauges.partitions_led.clone());
        registry.register("partitions_offline", "Partitions this broker should lead but cannot (unreadable directory, failed take-over or storage failure)", gauges.partitions_offline.clone());
        registry.register("topics", "Topics this broker knows", gauges.topics.clone());
        registry.register("assignment_version", "Version of the applied assignment.json", gauges.assignment_version.clone());
        registry.register("controller_epoch", "Controller epoch of the applied assignment", gauges.controller_epoch.clone());
        registry.register("is_controller", "1 while this broker holds the kaas-controller Lease", gauges.is_controller.clone());
        registry.register("fenced", "1 while this broker refuses writes (heartbeat unacknowledged)", gauges.fenced.clone());
        registry.register("draining", "1 once SIGTERM started a drain", gauges.draining.clone());
        registry.register("fetch_requests_in_flight", "Fetch requests being read or waiting for data (long polls)", gauges.fetch_requests_in_flight.clone());
        registry.register("fetch_sessions", "Incremental fetch sessions in the cache", gauges.fetch_sessions.clone());
        registry.register("open_fds", "File descriptors the broker process holds open: connections, segments, indexes", gauges.open_fds.clone());
        registry.register("max_fds", "The broker process's open-file limit (RLIMIT_NOFILE, soft)", gauges.max_fds.clone());
        registry.register("fetch_buffer_pool_bytes", "Idle capacity the fetch buffer pool keeps mapped for the next reads and responses", gauges.buffer_pool_bytes.clone());
        registry.register("fetch_buffer_pool_buffers", "Idle buffers in the fetch buffer pool", gauges.buffer_pool_buffers.clone());
        broker.listener_metrics.register(&mut registry);
        broker.interbroker_listener_metrics.register(registry.sub_registry_with_prefix("interbroker"));
        broker.metrics.register(&mut registry);
        let outcomes = &broker.txns.outcomes;
        registry.register("transactions_committed", "Transactions this broker's coordinator committed (the decision durable)", outcomes.committed.clone());
        registry.register("transactions_aborted", "Transactions this broker's coordinator aborted, by the producer or on timeout", outcomes.aborted.clone());
        registry.register("transactions_timed_out", "Transactions aborted because they passed transaction.timeout.ms", outcomes.timed_out.clone());
        let state = crate::metrics::StateMetrics::new(broker.config.metrics_per_partition);
        state.register(&mut registry);
        // NB: registered in local mode too (empty there), so every name exists in both modes
        // and a dashboard or alert never refers to a series one mode lacks.
        let durations = broker.cluster.as_ref().map(|c| c.takeover_durations.clone()).unwrap_or_default();
        registry.register("partition_takeover_seconds", "Partition take-over durations (recovery scan included)", durations.partitions);
        registry.register("group_shard_takeover_seconds", "Group shard take-over durations (log replay included)", durations.group_shards);
        registry.register("transaction_shard_takeover_seconds", "Transaction shard take-over durations (log replay included)", durations.transaction_shards);
        let runtime = broker.cluster.as_ref().map(|c| c.runtime_metrics.clone()).unwrap_or_default();
        registry.register("assignment_apply_seconds", "Follow rounds that applied a newer assignment: reading it and the take-overs and relinquishes it asked for", runtime.assignment_apply_seconds);
        registry.register("fencing_events", "Times this broker fenced itself: no heartbeat acknowledged within the fence timeout", runtime.fencing_events);
        let (round_trip, recompute) = match &broker.cluster {
            Some(c) => (c.link.control.heartbeat_round_trip(), c.link.control.recompute_seconds()),
            None => (Histogram::new(std::iter::empty()), Histogram::new(std::iter::empty())),
        };
        registry.register("heartbeat_round_trip_seconds", "A heartbeat beat to the controller's acknowledgement", round_trip);
        registry.register("controller_recompute_seconds", "The controller's placement recomputes (read, balance, write when changed), on the broker holding the Lease", recompute);
        registry.register("alive_brokers", "Brokers whose heartbeats the controller receives (reported by the controller; 0 elsewhere)", gauges.alive_brokers.clone());
        Metrics { registry, gauges, state }
    }

    /// Refreshes the state series and encodes everything. Reads segment files (lag in time).
    fn scrape(&self, broker: &Broker) -> Result<String, std::fmt::Error> {
        self.refresh(broker);
        let mut text = String::new();
        encode(&mut text, &self.registry)?;
        Ok(text)
    }

    fn refresh(&self, broker: &Broker) {
        let g = &self.gauges;
        let (led, offline) = crate::api::leadership_counts(broker);
        g.partitions_led.set(led as i64);
        g.partitions_offline.set(offline as i64);
        g.topics.set(broker.topics.list().len() as i64);
        g.fetch_requests_in_flight.set(broker.fetches.in_flight() as i64);
        g.fetch_sessions.set(broker.fetch_sessions.len() as i64);
        let (fds, limit) = process_fds();
        g.open_fds.set(fds);
        g.max_fds.set(limit);
        let (buffers, bytes) = kaas_storage::buffers::pool().idle();
        g.buffer_pool_buffers.set(buffers as i64);
        g.buffer_pool_bytes.set(bytes as i64);
        self.state.refresh(broker);
        if let Some(cluster) = &broker.cluster {
            let a = cluster.view.current();
            g.assignment_version.set(a.assignment_version);
            g.controller_epoch.set(a.controller_epoch);
            let control = &cluster.link.control;
            g.is_controller.set(i64::from(control.is_controller()));
            g.fenced.set(i64::from(cluster.view.write_fenced()));
            g.draining.set(i64::from(cluster.view.draining()));
            g.alive_brokers.set(i64::try_from(control.alive_brokers()).unwrap_or(i64::MAX));
        }
    }
}

/// Open descriptors (`/proc/self/fd`) and the soft open-file limit (`/proc/self/limits`); 0
/// where the proc filesystem does not say.
fn process_fds() -> (i64, i64) {
    let open = std::fs::read_dir("/proc/self/fd").map_or(0, |entries| entries.count() as i64);
    let limit = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|text| {
            let line = text.lines().find(|l| l.starts_with("Max open files"))?;
            line.trim_start_matches("Max open files").split_whitespace().next()?.parse().ok()
        })
        .unwrap_or(0);
    (open, limit)
}

type AppState = (Arc<Broker>, Arc<Metrics>);

/// The probe and metrics routes.
pub fn router(broker: Arc<Broker>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state((broker.clone(), Arc::new(Metrics::new(&broker))))
}

async fn healthz(State((broker, _)): State<AppState>) -> Response {
    let (version, fenced) = broker.cluster.as_ref().map_or((0, false), |c| (c.view.current().assignment_version, c.view.write_fenced()));
    let (led, offline) = crate::api::leadership_counts(broker.as_ref());
    let body = serde_json::json!({
        "status": "ok",
        "node_id": broker.config.node_id,
        "partitions_led": led,
        "partitions_offline": offline,
        "assignment_version": version,
        "fenced": fenced,
    });
    ([(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}

async fn readyz(State((broker, _)): State<AppState>) -> Response {
    let Some(cluster) = &broker.cluster else { return (StatusCode::OK, "ready\n").into_response() };
    let applied = cluster.view.current().assignment_version > 0;
    let fenced = cluster.view.write_fenced();
    if applied && !fenced && !cluster.view.draining() {
        (StatusCode::OK, "ready\n").into_response()
    } else {
        let why = format!("not ready: assignment applied={applied} fenced={fenced} draining={}\n", cluster.view.draining());
        (StatusCode::SERVICE_UNAVAILABLE, why).into_response()
    }
}

/// One scrape of `broker`'s series, as `/metrics` would answer (in-process tests).
pub fn render_metrics(broker: &Broker) -> Result<String, std::fmt::Error> {
    Metrics::new(broker).scrape(broker)
}

async fn metrics(State((broker, metrics)): State<AppState>) -> Response {
    // NB: the refresh reads batch headers (consumer lag in time) from segment files, which on
    // a network volume may block: off the runtime threads.
    let scraped = tokio::task::spawn_blocking(move || metrics.scrape(&broker)).await;
    match scraped {
        Ok(Ok(text)) => ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], text).into_response(),
        Ok(Err(e)) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

