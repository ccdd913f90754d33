//! DescribeShareGroupOffsets: each partition's share-partition start offset (SPSO) of a share
//! group and, from v1 (KIP-1226), its lag. Both come from the partition's leader, the one
//! writer of its share state: the group's coordinator answers for the partitions it leads and
//! asks the other leaders, signed, on their inter-broker listener, for theirs. Where no leader
//! answers, the start offset as last persisted on the volume, lag unknown (-1); -1 for both
//! where the group has no state.

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::ResponseError;
use kafka_protocol::messages::describe_share_group_offsets_request::{DescribeShareGroupOffsetsRequestGroup, DescribeShareGroupOffsetsRequestTopic};
use kafka_protocol::messages::describe_share_group_offsets_response::{DescribeShareGroupOffsetsResponseGroup, DescribeShareGroupOffsetsResponsePartition, DescribeShareGroupOffsetsResponseTopic};
use kafka_protocol::messages::{DescribeShareGroupOffsetsRequest, DescribeShareGroupOffsetsResponse, TopicName};
use kaas_coordinator::share_partition::store::SharePartitionLog;

use super::access::Op;
use super::share_group_offsets::{allowed, led_share_log, share_group};
use super::str_bytes;
use crate::broker::Broker;
use crate::router::{Reply, RequestContext};
use crate::txn::route::{Route, partition_leader};

/// The version brokers ask each other at: the one with the lag.
const PEER_VERSION: i16 = 1;

/// A partition's answer: its start offset and lag, or an error.
type Progress = Result<(i64, i64), ResponseError>;

/// Neither start nor lag known.
const NO_STATE: (i64, i64) = (-1, -1);

pub async fn handle(broker: &Arc<Broker>, ctx: &RequestContext, request: DescribeShareGroupOffsetsRequest) -> Reply<DescribeShareGroupOffsetsResponse> {
    // From the group's coordinator: the group was checked there; answer for the partitions led here.
    let from_coordinator = broker.cluster.is_some() && crate::interbroker::from_a_broker(broker, ctx, &request);
    let (broker, ctx) = (broker.clone(), ctx.clone());
    Reply::Later(Box::pin(async move {
        let mut groups = Vec::with_capacity(request.groups.len());
        for g in request.groups {
            let answer = DescribeShareGroupOffsetsResponseGroup::default().with_group_id(g.group_id.clone());
            let fail = |e: ResponseError, answer: DescribeShareGroupOffsetsResponseGroup| answer.with_error_code(e.code()).with_error_message(Some(str_bytes(e.to_string())));
            let known = if from_coordinator {
                Vec::new()
            } else {
                if let Err(e) = allowed(&broker, &ctx, Op::Describe, &g.group_id) {
                    groups.push(fail(e, answer));
                    continue;
                }
                match share_group(&broker, &g.group_id) {
                    Ok((topics, _)) => topics,
                    Err(e) => {
                        groups.push(fail(e, answer));
                        continue;
                    }
                }
            };
            // Topics named; none named (null, or an empty list): every topic the group has
            // state in.
            let wanted: Vec<(String, Vec<i32>)> = match g.topics.filter(|ts| !ts.is_empty()) {
                Some(ts) => ts.into_iter().map(|t| (t.topic_name.to_string(), t.partitions)).collect(),
                None => known.iter().filter_map(|t| broker.topics.get(t).map(|topic| (t.clone(), (0..topic.partition_count()).collect()))).collect(),
            };
            let rows = progress_of(&broker, &g.group_id, &wanted, from_coordinator).await;
            let topics = wanted
                .into_iter()
                .map(|(name, partitions)| {
                    let topic_id = broker.topics.get(&name).map_or(uuid::Uuid::nil(), |t| t.id);
                    let out = partitions
                        .iter()
                        .map(|&p| {
                            let row = DescribeShareGroupOffsetsResponsePartition::default().with_partition_index(p).with_leader_epoch(-1);
                            match rows.get(&(name.clone(), p)).copied().unwrap_or(Err(ResponseError::UnknownServerError)) {
                                Ok((start, lag)) => row.with_start_offset(start).with_lag(lag),
                                Err(e) => row.with_start_offset(-1).with_error_code(e.code()).with_error_message(Some(str_bytes(e.to_string()))),
                            }
                        })
                        .collect();
                    DescribeShareGroupOffsetsResponseTopic::default().with_topic_name(str_bytes(name).into()).with_topic_id(topic_id).with_partitions(out)
                })
                .collect();
            groups.push(answer.with_topics(topics));
        }
        DescribeShareGroupOffsetsResponse::default().with_groups(groups)
    }))
}

