//! DescribeAcls: needs DESCRIBE on the cluster; the ACLs the filter matches, grouped by
//! resource pattern.

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::ResponseError;
use kafka_protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
use kafka_protocol::messages::{DescribeAclsRequest, DescribeAclsResponse};

use super::access::{Op, acl_admin, operation_code};
use super::acl_codes::{WireFilter, filter, pattern_type_code, permission_code, resource_type_code};
use super::str_bytes;
use crate::authz::model::{AccessEntry, ResourcePattern};
use crate::broker::Broker;
use crate::router::{Reply, RequestContext};

pub async fn handle(broker: &Arc<Broker>, ctx: &RequestContext, request: DescribeAclsRequest) -> Reply<DescribeAclsResponse> {
    let refuse = |error: ResponseError, message: String| {
        Reply::Now(DescribeAclsResponse::default().with_error_code(error.code()).with_error_message(Some(str_bytes(message))))
    };
    let authorizer = match acl_admin(broker, ctx, Op::Describe, "DescribeAcls") {
        Ok(authorizer) => authorizer,
        Err((error, message)) => return refuse(error, message),
    };
    let parsed = filter(WireFilter {
        resource_type: request.resource_type_filter,
        name: request.resource_name_filter.as_deref(),
        pattern_type: request.pattern_type_filter,
        principal: request.principal_filter.as_deref(),
        host: request.host_filter.as_deref(),
        operation: request.operation,
        permission: request.permission_type,
    });
    let acls = match parsed {
        Err((error, message)) => return refuse(error, message),
        Ok(None) => Vec::new(),
        Ok(Some(f)) => authorizer.describe(&f),
    };
    let mut by_pattern: BTreeMap<ResourcePattern, Vec<AccessEntry>> = BTreeMap::new();
    for acl in acls {
        by_pattern.entry(acl.pattern).or_default().push(acl.entry);
    }
    let resources = by_pattern
        .into_iter()
        .map(|(pattern, entries)| {
            let acls = entries
                .into_iter()
                .map(|e| {
                    AclDescription::default()
                        .with_operation(operation_code(e.operation))
                        .with_permission_type(permission_code(e.permission))
                        .with_principal(str_bytes(e.principal))
                        .with_host(str_bytes(e.host))
                })
                .collect();
            DescribeAclsResource::default()
                .with_resource_type(resource_type_code(pattern.resource_type))
                .with_pattern_type(pattern_type_code(pattern.pattern_type))
                .with_resource_name(str_bytes(pattern.name))
                .with_acls(acls)
        })
        .collect();
    Reply::Now(DescribeAclsResponse::default().with_resources(resources))
}
