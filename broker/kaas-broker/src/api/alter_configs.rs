//! AlterConfigs (the legacy, replace-everything form): topic configs only.

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::{AlterConfigsRequest, AlterConfigsResponse};

use super::access::{Op, check_config_resource};
use super::describe_configs::TOPIC;
use super::str_bytes;
use crate::broker::Broker;
use crate::error::Error;
use crate::router::{Reply, RequestContext};

pub async fn handle(broker: &Arc<Broker>, ctx: &RequestContext, request: AlterConfigsRequest) -> Reply<AlterConfigsResponse> {
    let mut responses = Vec::with_capacity(request.resources.len());
    for resource in request.resources {
        responses.push({
            let response = AlterConfigsResourceResponse::default()
                .with_resource_type(resource.resource_type)
                .with_resource_name(resource.resource_name.clone());
            // Kafka: ALTER_CONFIGS on the topic, or on the cluster for a broker.
            if let Err(e) = check_config_resource(broker, ctx, Op::AlterConfigs, resource.resource_type, &resource.resource_name) {
                responses.push(response.with_error_code(e.code()));
                continue;
            }
            let configs: BTreeMap<String, String> = resource
                .configs
                .into_iter()
                .filter_map(|c| c.value.map(|v| (c.name.to_string(), v.to_string())))
                .collect();
            let outcome = if resource.resource_type == TOPIC {
                crate::topic_admin::set_configs(broker, &resource.resource_name, configs, request.validate_only).await
            } else {
                Err(read_only_resource(resource.resource_type))
            };
            match outcome {
                Ok(()) => response,
                Err(e) => response.with_error_code(e.code()).with_error_message(Some(str_bytes(e.to_string()))),
            }
        });
    }
    Reply::Now(AlterConfigsResponse::default().with_responses(responses))
}

/// The error for altering anything but a topic: broker settings are static flags in kaas.
pub(crate) fn read_only_resource(resource_type: i8) -> Error {
    Error::InvalidRequest(format!(
        "resource type {resource_type} cannot be altered: kaas broker settings are static (flags and KAAS_* variables)"
    ))
}
