//! The controller loop: hold or follow the Lease; while holding it, recompute the placement on
//! every trigger (first win, topic change, broker join/leave/drain, a 2 s poll), write
//! assignment.json and push ASSIGNMENT_CHANGED.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

use kaas_shared::assignment::{self, Assignment, BrokerEndpoint};
use kaas_shared::brokers;
use kaas_shared::fs::FsRef;
use kaas_shared::layout::Layout;
use tokio::sync::{Notify, watch};
use tracing::{info, warn};

use crate::Result;
use crate::balancer::{self, Placement};
use crate::heartbeat_server::{BrokerSession, HeartbeatHub, Role};
use crate::lease::{LeaseAction, LeaseState, LeaseStore, decide};
use crate::readdress::Readdressing;
use crate::topics::TopicSource;

/// Timings and identity of one broker's controller loop.
#[derive(Debug, Clone)]
pub struct ControllerConfig {
    /// This broker's pod name: the Lease holder identity.
    pub identity: String,
    pub broker_id: i32,
    pub lease_duration: Duration,
    /// How often the Lease is renewed (or checked, by followers).
    pub renew_interval: Duration,
    /// A broker silent for this long is gone (`session.timeout`, > fence timeout + margin).
    pub session_timeout: Duration,
    /// Recompute at least this often while controller.
    pub recompute_interval: Duration,
    /// How many group and transaction shards to place.
    pub shards: crate::balancer::ShardCounts,
    /// At most this many partitions move per step between brokers that both keep leading
    /// (evening out onto a broker that joined or came back); the next step waits until every
    /// broker leads what it was given (see [`balancer::pace`]).
    pub leader_moves_per_step: usize,
    /// Where each written assignment is mirrored for humans (KafkaClusterAssignments).
    pub mirror: Option<Arc<dyn crate::mirror::AssignmentMirror>>,
    /// Which brokers' endpoints are serving (EndpointSlices); narrows the heartbeat alive set.
    pub ready_brokers: Option<Arc<dyn crate::endpoints::ReadyBrokers>>,
}

/// The Lease as this broker last saw it: who controls, at which epoch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaseView {
    pub holder: Option<String>,
    pub epoch: i64,
}

/// One broker's controller role.
#[derive(Debug)]
pub struct Controller {
    config: ControllerConfig,
    fs: FsRef,
    layout: Layout,
    lease: Arc<dyn LeaseStore>,
    topics: Arc<dyn TopicSource>,
    hub: Arc<HeartbeatHub>,
    view: watch::Sender<LeaseView>,
    /// Wakes the loop for an immediate recompute (topic created or deleted).
    pub recompute: Notify,
    /// How long each recompute took (read, balance, write), for `/metrics`.
    pub recompute_seconds: Histogram,
    /// Addresses published and brokers seen back at a new one: those hold no coordinator shard
    /// for [`READDRESS_HANDOFF`] after it (see `recompute`).
    readdressing: parking_lot::Mutex<Readdressing>,
    /// Until when, after winning the Lease, brokers of the previous assignment keep their work
    /// without having beaten this controller: a session timeout for all of them, and for the
    /// previous controller only until it is certainly fenced (see [`grace_after_winning`]).
    grace_until: parking_lot::Mutex<Option<Grace>>,
    /// assignment.json as this controller last read or wrote it: re-read only when the file's
    /// stamp says another write replaced it (a round reads it up to three times).
    on_volume: parking_lot::Mutex<Option<Arc<Assignment>>>,
    /// When the Lease another broker holds expires, as the last round saw it (followers only).
    lease_expires: parking_lot::Mutex<Option<SystemTime>>,
    /// When this controller last wrote an assignment that moved partitions (or first
    /// recomputed): the patience of a paced step counts from it.
    moved_at: parking_lot::Mutex<Option<Instant>>,
    /// Whether the last recompute held leader moves back for a later step: beats that show
    /// progress then wake the loop, so the next step follows the last one's take-overs.
    stepping: std::sync::atomic::AtomicBool,
}

