//! ShareGroupHeartbeat (KIP-932): decode, let the coordinator answer (after the group's new
//! state is durable), and resolve the assignment's topic names to ids.

use std::sync::Arc;

use kafka_protocol::messages::share_group_heartbeat_response::{Assignment, TopicPartitions};
use kafka_protocol::messages::{ShareGroupHeartbeatRequest, ShareGroupHeartbeatResponse};

use super::consumer_group_heartbeat::{RegistryTopics, by_topic_id, heartbeat_allowed};
use super::join_group::{client_host, client_id};
use super::str_bytes;
use crate::broker::Broker;
use crate::error::GroupErrorCode;
use crate::groups::{ShareHeartbeat, ShareHeartbeatAnswer};
use crate::router::{Reply, RequestContext};
use crate::topics::TopicRegistry;

pub async fn handle(broker: &Arc<Broker>, ctx: &RequestContext, request: ShareGroupHeartbeatRequest) -> Reply<ShareGroupHeartbeatResponse> {
    if let Err((e, message)) = heartbeat_allowed(broker, ctx, &request.group_id, request.subscribed_topic_names.as_deref()) {
        return Reply::Now(ShareGroupHeartbeatResponse::default().with_error_code(e.code()).with_error_message(Some(str_bytes(message))));
    }
    let settings = broker.group_configs.share_settings(&request.group_id);
    let req = ShareHeartbeat {
        group_id: request.group_id.to_string(),
        member_id: request.member_id.to_string(),
        member_epoch: request.member_epoch,
        rack_id: request.rack_id.map(|s| s.to_string()),
        subscribed_topic_names: request.subscribed_topic_names.map(|ts| ts.into_iter().map(|t| t.to_string()).collect()),
        client_id: client_id(ctx),
        client_host: client_host(ctx),
        session_timeout: settings.session_timeout,
        heartbeat_interval: settings.heartbeat_interval,
        max_size: broker.config.share_max_group_size,
    };
    let answer = broker.groups.share_heartbeat(req, &RegistryTopics(&broker.topics));
    let broker = broker.clone();
    Reply::Later(Box::pin(async move {
        let answer = answer.resolve(ShareHeartbeatAnswer::error).await;
        response(&broker.topics, answer)
    }))
}

fn response(topics: &TopicRegistry, a: ShareHeartbeatAnswer) -> ShareGroupHeartbeatResponse {
    let assignment = a.assignment.map(|parts| {
        let tps = by_topic_id(topics, parts).map(|(id, ps)| TopicPartitions::default().with_topic_id(id).with_partitions(ps)).collect();
        Assignment::default().with_topic_partitions(tps)
    });
    ShareGroupHeartbeatResponse::default()
        .with_error_code(a.error.map_or(0, |e| e.code()))
        .with_error_message(a.message.map(str_bytes))
        .with_member_id(a.member_id.map(str_bytes))
        .with_member_epoch(a.member_epoch)
        .with_heartbeat_interval_ms(a.heartbeat_interval_ms)
        .with_assignment(assignment)
}
