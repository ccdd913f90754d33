//! WriteTxnMarkers (API 27): a transaction coordinator asks the leader of a partition to write
//! commit or abort markers, or the coordinator of a group shard (`__consumer_offsets`
//! partition <shard>) to settle the transaction's offsets. Each is answered once durable.

use std::sync::Arc;

use kaas_storage::{Marker, MarkerKind};
use kafka_protocol::ResponseError;
use kafka_protocol::messages::write_txn_markers_response::{
    WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
};
use kafka_protocol::messages::{WriteTxnMarkersRequest, WriteTxnMarkersResponse};
use tracing::debug;

use crate::broker::Broker;
use crate::router::{Reply, RequestContext};
use crate::txn::{GROUP_OFFSETS_TOPIC, write_marker};

pub async fn handle(
    broker: &Arc<Broker>,
    _ctx: &RequestContext,
    request: WriteTxnMarkersRequest,
) -> Reply<WriteTxnMarkersResponse> {
    let broker = broker.clone();
    Reply::Later(Box::pin(async move {
        let mut results = Vec::with_capacity(request.markers.len());
        for m in request.markers {
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

async fn settle_group_shard(broker: &Broker, shard: i32, marker: &Marker) -> Result<(), ResponseError> {
    let shard = u32::try_from(shard).map_err(|_| ResponseError::UnknownTopicOrPartition)?;
    broker.groups.complete_txn_in_shard(shard, marker.producer_id, marker.kind == MarkerKind::Commit).await
}
