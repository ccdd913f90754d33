//! IncrementalAlterConfigs: SET, DELETE, APPEND and SUBTRACT on topic configs; SET and DELETE
//! on group configs (`crate::group_configs`, written by the controller in a cluster: another
//! broker forwards the request's group resources to it).

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::ResponseError;
use kafka_protocol::messages::incremental_alter_configs_request::{AlterConfigsResource, AlterableConfig};
use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::{IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse};

use super::access::{ClusterWriter, Op, check_config_resource, cluster_change, file_error};
use super::alter_configs::read_only_resource;
use super::describe_configs::{GROUP, TOPIC};
use super::str_bytes;
use crate::broker::Broker;
use crate::error::{Error, Result};
use crate::group_configs::{GroupConfigChange, GroupConfigError};
use crate::router::{Reply, RequestContext};
use crate::topic_config::{self, Kind};

const SET: i8 = 0;
const DELETE: i8 = 1;
const APPEND: i8 = 2;
const SUBTRACT: i8 = 3;

pub async fn handle(broker: &Arc<Broker>, ctx: &RequestContext, request: IncrementalAlterConfigsRequest) -> Reply<IncrementalAlterConfigsResponse> {
    let forwarded = broker.cluster.is_some() && crate::interbroker::from_a_broker(broker, ctx, &request);
    let (groups, others): (Vec<_>, Vec<_>) = request.resources.iter().cloned().partition(|r| r.resource_type == GROUP);
    let mut responses = Vec::with_capacity(request.resources.len());
    let mut group_changes = Vec::new();
    for resource in groups {
        let response = AlterConfigsResourceResponse::default().with_resource_type(resource.resource_type).with_resource_name(resource.resource_name.clone());
        // Kafka: ALTER_CONFIGS on the group (checked where the request came in).
        let refused = if forwarded { None } else { check_config_resource(broker, ctx, Op::AlterConfigs, GROUP, &resource.resource_name).err() };
        match (refused, group_change(&resource.configs)) {
            (Some(e), _) => responses.push(response.with_error_code(e.code())),
            (None, Err(e)) => responses.push(response.with_error_code(e.code()).with_error_message(Some(str_bytes(e.to_string())))),
            (None, Ok(_)) if resource.resource_name.is_empty() => {
                responses.push(response.with_error_code(ResponseError::InvalidRequest.code()).with_error_message(Some(str_bytes("a group name is required"))));
            }
            (None, Ok(change)) => group_changes.push((resource.resource_name.to_string(), change)),
        }
    }
    let group_answers = alter_groups(broker, ctx, &request, group_changes);
    for resource in others {
        responses.push({
            let response = AlterConfigsResourceResponse::default()
                .with_resource_type(resource.resource_type)
                .with_resource_name(resource.resource_name.clone());
            // Kafka: ALTER_CONFIGS on the topic, or on the cluster for a broker.
            if let Err(e) = check_config_resource(broker, ctx, Op::AlterConfigs, resource.resource_type, &resource.resource_name) {
                responses.push(response.with_error_code(e.code()));
                continue;
            }
            let outcome = if resource.resource_type == TOPIC {
                alter_topic(broker, &resource.resource_name, &resource.configs, request.validate_only).await
            } else {
                Err(read_only_resource(resource.resource_type))
            };
            match outcome {
                Ok(()) => response,
                Err(e) => response.with_error_code(e.code()).with_error_message(Some(str_bytes(e.to_string()))),
            }
        });
    }
    Reply::Later(Box::pin(async move {
        responses.extend(group_answers.await);
        IncrementalAlterConfigsResponse::default().with_responses(responses)
    }))
}

/// A group resource's operations as a change: SET and DELETE only (no group config is a list).
fn group_change(ops: &[AlterableConfig]) -> Result<GroupConfigChange> {
    ops.iter()
        .map(|op| match op.config_operation {
            SET => Ok((op.name.to_string(), Some(op.value.as_deref().map(str::to_string).ok_or_else(|| Error::InvalidConfig(format!("SET of {} needs a value", &*op.name)))?))),
            DELETE => Ok((op.name.to_string(), None)),
            APPEND | SUBTRACT => Err(Error::InvalidConfig(format!("{} is not a list; APPEND and SUBTRACT apply to lists only", &*op.name))),
            other => Err(Error::InvalidRequest(format!("unknown config operation {other}"))),
        })
        .collect()
}

