//! The one handler table: it routes requests to the API modules and is the only source of the
//! ApiVersions answer, so the broker never advertises what it does not handle.

use std::any::Any;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use bytes::{BufMut, Bytes};
use kaas_storage::buffers;
use kafka_protocol::messages::{self, ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::buf::GatherBuf;
use kafka_protocol::protocol::{Decodable, Encodable};
use tokio::task::JoinHandle;

use crate::api;
use crate::broker::Broker;
use crate::error_codes::ErrorCodes;
use crate::quota::model::QuotaKey;
use crate::slow_requests::SlowRequestLog;
use crate::throttled::Throttled;

/// A future that produces a response later (durability wait, long poll).
pub type Deferred<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// What a handler answers.
pub enum Reply<T> {
    /// The response is ready.
    Now(T),
    /// The response needs to wait; the request's ordered work is already done.
    Later(Deferred<T>),
    /// No response at all (produce with acks=0).
    Silent,
}

impl<T> std::fmt::Debug for Reply<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Reply::Now(_) => "Reply::Now",
            Reply::Later(_) => "Reply::Later",
            Reply::Silent => "Reply::Silent",
        })
    }
}

/// An encoded response on its way to the connection's writer, in request order.
#[derive(Debug)]
pub enum Pending {
    Ready(Response),
    Later(JoinHandle<Option<Response>>),
    Silent,
}

/// An encoded response and when it became ready, so the writer can tell how long it waited
/// behind earlier answers of its connection and how long sending it took.
#[derive(Debug)]
pub struct Response {
    pub encoded: Encoded,
    pub api: ApiKey,
    pub ready_at: Instant,
}

impl Response {
    pub fn ready_now(api: ApiKey, encoded: Encoded) -> Response {
        Response { encoded, api, ready_at: Instant::now() }
    }
}

/// Record sets of at least this size are sent from the bytes the read returned, not copied
/// into the response: below it, a separate piece of the write costs more than the copy.
pub const SHARED_RECORDS_MIN: usize = 16 * 1024;
// A piped record set is a stand-in whose bytes are zeros (kaas_storage::piped): the encoder must
// keep every one by reference, never copy it into the frame.
const _: () = assert!(SHARED_RECORDS_MIN <= kaas_storage::piped::MIN_PIPED);

/// An encoded response frame: the bytes the encoder wrote, and the record sets it kept by
/// reference (each with its position in those bytes), in order.
#[derive(Debug, Clone, Default)]
pub struct Encoded {
    written: Bytes,
    shared: Vec<(usize, Bytes)>,
}

impl Encoded {
    /// A frame encoded whole.
    pub fn whole(written: Bytes) -> Encoded {
        Encoded { written, shared: Vec::new() }
    }

    /// A frame of `written` with `shared` pieces inserted at their positions (as
    /// [`GatherBuf::into_parts`] gives them).
    pub fn gathered(written: Bytes, shared: Vec<(usize, Bytes)>) -> Encoded {
        Encoded { written, shared }
    }

    /// The frame's length on the wire.
    pub fn len(&self) -> usize {
        self.written.len() + self.shared.iter().map(|(_, b)| b.len()).sum::<usize>()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether parts of the frame are kept by reference (a vectored write sends it best).
    pub fn is_gathered(&self) -> bool {
        !self.shared.is_empty()
    }

    /// The frame's parts in order, none empty.
    pub fn parts(&self) -> Vec<Part<'_>> {
        let mut parts = Vec::with_capacity(2 * self.shared.len() + 1);
        let mut from = 0;
        for (at, bytes) in &self.shared {
            let at = (*at).clamp(from, self.written.len());
            parts.push(Part::Written(&self.written[from..at]));
            parts.push(Part::Shared(bytes));
            from = at;
        }
        parts.push(Part::Written(&self.written[from..]));
        parts.retain(|p| !p.bytes().is_empty());
        parts
    }

    /// The frame's pieces in order.
    pub fn pieces(&self) -> Vec<&[u8]> {
        self.parts().into_iter().map(Part::bytes).collect()
    }