/// A freshly elected controller's grace for the previous assignment's brokers.
#[derive(Debug, Clone, Copy)]
struct Grace {
    brokers_until: Instant,
    /// The broker that wrote the assignment on the volume when the Lease was won: the previous
    /// controller. Taken then, not from each round's assignment, which from the first write on
    /// names this controller.
    previous_controller: Option<i32>,
    previous_controller_until: Instant,
}

/// How long a broker back at a new address holds no coordinator shard. librdkafka keeps a
/// coordinator's address by broker id and looks it up again only when the coordinator's id
/// changes: a group whose coordinator came back elsewhere must be sent to another broker, and
/// long enough that its client asks FindCoordinator meanwhile (it retries within seconds of
/// a refused connection; one 2 s round was sometimes too short under load). When the shards
/// come back, the id changes again and the client takes the broker's current address.
const READDRESS_HANDOFF: Duration = Duration::from_secs(20);

/// How long a paced step of leader moves waits at most for every broker to lead what it was
/// given: a partition a broker cannot take over (a damaged directory, a volume error it keeps
/// retrying) must not hold the cluster's balance up for ever.
const LEADER_MOVES_PATIENCE: Duration = Duration::from_secs(30);

impl Controller {
    pub fn new(
        config: ControllerConfig,
        fs: FsRef,
        layout: Layout,
        lease: Arc<dyn LeaseStore>,
        topics: Arc<dyn TopicSource>,
        hub: Arc<HeartbeatHub>,
    ) -> Arc<Controller> {
        Arc::new(Controller {
            config,
            fs,
            layout,
            lease,
            topics,
            hub,
            view: watch::Sender::new(LeaseView::default()),
            recompute: Notify::new(),
            recompute_seconds: Histogram::new(exponential_buckets(0.0005, 2.0, 16)),
            readdressing: Default::default(),
            grace_until: Default::default(),
            on_volume: Default::default(),
            lease_expires: Default::default(),
            moved_at: Default::default(),
            stepping: Default::default(),
        })
    }

    /// The Lease as last seen; brokers fence stale assignments against its epoch.
    pub fn lease_view(&self) -> watch::Receiver<LeaseView> {
        self.view.subscribe()
    }

    /// Runs until `stop` fires; then releases the Lease if held (keeping its epoch).
    ///
    /// The Lease rounds run here and nothing else: a recompute reads and writes the volume, which
    /// through a loaded NFS mount can take seconds, and runs on a blocking thread of its own
    /// ([`Recomputes`]), so that a slow volume never delays a renewal past the renew deadline
    /// (the controller would step down, and every broker fence, for a slow disk).
    pub async fn run(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        // Whether the last round found this broker the controller: a first win recomputes at once.
        let mut controlling = false;
        let mut recomputes = Recomputes::default();
        // When this broker last renewed the Lease it holds (tokio's clock: tests pause it).
        let mut renewed_at: Option<tokio::time::Instant> = None;
        'rounds: loop {
            // client-go's renew-deadline rule: give the role up before the Lease can expire and
            // be taken, so two controllers never act at once. Heartbeats go unacknowledged from
            // then on, and this broker fences on schedule. The deadline counts from the last
            // renewal: a process paused past it steps down before it does anything else.
            if let (Role::Controller { epoch }, Some(at)) = (self.hub.role(), renewed_at)
                && at.elapsed() >= self.renew_deadline()
            {
                let reason = "the renew deadline passed since the last renewal (a pause, or rounds too slow)";
                self.step_down(epoch, reason);
                (renewed_at, controlling) = (None, false);
            }
            let round_started = tokio::time::Instant::now();
            // NB: an API server that hangs is as unreachable as one that fails, and a round
            // that starts after failed ones has only what is left of the renew deadline.
            let budget = match (self.hub.role(), renewed_at) {
                (Role::Controller { .. }, Some(at)) => self.renew_deadline().saturating_sub(at.elapsed()),
                _ => self.renew_deadline(),
            };
            let round = match tokio::time::timeout(budget, self.lease_round(round_started)).await {
                Ok(result) => result,
                Err(_) => Err(crate::Error::Lease(format!("no answer from the Lease store within {budget:?}"))),
            };
            match &round {
                Ok(Role::Controller { .. }) => renewed_at = Some(round_started),
                Ok(Role::Follower) => renewed_at = None,
                Err(_) => {
                    if let (Role::Controller { epoch }, Some(at)) = (self.hub.role(), renewed_at)
                        && at.elapsed() >= self.renew_deadline()
                    {
                        self.step_down(epoch, "cannot renew the controller lease");
                        (renewed_at, controlling) = (None, false);
                    }
                }
            }
            match round {
                Ok(Role::Controller { .. }) => {
                    let first = !std::mem::replace(&mut controlling, true);
                    // A round asks for a recompute if membership changed (checked on the
                    // recompute's thread: it reads the volume) or the poll interval passed.
                    recomputes.wanted(if first { Want::Now } else { Want::IfDue });
                }
                Ok(Role::Follower) => controlling = false,
                Err(e) => warn!(error = %e, "lease round failed; retrying"),
            }
            // Until the next round: a session or grace ending, or a topic change, is acted on at
            // once, under the renewal this round made, without a round of its own — every
            // KafkaTopic event (thousands while topics are created) would otherwise be a Lease
            // write to the API server. The renew deadline counts from that renewal as at the top
            // of a round, and the recompute checks the role again before it writes.
            let next_round = tokio::time::Instant::now() + self.round_wait();
            loop {
                match (self.hub.role(), renewed_at) {
                    (Role::Controller { epoch }, Some(at)) if controlling && at.elapsed() < self.renew_deadline() => {
                        recomputes.start_if_wanted(&self, epoch);
                    }
                    // Not the controller (a topic change is none of its business), or the
                    // renewal is too old to act on: the next round decides.
                    _ => recomputes.forget(),
                }
                let deadline = async {
                    match self.next_deadline().filter(|_| controlling) {
                        Some(at) => tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    _ = tokio::time::sleep_until(next_round) => break,
                    _ = deadline => recomputes.wanted(Want::Now),
                    _ = self.recompute.notified() => recomputes.wanted(Want::Now),
                    _ = self.hub.progress.notified(), if self.stepping.load(std::sync::atomic::Ordering::Relaxed) => recomputes.wanted(Want::Now),
                    _ = recomputes.finished() => {}
                    _ = stop.changed() => break 'rounds,
                }
            }
        }
        recomputes.finish().await;
        self.release().await;
    }

