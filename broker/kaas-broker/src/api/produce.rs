//! Produce: append in request order, answer once the appended bytes are fsynced.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{ProduceRequest, ProduceResponse};
use kaas_storage::{AppendOptions, AppendOutcome, Durable};
use tracing::debug;

use super::access::{Op, Resource, check};
use super::{led_partition, str_bytes};
use crate::broker::{Broker, now_ms};
use crate::quota::model::QuotaKey;
use crate::router::{Reply, RequestContext};
use crate::txn::Inclusion;

/// One partition's append, done or refused.
struct Appended {
    index: i32,
    result: Result<(AppendOutcome, Durable), (ResponseError, Option<String>)>,
}

pub async fn handle(broker: &Arc<Broker>, ctx: &RequestContext, request: ProduceRequest) -> Reply<ProduceResponse> {
    let acks = request.acks;
    let valid_acks = matches!(acks, -1..=1);
    let now = now_ms();
    let transactional_id = request.transactional_id.as_ref().map(|t| t.to_string());
    // Kafka: transactional records need WRITE on their transactional id, or nothing of the
    // request is written.
    let transaction_refused = match transactional_id.as_deref() {
        // NB: without an authorizer the records are not walked for this.
        Some(id) if broker.authorizer.is_some() && has_transactional_records(&request) => {
            check(broker, ctx, Op::Write, Resource::TransactionalId, id).err()
        }
        _ => None,
    };
    let mut refused = match transaction_refused {
        Some(_) => HashMap::new(),
        None => {
            // Produce v12+ is transactions v2: the write adds its partition to the transaction.
            let inclusion = if ctx.version >= 12 { Inclusion::Add } else { Inclusion::Verify };
            include_transactional(broker, transactional_id.as_deref(), &request, inclusion).await
        }
    };
    // The ordered part: every append happens now, before the next request of this connection.
    let appended: Vec<(String, Vec<Appended>)> = request
        .topic_data
        .into_iter()
        .map(|topic| {
            let name = topic.name.0.to_string();
            // Kafka: WRITE on the topic.
            let allowed = match transaction_refused {
                Some(e) => Err(e),
                None => check(broker, ctx, Op::Write, Resource::Topic, &name),
            };
            let partitions = topic
                .partition_data
                .into_iter()
                .map(|data| Appended {
                    index: data.index,
                    result: if let Err(e) = allowed {
                        Err((e, None))
                    } else if valid_acks {
                        let records = data.records.as_deref().unwrap_or_default();
                        match refused.remove(&(name.clone(), data.index)) {
                            Some(refusal) => Err(refusal),
                            None => append(broker, &name, data.index, records, now),
                        }
                    } else {
                        Err((ResponseError::InvalidRequiredAcks, None))
                    },
                })
                .collect();
            (name, partitions)
        })
        .collect();
    // Kafka counts a produce request's size against producer_byte_rate, whatever became of it.
    let throttle_ms = super::quota_use::QuotaSubject::of(ctx).record(broker, QuotaKey::ProducerByteRate, ctx.size as f64);
    if acks == 0 {
        // Nobody waits for these records; they become visible once fsynced, by the sync each
        // append started (one group commit with whatever else is appending).
        return Reply::Silent;
    }
    let timeout = Duration::from_millis(u64::try_from(request.timeout_ms).unwrap_or(0).max(1));
    Reply::Later(Box::pin(async move {
        let topics = join_all(appended.into_iter().map(|(name, partitions)| async move {
            let responses = join_all(partitions.into_iter().map(|a| respond(a, timeout))).await;
            TopicProduceResponse::default().with_name(super::topic_name(name)).with_partition_responses(responses)
        }))
        .await;
        ProduceResponse::default().with_responses(topics).with_throttle_time_ms(throttle_ms)
    }))
}

fn append(broker: &Broker, topic: &str, index: i32, records: &[u8], now: i64) -> Result<(AppendOutcome, Durable), (ResponseError, Option<String>)> {
    // NB: led_partition also refuses when this broker is fenced: the controller may already
    // be moving the partition, and an acknowledgement now could be lost.
    let led = led_partition(broker, topic, index).map_err(|e| (e, None))?;
    let partition = led.partition;
    // NB: the storage patches offsets into a copy of the batch header and writes the records
    // from the request's own bytes (shared with the rest of the frame), uncopied.
    let options = AppendOptions { leader_epoch: led.epoch, now_ms: now };
    match partition.append_durable(records, options) {
        Ok((outcome, durable)) => {
            if !outcome.duplicate {
                broker.metrics.appended(topic, records.len(), outcome.last_offset - outcome.base_offset + 1);
            }
            Ok((outcome, durable))
        }
        Err(e) => {
            let e = crate::Error::from(e);
            debug!(topic, partition = index, error = %e, "append refused");
            Err((e.response_error(), Some(e.to_string())))
        }
    }
}

