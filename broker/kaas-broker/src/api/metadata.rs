//! Metadata: brokers, topics with their ids, and partition leaders from this broker's view.

use std::sync::Arc;

use kafka_protocol::ResponseError;
use kafka_protocol::messages::metadata_response::{MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic};
use kafka_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse, TopicName};
use tracing::info;
use uuid::Uuid;

use super::access::{Op, Resource, allowed, authorized_operations, cluster_allowed};
use super::{str_bytes, topic_name};
use crate::authz::model::CLUSTER_NAME;
use crate::broker::Broker;
use crate::router::{Reply, RequestContext};
use crate::server::ListenerRole;
use crate::topics::{NewTopic, Topic};

/// How long one Metadata request waits, in all, for topics the catalog has but this broker does
/// not serve yet.
const FOLLOW_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

pub async fn handle(broker: &Arc<Broker>, ctx: &RequestContext, request: MetadataRequest) -> Reply<MetadataResponse> {
    let (brokers, controller) = brokers_and_controller(broker, ctx.listener);
    let brokers = brokers
        .into_iter()
        .map(|b| MetadataResponseBroker::default().with_node_id(BrokerId(b.id)).with_host(str_bytes(b.host)).with_port(i32::from(b.port)))
        .collect();
    // v0 means "all topics" with an empty list; v1+ uses null for all.
    let all_topics = request.topics.is_none() || (ctx.version == 0 && request.topics.as_ref().is_some_and(Vec::is_empty));
    let include_ops = request.include_topic_authorized_operations;
    let with_ops = |topic: MetadataResponseTopic| {
        let ops = authorized_operations(broker, ctx, include_ops, Resource::Topic, &name_of(&topic));
        topic.with_topic_authorized_operations(ops)
    };
    let topics = if all_topics {
        // Kafka lists only the topics the principal may describe.
        let describable = broker.topics.list().into_iter().filter(|t| allowed(broker, ctx, Op::Describe, Resource::Topic, &t.name));
        describable.filter_map(|t| listed_topic(broker, &t)).map(with_ops).collect()
    } else {
        let auto_create = broker.config.auto_create_topics && (ctx.version < 4 || request.allow_auto_topic_creation);
        // Kafka: auto-creation needs CREATE on the cluster or on the topic.
        let may_create = |name: &str| cluster_allowed(broker, ctx, Op::Create) || allowed(broker, ctx, Op::Create, Resource::Topic, name);
        let mut topics = Vec::new();
        let follow_until = tokio::time::Instant::now() + FOLLOW_WAIT;
        for wanted in request.topics.unwrap_or_default() {
            let answer = match wanted.name {
                Some(name) if !allowed(broker, ctx, Op::Describe, Resource::Topic, &name) => unauthorized(Some(name), Uuid::nil()),
                Some(name) => {
                    let create = auto_create && broker.topics.get(&name).is_none() && may_create(&name);
                    match lookup_by_name(broker, &name, create, follow_until).await {
                        // Kafka: a topic the principal could have auto-created but may not.
                        t if auto_create && !create && t.error_code == ResponseError::UnknownTopicOrPartition.code() => {
                            unauthorized(t.name, Uuid::nil())
                        }
                        t => t,
                    }
                }
                None => match lookup_by_id(broker, wanted.topic_id) {
                    t if t.error_code == 0 && !allowed(broker, ctx, Op::Describe, Resource::Topic, &name_of(&t)) => {
                        // The name of a topic the principal may not describe stays hidden.
                        unauthorized(None, wanted.topic_id)
                    }
                    t => t,
                },
            };
            topics.push(if answer.error_code == 0 { with_ops(answer) } else { answer });
        }
        topics
    };
    let cluster_ops = authorized_operations(broker, ctx, request.include_cluster_authorized_operations, Resource::Cluster, CLUSTER_NAME);
    Reply::Now(
        MetadataResponse::default()
            .with_brokers(brokers)
            .with_cluster_id(Some(str_bytes(broker.config.cluster_id.clone())))
            .with_controller_id(BrokerId(controller))
            .with_topics(topics)
            .with_cluster_authorized_operations(cluster_ops),
    )
}

fn name_of(topic: &MetadataResponseTopic) -> String {
    topic.name.as_ref().map(|n| n.0.to_string()).unwrap_or_default()
}

fn unauthorized(name: Option<TopicName>, id: Uuid) -> MetadataResponseTopic {
    MetadataResponseTopic::default().with_name(name).with_topic_id(id).with_error_code(ResponseError::TopicAuthorizationFailed.code())
}

