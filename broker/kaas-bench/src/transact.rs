//! Transactional produce load: back-to-back transactions of a fixed number of records
//! (begin, send, commit), against the idempotent producer's flat-out throughput on the same
//! topic shape, so the cost of transactions shows as a ratio.

use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::producer::DefaultProducerContext;
use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};

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

fn producer(
    bootstrap: &str,
    transactional_id: Option<&str>,
) -> anyhow::Result<ThreadedProducer<DefaultProducerContext>> {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", bootstrap)
        .set("enable.idempotence", "true")
        .set("queue.buffering.max.messages", "200000");
    if let Some(id) = transactional_id {
        config.set("transactional.id", id);
    }
    Ok(config.create()?)
}

/// Back-to-back transactions of `args.records` records, spread round-robin over the partitions.
pub(crate) fn run_transactions(bootstrap: &str, args: &TxnArgs) -> anyhow::Result<TxnFigures> {
    let id = format!("kaas-bench-{}", std::process::id());
    let producer = producer(bootstrap, Some(&id))?;
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
                        std::thread::sleep(Duration::from_micros(200));
                    }
                }
            }
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
    let producer = producer(bootstrap, None)?;
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
