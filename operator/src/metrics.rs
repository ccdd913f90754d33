//! The volume agent's Prometheus metrics: reclamation that is pending shows up here (and as
//! events on the KafkaCluster), so a directory stuck behind a `.nfs` file or a broker that
//! still leads a deleted topic is visible without reading logs.

use std::sync::Arc;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
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
        registry.register("reclaim_waiting_directories", "Deleted topics' directories still led by a broker", self.waiting.clone());
        registry.register("reclaim_pending_directories", "Directories renamed aside whose removal is retried (EBUSY/ENOTEMPTY from open files)", self.pending.clone());
        registry.register("reclaim_renamed", "Topic directories renamed aside for removal", self.renamed.clone());
        registry.register("reclaim_removed", "Renamed-aside directories removed", self.removed.clone());
        registry.register("reclaim_failed_rounds", "Reclamation rounds that failed and were retried", self.failed_rounds.clone());
    }

    pub fn observe(&self, report: &RoundReport) {
        self.waiting.set(i64::try_from(report.waiting.len()).unwrap_or(i64::MAX));
        self.pending.set(i64::try_from(report.pending.len()).unwrap_or(i64::MAX));
        self.renamed.inc_by(report.renamed.len() as u64);
        self.removed.inc_by(report.removed as u64);
    }

    pub fn round_failed(&self) {
        self.failed_rounds.inc();
    }
}

/// Serves `GET /metrics` (OpenMetrics text) on `listener` until `shutdown` fires.
pub async fn serve(listener: tokio::net::TcpListener, registry: Arc<Registry>, mut shutdown: tokio::sync::watch::Receiver<bool>) {
    use axum::http::{StatusCode, header};
    use axum::response::IntoResponse;
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let registry = registry.clone();
            async move {
                let mut text = String::new();
                match encode(&mut text, &registry) {
                    Ok(()) => ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], text).into_response(),
                    Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
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