    /// The frame as one contiguous buffer (a copy when it is gathered).
    pub fn to_bytes(&self) -> Bytes {
        match self.shared.is_empty() {
            true => self.written.clone(),
            false => Bytes::from(self.pieces().concat()),
        }
    }
}

/// A part of an encoded frame.
#[derive(Debug, Clone, Copy)]
pub enum Part<'a> {
    /// Bytes encoded into the frame's own buffer.
    Written(&'a [u8]),
    /// A large `bytes` field (a record set) kept by reference: possibly a stand-in for records
    /// in pipes ([`kaas_storage::piped`]), which only the connection's writer may send.
    Shared(&'a Bytes),
}

impl<'a> Part<'a> {
    pub fn bytes(self) -> &'a [u8] {
        match self {
            Part::Written(b) => b,
            Part::Shared(b) => b,
        }
    }
}

/// What a handler knows about the request besides its body.
#[derive(Debug, Clone)]
pub struct RequestContext {
    pub header: RequestHeader,
    pub api_key: ApiKey,
    pub version: i16,
    pub peer: std::net::SocketAddr,
    /// Cancelled once the connection stops reading requests (the client went away, or the
    /// broker is shutting down): a long poll for it ends instead of waiting out its time.
    pub closed: tokio_util::sync::CancellationToken,
    /// The connection's SASL state: who it authenticated as (SaslHandshake and
    /// SaslAuthenticate advance it).
    pub session: Arc<parking_lot::Mutex<crate::sasl::Session>>,
    /// Who sent the request: the SASL user when the connection authenticated before it, else
    /// `None` (Kafka's `User:ANONYMOUS`). Requests are authorized as this principal.
    pub user: Option<Arc<str>>,
    /// The request's size on the wire (what a produce quota counts).
    pub size: usize,
    /// The connection's mute: a throttled request stops it reading for a while.
    pub mute: Arc<crate::quota::Mute>,
    /// The listener the request came in on: which addresses its answers announce.
    pub listener: crate::server::ListenerRole,
}

#[cfg(test)]
impl RequestContext {
    /// A request of `api_key` at `version` from an anonymous client on the client listener.
    pub(crate) fn for_tests(api_key: ApiKey, version: i16, header: RequestHeader) -> RequestContext {
        RequestContext {
            header,
            api_key,
            version,
            peer: std::net::SocketAddr::from(([127, 0, 0, 1], 1)),
            closed: tokio_util::sync::CancellationToken::new(),
            session: Arc::new(parking_lot::Mutex::new(crate::sasl::Session::new(None))),
            user: None,
            size: 0,
            mute: Arc::new(crate::quota::Mute::default()),
            listener: crate::server::ListenerRole::Client,
        }
    }
}

/// One routed API: the versions this broker answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    pub key: ApiKey,
    pub min: i16,
    pub max: i16,
}

/// Why a request could not be dispatched; the connection is closed with this reason.
#[derive(Debug, thiserror::Error)]
pub enum DispatchError {
    #[error("cannot decode {key:?} v{version}: {source}")]
    Decode { key: ApiKey, version: i16, source: anyhow::Error },
    #[error("cannot encode the {key:?} v{version} response: {source}")]
    Encode { key: ApiKey, version: i16, source: anyhow::Error },
    #[error("{0:?} is not handled by this broker")]
    NotRouted(ApiKey),
}

