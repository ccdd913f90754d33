//! The broker side of the heartbeat: find the controller, keep a stream open, beat every
//! second, remember when the controller last acknowledged (for fencing) and relay its
//! ASSIGNMENT_CHANGED pushes.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use kaas_shared::interbroker_key::InterBrokerKey;
use parking_lot::Mutex;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use tokio::sync::{Notify, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Endpoint;
use tracing::{debug, info, warn};

use crate::proto::heartbeat_client::HeartbeatClient;
use crate::proto::{Ack, AssignmentChanged, BrokerBeat, BrokerTotals, GroupSummary, controller_message};
use crate::stats::{self, DeltaSender, MAX_PARTITION_STATS, PartitionId, PartitionStats, RemotePartition};

/// How often a broker beats.
pub const BEAT_INTERVAL: Duration = Duration::from_secs(1);

/// Beats remembered until acknowledged; an older beat's acknowledgement is ignored. A stream
/// holds a few (its channel's four and what is on the wire); a beat a minute old gives no
/// freshness anyway.
const MAX_BEATS_IN_FLIGHT: usize = 64;

/// What the broker tells the controller in every beat.
pub trait BeatSource: Send + Sync + std::fmt::Debug {
    fn partitions_led(&self) -> Vec<String>;
    fn assignment_version(&self) -> i64;
    fn draining(&self) -> bool;
    /// Traffic counters since the broker started.
    fn totals(&self) -> BrokerTotals {
        BrokerTotals::default()
    }
    /// Log ends and sizes of the partitions this broker leads. May block (partition locks):
    /// asked on a blocking thread, off the beat ([`refresh_reports`]).
    fn partition_stats(&self) -> BTreeMap<PartitionId, PartitionStats> {
        BTreeMap::new()
    }
    /// The groups this broker coordinates, largest lag first and at most a bounded number, and
    /// how many there are in all (the source may compute them less often than every beat). May
    /// block, as `partition_stats`.
    fn groups(&self) -> (Vec<GroupSummary>, u32) {
        (Vec::new(), 0)
    }
}

/// What the heartbeat learned, for the rest of the broker.
#[derive(Debug)]
pub struct HeartbeatStatus {
    /// When the newest beat the controller acknowledged was *sent* (not when its
    /// acknowledgement arrived): see [`HeartbeatStatus::acknowledged`].
    last_ack: Mutex<Option<Instant>>,
    /// Beats sent and not yet acknowledged, oldest first: sequence number and when sent.
    in_flight: Mutex<VecDeque<(u64, Instant)>>,
    /// Woken on every ASSIGNMENT_CHANGED push.
    pub assignment_changed: Notify,
    /// (controller epoch, assignment version) of the newest ASSIGNMENT_CHANGED push.
    announced: Mutex<(i64, i64)>,
    /// Woken on every CONTROLLER_FILES_CHANGED push.
    pub controller_files_changed: Notify,
    /// Woken when the broker has news the controller waits for (it applied a new assignment and
    /// ran its take-overs): the next beat goes at once instead of at the next tick, so a
    /// controller handing out partitions in steps sees this step led and gives the next without
    /// waiting up to a beat interval.
    pub beat_now: Notify,
    /// How often beats go without news ([`BEAT_INTERVAL`]; tests set it).
    beat_interval: Duration,
    /// Beat to acknowledgement, for `/metrics`.
    pub round_trip: Histogram,
    /// What the controller handed back of partitions other brokers lead, as of their leaders'
    /// last beats: a group coordinator's lag for partitions it does not lead.
    remote: Mutex<HashMap<PartitionId, RemotePartition>>,
}

impl HeartbeatStatus {
    pub fn new() -> Arc<HeartbeatStatus> {
        Self::beating_every(BEAT_INTERVAL)
    }

    /// A status whose beats go every `beat_interval` (tests: an interval longer than the test
    /// shows what goes without a tick).
    pub(crate) fn beating_every(beat_interval: Duration) -> Arc<HeartbeatStatus> {
        Arc::new(HeartbeatStatus {
            last_ack: Mutex::new(None),
            in_flight: Mutex::new(VecDeque::new()),
            assignment_changed: Notify::new(),
            announced: Mutex::new((0, 0)),
            controller_files_changed: Notify::new(),
            beat_now: Notify::new(),
            beat_interval,
            // 100 µs to ~3 s.
            round_trip: Histogram::new(exponential_buckets(0.0001, 2.0, 15)),
            remote: Mutex::new(HashMap::new()),
        })
    }

    /// The high watermark (and log end and size) of a partition another broker leads, as the
    /// controller last handed it back; `None` if it did not.
    pub fn remote_partition(&self, topic: &str, partition: i32) -> Option<PartitionStats> {
        self.remote.lock().get(&(topic.to_string(), partition)).map(|r| r.stats)
    }

    /// The lag in time of `committed` on a partition another broker leads, estimated from when
    /// its high watermarks were handed back (see [`RemotePartition`]); `None` if none were.
    pub fn remote_lag_seconds(&self, topic: &str, partition: i32, committed: i64, now_ms: i64) -> Option<f64> {
        self.remote.lock().get(&(topic.to_string(), partition)).map(|r| r.lag_seconds(committed, now_ms))
    }

    /// Forgets handed-back partitions of topics `keep` says no longer exist.
    pub fn retain_remote(&self, keep: impl Fn(&str) -> bool) {
        self.remote.lock().retain(|(topic, _), _| keep(topic));
    }

    /// Takes in the partition statistics of an acknowledgement; the first of a stream carries
    /// everything the (possibly new) controller knows, so it replaces what came before.
    fn handed_back(&self, ack: &Ack, first_of_stream: bool) {
        let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64);
        let received: Vec<(PartitionId, PartitionStats)> = stats::decode(&ack.partition_stats).collect();
        let mut remote = self.remote.lock();
        if first_of_stream {
            // Partitions the (possibly new) controller no longer knows of are gone; the others
            // keep their history.
            let known: std::collections::HashSet<&PartitionId> = received.iter().map(|(id, _)| id).collect();
            remote.retain(|id, _| known.contains(id));
        }
        for (id, stats) in received {
            remote.entry(id).or_default().observe(stats, now_ms);
        }
    }

    pub(crate) fn sent(&self, seq: u64) {
        let mut in_flight = self.in_flight.lock();
        if in_flight.len() >= MAX_BEATS_IN_FLIGHT {
            in_flight.pop_front();
        }
        in_flight.push_back((seq, Instant::now()));
    }

    /// The controller acknowledged beat `seq`. The broker counts its fence from when that beat
    /// was sent: the controller received it later, and counts the broker's session from then,
    /// so the broker stops acknowledging writes a margin before the controller may move its
    /// partitions however late the acknowledgement arrives — from a controller resumed after a
    /// pause, which answers what queued meanwhile, or over a slow network. Counting from the
    /// arrival would let a late acknowledgement stretch the broker's fence past the session.
    /// An acknowledgement of a beat no longer tracked (too old) changes nothing.
    ///
    /// On the controller's own broker the acknowledgement also names a wall-clock time derived
    /// from the controller's last Lease renewal (`own_fresh_as_of_unix_micros`, 0 elsewhere),
    /// and the fence counts from that when it is earlier: see `HeartbeatHub::renewed`. The
    /// instant is worked out from the wall clock's age of that time when the acknowledgement is
    /// taken in, so a late acknowledgement cannot stretch it either.
    pub(crate) fn acknowledged(&self, seq: u64, own_fresh_as_of_unix_micros: i64) {
        let sent_at = {
            let mut in_flight = self.in_flight.lock();
            while in_flight.front().is_some_and(|(s, _)| *s < seq) {
                in_flight.pop_front();
            }
            match in_flight.front() {
                Some(&(s, at)) if s == seq => {
                    in_flight.pop_front();
                    Some(at)
                }
                _ => None,
            }
        };
        let Some(sent_at) = sent_at else { return };
        self.round_trip.observe(sent_at.elapsed().as_secs_f64());
        let fresh_from = match u64::try_from(own_fresh_as_of_unix_micros) {
            Ok(micros) if micros > 0 => {
                let as_of = SystemTime::UNIX_EPOCH + Duration::from_micros(micros);
                // A time still ahead (as it is while the renewals keep up) leaves the beat's
                // own freshness.
                let age = SystemTime::now().duration_since(as_of).unwrap_or(Duration::ZERO);
                // NB: older than this process's clock can tell: no freshness at all.
                let Some(as_of) = Instant::now().checked_sub(age) else { return };
                as_of.min(sent_at)
            }
            _ => sent_at,
        };
        let mut last = self.last_ack.lock();
        if last.is_none_or(|t| t < fresh_from) {
            *last = Some(fresh_from);
        }
    }

    /// Whether the controller has not acknowledged a beat for longer than `fence_timeout`.
    /// A fenced broker acknowledges no writes: the controller may already be moving its
    /// partitions (it waits `session.timeout` > `fence.timeout` + margin before it does).
    pub fn fenced(&self, fence_timeout: Duration) -> bool {
        self.last_ack.lock().is_none_or(|t| t.elapsed() > fence_timeout)
    }

    /// Time since the newest acknowledged beat was sent (fencing, metrics, logs).
    pub fn since_last_ack(&self) -> Option<Duration> {
        self.last_ack.lock().map(|t| t.elapsed())
    }

    /// The controller wrote a new assignment: remembered (the newest by controller epoch, then
    /// version) and the assignment follower woken.
    pub fn announce(&self, changed: &AssignmentChanged) {
        {
            let mut announced = self.announced.lock();
            *announced = (*announced).max((changed.controller_epoch, changed.assignment_version));
        }
        self.assignment_changed.notify_one();
    }

    /// (controller epoch, assignment version) of the newest assignment the controller announced;
    /// (0, 0) before the first.
    pub fn announced(&self) -> (i64, i64) {
        *self.announced.lock()
    }
}

