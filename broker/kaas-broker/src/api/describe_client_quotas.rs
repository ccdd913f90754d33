//! DescribeClientQuotas: needs DESCRIBE_CONFIGS on the cluster; the quota entities a filter
//! matches, with their values.

use std::sync::Arc;

use kafka_protocol::ResponseError;
use kafka_protocol::messages::describe_client_quotas_response::{EntityData, EntryData, ValueData};
use kafka_protocol::messages::{DescribeClientQuotasRequest, DescribeClientQuotasResponse};

use super::access::{Op, cluster_allowed};
use super::str_bytes;
use crate::broker::Broker;
use crate::quota::model::QuotaFilter;
use crate::router::{Reply, RequestContext};

pub async fn handle(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    request: DescribeClientQuotasRequest,
) -> Reply<DescribeClientQuotasResponse> {
    let refuse = |error: ResponseError, message: String| {
        Reply::Now(DescribeClientQuotasResponse::default().with_error_code(error.code()).with_error_message(Some(str_bytes(message))))
    };
    if !cluster_allowed(broker, ctx, Op::DescribeConfigs) {
        return refuse(ResponseError::ClusterAuthorizationFailed, "DescribeClientQuotas needs DESCRIBE_CONFIGS on the cluster".into());
    }
    let components = request.components.iter().map(|c| (c.entity_type.as_str(), c.match_type, c._match.as_deref()));
    let filter = match QuotaFilter::parse(components, request.strict) {
        Ok(filter) => filter,
        Err(e) => return refuse(ResponseError::InvalidRequest, e.to_string()),
    };
    let entries = broker
        .quotas
        .describe(&filter)
        .into_iter()
        .map(|(entity, values)| {
            let entity = entity
                .components()
                .into_iter()
                .map(|(t, name)| EntityData::default().with_entity_type(str_bytes(t.name())).with_entity_name(name.map(str_bytes)))
                .collect();
            let values =
                values.into_iter().map(|(key, value)| ValueData::default().with_key(str_bytes(key.name())).with_value(value)).collect();
            EntryData::default().with_entity(entity).with_values(values)
        })
        .collect();
    Reply::Now(DescribeClientQuotasResponse::default().with_entries(Some(entries)))
}
