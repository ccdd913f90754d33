//! Fetch: whole batches straight from the log, long-polled on high-watermark changes, with
//! KIP-227 incremental sessions.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::future::select_all;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::fetch_response::{AbortedTransaction, FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::{BrokerId, FetchRequest, FetchResponse, ProducerId};
use kaas_storage::{AbortedTxn, Partition};
use tokio::sync::watch;
use tokio::time::Instant;
use uuid::Uuid;

use super::{check_leader_epoch, topic_name};
use crate::broker::Broker;
use crate::fetch_session::{FetchPosition, LastSent, PartitionKey, SessionPlan, TopicKey};
use crate::router::{Reply, RequestContext};

/// One partition to serve, resolved against the topic registry once per request.
struct Target {
    key: PartitionKey,
    position: FetchPosition,
    topic: Option<(String, Uuid)>,
    partition: Result<Arc<Partition>, ResponseError>,
}

/// What one read of one partition found.
struct Found {
    records: Bytes,
    /// read_committed: aborted transactions overlapping `records`.
    aborted: Vec<AbortedTxn>,
    state: LastSent,
    error: Option<ResponseError>,
}

pub async fn handle(broker: &Arc<Broker>, ctx: &RequestContext, request: FetchRequest) -> Reply<FetchResponse> {
    let by_id = ctx.version >= 13;
    let version = ctx.version;
    let key_of = |name: &str, id: Uuid| if by_id { TopicKey::Id(id) } else { TopicKey::Name(name.to_string()) };
    let requested = request
        .topics
        .iter()
        .flat_map(|t| {
            let topic = key_of(&t.topic.0, t.topic_id);
            t.partitions.iter().map(move |p| {
                let key = PartitionKey { topic: topic.clone(), partition: p.partition };
                let position = FetchPosition {
                    fetch_offset: p.fetch_offset,
                    max_bytes: p.partition_max_bytes,
                    current_leader_epoch: p.current_leader_epoch,
                };
                (key, position)
            })
        })
        .collect();
    let forgotten = request
        .forgotten_topics_data
        .iter()
        .flat_map(|t| {
            let topic = key_of(&t.topic.0, t.topic_id);
            t.partitions.iter().map(move |&partition| PartitionKey { topic: topic.clone(), partition })
        })
        .collect();
    let (plan, serve) = match broker.fetch_sessions.begin(request.session_id, request.session_epoch, requested, forgotten) {
        Ok(ok) => ok,
        Err(error) => return Reply::Now(FetchResponse::default().with_error_code(error.code())),
    };
    let targets: Vec<Target> = serve.into_iter().map(|(key, position)| resolve(broker, key, position, by_id)).collect();
    let wait = Duration::from_millis(u64::try_from(request.max_wait_ms).unwrap_or(0));
    let limits = Limits {
        deadline: Instant::now() + wait,
        min_bytes: usize::try_from(request.min_bytes).unwrap_or(0),
        max_bytes: usize::try_from(request.max_bytes).unwrap_or(0),
        read_committed: request.isolation_level == 1,
    };
    let broker = broker.clone();
    Reply::Later(Box::pin(async move {
        let found = long_poll(&targets, &limits).await;
        let response = respond(&broker, &plan, targets, found, by_id, limits.read_committed);
        // Sessions exist from v7; the codec refuses a session id below that.
        if version < 7 { response.with_session_id(0) } else { response }
    }))
}

struct Limits {
    deadline: Instant,
    min_bytes: usize,
    max_bytes: usize,
    read_committed: bool,
}

fn resolve(broker: &Broker, key: PartitionKey, position: FetchPosition, by_id: bool) -> Target {
    let topic = match &key.topic {
        TopicKey::Name(name) => broker.topics.get(name),
        TopicKey::Id(id) => broker.topics.get_by_id(id),
    };
    let unknown = if by_id { ResponseError::UnknownTopicId } else { ResponseError::UnknownTopicOrPartition };
    let partition = match &topic {
        None => Err(unknown),
        Some(t) => super::led_partition(broker, &t.name, key.partition).and_then(|led| {
            check_leader_epoch(led.epoch, position.current_leader_epoch)?;
            Ok(led.partition)
        }),
    };
    Target { key, position, topic: topic.map(|t| (t.name.clone(), t.id)), partition }
}

