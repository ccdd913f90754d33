use std::net::{IpAddr, Ipv4Addr};

use super::*;
use crate::authz::model::{AclFilter, PatternFilter, ResourcePattern};

const HOST: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));

fn acl(rt: ResourceType, name: &str, pt: PatternType, principal: &str, op: Operation, perm: Permission) -> AclBinding {
    AclBinding {
        pattern: ResourcePattern { resource_type: rt, name: name.into(), pattern_type: pt },
        entry: AccessEntry { principal: principal.into(), host: "*".into(), operation: op, permission: perm },
    }
}

fn topic(name: &str, pt: PatternType, principal: &str, op: Operation, perm: Permission) -> AclBinding {
    acl(ResourceType::Topic, name, pt, principal, op, perm)
}

fn can(index: &AclIndex, policy: &Policy, user: &str, op: Operation, name: &str) -> bool {
    index.authorize(policy, Principal { user }, HOST, Action { operation: op, resource_type: ResourceType::Topic, name })
}

use Operation::*;
use PatternType::*;
use Permission::*;

#[test]
fn no_acls_denies_unless_allow_everyone() {
    let index = AclIndex::new(vec![]);
    assert!(!can(&index, &Policy::default(), "alice", Read, "t"));
    assert!(can(&index, &Policy { allow_if_no_acl: true, ..Policy::default() }, "alice", Read, "t"));
    // An ACL on the resource for someone else: allow-everyone no longer applies.
    let index = AclIndex::new(vec![topic("t", Literal, "User:bob", Read, Allow)]);
    assert!(!can(&index, &Policy { allow_if_no_acl: true, ..Policy::default() }, "alice", Read, "t"));
    assert!(can(&index, &Policy { allow_if_no_acl: true, ..Policy::default() }, "alice", Read, "other"));
}

#[test]
fn literal_wildcard_and_prefixed_patterns() {
    let index = AclIndex::new(vec![
        topic("orders", Literal, "User:alice", Read, Allow),
        topic("logs-", Prefixed, "User:alice", Write, Allow),
        topic("*", Literal, "User:bob", Describe, Allow),
        topic("é", Prefixed, "User:carol", All, Allow),
    ]);
    let p = Policy::default();
    assert!(can(&index, &p, "alice", Read, "orders"));
    assert!(!can(&index, &p, "alice", Read, "orders2"));
    assert!(can(&index, &p, "alice", Write, "logs-app"));
    assert!(!can(&index, &p, "alice", Write, "log"));
    assert!(can(&index, &p, "bob", Describe, "anything"));
    assert!(!can(&index, &p, "bob", Read, "anything"));
    assert!(can(&index, &p, "carol", Delete, "éa"));
}

#[test]
fn implications_apply_to_allow_only() {
    let index = AclIndex::new(vec![
        topic("t", Literal, "User:alice", Write, Allow),
        topic("c", Literal, "User:alice", AlterConfigs, Allow),
        topic("d", Literal, "User:alice", All, Allow),
        topic("d", Literal, "User:alice", Describe, Deny),
    ]);
    let p = Policy::default();
    assert!(can(&index, &p, "alice", Describe, "t"));
    assert!(!can(&index, &p, "alice", Read, "t"));
    assert!(can(&index, &p, "alice", DescribeConfigs, "c"));
    assert!(!can(&index, &p, "alice", Describe, "c"));
    // DENY DESCRIBE does not deny READ, which ALL allows.
    assert!(can(&index, &p, "alice", Read, "d"));
    assert!(!can(&index, &p, "alice", Describe, "d"));
}

#[test]
fn deny_wins_and_super_users_bypass() {
    let index = AclIndex::new(vec![topic("*", Literal, "User:*", Read, Allow), topic("secret-", Prefixed, "User:alice", Read, Deny)]);
    let p = Policy { super_users: vec!["alice".into()], ..Policy::default() };
    assert!(can(&index, &Policy::default(), "alice", Read, "public"));
    assert!(!can(&index, &Policy::default(), "alice", Read, "secret-1"));
    assert!(can(&index, &Policy::default(), "bob", Read, "secret-1"));
    assert!(can(&index, &p, "alice", Read, "secret-1"));
}

#[test]
fn hosts_must_match() {
    let mut a = topic("t", Literal, "User:alice", Read, Allow);
    a.entry.host = "10.0.0.2".into();
    let index = AclIndex::new(vec![a]);
    assert!(!can(&index, &Policy::default(), "alice", Read, "t"));
    let mut a = topic("t", Literal, "User:alice", Read, Allow);
    a.entry.host = "10.0.0.1".into();
    assert!(can(&AclIndex::new(vec![a]), &Policy::default(), "alice", Read, "t"));
}

#[test]
fn authorize_any_topic_for_idempotent_producers() {
    let any = |acls: Vec<AclBinding>| {
        AclIndex::new(acls).authorize_any(&Policy::default(), Principal { user: "alice" }, HOST, ResourceType::Topic, Write)
    };
    assert!(!any(vec![]));
    assert!(any(vec![topic("t", Literal, "User:alice", Write, Allow)]));
    assert!(!any(vec![topic("t", Literal, "User:alice", Write, Allow), topic("t", Literal, "User:alice", Write, Deny)]));
    assert!(!any(vec![topic("t", Literal, "User:alice", Write, Allow), topic("*", Literal, "User:*", All, Deny)]));
    assert!(!any(vec![topic("ab", Prefixed, "User:alice", Write, Allow), topic("a", Prefixed, "User:alice", Write, Deny)]));
    assert!(any(vec![topic("ab", Prefixed, "User:alice", Write, Allow), topic("abc", Prefixed, "User:alice", Write, Deny)]));
    assert!(!any(vec![topic("t", Literal, "User:alice", Read, Allow)]));
}

#[test]
fn filters_match_as_kafka_does() {
    let lit = topic("orders", Literal, "User:alice", Read, Allow);
    let pre = topic("ord", Prefixed, "User:bob", Write, Deny);
    let star = topic("*", Literal, "User:alice", Read, Allow);
    let f = |pattern, name: Option<&str>| AclFilter { name: name.map(Into::into), pattern, ..AclFilter::any() };
    let m = |filter: &AclFilter| [&lit, &pre, &star].iter().map(|a| filter.matches(a)).collect::<Vec<_>>();
    assert_eq!(m(&AclFilter::any()), [true, true, true]);
    assert_eq!(m(&f(PatternFilter::Match, Some("orders"))), [true, true, true]);
    assert_eq!(m(&f(PatternFilter::Any, Some("orders"))), [true, false, false]);
    assert_eq!(m(&f(PatternFilter::Exactly(Prefixed), Some("ord"))), [false, true, false]);
    assert_eq!(m(&f(PatternFilter::Exactly(Literal), None)), [true, false, true]);
    let by_principal = AclFilter { principal: Some("User:bob".into()), ..AclFilter::any() };
    assert_eq!(m(&by_principal), [false, true, false]);
    let by_group = AclFilter { resource_type: Some(ResourceType::Group), ..AclFilter::any() };
    assert_eq!(m(&by_group), [false, false, false]);
}
