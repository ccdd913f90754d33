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
use kube::{Resource, ResourceExt};
use tracing::{info, warn};
use uuid::Uuid;

use crate::topic::AgentContext;
use crate::volume::{self, RoundReport};
use crate::{Result, events};

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
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = shutdown.changed() => return,
        }
        let report = match round(&ctx).await {
            Ok(report) => report,
            // A standby agent does not reclaim; it is not a failure.
            Err(crate::Error::NotLeader) => continue,
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
        publish(&ctx, &report).await;
    }
}

async fn publish(ctx: &AgentContext, report: &RoundReport) {
    let api: Api<KafkaCluster> = Api::namespaced(ctx.client.clone(), &ctx.namespace);
    let Ok(Some(cluster)) = api.get_opt(&ctx.cluster).await else {
        return;
    };
    let reference = cluster.object_ref(&());
    if !report.renamed.is_empty() {
        let note = format!("renamed aside for removal: {}", report.renamed.join(", "));
        events::publish(
            &ctx.recorder,
            &reference,
            false,
            "TopicDirectoryReclaimed",
            note,
            "Reclaim",
        )
        .await;
    }
    if !report.pending.is_empty() || !report.waiting.is_empty() {
        let note = format!(
            "{} directories still led by a broker ({}), {} removals waiting for open files to close",
            report.waiting.len(),
            report.waiting.join(", "),
            report.pending.len()
        );
        events::publish(
            &ctx.recorder,
            &reference,
            true,
            "ReclamationPending",
            note,
            "Reclaim",
        )
        .await;
    }
}
