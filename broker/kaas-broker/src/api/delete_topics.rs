//! DeleteTopics, by name or (v6) by topic id.

use std::sync::Arc;

use kafka_protocol::ResponseError;
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::{DeleteTopicsRequest, DeleteTopicsResponse};
use uuid::Uuid;

use super::access::{Op, Resource, allowed};
use super::quota_use::{Mutations, THROTTLED};
use super::{admin_timeout, str_bytes, topic_name};
use crate::broker::Broker;
use crate::router::{Reply, RequestContext};

pub async fn handle(broker: &Arc<Broker>, ctx: &RequestContext, request: DeleteTopicsRequest) -> Reply<DeleteTopicsResponse> {
    let wanted: Vec<(Option<String>, Uuid)> = if ctx.version >= 6 {
        request.topics.into_iter().map(|t| (t.name.map(|n| n.0.to_string()), t.topic_id)).collect()
    } else {
        request.topic_names.into_iter().map(|n| (Some(n.0.to_string()), Uuid::nil())).collect()
    };
    let timeout = admin_timeout(request.timeout_ms);
    let mut responses = Vec::with_capacity(wanted.len());
    let mut mutations = Mutations::new(broker, ctx, ctx.version >= 5);
    for (name, id) in wanted {
        responses.push({
            let name = match name {
                Some(name) => Ok(name),
                None => broker.topics.get_by_id(&id).map(|t| t.name.clone()).ok_or(ResponseError::UnknownTopicId),
            };
            let result = DeletableTopicResult::default().with_topic_id(id);
            let refused = ResponseError::TopicAuthorizationFailed.code();
            match name {
                Err(e) => result.with_error_code(e.code()),
                // Kafka: a topic named by id keeps its name from who may not describe it.
                Ok(name) if !id.is_nil() && !allowed(broker, ctx, Op::Describe, Resource::Topic, &name) => result.with_error_code(refused),
                Ok(name) if !allowed(broker, ctx, Op::Delete, Resource::Topic, &name) => {
                    result.with_name(Some(topic_name(name))).with_error_code(refused)
                }
                Ok(name) if !mutations.admit() => result
                    .with_name(Some(topic_name(name)))
                    .with_error_code(ResponseError::ThrottlingQuotaExceeded.code())
                    .with_error_message(Some(str_bytes(THROTTLED))),
                Ok(name) => {
                    let partitions = broker.topics.get(&name).map_or(0, |t| t.partition_count());
                    match crate::topic_admin::delete(broker, &name, timeout).await {
                        Ok(deleted) => {
                            mutations.done(partitions);
                            result.with_name(Some(topic_name(name))).with_topic_id(deleted)
                        }
                        Err(e) => result
                            .with_name(Some(topic_name(name)))
                            .with_error_code(e.code())
                            .with_error_message(Some(str_bytes(e.to_string()))),
                    }
                }
            }
        });
    }
    Reply::Now(DeleteTopicsResponse::default().with_responses(responses).with_throttle_time_ms(mutations.throttle_ms()))
}