async fn lookup_by_name(broker: &Arc<Broker>, name: &str, auto_create: bool, follow_until: tokio::time::Instant) -> MetadataResponseTopic {
    if let Some(topic) = broker.topics.get(name) {
        return describe_topic(broker, &topic);
    }
    let missing = |error: ResponseError| {
        MetadataResponseTopic::default().with_name(Some(topic_name(name))).with_error_code(error.code())
    };
    // A topic just created through another broker may reach this one a moment later: wait
    // briefly rather than tell the client it does not exist (clients give up on that).
    let follow_wait = follow_until.saturating_duration_since(tokio::time::Instant::now());
    match crate::topic_admin::followed(broker, name, follow_wait).await {
        Ok(()) => {
            if let Some(topic) = broker.topics.get(name) {
                return describe_topic(broker, &topic);
            }
        }
        Err(crate::Error::Timeout(_)) => return missing(ResponseError::LeaderNotAvailable),
        Err(_) => {}
    }
    if !auto_create {
        return missing(ResponseError::UnknownTopicOrPartition);
    }
    let new = NewTopic {
        name: name.to_string(),
        partitions: broker.config.default_partitions,
        configs: Default::default(),
    };
    match crate::topic_admin::auto_create(broker, new).await {
        Ok(Some(topic)) => {
            info!(topic = %name, reason = "metadata request with auto-create", "topic auto-created");
            describe_topic(broker, &topic)
        }
        Ok(None) => {
            info!(topic = %name, reason = "metadata request with auto-create", "topic creation requested");
            missing(ResponseError::LeaderNotAvailable)
        }
        // Lost a race with another creator: answer with what now exists.
        Err(crate::Error::TopicExists(_)) => match broker.topics.get(name) {
            Some(topic) => describe_topic(broker, &topic),
            None => missing(ResponseError::LeaderNotAvailable),
        },
        Err(e) => missing(e.response_error()),
    }
}

fn lookup_by_id(broker: &Broker, id: Uuid) -> MetadataResponseTopic {
    match broker.topics.get_by_id(&id) {
        Some(topic) => describe_topic(broker, &topic),
        None => MetadataResponseTopic::default()
            .with_topic_id(id)
            .with_error_code(ResponseError::UnknownTopicId.code()),
    }
}

fn describe_topic(broker: &Broker, topic: &Topic) -> MetadataResponseTopic {
    describe_partitions(topic, partition_leaders(broker, topic))
}

/// A topic as a listing of all topics shows it. Cluster mode leaves out the partitions the
/// assignment does not place from the first such one on, and a topic with none placed: they are
/// being created (a new topic, or CreatePartitions), or their topic is being deleted (the
/// controller drops a deleted topic's partitions before every broker's registry drops the topic).
/// Kafka's metadata has a partition only once it has a leader and none once it is deleted, and
/// clients that list every topic (KafkaJS) fail on a partition error in any of them. Asked for by
/// name, such a topic is answered with LEADER_NOT_AVAILABLE, which clients wait on.
// NB: a placed partition is moved, never unplaced, while a broker is alive to take it.
fn listed_topic(broker: &Broker, topic: &Topic) -> Option<MetadataResponseTopic> {
    let mut leaders = partition_leaders(broker, topic);
    if broker.cluster.is_some() {
        let placed = leaders.iter().take_while(|p| p.leader.is_some()).count();
        leaders.truncate(placed);
        if leaders.is_empty() {
            return None;
        }
    }
    Some(describe_partitions(topic, leaders))
}

fn describe_partitions(topic: &Topic, leaders: Vec<PartitionLeader>) -> MetadataResponseTopic {
    let partitions = leaders
        .into_iter()
        .map(|p| {
            let response = MetadataResponsePartition::default().with_partition_index(p.index);
            match p.leader {
                Some((leader, epoch)) => response
                    .with_leader_id(BrokerId(leader))
                    .with_leader_epoch(epoch)
                    .with_replica_nodes(vec![BrokerId(leader)])
                    .with_isr_nodes(vec![BrokerId(leader)]),
                None => response
                    .with_error_code(ResponseError::LeaderNotAvailable.code())
                    .with_leader_id(BrokerId(-1))
                    .with_leader_epoch(p.stored_epoch),
            }
        })
        .collect();
    MetadataResponseTopic::default()
        .with_name(Some(topic_name(topic.name.clone())))
        .with_topic_id(topic.id)
        .with_is_internal(topic.is_internal())
        .with_partitions(partitions)
        .with_topic_authorized_operations(i32::MIN)
}

/// Who leads one partition, as Metadata and DescribeTopicPartitions report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PartitionLeader {
    pub index: i32,
    /// The leader's broker id and epoch; `None` while no broker leads it.
    pub leader: Option<(i32, i32)>,
    /// The epoch this broker knows of, for a partition without a leader.
    pub stored_epoch: i32,
}

