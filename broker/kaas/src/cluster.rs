//! The cluster runtime (seed 003): the controller role, the heartbeat server and client, the
//! broker's registration on the volume, and the tasks that tie them to a broker. Every broker
//! runs all of it; the Lease decides which one acts as controller. The broker sees this only
//! through `kaas_broker::control_plane::ControlPlane`, which [`Runtime`] implements, so
//! `kaas-broker` and `kaas-controller` know nothing of each other.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use kaas_broker::catalog::TopicCatalog;
use kaas_broker::config::ClusterLink;
use kaas_broker::control_plane::ControlPlane;
use kaas_broker::{Broker, Server};
use kaas_controller::balancer::ShardCounts;
use kaas_controller::controller::{Controller, ControllerConfig, LeaseView};
use kaas_controller::endpoints::ReadyBrokers;
use kaas_controller::heartbeat_client::{self, BeatSource, HeartbeatStatus};
use kaas_controller::heartbeat_server::{HeartbeatHub, Role};
use kaas_controller::lease::LeaseStore;
use kaas_controller::mirror::AssignmentMirror;
use kaas_controller::proto::{BrokerTotals, GroupSummary};
use kaas_controller::stats::{PartitionId, PartitionStats};
use kaas_controller::status::{Pacing, StatusPublisher, StatusSink};
use kaas_controller::topics::VolumeTopics;
use kaas_shared::brokers::{self, BrokerRegistration};
use kaas_shared::fs::FsRef;
use kaas_shared::layout::Layout;
use kaas_shared::names;
use prometheus_client::metrics::histogram::Histogram;
use tokio::sync::{Notify, watch};
use tokio::task::JoinSet;
use tracing::{info, warn};
use uuid::Uuid;

/// Partitions moved per step onto a broker that joined or came back. One broker takes a
/// couple of hundred partitions a second over on the e2e cluster's volume (docs/performance.md),
/// so a handed-back partition is unavailable for about a second at most.
pub const DEFAULT_LEADER_MOVES_PER_STEP: usize = 200;

/// Everything the cluster runtime of one broker is configured with.
#[derive(Debug, Clone)]
pub struct ClusterSettings {
    /// The pod name: the Lease holder identity. Ends in `-<broker id>` (the StatefulSet ordinal).
    pub identity: String,
    /// Where the heartbeat gRPC server binds.
    pub heartbeat_listen: SocketAddr,
    /// `host:port` other brokers dial for this broker's heartbeat server.
    pub heartbeat_advertise: String,
    /// Where the inter-broker Kafka listener binds (transaction markers and verification).
    pub interbroker_listen: SocketAddr,
    /// `host:port` other brokers dial for it; empty: the bound address, or the broker's
    /// advertised host at the bound port when bound to every address.
    pub interbroker_advertise: String,
    /// The `kaas-controller` Lease.
    pub lease: Arc<dyn LeaseStore>,
    pub lease_duration: Duration,
    pub renew_interval: Duration,
    /// `fence.timeout`: unacknowledged this long, a broker stops acknowledging writes.
    pub fence_timeout: Duration,
    /// `session.timeout`: silent this long, a broker's partitions are moved (> fence + margin).
    pub session_timeout: Duration,
    /// How long SIGTERM waits for the controller to move partitions away before relinquishing.
    pub drain_timeout: Duration,
    /// How many partitions move per step onto a broker that joined or came back.
    pub leader_moves_per_step: usize,
    /// The topics' source of truth (KafkaTopic resources); `None`: the volume is (brokers
    /// create topic directories themselves, as in-process clusters do).
    pub catalog: Option<Arc<dyn TopicCatalog>>,
    /// Where the controller mirrors each assignment for humans (KafkaClusterAssignments).
    pub mirror: Option<Arc<dyn AssignmentMirror>>,
    /// Which brokers Kubernetes sees serving (EndpointSlices); `None`: heartbeats alone.
    pub ready_brokers: Option<Arc<dyn ReadyBrokers>>,
    /// Where the controller publishes traffic, partitions led, groups and topic sizes
    /// (KafkaCluster and KafkaTopic status), and how often; `None`: nowhere.
    pub status_sink: Option<Arc<dyn StatusSink>>,
    pub status_pacing: Pacing,
    /// How often a broker reads the files the controller writes (ACLs, client quotas, group
    /// configs) and the KafkaUsers file again; the controller's push after each change of its
    /// own files makes those read at once.
    pub controller_files_refresh: Duration,
}

