//! Consumer-group figures: synchronous commit latency of a consumer committing every 100 ms,
//! and the time from a member leaving until every partition is being consumed again, for both
//! rebalance protocols (classic with cooperative-sticky, and KIP-848 `group.protocol=consumer`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use hdrhistogram::Histogram;
use parking_lot::Mutex;
use rdkafka::ClientConfig;
use rdkafka::config::FromClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

/// The two rebalance protocols as client settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Protocol {
    /// Classic protocol, cooperative-sticky assignor.
    Classic,
    /// KIP-848 (`group.protocol=consumer`), the broker's default assignor.
    Consumer,
}

impl Protocol {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Protocol::Classic => "classic cooperative-sticky",
            Protocol::Consumer => "group.protocol=consumer",
        }
    }

    fn configure(self, c: &mut ClientConfig) {
        match self {
            Protocol::Classic => c.set("partition.assignment.strategy", "cooperative-sticky"),
            Protocol::Consumer => c.set("group.protocol", "consumer"),
        };
    }
}

fn consumer_config(bootstrap: &str, group: &str, protocol: Protocol) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "latest");
    protocol.configure(&mut c);
    c
}

/// Commit latency as the client sees it (ms).
#[derive(Debug, Clone)]
pub(crate) struct CommitFigures {
    pub(crate) commits: u64,
    pub(crate) p50_ms: f64,
    pub(crate) p99_ms: f64,
    pub(crate) max_ms: f64,
}

/// One consumer owning every partition of `topic` commits a growing offset for each of its
/// partitions every 100 ms for `seconds`, synchronously; each commit's round trip is recorded.
pub(crate) fn commit_latency(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
    protocol: Protocol,
    seconds: u64,
) -> anyhow::Result<CommitFigures> {
    let group = format!("{topic}-commit-{}", protocol_tag(protocol));
    let consumer = BaseConsumer::from_config(&consumer_config(bootstrap, &group, protocol))?;
    consumer.subscribe(&[topic])?;
    wait_assigned(&[&consumer], partitions, Duration::from_secs(60))?;
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
    let end = Instant::now() + Duration::from_secs(seconds);
    let mut next = Instant::now();
    let mut offset = 0i64;
    while Instant::now() < end {
        while Instant::now() < next {
            consumer.poll(
                next.saturating_duration_since(Instant::now())
                    .min(Duration::from_millis(20)),
            );
        }
        next += Duration::from_millis(100);
        offset += 1;
        let mut tpl = TopicPartitionList::new();
        for p in 0..partitions {
            tpl.add_partition_offset(topic, p, Offset::Offset(offset))?;
        }
        let start = Instant::now();
        consumer
            .commit(&tpl, CommitMode::Sync)
            .context("synchronous commit")?;
        hist.record(start.elapsed().as_micros().max(1) as u64)?;
    }
    let ms = |q: f64| hist.value_at_quantile(q) as f64 / 1000.0;
    Ok(CommitFigures {
        commits: hist.len(),
        p50_ms: ms(0.5),
        p99_ms: ms(0.99),
        max_ms: hist.max() as f64 / 1000.0,
    })
}

fn protocol_tag(protocol: Protocol) -> &'static str {
    match protocol {
        Protocol::Classic => "classic",
        Protocol::Consumer => "consumer",
    }
}

fn wait_assigned(
    consumers: &[&BaseConsumer],
    partitions: i32,
    timeout: Duration,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        for c in consumers {
            c.poll(Duration::from_millis(20));
        }
        let owned: usize = consumers
            .iter()
            .map(|c| c.assignment().map_or(0, |a| a.count()))
            .sum();
        if owned == partitions as usize {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{owned} of {partitions} partitions assigned after {timeout:?}");
        }
    }
}

/// What every member thread shares with the driver.
struct Shared {
    stop: AtomicBool,
    /// When each partition last delivered a message to a member still in the group.
    consumed: Mutex<Vec<Option<Instant>>>,
    /// Each member's assignment.
    assigned: Mutex<Vec<Vec<i32>>>,
}