/// Keeps beating the controller at the address `controller` names until `stop` fires, with the
/// partition and group reports `source` gives, refreshed beside the beats.
pub async fn run(
    broker_id: i32,
    key: InterBrokerKey,
    incarnation: String,
    source: Arc<dyn BeatSource>,
    controller: watch::Receiver<Option<String>>,
    status: Arc<HeartbeatStatus>,
    stop: watch::Receiver<bool>,
) {
    let (reports_tx, reports) = watch::channel(Arc::new(Reports::default()));
    let me = Beater { broker_id, key: &key, incarnation: &incarnation, source: &*source, reports, status: &status };
    // One task: the refresh ends with the beats (it never returns on its own).
    tokio::select! {
        _ = refresh_reports(source.clone(), reports_tx, status.beat_interval) => {}
        _ = beat_sessions(&me, controller, stop) => {}
    }
}

/// What every stream of one [`run`] beats with.
struct Beater<'a> {
    broker_id: i32,
    key: &'a InterBrokerKey,
    incarnation: &'a str,
    source: &'a dyn BeatSource,
    reports: watch::Receiver<Arc<Reports>>,
    status: &'a HeartbeatStatus,
}

/// What the beats report of partitions and groups, as of the last [`refresh_reports`].
#[derive(Debug, Default)]
struct Reports {
    partitions: BTreeMap<PartitionId, PartitionStats>,
    groups: (Vec<GroupSummary>, u32),
}

