//! Kafka's codes for the ACL vocabulary (`ResourceType`, `PatternType`, `AclPermissionType`),
//! converted to and from the rule engine's types at the protocol edge.

use kafka_protocol::ResponseError;

use super::access::{operation_code, operation_from_code};
use crate::authz::model::{AccessEntry, AclBinding, AclFilter, PatternFilter, PatternType, Permission, ResourcePattern, ResourceType};

const ANY: i8 = 1;

pub(crate) fn resource_type_code(t: ResourceType) -> i8 {
    match t {
        ResourceType::Topic => 2,
        ResourceType::Group => 3,
        ResourceType::Cluster => 4,
        ResourceType::TransactionalId => 5,
    }
}

fn resource_type(code: i8) -> Option<ResourceType> {
    ResourceType::ALL.into_iter().find(|t| resource_type_code(*t) == code)
}

/// DELEGATION_TOKEN and USER: types Kafka has and kaas keeps no ACLs for.
fn unkept_resource_type(code: i8) -> bool {
    matches!(code, 6 | 7)
}

pub(crate) fn pattern_type_code(t: PatternType) -> i8 {
    match t {
        PatternType::Literal => 3,
        PatternType::Prefixed => 4,
    }
}

fn pattern_type(code: i8) -> Option<PatternType> {
    [PatternType::Literal, PatternType::Prefixed].into_iter().find(|t| pattern_type_code(*t) == code)
}

pub(crate) fn permission_code(p: Permission) -> i8 {
    match p {
        Permission::Deny => 2,
        Permission::Allow => 3,
    }
}

fn permission(code: i8) -> Option<Permission> {
    [Permission::Deny, Permission::Allow].into_iter().find(|p| permission_code(*p) == code)
}

/// Why a request's ACL or filter is refused: INVALID_REQUEST and a message, as Kafka answers.
pub(crate) type Invalid = (ResponseError, String);

fn invalid(what: &str, code: i8) -> Invalid {
    (ResponseError::InvalidRequest, format!("{what} {code} is not valid here"))
}

/// The fields of an ACL as CreateAcls carries them.
pub(crate) struct WireAcl<'a> {
    pub resource_type: i8,
    pub name: &'a str,
    pub pattern_type: i8,
    pub principal: &'a str,
    pub host: &'a str,
    pub operation: i8,
    pub permission: i8,
}

/// A CreateAcls creation as a binding; ANY, MATCH and unknown codes are refused.
pub(crate) fn binding(w: WireAcl<'_>) -> Result<AclBinding, Invalid> {
    let resource_type = resource_type(w.resource_type).ok_or_else(|| invalid("resource type", w.resource_type))?;
    let pattern_type = pattern_type(w.pattern_type).ok_or_else(|| invalid("pattern type", w.pattern_type))?;
    let operation = operation_from_code(w.operation).ok_or_else(|| invalid("operation", w.operation))?;
    let permission = permission(w.permission).ok_or_else(|| invalid("permission type", w.permission))?;
    Ok(AclBinding {
        pattern: ResourcePattern { resource_type, name: w.name.to_string(), pattern_type },
        entry: AccessEntry { principal: w.principal.to_string(), host: w.host.to_string(), operation, permission },
    })
}

/// The fields of a DescribeAcls or DeleteAcls filter.
pub(crate) struct WireFilter<'a> {
    pub resource_type: i8,
    pub name: Option<&'a str>,
    pub pattern_type: i8,
    pub principal: Option<&'a str>,
    pub host: Option<&'a str>,
    pub operation: i8,
    pub permission: i8,
}

/// A filter; `Ok(None)` for one that can match nothing kaas keeps (a DELEGATION_TOKEN or
/// USER resource type).
pub(crate) fn filter(w: WireFilter<'_>) -> Result<Option<AclFilter>, Invalid> {
    if unkept_resource_type(w.resource_type) {
        return Ok(None);
    }
    let resource_type = match w.resource_type {
        ANY => None,
        code => Some(resource_type(code).ok_or_else(|| invalid("resource type filter", code))?),
    };
    let pattern = match w.pattern_type {
        ANY => PatternFilter::Any,
        2 => PatternFilter::Match,
        code => PatternFilter::Exactly(pattern_type(code).ok_or_else(|| invalid("pattern type filter", code))?),
    };
    let operation = match w.operation {
        ANY => None,
        code => Some(operation_from_code(code).ok_or_else(|| invalid("operation filter", code))?),
    };
    let permission = match w.permission {
        ANY => None,
        code => Some(permission(code).ok_or_else(|| invalid("permission filter", code))?),
    };
    Ok(Some(AclFilter {
        resource_type,
        name: w.name.map(str::to_string),
        pattern,
        principal: w.principal.map(str::to_string),
        host: w.host.map(str::to_string),
        operation,
        permission,
    }))
}

/// An ACL's codes for a response: resource type, pattern type, operation, permission.
pub(crate) fn codes(acl: &AclBinding) -> (i8, i8, i8, i8) {
    (
        resource_type_code(acl.pattern.resource_type),
        pattern_type_code(acl.pattern.pattern_type),
        operation_code(acl.entry.operation),
        permission_code(acl.entry.permission),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::authz::model::Operation;

    /// Every value of the engine's vocabulary has one Kafka code, and the code reads back as it.
    #[test]
    fn codes_round_trip() {
        use Operation::*;
        for op in [All, Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, AlterConfigs, IdempotentWrite] {
            assert_eq!(operation_from_code(operation_code(op)), Some(op));
        }
        for t in ResourceType::ALL {
            assert_eq!(resource_type(resource_type_code(t)), Some(t));
        }
        for p in [PatternType::Literal, PatternType::Prefixed] {
            assert_eq!(pattern_type(pattern_type_code(p)), Some(p));
        }
        for p in [Permission::Allow, Permission::Deny] {
            assert_eq!(permission(permission_code(p)), Some(p));
        }
        // ANY (1) and UNKNOWN (0) are filters' words only; MATCH (2) is not a pattern type.
        assert_eq!(operation_from_code(1), None);
        assert_eq!(operation_from_code(0), None);
        assert_eq!(pattern_type(2), None);
    }

    /// A filter naming a type kaas keeps no ACLs of matches nothing; unknown codes are refused.
    #[test]
    fn filters_are_read_as_kafka_writes_them() {
        let wire = |resource_type, pattern_type| WireFilter {
            resource_type,
            name: Some("orders"),
            pattern_type,
            principal: None,
            host: None,
            operation: 1,
            permission: 1,
        };
        assert_eq!(filter(wire(7, 1)), Ok(None));
        assert!(filter(wire(0, 1)).is_err());
        assert!(filter(wire(2, 9)).is_err());
        let Ok(Some(f)) = filter(wire(2, 2)) else { panic!("a MATCH filter on topics") };
        assert_eq!((f.resource_type, f.pattern), (Some(ResourceType::Topic), PatternFilter::Match));
        assert_eq!((f.operation, f.permission), (None, None));
    }
}
