//! Produce load: flat out (bounded in flight) or paced to a fixed rate, with per-message
//! acknowledgement latency.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use parking_lot::Mutex;
use rdkafka::ClientConfig;
use rdkafka::message::DeliveryResult;
use rdkafka::producer::{BaseRecord, Producer, ProducerContext, ThreadedProducer};
use rdkafka::ClientContext;
use rdkafka::statistics::{Statistics, Window};

use crate::report::Row;

#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ProduceArgs {
    #[arg(long)]
    pub(crate) topic: String,
    #[arg(long, default_value_t = 1)]
    pub(crate) partitions: i32,
    /// Message size in bytes.
    #[arg(long, default_value_t = 1024)]
    pub(crate) size: usize,
    #[arg(long, default_value_t = 10)]
    pub(crate) seconds: u64,
    /// Messages per second; flat out when absent.
    #[arg(long)]
    pub(crate) rate: Option<u64>,
    #[arg(long, default_value = "all")]
    pub(crate) acks: String,
    /// The producer's linger.ms [default: librdkafka's, 5 ms].
    #[arg(long)]
    pub(crate) linger_ms: Option<u32>,
    /// Keys every message, from a space of this many keys visited in a scattered order (as
    /// updates to a table; compacted topics refuse keyless records) [default: no keys].
    #[arg(long)]
    pub(crate) keys: Option<u64>,
    /// Extra librdkafka producer settings, `key=value` (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub(crate) settings: Vec<String>,
    /// Prints librdkafka's own view of the run to stderr at the end: produce requests, batch
    /// sizes and the broker's round trip (its statistics, every second).
    #[arg(long)]
    pub(crate) stats: bool,
}

/// What a produce run measured.
#[derive(Debug)]
pub(crate) struct ProduceFigures {
    acked: u64,
    failed: u64,
    bytes: u64,
    elapsed: Duration,
    latency_us: Histogram<u64>,
}

impl ProduceFigures {
    pub(crate) fn row(&self, name: &str) -> Row {
        let secs = self.elapsed.as_secs_f64().max(1e-9);
        let q = |p: f64| (!self.latency_us.is_empty()).then(|| self.latency_us.value_at_quantile(p) as f64 / 1000.0);
        if self.failed > 0 {
            eprintln!("{name}: {} messages failed", self.failed);
        }
        Row {
            name: name.to_string(),
            mb_per_s: self.bytes as f64 / secs / 1e6,
            msgs_per_s: self.acked as f64 / secs,
            p50_ms: q(0.50),
            p99_ms: q(0.99),
            p999_ms: q(0.999),
        }
    }
}

struct Tally {
    latency_us: Mutex<Histogram<u64>>,
    /// librdkafka's latest statistics, when asked for.
    stats: Mutex<Option<Statistics>>,
    acked: std::sync::atomic::AtomicU64,
    failed: std::sync::atomic::AtomicU64,
}

struct Context(Arc<Tally>);

impl ClientContext for Context {
    fn stats(&self, statistics: Statistics) {
        *self.0.stats.lock() = Some(statistics);
    }
}

impl ProducerContext for Context {
    type DeliveryOpaque = Box<Instant>;

    fn delivery(&self, result: &DeliveryResult<'_>, sent_at: Box<Instant>) {
        use std::sync::atomic::Ordering::Relaxed;
        match result {
            Ok(_) => {
                let us = sent_at.elapsed().as_micros() as u64;
                let _ = self.0.latency_us.lock().record(us.max(1));
                self.0.acked.fetch_add(1, Relaxed);
            }
            Err(_) => {
                self.0.failed.fetch_add(1, Relaxed);
            }
        }
    }
}

pub(crate) fn run(bootstrap: &str, args: &ProduceArgs) -> anyhow::Result<ProduceFigures> {
    let tally = Arc::new(Tally {
        latency_us: Mutex::new(Histogram::new_with_bounds(1, 60_000_000, 3)?),
        acked: Default::default(),
        failed: Default::default(),
        stats: Mutex::new(None),
    });
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", bootstrap).set("acks", &args.acks).set("queue.buffering.max.messages", "200000");
    if let Some(linger) = args.linger_ms {
        config.set("linger.ms", linger.to_string());
    }
    if args.stats {
        config.set("statistics.interval.ms", "1000");
    }
    crate::report::apply_settings(&mut config, &args.settings);
    let producer: ThreadedProducer<Context> = config.create_with_context(Context(tally.clone()))?;
    let payload = vec![b'k'; args.size];
    let start = Instant::now();
    let deadline = start + Duration::from_secs(args.seconds);
    let mut sent: u64 = 0;
    while Instant::now() < deadline {
        if let Some(rate) = args.rate {
            // Pace: message n is due at n / rate seconds.
            let due = start + Duration::from_secs_f64(sent as f64 / rate as f64);
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
        }
        let partition = (sent % args.partitions.max(1) as u64) as i32;
        // A prime stride (coprime to any key space but its multiples) scatters each key's versions
        // over the log.
        let key = args.keys.map(|keys| format!("key-{:010}", sent.wrapping_mul(7_919) % keys.max(1)));
        let mut record = BaseRecord::with_opaque_to(&args.topic, Box::new(Instant::now())).payload(payload.as_slice()).partition(partition);
        if let Some(key) = &key {
            record = record.key(key.as_str());
        }
        match producer.send::<str, [u8]>(record) {
            Ok(()) => sent += 1,
            // Queue full: let deliveries drain.
            Err(_) => std::thread::sleep(Duration::from_micros(200)),
        }
    }
    producer.flush(Duration::from_secs(60))?;
    let elapsed = start.elapsed();
    use std::sync::atomic::Ordering::Relaxed;
    let acked = tally.acked.load(Relaxed);
    let latency_us = tally.latency_us.lock().clone();
    if let Some(stats) = tally.stats.lock().as_ref() {
        print_client_view(stats, acked);
    }
    Ok(ProduceFigures { acked, failed: tally.failed.load(Relaxed), bytes: acked * args.size as u64, elapsed, latency_us })
}

/// librdkafka's counters (cumulative) and its last second's windows, per broker it produced to.
fn print_client_view(stats: &Statistics, acked: u64) {
    for broker in stats.brokers.values() {
        let produces = broker.req.get("Produce").copied().unwrap_or(0);
        if produces == 0 {
            continue;
        }
        let window = |w: &Option<Window>| w.as_ref().map_or("-".to_string(), |w| format!("{}/{}", w.avg, w.p99));
        eprintln!(
            "librdkafka, {}: {produces} produce requests, {:.0} messages each; last second: round trip {} µs avg/p99, \
             producer queue {} µs, request queue {} µs; broker-thread wakeups {}",
            broker.name,
            acked as f64 / produces as f64,
            window(&broker.rtt),
            window(&broker.int_latency),
            window(&broker.outbuf_latency),
            broker.wakeups.map_or("-".to_string(), |w| w.to_string()),
        );
    }
    for (name, topic) in &stats.topics {
        eprintln!(
            "librdkafka, topic {name}: last second's batches {} messages, {} bytes avg",
            topic.batchcnt.avg, topic.batchsize.avg
        );
    }
}