    /// Whether to recompute, on the recompute's thread: `Now`, or `IfDue` when the poll
    /// interval passed since the last one or a broker joined, left or started draining.
    fn recompute_if(&self, want: Want, last: Option<Instant>, epoch: i64) -> bool {
        let interval_passed = last.is_none_or(|at| at.elapsed() >= self.config.recompute_interval);
        let due = want == Want::Now || interval_passed || self.membership_changed();
        if due {
            let started = Instant::now();
            let grace = *self.grace_until.lock();
            if let Err(e) = self.recompute(epoch, grace) {
                warn!(epoch, error = %e, "recompute failed; retrying");
            }
            self.recompute_seconds.observe(started.elapsed().as_secs_f64());
        }
        due
    }

    /// The next moment a broker's work may move without anything happening: a session ending,
    /// or a grace after winning the Lease. The loop acts on it then instead of at its next round,
    /// so a silent broker's partitions move a session timeout after its last beat (or when the
    /// grace ends), not up to a round later.
    fn next_deadline(&self) -> Option<Instant> {
        let now = Instant::now();
        let graces = (*self.grace_until.lock()).map_or([None, None], |g| [Some(g.brokers_until), Some(g.previous_controller_until)]);
        let sessions = self.hub.next_expiry(self.config.session_timeout);
        graces.into_iter().flatten().filter(|at| *at > now).chain(sessions).min()
    }

    /// How long until the next round: the renew interval, or for a follower whose Lease holder's
    /// Lease expires before that, until just after it expires — a paused controller is then
    /// replaced as soon as its Lease allows, not up to a round later.
    fn round_wait(&self) -> Duration {
        // NB: `decide` takes a Lease whose expiry is strictly past.
        const PAST_EXPIRY: Duration = Duration::from_millis(10);
        let expires_in = self.lease_expires.lock().and_then(|at| at.duration_since(SystemTime::now()).ok());
        match expires_in {
            Some(left) if left + PAST_EXPIRY < self.config.renew_interval => left + PAST_EXPIRY,
            _ => self.config.renew_interval,
        }
    }

