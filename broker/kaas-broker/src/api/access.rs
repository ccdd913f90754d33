//! The protocol edge of authorization: each handler asks here whether the request's principal
//! may do an operation on a resource, and Kafka's `authorized_operations` bit sets are built
//! here. Without an authorizer every question is answered yes at once (no allocation, no lock).

use std::sync::Arc;

use kafka_protocol::ResponseError;

use crate::authz::model::{ANONYMOUS, CLUSTER_NAME, Operation, Principal, ResourceType};
use crate::authz::{Action, Authorizer};
use crate::broker::Broker;
use crate::controller_file::WriteError;
use kafka_protocol::protocol::{Encodable, Request};

use crate::router::{Reply, RequestContext};

pub(crate) use crate::authz::model::Operation as Op;
pub(crate) use crate::authz::model::ResourceType as Resource;

fn principal(ctx: &RequestContext) -> Principal<'_> {
    Principal { user: ctx.user.as_deref().unwrap_or(ANONYMOUS) }
}

/// Whether the request may do `operation` on the resource.
pub(crate) fn allowed(broker: &Broker, ctx: &RequestContext, operation: Operation, resource_type: ResourceType, name: &str) -> bool {
    match &broker.authorizer {
        None => true,
        Some(authorizer) => authorizer.authorize(principal(ctx), ctx.peer.ip(), Action { operation, resource_type, name }),
    }
}

/// Whether the request may do `operation` on the cluster.
pub(crate) fn cluster_allowed(broker: &Broker, ctx: &RequestContext, operation: Operation) -> bool {
    allowed(broker, ctx, operation, ResourceType::Cluster, CLUSTER_NAME)
}

/// Whether the request may do `operation` on at least one resource of the type.
pub(crate) fn allowed_on_some(broker: &Broker, ctx: &RequestContext, operation: Operation, resource_type: ResourceType) -> bool {
    match &broker.authorizer {
        None => true,
        Some(authorizer) => authorizer.authorize_any(principal(ctx), ctx.peer.ip(), resource_type, operation),
    }
}

/// The gate of the ACL APIs: an authorizer must be configured (else SECURITY_DISABLED, as
/// Kafka answers) and the principal may do `operation` on the cluster.
pub(crate) fn acl_admin<'a>(
    broker: &'a Broker,
    ctx: &RequestContext,
    operation: Operation,
    api: &str,
) -> Result<&'a Authorizer, (ResponseError, String)> {
    let Some(authorizer) = &broker.authorizer else {
        return Err((ResponseError::SecurityDisabled, "no authorizer is configured on the broker (--authorizer)".into()));
    };
    if !cluster_allowed(broker, ctx, operation) {
        return Err((ResponseError::ClusterAuthorizationFailed, format!("{api} needs {operation:?} on the cluster")));
    }
    Ok(authorizer)
}

/// Where a change of a controller-written file (ACLs, client quotas; see
/// [`crate::controller_file`]) is made: the broker in local mode; in a cluster the controller,
/// which the other brokers forward the request to.
pub(crate) enum ClusterWriter {
    /// This broker, stamping the file with this epoch (its Lease epoch; `LOCAL_MODE`).
    Here(i64),
    /// The controller's inter-broker listener.
    Forward(String),
    Refused(ResponseError, String),
}

/// The gate and the writer of an ACL change (CreateAcls, DeleteAcls): an authorizer must be
/// configured, and the principal may ALTER the cluster.
pub(crate) fn acl_change<R: Encodable>(broker: &Broker, ctx: &RequestContext, api: &str, request: &R) -> ClusterWriter {
    if broker.authorizer.is_none() {
        return ClusterWriter::Refused(ResponseError::SecurityDisabled, "no authorizer is configured on the broker (--authorizer)".into());
    }
    cluster_change(broker, ctx, request, || acl_admin(broker, ctx, Operation::Alter, api).map(|_| ()))
}

/// The gate and the writer of a change of a controller-written file. A request another broker
/// forwarded (its client id a token of the cluster's key over it) passed `gate` there; any
/// other must pass it here.
pub(crate) fn cluster_change<R: Encodable>(
    broker: &Broker,
    ctx: &RequestContext,
    request: &R,
    gate: impl FnOnce() -> Result<(), (ResponseError, String)>,
) -> ClusterWriter {
    let forwarded = broker.cluster.is_some() && crate::interbroker::from_a_broker(broker, ctx, request);
    match if forwarded { Ok(()) } else { gate() } {
        Ok(()) => writer(broker, forwarded),
        Err((error, message)) => ClusterWriter::Refused(error, message),
    }
}

/// Sends `request` on to the controller at `address` and answers with its response, or with
/// `unreachable` of why it could not be asked. The files the controller writes are read again
/// before the answer, so the client's next request here sees its change.
pub(crate) fn forward<R>(
    broker: &Arc<Broker>,
    address: String,
    version: i16,
    request: R,
    unreachable: impl FnOnce(String) -> R::Response + Send + 'static,
) -> Reply<R::Response>
where
    R: Request + Send + Sync + 'static,
    R::Response: Send + 'static,
{
    let broker = broker.clone();
    Reply::Later(Box::pin(async move {
        let response = match broker.interbroker.call(&address, version, &request).await {
            Ok(response) => response,
            Err(e) => return unreachable(format!("the controller could not be asked: {e}")),
        };
        let reader = broker.clone();
        if let Ok(Err(e)) = tokio::task::spawn_blocking(move || reader.refresh_controller_files()).await {
            tracing::warn!(error = %e, "reading the controller's files after a forwarded change failed");
        }
        response
    }))
}

/// This broker as the writer of a controller-written file, for a change it makes on its own
/// behalf (not a client's request): `Here` in local mode or on the controller.
pub(crate) fn local_writer(broker: &Broker) -> ClusterWriter {
    writer(broker, true)
}

