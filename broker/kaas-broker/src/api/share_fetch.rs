//! ShareFetch (KIP-932): in one request a share-group member acknowledges what it processed
//! and is handed the next records of the partitions in its share session, each record to one
//! member at a time under an acquisition lock. Acknowledgements are answered only once the
//! partition's share state holding them is fsynced; deliveries are long-polled like Fetch
//! (woken by appends and by records given back), for at most `fetch.max.wait.ms`.
//!
//! Bounded like Fetch: a response carries at most `fetch.max.bytes` of records and the
//! request's `max_records`; sessions and their partitions are bounded in
//! [`crate::share::sessions`].

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::future::select_all;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::share_fetch_response::{AcquiredRecords, PartitionData, ShareFetchableTopicResponse};
use kafka_protocol::messages::{ShareFetchRequest, ShareFetchResponse};
use kaas_coordinator::share_partition::{Ack, AckBatch};
use tokio::sync::watch;
use tokio::time::Instant;
use uuid::Uuid;

use super::access::{Op, Resource, check};
use super::str_bytes;
use crate::broker::Broker;
use crate::config::StorageMode;
use crate::group_configs::ShareGroupSettings;
use crate::router::{Reply, RequestContext};
use crate::share::partitions::{self, DeliveryBound};
use crate::share::sessions::{Closed, FINAL_EPOCH, INITIAL_EPOCH, SharePartitionKey};

/// Records one response hands out at most when the request does not say (ShareFetch v0
/// clients, and `max_records` of 0).
const DEFAULT_MAX_RECORDS: usize = 500;

/// What a partition's answer carries.
#[derive(Debug, Default)]
pub(crate) struct PartitionOutcome {
    pub(crate) error: Option<ResponseError>,
    /// `Some` when the request acknowledged something in this partition.
    pub(crate) ack: Option<Option<ResponseError>>,
    pub(crate) delivered: partitions::Delivered,
}

pub async fn handle(broker: &Arc<Broker>, ctx: &RequestContext, request: ShareFetchRequest) -> Reply<ShareFetchResponse> {
    let top = |e: ResponseError, message: &str| Reply::Now(ShareFetchResponse::default().with_error_code(e.code()).with_error_message(Some(str_bytes(message))));
    let (group, member) = match share_member(broker, ctx, request.group_id.as_deref().map(|g| g.as_str()), request.member_id.as_deref()) {
        Ok(named) => named,
        Err((e, message)) => return top(e, message),
    };
    let epoch = request.share_session_epoch;
    let acks = match acknowledgements(&request, ctx.version) {
        Ok(acks) => acks,
        Err(message) => return top(ResponseError::InvalidRequest, message),
    };
    if epoch == INITIAL_EPOCH && !acks.is_empty() {
        return top(ResponseError::InvalidRequest, "acknowledgements in a request that opens a share session");
    }
    let named: Vec<SharePartitionKey> = request.topics.iter().flat_map(|t| t.partitions.iter().map(move |p| (t.topic_id, p.partition_index))).collect();
    let forgotten: Vec<SharePartitionKey> = request.forgotten_topics_data.iter().flat_map(|t| t.partitions.iter().map(move |p| (t.topic_id, *p))).collect();
    let begun = match broker.shares.sessions.begin(&group, &member, epoch, ctx.peer, &named, &forgotten) {
        Ok(b) => b,
        Err(e) => return top(e, "share session"),
    };
    if let Some(serial) = begun.opened {
        release_on_close(broker, ctx, &group, &member, serial);
    }
    let settings = broker.group_configs.share_settings(&group);
    let config = &broker.config.fetch;
    let wait = Duration::from_millis(u64::try_from(request.max_wait_ms).unwrap_or(0)).min(config.max_wait);
    let bound = DeliveryBound {
        max_records: usize::try_from(request.max_records).ok().filter(|n| *n > 0).unwrap_or(DEFAULT_MAX_RECORDS),
        max_bytes: usize::try_from(request.max_bytes).unwrap_or(0).min(config.max_bytes),
        first: true,
        blocking: !matches!(broker.config.storage, StorageMode::InMemory),
    };
    // v2 (KIP-1222): a request that renews acquisition locks fetches nothing.
    let renew_only = request.is_renew_ack;
    let (broker, ctx) = (broker.clone(), ctx.clone());
    Reply::Later(Box::pin(async move {
        if let Some(closed) = begun.closed.clone().filter(|_| epoch != FINAL_EPOCH) {
            release(&broker, &closed, &settings).await;
        }
        let mut outcomes: BTreeMap<SharePartitionKey, PartitionOutcome> = BTreeMap::new();
        for (key, result) in apply_acks(&broker, &ctx, &group, &member, &settings, acks).await {
            outcomes.entry(key).or_default().ack = Some(result.err());
        }
        if epoch == FINAL_EPOCH {
            if let Some(closed) = &begun.closed {
                release(&broker, closed, &settings).await;
            }
        } else if !renew_only {
            let deadline = Instant::now() + wait;
            // Each request starts at another partition, so that one with a backlog cannot take
            // every response's budget while the others wait (as Kafka rotates a session's
            // partitions).
            let mut keys = begun.partitions.clone();
            if !keys.is_empty() {
                let first = usize::try_from(epoch.max(0)).unwrap_or(0) % keys.len();
                keys.rotate_left(first);
            }
            for (key, outcome) in long_poll(&broker, &ctx, &group, &member, &settings, &keys, bound, deadline).await {
                let entry = outcomes.entry(key).or_default();
                entry.error = outcome.error;
                entry.delivered = outcome.delivered;
            }
        }
        response(&broker, outcomes, &settings)
    }))
}

