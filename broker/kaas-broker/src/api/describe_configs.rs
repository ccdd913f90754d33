//! DescribeConfigs: topic configs (set ones and defaults), the broker's settings (read-only) and
//! a group's (the consumer-protocol settings every group has here: no group overrides them).

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::ResponseError;
use kafka_protocol::messages::describe_configs_response::{DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym};
use kafka_protocol::messages::{DescribeConfigsRequest, DescribeConfigsResponse};
use kafka_protocol::protocol::StrBytes;

use super::access::{Op, check_config_resource};
use super::str_bytes;
use crate::broker::Broker;
use crate::config::StorageMode;
use crate::router::{Reply, RequestContext};
use crate::topic_config::{TOPIC_CONFIGS, default_value, wire_type};

/// Kafka's `ConfigResource.Type` codes.
pub const TOPIC: i8 = 2;
pub const BROKER: i8 = 4;
pub const BROKER_LOGGER: i8 = 8;
pub const GROUP: i8 = 32;

/// Kafka's `ConfigSource` codes.
const DYNAMIC_TOPIC_CONFIG: i8 = 1;
const STATIC_BROKER_CONFIG: i8 = 4;
const DEFAULT_CONFIG: i8 = 5;
const GROUP_CONFIG: i8 = 8;

/// Kafka's `ConfigDef.Type` codes of an int and a string.
const INT: i8 = 3;
const STRING: i8 = 2;

pub async fn handle(broker: &Arc<Broker>, ctx: &RequestContext, request: DescribeConfigsRequest) -> Reply<DescribeConfigsResponse> {
    let with_docs = ctx.version >= 3 && request.include_documentation;
    let results = request
        .resources
        .into_iter()
        .map(|resource| {
            let keys = resource.configuration_keys.as_deref();
            let result = DescribeConfigsResult::default()
                .with_resource_type(resource.resource_type)
                .with_resource_name(resource.resource_name.clone());
            // Kafka: DESCRIBE_CONFIGS on the topic, or on the cluster for a broker.
            if let Err(e) = check_config_resource(broker, ctx, Op::DescribeConfigs, resource.resource_type, &resource.resource_name) {
                return result.with_error_code(e.code());
            }
            match resource.resource_type {
                TOPIC => match broker.topics.get(&resource.resource_name) {
                    Some(topic) => {
                        let configs = topic_entries(broker, &topic.configs(), keys, request.include_synonyms);
                        result.with_configs(configs.into_iter().map(|c| if with_docs { c } else { c.with_documentation(None) }).collect())
                    }
                    None => result
                        .with_error_code(ResponseError::UnknownTopicOrPartition.code())
                        .with_error_message(Some(str_bytes(format!("topic {} does not exist", &*resource.resource_name)))),
                },
                BROKER if is_this_broker(broker, &resource.resource_name) => {
                    result.with_configs(broker_entries(broker, keys))
                }
                BROKER => result
                    .with_error_code(ResponseError::InvalidRequest.code())
                    .with_error_message(Some(str_bytes(format!("unknown broker {:?}", &*resource.resource_name)))),
                GROUP if !resource.resource_name.is_empty() => result.with_configs(group_entries(broker, &resource.resource_name, keys)),
                GROUP => result
                    .with_error_code(ResponseError::InvalidRequest.code())
                    .with_error_message(Some(str_bytes("a group name is required"))),
                BROKER_LOGGER => result
                    .with_error_code(ResponseError::InvalidRequest.code())
                    .with_error_message(Some(str_bytes("broker loggers are not configurable through the Kafka API; use RUST_LOG"))),
                other => result
                    .with_error_code(ResponseError::InvalidRequest.code())
                    .with_error_message(Some(str_bytes(format!("unsupported resource type {other}")))),
            }
        })
        .collect();
    Reply::Now(DescribeConfigsResponse::default().with_results(results))
}

fn is_this_broker(broker: &Broker, name: &str) -> bool {
    name.is_empty() || name.parse::<i32>().ok() == Some(broker.config.node_id)
}

fn wanted(keys: Option<&[StrBytes]>, name: &str) -> bool {
    keys.is_none_or(|keys| keys.iter().any(|k| &**k == name))
}

/// A topic's config entries: set values as DYNAMIC_TOPIC_CONFIG, the rest as defaults.
pub(crate) fn topic_entries(
    broker: &Broker,
    set: &BTreeMap<String, String>,
    keys: Option<&[StrBytes]>,
    synonyms: bool,
) -> Vec<DescribeConfigsResourceResult> {
    let defaults = broker.topics.log_defaults();
    TOPIC_CONFIGS
        .iter()
        .filter(|def| wanted(keys, def.name))
        .map(|def| {
            let default = default_value(def, defaults);
            let (value, source) = match set.get(def.name) {
                Some(v) => (v.clone(), DYNAMIC_TOPIC_CONFIG),
                None => (default.clone(), DEFAULT_CONFIG),
            };
            let mut synonym_list = Vec::new();
            if synonyms {
                if source == DYNAMIC_TOPIC_CONFIG {
                    synonym_list.push(synonym(def.name, &value, DYNAMIC_TOPIC_CONFIG));
                }
                synonym_list.push(synonym(def.name, &default, DEFAULT_CONFIG));
            }
            DescribeConfigsResourceResult::default()
                .with_name(str_bytes(def.name))
                .with_value(Some(str_bytes(value)))
                .with_read_only(false)
                .with_config_source(source)
                .with_is_sensitive(false)
                .with_synonyms(synonym_list)
                .with_config_type(wire_type(def.kind))
                .with_documentation(Some(str_bytes(def.doc)))
        })
        .collect()
}

