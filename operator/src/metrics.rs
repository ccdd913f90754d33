//! The operator's Prometheus metrics and its HTTP server. Reconciles of both roles are counted
//! and timed by controller; the volume agent adds reclamation state: reclamation that is pending shows up here (and as
//! events on the KafkaCluster), so a directory stuck behind a `.nfs` file or a broker that
//! still leads a deleted topic is visible without reading logs.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::volume::RoundReport;

/// Reclamation state, updated after every sweep round.
#[derive(Debug, Default, Clone)]
pub struct ReclaimMetrics {
    waiting: Gauge,
    pending: Gauge,
    renamed: Counter,
    removed: Counter,
    failed_rounds: Counter,
}

impl ReclaimMetrics {
    /// Registers every metric under the `kaas_` prefix.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "reclaim_waiting_directories",
            "Deleted topics' directories still led by a broker",
            self.waiting.clone(),
        );
        registry.register(
            "reclaim_pending_directories",
            "Directories renamed aside whose removal is retried (EBUSY/ENOTEMPTY from open files)",
            self.pending.clone(),
        );
        registry.register(
            "reclaim_renamed",
            "Topic directories renamed aside for removal",
            self.renamed.clone(),
        );
        registry.register(
            "reclaim_removed",
            "Renamed-aside directories removed",
            self.removed.clone(),
        );
        registry.register(
            "reclaim_failed_rounds",
            "Reclamation rounds that failed and were retried",
            self.failed_rounds.clone(),
        );
    }

    pub fn observe(&self, report: &RoundReport) {
        self.waiting
            .set(i64::try_from(report.waiting.len()).unwrap_or(i64::MAX));
        self.pending
            .set(i64::try_from(report.pending.len()).unwrap_or(i64::MAX));
        self.renamed.inc_by(report.renamed.len() as u64);
        self.removed.inc_by(report.removed as u64);
    }

    pub fn round_failed(&self) {
        self.failed_rounds.inc();
    }
}

/// Reconcile counts, failures and durations by controller, and whether this replica leads:
/// the manager's and the volume agent's own health, next to what they manage.
#[derive(Debug, Clone)]
pub struct ReconcileMetrics {
    reconciles: Family<ControllerLabels, Counter>,
    errors: Family<ErrorLabels, Counter>,
    durations: Family<ControllerLabels, Histogram>,
    in_flight: Family<ControllerLabels, Gauge>,
    /// 1 while this replica holds its Lease (and so acts), 0 while it stands by.
    pub leader: Gauge,
    /// What the running controllers' caches hold, by readiness.
    pub readiness: Arc<crate::readiness::Readiness>,
    /// Objects with a change waiting for their reconcile.
    pub queue: Arc<WorkQueue>,
}

/// kube-runtime's work queue seen from both ends, since it does not expose its own: a watch
/// event that triggers an object's reconcile puts the object in (once, however many events
/// arrive), the start of its reconcile takes it out, and its deletion forgets it. The depth is
/// `kaas_operator_work_queue_depth{controller}`; each controller holds at most one entry per
/// object it watches.
#[derive(Debug, Default)]
pub struct WorkQueue {
    waiting: std::sync::Mutex<
        std::collections::HashMap<&'static str, std::collections::HashSet<(String, String)>>,
    >,
    depth: Family<ControllerLabels, Gauge>,
}

impl WorkQueue {
    /// A watch event asked for a reconcile of `namespace/name`.
    pub fn waiting(&self, controller: &'static str, namespace: &str, name: &str) {
        self.change(controller, |set| {
            set.insert((namespace.to_owned(), name.to_owned()))
        });
    }

    /// The controller stopped (this replica lost its Lease, or shuts down): nothing waits for
    /// it here any more.
    pub fn stopped(&self, controller: &'static str) {
        self.change(controller, |set| {
            set.clear();
            true
        });
    }

    /// The reconcile of `namespace/name` started, or the object is gone.
    pub fn picked_up(&self, controller: &'static str, namespace: &str, name: &str) {
        self.change(controller, |set| {
            set.remove(&(namespace.to_owned(), name.to_owned()))
        });
    }

    fn change(
        &self,
        controller: &'static str,
        edit: impl FnOnce(&mut std::collections::HashSet<(String, String)>) -> bool,
    ) {
        let mut waiting = self
            .waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let set = waiting.entry(controller).or_default();
        edit(set);
        let depth = i64::try_from(set.len()).unwrap_or(i64::MAX);
        self.depth
            .get_or_create(&ControllerLabels { controller })
            .set(depth);
    }
}

/// One running reconcile, counted in `kaas_operator_reconciles_in_flight` until dropped.
#[derive(Debug)]
pub struct Running(Gauge);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// `controller="kafkacluster"` or `"kafkatopic"`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    controller: &'static str,
}

/// A failed reconcile's controller and error reason ([`crate::Error::reason`]).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    controller: &'static str,
    reason: &'static str,
}

impl Default for ReconcileMetrics {
    fn default() -> Self {
        ReconcileMetrics {
            reconciles: Family::default(),
            errors: Family::default(),
            // 5 ms to about 20 s: a reconcile is a handful of API calls, a slow one waits on
            // the API server.
            durations: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.005, 2.0, 13))
            }),
            in_flight: Family::default(),
            leader: Gauge::default(),
            readiness: Arc::default(),
            queue: Arc::default(),
        }
    }
}

