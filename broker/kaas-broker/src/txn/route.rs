//! Where a piece of a transaction lives in a cluster: a partition's leader, a group shard's or
//! transaction shard's coordinator — this broker, or another one's inter-broker listener.

use kaas_shared::assignment::{Assignment, BrokerEndpoint};

use crate::broker::Broker;

/// Where to send a request about something the assignment places.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Route {
    /// Local mode, or the applied assignment places it on this broker.
    Here,
    /// The inter-broker listener ("host:port") of the broker the applied assignment places it
    /// on (its Kafka listener, if it registered none).
    Peer(String),
    /// The applied assignment places it on a broker whose listener it does not list.
    Unreachable,
    /// The applied assignment does not place it (yet, or any more).
    Unplaced,
}

/// Routes to whoever `owner` names in the applied assignment.
pub(crate) fn route(broker: &Broker, owner: impl FnOnce(&Assignment) -> Option<i32>) -> Route {
    let Some(cluster) = &broker.cluster else { return Route::Here };
    let assignment = cluster.view.current();
    match owner(&assignment) {
        Some(id) if id == broker.config.node_id => Route::Here,
        Some(id) => match assignment.endpoint(id) {
            Some(BrokerEndpoint { interbroker: Some(address), .. }) => Route::Peer(address.clone()),
            // IPv6 literals need brackets in "host:port".
            Some(e) if e.host.contains(':') => Route::Peer(format!("[{}]:{}", e.host, e.port)),
            Some(e) => Route::Peer(format!("{}:{}", e.host, e.port)),
            None => Route::Unreachable,
        },
        None => Route::Unplaced,
    }
}

/// The route to the controller broker, as the applied assignment names it.
pub(crate) fn controller(broker: &Broker) -> Route {
    route(broker, |a| Some(a.controller_id))
}

/// The route to the coordinator of transaction shard `shard`.
pub(crate) fn txn_coordinator(broker: &Broker, shard: u32) -> Route {
    route(broker, |a| a.transactions.get(&shard).map(|s| s.coordinator))
}

/// The route to the coordinator of group shard `shard`.
pub(crate) fn group_coordinator(broker: &Broker, shard: u32) -> Route {
    route(broker, |a| a.consumer_groups.get(&shard).map(|s| s.coordinator))
}

/// The route to the leader of `topic`/`partition`.
pub(crate) fn partition_leader(broker: &Broker, topic: &str, partition: i32) -> Route {
    route(broker, |a| a.partition(topic, partition).map(|p| p.leader))
}
