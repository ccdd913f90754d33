//! ConsumerGroupDescribe (KIP-848): epochs, assignor, and each member's subscription, current
//! and target assignment.

use std::sync::Arc;

use kafka_protocol::messages::consumer_group_describe_response::{
    Assignment, DescribedGroup, Member, TopicPartitions,
};
use kafka_protocol::messages::{
    ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse, TopicName,
};

use crate::error::GroupErrorCode;
use super::access::{Op, Resource, authorized_operations, check};
use super::str_bytes;
use crate::broker::Broker;
use crate::groups::ConsumerMemberDescribed;
use crate::router::{Reply, RequestContext};
use crate::topics::TopicRegistry;

pub async fn handle(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    request: ConsumerGroupDescribeRequest,
) -> Reply<ConsumerGroupDescribeResponse> {
    let groups = request
        .group_ids
        .into_iter()
        .map(|id| {
            // Kafka: DESCRIBE on the group.
            if let Err(e) = check(broker, ctx, Op::Describe, Resource::Group, &id) {
                return DescribedGroup::default()
                    .with_group_id(id)
                    .with_error_code(e.code())
                    .with_authorized_operations(i32::MIN);
            }
            let ops = authorized_operations(
                broker,
                ctx,
                request.include_authorized_operations,
                Resource::Group,
                &id,
            );
            let d = broker.groups.describe_consumer(&id);
            let members = d
                .members
                .into_iter()
                .map(|m| member(&broker.topics, m, ctx.version))
                .collect();
            DescribedGroup::default()
                .with_group_id(id)
                .with_error_code(d.error.map_or(0, |e| e.code()))
                .with_error_message(d.message.map(str_bytes))
                .with_group_state(str_bytes(d.state))
                .with_group_epoch(d.group_epoch)
                .with_assignment_epoch(d.assignment_epoch)
                .with_assignor_name(str_bytes(d.assignor))
                .with_members(members)
                .with_authorized_operations(ops)
        })
        .collect();
    Reply::Now(ConsumerGroupDescribeResponse::default().with_groups(groups))
}

fn assignment(topics: &TopicRegistry, parts: crate::groups::Partitions) -> Assignment {
    let tps = parts
        .into_iter()
        .filter_map(|(name, ps)| {
            let t = topics.get(&name)?;
            Some(
                TopicPartitions::default()
                    .with_topic_id(t.id)
                    .with_topic_name(TopicName(str_bytes(name)))
                    .with_partitions(ps.into_iter().collect()),
            )
        })
        .collect();
    Assignment::default().with_topic_partitions(tps)
}

fn member(topics: &TopicRegistry, m: ConsumerMemberDescribed, version: i16) -> Member {
    Member::default()
        .with_member_id(str_bytes(m.member_id))
        .with_instance_id(m.instance_id.map(str_bytes))
        .with_rack_id(m.rack_id.map(str_bytes))
        .with_member_epoch(m.member_epoch)
        .with_client_id(str_bytes(m.client_id))
        .with_client_host(str_bytes(m.client_host))
        .with_subscribed_topic_names(
            m.subscribed_names
                .into_iter()
                .map(|t| TopicName(str_bytes(t)))
                .collect(),
        )
        .with_subscribed_topic_regex(m.subscribed_regex.map(str_bytes))
        .with_assignment(assignment(topics, m.assigned))
        .with_target_assignment(assignment(topics, m.target))
        // v1: 1 = a member speaking the consumer protocol (not a converted classic member).
        .with_member_type(if version >= 1 { 1 } else { -1 })
}
