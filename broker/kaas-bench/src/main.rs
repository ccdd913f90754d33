//! kaas-bench: produce and consume load through librdkafka, printing figures.
//!
//! Works against any Kafka-compatible broker, so the same command measures kaas and Apache
//! Kafka side by side.

mod compaction;
mod consume;
mod groups;
mod produce;
mod report;
mod transact;

use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;

#[derive(Debug, Parser)]
#[command(name = "kaas-bench", version, about = "Kafka load generator (librdkafka) that prints figures")]
struct Args {
    /// Bootstrap servers.
    #[arg(long, default_value = "127.0.0.1:9092")]
    bootstrap: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Produce for a fixed time, flat out or at a fixed rate.
    Produce(produce::ProduceArgs),
    /// Consume a topic from the beginning with default consumer settings.
    Consume(consume::ConsumeArgs),
    /// Transactions of `--records` records back to back, then the idempotent producer flat out
    /// on the same topic, for comparison.
    Transactions(transact::TxnArgs),
    /// The standard suite: 1 KiB, acks=all, 1 and 8 partitions; flat out, 10k msg/s, consume;
    /// then the consumer-group figures.
    Suite(SuiteArgs),
    /// Consumer-group figures only: commit latency, and time to consume every partition again
    /// after a member leaves.
    Groups(GroupArgs),
    /// Keyed produce to a compacted topic against a delete-policy one: flat out, then at a fixed
    /// rate while the log cleaner works through what the flat-out phase wrote.
    Compaction(compaction::CompactionArgs),
}

#[derive(Debug, Clone, clap::Args)]
struct GroupArgs {
    /// Seconds of committing every 100 ms.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Members of the group that loses members.
    #[arg(long, default_value_t = 10)]
    members: usize,
    /// Partitions of its topic.
    #[arg(long, default_value_t = 32)]
    partitions: i32,
    /// How many members leave, one after the other (each leave is measured).
    #[arg(long, default_value_t = 3)]
    leaves: usize,
    /// Protocols to measure.
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [groups::Protocol::Classic, groups::Protocol::Consumer])]
    protocols: Vec<groups::Protocol>,
    /// Prefix of the topics it creates.
    #[arg(long, default_value = "bench-groups")]
    topic_prefix: String,
}

#[derive(Debug, clap::Args)]
struct SuiteArgs {
    /// Seconds each produce phase runs.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Message size in bytes.
    #[arg(long, default_value_t = 1024)]
    size: usize,
    /// Prefix of the topics the suite creates.
    #[arg(long, default_value = "bench")]
    topic_prefix: String,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    match args.command {
        Command::Produce(p) => {
            let figures = produce::run(&args.bootstrap, &p)?;
            report::print_table(&[figures.row(&p.topic)]);
        }
        Command::Consume(c) => {
            let figures = consume::run(&args.bootstrap, &c)?;
            report::print_table(&[figures.row(&c.topic)]);
        }
        Command::Suite(s) => {
            suite(&args.bootstrap, &s)?;
            let g = GroupArgs { seconds: s.seconds, members: 10, partitions: 32, leaves: 3, protocols: vec![groups::Protocol::Classic, groups::Protocol::Consumer], topic_prefix: format!("{}-groups", s.topic_prefix) };
            group_suite(&args.bootstrap, &g)?;
            let t = transact::TxnArgs { topic: format!("{}-txn", s.topic_prefix), partitions: 8, size: 1024, records: 100, seconds: s.seconds, settings: Vec::new() };
            txn_suite(&args.bootstrap, &t)?;
        }
        Command::Groups(g) => group_suite(&args.bootstrap, &g)?,
        Command::Compaction(c) => compaction::run(&args.bootstrap, &c)?,
        Command::Transactions(t) => txn_suite(&args.bootstrap, &t)?,
    }
    Ok(())
}

/// Back-to-back transactions, then the idempotent producer on the same topic shape: the cost of
/// transactions as a ratio.
fn txn_suite(bootstrap: &str, t: &transact::TxnArgs) -> anyhow::Result<()> {
    ensure_topic(bootstrap, &t.topic, t.partitions)?;
    println!("\ntransactions of {} x {} B records over {} partitions, acks=all", t.records, t.size, t.partitions);
    let txn = transact::run_transactions(bootstrap, t)?;
    let idem = transact::run_idempotent(bootstrap, t)?;
    report::print_table(&[txn.row(&format!("transactions of {} records", t.records)), idem.row("idempotent flat out")]);
    let ratio = txn.row("").mb_per_s / idem.row("").mb_per_s.max(1e-9);
    println!("{:.1} transactions/s; transactional MB/s is {ratio:.2}x the idempotent producer's", txn.transactions_per_s());
    Ok(())
}