macro_rules! routes {
    ($( $key:ident : $req:ty = $min:literal ..= $max:literal => $handler:path ;)*) => {
        /// Every API this broker answers, with the versions it answers.
        pub const ROUTES: &[Route] = &[ $( Route { key: ApiKey::$key, min: $min, max: $max }, )* ];

        /// The name of a routed API (its ApiKey variant, as `{:?}` prints it), for metric
        /// labels; `"Unrouted"` for the rest.
        pub fn api_name(key: ApiKey) -> &'static str {
            match key {
                $( ApiKey::$key => stringify!($key), )*
                _ => "Unrouted",
            }
        }

        /// Decodes the body of a routed request and drops it: the decode step alone, for
        /// tests and fuzz targets that check what any byte string does to the decoder.
        pub fn decode_only(key: ApiKey, version: i16, mut body: Bytes) -> Result<(), DispatchError> {
            match key {
                $( ApiKey::$key => <$req>::decode(&mut body, version)
                    .map(drop)
                    .map_err(|source| DispatchError::Decode { key, version, source }), )*
                other => Err(DispatchError::NotRouted(other)),
            }
        }

        /// A default request of a routed API, encoded at `version` (tests).
        #[cfg(test)]
        fn encode_default(key: ApiKey, version: i16) -> anyhow::Result<Bytes> {
            let mut buf = bytes::BytesMut::new();
            match key {
                $( ApiKey::$key => <$req>::default().encode(&mut buf, version)?, )*
                other => anyhow::bail!("{other:?} is not routed"),
            }
            Ok(buf.freeze())
        }

        /// Decodes the body of a routed request, runs its handler and encodes the answer.
        pub(crate) async fn dispatch(
            broker: &Arc<Broker>,
            ctx: RequestContext,
            mut body: Bytes,
        ) -> Result<Pending, DispatchError> {
            let started = Instant::now();
            match ctx.api_key {
                $( ApiKey::$key => {
                    let request = <$req>::decode(&mut body, ctx.version).map_err(|source| {
                        DispatchError::Decode { key: ctx.api_key, version: ctx.version, source }
                    })?;
                    if !body.is_empty() {
                        // NB: Kafka reads a request's fields and ignores what follows them, and
                        // clients rely on it: librdkafka (2.16 at least) sends an all-topics
                        // Metadata v9+ with a 4-byte array-count placeholder it never shrinks,
                        // so 3 bytes trail the body. Refusing them closes the connection on
                        // every Metadata refresh; Kafka 4.4 answers. So does kaas.
                        tracing::debug!(api = ?ctx.api_key, version = ctx.version, extra = body.len(), "ignoring bytes after the request body, as Kafka does");
                    }
                    // What the slow-request log names, taken before the handler consumes it.
                    let named = match broker.config.slow_request {
                        Some(_) => crate::slow_requests::NamedPartitions::of(&request),
                        None => Default::default(),
                    };
                    let reply = $handler(broker, &ctx, request).await;
                    finish(&ctx, reply, broker, started, named)
                } )*
                other => Err(DispatchError::NotRouted(other)),
            }
        }
    };
}

