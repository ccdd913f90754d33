//! OffsetFetch: one group (v1–7) or many (v8+). With `require_stable` (v7+, read_committed
//! consumers), a partition with an offset pending in an open transaction answers
//! UNSTABLE_OFFSET_COMMIT (retriable) instead of an offset that may be about to change.

use std::sync::Arc;

use kafka_protocol::ResponseError;
use kafka_protocol::messages::offset_fetch_response::{OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions, OffsetFetchResponseTopic, OffsetFetchResponseTopics};
use kafka_protocol::messages::{OffsetFetchRequest, OffsetFetchResponse};

use crate::error::GroupErrorCode;
use super::access::{Op, Resource, allowed, check};
use super::{str_bytes, topic_name};
use crate::broker::Broker;
use crate::groups::OffsetView;
use crate::router::{Reply, RequestContext};

type Found = Vec<(String, Vec<(i32, Option<OffsetView>)>)>;

pub async fn handle(broker: &Arc<Broker>, ctx: &RequestContext, request: OffsetFetchRequest) -> Reply<OffsetFetchResponse> {
    let response = OffsetFetchResponse::default();
    let unstable = |group: &str, topic: &str, partition: i32| {
        let pending = request.require_stable && broker.groups.has_pending_txn_offset(group, topic, partition);
        if pending { ResponseError::UnstableOffsetCommit.code() } else { 0 }
    };
    if ctx.version >= 8 {
        let groups = request
            .groups
            .into_iter()
            .map(|g| {
                let all = g.topics.is_none();
                let topics = g.topics.map(|ts| ts.into_iter().map(|t| (t.name.to_string(), t.partition_indexes)).collect());
                let out = OffsetFetchResponseGroup::default();
                // Kafka: DESCRIBE on the group.
                if let Err(e) = check(broker, ctx, Op::Describe, Resource::Group, &g.group_id) {
                    return out.with_group_id(g.group_id).with_error_code(e.code());
                }
                // v9: a consumer group's member says who it is, so a stale one is refused.
                let member = g.member_id.as_ref().map(|m| (m.as_str(), g.member_epoch));
                match broker.groups.fetch_offsets(&g.group_id, member, topics) {
                    Err(e) => out.with_group_id(g.group_id).with_error_code(e.code()),
                    Ok(found) => out.with_topics(convert(visible(broker, ctx, found, all), |t, ps| {
                        let refused = !allowed(broker, ctx, Op::Describe, Resource::Topic, &t);
                        let ps = ps.into_iter().map(|(p, v)| if refused { (p, unknown_offset()) } else { (p, v) }).map(|(p, v)| OffsetFetchResponsePartitions::default().with_partition_index(p).with_committed_offset(v.offset).with_committed_leader_epoch(v.leader_epoch).with_metadata(Some(str_bytes(v.metadata))).with_error_code(if refused { ResponseError::TopicAuthorizationFailed.code() } else { unstable(&g.group_id, &t, p) }));
                        let ps = ps.collect();
                        OffsetFetchResponseTopics::default().with_name(topic_name(t)).with_partitions(ps)
                    })).with_group_id(g.group_id),
                }
            })
            .collect();
        return Reply::Now(response.with_groups(groups));
    }
    let all = request.topics.is_none();
    let topics = request.topics.map(|ts| ts.into_iter().map(|t| (t.name.to_string(), t.partition_indexes)).collect());
    // Kafka: DESCRIBE on the group (top-level error from v2; v1 has it per partition only).
    if let Err(e) = check(broker, ctx, Op::Describe, Resource::Group, &request.group_id) {
        return Reply::Now(response.with_error_code(e.code()));
    }
    Reply::Now(match broker.groups.fetch_offsets(&request.group_id, None, topics) {
        Err(e) => response.with_error_code(e.code()),
        Ok(found) => response.with_topics(convert(visible(broker, ctx, found, all), |t, ps| {
            let refused = !allowed(broker, ctx, Op::Describe, Resource::Topic, &t);
            let ps = ps.into_iter().map(|(p, v)| if refused { (p, unknown_offset()) } else { (p, v) }).map(|(p, v)| OffsetFetchResponsePartition::default().with_partition_index(p).with_committed_offset(v.offset).with_committed_leader_epoch(v.leader_epoch).with_metadata(Some(str_bytes(v.metadata))).with_error_code(if refused { ResponseError::TopicAuthorizationFailed.code() } else { unstable(&request.group_id, &t, p) }));
            let ps = ps.collect();
            OffsetFetchResponseTopic::default().with_name(topic_name(t)).with_partitions(ps)
        })),
    })
}

/// Kafka answers an all-topics fetch with the topics the principal may describe only; named
/// topics it may not describe are answered TOPIC_AUTHORIZATION_FAILED (and no offset).
fn visible(broker: &Broker, ctx: &RequestContext, found: Found, all: bool) -> Found {
    if !all {
        return found;
    }
    found.into_iter().filter(|(t, _)| allowed(broker, ctx, Op::Describe, Resource::Topic, t)).collect()
}

fn unknown_offset() -> OffsetView {
    OffsetView { offset: -1, leader_epoch: -1, metadata: String::new() }
}

/// Builds each topic's answer; a partition without a committed offset reads as offset -1 with
/// empty metadata, as in Kafka.
fn convert<T>(found: Found, topic: impl Fn(String, Vec<(i32, OffsetView)>) -> T) -> Vec<T> {
    found.into_iter().map(|(t, ps)| topic(t, ps.into_iter().map(|(p, v)| (p, v.unwrap_or_else(unknown_offset))).collect())).collect()
}
