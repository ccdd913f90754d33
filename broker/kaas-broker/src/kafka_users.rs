//! A cluster's KafkaUsers as this broker enforces them: the volume agent writes what they say
//! into `__cluster/kafka-users.json` ([`kaas_shared::kafka_users`]); every broker reads it
//! again every second, beside the controller's files, and serves each user's SCRAM credentials
//! to SASL, its ACLs to the authorizer and its quotas to the quota table. The file has one
//! writer, the agent; brokers only read it, so the read half of [`ControllerFile`] serves.

use std::collections::BTreeMap;

use kaas_shared::fs::FsRef;
use kaas_shared::kafka_users::{AclOperation, AclPatternType, AclPermission, AclResourceType, AclRule, KafkaUsersFile};
use kaas_shared::layout::Layout;
use tracing::warn;

use crate::authz::model::{AccessEntry, AclBinding, CLUSTER_NAME, Operation, PatternType, Permission, ResourcePattern, ResourceType};
use crate::controller_file::ControllerFile;
use crate::quota::model::{Entity, EntityName, QuotaKey, QuotaTable};
use crate::sasl::credentials::Users;

/// What the KafkaUsers file says, as the broker's parts take it.
#[derive(Debug, Default, PartialEq)]
pub struct Enforced {
    pub credentials: Users,
    pub acls: Vec<AclBinding>,
    pub quotas: QuotaTable,
}

/// The KafkaUsers file of the volume.
#[derive(Debug)]
pub struct KafkaUsers {
    file: ControllerFile,
}

impl KafkaUsers {
    pub fn new(fs: FsRef, layout: &Layout) -> KafkaUsers {
        KafkaUsers { file: ControllerFile::new(fs, layout.kafka_users_file(), "KafkaUsers file") }
    }

    /// Reads the file and hands what it says to `serve`, unless its bytes are those served last.
    /// Blocking (file I/O).
    pub fn refresh(&self, serve: impl FnOnce(Enforced)) -> Result<(), kaas_shared::Error> {
        self.file.refresh(|file: KafkaUsersFile| serve(enforced(&file)))
    }
}

/// The credentials, ACLs and quotas `file` gives its users. A rule Kafka would refuse (which
/// the operator refuses before writing it) is left out with a warning rather than failing them all.
pub fn enforced(file: &KafkaUsersFile) -> Enforced {
    let mut enforced = Enforced::default();
    for (name, user) in &file.users {
        if !user.scram.is_empty() {
            enforced.credentials.users.insert(name.clone(), user.scram.clone());
        }
        for rule in &user.acls {
            for acl in bindings(name, rule) {
                match acl.validate() {
                    Ok(()) => enforced.acls.push(acl),
                    Err(e) => warn!(user = %name, error = %e, "a KafkaUser's ACL is not enforced"),
                }
            }
        }
        let values: BTreeMap<QuotaKey, f64> =
            user.quotas.by_kafka_name().into_iter().filter_map(|(key, value)| QuotaKey::parse(key).ok().map(|k| (k, value))).collect();
        if !values.is_empty() {
            let entity = Entity { user: Some(EntityName::Named(name.clone())), ..Entity::default() };
            enforced.quotas.insert(entity, values);
        }
    }
    enforced
}

/// Kafka's ACLs for one rule of `user`'s: one per operation.
fn bindings(user: &str, rule: &AclRule) -> Vec<AclBinding> {
    let resource_type = match rule.resource.kind {
        AclResourceType::Topic => ResourceType::Topic,
        AclResourceType::Group => ResourceType::Group,
        AclResourceType::TransactionalId => ResourceType::TransactionalId,
        AclResourceType::Cluster => ResourceType::Cluster,
    };
    let name = match resource_type {
        ResourceType::Cluster => CLUSTER_NAME.to_string(),
        _ => rule.resource.name.clone().unwrap_or_default(),
    };
    let pattern_type = match rule.resource.pattern_type {
        AclPatternType::Literal => PatternType::Literal,
        AclPatternType::Prefix => PatternType::Prefixed,
    };
    let permission = match rule.permission {
        AclPermission::Allow => Permission::Allow,
        AclPermission::Deny => Permission::Deny,
    };
    rule.operations
        .iter()
        .map(|&operation| AclBinding {
            pattern: ResourcePattern { resource_type, name: name.clone(), pattern_type },
            entry: AccessEntry {
                principal: format!("User:{user}"),
                host: rule.host.clone(),
                operation: operation_of(operation),
                permission,
            },
        })
        .collect()
}