/// Keeps `reports` at what `source` says of its partitions and groups, once a beat `interval`.
/// Those answers take partition and group locks, which volume I/O holds for as long as the volume
/// takes (a take-over's fsyncs under its partition's lock): asked on a blocking thread, off the
/// beat, a slow volume delays the statistics and never the beat that the broker's session and
/// fence hang on. (Built on the beat, a broker taking over thousands of partitions on a slow
/// volume stopped beating for longer than its session, lost it, and the cluster flapped.)
async fn refresh_reports(source: Arc<dyn BeatSource>, reports: watch::Sender<Arc<Reports>>, interval: Duration) {
    loop {
        let asked = source.clone();
        match tokio::task::spawn_blocking(move || Reports { partitions: asked.partition_stats(), groups: asked.groups() }).await {
            Ok(fresh) => {
                reports.send_replace(Arc::new(fresh));
            }
            Err(e) => warn!(error = %e, "computing the heartbeat's partition and group reports failed; keeping the last ones"),
        }
        tokio::time::sleep(interval).await;
    }
}

/// The beats of [`run`]: one stream after another, to whichever broker holds the Lease.
async fn beat_sessions(me: &Beater<'_>, mut controller: watch::Receiver<Option<String>>, mut stop: watch::Receiver<bool>) {
    let broker_id = me.broker_id;
    let mut seq = 0u64;
    loop {
        if *stop.borrow() {
            return;
        }
        let target = controller.borrow_and_update().clone();
        let Some(address) = target else {
            tokio::select! {
                _ = controller.changed() => continue,
                _ = stop.changed() => return,
            }
        };
        let session = beat_session(me, &address, &mut seq);
        tokio::select! {
            result = session => {
                if let Err(e) = result {
                    debug!(broker = broker_id, controller = %address, error = %e, "heartbeat stream ended");
                }
                // Reconnect soon, to the same or a new controller.
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(200)) => {}
                    _ = stop.changed() => return,
                }
            }
            _ = controller.changed() => info!(broker = broker_id, "controller moved; reconnecting"),
            _ = stop.changed() => return,
        }
    }
}

