//! Requests from this broker to another broker's Kafka listener: WriteTxnMarkers from a
//! transaction coordinator to partition leaders and group coordinators, and AddPartitionsToTxn
//! `verify_only` from a partition leader to a transaction coordinator — the same requests, on
//! the same listener, that Apache Kafka brokers send each other.
//!
//! One connection per peer address, reused, one request in flight on it at a time. A connection
//! that fails is dropped; the caller retries (every use here is re-driven until it lands or is
//! no longer wanted), and the retry opens a fresh one.
//!
//! In a cluster these requests prove that a broker sends them: the client id of each is a token
//! of the cluster's inter-broker key (`kaas_shared::interbroker_key`) over the request's bytes,
//! and the receiving broker serves the broker-only APIs (WriteTxnMarkers, AddPartitionsToTxn v4+)
//! only to such requests ([`from_a_broker`]). Anything else on the client port is refused
//! CLUSTER_AUTHORIZATION_FAILED, as Kafka refuses a client without CLUSTER_ACTION.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use kaas_shared::interbroker_key::InterBrokerKey;
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, Request, StrBytes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tracing::debug;

use crate::api::access::{Op, cluster_allowed};
use crate::broker::Broker;
use crate::router::RequestContext;

/// How long one request may take, connecting included; markers wait for an fsync.
const CALL_TIMEOUT: Duration = Duration::from_secs(15);
/// A response larger than this is a broken peer, not an answer to our small requests.
const MAX_RESPONSE: usize = 16 << 20;
const CLIENT_ID: &str = "kaas-interbroker";

#[derive(Debug, thiserror::Error)]
pub enum InterBrokerError {
    #[error("talking to {peer}: {source}")]
    Io { peer: String, source: std::io::Error },
    #[error("{peer} did not answer within {CALL_TIMEOUT:?}")]
    Timeout { peer: String },
    #[error("encoding a request for {peer}: {message}")]
    Encode { peer: String, message: String },
    #[error("{peer} sent an unreadable response: {message}")]
    Decode { peer: String, message: String },
}

/// An open connection and its next correlation id.
#[derive(Debug)]
struct Peer {
    stream: TcpStream,
    correlation: i32,
}

/// This broker's connections to the other brokers.
#[derive(Debug, Default)]
pub struct InterBroker {
    peers: parking_lot::Mutex<HashMap<String, Arc<tokio::sync::Mutex<Option<Peer>>>>>,
    /// Cluster mode: the cluster's key and this broker's id, which sign every request and
    /// check the broker-only ones received. `None` in local mode.
    signer: Option<Signer>,
}

/// What a broker proves its requests with.
#[derive(Debug, Clone)]
pub struct Signer {
    pub key: InterBrokerKey,
    pub broker_id: i32,
}

/// What a token on a Kafka request is for: the API and version it signs.
fn purpose(api_key: i16, version: i16) -> String {
    format!("kafka:{api_key}:{version}")
}

impl InterBroker {
    /// Connections whose requests `signer` signs (cluster mode).
    pub fn signed(signer: Signer) -> InterBroker {
        InterBroker { peers: Default::default(), signer: Some(signer) }
    }

    /// The cluster's key and this broker's id, in cluster mode.
    pub fn signer(&self) -> Option<&Signer> {
        self.signer.as_ref()
    }

    /// Sends `request` at `version` to the broker listening at `address` ("host:port") and
    /// returns its response.
    pub async fn call<R: Request>(&self, address: &str, version: i16, request: &R) -> Result<R::Response, InterBrokerError> {
        let slot = self.peers.lock().entry(address.to_owned()).or_default().clone();
        let mut peer = slot.lock().await;
        let outcome = tokio::time::timeout(CALL_TIMEOUT, exchange(&mut peer, address, version, request, self.signer.as_ref())).await;
        let result = outcome.unwrap_or_else(|_| Err(InterBrokerError::Timeout { peer: address.to_owned() }));
        if result.is_err() {
            // The stream may hold half a request or an unread response: never reuse it.
            *peer = None;
        }
        result
    }
}

