//! DeleteShareGroupOffsets: an empty share group forgets its state in the named topics, in
//! every partition (the leaders of those other brokers lead are asked on their inter-broker
//! listener, and then forget theirs); durable before it is answered.

use std::sync::Arc;

use kafka_protocol::ResponseError;
use kafka_protocol::messages::delete_share_group_offsets_response::DeleteShareGroupOffsetsResponseTopic;
use kafka_protocol::messages::{DeleteShareGroupOffsetsRequest, DeleteShareGroupOffsetsResponse};

use super::access::Op;
use super::share_group_offsets::{allowed, forget_everywhere, forget_group, share_group};
use super::str_bytes;
use crate::broker::Broker;
use crate::router::{Reply, RequestContext};

pub async fn handle(broker: &Arc<Broker>, ctx: &RequestContext, request: DeleteShareGroupOffsetsRequest) -> Reply<DeleteShareGroupOffsetsResponse> {
    let top = |e: ResponseError, message: String| Reply::Now(DeleteShareGroupOffsetsResponse::default().with_error_code(e.code()).with_error_message(Some(str_bytes(message))));
    // From the group's coordinator (the group was checked there): forget what is led here.
    let from_coordinator = broker.cluster.is_some() && crate::interbroker::from_a_broker(broker, ctx, &request);
    if !from_coordinator {
        // Kafka: DELETE on the group.
        if let Err(e) = allowed(broker, ctx, Op::Delete, &request.group_id) {
            return top(e, "not authorized to delete the group's offsets".into());
        }
        match share_group(broker, &request.group_id) {
            Ok((_, true)) => {}
            Ok((_, false)) => return top(ResponseError::NonEmptyGroup, format!("share group {} has members", &*request.group_id)),
            Err(e) => return top(e, e.to_string()),
        }
    }
    let broker = broker.clone();
    Reply::Later(Box::pin(async move {
        let group = request.group_id.to_string();
        let mut responses = Vec::with_capacity(request.topics.len());
        for t in request.topics {
            let row = DeleteShareGroupOffsetsResponseTopic::default().with_topic_name(t.topic_name.clone());
            let Some(topic) = broker.topics.get(&t.topic_name) else {
                responses.push(row.with_error_code(ResponseError::UnknownTopicOrPartition.code()));
                continue;
            };
            let row = row.with_topic_id(topic.id);
            let names = [t.topic_name.to_string()];
            let forgotten = if from_coordinator { forget_group(&broker, &group, &names).await } else { forget_everywhere(&broker, &group, &names).await };
            responses.push(match forgotten {
                Ok(()) => row,
                Err(e) => row.with_error_code(e.code()).with_error_message(Some(str_bytes(e.to_string()))),
            });
        }
        DeleteShareGroupOffsetsResponse::default().with_responses(responses)
    }))
}
