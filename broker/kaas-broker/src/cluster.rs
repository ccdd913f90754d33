//! Cluster mode (seed 003): the controller role, the heartbeat server and client, and the loop
//! that follows assignment.json and drives take-overs. Every broker runs all of it; the Lease
//! decides which one acts as controller.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kaas_controller::controller::{Controller, ControllerConfig, LeaseView};
use kaas_controller::heartbeat_client::{self, BeatSource, HeartbeatStatus};
use kaas_controller::heartbeat_server::HeartbeatHub;
use kaas_controller::proto::{BrokerTotals, GroupSummary};
use kaas_controller::stats::{PartitionId, PartitionStats};
use kaas_controller::status::StatusPublisher;
use kaas_controller::topics::VolumeTopics;
use kaas_shared::brokers::{self, BrokerRegistration};
use kaas_shared::{assignment, names};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tracing::{info, warn};
use uuid::Uuid;

use crate::broker::Broker;
use crate::config::ClusterSettings;
use crate::assignment_view::{AssignmentView, Rejected};
use crate::error::Result;
use crate::takeover_driver;

/// The cluster parts of a broker.
#[derive(Debug)]
pub struct Cluster {
    pub settings: ClusterSettings,
    pub view: AssignmentView,
    pub controller: Arc<Controller>,
    pub hub: Arc<HeartbeatHub>,
    pub incarnation: Uuid,
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
    /// Builds the cluster parts over the broker's volume.
    pub fn new(settings: ClusterSettings, broker_id: i32, fs: kaas_shared::fs::FsRef, layout: kaas_shared::layout::Layout) -> Cluster {
        let hub = HeartbeatHub::new();
        let config = ControllerConfig {
            identity: settings.identity.clone(),
            broker_id,
            lease_duration: settings.lease_duration,
            renew_interval: settings.renew_interval,
            session_timeout: settings.session_timeout,
            recompute_interval: Duration::from_secs(2),
            shards: kaas_controller::balancer::ShardCounts { groups: kaas_coordinator::SHARD_COUNT, transactions: kaas_coordinator::SHARD_COUNT },
            mirror: settings.mirror.clone(),
            ready_brokers: settings.ready_brokers.clone(),
        };
        let topics = Arc::new(match &settings.catalog {
            Some(catalog) => VolumeTopics::filtered_by(fs.clone(), layout.clone(), catalog.clone()),
            None => VolumeTopics::new(fs.clone(), layout.clone()),
        });
        let controller = Controller::new(config, fs, layout, settings.lease.clone(), topics, hub.clone());
        let view = AssignmentView::new(broker_id, controller.lease_view(), HeartbeatStatus::new(), settings.fence_timeout);
        Cluster { settings, view, controller, hub, incarnation: Uuid::new_v4(), takeover_durations: Default::default(), runtime_metrics: Default::default() }
    }
}

/// What the heartbeat tells the controller about this broker.
#[derive(Debug)]
struct Beats {
    broker: Arc<Broker>,
    /// Group summaries read the groups' offsets: computed at most every
    /// [`GROUP_SUMMARY_INTERVAL`], the beats in between repeat them.
    groups: parking_lot::Mutex<Option<(Instant, GroupReport)>>,
}

/// The beat's group summaries and the count of all groups.
type GroupReport = (Vec<GroupSummary>, u32);

/// How often the beat's group summaries are recomputed.
const GROUP_SUMMARY_INTERVAL: Duration = Duration::from_secs(5);

impl Beats {
    fn new(broker: Arc<Broker>) -> Beats {
        Beats { broker, groups: parking_lot::Mutex::new(None) }
    }
}