impl ClusterSettings {
    /// Settings for in-process clusters and tests: fast timings over the given Lease.
    pub fn for_tests(identity: &str, lease: Arc<dyn LeaseStore>) -> ClusterSettings {
        ClusterSettings {
            identity: identity.to_string(),
            heartbeat_listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            heartbeat_advertise: String::new(),
            interbroker_listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            interbroker_advertise: String::new(),
            lease,
            lease_duration: Duration::from_secs(3),
            renew_interval: Duration::from_millis(300),
            fence_timeout: Duration::from_secs(2),
            session_timeout: Duration::from_secs(4),
            drain_timeout: Duration::from_secs(10),
            leader_moves_per_step: DEFAULT_LEADER_MOVES_PER_STEP,
            catalog: None,
            mirror: None,
            ready_brokers: None,
            status_sink: None,
            status_pacing: Pacing { round: Duration::from_secs(1), topic_min_interval: Duration::ZERO, topic_writes_per_round: 1000 },
            controller_files_refresh: Duration::from_secs(1),
        }
    }

    /// The broker id the identity's ordinal names (`kaas-2` is broker 2).
    pub fn broker_id_of(identity: &str) -> Option<i32> {
        identity.rsplit_once('-').and_then(|(_, n)| n.parse().ok()).filter(|id: &i32| *id >= 0)
    }
}

/// One broker's cluster runtime: built before the broker (which gets [`Runtime::link`]),
/// started with it ([`Runtime::spawn`]).
#[derive(Debug)]
pub struct Runtime {
    settings: ClusterSettings,
    broker_id: i32,
    fs: FsRef,
    layout: Layout,
    controller: Arc<Controller>,
    hub: Arc<HeartbeatHub>,
    lease: watch::Receiver<LeaseView>,
    heartbeat: Arc<HeartbeatStatus>,
    /// This run of the broker: a restart registers a new one.
    incarnation: Uuid,
}

impl Runtime {
    /// The runtime of broker `broker_id` over the volume `fs` and `layout` (the one the broker
    /// opens: in the fault campaign, the same fault-injecting mount).
    pub fn new(settings: ClusterSettings, broker_id: i32, fs: FsRef, layout: Layout) -> Arc<Runtime> {
        let hub = HeartbeatHub::of_broker(broker_id);
        let config = ControllerConfig {
            identity: settings.identity.clone(),
            broker_id,
            lease_duration: settings.lease_duration,
            renew_interval: settings.renew_interval,
            session_timeout: settings.session_timeout,
            recompute_interval: Duration::from_secs(2),
            shards: ShardCounts { groups: kaas_coordinator::SHARD_COUNT, transactions: kaas_coordinator::SHARD_COUNT },
            leader_moves_per_step: settings.leader_moves_per_step,
            mirror: settings.mirror.clone(),
            ready_brokers: settings.ready_brokers.clone(),
        };
        let topics = Arc::new(match &settings.catalog {
            Some(catalog) => VolumeTopics::filtered_by(fs.clone(), layout.clone(), catalog.clone()),
            None => VolumeTopics::new(fs.clone(), layout.clone()),
        });
        let controller = Controller::new(config, fs.clone(), layout.clone(), settings.lease.clone(), topics, hub.clone());
        let lease = controller.lease_view();
        Arc::new(Runtime {
            settings,
            broker_id,
            fs,
            layout,
            controller,
            hub,
            lease,
            heartbeat: HeartbeatStatus::new(),
            incarnation: Uuid::new_v4(),
        })
    }