/// The group and member a ShareFetch or ShareAcknowledge names (both required), after Kafka's
/// READ check on the group (READ on each topic is checked per partition).
pub(crate) fn share_member(broker: &Broker, ctx: &RequestContext, group: Option<&str>, member: Option<&str>) -> Result<(String, String), (ResponseError, &'static str)> {
    let (group, member) = (group.unwrap_or_default(), member.unwrap_or_default());
    if group.is_empty() || member.is_empty() {
        return Err((ResponseError::InvalidRequest, "GroupId and MemberId are required"));
    }
    check(broker, ctx, Op::Read, Resource::Group, group).map_err(|e| (e, "not authorized to read the group"))?;
    Ok((group.to_owned(), member.to_owned()))
}

/// The request's acknowledgements by partition; an unknown acknowledge type is refused.
fn acknowledgements(request: &ShareFetchRequest, version: i16) -> Result<Vec<(SharePartitionKey, Vec<AckBatch>)>, &'static str> {
    let mut out = Vec::new();
    for t in &request.topics {
        for p in &t.partitions {
            if p.acknowledgement_batches.is_empty() {
                continue;
            }
            let batches = p.acknowledgement_batches.iter().map(|b| ack_batch(b.first_offset, b.last_offset, &b.acknowledge_types, version)).collect::<Result<Vec<_>, _>>()?;
            out.push(((t.topic_id, p.partition_index), batches));
        }
    }
    Ok(out)
}

/// One wire acknowledgement batch (ShareFetch and ShareAcknowledge carry the same shape).
pub(crate) fn ack_batch(first: i64, last: i64, types: &[i8], version: i16) -> Result<AckBatch, &'static str> {
    let types = types
        .iter()
        .map(|t| Ack::from_wire(*t).filter(|a| *a != Ack::Renew || version >= 2).ok_or("unknown acknowledge type"))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(AckBatch { first, last, types })
}

/// Applies acknowledgements partition by partition, then waits until every one that was
/// applied is durable (the partitions' fsyncs run at once, not one after the other).
pub(crate) async fn apply_acks(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    group: &str,
    member: &str,
    settings: &ShareGroupSettings,
    acks: Vec<(SharePartitionKey, Vec<AckBatch>)>,
) -> Vec<(SharePartitionKey, Result<(), ResponseError>)> {
    let mut applied = Vec::with_capacity(acks.len());
    for (key, batches) in acks {
        let appended = async {
            let (log, _) = share_log(broker, ctx, key).await?;
            let seq = partitions::acknowledge(&log, group, member, &batches, settings).await?;
            Ok::<_, ResponseError>((log, seq))
        }
        .await;
        applied.push((key, appended));
    }
    // NB: a release makes records available to members waiting in a long poll.
    broker.shares.released.notify_waiters();
    futures::future::join_all(applied.into_iter().map(|(key, appended)| async move {
        let durable = match appended {
            Ok((log, seq)) => log.wait_durable(seq).await.map_err(|e| if e.not_owner() { ResponseError::NotLeaderOrFollower } else { ResponseError::KafkaStorageError }),
            Err(e) => Err(e),
        };
        (key, durable)
    }))
    .await
}

/// The share log of a partition this broker leads, checked as Fetch checks a partition.
async fn share_log(broker: &Arc<Broker>, ctx: &RequestContext, key: SharePartitionKey) -> Result<(Arc<kaas_coordinator::share_partition::store::SharePartitionLog>, Arc<kaas_storage::Partition>), ResponseError> {
    let topic = broker.topics.get_by_id(&key.0).ok_or(ResponseError::UnknownTopicId)?;
    check(broker, ctx, Op::Read, Resource::Topic, &topic.name)?;
    let led = super::led_partition(broker, &topic.name, key.1)?;
    let log = broker.shares.partitions.log(broker.engine.fs(), key, &led.partition, led.epoch).await?;
    Ok((log, led.partition))
}