    /// Gives the controller role up (the Lease is left to expire or be taken).
    fn step_down(&self, epoch: i64, reason: &str) {
        warn!(epoch, deadline = ?self.renew_deadline(), reason, "stepping down as controller");
        self.hub.set_role(Role::Follower);
    }

    /// How long a controller may go without renewing the Lease before it steps down: two
    /// thirds of the Lease duration (client-go's 10 s of 15 s), so it has given the role up well
    /// before another broker may take the Lease over.
    fn renew_deadline(&self) -> Duration {
        self.config.lease_duration * 2 / 3
    }

    /// Reads the Lease, acts on it, and publishes the outcome. `started` is when the round
    /// began, before the Lease was read: a renewal counts from then.
    async fn lease_round(&self, started: tokio::time::Instant) -> Result<Role> {
        let current = self.lease.get().await?;
        let now = SystemTime::now();
        let holding = matches!(self.hub.role(), Role::Controller { .. });
        let mut action = decide(&self.config.identity, holding, now, current.as_ref().map(|l| &l.state), 0);
        // The volume is read only to take the Lease (a new epoch must be above every epoch on
        // it), never to renew it: a renewal must not wait for a slow mount.
        let mut on_volume = None;
        if matches!(action, LeaseAction::Acquire { .. }) {
            let (fs, layout) = (self.fs.clone(), self.layout.clone());
            on_volume = tokio::task::spawn_blocking(move || assignment::read_stamp(&*fs, &layout).ok().flatten()).await.ok().flatten();
            let floor = on_volume.map_or(0, |a| a.controller_epoch);
            action = decide(&self.config.identity, holding, now, current.as_ref().map(|l| &l.state), floor);
        }
        *self.lease_expires.lock() = match action {
            LeaseAction::Follow { .. } => current.as_ref().and_then(|l| l.state.renew_time.checked_add(l.state.duration)),
            _ => None,
        };
        let version = current.as_ref().map(|l| l.version.clone());
        let held_epoch = current.as_ref().map_or(0, |l| l.state.transitions);
        let role = match action {
            LeaseAction::Acquire { transitions } => {
                let state = self.held(now, transitions);
                if self.lease.put(state, version).await? {
                    let reason = match current.as_ref().and_then(|l| l.state.holder.as_deref()) {
                        Some(holder) if holder == self.config.identity => "held by an earlier incarnation of this pod",
                        Some(_) => "lease expired",
                        None => "lease free",
                    };
                    let grace = grace_after_winning(current.as_ref().map(|l| &l.state), self.config.session_timeout, now);
                    let now_instant = Instant::now();
                    *self.grace_until.lock() = Some(Grace {
                        brokers_until: now_instant + self.config.session_timeout,
                        previous_controller: on_volume.map(|a| a.controller_id),
                        previous_controller_until: now_instant + grace,
                    });
                    info!(epoch = transitions, identity = %self.config.identity, reason, ?grace, "won the controller lease");
                    Role::Controller { epoch: transitions }
                } else {
                    Role::Follower
                }
            }
            LeaseAction::Renew => {
                if self.lease.put(self.held(now, held_epoch), version).await? {
                    Role::Controller { epoch: held_epoch }
                } else {
                    warn!(epoch = held_epoch, reason = "renewal lost a write race", "lost the controller lease");
                    Role::Follower
                }
            }
            LeaseAction::Follow { .. } => Role::Follower,
        };
        if matches!(role, Role::Controller { .. }) {
            self.hub.renewed(started + self.renew_deadline(), own_broker_fresh_as_of(now, self.config.lease_duration));
        }
        let was = self.hub.role();
        if was != role && matches!(was, Role::Controller { .. }) {
            info!(?was, now = ?role, "no longer the controller");
        }
        self.hub.set_role(role);
        let view = match role {
            Role::Controller { epoch } => LeaseView { holder: Some(self.config.identity.clone()), epoch },
            Role::Follower => match self.lease.get().await? {
                Some(l) => LeaseView { holder: l.state.holder, epoch: l.state.transitions },
                None => LeaseView::default(),
            },
        };
        self.view.send_if_modified(|v| {
            let changed = *v != view;
            *v = view;
            changed
        });
        Ok(role)
    }