impl BeatSource for Beats {
    fn totals(&self) -> BrokerTotals {
        let (bytes_in, bytes_out, messages_in) = self.broker.metrics.totals();
        BrokerTotals { bytes_in, bytes_out, messages_in }
    }
    fn partition_stats(&self) -> BTreeMap<PartitionId, PartitionStats> {
        let led = crate::lag::led(&self.broker);
        let all = led.into_iter().flat_map(|(topic, partitions)| partitions.into_iter().map(move |(i, p)| ((topic.clone(), i), p)));
        all.map(|(id, p)| {
            (id, PartitionStats { log_end_offset: p.log_end_offset(), high_watermark: p.high_watermark(), size_bytes: p.size_bytes() })
        })
        .collect()
    }
    fn groups(&self) -> GroupReport {
        let mut cached = self.groups.lock();
        if let Some((at, summaries)) = cached.as_ref()
            && at.elapsed() < GROUP_SUMMARY_INTERVAL
        {
            return summaries.clone();
        }
        // Handed-back partitions of deleted topics are forgotten here too.
        if let Some(cluster) = &self.broker.cluster {
            let live: std::collections::HashSet<String> = self.broker.topics.list().into_iter().map(|t| t.name.clone()).collect();
            cluster.view.heartbeat.retain_remote(|topic| live.contains(topic));
        }
        let summaries = crate::lag::summaries(&self.broker);
        *cached = Some((Instant::now(), summaries.clone()));
        summaries
    }
    fn partitions_led(&self) -> Vec<String> {
        self.broker.topics.led().into_iter().map(|(topic, _, partition, _)| names::partition_key(&topic, partition)).collect()
    }
    fn assignment_version(&self) -> i64 {
        self.broker.cluster.as_ref().map_or(0, |c| c.view.current().assignment_version)
    }
    fn draining(&self) -> bool {
        self.broker.cluster.as_ref().is_some_and(|c| c.view.draining())
    }
}

/// Starts every cluster task of `broker`; they stop when `stop` fires.
pub async fn spawn(broker: Arc<Broker>, stop: watch::Receiver<bool>) -> Result<JoinSet<()>> {
    let Some(cluster) = broker.cluster.as_ref() else { return Ok(JoinSet::new()) };
    let settings = &cluster.settings;
    let mut tasks = JoinSet::new();

    let listener = tokio::net::TcpListener::bind(settings.heartbeat_listen).await?;
    let bound = listener.local_addr()?;
    let heartbeat_address =
        if settings.heartbeat_advertise.is_empty() { bound.to_string() } else { settings.heartbeat_advertise.clone() };
    let service = cluster.hub.service();
    let mut server_stop = stop.clone();
    tasks.spawn(async move {
        let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
        let result = tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming_shutdown(incoming, async move {
                let _ = server_stop.wait_for(|s| *s).await;
            })
            .await;
        if let Err(e) = result {
            warn!(error = %e, "heartbeat server stopped");
        }
    });

    let fs = broker.engine.fs().clone();
    let layout = broker.engine.layout().clone();
    let registration = BrokerRegistration {
        broker_id: broker.config.node_id,
        host: broker.config.advertise_host.clone(),
        port: broker.config.advertise_port,
        heartbeat: heartbeat_address.clone(),
        incarnation: cluster.incarnation,
    };
    brokers::register(&*fs, &layout, &registration)?;
    info!(broker = broker.config.node_id, identity = %settings.identity, heartbeat = %heartbeat_address, "registered on the volume");

    tasks.spawn(cluster.controller.clone().run(stop.clone()));
    if let Some(sink) = &settings.status_sink {
        let publisher = StatusPublisher::new(cluster.hub.clone(), sink.clone(), settings.status_pacing, settings.session_timeout);
        tasks.spawn(publisher.run(stop.clone()));
    }

    let (address_tx, address_rx) = watch::channel(None);
    tasks.spawn(resolve_controller(cluster.controller.lease_view(), fs.clone(), layout.clone(), address_tx, stop.clone()));
    tasks.spawn(heartbeat_client::run(
        broker.config.node_id,
        cluster.incarnation.to_string(),
        Arc::new(Beats::new(broker.clone())),
        address_rx,
        cluster.view.heartbeat.clone(),
        stop.clone(),
    ));
    tasks.spawn(follow_assignments(broker.clone(), stop));
    Ok(tasks)
}

