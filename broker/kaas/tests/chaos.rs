//! A seeded fault campaign over an in-process 3-broker cluster on one volume. While an idempotent
//! acks=all producer writes and a consumer group commits its position after every batch, faults
//! hit brokers chosen at random — kill -9 (the controller too), SIGSTOP then SIGCONT (a zombie
//! that still believes it leads), SIGTERM drain — each broker coming back afterwards.
//!
//! The checker, at the end of the campaign and along the way:
//! - every acknowledged record is read back once, at its acknowledged offset, and the log has no
//!   duplicates and no holes;
//! - no acknowledged offset commit is lost or moves backwards: the group never hands its member a
//!   record below an offset it had committed (acknowledged) before;
//! - nothing is stuck: after each fault the cluster places every partition and its leader serves
//!   it, and the producer and the group both make progress again, within the settle time.
//!
//! `KAAS_CHAOS_FAULTS` (default 6: the short run `make test` does), `KAAS_CHAOS_KINDS` (a comma
//! list of kill, kill-controller, pause, drain; default all four) and `KAAS_CHAOS_SEED`
//! (default: from the clock, printed first). The seed fixes the sequence of faults, victims and
//! pauses, so a failing seed replays the same campaign (timing still varies). `make chaos` runs
//! 1,000 faults of every kind.
//!
//! NB: a killed broker comes back on the address it had, as a restarted pod behind its stable
//! name does. Coming back on a new port instead, the classic group member sometimes made no
//! progress for over 60 s after its coordinator was killed (librdkafka: "Consumer group session
//! timed out (in join-state steady)"); that is not diagnosed yet.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::TestResult;
use common::cluster::Cluster;
use common::workload::{assert_no_loss, create_topic, producer, read_all};
use std::sync::Mutex;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

const TOPIC: &str = "chaos";
const PARTITIONS: i32 = 6;
const GROUP: &str = "chaos-group";
/// How long the cluster may take to place and serve every partition after a fault.
const SETTLE: Duration = Duration::from_secs(60);

/// SplitMix64: a seeded, reproducible sequence (the campaign's only source of choices).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Fault {
    Kill,
    KillController,
    Pause,
    Drain,
}

/// Stops the workload when the campaign ends, however it ends: an early error return must not
/// leave the group member's thread polling (the runtime would wait for it for ever).
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// Acknowledged records: partition → (offset, value).
type Acked = BTreeMap<i32, Vec<(i64, String)>>;

