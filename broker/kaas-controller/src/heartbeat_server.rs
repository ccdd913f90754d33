//! The controller side of the heartbeat: one bidirectional stream per broker.
//!
//! Every broker runs this server; only the current controller accepts streams (others answer
//! FAILED_PRECONDITION, so a broker that dialled a stale address finds out at once). The open
//! streams are the alive set; a stream ends when its broker goes away or this broker loses the
//! Lease, which makes the brokers look for the new controller.
//!
//! A stream is opened by a broker of the cluster only: its metadata carries a token of the
//! cluster's inter-broker key naming the broker ([`TOKEN_METADATA`]), and every beat on it must
//! be that broker's. Anything else reaching the port cannot join, drain or report for a broker.

use std::collections::{BTreeMap, HashSet};
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use futures::Stream;
use parking_lot::Mutex;
use tokio::sync::{Notify, broadcast, mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};
use tracing::{debug, info, warn};

use kaas_shared::interbroker_key::InterBrokerKey;

use crate::proto::heartbeat_server::{Heartbeat, HeartbeatServer};
use crate::proto::{Ack, AssignmentChanged, BrokerBeat, BrokerTotals, ControllerFilesChanged, ControllerMessage, GroupSummary, controller_message};
use crate::stats::{self, DeltaSender, MAX_PARTITION_STATS, PartitionId, PartitionStats};

/// The gRPC metadata key of a heartbeat stream's token.
pub const TOKEN_METADATA: &str = "kaas-interbroker-token";
/// What a heartbeat token is for (`InterBrokerKey::token`'s purpose; its payload is empty).
pub const TOKEN_PURPOSE: &str = "heartbeat";

/// Whether this broker is the controller, and at which epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Follower,
    Controller { epoch: i64 },
}

/// What the controller knows of one broker from its beats.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerSession {
    pub incarnation: String,
    pub draining: bool,
    pub last_beat: Instant,
    pub partitions_led: usize,
    pub assignment_version: i64,
}

/// What one broker's beats reported of its traffic, partitions and groups (the status views).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BrokerReport {
    /// Its traffic counters since it started.
    pub totals: BrokerTotals,
    /// The partitions it leads, as of its last beat that changed them.
    pub partitions: BTreeMap<PartitionId, PartitionStats>,
    /// Its coordinated groups, largest lag first (at most its beat's limit), and how many it has.
    pub groups: Vec<GroupSummary>,
    pub group_count: u32,
}

/// State shared by the heartbeat server and the controller loop.
#[derive(Debug)]
pub struct HeartbeatHub {
    role: watch::Sender<Role>,
    /// The controller's renew deadline: it acknowledges no beat after this instant (see
    /// [`HeartbeatHub::renewed`]). `None` while no controller loop set one (tests).
    acknowledge_until: Mutex<Option<tokio::time::Instant>>,
    /// The broker this hub's process runs, whose beats are acknowledged as of the last
    /// renewal (see [`HeartbeatHub::renewed`]); `None` in tests that run no broker.
    own_broker: Option<i32>,
    /// What the own broker's acknowledgements are fresh as of.
    own_fresh_as_of: Mutex<Option<SystemTime>>,
    sessions: Mutex<BTreeMap<i32, BrokerSession>>,
    /// Notified when a beat changes what its broker leads or has applied: a paced step of
    /// leader moves may then go on (the controller listens only while a step is pending).
    pub progress: Notify,
    reports: Mutex<BTreeMap<i32, BrokerReport>>,
    /// What the controller tells every connected broker without being asked.
    pushes: broadcast::Sender<controller_message::Kind>,
}

impl Default for HeartbeatHub {
    fn default() -> Self {
        HeartbeatHub {
            role: watch::Sender::new(Role::Follower),
            acknowledge_until: Mutex::new(None),
            own_broker: None,
            own_fresh_as_of: Mutex::new(None),
            sessions: Mutex::new(BTreeMap::new()),
            progress: Notify::new(),
            reports: Mutex::new(BTreeMap::new()),
            pushes: broadcast::channel(16).0,
        }
    }
}