/// Each wanted partition's progress: from here where this broker leads it (or where it is asked
/// by the coordinator), else from its leader.
async fn progress_of(broker: &Arc<Broker>, group: &str, wanted: &[(String, Vec<i32>)], from_coordinator: bool) -> BTreeMap<(String, i32), Progress> {
    let mut rows = BTreeMap::new();
    let mut elsewhere: BTreeMap<String, Vec<(String, i32)>> = BTreeMap::new();
    for (name, partitions) in wanted {
        for &p in partitions {
            let key = (name.clone(), p);
            if broker.topics.get(name).is_none() {
                rows.insert(key, Err(ResponseError::UnknownTopicOrPartition));
                continue;
            }
            match partition_leader(broker, name, p) {
                Route::Peer(address) if !from_coordinator => elsewhere.entry(address).or_default().push(key),
                _ => drop(rows.insert(key, Ok(here(broker, group, name, p).await))),
            }
        }
    }
    for (address, partitions) in elsewhere {
        let answered = ask_leader(broker, &address, group, &partitions).await;
        for key in partitions {
            let row = match answered.get(&key) {
                Some(row) => *row,
                // The leader did not answer for it: what the volume says.
                None => Ok(here(broker, group, &key.0, key.1).await),
            };
            rows.insert(key, row);
        }
    }
    rows
}

/// The group's start offset and lag in a partition: the live state and high watermark if this
/// broker leads it, else the start offset the volume holds and no lag.
async fn here(broker: &Arc<Broker>, group: &str, topic: &str, partition: i32) -> (i64, i64) {
    if let Ok((log, led)) = led_share_log(broker, topic, partition).await {
        return crate::share::partitions::progress(&log, group, led.high_watermark()).await.unwrap_or(NO_STATE);
    }
    let Ok(dir) = broker.engine.layout().partition_dir(topic, partition) else { return NO_STATE };
    let fs = broker.engine.fs().clone();
    let group = group.to_owned();
    tokio::task::spawn_blocking(move || SharePartitionLog::peek(&*fs, &dir).ok().and_then(|m| m.get(&group).map(|s| (s.start, -1))))
        .await
        .ok()
        .flatten()
        .unwrap_or(NO_STATE)
}

/// Asks the leader at `address` for the group's progress in its partitions; what it answered.
async fn ask_leader(broker: &Arc<Broker>, address: &str, group: &str, partitions: &[(String, i32)]) -> BTreeMap<(String, i32), Progress> {
    let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for (topic, p) in partitions {
        by_topic.entry(topic).or_default().push(*p);
    }
    let topics = by_topic.into_iter().map(|(t, ps)| DescribeShareGroupOffsetsRequestTopic::default().with_topic_name(TopicName(str_bytes(t))).with_partitions(ps)).collect();
    let request = DescribeShareGroupOffsetsRequest::default().with_groups(vec![DescribeShareGroupOffsetsRequestGroup::default().with_group_id(str_bytes(group).into()).with_topics(Some(topics))]);
    match broker.interbroker.call(address, PEER_VERSION, &request).await {
        Ok(response) => response
            .groups
            .iter()
            .filter(|g| g.error_code == 0)
            .flat_map(|g| &g.topics)
            .flat_map(|t| {
                t.partitions.iter().map(move |p| {
                    let row = match p.error_code {
                        0 => Ok((p.start_offset, p.lag)),
                        code => Err(ResponseError::try_from_code(code).unwrap_or(ResponseError::UnknownServerError)),
                    };
                    ((t.topic_name.to_string(), p.partition_index), row)
                })
            })
            .collect(),
        Err(e) => {
            tracing::warn!(leader = address, group, error = %e, "asking a partition leader for a share group's offsets failed");
            BTreeMap::new()
        }
    }
}
