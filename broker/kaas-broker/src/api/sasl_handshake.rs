//! SaslHandshake (v1, KIP-152): the client names its mechanism; the exchange itself follows in
//! SaslAuthenticate requests. v0 (raw SASL tokens outside Kafka framing) is not served, as
//! Kafka 4 no longer does.

use std::sync::Arc;

use kafka_protocol::ResponseError;
use kafka_protocol::messages::{SaslHandshakeRequest, SaslHandshakeResponse};
use tracing::debug;

use super::str_bytes;
use crate::broker::Broker;
use crate::router::{Reply, RequestContext};
use crate::sasl::SaslError;

pub async fn handle(_broker: &Arc<Broker>, ctx: &RequestContext, request: SaslHandshakeRequest) -> Reply<SaslHandshakeResponse> {
    let mut session = ctx.session.lock();
    let error = match session.handshake(&request.mechanism) {
        Ok(()) => None,
        Err(e) => {
            debug!(peer = %ctx.peer, mechanism = %request.mechanism, error = %e, "SASL handshake refused");
            Some(match e {
                SaslError::UnsupportedMechanism(_) => ResponseError::UnsupportedSaslMechanism,
                SaslError::IllegalState | SaslError::AuthenticationFailed(_) => ResponseError::IllegalSaslState,
            })
        }
    };
    let mechanisms = session.mechanisms().into_iter().map(str_bytes).collect();
    Reply::Now(SaslHandshakeResponse::default().with_error_code(error.map_or(0, |e| e.code())).with_mechanisms(mechanisms))
}