impl HeartbeatHub {
    pub fn new() -> Arc<HeartbeatHub> {
        Arc::new(HeartbeatHub::default())
    }

    /// The hub of the process that runs broker `broker_id` (see [`HeartbeatHub::renewed`]).
    pub fn of_broker(broker_id: i32) -> Arc<HeartbeatHub> {
        Arc::new(HeartbeatHub { own_broker: Some(broker_id), ..HeartbeatHub::default() })
    }

    pub fn role(&self) -> Role {
        *self.role.borrow()
    }

    pub fn set_role(&self, role: Role) {
        self.role.send_if_modified(|r| {
            let changed = *r != role;
            *r = role;
            changed
        });
        if role == Role::Follower {
            *self.acknowledge_until.lock() = None;
            *self.own_fresh_as_of.lock() = None;
            self.sessions.lock().clear();
            self.reports.lock().clear();
        }
    }

    /// The controller renewed its Lease and may act until `deadline` (its renew deadline), when
    /// it steps down unless it renews again. Beats are acknowledged only until then, also by a
    /// controller resumed after a pause before its loop has stepped down: every acknowledgement
    /// a broker holds was sent before the deadline the Lease shows.
    ///
    /// `own_fresh_as_of` is a wall-clock time the Lease shows (the controller's
    /// `own_broker_fresh_as_of`: the renewTime written plus a fifth of the Lease duration). This
    /// process's own broker is told it with each acknowledgement and counts its fence from it
    /// (when earlier than its beat): the controller's own partitions are the ones a pause of the
    /// controller leaves without an owner, and this way the Lease alone tells the next
    /// controller when that broker is fenced, so it moves them a session timeout after that
    /// time instead of after the renew deadline (see `grace_after_winning`).
    pub fn renewed(&self, deadline: tokio::time::Instant, own_fresh_as_of: SystemTime) {
        *self.acknowledge_until.lock() = Some(deadline);
        *self.own_fresh_as_of.lock() = Some(own_fresh_as_of);
    }

