//! InitProducerId. Without a transactional id (the idempotent producer): a producer id unique
//! across the cluster, allocated from blocks claimed on the volume by exclusive create. With
//! one: the transaction coordinator's id and a bumped epoch, fencing the previous producer.

use std::sync::Arc;

use kafka_protocol::ResponseError;
use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse, ProducerId};
use tracing::{debug, warn};

use super::access::{Op, Resource, allowed_on_some, check, cluster_allowed};
use crate::broker::Broker;
use crate::router::{Reply, RequestContext};

pub async fn handle(broker: &Arc<Broker>, ctx: &RequestContext, request: InitProducerIdRequest) -> Reply<InitProducerIdResponse> {
    let response = InitProducerIdResponse::default().with_producer_id(ProducerId(-1)).with_producer_epoch(-1);
    if let Some(id) = request.transactional_id.as_ref().map(|t| t.to_string()) {
        if id.is_empty() {
            return Reply::Now(response.with_error_code(ResponseError::InvalidRequest.code()));
        }
        // Kafka: WRITE on the transactional id.
        if let Err(e) = check(broker, ctx, Op::Write, Resource::TransactionalId, &id) {
            return Reply::Now(response.with_error_code(e.code()));
        }
        // KIP-360: a client that already has an id and epoch names them.
        let expected = (request.producer_id.0 >= 0).then_some((request.producer_id.0, request.producer_epoch));
        let broker = broker.clone();
        return Reply::Later(Box::pin(async move {
            match broker.txns.init_producer_id(&crate::txn::Host(broker.clone()), &id, request.transaction_timeout_ms, expected).await {
                Ok((pid, epoch)) => response.with_producer_id(ProducerId(pid)).with_producer_epoch(epoch),
                Err(e) => {
                    debug!(transactional_id = %id, error = %e, "InitProducerId refused");
                    response.with_error_code(crate::error::txn_error(&e).code())
                }
            }
        }));
    }
    // Kafka 2.8+ (KIP-679): an idempotent producer needs IDEMPOTENT_WRITE on the cluster or
    // WRITE on some topic.
    if !cluster_allowed(broker, ctx, Op::IdempotentWrite) && !allowed_on_some(broker, ctx, Op::Write, Resource::Topic) {
        return Reply::Now(response.with_error_code(ResponseError::ClusterAuthorizationFailed.code()));
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