fn synonym(name: &str, value: &str, source: i8) -> DescribeConfigsSynonym {
    DescribeConfigsSynonym::default().with_name(str_bytes(name)).with_value(Some(str_bytes(value))).with_source(source)
}

/// The broker settings clients commonly read; all static (set by flags) and read-only.
fn broker_entries(broker: &Broker, keys: Option<&[StrBytes]>) -> Vec<DescribeConfigsResourceResult> {
    let c = &broker.config;
    let d = &c.log_defaults;
    let log_dirs = match &c.storage {
        StorageMode::Disk(path) => path.display().to_string(),
        StorageMode::InMemory => "(in memory)".to_string(),
    };
    let entries: Vec<(&str, String, i8)> = vec![
        ("node.id", c.node_id.to_string(), 3),
        ("broker.id", c.node_id.to_string(), 3),
        ("listeners", format!("PLAINTEXT://{}", c.listen), 7),
        ("advertised.listeners", format!("PLAINTEXT://{}", c.advertised_address()), 7),
        ("log.dirs", log_dirs, 2),
        ("num.partitions", c.default_partitions.to_string(), 3),
        ("default.replication.factor", "1".to_string(), 4),
        ("auto.create.topics.enable", c.auto_create_topics.to_string(), 1),
        ("socket.request.max.bytes", c.max_request_bytes.to_string(), 3),
        ("log.segment.bytes", d.segment_bytes.to_string(), 3),
        ("log.roll.ms", d.segment_ms.to_string(), 5),
        ("log.retention.ms", d.retention_ms.to_string(), 5),
        ("log.retention.bytes", d.retention_bytes.to_string(), 5),
        ("message.max.bytes", d.max_message_bytes.to_string(), 3),
        ("log.index.interval.bytes", d.index_interval_bytes.to_string(), 3),
        ("log.message.timestamp.before.max.ms", d.message_timestamp_before_max_ms.to_string(), 5),
        ("log.message.timestamp.after.max.ms", d.message_timestamp_after_max_ms.to_string(), 5),
        ("log.flush.interval.messages", "1".to_string(), 5),
        ("min.insync.replicas", "1".to_string(), 3),
        ("delete.topic.enable", "true".to_string(), 1),
        ("group.initial.rebalance.delay.ms", c.groups.initial_rebalance_delay.as_millis().to_string(), 3),
        ("group.min.session.timeout.ms", c.groups.min_session_timeout.as_millis().to_string(), 3),
        ("group.max.session.timeout.ms", c.groups.max_session_timeout.as_millis().to_string(), 3),
    ];
    entries
        .into_iter()
        .filter(|(name, _, _)| wanted(keys, name))
        .map(|(name, value, config_type)| {
            DescribeConfigsResourceResult::default()
                .with_name(str_bytes(name))
                .with_value(Some(str_bytes(value)))
                .with_read_only(true)
                .with_config_source(STATIC_BROKER_CONFIG)
                .with_config_type(config_type)
        })
        .collect()
}

/// A group's config entries: the consumer- and share-group settings a group may override
/// (`crate::group_configs`): GROUP_CONFIG where the group sets one, else the default (the
/// broker's setting for the consumer-group ones, which Kafka names as the synonym).
fn group_entries(broker: &Broker, group: &str, keys: Option<&[StrBytes]>) -> Vec<DescribeConfigsResourceResult> {
    let groups = &broker.config.groups;
    crate::group_configs::GROUP_CONFIGS
        .iter()
        .filter(|def| wanted(keys, def.name))
        .map(|def| {
            let default = match def.name {
                "consumer.session.timeout.ms" => groups.consumer_session_timeout.as_millis().to_string(),
                "consumer.heartbeat.interval.ms" => groups.consumer_heartbeat_interval.as_millis().to_string(),
                _ => def.default.to_string(),
            };
            let (value, set) = match broker.group_configs.of(group).get(def.name) {
                Some(v) => (v.clone(), true),
                None => (default.clone(), false),
            };
            let config_type = if matches!(def.check, crate::group_configs::Check::Int { .. }) { INT } else { STRING };
            let synonym = (!def.broker_name.is_empty()).then_some((def.broker_name, default.as_str()));
            entry(def.name, &value, if set { GROUP_CONFIG } else { DEFAULT_CONFIG }, config_type, synonym).with_documentation(Some(str_bytes(def.doc)))
        })
        .collect()
}

fn entry(name: &str, value: &str, source: i8, config_type: i8, synonym: Option<(&str, &str)>) -> DescribeConfigsResourceResult {
    DescribeConfigsResourceResult::default()
        .with_name(str_bytes(name))
        .with_value(Some(str_bytes(value)))
        .with_read_only(false)
        .with_config_source(source)
        .with_config_type(config_type)
        .with_synonyms(synonym.map(|(n, v)| self::synonym(n, v, DEFAULT_CONFIG)).into_iter().collect())
}
