//! A controller that cannot reach the API server gives the controller role up before its Lease
//! could expire and be taken by another broker (client-go's renew-deadline rule), whether the
//! Lease store fails or hangs. Until then it keeps the role; after it, heartbeats go
//! unacknowledged and its brokers fence on schedule.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use kaas_controller::balancer::TopicInfo;
use kaas_controller::controller::{Controller, ControllerConfig};
use kaas_controller::heartbeat_server::{HeartbeatHub, Role};
use kaas_controller::lease::{LeaseState, LeaseStore, MemoryLease, VersionedLease};
use kaas_controller::topics::TopicSource;
use kaas_shared::fs::{FsRef, RealFs};
use kaas_shared::layout::Layout;
use tokio::sync::watch;
use tokio::time::Instant;

#[derive(Debug)]
struct NoTopics;

impl TopicSource for NoTopics {
    fn list(&self) -> kaas_controller::Result<Vec<TopicInfo>> {
        Ok(Vec::new())
    }
}

const UP: u8 = 0;
const FAILING: u8 = 1;
const HANGING: u8 = 2;
/// How long each but the last state of an outage lasts: a few failed renewal rounds.
const PHASE: Duration = Duration::from_millis(250);

/// The API server as the controller sees it: up, answering errors, or not answering at all.
#[derive(Debug)]
struct ApiServer {
    lease: MemoryLease,
    state: AtomicU8,
}

impl ApiServer {
    fn answer<'a, T: Send + 'a>(&'a self, up: BoxFuture<'a, kaas_controller::Result<T>>) -> BoxFuture<'a, kaas_controller::Result<T>> {
        match self.state.load(Ordering::SeqCst) {
            UP => up,
            FAILING => Box::pin(async { Err(kaas_controller::Error::Lease("connection refused".into())) }),
            _ => Box::pin(futures::future::pending()),
        }
    }
}

impl LeaseStore for ApiServer {
    fn get(&self) -> BoxFuture<'_, kaas_controller::Result<Option<VersionedLease>>> {
        self.answer(self.lease.get())
    }

    fn put(&self, state: LeaseState, expected: Option<String>) -> BoxFuture<'_, kaas_controller::Result<bool>> {
        self.answer(self.lease.put(state, expected))
    }
}

/// The API server goes into the first state of `outage`, then each next one after `PHASE`.
async fn steps_down_before_the_lease_can_expire(outage: &[u8]) -> Result<(), Box<dyn std::error::Error>> {
    let tmp = tempfile::tempdir()?;
    let fs: FsRef = Arc::new(RealFs);
    let lease_duration = Duration::from_millis(600);
    let config = ControllerConfig {
        identity: "kaas-0".into(),
        broker_id: 0,
        lease_duration,
        renew_interval: Duration::from_millis(100),
        session_timeout: Duration::from_secs(1),
        recompute_interval: Duration::from_millis(200),
        shards: kaas_controller::balancer::ShardCounts { groups: 0, transactions: 0 },
        leader_moves_per_step: 200,
        mirror: None,
        ready_brokers: None,
    };
    let api = Arc::new(ApiServer { lease: MemoryLease::new(), state: AtomicU8::new(UP) });
    let hub = HeartbeatHub::new();
    let controller = Controller::new(config, fs, Layout::new(tmp.path()), api.clone(), Arc::new(NoTopics), hub.clone());
    let (stop, stop_rx) = watch::channel(false);
    let task = tokio::spawn(controller.run(stop_rx));

    tokio::time::timeout(Duration::from_secs(5), async {
        while hub.role() != (Role::Controller { epoch: 1 }) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await?;
    // The last renewal this controller can have made.
    let last_renewal = Instant::now();
    for (i, state) in outage.iter().enumerate() {
        if i > 0 {
            tokio::time::sleep(PHASE).await;
        }
        api.state.store(*state, Ordering::SeqCst);
    }
    tokio::time::timeout(Duration::from_secs(5), async {
        while hub.role() != Role::Follower {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await?;
    let held_for = last_renewal.elapsed();
    assert!(held_for < lease_duration, "still the controller {held_for:?} after the last renewal; the Lease lasts {lease_duration:?}");

    // Back in contact: it competes for the Lease again, and wins it (nobody else is there).
    api.state.store(UP, Ordering::SeqCst);
    tokio::time::timeout(Duration::from_secs(5), async {
        while !matches!(hub.role(), Role::Controller { .. }) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await?;
    let _ = stop.send(true);
    task.await?;
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_controller_whose_lease_store_fails_steps_down_in_time() -> Result<(), Box<dyn std::error::Error>> {
    steps_down_before_the_lease_can_expire(&[FAILING]).await
}

#[tokio::test(start_paused = true)]
async fn a_controller_whose_lease_store_hangs_steps_down_in_time() -> Result<(), Box<dyn std::error::Error>> {
    steps_down_before_the_lease_can_expire(&[HANGING]).await
}

/// The renew deadline counts from the last renewal: a round that starts after failed ones and
/// hangs may not wait a whole deadline of its own.
#[tokio::test(start_paused = true)]
async fn a_controller_whose_lease_store_fails_then_hangs_steps_down_in_time() -> Result<(), Box<dyn std::error::Error>> {
    steps_down_before_the_lease_can_expire(&[FAILING, HANGING]).await
}