// NB: Produce v12, EndTxn v5, AddPartitionsToTxn v5 and TxnOffsetCommit v5 are transactions
// v2 (KIP-890 part 2: the epoch bumped at a transaction's end, partitions and groups added by
// the writes); a Kafka 4 client uses them when ApiVersions finalizes `transaction.version` 2
// (`api::api_versions`). Produce v13 (topic ids instead of names) is not routed.
routes! {
    Produce: messages::ProduceRequest = 3..=12 => api::produce::handle;
    Fetch: messages::FetchRequest = 4..=18 => api::fetch::handle;
    ListOffsets: messages::ListOffsetsRequest = 1..=10 => api::list_offsets::handle;
    Metadata: messages::MetadataRequest = 0..=13 => api::metadata::handle;
    ApiVersions: messages::ApiVersionsRequest = 0..=4 => api::api_versions::handle;
    CreateTopics: messages::CreateTopicsRequest = 2..=7 => api::create_topics::handle;
    DeleteTopics: messages::DeleteTopicsRequest = 1..=6 => api::delete_topics::handle;
    DeleteRecords: messages::DeleteRecordsRequest = 0..=2 => api::delete_records::handle;
    InitProducerId: messages::InitProducerIdRequest = 0..=5 => api::init_producer_id::handle;
    OffsetForLeaderEpoch: messages::OffsetForLeaderEpochRequest = 2..=4 => api::offset_for_leader_epoch::handle;
    DescribeConfigs: messages::DescribeConfigsRequest = 1..=4 => api::describe_configs::handle;
    AlterConfigs: messages::AlterConfigsRequest = 0..=2 => api::alter_configs::handle;
    CreatePartitions: messages::CreatePartitionsRequest = 0..=3 => api::create_partitions::handle;
    IncrementalAlterConfigs: messages::IncrementalAlterConfigsRequest = 0..=1 => api::incremental_alter_configs::handle;
    DescribeCluster: messages::DescribeClusterRequest = 0..=2 => api::describe_cluster::handle;
    DescribeTopicPartitions: messages::DescribeTopicPartitionsRequest = 0..=0 => api::describe_topic_partitions::handle;
    DescribeLogDirs: messages::DescribeLogDirsRequest = 1..=4 => api::describe_log_dirs::handle;
    FindCoordinator: messages::FindCoordinatorRequest = 0..=6 => api::find_coordinator::handle;
    JoinGroup: messages::JoinGroupRequest = 0..=9 => api::join_group::handle;
    SyncGroup: messages::SyncGroupRequest = 0..=5 => api::sync_group::handle;
    Heartbeat: messages::HeartbeatRequest = 0..=4 => api::heartbeat::handle;
    LeaveGroup: messages::LeaveGroupRequest = 0..=5 => api::leave_group::handle;
    OffsetCommit: messages::OffsetCommitRequest = 2..=9 => api::offset_commit::handle;
    OffsetFetch: messages::OffsetFetchRequest = 1..=9 => api::offset_fetch::handle;
    OffsetDelete: messages::OffsetDeleteRequest = 0..=0 => api::offset_delete::handle;
    DescribeGroups: messages::DescribeGroupsRequest = 0..=6 => api::describe_groups::handle;
    ListGroups: messages::ListGroupsRequest = 0..=5 => api::list_groups::handle;
    DeleteGroups: messages::DeleteGroupsRequest = 0..=2 => api::delete_groups::handle;
    ConsumerGroupHeartbeat: messages::ConsumerGroupHeartbeatRequest = 0..=1 => api::consumer_group_heartbeat::handle;
    ConsumerGroupDescribe: messages::ConsumerGroupDescribeRequest = 0..=1 => api::consumer_group_describe::handle;
    ShareGroupHeartbeat: messages::ShareGroupHeartbeatRequest = 1..=1 => api::share_group_heartbeat::handle;
    ShareGroupDescribe: messages::ShareGroupDescribeRequest = 1..=1 => api::share_group_describe::handle;
    ShareFetch: messages::ShareFetchRequest = 1..=2 => api::share_fetch::handle;
    ShareAcknowledge: messages::ShareAcknowledgeRequest = 1..=2 => api::share_acknowledge::handle;
    DescribeShareGroupOffsets: messages::DescribeShareGroupOffsetsRequest = 0..=1 => api::describe_share_group_offsets::handle;
    AlterShareGroupOffsets: messages::AlterShareGroupOffsetsRequest = 0..=0 => api::alter_share_group_offsets::handle;
    DeleteShareGroupOffsets: messages::DeleteShareGroupOffsetsRequest = 0..=0 => api::delete_share_group_offsets::handle;
    AddPartitionsToTxn: messages::AddPartitionsToTxnRequest = 0..=5 => api::add_partitions_to_txn::handle;
    AddOffsetsToTxn: messages::AddOffsetsToTxnRequest = 0..=4 => api::add_offsets_to_txn::handle;
    EndTxn: messages::EndTxnRequest = 0..=5 => api::end_txn::handle;
    WriteTxnMarkers: messages::WriteTxnMarkersRequest = 1..=1 => api::write_txn_markers::handle;
    TxnOffsetCommit: messages::TxnOffsetCommitRequest = 0..=5 => api::txn_offset_commit::handle;
    DescribeProducers: messages::DescribeProducersRequest = 0..=0 => api::describe_producers::handle;
    DescribeTransactions: messages::DescribeTransactionsRequest = 0..=0 => api::describe_transactions::handle;
    ListTransactions: messages::ListTransactionsRequest = 0..=1 => api::list_transactions::handle;
    SaslHandshake: messages::SaslHandshakeRequest = 1..=1 => api::sasl_handshake::handle;
    SaslAuthenticate: messages::SaslAuthenticateRequest = 0..=2 => api::sasl_authenticate::handle;
    CreateAcls: messages::CreateAclsRequest = 1..=3 => api::create_acls::handle;
    DescribeAcls: messages::DescribeAclsRequest = 1..=3 => api::describe_acls::handle;
    DeleteAcls: messages::DeleteAclsRequest = 1..=3 => api::delete_acls::handle;
    DescribeUserScramCredentials: messages::DescribeUserScramCredentialsRequest = 0..=0 => api::describe_user_scram_credentials::handle;
    AlterUserScramCredentials: messages::AlterUserScramCredentialsRequest = 0..=0 => api::alter_user_scram_credentials::handle;
    ListConfigResources: messages::ListConfigResourcesRequest = 0..=1 => api::list_config_resources::handle;
    DescribeClientQuotas: messages::DescribeClientQuotasRequest = 0..=1 => api::describe_client_quotas::handle;
    AlterClientQuotas: messages::AlterClientQuotasRequest = 0..=1 => api::alter_client_quotas::handle;
}

