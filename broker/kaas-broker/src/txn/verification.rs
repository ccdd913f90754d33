//! A partition leader asking a transaction coordinator on another broker whether partitions are
//! in a producer's Ongoing transaction: AddPartitionsToTxn v4 with `verify_only`, as Kafka's
//! partition leaders do (KIP-890 part 1); or, for transactions v2 (KIP-890 part 2), adding
//! them (`verify_only` false), and adding a group for TxnOffsetCommit v5 (AddOffsetsToTxn on
//! the client's behalf).

use kafka_protocol::ResponseError as E;
use kafka_protocol::messages::add_partitions_to_txn_request::{AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction};
use kafka_protocol::messages::{AddOffsetsToTxnRequest, AddPartitionsToTxnRequest, GroupId, ProducerId, TopicName, TransactionalId};
use kafka_protocol::protocol::StrBytes;
use tracing::debug;

use crate::broker::Broker;

/// The verdict for each of `partitions` (with the producer id and epoch of its batch), in
/// order. A failed request is a retriable error for every partition.
pub(crate) async fn include_remotely(
    broker: &Broker,
    address: &str,
    transactional_id: &str,
    partitions: &[super::TxnWrite],
    inclusion: super::Inclusion,
) -> Vec<Result<(), E>> {
    let Some((_, (producer_id, epoch))) = partitions.first() else { return Vec::new() };
    // One producer per request: a produce request carries one transactional id, and its
    // batches all come from that id's producer (any other would fail the check anyway).
    let mut topics: Vec<AddPartitionsToTxnTopic> = Vec::new();
    for ((topic, index), _) in partitions {
        match topics.iter_mut().find(|t| t.name.0.as_str() == topic) {
            Some(t) => t.partitions.push(*index),
            None => topics.push(
                AddPartitionsToTxnTopic::default()
                    .with_name(TopicName(StrBytes::from_string(topic.clone())))
                    .with_partitions(vec![*index]),
            ),
        }
    }
    let request = AddPartitionsToTxnRequest::default().with_transactions(vec![
        AddPartitionsToTxnTransaction::default()
            .with_transactional_id(TransactionalId(StrBytes::from_string(transactional_id.to_owned())))
            .with_producer_id(ProducerId(*producer_id))
            .with_producer_epoch(*epoch)
            .with_verify_only(inclusion == super::Inclusion::Verify)
            .with_topics(topics),
    ]);
    let response = match broker.interbroker.call(address, 4, &request).await {
        Ok(r) => r,
        Err(e) => {
            debug!(transactional_id, ?inclusion, error = %e, "transaction inclusion request failed");
            return vec![Err(E::NetworkException); partitions.len()];
        }
    };
    if let Some(e) = E::try_from_code(response.error_code) {
        return vec![Err(e); partitions.len()];
    }
    partitions
        .iter()
        .map(|((topic, index), (pid, e))| {
            if (pid, e) != (producer_id, epoch) {
                return Err(E::InvalidProducerIdMapping);
            }
            let code = response
                .results_by_transaction
                .iter()
                .flat_map(|r| &r.topic_results)
                .filter(|t| t.name.0.as_str() == topic)
                .flat_map(|t| &t.results_by_partition)
                .find(|p| p.partition_index == *index)
                .map(|p| p.partition_error_code)
                .ok_or(E::UnknownServerError)?;
            E::try_from_code(code).map_or(Ok(()), Err)
        })
        .collect()
}

/// Adds `group` to the producer's transaction at the coordinator's broker: AddOffsetsToTxn
/// as the client would send it, signed as a broker's (the coordinator accepts it from a
/// broker without the client's ACLs, which the group coordinator here checked already).
pub(crate) async fn add_group_remotely(
    broker: &Broker,
    address: &str,
    transactional_id: &str,
    (producer_id, epoch): (i64, i16),
    group: &str,
) -> Result<(), E> {
    let request = AddOffsetsToTxnRequest::default()
        .with_transactional_id(TransactionalId(StrBytes::from_string(transactional_id.to_owned())))
        .with_producer_id(ProducerId(producer_id))
        .with_producer_epoch(epoch)
        .with_group_id(GroupId(StrBytes::from_string(group.to_owned())));
    match broker.interbroker.call(address, 4, &request).await {
        Ok(response) => E::try_from_code(response.error_code).map_or(Ok(()), Err),
        Err(e) => {
            debug!(transactional_id, group, error = %e, "adding a group to a transaction failed");
            Err(E::CoordinatorNotAvailable)
        }
    }
}
