//! The fault campaign's transactional read-process-write pipeline: its sessions, the watchdog
//! that abandons a session whose client hangs, and the invariants its outcome must satisfy.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

use super::{OUTPUT, PIPELINE_GROUP, TOPIC, lock};
use crate::common::TestResult;

/// What the transactional pipeline did: each transaction's output values, by how it ended.
#[derive(Debug, Default)]
pub(super) struct PipelineOutcome {
    /// Transactions whose commit was acknowledged.
    pub(super) committed: BTreeMap<u64, Vec<String>>,
    /// Transactions whose abort was acknowledged.
    pub(super) aborted: BTreeMap<u64, Vec<String>>,
    /// Transactions that ended without an answer (a commit or abort that failed, or a session
    /// abandoned mid-transaction): visible whole or not at all.
    pub(super) unknown: BTreeMap<u64, Vec<String>>,
    /// The transaction in progress: its number and output values.
    pub(super) open: Option<(u64, Vec<String>)>,
    /// Times the pipeline started over (new consumer, new producer fencing the old one).
    pub(super) restarts: u64,
    /// Sessions abandoned because a client call hung past its own timeout (see [`PIPELINE_HANG`]).
    pub(super) hung_sessions: u64,
    /// Why it last started over (shown when the pipeline is stuck).
    pub(super) last_error: Option<String>,
    /// What it is doing now (shown when the pipeline is stuck), and since when.
    pub(super) step: &'static str,
    pub(super) step_since: Option<Instant>,
}

impl PipelineOutcome {
    fn set_step(&mut self, step: &'static str) {
        self.step = step;
        self.step_since = Some(Instant::now());
    }
}

/// The timeout of each transactional API call the pipeline makes.
const PIPELINE_API_TIMEOUT: Duration = Duration::from_secs(15);

/// How long one step of a pipeline session may go on before the session counts as hung and is
/// abandoned, as an application's watchdog would: well past [`PIPELINE_API_TIMEOUT`]. The
/// hang is librdkafka's (confluentinc/librdkafka#5456 and #5511, open in 2.14):
/// `send_offsets_to_transaction` ignores its timeout and waits for ever when the group's
/// coordinator is cached on a broker that left the metadata — here, a killed broker that comes
/// back on a new port. The abandoned session's open transaction counts as unanswered.
pub(super) const PIPELINE_HANG: Duration = Duration::from_secs(25);

/// The value the pipeline writes for input record `partition@offset` in transaction `txn`.
fn pipeline_value(txn: u64, partition: i32, offset: i64) -> String {
    format!("{txn}:{partition}:{offset}")
}

