//! AddPartitionsToTxn. Versions 0–3 come from clients (one transaction); versions 4+ batch
//! transactions and carry `verify_only`, which brokers use to check that a partition is in a
//! transaction before accepting a transactional write (KIP-890 part 1).

use std::collections::HashSet;
use std::sync::Arc;

use kafka_protocol::ResponseError;
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::{
    AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, TransactionalId,
};
use tracing::debug;

use super::access::{Op, Resource, allowed, check};
use super::{by_topic, topic_name};
use crate::broker::Broker;
use crate::txn::GROUP_OFFSETS_TOPIC;
use crate::router::{Reply, RequestContext};

/// One transaction of the request, decoded.
struct Txn {
    id: String,
    producer_id: i64,
    producer_epoch: i16,
    verify_only: bool,
    topics: Vec<AddPartitionsToTxnTopic>,
    /// Kafka's authorization: WRITE on the transactional id refused (every partition gets
    /// it), or the topics whose WRITE is refused (TOPIC_AUTHORIZATION_FAILED).
    refused: Option<ResponseError>,
    unwritable_topics: HashSet<String>,
}

pub async fn handle(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    request: AddPartitionsToTxnRequest,
) -> Reply<AddPartitionsToTxnResponse> {
    let batched = ctx.version >= 4;
    // Kafka: v4+ come from brokers only (CLUSTER_ACTION on the cluster; in a cluster, a
    // broker's token).
    if batched && !crate::interbroker::from_a_broker(broker, ctx, &request) {
        return Reply::Now(AddPartitionsToTxnResponse::default().with_error_code(ResponseError::ClusterAuthorizationFailed.code()));
    }
    let authorize = |txn: Txn| Txn {
        refused: check(broker, ctx, Op::Write, Resource::TransactionalId, &txn.id).err(),
        unwritable_topics: txn
            .topics
            .iter()
            .map(|t| t.name.0.to_string())
            .filter(|t| !allowed(broker, ctx, Op::Write, Resource::Topic, t))
            .collect(),
        ..txn
    };
    let txns: Vec<Txn> = if batched {
        request
            .transactions
            .into_iter()
            .map(|t| Txn {
                id: t.transactional_id.to_string(),
                producer_id: t.producer_id.0,
                producer_epoch: t.producer_epoch,
                verify_only: t.verify_only,
                topics: t.topics,
                refused: None,
                unwritable_topics: HashSet::new(),
            })
            // NB: a broker sent it (checked above), which authorized its client's produce (or
            // local mode's CLUSTER_ACTION principal): Kafka's inter-broker principal is a super
            // user, so its transactions are not authorized again as the request's own user.
            .collect()
    } else {
        vec![Txn {
            id: request.v3_and_below_transactional_id.to_string(),
            producer_id: request.v3_and_below_producer_id.0,
            producer_epoch: request.v3_and_below_producer_epoch,
            verify_only: false,
            topics: request.v3_and_below_topics,
            refused: None,
            unwritable_topics: HashSet::new(),
        }]
        .into_iter()
        .map(authorize)
        .collect()
    };
    let broker = broker.clone();
    Reply::Later(Box::pin(async move {
        let mut results = Vec::with_capacity(txns.len());
        for txn in txns {
            results.push(add_one(&broker, txn).await);
        }
        if batched {
            AddPartitionsToTxnResponse::default().with_results_by_transaction(results)
        } else {
            let topics = results
                .into_iter()
                .next()
                .map(|r| r.topic_results)
                .unwrap_or_default();
            AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(topics)
        }
    }))
}

async fn add_one(broker: &Broker, txn: Txn) -> AddPartitionsToTxnResult {
    let mut errors: Vec<(String, i32, Option<ResponseError>)> = Vec::new();
    let mut known = Vec::new();
    for topic in &txn.topics {
        let name = topic.name.0.to_string();
        for &p in &topic.partitions {
            // A group shard stands as a `__consumer_offsets` partition in verification only.
            let group_shard = txn.verify_only && name == GROUP_OFFSETS_TOPIC;
            let refused = txn.refused.or_else(|| txn.unwritable_topics.contains(&name).then_some(ResponseError::TopicAuthorizationFailed));
            if let Some(e) = refused {
                errors.push((name.clone(), p, Some(e)));
            } else if group_shard || broker.topics.partition(&name, p).is_some() {
                known.push((name.clone(), p));
                errors.push((name.clone(), p, None));
            } else {
                errors.push((
                    name.clone(),
                    p,
                    Some(ResponseError::UnknownTopicOrPartition),
                ));
            }
        }
    }
    let unknown = errors.iter().any(|e| e.2.is_some());
    let outcome: Vec<Option<ResponseError>> = if unknown {
        // Kafka adds nothing when any partition is unknown or refused; the others were not
        // attempted.
        errors
            .iter()
            .map(|e| e.2.or(Some(ResponseError::OperationNotAttempted)))
            .collect()
    } else if txn.verify_only {
        known
            .iter()
            .map(|p| {
                broker
                    .txns
                    .verify(&txn.id, txn.producer_id, txn.producer_epoch, p)
                    .err()
                    .map(|e| crate::error::txn_error(&e))
            })
            .collect()
    } else {
        let result = broker
            .txns
            .add(&txn.id, txn.producer_id, txn.producer_epoch, &known, &[])
            .await;
        if let Err(e) = &result {
            debug!(transactional_id = %txn.id, producer_id = txn.producer_id, epoch = txn.producer_epoch, error = %e, "AddPartitionsToTxn refused");
        }
        vec![result.err().map(|e| crate::error::txn_error(&e)); errors.len()]
    };
    let partitions = errors
        .into_iter()
        .zip(outcome)
        .map(|((topic, partition, _), error)| {
            (
                topic,
                AddPartitionsToTxnPartitionResult::default()
                    .with_partition_index(partition)
                    .with_partition_error_code(error.map_or(0, |e| e.code())),
            )
        });
    let topics = by_topic(partitions)
        .into_iter()
        .map(|(t, ps)| {
            AddPartitionsToTxnTopicResult::default()
                .with_name(topic_name(t))
                .with_results_by_partition(ps)
        })
        .collect();
    AddPartitionsToTxnResult::default()
        .with_transactional_id(TransactionalId(super::str_bytes(txn.id)))
        .with_topic_results(topics)
}
