//! Cluster mode (seed 003), the broker's side: the one view of assignment.json, the loop that
//! follows it and drives take-overs, and the SIGTERM drain. The controller role and the
//! heartbeat are the cluster runtime's (the `kaas` binary wires them from `kaas-controller`);
//! the broker sees them through [`ControlPlane`](crate::control_plane::ControlPlane).

use std::sync::Arc;
use std::time::{Duration, Instant};

use kaas_shared::assignment;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use tokio::sync::watch;
use tracing::{info, warn};

use crate::assignment_view::{AssignmentView, Rejected};
use crate::broker::Broker;
use crate::config::ClusterLink;
use crate::error::Result;
use crate::takeover_driver;

/// The cluster parts of a broker.
#[derive(Debug)]
pub struct Cluster {
    pub link: ClusterLink,
    pub view: AssignmentView,
    pub takeover_durations: takeover_driver::TakeoverDurations,
    pub runtime_metrics: RuntimeMetrics,
}

/// The cluster runtime's own series (the heartbeat's and the controller's live with them).
#[derive(Debug, Clone)]
pub struct RuntimeMetrics {
    /// A follow round that applied a newer assignment: reading it, applying it, and the
    /// take-overs and relinquishes it asked of this broker.
    pub assignment_apply_seconds: Histogram,
    /// Times this broker fenced itself (no acknowledged heartbeat within the fence timeout).
    pub fencing_events: Counter,
}

impl Default for RuntimeMetrics {
    fn default() -> RuntimeMetrics {
        // 1 ms .. ~65 s, as take-overs.
        RuntimeMetrics { assignment_apply_seconds: Histogram::new(exponential_buckets(0.001, 2.0, 17)), fencing_events: Counter::default() }
    }
}

impl Cluster {
    pub fn new(link: ClusterLink, broker_id: i32) -> Cluster {
        let view = AssignmentView::new(broker_id, link.control.clone(), link.fence_timeout);
        Cluster { link, view, takeover_durations: Default::default(), runtime_metrics: Default::default() }
    }
}

