//! The rule engine: every ACL indexed by resource type and pattern, and the decision Kafka's
//! StandardAuthorizer makes for one principal, host, operation and resource.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;

use super::model::{AccessEntry, AclBinding, Operation, PatternType, Permission, Principal, ResourceType, WILDCARD};

/// What decides a request when no ACL matches its resource at all, and who bypasses ACLs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policy {
    /// `super.users`: user names (without `User:`) allowed everything.
    pub super_users: Vec<String>,
    /// `allow.everyone.if.no.acl.found`: allow a resource no ACL names (default false).
    pub allow_if_no_acl: bool,
}

/// The ACLs of one resource type: literal names (with `*`) looked up by name, prefixes
/// ordered so the ones a name starts with are found without scanning the others.
#[derive(Debug, Default)]
struct TypeIndex {
    literal: HashMap<String, Vec<AccessEntry>>,
    prefixed: BTreeMap<String, Vec<AccessEntry>>,
}

impl TypeIndex {
    /// The entries of every pattern that covers `name`.
    fn covering<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a AccessEntry> + 'a {
        let literal = self.literal.get(name).into_iter().flatten();
        let wildcard = (name != WILDCARD).then(|| self.literal.get(WILDCARD)).flatten().into_iter().flatten();
        // Every prefix of `name` sorts at or before it; walk back while candidates remain. A
        // prefix is looked up by each length of `name` (at char boundaries), not by scanning.
        let prefixed = (1..=name.len())
            .filter(move |&len| name.is_char_boundary(len))
            .filter_map(move |len| self.prefixed.get(&name[..len]))
            .flatten();
        literal.chain(wildcard).chain(prefixed)
    }
}

/// Every ACL, indexed for [`AclIndex::authorize`].
#[derive(Debug, Default)]
pub struct AclIndex {
    by_type: HashMap<ResourceType, TypeIndex>,
    acls: Vec<AclBinding>,
}

/// One authorization question.
#[derive(Debug, Clone, Copy)]
pub struct Action<'a> {
    pub operation: Operation,
    pub resource_type: ResourceType,
    pub name: &'a str,
}

impl AclIndex {
    pub fn new(acls: Vec<AclBinding>) -> AclIndex {
        let mut by_type: HashMap<ResourceType, TypeIndex> = HashMap::new();
        for acl in &acls {
            let index = by_type.entry(acl.pattern.resource_type).or_default();
            let bucket = match acl.pattern.pattern_type {
                PatternType::Literal => index.literal.entry(acl.pattern.name.clone()).or_default(),
                PatternType::Prefixed => index.prefixed.entry(acl.pattern.name.clone()).or_default(),
            };
            bucket.push(acl.entry.clone());
        }
        AclIndex { by_type, acls }
    }

    pub fn acls(&self) -> &[AclBinding] {
        &self.acls
    }

    /// Kafka's decision: a super user may do anything; otherwise a matching DENY wins over any
    /// ALLOW; with no ALLOW it is denied — unless no ACL at all names the resource and
    /// `allow.everyone.if.no.acl.found` is set.
    pub fn authorize(&self, policy: &Policy, principal: Principal<'_>, host: IpAddr, action: Action<'_>) -> bool {
        if policy.super_users.iter().any(|u| u == principal.user) {
            return true;
        }
        let Some(index) = self.by_type.get(&action.resource_type) else { return policy.allow_if_no_acl };
        let (mut any, mut allowed) = (false, false);
        for entry in index.covering(action.name) {
            any = true;
            if !principal.named_by(&entry.principal) || !host_matches(&entry.host, host) {
                continue;
            }
            match entry.permission {
                Permission::Deny if entry.operation.denies(action.operation) => return false,
                Permission::Allow if entry.operation.allows(action.operation) => allowed = true,
                _ => {}
            }
        }
        allowed || (!any && policy.allow_if_no_acl)
    }

    /// Kafka's `authorizeByResourceType`: whether the principal may do `operation` on at
    /// least one resource of the type — an ALLOW on some literal name or prefix that no DENY
    /// for the principal covers (InitProducerId's WRITE-on-any-topic rule).
    pub fn authorize_any(
        &self,
        policy: &Policy,
        principal: Principal<'_>,
        host: IpAddr,
        resource_type: ResourceType,
        operation: Operation,
    ) -> bool {
        if policy.super_users.iter().any(|u| u == principal.user) {
            return true;
        }
        let Some(index) = self.by_type.get(&resource_type) else { return policy.allow_if_no_acl };
        let applies = |e: &AccessEntry, permission: Permission| {
            e.permission == permission
                && principal.named_by(&e.principal)
                && host_matches(&e.host, host)
                && match permission {
                    Permission::Allow => e.operation.allows(operation),
                    Permission::Deny => e.operation.denies(operation),
                }
        };
        let denied_literal = |name: &str| index.literal.get(name).is_some_and(|es| es.iter().any(|e| applies(e, Permission::Deny)));
        let denied_prefix = |name: &str| {
            index.prefixed.iter().any(|(p, es)| name.starts_with(p.as_str()) && es.iter().any(|e| applies(e, Permission::Deny)))
        };
        if denied_literal(WILDCARD) {
            return false;
        }
        let literal = index
            .literal
            .iter()
            .any(|(name, es)| es.iter().any(|e| applies(e, Permission::Allow)) && !denied_literal(name) && !denied_prefix(name));
        literal || index.prefixed.iter().any(|(name, es)| es.iter().any(|e| applies(e, Permission::Allow)) && !denied_prefix(name))
    }
}

fn host_matches(acl_host: &str, host: IpAddr) -> bool {
    acl_host == WILDCARD || acl_host.parse::<IpAddr>().is_ok_and(|h| h == host)
}

#[cfg(test)]
#[path = "index_tests.rs"]
mod tests;
