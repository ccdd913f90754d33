//! Fetch: whole batches straight from the log, long-polled on high-watermark changes, with
//! KIP-227 incremental sessions.
//!
//! What one request can cost is bounded (issue #15): topic names are validated before any key
//! is built and shared by the topic's partitions, a request names at most
//! `fetch.max.partitions` partitions, a response carries at most `fetch.max.bytes` of records
//! (plus, by KIP-74, one first batch of at most `max.message.bytes`), a long poll waits at most
//! `fetch.max.wait.ms` and ends when its connection closes. Reads that touch the volume run on
//! blocking threads, at most [`MAX_CONCURRENT_READS`] at once, so a slow volume stalls fetches,
//! never the runtime (whose heartbeat keeps the broker unfenced).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures::future::select_all;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::fetch_response::{AbortedTransaction, FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::{BrokerId, FetchRequest, FetchResponse, ProducerId, TopicName};
use kaas_storage::{AbortedTxn, Partition, ReadBound};
use tokio::sync::{Semaphore, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::access::{Op, Resource};
use super::quota_use::QuotaSubject;
use super::{check_leader_epoch, topic_name};
use crate::broker::Broker;
use crate::quota::model::QuotaKey;
use crate::config::StorageMode;
use crate::fetch_session::{FetchPosition, LastSent, PartitionKey, Serve, SessionLimits, SessionPlan, SessionRequest, TopicKey};
use crate::router::{Reply, RequestContext};
use crate::topics::Topic;

/// The fetch path's bounds (broker settings).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchConfig {
    /// `fetch.max.bytes`: record bytes in one response at most, whatever the client asks for.
    pub max_bytes: usize,
    /// kaas-specific: the longest a Fetch waits for `min_bytes`, whatever the client asks for.
    pub max_wait: Duration,
    /// The session cache, and the partitions one request (or session) may name.
    pub sessions: SessionLimits,
    /// kaas-specific: send record sets of plain-TCP fetches from the page cache to the socket
    /// by splice instead of copying them through the broker (see `kaas_storage::piped`).
    pub zero_copy: bool,
}

impl Default for FetchConfig {
    /// Kafka's `fetch.max.bytes` (55 MiB). 30 s of waiting is Kafka clients' default
    /// `request.timeout.ms`: a client waits no longer for any answer, so a longer long poll
    /// only holds memory for a request its client has given up on.
    fn default() -> FetchConfig {
        FetchConfig { max_bytes: 57_671_680, max_wait: Duration::from_secs(30), sessions: SessionLimits::default(), zero_copy: true }
    }
}

/// Reads of the volume in flight at once. Each holds a blocking thread and up to a response's
/// worth of buffer; the bound keeps a stalled volume from taking every blocking thread (fsyncs
/// and housekeeping share the pool) while leaving NFS enough requests in flight to stream.
pub const MAX_CONCURRENT_READS: usize = 32;

/// The fetch path's shared state.
#[derive(Debug)]
pub struct Fetches {
    reads: Arc<Semaphore>,
    in_flight: AtomicUsize,
}

impl Default for Fetches {
    fn default() -> Fetches {
        Fetches { reads: Arc::new(Semaphore::new(MAX_CONCURRENT_READS)), in_flight: AtomicUsize::new(0) }
    }
}

impl Fetches {
    /// Fetch requests being read or waiting for data (`kaas_fetch_requests_in_flight`).
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }

    fn track(&self) -> InFlight<'_> {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight(&self.in_flight)
    }
}

/// Counts one fetch in flight until dropped (also when its future is dropped).
struct InFlight<'a>(&'a AtomicUsize);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// One partition to serve, resolved against the topic registry once per request.
struct Target {
    key: PartitionKey,
    position: FetchPosition,
    topic: Option<Arc<Topic>>,
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

impl Found {
    fn empty(state: LastSent) -> Found {
        Found { records: Bytes::new(), aborted: Vec::new(), state, error: None }
    }

