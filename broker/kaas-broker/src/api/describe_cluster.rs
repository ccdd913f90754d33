//! DescribeCluster: this broker is the whole cluster in local mode.

use std::sync::Arc;

use kafka_protocol::ResponseError;
use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{BrokerId, DescribeClusterRequest, DescribeClusterResponse};

use super::str_bytes;
use crate::broker::Broker;
use crate::router::{Reply, RequestContext};

/// KIP-919's endpoint types.
const BROKERS: i8 = 1;

pub async fn handle(broker: &Arc<Broker>, ctx: &RequestContext, request: DescribeClusterRequest) -> Reply<DescribeClusterResponse> {
    let node = BrokerId(broker.config.node_id);
    let mut response = DescribeClusterResponse::default()
        .with_endpoint_type(BROKERS)
        .with_cluster_id(str_bytes(broker.config.cluster_id.clone()))
        .with_controller_id(node)
        .with_cluster_authorized_operations(i32::MIN);
    if ctx.version >= 1 && request.endpoint_type != BROKERS {
        return Reply::Now(
            response
                .with_error_code(ResponseError::MismatchedEndpointType.code())
                .with_error_message(Some(str_bytes("kaas brokers describe brokers; there are no controller endpoints"))),
        );
    }
    response.brokers = vec![DescribeClusterBroker::default()
        .with_broker_id(node)
        .with_host(str_bytes(broker.config.advertise_host.clone()))
        .with_port(i32::from(broker.config.advertise_port))];
    Reply::Now(response)
}