/// Local mode: this broker leads what it has taken over. Cluster mode: whoever the assignment
/// names, whether or not that is this broker.
pub(crate) fn partition_leaders(broker: &Broker, topic: &Topic) -> Vec<PartitionLeader> {
    let assignment = broker.cluster.as_ref().map(|c| c.view.current());
    topic
        .partitions()
        .iter()
        .enumerate()
        .map(|(index, p)| {
            let index = index as i32;
            let leader = match &assignment {
                None => p.led_epoch().map(|epoch| (broker.config.node_id, epoch)),
                Some(a) => a.partition(&topic.name, index).map(|pa| (pa.leader, pa.leader_epoch)),
            };
            PartitionLeader { index, leader, stored_epoch: p.leader_epoch() }
        })
        .collect()
}

/// One broker's client endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BrokerEndpoint {
    pub id: i32,
    pub host: String,
    pub port: u16,
}

impl BrokerEndpoint {
    /// This broker's client endpoint.
    pub(crate) fn this(broker: &Broker) -> BrokerEndpoint {
        BrokerEndpoint { id: broker.config.node_id, host: broker.config.advertise_host.clone(), port: broker.config.advertise_port }
    }
}

/// The brokers clients may connect to on `listener` and the controller id: this broker alone in
/// local mode, the assignment's brokers (and always this one) in a cluster — on the external
/// listener only those with an external address yet.
pub(crate) fn brokers_and_controller(broker: &Broker, listener: ListenerRole) -> (Vec<BrokerEndpoint>, i32) {
    let me = BrokerEndpoint::this(broker);
    let Some(cluster) = &broker.cluster else { return (announced(broker, listener, me).into_iter().collect(), broker.config.node_id) };
    let assignment = cluster.view.current();
    let mut all: Vec<BrokerEndpoint> =
        assignment.brokers.iter().map(|(id, e)| BrokerEndpoint { id: *id, host: e.host.clone(), port: e.port }).collect();
    if !all.iter().any(|b| b.id == me.id) {
        all.push(me);
    }
    (all.into_iter().filter_map(|b| announced(broker, listener, b)).collect(), assignment.controller_id)
}

/// Where clients on `listener` are told to reach the broker whose client endpoint is `endpoint`:
/// there, or on the external listener at its external address (`None` while it has none).
pub(crate) fn announced(broker: &Broker, listener: ListenerRole, endpoint: BrokerEndpoint) -> Option<BrokerEndpoint> {
    match listener {
        ListenerRole::External => {
            let address = broker.external.as_ref()?.address(endpoint.id)?;
            Some(BrokerEndpoint { id: endpoint.id, host: address.host, port: address.port })
        }
        ListenerRole::Client | ListenerRole::InterBroker => Some(endpoint),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use kaas_shared::assignment::{Assignment, PartitionAssignment};
    use kaas_shared::names::partition_key;

    use super::*;
    use crate::config::BrokerConfig;
    use crate::control_plane::FixedControlPlane;

    /// A listing of all topics shows a cluster's topic only with the partitions placed, from the
    /// first on; asked for by name it shows every partition, unplaced ones LEADER_NOT_AVAILABLE.
    #[test]
    fn a_listing_leaves_out_partitions_not_placed_yet() {
        let tmp = tempfile::tempdir().unwrap();
        let broker = Broker::open(BrokerConfig::cluster_for_tests(tmp.path(), Arc::new(FixedControlPlane::default()))).unwrap();
        let topic = broker.topics.create(NewTopic { name: "t".into(), partitions: 3, configs: BTreeMap::new() }).unwrap();
        let place = |indexes: &[i32], version: i64| {
            let partitions = indexes
                .iter()
                .map(|i| (partition_key("t", *i), PartitionAssignment { topic_id: topic.id, leader: 0, leader_epoch: 0 }))
                .collect();
            let assignment = Assignment { assignment_version: version, partitions, ..Assignment::default() };
            broker.cluster.as_ref().unwrap().view.apply_if_new(assignment).unwrap();
        };
        let listed = |broker: &Broker| listed_topic(broker, &broker.topics.get("t").unwrap()).map(|t| t.partitions.len());
        let by_name_errors = |broker: &Broker| {
            describe_topic(broker, &broker.topics.get("t").unwrap()).partitions.iter().map(|p| p.error_code).collect::<Vec<_>>()
        };
        let unavailable = ResponseError::LeaderNotAvailable.code();

        assert_eq!(listed(&broker), None, "nothing placed: being created (or deleted)");
        assert_eq!(by_name_errors(&broker), vec![unavailable; 3]);
        place(&[0, 2], 1);
        assert_eq!(listed(&broker), Some(1), "partitions from the first unplaced one on are left out");
        assert_eq!(by_name_errors(&broker), vec![0, unavailable, 0]);
        place(&[0, 1, 2], 2);
        assert_eq!(listed(&broker), Some(3));
    }
}