    fn failed(error: ResponseError) -> Found {
        Found { records: Bytes::new(), aborted: Vec::new(), state: unknown_state(), error: Some(error) }
    }
}

/// A request's partitions, keyed, with the topics whose names cannot exist set apart.
struct Keyed {
    requested: Serve,
    forgotten: Vec<PartitionKey>,
    /// Topics with illegal names, as the request spelled them, and their partitions: answered
    /// UNKNOWN_TOPIC_OR_PARTITION as Kafka does, and kept out of sessions.
    rejected: Vec<(TopicName, Vec<i32>)>,
}

#[derive(Clone)]
struct Limits {
    deadline: Instant,
    min_bytes: usize,
    /// The response's record bytes: the client's `max_bytes`, at most `fetch.max.bytes`.
    max_bytes: usize,
    read_committed: bool,
    /// Whether reads touch files (not the in-memory engine) and belong on blocking threads.
    blocking: bool,
    /// Whether large record sets may come in pipes (the connection's writer splices them).
    piped: bool,
}

pub async fn handle(broker: &Arc<Broker>, ctx: &RequestContext, request: FetchRequest) -> Reply<FetchResponse> {
    let config = &broker.config.fetch;
    let (by_id, version) = (ctx.version >= 13, ctx.version);
    let named = partitions_named(&request);
    if named > config.sessions.max_partitions {
        tracing::warn!(peer = %ctx.peer, partitions = named, max = config.sessions.max_partitions, "refusing a Fetch that names more partitions than fetch.max.partitions");
        return Reply::Now(too_many_partitions(version));
    }
    let keyed = keyed(&request, by_id);
    let session = SessionRequest { owner: ctx.peer, session_id: request.session_id, epoch: request.session_epoch };
    let (plan, serve) = match broker.fetch_sessions.begin(&config.sessions, session, keyed.requested, keyed.forgotten) {
        Ok(ok) => ok,
        Err(error) => return Reply::Now(FetchResponse::default().with_error_code(error.code())),
    };
    let targets: Arc<[Target]> = serve.into_iter().map(|(key, position)| resolve(broker, ctx, key, position, by_id)).collect();
    let mut limits = limits(broker, ctx, &request);
    let quota = QuotaSubject::of(ctx);
    if let Some(most) = quota.max_in_window(broker, QuotaKey::ConsumerByteRate) {
        // Kafka's bound too: one answer never carries more than the quota's whole window.
        limits.max_bytes = limits.max_bytes.min(most);
    }
    let (broker, closed, rejected, owner) = (broker.clone(), ctx.closed.clone(), keyed.rejected, ctx.peer);
    Reply::Later(Box::pin(async move {
        let found = long_poll(&broker.fetches, &targets, &limits, &closed).await;
        let answer = Answer { plan: &plan, owner, by_id, read_committed: limits.read_committed };
        let response = respond(&broker, &answer, &targets, found, rejected);
        // The answer is sent whole; a client it takes over consumer_byte_rate waits before the next.
        let response = match broker.quotas.in_use(QuotaKey::ConsumerByteRate) {
            false => response,
            true => {
                let sent: usize = response.responses.iter().flat_map(|t| &t.partitions).map(|p| p.records.as_ref().map_or(0, Bytes::len)).sum();
                let throttle_ms = quota.record(&broker, QuotaKey::ConsumerByteRate, sent as f64);
                response.with_throttle_time_ms(throttle_ms)
            }
        };
        // Sessions exist from v7; the codec refuses a session id below that.
        if version < 7 { response.with_session_id(0) } else { response }
    }))
}

/// Partitions a request names, fetched or forgotten.
fn partitions_named(request: &FetchRequest) -> usize {
    let fetched: usize = request.topics.iter().map(|t| t.partitions.len()).sum();
    let forgotten: usize = request.forgotten_topics_data.iter().map(|t| t.partitions.len()).sum();
    fetched.saturating_add(forgotten)
}

/// The answer to a request over `fetch.max.partitions`: INVALID_REQUEST at the top level (v7+).
/// NB: v4–6 responses have no top-level error code, so those get an empty answer (and the
/// broker's log says why); only pre-2018 clients speak them.
fn too_many_partitions(version: i16) -> FetchResponse {
    let response = FetchResponse::default();
    if version >= 7 { response.with_error_code(ResponseError::InvalidRequest.code()) } else { response }
}

/// The request's partitions as session keys. A topic's name is checked once and shared by its
/// partitions' keys: a 1 MiB name for 1,000 partitions is one string, not 1,000 copies.
fn keyed(request: &FetchRequest, by_id: bool) -> Keyed {
    let mut keyed = Keyed { requested: Vec::new(), forgotten: Vec::new(), rejected: Vec::new() };
    for t in &request.topics {
        let Some(topic) = topic_key(&t.topic, t.topic_id, by_id) else {
            keyed.rejected.push((t.topic.clone(), t.partitions.iter().map(|p| p.partition).collect()));
            continue;
        };
        keyed.requested.extend(t.partitions.iter().map(|p| {
            let key = PartitionKey { topic: topic.clone(), partition: p.partition };
            let position = FetchPosition { fetch_offset: p.fetch_offset, max_bytes: p.partition_max_bytes, current_leader_epoch: p.current_leader_epoch };
            (key, position)
        }));
    }
    for t in &request.forgotten_topics_data {
        // A forgotten topic with an illegal name cannot be in any session: nothing to forget.
        if let Some(topic) = topic_key(&t.topic, t.topic_id, by_id) {
            keyed.forgotten.extend(t.partitions.iter().map(|&partition| PartitionKey { topic: topic.clone(), partition }));
        }
    }
    keyed
}

/// The key of a topic as the request names it; `None` for a name no topic can have.
fn topic_key(name: &TopicName, id: Uuid, by_id: bool) -> Option<TopicKey> {
    if by_id {
        return Some(TopicKey::Id(id));
    }
    let name: &str = name.0.as_str();
    legal_topic_name(name).then(|| TopicKey::Name(Arc::from(name)))
}

/// Kafka's topic name rules (no topic with another name can exist). The length is checked
/// first, so a huge name costs nothing more.
fn legal_topic_name(name: &str) -> bool {
    name.len() <= 249 && crate::topics::validate_topic_name(name).is_ok()
}

fn limits(broker: &Broker, ctx: &RequestContext, request: &FetchRequest) -> Limits {
    let config = &broker.config.fetch;
    let wait = Duration::from_millis(u64::try_from(request.max_wait_ms).unwrap_or(0)).min(config.max_wait);
    Limits {
        deadline: Instant::now() + wait,
        min_bytes: usize::try_from(request.min_bytes).unwrap_or(0),
        max_bytes: usize::try_from(request.max_bytes).unwrap_or(0).min(config.max_bytes),
        read_committed: request.isolation_level == 1,
        blocking: !matches!(broker.config.storage, StorageMode::InMemory),
        piped: broker.config.fetch.zero_copy && crate::connection::splices(broker, ctx.listener),
    }
}

fn resolve(broker: &Broker, ctx: &RequestContext, key: PartitionKey, position: FetchPosition, by_id: bool) -> Target {
    let topic = match &key.topic {
        TopicKey::Name(name) => broker.topics.get(name),
        TopicKey::Id(id) => broker.topics.get_by_id(id),
    };
    let unknown = if by_id { ResponseError::UnknownTopicId } else { ResponseError::UnknownTopicOrPartition };
    // Kafka: READ on the topic, asked by name (so a name the principal may not read is
    // refused whether or not it exists); an unknown topic id stays UNKNOWN_TOPIC_ID.
    let readable = |name: &str| super::access::check(broker, ctx, Op::Read, Resource::Topic, name);
    let refused = match (&key.topic, &topic) {
        (TopicKey::Name(name), _) => readable(name).err(),
        (TopicKey::Id(_), Some(t)) => readable(&t.name).err(),
        (TopicKey::Id(_), None) => None,
    };
    let partition = match (refused, &topic) {
        (Some(e), _) => Err(e),
        (None, None) => Err(unknown),
        (None, Some(t)) => super::led_partition(broker, &t.name, key.partition).and_then(|led| {
            check_leader_epoch(led.epoch, position.current_leader_epoch)?;
            Ok(led.partition)
        }),
    };
    Target { key, position, topic, partition }
}

/// Why a long poll stopped waiting.
enum Wake {
    /// A high watermark moved; `Some(i)` if watch `i` closed (its partition went away).
    Changed(Option<usize>),
    Deadline,
    /// The connection closed (or the broker is shutting down): nobody waits for the answer.
    Closed,
}

/// Reads until `min_bytes` are available, an error shows up, the deadline passes or the
/// connection closes; waits on high-watermark changes in between, never on a timer loop.
async fn long_poll(fetches: &Fetches, targets: &Arc<[Target]>, limits: &Limits, closed: &CancellationToken) -> Vec<Found> {
    let _in_flight = fetches.track();
    let mut watches: Vec<watch::Receiver<i64>> =
        targets.iter().filter_map(|t| t.partition.as_ref().ok().map(|p| p.watch_high_watermark())).collect();
    loop {
        // Mark the current values seen before reading, so an append after the read wakes us.
        for w in &mut watches {
            w.borrow_and_update();
        }
        let found = read_round(fetches, targets, limits).await;
        let bytes: usize = found.iter().map(|f| f.records.len()).sum();
        let errors = found.iter().any(|f| f.error.is_some());
        if bytes >= limits.min_bytes.max(1) || errors || Instant::now() >= limits.deadline || closed.is_cancelled() {
            return found;
        }
        match wait(&mut watches, limits.deadline, closed).await {
            Wake::Deadline => return read_round(fetches, targets, limits).await,
            Wake::Closed => return found,
            // A closed watch means the partition went away; the next read reports it.
            Wake::Changed(Some(index)) => drop(watches.swap_remove(index)),
            Wake::Changed(None) => {}
        }
    }
}

async fn wait(watches: &mut [watch::Receiver<i64>], deadline: Instant, closed: &CancellationToken) -> Wake {
    if watches.is_empty() {
        return tokio::select! {
            _ = tokio::time::sleep_until(deadline) => Wake::Deadline,
            _ = closed.cancelled() => Wake::Closed,
        };
    }
    let changed = select_all(watches.iter_mut().map(|w| Box::pin(w.changed())));
    tokio::select! {
        _ = tokio::time::sleep_until(deadline) => Wake::Deadline,
        _ = closed.cancelled() => Wake::Closed,
        (result, index, _) = changed => Wake::Changed(result.is_err().then_some(index)),
    }
}

/// One read of every target. Answered in place when no target has anything to read (the common
/// case of a caught-up consumer's long poll: every answer comes from in-memory state, no file
/// is touched); otherwise on a blocking thread, since a read on NFS can take as long as the
/// volume likes. NB: data may well be in the page cache, but nothing cheap tells, and one
/// stalled read on a runtime thread is what fences a broker.
async fn read_round(fetches: &Fetches, targets: &Arc<[Target]>, limits: &Limits) -> Vec<Found> {
    if !limits.blocking {
        return read_all(targets, limits);
    }
    if let Some(found) = targets.iter().map(|t| nothing_to_read(t, limits.read_committed)).collect::<Option<Vec<Found>>>() {
        return found;
    }
    // The permit moves into the read: it is released when the read ends, even if this fetch
    // was dropped meanwhile, so it counts reads actually holding a thread.
    let Ok(permit) = fetches.reads.clone().acquire_owned().await else {
        return targets.iter().map(|_| Found::failed(ResponseError::UnknownServerError)).collect();
    };
    let (targets, limits) = (targets.clone(), limits.clone());
    let count = targets.len();
    let read = tokio::task::spawn_blocking(move || {
        let _permit = permit;
        read_all(&targets, &limits)
    });
    match read.await {
        Ok(found) => found,
        Err(e) => {
            tracing::error!(error = %e, "a fetch read failed");
            (0..count).map(|_| Found::failed(ResponseError::UnknownServerError)).collect()
        }
    }
}

/// The answer for a target that needs no read: an error found while resolving it, or a
/// partition it is caught up with. `None` when only a read can answer (there may be data, the
/// offset may be out of range, leadership may have changed).
fn nothing_to_read(target: &Target, committed: bool) -> Option<Found> {
    let partition = match &target.partition {
        Ok(p) => p,
        Err(e) => return Some(Found::failed(*e)),
    };
    if !partition.is_leader() {
        return None;
    }
    let state = state_of(partition);
    let offset = target.position.fetch_offset;
    let bound = if committed { state.last_stable_offset } else { state.high_watermark };
    (offset >= state.log_start_offset && offset >= bound && offset <= state.high_watermark).then(|| Found::empty(state))
}

fn read_all(targets: &[Target], limits: &Limits) -> Vec<Found> {
    let mut budget = limits.max_bytes;
    let mut total = 0usize;
    targets
        .iter()
        .map(|t| {
            let found = read_one(t, limits, budget, total == 0);
            total += found.records.len();
            budget = budget.saturating_sub(found.records.len());
            found
        })
        .collect()
}

/// Reads one partition within `budget`. KIP-74: until some partition returned data (`first`),
/// a batch larger than the limits is still returned whole, so a consumer always progresses;
/// after that the response budget is strict.
fn read_one(target: &Target, limits: &Limits, budget: usize, first: bool) -> Found {
    let (committed, piped) = (limits.read_committed, limits.piped);
    let partition = match &target.partition {
        Ok(p) => p,
        Err(e) => return Found::failed(*e),
    };
    if !first && budget == 0 {
        return Found::empty(state_of(partition));
    }
    let partition_max = usize::try_from(target.position.max_bytes).unwrap_or(0);
    let bound = ReadBound { max_bytes: partition_max.min(budget), first_batch_whole: first, piped };
    match partition.read_bounded(target.position.fetch_offset, bound, committed) {
        Ok(read) => {
            let state = LastSent { high_watermark: read.high_watermark, last_stable_offset: read.last_stable_offset, log_start_offset: read.log_start_offset };
            Found { records: read.records, aborted: read.aborted_transactions, state, error: None }
        }
        Err(e) => Found { error: Some(super::storage_error(e)), ..Found::empty(state_of(partition)) },
    }
}

fn state_of(partition: &Partition) -> LastSent {
    LastSent {
        high_watermark: partition.high_watermark(),
        last_stable_offset: partition.last_stable_offset(),
        log_start_offset: partition.log_start_offset(),
    }
}

fn unknown_state() -> LastSent {
    LastSent { high_watermark: -1, last_stable_offset: -1, log_start_offset: -1 }
}

/// How the response is built.
struct Answer<'a> {
    plan: &'a SessionPlan,
    /// The connection the request came on (the session's owner).
    owner: std::net::SocketAddr,
    by_id: bool,
    read_committed: bool,
}

