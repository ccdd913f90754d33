//! DescribeTransactions: the coordinator's view of each transactional id.

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::ResponseError;
use kafka_protocol::messages::describe_transactions_response::{TopicData, TransactionState};
use kafka_protocol::messages::{
    DescribeTransactionsRequest, DescribeTransactionsResponse, ProducerId,
};

use super::access::{Op, Resource, allowed, check};
use super::{str_bytes, topic_name};
use crate::broker::Broker;
use crate::router::{Reply, RequestContext};

pub async fn handle(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    request: DescribeTransactionsRequest,
) -> Reply<DescribeTransactionsResponse> {
    let states = request
        .transactional_ids
        .into_iter()
        .map(|id| {
            let answer = TransactionState::default()
                .with_transactional_id(id.clone())
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1)
                .with_transaction_state(str_bytes(""))
                .with_transaction_start_time_ms(-1);
            // Kafka: DESCRIBE on the transactional id; partitions of topics the principal
            // may not describe are left out.
            if let Err(e) = check(broker, ctx, Op::Describe, Resource::TransactionalId, &id) {
                return answer.with_error_code(e.code());
            }
            match broker.txns.describe(&id) {
                Err(e) => answer.with_error_code(crate::error::txn_error(&e).code()),
                Ok(None) => answer.with_error_code(ResponseError::TransactionalIdNotFound.code()),
                Ok(Some(m)) => {
                    let mut by_topic: BTreeMap<String, Vec<i32>> = BTreeMap::new();
                    for (t, p) in m
                        .partitions
                        .iter()
                        .filter(|(t, _)| allowed(broker, ctx, Op::Describe, Resource::Topic, t))
                    {
                        by_topic.entry(t.clone()).or_default().push(*p);
                    }
                    let topics = by_topic
                        .into_iter()
                        .map(|(t, ps)| {
                            TopicData::default()
                                .with_topic(topic_name(t))
                                .with_partitions(ps)
                        })
                        .collect();
                    answer
                        .with_transaction_state(str_bytes(m.state.name()))
                        .with_transaction_timeout_ms(m.timeout_ms)
                        .with_transaction_start_time_ms(if m.state == crate::txn::TxnState::Empty {
                            -1
                        } else {
                            m.start_ms
                        })
                        .with_producer_id(ProducerId(m.producer_id))
                        .with_producer_epoch(m.producer_epoch)
                        .with_topics(topics)
                }
            }
        })
        .collect();
    Reply::Now(DescribeTransactionsResponse::default().with_transaction_states(states))
}