fn has_transactional_records(request: &ProduceRequest) -> bool {
    let records = request.topic_data.iter().flat_map(|t| &t.partition_data).map(|d| d.records.as_deref().unwrap_or_default());
    records.into_iter().any(|r| kaas_storage::transactional_producer(r).is_some())
}

/// Why a partition's records are refused before any append.
type Refusal = (ResponseError, Option<String>);

/// Kafka's produce-side verification (KIP-890 part 1): a transactional batch must belong to
/// the producer's Ongoing transaction, and that transaction must include the partition;
/// otherwise INVALID_TXN_STATE (or the producer's fencing error) and nothing is written. With
/// transactions v2 (KIP-890 part 2) the first write adds the partition instead (the producer
/// sends no AddPartitionsToTxn), under the same epoch checks. Only the first batch of a
/// transaction in a partition goes to the coordinator — later ones find the transaction open
/// in the partition — and in a cluster that is one AddPartitionsToTxn to the coordinator's
/// broker. Returns the refused partitions.
async fn include_transactional(
    broker: &Broker,
    transactional_id: Option<&str>,
    request: &ProduceRequest,
    inclusion: Inclusion,
) -> HashMap<(String, i32), Refusal> {
    let mut refused = HashMap::new();
    let mut unverified: Vec<crate::txn::TxnWrite> = Vec::new();
    for topic in &request.topic_data {
        for data in &topic.partition_data {
            let records = data.records.as_deref().unwrap_or_default();
            // NB: an entry of several batches is not verified (and never written): the append
            // refuses it with INVALID_RECORD, whoever the second batch's producer is.
            let Some((producer_id, epoch)) = kaas_storage::transactional_producer(records) else { continue };
            let key = (topic.name.0.to_string(), data.index);
            // Kafka's answer to transactional records without a transactional id: a transaction
            // nobody coordinates would hold the last stable offset back forever.
            if transactional_id.is_none() {
                refused.insert(key, (ResponseError::TransactionalIdAuthorizationFailed, Some("transactional records need a transactional id".into())));
                continue;
            }
            let open = broker.topics.partition(&key.0, key.1).is_some_and(|p| p.in_open_transaction(producer_id, epoch));
            if !open {
                unverified.push((key, (producer_id, epoch)));
            }
        }
    }
    let Some(id) = transactional_id else { return refused };
    if unverified.is_empty() {
        return refused;
    }
    let verdicts = crate::txn::include_in_transaction(broker, id, &unverified, inclusion).await;
    for (((topic, index), (producer_id, epoch)), verdict) in unverified.into_iter().zip(verdicts) {
        let Err(e) = verdict else { continue };
        debug!(topic, partition = index, transactional_id = id, producer_id, epoch, error = ?e, "transactional write refused");
        let code = match e {
            // NB: a produce from a fenced epoch answers INVALID_PRODUCER_EPOCH (PRODUCER_FENCED
            // is not a produce error for clients of these versions).
            ResponseError::ProducerFenced => ResponseError::InvalidProducerEpoch,
            // Kafka answers a coordinator it cannot ask now with a retriable produce error.
            ResponseError::CoordinatorNotAvailable
            | ResponseError::NotCoordinator
            | ResponseError::CoordinatorLoadInProgress
            | ResponseError::ConcurrentTransactions
            | ResponseError::NetworkException => ResponseError::NotEnoughReplicas,
            other => other,
        };
        refused.insert((topic, index), (code, Some(format!("transaction verification: {e:?}"))));
    }
    refused
}

async fn respond(appended: Appended, timeout: Duration) -> PartitionProduceResponse {
    let response = PartitionProduceResponse::default().with_index(appended.index).with_log_append_time_ms(-1);
    let (outcome, durable) = match appended.result {
        Ok(ok) => ok,
        Err((error, message)) => {
            return response
                .with_error_code(error.code())
                .with_base_offset(-1)
                .with_log_start_offset(-1)
                .with_error_message(message.map(str_bytes));
        }
    };
    let durable = tokio::time::timeout(timeout, durable.wait()).await;
    let error = match durable {
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(crate::Error::from(e)),
        Err(_) => {
            return response.with_error_code(ResponseError::RequestTimedOut.code()).with_base_offset(-1);
        }
    };
    match error {
        None => response
            .with_base_offset(outcome.base_offset)
            .with_log_append_time_ms(outcome.log_append_time_ms)
            .with_log_start_offset(outcome.log_start_offset),
        Some(e) => response
            .with_error_code(e.code())
            .with_base_offset(-1)
            .with_error_message(Some(str_bytes(e.to_string()))),
    }
}