    /// What an acknowledgement of `sender`'s beat says of the renewal it rests on: for this
    /// process's own broker, the time it is fresh as of; nothing (0) for the others.
    fn own_fresh_as_of_unix_micros(&self, sender: i32) -> i64 {
        if self.own_broker != Some(sender) {
            return 0;
        }
        let since_epoch = self.own_fresh_as_of.lock().and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok());
        // NB: at least 1 µs, so that an acknowledgement of the own broker never reads as "not
        // the own broker" (0) and loses its bound.
        since_epoch.map_or(1, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX).max(1))
    }

    /// Whether this broker is the controller at `epoch` and within its renew deadline.
    fn may_acknowledge(&self, epoch: i64) -> bool {
        self.role() == (Role::Controller { epoch })
            && self.acknowledge_until.lock().is_none_or(|until| tokio::time::Instant::now() < until)
    }

    /// What the brokers alive within `session_timeout` reported, by broker id.
    pub fn reports(&self, session_timeout: Duration) -> BTreeMap<i32, BrokerReport> {
        let alive = self.alive(session_timeout);
        self.reports.lock().iter().filter(|(id, _)| alive.contains_key(id)).map(|(id, r)| (*id, r.clone())).collect()
    }

    /// The partitions every broker but `broker_id` reported: what that broker is told back.
    fn reported_by_others(&self, broker_id: i32) -> BTreeMap<PartitionId, PartitionStats> {
        let reports = self.reports.lock();
        let others = reports.iter().filter(|(id, _)| **id != broker_id);
        others.flat_map(|(_, r)| r.partitions.iter().map(|(k, v)| (k.clone(), *v))).collect()
    }

    /// Merges what a beat reports. Partitions it no longer leads are dropped from its report,
    /// and a partition it now leads from every other broker's (a dead leader's last word would
    /// otherwise linger beside the new leader's).
    pub(crate) fn record_report(&self, beat: &BrokerBeat) {
        let led: HashSet<(&str, i32)> =
            beat.partitions_led.iter().filter_map(|key| kaas_shared::names::parse_partition_key(key).ok()).collect();
        let mut reports = self.reports.lock();
        let mut taken = Vec::new();
        let report = reports.entry(beat.broker_id).or_default();
        report.partitions.retain(|(topic, partition), _| led.contains(&(topic.as_str(), *partition)));
        if let Some(totals) = beat.totals {
            report.totals = totals;
        }
        for (id, stats) in stats::decode(&beat.partition_stats) {
            if led.contains(&(id.0.as_str(), id.1)) && report.partitions.insert(id.clone(), stats).is_none() {
                taken.push(id);
            }
        }
        if beat.groups_reported {
            // Bounded here too: the status shows no more than this of all brokers together.
            report.groups = beat.groups.iter().take(crate::status::MAX_GROUPS_SHOWN).cloned().collect();
        }
        report.group_count = beat.group_count;
        for (_, other) in reports.iter_mut().filter(|(id, _)| **id != beat.broker_id) {
            for id in &taken {
                other.partitions.remove(id);
            }
        }
    }

    /// Brokers whose last beat is younger than `session_timeout`, with what they said.
    pub fn alive(&self, session_timeout: Duration) -> BTreeMap<i32, BrokerSession> {
        self.sessions.lock().iter().filter(|(_, s)| s.last_beat.elapsed() < session_timeout).map(|(id, s)| (*id, s.clone())).collect()
    }

    /// When the next session ends (the soonest `last beat + session_timeout` still ahead), if
    /// any: the controller wakes then to move that broker's work, rather than at its next round.
    pub fn next_expiry(&self, session_timeout: Duration) -> Option<Instant> {
        let now = Instant::now();
        self.sessions.lock().values().map(|s| s.last_beat + session_timeout).filter(|at| *at > now).min()
    }

    /// Tells every connected broker that a new assignment.json is on the volume.
    pub fn push_assignment_changed(&self, controller_epoch: i64, assignment_version: i64) {
        let _ = self.pushes.send(controller_message::Kind::AssignmentChanged(AssignmentChanged { controller_epoch, assignment_version }));
    }

    /// Tells every connected broker that this controller changed the ACLs, client quotas or
    /// group configs on the volume (fsynced): they read them again now. Nothing while this
    /// broker is not the controller (its streams are closed).
    pub fn push_controller_files_changed(&self) {
        if let Role::Controller { epoch } = self.role() {
            let _ = self.pushes.send(controller_message::Kind::ControllerFilesChanged(ControllerFilesChanged { controller_epoch: epoch }));
        }
    }

    pub(crate) fn record(&self, beat: &BrokerBeat) {
        let session = BrokerSession {
            incarnation: beat.incarnation.clone(),
            draining: beat.draining,
            last_beat: Instant::now(),
            partitions_led: beat.partitions_led.len(),
            assignment_version: beat.assignment_version,
        };
        let previous = self.sessions.lock().insert(beat.broker_id, session);
        if previous.as_ref().is_none_or(|p| (p.partitions_led, p.assignment_version) != (beat.partitions_led.len(), beat.assignment_version)) {
            self.progress.notify_one();
        }
        match previous {
            None => info!(broker = beat.broker_id, incarnation = %beat.incarnation, "broker joined"),
            Some(p) if p.incarnation != beat.incarnation => {
                info!(broker = beat.broker_id, incarnation = %beat.incarnation, "broker restarted")
            }
            Some(p) if !p.draining && beat.draining => info!(broker = beat.broker_id, "broker is draining"),
            _ => {}
        }
    }

    /// The tonic service over this hub, taking streams from the holders of `key`.
    pub fn service(self: &Arc<Self>, key: InterBrokerKey) -> HeartbeatServer<HeartbeatService> {
        HeartbeatServer::new(HeartbeatService { hub: self.clone(), key, used: Mutex::default() })
    }
}

/// At most this many tokens are remembered as used (streams opened within a token's lifetime);
/// beyond it new streams wait (UNAVAILABLE, retried) until old tokens expire.
const MAX_USED_TOKENS: usize = 10_000;