impl ReconcileMetrics {
    /// Registers every metric under the `kaas_` prefix.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "operator_reconciles",
            "Reconciles run, by controller",
            self.reconciles.clone(),
        );
        registry.register(
            "operator_reconcile_errors",
            "Reconciles that failed, by controller and error reason",
            self.errors.clone(),
        );
        registry.register(
            "operator_reconcile_duration_seconds",
            "How long reconciles took, by controller",
            self.durations.clone(),
        );
        registry.register(
            "operator_reconciles_in_flight",
            "Reconciles running now, by controller",
            self.in_flight.clone(),
        );
        registry.register(
            "operator_work_queue_depth",
            "Objects with a change waiting for their reconcile, by controller",
            self.queue.depth.clone(),
        );
        registry.register(
            "operator_leader",
            "1 while this replica holds its Lease and acts, 0 while it stands by",
            self.leader.clone(),
        );
        registry.register_collector(Box::new(self.readiness.clone()));
    }

    /// Marks a reconcile of `controller` for `namespace/name` as running until the returned
    /// guard drops (also when the reconcile's future is dropped unfinished, as on shutdown),
    /// and takes the object out of the work queue.
    pub fn running(&self, controller: &'static str, namespace: &str, name: &str) -> Running {
        self.queue.picked_up(controller, namespace, name);
        let gauge = self
            .in_flight
            .get_or_create(&ControllerLabels { controller })
            .clone();
        gauge.inc();
        Running(gauge)
    }

    /// Counts one reconcile of `controller` that took `took` and ended with `result`.
    pub fn observe<T>(
        &self,
        controller: &'static str,
        took: std::time::Duration,
        result: &crate::Result<T>,
    ) {
        let labels = ControllerLabels { controller };
        self.reconciles.get_or_create(&labels).inc();
        self.durations
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
        if let Err(e) = result {
            self.errors
                .get_or_create(&ErrorLabels {
                    controller,
                    reason: e.reason(),
                })
                .inc();
        }
    }
}

/// Serves `GET /metrics` (OpenMetrics text), `GET /healthz` (the process answers) and
/// `GET /readyz` (200 once `ready` is set: the API server answered this replica) on `listener`
/// until `shutdown` fires. One server for the manager and the volume agent.
pub async fn serve(
    listener: tokio::net::TcpListener,
    registry: Arc<Registry>,
    ready: Arc<AtomicBool>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    use axum::http::{StatusCode, header};
    use axum::response::IntoResponse;
    let app = axum::Router::new()
        .route(
            "/metrics",
            axum::routing::get(move || {
                let registry = registry.clone();
                async move {
                    let mut text = String::new();
                    match encode(&mut text, &registry) {
                        Ok(()) => (
                            [(
                                header::CONTENT_TYPE,
                                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                            )],
                            text,
                        )
                            .into_response(),
                        Err(e) => {
                            (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response()
                        }
                    }
                }
            }),
        )
        .route("/healthz", axum::routing::get(|| async { "ok" }))
        .route(
            "/readyz",
            axum::routing::get(move || {
                let ready = ready.load(Ordering::SeqCst);
                async move {
                    if ready {
                        (StatusCode::OK, "ready")
                    } else {
                        (
                            StatusCode::SERVICE_UNAVAILABLE,
                            "the API server has not answered yet",
                        )
                    }
                }
            }),
        );
    let _ = axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            let _ = shutdown.wait_for(|s| *s).await;
        })
        .await;
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn running_reconciles_are_counted_until_they_end() {
        let metrics = ReconcileMetrics::default();
        let mut registry = Registry::with_prefix("kaas");
        metrics.register(&mut registry);
        let text = || {
            let mut text = String::new();
            encode(&mut text, &registry).unwrap();
            text
        };
        let first = metrics.running("kafkacluster", "ns", "a");
        let second = metrics.running("kafkacluster", "ns", "b");
        assert!(
            text().contains("kaas_operator_reconciles_in_flight{controller=\"kafkacluster\"} 2\n"),
            "{}",
            text()
        );
        drop(first);
        drop(second);
        assert!(
            text().contains("kaas_operator_reconciles_in_flight{controller=\"kafkacluster\"} 0\n"),
            "{}",
            text()
        );
    }

    #[test]
    fn the_work_queue_holds_each_waiting_object_once_until_its_reconcile_starts() {
        let metrics = ReconcileMetrics::default();
        let mut registry = Registry::with_prefix("kaas");
        metrics.register(&mut registry);
        let depth = || {
            let mut text = String::new();
            encode(&mut text, &registry).unwrap();
            text.lines()
                .find_map(|l| {
                    l.strip_prefix("kaas_operator_work_queue_depth{controller=\"kafkatopic\"} ")
                })
                .map(|v| v.parse::<i64>().unwrap())
        };
        let queue = &metrics.queue;
        queue.waiting("kafkatopic", "ns", "orders");
        queue.waiting("kafkatopic", "ns", "orders"); // a second event for the same object
        queue.waiting("kafkatopic", "ns", "payments");
        queue.waiting("kafkatopic", "other", "orders");
        assert_eq!(depth(), Some(3));
        let running = metrics.running("kafkatopic", "ns", "orders");
        assert_eq!(depth(), Some(2));
        queue.waiting("kafkatopic", "ns", "orders"); // changed again while reconciling
        assert_eq!(depth(), Some(3));
        drop(running);
        queue.picked_up("kafkatopic", "other", "orders"); // deleted before its reconcile
        let _again = metrics.running("kafkatopic", "ns", "orders");
        let _payments = metrics.running("kafkatopic", "ns", "payments");
        assert_eq!(depth(), Some(0));
        // A controller that stops (its replica stands by) leaves nothing counted.
        queue.waiting("kafkatopic", "ns", "late");
        queue.stopped("kafkatopic");
        assert_eq!(depth(), Some(0));
    }
}
