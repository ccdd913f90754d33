//! DescribeTopicPartitions (KIP-966): Metadata's partition view, paged. Kafka 4's admin client
//! describes topics by name with it, following `next_cursor` until every partition is read.
//!
//! Paging follows Kafka's broker: topics in name order from the cursor's topic (its partitions
//! from the cursor's index), at most `min(response_partition_limit, 2000)` partitions per answer;
//! a topic whose partitions do not all fit ends the answer with a cursor to the first one left
//! out. Named topics that do not exist are answered with an error and cost no partitions; an
//! all-topics request leaves nothing out but lists only what exists.

use std::sync::Arc;

use kafka_protocol::ResponseError;
use kafka_protocol::messages::describe_topic_partitions_response::{
    Cursor, DescribeTopicPartitionsResponsePartition, DescribeTopicPartitionsResponseTopic,
};
use kafka_protocol::messages::{BrokerId, DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse};
use uuid::Uuid;

use super::access::{Op, Resource, allowed};
use super::metadata::{PartitionLeader, partition_leaders};
use super::topic_name;
use crate::broker::Broker;
use crate::router::{Reply, RequestContext};
use crate::topics::{Topic, validate_topic_name};

/// Kafka's `max.request.partition.size.limit` default: the most partitions one answer carries,
/// whatever the client asks for.
pub const MAX_PARTITIONS_PER_RESPONSE: i32 = 2000;

pub async fn handle(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    request: DescribeTopicPartitionsRequest,
) -> Reply<DescribeTopicPartitionsResponse> {
    Reply::Now(match describe(broker, ctx, &request) {
        Ok(response) => response,
        Err(error) => refused(&request, error),
    })
}

fn describe(
    broker: &Broker,
    ctx: &RequestContext,
    request: &DescribeTopicPartitionsRequest,
) -> Result<DescribeTopicPartitionsResponse, ResponseError> {
    let all_topics = request.topics.is_empty();
    let (cursor_topic, cursor_partition) = match &request.cursor {
        Some(c) => (c.topic_name.0.to_string(), c.partition_index),
        None => (String::new(), 0),
    };
    if cursor_partition < 0 {
        return Err(ResponseError::InvalidRequest);
    }
    let mut names: Vec<String> = if all_topics {
        // Kafka lists only the topics the principal may describe.
        broker
            .topics
            .list()
            .iter()
            .filter(|t| allowed(broker, ctx, Op::Describe, Resource::Topic, &t.name))
            .map(|t| t.name.clone())
            .collect()
    } else {
        request.topics.iter().map(|t| t.name.0.to_string()).collect()
    };
    names.retain(|n| *n >= cursor_topic);
    names.sort();
    names.dedup();
    if request.cursor.is_some() && !all_topics && !names.contains(&cursor_topic) {
        // Kafka: the cursor's topic must be one of the named topics.
        return Err(ResponseError::InvalidRequest);
    }

    let mut remaining = request.response_partition_limit.clamp(1, MAX_PARTITIONS_PER_RESPONSE);
    let mut response = DescribeTopicPartitionsResponse::default();
    for name in names {
        if remaining == 0 {
            // Every partition of the topics before this one fitted exactly: resume here.
            response.next_cursor = Some(cursor(&name, 0));
            break;
        }
        if !all_topics && !allowed(broker, ctx, Op::Describe, Resource::Topic, &name) {
            // Whether or not it exists.
            response.topics.push(topic_error(&name, ResponseError::TopicAuthorizationFailed));
            continue;
        }
        let Some(topic) = broker.topics.get(&name) else {
            if !all_topics {
                response.topics.push(missing_topic(&name));
            }
            continue;
        };
        let first = if name == cursor_topic { cursor_partition } else { 0 };
        let (described, next) = page(broker, &topic, first, remaining);
        remaining -= described.partitions.len() as i32;
        response.topics.push(described);
        if let Some(next) = next {
            response.next_cursor = Some(cursor(&name, next));
            break;
        }
    }
    Ok(response)
}

/// Up to `limit` partitions of `topic` from index `first`, and the first index left out.
fn page(broker: &Broker, topic: &Topic, first: i32, limit: i32) -> (DescribeTopicPartitionsResponseTopic, Option<i32>) {
    let leaders = partition_leaders(broker, topic);
    let count = leaders.len() as i32;
    let end = count.min(first.saturating_add(limit));
    let partitions = leaders.iter().filter(|p| p.index >= first && p.index < end).map(describe_partition).collect();
    let described = DescribeTopicPartitionsResponseTopic::default()
        .with_name(Some(topic_name(topic.name.clone())))
        .with_topic_id(topic.id)
        .with_is_internal(topic.is_internal())
        .with_partitions(partitions)
        .with_topic_authorized_operations(i32::MIN);
    (described, (end < count).then_some(end))
}

/// Kafka answers a partition without a live leader with leader -1 and no error here (Metadata
/// sets LEADER_NOT_AVAILABLE); replicas and ISR are the leader alone, as kaas keeps one copy.
fn describe_partition(p: &PartitionLeader) -> DescribeTopicPartitionsResponsePartition {
    let response = DescribeTopicPartitionsResponsePartition::default()
        .with_partition_index(p.index)
        .with_eligible_leader_replicas(Some(Vec::new()))
        .with_last_known_elr(Some(Vec::new()));
    match p.leader {
        Some((leader, epoch)) => response
            .with_leader_id(BrokerId(leader))
            .with_leader_epoch(epoch)
            .with_replica_nodes(vec![BrokerId(leader)])
            .with_isr_nodes(vec![BrokerId(leader)]),
        None => response.with_leader_id(BrokerId(-1)).with_leader_epoch(p.stored_epoch),
    }
}

fn missing_topic(name: &str) -> DescribeTopicPartitionsResponseTopic {
    let error = match validate_topic_name(name) {
        Ok(()) => ResponseError::UnknownTopicOrPartition,
        Err(_) => ResponseError::InvalidTopicException,
    };
    topic_error(name, error)
}

fn topic_error(name: &str, error: ResponseError) -> DescribeTopicPartitionsResponseTopic {
    DescribeTopicPartitionsResponseTopic::default()
        .with_error_code(error.code())
        .with_name(Some(topic_name(name)))
        .with_topic_id(Uuid::nil())
        .with_topic_authorized_operations(i32::MIN)
}

fn cursor(topic: &str, partition: i32) -> Cursor {
    Cursor::default().with_topic_name(topic_name(topic)).with_partition_index(partition)
}

/// A request Kafka refuses as a whole: every named topic carries the error.
fn refused(request: &DescribeTopicPartitionsRequest, error: ResponseError) -> DescribeTopicPartitionsResponse {
    let topics = request
        .topics
        .iter()
        .map(|t| {
            DescribeTopicPartitionsResponseTopic::default()
                .with_error_code(error.code())
                .with_name(Some(t.name.clone()))
                .with_topic_authorized_operations(i32::MIN)
        })
        .collect();
    DescribeTopicPartitionsResponse::default().with_topics(topics)
}
