//! A freshly elected controller's grace for the previous assignment's brokers.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use kaas_shared::assignment::{self, Assignment, BrokerEndpoint, PartitionAssignment};
use kaas_shared::brokers::{self, BrokerRegistration};
use kaas_shared::fs::{FsRef, RealFs};
use kaas_shared::layout::Layout;
use kaas_shared::names;
use tokio::sync::watch;
use uuid::Uuid;

use super::{Controller, ControllerConfig, grace_after_winning};
use crate::balancer::{ShardCounts, TopicInfo};
use crate::heartbeat_server::HeartbeatHub;
use crate::lease::{LeaseState, LeaseStore, MemoryLease};
use crate::proto::BrokerBeat;
use crate::topics::TopicSource;

const LEASE: Duration = Duration::from_millis(600);
/// Long, so that a grace of one session timeout after the win outlasts the test.
const SESSION: Duration = Duration::from_secs(60);
const TOPIC_ID: Uuid = Uuid::from_u128(7);

fn held_by(holder: Option<&str>, renew_time: SystemTime) -> LeaseState {
    LeaseState { holder: holder.map(str::to_string), renew_time, duration: LEASE, transitions: 1 }
}

#[test]
fn the_grace_ends_a_session_timeout_after_what_the_previous_controller_s_own_broker_was_fresh_as_of() {
    let now = SystemTime::now();
    let slack = LEASE / 5;
    assert_eq!(grace_after_winning(None, SESSION, now), SESSION, "no previous controller: a whole session timeout");
    let just_renewed = held_by(None, now);
    assert_eq!(grace_after_winning(Some(&just_renewed), SESSION, now), SESSION, "never beyond a session timeout from now");
    let expired = held_by(Some("kaas-1"), now - LEASE);
    assert_eq!(grace_after_winning(Some(&expired), SESSION, now), SESSION + slack - LEASE);
    let long_gone = held_by(Some("kaas-1"), now - SESSION - LEASE);
    assert_eq!(grace_after_winning(Some(&long_gone), SESSION, now), Duration::ZERO);
    // The renew deadline plays no part; the slack is a fifth of the previous holder's Lease.
    let longer = LeaseState { duration: LEASE * 10, ..held_by(Some("kaas-1"), now - SESSION) };
    assert_eq!(grace_after_winning(Some(&longer), SESSION, now), LEASE * 2);
}

#[derive(Debug)]
struct OneTopic;

impl TopicSource for OneTopic {
    fn list(&self) -> crate::Result<Vec<TopicInfo>> {
        Ok(vec![TopicInfo { name: "t".into(), id: TOPIC_ID, partitions: 1 }])
    }
}

fn register(fs: &FsRef, layout: &Layout, ids: &[i32]) -> kaas_shared::Result<()> {
    for id in ids {
        let r = BrokerRegistration {
            broker_id: *id,
            host: "127.0.0.1".into(),
            port: 9092,
            heartbeat: String::new(),
            interbroker: None,
            incarnation: Uuid::new_v4(),
        };
        brokers::register(&**fs, layout, &r)?;
    }
    Ok(())
}

/// Broker 0's controller, a round every 100 ms.
fn controller_0() -> ControllerConfig {
    ControllerConfig {
        identity: "kaas-0".into(),
        broker_id: 0,
        lease_duration: LEASE,
        renew_interval: Duration::from_millis(100),
        session_timeout: SESSION,
        recompute_interval: Duration::from_millis(200),
        shards: ShardCounts { groups: 0, transactions: 0 },
        leader_moves_per_step: 200,
        mirror: None,
        ready_brokers: None,
    }
}

/// Broker 0 beats now (so the first recompute after a win knows it is alive) and every 50 ms
/// until `stop`, saying it leads what `leads` returns, as of an assignment version.
fn beat_as_broker_0(
    hub: &Arc<HeartbeatHub>,
    leads: impl Fn() -> (Vec<String>, i64) + Send + 'static,
    mut stop: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    let beat = move || {
        let (partitions_led, assignment_version) = leads();
        BrokerBeat { broker_id: 0, incarnation: "0".into(), partitions_led, assignment_version, ..Default::default() }
    };
    hub.record(&beat());
    let hub = hub.clone();
    tokio::spawn(async move {
        loop {
            hub.record(&beat());
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(50)) => {}
                _ = stop.changed() => return,
            }
        }
    })
}

