//! CreateTopics, including validate-only and configs.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::future::{Either, ready};
use kafka_protocol::ResponseError;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::create_topics_response::{CreatableTopicConfigs, CreatableTopicResult};
use kafka_protocol::messages::{CreateTopicsRequest, CreateTopicsResponse};

use super::access::{Op, Resource, allowed, cluster_allowed};
use super::quota_use::{Mutations, THROTTLED};
use super::{admin_timeout, str_bytes};
use crate::broker::Broker;
use crate::error::Error;
use crate::router::{Reply, RequestContext};
use crate::topics::NewTopic;

/// How many of a request's topics are created at once: enough that a hundred-topic request
/// takes a few rounds of the operator and the controller, few enough that a huge request does
/// not flood the API server.
const CONCURRENT_CREATIONS: usize = 32;

pub async fn handle(broker: &Arc<Broker>, ctx: &RequestContext, request: CreateTopicsRequest) -> Reply<CreateTopicsResponse> {
    let mut seen = HashSet::new();
    let duplicated: HashSet<String> =
        request.topics.iter().map(|t| t.name.0.to_string()).filter(|n| !seen.insert(n.clone())).collect();
    let timeout = admin_timeout(request.timeout_ms);
    let mut mutations = Mutations::new(broker, ctx, ctx.version >= 6);
    // Each topic is answered at once or admitted; the admitted ones are then created together,
    // answers kept in the request's order. In a cluster each creation waits for the operator to
    // write the volume and the controller to place it, so a request of a hundred topics waits
    // about as long as one, not a hundred times as long (Kafka's controller creates a request's
    // topics in one batch too).
    let mut answers = Vec::with_capacity(request.topics.len());
    for wanted in request.topics {
        let name = wanted.name.0.to_string();
        let result = CreatableTopicResult::default().with_name(wanted.name.clone());
        if duplicated.contains(&name) {
            let e = Error::InvalidRequest(format!("topic {name} appears more than once in the request"));
            answers.push(Either::Left(ready(failed(result, &e))));
            continue;
        }
        // Kafka: CREATE on the cluster or on the topic.
        if !cluster_allowed(broker, ctx, Op::Create) && !allowed(broker, ctx, Op::Create, Resource::Topic, &name) {
            answers.push(Either::Left(ready(refused(result, ResponseError::TopicAuthorizationFailed))));
            continue;
        }
        if !request.validate_only {
            // KIP-599: each topic is checked against the quota and counted as it is admitted,
            // so the topics after one that takes the client over are refused.
            if !mutations.admit() {
                answers.push(Either::Left(ready(throttled(result))));
                continue;
            }
            mutations.done(wanted_partitions(broker, &wanted));
        }
        // Kafka returns the new topic's configs only to who may describe them.
        let describe_configs = allowed(broker, ctx, Op::DescribeConfigs, Resource::Topic, &name);
        answers.push(Either::Right(async move {
            match create(broker, wanted, request.validate_only, timeout).await {
                Ok((new, id)) => created(broker, result, &new, id, describe_configs),
                Err(e) => failed(result, &e),
            }
        }));
    }
    let topics: Vec<CreatableTopicResult> = futures::stream::iter(answers).buffered(CONCURRENT_CREATIONS).collect().await;
    Reply::Now(CreateTopicsResponse::default().with_topics(topics).with_throttle_time_ms(mutations.throttle_ms()))
}

/// The answer for a created topic: its id, partitions and, for who may describe them, configs.
fn created(broker: &Broker, result: CreatableTopicResult, new: &NewTopic, id: uuid::Uuid, describe_configs: bool) -> CreatableTopicResult {
    let result = result.with_topic_id(id).with_num_partitions(new.partitions).with_replication_factor(1);
    if !describe_configs {
        return result.with_topic_config_error_code(ResponseError::TopicAuthorizationFailed.code());
    }
    let configs = super::describe_configs::topic_entries(broker, &new.configs, None, false)
        .into_iter()
        .map(|c| {
            CreatableTopicConfigs::default()
                .with_name(c.name)
                .with_value(c.value)
                .with_read_only(c.read_only)
                .with_config_source(c.config_source)
                .with_is_sensitive(c.is_sensitive)
        })
        .collect();
    result.with_configs(Some(configs))
}

/// The partitions a CreateTopics entry asks for: its replica assignments', else its count, else
/// the broker's default.
fn wanted_partitions(broker: &Broker, wanted: &CreatableTopic) -> i32 {
    if !wanted.assignments.is_empty() {
        i32::try_from(wanted.assignments.len()).unwrap_or(i32::MAX)
    } else if wanted.num_partitions == -1 {
        broker.config.default_partitions
    } else {
        wanted.num_partitions
    }
}

fn throttled(result: CreatableTopicResult) -> CreatableTopicResult {
    refused(result, ResponseError::ThrottlingQuotaExceeded).with_error_message(Some(str_bytes(THROTTLED)))
}

fn failed(result: CreatableTopicResult, e: &Error) -> CreatableTopicResult {
    refused(result, e.response_error()).with_error_message(Some(str_bytes(e.to_string())))
}

fn refused(result: CreatableTopicResult, e: ResponseError) -> CreatableTopicResult {
    result
        .with_error_code(e.code())
        .with_num_partitions(-1)
        .with_replication_factor(-1)
        .with_topic_config_error_code(ResponseError::UnknownServerError.code())
}

async fn create(broker: &Arc<Broker>, wanted: CreatableTopic, validate_only: bool, timeout: Duration) -> Result<(NewTopic, uuid::Uuid), Error> {
    let brokers = 1;
    if wanted.replication_factor != -1 && (wanted.replication_factor < 1 || i32::from(wanted.replication_factor) > brokers) {
        return Err(Error::InvalidReplicationFactor(format!(
            "replication factor {} is not between 1 and the number of available brokers ({brokers}); \
             kaas keeps one copy on the shared volume",
            wanted.replication_factor
        )));
    }
    if !wanted.assignments.is_empty() {
        if wanted.num_partitions != -1 || wanted.replication_factor != -1 {
            return Err(Error::InvalidRequest(
                "both numPartitions or replicationFactor and replicasAssignments were set".into(),
            ));
        }
        let node = broker.config.node_id;
        for a in &wanted.assignments {
            if a.broker_ids.iter().any(|b| b.0 != node) {
                return Err(Error::InvalidRequest(format!("partition {} is assigned to an unknown broker", a.partition_index)));
            }
        }
    }
    let partitions = wanted_partitions(broker, &wanted);
    let configs: BTreeMap<String, String> = wanted
        .configs
        .into_iter()
        .filter_map(|c| c.value.map(|v| (c.name.to_string(), v.to_string())))
        .collect();
    let new = NewTopic { name: wanted.name.0.to_string(), partitions, configs };
    if validate_only {
        broker.topics.validate_new(&new)?;
        return Ok((new, uuid::Uuid::nil()));
    }
    let id = crate::topic_admin::create(broker, new.clone(), timeout).await?;
    Ok((new, id))
}

#[cfg(test)]
mod tests;
