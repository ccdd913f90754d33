//! DescribeCluster: the brokers Metadata names (this one alone in local mode), and the
//! controller.

use std::sync::Arc;

use kafka_protocol::ResponseError;
use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{BrokerId, DescribeClusterRequest, DescribeClusterResponse};

use super::access::{Op, Resource, authorized_operations, cluster_allowed};
use super::metadata::brokers_and_controller;
use super::str_bytes;
use crate::authz::model::CLUSTER_NAME;
use crate::broker::Broker;
use crate::router::{Reply, RequestContext};

/// KIP-919's endpoint types.
const BROKERS: i8 = 1;

pub async fn handle(broker: &Arc<Broker>, ctx: &RequestContext, request: DescribeClusterRequest) -> Reply<DescribeClusterResponse> {
    let (brokers, controller) = brokers_and_controller(broker, ctx.listener);
    let ops = authorized_operations(broker, ctx, request.include_cluster_authorized_operations, Resource::Cluster, CLUSTER_NAME);
    let mut response = DescribeClusterResponse::default()
        .with_endpoint_type(BROKERS)
        .with_cluster_id(str_bytes(broker.config.cluster_id.clone()))
        .with_controller_id(BrokerId(controller))
        .with_cluster_authorized_operations(ops);
    // Kafka: DESCRIBE on the cluster.
    if !cluster_allowed(broker, ctx, Op::Describe) {
        return Reply::Now(
            response.with_error_code(ResponseError::ClusterAuthorizationFailed.code()).with_cluster_authorized_operations(i32::MIN),
        );
    }
    if ctx.version >= 1 && request.endpoint_type != BROKERS {
        return Reply::Now(
            response
                .with_error_code(ResponseError::MismatchedEndpointType.code())
                .with_error_message(Some(str_bytes("kaas brokers describe brokers; there are no controller endpoints"))),
        );
    }
    response.brokers = brokers
        .into_iter()
        .map(|b| DescribeClusterBroker::default().with_broker_id(BrokerId(b.id)).with_host(str_bytes(b.host)).with_port(i32::from(b.port)))
        .collect();
    Reply::Now(response)
}
