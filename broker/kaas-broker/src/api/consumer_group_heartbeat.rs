//! ConsumerGroupHeartbeat (KIP-848): decode, resolve topic ids to names, let the coordinator
//! answer (after the group's new state is durable), and resolve names back to ids.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use kafka_protocol::ResponseError;
use kafka_protocol::messages::consumer_group_heartbeat_response::{Assignment, TopicPartitions};
use kafka_protocol::messages::{ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse, TopicName};

use crate::error::GroupErrorCode;
use super::access::{Op, Resource, allowed, check};
use super::join_group::{client_host, client_id};
use super::str_bytes;
use crate::broker::Broker;
use crate::groups::{ConsumerHeartbeat, HeartbeatAnswer, TopicView};
use crate::router::{Reply, RequestContext};
use crate::topics::TopicRegistry;

/// The topic registry as the coordinator sees it.
pub(crate) struct RegistryTopics<'a>(pub(crate) &'a TopicRegistry);

impl TopicView for RegistryTopics<'_> {
    fn partition_count(&self, topic: &str) -> Option<i32> {
        self.0
            .get(topic)
            .filter(|t| !t.is_internal())
            .map(|t| t.partition_count())
    }

    fn topic_names(&self) -> Vec<String> {
        self.0
            .list()
            .into_iter()
            .filter(|t| !t.is_internal())
            .map(|t| t.name.clone())
            .collect()
    }
}

/// Kafka's check of a KIP-848 or KIP-932 heartbeat: READ on the group, and DESCRIBE on every
/// subscribed topic.
pub(crate) fn heartbeat_allowed(broker: &Broker, ctx: &RequestContext, group: &str, subscribed: Option<&[TopicName]>) -> Result<(), (ResponseError, String)> {
    check(broker, ctx, Op::Read, Resource::Group, group).map_err(|e| (e, format!("not authorized to read group {group}")))?;
    let hidden: Vec<&str> = subscribed.unwrap_or_default().iter().map(|t| t.as_str()).filter(|t| !allowed(broker, ctx, Op::Describe, Resource::Topic, t)).collect();
    if !hidden.is_empty() {
        return Err((ResponseError::TopicAuthorizationFailed, format!("not authorized to describe the subscribed topics {hidden:?}")));
    }
    Ok(())
}

pub async fn handle(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    request: ConsumerGroupHeartbeatRequest,
) -> Reply<ConsumerGroupHeartbeatResponse> {
    if let Err((e, message)) = heartbeat_allowed(broker, ctx, &request.group_id, request.subscribed_topic_names.as_deref()) {
        return Reply::Now(ConsumerGroupHeartbeatResponse::default().with_error_code(e.code()).with_error_message(Some(str_bytes(message))));
    }
    let owned = request.topic_partitions.map(|tps| {
        let mut owned: BTreeMap<String, BTreeSet<i32>> = BTreeMap::new();
        for tp in tps {
            // Kafka ignores owned partitions of topics it does not know (deleted meanwhile).
            if let Some(topic) = broker.topics.get_by_id(&tp.topic_id) {
                owned
                    .entry(topic.name.clone())
                    .or_default()
                    .extend(tp.partitions);
            }
        }
        owned
    });
    let (session_timeout, heartbeat_interval) = broker.group_configs.consumer_overrides(&request.group_id);
    let req = ConsumerHeartbeat {
        group_id: request.group_id.to_string(),
        member_id: request.member_id.to_string(),
        member_epoch: request.member_epoch,
        instance_id: request.instance_id.map(|s| s.to_string()),
        rack_id: request.rack_id.map(|s| s.to_string()),
        rebalance_timeout_ms: request.rebalance_timeout_ms,
        subscribed_topic_names: request
            .subscribed_topic_names
            .map(|ts| ts.into_iter().map(|t| t.to_string()).collect()),
        subscribed_topic_regex: request.subscribed_topic_regex.map(|s| s.to_string()),
        server_assignor: request.server_assignor.map(|s| s.to_string()),
        owned,
        client_id: client_id(ctx),
        client_host: client_host(ctx),
        member_id_required: ctx.version >= 1,
        session_timeout,
        heartbeat_interval,
    };
    let answer = broker
        .groups
        .consumer_heartbeat(req, &RegistryTopics(&broker.topics));
    let broker = broker.clone();
    Reply::Later(Box::pin(async move {
        let answer = answer.resolve(HeartbeatAnswer::error).await;
        response(&broker.topics, answer)
    }))
}

fn response(topics: &TopicRegistry, a: HeartbeatAnswer) -> ConsumerGroupHeartbeatResponse {
    let assignment = a.assignment.map(|parts| {
        let tps = by_topic_id(topics, parts).map(|(id, ps)| TopicPartitions::default().with_topic_id(id).with_partitions(ps)).collect();
        Assignment::default().with_topic_partitions(tps)
    });
    ConsumerGroupHeartbeatResponse::default()
        .with_error_code(a.error.map_or(0, |e| e.code()))
        .with_error_message(a.message.map(str_bytes))
        .with_member_id(a.member_id.map(str_bytes))
        .with_member_epoch(a.member_epoch)
        .with_heartbeat_interval_ms(a.heartbeat_interval_ms)
        .with_assignment(assignment)
}

/// An assignment by topic id, as heartbeat answers carry it (topics deleted meanwhile left out).
pub(crate) fn by_topic_id(topics: &TopicRegistry, parts: crate::groups::Partitions) -> impl Iterator<Item = (uuid::Uuid, Vec<i32>)> + '_ {
    parts.into_iter().filter_map(|(name, ps)| topics.get(&name).map(|t| (t.id, ps.into_iter().collect())))
}
