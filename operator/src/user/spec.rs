//! What a KafkaUser's spec asks for, and what in it the CRD's schema cannot refuse: Kafka's
//! operations per ACL resource type, ACL hosts, a password kept in the user's own Secret.

use std::net::IpAddr;

use kaas_shared::crd::KafkaUser;
use kaas_shared::crd::user::UserAuthenticationType;
use kaas_shared::kafka_users::{AclOperation, AclResourceType};
use kube::ResourceExt;

/// The operations Kafka supports on each resource type (Kafka's `AclEntry.supportedOperations`).
pub fn supported_operations(kind: AclResourceType) -> &'static [AclOperation] {
    use AclOperation::*;
    match kind {
        AclResourceType::Topic => &[
            Read,
            Write,
            Create,
            Describe,
            Delete,
            Alter,
            DescribeConfigs,
            AlterConfigs,
            All,
        ],
        AclResourceType::Group => &[Read, Describe, Delete, DescribeConfigs, AlterConfigs, All],
        AclResourceType::Cluster => &[
            Create,
            ClusterAction,
            DescribeConfigs,
            AlterConfigs,
            IdempotentWrite,
            Alter,
            Describe,
            All,
        ],
        AclResourceType::TransactionalId => &[Describe, Write, All],
    }
}

/// A resource type as the KafkaUser spells it.
fn resource_type_name(kind: AclResourceType) -> &'static str {
    match kind {
        AclResourceType::Topic => "topic",
        AclResourceType::Group => "group",
        AclResourceType::TransactionalId => "transactionalId",
        AclResourceType::Cluster => "cluster",
    }
}

fn operation_names<'a>(operations: impl IntoIterator<Item = &'a AclOperation>) -> String {
    operations
        .into_iter()
        .map(|op| format!("{op:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Why a user's spec is refused, if it is: what the CRD's schema cannot say (Kafka's
/// operations per resource type, ACL hosts), in words a user can act on.
pub fn refusal(user: &KafkaUser) -> Option<String> {
    let mut problems = Vec::new();
    for (i, rule) in user
        .spec
        .authorization
        .iter()
        .flat_map(|a| a.acls.iter())
        .enumerate()
    {
        let supported = supported_operations(rule.resource.kind);
        let unsupported: Vec<&AclOperation> = rule
            .operations
            .iter()
            .filter(|op| !supported.contains(op))
            .collect();
        if !unsupported.is_empty() {
            problems.push(format!(
                "authorization.acls[{i}]: Kafka does not support {} on a {} resource (only {})",
                operation_names(unsupported),
                resource_type_name(rule.resource.kind),
                operation_names(supported)
            ));
        }
        if rule.host != "*" && rule.host.parse::<IpAddr>().is_err() {
            problems.push(format!(
                "authorization.acls[{i}]: host {:?} is neither \"*\" nor an IP address",
                rule.host
            ));
        }
    }
    if let Some(source) = password_source(user)
        && source.name == user.name_any()
    {
        problems.push(format!(
            "authentication.password: Secret {:?} is the user's own Secret, which the operator writes; keep the password in another Secret",
            source.name
        ));
    }
    if problems.is_empty() {
        None
    } else {
        Some(problems.join("; "))
    }
}

/// Whether the user authenticates with SCRAM (and so has a password and a Secret).
pub fn is_scram(user: &KafkaUser) -> bool {
    user.spec
        .authentication
        .as_ref()
        .is_some_and(|a| a.kind == UserAuthenticationType::ScramSha512)
}

/// Whether the user authenticates with a certificate the operator issues (and so has a
/// Secret).
pub fn is_tls(user: &KafkaUser) -> bool {
    user.spec
        .authentication
        .as_ref()
        .is_some_and(|a| a.kind == UserAuthenticationType::Tls)
}

pub(super) fn password_source(user: &KafkaUser) -> Option<&kaas_shared::crd::user::SecretKeyRef> {
    let authentication = user.spec.authentication.as_ref()?;
    Some(&authentication.password.as_ref()?.value_from.secret_key_ref)
}
