//! ShareGroupDescribe (KIP-932): the group's state and epoch, and each member's subscription
//! and assignment.

use std::sync::Arc;

use kafka_protocol::messages::share_group_describe_response::{Assignment, DescribedGroup, Member, TopicPartitions};
use kafka_protocol::messages::{ShareGroupDescribeRequest, ShareGroupDescribeResponse, TopicName};

use super::access::{Op, Resource, authorized_operations, check};
use super::str_bytes;
use crate::broker::Broker;
use crate::error::GroupErrorCode;
use crate::groups::{SHARE_ASSIGNOR, ShareMemberDescribed};
use crate::router::{Reply, RequestContext};
use crate::topics::TopicRegistry;

pub async fn handle(broker: &Arc<Broker>, ctx: &RequestContext, request: ShareGroupDescribeRequest) -> Reply<ShareGroupDescribeResponse> {
    let groups = request
        .group_ids
        .into_iter()
        .map(|id| {
            // Kafka: DESCRIBE on the group.
            if let Err(e) = check(broker, ctx, Op::Describe, Resource::Group, &id) {
                return DescribedGroup::default().with_group_id(id).with_error_code(e.code()).with_authorized_operations(i32::MIN);
            }
            let ops = authorized_operations(broker, ctx, request.include_authorized_operations, Resource::Group, &id);
            let d = broker.groups.describe_share(&id);
            let members = d.members.into_iter().map(|m| member(&broker.topics, m)).collect();
            DescribedGroup::default()
                .with_group_id(id)
                .with_error_code(d.error.map_or(0, |e| e.code()))
                .with_error_message(d.message.map(str_bytes))
                .with_group_state(str_bytes(d.state))
                .with_group_epoch(d.group_epoch)
                .with_assignment_epoch(d.group_epoch)
                .with_assignor_name(str_bytes(SHARE_ASSIGNOR))
                .with_members(members)
                .with_authorized_operations(ops)
        })
        .collect();
    Reply::Now(ShareGroupDescribeResponse::default().with_groups(groups))
}

fn member(topics: &TopicRegistry, m: ShareMemberDescribed) -> Member {
    let tps = m
        .assigned
        .into_iter()
        .filter_map(|(name, ps)| {
            let t = topics.get(&name)?;
            Some(TopicPartitions::default().with_topic_id(t.id).with_topic_name(TopicName(str_bytes(name))).with_partitions(ps.into_iter().collect()))
        })
        .collect();
    Member::default()
        .with_member_id(str_bytes(m.member_id))
        .with_rack_id(m.rack_id.map(str_bytes))
        .with_member_epoch(m.member_epoch)
        .with_client_id(str_bytes(m.client_id))
        .with_client_host(str_bytes(m.client_host))
        .with_subscribed_topic_names(m.subscribed_names.into_iter().map(|t| TopicName(str_bytes(t))).collect())
        .with_assignment(Assignment::default().with_topic_partitions(tps))
}