fn respond(broker: &Broker, answer: &Answer<'_>, targets: &[Target], found: Vec<Found>, rejected: Vec<(TopicName, Vec<i32>)>) -> FetchResponse {
    let mut topics: Vec<FetchableTopicResponse> = Vec::new();
    for (target, found) in targets.iter().zip(found) {
        if !included(broker, answer, target, &found) {
            continue;
        }
        if let Some(topic) = &target.topic {
            broker.metrics.sent(&topic.name, found.records.len());
        }
        let partition = partition_data(target.key.partition, &found, answer.read_committed);
        let (name, id): (&str, Uuid) = match (&target.topic, &target.key.topic) {
            (Some(topic), _) => (&topic.name, topic.id),
            (None, TopicKey::Name(name)) => (name, Uuid::nil()),
            (None, TopicKey::Id(id)) => ("", *id),
        };
        let same_topic = topics.last().is_some_and(|t| if answer.by_id { t.topic_id == id } else { t.topic.0.as_str() == name });
        if !same_topic {
            topics.push(FetchableTopicResponse::default().with_topic(topic_name(name)).with_topic_id(id));
        }
        if let Some(last) = topics.last_mut() {
            last.partitions.push(partition);
        }
    }
    for (name, partitions) in rejected {
        let unknown = Found::failed(ResponseError::UnknownTopicOrPartition);
        let partitions = partitions.into_iter().map(|p| partition_data(p, &unknown, answer.read_committed)).collect();
        // The request's own bytes echo the name back: no copy of a possibly huge string.
        topics.push(FetchableTopicResponse::default().with_topic(name).with_partitions(partitions));
    }
    FetchResponse::default().with_session_id(answer.plan.session_id()).with_responses(topics)
}

