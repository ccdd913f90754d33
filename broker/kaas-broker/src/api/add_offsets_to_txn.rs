//! AddOffsetsToTxn: the consumer group's offsets become part of the transaction (Kafka adds
//! the group's `__consumer_offsets` partition; here the group itself is recorded, and the
//! completion settles its pending offsets).

use std::sync::Arc;

use kafka_protocol::messages::{AddOffsetsToTxnRequest, AddOffsetsToTxnResponse};
use tracing::debug;

use crate::broker::Broker;
use crate::router::{Reply, RequestContext};

pub async fn handle(
    broker: &Arc<Broker>,
    _ctx: &RequestContext,
    request: AddOffsetsToTxnRequest,
) -> Reply<AddOffsetsToTxnResponse> {
    let id = request.transactional_id.to_string();
    let group = request.group_id.to_string();
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
                e.response_error().code()
            }
        };
        AddOffsetsToTxnResponse::default().with_error_code(code)
    }))
}
