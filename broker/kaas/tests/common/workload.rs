//! The workload and checker shared by the cluster tests and the fault campaign: topics through
//! the admin API, an idempotent acks=all producer, a full read-back, and the no-loss check.
#![allow(dead_code, unreachable_pub)]

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

use super::TestResult;
use super::cluster::Cluster;


/// Creates a topic through the admin API. Like an application, it retries a request that timed
/// out (on a fresh client); a retry that finds the topic created means the first one worked.
pub async fn create_topic(cluster: &Cluster, name: &str, partitions: i32) -> TestResult {
    for attempt in 1..=3 {
        let admin: AdminClient<DefaultClientContext> = cluster.client_config().create()?;
        let results = match admin.create_topics([&NewTopic::new(name, partitions, TopicReplication::Fixed(1))], &AdminOptions::new()).await {
            Err(rdkafka::error::KafkaError::AdminOp(rdkafka::types::RDKafkaErrorCode::OperationTimedOut)) if attempt < 3 => continue,
            other => other?,
        };
        for r in results {
            match r {
                Ok(_) => {}
                Err((_, rdkafka::types::RDKafkaErrorCode::TopicAlreadyExists)) if attempt > 1 => {}
                Err((t, e)) => return Err(format!("creating {t}: {e}").into()),
            }
        }
        return Ok(());
    }
    Err(format!("creating {name}: every attempt timed out").into())
}

pub fn producer(cluster: &Cluster) -> TestResult<FutureProducer> {
    Ok(cluster
        .client_config()
        .set("enable.idempotence", "true")
        .set("message.timeout.ms", "60000")
        .set("linger.ms", "2")
        .create()?)
}

/// Produces `count` records round-robin over `partitions`; returns partition → acked values.
pub async fn produce(p: &FutureProducer, topic: &str, partitions: i32, tag: &str, count: usize) -> TestResult<BTreeMap<i32, Vec<(i64, String)>>> {
    let mut pending = Vec::new();
    for i in 0..count {
        let partition = (i as i32) % partitions;
        let value = format!("{tag}-{i}");
        let f = p.send_result(FutureRecord::<(), String>::to(topic).partition(partition).payload(&value)).map_err(|(e, _)| e)?;
        pending.push((partition, value, f));
    }
    let mut acked: BTreeMap<i32, Vec<(i64, String)>> = BTreeMap::new();
    for (partition, value, f) in pending {
        let delivery = f.await?.map_err(|(e, _)| e)?;
        acked.entry(partition).or_default().push((delivery.offset, value));
    }
    Ok(acked)
}

/// Reads every partition from the beginning up to its high watermark.
pub fn read_all(cluster: &Cluster, topic: &str, partitions: i32) -> TestResult<BTreeMap<i32, Vec<(i64, String)>>> {
    let consumer: BaseConsumer = cluster.client_config().set("group.id", "cluster-tests").set("enable.auto.commit", "false").create()?;
    let mut out = BTreeMap::new();
    for p in 0..partitions {
        let (_, high) = consumer.fetch_watermarks(topic, p, Duration::from_secs(20))?;
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(topic, p, Offset::Beginning)?;
        consumer.assign(&tpl)?;
        let mut got = Vec::new();
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while (got.len() as i64) < high {
            if std::time::Instant::now() > deadline {
                return Err(format!("{topic}/{p}: read {} of {high}", got.len()).into());
            }
            if let Some(m) = consumer.poll(Duration::from_millis(200)) {
                let m = m?;
                got.push((m.offset(), String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned()));
            }
        }
        out.insert(p, got);
    }
    Ok(out)
}

/// Every acknowledged record is in the log at its acknowledged offset, once, in order.
pub fn assert_no_loss(acked: &[BTreeMap<i32, Vec<(i64, String)>>], log: &BTreeMap<i32, Vec<(i64, String)>>) {
    for batch in acked {
        for (partition, records) in batch {
            let on_disk: BTreeMap<i64, &String> = log.get(partition).map(|v| v.iter().map(|(o, s)| (*o, s)).collect()).unwrap_or_default();
            for (offset, value) in records {
                assert_eq!(on_disk.get(offset), Some(&value), "acknowledged {partition}@{offset} = {value} is missing or different");
            }
        }
    }
    for (partition, records) in log {
        let values: BTreeSet<&String> = records.iter().map(|(_, v)| v).collect();
        assert_eq!(values.len(), records.len(), "partition {partition} has duplicates");
        assert!(records.windows(2).all(|w| w[1].0 == w[0].0 + 1), "partition {partition} offsets are not dense");
    }
}

