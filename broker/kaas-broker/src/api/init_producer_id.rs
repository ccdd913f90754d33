//! InitProducerId for the idempotent producer: a producer id unique across the cluster,
//! allocated from blocks claimed on the volume by exclusive create.

use std::sync::Arc;

use kafka_protocol::ResponseError;
use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse, ProducerId};
use tracing::warn;

use crate::broker::Broker;
use crate::router::{Reply, RequestContext};

pub async fn handle(broker: &Arc<Broker>, _ctx: &RequestContext, request: InitProducerIdRequest) -> Reply<InitProducerIdResponse> {
    let response = InitProducerIdResponse::default().with_producer_id(ProducerId(-1)).with_producer_epoch(-1);
    if request.transactional_id.is_some() {
        // Transactions are not built yet; FindCoordinator(TRANSACTION) is not advertised either.
        return Reply::Now(response.with_error_code(ResponseError::InvalidRequest.code()));
    }
    // A non-transactional producer always gets a fresh id at epoch 0, as in Kafka; a client
    // that asks to bump its epoch (KIP-360) is served the same way.
    match broker.engine.producer_ids().allocate() {
        Ok(id) => Reply::Now(response.with_producer_id(ProducerId(id)).with_producer_epoch(0)),
        Err(e) => {
            warn!(error = %e, "cannot allocate a producer id");
            Reply::Now(response.with_error_code(ResponseError::CoordinatorNotAvailable.code()))
        }
    }
}
