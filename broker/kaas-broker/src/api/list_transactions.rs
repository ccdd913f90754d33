//! ListTransactions: the transactional ids this broker coordinates, filtered by state,
//! producer id and (v1) running duration.

use std::sync::Arc;

use kafka_protocol::messages::list_transactions_response::TransactionState;
use kafka_protocol::messages::{
    ListTransactionsRequest, ListTransactionsResponse, ProducerId, TransactionalId,
};

use super::access::{Op, Resource, allowed};
use super::str_bytes;
use crate::broker::{Broker, now_ms};
use crate::router::{Reply, RequestContext};
use crate::txn::TxnState as S;

const STATES: [S; 6] = [
    S::Empty,
    S::Ongoing,
    S::PrepareCommit,
    S::PrepareAbort,
    S::CompleteCommit,
    S::CompleteAbort,
];

pub async fn handle(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    request: ListTransactionsRequest,
) -> Reply<ListTransactionsResponse> {
    let filters: Vec<String> = request
        .state_filters
        .iter()
        .map(|s| s.to_string())
        .collect();
    // Kafka also knows Dead and PrepareEpochFence; a filter naming any other state is reported.
    let known = |f: &String| {
        STATES.iter().any(|s| s.name() == f) || f == "Dead" || f == "PrepareEpochFence"
    };
    let unknown: Vec<_> = filters
        .iter()
        .filter(|f| !known(f))
        .map(|f| str_bytes(f.clone()))
        .collect();
    let min_duration = if ctx.version >= 1 {
        request.duration_filter
    } else {
        -1
    };
    let now = now_ms();
    let states = broker
        .txns
        .list()
        .into_iter()
        .filter(|(_, m)| filters.is_empty() || filters.iter().any(|f| f == m.state.name()))
        .filter(|(_, m)| {
            request.producer_id_filters.is_empty()
                || request
                    .producer_id_filters
                    .contains(&ProducerId(m.producer_id))
        })
        // Kafka lists the transactional ids the principal may describe.
        .filter(|(id, _)| allowed(broker, ctx, Op::Describe, Resource::TransactionalId, id))
        .filter(|(_, m)| {
            min_duration < 0
                || (m.state == S::Ongoing && now.saturating_sub(m.start_ms) > min_duration)
        })
        .map(|(id, m)| {
            TransactionState::default()
                .with_transactional_id(TransactionalId(str_bytes(id)))
                .with_producer_id(ProducerId(m.producer_id))
                .with_transaction_state(str_bytes(m.state.name()))
        })
        .collect();
    Reply::Now(
        ListTransactionsResponse::default()
            .with_unknown_state_filters(unknown)
            .with_transaction_states(states),
    )
}
