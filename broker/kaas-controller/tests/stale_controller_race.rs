//! The stale-controller race (seed 003): a controller that lost the Lease while paused comes
//! back believing it still leads. Its late assignment must never roll the cluster backwards.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kaas_controller::balancer::TopicInfo;
use kaas_controller::controller::{Controller, ControllerConfig};
use kaas_controller::heartbeat_server::{HeartbeatHub, Role};
use kaas_controller::lease::{LeaseStore, MemoryLease};
use kaas_controller::topics::TopicSource;
use kaas_shared::assignment::{self, Assignment};
use kaas_shared::brokers::{self, BrokerRegistration};
use kaas_shared::fs::{FsRef, RealFs};
use kaas_shared::layout::Layout;
use tokio::sync::watch;
use uuid::Uuid;

#[derive(Debug)]
struct OneTopic;

impl TopicSource for OneTopic {
    fn list(&self) -> kaas_controller::Result<Vec<TopicInfo>> {
        Ok(vec![TopicInfo { name: "t".into(), id: Uuid::from_u128(7), partitions: 4 }])
    }
}

fn config(identity: &str, id: i32) -> ControllerConfig {
    ControllerConfig {
        identity: identity.into(),
        broker_id: id,
        lease_duration: Duration::from_millis(600),
        renew_interval: Duration::from_millis(100),
        session_timeout: Duration::from_secs(1),
        recompute_interval: Duration::from_millis(200),
        shards: kaas_controller::balancer::ShardCounts { groups: 2, transactions: 2 },
        leader_moves_per_step: 200,
        mirror: None,
        ready_brokers: None,
    }
}

async fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_controller_cannot_roll_the_assignment_back() -> Result<(), Box<dyn std::error::Error>> {
    let tmp = tempfile::tempdir()?;
    let fs: FsRef = Arc::new(RealFs);
    let layout = Layout::new(tmp.path());
    for id in [0, 1] {
        let r = BrokerRegistration {
            broker_id: id,
            host: "127.0.0.1".into(),
            port: 9092,
            heartbeat: String::new(),
            interbroker: None,
            incarnation: Uuid::new_v4(),
        };
        brokers::register(&*fs, &layout, &r)?;
    }
    let lease = Arc::new(MemoryLease::new());

    // Controller A wins epoch 1 and writes an assignment.
    let hub_a = HeartbeatHub::new();
    let a = Controller::new(config("kaas-0", 0), fs.clone(), layout.clone(), lease.clone(), Arc::new(OneTopic), hub_a.clone());
    let (stop_a, stop_a_rx) = watch::channel(false);
    let task_a = tokio::spawn(a.clone().run(stop_a_rx));
    wait_for("A to write epoch 1", || assignment::read(&*fs, &layout).ok().flatten().is_some_and(|x| x.controller_epoch == 1)).await;
    let written_by_a = assignment::read(&*fs, &layout)?.ok_or("no assignment")?;

    // A is paused (its loop stops without releasing); the Lease expires; B takes over.
    task_a.abort();
    let _ = stop_a;
    assert_eq!(hub_a.role(), Role::Controller { epoch: 1 }, "A still believes it leads");
    let hub_b = HeartbeatHub::new();
    let b = Controller::new(config("kaas-1", 1), fs.clone(), layout.clone(), lease.clone(), Arc::new(OneTopic), hub_b.clone());
    let (stop_b, stop_b_rx) = watch::channel(false);
    let task_b = tokio::spawn(b.clone().run(stop_b_rx));
    wait_for("B to win epoch 2", || hub_b.role() == Role::Controller { epoch: 2 }).await;
    wait_for("B to write epoch 2", || assignment::read(&*fs, &layout).ok().flatten().is_some_and(|x| x.controller_epoch == 2)).await;
    let written_by_b = assignment::read(&*fs, &layout)?.ok_or("no assignment")?;
    assert!(written_by_b.is_newer_than(&written_by_a));

    // A wakes up and writes what it computed before the pause: refused.
    let late = Assignment { assignment_version: written_by_a.assignment_version + 100, ..written_by_a.clone() };
    let refused = assignment::write(&*fs, &layout, &late);
    assert!(matches!(refused, Err(kaas_shared::Error::StaleController { found: 2, ours: 1 })), "{refused:?}");
    assert_eq!(assignment::read(&*fs, &layout)?, Some(written_by_b.clone()));

    // A's loop resumes: it reads the Lease, sees B, steps down, and never writes again.
    let (stop_a2, stop_a2_rx) = watch::channel(false);
    let task_a2 = tokio::spawn(a.clone().run(stop_a2_rx));
    wait_for("A to step down", || hub_a.role() == Role::Follower).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let now = assignment::read(&*fs, &layout)?.ok_or("no assignment")?;
    assert_eq!(now.controller_epoch, 2);
    assert_eq!(lease.get().await?.and_then(|l| l.state.holder), Some("kaas-1".to_string()));

    // B shuts down: it releases the Lease but keeps the epoch, so the next one is 3, not 1.
    let _ = stop_b.send(true);
    task_b.await?;
    let released = lease.get().await?.ok_or("lease vanished")?;
    assert_eq!((released.state.holder, released.state.transitions), (None, 2));
    wait_for("A to win epoch 3", || hub_a.role() == Role::Controller { epoch: 3 }).await;
    let _ = stop_a2.send(true);
    task_a2.await?;
    Ok(())
}