/// The route for an API key, if this broker handles it.
pub fn route(key: ApiKey) -> Option<Route> {
    ROUTES.iter().copied().find(|r| r.key == key)
}

/// The APIs the request-time quota leaves alone, as Kafka does: the handshake a client needs
/// before it can do anything, and what brokers send each other.
fn exempt_from_request_quota(key: ApiKey) -> bool {
    matches!(key, ApiKey::ApiVersions | ApiKey::SaslHandshake | ApiKey::SaslAuthenticate | ApiKey::WriteTxnMarkers)
}

/// Encodes a ready answer, or spawns the wait for a deferred one; either way the request's
/// duration and error codes are recorded when its answer is ready.
fn finish<T>(
    ctx: &RequestContext,
    reply: Reply<T>,
    broker: &Broker,
    started: Instant,
    named: crate::slow_requests::NamedPartitions,
) -> Result<Pending, DispatchError>
where
    T: Encodable + ErrorCodes + Throttled + Send + 'static,
{
    let (key, version, correlation_id) = (ctx.api_key, ctx.version, ctx.header.correlation_id);
    let metrics = &broker.metrics;
    let session = ctx.session.clone();
    let client = move || session.lock().client_software();
    let slow_log = SlowRequestLog::for_request(broker.config.slow_request, ctx, named);
    // request_percentage counts the time the request held the runtime (decoding and the
    // handler's ordered part; not what a deferred answer waits for), as percent of one thread.
    let counted = broker.quotas.in_use(QuotaKey::RequestPercentage) && !exempt_from_request_quota(key);
    let request_throttle = match counted {
        false => 0,
        true => {
            let percent_seconds = started.elapsed().as_secs_f64() * 100.0;
            crate::api::quota_use::QuotaSubject::of(ctx).record(broker, QuotaKey::RequestPercentage, percent_seconds)
        }
    };
    // Kafka answers the longer of a byte-rate throttle and the request-time one.
    let throttled = move |mut body: T| {
        if request_throttle > body.throttle_time_ms() {
            body.set_throttle_time_ms(request_throttle);
        }
        body
    };
    match reply {
        Reply::Now(body) => {
            let body = throttled(body);
            metrics.answered(key, started, None, &body, client);
            if let Some(log) = &slow_log {
                let _ = log.answered(started, None);
            }
            let encoded = encode_response(key, version, correlation_id, &body)?;
            Ok(Pending::Ready(Response::ready_now(key, encoded)))
        }
        Reply::Silent => {
            metrics.answered_silently(key, started);
            if let Some(log) = &slow_log {
                let _ = log.answered(started, None);
            }
            Ok(Pending::Silent)
        }
        Reply::Later(future) => {
            let metrics = metrics.clone();
            let deferred_at = Instant::now();
            Ok(Pending::Later(tokio::spawn(async move {
                let body = throttled(future.await);
                metrics.answered(key, started, Some(deferred_at), &body, client);
                if let Some(log) = &slow_log {
                    let _ = log.answered(started, Some(deferred_at));
                }
                match encode_response(key, version, correlation_id, &body) {
                    Ok(encoded) => Some(Response::ready_now(key, encoded)),
                    Err(e) => {
                        tracing::error!(error = %e, "dropping a response that cannot be encoded");
                        None
                    }
                }
            })))
        }
    }
}