/// Delivers from the session's partitions until something is delivered, an error shows up, or
/// the deadline passes; waits on appends and on records given back in between.
#[allow(clippy::too_many_arguments)]
async fn long_poll(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    group: &str,
    member: &str,
    settings: &ShareGroupSettings,
    keys: &[SharePartitionKey],
    bound: DeliveryBound,
    deadline: Instant,
) -> Vec<(SharePartitionKey, PartitionOutcome)> {
    loop {
        let released = broker.shares.released.notified();
        tokio::pin!(released);
        released.as_mut().enable();
        let mut watches: Vec<watch::Receiver<i64>> = Vec::new();
        let mut outcomes = Vec::with_capacity(keys.len());
        let mut budget = bound;
        let mut delivered_any = false;
        for key in keys {
            let mut outcome = PartitionOutcome::default();
            match share_log(broker, ctx, *key).await {
                Err(e) => outcome.error = Some(e),
                Ok((log, partition)) => {
                    let mut w = partition.watch_high_watermark();
                    w.borrow_and_update();
                    watches.push(w);
                    if budget.max_records > 0 && budget.max_bytes > 0 {
                        let (b, g) = (broker.clone(), group.to_owned());
                        let fresh_reset: partitions::FreshReset = Box::new(move || {
                            if let Err(e) = b.group_configs.refresh() {
                                tracing::warn!(error = %e, "reading the group configs again failed; serving those read before");
                            }
                            b.group_configs.share_settings(&g).reset
                        });
                        match partitions::deliver(&log, &partition, group, member, settings, budget, fresh_reset).await {
                            Ok(d) => outcome.delivered = d,
                            Err(e) => outcome.error = Some(e),
                        }
                    }
                }
            }
            let records: usize = outcome.delivered.acquired.iter().map(|a| usize::try_from(a.last - a.first + 1).unwrap_or(0)).sum();
            if records > 0 {
                delivered_any = true;
                budget.first = false;
                budget.max_records = budget.max_records.saturating_sub(records);
                budget.max_bytes = budget.max_bytes.saturating_sub(outcome.delivered.records.len());
            }
            outcomes.push((*key, outcome));
        }
        let errors = outcomes.iter().any(|(_, o)| o.error.is_some());
        if delivered_any || errors || Instant::now() >= deadline || ctx.closed.is_cancelled() || keys.is_empty() {
            return outcomes;
        }
        // Records whose lock expires are looked at again at least this often.
        let recheck = (Instant::now() + Duration::from_millis(500)).min(deadline);
        let changed = async {
            if watches.is_empty() {
                std::future::pending::<()>().await;
            }
            let _ = select_all(watches.iter_mut().map(|w| Box::pin(w.changed()))).await;
        };
        tokio::select! {
            _ = tokio::time::sleep_until(recheck) => {}
            _ = ctx.closed.cancelled() => return outcomes,
            _ = released => {}
            _ = changed => {}
        }
    }
}

/// Gives back what a closed session's member holds in its partitions here.
pub(crate) async fn release(broker: &Arc<Broker>, closed: &Closed, settings: &ShareGroupSettings) {
    for key in &closed.partitions {
        if let Some(log) = broker.shares.partitions.existing(key) {
            partitions::release(&log, &closed.group, &closed.member, settings).await;
        }
    }
    broker.shares.released.notify_waiters();
}

/// When the connection that opened a session closes, the session ends and its records go back
/// (a client that vanished holds nothing for the lock's whole duration).
fn release_on_close(broker: &Arc<Broker>, ctx: &RequestContext, group: &str, member: &str, serial: u64) {
    let (broker, closed, peer) = (broker.clone(), ctx.closed.clone(), ctx.peer);
    let (group, member) = (group.to_owned(), member.to_owned());
    tokio::spawn(async move {
        closed.cancelled().await;
        if let Some(ended) = broker.shares.sessions.connection_closed(&group, &member, serial, peer) {
            let settings = broker.group_configs.share_settings(&group);
            release(&broker, &ended, &settings).await;
        }
    });
}

fn response(broker: &Broker, outcomes: BTreeMap<SharePartitionKey, PartitionOutcome>, settings: &ShareGroupSettings) -> ShareFetchResponse {
    let mut topics: HashMap<Uuid, Vec<PartitionData>> = HashMap::new();
    let mut order: Vec<Uuid> = Vec::new();
    for ((topic_id, index), o) in outcomes {
        if o.error.is_none() && o.ack.is_none() && o.delivered.acquired.is_empty() {
            continue;
        }
        if let Some(topic) = broker.topics.get_by_id(&topic_id) {
            broker.metrics.sent(&topic.name, o.delivered.records.len());
        }
        let acquired = o.delivered.acquired.iter().map(|a| AcquiredRecords::default().with_first_offset(a.first).with_last_offset(a.last).with_delivery_count(a.deliveries)).collect();
        let records = if o.delivered.acquired.is_empty() { Bytes::new() } else { o.delivered.records.clone() };
        let data = PartitionData::default()
            .with_partition_index(index)
            .with_error_code(o.error.map_or(0, |e| e.code()))
            .with_acknowledge_error_code(o.ack.flatten().map_or(0, |e| e.code()))
            .with_records(Some(records))
            .with_acquired_records(acquired);
        if !topics.contains_key(&topic_id) {
            order.push(topic_id);
        }
        topics.entry(topic_id).or_default().push(data);
    }
    let responses = order.into_iter().map(|id| ShareFetchableTopicResponse::default().with_topic_id(id).with_partitions(topics.remove(&id).unwrap_or_default())).collect();
    ShareFetchResponse::default()
        .with_acquisition_lock_timeout_ms(i32::try_from(settings.partition.lock_duration.as_millis()).unwrap_or(i32::MAX))
        .with_responses(responses)
}
