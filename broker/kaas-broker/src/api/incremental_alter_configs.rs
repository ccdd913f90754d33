//! IncrementalAlterConfigs: SET, DELETE, APPEND and SUBTRACT on topic configs.

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::messages::incremental_alter_configs_request::AlterableConfig;
use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::{IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse};

use super::access::{Op, check_config_resource};
use super::alter_configs::read_only_resource;
use super::describe_configs::TOPIC;
use super::str_bytes;
use crate::broker::Broker;
use crate::error::{Error, Result};
use crate::router::{Reply, RequestContext};
use crate::topic_config::{self, Kind};

const SET: i8 = 0;
const DELETE: i8 = 1;
const APPEND: i8 = 2;
const SUBTRACT: i8 = 3;

pub async fn handle(broker: &Arc<Broker>, ctx: &RequestContext, request: IncrementalAlterConfigsRequest) -> Reply<IncrementalAlterConfigsResponse> {
    let mut responses = Vec::with_capacity(request.resources.len());
    for resource in request.resources {
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
    Reply::Now(IncrementalAlterConfigsResponse::default().with_responses(responses))
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