/// Size prefix, response header (at the version the API key prescribes) and body. Fetched
/// records of [`SHARED_RECORDS_MIN`] bytes or more are not copied: the frame refers to them.
pub fn encode_response<T: Encodable + 'static>(
    key: ApiKey,
    version: i16,
    correlation_id: i32,
    body: &T,
) -> Result<Encoded, DispatchError> {
    let encode_err = |source| DispatchError::Encode { key, version, source };
    let header_version = key.response_header_version(version);
    let header = ResponseHeader::default().with_correlation_id(correlation_id);
    let size = header.compute_size(header_version).map_err(encode_err)?
        + body.compute_size(version).map_err(encode_err)?;
    // NB: the size prefix is an i32; a larger response would wrap to a negative length.
    let prefix = i32::try_from(size).map_err(|_| {
        encode_err(anyhow::anyhow!("a {size}-byte response does not fit the protocol's 2 GiB frame"))
    })?;
    let written = (4 + size).saturating_sub(shared_records_len(body));
    let frame = |buf: Vec<u8>| -> Result<_, DispatchError> {
        let mut buf = GatherBuf::new(buf, SHARED_RECORDS_MIN);
        buf.put_i32(prefix);
        header.encode(&mut buf, header_version).map_err(encode_err)?;
        body.encode(&mut buf, version).map_err(encode_err)?;
        Ok(buf.into_parts())
    };
    if written < buffers::MIN_POOLED {
        let (written, shared) = frame(Vec::with_capacity(written))?;
        return Ok(Encoded { written: Bytes::from(written), shared });
    }
    // NB: large responses (fetches of many small record sets, big metadata) are encoded into a
    // pooled buffer whose pages stay mapped from one response to the next: a fresh multi-MB
    // buffer per fetch cost more in page faults than the copy itself (see
    // kaas_storage::buffers).
    let mut pooled = buffers::pool().take(written);
    pooled.clear();
    let (written, shared) = frame(pooled)?;
    let len = written.len();
    Ok(Encoded { written: buffers::freeze(written, len), shared })
}

/// The record bytes of a response the encoder will keep by reference (Fetch and ShareFetch
/// carry records; every other body none), so the buffer for the rest is sized right.
fn shared_records_len(body: &dyn Any) -> usize {
    let shared = |records: &Option<Bytes>| records.as_ref().map_or(0, |r| if r.len() >= SHARED_RECORDS_MIN { r.len() } else { 0 });
    if let Some(fetch) = body.downcast_ref::<messages::FetchResponse>() {
        return fetch.responses.iter().flat_map(|t| &t.partitions).map(|p| shared(&p.records)).sum();
    }
    if let Some(share) = body.downcast_ref::<messages::ShareFetchResponse>() {
        return share.responses.iter().flat_map(|t| &t.partitions).map(|p| shared(&p.records)).sum();
    }
    0
}