async fn beat_session(me: &Beater<'_>, address: &str, seq: &mut u64) -> crate::Result<()> {
    let Beater { broker_id, key, incarnation, source, reports, status } = me;
    let broker_id = *broker_id;
    let channel = Endpoint::from_shared(format!("http://{address}"))?
        .connect_timeout(Duration::from_secs(1))
        .tcp_nodelay(true)
        .connect()
        .await?;
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let mut request = tonic::Request::new(ReceiverStream::new(rx));
    // A fresh token per stream: it proves this broker to the controller (heartbeat_server).
    let token = key.token(crate::heartbeat_server::TOKEN_PURPOSE, broker_id, &[]);
    request.metadata_mut().insert(
        crate::heartbeat_server::TOKEN_METADATA,
        token.parse().map_err(|_| tonic::Status::internal("a heartbeat token that is not ASCII"))?,
    );
    let mut inbound = HeartbeatClient::new(channel).stream(request).await?.into_inner();
    let mut tick = tokio::time::interval(status.beat_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // What this stream has told the controller: beats carry only what changed.
    let mut reported = DeltaSender::default();
    let mut groups_sent: Option<(Vec<GroupSummary>, u32)> = None;
    let mut acknowledged_any = false;
    loop {
        let beat_due = tokio::select! {
            _ = tick.tick() => true,
            _ = status.beat_now.notified() => {
                // The next tick a whole interval after this beat.
                tick.reset();
                true
            }
            message = inbound.message() => match message? {
                None => return Ok(()),
                Some(m) => {
                    match m.kind {
                        Some(controller_message::Kind::Ack(ack)) => {
                            status.handed_back(&ack, !acknowledged_any);
                            acknowledged_any = true;
                            status.acknowledged(ack.seq, ack.own_fresh_as_of_unix_micros);
                        }
                        Some(controller_message::Kind::AssignmentChanged(changed)) => status.announce(&changed),
                        Some(controller_message::Kind::ControllerFilesChanged(_)) => status.controller_files_changed.notify_one(),
                        None => {}
                    }
                    false
                }
            },
        };
        if !beat_due {
            continue;
        }
        *seq += 1;
        let current = reports.borrow().clone();
        let groups = current.groups.clone();
        let groups_changed = groups_sent.as_ref() != Some(&groups);
        let beat = BrokerBeat {
            broker_id,
            incarnation: incarnation.to_string(),
            draining: source.draining(),
            partitions_led: source.partitions_led(),
            seq: *seq,
            assignment_version: source.assignment_version(),
            totals: Some(source.totals()),
            partition_stats: reported.changes(&current.partitions, MAX_PARTITION_STATS),
            groups: if groups_changed { groups.0.clone() } else { Vec::new() },
            groups_reported: groups_changed,
            group_count: groups.1,
        };
        groups_sent = Some(groups);
        status.sent(*seq);
        if tx.send(beat).await.is_err() {
            return Ok(());
        }
    }
}
