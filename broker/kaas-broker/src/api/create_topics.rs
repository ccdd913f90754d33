//! CreateTopics, including validate-only and configs.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

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

pub async fn handle(broker: &Arc<Broker>, ctx: &RequestContext, request: CreateTopicsRequest) -> Reply<CreateTopicsResponse> {
    let mut seen = HashSet::new();
    let duplicated: HashSet<String> =
        request.topics.iter().map(|t| t.name.0.to_string()).filter(|n| !seen.insert(n.clone())).collect();
    let timeout = admin_timeout(request.timeout_ms);
    let mut topics = Vec::with_capacity(request.topics.len());
    let mut mutations = Mutations::new(broker, ctx, ctx.version >= 6);
    for wanted in request.topics {
        let name = wanted.name.0.to_string();
        let result = CreatableTopicResult::default().with_name(wanted.name.clone());
        if duplicated.contains(&name) {
            topics.push(failed(result, &Error::InvalidRequest(format!("topic {name} appears more than once in the request"))));
            continue;
        }
        // Kafka: CREATE on the cluster or on the topic.
        if !cluster_allowed(broker, ctx, Op::Create) && !allowed(broker, ctx, Op::Create, Resource::Topic, &name) {
            topics.push(refused(result, ResponseError::TopicAuthorizationFailed));
            continue;
        }
        if !request.validate_only && !mutations.admit() {
            topics.push(throttled(result));
            continue;
        }
        // Kafka returns the new topic's configs only to who may describe them.
        let describe_configs = allowed(broker, ctx, Op::DescribeConfigs, Resource::Topic, &name);
        topics.push({
            match create(broker, wanted, request.validate_only, timeout).await {
                Ok((new, id)) => {
                    if !request.validate_only {
                        mutations.done(new.partitions);
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
                    let result = result.with_topic_id(id).with_num_partitions(new.partitions).with_replication_factor(1);
                    if describe_configs {
                        result.with_configs(Some(configs))
                    } else {
                        result.with_topic_config_error_code(ResponseError::TopicAuthorizationFailed.code())
                    }
                }
                Err(e) => failed(result, &e),
            }
        });
    }
    Reply::Now(CreateTopicsResponse::default().with_topics(topics).with_throttle_time_ms(mutations.throttle_ms()))
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
    let partitions = if !wanted.assignments.is_empty() {
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
        wanted.assignments.len() as i32
    } else if wanted.num_partitions == -1 {
        broker.config.default_partitions
    } else {
        wanted.num_partitions
    };
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