/// Read-process-write until `stop`: each poll batch of the input topic becomes one transaction
/// writing one output record per input record, with the batch's input offsets committed in it.
/// Any error ends the transaction (abort if possible) and starts over from the group's committed
/// offsets with a new producer of the same transactional id, as an application does.
pub(super) fn pipeline(bootstrap: Arc<Mutex<String>>, stop: Arc<AtomicBool>, shared: Arc<Mutex<PipelineOutcome>>) -> TestResult {
    let txn = Arc::new(AtomicU64::new(0));
    while !stop.load(Ordering::Relaxed) {
        // The brokers' addresses as they are now (a Service name's job on a real cluster).
        let current = lock(&bootstrap).clone();
        lock(&shared).set_step("starting a session");
        let abandoned = Arc::new(AtomicBool::new(false));
        let session = {
            let (stop, shared, abandoned, txn) = (stop.clone(), shared.clone(), abandoned.clone(), txn.clone());
            std::thread::Builder::new()
                .name("pipeline session".into())
                .spawn(move || pipeline_session(&current, &stop, &Session { shared: &shared, abandoned: &abandoned }, &txn))?
        };
        // The session's clients are closed when it ends (a close can wait on the brokers).
        if let Err(e) = watch_session(session, &shared, &abandoned) {
            let mut out = lock(&shared);
            out.set_step("between sessions");
            out.restarts += 1;
            out.last_error = Some(e.to_string());
            drop(out);
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    Ok(())
}

/// Waits for a session to end; abandons it (its thread stays blocked in the client, recording
/// nothing more) once a step has gone on for [`PIPELINE_HANG`].
fn watch_session(session: std::thread::JoinHandle<TestResult>, shared: &Mutex<PipelineOutcome>, abandoned: &AtomicBool) -> TestResult {
    loop {
        if session.is_finished() {
            return session.join().map_err(|_| "a pipeline session panicked")?;
        }
        {
            let mut out = lock(shared);
            if out.step_since.is_some_and(|since| since.elapsed() > PIPELINE_HANG) {
                abandoned.store(true, Ordering::SeqCst);
                out.hung_sessions += 1;
                if let Some((txn, values)) = out.open.take() {
                    out.unknown.insert(txn, values);
                }
                return Err(format!("a client call hung in {:?} for over {PIPELINE_HANG:?}; session abandoned", out.step).into());
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A session's handle on the shared outcome: once the watchdog has abandoned the session, it
/// records nothing (checked under the lock, so the watchdog and the session never both record
/// its open transaction).
struct Session<'a> {
    shared: &'a Mutex<PipelineOutcome>,
    abandoned: &'a AtomicBool,
}

impl Session<'_> {
    fn record(&self, f: impl FnOnce(&mut PipelineOutcome)) {
        let mut out = lock(self.shared);
        if !self.abandoned.load(Ordering::SeqCst) {
            f(&mut out);
        }
    }
}

/// One pipeline incarnation; returns on `stop` or at the first error.
fn pipeline_session(bootstrap: &str, stop: &AtomicBool, session: &Session<'_>, txn: &AtomicU64) -> TestResult {
    // librdkafka's own debug contexts for the pipeline's clients (e.g. `eos,cgrp,protocol`),
    // logged with RUST_LOG=librdkafka=debug: what to look at when the pipeline is stuck. (The
    // rdkafka crate queues librdkafka's logs until the client is polled, so a client blocked in
    // a call shows its logs only once it returns.)
    let debug = std::env::var("KAAS_CHAOS_RDKAFKA_DEBUG").unwrap_or_default();
    let client = |debug: &str| {
        let mut config = rdkafka::ClientConfig::new();
        config.set("bootstrap.servers", bootstrap);
        if !debug.is_empty() {
            config.set("debug", debug);
        }
        config
    };
    let consumer: BaseConsumer = client(&debug)
        .set("group.id", PIPELINE_GROUP)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("isolation.level", "read_committed")
        .set("session.timeout.ms", "10000")
        // An abandoned session's consumer (its thread blocked in the producer) leaves the group
        // this long after its last poll, handing its partitions to the next session's.
        .set("max.poll.interval.ms", "30000")
        .create()?;
    let producer: BaseProducer = client(&debug)
        .set("transactional.id", "chaos-pipeline")
        // A transaction its producer abandoned is aborted by the coordinator after this.
        .set("transaction.timeout.ms", "10000")
        .set("linger.ms", "2")
        .create()?;
    session.record(|o| o.set_step("init_transactions"));
    producer.init_transactions(PIPELINE_API_TIMEOUT)?;
    consumer.subscribe(&[TOPIC])?;
    while !stop.load(Ordering::Relaxed) {
        session.record(|o| o.set_step("polling"));
        let mut batch: Vec<(i32, i64)> = Vec::new();
        let deadline = Instant::now() + Duration::from_millis(300);
        while Instant::now() < deadline && batch.len() < 500 {
            match consumer.poll(Duration::from_millis(100)) {
                Some(Ok(m)) => batch.push((m.partition(), m.offset())),
                Some(Err(e)) => return Err(e.into()),
                None => {}
            }
        }
        if batch.is_empty() {
            continue;
        }
        let n = txn.fetch_add(1, Ordering::SeqCst) + 1;
        let values: Vec<(i32, String)> = batch.iter().map(|(p, o)| (*p, pipeline_value(n, *p, *o))).collect();
        let mut offsets = TopicPartitionList::new();
        for (p, o) in &batch {
            offsets.add_partition_offset(TOPIC, *p, Offset::Offset(o + 1))?;
        }
        let written: Vec<String> = values.iter().map(|(_, v)| v.clone()).collect();
        session.record(|o| {
            o.set_step("in a transaction");
            o.open = Some((n, written.clone()));
        });
        match run_transaction(session, &producer, &consumer, &values, &offsets, PIPELINE_API_TIMEOUT) {
            Ok(()) => session.record(|o| {
                o.open = None;
                o.committed.insert(n, written);
            }),
            Err(e) => {
                // An abort that is acknowledged guarantees none of it is visible; anything else
                // leaves the outcome to the coordinator. (Not under the lock: the campaign
                // reads the outcome meanwhile.)
                session.record(|o| o.set_step("aborting"));
                let aborted = producer.abort_transaction(PIPELINE_API_TIMEOUT).is_ok();
                session.record(|o| {
                    o.open = None;
                    if aborted {
                        o.aborted.insert(n, written);
                    } else {
                        o.unknown.insert(n, written);
                    }
                    o.set_step("closing the session's clients");
                });
                return Err(e);
            }
        }
    }
    Ok(())
}

fn run_transaction(
    session: &Session<'_>,
    producer: &BaseProducer,
    consumer: &BaseConsumer,
    values: &[(i32, String)],
    offsets: &TopicPartitionList,
    timeout: Duration,
) -> TestResult {
    producer.begin_transaction()?;
    for (p, v) in values {
        producer.send(BaseRecord::<(), String>::to(OUTPUT).partition(*p).payload(v)).map_err(|(e, _)| e)?;
    }
    let metadata = consumer.group_metadata().ok_or("the pipeline's consumer has no group metadata")?;
    // A step per call, each bounded by `timeout` (the crate's commit_transaction would flush
    // and commit under one step, each with the whole timeout).
    session.record(|o| o.set_step("send_offsets_to_transaction"));
    producer.send_offsets_to_transaction(offsets, &metadata, timeout)?;
    session.record(|o| o.set_step("flushing the transaction's records"));
    producer.flush(timeout)?;
    session.record(|o| o.set_step("commit_transaction"));
    producer.commit_transaction(timeout)?;
    Ok(())
}

/// The transactional invariants over what a read_committed reader sees; returns the number of
/// checks made.
pub(super) fn check_transactions(outcome: &PipelineOutcome, visible: &[String]) -> Result<u64, String> {
    let mut seen: BTreeMap<&str, u64> = BTreeMap::new();
    for v in visible {
        *seen.entry(v.as_str()).or_default() += 1;
    }
    let mut checks = 0;
    let mut violations = Vec::new();
    for (txn, values) in &outcome.committed {
        for v in values {
            checks += 1;
            match seen.get(v.as_str()) {
                Some(1) => {}
                n => violations.push(format!("committed transaction {txn}: {v} seen {} times", n.copied().unwrap_or(0))),
            }
        }
    }
    for (txn, values) in &outcome.aborted {
        for v in values {
            checks += 1;
            if seen.contains_key(v.as_str()) {
                violations.push(format!("aborted transaction {txn}: {v} is visible"));
            }
        }
    }
    for (txn, values) in &outcome.unknown {
        checks += 1;
        let shown = values.iter().filter(|v| seen.get(v.as_str()) == Some(&1)).count();
        if shown != 0 && shown != values.len() {
            violations.push(format!("transaction {txn} ended without an answer and is partly visible: {shown} of {}", values.len()));
        }
    }
    // Exactly-once processing: an input record is in at most one visible transaction.
    let mut by_input: BTreeMap<(&str, &str), BTreeSet<&str>> = BTreeMap::new();
    for v in visible {
        let mut parts = v.splitn(2, ':');
        let (txn, input) = (parts.next().unwrap_or_default(), parts.next().unwrap_or_default());
        if !outcome.committed.contains_key(&txn.parse().unwrap_or(0)) && !outcome.unknown.contains_key(&txn.parse().unwrap_or(0)) {
            violations.push(format!("{v} is visible but its transaction was never committed"));
        }
        let (p, o) = input.split_once(':').unwrap_or_default();
        by_input.entry((p, o)).or_default().insert(txn);
    }
    for ((p, o), txns) in &by_input {
        checks += 1;
        if txns.len() > 1 {
            violations.push(format!("input {TOPIC}/{p}@{o} was processed into transactions {txns:?}"));
        }
    }
    if violations.is_empty() { Ok(checks) } else { Err(violations.join("; ")) }
}
