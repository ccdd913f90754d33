//! DescribeShareGroupOffsets: each partition's share-partition start offset (SPSO) of a share
//! group, from the partition's leader's state when this broker leads it, else as last
//! persisted on the volume (-1 where the group has no state).

use std::sync::Arc;

use kafka_protocol::ResponseError;
use kafka_protocol::messages::describe_share_group_offsets_response::{DescribeShareGroupOffsetsResponseGroup, DescribeShareGroupOffsetsResponsePartition, DescribeShareGroupOffsetsResponseTopic};
use kafka_protocol::messages::{DescribeShareGroupOffsetsRequest, DescribeShareGroupOffsetsResponse};
use kaas_coordinator::share_partition::store::SharePartitionLog;

use super::access::Op;
use super::share_group_offsets::{allowed, led_share_log, share_group};
use super::str_bytes;
use crate::broker::Broker;
use crate::router::{Reply, RequestContext};

pub async fn handle(broker: &Arc<Broker>, ctx: &RequestContext, request: DescribeShareGroupOffsetsRequest) -> Reply<DescribeShareGroupOffsetsResponse> {
    let (broker, ctx) = (broker.clone(), ctx.clone());
    Reply::Later(Box::pin(async move {
        let mut groups = Vec::with_capacity(request.groups.len());
        for g in request.groups {
            let answer = DescribeShareGroupOffsetsResponseGroup::default().with_group_id(g.group_id.clone());
            let fail = |e: ResponseError, answer: DescribeShareGroupOffsetsResponseGroup| answer.with_error_code(e.code()).with_error_message(Some(str_bytes(e.to_string())));
            if let Err(e) = allowed(&broker, &ctx, Op::Describe, &g.group_id) {
                groups.push(fail(e, answer));
                continue;
            }
            let known = match share_group(&broker, &g.group_id) {
                Ok((topics, _)) => topics,
                Err(e) => {
                    groups.push(fail(e, answer));
                    continue;
                }
            };
            // v0 names its topics; none named (v1's null, or an empty list): every topic the
            // group has state in.
            let wanted: Vec<(String, Vec<i32>)> = match g.topics.filter(|ts| !ts.is_empty()) {
                Some(ts) => ts.into_iter().map(|t| (t.topic_name.to_string(), t.partitions)).collect(),
                None => known.iter().filter_map(|t| broker.topics.get(t).map(|topic| (t.clone(), (0..topic.partition_count()).collect()))).collect(),
            };
            let mut topics = Vec::with_capacity(wanted.len());
            for (name, partitions) in wanted {
                let topic = broker.topics.get(&name);
                let mut out = Vec::with_capacity(partitions.len());
                for p in partitions {
                    let row = DescribeShareGroupOffsetsResponsePartition::default().with_partition_index(p).with_leader_epoch(-1);
                    out.push(match &topic {
                        None => row.with_start_offset(-1).with_error_code(ResponseError::UnknownTopicOrPartition.code()),
                        Some(_) => row.with_start_offset(start_offset(&broker, &g.group_id, &name, p).await),
                    });
                }
                topics.push(DescribeShareGroupOffsetsResponseTopic::default().with_topic_name(str_bytes(name).into()).with_topic_id(topic.map_or(uuid::Uuid::nil(), |t| t.id)).with_partitions(out));
            }
            groups.push(answer.with_topics(topics));
        }
        DescribeShareGroupOffsetsResponse::default().with_groups(groups)
    }))
}

/// The group's start offset in a partition: the leader's live state if this broker leads
/// it, else what the volume holds; -1 without state.
async fn start_offset(broker: &Arc<Broker>, group: &str, topic: &str, partition: i32) -> i64 {
    if let Ok((log, _)) = led_share_log(broker, topic, partition).await {
        return crate::share::partitions::start_offset(&log, group).await.unwrap_or(-1);
    }
    let Ok(dir) = broker.engine.layout().partition_dir(topic, partition) else { return -1 };
    let fs = broker.engine.fs().clone();
    let group = group.to_owned();
    tokio::task::spawn_blocking(move || SharePartitionLog::peek(&*fs, &dir).ok().and_then(|m| m.get(&group).map(|s| s.start)))
        .await
        .ok()
        .flatten()
        .unwrap_or(-1)
}
