//! DeleteAcls: needs ALTER on the cluster; every ACL any filter matches is removed, and each
//! filter is answered with the ACLs it matched once the file without them is fsynced — by the
//! controller, in a cluster (another broker forwards the request to it).

use std::sync::Arc;

use kafka_protocol::ResponseError;
use kafka_protocol::messages::delete_acls_response::{DeleteAclsFilterResult, DeleteAclsMatchingAcl};
use kafka_protocol::messages::{DeleteAclsRequest, DeleteAclsResponse};

use super::access::{ClusterWriter, acl_change, change_acls, file_error, forward};
use super::acl_codes::{WireFilter, codes, filter};
use super::str_bytes;
use crate::authz::AclError;
use crate::authz::model::AclBinding;
use crate::broker::Broker;
use crate::router::{Reply, RequestContext};

fn failed(error: ResponseError, message: String) -> DeleteAclsFilterResult {
    DeleteAclsFilterResult::default().with_error_code(error.code()).with_error_message(Some(str_bytes(message)))
}

fn matched(acl: AclBinding) -> DeleteAclsMatchingAcl {
    let (resource_type, pattern_type, operation, permission) = codes(&acl);
    DeleteAclsMatchingAcl::default()
        .with_resource_type(resource_type)
        .with_resource_name(str_bytes(acl.pattern.name))
        .with_pattern_type(pattern_type)
        .with_principal(str_bytes(acl.entry.principal))
        .with_host(str_bytes(acl.entry.host))
        .with_operation(operation)
        .with_permission_type(permission)
}

pub async fn handle(broker: &Arc<Broker>, ctx: &RequestContext, request: DeleteAclsRequest) -> Reply<DeleteAclsResponse> {
    let count = request.filters.len();
    let every = move |error: ResponseError, message: String| {
        DeleteAclsResponse::default().with_filter_results((0..count).map(|_| failed(error, message.clone())).collect())
    };
    let epoch = match acl_change(broker, ctx, "DeleteAcls", &request) {
        ClusterWriter::Here(epoch) => epoch,
        ClusterWriter::Refused(error, message) => return Reply::Now(every(error, message)),
        ClusterWriter::Forward(address) => {
            return forward(broker, address, ctx.version, request, move |why| every(ResponseError::NotController, why));
        }
    };
    let parsed: Vec<_> = request
        .filters
        .iter()
        .map(|f| {
            filter(WireFilter {
                resource_type: f.resource_type_filter,
                name: f.resource_name_filter.as_deref(),
                pattern_type: f.pattern_type_filter,
                principal: f.principal_filter.as_deref(),
                host: f.host_filter.as_deref(),
                operation: f.operation,
                permission: f.permission_type,
            })
        })
        .collect();
    let broker = broker.clone();
    Reply::Later(Box::pin(async move {
        let results = change_acls(broker, count, failed, move |authorizer| {
            let filters: Vec<_> = parsed.iter().filter_map(|p| p.as_ref().ok().cloned().flatten()).collect();
            let removed = match authorizer.delete(&filters, epoch) {
                Ok(removed) => removed,
                Err(AclError::File(e)) => return parsed.iter().map(|_| failed(file_error(&e), e.to_string())).collect(),
                Err(e) => return parsed.iter().map(|_| failed(ResponseError::InvalidRequest, e.to_string())).collect(),
            };
            let mut removed = removed.into_iter();
            parsed
                .into_iter()
                .map(|p| match p {
                    Err((error, message)) => failed(error, message),
                    Ok(None) => DeleteAclsFilterResult::default(),
                    Ok(Some(_)) => DeleteAclsFilterResult::default()
                        .with_matching_acls(removed.next().unwrap_or_default().into_iter().map(matched).collect()),
                })
                .collect()
        })
        .await;
        DeleteAclsResponse::default().with_filter_results(results)
    }))
}
