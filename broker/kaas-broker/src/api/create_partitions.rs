//! CreatePartitions: grow a topic.

use std::sync::Arc;

use kafka_protocol::ResponseError;
use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::{CreatePartitionsRequest, CreatePartitionsResponse};

use super::access::{Op, Resource, allowed};
use super::quota_use::{Mutations, THROTTLED};
use super::{admin_timeout, str_bytes};
use crate::broker::Broker;
use crate::router::{Reply, RequestContext};

pub async fn handle(broker: &Arc<Broker>, ctx: &RequestContext, request: CreatePartitionsRequest) -> Reply<CreatePartitionsResponse> {
    let timeout = admin_timeout(request.timeout_ms);
    let mut results = Vec::with_capacity(request.topics.len());
    let mut mutations = Mutations::new(broker, ctx, ctx.version >= 3);
    for topic in request.topics {
        let result = CreatePartitionsTopicResult::default().with_name(topic.name.clone());
        // Kafka: ALTER on the topic.
        if !allowed(broker, ctx, Op::Alter, Resource::Topic, &topic.name) {
            results.push(result.with_error_code(ResponseError::TopicAuthorizationFailed.code()));
            continue;
        }
        if !request.validate_only && !mutations.admit() {
            let throttled = ResponseError::ThrottlingQuotaExceeded.code();
            results.push(result.with_error_code(throttled).with_error_message(Some(str_bytes(THROTTLED))));
            continue;
        }
        let before = broker.topics.get(&topic.name.0).map_or(0, |t| t.partition_count());
        results.push(match crate::topic_admin::add_partitions(broker, &topic.name.0, topic.count, request.validate_only, timeout).await {
            Ok(()) => {
                if !request.validate_only {
                    mutations.done(topic.count - before);
                }
                result
            }
            Err(e) => result.with_error_code(e.code()).with_error_message(Some(str_bytes(e.to_string()))),
        });
    }
    Reply::Now(CreatePartitionsResponse::default().with_results(results).with_throttle_time_ms(mutations.throttle_ms()))
}