/// The request header, decoded at the version its API key prescribes.
pub fn decode_request_header(key: ApiKey, version: i16, body: &mut Bytes) -> anyhow::Result<RequestHeader> {
    RequestHeader::decode(body, key.request_header_version(version))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_route_is_unique_and_within_the_codec() {
        for (i, r) in ROUTES.iter().enumerate() {
            assert!(ROUTES[i + 1..].iter().all(|o| o.key != r.key), "duplicate route {:?}", r.key);
            let codec = r.key.valid_versions();
            assert!(r.min >= codec.min && r.max <= codec.max, "{:?} {}..{} outside codec {}", r.key, r.min, r.max, codec);
            assert!(r.min <= r.max);
        }
    }

    /// Every version ApiVersions advertises reaches a handler: a request encoded at it decodes.
    /// (Produce v0–2 are advertised for librdkafka's sake and refused, KAFKA-18659.)
    #[test]
    fn api_names_are_the_variant_names() {
        for r in ROUTES {
            assert_eq!(api_name(r.key), format!("{:?}", r.key));
        }
    }

    /// A fetch response whose record sets are kept by reference is, byte for byte, the one
    /// encoded whole, at every version; the written part holds none of the large sets.
    #[test]
    fn a_gathered_fetch_response_is_the_same_frame() {
        use messages::fetch_response::{FetchableTopicResponse, PartitionData};
        let big = |fill: u8, len: usize| Bytes::from(vec![fill; len]);
        let records = [big(1, 1 << 20), big(2, 100), big(3, SHARED_RECORDS_MIN), big(4, SHARED_RECORDS_MIN - 1), Bytes::new()];
        let partitions = records.iter().enumerate().map(|(i, r)| {
            PartitionData::default().with_partition_index(i as i32).with_high_watermark(7).with_records(Some(r.clone()))
        });
        let topic = FetchableTopicResponse::default().with_topic(messages::TopicName(kafka_protocol::protocol::StrBytes::from_static_str("t")));
        let response = messages::FetchResponse::default().with_responses(vec![topic.with_partitions(partitions.collect())]);
        for version in 4..=18 {
            let header_version = ApiKey::Fetch.response_header_version(version);
            let mut whole = bytes::BytesMut::new();
            let size = ResponseHeader::default().with_correlation_id(9).compute_size(header_version).expect("header size")
                + response.compute_size(version).expect("body size");
            whole.put_i32(size as i32);
            ResponseHeader::default().with_correlation_id(9).encode(&mut whole, header_version).expect("header");
            response.encode(&mut whole, version).expect("body");
            let encoded = encode_response(ApiKey::Fetch, version, 9, &response).expect("encodes");
            assert_eq!(encoded.to_bytes(), whole.freeze(), "v{version}");
            assert_eq!(encoded.len(), 4 + size);
            assert_eq!(encoded.shared.iter().map(|(_, b)| b.len()).collect::<Vec<_>>(), vec![1 << 20, SHARED_RECORDS_MIN], "v{version}: the large sets are shared");
            assert!(encoded.written.len() < 2 * SHARED_RECORDS_MIN, "v{version}: {} bytes copied", encoded.written.len());
        }
    }

    /// Offsets, gaps and seeking count the shared bytes, as in a plain buffer.
    #[test]
    fn a_gather_buffer_keeps_offsets_and_gaps_of_a_plain_one() {
        use kafka_protocol::protocol::buf::ByteBufMut;
        let shared = Bytes::from(vec![7u8; 64]);
        let mut plain = bytes::BytesMut::new();
        let mut gather = GatherBuf::new(bytes::BytesMut::new(), 32);
        fn fill<B: ByteBufMut>(buf: &mut B, shared: &Bytes) {
            buf.put_u8(1);
            let gap = buf.put_gap(4);
            buf.put_shared(shared);
            buf.put_u8(2);
            let after = buf.offset();
            buf.put_shared(shared);
            buf.gap_buf(gap).copy_from_slice(&(after as u32).to_be_bytes());
            buf.seek(after + 10); // back into the second shared piece: cut it short
            buf.put_u8(3);
        }
        fill(&mut plain, &shared);
        fill(&mut gather, &shared);
        assert_eq!(gather.offset(), plain.len());
        let (written, pieces) = gather.into_parts();
        let encoded = Encoded { written: written.freeze(), shared: pieces };
        assert_eq!(encoded.to_bytes(), plain.freeze());
    }

    #[test]
    fn every_advertised_version_decodes() {
        for v in crate::api::api_versions::advertised() {
            let key = ApiKey::try_from(v.api_key).expect("advertised keys are known keys");
            let route = route(key).expect("every advertised key is routed");
            let min = if key == ApiKey::Produce { route.min } else { v.min_version };
            assert_eq!((min, v.max_version), (route.min, route.max), "{key:?} advertised as routed");
            for version in v.min_version.max(route.min)..=v.max_version {
                let body = encode_default(key, version).unwrap_or_else(|e| panic!("{key:?} v{version}: {e}"));
                decode_only(key, version, body).unwrap_or_else(|e| panic!("{key:?} v{version}: {e}"));
            }
        }
    }
}