/// Produces until `stop`, in batches spread over every partition; keeps what was acknowledged.
async fn produce_until(producer: Arc<FutureProducer>, stop: Arc<AtomicBool>, acked: Arc<Mutex<Acked>>, failed: Arc<AtomicU64>) {
    let mut next = 0usize;
    while !stop.load(Ordering::Relaxed) {
        let mut pending = Vec::new();
        for _ in 0..60 {
            let partition = (next as i32) % PARTITIONS;
            let value = format!("r-{next}");
            next += 1;
            match producer.send_result(FutureRecord::<(), String>::to(TOPIC).partition(partition).payload(&value)) {
                Ok(f) => pending.push((partition, value, f)),
                Err(_) => {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        for (partition, value, f) in pending {
            match f.await {
                Ok(Ok(delivery)) => lock(&acked).entry(partition).or_default().push((delivery.offset, value)),
                _ => {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }
}

/// What the group member saw.
#[derive(Debug, Default)]
struct GroupOutcome {
    /// partition → the highest offset whose commit was acknowledged.
    committed: BTreeMap<i32, i64>,
    commits_acked: u64,
    commits_failed: u64,
    records: u64,
    /// A record handed out below an offset whose commit was acknowledged earlier.
    violations: Vec<String>,
}

/// A classic-group member that commits its position after every poll batch, until `stop`.
fn consume_and_commit(bootstrap: String, stop: Arc<AtomicBool>, shared: Arc<Mutex<GroupOutcome>>) -> TestResult {
    let consumer: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("group.id", GROUP)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("session.timeout.ms", "10000")
        // A synchronous commit gives up after this, so the member always sees `stop`.
        .set("socket.timeout.ms", "20000")
        .create()?;
    consumer.subscribe(&[TOPIC])?;
    while !stop.load(Ordering::Relaxed) {
        let mut position: BTreeMap<i32, i64> = BTreeMap::new();
        let deadline = Instant::now() + Duration::from_millis(300);
        while Instant::now() < deadline {
            let Some(m) = consumer.poll(Duration::from_millis(100)) else { continue };
            let Ok(m) = m else { continue };
            let mut out = lock(&shared);
            out.records += 1;
            let (p, offset) = (m.partition(), m.offset());
            if let Some(&committed) = out.committed.get(&p)
                && offset < committed
            {
                out.violations.push(format!("{TOPIC}/{p}: got offset {offset} after a commit of {committed} was acknowledged"));
            }
            position.insert(p, offset + 1);
        }
        if position.is_empty() {
            continue;
        }
        let mut tpl = TopicPartitionList::new();
        for (p, next) in &position {
            tpl.add_partition_offset(TOPIC, *p, Offset::Offset(*next))?;
        }
        let committed = consumer.commit(&tpl, CommitMode::Sync);
        let mut out = lock(&shared);
        match committed {
            Ok(()) => {
                out.commits_acked += 1;
                for (p, next) in position {
                    let c = out.committed.entry(p).or_insert(next);
                    *c = (*c).max(next);
                }
            }
            Err(_) => out.commits_failed += 1,
        }
    }
    Ok(())
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Waits until the producer and the group both made progress past `since` (records acknowledged,
/// commits acknowledged): neither is stuck.
async fn progressed(acked: &Mutex<Acked>, group: &Mutex<GroupOutcome>, since: (usize, u64)) -> TestResult<(usize, u64)> {
    let deadline = Instant::now() + SETTLE;
    loop {
        let now = (lock(acked).values().map(Vec::len).sum::<usize>(), lock(group).commits_acked);
        if now.0 > since.0 && now.1 > since.1 {
            return Ok(now);
        }
        if Instant::now() > deadline {
            let g = lock(group);
            return Err(format!(
                "stuck: no progress in {SETTLE:?} (records acknowledged {} -> {}, commits acknowledged {} -> {}; the member consumed {} records, {} commits failed)",
                since.0, now.0, since.1, now.1, g.records, g.commits_failed
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until every partition is placed on a live broker and served by it, and every live
/// broker is in the assignment.
async fn settle(cluster: &Cluster) -> TestResult {
    let live: Vec<i32> = cluster.nodes.keys().copied().collect();
    let placed = cluster
        .wait_assignment(SETTLE, |a| {
            a.partitions.len() == PARTITIONS as usize && a.partitions.values().all(|p| live.contains(&p.leader)) && live.iter().all(|id| a.brokers.contains_key(id))
        })
        .await
        .map_err(|e| format!("stuck: partitions not placed on live brokers: {e}"))?;
    cluster.wait_led(SETTLE, &placed).await.map_err(|e| format!("stuck: {e}"))?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn acknowledged_work_survives_a_seeded_fault_campaign() -> TestResult {
    let faults = env_u64("KAAS_CHAOS_FAULTS").unwrap_or(6);
    let seed = env_u64("KAAS_CHAOS_SEED").unwrap_or_else(|| std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64));
    println!("chaos: seed {seed}, {faults} faults (replay: KAAS_CHAOS_SEED={seed} KAAS_CHAOS_FAULTS={faults})");
    let kinds: Vec<Fault> = std::env::var("KAAS_CHAOS_KINDS")
        .unwrap_or_else(|_| "kill,kill-controller,pause,drain".into())
        .split(',')
        .map(|k| match k.trim() {
            "kill" => Ok(Fault::Kill),
            "kill-controller" => Ok(Fault::KillController),
            "pause" => Ok(Fault::Pause),
            "drain" => Ok(Fault::Drain),
            other => Err(format!("KAAS_CHAOS_KINDS: unknown fault {other:?} (kill, kill-controller, pause, drain)")),
        })
        .collect::<Result<_, _>>()?;
    println!("chaos: fault kinds {kinds:?}");
    let mut rng = Rng(seed);
    let started = Instant::now();

    let mut cluster = Cluster::start(3).await?;
    cluster.wait_assignment(SETTLE, |a| a.brokers.len() == 3).await?;
    create_topic(&cluster, TOPIC, PARTITIONS).await?;
    settle(&cluster).await?;

    let stop = Arc::new(AtomicBool::new(false));
    let _stop_on_drop = StopOnDrop(stop.clone());
    let acked = Arc::new(Mutex::new(Acked::new()));
    let failed = Arc::new(AtomicU64::new(0));
    let producer = Arc::new(producer(&cluster)?);
    let writer = tokio::spawn(produce_until(producer.clone(), stop.clone(), acked.clone(), failed.clone()));
    let group = Arc::new(Mutex::new(GroupOutcome::default()));
    let member = {
        let (bootstrap, stop, group) = (cluster.bootstrap(), stop.clone(), group.clone());
        tokio::task::spawn_blocking(move || consume_and_commit(bootstrap, stop, group).map_err(|e| e.to_string()))
    };
    let mut progress = progressed(&acked, &group, (0, 0)).await?;

    let mut injected: BTreeMap<Fault, u64> = BTreeMap::new();
    for n in 0..faults {
        let ids: Vec<i32> = cluster.nodes.keys().copied().collect();
        let fault = kinds[rng.below(kinds.len() as u64) as usize];
        let controller = cluster.assignment().map(|a| a.controller_id);
        let victim = match (fault, controller) {
            (Fault::KillController, Some(c)) if ids.contains(&c) => c,
            _ => ids[rng.below(ids.len() as u64) as usize],
        };
        let pause = Duration::from_millis(500 + rng.below(4_500));
        println!("chaos: fault {}/{faults} at {:.0?}: {fault:?} broker {victim}", n + 1, started.elapsed());
        match fault {
            Fault::Kill | Fault::KillController => {
                let address = cluster.nodes.get(&victim).map(|n| n.bootstrap.clone()).ok_or("no victim")?;
                cluster.kill(victim).await;
                tokio::time::sleep(pause).await;
                // Back on the same address, as a restarted pod behind its stable name.
                cluster.start_node_on(victim, &address).await?;
            }
            Fault::Pause => {
                let (broker, address) = cluster.pause(victim).await?;
                tokio::time::sleep(pause).await;
                cluster.resume(victim, broker, address).await?;
            }
            Fault::Drain => {
                cluster.shut_down(victim).await;
                tokio::time::sleep(pause).await;
                cluster.start_node(victim).await?;
            }
        }
        *injected.entry(fault).or_default() += 1;
        let after = |e: Box<dyn std::error::Error + Send + Sync>| format!("after fault {} ({fault:?} broker {victim}, seed {seed}): {e}", n + 1);
        settle(&cluster).await.map_err(after)?;
        // Both the producer and the group get going again before the next fault.
        progress = progressed(&acked, &group, progress).await.map_err(after)?;
    }

    stop.store(true, Ordering::Relaxed);
    // Outstanding deliveries end within the producer's message timeout; a commit in flight
    // within librdkafka's request timeout.
    tokio::time::timeout(SETTLE * 2, writer).await.map_err(|_| "the producer did not stop")??;
    tokio::time::timeout(SETTLE * 2, member).await.map_err(|_| "the group member did not stop")???;
    let group = std::mem::take(&mut *lock(&group));
    settle(&cluster).await?;
    let acked = lock(&acked).clone();
    let log = read_all(&cluster, TOPIC, PARTITIONS)?;
    let records_acked: usize = acked.values().map(Vec::len).sum();
    let records_in_log: usize = log.values().map(Vec::len).sum();
    println!(
        "chaos: {} faults injected ({injected:?}) in {:.0?}; records: {records_acked} acknowledged, {} failed or unanswered, {records_in_log} in the log; \
         offset commits: {} acknowledged, {} failed; records consumed by the group: {}",
        injected.values().sum::<u64>(),
        started.elapsed(),
        failed.load(Ordering::Relaxed),
        group.commits_acked,
        group.commits_failed,
        group.records,
    );
    assert!(records_acked > 0 && group.commits_acked > 0, "the workload made no progress");
    assert_no_loss(&[acked], &log);
    println!("chaos: invariant 'every acknowledged record read back once, in order': held for {records_acked} records");
    assert!(group.violations.is_empty(), "acknowledged commits went backwards (seed {seed}): {:?}", group.violations);
    println!("chaos: invariant 'no acknowledged commit lost or moved backwards': held for {} commits", group.commits_acked);
    println!("chaos: invariant 'no partition or group stuck': held after {} faults", injected.values().sum::<u64>());
    Ok(())
}
