//! The volume agent's periodic reclamation: finds topic directories no live KafkaTopic owns
//! (deleted topics, earlier incarnations, crashed creates), renames each aside once no broker
//! leads its partitions, and re-drives removal of everything renamed aside until it is gone.
//! This is how deletion converges without a finalizer: from the volume and `assignment.json`,
//! whether or not the operator was running when the KafkaTopic was deleted.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kaas_shared::crd::{KafkaCluster, KafkaTopic};
use kube::api::{Api, ListParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Resource, ResourceExt};
use tracing::{info, warn};
use uuid::Uuid;

use crate::Result;
use crate::topic::AgentContext;
use crate::volume::{self, RoundReport};

/// One round: scan, then list the live topics (in that order: a directory stamped before the
/// scan belongs to a topic the later list includes unless it was deleted), then reclaim.
pub async fn round(ctx: &AgentContext) -> Result<RoundReport> {
    let dirs = ctx.with_volume(|fs, root| volume::scan(fs, root)).await?;
    let live: BTreeMap<String, Uuid> =
        Api::<KafkaTopic>::namespaced(ctx.client.clone(), &ctx.namespace)
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .filter(|t| t.spec.cluster_ref == ctx.cluster)
            .filter_map(|t| Some((t.topic_name().to_owned(), Uuid::parse_str(&t.uid()?).ok()?)))
            .collect();
    let orphans = volume::orphans(&dirs, &live);
    let assignment = ctx.assignment().await?;
    ctx.with_volume(move |fs, root| volume::reclaim_round(fs, root, &orphans, assignment.as_ref()))
        .await
}

/// Runs rounds every `interval` until `shutdown` fires. A failed round is retried on the next
/// tick; pending removals are reported as events on the KafkaCluster and in the log.
pub async fn run(
    ctx: Arc<AgentContext>,
    interval: Duration,
    metrics: crate::metrics::ReclaimMetrics,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let recorder = Recorder::new(
        ctx.client.clone(),
        Reporter {
            controller: "kaas-volume-agent".into(),
            instance: std::env::var("HOSTNAME").ok(),
        },
    );
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = shutdown.changed() => return,
        }
        let report = match round(&ctx).await {
            Ok(report) => report,
            Err(e) => {
                metrics.round_failed();
                warn!(error = %e, "reclamation round failed; retrying next round");
                continue;
            }
        };
        metrics.observe(&report);
        for name in &report.renamed {
            info!(topic = %name, "renamed a deleted topic's directory aside");
        }
        if report.removed > 0 {
            info!(removed = report.removed, "reclaimed topic directories");
        }
        for p in &report.pending {
            warn!(pending = %p, "reclamation pending; retrying next round");
        }
        if report.renamed.is_empty() && report.pending.is_empty() && report.waiting.is_empty() {
            continue;
        }
        publish(&ctx, &recorder, &report).await;
    }
}

async fn publish(ctx: &AgentContext, recorder: &Recorder, report: &RoundReport) {
    let api: Api<KafkaCluster> = Api::namespaced(ctx.client.clone(), &ctx.namespace);
    let Ok(Some(cluster)) = api.get_opt(&ctx.cluster).await else {
        return;
    };
    let reference = cluster.object_ref(&());
    let mut events = Vec::new();
    if !report.renamed.is_empty() {
        events.push(Event {
            type_: EventType::Normal,
            reason: "TopicDirectoryReclaimed".into(),
            note: Some(format!(
                "renamed aside for removal: {}",
                report.renamed.join(", ")
            )),
            action: "Reclaim".into(),
            secondary: None,
        });
    }
    if !report.pending.is_empty() || !report.waiting.is_empty() {
        events.push(Event {
            type_: EventType::Warning,
            reason: "ReclamationPending".into(),
            note: Some(format!(
                "{} directories still led by a broker ({}), {} removals waiting for open files to close",
                report.waiting.len(),
                report.waiting.join(", "),
                report.pending.len()
            )),
            action: "Reclaim".into(),
            secondary: None,
        });
    }
    for event in events {
        if let Err(e) = recorder.publish(&event, &reference).await {
            warn!(error = %e, "cannot publish event");
        }
    }
}
