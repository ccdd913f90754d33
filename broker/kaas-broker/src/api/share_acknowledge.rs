//! ShareAcknowledge (KIP-932): a share-group member acknowledges records without fetching
//! more (and, with the final epoch, closes its share session: what it still holds goes back).
//! Answered once the acknowledged partitions' share state is fsynced.

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::ResponseError;
use kafka_protocol::messages::share_acknowledge_response::{PartitionData, ShareAcknowledgeTopicResponse};
use kafka_protocol::messages::{ShareAcknowledgeRequest, ShareAcknowledgeResponse};
use uuid::Uuid;

use super::share_fetch::{ack_batch, apply_acks, release, share_member};
use super::str_bytes;
use crate::broker::Broker;
use crate::router::{Reply, RequestContext};
use crate::share::sessions::{FINAL_EPOCH, INITIAL_EPOCH};

pub async fn handle(broker: &Arc<Broker>, ctx: &RequestContext, request: ShareAcknowledgeRequest) -> Reply<ShareAcknowledgeResponse> {
    let top = |e: ResponseError, message: &str| Reply::Now(ShareAcknowledgeResponse::default().with_error_code(e.code()).with_error_message(Some(str_bytes(message))));
    let (group, member) = match share_member(broker, ctx, request.group_id.as_deref().map(|g| g.as_str()), request.member_id.as_deref()) {
        Ok(named) => named,
        Err((e, message)) => return top(e, message),
    };
    if request.share_session_epoch == INITIAL_EPOCH {
        return top(ResponseError::InvalidShareSessionEpoch, "a ShareAcknowledge cannot open a share session");
    }
    let mut acks = Vec::new();
    for t in &request.topics {
        for p in &t.partitions {
            let batches = p.acknowledgement_batches.iter().map(|b| ack_batch(b.first_offset, b.last_offset, &b.acknowledge_types, ctx.version)).collect::<Result<Vec<_>, _>>();
            match batches {
                Ok(b) => acks.push(((t.topic_id, p.partition_index), b)),
                Err(message) => return top(ResponseError::InvalidRequest, message),
            }
        }
    }
    let begun = match broker.shares.sessions.begin(&group, &member, request.share_session_epoch, ctx.peer, &[], &[]) {
        Ok(b) => b,
        Err(e) => return top(e, "share session"),
    };
    let (broker, ctx) = (broker.clone(), ctx.clone());
    Reply::Later(Box::pin(async move {
        let settings = broker.group_configs.share_settings(&group);
        let results = apply_acks(&broker, &ctx, &group, &member, &settings, acks).await;
        if request.share_session_epoch == FINAL_EPOCH
            && let Some(closed) = &begun.closed
        {
            release(&broker, closed, &settings).await;
        }
        let mut topics: BTreeMap<Uuid, Vec<PartitionData>> = BTreeMap::new();
        for ((topic_id, index), result) in results {
            topics.entry(topic_id).or_default().push(PartitionData::default().with_partition_index(index).with_error_code(result.err().map_or(0, |e| e.code())));
        }
        let responses = topics.into_iter().map(|(id, partitions)| ShareAcknowledgeTopicResponse::default().with_topic_id(id).with_partitions(partitions)).collect();
        let lock_ms = i32::try_from(settings.partition.lock_duration.as_millis()).unwrap_or(i32::MAX);
        let response = ShareAcknowledgeResponse::default().with_responses(responses);
        // v2 tells the member how long its renewed locks last.
        if ctx.version >= 2 { response.with_acquisition_lock_timeout_ms(lock_ms) } else { response }
    }))
}
