//! CreatePartitions: grow a topic.

use std::sync::Arc;

use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::{CreatePartitionsRequest, CreatePartitionsResponse};

use super::str_bytes;
use crate::broker::Broker;
use crate::router::{Reply, RequestContext};

pub async fn handle(broker: &Arc<Broker>, _ctx: &RequestContext, request: CreatePartitionsRequest) -> Reply<CreatePartitionsResponse> {
    let results = request
        .topics
        .into_iter()
        .map(|topic| {
            let result = CreatePartitionsTopicResult::default().with_name(topic.name.clone());
            match broker.topics.add_partitions(&topic.name.0, topic.count, request.validate_only) {
                Ok(()) => result,
                Err(e) => result.with_error_code(e.code()).with_error_message(Some(str_bytes(e.to_string()))),
            }
        })
        .collect();
    Reply::Now(CreatePartitionsResponse::default().with_results(results))
}
