//! Transactional produce load: back-to-back transactions of a fixed number of records
//! (begin, send, commit), against the idempotent producer's flat-out throughput on the same
//! topic shape, so the cost of transactions shows as a ratio.

use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::producer::DefaultProducerContext;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer, ThreadedProducer};

use crate::report::Row;

#[derive(Debug, Clone, clap::Args)]
pub(crate) struct TxnArgs {
    #[arg(long)]
    pub(crate) topic: String,
    #[arg(long, default_value_t = 1)]
    pub(crate) partitions: i32,
    /// Message size in bytes.
    #[arg(long, default_value_t = 1024)]
    pub(crate) size: usize,
    /// Records per transaction.
    #[arg(long, default_value_t = 100)]
    pub(crate) records: usize,
    #[arg(long, default_value_t = 10)]
    pub(crate) seconds: u64,
    /// Extra librdkafka producer settings, `key=value` (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub(crate) settings: Vec<String>,
}

/// What a run measured.
#[derive(Debug)]
pub(crate) struct TxnFigures {
    transactions: u64,
    records: u64,
    bytes: u64,
    elapsed: Duration,
}

impl TxnFigures {
    pub(crate) fn transactions_per_s(&self) -> f64 {
        self.transactions as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    pub(crate) fn row(&self, name: &str) -> Row {
        Row::throughput(name, self.bytes, self.records, self.elapsed)
    }
}

fn config(bootstrap: &str, transactional_id: Option<&str>, settings: &[String]) -> ClientConfig {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", bootstrap)
        .set("enable.idempotence", "true")
        .set("queue.buffering.max.messages", "200000");
    if let Some(id) = transactional_id {
        config.set("transactional.id", id);
    }
    crate::report::apply_settings(&mut config, settings);
    config
}

/// Back-to-back transactions of `args.records` records, spread round-robin over the partitions.
pub(crate) fn run_transactions(bootstrap: &str, args: &TxnArgs) -> anyhow::Result<TxnFigures> {
    let id = format!("kaas-bench-{}", std::process::id());
    // NB: a BaseProducer, not a ThreadedProducer: commit_transaction flushes, and with a
    // ThreadedProducer the flush waits for the poll thread's 100 ms poll interval to serve the
    // delivery reports, which would cap the figure at ~10 transactions/s.
    let producer: BaseProducer = config(bootstrap, Some(&id), &args.settings).create()?;
    let timeout = Duration::from_secs(30);
    producer.init_transactions(timeout)?;
    let payload = vec![b't'; args.size];
    let start = Instant::now();
    let deadline = start + Duration::from_secs(args.seconds);
    let (mut transactions, mut records) = (0u64, 0u64);
    while Instant::now() < deadline {
        producer.begin_transaction()?;
        for i in 0..args.records {
            let partition = (i % args.partitions.max(1) as usize) as i32;
            let mut record = BaseRecord::<(), [u8]>::to(&args.topic)
                .payload(payload.as_slice())
                .partition(partition);
            loop {
                match producer.send(record) {
                    Ok(()) => break,
                    // Queue full: let deliveries drain.
                    Err((_, r)) => {
                        record = r;
                        producer.poll(Duration::from_millis(1));
                    }
                }
            }
        }
        // NB: rdkafka's flush (inside commit_transaction) polls in steps of up to 100 ms and so
        // adds most of that per transaction; serving delivery reports here first avoids it.
        let wait_until = Instant::now() + timeout;
        while producer.in_flight_count() > 0 && Instant::now() < wait_until {
            producer.poll(Duration::from_millis(1));
        }
        // commit_transaction flushes: every record is acknowledged when it returns.
        producer.commit_transaction(timeout)?;
        transactions += 1;
        records += args.records as u64;
    }
    let elapsed = start.elapsed();
    Ok(TxnFigures {
        transactions,
        records,
        bytes: records * args.size as u64,
        elapsed,
    })
}

/// The idempotent producer flat out for the same time, records and partitions.
pub(crate) fn run_idempotent(bootstrap: &str, args: &TxnArgs) -> anyhow::Result<TxnFigures> {
    let producer: ThreadedProducer<DefaultProducerContext> =
        config(bootstrap, None, &args.settings).create()?;
    let payload = vec![b'i'; args.size];
    let start = Instant::now();
    let deadline = start + Duration::from_secs(args.seconds);
    let mut sent = 0u64;
    while Instant::now() < deadline {
        let partition = (sent % args.partitions.max(1) as u64) as i32;
        match producer.send::<(), [u8]>(
            BaseRecord::to(&args.topic)
                .payload(payload.as_slice())
                .partition(partition),
        ) {
            Ok(()) => sent += 1,
            Err(_) => std::thread::sleep(Duration::from_micros(200)),
        }
    }
    producer.flush(Duration::from_secs(60))?;
    let elapsed = start.elapsed();
    Ok(TxnFigures {
        transactions: 0,
        records: sent,
        bytes: sent * args.size as u64,
        elapsed,
    })
}