/// Whether the answer carries this partition (an incremental answer only carries news); records
/// what was sent in the session.
fn included(broker: &Broker, answer: &Answer<'_>, target: &Target, found: &Found) -> bool {
    let sessions = &broker.fetch_sessions;
    match answer.plan {
        SessionPlan::Sessionless => true,
        SessionPlan::Full { session_id } => {
            sessions.note_sent(answer.owner, *session_id, &target.key, found.state, true, true);
            true
        }
        SessionPlan::Incremental { session_id } => {
            sessions.note_sent(answer.owner, *session_id, &target.key, found.state, !found.records.is_empty(), found.error.is_some())
        }
    }
}

fn partition_data(index: i32, found: &Found, read_committed: bool) -> PartitionData {
    let aborted = read_committed.then(|| {
        found.aborted.iter().map(|a| AbortedTransaction::default().with_producer_id(ProducerId(a.producer_id)).with_first_offset(a.first_offset)).collect()
    });
    PartitionData::default()
        .with_partition_index(index)
        .with_error_code(found.error.map_or(0, |e| e.code()))
        .with_high_watermark(found.state.high_watermark)
        .with_last_stable_offset(found.state.last_stable_offset)
        .with_log_start_offset(found.state.log_start_offset)
        .with_aborted_transactions(aborted)
        .with_preferred_read_replica(BrokerId(-1))
        .with_records(Some(found.records.clone()))
}

#[cfg(test)]
mod tests;