/// `members` consumers over `partitions` partitions, with a producer writing to every
/// partition every 10 ms; then, `leaves` times, one member closes (leaving the group) and the
/// time until every partition has delivered a message produced after the leave is recorded.
pub(crate) fn rebalance_after_leave(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
    members: usize,
    leaves: usize,
    protocol: Protocol,
) -> anyhow::Result<Vec<Duration>> {
    let group = format!("{topic}-leave-{}", protocol_tag(protocol));
    let shared = Arc::new(Shared {
        stop: AtomicBool::new(false),
        consumed: Mutex::new(vec![None; partitions as usize]),
        assigned: Mutex::new(vec![Vec::new(); members]),
    });
    let producer = spawn_producer(bootstrap, topic, partitions, shared.clone())?;
    let leave_flags: Vec<Arc<AtomicBool>> = (0..members)
        .map(|_| Arc::new(AtomicBool::new(false)))
        .collect();
    let mut threads = Vec::new();
    for (i, flag) in leave_flags.iter().enumerate() {
        threads.push(spawn_member(
            consumer_config(bootstrap, &group, protocol),
            topic,
            i,
            shared.clone(),
            flag.clone(),
        )?);
    }
    let result = measure_leaves(&shared, &leave_flags, partitions, leaves);
    shared.stop.store(true, Ordering::Release);
    for t in threads {
        let _ = t.join();
    }
    let _ = producer.join();
    result
}

fn measure_leaves(
    shared: &Shared,
    leave_flags: &[Arc<AtomicBool>],
    partitions: i32,
    leaves: usize,
) -> anyhow::Result<Vec<Duration>> {
    let settle = |active: usize, what: &str| -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let a = shared.assigned.lock().clone();
            let mut all: Vec<i32> = a.iter().take(active).flatten().copied().collect();
            all.sort_unstable();
            let exact = all.len() == partitions as usize && all.iter().copied().eq(0..partitions);
            if exact && a.iter().take(active).all(|p| !p.is_empty()) {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("{what}: partitions not covered exactly once by {active} members: {a:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let mut active = leave_flags.len();
    settle(active, "initial join")?;
    let mut out = Vec::new();
    for _ in 0..leaves {
        // Let the group run steadily for a moment, then the last active member leaves.
        std::thread::sleep(Duration::from_secs(2));
        active -= 1;
        let t0 = Instant::now();
        leave_flags[active].store(true, Ordering::Release);
        let deadline = t0 + Duration::from_secs(120);
        loop {
            let all_again = shared
                .consumed
                .lock()
                .iter()
                .all(|c| c.is_some_and(|at| at > t0));
            if all_again {
                out.push(t0.elapsed());
                break;
            }
            if Instant::now() > deadline {
                bail!("not every partition was consumed again within 120 s of a leave");
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        settle(active, "after a leave")?;
    }
    Ok(out)
}

fn spawn_member(
    config: ClientConfig,
    topic: &str,
    index: usize,
    shared: Arc<Shared>,
    leave: Arc<AtomicBool>,
) -> anyhow::Result<JoinHandle<()>> {
    let consumer = BaseConsumer::from_config(&config)?;
    consumer.subscribe(&[topic])?;
    Ok(std::thread::spawn(move || {
        while !shared.stop.load(Ordering::Acquire) && !leave.load(Ordering::Acquire) {
            if let Some(Ok(m)) = consumer.poll(Duration::from_millis(10)) {
                if leave.load(Ordering::Acquire) {
                    break; // a leaving member's reads do not count
                }
                if let Some(slot) = shared.consumed.lock().get_mut(m.partition() as usize) {
                    *slot = Some(Instant::now());
                }
            }
            let owned = consumer
                .assignment()
                .map(|a| a.elements().iter().map(|e| e.partition()).collect())
                .unwrap_or_default();
            if let Some(slot) = shared.assigned.lock().get_mut(index) {
                *slot = owned;
            }
        }
        if let Some(slot) = shared.assigned.lock().get_mut(index) {
            slot.clear();
        }
        // Closing leaves the group (LeaveGroup, or the epoch -1 heartbeat).
        drop(consumer);
    }))
}

fn spawn_producer(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
    shared: Arc<Shared>,
) -> anyhow::Result<JoinHandle<()>> {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("linger.ms", "1")
        .create()?;
    let topic = topic.to_string();
    Ok(std::thread::spawn(move || {
        while !shared.stop.load(Ordering::Acquire) {
            for p in 0..partitions {
                let _ = producer.send(
                    BaseRecord::<(), [u8]>::to(&topic)
                        .partition(p)
                        .payload(b"x"),
                );
            }
            producer.poll(Duration::from_millis(10));
        }
        let _ = producer.flush(Duration::from_secs(5));
    }))
}