/// Follows assignment.json: on every push, every catalog event and every second, refresh
/// topics from the volume, apply a newer assignment, and converge leadership to it. A catalog
/// event also wakes the controller role (a topic created or deleted changes the placement).
pub async fn follow_assignments(broker: Arc<Broker>, mut stop: watch::Receiver<bool>) {
    let Some(cluster) = broker.cluster.as_ref() else { return };
    // NB: a broker that never had a beat acknowledged is fenced from its start; that is not a
    // fencing event. One that had (this task restarted after a pause) and is fenced now is.
    let mut was_fenced = cluster.view.control.since_last_ack().is_none();
    loop {
        let fenced = cluster.view.write_fenced();
        if fenced != was_fenced {
            let since_ack = cluster.view.control.since_last_ack();
            if fenced {
                cluster.runtime_metrics.fencing_events.inc();
                warn!(broker = broker.config.node_id, ?since_ack, fence_timeout = ?cluster.link.fence_timeout, reason = "no heartbeat acknowledged within the fence timeout", "fenced: refusing writes");
            } else {
                info!(broker = broker.config.node_id, "unfenced: the controller acknowledges heartbeats again");
            }
        }
        was_fenced = fenced;
        let round = broker.clone();
        let outcome = tokio::task::spawn_blocking(move || follow_round(&round)).await;
        match outcome {
            Ok(Ok(true)) => cluster.link.control.report_now(),
            Ok(Ok(false)) | Err(_) => {}
            Ok(Err(e)) => warn!(error = %e, "following the assignment failed; retrying"),
        }
        let topics_changed = async {
            match &cluster.link.catalog {
                Some(catalog) => catalog.changed().notified().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = cluster.link.control.assignment_changed().notified() => {}
            _ = topics_changed => cluster.link.control.topics_changed(),
            _ = stop.changed() => return,
        }
    }
}

/// One round of following the assignment: the topics on the volume, the assignment if it
/// changed, and the take-overs and hand-overs it asks of this broker. Returns whether it applied
/// a new assignment (its take-overs have run by then).
fn follow_round(broker: &Broker) -> Result<bool> {
    let Some(cluster) = broker.cluster.as_ref() else { return Ok(false) };
    let started = Instant::now();
    let mut applied = false;
    let refreshed = match cluster.link.catalog.as_ref().map(|c| c.live()) {
        None => broker.topics.refresh_from_volume(None),
        Some(Some(live)) => broker.topics.refresh_from_volume(Some(&live)),
        // Not synced yet: an empty list would look like every topic deleted.
        Some(None) => Ok(()),
    };
    if let Err(e) = refreshed {
        // The topics already open stay as they are; the assignment is still applied.
        warn!(error = %e, "cannot read the topics on the volume this round; retrying next round");
    }
    // What the controller had announced before this round read the volume: if the round does
    // not find it there (not readable yet), it is not news that stops this round's take-overs.
    let announced_before = cluster.link.control.announced_assignment();
    // Unchanged since the one applied: only its first bytes are read.
    let applied_stamp = Some(cluster.view.current().stamp()).filter(|s| s.assignment_version > 0);
    if let assignment::Read::Changed(candidate) = assignment::read_unless(&**broker.engine.fs(), broker.engine.layout(), applied_stamp)? {
        let (epoch, version) = (candidate.controller_epoch, candidate.assignment_version);
        match cluster.view.apply_if_new(candidate) {
            Ok(_) => {
                applied = true;
                info!(controller_epoch = epoch, version, "applied assignment");
            }
            Err(Rejected::NotNewer) => {}
            Err(e @ Rejected::StaleController { .. }) => warn!(controller_epoch = epoch, version, reason = %e, "refused assignment"),
        }
    }
    let current = cluster.view.current();
    let known = announced_before.max((current.controller_epoch, current.assignment_version));
    let superseded = || cluster.link.control.announced_assignment() > known;
    takeover_driver::reconcile(&broker.topics, &current, broker.config.node_id, &cluster.takeover_durations, &superseded);
    let (me, durations) = (broker.config.node_id, &cluster.takeover_durations);
    takeover_driver::reconcile_shards(&*broker.groups, &current.consumer_groups, &current, me, &durations.group_shards);
    takeover_driver::reconcile_shards(&broker.txns, &current.transactions, &current, me, &durations.transaction_shards);
    if applied {
        cluster.runtime_metrics.assignment_apply_seconds.observe(started.elapsed().as_secs_f64());
    }
    Ok(applied)
}

/// SIGTERM drain (seed 000): announce it on the heartbeat, wait (bounded) for the controller to
/// move this broker's partitions away, then relinquish whatever remains.
pub async fn drain(broker: &Broker) {
    let Some(cluster) = broker.cluster.as_ref() else { return };
    cluster.view.start_draining();
    info!(broker = broker.config.node_id, led = broker.topics.led().len(), "draining: asking the controller to move partitions away");
    let deadline = Instant::now() + cluster.link.drain_timeout;
    while Instant::now() < deadline && !broker.topics.led().is_empty() {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let left = broker.topics.led();
    if left.is_empty() {
        info!(broker = broker.config.node_id, "drained: every partition moved away");
    } else {
        warn!(broker = broker.config.node_id, remaining = left.len(), "drain timed out; relinquishing the rest");
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::collections::BTreeMap;
    use std::sync::Arc;

    use super::follow_round;
    use crate::api::leadership_tests::placed;
    use crate::broker::Broker;
    use crate::config::BrokerConfig;
    use crate::control_plane::FixedControlPlane;
    use crate::topics::NewTopic;

    /// A round says it applied a new assignment only once the assignment's take-overs have run
    /// (the follower then has the heartbeat report at once), and only for a new one.
    #[test]
    fn a_round_says_it_applied_a_new_assignment_once_its_take_overs_have_run() {
        let tmp = tempfile::tempdir().unwrap();
        let control = Arc::new(FixedControlPlane::default());
        let broker = Broker::open(BrokerConfig::cluster_for_tests(tmp.path(), control.clone())).unwrap();
        let topic = broker.topics.create(NewTopic { name: "t".into(), partitions: 1, configs: BTreeMap::new() }).unwrap();
        control.acknowledged_now();
        assert!(!follow_round(&broker).unwrap(), "no assignment on the volume yet");
        kaas_shared::assignment::write(&**broker.engine.fs(), broker.engine.layout(), &placed(topic.id, 0, 1, 1)).unwrap();
        assert!(follow_round(&broker).unwrap(), "the new assignment applied");
        assert!(broker.topics.partition("t", 0).unwrap().is_leader(), "its take-over ran before the round said so");
        assert!(!follow_round(&broker).unwrap(), "the same assignment again is no news");
    }
}
