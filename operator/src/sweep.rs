//! The volume agent's periodic reclamation: finds topic directories no live KafkaTopic owns
//! (deleted topics, earlier incarnations, crashed creates), renames each aside once no broker
//! leads its partitions, and re-drives removal of everything renamed aside until it is gone.
//! This is how deletion converges without a finalizer: from the volume and `assignment.json`,
//! whether or not the operator was running when the KafkaTopic was deleted.
//!
//! Each round also removes the `kafka-users.json` entries of deleted KafkaUsers ([`users_round`]);
//! a KafkaUser's deletion seen by the agent's watch starts a round at once.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use kaas_shared::crd::{KafkaCluster, KafkaTopic, KafkaUser};
use kaas_shared::kafka_users;
use kaas_shared::layout::Layout;
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

/// Removes the entries of deleted KafkaUsers from `kafka-users.json`; the user names removed.
/// The file's revision is read before the live users are listed, so an entry written after the
/// listing (a user the listing may not include yet) is never removed
/// ([`kafka_users::KafkaUsersFile::remove_dead`]).
pub async fn users_round(ctx: &AgentContext) -> Result<Vec<String>> {
    let (listed_at, empty) = ctx
        .with_volume(|fs, root| {
            let file = kafka_users::read(fs, &Layout::new(root.to_owned()))?;
            Ok((file.revision, file.users.is_empty()))
        })
        .await?;
    if empty {
        return Ok(Vec::new());
    }
    let live: BTreeSet<String> = Api::<KafkaUser>::namespaced(ctx.client.clone(), &ctx.namespace)
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .filter(|u| u.spec.cluster_ref == ctx.cluster)
        .filter_map(|u| u.uid())
        .collect();
    ctx.with_volume(move |fs, root| {
        let layout = Layout::new(root.to_owned());
        let mut file = kafka_users::read(fs, &layout)?;
        let removed = file.remove_dead(&live, listed_at);
        if !removed.is_empty() {
            kafka_users::write(fs, &layout, &file)?;
        }
        Ok(removed)
    })
    .await
}

/// Runs rounds every `interval`, and at once when `nudge` is notified (a KafkaUser was
/// deleted), until `shutdown` fires. A failed round is retried on the next tick; pending
/// removals are reported as events on the KafkaCluster and in the log.
pub async fn run(
    ctx: Arc<AgentContext>,
    interval: Duration,
    metrics: crate::metrics::ReclaimMetrics,
    nudge: Arc<tokio::sync::Notify>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            () = nudge.notified() => {}
            _ = shutdown.changed() => return,
        }
        match users_round(&ctx).await {
            Ok(removed) => {
                for name in &removed {
                    info!(user = %name, "removed a deleted KafkaUser from kafka-users.json");
                }
            }
            // A standby agent does not sweep; it is not a failure.
            Err(crate::Error::NotLeader) => {}
            Err(e) => warn!(error = %e, "KafkaUser sweep failed; retrying next round"),
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
