//! Kafka's ACL vocabulary — resource types, pattern types, operations, permissions — and the
//! bindings and filters built from them, as Kafka's `AclBinding` and `AclBindingFilter`
//! define and match them. No wire types: the protocol edge converts Kafka's codes.

use serde::{Deserialize, Serialize};

/// The resources an ACL can protect (Kafka's `ResourceType`, without delegation tokens and
/// users, which kaas does not have).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ResourceType {
    Topic,
    Group,
    Cluster,
    TransactionalId,
}

impl ResourceType {
    pub const ALL: [ResourceType; 4] = [ResourceType::Topic, ResourceType::Group, ResourceType::Cluster, ResourceType::TransactionalId];

    /// The operations Kafka reports in `authorized_operations` for this type (`AclEntry.supportedOperations`).
    pub fn supported_operations(self) -> &'static [Operation] {
        use Operation::*;
        match self {
            ResourceType::Topic => &[Read, Write, Create, Describe, Delete, Alter, DescribeConfigs, AlterConfigs],
            ResourceType::Group => &[Read, Describe, Delete, DescribeConfigs, AlterConfigs],
            ResourceType::Cluster => &[Create, ClusterAction, DescribeConfigs, AlterConfigs, IdempotentWrite, Alter, Describe],
            ResourceType::TransactionalId => &[Describe, Write],
        }
    }
}

/// The name of the one cluster resource, as Kafka spells it.
pub const CLUSTER_NAME: &str = "kafka-cluster";

/// The resource name that, as a LITERAL pattern, matches every resource of its type.
pub const WILDCARD: &str = "*";

/// How an ACL's resource name matches (Kafka's `PatternType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum PatternType {
    /// The name itself, or every name when it is `*`.
    Literal,
    /// Every name that starts with it.
    Prefixed,
}

/// Kafka's `AclOperation`, without `ANY` (only filters have it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Operation {
    All,
    Read,
    Write,
    Create,
    Delete,
    Alter,
    Describe,
    ClusterAction,
    DescribeConfigs,
    AlterConfigs,
    IdempotentWrite,
}

impl Operation {
    /// Whether an ALLOW for `self` also allows `wanted`: ALL allows everything, and as in
    /// Kafka, READ, WRITE, DELETE and ALTER imply DESCRIBE, ALTER_CONFIGS implies
    /// DESCRIBE_CONFIGS. A DENY denies only its own operation (or all of them for ALL).
    pub fn allows(self, wanted: Operation) -> bool {
        use Operation::*;
        self == All
            || self == wanted
            || (wanted == Describe && matches!(self, Read | Write | Delete | Alter))
            || (wanted == DescribeConfigs && self == AlterConfigs)
    }

    /// Whether a DENY for `self` denies `wanted`.
    pub fn denies(self, wanted: Operation) -> bool {
        self == Operation::All || self == wanted
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Permission {
    Allow,
    Deny,
}

/// A resource pattern: a type, a name, and how the name matches.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ResourcePattern {
    pub resource_type: ResourceType,
    pub name: String,
    pub pattern_type: PatternType,
}

impl ResourcePattern {
    /// Whether this pattern covers the resource `name` of its type.
    pub fn covers(&self, name: &str) -> bool {
        match self.pattern_type {
            PatternType::Literal => self.name == name || self.name == WILDCARD,
            PatternType::Prefixed => name.starts_with(&self.name),
        }
    }
}

/// Who, from where, may or may not do what (Kafka's `AccessControlEntry`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct AccessEntry {
    /// `User:<name>`, or `User:*` for every user.
    pub principal: String,
    /// A client IP address, or `*` for any.
    pub host: String,
    pub operation: Operation,
    pub permission: Permission,
}

/// One ACL (Kafka's `AclBinding`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct AclBinding {
    pub pattern: ResourcePattern,
    pub entry: AccessEntry,
}