/// Reads until `min_bytes` are available, an error shows up, or the deadline passes; waits on
/// high-watermark changes in between, never on a timer loop.
async fn long_poll(targets: &[Target], limits: &Limits) -> Vec<Found> {
    let mut watches: Vec<watch::Receiver<i64>> =
        targets.iter().filter_map(|t| t.partition.as_ref().ok().map(|p| p.watch_high_watermark())).collect();
    loop {
        // Mark the current values seen before reading, so an append after the read wakes us.
        for w in &mut watches {
            w.borrow_and_update();
        }
        let found = read_round(targets, limits);
        let bytes: usize = found.iter().map(|f| f.records.len()).sum();
        let errors = found.iter().any(|f| f.error.is_some());
        if bytes >= limits.min_bytes.max(1) || errors || Instant::now() >= limits.deadline {
            return found;
        }
        if watches.is_empty() {
            tokio::time::sleep_until(limits.deadline).await;
            return read_round(targets, limits);
        }
        let closed = {
            let changed = select_all(watches.iter_mut().map(|w| Box::pin(w.changed())));
            tokio::select! {
                _ = tokio::time::sleep_until(limits.deadline) => return read_round(targets, limits),
                (result, index, _) = changed => result.is_err().then_some(index),
            }
        };
        // A closed watch means the partition went away; the next read reports it.
        if let Some(index) = closed {
            watches.swap_remove(index);
        }
    }
}

fn read_round(targets: &[Target], limits: &Limits) -> Vec<Found> {
    let mut budget = limits.max_bytes;
    let mut total = 0usize;
    targets
        .iter()
        .map(|t| {
            let partition = match &t.partition {
                Ok(p) => p,
                Err(e) => return Found { records: Bytes::new(), aborted: Vec::new(), state: unknown_state(), error: Some(*e) },
            };
            let state = LastSent {
                high_watermark: partition.high_watermark(),
                last_stable_offset: partition.last_stable_offset(),
                log_start_offset: partition.log_start_offset(),
            };
            let partition_max = usize::try_from(t.position.max_bytes).unwrap_or(0);
            // KIP-74: the first partition with data may exceed the limits by one batch; after
            // that the response budget is strict.
            if total > 0 && budget == 0 {
                return Found { records: Bytes::new(), aborted: Vec::new(), state, error: None };
            }
            let (offset, max) = (t.position.fetch_offset, partition_max.min(budget.max(1)));
            let read = if limits.read_committed { partition.read_committed(offset, max) } else { partition.read(offset, max) };
            match read {
                Ok(read) => {
                    total += read.records.len();
                    budget = budget.saturating_sub(read.records.len());
                    let state = LastSent {
                        high_watermark: read.high_watermark,
                        last_stable_offset: read.last_stable_offset,
                        log_start_offset: read.log_start_offset,
                    };
                    Found { records: read.records, aborted: read.aborted_transactions, state, error: None }
                }
                Err(e) => Found { records: Bytes::new(), aborted: Vec::new(), state, error: Some(super::storage_error(e)) },
            }
        })
        .collect()
}

fn unknown_state() -> LastSent {
    LastSent { high_watermark: -1, last_stable_offset: -1, log_start_offset: -1 }
}

fn respond(broker: &Broker, plan: &SessionPlan, targets: Vec<Target>, found: Vec<Found>, by_id: bool, read_committed: bool) -> FetchResponse {
    let mut topics: Vec<FetchableTopicResponse> = Vec::new();
    for (target, found) in targets.into_iter().zip(found) {
        let include = match plan {
            SessionPlan::Sessionless => true,
            SessionPlan::Full { session_id } => {
                broker.fetch_sessions.note_sent(*session_id, &target.key, found.state, true, true);
                true
            }
            SessionPlan::Incremental { session_id } => broker.fetch_sessions.note_sent(
                *session_id,
                &target.key,
                found.state,
                !found.records.is_empty(),
                found.error.is_some(),
            ),
        };
        if !include {
            continue;
        }
        let partition = PartitionData::default()
            .with_partition_index(target.key.partition)
            .with_error_code(found.error.map_or(0, |e| e.code()))
            .with_high_watermark(found.state.high_watermark)
            .with_last_stable_offset(found.state.last_stable_offset)
            .with_log_start_offset(found.state.log_start_offset)
            .with_aborted_transactions(read_committed.then(|| {
                found.aborted.iter().map(|a| AbortedTransaction::default().with_producer_id(ProducerId(a.producer_id)).with_first_offset(a.first_offset)).collect()
            }))
            .with_preferred_read_replica(BrokerId(-1))
            .with_records(Some(found.records));
        let (name, id) = match (&target.topic, &target.key.topic) {
            (Some((name, id)), _) => (name.clone(), *id),
            (None, TopicKey::Name(name)) => (name.clone(), Uuid::nil()),
            (None, TopicKey::Id(id)) => (String::new(), *id),
        };
        let same_topic = topics.last().is_some_and(|t| if by_id { t.topic_id == id } else { t.topic.0.as_str() == name });
        if !same_topic {
            topics.push(FetchableTopicResponse::default().with_topic(topic_name(name)).with_topic_id(id));
        }
        if let Some(last) = topics.last_mut() {
            last.partitions.push(partition);
        }
    }
    FetchResponse::default().with_session_id(plan.session_id()).with_responses(topics)
}
