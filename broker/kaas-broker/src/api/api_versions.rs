//! ApiVersions, computed from the routing table (and KIP-511's fallback answer).

use std::sync::Arc;

use kafka_protocol::ResponseError;
use kafka_protocol::messages::api_versions_response::{ApiVersion, FinalizedFeatureKey, SupportedFeatureKey};
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, ApiVersionsResponse};

use crate::broker::Broker;
use crate::router::{self, ROUTES, Reply, RequestContext};

/// The advertised versions: the routing table, except that Produce is advertised from v0 as
/// Kafka 4 does, because librdkafka before 2.10 disables compression when Produce v0 is absent
/// (KAFKA-18659). Produce v0–2 requests themselves are refused.
pub fn advertised() -> Vec<ApiVersion> {
    ROUTES
        .iter()
        .map(|r| {
            let min = if r.key == ApiKey::Produce { 0 } else { r.min };
            ApiVersion::default().with_api_key(r.key as i16).with_min_version(min).with_max_version(r.max)
        })
        .collect()
}

/// Kafka's `transaction.version` feature: 2 is transactions v2 (KIP-890 part 2), which a
/// Kafka 4 producer uses once a broker says it is finalized.
const TRANSACTION_VERSION: &str = "transaction.version";

/// Kafka's `share.version` feature: 1 is share groups (KIP-932), on in every kaas broker.
const SHARE_VERSION: &str = "share.version";

/// The epoch of the finalized features. Kafka's moves with every change of its metadata log;
/// kaas's features change only when a broker restarts with another `--transaction-version`,
/// and a client keeps the answer of the highest epoch it has seen, so every broker answers the
/// same constant epoch (a mixed setting across brokers is an operator's transition, see the
/// flag).
const FINALIZED_FEATURES_EPOCH: i64 = 1;

/// The features this broker supports and the levels finalized (ApiVersions v3+). A supported
/// range from level 0 is left out below v4, as Kafka does: older Java clients fail to read
/// one (KAFKA-17492).
fn with_features(response: ApiVersionsResponse, version: i16, transaction_version: i16) -> ApiVersionsResponse {
    let supported = if version >= 4 {
        vec![
            SupportedFeatureKey::default().with_name(TRANSACTION_VERSION.into()).with_min_version(0).with_max_version(2),
            SupportedFeatureKey::default().with_name(SHARE_VERSION.into()).with_min_version(0).with_max_version(1),
        ]
    } else {
        Vec::new()
    };
    let finalized = |name: &'static str, level: i16| FinalizedFeatureKey::default().with_name(name.into()).with_min_version_level(level).with_max_version_level(level);
    response
        .with_supported_features(supported)
        .with_finalized_features_epoch(FINALIZED_FEATURES_EPOCH)
        .with_finalized_features(vec![finalized(TRANSACTION_VERSION, transaction_version), finalized(SHARE_VERSION, 1)])
}

pub async fn handle(broker: &Arc<Broker>, ctx: &RequestContext, request: ApiVersionsRequest) -> Reply<ApiVersionsResponse> {
    let mut response = with_features(ApiVersionsResponse::default().with_api_keys(advertised()), ctx.version, broker.config.transaction_version);
    let software_valid = valid_software_field(&request.client_software_name) && valid_software_field(&request.client_software_version);
    if ctx.version >= 3 {
        if software_valid {
            let tag = broker.metrics.client_software.connected(&request.client_software_name, &request.client_software_version);
            ctx.session.lock().set_client(tag);
        } else {
            response = response.with_error_code(ResponseError::InvalidRequest.code());
        }
    }
    Reply::Now(response)
}

/// KIP-511: client software name and version are alphanumerics, '.', '-'; empty means unknown.
fn valid_software_field(s: &str) -> bool {
    s.is_empty() || s.chars().all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-')
}

/// The KIP-511 answer to an ApiVersions request at a version we do not speak: v0 framing,
/// UNSUPPORTED_VERSION, and our ranges.
pub fn unsupported_version_response(correlation_id: i32) -> router::Encoded {
    let body = ApiVersionsResponse::default()
        .with_error_code(ResponseError::UnsupportedVersion.code())
        .with_api_keys(advertised());
    // v0 of this body always encodes; an empty answer would only close the connection.
    router::encode_response(ApiKey::ApiVersions, 0, correlation_id, &body).unwrap_or_default()
}