/// Keeps `address` at the heartbeat endpoint of the broker holding the Lease.
async fn resolve_controller(
    mut lease: watch::Receiver<LeaseView>,
    fs: kaas_shared::fs::FsRef,
    layout: kaas_shared::layout::Layout,
    address: watch::Sender<Option<String>>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let holder = lease.borrow_and_update().holder.clone();
        let resolved = holder.as_deref().and_then(ClusterSettings::broker_id_of).and_then(|id| {
            brokers::list(&*fs, &layout).ok()?.into_iter().find(|r| r.broker_id == id).map(|r| r.heartbeat)
        });
        address.send_if_modified(|a| {
            let changed = *a != resolved;
            *a = resolved.clone();
            changed
        });
        // The registration may appear after the Lease changes hands: look again shortly.
        tokio::select! {
            _ = lease.changed() => {}
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = stop.changed() => return,
        }
    }
}

/// Follows assignment.json: on every push, every catalog event and every second, refresh
/// topics from the volume, apply a newer assignment, and converge leadership to it. A catalog
/// event also wakes the controller role (a topic created or deleted changes the placement).
async fn follow_assignments(broker: Arc<Broker>, mut stop: watch::Receiver<bool>) {
    let Some(cluster) = broker.cluster.as_ref() else { return };
    // NB: a broker that never had a beat acknowledged is fenced from its start; that is not a
    // fencing event. One that had (this task restarted after a pause) and is fenced now is.
    let mut was_fenced = cluster.view.heartbeat.since_last_ack().is_none();
    loop {
        let fenced = cluster.view.write_fenced();
        if fenced != was_fenced {
            let since_ack = cluster.view.heartbeat.since_last_ack();
            if fenced {
                cluster.runtime_metrics.fencing_events.inc();
                warn!(broker = broker.config.node_id, ?since_ack, fence_timeout = ?cluster.settings.fence_timeout, reason = "no heartbeat acknowledged within the fence timeout", "fenced: refusing writes");
            } else {
                info!(broker = broker.config.node_id, "unfenced: the controller acknowledges heartbeats again");
            }
        }
        was_fenced = fenced;
        let round = broker.clone();
        let outcome = tokio::task::spawn_blocking(move || follow_round(&round)).await;
        if let Ok(Err(e)) = outcome {
            warn!(error = %e, "following the assignment failed; retrying");
        }
        let topics_changed = async {
            match &cluster.settings.catalog {
                Some(catalog) => catalog.changed().notified().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = cluster.view.heartbeat.assignment_changed.notified() => {}
            _ = topics_changed => cluster.controller.recompute.notify_one(),
            _ = stop.changed() => return,
        }
    }
}

fn follow_round(broker: &Broker) -> Result<()> {
    let Some(cluster) = broker.cluster.as_ref() else { return Ok(()) };
    let started = Instant::now();
    let mut applied = false;
    let refreshed = match cluster.settings.catalog.as_ref().map(|c| c.live()) {
        None => broker.topics.refresh_from_volume(None),
        Some(Some(live)) => broker.topics.refresh_from_volume(Some(&live)),
        // Not synced yet: an empty list would look like every topic deleted.
        Some(None) => Ok(()),
    };
    if let Err(e) = refreshed {
        // The topics already open stay as they are; the assignment is still applied.
        warn!(error = %e, "cannot read the topics on the volume this round; retrying next round");
    }
    if let Some(candidate) = assignment::read(&**broker.engine.fs(), broker.engine.layout())? {
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
    takeover_driver::reconcile(&broker.topics, &current, broker.config.node_id, &cluster.takeover_durations);
    let (me, durations) = (broker.config.node_id, &cluster.takeover_durations);
    takeover_driver::reconcile_shards(&*broker.groups, &current.consumer_groups, &current, me, &durations.group_shards);
    takeover_driver::reconcile_shards(&broker.txns, &current.transactions, &current, me, &durations.transaction_shards);
    if applied {
        cluster.runtime_metrics.assignment_apply_seconds.observe(started.elapsed().as_secs_f64());
    }
    Ok(())
}

/// SIGTERM drain (seed 000): announce it on the heartbeat, wait (bounded) for the controller to
/// move this broker's partitions away, then relinquish whatever remains.
pub async fn drain(broker: &Broker) {
    let Some(cluster) = broker.cluster.as_ref() else { return };
    cluster.view.start_draining();
    info!(broker = broker.config.node_id, led = broker.topics.led().len(), "draining: asking the controller to move partitions away");
    let deadline = Instant::now() + cluster.settings.drain_timeout;
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