fn operation_of(operation: AclOperation) -> Operation {
    match operation {
        AclOperation::Read => Operation::Read,
        AclOperation::Write => Operation::Write,
        AclOperation::Create => Operation::Create,
        AclOperation::Delete => Operation::Delete,
        AclOperation::Alter => Operation::Alter,
        AclOperation::Describe => Operation::Describe,
        AclOperation::ClusterAction => Operation::ClusterAction,
        AclOperation::AlterConfigs => Operation::AlterConfigs,
        AclOperation::DescribeConfigs => Operation::DescribeConfigs,
        AclOperation::IdempotentWrite => Operation::IdempotentWrite,
        AclOperation::All => Operation::All,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use kaas_shared::kafka_users::{AclResource, KafkaUserEntry, UserQuotas, scram_credential};
    use kaas_shared::scram::ScramHash;

    use super::*;

    #[test]
    fn a_users_rules_become_kafka_acls_quotas_and_credentials() {
        let mut file = KafkaUsersFile::default();
        let rule = |kind, name: Option<&str>, pattern_type, operations: Vec<AclOperation>, permission| AclRule {
            resource: AclResource { kind, name: name.map(str::to_string), pattern_type },
            operations,
            host: "*".into(),
            permission,
        };
        let mut alice = KafkaUserEntry { uid: "u1".into(), ..KafkaUserEntry::default() };
        alice.scram.insert(ScramHash::Sha512, scram_credential(None, ScramHash::Sha512, b"pw"));
        alice.acls = vec![
            rule(
                AclResourceType::Topic,
                Some("orders"),
                AclPatternType::Literal,
                vec![AclOperation::Read, AclOperation::Describe],
                AclPermission::Allow,
            ),
            rule(AclResourceType::Group, Some("app-"), AclPatternType::Prefix, vec![AclOperation::Read], AclPermission::Allow),
            rule(AclResourceType::Cluster, None, AclPatternType::Literal, vec![AclOperation::IdempotentWrite], AclPermission::Deny),
        ];
        alice.quotas = UserQuotas { producer_byte_rate: Some(1024), request_percentage: Some(50), ..UserQuotas::default() };
        file.set("alice", alice);
        // A user with only ACLs (authenticated otherwise) has no credentials.
        let mut bob = KafkaUserEntry { uid: "u2".into(), ..KafkaUserEntry::default() };
        bob.acls = vec![rule(
            AclResourceType::TransactionalId,
            Some("*"),
            AclPatternType::Literal,
            vec![AclOperation::Write],
            AclPermission::Allow,
        )];
        file.set("CN=bob", bob);

        let enforced = enforced(&file);
        assert_eq!(enforced.credentials.users.keys().collect::<Vec<_>>(), ["alice"]);
        assert!(enforced.credentials.credential("alice", ScramHash::Sha512).unwrap().matches_password(ScramHash::Sha512, b"pw"));
        let acls: Vec<String> = enforced
            .acls
            .iter()
            .map(|a| {
                format!(
                    "{} {:?} {:?}:{}:{:?} {:?}",
                    a.entry.principal,
                    a.entry.permission,
                    a.pattern.resource_type,
                    a.pattern.name,
                    a.pattern.pattern_type,
                    a.entry.operation
                )
            })
            .collect();
        assert_eq!(
            acls,
            [
                "User:CN=bob Allow TransactionalId:*:Literal Write",
                "User:alice Allow Topic:orders:Literal Read",
                "User:alice Allow Topic:orders:Literal Describe",
                "User:alice Allow Group:app-:Prefixed Read",
                "User:alice Deny Cluster:kafka-cluster:Literal IdempotentWrite",
            ]
        );
        let alice_entity = Entity { user: Some(EntityName::Named("alice".into())), ..Entity::default() };
        assert_eq!(
            enforced.quotas.get(&alice_entity).unwrap().iter().map(|(k, v)| (k.name(), *v)).collect::<Vec<_>>(),
            [("producer_byte_rate", 1024.0), ("request_percentage", 50.0)]
        );
        assert_eq!(enforced.quotas.len(), 1);
    }

    #[test]
    fn a_rule_kafka_refuses_is_left_out_and_the_rest_stay() {
        let mut file = KafkaUsersFile::default();
        let mut alice = KafkaUserEntry { uid: "u1".into(), ..KafkaUserEntry::default() };
        alice.acls = vec![
            AclRule {
                // A topic without a name (the CRD refuses it).
                resource: AclResource { kind: AclResourceType::Topic, name: None, pattern_type: AclPatternType::Literal },
                operations: vec![AclOperation::Read],
                host: "*".into(),
                permission: AclPermission::Allow,
            },
            AclRule {
                resource: AclResource { kind: AclResourceType::Topic, name: Some("t".into()), pattern_type: AclPatternType::Literal },
                operations: vec![AclOperation::Write],
                host: "*".into(),
                permission: AclPermission::Allow,
            },
        ];
        file.set("alice", alice);
        let acls = enforced(&file).acls;
        assert_eq!(acls.len(), 1);
        assert_eq!(acls[0].entry.operation, Operation::Write);
    }
}
