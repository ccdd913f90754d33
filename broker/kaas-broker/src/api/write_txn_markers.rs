//! WriteTxnMarkers (API 27): a transaction coordinator asks the leader of a partition to write
//! commit or abort markers, or the coordinator of a group shard (`__consumer_offsets`
//! partition <shard>) to settle the transaction's offsets. Each is answered once durable.

use std::sync::Arc;

use kaas_storage::{Marker, MarkerKind};
use kafka_protocol::ResponseError;
use kafka_protocol::messages::write_txn_markers_response::{
    WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
};
use kafka_protocol::messages::write_txn_markers_request::WritableTxnMarker;
use kafka_protocol::messages::{WriteTxnMarkersRequest, WriteTxnMarkersResponse};
use tracing::debug;

use crate::broker::Broker;
use crate::router::{Reply, RequestContext};
use crate::txn::{GROUP_OFFSETS_TOPIC, write_marker};

pub async fn handle(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    request: WriteTxnMarkersRequest,
) -> Reply<WriteTxnMarkersResponse> {
    // Kafka: brokers only (CLUSTER_ACTION on the cluster; in a cluster, a broker's token).
    if !crate::interbroker::from_a_broker(broker, ctx, &request) {
        let markers = request.markers.into_iter().map(|m| refused(m, ResponseError::ClusterAuthorizationFailed)).collect();
        return Reply::Now(WriteTxnMarkersResponse::default().with_markers(markers));
    }
    let broker = broker.clone();
    Reply::Later(Box::pin(async move {
        let mut results = Vec::with_capacity(request.markers.len());
        for m in request.markers {
            if let Err(refusal) = plausible_sender(&broker, m.coordinator_epoch) {
                debug!(producer_id = m.producer_id.0, coordinator_epoch = m.coordinator_epoch, error = ?refusal, "markers refused");
                results.push(refused(m, refusal));
                continue;
            }
            let marker = Marker {
                producer_id: m.producer_id.0,
                producer_epoch: m.producer_epoch,
                kind: if m.transaction_result {
                    MarkerKind::Commit
                } else {
                    MarkerKind::Abort
                },
                coordinator_epoch: m.coordinator_epoch,
            };
            let mut topics = Vec::with_capacity(m.topics.len());
            for t in m.topics {
                let name = t.name.0.to_string();
                let mut partitions = Vec::with_capacity(t.partition_indexes.len());
                for p in t.partition_indexes {
                    let written = if name == GROUP_OFFSETS_TOPIC {
                        settle_group_shard(&broker, p, &marker).await
                    } else {
                        write_marker(&broker, &name, p, &marker).await
                    };
                    let code = match written {
                        Ok(()) => 0,
                        Err(e) => {
                            debug!(topic = %name, partition = p, producer_id = marker.producer_id, error = ?e, "marker refused");
                            e.code()
                        }
                    };
                    partitions.push(
                        WritableTxnMarkerPartitionResult::default()
                            .with_partition_index(p)
                            .with_error_code(code),
                    );
                }
                topics.push(
                    WritableTxnMarkerTopicResult::default()
                        .with_name(t.name)
                        .with_partitions(partitions),
                );
            }
            results.push(
                WritableTxnMarkerResult::default()
                    .with_producer_id(m.producer_id)
                    .with_topics(topics),
            );
        }
        WriteTxnMarkersResponse::default().with_markers(results)
    }))
}

/// Whether a marker can come from a transaction coordinator at all. Local mode has no other
/// broker, so WriteTxnMarkers on its listener is never a coordinator's. In a cluster, no
/// coordinator holds a transaction shard at an epoch above every epoch the assignment gives:
/// such a marker would fence the real coordinators of its producer for good (markers below a
/// partition's highest coordinator epoch are refused). This view may lag a newer assignment,
/// so that refusal is retriable; the coordinator tries again once the view caught up.
// NB: this bounds the damage, it does not authenticate the caller; that needs the
// inter-broker listener's credentials.
fn plausible_sender(broker: &Broker, coordinator_epoch: i32) -> Result<(), ResponseError> {
    let Some(cluster) = &broker.cluster else { return Err(ResponseError::ClusterAuthorizationFailed) };
    let newest = cluster.view.current().transactions.values().map(|s| s.epoch).max();
    match newest {
        Some(newest) if coordinator_epoch <= newest => Ok(()),
        _ => Err(ResponseError::CoordinatorNotAvailable),
    }
}

/// Every partition of `m` answered with `error`.
fn refused(m: WritableTxnMarker, error: ResponseError) -> WritableTxnMarkerResult {
    let topics = m
        .topics
        .into_iter()
        .map(|t| {
            let partitions = t
                .partition_indexes
                .into_iter()
                .map(|p| WritableTxnMarkerPartitionResult::default().with_partition_index(p).with_error_code(error.code()))
                .collect();
            WritableTxnMarkerTopicResult::default().with_name(t.name).with_partitions(partitions)
        })
        .collect();
    WritableTxnMarkerResult::default().with_producer_id(m.producer_id).with_topics(topics)
}

async fn settle_group_shard(broker: &Broker, shard: i32, marker: &Marker) -> Result<(), ResponseError> {
    let shard = u32::try_from(shard).map_err(|_| ResponseError::UnknownTopicOrPartition)?;
    broker.groups.complete_txn_in_shard(shard, marker.producer_id, marker.kind == MarkerKind::Commit).await.map_err(crate::error::group_error)
}