    fn held(&self, now: SystemTime, transitions: i64) -> LeaseState {
        LeaseState { holder: Some(self.config.identity.clone()), renew_time: now, duration: self.config.lease_duration, transitions }
    }

    /// assignment.json as it is on the volume now, read whole only if another write replaced
    /// the one this controller last saw; `None` before the first write.
    fn on_volume(&self) -> Result<Option<Arc<Assignment>>> {
        let known = self.on_volume.lock().clone();
        let current = match assignment::read_unless(&*self.fs, &self.layout, known.as_ref().map(|a| a.stamp()))? {
            assignment::Read::Absent => None,
            assignment::Read::Unchanged => known,
            assignment::Read::Changed(read) => Some(Arc::new(read)),
        };
        self.on_volume.lock().clone_from(&current);
        Ok(current)
    }

    /// Whether a broker joined, left or started draining since the assignment on disk.
    fn membership_changed(&self) -> bool {
        let Ok(Some(current)) = self.on_volume() else { return true };
        let alive = self.hub.alive(self.config.session_timeout);
        let eligible: BTreeSet<i32> = alive.iter().filter(|(_, s)| !s.draining).map(|(id, _)| *id).collect();
        let placed: BTreeSet<i32> = current.brokers.keys().copied().collect();
        eligible != placed
    }

    /// Computes the placement and writes it if anything changed.
    fn recompute(&self, epoch: i64, grace: Option<Grace>) -> Result<()> {
        let previous = self.on_volume()?.unwrap_or_default();
        let sessions = self.hub.alive(self.config.session_timeout);
        let registered: BTreeMap<i32, brokers::BrokerRegistration> =
            brokers::list(&*self.fs, &self.layout)?.into_iter().map(|r| (r.broker_id, r)).collect();
        let heartbeating: BTreeSet<i32> = sessions.keys().copied().filter(|id| registered.contains_key(id)).collect();
        let mut alive = crate::endpoints::narrow(heartbeating, self.config.ready_brokers.as_ref().and_then(|r| r.ready()));
        let now = Instant::now();
        if let Some(grace) = grace.filter(|g| now < g.brokers_until) {
            // A freshly elected controller has not heard from everyone yet: brokers of the
            // previous assignment that are still registered keep their work meanwhile — the
            // previous controller (the assignment's writer) only while it may be unfenced: it
            // is the one a pause that cost it the Lease left silent.
            let controller_in_grace = now < grace.previous_controller_until;
            alive.extend(
                previous
                    .brokers
                    .keys()
                    .filter(|id| registered.contains_key(id))
                    .filter(|id| Some(**id) != grace.previous_controller || controller_in_grace),
            );
        }
        let draining: BTreeSet<i32> = sessions.iter().filter(|(_, s)| s.draining).map(|(id, _)| *id).collect();
        let topics = self.topics.list()?;
        let before = Placement {
            partitions: previous.partitions.clone(),
            consumer_groups: previous.consumer_groups.clone(),
            transactions: previous.transactions.clone(),
        };
        let stored = crate::stored_epochs::VolumeEpochs { fs: &self.fs, layout: &self.layout };
        // Brokers that came back at another address than the one last published for them, and
        // those that did within the hand-off.
        let readdressed = {
            let mut book = self.readdressing.lock();
            book.published(&previous.brokers);
            let addresses = registered.iter().map(|(id, r)| (*id, r.endpoint())).collect();
            book.readdressed(&alive, &addresses, Instant::now(), READDRESS_HANDOFF)
        };
        let placement = balancer::balance(&before, &topics, &alive, &draining, &readdressed, self.config.shards, &stored);
        let eligible = balancer::eligible(&alive, &draining);
        let (placement, held_back) = balancer::pace(&before, placement, &eligible, self.leader_move_budget(&previous, &sessions, &eligible));
        self.stepping.store(held_back > 0, std::sync::atomic::Ordering::Relaxed);
        let endpoints: BTreeMap<i32, BrokerEndpoint> = alive
            .iter()
            .filter(|id| !draining.contains(id) || placement.partitions.values().any(|p| p.leader == **id))
            .filter_map(|id| registered.get(id).map(|r| (*id, r.endpoint())))
            .collect();
        if placement == before && endpoints == previous.brokers && previous.controller_epoch == epoch {
            return Ok(());
        }
        let next = Assignment {
            controller_epoch: epoch,
            assignment_version: previous.assignment_version + 1,
            controller_id: self.config.broker_id,
            brokers: endpoints,
            partitions: placement.partitions,
            consumer_groups: placement.consumer_groups,
            transactions: placement.transactions,
        };
        if self.hub.role() != (Role::Controller { epoch }) {
            // Stepped down while this ran (its thread does not hold the rounds up): leave the
            // volume to the next controller.
            return Ok(());
        }
        log_moves(&previous, &next, &alive, &draining);
        if held_back > 0 {
            info!(epoch, held_back, step = self.config.leader_moves_per_step, "evening out in steps: the other moves wait until every broker leads what it was given");
        }
        assignment::write(&*self.fs, &self.layout, &next)?;
        if next.partitions != previous.partitions {
            *self.moved_at.lock() = Some(Instant::now());
        }
        let next = Arc::new(next);
        *self.on_volume.lock() = Some(next.clone());
        self.readdressing.lock().published(&next.brokers);
        info!(epoch, version = next.assignment_version, partitions = next.partitions.len(), brokers = ?next.brokers.keys().collect::<Vec<_>>(), "assignment written");
        self.hub.push_assignment_changed(epoch, next.assignment_version);
        if let Some(mirror) = &self.config.mirror {
            mirror.publish(&next);
        }
        Ok(())
    }

