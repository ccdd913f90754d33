//! AlterClientQuotas: needs ALTER_CONFIGS on the cluster; each entity's change is answered once
//! the quota file holding it is fsynced (or, with `validate_only`, once it is checked) — by the
//! controller, in a cluster (another broker forwards the request to it).

use std::sync::Arc;

use kafka_protocol::ResponseError;
use kafka_protocol::messages::alter_client_quotas_request::EntryData as RequestEntry;
use kafka_protocol::messages::alter_client_quotas_response::{EntityData, EntryData};
use kafka_protocol::messages::{AlterClientQuotasRequest, AlterClientQuotasResponse};

use super::access::{ClusterWriter, Op, cluster_allowed, cluster_change, file_error, forward};
use super::str_bytes;
use crate::broker::Broker;
use crate::controller_file::WriteError;
use crate::quota::model::{Entity, InvalidQuota, QuotaKey};
use crate::quota::{QuotaChange, QuotaError};
use crate::router::{Reply, RequestContext};

pub async fn handle(broker: &Arc<Broker>, ctx: &RequestContext, request: AlterClientQuotasRequest) -> Reply<AlterClientQuotasResponse> {
    // The response names each entity as the request did.
    let echoed: Vec<Vec<EntityData>> = request.entries.iter().map(echo).collect();
    let answer = |results: Vec<Result<(), (ResponseError, String)>>| {
        let entries = echoed
            .into_iter()
            .zip(results)
            .map(|(entity, result)| match result {
                Ok(()) => EntryData::default().with_entity(entity),
                Err((error, message)) => {
                    EntryData::default().with_entity(entity).with_error_code(error.code()).with_error_message(Some(str_bytes(message)))
                }
            })
            .collect();
        AlterClientQuotasResponse::default().with_entries(entries)
    };
    let gate = || match cluster_allowed(broker, ctx, Op::AlterConfigs) {
        true => Ok(()),
        false => Err((ResponseError::ClusterAuthorizationFailed, "AlterClientQuotas needs ALTER_CONFIGS on the cluster".to_string())),
    };
    let epoch = match cluster_change(broker, ctx, &request, gate) {
        ClusterWriter::Here(epoch) => epoch,
        ClusterWriter::Refused(error, message) => {
            return Reply::Now(answer(request.entries.iter().map(|_| Err((error, message.clone()))).collect()));
        }
        ClusterWriter::Forward(address) => {
            let count = request.entries.len();
            let unreachable = move |why: String| answer((0..count).map(|_| Err((ResponseError::NotController, why.clone()))).collect());
            return forward(broker, address, ctx.version, request, unreachable);
        }
    };
    let changes: Vec<Result<QuotaChange, InvalidQuota>> = request.entries.iter().map(change).collect();
    let (broker, validate_only) = (broker.clone(), request.validate_only);
    Reply::Later(Box::pin(async move {
        let count = changes.len();
        let writer = broker.clone();
        let results = tokio::task::spawn_blocking(move || writer.quotas.alter(changes, validate_only, epoch))
            .await
            .unwrap_or_else(|_| (0..count).map(|_| Err(QuotaError::File(WriteError::Storage("the quota write failed".into())))).collect());
        broker.controller_files_written();
        answer(results.into_iter().map(|r| r.map_err(|e| (code(&e), e.to_string()))).collect())
    }))
}

fn echo(entry: &RequestEntry) -> Vec<EntityData> {
    entry
        .entity
        .iter()
        .map(|e| EntityData::default().with_entity_type(e.entity_type.clone()).with_entity_name(e.entity_name.clone()))
        .collect()
}

fn change(entry: &RequestEntry) -> Result<QuotaChange, InvalidQuota> {
    let entity = Entity::from_components(entry.entity.iter().map(|e| (e.entity_type.as_str(), e.entity_name.as_deref())))?;
    let ops = entry
        .ops
        .iter()
        .map(|op| Ok((QuotaKey::parse(&op.key)?, (!op.remove).then_some(op.value))))
        .collect::<Result<Vec<_>, InvalidQuota>>()?;
    Ok(QuotaChange { entity, ops })
}

fn code(e: &QuotaError) -> ResponseError {
    match e {
        QuotaError::Invalid(_) => ResponseError::InvalidRequest,
        QuotaError::File(e) => file_error(e),
        QuotaError::TooMany | QuotaError::KafkaUser(_) => ResponseError::PolicyViolation,
    }
}
