//! EndTxn: commit or abort. The outcome is durable before the markers are written; the answer
//! comes once they are (see `TxnCoordinator::end_txn`). From v5 (transactions v2, KIP-890
//! part 2) the end bumps the producer's epoch and the answer carries the epoch (and, when the
//! old one was exhausted, the producer id) the producer goes on with.

use std::sync::Arc;

use kafka_protocol::messages::{EndTxnRequest, EndTxnResponse, ProducerId};
use tracing::debug;

use super::access::{Op, Resource, check};
use crate::broker::Broker;
use crate::router::{Reply, RequestContext};

pub async fn handle(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    request: EndTxnRequest,
) -> Reply<EndTxnResponse> {
    let id = request.transactional_id.to_string();
    // Kafka: WRITE on the transactional id.
    if let Err(e) = check(broker, ctx, Op::Write, Resource::TransactionalId, &id) {
        return Reply::Now(
            EndTxnResponse::default()
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1)
                .with_error_code(e.code()),
        );
    }
    let broker = broker.clone();
    let v2 = ctx.version >= 5;
    Reply::Later(Box::pin(async move {
        let (pid, epoch) = (request.producer_id.0, request.producer_epoch);
        let response = EndTxnResponse::default()
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1);
        match broker
            .txns
            .end_txn(&crate::txn::Host(broker.clone()), &id, (pid, epoch), request.committed, v2)
            .await
        {
            Ok((next_pid, next_epoch)) => response.with_producer_id(ProducerId(next_pid)).with_producer_epoch(next_epoch),
            Err(e) => {
                debug!(transactional_id = %id, producer_id = pid, epoch, commit = request.committed, error = %e, "EndTxn refused");
                response.with_error_code(crate::error::txn_error(&e).code())
            }
        }
    }))
}