    /// How many partitions may move this round between brokers that both keep leading: the
    /// configured step once every eligible broker leads as many partitions as the assignment on
    /// the volume gives it, by its beats to this controller (one that has not beaten it yet has
    /// not), and none while one is still taking its last ones over — unless the last moves are
    /// [`LEADER_MOVES_PATIENCE`] old.
    fn leader_move_budget(&self, previous: &Assignment, sessions: &BTreeMap<i32, BrokerSession>, eligible: &BTreeSet<i32>) -> usize {
        let moved_at = *self.moved_at.lock().get_or_insert_with(Instant::now);
        let mut given: BTreeMap<i32, usize> = BTreeMap::new();
        for p in previous.partitions.values() {
            *given.entry(p.leader).or_default() += 1;
        }
        let settled = eligible.iter().all(|id| match given.get(id) {
            None => true,
            Some(n) => sessions.get(id).is_some_and(|s| s.assignment_version >= previous.assignment_version && s.partitions_led >= *n),
        });
        if settled || moved_at.elapsed() >= LEADER_MOVES_PATIENCE { self.config.leader_moves_per_step } else { 0 }
    }

    /// Gives the Lease up (holder cleared, epoch kept) so a successor need not wait it out.
    async fn release(&self) {
        if !matches!(self.hub.role(), Role::Controller { .. }) {
            return;
        }
        self.hub.set_role(Role::Follower);
        if let Ok(Some(current)) = self.lease.get().await
            && current.state.holder.as_deref() == Some(self.config.identity.as_str())
        {
            let released = LeaseState { holder: None, ..current.state };
            let epoch = released.transitions;
            if let Ok(true) = self.lease.put(released, Some(current.version)).await {
                info!(epoch, reason = "shutdown", "released the controller lease");
            }
        }
    }
}

/// What a round or an event asks of the recompute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Want {
    /// If the poll interval passed or membership changed.
    IfDue,
    /// Whatever else happened: a first win, a topic change, a session or grace ending.
    Now,
}

/// The controller's recomputes, one at a time on a blocking thread; what is asked meanwhile
/// runs when it ends.
#[derive(Debug, Default)]
struct Recomputes {
    running: Option<tokio::task::JoinHandle<bool>>,
    wanted: Option<Want>,
    /// When the last one ended; `None`: none yet, so one is due.
    last: Option<Instant>,
}

impl Recomputes {
    fn wanted(&mut self, want: Want) {
        self.wanted = self.wanted.max(Some(want));
    }

    /// Drops what was asked (this broker is not the controller, or cannot act now).
    fn forget(&mut self) {
        self.wanted = None;
    }

