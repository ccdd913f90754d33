//! `KafkaTopic`: one topic of one cluster. Its `metadata.uid` is the topic's identity.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// A Kafka topic. Kafka allows names Kubernetes does not (`_`, upper case, up to 249
/// characters), hence `topicName`; the default is `metadata.name`.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Debug, Clone, PartialEq)]
#[kube(
    group = "kaas.dev",
    version = "v1alpha1",
    kind = "KafkaTopic",
    namespaced,
    status = "KafkaTopicStatus",
    shortname = "kt",
    category = "kaas",
    printcolumn(name = "Cluster", type_ = "string", json_path = ".spec.clusterRef"),
    printcolumn(name = "Topic", type_ = "string", json_path = ".status.topicName"),
    printcolumn(name = "Partitions", type_ = "integer", json_path = ".spec.partitions"),
    printcolumn(name = "Size", type_ = "string", json_path = ".status.size"),
    printcolumn(
        name = "End Offset",
        type_ = "integer",
        json_path = ".status.logEndOffset"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Topic ID",
        type_ = "string",
        json_path = ".status.topicId",
        priority = 1
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
// The field's own rule cannot see a topicName added or removed (it runs only when old and new
// both have one); with optionalOldSelf it runs on every write, and `oldSelf` is empty on create.
#[x_kube(validation = Rule::new("!oldSelf.hasValue() || has(self.topicName) == has(oldSelf.value().topicName)").optional_old_self(true).message("topicName cannot be added or removed after creation: it would rename the Kafka topic; delete the topic and create a new one"))]
pub struct KafkaTopicSpec {
    /// Name of the KafkaCluster (same namespace) the topic lives in.
    #[schemars(length(min = 1, max = 63))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("clusterRef is immutable: a topic cannot move between clusters"))]
    pub cluster_ref: String,
    /// The Kafka topic name, when it differs from `metadata.name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 249), regex(pattern = r"^[a-zA-Z0-9._-]+$"))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("topicName is immutable: delete the topic and create a new one"))]
    #[x_kube(validation = Rule::new("self != '.' && self != '..'").message("topicName cannot be '.' or '..'"))]
    #[x_kube(validation = Rule::new("!self.startsWith('__')").message("topicName: names starting with '__' are reserved for kaas"))]
    pub topic_name: Option<String>,
    /// Number of partitions. May grow, never shrink (Kafka cannot remove partitions).
    #[schemars(range(min = 1, max = 10000))]
    #[x_kube(validation = Rule::new("self >= oldSelf").message("partitions may grow but never shrink"))]
    pub partitions: i32,
    /// Topic-level configuration (`retention.ms`, `cleanup.policy`, ...), validated by the
    /// operator with Kafka's rules; the result is in the `Ready` condition.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub config: BTreeMap<String, String>,
}

/// What the operator observed.
#[derive(KubeSchema, Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct KafkaTopicStatus {
    /// `Ready` (with the validation message as its reason and message when the spec is refused).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The generation the status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The Kafka topic name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topic_name: Option<String>,
    /// The topic's identity (the Kafka topic ID): this resource's `metadata.uid`, stamped in the
    /// topic directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topic_id: Option<String>,
    /// Partitions written to topic.json.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partitions: Option<i32>,
    /// What the controller broker publishes (its own field manager, `kaas-controller`).
    #[serde(flatten)]
    pub log: TopicLog,
}

impl KafkaTopicStatus {
    /// The status without the fields the controller broker publishes: what the volume agent
    /// applies, so that neither field manager's apply removes or overwrites the other's fields.
    pub fn without_log(self) -> KafkaTopicStatus {
        KafkaTopicStatus {
            log: TopicLog::default(),
            ..self
        }
    }
}

/// The part of a KafkaTopic's status the controller broker publishes from its partitions'
/// leaders (docs/monitoring.md): refreshed when it changed, at most once a minute per topic.
#[derive(KubeSchema, Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct TopicLog {
    /// Bytes in the partitions' segments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<i64>,
    /// `size_bytes` for people (`12.3Mi`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<String>,
    /// The partitions' log end offsets summed: the offsets the topic has handed out (for one
    /// partition, its newest offset plus one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_end_offset: Option<i64>,
    /// Partitions whose leader reported them (fewer than `partitions` while one has none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partitions_reported: Option<i32>,
}

/// `bytes` in binary units with one decimal (`512`, `1.5Ki`, `12.3Mi`), like `kubectl top`.
pub fn human_size(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
    if bytes < 1024 {
        return bytes.to_string();
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1}{}", UNITS[unit])
}

impl KafkaTopic {
    /// The Kafka topic name: `spec.topicName`, else `metadata.name`.
    pub fn topic_name(&self) -> &str {
        match &self.spec.topic_name {
            Some(name) => name,
            None => self.metadata.name.as_deref().unwrap_or_default(),
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn sizes_read_like_kubectl() {
        assert_eq!(super::human_size(0), "0");
        assert_eq!(super::human_size(1023), "1023");
        assert_eq!(super::human_size(1536), "1.5Ki");
        assert_eq!(super::human_size(12_900_000), "12.3Mi");
    }
}
