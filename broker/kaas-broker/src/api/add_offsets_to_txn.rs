//! AddOffsetsToTxn: the consumer group's offsets become part of the transaction (Kafka adds
//! the group's `__consumer_offsets` partition; here the group itself is recorded, and the
//! completion settles its pending offsets).

use std::sync::Arc;

use kafka_protocol::ResponseError;
use kafka_protocol::messages::{AddOffsetsToTxnRequest, AddOffsetsToTxnResponse};
use tracing::debug;

use super::access::{Op, Resource, check};
use crate::broker::Broker;
use crate::router::{Reply, RequestContext};
use crate::server::ListenerRole;

pub async fn handle(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    request: AddOffsetsToTxnRequest,
) -> Reply<AddOffsetsToTxnResponse> {
    let id = request.transactional_id.to_string();
    let group = request.group_id.to_string();
    // Kafka: WRITE on the transactional id, then READ on the group. On the inter-broker
    // listener only a broker may ask: the group coordinator of a TxnOffsetCommit v5
    // (transactions v2), which checked the client's ACLs itself.
    let refused = if ctx.listener == ListenerRole::InterBroker {
        if crate::interbroker::from_a_broker(broker, ctx, &request) { Ok(()) } else { Err(ResponseError::ClusterAuthorizationFailed) }
    } else {
        check(broker, ctx, Op::Write, Resource::TransactionalId, &id).and_then(|()| check(broker, ctx, Op::Read, Resource::Group, &group))
    };
    if let Err(e) = refused {
        return Reply::Now(AddOffsetsToTxnResponse::default().with_error_code(e.code()));
    }
    let broker = broker.clone();
    Reply::Later(Box::pin(async move {
        let result = broker
            .txns
            .add(
                &id,
                request.producer_id.0,
                request.producer_epoch,
                &[],
                std::slice::from_ref(&group),
            )
            .await;
        let code = match result {
            Ok(()) => 0,
            Err(e) => {
                debug!(transactional_id = %id, group, error = %e, "AddOffsetsToTxn refused");
                crate::error::txn_error(&e).code()
            }
        };
        AddOffsetsToTxnResponse::default().with_error_code(code)
    }))
}
