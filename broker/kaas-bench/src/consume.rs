//! Consume load: read a topic from the beginning with default consumer settings.

use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::config::FromClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

use crate::report::Row;

#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ConsumeArgs {
    #[arg(long)]
    pub(crate) topic: String,
    #[arg(long, default_value_t = 1)]
    pub(crate) partitions: i32,
    /// Stop after this many messages [default: everything up to the current end].
    #[arg(long)]
    pub(crate) messages: Option<u64>,
    /// Extra librdkafka consumer settings, `key=value` (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub(crate) settings: Vec<String>,
}

#[derive(Debug)]
pub(crate) struct ConsumeFigures {
    messages: u64,
    bytes: u64,
    elapsed: Duration,
}

impl ConsumeFigures {
    pub(crate) fn row(&self, name: &str) -> Row {
        Row::throughput(name, self.bytes, self.messages, self.elapsed)
    }
}

pub(crate) fn run(bootstrap: &str, args: &ConsumeArgs) -> anyhow::Result<ConsumeFigures> {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", bootstrap).set("group.id", "kaas-bench").set("enable.auto.commit", "false");
    crate::report::apply_settings(&mut config, &args.settings);
    let consumer = BaseConsumer::from_config(&config)?;
    let mut tpl = TopicPartitionList::new();
    let mut target = 0u64;
    for p in 0..args.partitions {
        tpl.add_partition_offset(&args.topic, p, Offset::Beginning)?;
        let (low, high) = consumer.fetch_watermarks(&args.topic, p, Duration::from_secs(30))?;
        target += (high - low).max(0) as u64;
    }
    let target = args.messages.unwrap_or(target);
    consumer.assign(&tpl)?;
    let start = Instant::now();
    let (mut messages, mut bytes) = (0u64, 0u64);
    let idle_limit = Duration::from_secs(10);
    let mut last_progress = Instant::now();
    while messages < target {
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                messages += 1;
                bytes += m.payload_len() as u64;
                last_progress = Instant::now();
            }
            Some(Err(e)) => anyhow::bail!("consume failed: {e}"),
            None if last_progress.elapsed() > idle_limit => anyhow::bail!("no progress for 10 s at {messages}/{target}"),
            None => {}
        }
    }
    Ok(ConsumeFigures { messages, bytes, elapsed: start.elapsed() })
}