fn suite(bootstrap: &str, s: &SuiteArgs) -> anyhow::Result<()> {
    let mut rows = Vec::new();
    for partitions in [1, 8] {
        let topic = format!("{}-{}p-{}", s.topic_prefix, partitions, std::process::id());
        create_topic(bootstrap, &topic, partitions)?;
        let flat = produce::ProduceArgs {
            topic: topic.clone(),
            partitions,
            size: s.size,
            seconds: s.seconds,
            rate: None,
            acks: "all".into(),
            linger_ms: None,
            keys: None,
            settings: Vec::new(),
            stats: false,
        };
        eprintln!("producing flat out to {topic} for {} s", s.seconds);
        let figures = produce::run(bootstrap, &flat)?;
        rows.push(figures.row(&format!("produce {partitions}p flat out")));
        // At a fixed rate the client's linger (librdkafka: 5 ms) dominates the ack latency, so
        // the rate is measured with the default, with 1 ms, and with 0 (one request per message).
        for linger_ms in [None, Some(1), Some(0)] {
            let fixed = produce::ProduceArgs { rate: Some(10_000), linger_ms, ..flat.clone() };
            eprintln!("producing 10,000 msg/s to {topic} for {} s (linger.ms {linger_ms:?})", s.seconds);
            let figures = produce::run(bootstrap, &fixed)?;
            let linger = linger_ms.map_or("default linger".to_string(), |l| format!("linger {l}"));
            rows.push(figures.row(&format!("produce {partitions}p 10k/s {linger}")));
        }
        eprintln!("consuming {topic} from the beginning");
        let consume = consume::ConsumeArgs { topic: topic.clone(), partitions, messages: None, settings: Vec::new() };
        let figures = consume::run(bootstrap, &consume)?;
        rows.push(figures.row(&format!("consume {partitions}p")));
    }
    report::print_table(&rows);
    Ok(())
}

/// Commit latency (1 partition, a commit every 100 ms) and rebalance-after-leave time, per
/// protocol. A protocol the broker cannot run is reported, not fatal.
fn group_suite(bootstrap: &str, g: &GroupArgs) -> anyhow::Result<()> {
    let run = std::process::id();
    let commit_topic = format!("{}-commit-{run}", g.topic_prefix);
    create_topic(bootstrap, &commit_topic, 1)?;
    let leave_topic = format!("{}-{}p-{run}", g.topic_prefix, g.partitions);
    create_topic(bootstrap, &leave_topic, g.partitions)?;
    let mut lines = Vec::new();
    for &protocol in &g.protocols {
        eprintln!("committing every 100 ms for {} s ({})", g.seconds, protocol.name());
        lines.push(match groups::commit_latency(bootstrap, &commit_topic, 1, protocol, g.seconds) {
            Ok(f) => format!("{:<58} p50 {:>7.2} ms  p99 {:>7.2} ms  max {:>7.2} ms  ({} commits)", format!("sync commit every 100 ms, {}", protocol.name()), f.p50_ms, f.p99_ms, f.max_ms, f.commits),
            Err(e) => format!("sync commit every 100 ms, {}: failed: {e:#}", protocol.name()),
        });
        eprintln!("{} members over {} partitions, {} leave one by one ({})", g.members, g.partitions, g.leaves, protocol.name());
        lines.push(match groups::rebalance_after_leave(bootstrap, &leave_topic, g.partitions, g.members, g.leaves, protocol) {
            Ok(times) => {
                let secs: Vec<String> = times.iter().map(|t| format!("{:.2}", t.as_secs_f64())).collect();
                format!("{:<58} {} s", format!("leave → all {} partitions consumed again, {}", g.partitions, protocol.name()), secs.join(" / "))
            }
            Err(e) => format!("leave → all partitions consumed again, {}: failed: {e:#}", protocol.name()),
        });
    }
    println!();
    for l in lines {
        println!("{l}");
    }
    Ok(())
}

fn create_topic(bootstrap: &str, topic: &str, partitions: i32) -> anyhow::Result<()> {
    create(bootstrap, topic, partitions, &[], false)
}

/// Creates the topic unless it exists (then it is used as it is).
fn ensure_topic(bootstrap: &str, topic: &str, partitions: i32) -> anyhow::Result<()> {
    create(bootstrap, topic, partitions, &[], true)
}

/// Creates a topic with topic configs.
pub(crate) fn create_topic_with(bootstrap: &str, topic: &str, partitions: i32, configs: &[(&str, &str)]) -> anyhow::Result<()> {
    create(bootstrap, topic, partitions, configs, false)
}

fn create(bootstrap: &str, topic: &str, partitions: i32, configs: &[(&str, &str)], existing_is_fine: bool) -> anyhow::Result<()> {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new().set("bootstrap.servers", bootstrap).create()?;
    let new = configs.iter().fold(NewTopic::new(topic, partitions, TopicReplication::Fixed(1)), |t, (k, v)| t.set(k, v));
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    let results = block_on(admin.create_topics([&new], &opts)).context("creating the benchmark topic")?;
    for r in results {
        match r {
            Ok(_) => {}
            Err((_, rdkafka::types::RDKafkaErrorCode::TopicAlreadyExists)) if existing_is_fine => {}
            Err((t, e)) => anyhow::bail!("creating {t}: {e}"),
        }
    }
    Ok(())
}

/// Drives one future to completion on this thread (the admin client needs no runtime).
fn block_on<F: std::future::Future>(future: F) -> F::Output {
    use std::sync::Arc;
    use std::task::{Context as TaskContext, Poll, Wake, Waker};
    struct ThreadWaker(std::thread::Thread);
    impl Wake for ThreadWaker {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(ThreadWaker(std::thread::current())));
    let mut cx = TaskContext::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::park();
    }
}