/// Applies the group changes here (local mode, the controller) or forwards them to the
/// controller; the answers, one per change.
fn alter_groups(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    request: &IncrementalAlterConfigsRequest,
    changes: Vec<(String, GroupConfigChange)>,
) -> impl Future<Output = Vec<AlterConfigsResourceResponse>> + Send + 'static {
    let answer = |group: &str, error: Option<(ResponseError, String)>| {
        let r = AlterConfigsResourceResponse::default().with_resource_type(GROUP).with_resource_name(str_bytes(group));
        match error {
            None => r,
            Some((e, message)) => r.with_error_code(e.code()).with_error_message(Some(str_bytes(message))),
        }
    };
    let writer = if changes.is_empty() { ClusterWriter::Here(0) } else { cluster_change(broker, ctx, request, || Ok(())) };
    let (broker, validate_only, version) = (broker.clone(), request.validate_only, ctx.version);
    async move {
        if changes.is_empty() {
            return Vec::new();
        }
        match writer {
            ClusterWriter::Refused(e, message) => changes.iter().map(|(g, _)| answer(g, Some((e, message.clone())))).collect(),
            ClusterWriter::Forward(address) => {
                let resources = changes.iter().map(|(g, change)| group_resource(g, change)).collect();
                let forwarded = IncrementalAlterConfigsRequest::default().with_resources(resources).with_validate_only(validate_only);
                match broker.interbroker.call(&address, version, &forwarded).await {
                    Ok(response) => {
                        let reader = broker.clone();
                        let _ = tokio::task::spawn_blocking(move || reader.refresh_controller_files()).await;
                        response.responses
                    }
                    Err(e) => changes.iter().map(|(g, _)| answer(g, Some((ResponseError::NotController, format!("the controller could not be asked: {e}"))))).collect(),
                }
            }
            ClusterWriter::Here(epoch) => {
                let groups: Vec<String> = changes.iter().map(|(g, _)| g.clone()).collect();
                let b = broker.clone();
                let results = tokio::task::spawn_blocking(move || b.group_configs.alter(changes, validate_only, epoch)).await.unwrap_or_default();
                broker.controller_files_written();
                groups
                    .iter()
                    .zip(results.into_iter().map(Some).chain(std::iter::repeat(None)))
                    .map(|(g, r)| match r {
                        Some(Ok(())) => answer(g, None),
                        Some(Err(GroupConfigError::File(e))) => answer(g, Some((file_error(&e), e.to_string()))),
                        Some(Err(e)) => answer(g, Some((ResponseError::InvalidConfig, e.to_string()))),
                        None => answer(g, Some((ResponseError::UnknownServerError, "the group config write failed".into()))),
                    })
                    .collect()
            }
        }
    }
}

/// A change as the wire resource the controller is sent.
fn group_resource(group: &str, change: &GroupConfigChange) -> AlterConfigsResource {
    let configs = change
        .iter()
        .map(|(name, value)| AlterableConfig::default().with_name(str_bytes(name)).with_config_operation(if value.is_some() { SET } else { DELETE }).with_value(value.as_deref().map(str_bytes)))
        .collect();
    AlterConfigsResource::default().with_resource_type(GROUP).with_resource_name(str_bytes(group)).with_configs(configs)
}

async fn alter_topic(broker: &Arc<Broker>, name: &str, ops: &[AlterableConfig], validate_only: bool) -> Result<()> {
    let topic = broker.topics.get(name).ok_or_else(|| Error::UnknownTopicOrPartition(name.to_string()))?;
    let configs = apply(topic.configs(), ops, |key| topic_config::default_value_of(key, broker.topics.log_defaults()))?;
    crate::topic_admin::set_configs(broker, name, configs, validate_only).await
}

/// Applies the operations in order to a topic's set configs.
pub(crate) fn apply(
    mut configs: BTreeMap<String, String>,
    ops: &[AlterableConfig],
    default_of: impl Fn(&str) -> Option<String>,
) -> Result<BTreeMap<String, String>> {
    for op in ops {
        let key = op.name.to_string();
        let def = topic_config::known(&key)?;
        let value = op.value.as_deref().map(str::to_string);
        match op.config_operation {
            SET => {
                let value = value.ok_or_else(|| Error::InvalidConfig(format!("SET of {key} needs a value")))?;
                configs.insert(key, value);
            }
            DELETE => {
                configs.remove(&key);
            }
            APPEND | SUBTRACT => {
                if !matches!(def.kind, Kind::List(_)) {
                    return Err(Error::InvalidConfig(format!("{key} is not a list; APPEND and SUBTRACT apply to lists only")));
                }
                let current = configs.get(&key).cloned().or_else(|| default_of(&key)).unwrap_or_default();
                let mut items: Vec<String> = split_list(&current);
                for item in split_list(value.as_deref().unwrap_or_default()) {
                    if op.config_operation == APPEND {
                        if !items.contains(&item) {
                            items.push(item);
                        }
                    } else {
                        items.retain(|i| *i != item);
                    }
                }
                configs.insert(key, items.join(","));
            }
            other => return Err(Error::InvalidRequest(format!("unknown config operation {other}"))),
        }
    }
    Ok(configs)
}

fn split_list(s: &str) -> Vec<String> {
    s.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_string).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(name: &'static str, operation: i8, value: Option<&'static str>) -> AlterableConfig {
        AlterableConfig::default()
            .with_name(name.into())
            .with_config_operation(operation)
            .with_value(value.map(Into::into))
    }

    #[test]
    fn applies_operations_in_order() {
        let start = BTreeMap::from([("retention.ms".to_string(), "5".to_string())]);
        let ops = [
            op("retention.ms", DELETE, None),
            op("segment.ms", SET, Some("100")),
            op("cleanup.policy", APPEND, Some("compact")),
            op("cleanup.policy", SUBTRACT, Some("delete")),
        ];
        let out = apply(start, &ops, |k| (k == "cleanup.policy").then(|| "delete".to_string()));
        let out = out.unwrap_or_default();
        assert_eq!(out.get("retention.ms"), None);
        assert_eq!(out.get("segment.ms").map(String::as_str), Some("100"));
        assert_eq!(out.get("cleanup.policy").map(String::as_str), Some("compact"));
    }

    #[test]
    fn rejects_append_to_scalars_and_unknown_names() {
        assert!(matches!(apply(BTreeMap::new(), &[op("retention.ms", APPEND, Some("1"))], |_| None), Err(Error::InvalidConfig(_))));
        assert!(matches!(apply(BTreeMap::new(), &[op("bogus", SET, Some("1"))], |_| None), Err(Error::InvalidConfig(_))));
    }
}