/// The writer of a change; `forwarded`: the request came from another broker, which authorized
/// it and found this broker the controller.
fn writer(broker: &Broker, forwarded: bool) -> ClusterWriter {
    let Some(cluster) = &broker.cluster else { return ClusterWriter::Here(crate::controller_file::LOCAL_MODE) };
    if cluster.link.control.is_controller() {
        return ClusterWriter::Here(cluster.link.control.lease_epoch());
    }
    let not_controller = |why: &str| ClusterWriter::Refused(ResponseError::NotController, why.to_string());
    if forwarded {
        return not_controller("this broker is no longer the controller; retry");
    }
    match crate::txn::route::controller(broker) {
        crate::txn::route::Route::Peer(address) => ClusterWriter::Forward(address),
        // The assignment still names this broker, or none: the role is changing hands.
        _ => not_controller("the controller is changing; retry"),
    }
}

/// Kafka's error for a change of a controller-written file that was not made.
pub(crate) fn file_error(e: &WriteError) -> ResponseError {
    match e {
        WriteError::NotController { .. } => ResponseError::NotController,
        WriteError::Storage(_) => ResponseError::KafkaStorageError,
    }
}

/// Runs an ACL change (CreateAcls, DeleteAcls) off the executor, as it rewrites and fsyncs the
/// ACL file; `count` answers of `failed` if no authorizer is there or the task dies.
pub(crate) async fn change_acls<R: Send + 'static>(
    broker: Arc<Broker>,
    count: usize,
    failed: fn(ResponseError, String) -> R,
    change: impl FnOnce(&Authorizer) -> Vec<R> + Send + 'static,
) -> Vec<R> {
    let every = move |error: ResponseError, message: &str| (0..count).map(|_| failed(error, message.to_string())).collect();
    let writer = broker.clone();
    let answers = tokio::task::spawn_blocking(move || match &writer.authorizer {
        Some(authorizer) => change(authorizer),
        None => every(ResponseError::SecurityDisabled, "no authorizer is configured on the broker (--authorizer)"),
    })
    .await
    .unwrap_or_else(|_| every(ResponseError::UnknownServerError, "the ACL write failed"));
    broker.controller_files_written();
    answers
}

/// Kafka's error for a refused operation on a resource of this type.
pub(crate) fn refusal(resource_type: ResourceType) -> ResponseError {
    match resource_type {
        ResourceType::Topic => ResponseError::TopicAuthorizationFailed,
        ResourceType::Group => ResponseError::GroupAuthorizationFailed,
        ResourceType::Cluster => ResponseError::ClusterAuthorizationFailed,
        ResourceType::TransactionalId => ResponseError::TransactionalIdAuthorizationFailed,
    }
}

/// `Ok` when allowed, else Kafka's error for the resource type.
pub(crate) fn check(
    broker: &Broker,
    ctx: &RequestContext,
    operation: Operation,
    resource_type: ResourceType,
    name: &str,
) -> Result<(), ResponseError> {
    if allowed(broker, ctx, operation, resource_type, name) { Ok(()) } else { Err(refusal(resource_type)) }
}

/// Kafka's check on a config resource (DescribeConfigs, AlterConfigs,
/// IncrementalAlterConfigs): `operation` on the topic, or on the cluster for a broker or its
/// loggers; other types are left to the handler to refuse.
pub(crate) fn check_config_resource(
    broker: &Broker,
    ctx: &RequestContext,
    operation: Operation,
    resource_type: i8,
    name: &str,
) -> Result<(), ResponseError> {
    use super::describe_configs::{BROKER, BROKER_LOGGER, GROUP, TOPIC};
    match resource_type {
        TOPIC => check(broker, ctx, operation, ResourceType::Topic, name),
        GROUP => check(broker, ctx, operation, ResourceType::Group, name),
        BROKER | BROKER_LOGGER => check(broker, ctx, operation, ResourceType::Cluster, CLUSTER_NAME),
        _ => Ok(()),
    }
}

/// Kafka's code of an operation (`AclOperation`), as ACL requests and bit sets carry it.
pub(crate) fn operation_code(operation: Operation) -> i8 {
    match operation {
        Operation::All => 2,
        Operation::Read => 3,
        Operation::Write => 4,
        Operation::Create => 5,
        Operation::Delete => 6,
        Operation::Alter => 7,
        Operation::Describe => 8,
        Operation::ClusterAction => 9,
        Operation::DescribeConfigs => 10,
        Operation::AlterConfigs => 11,
        Operation::IdempotentWrite => 12,
    }
}

/// The operation of a Kafka code; `None` for ANY (1) and codes kaas does not know.
pub(crate) fn operation_from_code(code: i8) -> Option<Operation> {
    use Operation::*;
    [All, Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, AlterConfigs, IdempotentWrite]
        .into_iter()
        .find(|o| operation_code(*o) == code)
}

/// The `authorized_operations` field: `i32::MIN` when the client did not ask (Kafka's
/// "omitted"), else one bit per operation code the principal may do on the resource — every
/// supported operation without an authorizer, as Kafka answers.
pub(crate) fn authorized_operations(
    broker: &Broker,
    ctx: &RequestContext,
    requested: bool,
    resource_type: ResourceType,
    name: &str,
) -> i32 {
    if !requested {
        return i32::MIN;
    }
    let operations = match &broker.authorizer {
        None => resource_type.supported_operations().to_vec(),
        Some(authorizer) => authorizer.authorized_operations(principal(ctx), ctx.peer.ip(), resource_type, name),
    };
    operations.into_iter().fold(0, |bits, o| bits | (1 << operation_code(o)))
}