    /// Starts what was asked unless one is running.
    fn start_if_wanted(&mut self, controller: &Arc<Controller>, epoch: i64) {
        if self.running.is_some() {
            return;
        }
        let Some(want) = self.wanted.take() else { return };
        let (controller, last) = (controller.clone(), self.last);
        self.running = Some(tokio::task::spawn_blocking(move || controller.recompute_if(want, last, epoch)));
    }

    /// Resolves when the running recompute ends (never while none runs).
    async fn finished(&mut self) {
        let Some(running) = self.running.as_mut() else { return std::future::pending().await };
        if let Ok(true) = running.await {
            self.last = Some(Instant::now());
        }
        self.running = None;
    }

    /// Waits for the running one (at shutdown, before the Lease is released).
    async fn finish(&mut self) {
        if self.running.is_some() {
            self.finished().await;
        }
    }
}

/// How long a freshly elected controller lets the previous controller keep its work before it
/// has heard from it: until it is either beating this one or certainly fenced. (The other
/// brokers of the previous assignment get a whole session timeout: they are alive and beat the
/// new controller within a second or two unless they are down, and a cluster starting cold
/// should not move everything onto the first broker up.)
///
/// The previous controller's own broker counts its fence from [`own_broker_fresh_as_of`] its
/// controller's last renewal (`HeartbeatHub::renewed`): every acknowledgement it holds came from
/// itself, as of a renewal the Lease shows, or from an earlier controller, before this Lease was
/// won. So it acknowledges no write a fence timeout after that time, and the session timeout
/// (> fence timeout + margin) after it is as safe as after a last beat. It is also never longer
/// than a session timeout from now, which is safe too: the previous controller gave the role up
/// before this one could win it. The bound compares the previous holder's clock with this
/// one's, as the Lease's own expiry does: clocks must agree to well within the fence margin.
fn grace_after_winning(previous: Option<&LeaseState>, session_timeout: Duration, now: SystemTime) -> Duration {
    let Some(previous) = previous else { return session_timeout };
    let fenced_after = own_broker_fresh_as_of(previous.renew_time, previous.duration).checked_add(session_timeout);
    let left = fenced_after.map_or(session_timeout, |t| t.duration_since(now).unwrap_or(Duration::ZERO));
    left.min(session_timeout)
}

/// What the controller's own broker is acknowledged as of after a renewal that wrote
/// `renew_time` into a Lease of `lease_duration`: a fifth of the Lease after it (the renew
/// interval by default), so that renewals a little late do not fence the controller's own
/// broker, while a paused controller's partitions still move at most a fifth of the Lease
/// after a session timeout from its last renewal (by default, when its Lease expires).
fn own_broker_fresh_as_of(renew_time: SystemTime, lease_duration: Duration) -> SystemTime {
    renew_time.checked_add(lease_duration / 5).unwrap_or(renew_time)
}

/// One log line per leadership change, naming partition, epoch and reason.
fn log_moves(previous: &Assignment, next: &Assignment, alive: &BTreeSet<i32>, draining: &BTreeSet<i32>) {
    for (key, p) in &next.partitions {
        let before = previous.partitions.get(key).filter(|b| b.topic_id == p.topic_id);
        let reason = match before {
            None => "new partition".to_string(),
            Some(b) if b.leader == p.leader && b.leader_epoch == p.leader_epoch => continue,
            Some(b) if !alive.contains(&b.leader) => format!("leader {} is gone (no heartbeat within the session timeout)", b.leader),
            Some(b) if draining.contains(&b.leader) => format!("leader {} is draining", b.leader),
            Some(_) => "rebalance".to_string(),
        };
        info!(partition = %key, leader = p.leader, epoch = p.leader_epoch, from = before.map(|b| b.leader), %reason, "partition leadership assigned");
    }
    for (kind, before, after) in
        [("group", &previous.consumer_groups, &next.consumer_groups), ("transaction", &previous.transactions, &next.transactions)]
    {
        for (shard, s) in after {
            if before.get(shard) != Some(s) {
                let from = before.get(shard).map(|b| b.coordinator);
                info!(kind, shard, coordinator = s.coordinator, epoch = s.epoch, from, "shard coordinator assigned");
            }
        }
    }
}

#[cfg(test)]
mod tests;
