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
fn the_grace_ends_a_session_timeout_after_the_previous_controller_last_could_acknowledge() {
    let now = SystemTime::now();
    let deadline = LEASE * 2 / 3;
    assert_eq!(grace_after_winning(None, LEASE, SESSION, now), SESSION, "no previous controller: a whole session timeout");
    let just_renewed = held_by(None, now);
    assert_eq!(grace_after_winning(Some(&just_renewed), LEASE, SESSION, now), SESSION, "never beyond a session timeout from now");
    let expired = held_by(Some("kaas-1"), now - LEASE);
    assert_eq!(grace_after_winning(Some(&expired), LEASE, SESSION, now), SESSION + deadline - LEASE);
    let long_gone = held_by(Some("kaas-1"), now - SESSION - LEASE);
    assert_eq!(grace_after_winning(Some(&long_gone), LEASE, SESSION, now), Duration::ZERO);
    // A previous holder with a longer Lease held the role for two thirds of its own.
    let longer = LeaseState { duration: LEASE * 10, ..held_by(Some("kaas-1"), now - SESSION) };
    assert_eq!(grace_after_winning(Some(&longer), LEASE, SESSION, now), LEASE * 10 * 2 / 3);
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
        mirror: None,
        ready_brokers: None,
    }
}

/// Broker 0 beats now (so the first recompute after a win knows it is alive) and every 50 ms
/// until `stop`.
fn beat_as_broker_0(hub: &Arc<HeartbeatHub>, mut stop: watch::Receiver<bool>) -> tokio::task::JoinHandle<()> {
    hub.record(&BrokerBeat { broker_id: 0, incarnation: "0".into(), ..Default::default() });
    let hub = hub.clone();
    tokio::spawn(async move {
        loop {
            hub.record(&BrokerBeat { broker_id: 0, incarnation: "0".into(), ..Default::default() });
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
    let beats = beat_as_broker_0(&hub, stop_rx.clone());
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
    // kaas-1 (broker 1) may have acknowledged beats until a second and a half from now: the new
    // controller's first assignment keeps t/0 on broker 1, and a later round moves it once that
    // grace is over — not a session timeout (a minute here) after the win. The later rounds read
    // an assignment this controller wrote, so they must remember who the previous one was.
    let grace = Duration::from_millis(1500);
    let deadline = LEASE * 2 / 3;
    let paused = held_by(Some("kaas-1"), SystemTime::now() + grace - deadline - SESSION);
    let leaders = leaders_after_the_win(paused, 1, |_, _| {}, |l| l.contains(&0)).await?;
    assert_eq!(leaders, [1, 0], "kept through the grace, then moved");
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_assignment_a_deposed_controller_wrote_over_this_one_s_is_written_again() -> Result<(), Box<dyn std::error::Error>> {
    // The controller keeps the assignment it wrote and reads the file whole only when its stamp
    // changed. A deposed controller's late write (past the check-then-act in assignment::write)
    // must still be noticed: brokers refuse it, so until it is replaced they follow nothing new.
    let tmp = tempfile::tempdir()?;
    let fs: FsRef = Arc::new(RealFs);
    let layout = Layout::new(tmp.path());
    register(&fs, &layout, &[0])?;
    let hub = HeartbeatHub::new();
    let controller = Controller::new(controller_0(), fs.clone(), layout.clone(), Arc::new(MemoryLease::new()), Arc::new(OneTopic), hub.clone());
    let (stop, stop_rx) = watch::channel(false);
    let beats = beat_as_broker_0(&hub, stop_rx.clone());
    let task = tokio::spawn(controller.run(stop_rx));
    let written = |fs: &FsRef| assignment::read(&**fs, &layout).ok().flatten().filter(|a| a.controller_id == 0);
    let deadline = Instant::now() + Duration::from_secs(20);
    let ours = loop {
        if let Some(a) = written(&fs) {
            break a;
        }
        assert!(Instant::now() < deadline, "no assignment written");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let late = Assignment { controller_epoch: ours.controller_epoch - 1, assignment_version: 99, controller_id: 5, ..ours.clone() };
    kaas_shared::atomic_file::write_json(&*fs, &layout.assignment_file(), &late)?;
    loop {
        if let Some(again) = written(&fs) {
            assert_eq!(again.controller_epoch, ours.controller_epoch);
            assert_eq!(again.partitions, ours.partitions);
            break;
        }
        assert!(Instant::now() < deadline, "the deposed controller's assignment stayed on the volume");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let _ = stop.send(true);
    task.await?;
    beats.await?;
    Ok(())
}