/// Why an ACL cannot be created (Kafka answers INVALID_REQUEST with the reason).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidAcl {
    #[error("the principal {0:?} is not of the form User:<name>")]
    Principal(String),
    #[error("a cluster ACL must name the resource {CLUSTER_NAME:?}, not {0:?}")]
    ClusterName(String),
    #[error("an ACL's resource name must not be empty")]
    EmptyName,
    #[error("an ACL's host must not be empty")]
    EmptyHost,
}

impl AclBinding {
    /// Kafka's checks on a new ACL.
    pub fn validate(&self) -> Result<(), InvalidAcl> {
        match self.entry.principal.split_once(':') {
            Some(("User", name)) if !name.is_empty() => {}
            _ => return Err(InvalidAcl::Principal(self.entry.principal.clone())),
        }
        if self.pattern.name.is_empty() {
            return Err(InvalidAcl::EmptyName);
        }
        if self.pattern.resource_type == ResourceType::Cluster && self.pattern.name != CLUSTER_NAME {
            return Err(InvalidAcl::ClusterName(self.pattern.name.clone()));
        }
        if self.entry.host.is_empty() {
            return Err(InvalidAcl::EmptyHost);
        }
        Ok(())
    }
}

/// Which pattern types a filter takes (Kafka's `PatternType` in a filter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatternFilter {
    /// Patterns of this type with exactly the filter's name.
    Exactly(PatternType),
    /// Any pattern type, exactly the filter's name.
    Any,
    /// Every pattern that would cover a resource of the filter's name: the literal name, the
    /// `*` literal, and every prefix of it.
    Match,
}

/// What DescribeAcls and DeleteAcls select (Kafka's `AclBindingFilter`); `None` fields match
/// anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclFilter {
    pub resource_type: Option<ResourceType>,
    pub name: Option<String>,
    pub pattern: PatternFilter,
    pub principal: Option<String>,
    pub host: Option<String>,
    pub operation: Option<Operation>,
    pub permission: Option<Permission>,
}

impl AclFilter {
    /// Matches every ACL.
    pub fn any() -> AclFilter {
        AclFilter {
            resource_type: None,
            name: None,
            pattern: PatternFilter::Any,
            principal: None,
            host: None,
            operation: None,
            permission: None,
        }
    }

    pub fn matches(&self, acl: &AclBinding) -> bool {
        let p = &acl.pattern;
        let e = &acl.entry;
        self.resource_type.is_none_or(|t| t == p.resource_type)
            && self.name_matches(p)
            && self.principal.as_ref().is_none_or(|x| *x == e.principal)
            && self.host.as_ref().is_none_or(|x| *x == e.host)
            && self.operation.is_none_or(|x| x == e.operation)
            && self.permission.is_none_or(|x| x == e.permission)
    }

    fn name_matches(&self, p: &ResourcePattern) -> bool {
        match (self.pattern, &self.name) {
            (PatternFilter::Exactly(t), None) => t == p.pattern_type,
            (PatternFilter::Exactly(t), Some(name)) => t == p.pattern_type && *name == p.name,
            (PatternFilter::Any, None) | (PatternFilter::Match, None) => true,
            (PatternFilter::Any, Some(name)) => *name == p.name,
            (PatternFilter::Match, Some(name)) => p.covers(name),
        }
    }
}

/// Who a request comes from: `User:<name>` (SASL), or `User:ANONYMOUS` without SASL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Principal<'a> {
    pub user: &'a str,
}

/// The user of requests on a connection that did not authenticate, as Kafka names it.
pub const ANONYMOUS: &str = "ANONYMOUS";

impl Principal<'_> {
    /// Whether an ACL's principal (`User:<name>` or `User:*`) names this one; no allocation.
    pub fn named_by(&self, acl_principal: &str) -> bool {
        acl_principal.strip_prefix("User:").is_some_and(|name| name == "*" || name == self.user)
    }
}
