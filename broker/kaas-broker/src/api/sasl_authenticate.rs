//! SaslAuthenticate (KIP-152, KIP-368): one step of the SASL exchange the handshake chose. A
//! failure is answered with SASL_AUTHENTICATION_FAILED and the connection is then closed (the
//! session refuses every later request).

use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::{SaslAuthenticateRequest, SaslAuthenticateResponse};
use tracing::info;

use super::str_bytes;
use crate::broker::Broker;
use crate::router::{Reply, RequestContext};
use crate::sasl::{SaslError, Step};

pub async fn handle(_broker: &Arc<Broker>, ctx: &RequestContext, request: SaslAuthenticateRequest) -> Reply<SaslAuthenticateResponse> {
    let mut session = ctx.session.lock();
    let response = SaslAuthenticateResponse::default();
    Reply::Now(match session.authenticate(&request.auth_bytes) {
        Ok(Step::Continue(bytes)) => response.with_auth_bytes(Bytes::from(bytes)),
        Ok(Step::Done(done)) => {
            info!(peer = %ctx.peer, user = session.user().unwrap_or_default(), "SASL authentication succeeded");
            response.with_auth_bytes(Bytes::from(done.auth_bytes)).with_session_lifetime_ms(done.session_lifetime_ms)
        }
        Err(e) => {
            info!(peer = %ctx.peer, error = %e, "SASL authentication failed");
            let code = match e {
                SaslError::AuthenticationFailed(_) => ResponseError::SaslAuthenticationFailed,
                SaslError::IllegalState | SaslError::UnsupportedMechanism(_) => ResponseError::IllegalSaslState,
            };
            response.with_error_code(code.code()).with_error_message(Some(str_bytes(e.to_string())))
        }
    })
}