    /// The heartbeat hub: who beats this broker while it is controller.
    pub fn hub(&self) -> Arc<HeartbeatHub> {
        self.hub.clone()
    }

    /// What the broker is opened with in cluster mode.
    pub fn link(self: &Arc<Self>) -> ClusterLink {
        ClusterLink {
            control: self.clone(),
            fence_timeout: self.settings.fence_timeout,
            drain_timeout: self.settings.drain_timeout,
            catalog: self.settings.catalog.clone(),
        }
    }

    /// Starts every cluster task of `broker` (opened with [`Runtime::link`]); they stop when
    /// `stop` fires. A paused broker resumed starts them again.
    pub async fn spawn(self: &Arc<Self>, broker: Arc<Broker>, stop: watch::Receiver<bool>) -> anyhow::Result<JoinSet<()>> {
        let settings = &self.settings;
        let mut tasks = JoinSet::new();

        let listener = tokio::net::TcpListener::bind(settings.heartbeat_listen)
            .await
            .with_context(|| format!("binding the heartbeat listener {} (--heartbeat-listen)", settings.heartbeat_listen))?;
        let bound = listener.local_addr()?;
        let heartbeat_address =
            if settings.heartbeat_advertise.is_empty() { bound.to_string() } else { settings.heartbeat_advertise.clone() };
        // The broker opened the volume's inter-broker key (cluster mode always has one).
        let key = broker
            .interbroker
            .signer()
            .map(|s| s.key.clone())
            .ok_or_else(|| anyhow::anyhow!("the broker was not opened in cluster mode"))?;
        let service = self.hub.service(key.clone());
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

        // Bound before registering: the others call it as soon as an assignment lists it.
        let interbroker = tokio::net::TcpListener::bind(settings.interbroker_listen)
            .await
            .with_context(|| format!("binding the inter-broker listener {} (--interbroker-listen)", settings.interbroker_listen))?;
        let interbroker_address =
            interbroker_advertised(&settings.interbroker_advertise, interbroker.local_addr()?, &broker.config.advertise_host);
        let mut server_stop = stop.clone();
        tasks.spawn(Server::inter_broker(interbroker, broker.clone()).run(async move {
            let _ = server_stop.wait_for(|s| *s).await;
        }));

        let registration = BrokerRegistration {
            broker_id: self.broker_id,
            host: broker.config.advertise_host.clone(),
            port: broker.config.advertise_port,
            heartbeat: heartbeat_address.clone(),
            interbroker: Some(interbroker_address.clone()),
            incarnation: self.incarnation,
        };
        brokers::register(&*self.fs, &self.layout, &registration)?;
        info!(
            broker = self.broker_id,
            identity = %settings.identity,
            heartbeat = %heartbeat_address,
            interbroker = %interbroker_address,
            "registered on the volume"
        );

        tasks.spawn(self.controller.clone().run(stop.clone()));
        if let Some(sink) = &settings.status_sink {
            let publisher = StatusPublisher::new(self.hub.clone(), sink.clone(), settings.status_pacing, settings.session_timeout);
            tasks.spawn(publisher.run(stop.clone()));
        }

        let (address_tx, address_rx) = watch::channel(None);
        tasks.spawn(resolve_controller(self.lease.clone(), self.fs.clone(), self.layout.clone(), address_tx, stop.clone()));
        tasks.spawn(heartbeat_client::run(
            self.broker_id,
            key,
            self.incarnation.to_string(),
            Arc::new(Beats::new(broker.clone(), self.heartbeat.clone())),
            address_rx,
            self.heartbeat.clone(),
            stop.clone(),
        ));
        tasks.spawn(follow_controller_files(broker.clone(), self.heartbeat.clone(), settings.controller_files_refresh, stop.clone()));
        tasks.spawn(kaas_broker::cluster::follow_assignments(broker, stop));
        Ok(tasks)
    }
}

