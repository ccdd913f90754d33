//! ListConfigResources (KIP-1142; v0 was KIP-714's ListClientMetricsResources): the names of
//! the resources whose configs DescribeConfigs describes, by type, in Kafka's order — groups,
//! client-metrics subscriptions, broker loggers, brokers, topics.

use std::sync::Arc;

use kafka_protocol::ResponseError;
use kafka_protocol::messages::list_config_resources_response::ConfigResource;
use kafka_protocol::messages::{ListConfigResourcesRequest, ListConfigResourcesResponse};

use super::access::{Op, cluster_allowed};
use super::describe_configs::{BROKER, BROKER_LOGGER, GROUP, TOPIC};
use super::metadata::brokers_and_controller;
use super::str_bytes;
use crate::broker::Broker;
use crate::router::{Reply, RequestContext};
use crate::server::ListenerRole;

/// Kafka's `ConfigResource.Type` code of client-metrics subscriptions (KIP-714 telemetry),
/// which kaas keeps none of: it lists nothing.
const CLIENT_METRICS: i8 = 16;

/// The types a request of `version` may name; an empty list means all of them.
fn supported(version: i16) -> &'static [i8] {
    if version == 0 { &[CLIENT_METRICS] } else { &[GROUP, CLIENT_METRICS, BROKER_LOGGER, BROKER, TOPIC] }
}

pub async fn handle(broker: &Arc<Broker>, ctx: &RequestContext, request: ListConfigResourcesRequest) -> Reply<ListConfigResourcesResponse> {
    let response = ListConfigResourcesResponse::default();
    // Kafka: DESCRIBE_CONFIGS on the cluster.
    if !cluster_allowed(broker, ctx, Op::DescribeConfigs) {
        return Reply::Now(response.with_error_code(ResponseError::ClusterAuthorizationFailed.code()));
    }
    let supported = supported(ctx.version);
    let wanted: &[i8] = if request.resource_types.is_empty() { supported } else { &request.resource_types };
    // Kafka answers a type it does not list with UNSUPPORTED_VERSION for the whole request.
    if wanted.iter().any(|t| !supported.contains(t)) {
        return Reply::Now(response.with_error_code(ResponseError::UnsupportedVersion.code()));
    }
    let resource =
        |resource_type: i8, name: String| ConfigResource::default().with_resource_type(resource_type).with_resource_name(str_bytes(name));
    let mut resources = Vec::new();
    if wanted.contains(&GROUP) {
        // The groups with configs of their own (`crate::group_configs`).
        resources.extend(broker.group_configs.groups().into_iter().map(|g| resource(GROUP, g)));
    }
    // Every broker's configs, whatever the listener announces.
    let (brokers, _) = brokers_and_controller(broker, ListenerRole::Client);
    for resource_type in [BROKER_LOGGER, BROKER] {
        if wanted.contains(&resource_type) {
            resources.extend(brokers.iter().map(|b| resource(resource_type, b.id.to_string())));
        }
    }
    if wanted.contains(&TOPIC) {
        resources.extend(broker.topics.list().iter().map(|t| resource(TOPIC, t.name.clone())));
    }
    Reply::Now(response.with_config_resources(resources))
}