/// Broker 1 led t/0 in an assignment broker `writer` wrote as controller, under the Lease
/// `previous` describes; broker 0 then wins the Lease while only it beats. Returns the leader of
/// t/0 in the new controller's first assignment.
async fn leader_after_the_win(previous: LeaseState, writer: i32) -> Result<i32, Box<dyn std::error::Error>> {
    let leaders = leaders_after_the_win(previous, writer, |_, _| {}, |_| true).await?;
    leaders.first().copied().ok_or_else(|| "no leader".into())
}

/// As [`leader_after_the_win`], with the controller's configuration and the beats of broker 1
/// left to `setup` (broker 0 beats throughout), but follows the new controller's assignments
/// until `enough` holds for the leaders of t/0 seen so far (each change once, in order), and
/// returns them.
async fn leaders_after_the_win(
    previous: LeaseState,
    writer: i32,
    setup: impl FnOnce(&mut ControllerConfig, &Arc<HeartbeatHub>),
    enough: impl Fn(&[i32]) -> bool,
) -> Result<Vec<i32>, Box<dyn std::error::Error>> {
    let tmp = tempfile::tempdir()?;
    let fs: FsRef = Arc::new(RealFs);
    let layout = Layout::new(tmp.path());
    register(&fs, &layout, &[0, 1])?;
    let endpoint = BrokerEndpoint { host: "127.0.0.1".into(), port: 9092, interbroker: None };
    let before = Assignment {
        controller_epoch: 1,
        assignment_version: 1,
        controller_id: writer,
        brokers: [(0, endpoint.clone()), (1, endpoint)].into(),
        partitions: [(names::partition_key("t", 0), PartitionAssignment { topic_id: TOPIC_ID, leader: 1, leader_epoch: 1 })].into(),
        consumer_groups: Default::default(),
        transactions: Default::default(),
    };
    assignment::write(&*fs, &layout, &before)?;
    let lease = Arc::new(MemoryLease::new());
    assert!(lease.put(previous, None).await?);

    let mut config = controller_0();
    let hub = HeartbeatHub::new();
    setup(&mut config, &hub);
    let controller = Controller::new(config, fs.clone(), layout.clone(), lease, Arc::new(OneTopic), hub.clone());
    let (stop, stop_rx) = watch::channel(false);
    let beats = beat_as_broker_0(&hub, || (Vec::new(), 0), stop_rx.clone());
    let task = tokio::spawn(controller.run(stop_rx));
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut leaders: Vec<i32> = Vec::new();
    while leaders.is_empty() || !enough(&leaders) {
        if let Some(a) = assignment::read(&*fs, &layout)?.filter(|a| a.controller_epoch == 2) {
            let leader = a.partitions.get(&names::partition_key("t", 0)).ok_or("t/0 unplaced")?.leader;
            if leaders.last() != Some(&leader) {
                leaders.push(leader);
            }
        }
        assert!(Instant::now() < deadline, "after 20 s the leaders of t/0 were {leaders:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let _ = stop.send(true);
    task.await?;
    beats.await?;
    Ok(leaders)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_controller_s_partitions_move_once_it_is_certainly_fenced() -> Result<(), Box<dyn std::error::Error>> {
    // kaas-1 last renewed long ago (paused): it acknowledged nothing for longer than a session
    // timeout, so the new controller has no reason to wait for it.
    let paused = held_by(Some("kaas-1"), SystemTime::now() - SESSION - LEASE);
    assert_eq!(leader_after_the_win(paused, 1).await?, 0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn brokers_of_a_controller_that_just_released_keep_their_work_meanwhile() -> Result<(), Box<dyn std::error::Error>> {
    // kaas-1 renewed and released just now: broker 1 may have been acknowledged a moment ago
    // and is not fenced yet, so it keeps t/0 until it beats this controller or the grace ends.
    let released = held_by(None, SystemTime::now());
    assert_eq!(leader_after_the_win(released, 1).await?, 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_brokers_of_the_previous_assignment_get_a_session_timeout_to_beat() -> Result<(), Box<dyn std::error::Error>> {
    // The previous controller was broker 2 and renewed long ago (a cold start, say): broker 1,
    // which was not the controller, keeps t/0 until it beats this one or a session timeout ends.
    let long_ago = held_by(None, SystemTime::now() - SESSION - LEASE);
    assert_eq!(leader_after_the_win(long_ago, 2).await?, 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_controller_s_partitions_move_when_its_grace_ends_after_the_first_write() -> Result<(), Box<dyn std::error::Error>> {
    // kaas-1 (broker 1) renewed a session timeout (and a fifth of its Lease) less a second and a
    // half ago: its own broker may still be unfenced, so the new controller's first assignment keeps t/0 on broker 1,
    // and a later round moves it once that grace is over — not a session timeout (a minute
    // here) after the win. The later rounds read an assignment this controller wrote, so they
    // must remember who the previous one was.
    let grace = Duration::from_millis(1500);
    let paused = held_by(Some("kaas-1"), SystemTime::now() + grace - LEASE / 5 - SESSION);
    let leaders = leaders_after_the_win(paused, 1, |_, _| {}, |l| l.contains(&0)).await?;
    assert_eq!(leaders, [1, 0], "kept through the grace, then moved");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_takes_an_expiring_lease_when_it_expires_not_at_its_next_round() -> Result<(), Box<dyn std::error::Error>> {
    // Rounds a minute apart; kaas-1's Lease expires 400 ms after the first round saw it live:
    // broker 0 looks again then and wins (the helper gives up after 20 s).
    let expiring = held_by(Some("kaas-1"), SystemTime::now() - LEASE + Duration::from_millis(400));
    let setup = |c: &mut ControllerConfig, _: &Arc<HeartbeatHub>| c.renew_interval = Duration::from_secs(60);
    let leaders = leaders_after_the_win(expiring, 1, setup, |_| true).await?;
    assert_eq!(leaders, [1], "won; kaas-1 keeps t/0 through its grace");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_broker_s_partitions_move_when_its_session_ends_not_at_the_next_round() -> Result<(), Box<dyn std::error::Error>> {
    // The controller's rounds are a minute apart. Broker 1 beats for its first second, then
    // falls silent: its session ends 300 ms later, and the controller acts then.
    let long_ago = held_by(None, SystemTime::now() - SESSION - LEASE);
    let started = Instant::now();
    let setup = |c: &mut ControllerConfig, hub: &Arc<HeartbeatHub>| {
        c.session_timeout = Duration::from_millis(300);
        c.renew_interval = Duration::from_secs(60);
        c.lease_duration = Duration::from_secs(120);
        let hub = hub.clone();
        tokio::spawn(async move {
            while started.elapsed() < Duration::from_secs(1) {
                hub.record(&BrokerBeat { broker_id: 1, incarnation: "1".into(), ..Default::default() });
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
    };
    let leaders = leaders_after_the_win(long_ago, 2, setup, |l| l.contains(&0)).await?;
    assert_eq!(leaders, [1, 0], "kept while broker 1 beat, then moved");
    let moved_after = started.elapsed();
    assert!(moved_after > Duration::from_secs(1), "moved after {moved_after:?}, while broker 1 still beat");
    assert!(moved_after < Duration::from_secs(30), "moved at a round ({moved_after:?}), not when the session ended");
    Ok(())
}

/// The partitions the assignment on the volume gives broker `id`, and its version.
fn given(fs: &FsRef, layout: &Layout, id: i32) -> (Vec<String>, i64) {
    let Ok(Some(a)) = assignment::read(&**fs, layout) else { return (Vec::new(), 0) };
    (a.partitions.iter().filter(|(_, p)| p.leader == id).map(|(k, _)| k.clone()).collect(), a.assignment_version)
}

/// Topics a test adds to.
#[derive(Debug, Default)]
struct Topics(parking_lot::Mutex<Vec<TopicInfo>>);

impl TopicSource for Topics {
    fn list(&self) -> crate::Result<Vec<TopicInfo>> {
        Ok(self.0.lock().clone())
    }
}

type TestResult<T = ()> = Result<T, Box<dyn std::error::Error>>;

/// Broker 0's controller over a fresh volume, broker 0 beating, and topic t placed.
struct Running {
    _volume: tempfile::TempDir,
    fs: FsRef,
    layout: Layout,
    hub: Arc<HeartbeatHub>,
    lease: Arc<MemoryLease>,
    topics: Arc<Topics>,
    controller: Arc<Controller>,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
    beats: tokio::task::JoinHandle<()>,
}

impl Running {
    /// Starts it with `config`, its volume seen through `fs` (given the real one).
    async fn start(config: ControllerConfig, fs: impl FnOnce(FsRef) -> FsRef) -> TestResult<Running> {
        let volume = tempfile::tempdir()?;
        let fs = fs(Arc::new(RealFs));
        let layout = Layout::new(volume.path());
        register(&fs, &layout, &[0])?;
        let (hub, lease, topics) = (HeartbeatHub::new(), Arc::new(MemoryLease::new()), Arc::new(Topics::default()));
        topics.0.lock().push(TopicInfo { name: "t".into(), id: TOPIC_ID, partitions: 1 });
        let controller = Controller::new(config, fs.clone(), layout.clone(), lease.clone(), topics.clone(), hub.clone());
        let (stop, stop_rx) = watch::channel(false);
        // Broker 0 leads whatever the assignment on the volume gives it.
        let (volume_fs, volume_layout) = (fs.clone(), layout.clone());
        let beats = beat_as_broker_0(&hub, move || given(&volume_fs, &volume_layout, 0), stop_rx.clone());
        let task = tokio::spawn(controller.clone().run(stop_rx));
        let running = Running { _volume: volume, fs, layout, hub, lease, topics, controller, stop, task, beats };
        running.until("t placed", |r| r.placed("t")).await?;
        Ok(running)
    }

    /// How many partitions the assignment on the volume gives broker `id`.
    fn given_to(&self, id: i32) -> usize {
        given(&self.fs, &self.layout, id).0.len()
    }

    fn written(&self) -> Option<Assignment> {
        assignment::read(&*self.fs, &self.layout).ok().flatten()
    }

    fn placed(&self, topic: &str) -> bool {
        self.written().is_some_and(|a| a.partition(topic, 0).is_some())
    }

    /// Adds topic `name` and tells the controller.
    fn add_topic(&self, name: &str, id: u128) {
        self.topics.0.lock().push(TopicInfo { name: name.into(), id: Uuid::from_u128(id), partitions: 1 });
        self.controller.recompute.notify_one();
    }

    async fn until(&self, what: &str, done: impl Fn(&Running) -> bool) -> TestResult {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !done(self) {
            if Instant::now() > deadline {
                return Err(format!("not within 20 s: {what}").into());
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(())
    }

    async fn stop(self) -> TestResult {
        let _ = self.stop.send(true);
        self.task.await?;
        self.beats.await?;
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_assignment_a_deposed_controller_wrote_over_this_one_s_is_written_again() -> TestResult {
    // The controller keeps the assignment it wrote and reads the file whole only when its stamp
    // changed. A deposed controller's late write (past the check-then-act in assignment::write)
    // must still be noticed: brokers refuse it, so until it is replaced they follow nothing new.
    let running = Running::start(controller_0(), |fs| fs).await?;
    let ours = running.written().ok_or("no assignment")?;
    let late = Assignment { controller_epoch: ours.controller_epoch - 1, assignment_version: 99, controller_id: 5, ..ours.clone() };
    kaas_shared::atomic_file::write_json(&*running.fs, &running.layout.assignment_file(), &late)?;
    running.until("the controller's assignment back", |r| r.written().is_some_and(|a| a.controller_id == 0)).await?;
    let again = running.written().ok_or("no assignment")?;
    assert_eq!((again.controller_epoch, &again.partitions), (ours.controller_epoch, &ours.partitions));
    running.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_change_is_placed_at_once_without_a_lease_write() -> TestResult {
    // Rounds a minute apart: the new topic is placed on the notification, under the renewal of
    // the round before — a Lease write per KafkaTopic event loaded the API server while
    // thousands of topics were created.
    let config = ControllerConfig { renew_interval: Duration::from_secs(60), lease_duration: Duration::from_secs(120), ..controller_0() };
    let running = Running::start(config, |fs| fs).await?;
    let renewed = running.lease.snapshot().ok_or("no lease")?;
    running.add_topic("u", 8);
    running.until("u placed on the notification", |r| r.placed("u")).await?;
    assert_eq!(running.lease.snapshot(), Some(renewed), "the Lease was written for a topic change");
    running.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_volume_does_not_hold_up_the_renewals() -> TestResult {
    // The recompute's write stalls in fsync for five renew deadlines (a loaded NFS server): the
    // controller keeps renewing and keeps the role meanwhile, and places the topic once the
    // write goes through. A round that waited for the recompute stepped down, and every broker
    // fenced, for a slow disk.
    let switch = kaas_shared::fs::FaultSwitch::default();
    let faulty = switch.clone();
    let running = Running::start(controller_0(), move |fs| kaas_shared::fs::FaultyFs::wrap(fs, faulty)).await?;
    let role = running.hub.role();
    let stall = LEASE * 2 / 3 * 5;
    switch.set(kaas_shared::fs::MountFault::SlowSync(stall));
    running.add_topic("u", 8);
    let stalled = Instant::now();
    // Well into the stall: the write has started, and later renewals are the loop's own.
    tokio::time::sleep(stall / 5).await;
    let renewed = running.lease.snapshot().ok_or("no lease")?.renew_time;
    while stalled.elapsed() < stall * 4 / 5 {
        assert_eq!(running.hub.role(), role, "stepped down {:?} into the stalled write", stalled.elapsed());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(running.lease.snapshot().ok_or("no lease")?.renew_time > renewed, "no renewal while the write stalled");
    switch.clear();
    running.until("u placed after the stall", |r| r.placed("u")).await?;
    assert_eq!(running.hub.role(), role, "the role was given up and taken again over the stall");
    running.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_that_joins_gets_its_share_one_step_at_a_time_each_once_the_last_is_led() -> TestResult {
    // Eight partitions on broker 0, two moves a step. Broker 1 joins and gets two; while its
    // beats do not show them led, nothing more moves over many rounds; once they do, the next
    // two come. A hand-over leaves a partition unavailable until its new leader has taken it
    // over: a restarted broker given its whole share at once left thousands so for seconds.
    // Rounds a minute apart: each step follows the beats that show the last one led.
    let config = ControllerConfig {
        leader_moves_per_step: 2,
        renew_interval: Duration::from_secs(60),
        lease_duration: Duration::from_secs(120),
        recompute_interval: Duration::from_secs(60),
        ..controller_0()
    };
    let running = Running::start(config, |fs| fs).await?;
    running.topics.0.lock().push(TopicInfo { name: "u".into(), id: Uuid::from_u128(8), partitions: 7 });
    running.controller.recompute.notify_one();
    running.until("all eight on broker 0", |r| r.given_to(0) == 8).await?;

    register(&running.fs, &running.layout, &[1])?;
    let leads_1 = Arc::new(parking_lot::Mutex::new((Vec::<String>::new(), 0_i64)));
    let (hub, reported, mut stop) = (running.hub.clone(), leads_1.clone(), running.stop.subscribe());
    let beats_1 = tokio::spawn(async move {
        loop {
            let (partitions_led, assignment_version) = reported.lock().clone();
            hub.record(&BrokerBeat { broker_id: 1, incarnation: "1".into(), partitions_led, assignment_version, ..Default::default() });
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(50)) => {}
                _ = stop.changed() => return,
            }
        }
    });
    running.controller.recompute.notify_one();
    running.until("a first step to broker 1", |r| r.given_to(1) > 0).await?;
    assert_eq!(running.given_to(1), 2, "one step");
    // Beats meanwhile, and a recompute asked for: broker 1 has led nothing of it.
    tokio::time::sleep(Duration::from_secs(1)).await;
    running.controller.recompute.notify_one();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(running.given_to(1), 2, "the next step came before broker 1 led the first");
    *leads_1.lock() = given(&running.fs, &running.layout, 1);
    running.until("a second step", |r| r.given_to(1) > 2).await?;
    assert_eq!(running.given_to(1), 4, "one more step, and even");
    *leads_1.lock() = given(&running.fs, &running.layout, 1);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!((running.given_to(0), running.given_to(1)), (4, 4), "balanced: nothing more moves");
    running.stop().await?;
    beats_1.await?;
    Ok(())
}
