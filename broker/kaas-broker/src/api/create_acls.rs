//! CreateAcls: needs ALTER on the cluster; each ACL is answered once the file holding it is
//! fsynced — by the controller, in a cluster (another broker forwards the request to it).

use std::sync::Arc;

use kafka_protocol::ResponseError;
use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::{CreateAclsRequest, CreateAclsResponse};

use super::access::{ClusterWriter, acl_change, change_acls, file_error, forward};
use super::acl_codes::{WireAcl, binding};
use super::str_bytes;
use crate::authz::AclError;
use crate::broker::Broker;
use crate::router::{Reply, RequestContext};

fn failed(error: ResponseError, message: String) -> AclCreationResult {
    AclCreationResult::default().with_error_code(error.code()).with_error_message(Some(str_bytes(message)))
}

pub async fn handle(broker: &Arc<Broker>, ctx: &RequestContext, request: CreateAclsRequest) -> Reply<CreateAclsResponse> {
    let count = request.creations.len();
    let every = move |error: ResponseError, message: String| {
        CreateAclsResponse::default().with_results((0..count).map(|_| failed(error, message.clone())).collect())
    };
    let epoch = match acl_change(broker, ctx, "CreateAcls", &request) {
        ClusterWriter::Here(epoch) => epoch,
        ClusterWriter::Refused(error, message) => return Reply::Now(every(error, message)),
        ClusterWriter::Forward(address) => {
            return forward(broker, address, ctx.version, request, move |why| every(ResponseError::NotController, why));
        }
    };
    let parsed: Vec<_> = request
        .creations
        .iter()
        .map(|c| {
            binding(WireAcl {
                resource_type: c.resource_type,
                name: &c.resource_name,
                pattern_type: c.resource_pattern_type,
                principal: &c.principal,
                host: &c.host,
                operation: c.operation,
                permission: c.permission_type,
            })
        })
        .collect();
    let broker = broker.clone();
    Reply::Later(Box::pin(async move {
        let results = change_acls(broker, count, failed, move |authorizer| {
            let valid: Vec<_> = parsed.iter().filter_map(|p| p.as_ref().ok().cloned()).collect();
            let mut created = authorizer.create(valid, epoch).into_iter();
            parsed
                .into_iter()
                .map(|p| match p {
                    Err((error, message)) => failed(error, message),
                    Ok(_) => match created.next() {
                        Some(Ok(())) => AclCreationResult::default(),
                        Some(Err(e @ AclError::Invalid(_))) => failed(ResponseError::InvalidRequest, e.to_string()),
                        Some(Err(e @ AclError::TooMany(_))) => failed(ResponseError::PolicyViolation, e.to_string()),
                        Some(Err(AclError::File(e))) => failed(file_error(&e), e.to_string()),
                        None => failed(ResponseError::UnknownServerError, "lost the ACL's outcome".into()),
                    },
                })
                .collect()
        })
        .await;
        CreateAclsResponse::default().with_results(results)
    }))
}