/// Serves the files the controller writes (the ACLs, client quotas and group configs) and the
/// KafkaUsers file: reads them every `interval`, and at once when the controller pushes that it
/// changed its files, until `stop`. A failed read keeps what was served before (logged).
async fn follow_controller_files(broker: Arc<Broker>, heartbeat: Arc<HeartbeatStatus>, interval: Duration, mut stop: watch::Receiver<bool>) {
    loop {
        let reader = broker.clone();
        let read = tokio::task::spawn_blocking(move || reader.refresh_controller_files());
        if let Err(e) = read.await.map_err(|e| e.to_string()).and_then(|r| r) {
            warn!(error = %e, "reading the ACLs, quotas or KafkaUsers failed; serving the ones read before");
        }
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            // A push during the read above left its permit: the file it announces is read next.
            _ = heartbeat.controller_files_changed.notified() => {}
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}

/// The address the other brokers dial for the inter-broker listener bound at `bound`.
fn interbroker_advertised(configured: &str, bound: SocketAddr, advertise_host: &str) -> String {
    if !configured.is_empty() {
        return configured.to_string();
    }
    if !bound.ip().is_unspecified() {
        return bound.to_string();
    }
    // Bound to every address: the one clients are told to use reaches it too.
    match advertise_host.parse::<std::net::IpAddr>() {
        Ok(ip) => SocketAddr::new(ip, bound.port()).to_string(),
        Err(_) => format!("{advertise_host}:{}", bound.port()),
    }
}

impl ControlPlane for Runtime {
    fn lease_epoch(&self) -> i64 {
        self.lease.borrow().epoch
    }
    fn since_last_ack(&self) -> Option<Duration> {
        self.heartbeat.since_last_ack()
    }
    fn assignment_changed(&self) -> &Notify {
        &self.heartbeat.assignment_changed
    }
    fn announced_assignment(&self) -> (i64, i64) {
        self.heartbeat.announced()
    }
    fn topics_changed(&self) {
        self.controller.recompute.notify_one();
    }
    fn report_now(&self) {
        self.heartbeat.beat_now.notify_one();
    }
    fn controller_files_written(&self) {
        self.hub.push_controller_files_changed();
    }
    fn remote_high_watermark(&self, topic: &str, partition: i32) -> Option<i64> {
        self.heartbeat.remote_partition(topic, partition).map(|s| s.high_watermark)
    }
    fn remote_lag_seconds(&self, topic: &str, partition: i32, committed: i64, now_ms: i64) -> Option<f64> {
        self.heartbeat.remote_lag_seconds(topic, partition, committed, now_ms)
    }
    fn is_controller(&self) -> bool {
        matches!(self.hub.role(), Role::Controller { .. })
    }
    fn alive_brokers(&self) -> usize {
        if self.is_controller() { self.hub.alive(self.settings.session_timeout).len() } else { 0 }
    }
    fn heartbeat_round_trip(&self) -> Histogram {
        self.heartbeat.round_trip.clone()
    }
    fn recompute_seconds(&self) -> Histogram {
        self.controller.recompute_seconds.clone()
    }
}

/// What the heartbeat tells the controller about this broker.
#[derive(Debug)]
struct Beats {
    broker: Arc<Broker>,
    heartbeat: Arc<HeartbeatStatus>,
    /// Group summaries read the groups' offsets: computed at most every
    /// [`GROUP_SUMMARY_INTERVAL`], the beats in between repeat them.
    groups: parking_lot::Mutex<Option<(Instant, GroupReport)>>,
}

/// The beat's group summaries and the count of all groups.
type GroupReport = (Vec<GroupSummary>, u32);

/// How often the beat's group summaries are recomputed.
const GROUP_SUMMARY_INTERVAL: Duration = Duration::from_secs(5);

/// Groups in the heartbeat: at most this many, largest lag first.
const MAX_GROUP_SUMMARIES: usize = 50;

impl Beats {
    fn new(broker: Arc<Broker>, heartbeat: Arc<HeartbeatStatus>) -> Beats {
        Beats { broker, heartbeat, groups: parking_lot::Mutex::new(None) }
    }
}

impl BeatSource for Beats {
    fn totals(&self) -> BrokerTotals {
        let (bytes_in, bytes_out, messages_in) = self.broker.metrics.totals();
        BrokerTotals { bytes_in, bytes_out, messages_in }
    }
    fn partition_stats(&self) -> BTreeMap<PartitionId, PartitionStats> {
        let led = kaas_broker::lag::led(&self.broker);
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
        let live: std::collections::HashSet<String> = self.broker.topics.list().into_iter().map(|t| t.name.clone()).collect();
        self.heartbeat.retain_remote(|topic| live.contains(topic));
        let summaries = group_summaries(&self.broker);
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

/// The heartbeat's group summaries: the [`MAX_GROUP_SUMMARIES`] groups with the largest lag, and
/// how many groups there are.
fn group_summaries(broker: &Broker) -> GroupReport {
    let groups = kaas_broker::lag::groups(broker, &kaas_broker::lag::led(broker), false);
    let count = u32::try_from(groups.len()).unwrap_or(u32::MAX);
    let mut out: Vec<GroupSummary> = groups
        .iter()
        .map(|g| GroupSummary {
            group_id: g.group.group_id.clone(),
            state: g.group.state.to_string(),
            group_type: g.group.group_type.to_string(),
            protocol_type: g.group.protocol_type.clone(),
            members: u32::try_from(g.group.members).unwrap_or(u32::MAX),
            lag: g.total(),
        })
        .collect();
    out.sort_by(|a, b| b.lag.cmp(&a.lag).then_with(|| a.group_id.cmp(&b.group_id)));
    out.truncate(MAX_GROUP_SUMMARIES);
    (out, count)
}

/// Keeps `address` at the heartbeat endpoint of the broker holding the Lease.
async fn resolve_controller(
    mut lease: watch::Receiver<LeaseView>,
    fs: FsRef,
    layout: Layout,
    address: watch::Sender<Option<String>>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let holder = lease.borrow_and_update().holder.clone();
        let resolved = holder
            .as_deref()
            .and_then(ClusterSettings::broker_id_of)
            .and_then(|id| brokers::list(&*fs, &layout).ok()?.into_iter().find(|r| r.broker_id == id).map(|r| r.heartbeat));
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

#[cfg(test)]
mod tests {
    use super::interbroker_advertised;

    #[test]
    fn the_inter_broker_address_is_one_peers_can_dial() {
        let bound = |s: &str| s.parse().unwrap_or_else(|e| panic!("{s}: {e}"));
        // Configured: as given.
        assert_eq!(interbroker_advertised("kc-0.kc-brokers:9091", bound("0.0.0.0:9091"), "h"), "kc-0.kc-brokers:9091");
        // Bound to one address (the operator binds the pod IP): that address.
        assert_eq!(interbroker_advertised("", bound("10.0.0.5:9091"), "kc-0.kc-brokers.ns.svc"), "10.0.0.5:9091");
        assert_eq!(interbroker_advertised("", bound("[fd00::5]:9091"), "x"), "[fd00::5]:9091");
        // Bound to every address: the advertised host, at the bound port.
        assert_eq!(interbroker_advertised("", bound("0.0.0.0:9091"), "kc-0.kc-brokers.ns.svc"), "kc-0.kc-brokers.ns.svc:9091");
        assert_eq!(interbroker_advertised("", bound("[::]:9091"), "fd00::7"), "[fd00::7]:9091");
    }
}