async fn exchange<R: Request>(
    peer: &mut Option<Peer>,
    address: &str,
    version: i16,
    request: &R,
    signer: Option<&Signer>,
) -> Result<R::Response, InterBrokerError> {
    let io = |source| InterBrokerError::Io { peer: address.to_owned(), source };
    let decode = |message: String| InterBrokerError::Decode { peer: address.to_owned(), message };
    if peer.is_none() {
        let stream = TcpStream::connect(address).await.map_err(io)?;
        stream.set_nodelay(true).map_err(io)?;
        *peer = Some(Peer { stream, correlation: 0 });
    }
    let Some(p) = peer.as_mut() else { return Err(decode("no connection".into())) };
    p.correlation = p.correlation.wrapping_add(1);
    let frame = encode(request, version, p.correlation, signer)
        .map_err(|message| InterBrokerError::Encode { peer: address.to_owned(), message })?;
    p.stream.write_all(&frame).await.map_err(io)?;
    let length = usize::try_from(p.stream.read_u32().await.map_err(io)?).map_err(|e| decode(e.to_string()))?;
    if length > MAX_RESPONSE {
        return Err(decode(format!("a {length}-byte response")));
    }
    let mut body = vec![0; length];
    p.stream.read_exact(&mut body).await.map_err(io)?;
    let mut body = Bytes::from(body);
    let key = ApiKey::try_from(R::KEY).map_err(|_| decode(format!("unknown api key {}", R::KEY)))?;
    let header = ResponseHeader::decode(&mut body, key.response_header_version(version)).map_err(|e| decode(e.to_string()))?;
    if header.correlation_id != p.correlation {
        return Err(decode(format!("correlation id {} for request {}", header.correlation_id, p.correlation)));
    }
    let response = R::Response::decode(&mut body, version).map_err(|e| decode(e.to_string()))?;
    if body.has_remaining() {
        return Err(decode(format!("{} bytes after the response", body.remaining())));
    }
    Ok(response)
}

/// The request as a length-prefixed frame, its client id a token of `signer` over its body.
fn encode<R: Request>(request: &R, version: i16, correlation: i32, signer: Option<&Signer>) -> Result<BytesMut, String> {
    let key = ApiKey::try_from(R::KEY).map_err(|_| format!("unknown api key {}", R::KEY))?;
    let mut body = BytesMut::new();
    request.encode(&mut body, version).map_err(|e| e.to_string())?;
    let client_id = match signer {
        Some(s) => StrBytes::from_string(s.key.token(&purpose(R::KEY, version), s.broker_id, &body)),
        None => StrBytes::from_static_str(CLIENT_ID),
    };
    let header = RequestHeader::default()
        .with_request_api_key(R::KEY)
        .with_request_api_version(version)
        .with_correlation_id(correlation)
        .with_client_id(Some(client_id));
    let mut frame = BytesMut::new();
    frame.extend_from_slice(&[0; 4]);
    header.encode(&mut frame, key.request_header_version(version)).map_err(|e| e.to_string())?;
    frame.extend_from_slice(&body);
    let length = u32::try_from(frame.len() - 4).map_err(|_| "request too large".to_string())?;
    frame[..4].copy_from_slice(&length.to_be_bytes());
    Ok(frame)
}

/// Whether a broker-only request (WriteTxnMarkers, AddPartitionsToTxn v4+) may be served. In a
/// cluster it must come from a broker: its client id a token of the cluster's key over this very
/// request (re-encoded at its version, which gives back the bytes it was sent as). In local
/// mode there is no other broker, and the authorizer decides (CLUSTER_ACTION, as in Kafka).
pub(crate) fn from_a_broker<R: Encodable>(broker: &Broker, ctx: &RequestContext, request: &R) -> bool {
    let Some(signer) = broker.interbroker.signer() else {
        return cluster_allowed(broker, ctx, Op::ClusterAction);
    };
    let token = ctx.header.client_id.as_ref().map_or("", |c| c.as_str());
    let mut body = BytesMut::new();
    if request.encode(&mut body, ctx.version).is_err() {
        return false;
    }
    match signer.key.verify(token, &purpose(ctx.header.request_api_key, ctx.version), &body) {
        Ok(_) => true,
        Err(e) => {
            debug!(api = ?ctx.api_key, peer = %ctx.peer, error = %e, "broker-only request refused");
            false
        }
    }
}