/// The gRPC service.
#[derive(Debug)]
pub struct HeartbeatService {
    hub: Arc<HeartbeatHub>,
    key: InterBrokerKey,
    /// Tokens that opened a stream, and when: each opens one stream only, so a token seen on
    /// the network cannot open another (as the broker it names) while it is still valid.
    used: Mutex<BTreeMap<String, Instant>>,
}

impl HeartbeatService {
    /// Records `token` as used; false if it was, or if too many are remembered.
    fn first_use(&self, token: &str) -> Result<(), Status> {
        let mut used = self.used.lock();
        // Twice the lifetime: a token is valid that long either side of its time.
        used.retain(|_, at| at.elapsed() < 2 * kaas_shared::interbroker_key::TOKEN_LIFETIME);
        if used.contains_key(token) {
            return Err(Status::unauthenticated("inter-broker token already used"));
        }
        if used.len() >= MAX_USED_TOKENS {
            return Err(Status::unavailable("too many heartbeat streams opened lately; retry"));
        }
        used.insert(token.to_owned(), Instant::now());
        Ok(())
    }
}

type Outbound = Pin<Box<dyn Stream<Item = Result<ControllerMessage, Status>> + Send>>;

#[tonic::async_trait]
impl Heartbeat for HeartbeatService {
    type StreamStream = Outbound;

    async fn stream(&self, request: Request<Streaming<BrokerBeat>>) -> Result<Response<Outbound>, Status> {
        let token = request.metadata().get(TOKEN_METADATA).and_then(|v| v.to_str().ok()).unwrap_or_default();
        let sender = match self.key.verify(token, TOKEN_PURPOSE, &[]) {
            Ok(broker_id) => broker_id,
            Err(e) => {
                warn!(peer = ?request.remote_addr(), error = %e, "heartbeat stream refused");
                return Err(Status::unauthenticated(e.to_string()));
            }
        };
        let Role::Controller { epoch } = self.hub.role() else {
            return Err(Status::failed_precondition("this broker is not the controller"));
        };
        self.first_use(token)?;
        let mut inbound = request.into_inner();
        let (tx, rx) = mpsc::channel(16);
        let hub = self.hub.clone();
        let mut pushes = hub.pushes.subscribe();
        let mut role = hub.role.subscribe();
        tokio::spawn(async move {
            let mut handed_back = DeltaSender::default();
            loop {
                let message = tokio::select! {
                    beat = inbound.message() => match beat {
                        Ok(Some(beat)) if beat.broker_id != sender => {
                            warn!(sender, claimed = beat.broker_id, "a heartbeat for another broker; closing the stream");
                            break;
                        }
                        Ok(Some(_)) if !hub.may_acknowledge(epoch) => {
                            debug!(sender, "past the renew deadline; closing the stream unacknowledged");
                            break;
                        }
                        Ok(Some(beat)) => {
                            hub.record(&beat);
                            hub.record_report(&beat);
                            let partition_stats = handed_back.changes(&hub.reported_by_others(beat.broker_id), MAX_PARTITION_STATS);
                            let own_fresh_as_of_unix_micros = hub.own_fresh_as_of_unix_micros(sender);
                            controller_message::Kind::Ack(Ack { seq: beat.seq, controller_epoch: epoch, partition_stats, own_fresh_as_of_unix_micros })
                        }
                        Ok(None) | Err(_) => break,
                    },
                    push = pushes.recv() => match push {
                        Ok(push) => push,
                        Err(broadcast::error::RecvError::Lagged(_)) => continue,
                        Err(broadcast::error::RecvError::Closed) => break,
                    },
                    // Losing the Lease ends every stream: brokers go looking for the new controller.
                    _ = role.wait_for(|r| *r != Role::Controller { epoch }) => break,
                };
                if tx.send(Ok(ControllerMessage { kind: Some(message) })).await.is_err() {
                    break;
                }
            }
            debug!("heartbeat stream closed");
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}

#[cfg(test)]
mod tests;
